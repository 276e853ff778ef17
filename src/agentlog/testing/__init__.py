"""The Checkpointer conformance suite, for any backend, from any project's pytest.

Every built-in backend runs this suite in agentlog's own tests. To run it
against your backend, subclass :class:`CheckpointerConformance` in a test
module and say how to open your store::

    # test_my_backend.py
    from agentlog.testing import CheckpointerConformance

    class TestMyBackend(CheckpointerConformance):
        durable = True          # data survives close() and reopen
        multiprocess = True     # two processes may share one store

        def open_checkpointer(self, location):
            return MyCheckpointer(location / "store.db")

or, equivalently, ``TestMyBackend = checkpointer_conformance(opener)`` with a
module-level ``opener(location)``. ``location`` is a fresh directory per test;
calling ``open_checkpointer`` again with the same location must open the same
store (the reopen and two-process tests do that). The multi-process tests
start children with the ``spawn`` method, so the subclass (or the opener)
must be importable from its module.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    InvalidEventError,
    InvalidSessionIdError,
    SessionExistsError,
    SessionNotFoundError,
    StorageConflictError,
    StorageDataError,
    StorageNotFoundError,
)
from ..events import MAX_SESSION_ID_LENGTH, SessionInfo, StoredEvent
from ..log.contract import Checkpointer
from ..stores.artifacts import ArtifactInfo
from ..stores.checkpoints import Checkpoint, SideEffect

__all__ = [
    "HOSTILE_SESSION_IDS",
    "ArtifactStoreConformance",
    "CheckpointStoreConformance",
    "CheckpointerConformance",
    "MemoryStoreConformance",
    "SessionStoreConformance",
    "checkpointer_conformance",
    "make_event",
]

#: Ids every backend must refuse.
HOSTILE_SESSION_IDS: tuple[Any, ...] = (
    "",
    ".",
    "..",
    "../x",
    "a/b",
    "/abs",
    "a\\b",
    "\x00",
    "a\x00b",
    "line\nbreak",
    "tab\there",
    "\x1b[31m",
    "bidi\u202eoverride",
    "x" * 10_000,
    "x" * (MAX_SESSION_ID_LENGTH + 1),
    None,
    123,
    b"bytes",
)


def make_event(kind: str = "user", **fields: Any) -> dict[str, Any]:
    """A small valid event of type ``kind``."""
    event: dict[str, Any] = {"type": kind}
    event.update(fields)
    return event


def _conversation(n: int, tag: str = "") -> list[dict[str, Any]]:
    kinds = ["user", "assistant", "tool_started", "tool_result"]
    return [make_event(kinds[i % 4], content=f"{tag}message {i}", i=i) for i in range(n)]


def _seqs(events: Iterator[StoredEvent]) -> list[int]:
    return [event.seq for event in events]


def _open_with_suite(suite: type[CheckpointerConformance], location: Path) -> Checkpointer:
    return suite().open_checkpointer(location)


def _race(checkpointer: Checkpointer, worker: int, rounds: int, barrier: Any) -> tuple[int, int]:
    """One of two racers: every round both append with the same expected head
    (the round number), so exactly one must win; returns (wins, conflicts)."""
    wins = conflicts = 0
    for round_no in range(rounds):
        barrier.wait(timeout=60)
        try:
            checkpointer.append(
                "race",
                [make_event("user", worker=worker, round=round_no)],
                expected_head=round_no,
            )
            wins += 1
        except CheckpointConflictError as exc:
            if (exc.expected, exc.actual) != (round_no, round_no + 1):
                raise AssertionError(f"bad conflict {exc}") from None
            conflicts += 1
    return wins, conflicts


RaceFunction = Callable[[Any, int, int, Any], tuple[int, int]]


def _race_worker(
    opener: Callable[[Path], Any],
    race: RaceFunction,
    location: str,
    worker: int,
    rounds: int,
    barrier: Any,
    results: Any,
) -> None:
    """A racing child process: opens the store itself and reports its tally."""
    store = opener(Path(location))
    try:
        outcome = race(store, worker, rounds, barrier)
    finally:
        store.close()
    results.put((worker, *outcome))


def _run_race_threads(store: Any, race: RaceFunction, rounds: int) -> list[int]:
    """Two threads run ``race`` on one shared store; their win counts."""
    barrier = threading.Barrier(2)
    wins = [0, 0]
    failures: list[BaseException] = []

    def racer(worker: int) -> None:
        try:
            wins[worker], _ = race(store, worker, rounds, barrier)
        except BaseException as exc:
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=racer, args=(w,)) for w in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    return wins


def _run_race_processes(
    opener: Callable[[Path], Any], race: RaceFunction, location: Path, rounds: int
) -> list[tuple[int, int, int]]:
    """Two spawned processes run ``race`` on the store at ``location``.

    Returns ``(worker, wins, conflicts)`` of each; fails at once (not after a
    timeout) when a child dies without reporting.
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    children = [
        context.Process(
            target=_race_worker, args=(opener, race, str(location), w, rounds, barrier, results)
        )
        for w in (0, 1)
    ]
    for child in children:
        child.start()
    outcomes: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 300
    try:
        while len(outcomes) < len(children):
            try:
                outcomes.append(results.get(timeout=0.5))
            except queue.Empty:
                dead = [c.exitcode for c in children if c.exitcode not in (None, 0)]
                if dead:
                    raise AssertionError(f"a racing process died (exit code {dead[0]})") from None
                if time.monotonic() > deadline:
                    raise AssertionError("the racing processes did not finish") from None
    finally:
        for child in children:
            child.join(timeout=60)
            if child.is_alive():
                child.kill()
    assert all(child.exitcode == 0 for child in children)
    assert all(wins + conflicts == rounds for _, wins, conflicts in outcomes)
    return outcomes


