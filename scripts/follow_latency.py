"""Commit -> delivery latency of ``follow()``, in-process and cross-process.

    python scripts/follow_latency.py [--events N] [--gap SECONDS] [--postgres CONNINFO|start]

Each event carries the monotonic clock (system-wide on Linux, so comparable
between processes) read just before its ``append``; the follower subtracts
it from the clock when the event reaches it. So a figure includes the append
itself (tens of µs), then the wake-up (in-process: the commit signal) or the
next look (cross-process: ``PRAGMA data_version`` / the file's stat every
``poll_interval``; PostgreSQL: the ``NOTIFY`` its commit sends). Writes are
spaced by ``--gap`` so that the follower is idle, waiting, before each one:
the case that measures a wake-up. ``--postgres`` adds PostgreSQL: a
connection string, or ``start`` for a throwaway server of the tests'
(``tests/postgres_server.py``, from a checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agentlog import BaseCheckpointer, FileCheckpointer, SqliteCheckpointer
from agentlog.aio import AsyncBaseCheckpointer, AsyncFileCheckpointer, AsyncSqliteCheckpointer
from agentlog.engine import AVAILABLE_ENGINES
from agentlog.log import DEFAULT_POLL_INTERVAL, MemoryCheckpointer

CHILD = """
import os, sys, time
from agentlog import FileCheckpointer, SqliteCheckpointer
kind, location, count, gap = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
if kind.startswith("postgres"):
    from agentlog import PostgresCheckpointer
    notify = kind == "postgres"
    log = PostgresCheckpointer(
        os.environ["AGENTLOG_LATENCY_POSTGRES"], schema=location, notify=notify
    )
elif kind == "file":
    log = FileCheckpointer(location)
else:
    log = SqliteCheckpointer(location, engine=kind)
with log:
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(count):
        time.sleep(gap)
        log.append("s", [{"type": "user", "content": repr(time.monotonic_ns())}])
