"""LangGraph checkpointers side by side: agentlog's saver and LangGraph's SqliteSaver.

    python -m benchmarks.langgraph [--quick] [--rounds N] [--json FILE]

The workload is what a chat graph makes: one checkpoint per step whose
``messages`` channel grew by one ~500-byte message (the benchmark's fixed-seed
events), put directly through each saver as LangGraph's loop puts it
(``new_versions`` naming the changed channel). For 1,000 and 10,000 steps it
reports the time per step (µs), the database bytes per step, and the resume
time: opening the saver in a fresh process and ``get_tuple`` of the latest
checkpoint (for agentlog that includes building its index of the thread).
Every measurement runs in a fresh process; the figures are medians of
``--rounds`` rounds (3; 1 with ``--quick``).

``--graph`` runs a real ``StateGraph`` instead (a ``messages`` channel with
``add_messages``, one node answering each message, ``invoke`` with
``durability="sync"``) on each saver and on LangGraph's ``InMemorySaver``
(no persistence, the ceiling), for 1,000 invokes (200 with ``--quick``):
invokes per second, their ratio to ``InMemorySaver`` and the bytes per invoke.

SqliteSaver writes the whole history in every checkpoint, so its file grows
with the square of the steps: it runs as many steps as keep the database
under ``SQLITE_MAX_BYTES`` (the ``steps run`` column says how many).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.workload import events

#: SqliteSaver's database is capped near this size (its growth is quadratic).
SQLITE_MAX_BYTES = 256 * 1024 * 1024
EVENT_BYTES = 500
THREAD = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}


def sqlite_steps(steps: int) -> int:
    """The steps SqliteSaver runs: its bytes are about EVENT_BYTES * steps² / 2."""
    return min(steps, int((2 * SQLITE_MAX_BYTES / EVENT_BYTES) ** 0.5))


def _open(system: str, path: str) -> tuple[Any, Any]:
    """The saver and what closes it."""
    if system == "langgraph-sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        return saver, conn.close
    from agentlog.integrations.langgraph import AgentlogSaver

    saver = AgentlogSaver(path, engine=system.removeprefix("agentlog-"))
    return saver, saver.close


def _db_bytes(path: str) -> int:
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))


def put_steps(system: str, path: str, steps: int) -> dict[str, Any]:
    """Worker: ``steps`` puts, each appending one message; time and bytes."""
    from langgraph.checkpoint.base import empty_checkpoint

    data = events(steps)
    saver, close = _open(system, path)
    config: Any = THREAD
    messages: list[dict[str, Any]] = []
    version: Any = None
    start = time.perf_counter()
    for step in range(steps):
        messages = [*messages, data[step]]
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": version}
        config = saver.put(
            config,
            checkpoint,
            {"source": "loop", "step": step, "parents": {}},
            {"messages": version},
        )
    elapsed = time.perf_counter() - start
    close()
    return {"seconds": elapsed, "bytes": _db_bytes(path)}


def resume(system: str, path: str, steps: int) -> dict[str, Any]:
    """Worker: open the saver in this fresh process and read the latest checkpoint
    (the modules are imported first: the time is the saver's, not the imports')."""
    import langgraph.checkpoint.sqlite  # noqa: F401

    import agentlog.integrations.langgraph  # noqa: F401

    start = time.perf_counter()
    saver, close = _open(system, path)
    found = saver.get_tuple(THREAD)
    elapsed = time.perf_counter() - start
    assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == steps
    close()
    return {"seconds": elapsed}


def graph_invokes(system: str, path: str, steps: int) -> dict[str, Any]:
    """Worker: ``steps`` invokes of a one-node chat graph on ``system``'s saver."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages

    # The functional form: this module's annotations are strings, and a class
    # here would name Annotated in a scope LangGraph's type hints cannot see.
    State = TypedDict("State", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

    def reply(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(f"you said: {state['messages'][-1].content[:40]}")]}

    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    if system == "langgraph-memory":
        from langgraph.checkpoint.memory import InMemorySaver

        saver: Any = InMemorySaver()
        close: Any = lambda: None  # noqa: E731
    else:
        saver, close = _open(system, path)
    graph = builder.compile(checkpointer=saver)
    data = events(steps)
    config = {"configurable": {"thread_id": "bench"}}
    start = time.perf_counter()
    for step in range(steps):
        text = json.dumps(data[step])[:EVENT_BYTES]
        graph.invoke({"messages": [HumanMessage(text)]}, config, durability="sync")
    elapsed = time.perf_counter() - start
    got = graph.get_state(config).values["messages"]
    assert len(got) == 2 * steps
    close()
    return {"seconds": elapsed, "bytes": _db_bytes(path)}


