"""Repeated calls leave neither objects nor memory behind, on each engine."""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from pathlib import Path

from agentlog import CheckpointConflictError, SqliteCheckpointer

EVENT = {"type": "user", "content": "hello"}


def test_repeated_calls_do_not_leak(tmp_path: Path, engine: str) -> None:
    """Object counts stay flat over many appends, reads and heads."""
    with SqliteCheckpointer(tmp_path / "leak.db", engine=engine) as cp:
        cp.append("s", [EVENT] * 20)

        def work(rounds: int) -> None:
            for i in range(rounds):
                cp.append("s", [dict(EVENT, i=i)], expected_head=cp.head("s"))
                for _ in cp.read("s", since_seq=10):
                    pass
                cp.head("missing")
                with contextlib.suppress(CheckpointConflictError):
                    cp.append("s", [EVENT], expected_head=0)

        work(200)
        gc.collect()
        before = len(gc.get_objects())
        tracemalloc.start()
        work(500)
        gc.collect()
        grown, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        after = len(gc.get_objects())
    # 500 rounds of several calls each: a per-call leak would show hundreds.
    assert after - before < 200
    assert grown < 256 * 1024
