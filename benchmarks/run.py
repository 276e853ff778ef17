"""Run the benchmark: every scenario on every system, side by side, in one run.

    python -m benchmarks [--quick] [--rounds N] [--json FILE] [--only S1,S3]

Systems: the raw-C baseline (benchmarks/baseline.c compiled against the same
SQLite the C engine embeds) twice, on agentlog's schema (``raw-c``) and on a
minimal one, one ``WITHOUT ROWID`` events table and nothing else
(``raw-c-min``, the floor); agentlog's C engine, agentlog's pure engine;
short hand-written scripts on the minimal schema (apsw + orjson and stdlib
sqlite3 + msgspec when installed, and stdlib sqlite3 fetching the payloads as
bytes with no JSON at all); and, when installed (``pip install -e
".[bench]"``), the OpenAI Agents SDK's ``SQLiteSession``, LangGraph's
``SqliteSaver`` and ``eventsourcing``. Every measurement runs in a fresh
process; replays keep what they read with the cyclic collector on. The table
shows medians of the rounds, the ratios to both floors in the same run,
database bytes per event and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import systems

AGENTLOG = ("agentlog-c", "agentlog-python")
#: The floors: raw C on agentlog's schema, and on the minimal schema.
FLOORS = ("raw-c", "raw-c-min")
#: The short scripts on the minimal schema that decode (systems.SCRIPTS has all).
SCRIPTS = ("apsw-orjson", "sqlite3-msgspec")
PEERS = {"openai-agents": "agents", "langgraph": "langgraph", "eventsourcing": "eventsourcing"}
#: LangGraph stores the whole history in every checkpoint, so its database
#: grows with the square of the steps; it runs on as many of the scenario's
#: events as keep that under this size (the table says how many).
LANGGRAPH_MAX_BYTES = 256 * 1024 * 1024
EVENT_BYTES = 500


def langgraph_events(scenario: Scenario) -> int:
    steps = int((2 * LANGGRAPH_MAX_BYTES / (EVENT_BYTES * scenario.batch)) ** 0.5)
    return min(scenario.count, steps * scenario.batch)


@dataclass
class Scenario:
    key: str
    title: str
    kind: str  # append | keyed | threads | async | replay | heads | sessionstore
    count: int
    batch: int = 1
    sessions: int = 1
    sync: str = "normal"
    threads: int = 0
    decode: bool = False
    #: Replay through ``read_json``: each event's stored JSON bytes, not decoded.
    json: bool = False
    #: Replay holding a live heap (the workload's events, and every replayed
    #: event kept), with the garbage collector on ("gc") or off ("no-gc").
    heap: str = ""
    systems: tuple[str, ...] = ()
    unit: str = "events/s"


def scenarios(quick: bool) -> list[Scenario]:
    k = 1_000
    small, large = (2 * k, 10 * k) if quick else (10 * k, 100 * k)
    appenders = (*FLOORS, *AGENTLOG, *SCRIPTS, *PEERS)
    readers = (*FLOORS, *AGENTLOG, *SCRIPTS, "sqlite3-bytes", "openai-agents")
    return [
        Scenario(
            f"S1 {small // k}k",
            f"S1 append 1/call, {small // k}k",
            "append",
            small,
            systems=appenders,
        ),
        *(
            []
            if quick
            else [
                Scenario(
                    "S1 100k",
                    "S1 append 1/call, 100k",
                    "append",
                    large,
                    systems=(*FLOORS, *AGENTLOG),
                )
            ]
        ),
        Scenario(
            f"S1 full {small // k}k" if not quick else "S1 full 200",
            f"S1 append 1/call, synchronous=full, {small if not quick else 200:,}",
            "append",
            small if not quick else 200,
            sync="full",
            systems=(*FLOORS, *AGENTLOG),
        ),
        Scenario(
            f"S2 {large // k}k",
            f"S2 append 100/call, {large // k}k",
            "append",
            large,
            batch=100,
            systems=appenders,
        ),
        # S1 and S2 again, each append under a key of its own (idempotent):
        # the price of a key, beside the rows without.
        Scenario(
            f"S1 keyed {small // k}k",
            f"S1 append 1/call with a key, {small // k}k",
            "keyed",
            small,
            systems=AGENTLOG,
        ),
        Scenario(
            f"S2 keyed {large // k}k",
            f"S2 append 100/call with a key, {large // k}k",
            "keyed",
            large,
            batch=100,
            systems=AGENTLOG,
        ),
        Scenario(
            f"S3 {small // k}k",
            f"S3 replay {small // k}k to StoredEvent",
            "replay",
            small,
            systems=readers,
        ),
        Scenario(
            f"S3 {large // k}k",
            f"S3 replay {large // k}k to StoredEvent",
            "replay",
            large,
            systems=readers,
        ),
        *(
            Scenario(
                f"S3 json {n // k}k",
                f"S3 read_json {n // k}k to RawEvent",
                "replay",
                n,
                json=True,
                systems=(*FLOORS, *AGENTLOG, "sqlite3-bytes"),
            )
            for n in (small, large)
        ),
        Scenario(
            f"S3 {large // k}k dec",
            f"S3 replay {large // k}k, every payload read",
            "replay",
            large,
            decode=True,
            systems=(*FLOORS, *AGENTLOG),
        ),
        *(
            Scenario(
                f"S3 {large // k}k heap {heap}",
                f"S3 replay {large // k}k kept, live heap, {heap}",
                "replay",
                large,
                heap=heap,
                systems=AGENTLOG,
            )
            for heap in ("gc", "no-gc")
        ),
        Scenario(
            "S4 head()",
            f"S4 head() of {large // 100} sessions x 20 events",
            "heads",
            large // 100 * 20,
            batch=20,
            sessions=large // 100,
            systems=("raw-c", *AGENTLOG),
            unit="calls/s",
        ),
        Scenario(
            f"S6 {small // k}k",
            f"S6 SessionStore, 1 item/append, {small // k}k",
            "sessionstore",
            small,
            systems=AGENTLOG,
        ),
        Scenario(
            f"S6 {large // k}k",
            f"S6 SessionStore, 100 items/append, {large // k}k",
            "sessionstore",
            large,
            batch=100,
            systems=AGENTLOG,
        ),
        *(
            scenario
            for threads in (4, 8)
            for scenario in (
                # The same sessions from one thread: what the threads must beat.
                Scenario(
                    f"S5 1t-{threads}s {large // k}k",
                    f"S5 1 thread over {threads} sessions x 1/call, {large // k}k",
                    "append",
                    large,
                    sessions=threads,
                    systems=("raw-c", *AGENTLOG),
                ),
                Scenario(
                    f"S5 {threads}t {large // k}k",
                    f"S5 {threads} threads x 1 event/call, {large // k}k",
                    "threads",
                    large,
                    threads=threads,
                    systems=("raw-c", *AGENTLOG),
                ),
            )
        ),
        Scenario(
            f"S7 1 {small // k}k",
            f"S7 async, 1 coroutine x 1 event/call, {small // k}k",
            "async",
            small,
            threads=1,
            systems=AGENTLOG,
        ),
        Scenario(
            f"S7 64 {large // k}k",
            f"S7 async, 64 coroutines x 1 event/call, {large // k}k",
            "async",
            large,
            threads=64,
            systems=("raw-c", *AGENTLOG),
        ),
    ]


@dataclass
class Cell:
    system: str
    rates: list[float] = field(default_factory=list)
    db_bytes: int = 0
    peak_rss_kb: int = 0
    rss_growth_kb: int = 0
    count: int = 0
    note: str = ""
    list_seconds: list[float] = field(default_factory=list)
    extra: list[dict[str, float]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    if run.returncode != 0:
        raise RuntimeError(f"{spec['system']} {spec['kind']}: {run.stderr.strip()[-800:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def populate(scenario: Scenario, directory: Path, system: str) -> str:
    """A database holding the scenario's events, written by ``system`` (untimed)."""
    owner = "openai-agents" if system == "openai-agents" else "agentlog-python"
    if system == "raw-c-min" or system in systems.SCRIPTS:
        owner = "minimal"
    path = directory / f"{scenario.key.replace(' ', '_')}-{owner}.db"
    if owner == "minimal" and not path.exists():
        systems.populate_minimal(str(path), scenario.count)
    elif not path.exists():
        worker(
            {
                "system": owner,
                "kind": "append",
                "path": str(path),
                "count": scenario.count,
                "sessions": scenario.sessions,
                "batch": scenario.batch if scenario.kind == "heads" else 1000,
                "sync": "normal",
            }
        )
    return str(path)


