"""agentlog.integrations.pydantic_ai: a run's messages stored and loaded back exactly.

Runs Pydantic AI agents on its own test models (``TestModel``,
``FunctionModel``: no network), sync and async, on SQLite (both engines),
memory and PostgreSQL: what a load gives back equals what the runs made
(``ModelMessagesTypeAdapter``'s round trip), two runs continuing the same
history conflict, and the events fold as a conversation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import extensions_required, postgres_conninfo, postgres_schema, require_engine

try:
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.test import TestModel
except ImportError as exc:  # pragma: no cover - depends on the environment
    reason = f"pydantic-ai is not installed ({exc}); pip install -e '.[pydantic-ai]'"
    if extensions_required():
        pytest.fail(f"{reason} (AGENTLOG_REQUIRE_EXTENSIONS is set)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

from agentlog import (
    BaseCheckpointer,
    CheckpointConflictError,
    MemoryCheckpointer,
    SqliteCheckpointer,
    UnserializableEventError,
    fold_events,
)
from agentlog.aio import AsyncCheckpointer, AsyncMemoryCheckpointer, AsyncSqliteCheckpointer
from agentlog.integrations.pydantic_ai import (
    MESSAGE_FIELD,
    AsyncMessageHistory,
    MessageHistory,
    events_of_messages,
    messages_of_events,
)

BACKENDS = ("sqlite-c", "sqlite-python", "memory", "postgres")


class Logs:
    """Opens the sync and the async checkpointer of one backend (one storage)."""

    def __init__(self, kind: str, location: Path) -> None:
        self.kind = kind
        self.location = location
        self._memory = MemoryCheckpointer()
        self._amemory = AsyncMemoryCheckpointer()

    def sync(self) -> BaseCheckpointer:
        return self._memory if self.kind == "memory" else self._open(False)

    def aio(self) -> AsyncCheckpointer:
        return self._amemory if self.kind == "memory" else self._open(True)

    def _open(self, aio: bool) -> Any:
        if self.kind == "postgres":
            from agentlog import PostgresCheckpointer
            from agentlog.aio import AsyncPostgresCheckpointer

            pg = AsyncPostgresCheckpointer if aio else PostgresCheckpointer
            schema = postgres_schema(self.location)
            return pg(postgres_conninfo(), schema=schema, pool_max_size=2)
        sqlite = AsyncSqliteCheckpointer if aio else SqliteCheckpointer
        return sqlite(self.location / "chat.db", engine=self.kind.removeprefix("sqlite-"))


@pytest.fixture(params=BACKENDS)
def logs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Logs]:
    kind = str(request.param)
    if kind == "postgres":
        request.getfixturevalue("postgres_server")
    elif kind.startswith("sqlite-"):
        require_engine(kind.removeprefix("sqlite-"))
    yield Logs(kind, tmp_path)


def weather_agent(model: Any = None) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model or TestModel(), system_prompt="Answer briefly.")

    @agent.tool_plain
    def forecast(city: str) -> str:
        """The forecast for a city."""
        return f"sunny in {city}"

    return agent


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that calls a tool with bad arguments, then good ones, then answers."""
    calls = sum(isinstance(m, ModelResponse) for m in messages)
    if calls % 3 == 0:
        return ModelResponse(parts=[ToolCallPart("strict", {"n": -1}, tool_call_id="c1")])
    if calls % 3 == 1:
        return ModelResponse(
            parts=[TextPart("trying again"), ToolCallPart("strict", '{"n": 2}', tool_call_id="c2")]
        )
    return ModelResponse(parts=[TextPart("n is 2 — ünïcode ✓")])


def strict_agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(scripted))

    @agent.tool_plain
    def strict(n: int) -> int:
        """Only positive numbers."""
        if n < 0:
            raise ModelRetry("n must be positive")
        return n * 10

    return agent


def test_runs_round_trip_exactly(logs: Logs) -> None:
    with logs.sync() as log:
        agent = weather_agent()
        first = MessageHistory(log, "chat")
        run1 = agent.run_sync("weather in Bern?", message_history=first.load())
        assert first.save(run1.new_messages()) == first.head > 0
        second = MessageHistory(log, "chat")
        loaded = second.load()
        assert loaded == run1.all_messages()
        run2 = agent.run_sync("and tomorrow?", message_history=loaded)
        second.save(run2.new_messages())
        assert MessageHistory(log, "chat").load() == run2.all_messages()
        assert MessageHistory(log, "other").load() == []


