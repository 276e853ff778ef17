"""The storage as a whole: the stores share the session log's file and its schema
(migrated forward from an older file, refused when newer), the one log read and
written through both faces (in the file and in memory), a closed storage."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import Checkpointer, SqliteCheckpointer
from agentlog.engine.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from agentlog.errors import (
    AgentlogError,
    CheckpointerClosedError,
    SchemaVersionError,
    StorageConflictError,
    StorageDataError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from agentlog.stores import DEFAULT_TENANT, InMemoryStorage, SessionStore, SqliteStorage

from ..conftest import ENGINES, digest, require_engine

EVENT = {"type": "user", "content": "hi"}


def test_default_tenant_is_an_explicit_name() -> None:
    assert DEFAULT_TENANT == "default"


def test_memory_lives_in_the_session_logs_file(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "one.db"
    with SqliteCheckpointer(db, engine=engine) as log:
        log.append("s", [{"type": "user", "content": "hi"}])
        with SqliteStorage.open(db, engine=engine) as storage:
            storage.memory.put(DEFAULT_TENANT, "facts", "name", "Ada", None)
            with pytest.raises(StorageConflictError):
                storage.memory.put(DEFAULT_TENANT, "facts", "name", "Bob", None)
    with SqliteStorage.open(db, engine=engine) as storage:
        assert storage.memory.get(DEFAULT_TENANT, "facts", "name").value == "Ada"
    with SqliteCheckpointer(db, engine=engine) as log:
        assert log.head("s") == 1


def make_version_1_file(path: Path) -> None:
    """A file as schema version 1 wrote it (its statements, its marks), with one session."""
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[1]:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO sessions VALUES (1, 'default', 'old', 1, 1.0, 1.0)")
    conn.execute(
        "INSERT INTO events VALUES (?, 1.0, 'user', ?)",
        ((1 << 32) | 1, b'{"type":"user","content":"from v1"}'),
    )
    conn.commit()
    conn.close()


def test_an_older_file_is_migrated_forward_in_place(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "v1.db"
    make_version_1_file(db)
    with SqliteStorage.open(db, engine=engine) as storage:
        storage.memory.put("t", "ns", "k", "new", None)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    with SqliteCheckpointer(db, engine=engine) as log:
        assert [e.event["content"] for e in log.read("old")] == ["from v1"]
        assert log.append("old", [{"type": "assistant", "content": "v5"}], expected_head=1) == 2


def test_a_newer_file_is_refused_by_the_stores_too(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "new.db"
    SqliteCheckpointer(db, engine=engine).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = digest(db)
    with pytest.raises(SchemaVersionError):
        SqliteStorage.open(db, engine=engine)
    assert digest(db) == before


def check_one_log_two_faces(log: Checkpointer, sessions: SessionStore) -> None:
    """The Checkpointer ``log`` and the SessionStore ``sessions`` (of one
    storage's log, default tenant) read and write the same sessions."""
    user = {"type": "user", "content": "hi"}
    log.append("chat", [user, {"type": "assistant", "content": "hello"}])
    record = sessions.get(DEFAULT_TENANT, "chat")
    assert (record.head, record.revision, record.metadata) == (2, 1, None)
    record = sessions.append(
        DEFAULT_TENANT, "chat", record.revision, [{"type": "user", "id": "m3", "content": "x"}]
    )
    assert [e.seq for e in log.read("chat")] == [1, 2, 3]
    assert log.append("chat", [user], expected_head=3) == 4
    record = sessions.get(DEFAULT_TENANT, "chat")
    assert (record.head, record.revision) == (4, 3)
    sessions.compact(DEFAULT_TENANT, "chat", record.revision, 3, {"summary": "three"})
    loaded = sessions.load(DEFAULT_TENANT, "chat")
    assert loaded.snapshot is not None and loaded.snapshot.through_sequence == 3
    assert [e.seq for e in loaded.items] == [4]
    assert len(list(log.read("chat"))) == 4  # compaction keeps the journal
    # Time travel through the log drops snapshots of what it removed.
    log.truncate("chat", 2)
    loaded = sessions.load(DEFAULT_TENANT, "chat")
    assert (loaded.snapshot, [e.seq for e in loaded.items]) == (None, [1, 2])
    log.fork("chat", 2, "chat-b")
    assert sessions.get(DEFAULT_TENANT, "chat-b").head == 2
    # Other tenants are invisible to the Checkpointer face.
    sessions.create("acme", "private", metadata={"owner": "acme"})
    sessions.create(DEFAULT_TENANT, "empty")
    assert {info.id: info.head for info in log.list()} == {"chat": 2, "chat-b": 2, "empty": 0}
    assert log.head("private") == 0
    sessions.delete(DEFAULT_TENANT, "chat", sessions.get(DEFAULT_TENANT, "chat").revision)
    assert log.head("chat") == 0


def test_one_log_two_faces(tmp_path: Path, engine: str) -> None:
    """The Checkpointer and the SessionStore read and write the same sessions."""
    db = tmp_path / "one.db"
    with (
        SqliteCheckpointer(db, engine=engine) as log,
        SqliteStorage.open(db, engine=engine) as storage,
    ):
        check_one_log_two_faces(log, storage.sessions)


def test_one_log_two_faces_in_memory() -> None:
    """The same in memory: the storage's Checkpointer face and its SessionStore."""
    with InMemoryStorage() as storage:
        check_one_log_two_faces(storage.checkpointer(), storage.sessions)


@pytest.fixture(params=["memory", *ENGINES])
def kind(request: pytest.FixtureRequest) -> str:
    """``memory``, or the SQLite engine (see require_engine for one not built)."""
    if request.param != "memory":
        require_engine(request.param)
    return str(request.param)


@pytest.fixture
def storage(kind: str, tmp_path: Path) -> Iterator[InMemoryStorage | SqliteStorage]:
    """An in-memory storage, or a SQLite one on the engine ``kind``."""
    opened: InMemoryStorage | SqliteStorage
    if kind == "memory":
        opened = InMemoryStorage()
    else:
        opened = SqliteStorage.open(tmp_path / "one.db", engine=kind)
    with opened:
        yield opened


def test_the_checkpointer_face_shares_the_storage_log(
    storage: InMemoryStorage | SqliteStorage, kind: str
) -> None:
    default, acme = storage.checkpointer(), storage.checkpointer("acme")
    if isinstance(storage, SqliteStorage):  # one engine: one writer connection for both faces
        assert default.engine == acme.engine == storage.engine == kind
    default.append("chat", [EVENT])
    acme.append("chat", [EVENT, EVENT])
    assert storage.sessions.get(DEFAULT_TENANT, "chat").head == 1
    assert storage.sessions.get("acme", "chat").head == 2
    record = storage.sessions.append("acme", "chat", 1, [{**EVENT, "id": "m3"}])
    assert acme.head("chat") == record.head == 3
    acme.close()  # the face alone releases nothing
    assert storage.sessions.get("acme", "chat").head == 3
    assert default.head("chat") == 1
    with pytest.raises(StorageDataError):
        storage.checkpointer("a/b")
    storage.close()
    with pytest.raises(CheckpointerClosedError):
        default.head("chat")
    with pytest.raises(CheckpointerClosedError):
        storage.checkpointer()


def check_a_session_store_write_wakes_a_follower(storage: Any) -> None:
    """A write through ``storage``'s SessionStore wakes a follower of its
    Checkpointer face at once."""
    log = storage.checkpointer()
    record = storage.sessions.create(DEFAULT_TENANT, "live")

    def write() -> None:
        storage.sessions.append(DEFAULT_TENANT, "live", record.revision, [{**EVENT, "id": "a"}])

    timer = threading.Timer(0.1, write)
    timer.start()
    # A poll far longer than the test: only the notification can wake it.
    follower = log.follow("live", poll_interval=30)
    assert next(follower).event["id"] == "a"
    follower.close()
    timer.join()


def test_a_session_store_write_wakes_a_follower_of_the_checkpointer_face(
    storage: InMemoryStorage | SqliteStorage,
) -> None:
    check_a_session_store_write_wakes_a_follower(storage)


def check_a_closed_storage_refuses(storage: Any, *more: Callable[[], Any]) -> None:
    """Close ``storage``: then each store's calls (and ``more``) raise a typed
    error, and a second close is fine."""
    storage.close()
    calls: list[Callable[[], Any]] = [
        lambda: storage.sessions.create("t", "s"),
        lambda: storage.sessions.load("t", "s"),
        lambda: storage.checkpoints.save("t", "r", None, status="running", state=0),
        lambda: storage.checkpoints.list("t"),
        lambda: storage.memory.put("t", "n", "k", 1, None),
        lambda: storage.memory.get("t", "n", "k"),
        lambda: storage.artifacts.put("t", "a", b"x", "text/plain", None),
        lambda: storage.artifacts.list("t"),
        *more,
    ]
    for call in calls:
        with pytest.raises(AgentlogError, match="closed"):
            call()
    storage.close()  # idempotent


def test_a_closed_storage_raises_a_typed_error_everywhere(tmp_path: Path, engine: str) -> None:
    check_a_closed_storage_refuses(SqliteStorage.open(tmp_path / "closed.db", engine=engine))


def test_a_read_only_storage_reads_and_changes_nothing(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "ro.db"
    with pytest.raises(StorageNotFoundError):
        SqliteStorage.open(db, engine=engine, read_only=True)
    assert not db.exists()
    sqlite3.connect(db).close()  # an empty file is no agentlog database
    with pytest.raises(SchemaVersionError):
        SqliteStorage.open(db, engine=engine, read_only=True)
    db.unlink()
    make_version_1_file(db)
    before = digest(db)
    with SqliteStorage.open(db, engine=engine, read_only=True) as storage:
        with pytest.raises(StorageUnavailableError):
            storage.memory.put("t", "ns", "k", "v", None)
        assert [e.seq for e in storage.checkpointer().read("old")] == [1]
    assert digest(db) == before  # not migrated, not written
    db = tmp_path / "current.db"
    with SqliteStorage.open(db, engine=engine) as storage:
        storage.sessions.create("t", "s")
        storage.sessions.append("t", "s", 0, [{"type": "user", "content": "x", "id": "a"}])
        storage.sessions.compact("t", "s", 1, 1, {})
    before = digest(db)
    with SqliteStorage.open(db, engine=engine, read_only=True) as storage:
        assert storage.sessions.prune_all("t", keep=0, dry_run=True) == {"s": 1}
        with pytest.raises(StorageUnavailableError):
            storage.sessions.prune("t", "s", keep=0)
        with pytest.raises(StorageUnavailableError):
            storage.checkpointer("t").vacuum()
    assert digest(db) == before


def test_create_false_opens_an_existing_database_only(tmp_path: Path, engine: str) -> None:
    from agentlog import SqliteStorage, StorageNotFoundError

    with pytest.raises(StorageNotFoundError):
        SqliteStorage.open(tmp_path / "missing.db", create=False, engine=engine)
    assert not (tmp_path / "missing.db").exists()
    SqliteStorage.open(tmp_path / "there.db", engine=engine).close()
    with SqliteStorage.open(tmp_path / "there.db", create=False, engine=engine) as storage:
        storage.memory.put("t", "n", "k", 1, None)
