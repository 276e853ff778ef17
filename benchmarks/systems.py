"""The systems under test, each measured in a fresh process by ``worker``.

A system implements some of: ``append(path, events, sessions, batch, sync)``
(S1, S2, S5 with threads), ``replay(path, count, decode)`` (S3) and
``heads(path)`` (S4). Each returns ``(seconds, operations)`` for the timed part
only. Populating a database for S3/S4 happens in a separate process, so the
timed process's peak RSS is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# -- agentlog ------------------------------------------------------------------------


def agentlog_append(
    engine: str,
    path: str,
    events: list[dict[str, Any]],
    sessions: int,
    batch: int,
    sync: str,
    keyed: bool = False,
) -> tuple[float, int]:
    from agentlog import SqliteCheckpointer

    with SqliteCheckpointer(path, synchronous=sync, engine=engine) as cp:
        heads = [0] * sessions
        start = time.perf_counter()
        for call, i in enumerate(range(0, len(events), batch)):
            slot = call % sessions
            # Keyed: an agent step's id per append (the idempotent path).
            key = f"step-{call:08d}" if keyed else None
            heads[slot] = cp.append(
                f"s{slot}", events[i : i + batch], expected_head=heads[slot], key=key
            )
        return time.perf_counter() - start, len(events)


def agentlog_threads(
    engine: str, path: str, events: list[dict[str, Any]], threads: int, sync: str
) -> tuple[float, int]:
    """S5: ``threads`` threads, one session each, one event per call."""
    from agentlog import SqliteCheckpointer
    from benchmarks.workload import time_threads_appending

    with SqliteCheckpointer(path, synchronous=sync, engine=engine) as cp:
        seconds = time_threads_appending(cp, events, threads)
        return seconds, len(events) // threads * threads


def agentlog_async(
    engine: str, path: str, events: list[dict[str, Any]], coroutines: int, sync: str
) -> tuple[float, int]:
    """S7: ``coroutines`` coroutines on one AsyncSqliteCheckpointer, one session
    each, one event per call (with expected heads)."""
    import asyncio

    from agentlog.aio import AsyncSqliteCheckpointer

    async def main() -> tuple[float, int]:
        async with AsyncSqliteCheckpointer(path, synchronous=sync, engine=engine) as cp:
            share = len(events) // coroutines

            async def writer(slot: int) -> None:
                head = 0
                for event in events[slot * share : (slot + 1) * share]:
                    head = await cp.append(f"a{slot}", [event], expected_head=head)

            start = time.perf_counter()
            await asyncio.gather(*(writer(n) for n in range(coroutines)))
            return time.perf_counter() - start, share * coroutines

    return asyncio.run(main())


def agentlog_replay(engine: str, path: str, count: int, decode: bool) -> tuple[float, int]:
    """S3: every event of ``s0`` into a list the caller keeps, the cyclic
    collector on (as users run it); ``decode`` also reads every payload."""
    import gc

    from agentlog import SqliteCheckpointer

    gc.enable()
    with SqliteCheckpointer(path, engine=engine) as cp:
        start = time.perf_counter()
        kept = list(cp.read("s0"))
        seen = sum(len(event.event) for event in kept) if decode else len(kept)
        elapsed = time.perf_counter() - start
    assert seen > 0 and len(kept) == count
    return elapsed, count


def agentlog_replay_json(engine: str, path: str, count: int) -> tuple[float, int]:
    """S3 through ``read_json``: every event of ``s0`` as a RawEvent (its stored
    JSON bytes, checked, not decoded) into a list the caller keeps, collector on."""
    import gc

    from agentlog import SqliteCheckpointer

    gc.enable()
    with SqliteCheckpointer(path, engine=engine) as cp:
        start = time.perf_counter()
        kept = list(cp.read_json("s0"))
        elapsed = time.perf_counter() - start
    assert len(kept) == count and kept[-1].json
    return elapsed, count


def agentlog_replay_on_heap(engine: str, path: str, count: int, heap: str) -> tuple[float, int]:
    """S3 as a long-running host replays: it holds a large live heap (here the
    workload's own events) and keeps what it replays; the garbage collector
    on (``"gc"``, as a host runs) or off (``"no-gc"``, the bound)."""
    import gc

    from agentlog import SqliteCheckpointer
    from benchmarks.workload import events

    held = events(count)
    with SqliteCheckpointer(path, engine=engine) as cp:
        if heap == "no-gc":
            gc.disable()
        start = time.perf_counter()
        kept = list(cp.read("s0"))
        elapsed = time.perf_counter() - start
        gc.enable()
    assert len(kept) == count and len(held) == count
    return elapsed, count


def agentlog_heads(engine: str, path: str) -> tuple[float, int, float]:
    from agentlog import SqliteCheckpointer

    with SqliteCheckpointer(path, engine=engine) as cp:
        names = [info.id for info in cp.list()]
        start = time.perf_counter()
        for name in names:
            cp.head(name)
        heads = time.perf_counter() - start
        start = time.perf_counter()
        listed = len(cp.list())
        assert listed == len(names)
        return heads, len(names), time.perf_counter() - start


# -- the raw-C baseline ----------------------------------------------------------------


def baseline_binary() -> Path:
    """Compile benchmarks/baseline.c against the embedded SQLite (cached by content)."""
    import hashlib

    sqlite_dir = ROOT / "csrc" / "sqlite"
    source = Path(__file__).with_name("baseline.c")
    header = ROOT / "csrc" / "sqlite_embed.h"
    embedded = (sqlite_dir / "sqlite3.c").exists()
    digest = hashlib.sha256(source.read_bytes() + header.read_bytes() + bytes([embedded]))
    binary = ROOT / ".bench-cache" / f"baseline-{digest.hexdigest()[:16]}"
    if not binary.exists():
        binary.parent.mkdir(exist_ok=True)
        command = [os.environ.get("CC", "cc"), "-O2", "-o", str(binary), str(source)]
        command += ["-I", str(header.parent)]
        if embedded:
            command += ["-DAGENTLOG_EMBEDDED_SQLITE=1", "-I", str(sqlite_dir), "-lpthread", "-lm"]
        else:
            command += ["-lsqlite3"]
        subprocess.run(command, check=True)
    return binary


def write_payloads(path: Path, events: list[dict[str, Any]]) -> None:
    import orjson

    with open(path, "wb") as out:
        for event in events:
            kind = event["type"].encode()
            data = orjson.dumps(event)
            out.write(struct.pack("<I", len(kind)) + kind + struct.pack("<I", len(data)) + data)


def raw_c(*args: str) -> tuple[float, int]:
    seconds, count, _ = raw_c_with_list(*args)
    return seconds, count


def raw_c_with_list(*args: str) -> tuple[float, int, float]:
    """Run the baseline; (seconds, operations, seconds its list() took)."""
    import json

    run = subprocess.run(
        [str(baseline_binary()), *args], check=True, capture_output=True, text=True
    )
    result = json.loads(run.stdout)
    return float(result["seconds"]), int(result["count"]), float(result["list_seconds"])


def raw_c_append(
    path: str, events: list[dict[str, Any]], sessions: int, batch: int, sync: str
) -> tuple[float, int]:
    return _raw_c_writing(path, events, "append", str(sessions), str(batch), sync.upper())


def raw_c_groups(
    path: str, events: list[dict[str, Any]], writers: int, sync: str
) -> tuple[float, int]:
    """S5/S7's floor: ``writers`` sessions, each transaction one event for each
    (what a writer commits for that many callers, with no Python and no waiting)."""
    return _raw_c_writing(path, events, "groups", str(writers), sync.upper())


def _raw_c_writing(path: str, events: list[dict[str, Any]], *args: str) -> tuple[float, int]:
    from agentlog import SqliteCheckpointer

    SqliteCheckpointer(path).close()  # the schema, exactly as agentlog writes it
    payloads = Path(path + ".payloads")
    write_payloads(payloads, events)
    return raw_c(path, str(payloads), *args)


def raw_c_min_append(
    path: str, events: list[dict[str, Any]], sessions: int, batch: int, sync: str
) -> tuple[float, int]:
    """The second floor: the same appends on the minimal schema (one WITHOUT
    ROWID events table, nothing else), which the baseline creates itself."""
    payloads = Path(path + ".payloads")
    write_payloads(payloads, events)
    return raw_c(path, str(payloads), "min-append", str(sessions), str(batch), sync.upper())


def populate_minimal(path: str, count: int) -> None:
    """A minimal-schema database holding session ``s0``'s ``count`` workload
    events (what the hand-written replays read), written by the baseline."""
    from benchmarks.workload import events

    raw_c_min_append(path, events(count), 1, 1000, "NORMAL")


# -- hand-written scripts on the minimal schema: what a user could write -----------------

#: The hand-written scripts, each with the module it needs (None: the stdlib's).
SCRIPTS = {"apsw-orjson": "apsw", "sqlite3-msgspec": "msgspec", "sqlite3-bytes": None}

#: The scripts' schema and statements: the minimal schema of benchmarks/baseline.c.
MIN_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events (session TEXT NOT NULL, seq INTEGER NOT NULL,"
    " ts REAL NOT NULL, type TEXT NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY (session, seq)) WITHOUT ROWID"
)
MIN_INSERT = "INSERT INTO events (session, seq, ts, type, data) VALUES (?, ?, ?, ?, ?)"
MIN_SCAN = "SELECT seq, ts, type, data FROM events WHERE session = ? ORDER BY seq"


def _script_codec(system: str) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    if system == "apsw-orjson":
        import orjson

        return orjson.dumps, orjson.loads
    import msgspec

    return msgspec.json.encode, msgspec.json.decode


def _script_connection(system: str, path: str, sync: str) -> Any:
    if system == "apsw-orjson":
        import apsw

        conn: Any = apsw.Connection(path)
    else:
        import sqlite3

        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync.upper()}")
    return conn


def script_append(
    system: str, path: str, events: list[dict[str, Any]], sessions: int, batch: int, sync: str
) -> tuple[float, int]:
    """S1/S2 as a short script would: encode each event, insert the call's
    events into the minimal schema in one ``BEGIN IMMEDIATE`` transaction."""
    dumps, _ = _script_codec(system)
    conn = _script_connection(system, path, sync)
    conn.execute(MIN_SCHEMA)
    heads = [0] * sessions
    names = [f"s{n}" for n in range(sessions)]
    start = time.perf_counter()
    for call, i in enumerate(range(0, len(events), batch)):
        slot = call % sessions
        ts = time.time()
        rows = []
        for event in events[i : i + batch]:
            heads[slot] += 1
            rows.append((names[slot], heads[slot], ts, event["type"], dumps(event)))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(MIN_INSERT, rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed, len(events)


def script_replay(system: str, path: str, count: int, decode: bool) -> tuple[float, int]:
    """S3 as a short script would: one query, each row a tuple
    ``(seq, ts, type, event)`` with the event decoded (``sqlite3-bytes``:
    the payload left as bytes, no JSON at all), kept in a list, collector on."""
    import gc

    gc.enable()
    loads = None if system == "sqlite3-bytes" else _script_codec(system)[1]
    conn = _script_connection("sqlite3" if loads is None else system, path, "normal")
    start = time.perf_counter()
    if loads is None:
        kept = conn.execute(MIN_SCAN, ("s0",)).fetchall()
        seen = sum(len(row[3]) for row in kept) if decode else len(kept)
    else:
        kept = [
            (seq, ts, kind, loads(data)) for seq, ts, kind, data in conn.execute(MIN_SCAN, ("s0",))
        ]
        seen = sum(len(row[3]) for row in kept) if decode else len(kept)
    elapsed = time.perf_counter() - start
    conn.close()
    assert seen > 0 and len(kept) == count
    return elapsed, count


# -- peers, when installed ---------------------------------------------------------------


def openai_append(
    path: str, events: list[dict[str, Any]], sessions: int, batch: int, sync: str
) -> tuple[float, int]:
    from agents.memory import SQLiteSession

    stores = [SQLiteSession(f"s{n}", path) for n in range(sessions)]
    items = [{"role": "user", "content": str(e)} for e in events]

    async def main() -> float:
        start = time.perf_counter()
        for call, i in enumerate(range(0, len(items), batch)):
            await stores[call % sessions].add_items(items[i : i + batch])
        return time.perf_counter() - start

    elapsed = asyncio.run(main())
    for store in stores:
        store.close()
    return elapsed, len(events)


def openai_replay(path: str, count: int, decode: bool) -> tuple[float, int]:
    from agents.memory import SQLiteSession

    store = SQLiteSession("s0", path)

    async def main() -> float:
        start = time.perf_counter()
        items = await store.get_items()
        assert len(items) == count
        return time.perf_counter() - start

    elapsed = asyncio.run(main())
    store.close()
    return elapsed, count


def langgraph_append(
    path: str, events: list[dict[str, Any]], sessions: int, batch: int, sync: str
) -> tuple[float, int]:
    """One checkpoint per step, holding the whole message list (LangGraph's model)."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from benchmarks.workload import time_langgraph_steps

    conn = sqlite3.connect(path, check_same_thread=False)
    elapsed = time_langgraph_steps(SqliteSaver(conn), events, batch)
    conn.close()
    return elapsed, len(events)


def eventsourcing_append(
    path: str, events: list[dict[str, Any]], sessions: int, batch: int, sync: str
) -> tuple[float, int]:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Conversation(Aggregate):
        @event("Appended")
        def append(self, body: dict[str, Any]) -> None:
            pass

    app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": path})
    conversations = [Conversation() for _ in range(sessions)]
    for conversation in conversations:
        app.save(conversation)
    start = time.perf_counter()
    for call, i in enumerate(range(0, len(events), batch)):
        conversation = conversations[call % sessions]
        for body in events[i : i + batch]:
            conversation.append(body)
        app.save(conversation)
    return time.perf_counter() - start, len(events)


def installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# -- the SessionStore -------------------------------------------------------------------


def sessionstore_run(
    engine: str, path: str, events: list[dict[str, Any]], batch: int
) -> dict[str, float]:
    """Events/s of SessionStore append (``batch`` per call), load, compact, load after it."""
    from agentlog import SqliteStorage

    items = [dict(event, id=f"i{n}") for n, event in enumerate(events)]
    with SqliteStorage.open(path, engine=engine) as storage:
        sessions = storage.sessions
        record = sessions.create("bench", "s")
        start = time.perf_counter()
        for i in range(0, len(items), batch):
            record = sessions.append("bench", "s", record.revision, items[i : i + batch])
        append = time.perf_counter() - start
        start = time.perf_counter()
        loaded = sessions.load("bench", "s")
        load = time.perf_counter() - start
        assert len(loaded.items) == len(items)
        through = len(items) * 9 // 10
        start = time.perf_counter()
        record = sessions.compact("bench", "s", record.revision, through, {"summary": "x" * 2000})
        compact = time.perf_counter() - start
        start = time.perf_counter()
        after = sessions.load("bench", "s")
        load_after = time.perf_counter() - start
        assert after.snapshot is not None and len(after.items) == len(items) - through
    count = len(items)
    return {
        "append": count / append,
        "load": count / load,
        "compact_ms": compact * 1000,
        "load_after_snapshot": (count - through) / load_after,
    }


def adapter_main(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    quick_help: str,
    missing: str | None,
    rows: Callable[[bool, int | None], list[dict[str, Any]]],
    table: Callable[[list[dict[str, Any]]], str],
) -> None:
    """An adapter benchmark's command line: ``--quick``, ``--rounds N``, ``--json FILE``.

    ``missing`` (when the framework's own store is not installed) is said on
    stderr; the rows are printed as ``table`` and, with ``--json``, written.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--rounds", type=int, help="rounds per measurement (median)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if missing is not None:
        print(missing, file=sys.stderr)
    results = rows(args.quick, args.rounds)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
