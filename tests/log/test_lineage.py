"""Fork lineage where each backend keeps it: the schema steps that add it (SQLite
11 -> 12, PostgreSQL 5 -> 6), old files read-only, the file store's header,
and both SQLite engines on one file. The contract itself is the conformance
suite's (agentlog.testing.lineage), run by every backend."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentlog import CorruptDatabaseError, FileCheckpointer, Fork, ForkOrigin, SqliteCheckpointer
from agentlog.aio import AsyncSqliteCheckpointer
from agentlog.engine.schema import SCHEMA_VERSION

from ..conftest import postgres_schema, require_engine, undo_postgres_version_7
from ..engine.test_schema import digest, make_old_file

EVENT = {"type": "user", "content": "hi"}


def test_a_version_11_file_is_brought_forward_and_its_old_sessions_have_no_lineage(
    tmp_path: Path, engine: str
) -> None:
    db = tmp_path / "v11.db"
    make_old_file(db, 11)
    with SqliteCheckpointer(db, engine=engine) as log:
        assert log.lineage("old") is None  # made before lineage: absent, never guessed
        assert log.forks("old") == []
        log.fork("old", 1, "new")
        assert log.lineage("new") == ForkOrigin("old", 1)
        assert log.forks("old") == [Fork("new", 1)]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        rows = conn.execute("SELECT tenant, source, seq FROM fork_origins").fetchall()
        assert rows == [("default", "old", 1)]
    finally:
        conn.close()


@pytest.mark.parametrize("version", [1, 9, 11])
def test_an_older_file_opened_read_only_has_no_lineage_and_is_left_as_it_is(
    tmp_path: Path, engine: str, version: int
) -> None:
    db = tmp_path / f"v{version}.db"
    make_old_file(db, version)
    before = digest(db)
    with SqliteCheckpointer(db, engine=engine, read_only=True) as log:
        assert log.lineage("old") is None
        assert log.forks("old") == []
    assert digest(db) == before


def test_both_engines_read_each_other_s_lineage(tmp_path: Path) -> None:
    require_engine("c")  # (a skip where it is turned off, as in the pure pass)
    db = tmp_path / "shared.db"
    with SqliteCheckpointer(db, engine="c") as log:
        log.append("src", [EVENT, EVENT])
        log.fork("src", 1, "by-c")
    with SqliteCheckpointer(db, engine="python") as log:
        assert log.lineage("by-c") == ForkOrigin("src", 1)
        log.fork("by-c", 1, "by-python")
    with SqliteCheckpointer(db, engine="c") as log:
        assert log.lineage("by-python") == ForkOrigin("by-c", 1)
        assert log.forks("src") == [Fork("by-c", 1)]


def test_idle_retention_deletes_a_fork_with_its_record(tmp_path: Path, engine: str) -> None:
    with SqliteCheckpointer(tmp_path / "gc.db", engine=engine) as log:
        log.append("src", [EVENT])
        log.fork("src", 1, "copy")
        assert sorted(log.delete_idle(0)) == ["copy", "src"]
        log.append("copy", [EVENT])  # a new session under the old id
        assert log.lineage("copy") is None
        assert log.forks("src") == []


def test_a_copy_of_a_file_store_keeps_its_lineage(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path / "store") as log:
        log.append("src", [EVENT, EVENT])
        log.fork("src", 1, "copy")
        log.truncate("copy", 0)  # the header, and with it the origin, stays
    shutil.copytree(tmp_path / "store", tmp_path / "copied")
    with FileCheckpointer(tmp_path / "copied", read_only=True) as log:
        assert log.lineage("copy") == ForkOrigin("src", 1)
        assert log.forks("src") == [Fork("copy", 1)]


def test_a_damaged_origin_in_a_file_store_header_is_named(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as log:
        log.append("src", [EVENT])
        log.fork("src", 1, "copy")
    path = next(p for p in tmp_path.glob("copy.*.jsonl"))
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"seq":1}', b'"seq":"one"}', 1))
    with FileCheckpointer(tmp_path) as log:
        with pytest.raises(CorruptDatabaseError, match="fork origin"):
            log.lineage("copy")
        assert [e.seq for e in log.read("copy")] == [1]  # the events still read
        assert log.forks("src") == []  # the damaged one cannot be placed
        ok, detail = log.check_integrity()
        assert not ok and "fork origin" in detail


def test_the_async_twin_and_the_handles_read_lineage(tmp_path: Path) -> None:
    import asyncio

    db = tmp_path / "aio.db"
    with SqliteCheckpointer(db) as log:
        log.append("src", [EVENT, EVENT])
        log.fork("src", 2, "copy")
        assert log.session("copy").lineage() == ForkOrigin("src", 2)
        assert log.session("src").forks() == [Fork("copy", 2)]

    async def main() -> None:
        async with AsyncSqliteCheckpointer(db) as log:
            assert await log.lineage("copy") == ForkOrigin("src", 2)
            assert await log.forks("src") == [Fork("copy", 2)]
            handle = await log.session("copy")
            assert await handle.lineage() == ForkOrigin("src", 2)
            assert await handle.forks() == []

    asyncio.run(main())


def _version_5_store(postgres_server: str, tmp_path: Path) -> str:
    """The schema of a PostgreSQL store made as version 5 wrote it (one
    session, "old"): version 6's lineage table dropped, the version set back."""
    import psycopg

    from agentlog import PostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(postgres_server, schema=schema) as log:
        log.append("old", [EVENT])
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        undo_postgres_version_7(conn, schema)
        conn.execute(f"DROP TABLE {schema}.fork_origins")  # what version 6 adds
        conn.execute(f"UPDATE {schema}.agentlog_version SET version = 5")
    return schema


