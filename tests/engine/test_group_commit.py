"""The C engine's group commit: concurrent appends share transactions, and every
caller still gets its own exact result."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlog import CheckpointConflictError, CheckpointerClosedError, SqliteCheckpointer
from agentlog.errors import IdempotencyKeyError
from agentlog.testing.races import run_in_threads

from ..conftest import require_engine
from ..waiting import os_threads, threads_blocked, threads_ended, threads_started_since, wait_until

EVENT = {"type": "user", "content": "hello"}


def test_group_commit_shares_transactions_and_keeps_results_exact(tmp_path: Path) -> None:
    require_engine("c")  # group commit is the C engine's
    threads, calls = 8, 150
    results: dict[int, list[int]] = {}
    with SqliteCheckpointer(tmp_path / "group.db", engine="c") as cp:
        barrier = threading.Barrier(threads)

        def writer(slot: int) -> None:
            barrier.wait()
            heads = []
            for n in range(calls):
                heads.append(cp.append(f"s{slot}", [dict(EVENT, n=n)], expected_head=n))
                # A stale write in the same groups: refused alone.
                with contextlib.suppress(CheckpointConflictError):
                    cp.append(f"s{slot}", [EVENT], expected_head=0)
                    raise AssertionError("a stale append was accepted")
            results[slot] = heads

        run_in_threads(writer, threads)
        assert all(heads == list(range(1, calls + 1)) for heads in results.values())
        for slot in range(threads):
            assert [e.event["n"] for e in cp.read(f"s{slot}")] == list(range(calls))
        commits = cp._engine.commits  # type: ignore[attr-defined]
    # Every successful append returned after a commit holding it; fewer
    # transactions than appends means concurrent appends shared them.
    assert 0 < commits < threads * calls * 2  # two appends per round


class Interrupted(Exception):
    """Raised by the alarm while the caller waits (as Ctrl-C would be)."""


@contextlib.contextmanager
def interrupted_in(seconds: float) -> Iterator[None]:
    """A signal's handler raises ``Interrupted`` (as Ctrl-C would) ``seconds``
    into the block, which must let it out."""

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        with pytest.raises(Interrupted):
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_append_interrupted_while_it_waits_is_never_written(tmp_path: Path, engine: str) -> None:
    """A caller interrupted while its append waits for another's commit takes it
    back: the next commit does not write it, and a retry writes it once."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    with SqliteCheckpointer(tmp_path / "i.db", engine=engine) as cp:
        write_lock = cp._engine._write_lock  # type: ignore[attr-defined]
        write_lock.acquire()  # as if a long write were under way
        before = os_threads()
        leader = threading.Thread(target=cp.append, args=("other", [EVENT]))
        leader.start()  # queues and waits for the write lock (the C engine: it leads)
        # The leader waits; on the C engine, so does the writer thread it
        # started, with the leader's append taken (woken by its queueing, the
        # writer thread blocks on the write lock only once it has taken it).
        # The threads started since ``before`` are the leader and (C) the writer thread.
        assert wait_until(lambda: all_blocked(before, 2 if engine == "c" else 1))
        try:
            with interrupted_in(0.2):
                cp.append("s", [EVENT, EVENT], expected_head=0)  # waits behind the leader
        finally:
            write_lock.release()
        leader.join(timeout=30)
        assert cp.head("other") == 1
        assert cp.head("s") == 0  # the interrupted append was not written by the next commit
        assert cp.append("s", [EVENT, EVENT], expected_head=0) == 2  # the retry, once
        assert cp.append("s", [EVENT]) == 3  # and the queue still works
        assert [e.seq for e in cp.read("s")] == [1, 2, 3]