class CheckpointerConformance:
    """The contract of ``Checkpointer`` as tests; subclass to run them.

    Implement :meth:`open_checkpointer`, and set :attr:`durable` and
    :attr:`multiprocess` to what your backend promises.
    """

    #: The store outlives the object: closing and reopening keeps every event.
    durable: ClassVar[bool] = True
    #: Two processes may open one store at once (their appends race safely).
    multiprocess: ClassVar[bool] = False
    #: ``list()`` reports the same mtimes after a reopen (False for stores
    #: that cannot record when a truncate or fork happened).
    persistent_mtime: ClassVar[bool] = True
    #: Rounds of the two-writer races (threads and processes).
    race_rounds: ClassVar[int] = 100

    def open_checkpointer(self, location: Path) -> Checkpointer:
        """Open (or reopen) the store that lives at ``location``, a directory."""
        raise NotImplementedError

    @pytest.fixture
    def location(self, tmp_path: Path) -> Path:
        """A fresh, empty directory for this test's store."""
        path = tmp_path / "store"
        path.mkdir()
        return path

    @pytest.fixture
    def cp(self, location: Path) -> Iterator[Checkpointer]:
        """An open checkpointer on a fresh store."""
        checkpointer = self.open_checkpointer(location)
        yield checkpointer
        checkpointer.close()

    def process_opener(self) -> Callable[[Path], Checkpointer]:
        """A picklable ``opener(location)`` for the multi-process tests."""
        return functools.partial(_open_with_suite, type(self))

    def reopen(self, cp: Checkpointer, location: Path) -> Checkpointer:
        """Close ``cp`` and open the same store again."""
        cp.close()
        return self.open_checkpointer(location)

    # -- append / read / head ---------------------------------------------------

    def test_unknown_session_is_empty(self, cp: Checkpointer) -> None:
        assert cp.head("nobody") == 0
        assert list(cp.read("nobody")) == []
        assert list(cp.read("nobody", since_seq=5, limit=3)) == []
        assert cp.list() == []

    def test_append_stamps_seq_parent_ts_and_type(self, cp: Checkpointer) -> None:
        before = time.time()
        events = _conversation(3)
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
        assert cp.append("s", _conversation(2, "a")) == 2
        assert cp.append("s", _conversation(1, "b")) == 3
        assert cp.append("s", _conversation(4, "c")) == 7
        stored = list(cp.read("s"))
        assert _seqs(iter(stored)) == list(range(1, 8))
        assert [e.event["content"][0] for e in stored] == list("aabcccc")

    def test_sessions_are_independent(self, cp: Checkpointer) -> None:
        cp.append("a", _conversation(2))
        cp.append("b", _conversation(5))
        assert cp.head("a") == 2
        assert cp.head("b") == 5
        assert _seqs(cp.read("a")) == [1, 2]

    def test_expected_head_match_and_conflict(self, cp: Checkpointer) -> None:
        assert cp.append("s", _conversation(2), expected_head=0) == 2
        assert cp.append("s", _conversation(1), expected_head=2) == 3
        with pytest.raises(CheckpointConflictError) as info:
            cp.append("s", _conversation(2), expected_head=2)
        assert (info.value.session_id, info.value.expected, info.value.actual) == ("s", 2, 3)
        with pytest.raises(CheckpointConflictError):
            cp.append("s", _conversation(1), expected_head=4)
        assert cp.head("s") == 3
        assert len(list(cp.read("s"))) == 3

    def test_expected_head_on_a_new_session(self, cp: Checkpointer) -> None:
        with pytest.raises(CheckpointConflictError) as info:
            cp.append("new", _conversation(1), expected_head=1)
        assert info.value.actual == 0
        assert cp.head("new") == 0
        assert cp.list() == []

    def test_empty_append_writes_nothing_and_checks_head(self, cp: Checkpointer) -> None:
        assert cp.append("s", []) == 0
        assert cp.list() == []
        cp.append("s", _conversation(2))
        assert cp.append("s", []) == 2
        assert cp.append("s", [], expected_head=2) == 2
        with pytest.raises(CheckpointConflictError):
            cp.append("s", [], expected_head=1)
        assert cp.head("s") == 2

    def test_append_accepts_any_iterable_of_mappings(self, cp: Checkpointer) -> None:
        assert cp.append("s", (make_event("user", n=i) for i in range(3))) == 3
        assert cp.append("s", (make_event("assistant"),)) == 4

    def test_read_since_is_exclusive_and_limit_bounds(self, cp: Checkpointer) -> None:
        cp.append("s", _conversation(10))
        assert _seqs(cp.read("s", since_seq=0)) == list(range(1, 11))
        assert _seqs(cp.read("s", since_seq=3)) == list(range(4, 11))
        assert _seqs(cp.read("s", since_seq=3, limit=2)) == [4, 5]
        assert _seqs(cp.read("s", since_seq=9)) == [10]
        assert _seqs(cp.read("s", since_seq=10)) == []
        assert _seqs(cp.read("s", since_seq=99)) == []
        assert _seqs(cp.read("s", limit=0)) == []
        assert _seqs(cp.read("s", limit=100)) == list(range(1, 11))

    def test_long_read_crosses_pages(self, cp: Checkpointer) -> None:
        for start in range(0, 2600, 200):
            cp.append("s", _conversation(200, f"{start}-"))
        stored = list(cp.read("s"))
        assert _seqs(iter(stored)) == list(range(1, 2601))
        assert stored[1234].event == _conversation(200, "1200-")[34]
        assert _seqs(cp.read("s", since_seq=999, limit=1502)) == list(range(1000, 2502))

    def test_read_is_lazy_and_sees_its_start_state(self, cp: Checkpointer) -> None:
        cp.append("s", _conversation(3))
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
        cp.append("a", _conversation(1))
        time.sleep(0.02)
        cp.append("b", _conversation(2))
        time.sleep(0.02)
        cp.append("c", _conversation(3))
        assert [info.id for info in cp.list()] == ["c", "b", "a"]
        time.sleep(0.02)
        cp.append("a", _conversation(1))
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
        cp.append("s", _conversation(4))
        cp.append("keep", _conversation(1))
        cp.delete("s")
        assert cp.head("s") == 0
        assert list(cp.read("s")) == []
        assert [info.id for info in cp.list()] == ["keep"]
        cp.delete("s")
        cp.delete("never-existed")
        assert cp.append("s", _conversation(1), expected_head=0) == 1
        assert _seqs(cp.read("s")) == [1]
        assert cp.head("keep") == 1

    # -- truncate -------------------------------------------------------------------

    def test_truncate_moves_the_head_back(self, cp: Checkpointer) -> None:
        cp.append("s", _conversation(3))
        cp.append("s", _conversation(3, "b"))
        assert cp.truncate("s", 4) == 4
        assert cp.head("s") == 4
        assert _seqs(cp.read("s")) == [1, 2, 3, 4]
        assert cp.append("s", [make_event("user", content="after")], expected_head=4) == 5
        stored = list(cp.read("s"))
        assert stored[-1].event["content"] == "after"
        assert stored[-1].parent_seq == 4

    def test_truncate_edges(self, cp: Checkpointer) -> None:
        cp.append("s", _conversation(3))
        assert cp.truncate("s", 3) == 3
        assert cp.truncate("s", 10) == 3
        assert cp.head("s") == 3
        assert cp.truncate("unknown", 2) == 0
        assert cp.truncate("s", 0) == 0
        assert cp.head("s") == 0
        assert list(cp.read("s")) == []
        assert cp.append("s", _conversation(1)) == 1
        with pytest.raises(ValueError):
            cp.truncate("s", -1)

    def test_truncate_inside_a_batch_then_append(self, cp: Checkpointer, location: Path) -> None:
        cp.append("s", _conversation(5))
        assert cp.truncate("s", 2) == 2
        cp.append("s", _conversation(2, "new"))
        expected = _conversation(5)[:2] + _conversation(2, "new")
        assert [e.event for e in cp.read("s")] == expected
        if self.durable:
            cp = self.reopen(cp, location)
            assert [e.event for e in cp.read("s")] == expected
            cp.close()

    # -- fork -----------------------------------------------------------------------

    def test_fork_copies_a_prefix_and_leaves_the_source(self, cp: Checkpointer) -> None:
        events = _conversation(6)
        cp.append("src", events[:4])
        cp.append("src", events[4:])
        assert cp.fork("src", 3, "copy") == 3
        assert [e.event for e in cp.read("copy")] == events[:3]
        assert _seqs(cp.read("copy")) == [1, 2, 3]
        assert cp.head("src") == 6
        cp.append("copy", [make_event("assistant", content="branch")], expected_head=3)
        cp.append("src", [make_event("assistant", content="trunk")], expected_head=6)
        assert next(cp.read("copy", since_seq=3)).event["content"] == "branch"
        assert next(cp.read("src", since_seq=6)).event["content"] == "trunk"
        assert {info.id for info in cp.list()} == {"src", "copy"}

    def test_fork_edges(self, cp: Checkpointer) -> None:
        cp.append("src", _conversation(3))
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
        ],
    )
    def test_bad_event_is_refused_and_nothing_written(
        self, cp: Checkpointer, bad: Any, error: type[Exception]
    ) -> None:
        cp.append("s", _conversation(2))
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
        cp.append("ok", _conversation(1))
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
            "a.b",
            "a:b*c?",
            "CON",
            "x" * MAX_SESSION_ID_LENGTH,
            "....",
        ],
    )
    def test_unusual_but_valid_ids_work(self, cp: Checkpointer, session_id: str) -> None:
        cp.append(session_id, _conversation(2))
        assert cp.head(session_id) == 2
        assert [info.id for info in cp.list()] == [session_id]
        assert _seqs(cp.read(session_id)) == [1, 2]

    def test_ids_differing_by_case_are_distinct(self, cp: Checkpointer) -> None:
        cp.append("Session", _conversation(1))
        cp.append("session", _conversation(2))
        cp.append("SESSION", _conversation(3))
        assert (cp.head("Session"), cp.head("session"), cp.head("SESSION")) == (1, 2, 3)
        assert {info.id for info in cp.list()} == {"Session", "session", "SESSION"}

    @pytest.mark.parametrize("bad", [-1, "1", 1.5, True, None])
    def test_bad_numbers_are_refused(self, cp: Checkpointer, bad: Any) -> None:
        cp.append("s", _conversation(2))
        if bad is not None:
            with pytest.raises((TypeError, ValueError)):
                cp.append("s", _conversation(1), expected_head=bad)
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
        cp.append("s", _conversation(1))
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
            cp.append("s", _conversation(1))
        with pytest.raises(CheckpointerClosedError):
            cp.head("s")

    def test_reopen_keeps_everything(self, cp: Checkpointer, location: Path) -> None:
        if not self.durable:
            pytest.skip("this backend does not outlive its object")
        events = _conversation(7)
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

    # -- concurrency ------------------------------------------------------------------

    def test_two_threads_race_exactly_one_winner_per_round(self, cp: Checkpointer) -> None:
        rounds = self.race_rounds
        assert sum(_run_race_threads(cp, _race, rounds)) == rounds
        stored = list(cp.read("race"))
        assert _seqs(iter(stored)) == list(range(1, rounds + 1))
        assert [e.event["round"] for e in stored] == list(range(rounds))

    def test_threads_appending_freely_get_disjoint_contiguous_batches(
        self, cp: Checkpointer
    ) -> None:
        workers, batches, size = 4, 25, 3
        failures: list[BaseException] = []

        def writer(worker: int) -> None:
            try:
                for batch in range(batches):
                    cp.append(
                        "shared",
                        [make_event("user", w=worker, b=batch, i=i) for i in range(size)],
                    )
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        stored = list(cp.read("shared"))
        assert _seqs(iter(stored)) == list(range(1, workers * batches * size + 1))
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
        outcomes = _run_race_processes(self.process_opener(), _race, location, rounds)
        assert sum(wins for _, wins, _ in outcomes) == rounds
        cp = self.open_checkpointer(location)
        try:
            stored = list(cp.read("race"))
            assert _seqs(iter(stored)) == list(range(1, rounds + 1))
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
        assert _seqs(iter(seen)) == list(range(1, total + 1))
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
            "durable": durable,
            "multiprocess": multiprocess,
            "__module__": getattr(opener, "__module__", __name__),
        },
    )


