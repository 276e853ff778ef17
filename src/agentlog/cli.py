"""The ``agentlog`` command line: a demo, and the everyday operations on a store.

A STORE argument is a SQLite file, a directory of JSONL session files (a
file store), or a PostgreSQL database: a URL (``postgresql://…`` or
``postgres://…``) or a libpq ``host=… dbname=…`` string, with ``--schema``
naming the store's schema. Commands that only read open
the store read-only and never create or change anything; the commands that
write (``fork``, ``truncate``, ``gc``) open an existing store only. Every
mistake is one line on standard error and a non-zero exit status; a
PostgreSQL password given on the command line is never printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol, runtime_checkable

from . import __version__
from .engine import engine_info
from .errors import AgentlogError, CheckpointConflictError, EventsPrunedError
from .events import MAX_POSITION, SessionInfo, StoredEvent
from .fold import fold_events
from .locations import is_postgres, scrub, shown
from .log import BaseCheckpointer, FileCheckpointer, SqliteCheckpointer, is_file_store
from .stores import DEFAULT_TENANT
from .terminal import inert, inert_json, progress_bar, screen_for

__all__ = ["main"]

#: The exit status of a command whose output was cut short by a closed pipe
#: (``agentlog show … | head``), as for a process that SIGPIPE ended.
EXIT_BROKEN_PIPE = 128 + 13


class UsageError(Exception):
    """A mistake in how the command was called: reported as one line, exit status 2."""

    def __init__(self, message: str, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


# -- opening a store -----------------------------------------------------------------


def _open_postgres(
    location: str, *, write: bool, tenant: str, schema: str | None
) -> BaseCheckpointer:
    try:
        from .log.postgres import PostgresCheckpointer
    except ImportError as exc:
        raise UsageError(
            f"PostgreSQL needs psycopg 3, which is not installed ({exc}): "
            "pip install 'agentlog[postgres]'"
        ) from None
    options: dict[str, Any] = {} if schema is None else {"schema": schema}
    return PostgresCheckpointer(
        location,
        tenant=tenant,
        create=False,
        read_only=not write,
        pool_min_size=1,
        pool_max_size=2,
        **options,
    )


_SCHEMA_IS_FOR_POSTGRES = (
    "--schema is for a PostgreSQL store (a postgresql:// URL or a libpq 'host=… dbname=…' string)"
)


def open_store(
    location: str,
    *,
    write: bool = False,
    tenant: str = DEFAULT_TENANT,
    schema: str | None = None,
) -> BaseCheckpointer:
    """The store at ``location``: a PostgreSQL URL or ``key=value`` string is
    PostgreSQL (in ``schema``), a directory a file store, anything else SQLite.

    Never creates one: a missing path, a directory that holds no file store,
    or a PostgreSQL schema that holds no store is an error. Without ``write``
    the store is opened read-only.
    """
    if is_postgres(location):
        return _open_postgres(location, write=write, tenant=tenant, schema=schema)
    if schema is not None:
        raise UsageError(_SCHEMA_IS_FOR_POSTGRES)
    if not os.path.lexists(location):
        raise UsageError(f"no such file or directory: {location}")
    if os.path.isdir(location):
        if not is_file_store(location):
            raise UsageError(
                f"{location} is a directory that holds no file store (no .agentlog.lock, "
                "no session files)"
            )
        if tenant != DEFAULT_TENANT:
            raise UsageError(
                f"{location} is a file store, which has no tenants (--tenant is for SQLite files)"
            )
        if write:
            return FileCheckpointer(location, create=False)
        return FileCheckpointer(location, read_only=True)
    if write:
        return SqliteCheckpointer(location, create=False, tenant=tenant)
    return SqliteCheckpointer(location, read_only=True, tenant=tenant)


@runtime_checkable
class _Tenanted(Protocol):
    """A store with tenants: SQLite and PostgreSQL."""

    def list_all_tenants(self) -> list[tuple[str, SessionInfo]]: ...


@runtime_checkable
class _Operable(_Tenanted, Protocol):
    """A database an operator runs stats and gc on: SQLite and PostgreSQL."""

    def stats(self) -> dict[str, Any]: ...

    def delete_idle(self, idle_for: float) -> list[str]: ...


@runtime_checkable
class _Checkable(Protocol):
    """A store that checks itself (every kind agentlog opens)."""

    def check_integrity(
        self, deep: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> tuple[bool, str]: ...


def _open(args: argparse.Namespace, *, write: bool = False) -> BaseCheckpointer:
    """The store a command names, with its tenant and schema."""
    return open_store(args.store, write=write, tenant=args.tenant, schema=args.schema)


def _exists(log: BaseCheckpointer, session: str) -> bool:
    # A head of 0 is an unknown session, or one truncated to nothing.
    return log.head(session) > 0 or any(info.id == session for info in log.list())


def _require_session(
    log: BaseCheckpointer, args: argparse.Namespace, session: str | None = None
) -> int:
    """The head of ``session`` (default ``args.session``); an unknown session
    is an error that names the tenant holding it, if another one does."""
    session = args.session if session is None else session
    head = log.head(session)
    if head > 0 or _exists(log, session):
        return head
    where = shown(args.store)
    if args.tenant != DEFAULT_TENANT:
        where = f"tenant {args.tenant!r} of {where}"
    hint = "agentlog list shows them"
    if isinstance(log, _Tenanted):
        others = sorted({t for t, info in log.list_all_tenants() if info.id == session})
        if others:
            hint = f"it is in tenant {others[0]!r}: add --tenant {shlex.quote(others[0])}"
    raise UsageError(f"no session {session!r} in {where} ({hint})")


# -- printing ------------------------------------------------------------------------

# Stored content and ids come from models, tools and whoever wrote the store:
# they are shown, never obeyed (terminal.inert escapes what a terminal acts on).
_safe = inert


def _print_transcript(messages: list[dict[str, Any]], indent: str = "  ") -> None:
    screen_for(sys.stdout).transcript(messages, indent)


def _print_event(event: StoredEvent) -> None:
    screen_for(sys.stdout).events([event])


def _print_json(value: Any, indent: int | None = None) -> None:
    print(inert_json(json.dumps(value, ensure_ascii=False, indent=indent)))


def _event_json(event: StoredEvent) -> dict[str, Any]:
    return event._asdict()


# -- the demo --------------------------------------------------------------------

SESSION = "demo-session"
DEMO_SESSIONS = (SESSION, SESSION + "-alt")


def _demo(db: str, kept: bool) -> None:
    where = db if kept else f"{db} (temporary, removed at the end; --db FILE keeps one)"
    running = engine_info()
    with SqliteCheckpointer(db) as log:  # opened first: a bad --db is the only output
        print(_safe(f"agentlog demo — engine: {running['engine']}, store: {where}"))
        if running["extension_error"]:  # say why, on the first thing a new user runs
            print(_safe(f"(the C engine is not available: {running['extension_error']})"))
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
            _print_transcript(fold_events(log.read(name)), indent="     ")

        print("\n5. Sessions, most recently active first:")
        for info in log.list():
            print(f"   {info.id:<20} head {info.head:>3}")
        ok, detail = log.check_integrity()
        print(f"\nintegrity: {detail}")
        if not ok:
            raise SystemExit(1)
    if kept:
        print(f"\nThe sessions are kept in {db}; see them with: agentlog show {db} {SESSION}")


def _demo_resume(db: str, session_id: str) -> None:
    with SqliteCheckpointer(db, create=False) as log:
        events = list(log.read(session_id))
        head = events[-1].seq if events else 0
        read = _counted(len(events), "event")
        print(f"   pid {os.getpid()} read {read}; the conversation so far:")
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


def _cmd_demo(args: argparse.Namespace) -> None:
    if args.force and not args.db:
        raise UsageError(
            "--force resets the demo's sessions in --db FILE; without --db the demo"
            " runs on a temporary file and has nothing to reset"
        )
    if not args.db:
        with tempfile.TemporaryDirectory() as tmp:
            _demo(str(Path(tmp) / "demo.db"), kept=False)
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
            taken = [name for name in DEMO_SESSIONS if _exists(log, name)]
        if taken and not args.force:
            raise UsageError(
                f"{db} already holds {' and '.join(taken)}, which the demo would reset; "
                "add --force to reset them, or choose another --db"
            )
    _demo(db, kept=True)


# -- everyday commands -------------------------------------------------------------


def _refuse_empty_tenant(log: _Tenanted, args: argparse.Namespace) -> None:
    """A tenant given with ``--tenant`` that has no sessions, in a store whose
    other tenants have some, is most likely a typo: refused, naming the
    tenants there are. An empty default tenant is only noted on stderr."""
    others = sorted({tenant for tenant, _ in log.list_all_tenants()})
    if not others:
        return
    listed = ", ".join(repr(t) for t in others)
    message = (
        f"no sessions in tenant {args.tenant!r} of {shown(args.store)}"
        f" (its tenants: {listed}; add --tenant NAME, or --all-tenants)"
    )
    if args.tenant != DEFAULT_TENANT:
        raise UsageError(message)
    print(_safe(f"agentlog list: note: {message}"), file=sys.stderr)


def _cmd_list(args: argparse.Namespace) -> None:
    with _open(args) as log:
        rows: list[tuple[str, SessionInfo]]
        if args.all_tenants and isinstance(log, _Tenanted):
            rows = log.list_all_tenants()
        else:
            rows = [(args.tenant, info) for info in log.list()]
            if not rows and isinstance(log, _Tenanted):
                _refuse_empty_tenant(log, args)
    if args.json:
        for tenant, info in rows:
            _print_json({"tenant": tenant, "id": info.id, "head": info.head, "mtime": info.mtime})
        return
    headers = ["tenant"] if args.all_tenants else []
    table = []
    for tenant, info in rows:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.mtime))
        columns = [tenant] if args.all_tenants else []
        table.append([*columns, info.id, str(info.head), stamp])
    screen_for(sys.stdout).table([*headers, "session", "head", "last active"], table)


@contextlib.contextmanager
def _pruned_hint(store: str) -> Iterator[None]:
    """Say how to read what retention kept when a read starts before it."""
    try:
        yield
    except EventsPrunedError as exc:
        raise UsageError(
            f"{shown(store)}: {exc}; add --since {exc.first_retained - 1} to read what is kept"
        ) from None


def _cmd_show(args: argparse.Namespace) -> None:
    with _open(args) as log, _pruned_hint(args.store):
        _require_session(log, args)
        events = log.read(args.session, since_seq=args.since)
        if args.raw:
            screen_for(sys.stdout).events(events)
        elif args.json:
            for event in events:
                _print_json(_event_json(event))
        else:
            _print_transcript(fold_events(events), indent="")


def _cmd_tail(args: argparse.Namespace) -> None:
    with _open(args) as log, _pruned_hint(args.store):
        _require_session(log, args)
        if args.once:
            events = log.read(args.session, since_seq=args.since)
        else:
            # Each event as its writer commits it; a truncate below what was
            # printed ends the tail with an error (SessionTruncatedError).
            events = log.follow(args.session, args.since, poll_interval=args.interval)
        for event in events:
            if args.json:
                _print_json(_event_json(event))
            else:
                _print_event(event)
            if not args.once:
                sys.stdout.flush()  # the next one may be a while


def _cmd_fork(args: argparse.Namespace) -> None:
    with _open(args, write=True) as log:
        _require_session(log, args)
        head = log.fork(args.session, args.at, args.new_session)
    print(_safe(f"forked {args.session} at {args.at} into {args.new_session} (head {head})"))


def _cmd_truncate(args: argparse.Namespace) -> None:
    with _open(args, write=True) as log:
        head = _require_session(log, args)
        new_head = log.truncate(args.session, args.to)
    if args.to >= head:
        print(_safe(f"{args.session}: head {head} (nothing after {args.to} to drop)"))
    else:
        print(_safe(f"{args.session}: head {new_head}"))


def _cmd_check(args: argparse.Namespace) -> None:
    with open_store(args.store, schema=args.schema) as log:
        assert isinstance(log, _Checkable)
        bar = progress_bar(sys.stderr, "sessions checked") if sys.stderr.isatty() else None
        ok, detail = log.check_integrity(deep=args.deep, progress=bar)
    if args.json:
        kind = "file" if os.path.isdir(args.store) else "sqlite"
        if is_postgres(args.store):
            kind = "postgresql"
        _print_json(
            {
                "store": shown(args.store),
                "kind": kind,
                "deep": args.deep,
                "ok": ok,
                "detail": detail,
            }
        )
    else:
        print("\n".join(_safe(line) for line in detail.split("\n")))
    if not ok:
        raise SystemExit(1)


_DIGEST = re.compile(r"[0-9a-f]{64}")


def _cmd_verify(args: argparse.Namespace) -> None:
    expect = None
    if args.expect is not None:
        expect = args.expect.strip().lower()
        if not _DIGEST.fullmatch(expect):
            raise UsageError(f"--expect takes a sha256 digest (64 hex digits), not {args.expect!r}")
        if len(args.sessions) != 1:
            raise UsageError("--expect needs exactly one SESSION")
    failed = False
    with _open_database(args, write=False) as log:
        if not isinstance(log, SqliteCheckpointer):
            raise UsageError("verify works on a SQLite file: only SQLite keeps hash chains")
        chained = log.hash_chain
        if not chained and expect is None:
            raise UsageError(
                f"{shown(args.store)} keeps no hash chain, so there are no links to verify"
                " (a file keeps one once opened with hash_chain=True; --expect DIGEST"
                " still compares a session's recomputed head digest)"
            )
        names = args.sessions or sorted(info.id for info in log.list())
        reports = []
        for name in names:
            _require_session(log, args, name)
            report = log.verify(name)
            # Without a chain the stored links are all absent: only the digest speaks.
            problem = report.problem if chained else None
            if problem is None and expect is not None and report.digest != expect:
                problem = (
                    f"head digest is not the expected {expect} (cut, or changed and re-chained)"
                )
            failed = failed or problem is not None
            reports.append((report, problem))
    for report, problem in reports:
        if args.json:
            _print_json(
                {
                    "session": report.session_id,
                    "head": report.head,
                    "digest": report.digest,
                    "ok": problem is None,
                    "problem": problem,
                }
            )
        else:
            verdict = "ok" if problem is None else f"FAILED: {problem}"
            print(_safe(f"{report.session_id}  head {report.head}  {report.digest}  {verdict}"))
    if failed:
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
        schema=args.schema,
    )
    print(f"{report.source_kind} source, {_counted(len(report.sessions), 'session')}")
    for planned in report.sessions:
        print(_safe(f"  {planned.action:<8} {planned.session_id}  ({planned.source_key})"))
        for note in planned.notes:
            print(_safe(f"           {note}"))
    if report.dry_run:
        verdict = "conflicts: nothing would be migrated" if report.conflicts else "ready"
        print(f"dry run: nothing written; {verdict}")
        if report.conflicts:
            raise SystemExit(1)
    else:
        print(f"migrated {report.migrated}, skipped {report.skipped}")
        if report.backup:
            print(_safe(f"backup (source, and the target as it was): {report.backup}"))


def _refuse_file_store(args: argparse.Namespace) -> None:
    """Operations commands work on a database: a directory is one line, exit 2."""
    if os.path.isdir(args.store):
        raise UsageError(
            f"{args.store} is a directory: this command works on a SQLite file or PostgreSQL"
        )
    if args.schema is not None and not is_postgres(args.store):
        raise UsageError(_SCHEMA_IS_FOR_POSTGRES)


def _open_database(args: argparse.Namespace, *, write: bool) -> Any:
    """The SQLite file or PostgreSQL store ``args`` names (operations commands
    have no file-store form): a checkpointer with stats and gc."""
    _refuse_file_store(args)
    tenant = getattr(args, "tenant", DEFAULT_TENANT)
    log = open_store(args.store, write=write, tenant=tenant, schema=args.schema)
    assert isinstance(log, _Operable)
    return log


def _counted(count: int, noun: str) -> str:
    """``1 session``, ``2,000 sessions``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _cmd_stats(args: argparse.Namespace) -> None:
    with _open_database(args, write=False) as log:
        figures = log.stats()
    if is_postgres(args.store):
        figures = {"store": shown(args.store), **figures}
    if args.json:
        _print_json(figures, indent=2)
        return
    if is_postgres(args.store):
        _print_postgres_stats(figures)
    else:
        _print_sqlite_stats(figures)
    if figures["largest_sessions"]:
        print("largest sessions:")
        for row in figures["largest_sessions"]:
            print(_safe(f"  {row['events']:>10,}  {row['tenant']}/{row['session']}"))


