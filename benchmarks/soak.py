"""A bounded soak: mixed load from several processes on one SQLite file, verified.

    python -m benchmarks.soak [--seconds 120] [--wal-size-limit BYTES]

Runs, at once, on one file:

* two log writers (one on each engine, where both are built), each on
  sessions of its own: appends of 1-5 events with expected heads, truncates,
  forks and deletes, keeping a journal of what it was acknowledged;
* one process on the stores: a memory counter incremented by compare-and-set
  (from two threads, so some writes conflict and retry) and artifacts of
  10 KB-2 MB put and deleted;
* one reader following ten of the writers' sessions.

A sampler records, every second, the WAL's size and each process's RSS and
open file descriptors. At the end every session must hold exactly its
journal's events, the counter its exact count, every artifact its sha256,
and the follower must have seen only gapless sequences. Prints ops/s, append
latency percentiles, and WAL / RSS / fd figures over time (JSON with --json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TENANT = "soak"
EVENT_TEXT = "the agent reads a file then calls a tool " * 8  # ~330 bytes


def _event(writer: int, n: int) -> dict[str, Any]:
    return {"type": "user", "content": EVENT_TEXT, "w": writer, "n": n}


def log_writer(path: str, slot: int, engine: str, deadline: float, options: dict[str, Any]) -> Any:
    """Random appends, truncates, forks and deletes on this writer's sessions."""
    from agentlog import SqliteCheckpointer

    rng = random.Random(slot)
    journal: dict[str, list[int]] = {}  # session -> the n of each event, in order
    latencies: list[float] = []
    ops = 0
    made = 0
    with SqliteCheckpointer(path, engine=engine, tenant=TENANT, **options) as log:
        while time.time() < deadline:
            roll = rng.random()
            names = sorted(journal)
            if roll < 0.85 or not names:
                name = f"w{slot}-{rng.randrange(40)}"
                events = journal.setdefault(name, [])
                batch = [_event(slot, made + i) for i in range(rng.randint(1, 5))]
                began = time.perf_counter()
                log.append(name, batch, expected_head=len(events))
                latencies.append(time.perf_counter() - began)
                events.extend(e["n"] for e in batch)
                made += len(batch)
            elif roll < 0.92:
                name = rng.choice(names)
                keep = rng.randint(0, len(journal[name]))
                log.truncate(name, keep)
                del journal[name][keep:]
            elif roll < 0.97:
                name = rng.choice(names)
                at = rng.randint(0, len(journal[name]))
                new = f"w{slot}-fork-{ops}"
                log.fork(name, at, new)
                journal[new] = journal[name][:at]
            else:
                name = rng.choice(names)
                log.delete(name)
                del journal[name]
            ops += 1
    return {"journal": journal, "latencies": latencies, "ops": ops, "engine": log.engine}


def store_worker(path: str, deadline: float) -> Any:
    """A counter by compare-and-set from two threads, and artifacts put and deleted."""
    from agentlog import SqliteStorage, StorageConflictError

    rng = random.Random(99)
    increments = 0
    conflicts = 0
    artifacts: dict[str, str] = {}
    ops = 0
    with SqliteStorage.open(path) as storage:
        storage.memory.put(TENANT, "soak", "counter", 0, None)
        lock = threading.Lock()

        def count() -> None:
            nonlocal increments, conflicts
            while time.time() < deadline:
                record = storage.memory.get(TENANT, "soak", "counter")
                try:
                    storage.memory.put(TENANT, "soak", "counter", record.value + 1, record.revision)
                except StorageConflictError:
                    with lock:
                        conflicts += 1
                    continue
                with lock:
                    increments += 1

        counters = [threading.Thread(target=count) for _ in range(2)]
        for thread in counters:
            thread.start()
        while time.time() < deadline:
            name = f"a{rng.randrange(8)}"
            if name in artifacts and rng.random() < 0.3:
                info = storage.artifacts.info(TENANT, name)
                storage.artifacts.delete(TENANT, name, info.revision)
                del artifacts[name]
            else:
                data = rng.randbytes(rng.randint(10_000, 2_000_000))
                revision = None
                if name in artifacts:
                    revision = storage.artifacts.info(TENANT, name).revision
                storage.artifacts.put(TENANT, name, data, "application/octet-stream", revision)
                artifacts[name] = hashlib.sha256(data).hexdigest()
            ops += 1
            time.sleep(0.01)
        for thread in counters:
            thread.join()
    return {
        "increments": increments,
        "conflicts": conflicts,
        "artifacts": artifacts,
        "ops": ops + increments,
    }