# -- the stores' suites: shared scaffolding ---------------------------------------------


def _open_store_suite(suite: type[_StoreSuite], location: Path) -> Any:
    return suite().open_storage(location)


class _StoreSuite:
    """What the four store suites share: the storage fixture and the races.

    Implement :meth:`open_storage` returning an object with the store as an
    attribute (``sessions``, ``checkpoints``, ``memory``, ``artifacts``) and a
    ``close()`` method — a ``SqliteStorage`` or an ``InMemoryStorage``.
    """

    #: The storage outlives the object: closing and reopening keeps everything.
    durable: ClassVar[bool] = True
    #: Two processes may open one storage at once.
    multiprocess: ClassVar[bool] = False
    #: Rounds of the two-writer races.
    race_rounds: ClassVar[int] = 40

    def open_storage(self, location: Path) -> Any:
        """Open (or reopen) the storage at ``location``, a directory."""
        raise NotImplementedError

    @pytest.fixture
    def location(self, tmp_path: Path) -> Path:
        """A fresh, empty directory for this test's storage."""
        path = tmp_path / "storage"
        path.mkdir()
        return path

    @pytest.fixture
    def storage(self, location: Path) -> Iterator[Any]:
        """An open storage on a fresh location."""
        opened = self.open_storage(location)
        yield opened
        opened.close()

    def _race_threads(self, storage: Any, race: RaceFunction) -> list[int]:
        """Two threads run ``race`` on one storage; their win counts."""
        return _run_race_threads(storage, race, self.race_rounds)

    def _race_processes(self, location: Path, race: RaceFunction) -> list[tuple[int, int, int]]:
        """Two spawned processes run ``race`` on the storage at ``location``."""
        opener = functools.partial(_open_store_suite, type(self))
        return _run_race_processes(opener, race, location, self.race_rounds)


