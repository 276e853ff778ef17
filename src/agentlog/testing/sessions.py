"""The ``SessionStore`` conformance suite: :class:`SessionStoreConformance`."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import StorageConflictError, StorageDataError, StorageNotFoundError
from .harness import HOSTILE_SESSION_IDS, StoreSuite, make_event
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
        with pytest.raises(StorageConflictError):
            ss.delete("t", "s", 0)
        ss.delete("t", "s", 1)
        with pytest.raises(StorageNotFoundError):
            ss.get("t", "s")
        with pytest.raises(StorageNotFoundError):
            ss.load("t", "s")
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
        for call in calls:
            with pytest.raises(StorageDataError):
                call()

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
        if not self.durable:
            pytest.skip("this storage does not outlive its object")
        ss = storage.sessions
        ss.create("t", "s", metadata={"m": 1})
        ss.append("t", "s", 0, [_item(f"i{n}") for n in range(4)])
        ss.compact("t", "s", 1, 2, {"kept": True})
        before = ss.load("t", "s")
        storage.close()
        reopened = self.open_storage(location)
        try:
            assert reopened.sessions.load("t", "s") == before
        finally:
            reopened.close()

    def test_two_threads_race_exactly_one_winner_per_revision(self, storage: Any) -> None:
        storage.sessions.create("tenant", "race")
        tallies = self.race_in_threads(storage, SessionAppendRace())
        assert sum(wins for _, wins, _ in tallies) == self.race_rounds
        items = storage.sessions.load("tenant", "race").items
        assert [e.event["round"] for e in items] == list(range(self.race_rounds))

    def test_two_processes_race_exactly_one_winner_per_revision(self, location: Path) -> None:
        if not self.multiprocess:
            pytest.skip("this storage is for one process")
        storage = self.open_storage(location)
        storage.sessions.create("tenant", "race")
        storage.close()
        outcomes = self.race_in_processes(location, SessionAppendRace())
        assert sum(wins for _, wins, _ in outcomes) == self.race_rounds
        storage = self.open_storage(location)
        try:
            items = storage.sessions.load("tenant", "race").items
            assert [e.event["round"] for e in items] == list(range(self.race_rounds))
        finally:
            storage.close()