def cpu_model() -> str:
    """The CPU's model name, as the OS reports it (the machine type if it does not)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        found = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True
        )
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """The OS's load averages over 1, 5 and 15 minutes (None where it has none)."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def machine_info() -> dict[str, Any]:
    """What a run ran on, for the JSON: a figure means little without it."""
    from agentlog.engine import engine_class

    return {
        "cpu": cpu_model(),
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        # Each engine's SQLite (the raw-C baseline is built on the C engine's).
        "sqlite": {
            name: engine_class(name).sqlite_info()["sqlite_version"] for name in available_engines()
        },
        # On a shared machine, how busy it was (1, 5, 15 min) as the run began.
        "load_average": load_average(),
    }


def available_engines() -> list[str]:
    from agentlog.engine import AVAILABLE_ENGINES

    return list(AVAILABLE_ENGINES)


def run_scenario(scenario: Scenario, rounds: int, directory: Path) -> list[Cell]:
    cells = []
    for system in scenario.systems:
        cell = Cell(system)
        cells.append(cell)
        needs = PEERS.get(system) or systems.SCRIPTS.get(system)
        if needs is not None and not systems.installed(needs):
            cell.note = "not installed"
            continue
        if (
            system.startswith("agentlog-")
            and system.removeprefix("agentlog-") not in available_engines()
        ):
            cell.note = "engine not built"
            continue
        for round_no in range(rounds):
            spec = asdict(scenario) | {"system": system}
            if system == "langgraph":
                spec["count"] = langgraph_events(scenario)
                if spec["count"] < scenario.count:
                    cell.note = f"first {spec['count']:,} events"
            if scenario.kind in ("replay", "heads"):
                spec["path"] = populate(scenario, directory, system)
            else:
                spec["path"] = str(
                    directory / f"{scenario.key.replace(' ', '_')}-{system}-{round_no}.db"
                )
            try:
                result = worker(spec)
            except RuntimeError as exc:
                cell.note = f"failed: {exc}"
                break
            cell.rates.append(result["count"] / result["seconds"])
            cell.count = result["count"]
            cell.db_bytes = result["db_bytes"]
            cell.peak_rss_kb = max(cell.peak_rss_kb, result["peak_rss_kb"])
            cell.rss_growth_kb = max(cell.rss_growth_kb, result["rss_growth_kb"])
            if result.get("list_seconds") is not None:
                cell.list_seconds.append(result["list_seconds"])
            if "sessionstore" in result:
                cell.extra.append(result["sessionstore"])
    return cells


