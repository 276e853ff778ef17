"""AgentlogSessionService beside ADK's own session services, behaviour by behaviour.

Each test states one behaviour ADK's session services pin and runs it, with
the same assertions, on ADK's ``DatabaseSessionService`` (SQLite through
aiosqlite), ``SqliteSessionService`` and ``InMemorySessionService`` and on
``AgentlogSessionService`` over SQLite and memory. A test names the services
it holds to the behaviour: where ADK's own stores disagree with one another,
agentlog follows ``DatabaseSessionService`` and the test says which store
does otherwise. Skipped without the ``google-adk`` extra, as its sibling.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ..conftest import extensions_required

if extensions_required():
    import google.adk  # noqa: F401
else:
    pytest.importorskip(
        "google.adk", reason="google-adk is not installed: pip install -e '.[google-adk]'"
    )
pytest.importorskip("aiosqlite", reason="ADK's DatabaseSessionService needs aiosqlite here")

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.session import Session
from google.adk.sessions.sqlite_session_service import SqliteSessionService

from agentlog.aio import AsyncMemoryCheckpointer
from agentlog.integrations.google_adk import AgentlogSessionService

APP = "parity_app"

OURS = ("agentlog-sqlite", "agentlog-memory")
#: ADK's stores that keep sessions outside the process, and ours.
PERSISTENT = ("adk-database", "adk-sqlite", *OURS)
EVERY = (*PERSISTENT, "adk-memory")

Body = Callable[[BaseSessionService], Awaitable[None]]


@contextlib.asynccontextmanager
async def opened(kind: str, tmp_path: Path) -> AsyncIterator[BaseSessionService]:
    if kind == "adk-database":
        database = DatabaseSessionService("sqlite+aiosqlite:///:memory:")
        try:
            yield database
        finally:
            await database.close()
    elif kind == "adk-sqlite":
        yield SqliteSessionService(str(tmp_path / "adk.db"))
    elif kind == "adk-memory":
        yield InMemorySessionService()
    else:
        store: Any = tmp_path / "agentlog.db" if kind == "agentlog-sqlite" else None
        ours = AgentlogSessionService(store or AsyncMemoryCheckpointer())
        try:
            yield ours
        finally:
            await ours.aclose()


def run(kind: str, tmp_path: Path, body: Body) -> None:
    async def main() -> None:
        async with opened(kind, tmp_path) as service:
            await body(service)

    asyncio.run(main())


async def read(service: BaseSessionService, session_id: str, **config: Any) -> Session:
    got = await service.get_session(
        app_name=APP,
        user_id="u",
        session_id=session_id,
        config=GetSessionConfig(**config) if config else None,
    )
    assert got is not None
    return got


def ids(session: Session) -> list[str]:
    return [event.id for event in session.events]


@pytest.mark.parametrize("kind", ["adk-database", *OURS])
def test_events_sharing_a_timestamp_read_in_id_order(kind: str, tmp_path: Path) -> None:
    """DatabaseSessionService breaks a timestamp tie on the event id. (ADK's
    SqliteSessionService breaks it on append order, its in-memory service
    keeps append order throughout.)"""

    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s")
        for event_id in ("e3", "e1", "e2"):
            await service.append_event(session, Event(id=event_id, author="user", timestamp=7.0))
        assert ids(await read(service, "s")) == ["e1", "e2", "e3"]
        assert ids(await read(service, "s", num_recent_events=2)) == ["e2", "e3"]
        assert ids(await read(service, "s", after_timestamp=7.0)) == ["e1", "e2", "e3"]
        await service.append_event(session, Event(id="e0", author="user", timestamp=8.0))
        assert ids(await read(service, "s")) == ["e1", "e2", "e3", "e0"]
        assert ids(await read(service, "s", num_recent_events=1)) == ["e0"]

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", ["adk-database", "adk-sqlite", *OURS])
def test_events_read_by_timestamp_not_by_append_order(kind: str, tmp_path: Path) -> None:
    """Both persistent ADK stores sort on the timestamp; the last update time is
    the last appended event's. (The in-memory service keeps append order.)"""

    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s")
        for event_id, stamp in (("late", 5.0), ("early", 3.0), ("middle", 4.0)):
            await service.append_event(session, Event(id=event_id, author="u", timestamp=stamp))
        got = await read(service, "s")
        assert ids(got) == ["early", "middle", "late"]
        assert got.last_update_time == pytest.approx(4.0)
        assert ids(await read(service, "s", num_recent_events=2)) == ["middle", "late"]
        assert ids(await read(service, "s", after_timestamp=4.0)) == ["middle", "late"]
        both = await read(service, "s", after_timestamp=3.5, num_recent_events=1)
        assert ids(both) == ["late"]
        assert (await read(service, "s", num_recent_events=0)).events == []

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", ["adk-database", *OURS])
def test_a_session_without_a_marker_is_current_if_it_ends_where_reads_end(
    kind: str, tmp_path: Path
) -> None:
    """A session built by hand may append when its last event is the stored event
    that reads last (by timestamp, then id), not the one appended last."""

    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s")
        later = Event(id="b", author="user", timestamp=5.0)
        earlier = Event(id="a", author="user", timestamp=3.0)
        await service.append_event(session, later)
        await service.append_event(session, earlier)

        def by_hand(*events: Event) -> Session:
            return Session(id="s", app_name=APP, user_id="u", events=list(events))

        with pytest.raises(StaleSessionError):
            await service.append_event(by_hand(later, earlier), Event(author="user"))
        await service.append_event(
            by_hand(earlier, later), Event(id="c", author="user", timestamp=6.0)
        )
        assert ids(await read(service, "s")) == ["a", "b", "c"]

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", EVERY)
def test_state_prefixes(kind: str, tmp_path: Path) -> None:
    """app: is shared by the app, user: by the user's sessions, temp: reaches
    only the session in hand; the rest belongs to one session."""

    async def body(service: BaseSessionService) -> None:
        one = await service.create_session(
            app_name=APP, user_id="u", session_id="one", state={"app:a": 1, "user:b": 2, "c": 3}
        )
        deltas = {"app:a2": 4, "user:b2": 5, "c2": 6, "temp:t": 7}
        await service.append_event(
            one, Event(author="user", actions=EventActions(state_delta=deltas))
        )
        assert one.state["temp:t"] == 7
        assert "temp:t" not in one.events[0].actions.state_delta  # the caller's event too
        got = await read(service, "one")
        assert got.state == {"app:a": 1, "app:a2": 4, "user:b": 2, "user:b2": 5, "c": 3, "c2": 6}
        assert got.events[0].actions.state_delta == {"app:a2": 4, "user:b2": 5, "c2": 6}
        mine = await service.create_session(app_name=APP, user_id="u", session_id="two")
        assert mine.state == {"app:a": 1, "app:a2": 4, "user:b": 2, "user:b2": 5}
        theirs = await service.create_session(app_name=APP, user_id="v", session_id="three")
        assert theirs.state == {"app:a": 1, "app:a2": 4}
        elsewhere = await service.create_session(app_name="other", user_id="u")
        assert elsewhere.state == {}

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", PERSISTENT)
def test_list_sessions_oldest_update_first_without_events(kind: str, tmp_path: Path) -> None:
    async def body(service: BaseSessionService) -> None:
        for user, session_id, stamp in (("u", "a", 30.0), ("u", "b", 10.0), ("v", "c", 20.0)):
            session = await service.create_session(
                app_name=APP, user_id=user, session_id=session_id, state={"own": session_id}
            )
            delta = EventActions(state_delta={"app:shared": 1, f"user:{user}": True})
            await service.append_event(
                session, Event(author="user", timestamp=stamp, actions=delta)
            )
        everyone = (await service.list_sessions(app_name=APP)).sessions
        assert [(s.user_id, s.id) for s in everyone] == [("u", "b"), ("v", "c"), ("u", "a")]
        assert all(s.events == [] for s in everyone)
        assert [s.last_update_time for s in everyone] == pytest.approx([10.0, 20.0, 30.0])
        mine = (await service.list_sessions(app_name=APP, user_id="u")).sessions
        assert [s.id for s in mine] == ["b", "a"]
        assert mine[0].state == {"own": "b", "app:shared": 1, "user:u": True}
        assert (await service.list_sessions(app_name="other")).sessions == []

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", EVERY)
def test_delete_removes_that_session_only(kind: str, tmp_path: Path) -> None:
    async def body(service: BaseSessionService) -> None:
        gone = await service.create_session(
            app_name=APP, user_id="u", session_id="gone", state={"user:k": 1}
        )
        await service.append_event(gone, Event(author="user"))
        await service.create_session(app_name=APP, user_id="u", session_id="kept")
        await service.create_session(app_name=APP, user_id="v", session_id="gone")
        await service.delete_session(app_name=APP, user_id="u", session_id="gone")
        assert await service.get_session(app_name=APP, user_id="u", session_id="gone") is None
        assert (await read(service, "kept")).state == {"user:k": 1}
        assert await service.get_session(app_name=APP, user_id="v", session_id="gone")
        await service.delete_session(app_name=APP, user_id="u", session_id="gone")
        await service.delete_session(app_name=APP, user_id="u", session_id="never")
        mine = (await service.list_sessions(app_name=APP, user_id="u")).sessions
        assert [s.id for s in mine] == ["kept"]

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", EVERY)
def test_a_partial_event_is_returned_and_changes_nothing(kind: str, tmp_path: Path) -> None:
    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s")
        partial = Event(
            author="model",
            partial=True,
            actions=EventActions(state_delta={"k": 1, "temp:t": 2, "user:u": 3}),
        )
        assert await service.append_event(session, partial) is partial
        assert session.events == [] and session.state == {}
        got = await read(service, "s")
        assert got.events == [] and got.state == {}

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", PERSISTENT)
def test_a_stale_session_is_refused_and_nothing_is_written(kind: str, tmp_path: Path) -> None:
    async def body(service: BaseSessionService) -> None:
        await service.create_session(app_name=APP, user_id="u", session_id="s")
        first, second = await read(service, "s"), await read(service, "s")
        stamp = first.last_update_time
        await service.append_event(first, Event(author="user", timestamp=stamp + 1))
        with pytest.raises(StaleSessionError):
            await service.append_event(
                second,
                Event(
                    author="user",
                    timestamp=stamp + 2,
                    actions=EventActions(state_delta={"k": 1, "app:a": 1}),
                ),
            )
        got = await read(service, "s")
        assert len(got.events) == 1 and got.state == {}

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", PERSISTENT)
def test_an_append_to_a_missing_session_raises(kind: str, tmp_path: Path) -> None:
    async def body(service: BaseSessionService) -> None:
        ghost = Session(id="ghost", app_name=APP, user_id="u")
        with pytest.raises(SessionNotFoundError):
            await service.append_event(ghost, Event(author="user"))
        assert await service.get_session(app_name=APP, user_id="u", session_id="ghost") is None

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", EVERY)
def test_a_taken_id_raises_and_changes_nothing(kind: str, tmp_path: Path) -> None:
    async def body(service: BaseSessionService) -> None:
        await service.create_session(app_name=APP, user_id="u", session_id="s", state={"k": 1})
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id="u", session_id="s", state={"k": 2})
        assert (await read(service, "s")).state == {"k": 1}

    run(kind, tmp_path, body)


