"""One measurement in a fresh process: ``python -m benchmarks.worker SPEC_JSON``.

Prints ``{"seconds", "count", "db_bytes", "peak_rss_kb", "rss_growth_kb"}``.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import systems
from benchmarks.workload import events


def peak_rss_kb(who: int = resource.RUSAGE_SELF) -> int:
    """Peak resident set size in KiB: ``ru_maxrss`` is bytes on macOS, KiB on Linux."""
    peak = resource.getrusage(who).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


class _MachTaskBasicInfo(ctypes.Structure):
    # <mach/task_info.h> struct mach_task_basic_info (declared under #pragma pack(4))
    _pack_ = 4
    _fields_ = [
        ("virtual_size", ctypes.c_uint64),
        ("resident_size", ctypes.c_uint64),
        ("resident_size_max", ctypes.c_uint64),
        ("user_time", ctypes.c_int32 * 2),
        ("system_time", ctypes.c_int32 * 2),
        ("policy", ctypes.c_int32),
        ("suspend_count", ctypes.c_int32),
    ]


def _mach_rss_bytes() -> int:
    """The current resident size on macOS, from ``task_info(MACH_TASK_BASIC_INFO)``."""
    libc = ctypes.CDLL(None)
    task_info = libc.task_info
    task_info.argtypes = [
        ctypes.c_uint32,  # task_name_t
        ctypes.c_int32,  # task_flavor_t
        ctypes.POINTER(_MachTaskBasicInfo),
        ctypes.POINTER(ctypes.c_uint32),  # mach_msg_type_number_t *, in natural_t units
    ]
    task_info.restype = ctypes.c_int32  # kern_return_t
    info = _MachTaskBasicInfo()
    count = ctypes.c_uint32(ctypes.sizeof(info) // 4)
    task = ctypes.c_uint32.in_dll(libc, "mach_task_self_").value  # mach_task_self()
    mach_task_basic_info = 20  # MACH_TASK_BASIC_INFO
    status = task_info(task, mach_task_basic_info, ctypes.byref(info), ctypes.byref(count))
    if status != 0:
        raise OSError(f"task_info failed ({status})")
    return int(info.resident_size)


def rss_kb() -> int:
    """The current resident set size in KiB (Linux: /proc/self/statm; macOS: task_info)."""
    if sys.platform == "darwin":
        return _mach_rss_bytes() // 1024
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
            "raw-c-min": lambda: systems.raw_c_min_append(*args),
            "apsw-orjson": lambda: systems.script_append("apsw-orjson", *args),
            "sqlite3-msgspec": lambda: systems.script_append("sqlite3-msgspec", *args),
            "agentlog-c": lambda: systems.agentlog_append("c", *args),
            "agentlog-python": lambda: systems.agentlog_append("python", *args),
            "openai-agents": lambda: systems.openai_append(*args),
            "langgraph": lambda: systems.langgraph_append(*args),
            "eventsourcing": lambda: systems.eventsourcing_append(*args),
        }[system]
    elif kind == "keyed":
        data = events(spec["count"])
        args = (path, data, spec["sessions"], spec["batch"], spec["sync"])
        run = lambda: systems.agentlog_append(engine, *args, keyed=True)  # noqa: E731
    elif kind in ("async", "threads") and system == "raw-c":
        data = events(spec["count"])
        run = lambda: systems.raw_c_groups(path, data, spec["threads"], spec["sync"])  # noqa: E731
    elif kind == "async":
        data = events(spec["count"])
        run = lambda: systems.agentlog_async(engine, path, data, spec["threads"], spec["sync"])  # noqa: E731
    elif kind == "threads":
        data = events(spec["count"])
        run = lambda: systems.agentlog_threads(engine, path, data, spec["threads"], spec["sync"])  # noqa: E731
    elif kind == "replay":
        if system == "raw-c":
            run = lambda: systems.raw_c(path, "-", "scan")  # noqa: E731
        elif system == "raw-c-min":
            run = lambda: systems.raw_c(path, "-", "min-scan")  # noqa: E731
        elif system in systems.SCRIPTS:
            run = lambda: systems.script_replay(system, path, spec["count"], spec["decode"])  # noqa: E731
        elif system == "openai-agents":
            run = lambda: systems.openai_replay(path, spec["count"], spec["decode"])  # noqa: E731
        elif spec["json"]:
            run = lambda: systems.agentlog_replay_json(engine, path, spec["count"])  # noqa: E731
        elif spec["heap"]:
            run = lambda: systems.agentlog_replay_on_heap(engine, path, spec["count"], spec["heap"])  # noqa: E731
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
            "peak_rss_kb": peak_rss_kb(),
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
    child = system.startswith("raw-c")
    who = resource.RUSAGE_CHILDREN if child else resource.RUSAGE_SELF
    peak = peak_rss_kb(who)
    return {
        "seconds": seconds,
        "count": count,
        "db_bytes": db_bytes(path),
        "peak_rss_kb": peak,
        "rss_growth_kb": max(0, peak - before) if not child else 0,
        "list_seconds": list_seconds,
    }


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