def follower(path: str, deadline: float, sessions: list[str]) -> Any:
    """Follow ``sessions`` (round robin, a page at a time): seqs must never skip."""
    from agentlog import SessionTruncatedError, SqliteCheckpointer

    seen = 0
    restarts = 0
    last = dict.fromkeys(sessions, 0)
    with SqliteCheckpointer(path, tenant=TENANT, read_only=True) as log:
        while time.time() < deadline:
            for name in sessions:
                try:
                    for event in log.read(name, last[name]):
                        if event.seq != last[name] + 1:
                            raise AssertionError(f"{name}: seq {event.seq} after {last[name]}")
                        last[name] = event.seq
                        seen += 1
                except SessionTruncatedError:
                    restarts += 1
                # A truncate or delete under the reader: start that session over.
                if log.head(name) < last[name]:
                    last[name] = log.head(name)
                    restarts += 1
            time.sleep(0.05)
    return {"seen": seen, "restarts": restarts}


def _run(job: tuple[str, tuple[Any, ...]]) -> Any:
    kind, args = job
    return {"writer": log_writer, "stores": store_worker, "follower": follower}[kind](*args)


def _proc_figures(pid: int) -> tuple[int, int]:
    """RSS (KiB) and open file descriptors of ``pid`` (Linux /proc; zeros elsewhere)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration, ValueError):
        return 0, 0


def _size_or_zero(path: Path) -> int:
    """``path``'s size, 0 when it is not there: the last connection to close
    deletes the WAL, at any moment between a check and a stat."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def soak(seconds: float, directory: Path, options: dict[str, Any]) -> dict[str, Any]:
    from agentlog import SqliteCheckpointer, SqliteStorage
    from agentlog.engine import AVAILABLE_ENGINES

    path = str(directory / "soak.db")
    SqliteCheckpointer(path, **options).close()
    engines = list(AVAILABLE_ENGINES)
    deadline = time.time() + seconds
    jobs: list[tuple[str, tuple[Any, ...]]] = [
        ("writer", (path, slot, engines[slot % len(engines)], deadline, options))
        for slot in range(2)
    ]
    jobs.append(("stores", (path, deadline)))
    jobs.append(("follower", (path, deadline, [f"w{s}-{n}" for s in range(2) for n in range(5)])))
    samples: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(jobs)) as pool:
        pending = pool.map_async(_run, jobs)
        children = [p.pid for p in multiprocessing.active_children() if p.pid]
        started = time.time()
        while not pending.ready():
            figures = [_proc_figures(pid) for pid in children]
            samples.append(
                {
                    "t": round(time.time() - started, 1),
                    "wal_bytes": _size_or_zero(Path(path + "-wal")),
                    "rss_kib": [rss for rss, _ in figures],
                    "fds": [fds for _, fds in figures],
                }
            )
            pending.wait(1.0)
        results = pending.get()
    writers, stores, followed = results[:2], results[2], results[3]

    # Verify everything against the journals.
    with SqliteCheckpointer(path, tenant=TENANT, read_only=True) as log:
        expected: dict[str, list[int]] = {}
        for writer in writers:
            expected.update(writer["journal"])
        stored = {info.id: info.head for info in log.list()}
        assert stored == {name: len(ns) for name, ns in expected.items()}, "sessions differ"
        for name, ns in expected.items():
            events = list(log.read(name))
            assert [e.seq for e in events] == list(range(1, len(ns) + 1)), name
            assert [e.event["n"] for e in events] == ns, name
        figures = log.stats()
    with SqliteStorage.open(path) as storage:
        counter = storage.memory.get(TENANT, "soak", "counter")
        assert counter.value == stores["increments"], (counter.value, stores["increments"])
        for name, digest in stores["artifacts"].items():
            _, data = storage.artifacts.get(TENANT, name)
            assert hashlib.sha256(data).hexdigest() == digest, name
        listed = {info.artifact_id for info in storage.artifacts.list(TENANT)}
        assert listed == set(stores["artifacts"]), listed

    latencies = sorted(v for writer in writers for v in writer["latencies"])
    # Per engine: the C engine waits for another process's lock in short
    # sleeps, the pure one (the standard library's sqlite3) in SQLite's own
    # steps of up to 100 ms, so their tails differ.
    by_engine: dict[str, dict[str, float]] = {}
    for writer in writers:
        mine = sorted(writer["latencies"])
        by_engine[writer["engine"]] = {
            "appends": len(mine),
            "p99_ms": mine[int(0.99 * (len(mine) - 1))] * 1000,
            "max_ms": mine[-1] * 1000,
            "over_100_ms": sum(1 for v in mine if v > 0.1),
        }
    ops = sum(writer["ops"] for writer in writers) + stores["ops"]
    return {
        "seconds": seconds,
        "ops_per_second": ops / seconds,
        "appends": len(latencies),
        "append_p50_ms": statistics.median(latencies) * 1000,
        "append_p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
        "append_max_ms": latencies[-1] * 1000,
        "append_by_engine": by_engine,
        "sessions": len(expected),
        "events": sum(len(ns) for ns in expected.values()),
        "counter": counter.value,
        "counter_conflicts": stores["conflicts"],
        "artifacts": len(stores["artifacts"]),
        "followed": followed["seen"],
        "wal_peak_bytes": max(s["wal_bytes"] for s in samples),
        "wal_final_bytes": figures["wal_bytes"],
        "file_bytes": figures["file_bytes"],
        "free_bytes": figures["free_bytes"],
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--wal-size-limit", type=int, help="bytes (default: agentlog's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = {} if args.wal_size_limit is None else {"wal_size_limit": args.wal_size_limit}
    with tempfile.TemporaryDirectory() as tmp:
        result = soak(args.seconds, Path(tmp), options)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['seconds']:g} s: {result['ops_per_second']:,.0f} ops/s, "
        f"{result['appends']:,} appends (p50 {result['append_p50_ms']:.2f} ms, p99 "
        f"{result['append_p99_ms']:.2f} ms, max {result['append_max_ms']:.1f} ms); "
        f"{result['sessions']} sessions, {result['events']:,} events, counter "
        f"{result['counter']:,} ({result['counter_conflicts']:,} conflicts retried), "
        f"{result['artifacts']} artifacts, {result['followed']:,} events followed"
    )
    for engine, tail in result["append_by_engine"].items():
        print(
            f"  {engine} engine writer: {tail['appends']:,} appends, p99 {tail['p99_ms']:.2f} ms, "
            f"max {tail['max_ms']:.1f} ms, {tail['over_100_ms']:,} over 100 ms"
        )
    print(
        f"WAL peak {result['wal_peak_bytes'] / 2**20:.1f} MiB, final "
        f"{result['wal_final_bytes'] / 2**20:.1f} MiB; file {result['file_bytes'] / 2**20:.1f} "
        f"MiB ({result['free_bytes'] / 2**20:.1f} MiB free, reused by later writes)"
    )
    print("  t (s)   WAL MiB   RSS MiB per process        fds per process")
    step = max(1, len(result["samples"]) // 12)
    for sample in result["samples"][::step]:
        rss = " ".join(f"{kib / 1024:5.0f}" for kib in sample["rss_kib"])
        fds = " ".join(f"{n:3d}" for n in sample["fds"])
        print(f"  {sample['t']:5.0f}   {sample['wal_bytes'] / 2**20:7.1f}   {rss:<26} {fds}")
    print(
        "verified: every session holds exactly its journal, the counter its count, "
        "every artifact its sha256"
    )


if __name__ == "__main__":
    main()
