"""The engine interface as the layers above use it: read-only opens, backups,
the one error table, the one session-creation path, and both storages' protocol
(the storage's Checkpointer faces: tests/stores/test_storage.py)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from agentlog import (
    DEFAULT_TENANT,
    CheckpointerClosedError,
    CorruptDatabaseError,
    InMemoryStorage,
    SchemaVersionError,
    SqliteStorage,
    Storage,
    StorageUnavailableError,
)
from agentlog.engine import open_engine
from agentlog.engine.errors import driver_error
from agentlog.engine.schema import MAX_SID, SCHEMA_VERSION

EVENT = {"type": "user", "content": "hi"}


def _digest(path: Path) -> str:
    """The database file's bytes, and that its write-ahead log holds nothing.

    (SQLite may create an empty ``-wal`` and the ``-shm`` index to read a WAL
    file; neither holds data.)"""
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _batch(n: int) -> list[tuple[str, bytes]]:
    return [("user", b'{"type":"user","content":"%d"}' % i) for i in range(n)]


def test_read_only_open_reads_and_changes_nothing(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "log.db"
    writer = open_engine(db, engine=engine)
    writer.append(DEFAULT_TENANT, "s", None, 1.0, _batch(3))
    writer.close()
    before = _digest(db)
    reader = open_engine(db, engine=engine, read_only=True)
    try:
        assert (reader.read_only, reader.schema_version) == (True, SCHEMA_VERSION)
        assert reader.head(DEFAULT_TENANT, "s") == 3
        assert [e.seq for e in reader.scan(DEFAULT_TENANT, "s", 0, 10)] == [1, 2, 3]
        with pytest.raises(StorageUnavailableError, match="read-only"):
            reader.append(DEFAULT_TENANT, "s", 3, 2.0, _batch(1))
        with pytest.raises(StorageUnavailableError, match="read-only"):
            reader.write("anything", lambda conn: conn.rows("DELETE FROM events"))
        with pytest.raises(StorageUnavailableError, match="read-only"):
            reader.delete(DEFAULT_TENANT, "s")
    finally:
        reader.close()
    assert _digest(db) == before


def test_read_only_open_creates_nothing(tmp_path: Path, engine: str) -> None:
    with pytest.raises(StorageUnavailableError):
        open_engine(tmp_path / "missing.db", engine=engine, read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_read_only_open_still_refuses_a_newer_file(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "newer.db"
    open_engine(db, engine=engine).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaVersionError, match="newer"):
        open_engine(db, engine=engine, read_only=True)


def test_backup_to_writes_a_whole_consistent_copy(tmp_path: Path, engine: str) -> None:
    db, copy = tmp_path / "log.db", tmp_path / "copy.db"
    with SqliteStorage.open(db, engine=engine) as storage:
        log = storage.checkpointer()
        log.append("s", [EVENT] * 5)
        storage.memory.put("t", "n", "k", {"v": 1}, None)
        source = open_engine(db, engine=engine, read_only=True)
        try:
            source.backup_to(str(copy))
            with pytest.raises(StorageUnavailableError, match="exists"):
                source.backup_to(str(copy))
        finally:
            source.close()
    with SqliteStorage.open(copy, engine=engine) as restored:
        assert [e.event for e in restored.checkpointer().read("s")] == [EVENT] * 5
        assert restored.memory.get("t", "n", "k").value == {"v": 1}


@pytest.mark.parametrize(
    ("code", "kind", "text"),
    [
        (5, StorageUnavailableError, "busy"),  # SQLITE_BUSY
        (5 | (2 << 8), StorageUnavailableError, "busy"),  # SQLITE_BUSY_SNAPSHOT, extended
        (6, StorageUnavailableError, "busy"),  # SQLITE_LOCKED
        (7, MemoryError, "out of memory"),  # SQLITE_NOMEM
        (11, CorruptDatabaseError, "malformed"),  # SQLITE_CORRUPT
        (26, CorruptDatabaseError, "not a database"),  # SQLITE_NOTADB
        (13, StorageUnavailableError, "full"),  # SQLITE_FULL
        (10 | (3 << 8), StorageUnavailableError, "I/O"),  # SQLITE_IOERR_WRITE
        (1, StorageUnavailableError, "error"),  # SQLITE_ERROR
    ],
)
def test_one_error_table_maps_result_codes(code: int, kind: type, text: str) -> None:
    error = driver_error(code, text, "append")
    assert type(error) is kind
    assert str(error).startswith("append: ") and text in str(error)


def test_both_engines_map_a_damaged_file_alike(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "garbage.db"
    db.write_bytes(b"this is not a database file at all, but long enough" * 200)
    with pytest.raises(CorruptDatabaseError):
        open_engine(db, engine=engine)


def test_no_session_number_left_is_one_error_everywhere(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "full.db"
    with SqliteStorage.open(db, engine=engine) as storage:
        storage.checkpointer().append("first", [EVENT])
    conn = sqlite3.connect(db)
    conn.execute("UPDATE sessions SET sid = ?", (MAX_SID,))
    conn.commit()
    conn.close()
    with SqliteStorage.open(db, engine=engine) as storage:
        log = storage.checkpointer()
        for attempt in (
            lambda: log.append("second", [EVENT]),
            lambda: log.fork("first", 1, "second"),
            lambda: storage.sessions.create("acme", "second"),
        ):
            with pytest.raises(StorageUnavailableError, match="too many sessions"):
                attempt()
        assert [info.id for info in log.list()] == ["first"]
        assert storage.sessions.list("acme") == []


def test_both_storages_are_storage_and_context_managers(tmp_path: Path) -> None:
    with InMemoryStorage() as memory, SqliteStorage.open(tmp_path / "s.db") as sqlite:
        for storage in (memory, sqlite):
            assert isinstance(storage, Storage)
            storage.memory.put("t", "n", "k", 1, None)
            assert storage.memory.get("t", "n", "k").revision == 0
    for storage in (memory, sqlite):
        with pytest.raises(CheckpointerClosedError), storage:
            pass


class _Name(str):
    """A str subclass: never the engine's plain-id fast path."""


def test_head_checked_refuses_exactly_what_check_session_id_refuses(
    tmp_path: Path, engine: str
) -> None:
    """The C twin decides the common ids without a Python call; both twins
    must take and refuse the same ids as ``check_session_id`` does."""
    from agentlog.errors import InvalidSessionIdError
    from agentlog.events import MAX_SESSION_ID_LENGTH, check_session_id

    eng = open_engine(tmp_path / "log.db", engine=engine)
    try:
        eng.append(DEFAULT_TENANT, "s 1", None, 1.0, _batch(2))
        ascii_ids = [chr(c) for c in range(128)] + [f"a{chr(c)}b" for c in range(128)]
        edge = ["", ".", "..", "...", ".a", "a.", "..a", "x" * MAX_SESSION_ID_LENGTH]
        edge += ["x" * (MAX_SESSION_ID_LENGTH + 1), "é", "a\u200bb", "周报", "a/b", "a\\b"]
        others: list[object] = [None, 7, b"s", _Name("s 1"), _Name("a/b")]
        for name in [*ascii_ids, *edge, *others]:
            try:
                check_session_id(name)
            except InvalidSessionIdError:
                with pytest.raises(InvalidSessionIdError):
                    eng.head_checked(DEFAULT_TENANT, name)
            else:
                assert eng.head_checked(DEFAULT_TENANT, name) == (2 if name == "s 1" else 0)
    finally:
        eng.close()
