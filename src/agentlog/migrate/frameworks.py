"""Where a migration reads a framework's own SQLite store: the OpenAI Agents
SDK's ``SQLiteSession`` database, LangGraph's ``SqliteSaver`` database and
Google ADK's ``DatabaseSessionService`` database.

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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from ..engine import foreign as F
from ..errors import StorageDataError
from ..events import encode_events, to_session_id
from ..locations import shown
from ..stores.common import encode_value
from .common import SOURCE_FORMATS, Converted, Event, MigrationError, PlannedSession
from .json_v1 import epoch_seconds

__all__ = [
    "FOREIGN_KINDS",
    "AdkDatabaseSource",
    "ForeignSource",
    "LangGraphPostgresSource",
    "LangGraphSqliteSource",
    "OpenAISqliteSource",
    "foreign_kind",
]

#: The tables (and the columns each needs) that make a file each framework's store.
_OPENAI_COLUMNS = {
    "agent_sessions": {"session_id", "created_at", "updated_at"},
    "agent_messages": {"id", "session_id", "message_data", "created_at"},
}
_LANGGRAPH_CHECKPOINT = {
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "checkpoint",
    "metadata",
}
_LANGGRAPH_WRITE = {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel"}
_LANGGRAPH_COLUMNS = {
    "checkpoints": _LANGGRAPH_CHECKPOINT | {"type"},
    # task_path too, in files of langgraph-checkpoint-sqlite after 3.1.0; older
    # files are read without it (engine.foreign.langgraph_writes).
    "writes": _LANGGRAPH_WRITE | {"type", "value"},
}
_ADK_COLUMNS = {
    "sessions": {"app_name", "user_id", "id", "state", "create_time", "update_time"},
    "events": {
        "id",
        "app_name",
        "user_id",
        "session_id",
        "invocation_id",
        "timestamp",
        "event_data",
    },
    "app_states": {"app_name", "state", "update_time"},
    "user_states": {"app_name", "user_id", "state", "update_time"},
}
# task_path too, from PostgresSaver's tenth migration on (read without it before).
_LANGGRAPH_PG_COLUMNS = {
    "checkpoints": _LANGGRAPH_CHECKPOINT,
    "checkpoint_blobs": {"thread_id", "checkpoint_ns", "channel", "version", "type", "blob"},
    "checkpoint_writes": _LANGGRAPH_WRITE | {"type", "blob"},
}
#: Each foreign kind and the tables that make it (a PostgresSaver's in a
#: SQLite file: the copy a migration's backup holds of its schema).
FOREIGN_KINDS = {
    "openai-sqlite": _OPENAI_COLUMNS,
    "langgraph-sqlite": _LANGGRAPH_COLUMNS,
    "langgraph-postgres": _LANGGRAPH_PG_COLUMNS,
    "adk-database": _ADK_COLUMNS,
}
_NAMES = {
    "openai-sqlite": "an OpenAI Agents SQLiteSession",
    "langgraph-sqlite": "a LangGraph SqliteSaver",
    "langgraph-postgres": "a LangGraph PostgresSaver",
    "adk-database": "a Google ADK DatabaseSessionService",
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


def _check_schema(db: F.ForeignDatabase | F.ForeignPostgres, kind: str) -> None:
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

    def _copy_name(self) -> str:
        """The name of the backup's copy of the source."""
        return self.path.name

    def backup(self, into: Path) -> ForeignSource:
        into.mkdir(mode=0o700)
        copy = into / self._copy_name()
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