"""


def now() -> int:
    return time.monotonic_ns()


def summary(name: str, latencies_ns: list[int]) -> str:
    ms = sorted(value / 1e6 for value in latencies_ns)
    p99 = ms[min(len(ms) - 1, round(0.99 * len(ms)) - 1)]
    return (
        f"{name:<44} n={len(ms):<5} p50={statistics.median(ms):7.3f} ms"
        f"  p99={p99:7.3f} ms  max={ms[-1]:7.3f} ms"
    )


def in_process_sync(log: BaseCheckpointer, count: int, gap: float) -> list[int]:
    def write() -> None:
        for _ in range(count):
            time.sleep(gap)
            log.append("s", [{"type": "user", "content": repr(now())}])

    writer = threading.Thread(target=write)
    writer.start()
    latencies = []
    for event in log.follow("s"):
        latencies.append(now() - int(event.event["content"]))
        if len(latencies) == count:
            break
    writer.join()
    return latencies


def in_process_async(
    make: type[AsyncBaseCheckpointer], location: str, count: int, gap: float
) -> list[int]:
    async def main() -> list[int]:
        async with make(location) as log:  # type: ignore[call-arg]

            async def write() -> None:
                for _ in range(count):
                    await asyncio.sleep(gap)
                    await log.append("s", [{"type": "user", "content": repr(now())}])

            writer = asyncio.create_task(write())
            latencies = []
            follower = log.follow("s")
            async for event in follower:
                latencies.append(now() - int(event.event["content"]))
                if len(latencies) == count:
                    break
            await follower.aclose()  # type: ignore[attr-defined]
            await writer
            return latencies

    return asyncio.run(main())


def cross_process(kind: str, location: str, count: int, gap: float) -> list[int]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, kind, location, str(count), str(gap)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "ready"
    log: BaseCheckpointer
    if kind.startswith("postgres"):
        from agentlog import PostgresCheckpointer

        log = PostgresCheckpointer(
            os.environ["AGENTLOG_LATENCY_POSTGRES"], schema=location, notify=kind == "postgres"
        )
    elif kind == "file":
        log = FileCheckpointer(location, read_only=True)
    else:
        log = SqliteCheckpointer(location, engine=kind)
    latencies = []
    with log:
        follower = log.follow("s")
        child.stdin.write("go\n")
        child.stdin.flush()
        for event in follower:
            latencies.append(now() - int(event.event["content"]))
            if len(latencies) == count:
                break
    assert child.wait() == 0
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--gap", type=float, default=0.003, help="seconds between appends")
    parser.add_argument(
        "--postgres", help="a PostgreSQL connection string, or 'start' for a throwaway server"
    )
    parser.add_argument("--only-postgres", action="store_true", help="skip the other backends")
    args = parser.parse_args()
    count, gap = args.events, args.gap
    print(f"{count} events, one every {gap * 1000:g} ms; poll_interval {DEFAULT_POLL_INTERVAL} s")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    if not args.only_postgres:
        others(count, gap)
    if args.postgres:
        postgres(args.postgres, count, gap)


def others(count: int, gap: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("-- in-process (commit signal)")
        with MemoryCheckpointer() as memory:
            print(summary("sync memory", in_process_sync(memory, count, gap)))
        for engine in AVAILABLE_ENGINES:
            with SqliteCheckpointer(root / f"sync-{engine}.db", engine=engine) as log:
                print(summary(f"sync sqlite ({engine} engine)", in_process_sync(log, count, gap)))
        with FileCheckpointer(root / "sync-files") as files:
            print(summary("sync file", in_process_sync(files, count, gap)))
        print(
            summary(
                "async sqlite (writer thread -> loop)",
                in_process_async(AsyncSqliteCheckpointer, str(root / "async.db"), count, gap),
            )
        )
        print(
            summary(
                "async file (writer thread -> loop)",
                in_process_async(AsyncFileCheckpointer, str(root / "async-files"), count, gap),
            )
        )
        print("-- cross-process (polling)")
        for engine in AVAILABLE_ENGINES:
            latencies = cross_process(engine, str(root / f"cross-{engine}.db"), count, gap)
            print(summary(f"sqlite ({engine} engine), data_version", latencies))
        FileCheckpointer(root / "cross-files").close()
        latencies = cross_process("file", str(root / "cross-files"), count, gap)
        print(summary("file (read-only follower), stat", latencies))


def postgres(target: str, count: int, gap: float) -> None:
    """The PostgreSQL rows: a server named by ``target``, or one started here."""
    server = None
    if target == "start":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.postgres_server import PostgresServer

        server = PostgresServer().start()
        target = server.conninfo
    os.environ["AGENTLOG_LATENCY_POSTGRES"] = target
    from agentlog import PostgresCheckpointer
    from agentlog.aio import AsyncPostgresCheckpointer

    try:
        print("-- PostgreSQL (loopback)" if server else "-- PostgreSQL")
        with PostgresCheckpointer(target, schema="latency_sync") as log:
            log.delete("s")
            print(summary("sync postgres (commit signal)", in_process_sync(log, count, gap)))

        def make_async(schema: str) -> AsyncPostgresCheckpointer:
            return AsyncPostgresCheckpointer(target, schema=schema)

        PostgresCheckpointer(target, schema="latency_async").close()
        print(
            summary(
                "async postgres (native, woken on the loop)",
                in_process_async(make_async, "latency_async", count, gap),
            )
        )
        with PostgresCheckpointer(target, schema="latency_cross") as log:
            log.delete("s")
        latencies = cross_process("postgres", "latency_cross", count, gap)
        print(summary("postgres cross-process, LISTEN/NOTIFY", latencies))
        with PostgresCheckpointer(target, schema="latency_poll", notify=False) as log:
            log.delete("s")
        latencies = cross_process("postgres-poll", "latency_poll", count, gap)
        print(summary("postgres cross-process, polling the head", latencies))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
