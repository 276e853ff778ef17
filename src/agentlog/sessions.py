"""The SessionStore: the tenant-aware, snapshot-capable face of the session log.

It is the same log the :class:`Checkpointer` writes — the same tables in the
same file — seen with what a multi-tenant host needs: sessions created
explicitly with metadata, a revision per session (every write through either
face adds one) for compare-and-set appends, item ids unique within a session,
and snapshot compaction. ``compact`` records a snapshot of the state through a
sequence; ``load`` returns the newest snapshot plus the items after it. The
journal is kept: compaction never deletes items (retention is a policy for
the host, not a side effect), so the Checkpointer face still reads them all.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from . import _schema as S
from ._store_common import check_page, decode
from ._store_common import encode as _encode
from ._store_common import name as _name
from ._store_common import revision as _revision
from .errors import (
    InvalidEventError,
    StorageConflictError,
    StorageDataError,
    StorageNotFoundError,
)
from .events import StoredEvent, _loads, encode_events

__all__ = [
    "InMemorySessionStore",
    "SessionLoad",
    "SessionRecord",
    "SessionStore",
    "Snapshot",
    "SqliteSessionStore",
]


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session's metadata as stored."""

    tenant_id: str
    session_id: str
    revision: int
    """0 when created; plus one per append, compaction or truncation."""
    head: int
    """The sequence of the last item; 0 when there is none."""
    metadata: Any
    snapshot_through: int | None
    """The sequence the newest snapshot covers, if there is one."""
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """State compacted from the items 1..``through_sequence``."""

    through_sequence: int
    state: Any
    created_at: float


@dataclass(frozen=True, slots=True)
class SessionLoad:
    """What :meth:`SessionStore.load` returns."""

    session: SessionRecord
    snapshot: Snapshot | None
    items: list[StoredEvent] = field(default_factory=list)


def _resource(tenant_id: str, session_id: str) -> str:
    return f"session {tenant_id!r}/{session_id!r}"


def _items(items: Iterable[Mapping[str, Any]]) -> tuple[list[tuple[str, bytes]], list[str]]:
    """Validate items (events with a string ``id``); encoded pairs and their ids."""
    items = list(items) if not isinstance(items, (Mapping, str, bytes)) else items
    try:
        encoded = encode_events(items)
    except InvalidEventError as exc:
        raise StorageDataError(f"item {exc}") from None
    except TypeError as exc:
        raise StorageDataError(str(exc)) from None
    ids = []
    for index, item in enumerate(items):
        item_id = item.get("id")
        _name(f"item {index} id", item_id)
        ids.append(item_id)
    if len(set(ids)) != len(ids):
        raise StorageDataError("item ids must be unique within the session (repeated in the batch)")
    return encoded, ids


@runtime_checkable
class SessionStore(Protocol):
    """Tenant-scoped sessions: metadata, an item journal with CAS, snapshots."""

    def create(self, tenant_id: str, session_id: str, metadata: Any = None) -> SessionRecord:
        """A new, empty session at revision 0 (a conflict when it exists)."""
        ...

    def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        """The session's record, or :class:`StorageNotFoundError`."""
        ...

    def append(
        self,
        tenant_id: str,
        session_id: str,
        expected_revision: int,
        items: Iterable[Mapping[str, Any]],
    ) -> SessionRecord:
        """Append items (events with unique ``id``s) at contiguous sequences."""
        ...

    def load(
        self,
        tenant_id: str,
        session_id: str,
        after_sequence: int | None = None,
        use_snapshot: bool = True,
        limit: int | None = None,
    ) -> SessionLoad:
        """The newest snapshot and the items after it (or the items after ``after_sequence``)."""
        ...

    def compact(
        self,
        tenant_id: str,
        session_id: str,
        expected_revision: int,
        through_sequence: int,
        state: Any,
    ) -> SessionRecord:
        """Save a snapshot of the state through ``through_sequence``."""
        ...

    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[SessionRecord]:
        """The tenant's sessions in id order, ids strictly after ``after``."""
        ...

    def delete(self, tenant_id: str, session_id: str, expected_revision: int) -> None:
        """Remove the session, its items and snapshots, if it is at ``expected_revision``."""
        ...


def _check_load_args(
    after_sequence: int | None, limit: int | None
) -> tuple[int | None, int | None]:
    try:
        after = None if after_sequence is None else _revision(after_sequence)
        count = None if limit is None else _revision(limit)
    except StorageDataError as exc:
        raise StorageDataError(
            str(exc).replace("expected_revision", "after_sequence/limit")
        ) from None
    return after, count