def test_interrupts_among_many_waiters_never_hang_or_lose_an_append(tmp_path: Path) -> None:
    """Waiters sleep on locks of their own and a finished leader offers the
    lead to the oldest one: a waiter interrupted anywhere in that (offered
    the lead or not) must pass it on, so the others never hang, and every
    append is written once exactly when its caller was told so."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    require_engine("c")
    threads, calls = 6, 600
    errors: list[BaseException] = []
    with SqliteCheckpointer(tmp_path / "stress.db", engine="c") as cp:

        def writer(slot: int) -> None:
            try:
                for n in range(calls):
                    cp.append(f"s{slot}", [dict(EVENT, n=n)], expected_head=n)
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]

        armed = False  # interrupts only inside the appends, not the test's own steps

        def interrupt(signum: int, frame: object) -> None:
            if armed:
                raise Interrupted

        previous = signal.signal(signal.SIGALRM, interrupt)
        told: list[int] = []  # seqs the main thread was told were written
        interrupted = 0
        try:
            for worker in workers:
                worker.start()
            signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0007)
            deadline = time.monotonic() + 60
            while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
                head = cp.head("main")
                try:
                    armed = True
                    seq = cp.append("main", [EVENT], expected_head=head)
                    armed = False
                    told.append(seq)
                except Interrupted:
                    armed = False
                    interrupted += 1
                except CheckpointConflictError:
                    armed = False  # an interrupted append that its group had taken: written
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        for worker in workers:
            worker.join(timeout=60)
        assert not any(w.is_alive() for w in workers), "a waiter hung"
        assert not errors, errors
        for slot in range(threads):
            assert [e.event["n"] for e in cp.read(f"s{slot}")] == list(range(calls))
        stored = [e.seq for e in cp.read("main")]
        assert stored == list(range(1, len(stored) + 1))
        assert set(told) <= set(stored)
    assert interrupted > 0  # the test did interrupt waiters


def blocked(threads: list[threading.Thread]) -> bool:
    """Whether each of ``threads`` waits (for the write lock, or for the writer
    thread to write what it queued), as its OS thread's state shows."""
    return threads_blocked(t.native_id or 0 for t in threads)


def all_blocked(before: set[str], count: int) -> bool:
    """Whether ``count`` OS threads were started since ``before`` (the C
    writer thread is none of Python's) and each of them waits."""
    started = os_threads() - before
    return len(started) == count and threads_blocked(started)


def busy_appends(cp: SqliteCheckpointer, threads: int = 4) -> None:
    """Appends that find the write lock held: they go to the writer thread."""
    lock = cp._engine._write_lock  # type: ignore[attr-defined]
    workers = [
        threading.Thread(target=cp.append, args=(f"busy{n}", [EVENT])) for n in range(threads)
    ]
    with lock:
        for worker in workers:
            worker.start()
        assert wait_until(lambda: blocked(workers))  # each queued, waiting
    for worker in workers:
        worker.join()


def test_close_writes_what_callers_queued_then_refuses(tmp_path: Path) -> None:
    """close() while callers wait behind a long write: the writer thread writes
    what they queued, each gets its head, and only then does the file close."""
    require_engine("c")
    db = tmp_path / "drain.db"
    cp = SqliteCheckpointer(db, engine="c")
    busy_appends(cp)  # the writer thread is running
    heads: dict[int, int] = {}
    cp._engine._write_lock.acquire()  # type: ignore[attr-defined]  # a long write
    try:
        callers = [
            threading.Thread(target=lambda n=n: heads.__setitem__(n, cp.append(f"q{n}", [EVENT])))
            for n in range(4)
        ]
        for caller in callers:
            caller.start()
        assert wait_until(lambda: blocked(callers))  # all four queued behind the lock
        closing = threading.Thread(target=cp.close)
        closing.start()
        wait_until(lambda: not closing.is_alive() or blocked([closing]))
        assert closing.is_alive()  # close waits for what was queued
    finally:
        cp._engine._write_lock.release()  # type: ignore[attr-defined]
    closing.join(10)
    for caller in callers:
        caller.join(10)
    assert heads == {0: 1, 1: 1, 2: 1, 3: 1}
    with pytest.raises(CheckpointerClosedError):
        cp.append("late", [EVENT])
    with SqliteCheckpointer(db, engine="c") as again:
        assert [again.head(f"q{n}") for n in range(4)] == [1, 1, 1, 1]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_the_writer_thread_ends_with_its_engine(tmp_path: Path) -> None:
    """Closed, or dropped without close(): the writer thread does not outlive it."""
    require_engine("c")
    gc.collect()  # no engine of an earlier test left to end during this one
    before = os_threads()
    cp = SqliteCheckpointer(tmp_path / "closed.db", engine="c")
    busy_appends(cp)
    writer = threads_started_since(before)
    assert len(writer) == 1
    cp.close()
    assert threads_ended(writer)
    dropped = SqliteCheckpointer(tmp_path / "dropped.db", engine="c")
    busy_appends(dropped)
    writer = threads_started_since(before)
    assert len(writer) == 1
    del dropped
    gc.collect()
    assert threads_ended(writer)


