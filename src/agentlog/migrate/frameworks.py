"""Where a migration reads a framework's own SQLite store: the OpenAI Agents
SDK's ``SQLiteSession`` database and LangGraph's ``SqliteSaver`` database.

Each is a :class:`~agentlog.migrate.sources.Source` like the others: it plans
unit by unit (an SDK session, a LangGraph thread's namespace), each unit's
sha256 taken over every row it is made of, backs the file up with SQLite's
own backup (a consistent copy even while the framework writes), and the
apply reads from that copy. The file is only ever read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..engine import foreign as F
from ..errors import StorageDataError
from ..events import encode_events, to_session_id
from ..stores.common import encode_value
from .common import SOURCE_FORMATS, Converted, Event, MigrationError, PlannedSession
from .json_v1 import epoch_seconds

__all__ = [
    "FOREIGN_KINDS",
    "ForeignSource",
    "OpenAISqliteSource",
    "foreign_kind",
]

#: The tables (and the columns each needs) that make a file each framework's store.
_OPENAI_COLUMNS = {
    "agent_sessions": {"session_id", "created_at", "updated_at"},
    "agent_messages": {"id", "session_id", "message_data", "created_at"},
}
_LANGGRAPH_COLUMNS = {
    "checkpoints": {
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "type",
        "checkpoint",
        "metadata",
    },
    "writes": {
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "task_id",
        "task_path",
        "idx",
        "channel",
        "type",
        "value",
    },
}
#: Each foreign SQLite kind and the tables that make it.
FOREIGN_KINDS = {"openai-sqlite": _OPENAI_COLUMNS, "langgraph-sqlite": _LANGGRAPH_COLUMNS}
_NAMES = {
    "openai-sqlite": "an OpenAI Agents SQLiteSession",
    "langgraph-sqlite": "a LangGraph SqliteSaver",
}


def _open(path: Path, kind: str | None = None) -> F.ForeignDatabase:
    """The file, read-only; with ``kind``, refused unless it is that store."""
    try:
        db = F.ForeignDatabase(path)
    except StorageDataError as exc:
        raise MigrationError(str(exc)) from None
    try:
        if kind is not None:
            _check_schema(db, kind)
    except MigrationError:
        db.close()
        raise
    return db


def foreign_kind(path: Path) -> str | None:
    """The framework store ``path`` is (a kind of :data:`FOREIGN_KINDS`), or
    None when it holds none of their tables (an agentlog file, say)."""
    db = _open(path)
    try:
        for kind, tables in FOREIGN_KINDS.items():
            if tables.keys() <= db.tables:
                return kind
        return None
    finally:
        db.close()


def _check_schema(db: F.ForeignDatabase, kind: str) -> None:
    """Refuse a file that is not ``kind``'s store, or one of a schema not known here."""
    tables = FOREIGN_KINDS[kind]
    missing = sorted(tables.keys() - db.tables)
    if missing:
        raise MigrationError(f"{db.path} is not {_NAMES[kind]} database (no {missing[0]} table)")
    for table, needed in tables.items():
        lacking = sorted(needed - set(db.columns(table)))
        if lacking:
            raise MigrationError(
                f"{db.path}: unknown schema for {_NAMES[kind]} database "
                f"({table} has no {', '.join(lacking)} column)"
            )


