"""The ``SessionStore`` conformance suite: :class:`SessionStoreConformance`."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import (
    EventsPrunedError,
    StorageConflictError,
    StorageDataError,
    StorageNotFoundError,
)
from .harness import (
    HOSTILE_SESSION_IDS,
    StoreSuite,
    assert_delete_is_compare_and_set,
    assert_each_refused,
    make_event,
)
from .races import Race


def _item(item_id: str, kind: str = "user", **fields: Any) -> dict[str, Any]:
    return make_event(kind, id=item_id, **fields)


class SessionAppendRace(Race):
    """Every round both racers append to the session expecting the same
    revision (the round number); exactly one must win."""

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        store.sessions.append(
            "tenant", "race", round_no, [_item(f"w{worker}-r{round_no}", round=round_no)]
        )
        return True

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        return round_no, round_no + 1


class PruneWhileWriting:
    """Racer 0 appends to sessions ``a`` and ``b`` of tenant ``tenant``
    (compare-and-set on the revision it last saw, item ``i{seq}`` at each seq)
    and compacts every other round; racer 1 prunes the tenant and ``a`` at the
    same time. Retention must never make a writer conflict, and every
    acknowledged item after the retained start must stay."""

    def __call__(self, store: Any, worker: int, rounds: int, barrier: Any) -> tuple[int, int]:
        ss = store.sessions
        revisions = {name: ss.get("tenant", name).revision for name in ("a", "b")}
        heads = {name: ss.get("tenant", name).head for name in ("a", "b")}
        for round_no in range(rounds):
            barrier.wait(timeout=60)
            if worker == 1:
                ss.prune_all("tenant", keep=1, batch=1)
                ss.prune("tenant", "a", keep=0)
                continue
            for name in ("a", "b"):
                items = [_item(f"i{heads[name] + n}") for n in (1, 2, 3)]
                record = ss.append("tenant", name, revisions[name], items)
                if round_no % 2:
                    record = ss.compact("tenant", name, record.revision, record.head - 1, {})
                revisions[name], heads[name] = record.revision, record.head
        return rounds, 0


def _retained_start(store: Any, tenant: str, session: str) -> int:
    """The first retained seq of a session, as :class:`EventsPrunedError` reports it."""
    try:
        store.load(tenant, session, after_sequence=0)
    except EventsPrunedError as exc:
        return exc.first_retained
    return 1


class SessionStoreConformance(StoreSuite):
    """The :class:`agentlog.SessionStore` contract as tests.

    Implement :meth:`open_storage` returning an object with a ``sessions``
    attribute and a ``close()`` method.
    """

    race_rounds: ClassVar[int] = 40

    def test_create_get_and_append(self, storage: Any) -> None:
        ss = storage.sessions
        created = ss.create("t", "s", metadata={"title": "hello", "tags": ["a"]})
        assert (created.revision, created.head, created.snapshot_through) == (0, 0, None)
        assert created.metadata == {"title": "hello", "tags": ["a"]}
        with pytest.raises(StorageConflictError) as info:
            ss.create("t", "s")
        assert (info.value.expected_revision, info.value.actual_revision) == (None, 0)
        first = ss.append("t", "s", 0, [_item("m1"), _item("m2", "assistant")])
        second = ss.append("t", "s", 1, [_item("m3", "tool_result", content="r")])
        assert (first.revision, first.head, second.revision, second.head) == (1, 2, 2, 3)
        assert ss.get("t", "s") == second
        loaded = ss.load("t", "s")
        assert loaded.snapshot is None
        assert [(e.seq, e.type, e.event["id"]) for e in loaded.items] == [
            (1, "user", "m1"), (2, "assistant", "m2"), (3, "tool_result", "m3"),
        ]  # fmt: skip
        assert loaded.session == second

    def test_append_is_compare_and_set(self, storage: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        ss.append("t", "s", 0, [_item("a")])
        for expected in (0, 2):
            with pytest.raises(StorageConflictError) as info:
                ss.append("t", "s", expected, [_item("lost")])
            assert info.value.actual_revision == 1
        with pytest.raises(StorageConflictError) as info:
            ss.append("t", "missing", 0, [_item("x")])
        assert info.value.actual_revision is None
        assert [e.event["id"] for e in ss.load("t", "s").items] == ["a"]

    def test_item_ids_are_unique_within_a_session(self, storage: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        ss.create("t", "other")
        ss.append("t", "s", 0, [_item("a")])
        with pytest.raises(StorageDataError, match="taken"):
            ss.append("t", "s", 1, [_item("b"), _item("a")])
        with pytest.raises(StorageDataError, match="unique"):
            ss.append("t", "s", 1, [_item("c"), _item("c")])
        with pytest.raises(StorageDataError):
            ss.append("t", "s", 1, [make_event("user")])  # no id
        with pytest.raises(StorageDataError):
            ss.append("t", "s", 1, [{"id": "x", "type": "nope"}])
        with pytest.raises(StorageDataError):
            ss.append("t", "s", 1, [_item("n", x=math.nan)])
        assert ss.get("t", "s").revision == 1
        assert ss.append("t", "other", 0, [_item("a")]).head == 1  # ids are per session

    def test_snapshots_compact_without_dropping_the_journal(self, storage: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        rev = ss.append("t", "s", 0, [_item(f"i{n}", n=n) for n in range(10)]).revision
        rev = ss.compact("t", "s", rev, 6, {"summary": "first six"}).revision
        loaded = ss.load("t", "s")
        assert loaded.snapshot is not None
        assert (loaded.snapshot.through_sequence, loaded.snapshot.state) == (
            6,
            {"summary": "first six"},
        )
        assert [e.seq for e in loaded.items] == [7, 8, 9, 10]
        assert loaded.session.snapshot_through == 6
        assert [e.seq for e in ss.load("t", "s", use_snapshot=False).items] == list(range(1, 11))
        assert [e.seq for e in ss.load("t", "s", after_sequence=3, limit=2).items] == [4, 5]
        assert ss.load("t", "s", after_sequence=3).snapshot is None
        for through in (6, 5, 11):
            with pytest.raises(StorageDataError):
                ss.compact("t", "s", rev, through, {})
        with pytest.raises(StorageConflictError):
            ss.compact("t", "s", rev - 1, 8, {})
        rev = ss.compact("t", "s", rev, 10, {"summary": "all"}).revision
        latest = ss.load("t", "s")
        assert latest.snapshot is not None and latest.snapshot.through_sequence == 10
        assert latest.items == []
        assert ss.get("t", "s").revision == rev

    def test_list_pages_and_tenants_are_isolated(self, storage: Any) -> None:
        ss = storage.sessions
        for n in range(7):
            ss.create("t", f"s{n}", metadata={"n": n})
        ss.create("u", "s0", metadata={"other": True})
        ss.append("u", "s0", 0, [_item("x")])
        page = ss.list("t", limit=3)
        assert [r.session_id for r in page] == ["s0", "s1", "s2"]
        assert [r.session_id for r in ss.list("t", after="s2")] == ["s3", "s4", "s5", "s6"]
        assert ss.get("t", "s0").head == 0
        assert ss.get("u", "s0").metadata == {"other": True}
        assert [r.session_id for r in ss.list("nobody")] == []

    def test_delete_is_compare_and_set(self, storage: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        ss.append("t", "s", 0, [_item("a")])
        assert_delete_is_compare_and_set(
            lambda revision: ss.delete("t", "s", revision),
            0,
            1,
            lambda: ss.get("t", "s"),
            lambda: ss.load("t", "s"),
        )
        assert ss.create("t", "s").revision == 0
        assert ss.append("t", "s", 0, [_item("a")]).head == 1  # the old id is free again

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_ids_are_refused(self, storage: Any, hostile: Any) -> None:
        ss = storage.sessions
        calls: list[Callable[[], Any]] = [
            lambda: ss.create(hostile, "s"),
            lambda: ss.create("t", hostile),
            lambda: ss.append("t", hostile, 0, [_item("a")]),
            lambda: ss.load("t", hostile),
            lambda: ss.list(hostile),
            lambda: ss.delete("t", hostile, 0),
        ]
        assert_each_refused(calls)

    def test_a_missing_session_is_not_found_or_a_conflict(self, storage: Any) -> None:
        ss = storage.sessions
        with pytest.raises(StorageNotFoundError):
            ss.append("t", "missing", None, [_item("x")])
        with pytest.raises(StorageNotFoundError):
            ss.compact("t", "missing", None, 1, {})
        for expected in (0, 3):
            with pytest.raises(StorageConflictError) as info:
                ss.compact("t", "missing", expected, 1, {})
            assert info.value.actual_revision is None
        ss.create("t", "s")
        with pytest.raises(StorageConflictError) as info:
            ss.append("t", "s", None, [_item("x")])
        assert (info.value.expected_revision, info.value.actual_revision) == (None, 0)
        with pytest.raises(StorageConflictError):
            ss.compact("t", "s", None, 1, {})
        with pytest.raises(StorageNotFoundError):
            ss.get("t", "missing")
        assert ss.get("t", "s").revision == 0

    def test_records_handed_out_are_copies(self, storage: Any) -> None:
        ss = storage.sessions
        created = ss.create("t", "s", metadata={"title": "kept", "tags": ["a"]})
        created.metadata["title"] = "changed"
        created.metadata["tags"].append("b")
        assert ss.get("t", "s").metadata == {"title": "kept", "tags": ["a"]}
        got = ss.get("t", "s")
        got.metadata["title"] = "changed again"
        appended = ss.append("t", "s", 0, [_item("m1", content="hi")])
        appended.metadata["tags"].append("c")
        loaded = ss.load("t", "s")
        assert loaded.session.metadata == {"title": "kept", "tags": ["a"]}
        loaded.items[0].event["content"] = "changed"
        loaded.session.metadata["title"] = "changed"
        assert ss.load("t", "s").items[0].event["content"] == "hi"
        assert ss.list("t")[0].metadata == {"title": "kept", "tags": ["a"]}

    @pytest.mark.parametrize("items", [None, 5, "items", b"items", {"id": "a", "type": "user"}])
    def test_items_of_the_wrong_type_are_refused(self, storage: Any, items: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        with pytest.raises(StorageDataError):
            ss.append("t", "s", 0, items)
        assert ss.get("t", "s").revision == 0

    @pytest.mark.parametrize("through", [None, "1", 1.5, [1], -1])
    def test_compact_through_of_the_wrong_type_is_refused(self, storage: Any, through: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        ss.append("t", "s", 0, [_item("a")])
        with pytest.raises(StorageDataError):
            ss.compact("t", "s", 1, through, {})
        assert ss.get("t", "s").revision == 1

    @pytest.mark.parametrize("bad", [-1, "1", 1.5, True])
    def test_bad_numbers_are_refused(self, storage: Any, bad: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        with pytest.raises(StorageDataError):
            ss.append("t", "s", bad, [_item("a")])
        with pytest.raises(StorageDataError):
            ss.load("t", "s", after_sequence=bad)
        with pytest.raises(StorageDataError):
            ss.compact("t", "s", 0, bad, {})
        with pytest.raises(StorageDataError):
            ss.create("t", "s2", metadata={"x": math.inf})
        assert ss.get("t", "s").revision == 0

    def test_reopen_keeps_everything(self, storage: Any, location: Path) -> None:
        self.skip_unless_durable()
        ss = storage.sessions
        ss.create("t", "s", metadata={"m": 1})
        ss.append("t", "s", 0, [_item(f"i{n}") for n in range(4)])
        ss.compact("t", "s", 1, 2, {"kept": True})
        before = ss.load("t", "s")
        storage.close()
        with self.reopened(location) as reopened:
            assert reopened.sessions.load("t", "s") == before

    def test_two_threads_race_exactly_one_winner_per_revision(self, storage: Any) -> None:
        storage.sessions.create("tenant", "race")
        tallies = self.race_in_threads(storage, SessionAppendRace())
        self.assert_one_winner_per_round(tallies)
        items = storage.sessions.load("tenant", "race").items
        assert [e.event["round"] for e in items] == list(range(self.race_rounds))

    def test_two_processes_race_exactly_one_winner_per_revision(self, location: Path) -> None:
        self.skip_unless_multiprocess()
        storage = self.open_storage(location)
        storage.sessions.create("tenant", "race")
        storage.close()
        outcomes = self.race_in_processes(location, SessionAppendRace())
        self.assert_one_winner_per_round(outcomes)
        with self.reopened(location) as storage:
            items = storage.sessions.load("tenant", "race").items
            assert [e.event["round"] for e in items] == list(range(self.race_rounds))

    # -- retention -------------------------------------------------------------------

    def test_prune_keeps_the_snapshot_what_follows_and_keep_before_it(self, storage: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        ss.create("t", "bare")
        rev = ss.append("t", "s", 0, [_item(f"i{n}", n=n) for n in range(1, 11)]).revision
        ss.append("t", "bare", 0, [_item("x"), _item("y")])
        rev = ss.compact("t", "s", rev, 3, {"summary": "three"}).revision
        rev = ss.compact("t", "s", rev, 6, {"summary": "six"}).revision
        before, record = ss.load("t", "s"), ss.get("t", "s")
        assert ss.prune("t", "bare", keep=0) == 0  # no snapshot: nothing goes
        assert [e.seq for e in ss.load("t", "bare").items] == [1, 2]
        assert ss.prune("t", "s", keep=2) == 4  # items 1..4
        assert ss.load("t", "s") == before  # the snapshot and the items after it
        assert ss.get("t", "s") == record  # head, revision, mtime: unchanged
        assert ss.prune("t", "s", keep=2) == 0  # nothing more to do
        assert [e.seq for e in ss.load("t", "s", after_sequence=4).items] == [5, 6, 7, 8, 9, 10]
        for after in (0, 3):
            with pytest.raises(EventsPrunedError) as info:
                ss.load("t", "s", after_sequence=after)
            assert (info.value.seq, info.value.first_retained) == (after, 5)
        with pytest.raises(EventsPrunedError):
            ss.load("t", "s", use_snapshot=False)
        # Writers go on at the revision they had; a newer snapshot prunes further.
        rev = ss.append("t", "s", rev, [_item("i11"), _item("i1")]).revision  # i1's id is free
        rev = ss.compact("t", "s", rev, 12, {"summary": "all"}).revision
        assert ss.prune("t", "s", keep=0) == 8  # items 5..12: none left
        latest = ss.load("t", "s")
        assert latest.snapshot is not None and latest.snapshot.state == {"summary": "all"}
        assert (latest.items, latest.session.head, latest.session.revision) == ([], 12, rev)
        with pytest.raises(EventsPrunedError) as info:
            ss.load("t", "s", after_sequence=11)
        assert info.value.first_retained == 13
        assert ss.load("t", "s", after_sequence=12).items == []
        assert ss.append("t", "s", rev, [_item("i13")]).head == 13
        assert [e.seq for e in ss.load("t", "s").items] == [13]

    def test_prune_all_prunes_one_tenant_and_dry_run_deletes_nothing(self, storage: Any) -> None:
        ss = storage.sessions
        for tenant in ("t", "u"):
            for name, through in (("s1", 4), ("s2", 2), ("s3", None)):
                ss.create(tenant, name)
                rev = ss.append(tenant, name, 0, [_item(f"i{n}") for n in range(5)]).revision
                if through is not None:
                    ss.compact(tenant, name, rev, through, {})
        before = {name: ss.load("t", name) for name in ("s1", "s2", "s3")}
        assert ss.prune_all("t", keep=1, dry_run=True) == {"s1": 3, "s2": 1}
        assert ss.prune_all("t", keep=1, dry_run=True, batch=1) == {"s1": 3, "s2": 1}
        assert _retained_start(ss, "t", "s1") == 1  # the dry run deleted nothing
        with pytest.raises(TypeError, match="dry_run must be a bool"):
            ss.prune_all("t", keep=1, dry_run="no")  # would be taken for yes
        assert _retained_start(ss, "t", "s1") == 1
        assert ss.prune_all("t", keep=1, batch=2) == {"s1": 3, "s2": 1}
        assert {name: ss.load("t", name) for name in ("s1", "s2", "s3")} == before
        assert [_retained_start(ss, "t", n) for n in ("s1", "s2", "s3")] == [4, 2, 1]
        assert [_retained_start(ss, "u", n) for n in ("s1", "s2", "s3")] == [1, 1, 1]
        assert ss.prune_all("t", keep=1) == {}
        assert ss.prune_all("nobody", keep=0) == {}

    def test_prune_refuses_bad_arguments(self, storage: Any) -> None:
        ss = storage.sessions
        ss.create("t", "s")
        rev = ss.append("t", "s", 0, [_item("a"), _item("b")]).revision
        ss.compact("t", "s", rev, 2, {})
        for bad in (-1, "1", 1.5, True, None):
            with pytest.raises(StorageDataError):
                ss.prune("t", "s", keep=bad)
            with pytest.raises(StorageDataError):
                ss.prune_all("t", keep=bad)
        with pytest.raises(StorageNotFoundError):
            ss.prune("t", "missing", keep=0)
        for hostile in HOSTILE_SESSION_IDS[:3]:
            with pytest.raises(StorageDataError):
                ss.prune("t", hostile, keep=0)
            with pytest.raises(StorageDataError):
                ss.prune_all(hostile, keep=0)
        assert _retained_start(ss, "t", "s") == 1  # nothing changed

    def test_the_checkpointer_face_refuses_to_read_or_go_back_past_retention(
        self, storage: Any
    ) -> None:
        face = getattr(storage, "checkpointer", None)
        if face is None:
            pytest.skip("this storage has no Checkpointer face")
        ss = storage.sessions
        ss.create("default", "s")
        rev = ss.append("default", "s", 0, [_item(f"i{n}") for n in range(1, 11)]).revision
        ss.compact("default", "s", rev, 6, {"summary": "six"})
        assert ss.prune("default", "s", keep=2) == 4
        log = face()
        assert log.head("s") == 10
        for since in (0, 1, 3):
            with pytest.raises(EventsPrunedError) as info:
                list(log.read("s", since))
            assert (info.value.seq, info.value.first_retained) == (since, 5)
        assert [e.seq for e in log.read("s", 4)] == [5, 6, 7, 8, 9, 10]
        assert [e.seq for e in log.read("s", 4, limit=2)] == [5, 6]
        follower = log.writer_port()  # a follower's steps, as the async layer takes them
        with pytest.raises(EventsPrunedError):
            follower.follow_page("s", 2)
        assert [e.seq for e in follower.follow_page("s", 4)] == [5, 6, 7, 8, 9, 10]
        # Back no further than the snapshot that covers the pruned items.
        for to in (0, 3, 4, 5):
            with pytest.raises(EventsPrunedError):
                log.truncate("s", to)
            with pytest.raises(EventsPrunedError):
                log.fork("s", to, "copy")
        assert log.head("copy") == 0  # no fork was made
        assert log.fork("s", 7, "copy") == 7  # the fork is pruned as its source is
        copied = ss.load("default", "copy")
        assert copied.snapshot is not None and copied.snapshot.state == {"summary": "six"}
        assert [e.event["id"] for e in copied.items] == ["i7"]
        assert [e.seq for e in log.read("copy", 4)] == [5, 6, 7]
        with pytest.raises(EventsPrunedError):
            list(log.read("copy"))
        assert log.truncate("s", 6) == 6
        loaded = ss.load("default", "s")
        assert loaded.snapshot is not None and loaded.snapshot.state == {"summary": "six"}
        assert (loaded.items, log.head("s")) == ([], 6)
        with pytest.raises(EventsPrunedError):
            list(log.read("s"))
        assert [e.seq for e in log.read("s", 4)] == [5, 6]
        log.delete("s")
        assert list(log.read("s")) == [] and log.head("s") == 0

    def test_pruning_while_another_writer_appends_and_compacts_in_threads(
        self, storage: Any
    ) -> None:
        self._check_prune_race(storage, None)

    def test_pruning_while_another_process_appends_and_compacts(self, location: Path) -> None:
        self.skip_unless_multiprocess()
        self._check_prune_race(None, location)

    def _check_prune_race(self, storage: Any, location: Path | None) -> None:
        opened = storage if location is None else self.open_storage(location)
        for name in ("a", "b", "c"):
            opened.sessions.create("tenant", name)
        rev = opened.sessions.append("tenant", "c", 0, [_item("c1"), _item("c2")]).revision
        opened.sessions.compact("tenant", "c", rev, 2, {})
        if location is None:
            tallies = self.race_in_threads(opened, PruneWhileWriting())
        else:
            opened.close()
            tallies = self.race_in_processes(location, PruneWhileWriting())
            opened = self.open_storage(location)
        try:
            assert [(w, c) for _, w, c in tallies] == [(self.race_rounds, 0)] * 2
            head = 3 * self.race_rounds
            last_compacted = self.race_rounds - 1 - (self.race_rounds % 2)  # the last odd round
            through = 3 * (last_compacted + 1) - 1
            for name in ("a", "b"):
                loaded = opened.sessions.load("tenant", name)
                assert loaded.snapshot is not None and loaded.snapshot.through_sequence == through
                assert loaded.session.head == head
                after = [f"i{n}" for n in range(through + 1, head + 1)]
                assert [e.event["id"] for e in loaded.items] == after
                first = _retained_start(opened.sessions, "tenant", name)
                assert 1 < first <= through + 1
                kept = opened.sessions.load("tenant", name, after_sequence=first - 1).items
                assert [e.event["id"] for e in kept] == [f"i{n}" for n in range(first, head + 1)]
            assert _retained_start(opened.sessions, "tenant", "c") == 2
        finally:
            if storage is None:
                opened.close()
