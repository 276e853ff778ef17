"""The viewer's figures: ``agentlog serve`` on a big SQLite file.

    python -m benchmarks.serve [--sessions 1000000] [--events 100000] [--clients 100]
                               [--without-index]

Builds (once, kept in the temp directory's agentlog-bench-serve/) a file
of ``--sessions`` one-event sessions and one session of ``--events``
events, serves it on a loopback port, and measures over HTTP: the first
and the second page of sessions, and the filter (one that matches, one that
matches nothing); the big session's first screen (its last page of
events); append → the event read off the live tail (SSE), p50/p99, from
this process and from another; and the server's RSS with ``--clients``
tails held open. ``--without-index`` lists a copy of the file without the
activity index first (the figures before it). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import agentlog
from agentlog.engine.schema import SCHEMA_VERSION

#: Built once and kept between runs (a million sessions take a while to write).
CACHE = Path(tempfile.gettempdir()) / "agentlog-bench-serve"


def build(path: Path, sessions: int, events: int) -> None:
    """The file, once: the sessions written 10,000 to a transaction through
    the writer port (the async layer's group commit), so each group shares
    one mtime and the listing's pages are cut inside ties."""
    if path.exists():
        return
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    with agentlog.SqliteCheckpointer(tmp, synchronous="normal") as log:
        port = log.writer_port()
        event = [{"type": "user", "content": "hello"}]
        for start in range(0, sessions, 10_000):
            names = range(start, min(sessions, start + 10_000))
            port.append_prepared([port.prepare_append(f"s{n:07d}", event, 0) for n in names])
        batch = [{"type": "assistant", "content": "x" * 200}] * 1000
        for _ in range(events // 1000):
            log.append("big", batch)
    tmp.rename(path)


def without_index(path: Path) -> Path:
    """A copy of the file without the activity index (the figures before it)."""
    copy = path.with_name(path.stem + "-noindex.db")
    if not copy.exists():
        shutil.copyfile(path, copy)
        with sqlite3.connect(copy) as conn:
            conn.execute("DROP INDEX sessions_by_activity")
        conn.close()
    return copy


def _timed(url: str, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=120) as reply:
            reply.read()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _latencies(base: str, path: Path, other: bool, n: int = 50) -> list[float]:
    """Append → the event read off a tail, n times (ms)."""
    url = f"{base}/api/sessions/live/tail"
    seen: dict[int, float] = {}
    ready = threading.Event()

    def read() -> None:
        with urllib.request.urlopen(url, timeout=120) as reply:
            ready.set()
            for raw in reply:
                if raw.startswith(b"id: "):
                    seen[int(raw[4:])] = time.perf_counter()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(30)
    time.sleep(0.5)
    sent: dict[int, float] = {}
    if other:
        script = (
            "import sys, time, agentlog\n"
            "log = agentlog.SqliteCheckpointer(sys.argv[1])\n"
            "for _ in range(int(sys.argv[2])):\n"
            "    t = time.perf_counter()\n"
            "    h = log.append('live', [{'type': 'user', 'content': 'x'}])\n"
            "    print(h, t, flush=True); time.sleep(0.05)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script, str(path), str(n)], capture_output=True, text=True
        ).stdout  # perf_counter is CLOCK_MONOTONIC: comparable across processes
        sent = {int(h): float(t) for h, t in (line.split() for line in out.splitlines())}
    else:
        with agentlog.SqliteCheckpointer(path) as log:
            for _ in range(n):
                t = time.perf_counter()
                sent[log.append("live", [{"type": "user", "content": "x"}])] = t
                time.sleep(0.05)
    deadline = time.monotonic() + 10
    while len([h for h in sent if h in seen]) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [(seen[h] - t) * 1000 for h, t in sent.items() if h in seen]


def _serve(path: Path) -> tuple[subprocess.Popen[str], str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen(
        [sys.executable, "-m", "agentlog", "serve", str(path), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    server.stderr.readline()
    return server, f"http://127.0.0.1:{port}"


def _listing(base: str) -> dict[str, float]:
    """The sessions page's requests: the first page, the one after it, and
    the filter (one that matches, one that matches nothing: the bounded scan)."""
    first = f"{base}/api/sessions?limit=50"
    with urllib.request.urlopen(first, timeout=120) as reply:
        cursor = json.loads(reply.read())["next_cursor"]
    return {
        "first_page_of_sessions_ms": round(_timed(first), 1),
        "second_page_of_sessions_ms": round(_timed(f"{first}&cursor={cursor}"), 1),
        "filter_matching_ms": round(_timed(f"{base}/api/sessions?limit=50&q=s09"), 1),
        "filter_matching_nothing_ms": round(_timed(f"{base}/api/sessions?limit=50&q=zzz"), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument(
        "--without-index", action="store_true", help="also list a copy without the activity index"
    )
    args = parser.parse_args()
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"serve-v{SCHEMA_VERSION}-{args.sessions}-{args.events}.db"
    started = time.perf_counter()
    build(path, args.sessions, args.events)
    built = time.perf_counter() - started
    result: dict[str, Any] = {"sessions": args.sessions, "events": args.events}
    result["build_s"] = round(built, 1)
    if args.without_index:
        server, base = _serve(without_index(path))
        try:
            result["without_index"] = _listing(base)
        finally:
            server.terminate()
            server.wait(30)
    server, base = _serve(path)
    try:
        result.update(_listing(base))
        result["big_session_first_screen_ms"] = round(
            _timed(f"{base}/api/sessions/big/events?limit=200"), 1
        )
        for name, other in (("same_process", False), ("other_process", True)):
            lat = sorted(_latencies(base, path, other))
            result[f"append_to_sse_{name}_ms"] = {
                "p50": round(statistics.median(lat), 1),
                "p99": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1),
                "n": len(lat),
            }
        before = _rss(server.pid)
        held = []
        for _ in range(args.clients):
            held.append(urllib.request.urlopen(f"{base}/api/sessions/big/tail?after=100000"))
        time.sleep(2)
        during = _rss(server.pid)
        time.sleep(5)
        result["rss_mb"] = {
            "before_clients": round(before / 2**20, 1),
            f"with_{args.clients}_tails": round(during / 2**20, 1),
            "5s_later": round(_rss(server.pid) / 2**20, 1),
        }
        for reply in held:
            reply.close()
        print(json.dumps(result, indent=2))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