class ForeignSource:
    """What both framework SQLite sources share: the read-only file, opened
    once, the plan's units, the backup and the apply's reread."""

    kind = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: F.ForeignDatabase | None = None

    def _database(self) -> F.ForeignDatabase:
        if self._db is None:
            self._db = _open(self.path, self.kind)
        return self._db

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _keys(self, conn: F.ForeignRows) -> list[str]:
        """Every unit's key, in order."""
        raise NotImplementedError

    def _convert(self, conn: F.ForeignRows, key: str) -> tuple[str, Converted] | None:
        """``(sha256, converted)`` of one unit, or None when it has gone."""
        raise NotImplementedError

    def _read(self, key: str) -> tuple[str, Converted] | None:
        db = self._database()
        try:
            return db.read(lambda conn: self._convert(conn, key))
        except StorageDataError as exc:
            if isinstance(exc, MigrationError):
                raise
            raise MigrationError(str(exc)) from None

    def units(self) -> Iterator[tuple[str, str, str, Converted | None]]:
        db = self._database()
        try:
            keys = db.read(self._keys)
        except MigrationError:
            raise
        except StorageDataError as exc:
            raise MigrationError(str(exc)) from None
        for key in keys:
            read = self._read(key)
            if read is not None:
                yield key, key, read[0], read[1]

    def backup(self, into: Path) -> ForeignSource:
        into.mkdir(mode=0o700)
        copy = into / self.path.name
        try:
            self._database().backup_to(copy)
        except StorageDataError as exc:
            raise MigrationError(str(exc)) from None
        finally:
            self.close()
        return type(self)(copy)

    def load(self, planned: PlannedSession) -> Converted:
        read = self._read(planned.source_key)
        if read is None or read[0] != planned.sha256:
            raise MigrationError(f"{planned.source_key!r} changed while migrating")
        return read[1]


def _sql_time(value: object, fallback: float) -> float:
    """A ``CURRENT_TIMESTAMP`` column (UTC, ``YYYY-MM-DD HH:MM:SS``) in epoch seconds."""
    moment = epoch_seconds(value)
    return fallback if moment is None else moment


class OpenAISqliteSource(ForeignSource):
    """The OpenAI Agents SDK's ``SQLiteSession`` database (its default tables,
    ``agent_sessions`` and ``agent_messages``): every session in it.

    Each message row becomes one event exactly as
    :class:`~agentlog.integrations.openai_agents.AgentlogSession` writes an
    item, so that session reads back what ``SQLiteSession.get_items()``
    returns, item for item; a row the SDK skips (not JSON) is skipped too,
    and said. Each event keeps its row's time. Needs the ``openai-agents``
    extra (the adapter's item layout)."""

    kind = "openai-sqlite"

    def _keys(self, conn: F.ForeignRows) -> list[str]:
        return [str(key) for key in F.openai_session_ids(conn)]

    def _convert(self, conn: F.ForeignRows, key: str) -> tuple[str, Converted] | None:
        try:
            from ..integrations.openai_agents import event_of_item
        except ImportError:
            raise MigrationError(
                "an OpenAI Agents source needs the SDK: pip install 'agentlog[openai-agents]'"
            ) from None
        session = F.openai_session(conn, key)
        messages = F.openai_messages(conn, key)
        if session is None and not messages:
            return None
        digest = hashlib.sha256(repr(session).encode())
        events: list[Event] = []
        skipped = 0
        first = messages[0][2] if messages else None
        created = _sql_time(session[0] if session else first, 0.0)
        for row_id, data, at in messages:
            digest.update(repr((row_id, at)).encode())
            digest.update(str(data).encode("utf-8", "surrogatepass"))
            try:
                item = json.loads(data)
            except (json.JSONDecodeError, TypeError):
                skipped += 1  # SQLiteSession.get_items skips it too
                continue
            if not isinstance(item, dict):
                raise MigrationError(f"session {key!r}: message {row_id} is not an item object")
            try:
                ((kind, payload),) = encode_events([event_of_item(item)])
            except ValueError as exc:
                raise MigrationError(f"session {key!r}: message {row_id}: {exc}") from None
            events.append((_sql_time(at, created), kind, payload, None))
        active = _sql_time(session[1] if session else None, events[-1][0] if events else created)
        session_id = to_session_id(key)
        source: dict[str, Any] = {"format": SOURCE_FORMATS[self.kind], "key": key}
        notes = []
        if session_id != key:
            source["id"] = key
            notes.append(f"id {key!r} is stored as {session_id!r}")
        if skipped:
            notes.append(f"{skipped} row(s) that are not JSON skipped, as get_items skips them")
        metadata = encode_value({"source": source})
        renamed = key if session_id != key else None
        converted = Converted(
            session_id,
            renamed,
            events,
            metadata,
            created,
            max(active, created),
            1 if events else 0,
            tuple(notes),
        )
        return digest.hexdigest(), converted
