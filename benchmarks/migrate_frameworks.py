"""``agentlog migrate`` from the frameworks' own stores: import rate and size.

    python -m benchmarks.migrate_frameworks [--quick] [--sessions N] [--items N]
        [--conninfo DSN] [--json FILE]

For each source — the OpenAI Agents SDK's ``SQLiteSession``, LangGraph's
``SqliteSaver`` and (with ``--conninfo``, a PostgreSQL server to write a
schema of its own into) ``PostgresSaver``, Google ADK's
``DatabaseSessionService`` — the framework's own API writes N sessions of M
items each (a message, a checkpoint, an event; ~400 bytes of text each),
then one ``migrate`` into a new agentlog SQLite file is timed (its plan, its
backup and its one write transaction), and the dry run before it. The rows
say sessions/s and items/s of the migration, and the size of the source (the
file, or the saver's tables with their indexes) beside the agentlog file's.
Default: 1,000 sessions x 100 items; ``--quick``: 20 x 10.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from benchmarks.systems import installed
from benchmarks.workload import WORDS

#: Each source: the module its framework's store needs.
SOURCES = {
    "openai-sqlite": "agents",
    "langgraph-sqlite": "langgraph.checkpoint.sqlite",
    "langgraph-postgres": "langgraph.checkpoint.postgres",
    "adk-database": "google.adk.sessions",
}
SCHEMA = "bench_langgraph_source"


def _texts(count: int, seed: int = 20261201) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 80))) for _ in range(count)]


def write_openai(path: Path, sessions: int, items: int) -> None:
    from agents import SQLiteSession

    texts = _texts(items)

    async def write() -> None:
        for n in range(sessions):
            with closing(SQLiteSession(f"s-{n}", path)) as session:
                await session.add_items(
                    [
                        {"role": "user" if i % 2 else "assistant", "content": t}
                        for i, t in enumerate(texts)
                    ]
                )

    asyncio.run(write())


def _put_threads(saver: Any, sessions: int, items: int) -> None:
    """``items`` checkpoints a thread, each a new value of one channel, put
    with the saver's own ``put`` as a graph's steps put them."""
    from langgraph.checkpoint.base import empty_checkpoint

    texts = _texts(items)
    for n in range(sessions):
        config: Any = {"configurable": {"thread_id": f"t-{n}", "checkpoint_ns": ""}}
        version = None
        for step, text in enumerate(texts):
            version = saver.get_next_version(version, None)
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"item": {"step": step, "text": text}}
            checkpoint["channel_versions"] = {"item": version}
            metadata: Any = {"source": "loop", "step": step, "parents": {}}
            config = saver.put(config, checkpoint, metadata, {"item": version})


def write_langgraph_sqlite(path: Path, sessions: int, items: int) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        _put_threads(SqliteSaver(conn), sessions, items)


def postgres_source(conninfo: str) -> str:
    """A URL of a fresh schema of its own on the server ``conninfo`` names."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
    return make_conninfo(**{**conninfo_to_dict(conninfo), "options": f"-csearch_path={SCHEMA}"})


def write_langgraph_postgres(url: str, sessions: int, items: int) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        _put_threads(saver, sessions, items)


def postgres_size(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (SCHEMA,),
        ).fetchone()
    return int(row[0]) if row and row[0] else 0


def write_adk(path: Path, sessions: int, items: int) -> None:
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    texts = _texts(items)

    async def write() -> None:
        service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
        try:
            for n in range(sessions):
                session = await service.create_session(
                    app_name="bench", user_id=f"u-{n % 10}", session_id=f"s-{n}"
                )
                for i, text in enumerate(texts):
                    author = "user" if i % 2 == 0 else "helper"
                    content = types.Content(
                        role="user" if author == "user" else "model", parts=[types.Part(text=text)]
                    )
                    event = Event(author=author, invocation_id=f"i-{n}-{i // 2}", content=content)
                    await service.append_event(session, event)
        finally:
            await service.close()

    asyncio.run(write())


