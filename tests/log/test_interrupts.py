"""Ctrl-C in the middle of a write: on every backend, an interrupted append or
fork is whole or absent, the log stays readable, and the writes after it go
on from what is really stored (an agent REPL catches KeyboardInterrupt and
carries on)."""

from __future__ import annotations

import gc
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    BaseCheckpointer,
    CheckpointConflictError,
    FileCheckpointer,
    MemoryCheckpointer,
    SqliteCheckpointer,
)

from ..conftest import require_engine


class Interrupted(Exception):
    """What the test's signal handler raises, as Python's raises KeyboardInterrupt."""


BACKENDS = ["memory", "file", "sqlite-c", "sqlite-python"]


def opener(kind: str, tmp_path: Path) -> Callable[[], BaseCheckpointer]:
    if kind == "memory":
        log = MemoryCheckpointer()
        return lambda: log
    if kind == "file":
        return lambda: FileCheckpointer(tmp_path / "files")
    engine = kind.split("-")[1]
    require_engine(engine)
    return lambda: SqliteCheckpointer(tmp_path / "s.db", engine=engine)


@pytest.fixture
def interrupts() -> Iterator[Callable[[bool], None]]:
    """SIGALRM every ~0.3-0.9 ms; the handler raises only while armed."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    armed = [False]

    def handler(signum: int, frame: object) -> None:
        if armed[0]:
            armed[0] = False
            raise Interrupted

    def arm(on: bool) -> None:
        armed[0] = on

    # Earlier tests' garbage is collected first: an interrupt that lands in
    # a finalizer of theirs (a weakref callback) is only printed, and lost.
    gc.collect()
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0009)
    try:
        yield arm
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def batches_of(log: BaseCheckpointer, session: str) -> list[int]:
    """The batch numbers stored in ``session``, checking that seqs run 1..head
    without a gap and that every batch is whole and in order."""
    events = list(log.read(session))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert log.head(session) == len(events)
    found: list[int] = []
    position = 0
    while position < len(events):
        batch, size = events[position].event["batch"], events[position].event["size"]
        part = [(e.event["batch"], e.event["index"]) for e in events[position : position + size]]
        assert part == [(batch, n) for n in range(size)], f"batch {batch} is torn"
        assert not found or batch > found[-1]
        found.append(batch)
        position += size
    return found


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_interrupted_write_is_whole_or_absent_and_the_log_goes_on(
    kind: str, tmp_path: Path, interrupts: Callable[[bool], None]
) -> None:
    open_log = opener(kind, tmp_path)
    rng = random.Random(7)
    told: list[int] = []  # batches an append returned for
    forks: dict[str, int] = {}  # forks that returned, with their seq
    tried: list[str] = []
    interrupted = 0
    log = open_log()
    deadline = time.monotonic() + 2.5
    for batch in range(1, 3001):
        if time.monotonic() > deadline:
            break
        size = rng.randint(1, 9)
        events: list[dict[str, Any]] = [
            {"type": "user", "content": "x" * rng.randint(0, 300), "batch": batch}
            | {"index": n, "size": size}
            for n in range(size)
        ]
        fork = batch % 25 == 0
        try:
            interrupts(True)
            if fork:
                at = log.head("s")
                tried.append(f"f{batch}")
                log.fork("s", at, f"f{batch}")
                interrupts(False)
                forks[f"f{batch}"] = at
            else:
                log.append("s", events, expected_head=log.head("s"))
                interrupts(False)
                told.append(batch)
        except Interrupted:
            interrupted += 1
        except CheckpointConflictError:
            pytest.fail("the head read just before was not the head")
        finally:
            interrupts(False)
    assert interrupted > 10, "the test did not interrupt writes"
    stored = batches_of(log, "s")
    assert set(told) <= set(stored)  # every append told written is there
    for name in tried:
        head = log.head(name)
        if name in forks:
            assert head == forks[name]
        events = list(log.read(name))
        assert len(events) == head  # a fork is whole or absent
        assert [e.event for e in events] == [e.event for e in log.read("s", limit=head)]
    if kind != "memory":
        log.close()
        with open_log() as again:  # what another process would find
            assert batches_of(again, "s") == stored
            assert again.check_integrity() == (True, "ok")  # type: ignore[attr-defined]