def _adk_version() -> tuple[int, ...]:
    """The installed google-adk's release, as numbers."""
    text = importlib.metadata.version("google-adk")
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


@pytest.mark.parametrize("kind", ["adk-sqlite", "adk-memory", *OURS])
def test_a_padded_session_id_is_the_same_session(kind: str, tmp_path: Path) -> None:
    """Surrounding whitespace is not part of an id (ADK's SQLite and in-memory
    services; its DatabaseSessionService keeps the id verbatim). Ours strip it
    on every release of the range; ADK's own services are held to it from
    2.13, the newest tested (2.7, the oldest, keeps the padding)."""
    if kind.startswith("adk-") and _adk_version() < (2, 13):
        pytest.skip(f"ADK {_adk_version()} keeps a padded id in its own services")

    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="  s ")
        assert session.id == "s"
        assert (await read(service, " s")).id == "s"
        await service.delete_session(app_name=APP, user_id="u", session_id="s  ")
        assert await service.get_session(app_name=APP, user_id="u", session_id="s") is None

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", EVERY)
def test_user_state_is_read_without_a_session(kind: str, tmp_path: Path) -> None:
    async def body(service: BaseSessionService) -> None:
        assert await service.get_user_state(app_name=APP, user_id="u") == {}
        session = await service.create_session(app_name=APP, user_id="u")
        for count in (1, 2):
            delta = EventActions(state_delta={"user:count": count, "own": count})
            await service.append_event(session, Event(author="system", actions=delta))
        assert await service.get_user_state(app_name=APP, user_id="u") == {"count": 2}
        assert await service.get_user_state(app_name=APP, user_id="v") == {}
        assert await service.get_user_state(app_name="other", user_id="u") == {}

    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", ["adk-database", *OURS])
def test_a_current_session_appends_whatever_its_last_update_time(kind: str, tmp_path: Path) -> None:
    """The version a session was read at decides, not its float last_update_time
    (ADK's SqliteSessionService compares the time instead, and refuses)."""

    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u", session_id="s")
        first = Event(invocation_id="one", author="user", timestamp=session.last_update_time + 10)
        await service.append_event(session, first)
        session.last_update_time -= 0.0001
        await service.append_event(
            session, Event(invocation_id="two", author="user", timestamp=first.timestamp + 10)
        )
        got = await read(service, "s")
        assert [event.invocation_id for event in got.events] == ["one", "two"]

    run(kind, tmp_path, body)