def table(results: list[tuple[Scenario, list[Cell]]], s1_raw: float | None) -> str:
    lines = [
        f"{'scenario':<46}{'system':<17}{'rate':>13}{'vs raw C':>10}{'vs min':>8}"
        f"{'B/event':>9}{'peak MB':>9}",
        "-" * 112,
    ]
    for scenario, cells in results:
        raw = next((c.rate for c in cells if c.system == "raw-c" and c.rates), None)
        floor = next((c.rate for c in cells if c.system == "raw-c-min" and c.rates), None)
        if scenario.kind in ("threads", "async"):
            raw = s1_raw  # concurrent writers are compared with raw C's S1
        for n, cell in enumerate(cells):
            title = scenario.title if n == 0 else ""
            if not cell.rates:
                lines.append(f"{title:<46}{cell.system:<17}{cell.note:>13}")
                continue
            ratio = f"{cell.rate / raw:.2f}" if raw and scenario.kind != "sessionstore" else "-"
            to_floor = f"{cell.rate / floor:.2f}" if floor else "-"
            per_event = (
                f"{cell.db_bytes / cell.count:.0f}"
                if scenario.kind in ("append", "threads", "async", "sessionstore") and cell.count
                else ""
            )
            rate = f"{cell.rate:,.0f}"
            note = cell.note
            if scenario.kind == "replay" and cell.system not in FLOORS:
                note = f"RSS +{cell.rss_growth_kb / 1024:.0f} MB while replaying {note}"
            if cell.list_seconds:
                note = f"list() of all: {statistics.median(cell.list_seconds) * 1000:.2f} ms {note}"
            if cell.extra:
                med = {k: statistics.median(x[k] for x in cell.extra) for k in cell.extra[0]}
                note = (
                    f"load {med['load']:,.0f}/s, compact {med['compact_ms']:.1f} ms,"
                    f" load after snapshot {med['load_after_snapshot']:,.0f}/s {note}"
                )
            lines.append(
                f"{title:<46}{cell.system:<17}{rate:>13}{ratio:>10}{to_floor:>8}{per_event:>9}"
                f"{cell.peak_rss_kb / 1024:>9.0f}  {note}".rstrip()
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, one round (a smoke test)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per measurement (median)")
    parser.add_argument("--only", help="comma-separated scenario prefixes, e.g. S1,S3")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--adapters",
        action="store_true",
        help="also the framework adapters beside the frameworks' own stores "
        "(benchmarks.openai_agents, benchmarks.langgraph, benchmarks.google_adk; "
        "needs the bench extra)",
    )
    args = parser.parse_args(argv)
    rounds = 1 if args.quick and args.rounds == 3 else max(1, args.rounds)

    from agentlog import engine_info
    from agentlog.terminal import progress_bar, screen_for

    info = engine_info()
    ran_on = machine_info()
    chosen = [
        s
        for s in scenarios(args.quick)
        if not args.only or any(s.key.startswith(p) for p in args.only.split(","))
    ]
    machine = f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs"
    print(
        f"agentlog benchmark: engines {info['available']},"
        f" SQLite {info['sqlite_version']} (default engine), {machine},"
        f" median of {rounds} round(s)\n",
        flush=True,
    )
    systems.baseline_binary()
    results: list[tuple[Scenario, list[Cell]]] = []
    # A progress bar on a terminal (with the cli extra), a line per scenario otherwise.
    advance = progress_bar(sys.stderr, "scenarios") if screen_for(sys.stderr).colour else None
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-") as tmp:
        for done, scenario in enumerate(chosen, 1):
            if advance is None:
                print(f"  running {scenario.title} …", file=sys.stderr, flush=True)
            results.append((scenario, run_scenario(scenario, rounds, Path(tmp))))
            if advance is not None:
                advance(done, len(chosen))
    s1_raw = next(
        (
            c.rate
            for s, cells in results
            if s.kind == "append" and s.batch == 1 and s.sync == "normal" and s.sessions == 1
            for c in cells
            if c.system == "raw-c" and c.rates
        ),
        None,
    )
    print(table(results, s1_raw))
    adapters: dict[str, list[dict[str, Any]]] = {}
    if args.adapters:
        from benchmarks import google_adk, langgraph, openai_agents

        for name, module, peer in (
            ("openai-agents", openai_agents, "agents"),
            ("langgraph", langgraph, "langgraph"),
            ("google-adk", google_adk, "google.adk"),
        ):
            if not systems.installed(peer):
                print(f'\n{name}: not installed (pip install -e ".[bench]")')
                continue
            print(f"  running the {name} adapter …", file=sys.stderr, flush=True)
            adapters[name] = module.rows(args.quick, rounds)
            print(f"\n{name} adapter beside the framework's own SQLite store:")
            print(module.table(adapters[name]))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "engine_info": {k: v for k, v in info.items() if k != "compile_options"},
                    "machine": ran_on | {"load_average_end": load_average()},
                    "quick": args.quick,
                    "rounds": rounds,
                    "results": [
                        {
                            "scenario": asdict(s),
                            "cells": [asdict(c) | {"rate": c.rate} for c in cells],
                        }
                        for s, cells in results
                    ],
                    "adapters": adapters,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
