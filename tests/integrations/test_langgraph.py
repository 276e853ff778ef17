"""agentlog.integrations.langgraph: LangGraph's saver contract, real graphs, linear growth.

The saver behaviours are the ones LangGraph's own saver tests publish (put
and get, list order, filter, before, limit, namespaces, pending writes,
delete, copy, prune, delete for runs), run sync and async on each engine; a
model check replays random puts against LangGraph's ``InMemorySaver``; real
graphs (tool node, subgraph, interrupt resumed in another process, history,
replay, update_state) are compared with LangGraph's ``SqliteSaver``.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from .langgraph_api import (
    ERROR,
    INTERRUPT,
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
    DeltaChannel,
    JsonPlusSerializer,
    RunnableConfig,
    empty_checkpoint,
)

# isort: split

from agentlog import SqliteCheckpointer
from agentlog.integrations import langgraph as lg
from agentlog.integrations.langgraph import AgentlogSaver, AsyncAgentlogSaver

CHILD = Path(__file__).with_name("langgraph_child.py")


def _extend(current: list[int] | None, writes: list[list[int]]) -> list[int]:
    return [*(current or []), *(n for write in writes for n in write)]


class DeltaState(TypedDict):
    """A graph state with a ``DeltaChannel``: stored in full every 3 updates."""

    n: int
    plain: Annotated[list[int], operator.add]
    delta: Annotated[list[int], DeltaChannel(_extend, snapshot_frequency=3)]


# -- a face over both savers: the same calls, sync or awaited --------------------


class Face:
    """The saver's methods as plain calls: sync ones, or the a… twins awaited."""

    def __init__(self, saver: BaseCheckpointSaver[Any], loop: asyncio.AbstractEventLoop | None):
        self.saver = saver
        self.loop = loop

    def _run(self, sync: str, *args: Any, **kwargs: Any) -> Any:
        if self.loop is None:
            return getattr(self.saver, sync)(*args, **kwargs)
        return self.loop.run_until_complete(getattr(self.saver, "a" + sync)(*args, **kwargs))

    def put(self, config: RunnableConfig, cp: Checkpoint, md: Any, nv: Any) -> RunnableConfig:
        return self._run("put", config, cp, md, nv)  # type: ignore[no-any-return]

    def put_writes(self, config: RunnableConfig, writes: Any, task: str, path: str = "") -> None:
        self._run("put_writes", config, writes, task, path)

    def get(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run("get_tuple", config)  # type: ignore[no-any-return]

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple]:
        if self.loop is None:
            return list(self.saver.list(config, **kwargs))

        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.saver.alist(config, **kwargs)]

        return self.loop.run_until_complete(collect())

    def delete_thread(self, thread_id: str) -> None:
        self._run("delete_thread", thread_id)

    def copy_thread(self, source: str, target: str) -> None:
        self._run("copy_thread", source, target)

    def prune(self, thread_ids: list[str], strategy: str = "keep_latest") -> None:
        self._run("prune", thread_ids, strategy=strategy)

    def delete_for_runs(self, run_ids: list[str]) -> None:
        self._run("delete_for_runs", run_ids)


