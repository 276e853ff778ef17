"""Append latency under contention: several processes appending to one SQLite file.

    python -m benchmarks.contention [--processes 3] [--seconds 10] [--engine c]

Each process appends one ~500-byte event per call, with its expected head, to
sessions of its own, as fast as it can, while the others do the same; every
call's latency is recorded. A sampler watches the WAL's size. Prints the
latency percentiles over all calls, the total rate, the WAL's peak and final
size, and checks at the end that every session holds exactly the events its
process acknowledged.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _appender(
    path: str, slot: int, seconds: float, engine: str, start: float, options: dict[str, Any]
) -> dict[str, Any]:
    from agentlog import SqliteCheckpointer
    from benchmarks.workload import events

    batch = events(2000, seed=slot)
    latencies: list[float] = []
    heads: dict[str, int] = {}
    with SqliteCheckpointer(path, engine=engine, **options) as log:
        while time.time() < start:
            time.sleep(0.001)
        stop = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < stop:
            session = f"p{slot}-{n % 20}"
            began = time.perf_counter()
            heads[session] = log.append(
                session, [batch[n % len(batch)]], expected_head=heads.get(session, 0)
            )
            latencies.append(time.perf_counter() - began)
            n += 1
    return {"latencies": latencies, "heads": heads}


def _run_appender(args: tuple[str, int, float, str, float, dict[str, Any]]) -> dict[str, Any]:
    return _appender(*args)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(
    processes: int, seconds: float, engine: str, directory: Path, options: dict[str, Any]
) -> dict[str, Any]:
    path = str(directory / "contention.db")
    from agentlog import SqliteCheckpointer

    SqliteCheckpointer(path, engine=engine).close()
    wal_peak = 0
    sampling = True

    def sample() -> None:
        nonlocal wal_peak
        while sampling:
            with contextlib.suppress(OSError):
                wal_peak = max(wal_peak, os.stat(path + "-wal").st_size)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.time() + 1.0
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = pool.map(
            _run_appender,
            [(path, slot, seconds, engine, start, options) for slot in range(processes)],
        )
    sampling = False
    sampler.join()
    latencies = [value for result in results for value in result["latencies"]]
    acknowledged = {s: h for result in results for s, h in result["heads"].items()}
    with SqliteCheckpointer(path, engine=engine, read_only=True) as log:
        stored = {info.id: info.head for info in log.list()}
        for session, head in acknowledged.items():
            seqs = [event.seq for event in log.read(session)]
            assert seqs == list(range(1, head + 1)), session
    assert stored == acknowledged, "the file does not hold exactly the acknowledged events"
    wal = Path(path + "-wal")
    return {
        "engine": engine,
        "processes": processes,
        "seconds": seconds,
        "appends": len(latencies),
        "rate": len(latencies) / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "p999_ms": percentile(latencies, 0.999) * 1000,
        "max_ms": max(latencies) * 1000,
        "wal_peak_bytes": wal_peak,
        "wal_final_bytes": wal.stat().st_size if wal.exists() else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.contention", description=__doc__)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--engine", default="c")
    parser.add_argument("--wal-size-limit", type=int, help="bytes (default: agentlog's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = {} if args.wal_size_limit is None else {"wal_size_limit": args.wal_size_limit}
    with tempfile.TemporaryDirectory() as tmp:
        figures = run(args.processes, args.seconds, args.engine, Path(tmp), options)
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"{figures['processes']} processes x {figures['seconds']:g} s on the {args.engine} "
        f"engine: {figures['appends']:,} appends, {figures['rate']:,.0f}/s; latency p50 "
        f"{figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms, p99.9 "
        f"{figures['p999_ms']:.2f} ms, max {figures['max_ms']:.1f} ms; WAL peak "
        f"{figures['wal_peak_bytes'] / 2**20:.1f} MiB, final "
        f"{figures['wal_final_bytes'] / 2**20:.1f} MiB; every acknowledged event is there"
    )


if __name__ == "__main__":
    main()
