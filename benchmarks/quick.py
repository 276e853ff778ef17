"""A small measurement of the SQLite backend at 10k events: S1, S2, S3.

    python benchmarks/quick.py [--events 10000] [--rounds 3]

S1 appends one event per call, S2 appends 100 events per call, S3 replays the
whole session to StoredEvent objects (payloads decoded). Beside each figure
stands the same SQL issued straight through the standard library's sqlite3
(no validation, no encoding, no objects; S3 decodes each payload with orjson),
measured in the same run, so the ratio says what agentlog's layer costs. Medians of --rounds rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import orjson

from agentlog import SqliteCheckpointer, engine_info
from agentlog._schema import CREATE_SCHEMA


def workload(count: int, seed: int = 1) -> list[dict[str, Any]]:
    """~500-byte agent events of mixed types, the same for a given seed."""
    rng = random.Random(seed)
    kinds = ["user", "assistant", "tool_started", "tool_result"]
    events = []
    for i in range(count):
        kind = kinds[i % 4]
        text = "".join(
            rng.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(rng.randint(250, 450))
        )
        events.append(
            {
                "type": kind,
                "content": [{"type": "text", "text": text}],
                "tool_use_id": f"toolu_{i:08d}",
                "meta": {"tokens": rng.randint(1, 4000), "model": "model-1", "ok": True},
            }
        )
    return events


def agentlog_run(path: str, events: list[dict[str, Any]], batch: int) -> tuple[float, float]:
    with SqliteCheckpointer(path) as cp:
        start = time.perf_counter()
        head = 0
        for i in range(0, len(events), batch):
            head = cp.append("bench", events[i : i + batch], expected_head=head)
        appended = time.perf_counter() - start
        start = time.perf_counter()
        replayed = sum(1 for _ in cp.read("bench"))
        replay = time.perf_counter() - start
    assert replayed == len(events)
    return len(events) / appended, len(events) / replay


def raw_run(path: str, events: list[dict[str, Any]], batch: int) -> tuple[float, float]:
    """The same transactions and statements, without agentlog in between."""
    payloads = [orjson.dumps(e) for e in events]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    for statement in CREATE_SCHEMA:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO sessions (tenant, name, head, created, mtime)"
        " VALUES ('default', 'bench', 0, 0, 0)"
    )
    start = time.perf_counter()
    for i in range(0, len(events), batch):
        conn.execute("BEGIN IMMEDIATE")
        sid, head = conn.execute(
            "SELECT sid, head FROM sessions WHERE tenant = 'default' AND name = 'bench'"
        ).fetchone()
        rows = [
            ((sid << 32) + head + j + 1, 1.0, events[i + j]["type"], payloads[i + j])
            for j in range(min(batch, len(events) - i))
        ]
        conn.executemany("INSERT INTO events (id, ts, type, data) VALUES (?, ?, ?, ?)", rows)
        conn.execute(
            "UPDATE sessions SET head = ?, mtime = ? WHERE sid = ?", (head + len(rows), 1.0, sid)
        )
        conn.execute("COMMIT")
    appended = time.perf_counter() - start
    start = time.perf_counter()
    loads = orjson.loads
    decoded = [
        loads(row[3]) for row in conn.execute("SELECT id, ts, type, data FROM events ORDER BY id")
    ]
    assert len(decoded) == len(events)
    replay = time.perf_counter() - start
    conn.close()
    return len(events) / appended, len(events) / replay


def median_of(rounds: int, run: Callable[[str], tuple[float, float]]) -> tuple[float, float]:
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            results.append(run(os.path.join(tmp, "bench.db")))
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    events = workload(args.events)
    info = engine_info()
    size = sum(len(orjson.dumps(e)) for e in events) / len(events)
    print(
        f"engine {info['engine']}, SQLite {info['sqlite_version']}, {args.events} events"
        f" of ~{size:.0f} bytes, median of {args.rounds}"
    )
    print(f"{'scenario':<28}{'agentlog':>14}{'raw sqlite3':>14}{'ratio':>8}")
    s1_a, s3_a = median_of(args.rounds, lambda p: agentlog_run(p, events, 1))
    s1_r, s3_r = median_of(args.rounds, lambda p: raw_run(p, events, 1))
    s2_a, _ = median_of(args.rounds, lambda p: agentlog_run(p, events, 100))
    s2_r, _ = median_of(args.rounds, lambda p: raw_run(p, events, 100))
    for name, ours, raw in [
        ("S1 append 1/call (ev/s)", s1_a, s1_r),
        ("S2 append 100/call (ev/s)", s2_a, s2_r),
        ("S3 replay, decoded (ev/s)", s3_a, s3_r),
    ]:
        print(f"{name:<28}{ours:>14,.0f}{raw:>14,.0f}{ours / raw:>8.2f}")


if __name__ == "__main__":
    main()
