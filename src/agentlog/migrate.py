"""Backup-first migration of sessions into SQLite: ``agentlog migrate SRC DST``.

Sources: a directory of JSON v1 session files (``sessions/*.json``, each
``{"version": 1, "id", "messages": [...], "runs": [...]}``) or a
:class:`FileCheckpointer` directory. Target: an agentlog SQLite file.

The rules, in order:

1. **Plan** (``dry_run=True`` stops here): read every source file and the
   target read-only, and classify each session: ``migrate``, ``skip`` (the
   ledger holds this file with the same sha256), ``changed`` (the ledger holds
   it with another sha256: an error) or ``exists`` (the target already has a
   session by that id: a conflict). A dry run writes nothing at all, not even
   the target's schema.
2. **Back up**: copy the whole source directory outside itself (and the
   target database, when it exists) into a backup directory, and verify every
   copied file's sha256 against the source.
3. **Write**, from the verified copy: every pending session and a ledger row
   each, in one transaction. Any failure rolls the whole batch back.

The source is only ever read: never renamed, changed or deleted. Files are
read one at a time, so a large source is never held in memory at once.

JSON v1 messages become events (``user`` / ``assistant``; ``tool`` →
``tool_result``) with item ids ``v1-<n>``, each keeping the original message
under ``legacy``; the file's header and ``runs`` are kept in the session's
metadata. FileCheckpointer events keep their timestamps and payloads, and a
session's metadata (its ``.jsonl.meta`` file) becomes its metadata in the
target.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine import Connection, Engine, open_engine
from .engine import sql as Q
from .errors import (
    CorruptDatabaseError,
    SchemaVersionError,
    StorageDataError,
    StorageUnavailableError,
)
from .events import check_session_id, encode_events
from .files import remove_created
from .log import METADATA_SUFFIX, message_event, read_metadata_file, read_session_file
from .stores.common import DEFAULT_TENANT, check_name, encode_value

__all__ = ["MigrationError", "MigrationReport", "PlannedSession", "migrate"]


class MigrationError(StorageDataError):
    """The migration cannot go ahead (conflicts, changed sources, bad files).

    Nothing was written."""


@dataclass(frozen=True, slots=True)
class PlannedSession:
    """What the plan says about one source file."""

    source_key: str
    """The file's path relative to the source directory."""
    session_id: str
    sha256: str
    action: str
    """``migrate``, ``skip``, ``changed`` or ``exists``."""


