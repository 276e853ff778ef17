"""Where a migration reads: a directory of JSON v1 files, a FileCheckpointer
directory, or a tenant of an agentlog SQLite file.

Each source plans unit by unit (a file, or a session), never holding the
whole source in memory, and makes a verified copy of itself that the apply
then reads from.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from ..engine import Connection, Engine
from ..engine import migration_rows as M
from ..errors import CorruptDatabaseError
from ..integrity import payload_problem, stored_bytes
from ..log import METADATA_SUFFIX, read_metadata_file, read_session_file
from .common import (
    SOURCE_FORMATS,
    Converted,
    Event,
    MigrationError,
    PlannedSession,
    open_read_only,
)
from .frameworks import (
    AdkDatabaseSource,
    LangGraphPostgresSource,
    LangGraphSqliteSource,
    OpenAISqliteSource,
    foreign_kind,
)
from .json_v1 import convert_json_v1

__all__ = ["FileSource", "Source", "SqliteSource", "Unit", "convert", "open_source"]

#: ``(key, the key as earlier releases recorded it, sha256, converted)``;
#: converted is ``None`` for an unfinished or foreign file in a file store.
Unit = tuple[str, str, str, "Converted | None"]


class Source(Protocol):
    """A migration's source."""

    kind: str
    """A key of :data:`~agentlog.migrate.SOURCE_FORMATS` (``json-v1``, ``file``,
    ``sqlite``, a framework's store)."""

    def units(self) -> Iterator[Unit]:
        """Every unit, converted as the apply would convert it, one at a time."""
        ...

    def close(self) -> None:
        """Let go of what reading the source holds open."""
        ...

    def check_backup(self, into: Path) -> None:
        """Refuse (:class:`MigrationError`) a backup at ``into`` that cannot be
        made, before anything of it is created: a refused migration leaves
        the source exactly as it was."""
        ...

    def backup(self, into: Path) -> Source:
        """Copy the source into the new directory ``into``, verify the copy,
        and return the copy as a source."""
        ...

    def load(self, planned: PlannedSession) -> Converted:
        """One planned unit, converted again; :class:`MigrationError` if it
        is not what the plan saw."""
        ...


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert(
    kind: str, data: bytes, key: str, file_time: float, meta: bytes | None = None
) -> Converted | None:
    """A source file converted exactly as the apply writes it — so the plan (and
    a dry run) refuses every file the apply would; ``None`` for an unfinished
    or foreign file in a FileCheckpointer directory. ``file_time`` (the
    file's modification time) stands in where the file holds no time at all;
    ``meta`` is a file store session's metadata file, if it has one (its
    value becomes the session's metadata)."""
    if kind == "json-v1":
        return convert_json_v1(data, key, file_time)
    parsed = read_session_file(data, key)
    if parsed is None:
        return None
    session_id, stored = parsed
    metadata = None
    if meta is not None:
        try:
            metadata = read_metadata_file(meta, key + METADATA_SUFFIX, session_id)[1]
        except CorruptDatabaseError as exc:
            raise MigrationError(str(exc)) from None
    created = stored[0][0] if stored else file_time
    active = stored[-1][0] if stored else file_time
    events: list[Event] = [(ts, type_, payload, None) for ts, type_, payload in stored]
    return Converted(session_id, None, events, metadata, created, active, 1 if events else 0)


def _digest(data: bytes, meta: bytes | None) -> str:
    digest = hashlib.sha256(data)
    if meta is not None:  # a metadata file changed since a migration is a change
        digest.update(b"\n-- metadata --\n" + meta)
    return digest.hexdigest()


