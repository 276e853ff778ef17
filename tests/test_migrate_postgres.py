"""agentlog migrate into PostgreSQL (JSON v1, a file store, a SQLite tenant),
and from one SQLite file to another: the same plan, dry run, backup, ledger
and all-or-nothing rules as into SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentlog.migrate.sources as migrate_sources
from agentlog import FileCheckpointer, SqliteCheckpointer, SqliteStorage
from agentlog.cli import main
from agentlog.migrate import MigrationError, legacy_value, migrate
from tests.conftest import postgres_schema, undo_postgres_version_7
from tests.test_migrate_fidelity import FIXTURES


def as_url(conninfo: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(conninfo)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def pg_target(postgres_server: str, location: Path) -> tuple[str, str]:
    """``(URL, schema)`` of a migration target of its own for the test at ``location``."""
    return as_url(postgres_server), postgres_schema(location)


@pytest.fixture
def url(postgres_server: str) -> str:
    return as_url(postgres_server)


@pytest.fixture
def schema(tmp_path: Path) -> str:
    return postgres_schema(tmp_path)


@pytest.fixture
def admin(postgres_server: str) -> Iterator[Any]:
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        yield conn


def schema_exists(admin: Any, schema: str) -> bool:
    row = admin.execute(
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
    ).fetchone()
    return bool(row[0])


@pytest.fixture
def sqlite_source(tmp_path: Path) -> Path:
    """A SQLite store holding what a host writes through both faces of the log."""
    path = tmp_path / "source.db"
    with SqliteStorage.open(path) as storage:
        sessions = storage.sessions
        sessions.create("acme", "chat-1", {"title": "周报", "tags": ["a"]})
        items = [{"type": "user", "content": f"turn {n}", "id": f"item-{n}"} for n in range(5)]
        record = sessions.append("acme", "chat-1", 0, items)
        sessions.compact("acme", "chat-1", record.revision, 3, {"summary": "first three"})
        sessions.create("acme", "empty", None)
        sessions.create("globex", "other", None)  # another tenant: not migrated
    with SqliteCheckpointer(path, tenant="acme") as log:
        log.append(
            "plain", [{"type": "user", "content": "hi"}, {"type": "assistant", "content": "yo"}]
        )
    return path


def test_a_sqlite_tenant_moves_to_postgresql_exactly(
    sqlite_source: Path, tmp_path: Path, url: str, schema: str, admin: Any
) -> None:
    from agentlog import PostgresCheckpointer, PostgresStorage

    plan = migrate(sqlite_source, url, schema=schema, tenant="acme", dry_run=True)
    assert [(s.session_id, s.action) for s in plan.sessions] == [
        ("chat-1", "migrate"),
        ("empty", "migrate"),
        ("plain", "migrate"),
    ]
    assert not schema_exists(admin, schema)  # a dry run creates nothing, not even the schema
    report = migrate(
        sqlite_source, url, schema=schema, tenant="acme", backup_dir=tmp_path / "backup"
    )
    assert report.migrated == 3 and report.source_kind == "sqlite"
    assert (tmp_path / "backup" / "source" / "source.db").exists()  # the verified copy
    with (
        SqliteStorage.open(sqlite_source) as before,
        PostgresStorage.open(url, schema=schema) as after,
    ):
        for name in ("chat-1", "empty", "plain"):
            old, new = before.sessions.load("acme", name), after.sessions.load("acme", name)
            assert new.session == old.session  # metadata, revision, head, snapshot, times
            assert new.snapshot == old.snapshot
            assert new.items == old.items  # seqs, times, types, payloads
        assert after.sessions.list("globex") == []
    with SqliteCheckpointer(sqlite_source, tenant="acme") as old_log:
        expected = list(old_log.read("chat-1"))
    with PostgresCheckpointer(url, schema=schema, tenant="acme") as log:
        assert list(log.read("chat-1")) == expected  # seqs, times, types, payloads
    rows = admin.execute(
        f"SELECT source_key, source_format FROM {schema}.migration_ledger ORDER BY 1"
    ).fetchall()
    assert rows == [
        ("chat-1", "agentlog-sqlite"),
        ("empty", "agentlog-sqlite"),
        ("plain", "agentlog-sqlite"),
    ]
    again = migrate(sqlite_source, url, schema=schema, tenant="acme", backup_dir=tmp_path / "b2")
    assert again.migrated == 0 and again.skipped == 3
    with SqliteCheckpointer(sqlite_source, tenant="acme") as log:
        log.append("plain", [{"type": "user", "content": "later"}], expected_head=2)
    changed = migrate(sqlite_source, url, schema=schema, tenant="acme", dry_run=True)
    assert [s.action for s in changed.sessions if s.session_id == "plain"] == ["changed"]


def test_json_v1_files_move_to_postgresql_with_everything_kept(
    tmp_path: Path, url: str, schema: str
) -> None:
    from agentlog import PostgresStorage

    sessions = tmp_path / "legacy" / "sessions"
    sessions.mkdir(parents=True)
    for name, text in FIXTURES.items():
        (sessions / name).write_text(text, encoding="utf-8")
    report = migrate(tmp_path / "legacy", url, schema=schema, backup_dir=tmp_path / "backup")
    assert report.migrated == len(FIXTURES)
    ids = {s.source_key: s.session_id for s in report.sessions}
    with PostgresStorage.open(url, schema=schema) as storage:
        for name, text in FIXTURES.items():
            loaded = storage.sessions.load("default", ids[f"sessions/{name}"])
            rebuilt = dict(legacy_value(loaded.session.metadata)["header"])
            rebuilt["messages"] = [legacy_value(item.event) for item in loaded.items]
            original = json.loads(text)
            assert [json.dumps(m) for m in rebuilt["messages"]] == [
                json.dumps(m) for m in original["messages"]
            ]
        assert storage.sessions.get("default", "empty").revision == 0


def test_a_file_store_moves_to_postgresql_with_its_times(
    tmp_path: Path, url: str, schema: str
) -> None:
    from agentlog import PostgresCheckpointer

    with FileCheckpointer(tmp_path / "files") as files:
        files.append(
            "s1", [{"type": "user", "content": "a"}, {"type": "assistant", "content": "b"}]
        )
        expected = list(files.read("s1"))
    migrate(tmp_path / "files", url, schema=schema, backup_dir=tmp_path / "backup")
    with PostgresCheckpointer(url, schema=schema) as log:
        assert list(log.read("s1")) == expected
        assert log.list()[0].mtime == expected[-1].ts


def test_conflicts_and_failures_leave_postgresql_untouched(
    sqlite_source: Path,
    tmp_path: Path,
    url: str,
    schema: str,
    admin: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentlog import PostgresCheckpointer

    real = migrate_sources.SqliteSource.load
    calls = {"n": 0}

    def fail_on_the_second(self: Any, planned: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk error while migrating")
        return real(self, planned)

    monkeypatch.setattr(migrate_sources.SqliteSource, "load", fail_on_the_second)
    with pytest.raises(OSError):
        migrate(sqlite_source, url, schema=schema, tenant="acme", backup_dir=tmp_path / "b1")
    assert not schema_exists(admin, schema)  # created in the failed transaction, rolled back
    monkeypatch.undo()
    with PostgresCheckpointer(url, schema=schema, tenant="acme") as log:
        log.append("plain", [{"type": "user", "content": "already here"}])
    with pytest.raises(MigrationError, match=r"plain \(exists\)"):
        migrate(sqlite_source, url, schema=schema, tenant="acme", backup_dir=tmp_path / "b2")
    with PostgresCheckpointer(url, schema=schema, tenant="acme") as log:
        assert [info.id for info in log.list()] == ["plain"]
        assert log.head("plain") == 1


def test_the_cli_migrates_into_postgresql(
    sqlite_source: Path,
    tmp_path: Path,
    url: str,
    schema: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["migrate", str(sqlite_source), url, "--schema", schema, "--tenant", "acme"]
    assert main([*args, "--dry-run"]) is None
    assert "dry run: nothing written; ready" in capsys.readouterr().out
    assert main([*args, "--backup", str(tmp_path / "backup")]) is None
    assert "migrated 3, skipped 0" in capsys.readouterr().out


def test_a_sqlite_tenant_moves_to_another_sqlite_file(
    sqlite_source: Path, tmp_path: Path, engine: str
) -> None:
    target = tmp_path / "target.db"
    report = migrate(sqlite_source, target, tenant="acme", engine=engine, backup_dir=tmp_path / "b")
    assert report.migrated == 3
    with SqliteStorage.open(sqlite_source) as before, SqliteStorage.open(target) as after:
        for name in ("chat-1", "empty", "plain"):
            assert after.sessions.load("acme", name) == before.sessions.load("acme", name)
    with pytest.raises(MigrationError, match="same file"):
        migrate(sqlite_source, sqlite_source, tenant="acme")
    with pytest.raises(MigrationError, match="PostgreSQL"):
        migrate(sqlite_source, target, schema="x")


def test_a_version_2_store_gains_the_ledger_when_migrated_into(
    sqlite_source: Path, tmp_path: Path, url: str, schema: str, admin: Any
) -> None:
    from agentlog import PostgresCheckpointer

    with PostgresCheckpointer(url, schema=schema) as log:
        log.append("old", [{"type": "user", "content": "written before schema 3"}])
    admin.execute(f"DROP TABLE {schema}.migration_ledger")
    admin.execute(f"ALTER TABLE {schema}.events DROP COLUMN crc")  # version 4's
    admin.execute(f"DROP TABLE {schema}.append_keys")  # version 5's
    admin.execute(f"DROP TABLE {schema}.fork_origins")  # version 6's
    undo_postgres_version_7(admin, schema)
    admin.execute(f"UPDATE {schema}.agentlog_version SET version = 2")
    plan = migrate(sqlite_source, url, schema=schema, tenant="acme", dry_run=True)
    assert {s.action for s in plan.sessions} == {"migrate"}  # no ledger yet: nothing skipped
    migrate(sqlite_source, url, schema=schema, tenant="acme", backup_dir=tmp_path / "b")
    from agentlog.engine.postgres.schema import SCHEMA_VERSION

    version = admin.execute(f"SELECT version FROM {schema}.agentlog_version").fetchone()
    assert version == (SCHEMA_VERSION,)
    assert admin.execute(f"SELECT count(*) FROM {schema}.migration_ledger").fetchone() == (3,)
    with PostgresCheckpointer(url, schema=schema) as log:
        assert log.head("old") == 1


def test_the_cli_takes_a_libpq_string_and_never_prints_a_password(
    sqlite_source: Path,
    tmp_path: Path,
    postgres_server: str,
    schema: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A libpq "host=… dbname=…" string is a PostgreSQL target too, not a file name.
    args = ["migrate", str(sqlite_source), postgres_server, "--schema", schema]
    assert main([*args, "--tenant", "acme", "--dry-run"]) is None
    assert "ready" in capsys.readouterr().out
    assert not Path(postgres_server).exists()
    # A dead server, with a password in the URL: one line, the password hidden.
    dead = "postgresql://agent:s3cr3t-pw@127.0.0.1:9/nowhere"
    with pytest.raises(SystemExit) as exit_:
        main(["migrate", str(sqlite_source), dead, "--tenant", "acme", "--dry-run"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s3cr3t-pw" not in err
    assert "unavailable" in err


def test_migrated_events_carry_checksums_and_damage_is_never_copied(
    sqlite_source: Path, tmp_path: Path, url: str, schema: str, admin: Any
) -> None:
    import sqlite3
    import zlib

    from agentlog import PostgresCheckpointer

    migrate(sqlite_source, url, schema=schema, tenant="acme", backup_dir=tmp_path / "b1")
    rows = admin.execute(f"SELECT payload, crc FROM {schema}.events").fetchall()
    assert rows and all(crc == zlib.crc32(bytes(payload)) for payload, crc in rows)
    with PostgresCheckpointer(url, schema=schema, tenant="acme") as log:
        assert log.check_integrity(deep=True) == (True, "ok")
    # A damaged event in the source stops the plan, naming its session and seq.
    db = sqlite3.connect(sqlite_source)
    ((key, data),) = [
        (key, data) for key, data in db.execute("SELECT id, data FROM events") if b'"hi"' in data
    ]
    # Valid JSON, other bytes: only the checksum can tell.
    db.execute("UPDATE events SET data = ? WHERE id = ?", (data.replace(b"hi", b"HI"), key))
    db.commit()
    db.close()
    with pytest.raises(MigrationError, match=r"session 'plain': event 1: payload checksum"):
        migrate(sqlite_source, tmp_path / "other.db", tenant="acme", dry_run=True)


@pytest.mark.parametrize("into", ["sqlite", "postgresql"])
def test_a_session_retention_emptied_keeps_its_head(
    tmp_path: Path, into: str, request: pytest.FixtureRequest
) -> None:
    from agentlog import PostgresStorage

    source = tmp_path / "pruned.db"
    with SqliteStorage.open(source) as storage:
        sessions = storage.sessions
        record = sessions.create("acme", "chat", None)
        items = [{"type": "user", "id": f"m{n}", "content": f"turn {n}"} for n in (1, 2)]
        record = sessions.append("acme", "chat", record.revision, items)
        sessions.compact("acme", "chat", record.revision, 2, {"summary": "both turns"})
        assert sessions.prune("acme", "chat") == 2  # every event gone, the head stays 2
        before = sessions.load("acme", "chat")
    if into == "sqlite":
        target = str(tmp_path / "target.db")
        storage_of = lambda: SqliteStorage.open(target)  # noqa: E731
    else:
        target, schema = request.getfixturevalue("url"), request.getfixturevalue("schema")
        storage_of = lambda: PostgresStorage.open(target, schema=schema)  # noqa: E731
    kwargs = {} if into == "sqlite" else {"schema": schema}
    migrate(source, target, tenant="acme", backup_dir=tmp_path / "backup", **kwargs)
    with storage_of() as after:
        assert after.sessions.load("acme", "chat") == before
        # The next event is 3, and load() shows it after the snapshot.
        assert after.checkpointer("acme").append("chat", [{"type": "user", "content": "3"}]) == 3
        assert [item.seq for item in after.sessions.load("acme", "chat").items] == [3]
        if into == "sqlite":
            assert after.checkpointer("acme").check_integrity(deep=True) == (True, "ok")
