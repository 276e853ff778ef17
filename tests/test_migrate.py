"""agentlog migrate: plan and dry-run, backup-first, one transaction, re-runs, rollback."""

from __future__ import annotations

import errno
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import agentlog.migrate.sources as migrate_sources
import agentlog.migrate.targets as migrate_targets
from agentlog import FileCheckpointer, SqliteCheckpointer, SqliteStorage, fold_events
from agentlog.cli import main
from agentlog.errors import SchemaVersionError
from agentlog.migrate import MigrationError, migrate


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def write_v1(directory: Path, session_id: str, messages: list[Any], runs: Any = ()) -> Path:
    path = directory / f"{session_id}.json"
    document = {"version": 1, "id": session_id, "messages": messages, "runs": list(runs)}
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def v1_source(tmp_path: Path) -> Path:
    source = tmp_path / "legacy"
    sessions = source / "sessions"
    sessions.mkdir(parents=True)
    write_v1(
        sessions,
        "alpha",
        [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
            {"role": "tool", "tool_call_id": "t1", "content": "a.py"},
            {"role": "assistant", "content": "one file", "model": "m-1"},
        ],
        runs=[{"id": "run-1", "status": "completed"}],
    )
    write_v1(sessions, "beta", [{"role": "user", "content": "hi"}])
    (source / "notes.txt").write_text("not a session, but part of the source")
    return source


def test_dry_run_writes_nothing_at_all(v1_source: Path, tmp_path: Path) -> None:
    before = tree_digest(v1_source)
    target = tmp_path / "target.db"
    report = migrate(v1_source, target, dry_run=True)
    assert [(s.session_id, s.action) for s in report.sessions] == [
        ("alpha", "migrate"),
        ("beta", "migrate"),
    ]
    assert not target.exists()
    assert list(tmp_path.glob("target.db*")) == []
    assert tree_digest(v1_source) == before


