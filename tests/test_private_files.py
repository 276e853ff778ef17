"""Private by default: every file and directory agentlog creates is the
owner's only (0600 / 0700) unless the caller asks otherwise (``file_mode=``)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlog import FileCheckpointer, SqliteCheckpointer, SqliteStorage
from agentlog.migrate import migrate

EVENTS = [{"type": "user", "content": f"secret {i}"} for i in range(4)]


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The common umask (022), which on its own would give 0644 and 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_sqlite_database_wal_and_shm_are_private(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "sessions.db"
    with SqliteCheckpointer(db, engine=engine) as log:
        log.append("s", EVENTS)
        files = sorted(tmp_path.iterdir())
        assert {p.name for p in files} >= {"sessions.db", "sessions.db-wal", "sessions.db-shm"}
        assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}


def test_sqlite_file_mode_is_the_callers_choice(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "shared.db"
    with SqliteCheckpointer(db, engine=engine, file_mode=0o640) as log:
        log.append("s", EVENTS)
        assert {p.name: mode(p) for p in tmp_path.iterdir()} == {
            "shared.db": 0o640,
            "shared.db-wal": 0o640,
            "shared.db-shm": 0o640,
        }
    with pytest.raises(ValueError, match="file_mode"):
        SqliteCheckpointer(tmp_path / "x.db", engine=engine, file_mode=0o4755)
    with pytest.raises(TypeError, match="file_mode"):
        SqliteCheckpointer(tmp_path / "x.db", engine=engine, file_mode="0600")  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with SqliteCheckpointer(db) as log:
        log.append("s", EVENTS)
    db.chmod(0o644)
    with SqliteCheckpointer(db) as log:
        log.append("s", EVENTS)
    assert mode(db) == 0o644


def test_storage_database_is_private(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "stores.db"
    storage = SqliteStorage.open(db, engine=engine)
    try:
        storage.artifacts.put("acme", "key", b"api key: hunter2", "text/plain", None)
        assert {p.name: mode(p) for p in tmp_path.iterdir()} == {
            p.name: 0o600 for p in tmp_path.iterdir()
        }
    finally:
        storage.close()
    with SqliteStorage.open(tmp_path / "group.db", engine=engine, file_mode=0o660) as storage:
        assert mode(tmp_path / "group.db") == 0o640  # the umask (022) still applies


def test_file_store_directory_and_files_are_private(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with FileCheckpointer(store) as log:
        log.append("s", EVENTS[:2])
        log.append("s", EVENTS[2:])
        log.fork("s", 3, "f")
        log.truncate("s", 1)  # a rewrite through a temporary file
        assert mode(store) == 0o700
        assert {p.name: mode(p) for p in store.iterdir()} == {
            p.name: 0o600 for p in store.iterdir()
        }
        # The lock, two sessions, and the metadata file that keeps the revision
        # of the truncated one (it must rise though the head fell).
        assert len(list(store.iterdir())) == 4


def test_file_store_mode_is_the_callers_choice_and_kept_on_rewrite(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with FileCheckpointer(store, file_mode=0o640) as log:
        log.append("s", EVENTS)
        assert mode(store) == 0o750
        assert {p.name: mode(p) for p in store.iterdir()} == {
            p.name: 0o640 for p in store.iterdir()
        }
    with FileCheckpointer(store) as log:
        log.truncate("s", 2)  # inside the batch: rewritten, keeping the file's own mode
        log.append("new", EVENTS)
    modes = {p.name: mode(p) for p in store.glob("*.jsonl")}
    assert sorted(modes.values()) == [0o600, 0o640]


def test_migration_target_and_backup_are_private(tmp_path: Path) -> None:
    source = tmp_path / "sessions"
    source.mkdir()
    (source / "a.json").write_text(
        json.dumps({"version": 1, "id": "a", "messages": [{"role": "user", "content": "x"}]})
    )
    target = tmp_path / "out.db"
    with SqliteCheckpointer(target) as log:
        log.append("other", EVENTS)
    target.unlink()
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"out.db{suffix}").unlink(missing_ok=True)
    report = migrate(source, target, backup_dir=tmp_path / "backup1")
    assert report.migrated == 1
    assert mode(target) == 0o600
    (source / "b.json").write_text(
        json.dumps({"version": 1, "id": "b", "messages": [{"role": "user", "content": "y"}]})
    )
    report = migrate(source, target, backup_dir=tmp_path / "backup2")
    assert report.migrated == 1
    backup = tmp_path / "backup2"
    assert mode(backup) == 0o700
    assert mode(backup / "target-before.db") == 0o600
