"""The OpenAI Agents SDK session adapter beside the SDK's own ``SQLiteSession``.

    python -m benchmarks.openai_agents [--quick] [--rounds N] [--json FILE]

The workload is an agent's steps as the SDK stores them — a user message, a
function call, its output, an assistant message, over and over, ~500 bytes
each, from a fixed seed — added one item per ``add_items`` call (one step).
For each system and size it measures, in fresh processes: the time per step,
the database's bytes per step once the session is closed, and the resume
time (opening a session object in a new process and ``get_items()`` of the
whole session). The table shows medians of the rounds. ``rows(quick)`` gives
the same figures to a caller.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from benchmarks.run import available_engines
from benchmarks.systems import adapter_main, installed
from benchmarks.worker import db_bytes, peak_rss_kb
from benchmarks.workload import WORDS

#: agentlog's adapter on each engine, then the SDK's own session.
SYSTEMS = ("agentlog-c", "agentlog-python", "openai-agents")
SESSION_ID = "bench-session"


def items(count: int, seed: int = 20261130) -> list[dict[str, Any]]:
    """``count`` SDK items (~500 bytes each), the same for the same seed and count."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(count):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(55, 85)))
        step, call_id = i % 4, f"call_{i // 4:08d}"
        if step == 0:
            out.append({"role": "user", "content": text})
        elif step == 1:
            out.append(
                {
                    "arguments": json.dumps({"path": f"src/{i}.py", "query": text[:300]}),
                    "call_id": call_id,
                    "name": rng.choice(["read_file", "grep", "bash", "write_file"]),
                    "type": "function_call",
                    "id": f"fc_{i:09d}",
                    "status": "completed",
                }
            )
        elif step == 2:
            out.append({"call_id": call_id, "output": text, "type": "function_call_output"})
        else:
            out.append(
                {
                    "id": f"msg_{i:09d}",
                    "content": [{"annotations": [], "text": text, "type": "output_text"}],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                }
            )
    return out


def _open(system: str, path: str) -> Any:
    """A session object of ``system`` on the database at ``path`` (imports are warm:
    see :func:`measure`)."""
    if system == "openai-agents":
        from agents import SQLiteSession

        return SQLiteSession(SESSION_ID, path)
    from agentlog.integrations.openai_agents import AgentlogSession

    return AgentlogSession(SESSION_ID, path, engine=system.removeprefix("agentlog-"))