class FileSource:
    """JSON v1 session files (``sessions/*.json``) or a FileCheckpointer directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        json_dir = root / "sessions" if (root / "sessions").is_dir() else root
        json_files = sorted(json_dir.glob("*.json"))
        if json_files:
            self.kind, self.directory, self.files = "json-v1", json_dir, json_files
        elif (jsonl := sorted(root.glob("*.jsonl"))) or (root / ".agentlog.lock").exists():
            self.kind, self.directory, self.files = "file", root, jsonl
        else:
            raise MigrationError(
                f"{root} holds neither JSON v1 session files nor a FileCheckpointer store"
            )

    def units(self) -> Iterator[Unit]:
        # The key is the file's path from the source's root (``sessions/X.json``,
        # the key the JSON v1 producer itself records); earlier releases
        # recorded it from the directory holding the files (``X.json``).
        for path in self.files:
            data, meta = path.read_bytes(), self._metadata_of(path)
            key = path.relative_to(self.root).as_posix()
            converted = convert(self.kind, data, key, path.stat().st_mtime, meta)
            yield key, path.relative_to(self.directory).as_posix(), _digest(data, meta), converted

    def _metadata_of(self, path: Path) -> bytes | None:
        """A file store session's metadata file, if it has one."""
        meta = path.with_name(path.name + METADATA_SUFFIX)
        return meta.read_bytes() if self.kind == "file" and meta.is_file() else None

    def close(self) -> None:
        """Nothing: each file is read and closed at once."""

    def check_backup(self, into: Path) -> None:
        resolved = into.resolve()
        if resolved == self.root.resolve() or self.root.resolve() in resolved.parents:
            raise MigrationError("the backup must be outside the source")

    def backup(self, into: Path) -> FileSource:
        self.check_backup(into)
        shutil.copytree(self.root, into)  # copy2: modification times kept
        for original in sorted(p for p in self.root.rglob("*") if p.is_file()):
            if _sha256_file(original) != _sha256_file(into / original.relative_to(self.root)):
                raise MigrationError(f"backup of {original.name} does not match the source")
        return FileSource(into)

    def load(self, planned: PlannedSession) -> Converted:
        path = self.root / planned.source_key
        data, meta = path.read_bytes(), self._metadata_of(path)
        converted = None
        if _digest(data, meta) == planned.sha256:
            converted = convert(self.kind, data, planned.source_key, path.stat().st_mtime, meta)
        if converted is None or converted.session_id != planned.session_id:
            raise MigrationError(f"{planned.source_key} changed while migrating")
        return converted