def measure(
    kind: str, sessions: int, items: int, conninfo: str | None, work: Path
) -> dict[str, Any]:
    """Write the source with its framework, then time a dry run and a migration."""
    from agentlog.migrate import migrate

    target = work / f"{kind}.agentlog.db"
    source: str | Path
    if kind == "langgraph-postgres":
        assert conninfo is not None
        source = postgres_source(conninfo)
        write_langgraph_postgres(source, sessions, items)
    else:
        source = work / f"{kind}.db"
        writers: dict[str, Callable[[Path, int, int], None]] = {
            "openai-sqlite": write_openai,
            "langgraph-sqlite": write_langgraph_sqlite,
            "adk-database": write_adk,
        }
        writers[kind](source, sessions, items)
    started = time.perf_counter()
    plan = migrate(source, target, dry_run=True)
    planned = time.perf_counter() - started
    started = time.perf_counter()
    report = migrate(source, target)
    seconds = time.perf_counter() - started
    units = len(report.sessions)
    assert report.migrated == units == len(plan.sessions), (kind, report.migrated, units)
    return {
        "source": kind,
        "sessions": sessions,
        "items": sessions * items,
        "units": units,
        "dry_run_s": planned,
        "migrate_s": seconds,
        "sessions_per_s": sessions / seconds,
        "items_per_s": sessions * items / seconds,
        "source_bytes": (
            postgres_size(source) if isinstance(source, str) else source.stat().st_size
        ),
        "agentlog_bytes": target.stat().st_size,
    }


def rows(
    sessions: int, items: int, conninfo: str | None, sources: list[str] | None = None
) -> list[dict[str, Any]]:
    """One row per source (of ``sources``, default all) whose framework is
    installed (PostgreSQL: with a server)."""
    found = []
    with tempfile.TemporaryDirectory(prefix="agentlog-migrate-bench-") as work:
        for kind in sources or list(SOURCES):
            module = SOURCES[kind]
            if not installed(module):
                print(f"{kind}: {module} is not installed: skipped", file=sys.stderr)
                continue
            if kind == "langgraph-postgres" and conninfo is None:
                print(f"{kind}: no --conninfo: skipped", file=sys.stderr)
                continue
            found.append(measure(kind, sessions, items, conninfo, Path(work)))
            print(table(found[-1:]).splitlines()[-1], file=sys.stderr, flush=True)  # as it goes
    return found


#: The table's columns: heading, width and how a row's value is shown.
COLUMNS: tuple[tuple[str, int, Callable[[dict[str, Any]], str]], ...] = (
    ("source", -20, lambda r: r["source"]),
    ("sessions", 9, lambda r: f"{r['sessions']:,}"),
    ("items", 9, lambda r: f"{r['items']:,}"),
    ("dry run s", 11, lambda r: f"{r['dry_run_s']:.2f}"),
    ("migrate s", 11, lambda r: f"{r['migrate_s']:.2f}"),
    ("sessions/s", 12, lambda r: f"{r['sessions_per_s']:,.0f}"),
    ("items/s", 10, lambda r: f"{r['items_per_s']:,.0f}"),
    ("source MiB", 12, lambda r: f"{r['source_bytes'] / 2**20:.1f}"),
    ("agentlog MiB", 14, lambda r: f"{r['agentlog_bytes'] / 2**20:.1f}"),
)


def table(results: list[dict[str, Any]]) -> str:
    """The rows as a text table."""
    head = "".join(
        f"{name:>{width}}" if width > 0 else f"{name:<{-width}}" for name, width, _ in COLUMNS
    )
    lines = [head, "-" * len(head)]
    for r in results:
        cells = ((show(r), width) for _, width, show in COLUMNS)
        lines.append("".join(f"{c:>{w}}" if w > 0 else f"{c:<{-w}}" for c, w in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """The command line: write each source, migrate it, print the table (and JSON)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.migrate_frameworks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="20 sessions x 10 items")
    parser.add_argument("--sessions", type=int, help="sessions per source (default 1,000)")
    parser.add_argument("--items", type=int, help="items per session (default 100)")
    parser.add_argument("--conninfo", help="a PostgreSQL server for the PostgresSaver source")
    parser.add_argument(
        "--sources", help=f"the sources to run, comma-separated (default: {','.join(SOURCES)})"
    )
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    sessions = args.sessions or (20 if args.quick else 1_000)
    items = args.items or (10 if args.quick else 100)
    conninfo = args.conninfo or os.environ.get("AGENTLOG_TEST_POSTGRES")
    chosen = args.sources.split(",") if args.sources else list(SOURCES)
    unknown = sorted(set(chosen) - set(SOURCES))
    if unknown:
        parser.error(f"unknown source {unknown[0]!r} (known: {', '.join(SOURCES)})")
    results = rows(sessions, items, conninfo, chosen)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