def _print_postgres_stats(figures: dict[str, Any]) -> None:
    print(
        _safe(
            f"{figures['store']} schema {figures['schema']}: version {figures['schema_version']}, "
            f"PostgreSQL {figures['server_version']}"
        )
    )
    print(
        f"sessions {figures['sessions']:,} in {figures['tenants']:,} tenant(s), "
        f"events {figures['events']:,}"
    )
    sizes = sorted(figures["relation_bytes"].items(), key=lambda item: (-item[1], item[0]))
    print(
        f"tables {_size(figures['total_bytes'])} with their indexes "
        "(pg_total_relation_size): " + ", ".join(f"{name} {_size(size)}" for name, size in sizes)
    )


def _size(size: int) -> str:
    return _megabytes(size) if size >= 2**20 else f"{size / 2**10:,.0f} KiB"


def _print_sqlite_stats(figures: dict[str, Any]) -> None:
    print(f"{figures['path']}: schema {figures['schema_version']}, engine {figures['engine']}")
    print(
        f"sessions {figures['sessions']:,} in {figures['tenants']:,} tenant(s), "
        f"events {figures['events']:,}"
    )
    back = "; agentlog gc gives them back" if figures["auto_vacuum"] == "incremental" else ""
    print(
        f"file {_megabytes(figures['file_bytes'])}, of which free "
        f"{_megabytes(figures['free_bytes'])} ({figures['free_pages']:,} pages, reused by "
        f"later writes{back}); WAL {_megabytes(figures['wal_bytes'])} "
        f"(truncated past {_megabytes(figures['wal_size_limit'])})"
    )


