"""The named loggers: slow operations, the WAL's bound, bad options."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import SqliteCheckpointer, telemetry

from ..conftest import postgres_conninfo, postgres_schema, undo_postgres_version_7
from .conftest import make_telemetry

EVENT = {"type": "user", "content": "hello"}


def test_a_slow_operation_is_logged_above_the_threshold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentlog.telemetry")
    make_telemetry(slow_threshold=0.0)
    try:
        with SqliteCheckpointer(tmp_path / "a.db") as log:
            log.append("s1", [EVENT])
    finally:
        telemetry.uninstrument()
    slow = [r for r in caplog.records if r.name == "agentlog.telemetry"]
    assert len(slow) == 1
    assert slow[0].levelno == logging.WARNING
    assert slow[0].getMessage().startswith("slow append on sqlite: ")

    caplog.clear()
    make_telemetry(slow_threshold=3600.0)
    try:
        with SqliteCheckpointer(tmp_path / "a.db") as log:
            log.append("s1", [EVENT])
    finally:
        telemetry.uninstrument()
    assert [r for r in caplog.records if r.name == "agentlog.telemetry"] == []


def test_a_bad_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="slow_threshold"):
        telemetry.instrument(slow_threshold=-1.0)
    assert not telemetry.instrumented()


def test_the_wal_bound_is_logged_once_per_hit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    caplog.set_level(logging.INFO, logger="agentlog.engine")
    with SqliteCheckpointer(tmp_path / "a.db", wal_size_limit=4096, engine=engine) as log:
        for i in range(64):
            log.append("s1", [{"type": "user", "content": "x" * 512 + str(i)}])
        hits = log.figures()["wal_bounds_hit"]
    lines = [r.getMessage() for r in caplog.records if r.name == "agentlog.engine"]
    assert hits >= 1
    assert len(lines) == hits
    assert all("past its bound of 4096" in line for line in lines)


def test_a_schema_step_is_logged_and_a_new_file_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    from ..engine.test_schema import make_old_file

    caplog.set_level(logging.INFO, logger="agentlog.engine")
    make_old_file(tmp_path / "old.db", 10)
    SqliteCheckpointer(tmp_path / "old.db", engine=engine).close()
    SqliteCheckpointer(tmp_path / "new.db", engine=engine).close()
    lines = [r.getMessage() for r in caplog.records if r.name == "agentlog.engine"]
    assert len(lines) == 1
    assert "old.db: schema steps 10 to " in lines[0]


def _lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_a_newer_sqlite_file_is_refused_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    import sqlite3

    from agentlog import SchemaVersionError

    caplog.set_level(logging.WARNING, logger="agentlog.engine")
    SqliteCheckpointer(tmp_path / "a.db", engine=engine).close()
    conn = sqlite3.connect(tmp_path / "a.db")
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    with pytest.raises(SchemaVersionError):
        SqliteCheckpointer(tmp_path / "a.db", engine=engine)
    (line,) = _lines(caplog, "agentlog.engine")
    assert line.startswith("refused: ") and "schema version 999, newer" in line


def test_a_directory_for_a_sqlite_file_is_refused_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    from agentlog import StorageUnavailableError

    caplog.set_level(logging.WARNING, logger="agentlog.engine")
    (tmp_path / "d.db").mkdir()
    with pytest.raises(StorageUnavailableError):
        SqliteCheckpointer(tmp_path / "d.db", engine=engine)
    (line,) = _lines(caplog, "agentlog.engine")
    assert "it is a directory" in line


def test_the_file_stores_refusals_and_repairs_are_logged_without_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn tail cut on open (INFO) and a symbolic link refused (WARNING), each
    naming the store's directory, never the session (its file's name)."""
    from agentlog import CorruptDatabaseError, FileCheckpointer

    caplog.set_level(logging.INFO, logger="agentlog.file")
    store = tmp_path / "files"
    with FileCheckpointer(store) as log:
        log.append("personal-id", [EVENT, EVENT])
    (session_file,) = [p for p in store.iterdir() if "personal-id" in p.name]
    with session_file.open("ab") as handle:
        handle.write(b'{"seq":3,"end":4,')  # a batch a crash cut short
    with FileCheckpointer(store) as log:
        assert [e.seq for e in log.read("personal-id")] == [1, 2]
    (cut,) = _lines(caplog, "agentlog.file")
    assert cut.startswith(f"{store}: cut a torn tail of 17 bytes")

    caplog.clear()
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(session_file.read_bytes())
    session_file.unlink()
    session_file.symlink_to(target)
    with FileCheckpointer(store) as log, pytest.raises(CorruptDatabaseError):
        list(log.read("personal-id"))
    lines = _lines(caplog, "agentlog.file")
    assert lines and all(line.startswith(f"refused a file in {store}: ") for line in lines)
    assert not any("personal-id" in line for line in lines)


