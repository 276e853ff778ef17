"""What listing by activity costs an append: the same appends on files that differ in one index.

    python -m benchmarks.activity [--rounds 7] [--appends 5000] [--sessions 10000]
                                  [--engine c] [--json FILE]

Three files of ``--sessions`` sessions each, made by this version and then
changed to the form under test:

- ``none``: no index on activity at all (what schema step 10 had);
- ``mtime``: step 12's ``sessions_by_activity`` on ``(tenant, mtime, name)``,
  moved by every append;
- ``second``: this version's schema (step 13), the activity second kept by
  a trigger and indexed, rewritten only when a session enters a new second.

Each round times ``--appends`` one-event appends on each file in turn (the
order rotates between rounds), once to one session and once spread over
every session; the table shows each form's median rate over the rounds
and the median of its per-round ratios to ``none`` (the cost of the index),
measured side by side in the same round. ``list_page``'s first
page is timed on each file too, the reason the index exists.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentlog import SqliteCheckpointer
from benchmarks.workload import events, median_ratio, rotated

FORMS = ("none", "mtime", "second")
LABELS = ("one session", "spread")

# The statements that turn a file of this version into each form.
_UNDO_SECOND = (
    "DROP INDEX sessions_by_active_second",
    "DROP TRIGGER sessions_active_on_insert",
    "DROP TRIGGER sessions_active_on_update",
)
_CHANGES = {
    "none": _UNDO_SECOND,
    "mtime": (*_UNDO_SECOND, "CREATE INDEX sessions_by_activity ON sessions (tenant, mtime, name)"),
    "second": (),
}


def make_file(path: Path, form: str, sessions: int, engine: str) -> None:
    """A file of ``sessions`` one-event sessions, in ``form``."""
    one = events(1)[0]
    with SqliteCheckpointer(path, engine=engine) as log:
        for n in range(sessions):
            log.append(f"s{n:07d}", [one])
    conn = sqlite3.connect(path)
    try:
        for statement in _CHANGES[form]:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def time_appends(path: Path, engine: str, appends: int, spread: int) -> float:
    """One-event appends per second: ``appends`` of them, to one session
    (``spread`` 1) or round-robin over the first ``spread`` sessions."""
    one = events(1)[0]
    names = [f"s{n:07d}" for n in range(spread)]
    with SqliteCheckpointer(path, engine=engine) as log:
        start = time.perf_counter()
        for n in range(appends):
            log.append(names[n % spread], [one])
        return appends / (time.perf_counter() - start)


def time_first_page(path: Path, engine: str) -> float:
    """Microseconds for the first ``list_page`` of 50, median of 20."""
    with SqliteCheckpointer(path, engine=engine, read_only=True) as log:
        times = []
        for _ in range(20):
            start = time.perf_counter()
            log.list_page(50)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.activity", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--engine", default="c")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.rounds < 5:
        parser.error("--rounds must be at least 5 (a median of fewer says little here)")
    results: dict[str, Any] = {"forms": {}}
    with tempfile.TemporaryDirectory(prefix="agentlog-activity-") as tmp:
        files = {form: Path(tmp) / f"{form}.db" for form in FORMS}
        for form, path in files.items():
            make_file(path, form, args.sessions, args.engine)
        rates: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds):
            for form in rotated(FORMS, round_):
                for label, spread in zip(LABELS, (1, args.sessions), strict=True):
                    rate = time_appends(files[form], args.engine, args.appends, spread)
                    rates.setdefault((form, label), []).append(rate)
        for form in FORMS:
            row: dict[str, float] = {}
            for label in LABELS:
                row[label] = statistics.median(rates[form, label])
                row[f"{label} ratio"] = median_ratio(rates[form, label], rates["none", label])
            row["first_page_us"] = time_first_page(files[form], args.engine)
            results["forms"][form] = row
    print(
        f"one-event appends, {args.engine} engine, {args.sessions:,} sessions,"
        f" medians of {args.rounds} rounds of {args.appends:,}"
    )
    header = f"{'form':<8}{'one session/s':>15}{'ratio':>8}{'spread/s':>12}{'ratio':>8}"
    print(header + f"{'page µs':>10}")
    for form in FORMS:
        row = results["forms"][form]
        print(
            f"{form:<8}{row['one session']:>15,.0f}{row['one session ratio']:>8.3f}"
            f"{row['spread']:>12,.0f}{row['spread ratio']:>8.3f}"
            f"{row['first_page_us']:>10,.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
