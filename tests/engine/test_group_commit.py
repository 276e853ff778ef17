"""The C engine's group commit: concurrent appends share transactions, and every
caller still gets its own exact result."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import pytest

from agentlog import CheckpointConflictError, SqliteCheckpointer

from ..conftest import require_engine

EVENT = {"type": "user", "content": "hello"}


def test_group_commit_shares_transactions_and_keeps_results_exact(tmp_path: Path) -> None:
    require_engine("c")  # group commit is the C engine's
    threads, calls = 8, 150
    errors: list[BaseException] = []
    results: dict[int, list[int]] = {}
    with SqliteCheckpointer(tmp_path / "group.db", engine="c") as cp:
        barrier = threading.Barrier(threads)

        def writer(slot: int) -> None:
            try:
                barrier.wait()
                heads = []
                for n in range(calls):
                    heads.append(cp.append(f"s{slot}", [dict(EVENT, n=n)], expected_head=n))
                    # A stale write in the same groups: refused alone.
                    with contextlib.suppress(CheckpointConflictError):
                        cp.append(f"s{slot}", [EVENT], expected_head=0)
                        raise AssertionError("a stale append was accepted")
                results[slot] = heads
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors, errors
        assert all(heads == list(range(1, calls + 1)) for heads in results.values())
        for slot in range(threads):
            assert [e.event["n"] for e in cp.read(f"s{slot}")] == list(range(calls))
        commits = cp._engine.commits  # type: ignore[attr-defined]
    # Every successful append returned after a commit holding it; fewer
    # transactions than appends means concurrent appends shared them.
    assert 0 < commits < threads * calls * 2  # two appends per round


class Interrupted(Exception):
    """Raised by the alarm while the caller waits (as Ctrl-C would be)."""


def test_an_append_interrupted_while_it_waits_is_never_written(tmp_path: Path, engine: str) -> None:
    """A caller interrupted while its append waits for another's commit takes it
    back: the next commit does not write it, and a retry writes it once."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    with SqliteCheckpointer(tmp_path / "i.db", engine=engine) as cp:
        write_lock = cp._engine._write_lock  # type: ignore[attr-defined]
        write_lock.acquire()  # as if a long write were under way
        leader = threading.Thread(target=cp.append, args=("other", [EVENT]))
        leader.start()  # queues and waits for the write lock (the C engine: it leads)
        time.sleep(0.1)

        def interrupt(signum: int, frame: object) -> None:
            raise Interrupted

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                cp.append("s", [EVENT, EVENT], expected_head=0)  # waits behind the leader
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
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
