"""The OpenAI Agents session under load and at its edges: concurrency, the mapping
itself, the benchmark, and a provider-executed tool item beside a local failure."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from importlib.metadata import requires
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

# First: the module it imports skips (or fails) these tests where the SDK is missing.
from .test_openai_agents import CHILD, ITEMS, STORES, run, run_on_log

# isort: split

import agents
from agents import SQLiteSession

from agentlog import fold_events
from agentlog.aio import (
    AsyncCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)
from agentlog.integrations.openai_agents import (
    ITEM_FIELD,
    AgentlogSession,
    event_of_item,
    item_of_event,
)

from ..benchmark_run import run_benchmark
from ..conftest import PYTHON, child_env
from .openers import async_log_opener


@pytest.fixture(params=STORES)
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], AsyncCheckpointer]:
    """Opens the async checkpointer under test (the same storage each call)."""
    return async_log_opener(request, tmp_path, "sessions")


# -- concurrency ----------------------------------------------------------------------


def _check_batches(items: list[dict[str, Any]], workers: int, batches: int, size: int) -> None:
    """Every batch is there, whole and contiguous, and each worker's in its order."""
    texts = [str(i["content"]) for i in items]
    assert len(texts) == workers * batches * size
    assert len(set(texts)) == len(texts)
    order: dict[int, list[int]] = {w: [] for w in range(workers)}
    for start in range(0, len(texts), size):
        worker, batch, _ = texts[start].split()
        assert texts[start : start + size] == [f"{worker} {batch} i{i}" for i in range(size)]
        order[int(worker[1:])].append(int(batch[1:]))
    assert all(order[w] == list(range(batches)) for w in range(workers))


def test_concurrent_coroutines_never_interleave_or_lose(
    open_log: Callable[[], AsyncCheckpointer],
) -> None:
    workers, batches, size = 8, 15, 5

    async def main(log: AsyncCheckpointer) -> None:
        # One session object per worker: each last saw a stale head.
        sessions = [AgentlogSession("shared", log) for _ in range(workers)]
        await sessions[0].add_items([])

        async def worker(w: int) -> None:
            for b in range(batches):
                await sessions[w].add_items(
                    [{"role": "user", "content": f"w{w} b{b} i{i}"} for i in range(size)]
                )
                await asyncio.sleep(0)  # a yield: the other tasks take their turns

        await asyncio.gather(*(worker(w) for w in range(workers)))
        _check_batches(await sessions[0].get_items(), workers, batches, size)
        assert sum(s.conflicts for s in sessions) > 0  # the retry path ran

    run_on_log(open_log, main)


def test_pops_and_adds_in_one_process_take_turns(
    open_log: Callable[[], AsyncCheckpointer],
) -> None:
    workers, batches, size = 4, 10, 3
    added = sorted(
        f"w{w} b{b} i{i}" for w in range(workers) for b in range(batches) for i in range(size)
    )

    async def main(log: AsyncCheckpointer) -> None:
        adders = [AgentlogSession("shared", log) for _ in range(workers)]
        popper = AgentlogSession("shared", log)
        popped: list[str] = []

        async def add(w: int) -> None:
            for b in range(batches):
                await adders[w].add_items(
                    [{"role": "user", "content": f"w{w} b{b} i{i}"} for i in range(size)]
                )
                await asyncio.sleep(0)  # a yield: the other tasks take their turns

        async def pop() -> None:
            for _ in range(50):
                item = await popper.pop_item()
                if item is not None:
                    popped.append(str(item["content"]))
                await asyncio.sleep(0)  # a yield: the adders take their turns

        await asyncio.gather(*(add(w) for w in range(workers)), pop())
        kept = [str(item["content"]) for item in await popper.get_items()]
        assert popped  # the race ran
        assert sorted(kept + popped) == added  # each item either kept or popped, once

    run_on_log(open_log, main)


