"""``agentlog demo``: record, resume (in a second process), conflict, fork and fold a session."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..engine import engine_info
from ..errors import CheckpointConflictError
from ..fold import fold_events
from ..locations import is_postgres
from ..log import SqliteCheckpointer
from .opening import has_session
from .output import UsageError, counted, print_transcript, safe

__all__ = ["DEMO_SESSIONS", "SESSION", "cmd_demo", "demo", "demo_resume"]


SESSION = "demo-session"
DEMO_SESSIONS = (SESSION, SESSION + "-alt")


def demo(db: str, kept: bool) -> None:
    """Run the demo on the SQLite file ``db`` (``kept``: the user's, kept at the end)."""
    where = db if kept else f"{db} (temporary, removed at the end; --db FILE keeps one)"
    running = engine_info()
    with SqliteCheckpointer(db) as log:  # opened first: a bad --db is the only output
        print(safe(f"agentlog demo — engine: {running['engine']}, store: {where}"))
        if running["extension_error"]:  # say why, on the first thing a new user runs
            print(safe(f"(the C engine is not available: {running['extension_error']})"))
        print()
        for name in DEMO_SESSIONS:
            log.delete(name)
        print("1. An agent records a turn, one append per step, each with expected_head:")
        steps: list[list[dict[str, Any]]] = [
            [{"type": "user", "content": "What is in the repo, and how big is main.py?"}],
            [
                {
                    "type": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "ls"},
                        {"type": "tool_use", "id": "t2", "name": "wc"},
                    ],
                }
            ],
            [
                {"type": "tool_started", "tool_use_id": "t1"},
                {"type": "tool_started", "tool_use_id": "t2"},
            ],
            [
                {"type": "tool_result", "tool_use_id": "t1", "content": "main.py README.md"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "120 main.py"},
            ],
            [{"type": "assistant", "content": "Two files; main.py has 120 lines."}],
        ]
        head = 0
        for events in steps:
            head = log.append(SESSION, events, expected_head=head)
            print(f"   append {', '.join(e['type'] for e in events):<32} -> head {head}")

        print("\n2. A new process resumes the session from the log and continues it:")
        resumed = subprocess.run(
            [sys.executable, "-m", "agentlog", "_demo-resume", db, SESSION],
            capture_output=True,
            text=True,
            check=True,
        )
        print(resumed.stdout, end="")

        print("\n3. This process still believes the head is", head, "and appends:")
        try:
            log.append(SESSION, [{"type": "user", "content": "stale write"}], expected_head=head)
        except CheckpointConflictError as exc:
            print(f"   CheckpointConflictError: expected {exc.expected}, actual {exc.actual}")
            print("   nothing was written; reload and retry:")
            head = log.append(
                SESSION, [{"type": "user", "content": "Thanks!"}], expected_head=exc.actual
            )
            print(f"   append user -> head {head}")

        print("\n4. Time travel: fork at seq 6 (after the tool results) and answer differently:")
        log.fork(SESSION, 6, SESSION + "-alt")
        log.append(
            SESSION + "-alt",
            [{"type": "assistant", "content": "main.py and README.md; main.py is short."}],
            expected_head=6,
        )
        for name in DEMO_SESSIONS:
            print(f"   {name} folded:")
            print_transcript(fold_events(log.read(name)), indent="     ")

        print("\n5. Sessions, most recently active first:")
        for info in log.list():
            print(f"   {info.id:<20} head {info.head:>3}")
        ok, detail = log.check_integrity()
        print(f"\nintegrity: {detail}")
        if not ok:
            raise SystemExit(1)
    if kept:
        print(f"\nThe sessions are kept in {db}; see them with: agentlog show {db} {SESSION}")


def demo_resume(db: str, session_id: str) -> None:
    """The demo's second process: read the session back, fold it, append to it."""
    with SqliteCheckpointer(db, create=False) as log:
        events = list(log.read(session_id))
        head = events[-1].seq if events else 0
        read = counted(len(events), "event")
        print(f"   pid {os.getpid()} read {read}; the conversation so far:")
        print_transcript(fold_events(events), indent="     ")
        head = log.append(
            session_id,
            [
                {"type": "user", "content": "Summarise main.py."},
                {"type": "assistant", "content": "It parses arguments and runs the agent."},
            ],
            expected_head=head,
        )
        print(f"   appended user + assistant -> head {head}")


def cmd_demo(args: argparse.Namespace) -> None:
    """``agentlog demo``: on a temporary file, or on ``--db FILE`` unless it holds other data."""
    if args.force and not args.db:
        raise UsageError(
            "--force resets the demo's sessions in --db FILE; without --db the demo"
            " runs on a temporary file and has nothing to reset"
        )
    if not args.db:
        with tempfile.TemporaryDirectory() as tmp:
            demo(str(Path(tmp) / "demo.db"), kept=False)
        return
    db = args.db
    if is_postgres(db):
        raise UsageError("the demo runs on a SQLite file: give --db FILE")
    if os.path.isdir(db):
        raise UsageError(f"--db {db} is a directory; give a SQLite file")
    if not Path(db).absolute().parent.is_dir():
        raise UsageError(f"--db {db}: no such directory {str(Path(db).parent)!r}")
    if os.path.exists(db) and os.path.getsize(db) > 0:
        with SqliteCheckpointer(db, read_only=True) as log:
            taken = [name for name in DEMO_SESSIONS if has_session(log, name)]
        if taken and not args.force:
            raise UsageError(
                f"{db} already holds {' and '.join(taken)}, which the demo would reset; "
                "add --force to reset them, or choose another --db"
            )
    demo(db, kept=True)
