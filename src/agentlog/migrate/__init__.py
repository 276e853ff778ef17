"""Backup-first migration of sessions: ``agentlog migrate SRC DST``.

Sources (:mod:`.sources`): a directory of JSON v1 session files
(``sessions/*.json``, each ``{"version": 1, "id", "messages": [...], "runs":
[...]}``; converted by :mod:`.json_v1`), a :class:`FileCheckpointer`
directory, or one tenant of an agentlog SQLite file. Targets
(:mod:`.targets`): an agentlog SQLite file or a PostgreSQL store
(``postgresql://…``).

The rules, in order:

1. **Plan** (``dry_run=True`` stops here): read every source unit and the
   target read-only, and classify each session: ``migrate``, ``skip`` (the
   ledger holds this file with the same sha256), ``changed`` (the ledger holds
   it with another sha256: an error) or ``exists`` (the target already has a
   session by that id: a conflict). A dry run writes nothing at all, not even
   the target's schema.
2. **Back up**: copy the whole source outside itself (and a SQLite target,
   when it exists) into a backup directory, and verify the copy (every
   file's sha256; each SQLite session's digest when it is read back).
3. **Write**, from the verified copy: every pending session and a ledger row
   each, in one transaction. Any failure rolls the whole batch back.

The source is only ever read: never renamed, changed or deleted. Units are
read one at a time, so a large source is never held in memory at once.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import sys
import time
from pathlib import Path

from ..locations import is_postgres, shown
from ..stores.common import DEFAULT_TENANT, check_name
from ..terminal import progress_bar
from .common import SOURCE_FORMATS, MigrationError, MigrationReport, PlannedSession
from .frameworks import foreign_kind
from .json_v1 import epoch_seconds, keep_exact, legacy_value
from .sources import Source, open_source
from .targets import MigrationRun, SqliteTarget, Target, open_target

#: The tenant a LangGraph source lands in by default: the agentlog saver's.
LANGGRAPH_TENANT = "langgraph"
_LANGGRAPH_KINDS = ("langgraph-sqlite", "langgraph-postgres")

__all__ = [
    "SOURCE_FORMATS",
    "MigrationError",
    "MigrationReport",
    "PlannedSession",
    "epoch_seconds",
    "keep_exact",
    "legacy_value",
    "migrate",
]


def _new_backup_directory(dst: Target, src: Source) -> Path:
    """A new directory named for this second, ``-2``, ``-3``… after it when a
    migration in the same second (another tenant's, scripted) took the name
    (each checked with ``src`` before it is made)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if isinstance(dst, SqliteTarget):
        base = dst.path.with_name(f"{dst.path.name}.migration-{stamp}")
    else:
        base = Path(f"agentlog-migration-{stamp}")
    for attempt in itertools.count(1):
        backup = base if attempt == 1 else base.with_name(f"{base.name}-{attempt}")
        src.check_backup(backup)
        try:
            backup.mkdir(mode=0o700)  # the owner's only: it holds every transcript
        except FileExistsError:
            continue
        return backup
    raise AssertionError("unreachable")


def migrate(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    tenant: str | None = None,
    source_id: str | None = None,
    backup_dir: str | os.PathLike[str] | None = None,
    engine: str | None = None,
    progress: bool | None = None,
    schema: str | None = None,
    source_kind: str | None = None,
    allow_pickle: bool = False,
) -> MigrationReport:
    """Migrate the sessions of ``source`` into ``target``.

    ``source`` is a directory (JSON v1 files or a file store), an agentlog
    SQLite file (its ``tenant`` is read), a framework's own store (an OpenAI
    Agents ``SQLiteSession``, a LangGraph ``SqliteSaver`` or Google ADK
    ``DatabaseSessionService`` file) or a PostgreSQL URL holding LangGraph
    ``PostgresSaver``'s tables (in the URL's schema, its ``search_path``);
    ``target`` is a SQLite file's path or a PostgreSQL URL
    (``postgresql://…``, into ``schema``, default ``agentlog``; needs the
    ``postgres`` extra). Sessions land in ``tenant`` (default ``"default"``;
    ``"langgraph"`` for a LangGraph source, where the agentlog saver looks).
    ``source_id`` names the source in the ledger (default: its resolved
    path), so a re-run recognises it. ``backup_dir`` defaults to
    ``<target>.migration-<UTC time>`` beside a SQLite target (in the current
    directory for PostgreSQL). ``progress`` shows a progress bar on standard
    error (default: when it is a terminal). ``source_kind`` names the kind of
    source (a key of :data:`SOURCE_FORMATS`) instead of detecting it.
    ``allow_pickle`` lets a LangGraph source's pickled values through (never
    unpickled otherwise: they are refused, naming the checkpoints). Raises :class:`MigrationError`
    when the plan has conflicts; nothing is written then.
    """
    url = source if isinstance(source, str) and is_postgres(source) else None
    source_path = Path(source)
    if tenant is None:
        langgraph = url is not None or source_kind in _LANGGRAPH_KINDS
        if source_kind is None and url is None and source_path.is_file():
            langgraph = foreign_kind(source_path) in _LANGGRAPH_KINDS
        tenant = LANGGRAPH_TENANT if langgraph else DEFAULT_TENANT
    tenant = check_name("tenant", tenant)
    src = open_source(url or source_path, tenant, engine, source_kind, allow_pickle)
    dst = open_target(target, engine, schema)
    if (
        url is None
        and isinstance(dst, SqliteTarget)
        and source_path.resolve() == dst.path.resolve()
    ):
        raise MigrationError("the source and the target are the same file")
    if isinstance(dst, SqliteTarget) and not dst.path.absolute().parent.is_dir():
        # A typo'd directory is refused, never created (the dry run says so too).
        raise MigrationError(f"{dst.path.parent}: no such directory for the target")
    source_name = source_id or (shown(url) if url else str(source_path.resolve()))
    run = MigrationRun(tenant, source_name, SOURCE_FORMATS[src.kind])
    existing, ledger = dst.read(run)
    report = MigrationReport(src.kind, source_name, dry_run)
    seen: dict[str, str] = {}
    try:
        for key, old_key, sha, converted in src.units():
            if converted is None:
                continue  # an unfinished or foreign file in a FileCheckpointer directory
            session_id = converted.session_id
            if session_id in seen:
                raise MigrationError(
                    f"{key} and {seen[session_id]} both hold session {session_id!r}"
                )
            seen[session_id] = key
            recorded = ledger.get(key, ledger.get(old_key))
            if recorded is not None:
                action = "skip" if recorded == sha else "changed"
            else:
                action = "exists" if session_id in existing else "migrate"
            report.sessions.append(
                PlannedSession(key, session_id, sha, action, converted.original_id, converted.notes)
            )
            del converted  # one unit at a time
    finally:
        src.close()
    report.skipped = sum(1 for s in report.sessions if s.action == "skip")
    if dry_run:
        return report
    if report.conflicts:
        details = ", ".join(f"{s.source_key} ({s.action})" for s in report.conflicts)
        raise MigrationError(f"nothing migrated: {details}")
    pending = [s for s in report.sessions if s.action == "migrate"]
    if not pending:
        return report
    if backup_dir:
        backup = Path(backup_dir)
        if backup.exists():
            raise MigrationError(f"backup directory {backup} already exists")
        src.check_backup(backup)  # refused before it is made: never left in the source
        made = backup  # the highest directory this makes, to take back on failure
        while not made.parent.exists():
            made = made.parent
        backup.mkdir(parents=True, mode=0o700)  # the owner's only: it holds every transcript
    else:
        backup = made = _new_backup_directory(dst, src)
    try:
        copy = src.backup(backup / "source")
        dst.backup(backup)
    except BaseException:
        # A backup cut short (a full disk, a lost server, Ctrl-C) is no backup:
        # nothing half-made is left for a user to mistake for one.
        shutil.rmtree(made, ignore_errors=True)
        raise
    report.backup = backup
    # Asked only now: a dry run or a run with nothing to write draws nothing.
    if progress is None:
        progress = sys.stderr is not None and sys.stderr.isatty()
    if progress:
        run = dataclasses.replace(run, progress=progress_bar(sys.stderr, "sessions"))
    try:
        dst.write(pending, copy.load, run)
    finally:
        copy.close()
    report.migrated = len(pending)
    return report
