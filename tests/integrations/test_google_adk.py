"""AgentlogSessionService: Google ADK's BaseSessionService on agentlog's logs.

ADK is an extra (``pip install "agentlog[google-adk]"``): without it these
tests are skipped, saying so — or fail under ``AGENTLOG_REQUIRE_EXTENSIONS=1``.
They check what ADK's own session-service suite checks (state scopes,
``GetSessionConfig``, equal events, ``last_update_time``, the stale-writer
error) and what it does not (deletes, listings without events, stored copies,
paging, fork, writers in two service instances and two processes).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ..benchmark_run import run_benchmark
from ..conftest import PYTHON, child_env, extensions_required

if extensions_required():  # CI installs the extra: a missing ADK fails the run
    import google.adk  # noqa: F401
else:
    pytest.importorskip(
        "google.adk", reason="google-adk is not installed: pip install -e '.[google-adk]'"
    )

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

from agentlog import fold_events
from agentlog.aio import AsyncMetadataCheckpointer, AsyncSqliteCheckpointer
from agentlog.integrations.google_adk import (
    EVENT_FIELD,
    STALE_SESSION_MESSAGE,
    AgentlogSessionService,
)

from . import google_adk_child as child
from .openers import async_log_opener

CHILD = str(Path(child.__file__).resolve())
APP = "my_app"

BACKENDS = ("sqlite-c", "sqlite-python", "memory", "postgres")

Opener = Callable[[], AsyncMetadataCheckpointer]


@pytest.fixture(params=BACKENDS)
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the async checkpointer under test (the same storage each call)."""
    return async_log_opener(request, tmp_path, "adk")


def on_service(open_log: Opener, body: Callable[[AgentlogSessionService], Awaitable[None]]) -> None:
    async def main() -> None:
        log = open_log()
        try:
            await body(AgentlogSessionService(log))
        finally:
            await log.aclose()

    asyncio.run(main())


def delta(**state: Any) -> EventActions:
    return EventActions(state_delta={key.replace("__", ":"): v for key, v in state.items()})


# -- ADK's contract ---------------------------------------------------------------------


def test_it_is_a_session_service(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        assert isinstance(service, BaseSessionService)
        assert await service.get_session(app_name=APP, user_id="u", session_id="nope") is None
        session = await service.create_session(app_name=APP, user_id="u", state={"key": "v"})
        assert session.id and session.state == {"key": "v"} and session.events == []
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert got == session
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id="u", session_id=session.id)
        await service.delete_session(app_name=APP, user_id="u", session_id=session.id)
        assert await service.get_session(app_name=APP, user_id="u", session_id=session.id) is None
        await service.delete_session(app_name=APP, user_id="u", session_id=session.id)

    on_service(open_log, body)