def test_no_standard_error_is_no_progress_bar(
    v1_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under pythonw or a daemon sys.stderr is None: the migration is asked
    whether to draw on it, and it draws nothing rather than failing."""
    monkeypatch.setattr(sys, "stderr", None)
    target = tmp_path / "target.db"
    assert len(migrate(v1_source, target, dry_run=True).sessions) == 2
    report = migrate(v1_source, target, backup_dir=tmp_path / "backup")
    assert report.migrated == 2


def test_apply_copies_backs_up_and_records(v1_source: Path, tmp_path: Path, engine: str) -> None:
    before = tree_digest(v1_source)
    target = tmp_path / "target.db"
    report = migrate(v1_source, target, backup_dir=tmp_path / "backup", engine=engine)
    assert (report.migrated, report.skipped) == (2, 0)
    assert tree_digest(v1_source) == before  # the source is only read
    assert tree_digest(tmp_path / "backup" / "source") == before  # the backup is verified whole
    with SqliteCheckpointer(target, engine=engine) as log:
        assert fold_events(log.read("alpha")) == [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}],
            },
            {"role": "assistant", "content": "one file"},
        ]
        last = list(log.read("alpha"))[-1].event
        assert last["legacy"] == {"role": "assistant", "content": "one file", "model": "m-1"}
    with SqliteStorage.open(target, engine=engine) as storage:
        alpha = storage.sessions.get("default", "alpha")
        assert alpha.metadata["legacy"]["runs"] == [{"id": "run-1", "status": "completed"}]
        assert alpha.metadata["legacy"]["header"] == {"version": 1, "id": "alpha"}
        assert [e.event["id"] for e in storage.sessions.load("default", "beta").items] == ["v1-0"]


def test_rerun_unchanged_is_a_no_op_and_a_changed_source_is_an_error(
    v1_source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "target.db"
    migrate(v1_source, target, backup_dir=tmp_path / "b1")
    again = migrate(v1_source, target, backup_dir=tmp_path / "b2")
    assert [s.action for s in again.sessions] == ["skip", "skip"]
    assert (again.migrated, again.skipped, again.backup) == (0, 2, None)
    assert not (tmp_path / "b2").exists()
    write_v1(v1_source / "sessions", "beta", [{"role": "user", "content": "edited"}])
    plan = migrate(v1_source, target, dry_run=True)
    assert [s.action for s in plan.sessions] == ["skip", "changed"]
    with pytest.raises(MigrationError, match="changed"):
        migrate(v1_source, target, backup_dir=tmp_path / "b3")
    with SqliteCheckpointer(target) as log:
        assert [e.event["content"] for e in log.read("beta")] == ["hi"]


def test_sessions_already_in_the_target_are_conflicts(v1_source: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    with SqliteCheckpointer(target) as log:
        log.append("beta", [{"type": "user", "content": "already here"}])
    plan = migrate(v1_source, target, dry_run=True)
    assert [s.action for s in plan.conflicts] == ["exists"]
    with pytest.raises(MigrationError, match="exists"):
        migrate(v1_source, target)
    with SqliteCheckpointer(target) as log:
        assert {info.id for info in log.list()} == {"beta"}


def test_a_failure_mid_batch_rolls_everything_back(
    v1_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "target.db"
    SqliteCheckpointer(target).close()
    before = tree_digest(v1_source)
    real = migrate_sources.convert
    calls = {"n": 0}

    def fail_on_the_fourth(*args: Any) -> Any:
        # Two calls in the plan, then the write phase: the second session fails.
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError("disk error while migrating")
        return real(*args)

    monkeypatch.setattr(migrate_sources, "convert", fail_on_the_fourth)
    with pytest.raises(OSError):
        migrate(v1_source, target, backup_dir=tmp_path / "backup")
    with SqliteCheckpointer(target) as log:
        assert log.list() == []  # alpha was written, then rolled back with the batch
    assert tree_digest(v1_source) == before
    assert tree_digest(tmp_path / "backup" / "source") == before
    monkeypatch.undo()
    assert migrate(v1_source, target, backup_dir=tmp_path / "again").migrated == 2


def test_bad_source_files_are_found_by_the_dry_run(tmp_path: Path) -> None:
    source = tmp_path / "bad"
    source.mkdir()
    write_v1(source, "ok", [{"role": "user", "content": "fine"}])
    (source / "broken.json").write_text(
        '{"version": 1, "id": "x", "messages": [{"role": "robot"}]}'
    )
    with pytest.raises(MigrationError, match="role"):
        migrate(source, tmp_path / "t.db", dry_run=True)
    (source / "broken.json").write_text('{"version": 2, "id": "x", "messages": []}')
    with pytest.raises(MigrationError, match="version"):
        migrate(source, tmp_path / "t.db", dry_run=True)
    (source / "broken.json").write_text('{"version": 1, "id": 42, "messages": []}')
    with pytest.raises(MigrationError, match="'id' must be a string"):
        migrate(source, tmp_path / "t.db", dry_run=True)
    assert not (tmp_path / "t.db").exists()


def test_a_file_store_migrates_with_its_timestamps_and_is_left_untouched(
    tmp_path: Path, engine: str
) -> None:
    store = tmp_path / "files"
    with FileCheckpointer(store) as cp:
        cp.append("s1", [{"type": "user", "content": "a"}, {"type": "assistant", "content": "b"}])
        cp.append("s2", [{"type": "tool_result", "tool_use_id": "t", "content": "c"}])
        original = list(cp.read("s1"))
    torn = next(p for p in store.glob("*.jsonl") if "s2" in p.name)
    with torn.open("ab") as handle:
        handle.write(b'{"seq":2,"end":2,"ts":1.0,"ev')  # a crash's torn tail
    before = tree_digest(store)
    target = tmp_path / "target.db"
    report = migrate(store, target, backup_dir=tmp_path / "backup", engine=engine)
    assert report.source_kind == "file"
    assert report.migrated == 2
    assert tree_digest(store) == before  # not even the torn tail was repaired
    with SqliteCheckpointer(target, engine=engine) as log:
        assert [(e.seq, e.ts, e.event) for e in log.read("s1")] == [
            (e.seq, e.ts, e.event) for e in original
        ]
        assert log.head("s2") == 1


def test_a_file_store_migrates_its_session_metadata(tmp_path: Path, engine: str) -> None:
    store = tmp_path / "files"
    with FileCheckpointer(store) as cp:
        cp.append("s1", [{"type": "user", "content": "a"}])
        cp.set_metadata("s1", {"title": "kept", "tags": ["x"]}, cp.metadata("s1").revision)
        cp.append("s2", [{"type": "user", "content": "b"}])
    report = migrate(store, tmp_path / "t.db", backup_dir=tmp_path / "backup", engine=engine)
    assert report.migrated == 2
    with SqliteCheckpointer(tmp_path / "t.db", engine=engine) as log:
        assert log.metadata("s1").value == {"title": "kept", "tags": ["x"]}
        assert log.metadata("s2").value is None


def test_a_damaged_metadata_file_is_found_by_the_dry_run(tmp_path: Path) -> None:
    store = tmp_path / "files"
    with FileCheckpointer(store) as cp:
        cp.append("s1", [{"type": "user", "content": "a"}])
        cp.set_metadata("s1", {"title": "t"}, cp.metadata("s1").revision)
    (meta,) = store.glob("*.jsonl.meta")
    meta.write_bytes(meta.read_bytes()[:-3])  # torn by hand: never by agentlog
    with FileCheckpointer(store) as cp:
        ok, detail = cp.check_integrity()
    assert not ok and meta.name in detail
    with pytest.raises(MigrationError, match="not the metadata"):
        migrate(store, tmp_path / "t.db", dry_run=True)
    assert not (tmp_path / "t.db").exists()


def test_a_newer_target_is_refused_even_for_a_dry_run(v1_source: Path, tmp_path: Path) -> None:
    import sqlite3

    target = tmp_path / "new.db"
    conn = sqlite3.connect(target)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    before = hashlib.sha256(target.read_bytes()).hexdigest()
    with pytest.raises(SchemaVersionError):
        migrate(v1_source, target, dry_run=True)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == before


def test_the_command_line(
    v1_source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "cli.db"
    main(["migrate", str(v1_source), str(target), "--dry-run"])
    out = capsys.readouterr().out
    assert "dry run: nothing written; ready" in out and not target.exists()
    main(["migrate", str(v1_source), str(target), "--backup", str(tmp_path / "bk")])
    out = capsys.readouterr().out
    assert "migrated 2, skipped 0" in out
    main(["migrate", str(v1_source), str(target)])
    assert "migrated 0, skipped 2" in capsys.readouterr().out


# -- tenants, dry runs that see what the apply refuses, and what failures leave ------------


def test_migrations_in_the_same_second_each_get_a_backup(
    v1_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scripted per-tenant migrations run within a second; the default backup
    is named for the second, so the next ones take -2, -3 (they were refused)."""
    monkeypatch.setattr(time, "gmtime", lambda *_: time.struct_time((2026, 1, 2, 3, 4, 5, 4, 2, 0)))
    target = tmp_path / "target.db"
    backups = [migrate(v1_source, target, tenant=t).backup for t in ("a", "b", "c")]
    stamp = "target.db.migration-20260102T030405Z"
    assert [b.name if b else None for b in backups] == [stamp, f"{stamp}-2", f"{stamp}-3"]
    assert all(b is not None and (b / "source").is_dir() for b in backups)


def test_the_ledger_is_kept_per_tenant(v1_source: Path, tmp_path: Path, engine: str) -> None:
    target = tmp_path / "target.db"
    first = migrate(v1_source, target, tenant="acme", backup_dir=tmp_path / "b1", engine=engine)
    assert first.migrated == 2
    plan = migrate(v1_source, target, tenant="globex", dry_run=True, engine=engine)
    assert [s.action for s in plan.sessions] == ["migrate", "migrate"]
    second = migrate(v1_source, target, tenant="globex", backup_dir=tmp_path / "b2", engine=engine)
    assert (second.migrated, second.skipped) == (2, 0)
    again = migrate(v1_source, target, tenant="acme", backup_dir=tmp_path / "b3", engine=engine)
    assert (again.migrated, again.skipped) == (0, 2)
    for tenant in ("acme", "globex"):
        with SqliteCheckpointer(target, engine=engine, tenant=tenant) as log:
            assert sorted(info.id for info in log.list()) == ["alpha", "beta"]
    # A tenant whose migration happened: an edited source is caught for it alone.
    write_v1(v1_source / "sessions", "beta", [{"role": "user", "content": "edited"}])
    plan = migrate(v1_source, target, tenant="acme", dry_run=True, engine=engine)
    assert [s.action for s in plan.sessions] == ["skip", "changed"]
    plan = migrate(v1_source, target, tenant="initech", dry_run=True, engine=engine)
    assert [s.action for s in plan.sessions] == ["migrate", "migrate"]


def test_a_version_6_ledger_is_brought_forward(tmp_path: Path, engine: str) -> None:
    # A target written before the ledger knew tenants: its rows keep their tenant.
    import sqlite3

    from agentlog.engine.schema import MIGRATIONS, migration

    target = tmp_path / "v6.db"
    db = sqlite3.connect(target)
    for statement in [sql for version in range(1, 6) for sql in MIGRATIONS[version]]:
        db.execute(statement)
    # The ledger as version 6 was first released, spelled out: a fixture of
    # what shipped, so it must not follow schema._LEDGER_TABLE as that changes.
    db.execute(
        """CREATE TABLE migration_ledger (
            source_id TEXT NOT NULL,
            source_key TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            tenant TEXT NOT NULL,
            session_id TEXT NOT NULL,
            migrated REAL NOT NULL,
            PRIMARY KEY (source_id, source_key)
        ) WITHOUT ROWID"""
    )
    db.execute("PRAGMA application_id = 1095191623")
    db.execute("PRAGMA user_version = 6")
    db.execute("INSERT INTO migration_ledger VALUES ('src', 'a.json', 'abc', 'acme', 'a', 1.0)")
    db.commit()
    db.close()
    assert any("migration_ledger_7" in sql for sql in migration(6))  # the rebuild
    assert not any("migration_ledger_7" in sql for sql in migration(0))  # a new file: at once
    with SqliteStorage.open(target, engine=engine):
        pass
    db = sqlite3.connect(target)
    assert db.execute("SELECT * FROM migration_ledger").fetchall() == [
        ("src", "a.json", "abc", "acme", "a", 1.0, None)  # no format recorded before 8
    ]
    db.execute(
        "INSERT INTO migration_ledger VALUES ('src', 'a.json', 'abc', 'b', 'a', 2.0, 'json-v1')"
    )
    db.commit()
    db.close()


@pytest.mark.parametrize(
    "document",
    [
        '{"version": 1, "id": "nan", "messages": [], "runs": [{"cost": NaN}]}',
        '{"version": 1, "id": "inf", "messages": [], "runs": [Infinity]}',
        '{"version": 1, "id": "huge", "messages": [], "runs": [{"cost": 1e400}]}',
        '{"version": 1, "id": "t", "messages": [{"role": "tool", "content": "no call id"}]}',
    ],
)
def test_the_dry_run_finds_every_file_the_apply_would_refuse(tmp_path: Path, document: str) -> None:
    source = tmp_path / "src"
    source.mkdir()
    write_v1(source, "ok", [{"role": "user", "content": "fine"}])
    (source / "odd.json").write_text(document)
    with pytest.raises(MigrationError) as planned:
        migrate(source, tmp_path / "t.db", dry_run=True)
    with pytest.raises(MigrationError) as applied:
        migrate(source, tmp_path / "t.db", backup_dir=tmp_path / "backup")
    assert "odd.json" in str(planned.value) and "odd.json" in str(applied.value)
    assert list(tmp_path.glob("t.db*")) == []


def test_a_failed_apply_into_a_new_target_leaves_no_database(
    v1_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "new.db"
    real = migrate_sources.convert
    calls = {"n": 0}

    def fail_in_the_write(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:  # two in the plan, then the first write
            raise OSError("disk error while migrating")
        return real(*args)

    monkeypatch.setattr(migrate_sources, "convert", fail_in_the_write)
    with pytest.raises(OSError):
        migrate(v1_source, target, backup_dir=tmp_path / "backup")
    assert list(tmp_path.glob("new.db*")) == []
    monkeypatch.undo()
    assert migrate(v1_source, target, backup_dir=tmp_path / "again").migrated == 2


def test_a_dry_run_against_an_existing_target_leaves_nothing_beside_it(
    v1_source: Path, tmp_path: Path, engine: str
) -> None:
    target = tmp_path / "target.db"
    with SqliteCheckpointer(target, engine=engine) as log:
        log.append("other", [{"type": "user", "content": "x"}])
    before = sorted(p.name for p in tmp_path.iterdir())
    assert "target.db-wal" not in before and "target.db-shm" not in before
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    plan = migrate(v1_source, target, dry_run=True, engine=engine)
    assert [s.action for s in plan.sessions] == ["migrate", "migrate"]
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert hashlib.sha256(target.read_bytes()).hexdigest() == digest
    # With the target open by a writer, the dry run reads it as usual.
    with SqliteCheckpointer(target, engine=engine) as log:
        log.append("beta", [{"type": "user", "content": "y"}])
        plan = migrate(v1_source, target, dry_run=True, engine=engine)
        assert [s.action for s in plan.sessions] == ["migrate", "exists"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_target_in_a_missing_directory_is_refused_not_created(
    v1_source: Path, tmp_path: Path, dry_run: bool
) -> None:
    target = tmp_path / "no-such-dir" / "x.db"
    with pytest.raises(MigrationError, match="no such directory"):
        migrate(v1_source, target, dry_run=dry_run)
    assert not (tmp_path / "no-such-dir").exists()


@pytest.mark.parametrize("named", ["bk", "bk/deeper", None])
def test_a_backup_cut_short_is_not_left_behind(
    v1_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str | None
) -> None:
    """The target's copy fails (a full disk) after the source's was taken: the
    half-made backup directory goes, the target is as it was, and a re-run works."""
    target = tmp_path / "t.db"
    with SqliteCheckpointer(target) as log:
        log.append("other", [{"type": "user", "content": "x"}])
    before = sorted(p.name for p in tmp_path.iterdir())
    digest = hashlib.sha256(target.read_bytes()).hexdigest()

    def full_disk(self: object, into: Path) -> None:
        assert (into / "source").is_dir()  # the source's copy is made by now
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(migrate_targets.SqliteTarget, "backup", full_disk)
    backup = {"backup_dir": tmp_path / named} if named else {}
    with pytest.raises(OSError, match="No space left"):
        migrate(v1_source, target, **backup)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert hashlib.sha256(target.read_bytes()).hexdigest() == digest
    monkeypatch.undo()
    assert migrate(v1_source, target, **backup).migrated == 2


@pytest.mark.parametrize("inside", ["bk", "bk/deeper"])
def test_a_refused_backup_inside_the_source_leaves_the_source_as_it_was(
    v1_source: Path, tmp_path: Path, inside: str
) -> None:
    """The refusal comes before the backup directory is made: nothing of it
    (no ``bk/``) is left behind in the source, and nothing is migrated."""
    before = sorted(p.relative_to(v1_source) for p in v1_source.rglob("*"))
    target = tmp_path / "t.db"
    with pytest.raises(MigrationError, match="outside the source"):
        migrate(v1_source, target, backup_dir=v1_source / inside)
    assert sorted(p.relative_to(v1_source) for p in v1_source.rglob("*")) == before
