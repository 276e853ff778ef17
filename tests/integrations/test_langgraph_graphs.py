"""The LangGraph saver under real use: what it stores, real graphs beside LangGraph's
SqliteSaver, growth with the steps, processes and threads."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .langgraph_api import (
    ERROR,
    AIMessage,
    BaseCheckpointSaver,
    Command,
    HumanMessage,
    InMemorySaver,
    RunnableConfig,
    SqliteSaver,
)

# isort: split

from agentlog import SqliteCheckpointer
from agentlog.integrations import langgraph as lg
from agentlog.integrations.langgraph import AgentlogSaver, AsyncAgentlogSaver
from agentlog.integrations.langgraph import core as lg_core

from ..benchmark_run import run_benchmark
from ..conftest import PYTHON, child_env
from .langgraph_child import build_graph, first_input, transcript
from .test_langgraph import CHILD, Face, chain, checkpoint, config

# -- what is stored --------------------------------------------------------------------


def _events(path: Path, engine: str, thread: str, ns: str = "") -> list[dict[str, Any]]:
    """The session's events, each with its seq as ``_seq``."""
    with SqliteCheckpointer(path, tenant="langgraph", engine=engine) as log:
        return [{**e.event, "_seq": e.seq} for e in log.read(lg.session_id_for(thread, ns))]


