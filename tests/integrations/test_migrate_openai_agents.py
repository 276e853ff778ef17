"""``agentlog migrate`` from the OpenAI Agents SDK's own ``SQLiteSession``
database: written by a real ``Runner`` (the scripted model), migrated, then
read and resumed through :class:`AgentlogSession` — equal to the SDK's own."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from ..conftest import extensions_required

try:
    import agents  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    if extensions_required():
        pytest.fail(f"the OpenAI Agents SDK is not installed ({exc})", pytrace=False)
    pytest.skip(f"the OpenAI Agents SDK is not installed ({exc})", allow_module_level=True)

from agents import SQLiteSession

from agentlog import DEFAULT_TENANT, SqliteStorage, StorageNotFoundError
from agentlog.cli import main
from agentlog.integrations.openai_agents import AgentlogSession
from agentlog.migrate import MigrationError, migrate

from . import openai_agents_child as child
from .migrating import assert_refused, assert_rerun_skips


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sdk_items(db: Path, session_id: str) -> list[Any]:
    async def read() -> list[Any]:
        with closing(SQLiteSession(session_id, db)) as session:
            return await session.get_items()

    return asyncio.run(read())


def ours(target: Path, session_id: str, limit: int | None = None) -> list[Any]:
    async def read() -> list[Any]:
        async with AgentlogSession(session_id, target) as session:
            return await session.get_items(limit)

    return asyncio.run(read())


@pytest.fixture
def sdk_db(tmp_path: Path) -> Path:
    """Two sessions a real Runner wrote on SQLiteSession, and one added by hand."""
    db = tmp_path / "conversations.db"

    async def write() -> None:
        for session_id, texts in (("alice", ["Paris", "Rome"]), ("bob", ["Oslo"])):
            with closing(SQLiteSession(session_id, db)) as session:
                await child.converse(session, texts)
        with closing(SQLiteSession("carol", db)) as session:
            await session.add_items([{"role": "user", "content": "ünïcode ☃"}])

    asyncio.run(write())
    return db


def test_every_session_reads_back_item_for_item(sdk_db: Path, tmp_path: Path, engine: str) -> None:
    before = digest(sdk_db)
    target = tmp_path / "agentlog.db"
    plan = migrate(sdk_db, target, dry_run=True, engine=engine)
    assert plan.source_kind == "openai-sqlite"
    assert [(s.session_id, s.action) for s in plan.sessions] == [
        ("alice", "migrate"),
        ("bob", "migrate"),
        ("carol", "migrate"),
    ]
    assert not target.exists()
    report = migrate(sdk_db, target, backup_dir=tmp_path / "backup", engine=engine)
    assert report.migrated == 3
    assert [s.sha256 for s in report.sessions] == [s.sha256 for s in plan.sessions]
    assert digest(sdk_db) == before  # the source is only read
    copy = tmp_path / "backup" / "source" / sdk_db.name  # SQLite's own copy: the same rows
    copied = migrate(copy, tmp_path / "check.db", dry_run=True, source_id=str(sdk_db.resolve()))
    assert [s.sha256 for s in copied.sessions] == [s.sha256 for s in plan.sessions]
    for session_id in ("alice", "bob", "carol"):
        expected = sdk_items(sdk_db, session_id)
        assert expected  # the SDK wrote them
        assert ours(target, session_id) == expected
        assert ours(target, session_id, 3) == expected[-3:]
    with SqliteStorage.open(target, engine=engine) as storage:
        record = storage.sessions.get(DEFAULT_TENANT, "alice")
    assert record.metadata["source"] == {"format": "openai-agents-sqlite-session", "key": "alice"}


def test_resuming_on_agentlog_continues_as_on_the_sdk(sdk_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "agentlog.db"
    migrate(sdk_db, target)

    async def resume() -> tuple[list[str], list[Any], list[str], list[Any]]:
        theirs_db = sdk_db.with_name("copy.db")
        theirs_db.write_bytes(sdk_db.read_bytes())
        with closing(SQLiteSession("alice", theirs_db)) as theirs:
            their_finals = await child.converse(theirs, ["Vienna"])
            their_items = await theirs.get_items()
        async with AgentlogSession("alice", target) as session:
            our_finals = await child.converse(session, ["Vienna"])
            our_items = await session.get_items()
        return their_finals, their_items, our_finals, our_items

    their_finals, their_items, our_finals, our_items = asyncio.run(resume())
    assert our_finals == their_finals
    assert our_items == their_items


def test_original_times_are_kept(sdk_db: Path, tmp_path: Path, engine: str) -> None:
    with sqlite3.connect(sdk_db) as conn:  # as a months-old store would hold them
        conn.execute("UPDATE agent_messages SET created_at = '2025-03-04 05:06:07'")
        conn.execute("UPDATE agent_sessions SET created_at = '2025-03-01 00:00:00'")
    target = tmp_path / "agentlog.db"
    migrate(sdk_db, target, engine=engine)
    with SqliteStorage.open(target, engine=engine) as storage:
        log = storage.checkpointer()
        stamps = {event.ts for event in log.read("bob")}
        record = storage.sessions.get(DEFAULT_TENANT, "bob")
    utc = datetime.timezone.utc
    assert stamps == {datetime.datetime(2025, 3, 4, 5, 6, 7, tzinfo=utc).timestamp()}
    assert record.created_at == datetime.datetime(2025, 3, 1, tzinfo=utc).timestamp()


def test_a_rerun_skips_and_a_changed_session_is_refused(sdk_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "agentlog.db"
    assert_rerun_skips(sdk_db, target, 3)

    async def more() -> None:
        with closing(SQLiteSession("bob", sdk_db)) as session:
            await session.add_items([{"role": "user", "content": "later"}])

    asyncio.run(more())
    plan = migrate(sdk_db, target, dry_run=True)
    assert {s.session_id: s.action for s in plan.sessions} == {
        "alice": "skip",
        "bob": "changed",
        "carol": "skip",
    }
    with pytest.raises(MigrationError, match="bob"):
        migrate(sdk_db, target)


def test_tenants_and_undecodable_rows(sdk_db: Path, tmp_path: Path, engine: str) -> None:
    with sqlite3.connect(sdk_db) as conn:
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES ('carol', '{oops')"
        )
    target = tmp_path / "agentlog.db"
    report = migrate(sdk_db, target, tenant="acme", engine=engine)
    carol = next(s for s in report.sessions if s.session_id == "carol")
    assert any("not JSON" in note for note in carol.notes)
    with SqliteStorage.open(target, engine=engine) as storage:
        items = storage.sessions.load("acme", "carol").items
        with pytest.raises(StorageNotFoundError):
            storage.sessions.get(DEFAULT_TENANT, "carol")
    assert [e.event["item"] for e in items] == sdk_items(sdk_db, "carol")


def test_the_command_line_names_and_detects_the_kind(
    sdk_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "agentlog.db"
    main(["migrate", str(sdk_db), str(target), "--dry-run"])
    assert capsys.readouterr().out.startswith("openai-sqlite source, 3 sessions")
    main(["migrate", str(sdk_db), str(target), "--from", "openai-sqlite"])
    assert "migrated 3, skipped 0" in capsys.readouterr().out
    assert ours(target, "bob") == sdk_items(sdk_db, "bob")


@pytest.mark.parametrize(
    ("content", "kind", "message"),
    [
        (b"not a database at all, only text" * 200, None, "not a readable SQLite database"),
        (None, "openai-sqlite", "no agent_messages table"),
        ("newer", None, "unknown schema for an OpenAI Agents SQLiteSession"),
    ],
)
def test_bad_sources_are_one_line_and_write_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: Any,
    kind: str | None,
    message: str,
) -> None:
    source = tmp_path / "source.db"
    if isinstance(content, bytes):
        source.write_bytes(content)
    else:
        with sqlite3.connect(source) as conn:
            if content == "newer":
                conn.execute("CREATE TABLE agent_sessions (session_id, created_at, updated_at)")
                conn.execute("CREATE TABLE agent_messages (id, session_id, payload)")
            else:
                conn.execute("CREATE TABLE other (x)")
        conn.close()
    assert_refused(capsys, source, tmp_path / "agentlog.db", kind, message)


def test_into_postgresql_reads_back_item_for_item(
    sdk_db: Path, tmp_path: Path, postgres_server: str
) -> None:
    from agentlog.aio import AsyncPostgresCheckpointer

    from ..test_migrate_postgres import pg_target

    url, schema = pg_target(postgres_server, tmp_path)
    assert migrate(sdk_db, url, schema=schema, backup_dir=tmp_path / "b").migrated == 3

    async def read() -> list[Any]:
        async with AsyncPostgresCheckpointer(postgres_server, schema=schema) as log:
            return await AgentlogSession("alice", log).get_items()

    assert asyncio.run(read()) == sdk_items(sdk_db, "alice")