class _LangGraphSource(ForeignSource):
    """What both LangGraph sources share: a thread's namespace made into the
    agentlog saver's layout, from the rows each reads in its own way
    (:meth:`_thread`). Values are copied as the framework serialised them,
    never decoded into objects (see
    :mod:`agentlog.integrations.langgraph.importing`); a pickled checkpoint
    or write is refused unless ``allow_pickle``. Needs the ``langgraph`` extra."""

    adapter, extra = "agentlog.integrations.langgraph.importing", "langgraph"

    def _threads(self, conn: F.ForeignRows) -> list[F.Row]:
        """Every ``(thread_id, checkpoint_ns)``."""
        raise NotImplementedError

    def _thread(
        self, conn: F.ForeignRows, thread_id: str, ns: str, digest: Any, pickled: list[str]
    ) -> tuple[list[tuple[str, str | None, dict[str, Any] | None, bytes]], list[F.Row]]:
        """A namespace's ``(checkpoint id, parent id, checkpoint, metadata
        JSON)`` (the checkpoint None, and its id in ``pickled``, for one
        that may not be unpickled) and its writes' rows (as
        :func:`~agentlog.engine.foreign.langgraph_writes` gives them), each
        row fed to ``digest``."""
        raise NotImplementedError

    def _keys(self, conn: F.ForeignRows) -> list[str]:
        return [json.dumps([t, ns], ensure_ascii=False) for t, ns in self._threads(conn)]

    def _convert(self, conn: F.ForeignRows, key: str) -> tuple[str, Converted] | None:
        L = self._adapter()
        thread_id, ns = json.loads(key)
        digest = hashlib.sha256()
        pickled: list[str] = []
        rows, write_rows = self._thread(conn, thread_id, ns, digest, pickled)
        if not rows and not write_rows:
            return None
        checkpoints: list[Any] = []
        with_ext: list[str] = []
        times: list[float] = []
        for cid, parent, body, meta in rows:
            if body is None:
                continue
            if L.has_ext(body):
                with_ext.append(str(cid))
            try:
                metadata = json.loads(meta or b"{}")
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
            notes.append(f"{orphans} write(s) of checkpoints that are not in the source left out")
        source = {"format": SOURCE_FORMATS[self.kind], "key": key}
        metadata = encode_value({"source": source, "thread_id": thread_id, "checkpoint_ns": ns})
        active = max(times, default=created)
        converted = Converted(sid, None, stamped, metadata, created, active, 1, tuple(notes))
        return digest.hexdigest(), converted

    def _corrupt(self, thread_id: str, cid: str, exc: Exception) -> MigrationError:
        return MigrationError(f"thread {thread_id!r}: checkpoint {cid} is corrupt ({exc})")


class LangGraphSqliteSource(_LangGraphSource):
    """LangGraph's ``SqliteSaver`` database: every thread and namespace, each
    with its checkpoints (ids, parents, metadata, channel values) and pending
    writes, as the agentlog saver's layout, so the same compiled graph on
    :class:`~agentlog.integrations.langgraph.AgentlogSaver` resumes where it
    stopped. A pickled checkpoint (a serializer with ``pickle_fallback``) is
    unpickled only with ``allow_pickle``; its channels are then carried as
    LangGraph's own serializer writes each (pickled again where msgpack
    cannot hold one)."""

    kind = "langgraph-sqlite"

    def _threads(self, conn: F.ForeignRows) -> list[F.Row]:
        return F.langgraph_threads(conn)

    def _thread(
        self, conn: F.ForeignRows, thread_id: str, ns: str, digest: Any, pickled: list[str]
    ) -> tuple[list[tuple[str, str | None, dict[str, Any] | None, bytes]], list[F.Row]]:
        task_paths = "task_path" in self._database().columns("writes")
        found: list[tuple[str, str | None, dict[str, Any] | None, bytes]] = []
        for cid, parent, kind, data, meta in F.langgraph_checkpoints(conn, thread_id, ns):
            digest.update(repr((cid, parent, kind, len(data or b""))).encode())
            digest.update(bytes(data or b"") + b"\n" + bytes(meta or b""))
            body = self._checkpoint(thread_id, cid, kind, bytes(data or b""), pickled)
            found.append((cid, parent, body, bytes(meta or b"{}")))
        return found, F.langgraph_writes(conn, thread_id, ns, task_paths)

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
            try:
                return cast("dict[str, Any]", L.unpickled_checkpoint(data))
            except (ValueError, TypeError) as exc:
                raise self._corrupt(thread_id, cid, exc) from None
        if kind != "msgpack":
            raise MigrationError(
                f"thread {thread_id!r}: checkpoint {cid} is of type {kind!r}, not msgpack"
            )
        try:
            body = L.unpack_raw(data)
        except (ValueError, TypeError) as exc:
            raise self._corrupt(thread_id, cid, exc) from None
        if not isinstance(body, dict) or "id" not in body or "channel_versions" not in body:
            raise MigrationError(f"thread {thread_id!r}: checkpoint {cid} is not a checkpoint")
        return body