def test_only_changed_channels_and_list_tails_are_stored(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "delta.db"
    big = "x" * 2000
    with AgentlogSaver(path, engine=engine) as saver:
        face = Face(saver, None)
        msgs = [HumanMessage(content="hi", id="m0")]
        cfg = face.put(
            config("t"),
            checkpoint({"messages": msgs, "doc": big}, {"messages": 1, "doc": 1}),
            {"step": -1},
            {"messages": 1, "doc": 1},
        )
        for step in range(5):
            msgs = [*msgs, AIMessage(content=f"reply {step}", id=f"a{step}")]
            cfg = face.put(
                cfg,
                checkpoint({"messages": msgs, "doc": big}, {"messages": step + 2, "doc": 1}),
                {"step": step},
                {"messages": step + 2},
            )
        got = face.get(cfg)
        assert got is not None
        assert got.checkpoint["channel_values"] == {"messages": msgs, "doc": big}
    checkpoints = [e for e in _events(path, engine, "t") if e["lg"] == "c"]
    assert [sorted(e["v"]) for e in checkpoints] == [["doc", "messages"]] + [["messages"]] * 5
    assert [e["v"]["messages"][0] for e in checkpoints] == ["f"] + ["x"] * 5
    # A tail holds one message, not the conversation.
    tail = checkpoints[-1]["v"]["messages"][2]
    assert b"reply 4" in tail.encode("latin-1")
    assert b"reply 3" not in tail.encode("latin-1")


def test_model_check_against_inmemorysaver(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random puts (growing lists, replaced values, emptied channels, branches
    from old parents, writes) read back exactly as LangGraph's InMemorySaver."""
    monkeypatch.setattr(lg_core, "SNAPSHOT_MIN_BYTES", 2000)  # snapshots every few steps
    rng = random.Random(7)
    ours = AgentlogSaver(tmp_path / "model.db", engine=engine)
    theirs = InMemorySaver()
    stored: list[tuple[RunnableConfig, dict[str, Any], dict[str, Any]]] = []
    values: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    parent = config("t")
    for step in range(120):
        if stored and rng.random() < 0.15:  # time travel: branch from an old checkpoint
            parent, values, versions = rng.choice(stored)
            values, versions = dict(values), dict(versions)
        new: dict[str, Any] = {}
        for channel in ("messages", "log", "count", "gone"):
            if rng.random() < 0.5:
                continue
            # InMemorySaver keys values by version: its own unique versions.
            version = theirs.get_next_version(versions.get(channel), None)
            new[channel] = versions[channel] = version
            if channel in ("messages", "log") and rng.random() < 0.85:
                tail = [
                    f"{channel} {step} {i}" * rng.randint(1, 30) for i in range(rng.randint(0, 3))
                ]
                values[channel] = [*values.get(channel, []), *tail]
            elif channel == "gone" and rng.random() < 0.5:
                values.pop(channel, None)
            else:
                values[channel] = [f"reset {step}"] if channel != "count" else step
        cp = checkpoint(dict(values), dict(versions))
        meta = {"source": "loop", "step": step, "parents": {}}
        a = ours.put(parent, cp, meta, new)
        b = theirs.put(parent, cp, meta, new)
        assert a == b
        if rng.random() < 0.3:
            writes = [("messages", f"w{step}"), (ERROR, "e")][: rng.randint(1, 2)]
            ours.put_writes(a, writes, f"task-{step % 3}", f"path-{step % 2}")
            theirs.put_writes(b, writes, f"task-{step % 3}", f"path-{step % 2}")
        stored.append((a, dict(values), dict(versions)))
        parent = a
    fresh = AgentlogSaver(tmp_path / "model.db", engine=engine)  # a cold index too
    for saver in (ours, fresh):
        mine = list(saver.list(config("t")))
        want = list(theirs.list(config("t")))
        assert len(mine) == len(want) == 120
        for x, y in zip(mine, want, strict=True):
            assert x.config == y.config
            assert x.checkpoint == y.checkpoint
            assert x.metadata == y.metadata
            assert x.parent_config == y.parent_config
            assert x.pending_writes == y.pending_writes
    ours.close()
    fresh.close()
    checkpoints = [e for e in _events(tmp_path / "model.db", engine, "t") if e["lg"] == "c"]
    snapshots = [e for e in checkpoints if e["r"] == e["_seq"]]
    deltas = [e for e in checkpoints if e["r"] != e["_seq"]]
    assert len(snapshots) > 5 and len(deltas) > 50  # both paths were exercised
    assert any(blob[0] == "x" for e in deltas for blob in e["v"].values())


# -- real graphs, compared with LangGraph's SqliteSaver ------------------------------


def _normal(metadata: Any) -> dict[str, Any]:
    """Metadata without what differs between two runs (run ids, checkpoint ids)."""
    out = {k: v for k, v in dict(metadata).items() if k != "run_id"}
    if "parents" in out:
        out["parents"] = sorted(out["parents"])
    return out


def _snapshot(state: Any) -> tuple[Any, ...]:
    return (
        state.values,
        state.next,
        _normal(state.metadata or {}),
        [(t.name, [i.value for i in t.interrupts]) for t in state.tasks],
        state.parent_config is None,
    )


def _history(graph: Any, cfg: RunnableConfig) -> list[tuple[Any, ...]]:
    return [_snapshot(s) for s in graph.get_state_history(cfg)]


def test_graph_interrupt_resume_history_replay_update(tmp_path: Path, engine: str) -> None:
    ours_db, theirs_db = tmp_path / "ours.db", tmp_path / "theirs.db"
    cfg: RunnableConfig = {"configurable": {"thread_id": "chat-1"}}
    conn = sqlite3.connect(theirs_db, check_same_thread=False)
    try:
        with AgentlogSaver(ours_db, engine=engine) as saver:
            graphs = {"ours": build_graph(saver), "theirs": build_graph(SqliteSaver(conn))}
            for graph in graphs.values():
                graph.invoke(first_input(), cfg)
            # Interrupted inside the review subgraph, waiting for approval.
            states = {k: g.get_state(cfg, subgraphs=True) for k, g in graphs.items()}
            assert states["ours"].next == ("review",)
            assert [i.value for i in states["ours"].tasks[0].interrupts] == [
                {"question": "send the draft?", "seen": 5}
            ]
            assert _snapshot(states["ours"]) == _snapshot(states["theirs"])
            sub = {k: s.tasks[0].state for k, s in states.items()}
            assert sub["ours"].values == sub["theirs"].values  # the subgraph's own state
            assert sub["ours"].next == sub["theirs"].next == ("approve",)
            namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(None)}
            assert len(namespaces) == 2 and "" in namespaces  # root + the subgraph's
        conn.commit()
        # Resume in a new process with Command(resume=...).
        run = subprocess.run(
            [PYTHON, str(CHILD), str(ours_db), engine, str(theirs_db), "chat-1", "yes"],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        resumed = json.loads(run.stdout)
        assert resumed["agentlog"] == resumed["sqlite"]
        assert resumed["agentlog"][-1] == "HumanMessage:decision: yes"

        with AgentlogSaver(ours_db, engine=engine) as saver:
            graphs = {"ours": build_graph(saver), "theirs": build_graph(SqliteSaver(conn))}
            final = {k: g.get_state(cfg) for k, g in graphs.items()}
            assert final["ours"].next == ()
            assert final["ours"].values["decision"] == "yes"
            assert _snapshot(final["ours"]) == _snapshot(final["theirs"])
            history = {k: _history(g, cfg) for k, g in graphs.items()}
            assert len(history["ours"]) == len(history["theirs"]) > 5
            assert history["ours"] == history["theirs"]

            # Replay from an earlier checkpoint: before the tool ran.
            def before_tool(graph: Any) -> RunnableConfig:
                for state in graph.get_state_history(cfg):
                    if state.next == ("tool",):
                        return state.config  # type: ignore[no-any-return]
                raise AssertionError("no checkpoint before the tool")

            for graph in graphs.values():
                graph.invoke(None, before_tool(graph))  # runs on to the interrupt again
            replayed = {k: g.get_state(cfg) for k, g in graphs.items()}
            assert replayed["ours"].next == ("review",)
            assert _snapshot(replayed["ours"]) == _snapshot(replayed["theirs"])
            for graph in graphs.values():
                graph.invoke(Command(resume="no"), cfg)
            assert _history(graphs["ours"], cfg) == _history(graphs["theirs"], cfg)

            # update_state, as a person editing the state.
            for graph in graphs.values():
                graph.update_state(cfg, {"messages": [HumanMessage(content="note", id="note-1")]})
            updated = {k: g.get_state(cfg) for k, g in graphs.items()}
            assert transcript(updated["ours"].values)[-1] == "HumanMessage:note"
            assert _snapshot(updated["ours"]) == _snapshot(updated["theirs"])
            assert _history(graphs["ours"], cfg) == _history(graphs["theirs"], cfg)
    finally:
        conn.close()


def test_async_graph_on_the_async_saver(tmp_path: Path, engine: str) -> None:
    async def main() -> tuple[Any, Any]:
        cfg: RunnableConfig = {"configurable": {"thread_id": "async-1"}}
        async with AsyncAgentlogSaver(tmp_path / "async.db", engine=engine) as saver:
            graph = build_graph(saver)
            await graph.ainvoke(first_input(), cfg)
            waiting = await graph.aget_state(cfg)
            await graph.ainvoke(Command(resume="ok"), cfg)
            done = await graph.aget_state(cfg)
            history = [s async for s in graph.aget_state_history(cfg)]
            assert len(history) > 5
            return waiting, done

    waiting, done = asyncio.run(main())
    assert waiting.next == ("review",)
    assert done.next == ()
    assert transcript(done.values)[-1] == "HumanMessage:decision: ok"
    memory = build_graph(InMemorySaver())
    cfg: RunnableConfig = {"configurable": {"thread_id": "async-1"}}
    memory.invoke(first_input(), cfg)
    memory.invoke(Command(resume="ok"), cfg)
    assert memory.get_state(cfg).values == done.values


# -- growth: linear in the steps ---------------------------------------------------------


def _append_steps(saver: BaseCheckpointSaver[Any], steps: int) -> None:
    """Direct puts as LangGraph makes them: one ~500-byte message more per step."""
    cfg = config("grow")
    messages: list[Any] = []
    version: Any = None
    for step in range(steps):
        text = f"step {step} " + "lorem ipsum dolor sit amet " * 17
        messages = [*messages, AIMessage(content=text, id=f"m{step}")]
        version = saver.get_next_version(version, None)
        cfg = saver.put(
            cfg,
            checkpoint({"messages": messages}, {"messages": version}),
            {"source": "loop", "step": step, "parents": {}},
            {"messages": version},
        )


def _db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _bytes_per_step(tmp_path: Path, kind: str, steps: int, engine: str) -> float:
    path = tmp_path / f"{kind}-{steps}.db"
    if kind == "agentlog":
        with AgentlogSaver(path, engine=engine) as saver:
            _append_steps(saver, steps)
            got = saver.get_tuple(config("grow"))
            assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == steps
    else:
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            _append_steps(SqliteSaver(conn), steps)
        finally:
            conn.close()
    return _db_bytes(path) / steps


def test_database_grows_linearly_with_the_steps(tmp_path: Path, engine: str) -> None:
    small = _bytes_per_step(tmp_path, "agentlog", 1_000, engine)
    large = _bytes_per_step(tmp_path, "agentlog", 10_000, engine)
    assert large < 2 * small, (small, large)
    # LangGraph's SqliteSaver stores the whole history every step: per-step
    # bytes grow with the steps (quadratic in total).
    theirs_small = _bytes_per_step(tmp_path, "sqlite", 100, engine)
    theirs_large = _bytes_per_step(tmp_path, "sqlite", 400, engine)
    assert theirs_large > 3 * theirs_small
    assert small < theirs_small  # already at 100 steps against our 1,000
    assert os.path.exists(tmp_path / "agentlog-1000.db")


def test_a_fresh_process_resumes_from_the_tail(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new saver reads the latest checkpoint from its snapshot on, not the
    whole thread; anything older (an id, list) then reads the rest once."""
    monkeypatch.setattr(lg_core, "SNAPSHOT_MIN_BYTES", 4000)
    path = tmp_path / "tail.db"
    with AgentlogSaver(path, engine=engine) as saver:
        stored = chain(Face(saver, None), "t", 300)
        # A write stored before its checkpoint (LangGraph saves checkpoints in
        # the background, so a task's writes can land first).
        early = config("t", checkpoint_id="zzzz-later")
        saver.put_writes(early, [("ch", "early")], "task-e")
        saver.put_writes(stored[-1], [("ch", "w1"), ("ch", "w2")], "task-1")
        later = checkpoint({"items": ["z"]}, {"items": 999})
        later["id"] = "zzzz-later"  # the greatest id: the latest
        saver.put(stored[-1], later, {"step": 999}, {"items": 999})
        saver.put_writes(early, [("ch", "late")], "task-l")
    with AgentlogSaver(path, engine=engine) as saver:
        latest = saver.get_tuple(config("t"))
        assert latest is not None
        assert latest.config["configurable"]["checkpoint_id"] == "zzzz-later"
        assert latest.pending_writes == [("task-e", "ch", "early"), ("task-l", "ch", "late")]
        sess = saver._core.sessions[lg.session_id_for("t", "")]
        assert 0 < sess.base < sess.head - 5  # only the tail was indexed
        # The next step is planned on the tail index too.
        saver.put_writes(latest.config, [("ch", "early")], "task-e")  # a dupe: kept once
        grown = checkpoint({"items": ["z", "y"]}, {"items": 1000})
        nxt = saver.put(latest.config, grown, {}, {"items": 1000})
        assert sess is saver._core.sessions[lg.session_id_for("t", "")]
        assert saver._core.sessions[lg.session_id_for("t", "")].base > 0
        got = saver.get_tuple(nxt)
        assert got is not None and got.checkpoint["channel_values"]["items"] == ["z", "y"]
        # An old checkpoint: the whole thread is indexed, once.
        old = saver.get_tuple(stored[10])
        assert old is not None
        assert old.checkpoint["channel_values"]["items"] == [f"item {i}" for i in range(11)]
        assert saver._core.sessions[lg.session_id_for("t", "")].base == 0
        with_writes = saver.get_tuple(stored[-1])
        assert with_writes is not None
        assert with_writes.pending_writes == [("task-1", "ch", "w1"), ("task-1", "ch", "w2")]
        assert len(list(saver.list(config("t")))) == 302
        again = saver.get_tuple(latest.config)
        assert again is not None and again.pending_writes == latest.pending_writes


def test_async_saver_sync_faces_and_a_graph_from_a_thread(tmp_path: Path, engine: str) -> None:
    """The async saver's sync methods run on its loop when called from another
    thread (a sync graph, say); on the loop itself the writing ones refuse."""

    async def main() -> None:
        async with AsyncAgentlogSaver(tmp_path / "faces.db", engine=engine) as saver:
            loop = asyncio.get_running_loop()
            with pytest.raises(asyncio.InvalidStateError):
                saver.put(config("t"), checkpoint({}, {}), {}, {})
            stored = await loop.run_in_executor(
                None, saver.put, config("t"), checkpoint({"n": 1}, {"n": 1}), {"s": 1}, {"n": 1}
            )
            await loop.run_in_executor(None, saver.put_writes, stored, [("ch", 1)], "task")
            got = saver.get_tuple(stored)  # reads work anywhere
            assert got is not None and got.pending_writes == [("task", "ch", 1)]
            cfg: RunnableConfig = {"configurable": {"thread_id": "sync-graph"}}
            graph = build_graph(saver)
            await loop.run_in_executor(None, graph.invoke, first_input(), cfg)
            state = await graph.aget_state(cfg)
            assert state.next == ("review",)
            await loop.run_in_executor(None, saver.copy_thread, "t", "t2")
            assert [t.checkpoint["id"] async for t in saver.alist(config("t2"))] == [
                stored["configurable"]["checkpoint_id"]
            ]
            await loop.run_in_executor(None, saver.delete_thread, "t2")
            assert await saver.aget_tuple(config("t2")) is None

    asyncio.run(main())


def test_one_saver_shared_by_threads(tmp_path: Path, engine: str) -> None:
    """LangGraph saves in background threads; graphs on several threads share one saver."""
    from concurrent.futures import ThreadPoolExecutor

    with AgentlogSaver(tmp_path / "threads.db", engine=engine) as saver:
        graph = build_graph(saver)

        def run(n: int) -> list[str]:
            cfg: RunnableConfig = {"configurable": {"thread_id": f"chat-{n}"}}
            graph.invoke(first_input(f"question {n}"), cfg)
            graph.invoke(Command(resume=f"ok {n}"), cfg)
            return transcript(graph.get_state(cfg).values)

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(run, range(8)))
    reference = build_graph(InMemorySaver())
    for n, result in enumerate(results):
        cfg: RunnableConfig = {"configurable": {"thread_id": f"chat-{n}"}}
        reference.invoke(first_input(f"question {n}"), cfg)
        reference.invoke(Command(resume=f"ok {n}"), cfg)
        assert result == transcript(reference.get_state(cfg).values)


def test_the_benchmark_runs(tmp_path: Path) -> None:
    """``python -m benchmarks.langgraph --quick`` (a smoke test: no timings
    asserted). About 8 s: each saver's graph runs in a process of its own."""
    out = tmp_path / "lg.json"
    run = run_benchmark(tmp_path, "-m", "benchmarks.langgraph", "--quick", "--json", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "bytes/step" in run.stdout
    rows = json.loads(out.read_text())
    by = {(row["system"], row["steps"]): row for row in rows}
    assert {row["steps"] for row in rows} == {200, 1_000}
    sqlite_row = by[("langgraph-sqlite", 1_000)]
    for (system, steps), row in by.items():
        assert row["us_per_step"] > 0 and row["resume_ms"] > 0
        if system.startswith("agentlog") and steps == 1_000:
            assert row["bytes_per_step"] * 20 < sqlite_row["bytes_per_step"]


def test_a_copy_cut_short_still_reads_as_its_thread(tmp_path: Path, engine: str) -> None:
    """copy_thread is a fork and then a thread event; a crash between them
    leaves the copy readable under its own thread id, and a new copy replaces it."""
    path = tmp_path / "cut.db"
    with AgentlogSaver(path, engine=engine) as saver:
        stored = chain(Face(saver, None), "src", 2)
        log = saver.log
        source = lg.session_id_for("src", "")
        log.fork(source, log.head(source), lg.session_id_for("dst", ""))  # no thread event
    with AgentlogSaver(path, engine=engine) as saver:
        got = saver.get_tuple(config("dst"))
        assert got is not None and got.config["configurable"]["thread_id"] == "dst"
        listed = list(saver.list(config("dst")))
        assert [t.config["configurable"]["thread_id"] for t in listed] == ["dst", "dst"]
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"src"}
        saver.copy_thread("src", "dst")
        assert len(list(saver.list(None))) == 4
        assert stored


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_any_agentlog_checkpointer_underneath(tmp_path: Path, backend: str) -> None:
    from agentlog import FileCheckpointer, MemoryCheckpointer

    log = MemoryCheckpointer() if backend == "memory" else FileCheckpointer(tmp_path / "files")
    with log:
        saver = AgentlogSaver(log)
        graph = build_graph(saver)
        cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
        graph.invoke(first_input(), cfg)
        graph.invoke(Command(resume="fine"), cfg)
        reference = build_graph(InMemorySaver())
        reference.invoke(first_input(), cfg)
        reference.invoke(Command(resume="fine"), cfg)
        assert _history(graph, cfg) == _history(reference, cfg)
        saver.copy_thread("t", "u")
        assert len(list(saver.list(config("u", "")))) == len(list(saver.list(config("t", ""))))
        saver.close()  # not the saver's to close
        assert not log.closed