def _cmd_backup(args: argparse.Namespace) -> None:
    if is_postgres(args.store):
        schema = args.schema or "agentlog"
        raise UsageError(
            "backup copies a SQLite file; back up PostgreSQL with its own tools: "
            f"pg_dump --schema={schema} --format=custom -f agentlog.dump DBNAME "
            "(one consistent snapshot while writers go on; pg_restore restores it)"
        )
    if os.path.lexists(args.dest):
        raise UsageError(f"{args.dest} already exists: a backup goes to a new file")
    with _open_database(args, write=False) as log:
        figures = log.backup(args.dest)
    print(
        f"backup {args.dest}: {_counted(figures['sessions'], 'session')}, "
        f"{_counted(figures['events'], 'event')}, "
        f"{_megabytes(figures['file_bytes'])}; verified (quick_check ok)"
    )


def _cmd_gc(args: argparse.Namespace) -> None:
    dry = args.dry_run
    postgres = is_postgres(args.store)
    if args.tenant != DEFAULT_TENANT:
        with _open_database(args, write=False) as log:
            if not log.list():
                _refuse_empty_tenant(log, args)  # a typo: refused, naming the tenants
    if args.idle_days is not None:
        idle_for = args.idle_days * 86400.0
        with _open_database(args, write=not dry) as log:
            if dry:
                cutoff = time.time() - idle_for
                doomed = [info.id for info in reversed(log.list()) if info.mtime < cutoff]
            else:
                doomed = log.delete_idle(idle_for)
        verb = "would delete" if dry else "deleted"
        for name in doomed:
            print(_safe(f"{verb} {name}"))
        print(f"{verb} {len(doomed)} session(s) idle for more than {args.idle_days:g} day(s)")
    keep = args.keep_after_snapshot
    if keep is not None:
        with _open_storage(args, write=not dry) as storage:
            pruned = storage.sessions.prune_all(args.tenant, keep, dry_run=dry)
        verb = "would prune" if dry else "pruned"
        for name, count in pruned.items():
            print(_safe(f"{verb} {count:,} event(s) of {name}"))
        print(
            f"{verb} {sum(pruned.values()):,} event(s) of {len(pruned)} session(s), "
            f"keeping each snapshot, what follows it and {keep} event(s) before it"
        )
    if postgres:
        return  # PostgreSQL returns free space with its own (auto)vacuum
    with _open_database(args, write=not dry) as log:
        figures = log.stats()
        if figures["auto_vacuum"] != "incremental":
            print(
                f"{_megabytes(figures['free_bytes'])} free ({figures['free_pages']:,} pages) stay "
                "in the file for later writes: it keeps no page map (made before auto_vacuum); "
                "a copy made by agentlog backup can shrink"
            )
        elif dry:
            print(
                f"would give {_megabytes(figures['free_bytes'])} ({figures['free_pages']:,} "
                "free pages) back to the file system"
            )
        else:
            done = log.vacuum()
            print(
                f"gave {_megabytes(done['pages_returned'] * figures['page_size'])} "
                f"({done['pages_returned']:,} pages) back to the file system; the file is "
                f"{_megabytes(done['file_bytes'])}"
            )