def test_two_closes_at_once_both_wait_for_what_was_queued(tmp_path: Path) -> None:
    """The second close() used to return while the first waited for the
    writer thread, and closed the connection under the group it was writing
    (a crash or a hang)."""
    require_engine("c")
    cp = SqliteCheckpointer(tmp_path / "twice.db", engine="c")
    engine = cp._engine  # type: ignore[attr-defined]
    heads: dict[int, int] = {}
    callers = [
        threading.Thread(target=lambda n=n: heads.__setitem__(n, cp.append(f"s{n}", [EVENT])))
        for n in range(5)
    ]
    closers = [threading.Thread(target=engine.close) for _ in range(2)]
    with engine._write_lock:
        for caller in callers:
            caller.start()
        assert wait_until(lambda: blocked(callers))  # queued behind the lock
        for closer in closers:
            closer.start()
        # Both wait (the first for the writer thread, the second for the first),
        # or one has returned at once: the bug this guards against.
        wait_until(lambda: all(not c.is_alive() or blocked([c]) for c in closers))
    for thread in [*callers, *closers]:
        thread.join(10)
        assert not thread.is_alive()
    assert heads == dict.fromkeys(range(5), 1)


def test_a_stopping_writer_starts_no_thread(tmp_path: Path) -> None:
    """An append that reaches the queue while close() stops the writer is
    refused, and starts no thread that nobody would join (~8 MB each)."""
    require_engine("c")
    cp = SqliteCheckpointer(tmp_path / "late.db", engine="c")
    engine = cp._engine  # type: ignore[attr-defined]
    gc.collect()
    before = os_threads()
    errors: list[BaseException] = []

    def append() -> None:
        try:
            cp.append("s", [EVENT])
        except BaseException as exc:
            errors.append(exc)

    with engine._write_lock:  # as close() holds it: the append goes to the queue
        engine._group_writer.stop()
        late = threading.Thread(target=append)
        late.start()
        late.join(10)
    assert [type(e) for e in errors] == [CheckpointerClosedError]
    assert not engine._group_writer.started
    assert threads_started_since(before, count=0) == set()
    cp.close()


def test_close_waiting_for_the_writer_thread_can_be_interrupted(tmp_path: Path) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    require_engine("c")
    cp = SqliteCheckpointer(tmp_path / "stuck.db", engine="c")
    lock = cp._engine._write_lock  # type: ignore[attr-defined]
    lock.acquire()  # the writer thread's group waits behind it
    callers = [threading.Thread(target=cp.append, args=(f"s{n}", [EVENT])) for n in range(3)]
    for caller in callers:
        caller.start()
    assert wait_until(lambda: blocked(callers))  # queued, the writer thread waiting
    try:
        with interrupted_in(0.2):
            cp.close()
    finally:
        lock.release()
    cp.close()  # waits again, now to the end
    for caller in callers:
        caller.join(10)
    with SqliteCheckpointer(tmp_path / "stuck.db", engine="c") as again:
        assert [again.head(f"s{n}") for n in range(3)] == [1, 1, 1]


