"""One measurement in a fresh process: ``python -m benchmarks.worker SPEC_JSON``.

Prints ``{"seconds", "count", "db_bytes", "peak_rss_kb", "rss_growth_kb"}``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import systems
from benchmarks.workload import events


def rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def db_bytes(path: str) -> int:
    return sum(
        os.path.getsize(path + suffix) for suffix in ("", "-wal") if os.path.exists(path + suffix)
    )


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    system, kind, path = spec["system"], spec["kind"], spec["path"]
    engine = system.removeprefix("agentlog-")
    run: Callable[[], tuple[float, int]]
    if kind == "append":
        data = events(spec["count"])
        args = (path, data, spec["sessions"], spec["batch"], spec["sync"])
        run = {
            "raw-c": lambda: systems.raw_c_append(*args),
            "agentlog-c": lambda: systems.agentlog_append("c", *args),
            "agentlog-python": lambda: systems.agentlog_append("python", *args),
            "openai-agents": lambda: systems.openai_append(*args),
            "langgraph": lambda: systems.langgraph_append(*args),
            "eventsourcing": lambda: systems.eventsourcing_append(*args),
        }[system]
    elif kind == "threads":
        data = events(spec["count"])
        run = lambda: systems.agentlog_threads(engine, path, data, spec["threads"], spec["sync"])  # noqa: E731
    elif kind == "replay":
        if system == "raw-c":
            run = lambda: systems.raw_c(path, "-", "scan")  # noqa: E731
        elif system == "openai-agents":
            run = lambda: systems.openai_replay(path, spec["count"], spec["decode"])  # noqa: E731
        else:
            run = lambda: systems.agentlog_replay(engine, path, spec["count"], spec["decode"])  # noqa: E731
    elif kind == "sessionstore":
        data = events(spec["count"])
        before = rss_kb()
        figures = systems.sessionstore_run(engine, path, data, spec["batch"])
        return {
            "seconds": spec["count"] / figures["append"],
            "count": spec["count"],
            "db_bytes": db_bytes(path),
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "rss_growth_kb": 0,
            "list_seconds": None,
            "sessionstore": figures,
            "rss_before_kb": before,
        }
    elif kind == "heads":
        if system == "raw-c":
            heads = lambda: systems.raw_c_with_list(path, "-", "heads")  # noqa: E731
        else:
            heads = lambda: systems.agentlog_heads(engine, path)  # noqa: E731
    else:
        raise ValueError(kind)
    before = rss_kb()
    list_seconds = None
    if kind == "heads":
        seconds, count, list_seconds = heads()
    else:
        seconds, count = run()
    who = resource.RUSAGE_CHILDREN if system == "raw-c" else resource.RUSAGE_SELF
    peak = resource.getrusage(who).ru_maxrss
    return {
        "seconds": seconds,
        "count": count,
        "db_bytes": db_bytes(path),
        "peak_rss_kb": peak,
        "rss_growth_kb": max(0, peak - before) if system != "raw-c" else 0,
        "list_seconds": list_seconds,
    }


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