class SqliteSource:
    """One tenant's sessions in an agentlog SQLite file, with their metadata,
    revisions, item ids and snapshots, exactly as stored. Read-only: the file
    is never changed, and a file no process has open gets no ``-wal`` or
    ``-shm`` beside it."""

    kind = "sqlite"

    def __init__(self, path: Path, tenant: str, engine: str | None) -> None:
        self.path, self.tenant, self.engine = path, tenant, engine
        self._db: Engine | None = None

    def _open(self) -> Engine:
        """The file, opened once (read-only) for every read until :meth:`close`."""
        if self._db is None:
            db = open_read_only(self.path, self.engine, MigrationError)
            if db.schema_version == 0:
                db.close()
                raise MigrationError(f"{self.path} holds no agentlog store")
            self._db = db
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _read(self, db: Engine, name: str) -> tuple[str, Converted] | None:
        def work(conn: Connection) -> tuple[str, Converted] | None:
            row = M.source_session(conn, self.tenant, name)
            if row is None:
                return None
            sid, name_, head, revision, created, mtime, metadata = row
            stored = M.source_events(conn, sid)
            snapshots = tuple(
                (int(t), bytes(state), float(c)) for t, state, c in M.source_snapshots(conn, sid)
            )
            digest = hashlib.sha256(repr((head, revision, created, mtime)).encode())
            digest.update(bytes(metadata or b""))
            for seq, ts, type_, data, item_id, crc in stored:
                problem = payload_problem(stored_bytes(data), crc)
                if problem is not None:  # never copied on, under a fresh checksum
                    raise MigrationError(f"session {name_!r}: event {seq}: {problem}")
                digest.update(repr((seq, ts, type_, item_id, len(data))).encode())
                digest.update(data)
            for through, state, taken in snapshots:
                digest.update(repr((through, taken, len(state))).encode())
                digest.update(state)
            # Retention may have pruned every event: the head stays where it was.
            first_seq = int(stored[0][0]) if stored else int(head) + 1
            events = [(float(ts), str(t), bytes(d), i) for _, ts, t, d, i, _ in stored]
            meta = bytes(metadata) if metadata is not None else None
            converted = Converted(
                name_, None, events, meta, created, mtime, revision, (), first_seq, snapshots
            )
            return digest.hexdigest(), converted

        return db.read("read source session", work, snapshot=True)

    def units(self) -> Iterator[Unit]:
        db = self._open()
        names = db.read("list source sessions", lambda conn: M.source_names(conn, self.tenant))
        if not names:
            others = sorted({row[0] for row in db.list_all_sessions()})
            if others:  # a typo'd --tenant is refused, never "0 sessions migrated"
                listed = ", ".join(repr(t) for t in others)
                raise MigrationError(
                    f"{self.path} has no sessions in tenant {self.tenant!r}"
                    f" (its tenants: {listed}; --tenant picks one)"
                )
        for name in names:
            read = self._read(db, name)
            if read is not None:  # deleted since the list: nothing to move
                yield name, name, read[0], read[1]

    def check_backup(self, into: Path) -> None:
        """Nothing to refuse: a file holds no directory."""

    def backup(self, into: Path) -> SqliteSource:
        into.mkdir(mode=0o700)
        copy = into / self.path.name
        self.close()  # opened afresh: the plan's read may have been of an idle file
        try:
            self._open().backup_to(str(copy))
        finally:
            self.close()
        return SqliteSource(copy, self.tenant, self.engine)

    def load(self, planned: PlannedSession) -> Converted:
        read = self._read(self._open(), planned.source_key)
        if read is None or read[0] != planned.sha256:
            raise MigrationError(f"session {planned.source_key!r} changed while migrating")
        return read[1]


def open_source(
    source: Path | str,
    tenant: str,
    engine: str | None,
    kind: str | None = None,
    allow_pickle: bool = False,
) -> Source:
    """The source at ``source``: a directory of files, an agentlog SQLite file
    or a framework's SQLite store, detected from what it holds unless ``kind``
    (one of :data:`~agentlog.migrate.SOURCE_FORMATS`) names it. ``allow_pickle``
    lets a LangGraph source carry pickled values. A PostgreSQL URL (a str)
    is a LangGraph ``PostgresSaver`` schema, the only PostgreSQL source."""
    if kind is not None and kind not in SOURCE_FORMATS:
        known = ", ".join(SOURCE_FORMATS)
        raise MigrationError(f"unknown source kind {kind!r} (known: {known})")
    if isinstance(source, str):
        if kind not in (None, "langgraph-postgres"):
            raise MigrationError(f"a PostgreSQL source is a langgraph-postgres source, not {kind}")
        return LangGraphPostgresSource(source, allow_pickle)
    if not source.exists():
        raise MigrationError(f"{source}: no such file or directory")
    if source.is_dir():
        found: Source = FileSource(source)
        if kind is not None and found.kind != kind:
            raise MigrationError(f"{source} is a {found.kind} source, not {kind}")
        return found
    if not source.is_file():
        raise MigrationError(f"{source} is neither a directory nor an agentlog SQLite file")
    if kind is None:
        kind = foreign_kind(source) or "sqlite"
    if kind == "openai-sqlite":
        return OpenAISqliteSource(source)
    if kind == "langgraph-sqlite":
        return LangGraphSqliteSource(source, allow_pickle)
    if kind == "langgraph-postgres":
        return LangGraphPostgresSource(source, allow_pickle)
    if kind == "adk-database":
        return AdkDatabaseSource(source)
    if kind != "sqlite":
        raise MigrationError(f"{source} is a file: not a {kind} source")
    return SqliteSource(source, tenant, engine)