def test_the_write_lock_refuses_a_release_it_does_not_hold(tmp_path: Path) -> None:
    require_engine("c")
    with SqliteCheckpointer(tmp_path / "l.db", engine="c") as cp:
        lock = cp._engine._write_lock  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError, match="release unlocked lock"):
            lock.release()
        assert lock.acquire(False)
        assert not lock.acquire(False)  # still one holder at most
        lock.release()


def test_keyed_appends_go_through_the_group_commit(tmp_path: Path) -> None:
    """Keyed appends are requests of the C writer like unkeyed ones: their
    transactions are the group commit's (counted in ``commits``), and each
    caller gets its own exact result, a repeat its first head."""
    require_engine("c")
    threads, calls = 4, 40
    results: dict[int, list[int]] = {}
    with SqliteCheckpointer(tmp_path / "keyed.db", engine="c") as cp:
        barrier = threading.Barrier(threads)

        def writer(slot: int) -> None:
            barrier.wait()
            heads = []
            for n in range(calls):
                events = [dict(EVENT, n=n)]
                head = cp.append(f"s{slot}", events, expected_head=n, key=f"k{n}")
                assert cp.append(f"s{slot}", events, expected_head=0, key=f"k{n}") == head
                heads.append(head)
            results[slot] = heads

        run_in_threads(writer, threads)
        assert all(heads == list(range(1, calls + 1)) for heads in results.values())
        for slot in range(threads):
            assert [e.event["n"] for e in cp.read(f"s{slot}")] == list(range(calls))
        commits = cp._engine.commits  # type: ignore[attr-defined]
    assert 0 < commits <= threads * calls * 2


def test_a_key_and_its_repeat_in_one_group(tmp_path: Path) -> None:
    """Queued behind a held write lock, requests are written in one group:
    of two appends under one key, the first writes and the second finds its
    row in the same transaction and writes nothing; a third with other events
    under that key is refused alone."""
    require_engine("c")
    with SqliteCheckpointer(tmp_path / "group.db", engine="c") as cp:
        busy_appends(cp)  # the writer thread is running
        writer = cp._engine._group_writer  # type: ignore[attr-defined]
        first = [dict(EVENT, n=1)]
        outcomes: dict[str, object] = {}

        def call(name: str, session: str, events: list[dict[str, object]], key: str | None) -> None:
            try:
                outcomes[name] = cp.append(session, events, key=key)
            except IdempotencyKeyError as exc:
                outcomes[name] = exc

        before = cp._engine.commits  # type: ignore[attr-defined]
        callers: list[threading.Thread] = []
        with cp._engine._write_lock:  # type: ignore[attr-defined]
            for waiting, (name, session, events, key) in enumerate(
                [
                    ("plain", "p", first, None),  # taken at once: a group waiting for the lock
                    ("first", "s", first, "k"),  # these three queue behind it: the next group
                    ("repeat", "s", first, "k"),
                    ("other", "s", [dict(EVENT, n=2)], "k"),
                ]
            ):
                caller = threading.Thread(target=call, args=(name, session, events, key))
                caller.start()
                callers.append(caller)
                assert wait_until(lambda n=waiting: blocked(callers) and writer.waiting == n)
        for caller in callers:
            caller.join(10)
        assert cp._engine.commits == before + 2  # type: ignore[attr-defined]
        assert outcomes["plain"] == outcomes["first"] == outcomes["repeat"] == 1
        assert isinstance(outcomes["other"], IdempotencyKeyError)
        assert [e.event for e in cp.read("s")] == first
        assert cp._engine.find_append_key("default", "s", "k")[1] == 1  # type: ignore[attr-defined]
