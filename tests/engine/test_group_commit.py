"""The C engine's group commit: concurrent appends share transactions, and every
caller still gets its own exact result."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

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