def graph_rows(quick: bool, rounds: int | None = None) -> list[dict[str, Any]]:
    """One row per saver: invokes/s, ratio to InMemorySaver, bytes per invoke (medians)."""
    steps = 200 if quick else 1_000
    rounds = rounds or (1 if quick else 3)
    names = ["langgraph-memory", *systems()]
    rates: dict[str, list[float]] = {name: [] for name in names}
    sizes: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="agentlog-lg-graph-") as tmp:
        for r in range(rounds):  # the systems side by side in each round
            for system in names:
                path = os.path.join(tmp, f"{system}-{r}.db")
                run = _worker({"do": "graph", "system": system, "path": path, "steps": steps})
                rates[system].append(steps / run["seconds"])
                sizes[system].append(run["bytes"] / steps)
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(path + suffix):
                        os.remove(path + suffix)
    memory = statistics.median(rates["langgraph-memory"])
    return [
        {
            "system": name,
            "invokes": steps,
            "invokes_per_s": statistics.median(rates[name]),
            "vs_memory": statistics.median(rates[name]) / memory,
            "bytes_per_invoke": statistics.median(sizes[name]),
            "rounds": rounds,
        }
        for name in names
    ]


def graph_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| saver | invokes | invokes/s | vs InMemorySaver | bytes/invoke |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in results:
        lines.append(
            f"| {row['system']} | {row['invokes']:,} | {row['invokes_per_s']:,.1f} | "
            f"{row['vs_memory']:.2f} | {row['bytes_per_invoke']:,.0f} |"
        )
    return "\n".join(lines)


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.langgraph", "--worker", json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if run.returncode != 0:
        raise RuntimeError(f"worker {job} failed:\n{run.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def systems() -> list[str]:
    """agentlog on each engine built here, then LangGraph's SqliteSaver."""
    from agentlog import engine_info

    return [f"agentlog-{name}" for name in engine_info()["available"]] + ["langgraph-sqlite"]


def rows(quick: bool, rounds: int | None = None) -> list[dict[str, Any]]:
    """One row per (system, steps): µs per step, bytes per step, resume ms (medians)."""
    sizes = (200, 1_000) if quick else (1_000, 10_000)
    rounds = rounds or (1 if quick else 3)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentlog-lg-bench-") as tmp:
        for steps in sizes:
            for system in systems():
                run = sqlite_steps(steps) if system == "langgraph-sqlite" else steps
                per_step, size, resumes = [], [], []
                for r in range(rounds):
                    path = os.path.join(tmp, f"{system}-{steps}-{r}.db")
                    put = _worker({"do": "put", "system": system, "path": path, "steps": run})
                    per_step.append(put["seconds"] / run * 1e6)
                    size.append(put["bytes"] / run)
                    back = _worker({"do": "resume", "system": system, "path": path, "steps": run})
                    resumes.append(back["seconds"] * 1e3)
                    for suffix in ("", "-wal", "-shm"):
                        if os.path.exists(path + suffix):
                            os.remove(path + suffix)
                out.append(
                    {
                        "system": system,
                        "steps": steps,
                        "steps_run": run,
                        "us_per_step": statistics.median(per_step),
                        "bytes_per_step": statistics.median(size),
                        "resume_ms": statistics.median(resumes),
                        "rounds": rounds,
                    }
                )
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| system | steps | steps run | µs/step | bytes/step | resume (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in results:
        lines.append(
            f"| {row['system']} | {row['steps']:,} | {row['steps_run']:,} | "
            f"{row['us_per_step']:,.0f} | {row['bytes_per_step']:,.0f} | "
            f"{row['resume_ms']:,.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.langgraph", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200 and 1,000 steps, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per figure (median)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--graph", action="store_true", help="a real StateGraph, 1,000 invokes")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        job = json.loads(args.worker)
        work = {"put": put_steps, "resume": resume, "graph": graph_invokes}[job["do"]]
        print(json.dumps(work(job["system"], job["path"], job["steps"])))
        return
    if args.graph:
        found = graph_rows(args.quick, args.rounds)
        print(graph_table(found))
        if args.json:
            Path(args.json).write_text(json.dumps(found, indent=2))
        return
    results = rows(args.quick, args.rounds)
    print(table(results))
    print(
        f"\nSqliteSaver runs at most {sqlite_steps(10**9):,} steps (database capped near "
        f"{SQLITE_MAX_BYTES // 2**20} MiB: it stores the whole history per step)."
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