def test_async_runs_round_trip_exactly(logs: Logs) -> None:
    async def main() -> None:
        async with logs.aio() as log:
            agent = strict_agent()
            history = AsyncMessageHistory(log, "chat")
            run1 = await agent.run("check n", message_history=await history.load())
            await history.save(run1.new_messages())
            again = AsyncMessageHistory(log, "chat")
            loaded = await again.load()
            assert loaded == run1.all_messages()
            run2 = await agent.run("once more", message_history=loaded)
            await again.save(run2.new_messages())
            assert await AsyncMessageHistory(log, "chat").load() == run2.all_messages()

    asyncio.run(main())


def test_two_runs_from_the_same_head_conflict(logs: Logs) -> None:
    with logs.sync() as log:
        agent = weather_agent()
        seed = MessageHistory(log, "chat")
        seed.save(agent.run_sync("hello").new_messages())
        a, b = MessageHistory(log, "chat"), MessageHistory(log, "chat")
        run_a = agent.run_sync("weather in Bern?", message_history=a.load())
        run_b = agent.run_sync("weather in Chur?", message_history=b.load())
        a.save(run_a.new_messages())
        with pytest.raises(CheckpointConflictError):
            b.save(run_b.new_messages())
        assert MessageHistory(log, "chat").load() == run_a.all_messages()  # b wrote nothing
        # b reloads what a left and continues from there.
        run_b = agent.run_sync("weather in Chur?", message_history=b.load())
        b.save(run_b.new_messages())
        assert MessageHistory(log, "chat").load() == run_b.all_messages()


def test_two_async_runs_from_the_same_head_conflict(logs: Logs) -> None:
    async def main() -> None:
        async with logs.aio() as log:
            agent = weather_agent()
            a, b = AsyncMessageHistory(log, "chat"), AsyncMessageHistory(log, "chat")
            runs = await asyncio.gather(
                agent.run("Bern?", message_history=await a.load()),
                agent.run("Chur?", message_history=await b.load()),
            )
            await a.save(runs[0].new_messages())
            with pytest.raises(CheckpointConflictError):
                await b.save(runs[1].new_messages())
            assert await AsyncMessageHistory(log, "chat").load() == runs[0].all_messages()

    asyncio.run(main())


def test_events_fold_as_the_conversation() -> None:
    run = strict_agent().run_sync("check n")
    events = events_of_messages(run.all_messages())
    assert [e["type"] for e in events] == [
        "user",
        "assistant",
        "tool_result",  # the retry sent back for the bad call
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert events[2]["tool_use_id"] == "c1" and events[2]["is_error"] is True
    assert events[3]["content"][1] == {
        "type": "tool_use",
        "id": "c2",
        "name": "strict",
        "input": {"n": 2},  # a JSON string of arguments, as an object
    }
    assert events[4]["content"] == 20
    folded = fold_events(events)
    assert folded[0] == {"role": "user", "content": "check n"}
    assert folded[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "n is 2 — ünïcode ✓"}],
    }
    assert messages_of_events(events) == run.all_messages()


def test_a_message_whose_parts_have_no_event_type_is_kept() -> None:
    from pydantic_ai.messages import ModelRequest, SystemPromptPart, ThinkingPart

    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("be terse")]),
        ModelResponse(parts=[ThinkingPart("hmm")]),
    ]
    events = events_of_messages(messages)
    assert [e["type"] for e in events] == ["context_view", "context_view"]
    assert all(MESSAGE_FIELD in e for e in events)
    assert messages_of_events(events) == messages


def test_bad_input_writes_nothing(tmp_path: Path, engine: str) -> None:
    with SqliteCheckpointer(tmp_path / "chat.db", engine=engine) as log:
        history = MessageHistory(log, "chat")
        good = weather_agent().run_sync("hi").new_messages()
        bad: list[Any] = [*good, {"kind": "request", "parts": []}]
        with pytest.raises(UnserializableEventError, match="ModelRequest or ModelResponse"):
            history.save(bad)
        assert log.head("chat") == 0 and history.head == 0
        assert history.save([]) == 0  # nothing to write
        history.save(good)
        assert MessageHistory(log, "chat").load() == good


def test_messages_are_copies(tmp_path: Path) -> None:
    log = MemoryCheckpointer()
    history = MessageHistory(log, "chat")
    run = weather_agent().run_sync("hi")
    messages = run.new_messages()
    history.save(messages)
    first = MessageHistory(log, "chat").load()
    first[0].parts[0].content = "changed"  # type: ignore[union-attr]
    assert MessageHistory(log, "chat").load() == run.new_messages()