def _open_storage(args: argparse.Namespace, *, write: bool) -> Any:
    """The four stores of the SQLite file or PostgreSQL store ``args`` names
    (an existing one only; read-only unless ``write``)."""
    if is_postgres(args.store):
        from .stores.postgres import PostgresStorage

        schema = {} if args.schema is None else {"schema": args.schema}
        return PostgresStorage.open(args.store, create=False, read_only=not write, **schema)
    from .stores import SqliteStorage

    _refuse_file_store(args)
    return SqliteStorage.open(args.store, read_only=not write, create=False)


#: Compile options that only the C engine's own build of the pinned SQLite
#: sets (csrc/sqlite_embed.h); a system SQLite does not carry them together.
_EMBED_OPTIONS = frozenset({"THREADSAFE=2", "OMIT_LOAD_EXTENSION", "OMIT_PROGRESS_CALLBACK"})


def _sqlite_origin(info: dict[str, Any]) -> str:
    if info["engine"] != "c":
        return "the standard library's sqlite3 (the system's SQLite, not the pinned one)"
    if set(info["compile_options"]) >= _EMBED_OPTIONS:
        return "the pinned build, embedded in the C engine"
    return "the system's SQLite: the C engine was built without the pinned one"


def _cmd_info(args: argparse.Namespace) -> None:
    info = engine_info()
    if args.json:
        _print_json(info, indent=2)
        return
    print(f"agentlog {__version__}")
    if info["engine"] == "c":
        print("engine:  c (compiled)")
    else:
        print("engine:  python (pure Python)")
    if info["extension_error"]:
        print(f"         the C engine is not available: {info['extension_error']}")
    print(f"SQLite:  {info['sqlite_version']}, {_sqlite_origin(info)}")
    print(f"engines: {', '.join(info['available'])} (agentlog info --json for the details)")