# -- MemoryStore ---------------------------------------------------------------------


def _memory_race(storage: Any, worker: int, rounds: int, barrier: Any) -> tuple[int, int]:
    """Every round both racers write the counter expecting the same revision;
    exactly one must win. Returns (wins, conflicts)."""
    wins = conflicts = 0
    for round_no in range(rounds):
        expected = None if round_no == 0 else round_no - 1
        barrier.wait(timeout=60)
        try:
            storage.memory.put(
                "tenant", "race", "counter", {"worker": worker, "round": round_no}, expected
            )
            wins += 1
        except StorageConflictError as exc:
            if (exc.expected_revision, exc.actual_revision) != (expected, round_no):
                raise AssertionError(f"bad conflict {exc}") from None
            conflicts += 1
    return wins, conflicts


class MemoryStoreConformance(_StoreSuite):
    """The :class:`agentlog.MemoryStore` contract as tests.

    Implement :meth:`open_storage` returning an object with a ``memory``
    attribute and a ``close()`` method (a ``SqliteStorage``, say).
    """

    race_rounds: ClassVar[int] = 60

    def test_create_read_update(self, storage: Any) -> None:
        memory = storage.memory
        before = time.time()
        created = memory.put("t", "prefs", "theme", {"mode": "dark"}, None)
        assert (created.revision, created.value) == (0, {"mode": "dark"})
        assert (created.tenant_id, created.namespace, created.key) == ("t", "prefs", "theme")
        assert before - 1 <= created.created_at == created.updated_at <= time.time() + 1
        time.sleep(0.01)
        updated = memory.put("t", "prefs", "theme", {"mode": "light"}, 0)
        assert updated.revision == 1
        assert updated.created_at == created.created_at
        assert updated.updated_at > created.updated_at
        got = memory.get("t", "prefs", "theme")
        assert (got.value, got.revision) == ({"mode": "light"}, 1)

    def test_conflicts_write_nothing(self, storage: Any) -> None:
        memory = storage.memory
        memory.put("t", "ns", "k", 1, None)
        memory.put("t", "ns", "k", 2, 0)
        for expected, actual in [(None, 1), (0, 1), (5, 1)]:
            with pytest.raises(StorageConflictError) as info:
                memory.put("t", "ns", "k", "lost", expected)
            assert (info.value.expected_revision, info.value.actual_revision) == (expected, actual)
        with pytest.raises(StorageConflictError) as info:
            memory.put("t", "ns", "missing", "x", 0)
        assert info.value.actual_revision is None
        assert (memory.get("t", "ns", "k").value, memory.get("t", "ns", "k").revision) == (2, 1)
        with pytest.raises(StorageNotFoundError):
            memory.get("t", "ns", "missing")

    def test_tenants_and_namespaces_are_part_of_the_key(self, storage: Any) -> None:
        memory = storage.memory
        memory.put("a", "ns", "k", "a-ns", None)
        memory.put("b", "ns", "k", "b-ns", None)
        memory.put("a", "other", "k", "a-other", None)
        assert memory.get("a", "ns", "k").value == "a-ns"
        assert memory.get("b", "ns", "k").value == "b-ns"
        assert memory.get("a", "other", "k").value == "a-other"
        memory.put("b", "ns", "k", "b2", 0)
        assert memory.get("a", "ns", "k").revision == 0
        assert [r.key for r in memory.list("b", "ns")] == ["k"]
        assert memory.list("c", "ns") == []

    def test_list_pages_by_key(self, storage: Any) -> None:
        memory = storage.memory
        keys = [f"key-{n:02d}" for n in range(25)]
        for key in reversed(keys):
            memory.put("t", "ns", key, {"k": key}, None)
        memory.put("t", "elsewhere", "key-00", 0, None)
        pages, after = [], None
        while True:
            page = memory.list("t", "ns", after=after, limit=10)
            if not page:
                break
            pages.append([r.key for r in page])
            after = page[-1].key
        assert [len(p) for p in pages] == [10, 10, 5]
        assert [key for page in pages for key in page] == keys
        assert [r.value for r in memory.list("t", "ns", limit=2)] == [
            {"k": "key-00"},
            {"k": "key-01"},
        ]
        for bad in (0, -1, 1001, "5", True):
            with pytest.raises(StorageDataError):
                memory.list("t", "ns", limit=bad)

    def test_delete_is_compare_and_set(self, storage: Any) -> None:
        memory = storage.memory
        memory.put("t", "ns", "k", "v", None)
        memory.put("t", "ns", "k", "v2", 0)
        with pytest.raises(StorageConflictError):
            memory.delete("t", "ns", "k", 0)
        assert memory.get("t", "ns", "k").value == "v2"
        memory.delete("t", "ns", "k", 1)
        with pytest.raises(StorageNotFoundError):
            memory.get("t", "ns", "k")
        with pytest.raises(StorageNotFoundError):
            memory.delete("t", "ns", "k", 1)
        assert memory.put("t", "ns", "k", "again", None).revision == 0

    def test_values_round_trip_and_are_copies(self, storage: Any) -> None:
        memory = storage.memory
        values: list[Any] = [
            None, True, 0, -(2**63), 2**63 - 1, 1.5e-300, "", "héllo 🚀 \u2028",
            [], {}, [1, [2, [3]]], {"nested": {"list": [None, 1.0, "x"]}},
        ]  # fmt: skip
        for n, value in enumerate(values):
            memory.put("t", "ns", f"v{n}", value, None)
        assert [memory.get("t", "ns", f"v{n}").value for n in range(len(values))] == values
        record = memory.get("t", "ns", "v11")
        record.value["nested"]["list"].append("changed")
        assert memory.get("t", "ns", "v11").value == values[11]
        with pytest.raises(AttributeError):
            record.revision = 9

    @pytest.mark.parametrize(
        "value",
        [math.nan, math.inf, {1, 2}, b"bytes", object(), {1: "int key"}, datetime(2024, 1, 1)],
    )
    def test_values_json_cannot_hold_are_refused(self, storage: Any, value: Any) -> None:
        with pytest.raises(StorageDataError):
            storage.memory.put("t", "ns", "k", {"x": value}, None)
        with pytest.raises(StorageNotFoundError):
            storage.memory.get("t", "ns", "k")

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_names_are_refused(self, storage: Any, hostile: Any) -> None:
        memory = storage.memory
        calls: list[Callable[[], Any]] = [
            lambda: memory.put(hostile, "ns", "k", 1, None),
            lambda: memory.put("t", hostile, "k", 1, None),
            lambda: memory.put("t", "ns", hostile, 1, None),
            lambda: memory.get(hostile, "ns", "k"),
            lambda: memory.list("t", hostile),
            lambda: memory.delete("t", "ns", hostile, 0),
        ]
        for call in calls:
            with pytest.raises(StorageDataError):
                call()
        assert memory.list("t", "ns") == []

    @pytest.mark.parametrize("bad", [-1, "0", 1.0, True])
    def test_bad_revisions_are_refused(self, storage: Any, bad: Any) -> None:
        storage.memory.put("t", "ns", "k", 1, None)
        with pytest.raises(StorageDataError):
            storage.memory.put("t", "ns", "k", 2, bad)
        with pytest.raises(StorageDataError):
            storage.memory.delete("t", "ns", "k", bad)
        assert storage.memory.get("t", "ns", "k").revision == 0

    def test_reopen_keeps_everything(self, storage: Any, location: Path) -> None:
        if not self.durable:
            pytest.skip("this storage does not outlive its object")
        storage.memory.put("t", "ns", "k", {"v": 1}, None)
        storage.memory.put("t", "ns", "k", {"v": 2}, 0)
        storage.memory.put("u", "ns", "k", [1], None)
        storage.close()
        reopened = self.open_storage(location)
        try:
            record = reopened.memory.get("t", "ns", "k")
            assert (record.value, record.revision) == ({"v": 2}, 1)
            assert reopened.memory.get("u", "ns", "k").value == [1]
            reopened.memory.put("t", "ns", "k", {"v": 3}, 1)
        finally:
            reopened.close()

    def test_two_threads_race_exactly_one_winner_per_revision(self, storage: Any) -> None:
        assert sum(self._race_threads(storage, _memory_race)) == self.race_rounds
        final = storage.memory.get("tenant", "race", "counter")
        assert (final.revision, final.value["round"]) == (self.race_rounds - 1,) * 2

    def test_two_processes_race_exactly_one_winner_per_revision(self, location: Path) -> None:
        if not self.multiprocess:
            pytest.skip("this storage is for one process")
        self.open_storage(location).close()
        outcomes = self._race_processes(location, _memory_race)
        assert sum(wins for _, wins, _ in outcomes) == self.race_rounds
        storage = self.open_storage(location)
        try:
            final = storage.memory.get("tenant", "race", "counter")
            assert (final.revision, final.value["round"]) == (self.race_rounds - 1,) * 2
        finally:
            storage.close()