async def _close(session: Any) -> None:
    if hasattr(session, "aclose"):
        await session.aclose()
    else:
        session.close()


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement (run in a fresh process): ``write`` or ``resume``."""
    system, path, steps = spec["system"], spec["path"], spec["steps"]
    # Import the SDK (~1 s) and agentlog before any clock starts: both systems need it.
    import agents.memory.sqlite_session  # noqa: F401

    import agentlog.integrations.openai_agents  # noqa: F401

    async def write() -> dict[str, Any]:
        data = items(steps)
        session = _open(system, path)
        start = time.perf_counter()
        for item in data:
            await session.add_items([item])
        seconds = time.perf_counter() - start
        await _close(session)
        return {"seconds": seconds, "db_bytes": db_bytes(path)}

    async def resume() -> dict[str, Any]:
        start = time.perf_counter()
        session = _open(system, path)
        opened = time.perf_counter()
        got = await session.get_items()
        done = time.perf_counter()
        assert len(got) == steps, (len(got), steps)
        await _close(session)
        return {"open_seconds": opened - start, "read_seconds": done - opened}

    result = asyncio.run(write() if spec["kind"] == "write" else resume())
    result["peak_rss_kb"] = peak_rss_kb()
    return result


def in_fresh_process(spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`measure` in a new interpreter (spawned, so nothing is inherited)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(measure, spec).result()


def _systems() -> list[str]:
    engines = available_engines()
    return [
        s
        for s in SYSTEMS
        if (s == "openai-agents" and installed("agents"))
        or (s.startswith("agentlog-") and s.removeprefix("agentlog-") in engines)
    ]


def rows(quick: bool, rounds: int | None = None) -> list[dict[str, Any]]:
    """One row per system and size: medians of ``rounds`` (3; 1 when quick).

    Each row: ``system``, ``steps``, ``us_per_step`` (one ``add_items`` of
    one item), ``bytes_per_step`` (the database once closed),
    ``resume_ms`` (a session opened in a new process plus ``get_items()``
    of everything), ``open_ms`` and ``get_items_ms`` (its two parts),
    ``peak_rss_mb`` (the resuming process) and ``rounds``.
    """
    sizes = (200, 1_000) if quick else (1_000, 10_000)
    rounds = rounds if rounds is not None else (1 if quick else 3)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentlog-oa-bench-") as tmp:
        for steps in sizes:
            systems = _systems()
            writes: dict[str, list[dict[str, Any]]] = {system: [] for system in systems}
            resumes: dict[str, list[dict[str, Any]]] = {system: [] for system in systems}
            # Rounds outermost: a burst of other work on the machine hits every system.
            for round_no in range(rounds):
                for system in systems:
                    path = os.path.join(tmp, f"{system}-{steps}-{round_no}.db")
                    spec = {"system": system, "path": path, "steps": steps}
                    writes[system].append(in_fresh_process(spec | {"kind": "write"}))
                    resumes[system].append(in_fresh_process(spec | {"kind": "resume"}))
            for system in systems:
                out.append(_row(system, steps, writes[system], resumes[system], rounds))
    return out


def _row(
    system: str,
    steps: int,
    writes: list[dict[str, Any]],
    resumes: list[dict[str, Any]],
    rounds: int,
) -> dict[str, Any]:
    """The medians of one system's rounds at one size."""
    seconds = statistics.median(w["seconds"] for w in writes)
    return {
        "system": system,
        "steps": steps,
        "us_per_step": seconds / steps * 1e6,
        "bytes_per_step": statistics.median(w["db_bytes"] for w in writes) / steps,
        "resume_ms": statistics.median(r["open_seconds"] + r["read_seconds"] for r in resumes)
        * 1e3,
        "open_ms": statistics.median(r["open_seconds"] for r in resumes) * 1e3,
        "get_items_ms": statistics.median(r["read_seconds"] for r in resumes) * 1e3,
        "peak_rss_mb": max(r["peak_rss_kb"] for r in resumes) / 1024,
        "rounds": rounds,
    }


def table(results: list[dict[str, Any]]) -> str:
    """The rows as a text table."""
    lines = [
        f"{'steps':>7}  {'system':<17}{'µs/step':>9}{'B/step':>8}"
        f"{'resume ms':>11}{'(open':>8}{'+ read)':>9}",
        "-" * 69,
    ]
    for row in results:
        lines.append(
            f"{row['steps']:>7,}  {row['system']:<17}{row['us_per_step']:>9.1f}"
            f"{row['bytes_per_step']:>8.0f}{row['resume_ms']:>11.1f}"
            f"{row['open_ms']:>8.1f}{row['get_items_ms']:>9.1f}"
        )
    return "\n".join(lines)


#: What the command says when the framework's own store is not installed.
MISSING = "the OpenAI Agents SDK is not installed: pip install -e '.[bench]'"


# The entry point, alike in shape to google_adk's: the command is adapter_main's.
def main(argv: list[str] | None = None) -> None:
    """The command line: run :func:`rows` and print the table (and JSON)."""
    adapter_main(
        argv,
        prog="python -m benchmarks.openai_agents",
        description=__doc__.splitlines()[0],
        quick_help="200 and 1,000 steps, one round",
        missing=None if "openai-agents" in _systems() else MISSING,
        rows=rows,
        table=table,
    )


if __name__ == "__main__":
    main()