class LangGraphPostgresSource(_LangGraphSource):
    """LangGraph's ``PostgresSaver`` tables (``checkpoints``,
    ``checkpoint_blobs``, ``checkpoint_writes``) in the URL's schema —
    or the SQLite copy of them a migration's backup holds: the same as a
    ``SqliteSaver`` source, each checkpoint's inline values and blobs made
    one. Each blob and write is carried as the saver stored it, a pickled
    one only with ``allow_pickle`` (never unpickled here). The server is
    only ever read, in read-only transactions. Needs the ``postgres`` extra
    for a URL."""

    kind = "langgraph-postgres"

    def __init__(self, location: str | Path, allow_pickle: bool = False) -> None:
        super().__init__(Path(location), allow_pickle)
        self.url = location if isinstance(location, str) else None
        self._pg: F.ForeignPostgres | None = None

    def _database(self) -> Any:
        if self.url is None:
            return super()._database()
        if self._pg is None:
            try:
                db = F.ForeignPostgres(self.url, shown(self.url))
            except ImportError:
                raise MigrationError(
                    "a PostgreSQL source needs psycopg: pip install 'agentlog[postgres]'"
                ) from None
            try:
                _check_schema(db, self.kind)
            except MigrationError:
                db.close()
                raise
            self._pg = db
        return self._pg

    def close(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            pg.close()
        super().close()

    def _copy_name(self) -> str:
        # The server's tables, copied into a SQLite file: a source of this kind too.
        return "langgraph-postgres.db" if self.url is not None else super()._copy_name()

    def _threads(self, conn: F.ForeignRows) -> list[F.Row]:
        # Sorted here, not by the server: its collation may not be the copy's.
        return sorted(F.langgraph_pg_threads(conn))

    def _thread(
        self, conn: F.ForeignRows, thread_id: str, ns: str, digest: Any, pickled: list[str]
    ) -> tuple[list[tuple[str, str | None, dict[str, Any] | None, bytes]], list[F.Row]]:
        L = self._adapter()
        blobs: dict[tuple[str, str], tuple[str, bytes]] = {}
        for channel, version, kind, blob in sorted(F.langgraph_pg_blobs(conn, thread_id, ns)):
            digest.update(repr((channel, version, kind)).encode())
            digest.update(bytes(blob or b"") + b"\n")
            blobs[(channel, version)] = (str(kind), bytes(blob or b""))
        found: list[tuple[str, str | None, dict[str, Any] | None, bytes]] = []
        for cid, parent, text, meta in sorted(F.langgraph_pg_checkpoints(conn, thread_id, ns)):
            digest.update(repr((cid, parent)).encode())
            digest.update(f"{text}\n{meta}".encode("utf-8", "surrogatepass"))
            try:
                body = json.loads(text)
            except (TypeError, ValueError) as exc:
                raise self._corrupt(thread_id, cid, exc) from None
            if not isinstance(body, dict) or not isinstance(body.get("channel_versions"), dict):
                raise MigrationError(f"thread {thread_id!r}: checkpoint {cid} is not a checkpoint")
            # As PostgresSaver loads it: the inline values, then the blobs over them.
            values = dict(body.get("channel_values") or {})
            for channel, version in body["channel_versions"].items():
                kind, blob = blobs.get((channel, str(version)), ("", b""))
                if not kind or kind == "empty":
                    continue
                if kind == "pickle" and not self.allow_pickle:
                    pickled.append(f"{cid} (channel {channel})")
                try:
                    values[channel] = L.stored_value(kind, blob)
                except (ValueError, TypeError) as exc:
                    raise self._corrupt(thread_id, cid, exc) from None
            found.append((cid, parent, {**body, "channel_values": values}, str(meta).encode()))
        task_paths = "task_path" in self._database().columns("checkpoint_writes")
        writes = sorted(F.langgraph_writes(conn, thread_id, ns, task_paths, postgres=True))
        return found, writes


def _adk_time(value: object, what: str) -> float:
    """A ``DatabaseSessionService`` time column (naive UTC) in epoch seconds,
    computed as ADK computes ``last_update_time`` from it."""
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        raise MigrationError(f"{what}: {value!r} is not a time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _adk_state(text: str | bytes | None, what: str) -> dict[str, Any]:
    try:
        state = json.loads(text) if text is not None else {}
    except (TypeError, ValueError):
        raise MigrationError(f"{what}: the state is not JSON") from None
    if not isinstance(state, dict):
        raise MigrationError(f"{what}: the state is not an object")
    return state


class AdkDatabaseSource(ForeignSource):
    """Google ADK's ``DatabaseSessionService`` database on SQLite (its schema
    v1: ``sessions``, ``events`` with ``event_data``, ``app_states``,
    ``user_states``): every session, and every app's ``app:`` and user's
    ``user:`` state, in the layout of
    :class:`~agentlog.integrations.google_adk.AgentlogSessionService`, so
    its ``get_session`` returns what ADK's own returns (events, merged
    state, ``last_update_time``). ADK keeps only a session's current state,
    not the one it was created with: the created state is taken to be the
    keys no event's delta sets (what a fork back to an early event starts
    from). Needs the ``google-adk`` extra."""

    kind = "adk-database"
    adapter, extra = "agentlog.integrations.google_adk", "google-adk"

    def _keys(self, conn: F.ForeignRows) -> list[str]:
        keys = [["session", *map(str, row)] for row in F.adk_session_keys(conn)]
        keys += [["app", str(row[0])] for row in F.adk_app_states(conn)]
        keys += [["user", str(row[0]), str(row[1])] for row in F.adk_user_states(conn)]
        return [json.dumps(key, ensure_ascii=False) for key in keys]

    def _convert(self, conn: F.ForeignRows, key: str) -> tuple[str, Converted] | None:
        A = self._adapter()
        scope, *names = json.loads(key)
        if scope != "session":
            return self._shared(conn, A, key, names)
        app_name, user_id, session_id = names
        what = f"session {session_id!r} of {app_name!r}/{user_id!r}"
        row = F.adk_session(conn, app_name, user_id, session_id)
        if row is None:
            return None
        digest = hashlib.sha256(repr(row).encode("utf-8", "surrogatepass"))
        state = _adk_state(row[0], what)
        events: list[Event] = []
        touched: set[str] = set()
        for event_id, invocation_id, at, data in F.adk_events(conn, app_name, user_id, session_id):
            digest.update(
                repr((event_id, invocation_id, at, data)).encode("utf-8", "surrogatepass")
            )
            fields = _adk_state(data, f"{what}: event {event_id!r}")
            stamp = fields.get("timestamp")
            moment = float(stamp) if stamp is not None else _adk_time(at, what)
            fields = {**fields, "id": event_id, "invocation_id": invocation_id, "timestamp": moment}
            try:
                record = A.event_record(fields)
            except ValueError as exc:
                first = str(exc).splitlines()[0]
                raise MigrationError(
                    f"{what}: event {event_id!r} is not an ADK event ({first})"
                ) from None
            delta = (record[A.EVENT_FIELD].get("actions") or {}).get("state_delta") or {}
            touched.update(delta)
            ((type_, payload),) = encode_events([record])
            events.append((moment, type_, payload, None))
        initial = {name: value for name, value in state.items() if name not in touched}
        updated = _adk_time(row[2], what)
        try:
            sid = A.session_key(app_name, user_id, session_id)
        except ValueError as exc:
            raise MigrationError(f"{what}: {exc}") from None
        meta = A.session_metadata(
            app_name,
            user_id,
            session_id,
            initial=initial,
            state=state,
            through=len(events),
            updated=updated,
        )
        created = _adk_time(row[1], what)
        converted = Converted(sid, None, events, encode_value(meta), created, updated, 1)
        return digest.hexdigest(), converted

    def _shared(
        self, conn: F.ForeignRows, A: Any, key: str, names: list[str]
    ) -> tuple[str, Converted] | None:
        """The unit of an app's (``[app]``) or a user's (``[app, user]``) state."""
        if len(names) == 1:
            rows = [r[1:] for r in F.adk_app_states(conn) if r[0] == names[0]]
        else:
            rows = [r[2:] for r in F.adk_user_states(conn) if list(r[:2]) == names]
        if not rows:
            return None
        ((text, at),) = rows
        what = "the state of " + "/".join(repr(name) for name in names)
        user_id = names[1] if len(names) > 1 else None
        try:
            sid = A.shared_key(names[0], user_id)
        except ValueError as exc:
            raise MigrationError(f"{what}: {exc}") from None
        meta = A.shared_metadata(names[0], user_id, _adk_state(text, what))
        moment = _adk_time(at, what)
        digest = hashlib.sha256(repr((text, at)).encode("utf-8", "surrogatepass"))
        converted = Converted(sid, None, [], encode_value(meta), moment, moment, 1)
        return digest.hexdigest(), converted


def _checkpoint_ts(event: dict[str, Any], checkpoints: list[Any]) -> object:
    """The time of the checkpoint an event is of (its own, or its write's)."""
    cid = event.get("id") if event.get("lg") == "c" else event.get("c")
    for checkpoint in checkpoints:
        if checkpoint.checkpoint["id"] == cid:
            return checkpoint.checkpoint.get("ts")
    return None