# -- CheckpointStore -----------------------------------------------------------------


def _start_effect_race(storage: Any, worker: int, rounds: int, barrier: Any) -> tuple[int, int]:
    """Every round both racers try to claim the round's side effect, the way a
    resumer must: load, and only if it is still pending, save it as started at
    the revision seen. Exactly one may win; the loser either sees it started
    or gets a conflict."""
    wins = conflicts = 0
    for round_no in range(rounds):
        barrier.wait(timeout=60)
        current = storage.checkpoints.load("tenant", f"run-{round_no}")
        if current.side_effects[0].state != "pending":
            conflicts += 1  # someone else already claimed it
            continue
        started = [
            SideEffect(e.id, e.kind, "started", e.payload, {"by": worker})
            for e in current.side_effects
        ]
        try:
            storage.checkpoints.save(
                "tenant", current.run_id, current.revision,
                status="awaiting_side_effect", state=current.state, side_effects=started,
            )  # fmt: skip
            wins += 1
        except StorageConflictError as exc:
            if (exc.expected_revision, exc.actual_revision) != (0, 1):
                raise AssertionError(f"bad conflict {exc}") from None
            conflicts += 1
    return wins, conflicts


class CheckpointStoreConformance(_StoreSuite):
    """The :class:`agentlog.CheckpointStore` contract as tests.

    Implement :meth:`open_storage` returning an object with a ``checkpoints``
    attribute and a ``close()`` method.
    """

    race_rounds: ClassVar[int] = 40

    @staticmethod
    def _awaiting(storage: Any, run_id: str, **fields: Any) -> Checkpoint:
        return storage.checkpoints.save(  # type: ignore[no-any-return]
            "t", run_id, None, status="awaiting_approval", state={"step": 3},
            side_effects=[SideEffect("fx-1", "send_email", payload={"to": "a@b.c"})], **fields,
        )  # fmt: skip

    def test_every_field_round_trips_and_revisions_count(self, storage: Any) -> None:
        cps = storage.checkpoints
        first = cps.save(
            "t", "run-1", None, status="running", state={"messages": 3, "plan": ["a", "b"]},
            session_id="s-1", interruption=None, trace={"trace_id": "abc", "span_id": "01"},
        )  # fmt: skip
        assert (first.revision, first.status, first.session_id) == (0, "running", "s-1")
        time.sleep(0.01)
        second = cps.save(
            "t", "run-1", 0, status="interrupted", state={"messages": 4},
            session_id="s-1", interruption={"reason": "user_cancel", "at": 4},
            side_effects=[{"id": "fx", "kind": "http_post", "payload": {"url": "/x"}}],
            trace={"trace_id": "abc"},
        )  # fmt: skip
        loaded = cps.load("t", "run-1")
        assert loaded == second
        assert (loaded.revision, loaded.created_at) == (1, first.created_at)
        assert loaded.updated_at > first.updated_at
        assert loaded.interruption == {"reason": "user_cancel", "at": 4}
        assert loaded.side_effects == (SideEffect("fx", "http_post", "pending", {"url": "/x"}),)
        assert loaded.trace == {"trace_id": "abc"}

    def test_conflicts_write_nothing(self, storage: Any) -> None:
        cps = storage.checkpoints
        cps.save("t", "r", None, status="running", state=1)
        for expected, actual in [(None, 0), (1, 0), (7, 0)]:
            with pytest.raises(StorageConflictError) as info:
                cps.save("t", "r", expected, status="failed", state=2)
            assert (info.value.expected_revision, info.value.actual_revision) == (expected, actual)
        with pytest.raises(StorageConflictError) as info:
            cps.save("t", "missing", 0, status="running", state=1)
        assert info.value.actual_revision is None
        assert (cps.load("t", "r").status, cps.load("t", "r").revision) == ("running", 0)
        with pytest.raises(StorageNotFoundError):
            cps.load("t", "missing")

    def test_side_effects_only_move_forward(self, storage: Any) -> None:
        cps = storage.checkpoints
        cp = self._awaiting(storage, "r")

        def save(
            state: str, *extra: SideEffect, status: str = "awaiting_side_effect"
        ) -> Checkpoint:
            effects = [SideEffect("fx-1", "send_email", state, {"to": "a@b.c"}), *extra]
            saved: Checkpoint = cps.save(
                "t", "r", cps.load("t", "r").revision, status=status, state={},
                side_effects=effects,
            )  # fmt: skip
            return saved

        for bad in ("succeeded", "failed", "unknown"):
            with pytest.raises(StorageDataError, match="pending -> "):
                save(bad)
        with pytest.raises(StorageDataError, match="must start pending"):
            save("pending", SideEffect("fx-2", "x", "started"))
        with pytest.raises(StorageDataError, match="dropped"):
            cps.save("t", "r", cp.revision, status="running", state={})
        with pytest.raises(StorageDataError, match="kind"):
            cps.save("t", "r", cp.revision, status="running", state={},
                     side_effects=[SideEffect("fx-1", "other")])  # fmt: skip
        with pytest.raises(StorageDataError, match="unique"):
            save("pending", SideEffect("fx-1", "send_email"))
        with pytest.raises(StorageDataError):
            save("exploded")
        assert cps.load("t", "r").revision == cp.revision  # nothing written
        save("started")
        with pytest.raises(StorageDataError, match="started -> pending"):
            save("pending")
        save("unknown")
        save("succeeded", status="completed")
        with pytest.raises(StorageDataError, match="succeeded -> failed"):
            save("failed")
        final = cps.load("t", "r")
        assert (final.status, final.side_effects[0].state, final.revision) == (
            "completed", "succeeded", cp.revision + 3,
        )  # fmt: skip

    def test_listing_by_run_session_status_and_parent(self, storage: Any) -> None:
        cps = storage.checkpoints
        cps.save("t", "a", None, status="running", state=0, session_id="s1")
        cps.save("t", "b", None, status="awaiting_approval", state=0, session_id="s1")
        cps.save("t", "c", None, status="awaiting_side_effect", state=0, session_id="s2")
        cps.save("t", "a.1", None, status="running", state=0, session_id="s1", parent_run_id="a")
        cps.save("t", "a.2", None, status="completed", state=0, session_id="s1", parent_run_id="a")
        cps.save("other", "a", None, status="running", state=0, session_id="s1")

        def ids(**filters: Any) -> list[str]:
            return [cp.run_id for cp in cps.list("t", **filters)]

        assert ids() == ["a", "a.1", "a.2", "b", "c"]
        assert ids(session_id="s1") == ["a", "a.1", "a.2", "b"]
        assert ids(status="awaiting_approval") == ["b"]
        assert ids(status="awaiting_side_effect") == ["c"]
        assert ids(parent_run_id="a") == ["a.1", "a.2"]
        assert ids(run_id="c") == ["c"]
        assert ids(session_id="s1", status="running") == ["a", "a.1"]
        assert ids(after="a.2", limit=1) == ["b"]
        assert [cp.run_id for cp in cps.list("other")] == ["a"]
        with pytest.raises(StorageDataError):
            cps.list("t", status="sleeping")
        with pytest.raises(StorageDataError):
            cps.list("t", limit=0)

    def test_delete_is_compare_and_set(self, storage: Any) -> None:
        cps = storage.checkpoints
        cps.save("t", "r", None, status="running", state=0)
        cps.save("t", "r", 0, status="completed", state=1)
        with pytest.raises(StorageConflictError):
            cps.delete("t", "r", 0)
        cps.delete("t", "r", 1)
        with pytest.raises(StorageNotFoundError):
            cps.load("t", "r")
        with pytest.raises(StorageNotFoundError):
            cps.delete("t", "r", 1)

    @pytest.mark.parametrize(
        "fields",
        [
            {"status": "sleeping"},
            {"state": math.nan},
            {"state": {1, 2}},
            {"interruption": b"x"},
            {"trace": {"t": datetime(2024, 1, 1)}},
            {"session_id": "../x"},
            {"parent_run_id": "r"},
            {"side_effects": ["not an effect"]},
            {"side_effects": [{"id": "x"}]},
            {"side_effects": [SideEffect("", "kind")]},
        ],
    )
    def test_bad_input_is_refused(self, storage: Any, fields: dict[str, Any]) -> None:
        arguments: dict[str, Any] = {"status": "running", "state": 0}
        arguments.update(fields)
        with pytest.raises(StorageDataError):
            storage.checkpoints.save("t", "r", None, **arguments)
        assert storage.checkpoints.list("t") == []

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_ids_are_refused(self, storage: Any, hostile: Any) -> None:
        cps = storage.checkpoints
        calls: list[Callable[[], Any]] = [
            lambda: cps.save(hostile, "r", None, status="running", state=0),
            lambda: cps.save("t", hostile, None, status="running", state=0),
            lambda: cps.load("t", hostile),
            lambda: cps.list(hostile),
            lambda: cps.delete("t", hostile, 0),
        ]
        for call in calls:
            with pytest.raises(StorageDataError):
                call()

    def test_reopen_keeps_everything(self, storage: Any, location: Path) -> None:
        if not self.durable:
            pytest.skip("this storage does not outlive its object")
        saved = self._awaiting(storage, "r", session_id="s", trace={"id": 1})
        storage.close()
        reopened = self.open_storage(location)
        try:
            assert reopened.checkpoints.load("t", "r") == saved
        finally:
            reopened.close()

    def _prepare_race(self, storage: Any) -> None:
        for round_no in range(self.race_rounds):
            storage.checkpoints.save(
                "tenant", f"run-{round_no}", None, status="awaiting_approval", state={},
                side_effects=[SideEffect("fx", "charge_card")],
            )  # fmt: skip

    def test_two_threads_race_to_start_a_side_effect(self, storage: Any) -> None:
        self._prepare_race(storage)
        assert sum(self._race_threads(storage, _start_effect_race)) == self.race_rounds
        for round_no in range(self.race_rounds):
            checkpoint = storage.checkpoints.load("tenant", f"run-{round_no}")
            assert (checkpoint.revision, checkpoint.side_effects[0].state) == (1, "started")

    def test_two_processes_race_to_start_a_side_effect(self, location: Path) -> None:
        if not self.multiprocess:
            pytest.skip("this storage is for one process")
        storage = self.open_storage(location)
        try:
            self._prepare_race(storage)
        finally:
            storage.close()
        outcomes = self._race_processes(location, _start_effect_race)
        assert sum(wins for _, wins, _ in outcomes) == self.race_rounds


