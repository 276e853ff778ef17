"""Per-call micro-benchmarks of the hot paths, with pytest-benchmark.

    pytest benchmarks/test_hot_paths.py                       # measure
    pytest benchmarks/test_hot_paths.py --benchmark-autosave  # keep a baseline
    pytest benchmarks/test_hot_paths.py --benchmark-compare   # against the last one

Each runs on both engines (where built): appending 1 and 100 events, ``head()``,
scanning one page of 1,000 events, and a follower's wake-up (a commit to the
delivery of its event, sync and async; the async ones time rounds of 100
awaited calls on one running loop), and a group of 64 coroutines' appends.
The side-by-side ratio table is ``python -m benchmarks``; these are for
catching a regression in one call.
The test command runs them once with ``--benchmark-disable``, as plain tests.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import SqliteCheckpointer, engine_info
from agentlog.aio import AsyncSqliteCheckpointer
from benchmarks.workload import events

ENGINES = [name for name in ("c", "python") if name in engine_info()["available"]]
EVENTS = events(1_000)
PAGE = 1_000


@pytest.fixture(params=ENGINES)
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteCheckpointer]:
    with SqliteCheckpointer(tmp_path / "bench.db", engine=request.param) as cp:
        yield cp


def test_append_1(benchmark: Any, log: SqliteCheckpointer) -> None:
    event = [EVENTS[0]]
    head = benchmark(lambda: log.append("s", event))
    assert head == log.head("s") > 0


def test_append_100(benchmark: Any, log: SqliteCheckpointer) -> None:
    batch = EVENTS[:100]
    head = benchmark(lambda: log.append("s", batch))
    assert head == log.head("s") and head % 100 == 0


def test_head(benchmark: Any, log: SqliteCheckpointer) -> None:
    log.append("s", EVENTS[:10])
    assert benchmark(lambda: log.head("s")) == 10


def test_scan_one_page(benchmark: Any, log: SqliteCheckpointer) -> None:
    log.append("s", EVENTS[:PAGE])
    page = benchmark(lambda: list(log.read("s", 0, PAGE)))
    assert [e.seq for e in page] == list(range(1, PAGE + 1))


def test_follow_wake_up(benchmark: Any, log: SqliteCheckpointer) -> None:
    """One append on this thread to its delivery by a follower on another."""
    delivered = threading.Semaphore(0)
    stop = threading.Event()
    seen: list[int] = []

    def follower() -> None:
        for event in log.follow("s"):
            seen.append(event.seq)
            delivered.release()
            if stop.is_set():
                return

    thread = threading.Thread(target=follower)
    thread.start()
    event = [EVENTS[0]]

    def commit_and_deliver() -> None:
        log.append("s", event)
        assert delivered.acquire(timeout=10)

    try:
        benchmark(commit_and_deliver)
    finally:
        stop.set()
        log.append("s", event)
        thread.join(timeout=10)
    assert seen == list(range(1, len(seen) + 1))


ROUND = 100  # awaited calls per timed round (one run of the loop)


@pytest.mark.parametrize("engine", ENGINES)
def test_async_append_1_x100(benchmark: Any, tmp_path: Path, engine: str) -> None:
    _async_rounds(benchmark, tmp_path / "a.db", engine, follow=False)


@pytest.mark.parametrize("engine", ENGINES)
def test_async_follow_wake_up_x100(benchmark: Any, tmp_path: Path, engine: str) -> None:
    _async_rounds(benchmark, tmp_path / "f.db", engine, follow=True)


@pytest.mark.parametrize("engine", ENGINES)
def test_async_append_group_of_64(benchmark: Any, tmp_path: Path, engine: str) -> None:
    """64 coroutines appending one event each at once: one group on the writer
    thread (the C engine's, through the loop's channel) or per turn of the loop."""
    loop = asyncio.new_event_loop()
    cp = loop.run_until_complete(_open(tmp_path / "g.db", engine))
    event = [EVENTS[0]]

    async def one_group() -> list[int]:
        return await asyncio.gather(*(cp.append(f"s{n}", event) for n in range(64)))

    try:
        heads = benchmark(lambda: loop.run_until_complete(one_group()))
        assert len(set(heads)) == 1 and heads[0] >= 1
    finally:
        loop.run_until_complete(cp.aclose())
        loop.close()


def _async_rounds(benchmark: Any, path: Path, engine: str, *, follow: bool) -> None:
    """Rounds of ``ROUND`` awaited appends (with ``follow``, each one's delivery
    to a follower on the same loop too), each round one run of the loop."""
    loop = asyncio.new_event_loop()
    cp = loop.run_until_complete(_open(path, engine))
    followed = cp.follow("s").__aiter__()
    event = [EVENTS[0]]

    async def one_round() -> int:
        head = 0
        for _ in range(ROUND):
            head = await cp.append("s", event)
            if follow:
                assert (await followed.__anext__()).seq == head
        return head

    try:
        head = benchmark(lambda: loop.run_until_complete(one_round()))
        assert head == loop.run_until_complete(cp.head("s")) and head % ROUND == 0
    finally:
        loop.run_until_complete(followed.aclose())
        loop.run_until_complete(cp.aclose())
        loop.close()


async def _open(path: Path, engine: str) -> AsyncSqliteCheckpointer:
    return AsyncSqliteCheckpointer(path, engine=engine)


def test_layout_runs_every_layout_on_both_workloads(tmp_path: Path) -> None:
    """benchmarks/layout.py end to end, small: a row per workload and layout,
    each a positive time, the base layout's ratio 1 (each layout's appends
    check the head they end at)."""
    from benchmarks import layout

    out = tmp_path / "layout.json"
    layout.main(["--rounds", "1", "--appends", "60", "--sessions", "7", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [(row["workload"], row["layout"]) for row in rows] == [
        (workload, name) for workload in ("one session", "spread over 7") for name in layout.LAYOUTS
    ]
    assert all(row["us_per_append"] > 0 for row in rows)
    assert [row["ratio"] for row in rows if row["layout"] == layout.BASE] == [1.0, 1.0]


def test_growth_runs_at_tiny_sizes(tmp_path: Path) -> None:
    """benchmarks/growth.py end to end at tiny sizes: a row per size, a
    sessions row, every figure a positive number, and the plot drawn."""
    pytest.importorskip("matplotlib")
    from benchmarks import growth

    out, png = tmp_path / "growth.json", tmp_path / "growth.png"
    growth.main(
        [
            "--sizes",
            "300,1200",
            "--sessions",
            "50",
            "--probes",
            "3",
            "--dir",
            str(tmp_path),
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    result = json.loads(out.read_text())
    assert [row["events"] for row in result["events"]] == [300, 1200]
    assert [row["sessions"] for row in result["events"]] == [1, 2]
    assert result["sessions"]["sessions"] == 50
    for row in [*result["events"], result["sessions"]]:
        assert all(row[name] > 0 for name in (*growth.FIGURES, "bytes_per_event"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
