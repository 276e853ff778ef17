"""Google ADK's session service on agentlog beside ADK's own DatabaseSessionService.

    python -m benchmarks.google_adk [--quick] [--rounds N] [--json FILE]

Both services store into a SQLite file: agentlog's :class:`AgentlogSessionService`
on each engine, and ADK's ``DatabaseSessionService`` on
``sqlite+aiosqlite://`` (its async driver). Each measurement runs in a fresh
process; the table shows medians of the rounds:

* ``append 1 session``: ``append_event`` calls per second, one after another
  on one session (each event ~500 bytes of text with a state delta);
* ``append 64 sessions``: the same with 64 coroutines at once, each on a
  session of its own (events per second over all of them; appends a
  service refused are counted apart, as ``errors``);
* ``get_session``: one ``get_session`` of a session of 10,000 events (ms),
  and, beside it, one with ``GetSessionConfig(num_recent_events=20)``;
* ``list_sessions``: one ``list_sessions`` of an app with 10,000 sessions (ms).

``rows(quick)`` gives the same figures to a caller.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from benchmarks.run import available_engines
from benchmarks.systems import adapter_main, installed
from benchmarks.workload import WORDS

#: agentlog's service on each engine, then ADK's own.
SYSTEMS = ("agentlog-c", "agentlog-python", "adk-database")
APP = "bench-app"
SCENARIOS = ("append 1 session", "append 64 sessions", "get_session", "list_sessions")


def sizes(quick: bool) -> dict[str, int]:
    """Events or sessions per scenario."""
    if quick:
        return {SCENARIOS[0]: 50, SCENARIOS[1]: 64 * 2, SCENARIOS[2]: 200, SCENARIOS[3]: 100}
    return {SCENARIOS[0]: 1_000, SCENARIOS[1]: 64 * 16, SCENARIOS[2]: 10_000, SCENARIOS[3]: 10_000}


def _texts(count: int, seed: int = 20261201) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(55, 85))) for _ in range(count)]


def _open(system: str, path: str) -> Any:
    if system == "adk-database":
        from google.adk.sessions.database_session_service import DatabaseSessionService

        return DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    from agentlog.integrations.google_adk import AgentlogSessionService

    return AgentlogSessionService(path, engine=system.removeprefix("agentlog-"))


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement, run in a fresh process: seconds for the scenario's timed part."""
    # Import ADK (~2 s) and agentlog before any clock starts: both systems need it.
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.genai import types

    import agentlog.integrations.google_adk  # noqa: F401

    system, path, scenario, size = spec["system"], spec["path"], spec["scenario"], spec["size"]
    texts = _texts(64)

    def event(i: int) -> Event:
        content = types.Content(role="user", parts=[types.Part(text=texts[i % len(texts)])])
        return Event(
            invocation_id=f"inv-{i}",
            author="user" if i % 2 == 0 else "agent",
            content=content,
            actions=EventActions(state_delta={"step": i}),
        )

    async def timed(work: Callable[[], Coroutine[Any, Any, Any]]) -> float:
        start = time.perf_counter()
        await work()
        return time.perf_counter() - start

    async def main() -> dict[str, Any]:
        service = _open(system, path)
        result: dict[str, Any] = {}
        if scenario == "append 1 session":
            session = await service.create_session(app_name=APP, user_id="u")

            async def one() -> None:
                for i in range(size):
                    await service.append_event(session, event(i))

            result["seconds"] = await timed(one)
        elif scenario == "append 64 sessions":
            sessions = [
                await service.create_session(app_name=APP, user_id=f"u{n}") for n in range(64)
            ]

            failed: list[str] = []

            async def each(session: Any) -> None:
                for i in range(size // 64):
                    try:
                        await service.append_event(session, event(i))
                    except Exception as exc:  # counted, not hidden: a row says how many
                        failed.append(type(exc).__name__)

            async def all64() -> None:
                await asyncio.gather(*(each(s) for s in sessions))

            result["seconds"] = await timed(all64)
            result["errors"] = len(failed)
            result["error_kinds"] = sorted(set(failed))
        elif scenario == "get_session":
            session = await service.create_session(app_name=APP, user_id="u", session_id="big")
            for i in range(size):
                await service.append_event(session, event(i))
            got: list[Any] = []

            async def get_all() -> None:
                got.append(await service.get_session(app_name=APP, user_id="u", session_id="big"))

            async def get_recent() -> None:
                config = GetSessionConfig(num_recent_events=20)
                got.append(
                    await service.get_session(
                        app_name=APP, user_id="u", session_id="big", config=config
                    )
                )

            result["seconds"] = await timed(get_all)
            result["recent_seconds"] = await timed(get_recent)
            assert len(got[0].events) == size and len(got[1].events) == 20
        else:
            for n in range(size):
                await service.create_session(
                    app_name=APP, user_id=f"u{n % 100}", state={"n": n, "note": texts[n % 64]}
                )
            listed: list[Any] = []

            async def list_all() -> None:
                listed.append(await service.list_sessions(app_name=APP))

            result["seconds"] = await timed(list_all)
            assert len(listed[0].sessions) == size
        await service.close()
        return result

    return asyncio.run(main())


def measure_each(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`measure` of each spec in turn, in this process (each on its own file)."""
    return [measure(spec) for spec in specs]


def in_fresh_process(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`measure_each` in a new interpreter (spawned, so nothing is inherited)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(measure_each, specs).result()


def _systems() -> list[str]:
    engines = available_engines()
    adk = installed("google.adk") and installed("aiosqlite") and installed("sqlalchemy")
    return [
        s
        for s in SYSTEMS
        if (s == "adk-database" and adk)
        or (s.startswith("agentlog-") and s.removeprefix("agentlog-") in engines)
    ]


def rows(quick: bool, rounds: int | None = None) -> list[dict[str, Any]]:
    """One row per system and scenario: medians of ``rounds`` (3; 1 when quick).

    Each row: ``system``, ``scenario``, ``size`` (events or sessions),
    ``value`` and ``unit`` (``events/s`` for the appends, ``ms`` for the
    reads), ``recent_ms`` (``get_session`` of the last 20 events, on the
    ``get_session`` row) and ``rounds``.
    """
    rounds = rounds if rounds is not None else (1 if quick else 3)
    counts = sizes(quick)
    out: list[dict[str, Any]] = []
    systems = _systems()
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {
        (system, scenario): [] for scenario in SCENARIOS for system in systems
    }
    with tempfile.TemporaryDirectory(prefix="agentlog-adk-bench-") as tmp:
        # Rounds outermost: a burst of other work on the machine hits every system.
        for round_no in range(rounds):
            for system in systems:
                specs = [
                    {
                        "system": system,
                        "path": os.path.join(tmp, f"{system}-{n}-{round_no}.db"),
                        "scenario": scenario,
                        "size": counts[scenario],
                    }
                    for n, scenario in enumerate(SCENARIOS)
                ]
                # A fresh process per measurement; the quick smoke run shares one
                # per system (importing ADK takes seconds).
                batches = [specs] if quick else [[spec] for spec in specs]
                for batch in batches:
                    for spec, result in zip(batch, in_fresh_process(batch), strict=True):
                        runs[(system, spec["scenario"])].append(result)
    for scenario in SCENARIOS:
        for system in systems:
            out.append(_row(system, scenario, counts[scenario], runs[(system, scenario)], rounds))
    return out


def _row(
    system: str, scenario: str, size: int, runs: list[dict[str, Any]], rounds: int
) -> dict[str, Any]:
    seconds = statistics.median(r["seconds"] for r in runs)
    row: dict[str, Any] = {"system": system, "scenario": scenario, "size": size, "rounds": rounds}
    if scenario.startswith("append"):
        errors = int(statistics.median(r.get("errors", 0) for r in runs))
        # Appends the service refused (ADK's: "database is locked") are not counted as done.
        row |= {"value": (size - errors) / seconds, "unit": "events/s", "errors": errors}
        row["error_kinds"] = sorted({k for r in runs for k in r.get("error_kinds", [])})
    else:
        row |= {"value": seconds * 1e3, "unit": "ms"}
    if scenario == "get_session":
        row["recent_ms"] = statistics.median(r["recent_seconds"] for r in runs) * 1e3
    return row


def table(results: list[dict[str, Any]]) -> str:
    """The rows as a text table."""
    lines = [f"{'scenario':<20}{'size':>8}  {'system':<17}{'value':>12}  unit", "-" * 66]
    for row in results:
        failed = f"  ({row['errors']:,} failed)" if row.get("errors") else ""
        lines.append(
            f"{row['scenario']:<20}{row['size']:>8,}  {row['system']:<17}"
            f"{row['value']:>12,.1f}  {row['unit']}{failed}"
        )
        if "recent_ms" in row:
            lines.append(
                f"{'  (last 20 events)':<20}{'':>8}  {row['system']:<17}"
                f"{row['recent_ms']:>12,.1f}  ms"
            )
    return "\n".join(lines)


#: What the command says when the framework's own store is not installed.
MISSING = "google-adk[db] is not installed: pip install -e '.[bench]'"


# The entry point, alike in shape to openai_agents's: the command is adapter_main's.
def main(argv: list[str] | None = None) -> None:
    """The command line: run :func:`rows` and print the table (and JSON)."""
    adapter_main(
        argv,
        prog="python -m benchmarks.google_adk",
        description=__doc__.splitlines()[0],
        quick_help="small sizes, one round",
        missing=None if "adk-database" in _systems() else MISSING,
        rows=rows,
        table=table,
    )


if __name__ == "__main__":
    main()
