"""Fork lineage kept by ``agentlog backup`` and by ``agentlog migrate`` between
agentlog stores (file store or SQLite into SQLite or PostgreSQL); a JSON v1
export has none to keep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog import FileCheckpointer, Fork, ForkOrigin, SqliteCheckpointer
from agentlog.cli import main
from agentlog.migrate import migrate

from .conftest import postgres_schema
from .test_migrate import write_v1
from .test_migrate_postgres import as_url

EVENTS = [{"type": "user", "content": "a"}, {"type": "assistant", "content": "b"}]


def fill(log: Any) -> None:
    """A source with a fork, a fork of the fork, and a plain session."""
    log.append("trunk", EVENTS)
    log.fork("trunk", 1, "branch")
    log.append("branch", EVENTS)
    log.fork("branch", 2, "twig")
    log.append("plain", EVENTS)


def check(log: Any) -> None:
    assert log.lineage("branch") == ForkOrigin("trunk", 1)
    assert log.lineage("twig") == ForkOrigin("branch", 2)
    assert log.forks("trunk") == [Fork("branch", 1)]
    assert log.lineage("trunk") is None and log.lineage("plain") is None


def file_source(tmp_path: Path) -> Path:
    store = tmp_path / "files"
    with FileCheckpointer(store) as log:
        fill(log)
    return store


def sqlite_source(tmp_path: Path, tenant: str = "acme") -> Path:
    path = tmp_path / "source.db"
    with SqliteCheckpointer(path, tenant=tenant) as log:
        fill(log)
    return path


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_migrating_into_sqlite_keeps_lineage(tmp_path: Path, engine: str, kind: str) -> None:
    source = file_source(tmp_path) if kind == "file" else sqlite_source(tmp_path)
    tenant = "default" if kind == "file" else "acme"
    target = tmp_path / "target.db"
    report = migrate(source, target, tenant=tenant, engine=engine, backup_dir=tmp_path / "b")
    assert report.migrated == 4
    with SqliteCheckpointer(target, tenant=tenant, engine=engine) as log:
        check(log)
    again = migrate(source, target, tenant=tenant, engine=engine, backup_dir=tmp_path / "b2")
    assert (again.migrated, again.skipped) == (0, 4)  # the lineage is no change


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_migrating_into_postgresql_keeps_lineage(
    tmp_path: Path, postgres_server: str, kind: str
) -> None:
    from agentlog import PostgresCheckpointer

    source = file_source(tmp_path) if kind == "file" else sqlite_source(tmp_path)
    tenant = "default" if kind == "file" else "acme"
    url, schema = as_url(postgres_server), postgres_schema(tmp_path)
    report = migrate(source, url, schema=schema, tenant=tenant, backup_dir=tmp_path / "b")
    assert report.migrated == 4
    with PostgresCheckpointer(url, schema=schema, tenant=tenant) as log:
        check(log)


def test_json_v1_sessions_have_no_lineage(tmp_path: Path) -> None:
    (tmp_path / "v1" / "sessions").mkdir(parents=True)
    write_v1(tmp_path / "v1" / "sessions", "s1", [{"role": "user", "content": "hi"}])
    migrate(tmp_path / "v1", tmp_path / "t.db", backup_dir=tmp_path / "b")
    with SqliteCheckpointer(tmp_path / "t.db") as log:
        assert [info.id for info in log.list()] == ["s1"]
        assert log.lineage("s1") is None


def test_a_backup_keeps_lineage_and_restores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = sqlite_source(tmp_path, tenant="default")
    copy = tmp_path / "copy.db"
    assert main(["backup", str(source), str(copy)]) is None
    assert "verified" in capsys.readouterr().out
    source.unlink()
    copy.rename(source)  # restoring is putting the copy back
    with SqliteCheckpointer(source) as log:
        check(log)