def _check_compact(resource: str, record: SessionRecord, through: int) -> None:
    if through > record.head:
        raise StorageDataError(
            f"{resource}: cannot compact through {through}, past the head {record.head}"
        )
    floor = record.snapshot_through or 0
    if through <= floor:
        raise StorageDataError(f"{resource}: a snapshot must advance past {floor}, not {through}")


class InMemorySessionStore:
    """A :class:`SessionStore` in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (tenant, session) -> [record, items [(ts, type, payload, id)], snapshots [Snapshot]]
        self._sessions: dict[tuple[str, str], list[Any]] = {}

    def _get(self, key: tuple[str, str]) -> list[Any]:
        found = self._sessions.get(key)
        if found is None:
            raise StorageNotFoundError(f"no {_resource(*key)}")
        return found

    @staticmethod
    def _cas(key: tuple[str, str], record: SessionRecord | None, expected: int | None) -> None:
        actual = None if record is None else record.revision
        if actual != expected:
            raise StorageConflictError(_resource(*key), expected, actual)

    def create(self, tenant_id: str, session_id: str, metadata: Any = None) -> SessionRecord:
        """A new, empty session at revision 0 (a conflict when it exists)."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        meta = _encode(metadata)
        with self._lock:
            current = self._sessions.get(key)
            self._cas(key, None if current is None else current[0], None)
            now = time.time()
            record = SessionRecord(*key, 0, 0, _loads(meta), None, now, now)
            self._sessions[key] = [record, [], []]
        return record

    def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        """The session's record, or :class:`StorageNotFoundError`."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        with self._lock:
            return self._get(key)[0]  # type: ignore[no-any-return]

    def append(
        self,
        tenant_id: str,
        session_id: str,
        expected_revision: int,
        items: Iterable[Mapping[str, Any]],
    ) -> SessionRecord:
        """Append items (events with unique ``id``s) at contiguous sequences."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        expected = _revision(expected_revision)
        encoded, ids = _items(items)
        with self._lock:
            found = self._sessions.get(key)
            self._cas(key, None if found is None else found[0], expected)
            record, journal, snapshots = found  # type: ignore[misc]
            taken = {entry[3] for entry in journal}
            for item_id in ids:
                if item_id in taken:
                    raise StorageDataError(f"{_resource(*key)}: item id {item_id!r} is taken")
            now = time.time()
            journal.extend(
                (now, kind, data, item_id)
                for (kind, data), item_id in zip(encoded, ids, strict=True)
            )
            record = SessionRecord(
                *key, record.revision + 1, len(journal), record.metadata,
                record.snapshot_through, record.created_at, now,
            )  # fmt: skip
            self._sessions[key] = [record, journal, snapshots]
        return record

    def load(
        self,
        tenant_id: str,
        session_id: str,
        after_sequence: int | None = None,
        use_snapshot: bool = True,
        limit: int | None = None,
    ) -> SessionLoad:
        """The newest snapshot and the items after it (or the items after ``after_sequence``)."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        after, count = _check_load_args(after_sequence, limit)
        with self._lock:
            record, journal, snapshots = self._get(key)
            snapshot = snapshots[-1] if use_snapshot and after is None and snapshots else None
            start = after if after is not None else (snapshot.through_sequence if snapshot else 0)
            chosen = journal[start : None if count is None else start + count]
        items = [
            StoredEvent(seq, seq - 1, ts, kind, _loads(data))
            for seq, (ts, kind, data, _) in enumerate(chosen, start + 1)
        ]
        if snapshot is not None:
            snapshot = Snapshot(
                snapshot.through_sequence, _loads(snapshot.state), snapshot.created_at
            )
        return SessionLoad(record, snapshot, items)

    def compact(
        self,
        tenant_id: str,
        session_id: str,
        expected_revision: int,
        through_sequence: int,
        state: Any,
    ) -> SessionRecord:
        """Save a snapshot of the state through ``through_sequence``."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        expected = _revision(expected_revision)
        through = _revision(through_sequence)
        data = _encode(state)
        with self._lock:
            found = self._sessions.get(key)
            self._cas(key, None if found is None else found[0], expected)
            record, journal, snapshots = found  # type: ignore[misc]
            _check_compact(_resource(*key), record, through)  # type: ignore[arg-type]
            now = time.time()
            snapshots.append(Snapshot(through, data, now))  # type: ignore[arg-type]
            record = SessionRecord(
                *key, record.revision + 1, record.head, record.metadata, through,
                record.created_at, now,
            )  # fmt: skip
            self._sessions[key] = [record, journal, snapshots]
        return record

    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[SessionRecord]:
        """The tenant's sessions in id order, ids strictly after ``after``."""
        tenant = _name("tenant_id", tenant_id)
        start, count = check_page(after, limit)
        with self._lock:
            return [
                self._sessions[(tenant, s)][0]
                for s in sorted(
                    s for t, s in self._sessions if t == tenant and (start is None or s > start)
                )
            ][:count]

    def delete(self, tenant_id: str, session_id: str, expected_revision: int) -> None:
        """Remove the session, its items and snapshots, if it is at ``expected_revision``."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        expected = _revision(expected_revision)
        with self._lock:
            record = self._get(key)[0]
            self._cas(key, record, expected)
            del self._sessions[key]


_RECORD = (
    "SELECT s.sid, s.head, s.revision, s.metadata, s.created, s.mtime,"
    " (SELECT max(through_seq) FROM snapshots WHERE sid = s.sid)"
    " FROM sessions s WHERE s.tenant = ? AND s.name = ?"
)


class SqliteSessionStore:
    """A :class:`SessionStore` on the session log's own tables."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def _record(self, conn: Any, key: tuple[str, str]) -> tuple[int, SessionRecord] | None:
        rows = self._engine._rows(conn, _RECORD, key)
        if not rows:
            return None
        sid, head, revision, meta, created, updated, through = rows[0]
        metadata = None if meta is None else decode(meta, _resource(*key))
        return sid, SessionRecord(*key, revision, head, metadata, through, created, updated)

    def _cas(
        self, conn: Any, key: tuple[str, str], expected: int | None
    ) -> tuple[int, SessionRecord]:
        found = self._record(conn, key)
        actual = None if found is None else found[1].revision
        if actual != expected:
            raise StorageConflictError(_resource(*key), expected, actual)
        assert found is not None
        return found

    def create(self, tenant_id: str, session_id: str, metadata: Any = None) -> SessionRecord:
        """A new, empty session at revision 0 (a conflict when it exists)."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        meta = _encode(metadata)
        rows = self._engine._rows

        def work(conn: Any) -> SessionRecord:
            found = self._record(conn, key)
            if found is not None:
                raise StorageConflictError(_resource(*key), None, found[1].revision)
            sid = rows(conn, "SELECT coalesce(max(sid), 0) + 1 FROM sessions")[0][0]
            if sid > S.MAX_SID:
                raise StorageDataError("the database holds too many sessions")
            now = time.time()
            rows(
                conn,
                "INSERT INTO sessions (sid, tenant, name, head, created, mtime, revision, metadata)"
                " VALUES (?, ?, ?, 0, ?, ?, 0, ?)",
                (sid, *key, now, now, meta),
            )
            return SessionRecord(*key, 0, 0, _loads(meta), None, now, now)

        return self._engine._write("session create", work)  # type: ignore[no-any-return]

    def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        """The session's record, or :class:`StorageNotFoundError`."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        found = self._engine._read("session get", lambda conn: self._record(conn, key))
        if found is None:
            raise StorageNotFoundError(f"no {_resource(*key)}")
        return found[1]  # type: ignore[no-any-return]

    def append(
        self,
        tenant_id: str,
        session_id: str,
        expected_revision: int,
        items: Iterable[Mapping[str, Any]],
    ) -> SessionRecord:
        """Append items (events with unique ``id``s) at contiguous sequences."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        expected = _revision(expected_revision)
        encoded, ids = _items(items)
        rows = self._engine._rows

        def work(conn: Any) -> SessionRecord:
            sid, record = self._cas(conn, key, expected)
            for item_id in ids:
                if rows(
                    conn,
                    "SELECT 1 FROM events WHERE (id >> 32) = ? AND item_id = ?",
                    (sid, item_id),
                ):
                    raise StorageDataError(f"{_resource(*key)}: item id {item_id!r} is taken")
            head = record.head + len(encoded)
            if head > S.MAX_SEQ:
                raise StorageDataError(f"{_resource(*key)} would exceed {S.MAX_SEQ} items")
            now = time.time()
            for seq, ((kind, data), item_id) in enumerate(
                zip(encoded, ids, strict=True), record.head + 1
            ):
                rows(
                    conn,
                    "INSERT INTO events (id, ts, type, data, item_id) VALUES (?, ?, ?, ?, ?)",
                    (S.event_key(sid, seq), now, kind, data, item_id),
                )
            rows(conn, S.UPDATE_SESSION, (head, now, sid))
            return SessionRecord(
                *key, record.revision + 1, head, record.metadata, record.snapshot_through,
                record.created_at, now,
            )  # fmt: skip

        return self._engine._write("session append", work)  # type: ignore[no-any-return]

    def load(
        self,
        tenant_id: str,
        session_id: str,
        after_sequence: int | None = None,
        use_snapshot: bool = True,
        limit: int | None = None,
    ) -> SessionLoad:
        """The newest snapshot and the items after it (or the items after ``after_sequence``).

        One read transaction, so the snapshot and the items agree.
        """
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        after, count = _check_load_args(after_sequence, limit)
        rows = self._engine._rows

        def work(conn: Any) -> SessionLoad:
            rows(conn, "BEGIN")
            try:
                found = self._record(conn, key)
                if found is None:
                    raise StorageNotFoundError(f"no {_resource(*key)}")
                sid, record = found
                snapshot = None
                if use_snapshot and after is None and record.snapshot_through is not None:
                    through, state, created = rows(
                        conn,
                        "SELECT through_seq, state, created FROM snapshots"
                        " WHERE sid = ? AND through_seq = ?",
                        (sid, record.snapshot_through),
                    )[0]
                    snapshot = Snapshot(through, decode(state, _resource(*key)), created)
                start = (
                    after if after is not None else (snapshot.through_sequence if snapshot else 0)
                )
                stop = record.head if count is None else min(record.head, start + count)
                found_items = rows(
                    conn,
                    "SELECT id & 4294967295, ts, type, data FROM events"
                    " WHERE id > ? AND id <= ? ORDER BY id",
                    (S.event_key(sid, start), S.event_key(sid, max(start, stop))),
                )
            finally:
                rows(conn, "COMMIT")
            items = [
                StoredEvent(seq, seq - 1, ts, kind, _loads(data))
                for seq, ts, kind, data in found_items
            ]
            return SessionLoad(record, snapshot, items)

        return self._engine._read("session load", work)  # type: ignore[no-any-return]

    def compact(
        self,
        tenant_id: str,
        session_id: str,
        expected_revision: int,
        through_sequence: int,
        state: Any,
    ) -> SessionRecord:
        """Save a snapshot of the state through ``through_sequence``."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        expected = _revision(expected_revision)
        through = _revision(through_sequence)
        data = _encode(state)
        rows = self._engine._rows

        def work(conn: Any) -> SessionRecord:
            sid, record = self._cas(conn, key, expected)
            _check_compact(_resource(*key), record, through)  # type: ignore[arg-type]
            now = time.time()
            rows(
                conn,
                "INSERT INTO snapshots (sid, through_seq, state, created) VALUES (?, ?, ?, ?)",
                (sid, through, data, now),
            )
            rows(
                conn,
                "UPDATE sessions SET revision = revision + 1, mtime = ? WHERE sid = ?",
                (now, sid),
            )
            return SessionRecord(
                *key, record.revision + 1, record.head, record.metadata, through,
                record.created_at, now,
            )  # fmt: skip

        return self._engine._write("session compact", work)  # type: ignore[no-any-return]

    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[SessionRecord]:
        """The tenant's sessions in id order, ids strictly after ``after``."""
        tenant = _name("tenant_id", tenant_id)
        start, count = check_page(after, limit)
        found = self._engine._read(
            "session list",
            lambda conn: self._engine._rows(
                conn,
                "SELECT s.name, s.head, s.revision, s.metadata, s.created, s.mtime,"
                " (SELECT max(through_seq) FROM snapshots WHERE sid = s.sid)"
                " FROM sessions s WHERE s.tenant = ? AND s.name > ? ORDER BY s.name LIMIT ?",
                (tenant, "" if start is None else start, count),
            ),
        )
        return [
            SessionRecord(
                tenant,
                name,
                revision,
                head,
                None if meta is None else decode(meta, _resource(tenant, name)),
                through,
                created,
                updated,
            )
            for name, head, revision, meta, created, updated, through in found
        ]

    def delete(self, tenant_id: str, session_id: str, expected_revision: int) -> None:
        """Remove the session, its items and snapshots, if it is at ``expected_revision``."""
        key = (_name("tenant_id", tenant_id), _name("session_id", session_id))
        expected = _revision(expected_revision)
        rows = self._engine._rows

        def work(conn: Any) -> None:
            found = self._record(conn, key)
            if found is None:
                raise StorageNotFoundError(f"no {_resource(*key)}")
            sid, record = found
            if record.revision != expected:
                raise StorageConflictError(_resource(*key), expected, record.revision)
            rows(conn, S.DELETE_EVENTS_AFTER, (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)))
            rows(conn, S.DELETE_SNAPSHOTS_AFTER, (sid, -1))
            rows(conn, S.DELETE_SESSION, (sid,))

        self._engine._write("session delete", work)
