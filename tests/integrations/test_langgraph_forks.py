"""agentlog.integrations.langgraph: forks and threads other savers wrote, beside InMemorySaver.

LangGraph's own suites fork a checkpoint with ``update_state(..., as_node="__copy__")``
(the copy is put under the copied checkpoint's *parent*, with no new channel
versions) and resume threads whose channel versions are strings (what
``InMemorySaver``, ``SqliteSaver`` and older releases write). Each scenario
runs on LangGraph's ``InMemorySaver`` and on ours, sync and async, and what
the graph sees must be the same.
"""

from __future__ import annotations

import asyncio
import operator
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

# First: the guard skips (or fails) this module too without langgraph.
from .langgraph_api import BaseCheckpointSaver, Command, InMemorySaver, RunnableConfig

# isort: split
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from agentlog.integrations.langgraph import AgentlogSaver, AsyncAgentlogSaver


class State(TypedDict):
    value: Annotated[list[str], operator.add]


def interrupt_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """START → a → ask (interrupts for an answer) → b."""

    def a(state: State) -> State:
        return {"value": ["a"]}

    def ask(state: State) -> State:
        return {"value": [f"human:{interrupt('your input?')}"]}

    def b(state: State) -> State:
        return {"value": ["b"]}

    return (
        StateGraph(State)
        .add_node("a", a)
        .add_node("ask", ask)
        .add_node("b", b)
        .add_edge(START, "a")
        .add_edge("a", "ask")
        .add_edge("ask", "b")
        .compile(checkpointer=saver)
    )


class Calls:
    """A graph's calls, plain or awaited (the a… twins)."""

    def __init__(self, graph: Any, use_async: bool) -> None:
        self.graph = graph
        self.use_async = use_async

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.use_async:
            return await getattr(self.graph, "a" + name)(*args, **kwargs)
        return getattr(self.graph, name)(*args, **kwargs)

    async def invoke(self, value: Any, cfg: RunnableConfig) -> Any:
        return await self._call("invoke", value, cfg)

    async def update(self, cfg: RunnableConfig, values: Any, as_node: str | None = None) -> Any:
        return await self._call("update_state", cfg, values, as_node=as_node)

    async def state(self, cfg: RunnableConfig) -> Any:
        return await self._call("get_state", cfg)

    async def history(self, cfg: RunnableConfig) -> list[Any]:
        if self.use_async:
            return [s async for s in self.graph.aget_state_history(cfg)]
        return list(self.graph.get_state_history(cfg))


def seen(snapshot: Any) -> tuple[Any, ...]:
    """What a graph sees of a checkpoint (ids and timestamps differ by run)."""
    return (
        snapshot.values,
        snapshot.next,
        snapshot.metadata.get("source"),
        snapshot.metadata.get("step"),
        [(t.name, t.result, [i.value for i in t.interrupts]) for t in snapshot.tasks],
        [i.value for i in snapshot.interrupts],
    )


def outcome(result: dict[str, Any]) -> tuple[Any, ...]:
    return (result.get("value"), [i.value for i in result.get("__interrupt__", [])])


Scenario = Callable[[BaseCheckpointSaver[Any], bool], Awaitable[list[Any]]]


def side_by_side(scenario: Scenario, tmp_path: Path, engine: str, mode: str) -> list[Any]:
    """The scenario's observations on our saver, checked equal to InMemorySaver's."""
    use_async = mode == "async"

    async def ours() -> list[Any]:
        if use_async:
            async with AsyncAgentlogSaver(tmp_path / "ours.db", engine=engine) as asaver:
                return await scenario(asaver, True)
        with AgentlogSaver(tmp_path / "ours.db", engine=engine) as saver:
            return await scenario(saver, False)

    mine = asyncio.run(ours())
    theirs = asyncio.run(scenario(InMemorySaver(), use_async))
    assert mine == theirs
    return mine


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


CFG: RunnableConfig = {"configurable": {"thread_id": "1"}}


async def _answered(calls: Calls) -> Any:
    """Run to the interrupt, answer it; the checkpoint before ``ask`` ran."""
    await calls.invoke({"value": []}, CFG)
    await calls.invoke(Command(resume="hello"), CFG)
    return [s for s in await calls.history(CFG) if s.next == ("ask",)][-1]


async def copy_fork(saver: BaseCheckpointSaver[Any], use_async: bool) -> list[Any]:
    calls = Calls(interrupt_graph(saver), use_async)
    before = await _answered(calls)
    fork = await calls.update(before.config, None, as_node="__copy__")
    forked = seen(await calls.state(fork))
    retriggered = outcome(await calls.invoke(None, fork))
    final = outcome(await calls.invoke(Command(resume="new answer"), fork))
    return [forked, retriggered, final, [seen(s) for s in await calls.history(CFG)]]