@pytest.fixture(params=["sync", "async"])
def face(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[Face]:
    """Each saver (AgentlogSaver sync, AsyncAgentlogSaver awaited) on each engine."""
    path = tmp_path / "lg.db"
    if request.param == "sync":
        with AgentlogSaver(path, engine=engine) as saver:
            yield Face(saver, None)
        return
    loop = asyncio.new_event_loop()
    asaver = AsyncAgentlogSaver(path, engine=engine)
    try:
        yield Face(asaver, loop)
    finally:
        loop.run_until_complete(asaver.aclose())
        loop.close()


def config(thread: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Checkpoint:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def chain(face: Face, thread: str, n: int, ns: str = "", **meta: Any) -> list[RunnableConfig]:
    """n checkpoints, each the child of the one before, with a growing list."""
    stored: list[RunnableConfig] = []
    parent = config(thread, ns)
    items: list[str] = []
    for step in range(n):
        items = [*items, f"item {step}"]
        version = step + 1
        cp = checkpoint({"items": items, "step": step}, {"items": version, "step": version})
        parent = face.put(
            parent,
            cp,
            {"source": "loop", "step": step, **meta},
            {"items": version, "step": version},
        )
        stored.append(parent)
    return stored


def ids(tuples: list[CheckpointTuple]) -> list[str]:
    return [t.checkpoint["id"] for t in tuples]


# -- the saver contract ---------------------------------------------------------------


def test_put_then_get_latest_and_by_id(face: Face) -> None:
    assert face.get(config("t")) is None  # a fresh database: nothing, no error
    stored = chain(face, "t", 3)
    latest = face.get(config("t"))
    assert latest is not None
    assert latest.config == stored[-1]
    assert latest.checkpoint["channel_values"] == {
        "items": ["item 0", "item 1", "item 2"],
        "step": 2,
    }
    assert latest.metadata == {"source": "loop", "step": 2}
    assert latest.parent_config == stored[1]
    assert latest.pending_writes == []
    first = face.get(stored[0])
    assert first is not None
    assert first.config == stored[0]  # the config as asked
    assert first.checkpoint["channel_values"] == {"items": ["item 0"], "step": 0}
    assert first.parent_config is None
    assert face.get(config("t", checkpoint_id="no-such-id")) is None
    assert face.get(config("other")) is None


def test_list_is_newest_first_with_before_and_limit(face: Face) -> None:
    stored = chain(face, "t", 5)
    expected = [c["configurable"]["checkpoint_id"] for c in reversed(stored)]
    assert ids(face.list(config("t"))) == expected
    assert ids(face.list(config("t"), limit=2)) == expected[:2]
    assert ids(face.list(config("t"), before=stored[2])) == expected[3:]
    assert ids(face.list(config("t"), before=stored[3], limit=1)) == expected[2:3]
    assert face.list(config("t"), limit=0) == []
    only = face.list(config("t", checkpoint_id=expected[1]))
    assert ids(only) == [expected[1]]
    assert only[0].checkpoint["channel_values"]["items"] == [f"item {i}" for i in range(4)]
    assert face.list(config("nobody")) == []


def test_list_filters_on_metadata(face: Face) -> None:
    chain(face, "a", 2, owner="ann")
    chain(face, "b", 3, owner="bob")
    assert len(face.list(None)) == 5  # every thread
    assert len(face.list(None, filter={"owner": "bob"})) == 3
    assert [t.metadata["step"] for t in face.list(config("b"), filter={"step": 1})] == [1]
    assert (
        face.list(None, filter={"owner": "bob", "step": 0})[0].config["configurable"]["thread_id"]
        == "b"
    )
    assert face.list(config("a"), filter={"owner": "bob"}) == []
    assert face.list(None, filter={"missing": "x"}) == []
    newest = face.list(None)
    assert ids(newest) == sorted(ids(newest), reverse=True)


def test_namespaces_are_separate(face: Face) -> None:
    root = chain(face, "t", 2, ns="")
    child = chain(face, "t", 3, ns="review:1")
    got_root = face.get(config("t", ""))
    got_child = face.get(config("t", "review:1"))
    assert got_root is not None and got_child is not None
    assert got_root.config == root[-1]
    assert got_child.config == child[-1]
    assert got_child.config["configurable"]["checkpoint_ns"] == "review:1"
    assert len(face.list(config("t", "review:1"))) == 3
    assert len(face.list(config("t", ""))) == 2
    everything = face.list({"configurable": {"thread_id": "t"}})  # no namespace: all
    assert len(everything) == 5
    assert {t.config["configurable"]["checkpoint_ns"] for t in everything} == {"", "review:1"}


def test_pending_writes_order_dedupe_and_special_writes(face: Face) -> None:
    stored = chain(face, "t", 1)[0]
    face.put_writes(stored, [("b", 1), ("a", 2)], "task-2", "~__pregel_pull, z")
    face.put_writes(stored, [("c", 3)], "task-1", "~__pregel_pull, a")
    face.put_writes(stored, [("b", 99), ("a", 98)], "task-2", "~__pregel_pull, z")  # dupes
    face.put_writes(stored, [(ERROR, "boom")], "task-3", "~__pregel_pull, b")
    face.put_writes(stored, [(ERROR, "boom again")], "task-3", "~__pregel_pull, b")
    face.put_writes(stored, [(INTERRUPT, {"ask": 1})], "task-1", "~__pregel_pull, a")
    got = face.get(stored)
    assert got is not None
    # LangGraph's order: (task_path, task_id, idx); a regular write stored
    # once per (task_id, idx); a special one (negative idx) replaced.
    assert got.pending_writes == [
        ("task-1", INTERRUPT, {"ask": 1}),
        ("task-1", "c", 3),
        ("task-3", ERROR, "boom again"),
        ("task-2", "b", 1),
        ("task-2", "a", 2),
    ]
    # The next checkpoint starts without pending writes.
    nxt = face.put(stored, checkpoint({}, {}), {"step": 1}, {})
    later = face.get(nxt)
    assert later is not None and later.pending_writes == []
    # Writes of the first stay with it, in list() too.
    listed = {t.checkpoint["id"]: t for t in face.list(config("t"))}
    assert listed[stored["configurable"]["checkpoint_id"]].pending_writes == got.pending_writes


def test_delete_thread(face: Face) -> None:
    face.delete_thread("never-seen")  # a fresh database: a no-op
    chain(face, "gone", 2)
    chain(face, "gone", 2, ns="sub:1")
    kept = chain(face, "kept", 2)
    face.delete_thread("gone")
    assert face.get(config("gone")) is None
    assert face.list(config("gone")) == []
    assert face.list({"configurable": {"thread_id": "gone"}}) == []
    got = face.get(config("kept"))
    assert got is not None and got.config == kept[-1]
    chain(face, "gone", 1)  # the thread can start again
    assert len(face.list(config("gone"))) == 1


def test_copy_thread_forks_every_namespace(face: Face) -> None:
    src = chain(face, "src", 3)
    chain(face, "src", 2, ns="child:1")
    face.put_writes(src[-1], [("ch", "write")], "task")
    chain(face, "dst", 1)  # replaced by the copy
    face.copy_thread("src", "dst")
    for ns in ("", "child:1"):
        source = face.list(config("src", ns))
        copied = face.list(config("dst", ns))
        assert ids(copied) == ids(source)
        for s, d in zip(source, copied, strict=True):
            assert d.checkpoint == s.checkpoint
            assert d.metadata == s.metadata
            assert d.config["configurable"]["thread_id"] == "dst"
            assert (d.parent_config is None) == (s.parent_config is None)
    latest = face.get(config("dst"))
    assert latest is not None and latest.pending_writes == [("task", "ch", "write")]
    # Both go on independently.
    face.put(latest.config, checkpoint({"items": ["x"]}, {"items": 9}), {"step": 9}, {"items": 9})
    assert len(face.list(config("dst", ""))) == 4
    assert len(face.list(config("src", ""))) == 3
    face.copy_thread("nobody", "empty")
    assert face.list(config("empty")) == []
    face.copy_thread("src", "src")  # onto itself: nothing lost
    assert len(face.list(config("src", ""))) == 3


def test_prune(face: Face) -> None:
    one = chain(face, "one", 4)
    face.put_writes(one[-1], [("ch", "val")], "task")
    sub = chain(face, "one", 2, ns="child:1")
    two = chain(face, "two", 3)
    face.prune(["one"], strategy="keep_latest")
    kept = face.list(config("one", ""))
    assert ids(kept) == [one[-1]["configurable"]["checkpoint_id"]]
    assert kept[0].checkpoint["channel_values"]["items"] == [f"item {i}" for i in range(4)]
    assert kept[0].pending_writes == [("task", "ch", "val")]
    assert ids(face.list(config("one", "child:1"))) == [sub[-1]["configurable"]["checkpoint_id"]]
    assert len(face.list(config("two"))) == 3
    # It goes on from the kept checkpoint.
    face.put(one[-1], checkpoint({"items": ["y"]}, {"items": 9}), {"step": 9}, {"items": 9})
    assert len(face.list(config("one", ""))) == 2
    face.prune(["two"], strategy="delete")
    assert face.list(config("two")) == []
    assert two
    face.prune([], strategy="keep_latest")
    face.prune(["nobody"], strategy="keep_latest")
    with pytest.raises(ValueError):
        face.prune(["one"], strategy="sideways")


def test_prune_keeps_what_a_delta_channel_is_rebuilt_from(face: Face) -> None:
    """LangGraph stores a ``DeltaChannel``'s value only every
    ``snapshot_frequency`` steps and replays the parent chain's writes in
    between: ``keep_latest`` keeps that chain, or the channel comes back empty."""
    from langgraph.graph import END, START, StateGraph

    def step(state: DeltaState) -> dict[str, Any]:
        return {"n": state["n"] + 1, "plain": [state["n"]], "delta": [state["n"]]}

    builder = StateGraph(DeltaState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile(checkpointer=face.saver)
    thread: RunnableConfig = {"configurable": {"thread_id": "delta"}}

    def run(n: int) -> None:
        turn = {"n": n, "plain": [], "delta": []}
        if face.loop is None:
            graph.invoke(turn, thread)  # type: ignore[arg-type]
        else:
            face.loop.run_until_complete(graph.ainvoke(turn, thread))  # type: ignore[arg-type]

    def values() -> dict[str, Any]:
        if face.loop is None:
            return graph.get_state(thread).values
        return face.loop.run_until_complete(graph.aget_state(thread)).values

    for n in range(4):
        run(n)
    before = len(face.list(thread))
    assert values()["delta"] == [0, 1, 2, 3]
    face.prune(["delta"], strategy="keep_latest")
    assert values() == {"n": 4, "plain": [0, 1, 2, 3], "delta": [0, 1, 2, 3]}
    assert 1 < len(face.list(thread)) < before  # pruned, down to the last snapshot
    run(4)
    assert values()["delta"] == [0, 1, 2, 3, 4]


def test_delete_for_runs(face: Face) -> None:
    first = face.put(config("t"), checkpoint({"n": 1}, {"n": 1}), {"run_id": "r1"}, {"n": 1})
    face.put_writes(first, [("ch", "w1")], "task")
    second = face.put(first, checkpoint({"n": 2}, {"n": 2}), {"run_id": "r2"}, {"n": 2})
    face.put(second, checkpoint({"n": 3}, {"n": 3}), {"run_id": "r3"}, {"n": 3})
    face.put(config("t", "child:1"), checkpoint({"n": 4}, {"n": 1}), {"run_id": "r1"}, {"n": 1})
    face.delete_for_runs([])
    face.delete_for_runs(["no-such-run"])
    face.delete_for_runs(["r1", "r2"])
    left = face.list({"configurable": {"thread_id": "t"}})
    assert [t.metadata["run_id"] for t in left] == ["r3"]
    assert left[0].checkpoint["channel_values"] == {"n": 3}
    assert face.get(first) is None


def test_a_second_saver_sees_and_extends_the_same_file(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "shared.db"
    with AgentlogSaver(path, engine=engine) as a, AgentlogSaver(path, engine=engine) as b:
        fa, fb = Face(a, None), Face(b, None)
        stored = chain(fa, "t", 3)
        got = fb.get(config("t"))
        assert got is not None and got.config == stored[-1]
        # b appends a child; a (whose index is behind) appends another: no
        # step is lost, each lands on its own parent.
        cb = fb.put(
            stored[-1], checkpoint({"items": ["b"]}, {"items": 7}), {"by": "b"}, {"items": 7}
        )
        ca = fa.put(
            stored[-1], checkpoint({"items": ["a"]}, {"items": 8}), {"by": "a"}, {"items": 8}
        )
        for face in (fa, fb):
            listed = face.list(config("t"))
            assert len(listed) == 5
            assert face.get(cb) is not None and face.get(ca) is not None
            by_a = face.get(ca)
            assert by_a is not None and by_a.checkpoint["channel_values"]["items"] == ["a"]


def test_fresh_database_and_reopen(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "reopen.db"
    with AgentlogSaver(path, engine=engine) as saver:
        saver.delete_thread("t")
        assert list(saver.list(None)) == []
        stored = chain(Face(saver, None), "t", 4)
    with AgentlogSaver(path, engine=engine) as saver:
        got = saver.get_tuple(config("t"))
        assert got is not None and got.config == stored[-1]
        assert got.checkpoint["channel_values"]["items"] == [f"item {i}" for i in range(4)]
    # Any agentlog checkpointer works underneath; its sessions stay apart.
    with SqliteCheckpointer(path, tenant="langgraph", engine=engine) as log:
        assert [info.id for info in log.list()] == [lg.session_id_for("t", "")]
        log.append("agent-chat", [{"type": "user", "content": "hi"}])
        saver2 = AgentlogSaver(log)
        assert len(list(saver2.list(None))) == 4  # the chat session is not a thread


def test_get_next_version_increases(tmp_path: Path) -> None:
    with AgentlogSaver(tmp_path / "v.db") as saver:
        v1 = saver.get_next_version(None, None)
        v2 = saver.get_next_version(v1, None)
        assert (v1, v2) == (1, 2)
        # Another saver's string version continues as a string (see test_langgraph_forks).
        assert saver.get_next_version("00000000000000000000000000000007.0.5", None) == (
            "00000000000000000000000000000008.0"
        )


# -- the state a saver just wrote: kept, never stale ------------------------------


class CountingSerde(JsonPlusSerializer):
    """LangGraph's serializer, keeping what each decode returned."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded: list[Any] = []

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        value = super().loads_typed(data)
        self.decoded.append(value)
        return value


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_get_after_put_decodes_no_list(tmp_path: Path, engine: str, kind: str) -> None:
    """The latest checkpoint this saver put comes back from memory: its growing
    list (the messages of a chat) is not decoded again, on either saver."""
    serde = CountingSerde()
    path = tmp_path / "tip.db"
    loop = asyncio.new_event_loop()
    saver: AgentlogSaver | AsyncAgentlogSaver
    if kind == "sync":
        saver = AgentlogSaver(path, engine=engine, serde=serde)
    else:
        saver = AsyncAgentlogSaver(path, engine=engine, serde=serde)
    try:
        face = Face(saver, None if kind == "sync" else loop)
        stored = chain(face, "t", 5)
        serde.decoded.clear()
        got = face.get(config("t"))
        assert got is not None and got.config == stored[-1]
        assert got.checkpoint["channel_values"] == {
            "items": [f"item {i}" for i in range(5)],
            "step": 4,
        }
        assert not [v for v in serde.decoded if isinstance(v, list)]
        # An older checkpoint is rebuilt from the log, as before.
        old = face.get(stored[1])
        assert old is not None and old.checkpoint["channel_values"]["items"] == ["item 0", "item 1"]
        assert [v for v in serde.decoded if isinstance(v, list)]
    finally:
        if isinstance(saver, AsyncAgentlogSaver):
            loop.run_until_complete(saver.aclose())
        else:
            saver.close()
        loop.close()


def test_kept_state_is_handed_out_as_a_copy(tmp_path: Path, engine: str) -> None:
    with AgentlogSaver(tmp_path / "copy.db", engine=engine) as saver:
        face = Face(saver, None)
        chain(face, "t", 3)
        first = face.get(config("t"))
        assert first is not None
        first.checkpoint["channel_values"]["items"].append("changed by the caller")
        first.checkpoint["channel_values"]["step"] = -1
        again = face.get(config("t"))
        assert again is not None
        assert again.checkpoint["channel_values"] == {
            "items": ["item 0", "item 1", "item 2"],
            "step": 2,
        }


def test_kept_state_yields_to_another_savers_rewrite(tmp_path: Path, engine: str) -> None:
    """Another saver deletes the thread and writes it anew to the same head:
    the first saver's kept state is of another incarnation and is not used."""
    path = tmp_path / "rewrite.db"
    with AgentlogSaver(path, engine=engine) as a, AgentlogSaver(path, engine=engine) as b:
        fa, fb = Face(a, None), Face(b, None)
        chain(fa, "t", 3)
        fb.delete_thread("t")
        parent = config("t")
        for step in range(3):
            cp = checkpoint({"items": ["b"] * (step + 1), "step": 10 + step}, {"items": step + 1})
            cp["channel_versions"]["step"] = step + 1
            parent = fb.put(parent, cp, {"by": "b"}, {"items": step + 1, "step": step + 1})
        assert a.log.head(lg.session_id_for("t", "")) == b.log.head(lg.session_id_for("t", ""))
        got = fa.get(config("t"))
        assert got is not None
        assert got.checkpoint["channel_values"] == {"items": ["b", "b", "b"], "step": 12}
        # A step by a third writer (a new child of b's latest) is seen by a too.
        cp = checkpoint({"items": ["b", "b", "b", "c"], "step": 13}, {"items": 4, "step": 4})
        child = fb.put(parent, cp, {"by": "b"}, {"items": 4, "step": 4})
        got = fa.get(config("t"))
        assert got is not None and got.config == child
        assert got.checkpoint["channel_values"]["items"] == ["b", "b", "b", "c"]
