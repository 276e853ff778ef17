"""What a one-event append's commit costs under three table layouts, before one is built.

    python -m benchmarks.layout [--rounds 5] [--appends 20000] [--sessions 100] [--json FILE]

A model for choosing the layout of a global feed (every change in a store
in one order), not agentlog's engine: each layout is the bare statements of
a one-event append, on stdlib ``sqlite3`` in WAL mode with
``synchronous=NORMAL``, ~500-byte payloads, one transaction per append.

- ``sessions row``: the layout of this version. The session's row is read
  for its head and rewritten; the event's key is ``(session << 32) | seq``.
- ``+ feed table``: the same, and one row more per append in a table of
  changes keyed by position, what a feed beside today's layout would add.
- ``by position``: events keyed by a global position, with a unique index
  on ``(session, seq)`` that gives the head (its largest seq). The
  session's row is not written. The position is then the feed's order.

Each round times ``--appends`` appends on a new file of each layout in
turn, once to one session and once round-robin over ``--sessions``. The
table shows each layout's median µs per append and the median of its
per-round ratios to ``sessions row`` (above 1: faster), measured side by
side in the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.workload import events, median_ratio, rotated

_TABLES = (
    "CREATE TABLE sessions (sid INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
    " head INTEGER NOT NULL, mtime REAL NOT NULL)",
    "CREATE TABLE events (id INTEGER PRIMARY KEY, ts REAL, type TEXT, data BLOB)",
    "CREATE TABLE feed (position INTEGER PRIMARY KEY, sid INTEGER, kind INTEGER,"
    " first INTEGER, last INTEGER)",
    "CREATE TABLE by_position (position INTEGER PRIMARY KEY, sid INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, ts REAL, type TEXT, data BLOB)",
    "CREATE UNIQUE INDEX by_position_seq ON by_position (sid, seq)",
)

# An append's statements in one layout; it returns the new head.
Append = Callable[[sqlite3.Connection, int, str, bytes, float], int]


def _sessions_row(db: sqlite3.Connection, sid: int, kind: str, data: bytes, ts: float) -> int:
    head = int(db.execute("SELECT head FROM sessions WHERE sid = ?", (sid,)).fetchone()[0]) + 1
    db.execute("UPDATE sessions SET head = ?, mtime = ? WHERE sid = ?", (head, ts, sid))
    db.execute("INSERT INTO events VALUES (?, ?, ?, ?)", ((sid << 32) | head, ts, kind, data))
    return head


def _with_feed(db: sqlite3.Connection, sid: int, kind: str, data: bytes, ts: float) -> int:
    head = _sessions_row(db, sid, kind, data, ts)
    db.execute("INSERT INTO feed (sid, kind, first, last) VALUES (?, 1, ?, ?)", (sid, head, head))
    return head


def _by_position(db: sqlite3.Connection, sid: int, kind: str, data: bytes, ts: float) -> int:
    last = db.execute("SELECT max(seq) FROM by_position WHERE sid = ?", (sid,)).fetchone()[0]
    head = (last or 0) + 1
    db.execute(
        "INSERT INTO by_position (sid, seq, ts, type, data) VALUES (?, ?, ?, ?, ?)",
        (sid, head, ts, kind, data),
    )
    return head


LAYOUTS: dict[str, Append] = {
    "sessions row": _sessions_row,
    "+ feed table": _with_feed,
    "by position": _by_position,
}
BASE = "sessions row"


def time_layout(directory: Path, append: Append, appends: int, sessions: int) -> float:
    """µs per append of ``appends`` one-event appends on a new file in the
    layout of ``append``, round-robin over ``sessions`` sessions."""
    payloads = [(str(e["type"]), json.dumps(e, separators=(",", ":")).encode()) for e in events(64)]
    path = Path(tempfile.mkdtemp(dir=directory)) / "layout.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        for statement in _TABLES:
            db.execute(statement)
        for sid in range(sessions):
            db.execute("INSERT INTO sessions VALUES (?, ?, 0, 0)", (sid, f"s{sid}"))
        head = 0
        start = time.perf_counter()
        for n in range(appends):
            kind, data = payloads[n % len(payloads)]
            db.execute("BEGIN IMMEDIATE")
            head = append(db, n % sessions, kind, data, time.time())
            db.execute("COMMIT")
        elapsed = time.perf_counter() - start
        # The last append went to session (appends - 1) % sessions, its n-th.
        if head != (appends - 1) // sessions + 1:
            raise RuntimeError(f"{append.__name__} ended at head {head}: the layout is wrong")
        return elapsed / appends * 1e6
    finally:
        db.close()


def run(rounds: int, appends: int, sessions: int, directory: Path) -> list[dict[str, object]]:
    """Each (workload, layout)'s median µs per append and median ratio to ``BASE``."""
    rows: list[dict[str, object]] = []
    for label, spread in (("one session", 1), (f"spread over {sessions}", sessions)):
        times: dict[str, list[float]] = {name: [] for name in LAYOUTS}
        for round_ in range(rounds):
            for name in rotated(list(LAYOUTS), round_):
                times[name].append(time_layout(directory, LAYOUTS[name], appends, spread))
        for name, measured in times.items():
            rows.append(
                {
                    "workload": label,
                    "layout": name,
                    "us_per_append": statistics.median(measured),
                    "ratio": median_ratio(times[BASE], measured),  # above 1: faster
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layout", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--appends", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    args = parser.parse_args(argv)
    if min(args.rounds, args.appends, args.sessions) < 1:
        parser.error("--rounds, --appends and --sessions must be at least 1")
    with tempfile.TemporaryDirectory() as directory:
        rows = run(args.rounds, args.appends, args.sessions, Path(directory))
    print(f"{'workload':<20} {'layout':<14} {'µs/append':>10} {'vs sessions row':>16}")
    for row in rows:
        print(
            f"{row['workload']!s:<20} {row['layout']!s:<14} "
            f"{row['us_per_append']:>10.1f} {row['ratio']:>16.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + os.linesep)


if __name__ == "__main__":
    main()