def test_a_copy_fork_retriggers_the_interrupt(tmp_path: Path, engine: str, mode: str) -> None:
    forked, retriggered, final, _ = side_by_side(copy_fork, tmp_path, engine, mode)
    assert forked[:3] == ({"value": ["a"]}, ("ask",), "fork")  # the copy holds the copied state
    assert retriggered == (["a"], ["your input?"])
    assert final == (["a", "human:new answer", "b"], [])


async def fork_and_update(saver: BaseCheckpointSaver[Any], use_async: bool) -> list[Any]:
    calls = Calls(interrupt_graph(saver), use_async)
    before = await _answered(calls)
    # A copy and, in the same call, a result for the task it would run next.
    updated = await calls.update(
        before.config, [({"value": ["typed by hand"]}, "ask")], as_node="__copy__"
    )
    history = [seen(s) for s in await calls.history(CFG)]
    state = seen(await calls.state(updated))
    result = outcome(await calls.invoke(None, updated))
    return [state, result, history]


def test_fork_and_update_task_results(tmp_path: Path, engine: str, mode: str) -> None:
    state, result, history = side_by_side(fork_and_update, tmp_path, engine, mode)
    assert state[:2] == ({"value": ["a", "typed by hand"]}, ("b",))
    assert result == (["a", "typed by hand", "b"], [])
    # The copy's task shows the result the update gave it.
    fork = next(h for h in history if h[2] == "fork")
    assert fork[4] == [("ask", {"value": ["typed by hand"]}, [])]


async def _copy_in(
    source: BaseCheckpointSaver[Any], target: BaseCheckpointSaver[Any], use_async: bool
) -> None:
    """Every checkpoint and write of the thread, put as a migration does."""
    parent: str | None = None
    for tup in reversed(list(source.list(CFG))):
        groups: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        for task_id, channel, value in tup.pending_writes or []:
            groups[task_id].append((channel, value))
        conf = {"configurable": {"thread_id": "1", "checkpoint_ns": "", "checkpoint_id": parent}}
        ck = tup.checkpoint
        if use_async:
            for task_id, writes in groups.items():
                await target.aput_writes(tup.config, writes, task_id)
            await target.aput(conf, ck, tup.metadata, ck["channel_versions"])
        else:
            for task_id, writes in groups.items():
                target.put_writes(tup.config, writes, task_id)
            target.put(conf, ck, tup.metadata, ck["channel_versions"])
        parent = ck["id"]


def make_resume_elsewhere(written_by: InMemorySaver) -> Scenario:
    """A thread ``written_by`` wrote (string versions), resumed on the saver."""

    async def resume(saver: BaseCheckpointSaver[Any], use_async: bool) -> list[Any]:
        if saver is not written_by:
            await _copy_in(written_by, saver, use_async)
        calls = Calls(interrupt_graph(saver), use_async)
        history = [seen(s) for s in await calls.history(CFG)]
        answered = outcome(await calls.invoke(Command(resume="later"), CFG))
        again = outcome(await calls.invoke({"value": ["next turn"]}, CFG))
        return [history, answered, again, [seen(s) for s in await calls.history(CFG)]]

    return resume


def test_a_thread_another_saver_wrote_resumes_here(tmp_path: Path, engine: str, mode: str) -> None:
    writer = InMemorySaver()
    interrupt_graph(writer).invoke({"value": []}, CFG)
    versions = writer.get_tuple(CFG)
    assert versions is not None
    assert all(isinstance(v, str) for v in versions.checkpoint["channel_versions"].values())
    snapshot = list(writer.list(None))

    async def ours_only() -> list[Any]:
        scenario = make_resume_elsewhere(writer)
        if mode == "async":
            async with AsyncAgentlogSaver(tmp_path / "ours.db", engine=engine) as asaver:
                return await scenario(asaver, True)
        with AgentlogSaver(tmp_path / "ours.db", engine=engine) as saver:
            return await scenario(saver, False)

    mine = asyncio.run(ours_only())
    assert list(writer.list(None)) == snapshot  # the copy read it, nothing more
    theirs = asyncio.run(make_resume_elsewhere(writer)(writer, mode == "async"))
    assert mine == theirs
    history, answered, again, _ = mine
    assert history[0][1] == ("ask",)
    assert answered == (["a", "human:later", "b"], [])
    assert again == (["a", "human:later", "b", "next turn", "a"], ["your input?"])


def test_a_string_version_continues_as_a_string(tmp_path: Path) -> None:
    with AgentlogSaver(tmp_path / "v.db") as saver:
        later = saver.get_next_version("00000000000000000000000000000007.0.5", None)
        assert later == "00000000000000000000000000000008.0"
        assert later > "00000000000000000000000000000007.0.99"
        assert saver.get_next_version(later, None) == "00000000000000000000000000000009.0"
