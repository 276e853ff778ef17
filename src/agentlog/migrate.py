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
metadata. FileCheckpointer events keep their timestamps and payloads.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
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
from .events import encode_events, encode_json, to_session_id
from .files import remove_created
from .log import message_event, read_session_file
from .stores.common import DEFAULT_TENANT, check_name, encode_value

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


class MigrationError(StorageDataError):
    """The migration cannot go ahead (conflicts, changed sources, bad files).

    Nothing was written."""


@dataclass(frozen=True, slots=True)
class PlannedSession:
    """What the plan says about one source file."""

    source_key: str
    """The file's path relative to the source (``sessions/X.json``)."""
    session_id: str
    """The id the session has in the target."""
    sha256: str
    action: str
    """``migrate``, ``skip``, ``changed`` or ``exists``."""
    original_id: str | None = None
    """The file's own id when agentlog cannot take it as it is (see :func:`target_id`)."""
    notes: tuple[str, ...] = ()
    """What the conversion had to do to keep the file exactly (ids, exact JSON text)."""


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


#: The provenance recorded for each kind of source (``metadata["source"]["format"]``).
SOURCE_FORMATS = {"json-v1": "json-v1", "file": "agentlog-file"}

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond the range of a JSON number")
    return value


def _json_v1(data: bytes, key: str) -> dict[str, Any]:
    try:
        # NaN and Infinity are not JSON: refused here, as the apply's encoder would.
        document = json.loads(data, parse_constant=_not_json, parse_float=_finite)
    except ValueError as exc:
        raise MigrationError(f"{key}: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("version") != 1:
        raise MigrationError(f"{key}: not a JSON v1 session file (version must be 1)")
    if not isinstance(document.get("messages"), list):
        raise MigrationError(f"{key}: 'messages' must be a list")
    if not isinstance(document.get("runs", []), list):
        raise MigrationError(f"{key}: 'runs' must be a list")
    if not isinstance(document.get("id"), str):
        raise MigrationError(f"{key}: 'id' must be a string")
    return document


def _readable(value: Any) -> Any:
    """``value`` with what agentlog's JSON cannot hold replaced: a lone
    surrogate by U+FFFD, an integer beyond 64 bits by the float JavaScript
    read it as (its digits as a string if even a float cannot hold it)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_readable(item) for item in value]
    if isinstance(value, dict):
        return {_readable(k): _readable(v) for k, v in value.items()}
    if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX:
        try:
            return float(value)
        except OverflowError:
            return str(value)
    return value


def keep_exact(value: Any) -> tuple[Any, str | None]:
    """``(value, None)`` when agentlog's JSON holds ``value`` exactly; else
    ``(a readable stand-in, the exact JSON text of value)``.

    What JSON v1 files may hold and agentlog's JSON cannot: lone surrogates
    (JavaScript strings may carry them; ``JSON.stringify`` writes ``\\ud800``)
    and integers beyond 64 bits. The text is ASCII, with those written as
    JSON escapes and digits, so ``json.loads`` (or ``JSON.parse``) gives the
    original back exactly.
    """
    try:
        encode_json(value)
    except TypeError:
        return _readable(value), json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return value, None


def legacy_value(record: Mapping[str, Any]) -> Any:
    """The original JSON v1 value a migrated record keeps: ``legacy_json``
    parsed when the record has it (the exact text of a value agentlog's JSON
    cannot hold), else ``legacy``. ``record`` is a migrated event or a
    migrated session's metadata."""
    text = record.get("legacy_json")
    return json.loads(text) if isinstance(text, str) else record.get("legacy")


def epoch_seconds(value: object) -> float | None:
    """A JSON v1 time as seconds since the epoch: an ISO 8601 string (``Z`` or
    an offset; none means UTC) or a number (milliseconds, as JavaScript's
    ``Date.now()``, when above 1e11, else seconds); ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number) or number <= 0:
            return None
        return number / 1000 if number > 1e11 else number
    if isinstance(value, str):
        text = value.strip()
        if text[-1:] in ("Z", "z"):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.timestamp()
    return None


def _time_of(value: object, fields: tuple[str, ...]) -> float | None:
    if isinstance(value, dict):
        for name in fields:
            moment = epoch_seconds(value.get(name))
            if moment is not None:
                return moment
    return None


#: Where a JSON v1 message, a run and the header keep their times.
_MESSAGE_TIMES = ("createdAt", "timestamp", "ts", "time")
_RUN_TIMES = ("createdAt", "startedAt", "updatedAt", "completedAt")
_CREATED = ("createdAt",)
_LAST_ACTIVE = ("lastActiveAt", "updatedAt")


#: ``(ts, type, payload, item id)``: one event as the apply writes it.
_Event = tuple[float, str, bytes, "str | None"]


@dataclass(frozen=True, slots=True)
class _Converted:
    """A source file converted exactly as the apply writes it."""

    session_id: str
    original_id: str | None
    """The file's own id, when agentlog stores it under another."""
    events: list[_Event]
    metadata: bytes
    created: float
    active: float
    notes: tuple[str, ...]


def _convert(kind: str, data: bytes, key: str, file_time: float) -> _Converted | None:
    """A source file converted exactly as the apply writes it — so the plan (and
    a dry run) refuses every file the apply would; ``None`` for an unfinished
    or foreign file in a FileCheckpointer directory. ``file_time`` (the
    file's modification time) stands in where the file holds no time at all."""
    if kind == "json-v1":
        return _convert_json_v1(data, key, file_time)
    parsed = read_session_file(data, key)
    if parsed is None:
        return None
    session_id, stored = parsed
    created = stored[0][0] if stored else file_time
    active = stored[-1][0] if stored else file_time
    events: list[_Event] = [(ts, type_, payload, None) for ts, type_, payload in stored]
    source = {"format": SOURCE_FORMATS[kind], "key": key}
    metadata = encode_value({"source": source})
    return _Converted(session_id, None, events, metadata, created, active, ())


def _convert_json_v1(data: bytes, key: str, file_time: float) -> _Converted:
    document = _json_v1(data, key)
    original_id: str = document["id"]
    session_id = to_session_id(original_id)
    source = {"format": SOURCE_FORMATS["json-v1"], "key": key}
    notes = []
    if session_id != original_id:
        source["id"] = original_id
        notes.append(f"id {_LONE_SURROGATE.sub('?', original_id)!r} is stored as {session_id!r}")
    messages: list[Any] = document["messages"]
    runs: list[Any] = document.get("runs", [])
    header = {k: v for k, v in document.items() if k not in ("messages", "runs")}

    own_times = [_time_of(message, _MESSAGE_TIMES) for message in messages]
    known = [t for t in own_times if t is not None]
    known += [t for run in runs if (t := _time_of(run, _RUN_TIMES)) is not None]
    active = _time_of(header, _LAST_ACTIVE)
    created = _time_of(header, _CREATED)
    if created is None:
        created = min(known, default=active if active is not None else file_time)
    if active is None:
        active = max([created, *known])

    events: list[_Event] = []
    exact = 0
    moment = created
    for index, (message, own_time) in enumerate(zip(messages, own_times, strict=True)):
        moment = own_time if own_time is not None else moment
        type_, payload, needed_text = _json_v1_event(message, index, key)
        exact += needed_text
        events.append((moment, type_, payload, f"v1-{index}"))
    legacy, legacy_json = keep_exact({"header": header, "runs": runs})
    metadata: dict[str, Any] = {"legacy": legacy, "source": source}
    if legacy_json is not None:
        metadata["legacy_json"] = legacy_json
        exact += 1
    if exact:
        notes.append(f"{exact} value(s) kept as exact JSON text (legacy_json)")
    try:
        encoded = encode_value(metadata)
    except StorageDataError as exc:
        raise MigrationError(f"{key}: {exc}") from None
    renamed = original_id if session_id != original_id else None
    return _Converted(session_id, renamed, events, encoded, created, active, tuple(notes))


def _json_v1_event(message: Any, index: int, key: str) -> tuple[str, bytes, bool]:
    """(type, payload, whether it needed legacy_json) for message ``index``."""
    readable, exact = keep_exact(message)
    event = message_event(readable)
    if event is None:
        role = message.get("role") if isinstance(message, dict) else None
        raise MigrationError(f"{key}: message {index} has no known role ({role!r})")
    event.update({"id": f"v1-{index}", "legacy": readable})
    if exact is not None:
        event["legacy_json"] = exact
    try:
        ((kind, payload),) = encode_events([event])
    except ValueError as exc:
        raise MigrationError(f"{key}: message {index}: {exc}") from None
    return kind, payload, exact is not None


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


def _files(
    source: Path, directory: Path, files: list[Path]
) -> Iterator[tuple[str, str, bytes, float]]:
    """(key, the key as earlier releases recorded it, content, mtime) per file.

    The key is the file's path from the source's root (``sessions/X.json``,
    the key the JSON v1 producer itself records); earlier releases recorded
    it from the directory holding the files (``X.json``), so a ledger row of
    theirs is found under that form too."""
    for path in files:
        yield (
            path.relative_to(source).as_posix(),
            path.relative_to(directory).as_posix(),
            path.read_bytes(),
            path.stat().st_mtime,
        )


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
    for key, old_key, data, mtime in _files(source_path, directory, files):
        converted = _convert(kind, data, key, mtime)
        if converted is None:
            continue  # an unfinished or foreign file in a FileCheckpointer directory
        session_id = converted.session_id
        if session_id in seen:
            raise MigrationError(f"{key} and {seen[session_id]} both hold session {session_id!r}")
        seen[session_id] = key
        sha = hashlib.sha256(data).hexdigest()
        recorded = ledger.get(key, ledger.get(old_key))
        if recorded is not None:
            action = "skip" if recorded == sha else "changed"
        else:
            action = "exists" if session_id in existing else "migrate"
        report.sessions.append(
            PlannedSession(key, session_id, sha, action, converted.original_id, converted.notes)
        )
        del converted  # one file at a time
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
    copied = backup / "source"
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
    path = copied / planned.source_key
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != planned.sha256:
        raise MigrationError(f"{planned.source_key} changed while migrating")
    # The copy keeps the source's modification time (shutil.copy2).
    converted = _convert(kind, data, planned.source_key, path.stat().st_mtime)
    if converted is None or converted.session_id != planned.session_id:
        raise MigrationError(f"{planned.source_key} changed while migrating")
    if conn.rows(Q.SELECT_SESSION, (tenant, planned.session_id)):
        raise MigrationError(f"session {planned.session_id!r} appeared in the target")
    events = converted.events
    sid = db.create_session(
        conn,
        tenant,
        planned.session_id,
        head=len(events),
        ts=converted.created,
        mtime=converted.active,
        revision=1 if events else 0,
        metadata=converted.metadata,
    )
    db.insert_events(conn, sid, 0, events)
    conn.rows(
        Q.LEDGER_INSERT,
        (
            source_name,
            planned.source_key,
            planned.sha256,
            tenant,
            planned.session_id,
            time.time(),
            SOURCE_FORMATS[kind],
        ),
    )
