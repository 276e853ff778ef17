"""Opening a store without creating it: SqliteCheckpointer(read_only=True /
create=False, tenant=...) and FileCheckpointer(read_only=True / create=False)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from agentlog import (
    DEFAULT_TENANT,
    CorruptDatabaseError,
    DirectoryLockedError,
    FileCheckpointer,
    SchemaVersionError,
    SqliteCheckpointer,
    SqliteStorage,
    StorageDataError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from agentlog.log import METADATA_SUFFIX, is_file_store
from agentlog.log.file import session_file_name

from .test_file import EVENTS


def _digest(path: Path) -> str:
    """The database file's bytes (SQLite may leave an empty ``-wal`` and its
    ``-shm`` index beside a file it read; neither holds data)."""
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# -- SQLite ----------------------------------------------------------------------------


def _refused_as_read_only(*writes: Callable[[], object]) -> None:
    """Each of ``writes`` raises StorageUnavailableError, saying read-only."""
    for write in writes:
        with pytest.raises(StorageUnavailableError, match="read-only"):
            write()


def test_sqlite_read_only_reads_and_refuses_every_write(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "log.db"
    with SqliteCheckpointer(db, engine=engine) as log:
        log.append("s", EVENTS[:3])
    before = _digest(db)
    with SqliteCheckpointer(db, engine=engine, read_only=True) as log:
        assert log.read_only
        assert log.head("s") == 3
        assert [e.event for e in log.read("s")] == EVENTS[:3]
        assert [info.id for info in log.list()] == ["s"]
        assert log.check_integrity() == (True, "ok")
        _refused_as_read_only(
            lambda: log.append("s", EVENTS[3:4], expected_head=3),
            lambda: log.append("new", EVENTS[:1]),
            lambda: log.truncate("s", 1),
            lambda: log.fork("s", 1, "t"),
            lambda: log.delete("s"),
        )
    assert _digest(db) == before


def test_sqlite_read_only_sees_what_a_writer_appends_later(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "log.db"
    with SqliteCheckpointer(db, engine=engine) as writer:
        writer.append("s", EVENTS[:1])
        with SqliteCheckpointer(db, engine=engine, read_only=True) as reader:
            assert reader.head("s") == 1
            writer.append("s", EVENTS[1:3])
            assert [e.seq for e in reader.read("s", since_seq=1)] == [2, 3]


@pytest.mark.parametrize("mode", [{"read_only": True}, {"create": False}])
def test_sqlite_without_create_refuses_a_missing_file(
    tmp_path: Path, engine: str, mode: dict[str, bool]
) -> None:
    with pytest.raises(StorageNotFoundError, match=r"missing\.db"):
        SqliteCheckpointer(tmp_path / "missing.db", engine=engine, **mode)
    with pytest.raises(StorageNotFoundError):
        SqliteCheckpointer(tmp_path / "nodir" / "missing.db", engine=engine, **mode)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [{"read_only": True}, {"create": False}])
def test_sqlite_without_create_refuses_what_is_not_an_agentlog_database(
    tmp_path: Path, engine: str, mode: dict[str, bool]
) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(SchemaVersionError, match=r"empty\.db.*not an agentlog database"):
        SqliteCheckpointer(empty, engine=engine, **mode)
    assert empty.read_bytes() == b""
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    before = foreign.read_bytes()
    with pytest.raises(SchemaVersionError, match="another application"):
        SqliteCheckpointer(foreign, engine=engine, **mode)
    assert foreign.read_bytes() == before
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 200)
    with pytest.raises(CorruptDatabaseError, match=r"notes\.txt"):
        SqliteCheckpointer(text, engine=engine, **mode)
    assert text.read_text() == "hello\n" * 200


def test_an_open_error_names_the_file(tmp_path: Path, engine: str) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 200)
    with pytest.raises(CorruptDatabaseError, match=r"cannot open '.*notes.txt': .*not a database"):
        SqliteCheckpointer(text, engine=engine)


def test_sqlite_create_false_writes_an_existing_database(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "log.db"
    SqliteCheckpointer(db, engine=engine).close()
    with SqliteCheckpointer(db, engine=engine, create=False) as log:
        assert not log.read_only
        assert log.append("s", EVENTS[:2]) == 2
        assert log.truncate("s", 1) == 1


def test_memory_cannot_be_opened_without_create() -> None:
    with pytest.raises(ValueError, match="memory"):
        SqliteCheckpointer(":memory:", read_only=True)
    with pytest.raises(ValueError, match="memory"):
        SqliteCheckpointer(":memory:", create=False)


def test_tenant_picks_whose_sessions_a_checkpointer_sees(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "log.db"
    with SqliteStorage.open(db, engine=engine) as storage:
        rec = storage.sessions.create("acme", "chat-9")
        storage.sessions.append("acme", "chat-9", rec.revision, [{**EVENTS[0], "id": "m1"}])
        storage.checkpointer().append("mine", EVENTS[:2])
    with SqliteCheckpointer(db, engine=engine, tenant="acme") as acme:
        assert acme.tenant == "acme"
        assert [info.id for info in acme.list()] == ["chat-9"]
        assert acme.append("chat-9", EVENTS[1:2], expected_head=1) == 2
    with SqliteCheckpointer(db, engine=engine, read_only=True, tenant="acme") as acme:
        assert [e.event["content"] for e in acme.read("chat-9")] == ["m0", "m1"]
        assert acme.head("mine") == 0
    with SqliteCheckpointer(db, engine=engine, read_only=True) as default:
        assert default.tenant == DEFAULT_TENANT
        assert [info.id for info in default.list()] == ["mine"]
        every = default.list_all_tenants()
        assert [(tenant, info.id, info.head) for tenant, info in every] == [
            ("acme", "chat-9", 2),
            (DEFAULT_TENANT, "mine", 2),
        ]
    with pytest.raises(StorageDataError, match="tenant"):
        SqliteCheckpointer(db, engine=engine, tenant="a/b")


# -- files -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [{"read_only": True}, {"create": False}])
def test_file_without_create_refuses_what_is_not_a_file_store(
    tmp_path: Path, mode: dict[str, bool]
) -> None:
    with pytest.raises(StorageNotFoundError, match="no such directory"):
        FileCheckpointer(tmp_path / "missing", **mode)
    plain = tmp_path / "repo"
    plain.mkdir()
    (plain / "notes.jsonl").write_text('{"hello": "world"}\n')
    with pytest.raises(StorageNotFoundError, match="holds no agentlog file store"):
        FileCheckpointer(plain, **mode)
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageNotFoundError, match="not a directory"):
        FileCheckpointer(tmp_path / "file", **mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "repo"]
    assert [p.name for p in plain.iterdir()] == ["notes.jsonl"]


def test_is_file_store_knows_the_backends_own_files(tmp_path: Path) -> None:
    assert not is_file_store(tmp_path)
    assert not is_file_store(tmp_path / "missing")
    with FileCheckpointer(tmp_path / "store") as log:
        assert is_file_store(tmp_path / "store")  # the lock file
        log.append("s", EVENTS[:1])
    (tmp_path / "store" / ".agentlog.lock").unlink()
    assert is_file_store(tmp_path / "store")  # a session file


def test_file_read_only_runs_beside_the_owner_and_writes_nothing(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as owner:
        owner.append("s", EVENTS[:2])
        owner.append("s", EVENTS[2:4])
        owner.append("gone", EVENTS[:1])
        with FileCheckpointer(tmp_path, read_only=True) as reader:
            with pytest.raises(DirectoryLockedError):
                FileCheckpointer(tmp_path)  # the owner still owns it
            before = _tree(tmp_path)
            assert reader.read_only
            assert reader.head("s") == 4
            assert sorted(info.id for info in reader.list()) == ["gone", "s"]
            # What the owner does next, the reader sees.
            owner.append("s", EVENTS[4:6])
            assert [e.seq for e in reader.read("s", since_seq=3)] == [4, 5, 6]
            owner.truncate("s", 3)  # inside a batch: the file is rewritten
            assert reader.head("s") == 3
            # The truncate wrote the revision it keeps into the metadata file.
            # (base = the old head 6 - 3 + 1, plus the head 3: above the 6 it had).
            assert reader.metadata("s") == owner.metadata("s") == (None, 7)
            owner.set_metadata("s", {"title": "t"}, owner.metadata("s").revision)
            assert reader.metadata("s") == owner.metadata("s")
            assert [e.event for e in reader.read("s")] == EVENTS[:3]
            owner.delete("gone")
            assert [info.id for info in reader.list()] == ["s"]
            assert list(reader.read("gone")) == []
            owner.append("new", EVENTS[:1])
            assert reader.head("new") == 1
            _refused_as_read_only(
                lambda: reader.append("s", EVENTS[:1]),
                lambda: reader.truncate("s", 1),
                lambda: reader.fork("s", 1, "t"),
                lambda: reader.delete("s"),
            )
            assert reader.check_integrity() == (True, "ok")
            after = _tree(tmp_path)
        expected = (
            set(before) | {session_file_name("new"), session_file_name("s") + METADATA_SUFFIX}
        ) - {session_file_name("gone")}
        assert set(after) == expected


def test_file_read_only_takes_no_lock_and_repairs_nothing(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as owner:
        owner.append("s", EVENTS[:3])
    (tmp_path / ".agentlog.lock").unlink()
    path = tmp_path / session_file_name("s")
    with path.open("ab") as handle:
        handle.write(b'{"seq":4,"end":4,"ts":1.0,"event":{"type":"us')  # a torn tail
    before = _tree(tmp_path)
    with FileCheckpointer(tmp_path, read_only=True) as reader:
        assert reader.head("s") == 3
        assert [e.event for e in reader.read("s")] == EVENTS[:3]
        assert reader.check_integrity() == (True, "ok")
    assert _tree(tmp_path) == before  # no lock file, the torn tail left for the owner


def test_file_create_false_opens_an_existing_store_to_write(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path / "store") as owner:
        owner.append("s", EVENTS[:2])
    with FileCheckpointer(tmp_path / "store", create=False) as log:
        assert not log.read_only
        assert log.truncate("s", 1) == 1


def test_file_check_integrity_names_a_damaged_file(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as owner:
        for event in EVENTS:
            owner.append("s", [event])
        owner.append("fine", EVENTS[:1])
        assert owner.check_integrity() == (True, "ok")
    path = tmp_path / session_file_name("s")
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"garbage" + lines[3][7:]
    path.write_bytes(b"\n".join(lines))
    with FileCheckpointer(tmp_path, read_only=True) as reader:
        ok, detail = reader.check_integrity()
    assert not ok
    assert detail.splitlines() == [f"{path}: unreadable event line 3"]


@pytest.mark.parametrize("read_only", [True, False])
def test_a_fifo_is_refused_at_once_not_waited_on(
    tmp_path: Path, engine: str, read_only: bool
) -> None:
    """SQLite's open of a FIFO waits for a writer forever (and Ctrl-C cannot
    stop it); a path that is no regular file is refused before any open."""
    import os
    import subprocess

    from ..conftest import PYTHON

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = (
        "import sys\nfrom agentlog import SqliteCheckpointer, StorageUnavailableError\n"
        "try:\n"
        f"    SqliteCheckpointer(sys.argv[1], engine={engine!r}, read_only={read_only})\n"
        "except StorageUnavailableError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", script, str(fifo)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "not a regular file" in done.stdout
