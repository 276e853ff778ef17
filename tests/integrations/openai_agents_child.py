"""The OpenAI Agents SDK's side of the adapter's tests, also run as a child process.

It holds a fake model on the SDK's ``Model`` interface (no network: for each
user turn it answers with a reasoning item and two function calls, then,
once the tool outputs are in its input, with a final message), the agent
that uses it, and the commands a test runs in a fresh process:

    python openai_agents_child.py run KIND LOCATION ENGINE SESSION TEXT...
    python openai_agents_child.py sdk DB SESSION TEXT...
    python openai_agents_child.py items KIND LOCATION ENGINE SESSION
    python openai_agents_child.py add DB ENGINE SESSION WORKER BATCHES SIZE

Each prints the session's items (``run``, ``sdk``, ``items``) as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from agentlog.aio import AsyncCheckpointer, AsyncFileCheckpointer, AsyncSqliteCheckpointer
from agentlog.integrations.openai_agents import AgentlogSession

set_tracing_disabled(True)


def _turn(items: list[Any]) -> int:
    """How many user messages the model has seen: the turn number, from 1."""
    return sum(1 for item in items if isinstance(item, dict) and item.get("role") == "user")


class FakeModel(Model):
    """Function calls first, then a final message, decided by the input alone."""

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.calls += 1
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        turn = _turn(items)
        last = items[-1]
        output: list[Any]
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            outputs = [
                i["output"]
                for i in items
                if isinstance(i, dict)
                and i.get("type") == "function_call_output"
                and str(i.get("call_id", "")).startswith(f"call_{turn}_")
            ]
            output = [
                ResponseOutputMessage(
                    id=f"msg_{turn}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text",
                            text=f"turn {turn}: " + "; ".join(map(str, outputs)),
                            annotations=[],
                        )
                    ],
                )
            ]
        else:
            user_text = str(last.get("content")) if isinstance(last, dict) else str(last)
            output = [
                ResponseReasoningItem(
                    id=f"rs_{turn}",
                    type="reasoning",
                    summary=[Summary(type="summary_text", text=f"think about {user_text}")],
                ),
                *(
                    ResponseFunctionToolCall(
                        id=f"fc_{turn}_{n}",
                        call_id=f"call_{turn}_{n}",
                        type="function_call",
                        name="weather",
                        arguments=json.dumps({"city": f"{user_text} {n}"}),
                        status="completed",
                    )
                    for n in range(2)
                ),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=f"resp_{self.calls}")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the fake model does not stream")


@function_tool
def weather(city: str) -> str:
    """The weather in a city (always the same)."""
    return f"sunny in {city}, 21°C"


def agent() -> Agent[Any]:
    """The agent the tests run: one tool, the fake model."""
    return Agent(name="forecaster", instructions="Answer.", model=FakeModel(), tools=[weather])


async def converse(session: Any, texts: list[str]) -> list[str]:
    """One ``Runner.run`` per text on ``session``; the final outputs."""
    finals = []
    for text in texts:
        result = await Runner.run(agent(), text, session=session)
        finals.append(str(result.final_output))
    return finals


def open_log(kind: str, location: str, engine: str) -> AsyncCheckpointer:
    """An async checkpointer of ``kind`` (``sqlite`` or ``file``) at ``location``."""
    if kind == "sqlite":
        return AsyncSqliteCheckpointer(location, engine=engine)
    if kind == "file":
        return AsyncFileCheckpointer(location)
    raise ValueError(kind)


async def _run(kind: str, location: str, engine: str, session_id: str, texts: list[str]) -> None:
    log = open_log(kind, location, engine)
    session = AgentlogSession(session_id, log)
    await converse(session, texts)
    print(json.dumps(await session.get_items()))
    await log.aclose()


async def _sdk(db: str, session_id: str, texts: list[str]) -> None:
    session = SQLiteSession(session_id, db)
    await converse(session, texts)
    print(json.dumps(await session.get_items()))
    session.close()


async def _items(kind: str, location: str, engine: str, session_id: str) -> None:
    log = open_log(kind, location, engine)
    print(json.dumps(await AgentlogSession(session_id, log).get_items()))
    await log.aclose()


async def _add(db: str, engine: str, session_id: str, worker: int, batches: int, size: int) -> None:
    async with AgentlogSession(session_id, db, engine=engine) as session:
        for b in range(batches):
            await session.add_items(
                [{"role": "user", "content": f"w{worker} b{b} i{i}"} for i in range(size)]
            )
        print(json.dumps({"conflicts": session.conflicts}))


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "run":
        asyncio.run(_run(args[0], args[1], args[2], args[3], args[4:]))
    elif command == "sdk":
        asyncio.run(_sdk(args[0], args[1], args[2:]))
    elif command == "items":
        asyncio.run(_items(*args[:4]))
    elif command == "add":
        worker, batches, size = (int(a) for a in args[3:6])
        asyncio.run(_add(args[0], args[1], args[2], worker, batches, size))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
