"""``agentlog migrate`` from Google ADK's own ``DatabaseSessionService``
database (SQLite): sessions written by ADK's service (real ``append_event``
with session, ``app:``, ``user:`` and ``temp:`` state deltas), migrated, then
read through :class:`AgentlogSessionService` — equal to ADK's own
``get_session``."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ..conftest import digest, extensions_required

try:
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.adk.sessions.database_session_service import DatabaseSessionService
    from google.genai import types
except ImportError as exc:  # pragma: no cover - depends on the environment
    # DatabaseSessionService also needs SQLAlchemy and aiosqlite (the test extra).
    if extensions_required():
        pytest.fail(f"ADK's DatabaseSessionService cannot be imported ({exc})", pytrace=False)
    pytest.skip(f"ADK's DatabaseSessionService cannot be imported ({exc})", allow_module_level=True)

from agentlog.cli import main
from agentlog.integrations.google_adk import AgentlogSessionService
from agentlog.migrate import MigrationError, migrate

from .migrating import assert_refused, assert_rerun_skips

#: ``(app, user, session)`` of every session the fixture writes.
SESSIONS = [
    ("shop", "ann", "s-1"),
    ("shop", "ann", "s-2"),
    ("shop", "bo", "s-3"),
    ("desk", "ann", "s-1"),
]


def adk_service(db: Path) -> DatabaseSessionService:
    return DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db}")


def said(author: str, text: str, delta: dict[str, Any], invocation: str) -> Event:
    return Event(
        author=author,
        invocation_id=invocation,
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
        actions=EventActions(state_delta=delta),
    )


async def write_sessions(db: Path) -> None:
    service = adk_service(db)
    try:
        for n, (app, user, sid) in enumerate(SESSIONS):
            session = await service.create_session(
                app_name=app,
                user_id=user,
                session_id=sid,
                state={"topic": f"t{n}", "app:region": "eu", f"user:seen{n}": True},
            )
            for turn in range(3):
                delta = {"turn": turn, "temp:scratch": turn, f"user:last{n}": turn}
                if turn == 1:
                    delta["app:hits"] = n
                    delta["topic"] = f"changed {n}"
                await service.append_event(
                    session, said("user", f"hi {n}.{turn}", {}, f"i{n}{turn}")
                )
                await service.append_event(
                    session, said("helper", f"ok {n}.{turn}", delta, f"i{n}{turn}")
                )
            # An event without text (a state change only).
            await service.append_event(
                session,
                Event(
                    author="helper",
                    invocation_id=f"i{n}x",
                    actions=EventActions(state_delta={"done": True}),
                ),
            )
        await service.create_session(app_name="shop", user_id="cy", session_id="empty")
    finally:
        await service.close()


@pytest.fixture
def adk_db(tmp_path: Path) -> Path:
    db = tmp_path / "adk.db"
    asyncio.run(write_sessions(db))
    return db


def sessions_of(service: Any, keys: list[tuple[str, str, str]]) -> list[Any]:
    async def read() -> list[Any]:
        try:
            return [
                await service.get_session(app_name=app, user_id=user, session_id=sid)
                for app, user, sid in keys
            ]
        finally:
            await service.close()

    return asyncio.run(read())


ALL = [*SESSIONS, ("shop", "cy", "empty")]


def test_every_session_reads_back_as_on_adk(adk_db: Path, tmp_path: Path) -> None:
    before = digest(adk_db)
    target = tmp_path / "agentlog.db"
    report = migrate(adk_db, target)
    assert report.source_kind == "adk-database"
    # Five sessions, two apps' state, four users' state.
    assert (report.migrated, len(report.sessions)) == (11, 11)
    assert digest(adk_db) == before
    theirs = sessions_of(adk_service(adk_db), ALL)
    mine = sessions_of(AgentlogSessionService(target), ALL)
    for their, my in zip(theirs, mine, strict=True):
        assert their is not None and my is not None
        assert my.events == their.events
        assert my.state == their.state
        assert my.last_update_time == their.last_update_time
        assert (my.app_name, my.user_id, my.id) == (their.app_name, their.user_id, their.id)
    assert mine[0].state["app:hits"] == 2  # s-3 set it last: shared across the app
    assert "temp:scratch" not in mine[0].state
    assert len(mine[0].events) == 7


def test_listing_and_continuing_on_agentlog(adk_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "agentlog.db"
    migrate(adk_db, target)

    async def listed(service: Any) -> list[tuple[str, str, float, dict[str, Any]]]:
        try:
            found = await service.list_sessions(app_name="shop", user_id="ann")
            return sorted((s.user_id, s.id, s.last_update_time, s.state) for s in found.sessions)
        finally:
            await service.close()

    assert asyncio.run(listed(AgentlogSessionService(target))) == asyncio.run(
        listed(adk_service(adk_db))
    )

    async def resume() -> Any:
        async with AgentlogSessionService(target) as service:
            session = await service.get_session(app_name="shop", user_id="bo", session_id="s-3")
            assert session is not None
            await service.append_event(session, said("user", "again", {"app:hits": 9}, "later"))
            return await service.get_session(app_name="shop", user_id="ann", session_id="s-1")

    other = asyncio.run(resume())
    assert other.state["app:hits"] == 9


def test_forking_starts_from_the_created_state(adk_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "agentlog.db"
    migrate(adk_db, target)

    async def fork() -> Any:
        async with AgentlogSessionService(target) as service:
            session = await service.get_session(app_name="shop", user_id="ann", session_id="s-1")
            assert session is not None
            return await service.fork_session(
                app_name="shop", user_id="ann", session_id="s-1", event_id=session.events[1].id
            )

    forked = asyncio.run(fork())
    assert (forked.state["turn"], len(forked.events)) == (0, 2)
    assert "done" not in forked.state


def test_a_rerun_skips_and_a_changed_session_is_refused(adk_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "agentlog.db"
    assert_rerun_skips(adk_db, target, 11)

    async def more() -> None:
        service = adk_service(adk_db)
        try:
            session = await service.get_session(app_name="shop", user_id="bo", session_id="s-3")
            assert session is not None
            await service.append_event(session, said("user", "later", {}, "later"))
        finally:
            await service.close()

    asyncio.run(more())
    plan = migrate(adk_db, target, dry_run=True)
    changed = [s.source_key for s in plan.sessions if s.action == "changed"]
    assert changed == ['["session", "shop", "bo", "s-3"]']
    with pytest.raises(MigrationError, match="s-3"):
        migrate(adk_db, target)


def test_the_command_line_detects_and_names_the_kind(
    adk_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "agentlog.db"
    before = digest(adk_db)
    main(["migrate", str(adk_db), str(target), "--dry-run"])
    assert capsys.readouterr().out.startswith("adk-database source, 11 sessions")
    assert not target.exists()
    main(["migrate", str(adk_db), str(target), "--from", "adk-database"])
    assert "migrated 11, skipped 0" in capsys.readouterr().out
    assert digest(adk_db) == before


@pytest.mark.parametrize(
    ("change", "kind", "message"),
    [
        (None, "adk-database", "no app_states table"),
        ("ALTER TABLE events DROP COLUMN event_data", None, "unknown schema for a Google ADK"),
        (
            "UPDATE events SET event_data = '{oops' WHERE id = (SELECT min(id) FROM events)",
            None,
            "not JSON",
        ),
        ("UPDATE sessions SET state = '[1]' WHERE id = 's-2'", None, "not an object"),
    ],
)
def test_bad_sources_are_one_line_and_write_nothing(
    adk_db: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: str | None,
    kind: str | None,
    message: str,
) -> None:
    source = adk_db
    if change is None:
        source = tmp_path / "other.db"
        with sqlite3.connect(source) as conn:
            conn.execute("CREATE TABLE other (x)")
        conn.close()
    else:
        with sqlite3.connect(source) as conn:
            conn.execute(change)
        conn.close()
    assert_refused(capsys, source, tmp_path / "agentlog.db", kind, message)
