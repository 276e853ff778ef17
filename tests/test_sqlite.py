"""SQLite specifics: WAL, schema mark, refusing foreign files, integrity, busy writers."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from agentlog import (
    CorruptDatabaseError,
    SchemaVersionError,
    SqliteCheckpointer,
    StorageUnavailableError,
    engine_info,
)
from agentlog._schema import APPLICATION_ID, SCHEMA_VERSION

EVENT = {"type": "user", "content": "hello"}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_open_sets_wal_and_marks_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    SqliteCheckpointer(db).close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    finally:
        conn.close()


def test_newer_schema_is_refused_before_anything_changes(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s", [EVENT])
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = digest(db)
    with pytest.raises(SchemaVersionError, match="newer"):
        SqliteCheckpointer(db)
    assert digest(db) == before
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1
    finally:
        conn.close()


def test_another_applications_database_is_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "theirs.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)")
    conn.execute("INSERT INTO accounts VALUES (1, 100)")
    conn.commit()
    conn.close()
    before = digest(db)
    with pytest.raises(SchemaVersionError, match="another application"):
        SqliteCheckpointer(db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA application_id = 1234")
    conn.close()
    assert digest(db) != before
    before = digest(db)
    with pytest.raises(SchemaVersionError, match="not an agentlog database"):
        SqliteCheckpointer(db)
    assert digest(db) == before


def test_a_file_that_is_not_a_database_is_a_typed_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all" * 200)
    before = digest(junk)
    with pytest.raises(CorruptDatabaseError):
        SqliteCheckpointer(junk)
    assert digest(junk) == before


def test_missing_directory_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailableError):
        SqliteCheckpointer(tmp_path / "no" / "such" / "dir" / "a.db")


def corrupt_copy(tmp_path: Path) -> Path:
    """A database whose event table pages are overwritten with garbage."""
    db = tmp_path / "corrupt.db"
    with SqliteCheckpointer(db) as cp:
        for i in range(40):
            cp.append(f"s{i}", [dict(EVENT, content="x" * 2000)] * 5)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode = DELETE")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(db.read_bytes())
    for page in range(3, len(data) // page_size, 2):
        start = page * page_size
        data[start + 10 : start + 200] = b"\xff" * 190
    db.write_bytes(bytes(data))
    return db


def test_check_integrity_reports_ok_and_corruption(tmp_path: Path) -> None:
    with SqliteCheckpointer(tmp_path / "ok.db") as cp:
        cp.append("s", [EVENT])
        assert cp.check_integrity() == (True, "ok")
    db = corrupt_copy(tmp_path)
    with SqliteCheckpointer(db) as cp:
        ok, detail = cp.check_integrity()
        assert not ok
        assert detail


def test_integrity_check_on_open_raises_on_a_corrupt_file(tmp_path: Path) -> None:
    db = corrupt_copy(tmp_path)
    before = digest(db)
    with pytest.raises(CorruptDatabaseError):
        SqliteCheckpointer(db, integrity_check_on_open=True)
    assert digest(db) == before
    with SqliteCheckpointer(tmp_path / "fine.db", integrity_check_on_open=True) as cp:
        assert cp.append("s", [EVENT]) == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"synchronous": "off"}, ValueError),
        ({"synchronous": "NORMAL"}, ValueError),
        ({"busy_timeout_ms": "5"}, TypeError),
        ({"busy_timeout_ms": True}, TypeError),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        SqliteCheckpointer(tmp_path / "a.db", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "a.db").exists()


def test_bad_path_type_is_refused() -> None:
    with pytest.raises(TypeError):
        SqliteCheckpointer(42)  # type: ignore[arg-type]


def hold_write_lock(db: Path, seconds: float, started: threading.Event) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    started.set()
    time.sleep(seconds)
    conn.execute("ROLLBACK")
    conn.close()


def test_busy_writer_fails_cleanly_after_the_timeout(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    # A negative timeout is clamped to 0: fail at once instead of waiting.
    with SqliteCheckpointer(db, busy_timeout_ms=-50) as cp:
        cp.append("s", [EVENT])
        started = threading.Event()
        holder = threading.Thread(target=hold_write_lock, args=(db, 1.0, started))
        holder.start()
        started.wait()
        begin = time.monotonic()
        with pytest.raises(StorageUnavailableError, match="busy"):
            cp.append("s", [EVENT])
        assert time.monotonic() - begin < 0.5
        assert cp.head("s") == 1  # reads do not wait for the writer
        holder.join()
        assert cp.append("s", [EVENT], expected_head=1) == 2


def test_busy_writer_waits_within_the_timeout(tmp_path: Path) -> None:
    db = tmp_path / "wait.db"
    with SqliteCheckpointer(db, busy_timeout_ms=10_000) as cp:
        cp.append("s", [EVENT])
        started = threading.Event()
        holder = threading.Thread(target=hold_write_lock, args=(db, 0.3, started))
        holder.start()
        started.wait()
        assert cp.append("s", [EVENT], expected_head=1) == 2
        holder.join()


def test_two_objects_on_one_file_see_each_other(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    with SqliteCheckpointer(db) as one, SqliteCheckpointer(db, synchronous="full") as two:
        one.append("s", [EVENT])
        assert two.head("s") == 1
        two.append("s", [EVENT], expected_head=1)
        assert [e.seq for e in one.read("s")] == [1, 2]


def test_memory_databases_are_private() -> None:
    with SqliteCheckpointer(":memory:") as one, SqliteCheckpointer(":memory:") as two:
        one.append("s", [EVENT])
        assert two.head("s") == 0


def test_engine_info_names_engine_and_sqlite() -> None:
    info = engine_info()
    assert info["engine"] in ("c", "python")
    assert info["sqlite_version"].count(".") == 2
    assert isinstance(info["compile_options"], list)
    with SqliteCheckpointer(":memory:") as cp:
        assert cp.engine == info["engine"]