_BENCH_HELP = """usage: agentlog bench [options]

Run the benchmark (python -m benchmarks) from the top of a checkout of
agentlog: it uses the checkout's benchmarks/ package and C baseline, which an
installed wheel does not have. There, agentlog bench --help lists its options."""


def _bench(argv: list[str]) -> None:
    # The benchmark lives in the checkout's benchmarks/ package (with its C
    # baseline), not in the installed package: run it from the checkout.
    sys.path.insert(0, os.getcwd())
    try:
        from benchmarks.run import main as bench_main
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.run"):  # a peer it needs is missing
            _fail("agentlog bench", f"{exc} (pip install -e '.[bench]' in the checkout)")
        if {"-h", "--help"} & set(argv):
            print(_BENCH_HELP)
            return
        _fail("agentlog bench", "run it from a checkout of agentlog (it uses benchmarks/)")
    bench_main(argv)


# -- arguments ---------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with every mistake reported as one line."""

    def error(self, message: str) -> NoReturn:
        # "argument --since: must be >= 0 …" reads "--since must be >= 0 …".
        message = re.sub(r"^argument (\S+?)(?:/\S+)?: (must )", r"\1 \2", message)
        raise UsageError(f"{message} (see: {self.prog} --help)", self.prog)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    if value > MAX_POSITION:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_POSITION}, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not 0 < value < float("inf"):  # inf: another process's writes never shown
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, not {text}")
    return value


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of days, not {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of days >= 0, not {text}")
    return value


DESCRIPTION = (
    "Inspect and edit agentlog session logs. STORE is a SQLite file, a directory of "
    "session files (a file store) or a PostgreSQL database (postgresql://USER@HOST/DBNAME "
    "or 'host=HOST dbname=DBNAME user=USER', with "
    "--schema NAME). Read commands open the store read-only; no command creates a store, "
    "except demo and migrate (their target)."
)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentlog", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"agentlog {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str, func: Callable[[argparse.Namespace], None]) -> Any:
        found = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        found.set_defaults(func=func)
        return found

    def store(
        found: argparse.ArgumentParser,
        kinds: str = "a SQLite file, a file store or a postgresql:// URL",
        schema: bool = True,
    ) -> None:
        found.add_argument("store", metavar="STORE", help=kinds)
        if not schema:  # a SQLite-only command offers no PostgreSQL option
            found.set_defaults(schema=None)
            return
        found.add_argument(
            "--schema",
            metavar="NAME",
            help="the PostgreSQL schema the store lives in (default: 'agentlog')",
        )

    def session(found: argparse.ArgumentParser) -> None:
        found.add_argument("session", metavar="SESSION", help="the session id")

    def tenant(found: argparse.ArgumentParser | Any) -> None:
        found.add_argument(
            "--tenant",
            default=DEFAULT_TENANT,
            metavar="NAME",
            help=f"the tenant whose sessions to use (default: {DEFAULT_TENANT!r}; "
            "SQLite and PostgreSQL)",
        )

    demo = command("demo", "record, resume, conflict, fork and fold a session", _cmd_demo)
    demo.add_argument(
        "--db", metavar="FILE", help="the SQLite file to use and keep (default: a temporary one)"
    )
    demo.add_argument(
        "--force", action="store_true", help="reset the demo's sessions if FILE already holds them"
    )

    listing = command("list", "list sessions, most recently active first", _cmd_list)
    store(listing)
    which = listing.add_mutually_exclusive_group()
    tenant(which)
    which.add_argument(
        "--all-tenants", action="store_true", help="every tenant's sessions, with a tenant column"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per session")

    show = command("show", "show a session as a folded transcript", _cmd_show)
    store(show)
    session(show)
    tenant(show)
    show.add_argument("--since", type=_count, default=0, metavar="N", help="start after seq N")
    form = show.add_mutually_exclusive_group()
    form.add_argument("--raw", action="store_true", help="print the events, not the transcript")
    form.add_argument("--json", action="store_true", help="print the events as JSON lines")

    tail = command("tail", "print a session's events as they are appended", _cmd_tail)
    store(tail)
    session(tail)
    tenant(tail)
    tail.add_argument("--since", type=_count, default=0, metavar="N", help="start after seq N")
    tail.add_argument(
        "--interval",
        type=_seconds,
        default=0.05,
        metavar="S",
        help="seconds between looks for another process's writes (0.05)",
    )
    tail.add_argument("--once", action="store_true", help="print what is there and stop")
    tail.add_argument("--json", action="store_true", help="print the events as JSON lines")

    fork = command("fork", "copy events 1..AT of a session into a new session", _cmd_fork)
    store(fork)
    session(fork)
    fork.add_argument("at", metavar="AT", type=_count, help="the last seq to copy")
    fork.add_argument("new_session", metavar="NEW", help="the new session's id")
    tenant(fork)

    truncate = command("truncate", "drop every event of a session after seq TO", _cmd_truncate)
    store(truncate)
    session(truncate)
    truncate.add_argument("to", metavar="TO", type=_count, help="the seq to keep up to")
    tenant(truncate)

    check = command(
        "check",
        "check a store: SQLite's quick_check on a database file, or that every session "
        "file of a file store reads back",
        _cmd_check,
    )
    store(check)
    check.add_argument(
        "--deep",
        action="store_true",
        help="also read every event of every session and list each damaged one",
    )
    check.add_argument("--json", action="store_true", help="print the result as JSON")

    verify = command(
        "verify",
        "recompute the hash chain of sessions of a SQLite file and print each head digest",
        _cmd_verify,
    )
    store(verify, "a SQLite file", schema=False)
    verify.add_argument(
        "sessions", metavar="SESSION", nargs="*", help="the sessions (default: every one)"
    )
    verify.add_argument(
        "--expect",
        metavar="DIGEST",
        help="the head digest kept from before: fail unless the session still has it",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object per session")
    tenant(verify)

    info = command("info", "which engine and SQLite run", _cmd_info)
    info.add_argument("--json", action="store_true", help="print every detail as JSON")

    migrate = command(
        "migrate",
        "copy sessions into SQLite or PostgreSQL, backup first",
        _cmd_migrate,
    )
    migrate.add_argument(
        "source",
        metavar="SRC",
        help="a JSON v1 sessions directory, a file store, or a SQLite file (its --tenant)",
    )
    migrate.add_argument(
        "target",
        metavar="DST",
        help="the SQLite file, or PostgreSQL URL (postgresql://…), to write",
    )
    migrate.add_argument("--schema", help="the PostgreSQL schema to write into (default: agentlog)")
    migrate.add_argument("--dry-run", action="store_true", help="plan and report; write nothing")
    tenant(migrate)
    migrate.add_argument("--source-id", help="the source's name in the ledger (default: its path)")
    migrate.add_argument("--backup", help="where to put the backup (default: beside the target)")
    stats = command(
        "stats", "sizes, counts and the largest sessions of a SQLite file or PostgreSQL", _cmd_stats
    )
    store(stats, "a SQLite file or a postgresql:// URL")
    stats.add_argument("--json", action="store_true", help="print every figure as JSON")

    backup = command(
        "backup",
        "copy a SQLite file to a new file while writers go on, then verify the copy",
        _cmd_backup,
    )
    store(backup, "a SQLite file (PostgreSQL: use pg_dump)")
    backup.add_argument("dest", metavar="DEST", help="the new file to write")

    gc = command(
        "gc",
        "retention and space: delete a tenant's idle sessions, prune the events its "
        "snapshots cover, then give free space back to the file system",
        _cmd_gc,
    )
    store(gc, "a SQLite file or a postgresql:// URL")
    gc.add_argument(
        "--idle-days",
        type=_days,
        metavar="N",
        help="delete sessions not changed for more than N days",
    )
    gc.add_argument(
        "--keep-after-snapshot",
        type=_count,
        metavar="N",
        help="delete the events before each session's newest snapshot but the last N",
    )
    tenant(gc)
    gc.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")

    # Listed for --help; its options are the benchmark's own (see main()).
    sub.add_parser(
        "bench", help="run the benchmark (from a checkout); options as python -m benchmarks"
    )
    return parser


# -- the entry point ---------------------------------------------------------------


def _run(argv: list[str]) -> None:
    # The benchmark bypasses the parser: it has options of its own.
    if argv[:1] == ["bench"]:
        _bench(argv[1:])
        return
    prog, store, named = "agentlog", None, True
    try:
        if argv[:1] == ["_demo-resume"] and len(argv) == 3:
            # The demo's second process: internal, so not a listed command.
            prog, store = "agentlog demo", argv[1]
            _demo_resume(argv[1], argv[2])
            return
        args, extra = _parser().parse_known_args(argv)
        if extra:  # named with the subcommand they were given to
            prog = f"agentlog {args.command}"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see: {prog} --help)")
        # The store a message may name (migrate's is its target): its password hidden.
        store = getattr(args, "store", None) or getattr(args, "target", None)
        named = args.command != "migrate"  # its errors name the source or the target
        prog = f"agentlog {args.command}"
        args.func(args)
    except UsageError as exc:
        _fail(exc.prog or prog, scrub(str(exc), store))
    except (AgentlogError, ValueError, OSError) as exc:  # typed errors, bad arguments, I/O
        if isinstance(exc, BrokenPipeError):
            raise
        message = scrub(str(exc) or type(exc).__name__, store)
        where = shown(store) if store and named else None
        if where and where not in message and not isinstance(exc, ValueError):
            message = f"{where}: {message}"  # say which store, when the error does not
        _fail(prog, message)


def _fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {_safe(' '.join(message.split()))}", file=sys.stderr)
    raise SystemExit(2)


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so the interpreter's own
    flush at exit finds nothing to complain about."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test's capture): nothing will be flushed to a pipe


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentlog`` command."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    # psycopg's pool logs each failed connection attempt (several lines each)
    # while it retries; what the command makes of the failure is its one line.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    try:
        _run(arguments)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`agentlog show … | head`): stop quietly.
        _quiet_stdout()
        raise SystemExit(EXIT_BROKEN_PIPE) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
