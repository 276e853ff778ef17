"""The ``Checkpointer`` conformance suite: :class:`CheckpointerConformance`.

Subclass it in a test module and say how to open your store (see
:mod:`agentlog.testing`), or build the class from an opener function with
:func:`checkpointer_conformance`.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ..errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    InvalidEventError,
    InvalidSessionIdError,
    SessionExistsError,
    SessionNotFoundError,
    SessionTruncatedError,
)
from ..events import (
    MAX_SESSION_ID_LENGTH,
    SessionInfo,
    StoredEvent,
)
from ..fold import fold_events
from ..log.contract import Checkpointer
from ..log.handle import Session
from .activity import ActivityListingConformance
from .harness import HOSTILE_SESSION_IDS, make_event
from .lineage import LineageConformance
from .log_keys import AppendKeyConformance
from .log_metadata import MetadataConformance
from .log_suite import AppendRace, conversation, seqs
from .races import run_in_threads, run_race


class CheckpointerConformance(
    AppendKeyConformance, MetadataConformance, ActivityListingConformance, LineageConformance
):
    """The contract of ``Checkpointer`` as tests; subclass to run them.

    Implement :meth:`open_checkpointer`, and set :attr:`durable` and
    :attr:`multiprocess` to what your backend promises (the attributes of
    :class:`~agentlog.testing.log_suite.CheckpointerSuite`).
    """

    # -- append / read / head ---------------------------------------------------

    def test_unknown_session_is_empty(self, cp: Checkpointer) -> None:
        assert cp.head("nobody") == 0
        assert list(cp.read("nobody")) == []
        assert list(cp.read("nobody", since_seq=5, limit=3)) == []
        assert cp.list() == []

    def test_append_stamps_seq_parent_ts_and_type(self, cp: Checkpointer) -> None:
        before = time.time()
        events = conversation(3)
        assert cp.append("s", events) == 3
        after = time.time()
        stored = list(cp.read("s"))
        assert [e.seq for e in stored] == [1, 2, 3]
        assert [e.parent_seq for e in stored] == [0, 1, 2]
        assert [e.type for e in stored] == ["user", "assistant", "tool_started"]
        assert [e.event for e in stored] == events
        for event in stored:
            assert isinstance(event, StoredEvent)
            assert isinstance(event.ts, float)
            assert before - 1 <= event.ts <= after + 1
        assert cp.head("s") == 3

    def test_batches_are_contiguous(self, cp: Checkpointer) -> None:
        assert cp.append("s", conversation(2, "a")) == 2
        assert cp.append("s", conversation(1, "b")) == 3
        assert cp.append("s", conversation(4, "c")) == 7
        stored = list(cp.read("s"))
        assert seqs(iter(stored)) == list(range(1, 8))
        assert [e.event["content"][0] for e in stored] == list("aabcccc")

    def test_sessions_are_independent(self, cp: Checkpointer) -> None:
        cp.append("a", conversation(2))
        cp.append("b", conversation(5))
        assert cp.head("a") == 2
        assert cp.head("b") == 5
        assert seqs(cp.read("a")) == [1, 2]

    def test_expected_head_match_and_conflict(self, cp: Checkpointer) -> None:
        assert cp.append("s", conversation(2), expected_head=0) == 2
        assert cp.append("s", conversation(1), expected_head=2) == 3
        with pytest.raises(CheckpointConflictError) as info:
            cp.append("s", conversation(2), expected_head=2)
        assert (info.value.session_id, info.value.expected, info.value.actual) == ("s", 2, 3)
        with pytest.raises(CheckpointConflictError):
            cp.append("s", conversation(1), expected_head=4)
        assert cp.head("s") == 3
        assert len(list(cp.read("s"))) == 3

    def test_expected_head_on_a_new_session(self, cp: Checkpointer) -> None:
        with pytest.raises(CheckpointConflictError) as info:
            cp.append("new", conversation(1), expected_head=1)
        assert info.value.actual == 0
        assert cp.head("new") == 0
        assert cp.list() == []

    def test_empty_append_writes_nothing_and_checks_head(self, cp: Checkpointer) -> None:
        assert cp.append("s", []) == 0
        assert cp.list() == []
        cp.append("s", conversation(2))
        assert cp.append("s", []) == 2
        assert cp.append("s", [], expected_head=2) == 2
        with pytest.raises(CheckpointConflictError):
            cp.append("s", [], expected_head=1)
        assert cp.head("s") == 2

    def test_append_accepts_any_iterable_of_mappings(self, cp: Checkpointer) -> None:
        assert cp.append("s", (make_event("user", n=i) for i in range(3))) == 3
        assert cp.append("s", (make_event("assistant"),)) == 4

    def test_read_since_is_exclusive_and_limit_bounds(self, cp: Checkpointer) -> None:
        cp.append("s", conversation(10))
        assert seqs(cp.read("s", since_seq=0)) == list(range(1, 11))
        assert seqs(cp.read("s", since_seq=3)) == list(range(4, 11))
        assert seqs(cp.read("s", since_seq=3, limit=2)) == [4, 5]
        assert seqs(cp.read("s", since_seq=9)) == [10]
        assert seqs(cp.read("s", since_seq=10)) == []
        assert seqs(cp.read("s", since_seq=99)) == []
        assert seqs(cp.read("s", limit=0)) == []
        assert seqs(cp.read("s", limit=100)) == list(range(1, 11))

    def test_long_read_crosses_pages(self, cp: Checkpointer) -> None:
        for start in range(0, 2600, 200):
            cp.append("s", conversation(200, f"{start}-"))
        stored = list(cp.read("s"))
        assert seqs(iter(stored)) == list(range(1, 2601))
        assert stored[1234].event == conversation(200, "1200-")[34]
        assert seqs(cp.read("s", since_seq=999, limit=1502)) == list(range(1000, 2502))

    def test_read_is_lazy_and_sees_its_start_state(self, cp: Checkpointer) -> None:
        cp.append("s", conversation(3))
        reader = cp.read("s")
        assert next(reader).seq == 1
        assert [e.seq for e in reader] == [2, 3]

    def test_round_trip_fidelity(self, cp: Checkpointer) -> None:
        event = make_event(
            "tool_result",
            text='héllo wörld ✓ 会话 🚀 \u2028 "quoted" \\ back',
            nested={"list": [1, 2.5, -3, True, False, None, [], {}], "deep": {"a": {"b": ["c"]}}},
            big=2**63 - 1,
            small=-(2**63),
            float=1e-300,
            zero=0.0,
            empty="",
            tuple=(1, 2),
        )
        cp.append("s", [event])
        (stored,) = list(cp.read("s"))
        expected = dict(event, tuple=[1, 2])
        assert stored.event == expected
        assert stored.event["big"] == 2**63 - 1
        assert type(stored.event["float"]) is float

    def test_stored_events_are_copies(self, cp: Checkpointer) -> None:
        event = make_event("user", content=["a"])
        cp.append("s", [event])
        event["content"].append("changed after append")
        first = next(cp.read("s"))
        first.event["content"].append("changed after read")
        assert next(cp.read("s")).event == make_event("user", content=["a"])
        with pytest.raises(AttributeError):
            first.seq = 5  # type: ignore[misc]

    # -- list ---------------------------------------------------------------------

    def test_list_is_most_recently_active_first(self, cp: Checkpointer) -> None:
        cp.append("a", conversation(1))
        time.sleep(0.02)
        cp.append("b", conversation(2))
        time.sleep(0.02)
        cp.append("c", conversation(3))
        assert [info.id for info in cp.list()] == ["c", "b", "a"]
        time.sleep(0.02)
        cp.append("a", conversation(1))
        infos = cp.list()
        assert [info.id for info in infos] == ["a", "c", "b"]
        assert [info.head for info in infos] == [2, 3, 2]
        for info in infos:
            assert isinstance(info, SessionInfo)
            assert isinstance(info.mtime, float)
            assert abs(info.mtime - time.time()) < 60
        time.sleep(0.02)
        cp.truncate("b", 1)
        first = cp.list()[0]
        assert (first.id, first.head) == ("b", 1)

    # -- delete -------------------------------------------------------------------

    def test_delete_removes_everything_and_is_idempotent(self, cp: Checkpointer) -> None:
        cp.append("s", conversation(4))
        cp.append("keep", conversation(1))
        cp.delete("s")
        assert cp.head("s") == 0
        assert list(cp.read("s")) == []
        assert [info.id for info in cp.list()] == ["keep"]
        cp.delete("s")
        cp.delete("never-existed")
        assert cp.append("s", conversation(1), expected_head=0) == 1
        assert seqs(cp.read("s")) == [1]
        assert cp.head("keep") == 1

    # -- truncate -------------------------------------------------------------------

    def test_truncate_moves_the_head_back(self, cp: Checkpointer) -> None:
        cp.append("s", conversation(3))
        cp.append("s", conversation(3, "b"))
        assert cp.truncate("s", 4) == 4
        assert cp.head("s") == 4
        assert seqs(cp.read("s")) == [1, 2, 3, 4]
        assert cp.append("s", [make_event("user", content="after")], expected_head=4) == 5
        stored = list(cp.read("s"))
        assert stored[-1].event["content"] == "after"
        assert stored[-1].parent_seq == 4

    def test_truncate_edges(self, cp: Checkpointer) -> None:
        cp.append("s", conversation(3))
        assert cp.truncate("s", 3) == 3
        assert cp.truncate("s", 10) == 3
        assert cp.head("s") == 3
        assert cp.truncate("unknown", 2) == 0
        assert cp.truncate("s", 0) == 0
        assert cp.head("s") == 0
        assert list(cp.read("s")) == []
        assert cp.append("s", conversation(1)) == 1
        with pytest.raises(ValueError):
            cp.truncate("s", -1)

    def test_a_follower_notices_a_truncate_then_appends_past_it(self, cp: Checkpointer) -> None:
        """Undo, then go on: a truncate below what a follower yielded, then
        appends past its seq before it looks again, ends it with
        SessionTruncatedError (the events it yielded are no longer the log),
        as a truncate alone does; a truncate above it does not."""
        follow = getattr(cp, "follow", None)
        if follow is None:
            pytest.skip("this store has no follow()")
        cp.append("s", conversation(5))
        follower = follow("s", poll_interval=0.01)
        try:
            assert [next(follower).seq for _ in range(5)] == [1, 2, 3, 4, 5]
            cp.truncate("s", 2)
            cp.append("s", conversation(5, "again"))
            with pytest.raises(SessionTruncatedError) as caught:
                next(follower)
            assert (caught.value.session_id, caught.value.seq) == ("s", 5)
            assert caught.value.rewritten and caught.value.head == 7
        finally:
            follower.close()
        # Resumed from the new head, it follows; a truncate above it is no change.
        resumed = follow("s", 6, poll_interval=0.01)
        try:
            assert next(resumed).seq == 7
            cp.append("s", conversation(2, "more"))
            cp.truncate("s", 8)
            assert next(resumed).seq == 8
        finally:
            resumed.close()

    def test_truncate_inside_a_batch_then_append(self, cp: Checkpointer, location: Path) -> None:
        cp.append("s", conversation(5))
        assert cp.truncate("s", 2) == 2
        cp.append("s", conversation(2, "new"))
        expected = conversation(5)[:2] + conversation(2, "new")
        assert [e.event for e in cp.read("s")] == expected
        if self.durable:
            cp = self.reopen(cp, location)
            assert [e.event for e in cp.read("s")] == expected
            cp.close()

    # -- fork -----------------------------------------------------------------------

    def test_fork_copies_a_prefix_and_leaves_the_source(self, cp: Checkpointer) -> None:
        events = conversation(6)
        cp.append("src", events[:4])
        cp.append("src", events[4:])
        assert cp.fork("src", 3, "copy") == 3
        assert [e.event for e in cp.read("copy")] == events[:3]
        assert seqs(cp.read("copy")) == [1, 2, 3]
        assert cp.head("src") == 6
        cp.append("copy", [make_event("assistant", content="branch")], expected_head=3)
        cp.append("src", [make_event("assistant", content="trunk")], expected_head=6)
        assert next(cp.read("copy", since_seq=3)).event["content"] == "branch"
        assert next(cp.read("src", since_seq=6)).event["content"] == "trunk"
        assert {info.id for info in cp.list()} == {"src", "copy"}

    def test_fork_edges(self, cp: Checkpointer) -> None:
        cp.append("src", conversation(3))
        assert cp.fork("src", 0, "empty") == 0
        assert cp.head("empty") == 0
        assert cp.fork("src", 3, "whole") == 3
        with pytest.raises(ValueError):
            cp.fork("src", 4, "too-far")
        with pytest.raises(SessionNotFoundError):
            cp.fork("missing", 0, "x")
        with pytest.raises(SessionExistsError):
            cp.fork("src", 1, "whole")
        with pytest.raises(ValueError):
            cp.fork("src", 1, "src")
        assert cp.head("too-far") == 0
        assert cp.head("whole") == 3
        assert cp.head("src") == 3

    # -- bad input ------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("bad", "error"),
        [
            (make_event("no-such-type"), InvalidEventError),
            ({"content": "no type"}, InvalidEventError),
            ({"type": 7}, InvalidEventError),
            ({"type": ["user"]}, InvalidEventError),
            ("a string", TypeError),
            (["user"], TypeError),
            (None, TypeError),
            (make_event("user", x=math.nan), ValueError),
            (make_event("user", x=math.inf), ValueError),
            (make_event("user", x=[-math.inf]), ValueError),
            (make_event("user", x={1, 2}), TypeError),
            (make_event("user", x=b"bytes"), TypeError),
            (make_event("user", x=bytearray(b"b")), TypeError),
            (make_event("user", x=object()), TypeError),
            (make_event("user", x=datetime(2024, 1, 1)), TypeError),
            (make_event("user", x={1: "int key"}), TypeError),
            (make_event("user", x=2**64), TypeError),
            # The fields each type needs (what folding reads):
            ({"type": "user"}, InvalidEventError),
            ({"type": "assistant", "content": None}, InvalidEventError),
            ({"type": "summary", "text": "no content"}, InvalidEventError),
            ({"type": "tool_result", "content": "no tool_use_id"}, InvalidEventError),
            ({"type": "tool_started"}, InvalidEventError),
        ],
    )
    def test_bad_event_is_refused_and_nothing_written(
        self, cp: Checkpointer, bad: Any, error: type[Exception]
    ) -> None:
        cp.append("s", conversation(2))
        with pytest.raises(error) as info:
            cp.append("s", [make_event("user"), make_event("assistant"), bad])
        assert isinstance(info.value, InvalidEventError)
        assert info.value.index == 2
        assert "event 2" in str(info.value)
        assert cp.head("s") == 2
        assert len(list(cp.read("s"))) == 2
        with pytest.raises(error):
            cp.append("fresh", [bad])
        assert cp.head("fresh") == 0
        assert [info.id for info in cp.list()] == ["s"]

    def test_cyclic_event_is_refused(self, cp: Checkpointer) -> None:
        cyclic = make_event("user")
        cyclic["self"] = cyclic
        with pytest.raises((ValueError, TypeError)) as info:
            cp.append("s", [cyclic])
        assert isinstance(info.value, InvalidEventError)
        assert info.value.index == 0
        assert cp.head("s") == 0

    def test_events_must_be_a_list_not_one_event(self, cp: Checkpointer) -> None:
        with pytest.raises(TypeError):
            cp.append("s", make_event("user"))  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            cp.append("s", "user")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            cp.append("s", 5)  # type: ignore[arg-type]
        assert cp.head("s") == 0

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_session_ids_are_refused_everywhere(
        self, cp: Checkpointer, hostile: Any
    ) -> None:
        cp.append("ok", conversation(1))
        calls: list[Callable[[], Any]] = [
            lambda: cp.append(hostile, [make_event("user")]),
            lambda: list(cp.read(hostile)),
            lambda: cp.head(hostile),
            lambda: cp.delete(hostile),
            lambda: cp.truncate(hostile, 0),
            lambda: cp.fork(hostile, 0, "target"),
            lambda: cp.fork("ok", 0, hostile),
        ]
        for call in calls:
            with pytest.raises(InvalidSessionIdError):
                call()
        assert [info.id for info in cp.list()] == ["ok"]

    @pytest.mark.parametrize(
        "session_id",
        [
            "Case",
            "会话-1",
            "with space",
            "周报\u3000八月",
            "\U0001f469\u200d\U0001f4bb-pairing",
            "a.b",
            "a:b*c?",
            "CON",
            "x" * MAX_SESSION_ID_LENGTH,
            "....",
        ],
    )
    def test_unusual_but_valid_ids_work(self, cp: Checkpointer, session_id: str) -> None:
        cp.append(session_id, conversation(2))
        assert cp.head(session_id) == 2
        assert [info.id for info in cp.list()] == [session_id]
        assert seqs(cp.read(session_id)) == [1, 2]

    def test_ids_differing_by_case_are_distinct(self, cp: Checkpointer) -> None:
        cp.append("Session", conversation(1))
        cp.append("session", conversation(2))
        cp.append("SESSION", conversation(3))
        assert (cp.head("Session"), cp.head("session"), cp.head("SESSION")) == (1, 2, 3)
        assert {info.id for info in cp.list()} == {"Session", "session", "SESSION"}

    @pytest.mark.parametrize("bad", [-1, "1", 1.5, True, None, 1 << 64])
    def test_bad_numbers_are_refused(self, cp: Checkpointer, bad: Any) -> None:
        cp.append("s", conversation(2))
        if bad is not None:
            with pytest.raises((TypeError, ValueError)):
                cp.append("s", conversation(1), expected_head=bad)
        with pytest.raises((TypeError, ValueError)):
            cp.read("s", since_seq=bad)
        with pytest.raises((TypeError, ValueError)):
            cp.truncate("s", bad)
        with pytest.raises((TypeError, ValueError)):
            cp.fork("s", bad, "other")
        assert cp.head("s") == 2
        assert [info.id for info in cp.list()] == ["s"]

    # -- lifecycle ----------------------------------------------------------------------

    def test_closed_checkpointer_refuses_use(self, cp: Checkpointer) -> None:
        cp.append("s", conversation(1))
        cp.close()
        cp.close()
        calls: list[Callable[[], Any]] = [
            lambda: cp.append("s", [make_event("user")]),
            lambda: list(cp.read("s")),
            lambda: cp.head("s"),
            cp.list,
            lambda: cp.delete("s"),
            lambda: cp.truncate("s", 0),
            lambda: cp.fork("s", 0, "t"),
        ]
        for call in calls:
            with pytest.raises(CheckpointerClosedError):
                call()

    def test_context_manager_closes(self, location: Path) -> None:
        with self.open_checkpointer(location) as cp:
            cp.append("s", conversation(1))
        with pytest.raises(CheckpointerClosedError):
            cp.head("s")

    def test_reopen_keeps_everything(self, cp: Checkpointer, location: Path) -> None:
        if not self.durable:
            pytest.skip("this backend does not outlive its object")
        events = conversation(7)
        cp.append("s", events[:3])
        cp.append("s", events[3:])
        cp.append("other", events[:2])
        cp.fork("s", 5, "fork")
        cp.append("gone", events[:1])
        cp.delete("gone")
        cp.truncate("other", 1)
        before = cp.list()
        cp = self.reopen(cp, location)
        try:
            assert [e.event for e in cp.read("s")] == events
            assert [e.event for e in cp.read("fork")] == events[:5]
            assert [e.event for e in cp.read("other")] == events[:1]
            assert cp.head("gone") == 0
            if self.persistent_mtime:
                assert cp.list() == before
            else:
                assert {(i.id, i.head) for i in cp.list()} == {(i.id, i.head) for i in before}
            assert cp.append("s", [make_event("user")], expected_head=7) == 8
        finally:
            cp.close()

    # -- the session handle -------------------------------------------------------------

    def test_session_handle_resumes_tracks_the_head_and_reloads(
        self, cp: Checkpointer, location: Path
    ) -> None:
        cp.append("s", [make_event("user", content="q1")])
        handle = Session(cp, "s")
        assert (handle.head, handle.turn) == (1, 1)
        handle.append(
            [make_event("assistant", content=[{"type": "tool_use", "id": "t1", "name": "ls"}])]
        )
        assert [call["id"] for call in handle.pending_tool_calls] == ["t1"]
        # Someone else writes: the handle's append conflicts and changes nothing.
        cp.append("s", [make_event("tool_result", tool_use_id="t1", content="x.py")])
        with pytest.raises(CheckpointConflictError):
            handle.append([make_event("user", content="lost")])
        assert (handle.head, len(handle.pending_tool_calls)) == (2, 1)
        assert handle.reload() == 1
        assert (handle.head, handle.pending_tool_calls) == (3, [])
        assert handle.append([make_event("user", content="q2")]) == 4
        assert handle.turn == 2
        assert handle.messages == fold_events(cp.read("s"))
        # A truncate under the handle: it starts over.
        cp.truncate("s", 2)
        handle.reload()
        assert (handle.head, handle.turn) == (2, 1)
        assert [call["id"] for call in handle.pending_tool_calls] == ["t1"]
        assert handle.messages == fold_events(cp.read("s"))
        if self.durable:
            cp = self.reopen(cp, location)
            try:
                resumed = Session(cp, "s")
                assert resumed.messages == handle.messages
                assert (resumed.head, resumed.turn) == (2, 1)
            finally:
                cp.close()

    # -- concurrency ------------------------------------------------------------------

    def test_two_threads_race_exactly_one_winner_per_round(self, cp: Checkpointer) -> None:
        rounds = self.race_rounds
        tallies = run_race(AppendRace(), rounds, store=cp)
        assert sum(wins for _, wins, _ in tallies) == rounds
        stored = list(cp.read("race"))
        assert seqs(iter(stored)) == list(range(1, rounds + 1))
        assert [e.event["round"] for e in stored] == list(range(rounds))

    def test_threads_appending_freely_get_disjoint_contiguous_batches(
        self, cp: Checkpointer
    ) -> None:
        workers, batches, size = 4, 25, 3

        def writer(worker: int) -> None:
            for batch in range(batches):
                events = [make_event("user", w=worker, b=batch, i=i) for i in range(size)]
                cp.append("shared", events)

        run_in_threads(writer, workers)
        stored = list(cp.read("shared"))
        assert seqs(iter(stored)) == list(range(1, workers * batches * size + 1))
        for start in range(0, len(stored), size):
            chunk = [e.event for e in stored[start : start + size]]
            assert [e["i"] for e in chunk] == list(range(size))
            assert len({(e["w"], e["b"]) for e in chunk}) == 1

    def test_two_processes_race_exactly_one_winner_per_round(self, location: Path) -> None:
        if not self.multiprocess:
            pytest.skip("this backend is for one process")
        rounds = self.race_rounds
        # Create the store first so both children open an existing one.
        self.open_checkpointer(location).close()
        outcomes = run_race(AppendRace(), rounds, opener=self.process_opener(), location=location)
        assert sum(wins for _, wins, _ in outcomes) == rounds
        cp = self.open_checkpointer(location)
        try:
            stored = list(cp.read("race"))
            assert seqs(iter(stored)) == list(range(1, rounds + 1))
            assert [e.event["round"] for e in stored] == list(range(rounds))
            per_worker = [sum(1 for e in stored if e.event["worker"] == w) for w in (0, 1)]
            assert per_worker == [dict((w, n) for w, n, _ in outcomes)[w] for w in (0, 1)]
        finally:
            cp.close()

    def test_tailing_reader_sees_every_event_once_in_order(self, cp: Checkpointer) -> None:
        total = 600
        done = threading.Event()
        failures: list[BaseException] = []
        rng = random.Random(7)
        sizes: list[int] = []
        while sum(sizes) < total:
            sizes.append(min(rng.randint(1, 9), total - sum(sizes)))

        def writer() -> None:
            try:
                written = 0
                for size in sizes:
                    cp.append("live", [make_event("assistant", n=written + i) for i in range(size)])
                    written += size
            except BaseException as exc:
                failures.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        seen: list[StoredEvent] = []
        deadline = time.monotonic() + 120
        while len(seen) < total and time.monotonic() < deadline:
            since = seen[-1].seq if seen else 0
            page = list(cp.read("live", since_seq=since))
            seen.extend(page)
            if not page and done.is_set() and cp.head("live") == since:
                break
        thread.join()
        assert not failures, failures
        assert seqs(iter(seen)) == list(range(1, total + 1))
        assert [e.event["n"] for e in seen] == list(range(total))


def checkpointer_conformance(
    opener: Callable[[Path], Checkpointer],
    *,
    durable: bool = True,
    multiprocess: bool = False,
    name: str = "TestCheckpointerConformance",
) -> type[CheckpointerConformance]:
    """Build a conformance test class from an ``opener(location)`` function.

    Assign the result to a ``Test…`` name in a test module. For
    ``multiprocess=True`` the opener must be a module-level function (the
    children import it).
    """

    def open_checkpointer(self: CheckpointerConformance, location: Path) -> Checkpointer:
        return opener(location)

    def process_opener(self: CheckpointerConformance) -> Callable[[Path], Checkpointer]:
        return opener

    return type(
        name,
        (CheckpointerConformance,),
        {
            "open_checkpointer": open_checkpointer,
            "process_opener": process_opener,
            "durable": durable,
            "multiprocess": multiprocess,
            "__module__": getattr(opener, "__module__", __name__),
        },
    )
