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
import importlib
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
    "LangGraphSqliteSource",
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
    #: The adapter module that knows the layout the units become, and its extra.
    adapter = ""
    extra = ""

    def __init__(self, path: Path, allow_pickle: bool = False) -> None:
        self.path = path
        self.allow_pickle = allow_pickle
        self._db: F.ForeignDatabase | None = None

    def _database(self) -> F.ForeignDatabase:
        if self._db is None:
            self._db = _open(self.path, self.kind)
        return self._db

    def _adapter(self) -> Any:
        """The adapter module (its framework must be installed)."""
        try:
            return importlib.import_module(self.adapter)
        except ImportError as exc:
            raise MigrationError(
                f"a {self.kind} source needs {exc.name}: pip install 'agentlog[{self.extra}]'"
            ) from None

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

    def check_backup(self, into: Path) -> None:
        """Nothing to refuse: a file holds no directory."""

    def backup(self, into: Path) -> ForeignSource:
        into.mkdir(mode=0o700)
        copy = into / self.path.name
        try:
            self._database().backup_to(copy)
        except StorageDataError as exc:
            raise MigrationError(str(exc)) from None
        finally:
            self.close()
        return type(self)(copy, self.allow_pickle)

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
    adapter, extra = "agentlog.integrations.openai_agents", "openai-agents"

    def _keys(self, conn: F.ForeignRows) -> list[str]:
        return [str(key) for key in F.openai_session_ids(conn)]

    def _convert(self, conn: F.ForeignRows, key: str) -> tuple[str, Converted] | None:
        event_of_item = self._adapter().event_of_item
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


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:3])
    return shown + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


class LangGraphSqliteSource(ForeignSource):
    """LangGraph's ``SqliteSaver`` database: every thread and namespace, each
    with its checkpoints (ids, parents, metadata, channel values) and pending
    writes, as the agentlog saver's layout, so the same compiled graph on
    :class:`~agentlog.integrations.langgraph.AgentlogSaver` resumes where it
    stopped. Values are copied as the framework serialised them, never
    decoded into objects (see :mod:`agentlog.integrations.langgraph.importing`);
    a pickled checkpoint or write is refused unless ``allow_pickle``. Needs
    the ``langgraph`` extra."""

    kind = "langgraph-sqlite"
    adapter, extra = "agentlog.integrations.langgraph.importing", "langgraph"

    def _keys(self, conn: F.ForeignRows) -> list[str]:
        return [json.dumps([t, ns], ensure_ascii=False) for t, ns in F.langgraph_threads(conn)]

    def _convert(self, conn: F.ForeignRows, key: str) -> tuple[str, Converted] | None:
        L = self._adapter()
        thread_id, ns = json.loads(key)
        rows = F.langgraph_checkpoints(conn, thread_id, ns)
        write_rows = F.langgraph_writes(conn, thread_id, ns)
        if not rows and not write_rows:
            return None
        digest = hashlib.sha256()
        checkpoints: list[Any] = []
        pickled: list[str] = []
        with_ext: list[str] = []
        times: list[float] = []
        for cid, parent, kind, data, meta in rows:
            digest.update(repr((cid, parent, kind, len(data or b""))).encode())
            digest.update(bytes(data or b"") + b"\n" + bytes(meta or b""))
            body = self._checkpoint(thread_id, cid, kind, bytes(data or b""), pickled)
            if body is None:
                continue
            if L.has_ext(body):
                with_ext.append(str(cid))
            try:
                metadata = json.loads(bytes(meta or b"{}"))
            except ValueError:
                raise MigrationError(
                    f"thread {thread_id!r}: checkpoint {cid}: metadata is not JSON"
                ) from None
            checkpoints.append(L.ForeignCheckpoint(body, parent, metadata))
            moment = epoch_seconds(body.get("ts"))
            if moment is not None:
                times.append(moment)
        writes = []
        for cid, task, idx, channel, kind, value, path in write_rows:
            digest.update(repr((cid, task, idx, channel, kind, path)).encode())
            digest.update(bytes(value or b""))
            if kind == "pickle" and not self.allow_pickle:
                pickled.append(f"{cid} (a write of task {task})")
            writes.append(
                L.ForeignWrite(cid, task, path, int(idx), channel, str(kind), bytes(value or b""))
            )
        if pickled:
            raise MigrationError(
                f"thread {thread_id!r}: pickled values in {_ids(pickled)}; "
                "unpickling can run any code: pass allow_pickle (--allow-pickle) to carry them"
            )
        known = {str(c.checkpoint["id"]) for c in checkpoints}
        orphans = sum(1 for w in writes if w.checkpoint_id not in known)
        sid, events = L.thread_events(thread_id, ns, checkpoints, writes)
        created = min(times, default=0.0)
        stamped: list[Event] = []
        moment = created
        for event in events:
            at = epoch_seconds(_checkpoint_ts(event, checkpoints))
            moment = at if at is not None else moment
            ((type_, payload),) = encode_events([event])
            stamped.append((moment, type_, payload, None))
        notes = []
        if with_ext:
            notes.append(
                f"{len(with_ext)} checkpoint(s) hold objects of extension types, copied"
                f" undecoded: {_ids(with_ext)}"
            )
        if orphans:
            notes.append(f"{orphans} write(s) of checkpoints that are not in the file left out")
        source = {"format": SOURCE_FORMATS[self.kind], "key": key}
        metadata = encode_value({"source": source, "thread_id": thread_id, "checkpoint_ns": ns})
        active = max(times, default=created)
        converted = Converted(sid, None, stamped, metadata, created, active, 1, tuple(notes))
        return digest.hexdigest(), converted

    def _checkpoint(
        self, thread_id: str, cid: str, kind: str, data: bytes, pickled: list[str]
    ) -> dict[str, Any] | None:
        """A checkpoint unpacked with its extension types raw; None (and its
        id in ``pickled``) for a pickled one the caller may not unpickle."""
        L = self._adapter()
        if kind == "pickle":
            if not self.allow_pickle:
                pickled.append(str(cid))
                return None
            from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

            serde = JsonPlusSerializer(pickle_fallback=True)
            kind, data = serde.dumps_typed(serde.loads_typed((kind, data)))
        if kind != "msgpack":
            raise MigrationError(
                f"thread {thread_id!r}: checkpoint {cid} is of type {kind!r}, not msgpack"
            )
        try:
            body = L.unpack_raw(data)
        except (ValueError, TypeError) as exc:
            raise MigrationError(
                f"thread {thread_id!r}: checkpoint {cid} is corrupt ({exc})"
            ) from None
        if not isinstance(body, dict) or "id" not in body or "channel_versions" not in body:
            raise MigrationError(f"thread {thread_id!r}: checkpoint {cid} is not a checkpoint")
        return body


def _checkpoint_ts(event: dict[str, Any], checkpoints: list[Any]) -> object:
    """The time of the checkpoint an event is of (its own, or its write's)."""
    cid = event.get("id") if event.get("lg") == "c" else event.get("c")
    for checkpoint in checkpoints:
        if checkpoint.checkpoint["id"] == cid:
            return checkpoint.checkpoint.get("ts")
    return None