def test_a_fork_child_abandoning_stores_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ..forking import in_child

    caplog.set_level(logging.INFO, logger="agentlog.engine")
    log = SqliteCheckpointer(tmp_path / "a.db")
    try:
        log.append("s1", [EVENT])
        found = in_child(lambda: _lines(caplog, "agentlog.engine"))
    finally:
        log.close()
    (line,) = found
    assert "in a child of os.fork()" in line and "open store(s) of the parent abandoned" in line
    assert _lines(caplog, "agentlog.engine") == []  # the parent's own log: nothing


# -- PostgreSQL ------------------------------------------------------------------------


@pytest.fixture
def pg_admin(postgres_server: str) -> Iterator[Any]:
    """A plain autocommit connection to the test database, behind the store's back."""
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        yield conn


def test_postgres_schema_steps_and_a_newer_store_are_logged(
    tmp_path: Path, pg_admin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from agentlog import PostgresCheckpointer, SchemaVersionError
    from agentlog.engine.postgres import SCHEMA_VERSION

    caplog.set_level(logging.INFO, logger="agentlog.postgres")
    schema = postgres_schema(tmp_path)
    PostgresCheckpointer(postgres_conninfo(), schema=schema).close()
    assert _lines(caplog, "agentlog.postgres") == []  # a new store: created, not stepped
    undo_postgres_version_7(pg_admin, schema)  # what the last step adds
    pg_admin.execute(f"UPDATE {schema}.agentlog_version SET version = {SCHEMA_VERSION - 1}")
    PostgresCheckpointer(postgres_conninfo(), schema=schema).close()
    (step,) = _lines(caplog, "agentlog.postgres")
    assert (
        step
        == f"schema {schema!r}: steps {SCHEMA_VERSION - 1} to {SCHEMA_VERSION}, in one transaction"
    )

    caplog.clear()
    pg_admin.execute(f"UPDATE {schema}.agentlog_version SET version = 999")
    with pytest.raises(SchemaVersionError):
        PostgresCheckpointer(postgres_conninfo(), schema=schema)
    (refusal,) = [r for r in caplog.records if r.name == "agentlog.postgres"]
    assert refusal.levelno == logging.WARNING
    assert refusal.getMessage().startswith(f"refused: schema {schema!r} was written by a newer")


def _kill_idle(pg_admin: Any) -> None:
    """Every idle connection of the test database, killed behind the pools' backs."""
    from ..waiting import wait_until

    killed = [
        row[0]
        for row in pg_admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND state = 'idle'"
        ).fetchall()
    ]
    # A termination is a signal: each backend, gone, has closed its socket.
    assert wait_until(
        lambda: (
            not pg_admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (killed,)
            ).fetchall()
        )
    )


def _assert_retried(caplog: pytest.LogCaptureFixture) -> None:
    lines = _lines(caplog, "agentlog.postgres")
    assert lines, "no retry was logged"
    assert all("lost its connection" in line for line in lines[:-1])
    assert lines[-1].startswith("reading the head succeeded on try ")
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "agentlog.postgres")


