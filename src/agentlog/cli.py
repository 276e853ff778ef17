"""The ``agentlog`` command line: a demo, and the everyday operations on a store.

A STORE argument is a SQLite file, or a directory of JSONL session files
(the file backend).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .engine import engine_info
from .errors import AgentlogError, CheckpointConflictError
from .events import StoredEvent
from .fold import fold_events
from .log import BaseCheckpointer, FileCheckpointer, SqliteCheckpointer
from .stores import DEFAULT_TENANT

__all__ = ["main"]


def open_store(location: str) -> BaseCheckpointer:
    """A checkpointer for ``location``: a directory is a file store, else SQLite."""
    if os.path.isdir(location):
        return FileCheckpointer(location)
    return SqliteCheckpointer(location)


def _short(value: Any, width: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_transcript(messages: list[dict[str, Any]], indent: str = "  ") -> None:
    for message in messages:
        print(f"{indent}{message['role']:>9}: {_short(message['content'])}")


def _print_event(event: StoredEvent) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime(event.ts))
    body = {k: v for k, v in event.event.items() if k != "type"}
    print(f"{event.seq:>6}  {stamp}  {event.type:<19} {_short(body)}")


# -- the demo --------------------------------------------------------------------

SESSION = "demo-session"


def _demo(db: str) -> None:
    print(f"agentlog demo — engine: {engine_info()['engine']}, store: {db}\n")
    with SqliteCheckpointer(db) as log:
        log.delete(SESSION)
        log.delete(SESSION + "-alt")
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
        for name in (SESSION, SESSION + "-alt"):
            print(f"   {name} folded:")
            _print_transcript(fold_events(log.read(name)), indent="     ")

        print("\n5. Sessions, most recently active first:")
        for info in log.list():
            print(f"   {info.id:<20} head {info.head:>3}")
        ok, detail = log.check_integrity()
        print(f"\nintegrity: {detail}")
        if not ok:
            raise SystemExit(1)


def _demo_resume(db: str, session_id: str) -> None:
    with SqliteCheckpointer(db) as log:
        events = list(log.read(session_id))
        head = events[-1].seq if events else 0
        print(f"   pid {os.getpid()} read {len(events)} events; the conversation so far:")
        _print_transcript(fold_events(events), indent="     ")
        head = log.append(
            session_id,
            [
                {"type": "user", "content": "Summarise main.py."},
                {"type": "assistant", "content": "It parses arguments and runs the agent."},
            ],
            expected_head=head,
        )
        print(f"   appended user + assistant -> head {head}")


# -- everyday commands -------------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> None:
    with open_store(args.store) as log:
        for info in log.list():
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.mtime))
            print(f"{info.id}\t{info.head}\t{stamp}")


def _cmd_show(args: argparse.Namespace) -> None:
    with open_store(args.store) as log:
        events = log.read(args.session, since_seq=args.since)
        if args.raw:
            for event in events:
                _print_event(event)
        elif args.json:
            for event in events:
                print(json.dumps(event._asdict(), ensure_ascii=False))
        else:
            _print_transcript(fold_events(events), indent="")


def _cmd_tail(args: argparse.Namespace) -> None:
    with open_store(args.store) as log:
        since = args.since
        while True:
            for event in log.read(args.session, since_seq=since):
                _print_event(event)
                since = event.seq
            sys.stdout.flush()
            if args.once:
                return
            time.sleep(args.interval)


def _cmd_fork(args: argparse.Namespace) -> None:
    with open_store(args.store) as log:
        head = log.fork(args.session, args.at, args.new_session)
        print(f"forked {args.session} at {args.at} into {args.new_session} (head {head})")


def _cmd_truncate(args: argparse.Namespace) -> None:
    with open_store(args.store) as log:
        head = log.truncate(args.session, args.to)
        print(f"{args.session}: head {head}")


def _cmd_check(args: argparse.Namespace) -> None:
    with SqliteCheckpointer(args.store) as log:
        ok, detail = log.check_integrity()
    print(detail)
    if not ok:
        raise SystemExit(1)


def _cmd_migrate(args: argparse.Namespace) -> None:
    from .migrate import migrate

    report = migrate(
        args.source,
        args.target,
        dry_run=args.dry_run,
        tenant=args.tenant,
        source_id=args.source_id,
        backup_dir=args.backup,
    )
    print(f"{report.source_kind} source, {len(report.sessions)} sessions")
    for planned in report.sessions:
        print(f"  {planned.action:<8} {planned.session_id}  ({planned.source_key})")
    if report.dry_run:
        verdict = "conflicts: nothing would be migrated" if report.conflicts else "ready"
        print(f"dry run: nothing written; {verdict}")
        if report.conflicts:
            raise SystemExit(1)
    else:
        print(f"migrated {report.migrated}, skipped {report.skipped}")
        if report.backup:
            print(f"backup (source, and the target as it was): {report.backup}")


def _cmd_info(args: argparse.Namespace) -> None:
    print(json.dumps(engine_info(), indent=2))


def _bench(argv: list[str]) -> None:
    # The benchmark lives in the checkout's benchmarks/ package (with its C
    # baseline), not in the installed package: run it from the checkout.
    sys.path.insert(0, os.getcwd())
    try:
        from benchmarks.run import main as bench_main
    except ImportError:
        print("agentlog bench: run it from a checkout of agentlog (benchmarks/)", file=sys.stderr)
        raise SystemExit(2) from None
    bench_main(argv)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentlog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="record, resume, conflict, fork and fold a session")
    demo.add_argument("--db", help="SQLite file to use (default: a temporary one)")

    resume = sub.add_parser("_demo-resume")  # the demo's second process
    resume.add_argument("db")
    resume.add_argument("session")

    def store_command(name: str, text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=text)
        command.add_argument("store", help="a SQLite file or a directory of session files")
        return command

    store_command("list", "list sessions, most recently active first").set_defaults(func=_cmd_list)
    show = store_command("show", "show a session as a folded transcript")
    show.add_argument("session")
    show.add_argument("--since", type=int, default=0, help="start after this seq")
    show.add_argument("--raw", action="store_true", help="print events, not the transcript")
    show.add_argument("--json", action="store_true", help="print events as JSON lines")
    show.set_defaults(func=_cmd_show)
    tail = store_command("tail", "print a session's events as they are appended")
    tail.add_argument("session")
    tail.add_argument("--since", type=int, default=0)
    tail.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    tail.add_argument("--once", action="store_true", help="print what is there and stop")
    tail.set_defaults(func=_cmd_tail)
    fork = store_command("fork", "copy events 1..AT of a session into a new session")
    fork.add_argument("session")
    fork.add_argument("at", type=int)
    fork.add_argument("new_session")
    fork.set_defaults(func=_cmd_fork)
    truncate = store_command("truncate", "drop every event after TO")
    truncate.add_argument("session")
    truncate.add_argument("to", type=int)
    truncate.set_defaults(func=_cmd_truncate)
    store_command("check", "run SQLite's quick_check on a database").set_defaults(func=_cmd_check)
    sub.add_parser("info", help="which engine and SQLite run").set_defaults(func=_cmd_info)
    migrate = sub.add_parser(
        "migrate", help="copy JSON v1 sessions or a file store into SQLite, backup first"
    )
    migrate.add_argument(
        "source", help="a JSON v1 sessions directory or a FileCheckpointer directory"
    )
    migrate.add_argument("target", help="the SQLite file to write")
    migrate.add_argument("--dry-run", action="store_true", help="plan and report; write nothing")
    migrate.add_argument("--tenant", default=DEFAULT_TENANT)
    migrate.add_argument("--source-id", help="the source's name in the ledger (default: its path)")
    migrate.add_argument("--backup", help="where to put the backup (default: beside the target)")
    migrate.set_defaults(func=_cmd_migrate)
    # Listed for --help; its options are the benchmark's own (see main()).
    sub.add_parser(
        "bench", help="run the benchmark (from a checkout); options as python -m benchmarks"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentlog`` command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        _bench(argv[1:])
        return
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            if args.db:
                _demo(args.db)
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    _demo(str(Path(tmp) / "demo.db"))
        elif args.command == "_demo-resume":
            _demo_resume(args.db, args.session)
        else:
            args.func(args)
    except (AgentlogError, ValueError) as exc:  # typed errors and bad arguments
        print(f"agentlog: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