# -- ArtifactStore ---------------------------------------------------------------------


def _artifact_race(storage: Any, worker: int, rounds: int, barrier: Any) -> tuple[int, int]:
    """Every round both racers replace the artifact expecting the same revision."""
    wins = conflicts = 0
    for round_no in range(rounds):
        expected = None if round_no == 0 else round_no - 1
        barrier.wait(timeout=60)
        try:
            storage.artifacts.put(
                "tenant", "report", f"{worker}:{round_no}".encode(), "text/plain", expected
            )
            wins += 1
        except StorageConflictError as exc:
            if (exc.expected_revision, exc.actual_revision) != (expected, round_no):
                raise AssertionError(f"bad conflict {exc}") from None
            conflicts += 1
    return wins, conflicts


class ArtifactStoreConformance(_StoreSuite):
    """The :class:`agentlog.ArtifactStore` contract as tests.

    Implement :meth:`open_storage` returning an object with an ``artifacts``
    attribute and a ``close()`` method. :meth:`tamper` must change the
    stored bytes of an artifact behind the store's back (return ``False`` to
    skip that test for a store that cannot be tampered with).
    """

    race_rounds: ClassVar[int] = 30

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        """Flip stored bytes of the content ``sha256``; False if not possible."""
        return False

    def test_put_get_info_and_revisions(self, storage: Any) -> None:
        import hashlib

        arts = storage.artifacts
        data = bytes(range(256)) * 5000  # more than one chunk
        info = arts.put("t", "img-1", data, "image/png", None, metadata={"w": 10, "tags": ["x"]})
        assert (info.revision, info.size, info.media_type) == (0, len(data), "image/png")
        assert info.sha256 == hashlib.sha256(data).hexdigest()
        got_info, got = arts.get("t", "img-1")
        assert (got, got_info) == (data, info)
        assert arts.info("t", "img-1").metadata == {"w": 10, "tags": ["x"]}
        replaced = arts.put("t", "img-1", b"new", "text/plain", 0)
        assert (replaced.revision, replaced.created_at) == (1, info.created_at)
        assert arts.get("t", "img-1")[1] == b"new"
        assert arts.put("t", "empty", b"", "application/octet-stream", None).size == 0
        assert arts.get("t", "empty")[1] == b""

    def test_streams_in_and_out(self, storage: Any) -> None:
        import io as _io

        arts = storage.artifacts
        data = b"0123456789abcdef" * 300_000  # ~4.8 MB
        arts.put("t", "big", _io.BytesIO(data), "application/octet-stream", None)
        with arts.open("t", "big") as reader:
            parts = []
            while True:
                part = reader.read(777_777)
                if not part:
                    break
                parts.append(part)
        assert b"".join(parts) == data

    def test_conflicts_write_nothing(self, storage: Any) -> None:
        arts = storage.artifacts
        arts.put("t", "a", b"one", "text/plain", None)
        for expected, actual in [(None, 0), (3, 0)]:
            with pytest.raises(StorageConflictError) as info:
                arts.put("t", "a", b"two", "text/plain", expected)
            assert (info.value.expected_revision, info.value.actual_revision) == (expected, actual)
        with pytest.raises(StorageConflictError):
            arts.put("t", "missing", b"x", "text/plain", 0)
        assert arts.get("t", "a")[1] == b"one"
        with pytest.raises(StorageNotFoundError):
            arts.info("t", "missing")

    def test_identical_content_is_shared_and_counted(self, storage: Any) -> None:
        arts = storage.artifacts
        a = arts.put("t", "a", b"same bytes", "text/plain", None)
        b = arts.put("t", "b", b"same bytes", "text/plain", None)
        c = arts.put("u", "c", b"same bytes", "text/plain", None)
        assert a.sha256 == b.sha256 == c.sha256
        arts.delete("t", "a", 0)
        assert arts.get("t", "b")[1] == b"same bytes"
        arts.put("t", "b", b"other", "text/plain", 0)
        assert arts.get("u", "c")[1] == b"same bytes"
        arts.delete("u", "c", 0)
        assert arts.get("t", "b")[1] == b"other"
        assert arts.put("t", "d", b"same bytes", "text/plain", None).size == 10
        assert arts.get("t", "d")[1] == b"same bytes"

    def test_list_returns_metadata_only_and_pages(self, storage: Any) -> None:
        arts = storage.artifacts
        for n in range(12):
            arts.put("t", f"art-{n:02d}", b"x" * n, "text/plain", None, metadata={"n": n})
        arts.put("other", "art-00", b"y", "text/plain", None)
        first = arts.list("t", limit=5)
        assert [i.artifact_id for i in first] == [f"art-{n:02d}" for n in range(5)]
        assert all(isinstance(i, ArtifactInfo) for i in first)
        assert not any(hasattr(i, "data") for i in first)
        rest = arts.list("t", after=first[-1].artifact_id, limit=100)
        assert [i.metadata["n"] for i in rest] == list(range(5, 12))
        assert [i.artifact_id for i in arts.list("other")] == ["art-00"]

    def test_delete_is_compare_and_set(self, storage: Any) -> None:
        arts = storage.artifacts
        arts.put("t", "a", b"1", "text/plain", None)
        with pytest.raises(StorageConflictError):
            arts.delete("t", "a", 1)
        arts.delete("t", "a", 0)
        with pytest.raises(StorageNotFoundError):
            arts.get("t", "a")
        with pytest.raises(StorageNotFoundError):
            arts.delete("t", "a", 0)

    def test_tampered_bytes_are_detected_on_read(self, storage: Any, location: Path) -> None:
        info = storage.artifacts.put("t", "a", b"trust me" * 1000, "text/plain", None)
        if not self.tamper(storage, location, info.sha256):
            pytest.skip("this store cannot be tampered with from outside")
        with pytest.raises(StorageDataError, match="sha256"):
            storage.artifacts.get("t", "a")

    @pytest.mark.parametrize(
        ("data", "media_type", "metadata"),
        [
            ("text, not bytes", "text/plain", None),
            (12, "text/plain", None),
            (b"x", "plain", None),
            (b"x", "", None),
            (b"x", 5, None),
            (b"x", "text/plain", {"bad": math.nan}),
            (b"x", "text/plain", {"bad": {1, 2}}),
        ],
    )
    def test_bad_input_is_refused(
        self, storage: Any, data: Any, media_type: Any, metadata: Any
    ) -> None:
        with pytest.raises(StorageDataError):
            storage.artifacts.put("t", "a", data, media_type, None, metadata=metadata)
        assert storage.artifacts.list("t") == []

    def test_a_failing_stream_writes_nothing(self, storage: Any) -> None:
        class Broken:
            def __init__(self) -> None:
                self.calls = 0

            def read(self, size: int) -> bytes:
                self.calls += 1
                if self.calls > 2:
                    raise OSError("disk went away")
                return b"z" * size

        with pytest.raises(OSError):
            storage.artifacts.put("t", "a", Broken(), "application/octet-stream", None)
        assert storage.artifacts.list("t") == []
        assert storage.artifacts.put("t", "a", b"ok", "text/plain", None).revision == 0

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_ids_are_refused(self, storage: Any, hostile: Any) -> None:
        arts = storage.artifacts
        calls: list[Callable[[], Any]] = [
            lambda: arts.put(hostile, "a", b"x", "text/plain", None),
            lambda: arts.put("t", hostile, b"x", "text/plain", None),
            lambda: arts.get("t", hostile),
            lambda: arts.open(hostile, "a"),
            lambda: arts.list(hostile),
            lambda: arts.delete("t", hostile, 0),
        ]
        for call in calls:
            with pytest.raises(StorageDataError):
                call()

    def test_reopen_keeps_everything(self, storage: Any, location: Path) -> None:
        if not self.durable:
            pytest.skip("this storage does not outlive its object")
        info = storage.artifacts.put("t", "a", b"kept" * 100_000, "text/plain", None, metadata=[1])
        storage.close()
        reopened = self.open_storage(location)
        try:
            assert reopened.artifacts.get("t", "a") == (info, b"kept" * 100_000)
        finally:
            reopened.close()

    def test_two_threads_race_exactly_one_winner_per_revision(self, storage: Any) -> None:
        assert sum(self._race_threads(storage, _artifact_race)) == self.race_rounds
        assert storage.artifacts.info("tenant", "report").revision == self.race_rounds - 1

    def test_two_processes_race_exactly_one_winner_per_revision(self, location: Path) -> None:
        if not self.multiprocess:
            pytest.skip("this storage is for one process")
        self.open_storage(location).close()
        outcomes = self._race_processes(location, _artifact_race)
        assert sum(wins for _, wins, _ in outcomes) == self.race_rounds
        storage = self.open_storage(location)
        try:
            assert storage.artifacts.info("tenant", "report").revision == self.race_rounds - 1
        finally:
            storage.close()


