"""What ``agentlog serve`` does to the store it shows (finding 10 of issue 40).

Read-only (the default) it never upgrades an older schema, and the only
files it makes are SQLite's ``-wal`` and ``-shm`` beside a SQLite file, as
docs/serve.md says. ``--allow-writes`` refuses a store of an older schema
(one line on stderr, exit 2, the store unchanged) unless ``--upgrade`` is
given, and then upgrades it.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentlog.cli.serve import viewer_source
from agentlog.engine.schema import SCHEMA_VERSION

from ..conftest import (
    child_env,
    digest,
    postgres_conninfo,
    postgres_schema,
    undo_postgres_version_7,
)
from ..engine.test_schema import make_old_file
from .conftest import guarded_client

OLDER = SCHEMA_VERSION - 1


def _serve(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``agentlog serve ARGS``, expected to be refused before it listens: one
    that serves instead is stopped at its first line, and what it said so far
    returned (exit status 0)."""
    command = [sys.executable, "-m", "agentlog", "serve", *map(str, args), "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()
    ) as process:
        assert process.stderr is not None and process.stdout is not None
        first = process.stderr.readline()
        if "(Ctrl-C stops)" in first:
            process.kill()
            process.wait(30)
            return subprocess.CompletedProcess(command, 0, "", first)
        rest = process.stderr.read()
        out = process.stdout.read()
        return subprocess.CompletedProcess(command, process.wait(60), out, first + rest)


def _refused(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 2, run
    assert run.stdout == "" and "Traceback" not in run.stderr, run
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("agentlog serve: "), run
    return run.stderr


def _version(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _args(store: str, **options: Any) -> argparse.Namespace:
    defaults = {"tenant": "default", "schema": None, "allow_writes": False, "upgrade": False}
    return argparse.Namespace(store=store, **{**defaults, **options})


@pytest.mark.parametrize("version", [1, OLDER])
def test_allow_writes_refuses_an_older_file_and_leaves_it_as_it_is(
    tmp_path: Path, version: int
) -> None:
    db = tmp_path / "old.db"
    make_old_file(db, version)
    before = digest(db)
    line = _refused(_serve(db, "--allow-writes"))
    assert f"schema version {version}, older than this agentlog's {SCHEMA_VERSION}" in line
    assert "--upgrade" in line
    assert digest(db) == before and _version(db) == version


def test_upgrade_without_allow_writes_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    make_old_file(db, OLDER)
    before = digest(db)
    assert "--upgrade is for --allow-writes" in _refused(_serve(db, "--upgrade"))
    assert digest(db) == before


def test_allow_writes_with_upgrade_upgrades_the_file_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old.db"
    make_old_file(db, OLDER)
    source = viewer_source(_args(str(db), allow_writes=True, upgrade=True))
    try:
        assert _version(db) == SCHEMA_VERSION
        note = capsys.readouterr().err
        assert f"from schema version {OLDER} to {SCHEMA_VERSION}" in note
        assert note.count("\n") == 1
        with guarded_client(source) as client:
            events = client.get("/api/sessions/old/events").json()["events"]
            assert [e["event"]["content"] for e in events] == ["hi"]
    finally:
        source.close()


def test_allow_writes_on_a_current_file_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "new.db"
    make_old_file(db, SCHEMA_VERSION)
    viewer_source(_args(str(db), allow_writes=True)).close()
    assert capsys.readouterr().err == ""


def test_a_read_only_viewer_never_upgrades_and_makes_only_the_wal_and_shm(
    tmp_path: Path,
) -> None:
    """What docs/serve.md says a read-only serve creates: beside a SQLite file
    that has none, an empty ``-wal`` and a ``-shm`` (SQLite's index of the
    WAL), with the file's own permissions, left when it stops."""
    db = tmp_path / "old.db"
    make_old_file(db, OLDER)
    conn = sqlite3.connect(db)  # as every agentlog writer leaves a file
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]
    os.chmod(db, 0o640)
    before = digest(db)
    source = viewer_source(_args(str(db)))
    try:
        with guarded_client(source) as client:
            for path in ["/api/sessions", "/api/sessions/old/events", "/api/stores/sessions"]:
                assert client.get(path).status_code == 200, path
    finally:
        source.close()
    made = {p.name: (p.stat().st_size, p.stat().st_mode & 0o777) for p in tmp_path.iterdir()}
    assert made.pop("old.db") == (db.stat().st_size, 0o640)
    assert made.pop("old.db-wal") == (0, 0o640)
    assert made.pop("old.db-shm")[1] == 0o640
    assert made == {}
    assert digest(db) == before
    assert _version(db) == OLDER  # (a writable connection, which removes the two)


def _postgres_store_at(version: int, tmp_path: Path) -> str:
    """A PostgreSQL store's schema set back to ``version`` (its version row
    only: what a writable open would then upgrade)."""
    import psycopg

    from agentlog import PostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
        log.append("old", [{"type": "user", "content": "hi"}])
    with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE {schema}.fork_origins")  # what version 6 adds
        undo_postgres_version_7(conn, schema)  # and version 7
        conn.execute(f"UPDATE {schema}.agentlog_version SET version = {version}")
    return schema


def _postgres_version(schema: str) -> int:
    import psycopg

    with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
        row: Any = conn.execute(f"SELECT version FROM {schema}.agentlog_version").fetchone()
        return int(row[0])


def test_allow_writes_refuses_an_older_postgres_schema_unless_upgrade(
    postgres_server: str, tmp_path: Path
) -> None:
    from agentlog.engine.postgres import SCHEMA_VERSION as POSTGRES_VERSION

    assert POSTGRES_VERSION == 7  # the store below is made as version 5 was
    schema = _postgres_store_at(5, tmp_path)
    try:
        line = _refused(_serve(postgres_conninfo(), "--schema", schema, "--allow-writes"))
        assert f"schema version 5, older than this agentlog's {POSTGRES_VERSION}" in line
        assert _postgres_version(schema) == 5
        args = _args(postgres_conninfo(), schema=schema, allow_writes=True, upgrade=True)
        viewer_source(args).close()
        assert _postgres_version(schema) == POSTGRES_VERSION
    finally:
        import psycopg

        with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