def test_a_postgres_read_retried_is_logged_with_its_outcome(
    tmp_path: Path, pg_admin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from agentlog import PostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(
        postgres_conninfo(), schema=schema, pool_min_size=2, pool_max_size=2
    ) as log:
        log.append("s1", [EVENT])
        _kill_idle(pg_admin)
        caplog.set_level(logging.INFO, logger="agentlog.postgres")
        assert log.head("s1") == 1
    _assert_retried(caplog)


def test_an_async_postgres_read_retried_is_logged_with_its_outcome(
    tmp_path: Path, pg_admin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncPostgresCheckpointer(
            postgres_conninfo(), schema=schema, pool_min_size=2, pool_max_size=2
        ) as log:
            await log.append("s1", [EVENT])
            _kill_idle(pg_admin)
            caplog.set_level(logging.INFO, logger="agentlog.postgres")
            assert await log.head("s1") == 1

    asyncio.run(main())
    _assert_retried(caplog)


# -- recoveries and damage -------------------------------------------------------------


def test_a_wal_left_by_a_crash_is_logged_as_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    """A copy of a file and its WAL taken while the store was open is what a
    process that died leaves: its open replays the WAL and says so (INFO);
    a file closed cleanly, or opened again by this process, says nothing."""
    import shutil

    caplog.set_level(logging.INFO, logger="agentlog.engine")
    with SqliteCheckpointer(tmp_path / "a.db", engine=engine) as log:
        log.append("s1", [EVENT, EVENT])
        wal = (tmp_path / "a.db-wal").stat().st_size
        assert wal > 32  # the appends are in the WAL, not yet checkpointed
        shutil.copy(tmp_path / "a.db", tmp_path / "crashed.db")
        shutil.copy(tmp_path / "a.db-wal", tmp_path / "crashed.db-wal")
        SqliteCheckpointer(tmp_path / "a.db", engine=engine).close()  # this process's own
    assert _lines(caplog, "agentlog.engine") == []
    SqliteCheckpointer(tmp_path / "a.db", engine=engine).close()  # closed cleanly: no WAL left
    assert _lines(caplog, "agentlog.engine") == []

    with SqliteCheckpointer(tmp_path / "crashed.db", engine=engine) as log:
        assert [e.seq for e in log.read("s1")] == [1, 2]  # the WAL's commits, replayed
    (line,) = _lines(caplog, "agentlog.engine")
    assert line.startswith(f"{tmp_path / 'crashed.db'}: opened with a write-ahead log of {wal} ")
    assert "SQLite recovers the commits it holds" in line


def test_a_damaged_line_of_a_file_store_is_logged_by_read_and_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A line damaged in the middle of a session file: a read that reaches it
    and a check that finds it each log one WARNING naming the directory and
    the event, never the session; nothing is logged for a sound store."""
    from agentlog import CorruptDatabaseError, FileCheckpointer

    caplog.set_level(logging.INFO, logger="agentlog.file")
    store = tmp_path / "files"
    with FileCheckpointer(store) as log:
        for n in range(5):
            log.append("personal-id", [{"type": "user", "content": f"message {n + 1}"}])
        assert log.check_integrity(deep=True)[0]
        assert [e.seq for e in log.read("personal-id")] == [1, 2, 3, 4, 5]
    assert _lines(caplog, "agentlog.file") == []
    (session_file,) = [p for p in store.iterdir() if "personal-id" in p.name]
    data = session_file.read_bytes()
    assert data.count(b"message 3") == 1
    session_file.write_bytes(data.replace(b"message 3", b"massage 3"))  # behind its back

    with FileCheckpointer(store) as log:
        with pytest.raises(CorruptDatabaseError):
            list(log.read("personal-id"))
        (read,) = _lines(caplog, "agentlog.file")
        assert read == (
            f"{store}: a read found event 3 of a session file damaged (nothing was changed)"
        )
        caplog.clear()
        ok, _ = log.check_integrity(deep=True)
        assert not ok
        (check,) = _lines(caplog, "agentlog.file")
        assert check == f"{store}: check found 1 problem(s)"
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "agentlog.file")
    assert session_file.read_bytes() == data.replace(b"message 3", b"massage 3")


def test_a_postgres_retry_is_counted_by_the_metric(
    tmp_path: Path, pg_admin: Any, otel: Any
) -> None:
    """The retries counter reads the store's own count: zero, then the read
    that lost its connection and was tried again."""
    from agentlog import PostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(
        postgres_conninfo(), schema=schema, pool_min_size=2, pool_max_size=2
    ) as log:
        log.append("s1", [EVENT])  # noted by the telemetry: its gauges read it
        assert otel.total("agentlog.postgres.retries", **{"db.namespace": schema}) == 0
        _kill_idle(pg_admin)
        assert log.head("s1") == 1
        retried = otel.total("agentlog.postgres.retries", **{"db.namespace": schema})
        assert retried >= 1
        assert retried == log.database.retries