# -- SessionStore ----------------------------------------------------------------------


def _item(item_id: str, kind: str = "user", **fields: Any) -> dict[str, Any]:
    return make_event(kind, id=item_id, **fields)


def _session_race(storage: Any, worker: int, rounds: int, barrier: Any) -> tuple[int, int]:
    """Every round both racers append expecting the same revision."""
    wins = conflicts = 0
    for round_no in range(rounds):
        barrier.wait(timeout=60)
        try:
            storage.sessions.append(
                "tenant", "race", round_no, [_item(f"w{worker}-r{round_no}", round=round_no)]
            )
            wins += 1
        except StorageConflictError as exc:
            if (exc.expected_revision, exc.actual_revision) != (round_no, round_no + 1):
                raise AssertionError(f"bad conflict {exc}") from None
            conflicts += 1
    return wins, conflicts


class SessionStoreConformance(_StoreSuite):
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
        assert sum(self._race_threads(storage, _session_race)) == self.race_rounds
        items = storage.sessions.load("tenant", "race").items
        assert [e.event["round"] for e in items] == list(range(self.race_rounds))

    def test_two_processes_race_exactly_one_winner_per_revision(self, location: Path) -> None:
        if not self.multiprocess:
            pytest.skip("this storage is for one process")
        storage = self.open_storage(location)
        storage.sessions.create("tenant", "race")
        storage.close()
        outcomes = self._race_processes(location, _session_race)
        assert sum(wins for _, wins, _ in outcomes) == self.race_rounds
        storage = self.open_storage(location)
        try:
            items = storage.sessions.load("tenant", "race").items
            assert [e.event["round"] for e in items] == list(range(self.race_rounds))
        finally:
            storage.close()