def test_state_scopes_are_applied_as_adk_applies_them(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        s1 = await service.create_session(
            app_name=APP,
            user_id="u1",
            session_id="s1",
            state={"app:k1": "a1", "user:k1": "u1", "sk": 1},
        )
        await service.append_event(
            s1,
            Event(author="user", actions=delta(app__k2="a2", user__k2="u2", sk2=2, temp__t="x")),
        )
        # temp: reaches the session in hand, never the event's delta or storage.
        assert s1.state["temp:t"] == "x"
        assert "temp:t" not in s1.events[0].actions.state_delta
        other_user = await service.create_session(app_name=APP, user_id="u2", session_id="s2")
        assert other_user.state == {"app:k1": "a1", "app:k2": "a2"}
        same_user = await service.create_session(app_name=APP, user_id="u1", session_id="s3")
        assert same_user.state == {"app:k1": "a1", "app:k2": "a2", "user:k1": "u1", "user:k2": "u2"}
        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None
        assert got.state == {
            "sk": 1,
            "sk2": 2,
            "app:k1": "a1",
            "app:k2": "a2",
            "user:k1": "u1",
            "user:k2": "u2",
        }
        assert await service.get_user_state(app_name=APP, user_id="u1") == {"k1": "u1", "k2": "u2"}
        assert await service.get_user_state(app_name=APP, user_id="u2") == {}
        assert await service.get_user_state(app_name="other", user_id="u1") == {}
        other_app = await service.create_session(app_name="other", user_id="u1")
        assert other_app.state == {}

    on_service(open_log, body)


def test_same_session_id_for_two_users_are_two_sessions(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        s1 = await service.create_session(app_name=APP, user_id="u1", session_id="s")
        await service.append_event(s1, Event(author="user"))
        await service.create_session(app_name=APP, user_id="u2", session_id="s")
        got = await service.get_session(app_name=APP, user_id="u2", session_id="s")
        assert got is not None and got.user_id == "u2" and got.events == []

    on_service(open_log, body)


def test_events_come_back_equal_and_as_copies(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        content = types.Content(
            role="user",
            parts=[
                types.Part(text="hello"),
                types.Part.from_bytes(data=b"\x00img", mime_type="image/png"),
            ],
        )
        event = Event(
            invocation_id="inv",
            author="user",
            content=content,
            turn_complete=True,
            actions=EventActions(
                artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True
            ),
            long_running_tool_ids={"tool1"},
            error_code="code",
            grounding_metadata=types.GroundingMetadata(
                search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob")
            ),
            usage_metadata=types.GenerateContentResponseUsageMetadata(total_token_count=2),
            custom_metadata={"k": [1, 2.5, None]},
            timestamp=1700000000.123,
        )
        await service.append_event(session, event)
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert got == session
        assert got is not None and got.events[0] == event and got.events[0] is not event
        # Changing the caller's event, or a session read, changes nothing stored.
        event.custom_metadata["k"] = "changed"
        event.content.parts[0].text = "changed"
        got.events[0].author = "changed"
        again = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert again is not None
        assert again.events[0].custom_metadata == {"k": [1, 2.5, None]}
        assert again.events[0].content.parts[0].text == "hello"
        assert again.events[0].author == "user"

    on_service(open_log, body)


def test_partial_events_are_not_stored(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        await service.append_event(session, Event(author="user", partial=True))
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert session.events == [] and got is not None and got.events == []

    on_service(open_log, body)


def test_get_session_config(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        for i in range(1, 6):
            await service.append_event(session, Event(author="user", timestamp=i))

        async def stamps(**config: Any) -> list[float]:
            got = await service.get_session(
                app_name=APP, user_id="u", session_id=session.id, config=GetSessionConfig(**config)
            )
            assert got is not None
            return [e.timestamp for e in got.events]

        assert await stamps() == [1, 2, 3, 4, 5]
        assert await stamps(num_recent_events=0) == []
        assert await stamps(num_recent_events=3) == [3, 4, 5]
        assert await stamps(num_recent_events=9) == [1, 2, 3, 4, 5]
        assert await stamps(after_timestamp=4.0) == [4, 5]
        assert await stamps(after_timestamp=50) == []
        assert await stamps(after_timestamp=0) == [1, 2, 3, 4, 5]
        assert await stamps(after_timestamp=4.0, num_recent_events=3) == [4, 5]

    on_service(open_log, body)


def test_get_session_reads_only_the_recent_events(tmp_path: Path, engine: str) -> None:
    """num_recent_events reads that many events from the store, not all of them."""

    async def main() -> None:
        async with AsyncSqliteCheckpointer(tmp_path / "r.db", engine=engine) as log:
            service = AgentlogSessionService(log)
            session = await service.create_session(app_name=APP, user_id="u", state={"n": -1})
            for i in range(300):
                await service.append_event(
                    session, Event(author="user", timestamp=i, actions=delta(n=i))
                )
            reads: list[tuple[int, int | None]] = []
            original = log.read

            def counting(session_id: str, since_seq: int = 0, limit: int | None = None) -> Any:
                reads.append((since_seq, limit))
                return original(session_id, since_seq, limit)

            log.read = counting  # type: ignore[method-assign]
            got = await service.get_session(
                app_name=APP, user_id="u", session_id=session.id,
                config=GetSessionConfig(num_recent_events=2),
            )  # fmt: skip
            assert got is not None and [e.timestamp for e in got.events] == [298, 299]
            assert got.state == {"n": 299}
            assert reads == [(298, 2)]
            reads.clear()
            got = await service.get_session(
                app_name=APP, user_id="u", session_id=session.id,
                config=GetSessionConfig(after_timestamp=290),
            )  # fmt: skip
            assert got is not None and len(got.events) == 10
            assert sum(limit or 0 for _, limit in reads) < 300

    asyncio.run(main())


def test_last_update_time_follows_the_events(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        created = session.last_update_time
        await service.append_event(session, Event(author="user", timestamp=created + 10))
        assert session.last_update_time == created + 10
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert got is not None and got.last_update_time == pytest.approx(created + 10, abs=1e-6)
        listed = (await service.list_sessions(app_name=APP, user_id="u")).sessions
        assert listed[0].last_update_time == pytest.approx(created + 10, abs=1e-6)

    on_service(open_log, body)


def test_a_stale_session_is_refused_and_nothing_is_written(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        original = await service.create_session(app_name=APP, user_id="u")
        await service.append_event(original, Event(author="user", actions=delta(sk1="v1")))
        current = await service.get_session(app_name=APP, user_id="u", session_id=original.id)
        assert current is not None
        await service.append_event(current, Event(author="user", actions=delta(sk2="v2")))
        with pytest.raises(ValueError, match="modified in storage") as refused:
            await service.append_event(
                original, Event(author="user", actions=delta(sk3="v3", app__a=1, user__b=2))
            )
        assert str(refused.value) == STALE_SESSION_MESSAGE
        final = await service.get_session(app_name=APP, user_id="u", session_id=original.id)
        assert final is not None and len(final.events) == 2
        assert final.state == {"sk1": "v1", "sk2": "v2"}  # nor app: or user: state

        # A session built by hand (no marker) is current if it ends where storage does.
        def by_hand(events: list[Event]) -> Session:
            return Session(id=final.id, app_name=APP, user_id="u", events=list(events))

        await service.append_event(by_hand(final.events), Event(author="user"))
        with pytest.raises(ValueError, match="modified in storage"):
            await service.append_event(by_hand(final.events), Event(author="user"))
        with pytest.raises(ValueError, match="modified in storage"):
            await service.append_event(by_hand([]), Event(author="user"))
        last = await service.get_session(app_name=APP, user_id="u", session_id=original.id)
        assert last is not None and len(last.events) == 3

    on_service(open_log, body)


def test_an_unknown_session_is_not_created_by_an_append(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        await service.delete_session(app_name=APP, user_id="u", session_id=session.id)
        with pytest.raises(SessionNotFoundError):
            await service.append_event(session, Event(author="user"))
        assert (await service.list_sessions(app_name=APP)).sessions == []

    on_service(open_log, body)


def test_two_coroutines_one_wins(open_log: Opener) -> None:
    """ADK's race: two copies of one session appended at once, eight rounds."""

    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u")
        for i in range(8):
            latest = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
            assert latest is not None
            copies = [latest.model_copy(deep=True) for _ in range(2)]
            results = await asyncio.gather(
                *(
                    service.append_event(c, Event(author="user", actions=delta(**{f"k{i}_{n}": n})))
                    for n, c in enumerate(copies)
                ),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            assert len(errors) == 1 and str(errors[0]) == STALE_SESSION_MESSAGE
        final = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert final is not None and len(final.events) == 8
        for i in range(8):
            assert len([k for k in final.state if k.startswith(f"k{i}_")]) == 1
        # Each state key came with an event that is stored: no change lost or orphaned.
        stored = {k for e in final.events for k in e.actions.state_delta}
        assert stored == set(final.state)

    on_service(open_log, body)


def test_two_service_instances_on_one_file(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "two.db"

    async def main() -> None:
        one = AgentlogSessionService(path, engine=engine)
        two = AgentlogSessionService(path, engine=engine)
        session = await one.create_session(app_name=APP, user_id="u", session_id="s")
        for i in range(10):
            a = await one.get_session(app_name=APP, user_id="u", session_id="s")
            b = await two.get_session(app_name=APP, user_id="u", session_id="s")
            assert a is not None and b is not None
            results = await asyncio.gather(
                one.append_event(a, Event(author="user", actions=delta(**{f"a{i}": i}))),
                two.append_event(b, Event(author="user", actions=delta(**{f"b{i}": i}))),
                return_exceptions=True,
            )
            assert sum(isinstance(r, ValueError) for r in results) == 1
        final = await two.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert final is not None and len(final.events) == 10 and len(final.state) == 10
        await one.close()
        await two.close()

    asyncio.run(main())


def test_two_processes_one_wins(tmp_path: Path, engine: str) -> None:
    """Two processes hold the same version of a session; exactly one append lands."""
    path = tmp_path / "procs.db"

    async def create() -> None:
        async with AgentlogSessionService(path, engine=engine) as service:
            await service.create_session(app_name=APP, user_id="u", session_id="s")

    asyncio.run(create())
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [PYTHON, CHILD, str(path), engine, str(go), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for name in ("one", "two")
    ]
    outputs = []
    lines = [c.stdout.readline() for c in children if c.stdout is not None]
    assert lines == ["loaded\n", "loaded\n"], [c.stderr.read() for c in children if c.stderr]
    go.touch()
    for c in children:
        out, err = c.communicate(timeout=120)
        assert c.returncode == 0, err
        outputs.append(out.strip())
    assert sorted(outputs) == ["appended", "stale"], outputs

    async def check() -> None:
        async with AgentlogSessionService(path, engine=engine) as service:
            final = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert final is not None and len(final.events) == 1
            assert len(final.state) == 1

    asyncio.run(check())


# -- past ADK ---------------------------------------------------------------------------


def test_delete_removes_only_that_session(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        for user, sid in (("u1", "a"), ("u1", "b"), ("u2", "a")):
            s = await service.create_session(
                app_name=APP, user_id=user, session_id=sid, state={"x": sid}
            )
            await service.append_event(s, Event(author="user", actions=delta(user__seen=sid)))
        await service.create_session(app_name="other", user_id="u1", session_id="a")
        await service.delete_session(app_name=APP, user_id="u1", session_id="a")
        assert await service.get_session(app_name=APP, user_id="u1", session_id="a") is None
        for app, user, sid in ((APP, "u1", "b"), (APP, "u2", "a"), ("other", "u1", "a")):
            got = await service.get_session(app_name=app, user_id=user, session_id=sid)
            assert got is not None
            assert len(got.events) == (0 if app == "other" else 1)
        assert await service.get_user_state(app_name=APP, user_id="u1") == {"seen": "b"}

    on_service(open_log, body)


def test_list_sessions_without_events_ordered_and_paged(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        ids = []
        for i in range(7):
            user = f"u{i % 2}"
            s = await service.create_session(
                app_name=APP, user_id=user, session_id=f"s{i}", state={"k": i}
            )
            await service.append_event(s, Event(author="user", timestamp=1000 + (7 - i)))
            ids.append((1000 + (7 - i), user, f"s{i}"))
        await service.create_session(app_name="other", user_id="u0")
        everything = await service.list_sessions(app_name=APP)
        assert [(s.last_update_time, s.user_id, s.id) for s in everything.sessions] == sorted(ids)
        assert everything.next_page_token is None
        assert all(s.events == [] for s in everything.sessions)
        assert {s.id: s.state for s in everything.sessions} == {f"s{i}": {"k": i} for i in range(7)}
        mine = await service.list_sessions(app_name=APP, user_id="u1")
        assert {s.id for s in mine.sessions} == {"s1", "s3", "s5"}
        paged: list[str] = []
        token = None
        while True:
            page = await service.list_sessions(app_name=APP, page_size=3, page_token=token)
            assert len(page.sessions) <= 3
            paged += [s.id for s in page.sessions]
            token = page.next_page_token
            if token is None:
                break
        assert paged == [s.id for s in everything.sessions]
        with pytest.raises(ValueError, match="page_size"):
            await service.list_sessions(app_name=APP, page_size=0)
        with pytest.raises(ValueError, match="page_token"):
            await service.list_sessions(app_name=APP, page_token="nonsense")

    on_service(open_log, body)


def test_fork_at_an_event(open_log: Opener) -> None:
    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(
            app_name=APP, user_id="u", session_id="src", state={"n": 0}
        )
        for i in range(1, 5):
            await service.append_event(
                session, Event(author="user", timestamp=i, actions=delta(n=i))
            )
        fork = await service.fork_session(
            app_name=APP,
            user_id="u",
            session_id="src",
            event_id=session.events[1].id,
            new_session_id="f",
        )
        assert fork.id == "f" and fork.events == session.events[:2] and fork.state == {"n": 2}
        assert fork.last_update_time == 2
        await service.append_event(fork, Event(author="user", actions=delta(n=99)))
        source = await service.get_session(app_name=APP, user_id="u", session_id="src")
        assert source is not None and len(source.events) == 4 and source.state == {"n": 4}
        with pytest.raises(AlreadyExistsError):
            await service.fork_session(
                app_name=APP,
                user_id="u",
                session_id="src",
                event_id=session.events[0].id,
                new_session_id="f",
            )
        with pytest.raises(ValueError, match="no event"):
            await service.fork_session(
                app_name=APP, user_id="u", session_id="src", event_id="missing"
            )
        with pytest.raises(SessionNotFoundError):
            await service.fork_session(app_name=APP, user_id="u", session_id="nope", event_id="x")

    on_service(open_log, body)


def test_the_log_folds_as_a_conversation(tmp_path: Path) -> None:
    async def main() -> None:
        async with AgentlogSessionService(tmp_path / "f.db") as service:
            session = await service.create_session(app_name=APP, user_id="u", session_id="s")
            for author, text in (("user", "hi"), ("agent", "hello")):
                content = types.Content(role="user", parts=[types.Part(text=text)])
                await service.append_event(session, Event(author=author, content=content))
            await service.append_event(session, Event(author="agent"))
            key = service.session_key(APP, "u", "s")
            stored = [e async for e in service.checkpointer.read(key)]
            assert [e.type for e in stored] == ["user", "assistant", "context_view"]
            assert stored[0].event[EVENT_FIELD]["id"] == session.events[0].id
            assert fold_events(stored) == [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ]

    asyncio.run(main())


def test_ids_that_cannot_be_keys_are_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with AgentlogSessionService(tmp_path / "k.db") as service:
            odd = await service.create_session(app_name="a|b/c", user_id="ü %", session_id=" x/y ")
            assert odd.id == "x/y"
            got = await service.get_session(app_name="a|b/c", user_id="ü %", session_id="x/y ")
            assert got is not None
            with pytest.raises(ValueError, match="too long"):
                await service.create_session(app_name=APP, user_id="u", session_id="x" * 300)
            with pytest.raises(TypeError):
                AgentlogSessionService(42)  # type: ignore[arg-type]

    asyncio.run(main())


def test_the_benchmark_runs(tmp_path: Path) -> None:
    """``python -m benchmarks.google_adk --quick`` (a smoke test: no timings
    asserted). About 8 s: each session service runs in a process of its own."""
    out = tmp_path / "adk.json"
    done = run_benchmark(tmp_path, "-m", "benchmarks.google_adk", "--quick", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    systems = {row["system"] for row in rows}
    assert "agentlog-c" in systems or "agentlog-python" in systems
    # ADK's DatabaseSessionService needs SQLAlchemy and aiosqlite (the bench extra).
    peer = all(importlib.util.find_spec(m) for m in ("sqlalchemy", "aiosqlite"))
    assert ("adk-database" in systems) == peer
    scenarios = {row["scenario"] for row in rows}
    assert scenarios == {"append 1 session", "append 64 sessions", "get_session", "list_sessions"}
    assert all(row["value"] > 0 for row in rows)


def test_a_log_cut_short_reads_as_its_events(open_log: Opener) -> None:
    """A log truncated under the service (time travel with agentlog's tools) reads
    as the events left: state folded from the initial state, not the metadata."""

    async def body(service: AgentlogSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id="u", state={"n": 0})
        for i in range(1, 4):
            await service.append_event(
                session, Event(author="user", timestamp=i, actions=delta(n=i))
            )
        key = service.session_key(APP, "u", session.id)
        await service.checkpointer.truncate(key, 1)
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert got is not None and len(got.events) == 1 and got.state == {"n": 1}
        listed = (await service.list_sessions(app_name=APP)).sessions
        assert listed[0].state == {"n": 1} and listed[0].last_update_time == 1
        await service.append_event(got, Event(author="user", actions=delta(n=7)))
        await service.append_event(got, Event(author="user", actions=delta(m=8)))
        again = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert again is not None and len(again.events) == 3
        assert again.state == {"n": 7, "m": 8}  # not the cut events' n=3
        recent = await service.get_session(
            app_name=APP, user_id="u", session_id=session.id,
            config=GetSessionConfig(num_recent_events=1),
        )  # fmt: skip
        assert recent is not None and recent.state == {"n": 7, "m": 8}

    on_service(open_log, body)


@pytest.mark.parametrize("stamps", [(1.0, 2.0, 3.0), (3.0, 1.0, 2.0)])
def test_metadata_without_an_order_reads_sorted_and_learns_it(
    stamps: tuple[float, ...], tmp_path: Path
) -> None:
    """A session whose metadata says nothing of its order (an older release's,
    or agentlog migrate's) reads in ADK's order by sorting, and its next append
    records the order, so an in-order session reads only its recent events again."""

    async def main() -> None:
        async with AsyncSqliteCheckpointer(tmp_path / "o.db") as log:
            service = AgentlogSessionService(log)
            session = await service.create_session(app_name=APP, user_id="u")
            for n, stamp in enumerate(stamps):
                event = Event(id=f"e{n}", author="user", timestamp=stamp)
                await service.append_event(session, event)
            key = service.session_key(APP, "u", session.id)
            current = await log.metadata(key)
            older = {k: v for k, v in current.value.items() if k not in ("ordered", "last")}
            await log.set_metadata(key, older, current.revision)
            reads: list[tuple[int, int | None]] = []
            original = log.read

            def counting(session_id: str, since_seq: int = 0, limit: int | None = None) -> Any:
                reads.append((since_seq, limit))
                return original(session_id, since_seq, limit)

            log.read = counting  # type: ignore[method-assign]

            async def recent(n: int) -> list[float]:
                got = await service.get_session(
                    app_name=APP, user_id="u", session_id=session.id,
                    config=GetSessionConfig(num_recent_events=n),
                )  # fmt: skip
                assert got is not None
                return [event.timestamp for event in got.events]

            assert await recent(2) == sorted(stamps)[-2:]
            assert reads == [(0, 3)]  # the whole log, to sort it
            got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
            assert got is not None
            await service.append_event(got, Event(id="e9", author="user", timestamp=9.0))
            in_order = stamps == tuple(sorted(stamps))
            assert (await log.metadata(key)).value["ordered"] is in_order
            reads.clear()
            assert await recent(2) == [sorted(stamps)[-1], 9.0]
            assert reads == ([(2, 2)] if in_order else [(0, 4)])

    asyncio.run(main())