def _version_of(postgres_server: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        row: Any = conn.execute(f"SELECT version FROM {schema}.agentlog_version").fetchone()
        return int(row[0])


def test_a_version_5_postgres_store_is_brought_forward(
    postgres_server: str, tmp_path: Path
) -> None:
    from agentlog import PostgresCheckpointer
    from agentlog.engine.postgres.schema import SCHEMA_VERSION as PG_VERSION

    schema = _version_5_store(postgres_server, tmp_path)
    with PostgresCheckpointer(postgres_server, schema=schema) as log:
        assert log.lineage("old") is None
        log.fork("old", 1, "new")
        assert log.lineage("new") == ForkOrigin("old", 1)
        assert log.forks("old") == [Fork("new", 1)]
    assert _version_of(postgres_server, schema) == PG_VERSION


def test_a_version_5_postgres_store_read_only_has_no_lineage(
    postgres_server: str, tmp_path: Path
) -> None:
    # What agentlog serve opens by default: nothing is brought forward, and a
    # store without the lineage table reads as one with no lineage.
    from agentlog import PostgresCheckpointer

    schema = _version_5_store(postgres_server, tmp_path)
    with PostgresCheckpointer(postgres_server, schema=schema, read_only=True) as log:
        assert log.lineage("old") is None
        assert log.forks("old") == []
        assert [e.seq for e in log.read("old")] == [1]
    assert _version_of(postgres_server, schema) == 5


def test_postgres_idle_retention_deletes_a_fork_with_its_record(
    postgres_server: str, tmp_path: Path
) -> None:
    from agentlog import PostgresCheckpointer

    with PostgresCheckpointer(postgres_server, schema=postgres_schema(tmp_path)) as log:
        log.append("src", [EVENT])
        log.fork("src", 1, "copy")
        assert sorted(log.delete_idle(0)) == ["copy", "src"]
        log.append("copy", [EVENT])
        assert log.lineage("copy") is None
        assert log.forks("src") == []


def test_a_record_an_older_version_left_behind_is_taken_by_the_next_fork(
    tmp_path: Path, engine: str
) -> None:
    # A process of version 11, still running after another upgraded the
    # file, deletes a fork without its record; SQLite then gives the next
    # session the same sid, whose fork must take the row over.
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db, engine=engine) as log:
        log.append("src", [EVENT])
        log.fork("src", 1, "gone")
    conn = sqlite3.connect(db)
    with conn:
        (sid,) = conn.execute("SELECT sid FROM sessions WHERE name = 'gone'").fetchone()
        conn.execute("DELETE FROM events WHERE id > ? AND id <= ?", (sid << 32, (sid + 1) << 32))
        conn.execute("DELETE FROM sessions WHERE sid = ?", (sid,))
    conn.close()
    with SqliteCheckpointer(db, engine=engine) as log:
        log.append("src", [EVENT])
        log.fork("src", 2, "next")
        assert log.lineage("next") == ForkOrigin("src", 2)
        assert log.forks("src") == [Fork("next", 2)]


def test_a_postgres_record_an_older_version_left_behind_is_replaced(
    postgres_server: str, tmp_path: Path
) -> None:
    import psycopg

    from agentlog import PostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(postgres_server, schema=schema) as log:
        log.append("src", [EVENT, EVENT])
        log.fork("src", 1, "again")
    with psycopg.connect(postgres_server, autocommit=True) as conn:  # a version-5 delete
        conn.execute(f"DELETE FROM {schema}.events WHERE session = 'again'")
        conn.execute(f"DELETE FROM {schema}.sessions WHERE name = 'again'")
    with PostgresCheckpointer(postgres_server, schema=schema) as log:
        log.fork("src", 2, "again")
        assert log.lineage("again") == ForkOrigin("src", 2)
