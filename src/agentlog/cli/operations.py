"""The operators' commands: migrate, stats, backup, gc, info and bench."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from .. import __version__
from ..engine import engine_info
from ..locations import is_postgres, shown
from ..stores import DEFAULT_TENANT
from .opening import open_database, open_storage, refuse_empty_tenant
from .output import UsageError, counted, fail, print_json, safe

__all__ = ["bench", "cmd_backup", "cmd_gc", "cmd_info", "cmd_migrate", "cmd_stats"]


def cmd_migrate(args: argparse.Namespace) -> None:
    """``agentlog migrate SRC DST``: copy the sessions, report each, backup first."""
    from ..migrate import migrate

    report = migrate(
        args.source,
        args.target,
        dry_run=args.dry_run,
        tenant=args.tenant,
        source_id=args.source_id,
        backup_dir=args.backup,
        schema=args.schema,
        source_kind=args.source_kind,
        allow_pickle=args.allow_pickle,
    )
    print(f"{report.source_kind} source, {counted(len(report.sessions), 'session')}")
    for planned in report.sessions:
        print(safe(f"  {planned.action:<8} {planned.session_id}  ({planned.source_key})"))
        for note in planned.notes:
            print(safe(f"           {note}"))
    if report.dry_run:
        verdict = "conflicts: nothing would be migrated" if report.conflicts else "ready"
        print(f"dry run: nothing written; {verdict}")
        if report.conflicts:
            raise SystemExit(1)
    else:
        print(f"migrated {report.migrated}, skipped {report.skipped}")
        if report.backup:
            print(safe(f"backup (source, and the target as it was): {report.backup}"))


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def cmd_stats(args: argparse.Namespace) -> None:
    """``agentlog stats STORE``: sizes, counts and the largest sessions."""
    with open_database(args, write=False) as log:
        figures = log.stats()
    if is_postgres(args.store):
        figures = {"store": shown(args.store), **figures}
    if args.json:
        print_json(figures, indent=2)
        return
    if is_postgres(args.store):
        _print_postgres_stats(figures)
    else:
        _print_sqlite_stats(figures)
    if figures["largest_sessions"]:
        print("largest sessions:")
        for row in figures["largest_sessions"]:
            print(safe(f"  {row['events']:>10,}  {row['tenant']}/{row['session']}"))


def _print_postgres_stats(figures: dict[str, Any]) -> None:
    print(
        safe(
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


def cmd_backup(args: argparse.Namespace) -> None:
    """``agentlog backup FILE DEST``: a verified copy of a SQLite file."""
    if is_postgres(args.store):
        schema = args.schema or "agentlog"
        raise UsageError(
            "backup copies a SQLite file; back up PostgreSQL with its own tools: "
            f"pg_dump --schema={schema} --format=custom -f agentlog.dump DBNAME "
            "(one consistent snapshot while writers go on; pg_restore restores it)"
        )
    if os.path.lexists(args.dest):
        raise UsageError(f"{args.dest} already exists: a backup goes to a new file")
    with open_database(args, write=False) as log:
        figures = log.backup(args.dest)
    print(
        f"backup {args.dest}: {counted(figures['sessions'], 'session')}, "
        f"{counted(figures['events'], 'event')}, "
        f"{_megabytes(figures['file_bytes'])}; verified (quick_check ok)"
    )


def cmd_gc(args: argparse.Namespace) -> None:
    """``agentlog gc STORE``: delete idle sessions, prune snapshotted events, give space back."""
    dry = args.dry_run
    postgres = is_postgres(args.store)
    if args.tenant != DEFAULT_TENANT:
        with open_database(args, write=False) as log:
            if not log.list():
                refuse_empty_tenant(log, args)  # a typo: refused, naming the tenants
    if args.idle_days is not None:
        idle_for = args.idle_days * 86400.0
        with open_database(args, write=not dry) as log:
            if dry:
                cutoff = time.time() - idle_for
                doomed = [info.id for info in reversed(log.list()) if info.mtime < cutoff]
            else:
                doomed = log.delete_idle(idle_for)
        verb = "would delete" if dry else "deleted"
        for name in doomed:
            print(safe(f"{verb} {name}"))
        print(f"{verb} {len(doomed)} session(s) idle for more than {args.idle_days:g} day(s)")
    keep = args.keep_after_snapshot
    if keep is not None:
        with open_storage(args, write=not dry) as storage:
            pruned = storage.sessions.prune_all(args.tenant, keep, dry_run=dry)
        verb = "would prune" if dry else "pruned"
        for name, count in pruned.items():
            print(safe(f"{verb} {count:,} event(s) of {name}"))
        print(
            f"{verb} {sum(pruned.values()):,} event(s) of {len(pruned)} session(s), "
            f"keeping each snapshot, what follows it and {keep} event(s) before it"
        )
    if postgres:
        return  # PostgreSQL returns free space with its own (auto)vacuum
    with open_database(args, write=not dry) as log:
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


#: Compile options that only the C engine's own build of the pinned SQLite
#: sets (csrc/sqlite_embed.h); a system SQLite does not carry them together.
_EMBED_OPTIONS = frozenset({"THREADSAFE=2", "OMIT_LOAD_EXTENSION", "OMIT_PROGRESS_CALLBACK"})


def _sqlite_origin(info: dict[str, Any]) -> str:
    if info["engine"] != "c":
        return "the standard library's sqlite3 (the system's SQLite, not the pinned one)"
    if set(info["compile_options"]) >= _EMBED_OPTIONS:
        return "the pinned build, embedded in the C engine"
    return "the system's SQLite: the C engine was built without the pinned one"


def cmd_info(args: argparse.Namespace) -> None:
    """``agentlog info``: the version, the engine and the SQLite running."""
    info = engine_info()
    if args.json:
        print_json(info, indent=2)
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


def bench(argv: list[str]) -> None:
    """``agentlog bench ARGS``: the checkout's benchmark (python -m benchmarks)."""
    # The benchmark lives in the checkout's benchmarks/ package (with its C
    # baseline), not in the installed package: run it from the checkout.
    sys.path.insert(0, os.getcwd())
    try:
        from benchmarks.run import main as bench_main
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.run"):  # a peer it needs is missing
            fail("agentlog bench", f"{exc} (pip install -e '.[bench]' in the checkout)")
        if {"-h", "--help"} & set(argv):
            print(_BENCH_HELP)
            return
        fail("agentlog bench", "run it from a checkout of agentlog (it uses benchmarks/)")
    bench_main(argv)
