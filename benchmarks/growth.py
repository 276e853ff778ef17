"""How the cost of the hot calls grows with the file: one SQLite file filled in steps.

    python -m benchmarks.growth [--sizes 10000,100000,1000000] [--sessions 1000000]
                                [--engine c] [--probes 200] [--json FILE] [--plot FILE]

One file is filled with the benchmark's ~500-byte events, 1,000 per session
(100 per append), up to each size of ``--sizes`` in turn; at each size it
times, medians of ``--probes`` calls: a one-event append (to a session of its
own, so the filled ones keep their shape), a read of a session's last 20
events, ``head`` of ten sessions spread across the file (a working set that
does not grow with it), ``head`` of a session not asked before (its pages
cold in SQLite's cache), the first ``list_page`` of 50, and the file's
bytes per event (file + WAL). ``--sessions N`` then fills another file with N
sessions of one event each and times the same calls there (``list_page``
over N sessions, and the first page a new read-only reader asks for).
``--plot`` draws the figures against the size as a PNG (matplotlib, in
the ``bench`` extra). Each figure is one process's, taken as the file
grows: a shared machine's noise shows as a bump, not a trend.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentlog import SqliteCheckpointer
from benchmarks.workload import events

PER_SESSION = 1_000
BATCH = 100
# The sessions ``head`` is timed on at every size: a fixed working set, so
# the figure measures the file's size and not how many sessions are asked.
WORKING_SET = 10
FIGURES = ("append_us", "read_last_20_us", "head_us", "head_first_us", "list_page_us")


def _median_us(call: Callable[[int], object], probes: int) -> float:
    times = []
    for i in range(probes):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _bytes(path: str) -> int:
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))


def probe(
    log: SqliteCheckpointer, path: str, total: int, sids: list[str], probes: int, tag: str
) -> dict[str, Any]:
    """The figures of a file holding ``total`` events in sessions ``sids``."""
    one = events(1)[0]
    probe_sid = f"probe-{tag}"
    row: dict[str, Any] = {"events": total, "sessions": len(sids)}
    row["bytes_per_event"] = _bytes(path) / total
    row["append_us"] = _median_us(lambda i: log.append(probe_sid, [one]), probes)
    mid = sids[len(sids) // 2]
    head = log.head(mid)
    row["read_last_20_us"] = _median_us(
        lambda i: list(log.read(mid, max(0, head - 20), 20)), probes
    )
    spread = [sids[k * len(sids) // WORKING_SET] for k in range(min(WORKING_SET, len(sids)))]
    row["head_us"] = _median_us(lambda i: log.head(spread[i % len(spread)]), probes)
    # Each call asks a session not asked before (as far as there are any), so
    # its pages are cold in SQLite's cache: the cost of a large working set.
    row["head_first_us"] = _median_us(lambda i: log.head(sids[(i * 7919) % len(sids)]), probes)
    row["list_page_us"] = _median_us(lambda i: log.list_page(50), probes)
    log.delete(probe_sid)  # the next size starts from the filled sessions only
    return row


def fill_events(
    path: str, sizes: list[int], engine: str | None, probes: int
) -> list[dict[str, Any]]:
    """One file filled to each of ``sizes`` events in turn, probed at each."""
    data = events(PER_SESSION)
    out: list[dict[str, Any]] = []
    sids: list[str] = []
    total = 0
    with SqliteCheckpointer(path, engine=engine) as log:
        for size in sorted(sizes):
            while total < size:
                sid = f"s{len(sids):08d}"
                sids.append(sid)
                count = min(PER_SESSION, size - total)
                for at in range(0, count, BATCH):
                    log.append(sid, data[at : min(at + BATCH, count)])
                total += count
            out.append(probe(log, path, total, sids, probes, str(size)))
            print(json.dumps(out[-1]), flush=True)
    return out


def fill_sessions(path: str, sessions: int, engine: str | None, probes: int) -> dict[str, Any]:
    """A file of ``sessions`` sessions of one event each, probed."""
    one = events(1)
    sids = [f"s{i:08d}" for i in range(sessions)]
    with SqliteCheckpointer(path, engine=engine) as log:
        for sid in sids:
            log.append(sid, one)
        row = probe(log, path, sessions, sids, probes, "sessions")
    # The first page a new reader asks for (what a viewer's first request
    # costs): its pages of the index are not yet in its cache.
    with SqliteCheckpointer(path, engine=engine, read_only=True) as reader:
        start = time.perf_counter()
        reader.list_page(50)
        row["first_list_page_us"] = (time.perf_counter() - start) * 1e6
    print(json.dumps(row), flush=True)
    return row


def plot(rows: list[dict[str, Any]], out: str) -> None:
    """The figures against the number of events, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [*FIGURES, "bytes_per_event"]
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.0))
    xs = [r["events"] for r in rows]
    for ax, name in zip(axes, names, strict=True):
        ys = [r[name] for r in rows]
        ax.plot(xs, ys, marker="o")
        ax.set_xscale("log")
        ax.set_ylim(0, max(ys) * 1.4)
        ax.set_title(name.replace("_us", " (µs)").replace("_", " "), fontsize=9)
        ax.set_xlabel("events in the file", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.growth", description=__doc__)
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="event counts, comma-separated"
    )
    parser.add_argument(
        "--sessions", type=int, default=0, help="also a file of N one-event sessions"
    )
    parser.add_argument("--engine", default=None, help="c or python (the default engine)")
    parser.add_argument("--probes", type=int, default=200, help="calls per figure (median)")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    parser.add_argument("--plot", metavar="FILE", help="draw the rows as a PNG")
    parser.add_argument("--dir", help="where the files go (a temporary directory)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="agentlog-growth-", dir=args.dir) as tmp:
        rows = fill_events(os.path.join(tmp, "events.db"), sizes, args.engine, args.probes)
        result: dict[str, Any] = {"events": rows}
        if args.sessions:
            result["sessions"] = fill_sessions(
                os.path.join(tmp, "sessions.db"), args.sessions, args.engine, args.probes
            )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