@dataclass
class MigrationReport:
    """The outcome of :func:`migrate` (or its plan, for a dry run)."""

    source_kind: str
    source_id: str
    dry_run: bool
    sessions: list[PlannedSession] = field(default_factory=list)
    backup: Path | None = None
    migrated: int = 0
    skipped: int = 0

    @property
    def conflicts(self) -> list[PlannedSession]:
        """Sessions that stop the migration: changed sources and existing targets."""
        return [s for s in self.sessions if s.action in ("changed", "exists")]


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_files(source: Path) -> tuple[str, Path, list[Path]]:
    """(kind, the directory holding the session files, the files in order)."""
    if not source.is_dir():
        raise MigrationError(f"{source} is not a directory")
    json_dir = source / "sessions" if (source / "sessions").is_dir() else source
    json_files = sorted(json_dir.glob("*.json"))
    if json_files:
        return "json-v1", json_dir, json_files
    jsonl = sorted(source.glob("*.jsonl"))
    if jsonl or (source / ".agentlog.lock").exists():
        return "file", source, jsonl
    raise MigrationError(
        f"{source} holds neither JSON v1 session files nor a FileCheckpointer store"
    )


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _json_v1(data: bytes, key: str) -> dict[str, Any]:
    try:
        # NaN and Infinity are not JSON: refused here, as the apply's encoder would.
        document = json.loads(data, parse_constant=_not_json)
    except ValueError as exc:
        raise MigrationError(f"{key}: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("version") != 1:
        raise MigrationError(f"{key}: not a JSON v1 session file (version must be 1)")
    if not isinstance(document.get("messages"), list):
        raise MigrationError(f"{key}: 'messages' must be a list")
    if not isinstance(document.get("runs", []), list):
        raise MigrationError(f"{key}: 'runs' must be a list")
    try:
        check_session_id(document.get("id"))
    except ValueError as exc:
        raise MigrationError(f"{key}: {exc}") from None
    return document


#: What a source file becomes: ``(session id, events as (ts, type, json, item id), metadata)``.
Converted = tuple[str, list[tuple[float, str, bytes, "str | None"]], "bytes | None"]


def _convert(
    kind: str, data: bytes, key: str, now: float, meta: bytes | None = None
) -> Converted | None:
    """A source file converted exactly as the apply writes it — so the plan (and
    a dry run) refuses every file the apply would; ``None`` for an unfinished
    or foreign file in a FileCheckpointer directory. ``meta`` is the bytes of
    a FileCheckpointer session's metadata file, if it has one."""
    if kind == "json-v1":
        document = _json_v1(data, key)
        events = [(now, k, p, i) for k, p, i in _json_v1_events(document, key)]
        header = {k: v for k, v in document.items() if k not in ("messages", "runs")}
        try:
            metadata = encode_value(
                {"legacy": {"header": header, "runs": document.get("runs", [])}}
            )
        except StorageDataError as exc:
            raise MigrationError(f"{key}: {exc}") from None
        return str(document["id"]), list(events), metadata
    parsed = read_session_file(data, key)
    if parsed is None:
        return None
    session_id, stored = parsed
    kept: bytes | None = None
    if meta is not None:
        try:
            kept = read_metadata_file(meta, key + METADATA_SUFFIX, session_id)[1]
        except CorruptDatabaseError as exc:
            raise MigrationError(str(exc)) from None
    return session_id, [(ts, k, p, None) for ts, k, p in stored], kept


def _metadata_file(kind: str, directory: Path, key: str) -> bytes | None:
    """The bytes of a FileCheckpointer session's metadata file, if it has one."""
    path = directory / (key + METADATA_SUFFIX)
    if kind != "file" or not path.is_file():
        return None
    return path.read_bytes()


def _json_v1_events(document: dict[str, Any], key: str) -> list[tuple[str, bytes, str]]:
    """(type, payload, item id) for each message of a JSON v1 document."""
    events = []
    for index, message in enumerate(document["messages"]):
        event = message_event(message)
        if event is None:
            role = message.get("role") if isinstance(message, dict) else None
            raise MigrationError(f"{key}: message {index} has no known role ({role!r})")
        event.update({"id": f"v1-{index}", "legacy": message})
        try:
            ((kind, payload),) = encode_events([event])
        except ValueError as exc:
            raise MigrationError(f"{key}: message {index}: {exc}") from None
        events.append((kind, payload, f"v1-{index}"))
    return events


def _read_target(
    target: Path, tenant: str, source_id: str, engine: str | None
) -> tuple[set[str], dict[str, str]]:
    """(session ids of the tenant, {source_key: sha256} from the tenant's ledger),
    read-only. A target no process has open is read without creating its
    ``-wal`` and ``-shm`` beside it."""
    if not target.exists():
        return set(), {}
    idle = not any(os.path.lexists(f"{target}{end}") for end in ("-wal", "-shm", "-journal"))
    try:
        db = open_engine(target, engine=engine, read_only=True, immutable=idle)
    except (CorruptDatabaseError, StorageUnavailableError) as exc:
        raise SchemaVersionError(f"{target} is not a readable SQLite database ({exc})") from None
    try:
        version = db.schema_version
        if version == 0:
            return set(), {}

        def work(conn: Connection) -> tuple[set[str], dict[str, str]]:
            sessions = {row[0] for row in conn.rows(Q.SESSION_NAMES, (tenant,))}
            ledger = {}
            if version >= 6:
                ledger = dict(conn.rows(Q.LEDGER_SELECT, (source_id, tenant)))
            return sessions, ledger

        return db.read("read target", work, snapshot=True)
    finally:
        db.close()


def _progress_bar(total: int) -> Callable[[int], None]:
    def show(done: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r  [{'#' * filled}{' ' * (width - filled)}] {done}/{total} sessions")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def _backup(source: Path, target: Path, backup: Path, engine: str | None) -> None:
    """Copy the source tree (and the target, if any) into ``backup``, verified."""
    if backup.exists():
        raise MigrationError(f"backup directory {backup} already exists")
    resolved = backup.resolve()
    if resolved == source.resolve() or source.resolve() in resolved.parents:
        raise MigrationError("the backup must be outside the source")
    backup.mkdir(parents=True, mode=0o700)  # the owner's only: it holds every transcript
    copy = backup / "source"
    shutil.copytree(source, copy)
    for original in sorted(p for p in source.rglob("*") if p.is_file()):
        copied = copy / original.relative_to(source)
        if _sha256_file(original) != _sha256_file(copied):
            raise MigrationError(f"backup of {original.name} does not match the source")
    if target.exists():
        # A consistent copy even with the WAL in use, through the engine that
        # may already hold the file in this process.
        live = open_engine(target, engine=engine, read_only=True)
        try:
            live.backup_to(str(backup / "target-before.db"))
        finally:
            live.close()


def _files(directory: Path, files: list[Path]) -> Iterator[tuple[str, bytes]]:
    for path in files:
        yield str(path.relative_to(directory)), path.read_bytes()


def migrate(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    tenant: str = DEFAULT_TENANT,
    source_id: str | None = None,
    backup_dir: str | os.PathLike[str] | None = None,
    engine: str | None = None,
    progress: bool | None = None,
) -> MigrationReport:
    """Migrate the sessions of ``source`` into the SQLite file ``target``.

    ``source_id`` names the source in the ledger (default: its resolved
    path), so a re-run recognises it. ``backup_dir`` defaults to
    ``<target>.migration-<UTC time>`` beside the target. ``progress``
    shows a progress bar on standard error (default: when it is a terminal).
    Raises :class:`MigrationError` when the plan has conflicts; nothing is
    written then.
    """
    source_path, target_path = Path(source), Path(target)
    tenant = check_name("tenant", tenant)
    kind, directory, files = _source_files(source_path)
    source_name = source_id or str(source_path.resolve())
    existing, ledger = _read_target(target_path, tenant, source_name, engine)
    report = MigrationReport(kind, source_name, dry_run)
    seen: dict[str, str] = {}
    now = time.time()
    for key, data in _files(directory, files):
        converted = _convert(kind, data, key, now, _metadata_file(kind, directory, key))
        if converted is None:
            continue  # an unfinished or foreign file in a FileCheckpointer directory
        session_id = converted[0]
        del converted  # one file at a time
        if session_id in seen:
            raise MigrationError(f"{key} and {seen[session_id]} both hold session {session_id!r}")
        seen[session_id] = key
        sha = hashlib.sha256(data).hexdigest()
        if key in ledger:
            action = "skip" if ledger[key] == sha else "changed"
        else:
            action = "exists" if session_id in existing else "migrate"
        report.sessions.append(PlannedSession(key, session_id, sha, action))
    report.skipped = sum(1 for s in report.sessions if s.action == "skip")
    if dry_run:
        return report
    if report.conflicts:
        details = ", ".join(f"{s.source_key} ({s.action})" for s in report.conflicts)
        raise MigrationError(f"nothing migrated: {details}")
    pending = [s for s in report.sessions if s.action == "migrate"]
    if not pending:
        return report
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup = (
        Path(backup_dir)
        if backup_dir
        else target_path.with_name(f"{target_path.name}.migration-{stamp}")
    )
    _backup(source_path, target_path, backup, engine)
    report.backup = backup
    copied = backup / "source" / directory.relative_to(source_path)
    show = (
        _progress_bar(len(pending))
        if (sys.stderr.isatty() if progress is None else progress)
        else None
    )

    created = not os.path.lexists(target_path)
    db = open_engine(target_path, engine=engine)
    try:

        def work(conn: Connection) -> None:
            for done, planned in enumerate(pending, 1):
                _write_session(db, conn, kind, copied, planned, tenant, source_name)
                if show:
                    show(done)

        db.write("migrate", work)
    except BaseException:
        db.close()
        if created:
            remove_created(target_path)  # it holds nothing: the batch rolled back
        raise
    finally:
        db.close()
    report.migrated = len(pending)
    return report


def _write_session(
    db: Engine,
    conn: Connection,
    kind: str,
    copied: Path,
    planned: PlannedSession,
    tenant: str,
    source_name: str,
) -> None:
    """In the migration's transaction: one session from the verified copy, and its ledger row."""
    data = (copied / planned.source_key).read_bytes()
    if hashlib.sha256(data).hexdigest() != planned.sha256:
        raise MigrationError(f"{planned.source_key} changed while migrating")
    now = time.time()
    meta = _metadata_file(kind, copied, planned.source_key)
    converted = _convert(kind, data, planned.source_key, now, meta)
    if converted is None:
        raise MigrationError(f"{planned.source_key} changed while migrating")
    _, events, metadata = converted
    if conn.rows(Q.SELECT_SESSION, (tenant, planned.session_id)):
        raise MigrationError(f"session {planned.session_id!r} appeared in the target")
    sid = db.create_session(
        conn, tenant, planned.session_id, head=len(events), ts=now, revision=1, metadata=metadata
    )
    db.insert_events(conn, sid, 0, events)
    conn.rows(
        Q.LEDGER_INSERT,
        (source_name, planned.source_key, planned.sha256, tenant, planned.session_id, now),
    )