def test_two_processes_never_interleave_or_lose(tmp_path: Path, engine: str) -> None:
    db = str(tmp_path / "shared.db")
    workers, batches, size = 2, 60, 4
    AsyncSqliteCheckpointer(db, engine=engine).close()  # created before the race
    procs = [
        subprocess.Popen(
            [PYTHON, CHILD, "add", db, engine, "shared", str(w), str(batches), str(size)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for w in range(workers)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]

    async def main() -> list[dict[str, Any]]:
        async with AgentlogSession("shared", db, engine=engine) as session:
            return await session.get_items()

    _check_batches(run(main), workers, batches, size)


# -- the mapping itself -----------------------------------------------------------------


def test_event_of_item_round_trips() -> None:
    for item in ITEMS:
        event = event_of_item(item)
        assert event[ITEM_FIELD] is item
        assert item_of_event(event) == item
    assert item_of_event({"type": "user", "content": "hi"}) == {"role": "user", "content": "hi"}
    assert item_of_event({"type": "tool_started", "tool_use_id": "a"}) is None
    # The mapping is for the SDK releases the openai-agents extra accepts.
    stated = [Requirement(text) for text in requires("agentlog") or []]
    (accepted,) = [
        r
        for r in stated
        if r.name == "openai-agents" and r.marker and r.marker.evaluate({"extra": "openai-agents"})
    ]
    assert accepted.specifier.contains(agents.__version__)


def test_a_function_calls_arguments_fold_as_an_object() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "weather"}
    event = event_of_item({**call, "arguments": '{"city": "Paris"}'})
    assert event["content"][0]["input"] == {"city": "Paris"}
    assert event[ITEM_FIELD]["arguments"] == '{"city": "Paris"}'  # the item as added
    folded = fold_events([event], shape="openai")[0]["tool_calls"][0]["function"]
    assert json.loads(folded["arguments"]) == {"city": "Paris"}
    for text in ("not json", "[1, 2]", '{"cut": '):  # kept as they came
        assert event_of_item({**call, "arguments": text})["content"][0]["input"] == text


def test_a_message_without_content_is_kept_not_refused() -> None:
    items: list[Any] = [{"role": "user"}, {"role": "assistant", "content": None}]
    assert [event_of_item(item)["type"] for item in items] == ["context_view"] * 2

    async def main() -> list[Any]:
        async with AsyncMemoryCheckpointer() as log:
            session = AgentlogSession("s", log)
            await session.add_items(items)  # as the SDK's SQLiteSession stores them
            return await session.get_items()

    assert asyncio.run(main()) == items


# -- the benchmark --------------------------------------------------------------------


def test_the_benchmark_runs_quick(tmp_path: Path) -> None:
    """``python -m benchmarks.openai_agents --quick``: a smoke test, no timings
    asserted. About 25 s: every system runs the SDK's Runner in processes of
    its own, each importing the SDK."""
    out = tmp_path / "openai_agents.json"
    bench = run_benchmark(
        tmp_path, "-m", "benchmarks.openai_agents", "--quick", "--rounds", "1", "--json", str(out)
    )
    assert bench.returncode == 0, bench.stderr[-3000:]
    assert "µs/step" in bench.stdout
    rows = json.loads(out.read_text())
    assert {row["system"] for row in rows} >= {"agentlog-python", "openai-agents"}
    assert {row["steps"] for row in rows} == {200, 1000}
    for row in rows:
        assert row["us_per_step"] > 0 and row["bytes_per_step"] > 0 and row["resume_ms"] > 0


# -- a provider-executed tool item beside a local tool failure --------------------------


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("scenario", ["completed", "anonymous", "incomplete"])
def test_a_provider_tool_search_survives_a_local_failure(
    open_log: Callable[[], AsyncCheckpointer], streaming: bool, scenario: str
) -> None:
    """The model's turn holds a tool search the provider ran (call and output)
    and a local tool that fails: the SDK saves the completed provider items
    before raising, and the session must keep them (an anonymous search, no
    call id, too), as the SDK's SQLiteSession does."""
    testing = pytest.importorskip("agents.testing", reason="the SDK's scripted model")
    responses = pytest.importorskip("openai.types.responses")
    if not hasattr(responses, "ResponseToolSearchCall"):
        pytest.skip("this openai release has no tool search items")
    from agents import Agent, Runner, UserError
    from agents.decorators import tool

    @tool(failure_error_function=None)
    async def broken() -> str:
        raise ValueError("the local tool failed")

    call_id = None if scenario == "anonymous" else "search-1"
    search = responses.ResponseToolSearchCall(
        id="ts_call",
        call_id=call_id,
        type="tool_search_call",
        execution="server",
        status="completed",
        arguments={"query": "invoices"},
    )
    found = responses.ResponseToolSearchOutputItem(
        id="ts_output",
        call_id=call_id,
        type="tool_search_output",
        execution="server",
        status="incomplete" if scenario == "incomplete" else "completed",
        tools=[{"type": "function", "name": "invoices", "parameters": {"type": "object"}}],
    )

    output = [search, found, testing.function_call("broken", {}, call_id="local-1")]

    def first_step() -> Any:
        if not streaming:
            return output
        # A scripted stream needs the exact events: here, only the completed response.
        response = responses.Response(
            id="resp-1",
            created_at=0,
            model="scripted",
            object="response",
            output=output,
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        done = responses.ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )
        return testing.ModelStep.stream([done], output=output)

    async def turn(session: Any) -> tuple[list[Any], list[Any]]:
        model = testing.ScriptedModel([first_step(), [testing.assistant_message("done")]])
        agent = Agent(name="finder", model=model, tools=[broken])
        with pytest.raises(UserError, match="the local tool failed"):
            if streaming:
                streamed = Runner.run_streamed(agent, "find my invoices", session=session)
                async for _ in streamed.stream_events():
                    pass
            else:
                await Runner.run(agent, "find my invoices", session=session)
        stored = await session.get_items()
        await Runner.run(agent, "go on", session=session)
        return stored, list(model.calls[-1].input)

    async def main() -> tuple[Any, Any]:
        async with open_log() as log:
            ours = await turn(AgentlogSession("s", log))
        reference = SQLiteSession("s")
        try:
            return ours, await turn(reference)
        finally:
            reference.close()

    (stored, sent), (their_stored, their_sent) = run(main)
    expected = (
        []
        if scenario == "incomplete"  # the SDK itself drops an incomplete search
        else [search.model_dump(exclude_unset=True), found.model_dump(exclude_unset=True)]
    )
    assert stored[1:] == expected
    assert (stored, sent) == (their_stored, their_sent)
    assert sent[1:-1] == expected  # and the next turn sends them to the model
