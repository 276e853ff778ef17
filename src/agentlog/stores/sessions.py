"""The SessionStore: the tenant-aware, snapshot-capable face of the session log.

It is the same log the :class:`Checkpointer` writes — the same tables in the
same file — seen with what a multi-tenant host needs: sessions created
explicitly with metadata, a revision per session (every write through either
face adds one) for compare-and-set appends, item ids unique within a session,
and snapshot compaction. ``compact`` records a snapshot of the state through a
sequence; ``load`` returns the newest snapshot plus the items after it. The
journal is kept: compaction never deletes items (retention is a policy for
the host, not a side effect), so the Checkpointer face still reads them all.

Retention is that policy, explicit: ``prune`` (and ``prune_all`` for a
tenant) deletes the items a snapshot made redundant — those with sequence
at or below the newest snapshot's ``through_sequence - keep`` — and the
snapshots older than what is left. A pruned session's items then start at
its *first retained* sequence; its head, revision and ``load()`` are
unchanged, and a read from before the retained start raises
:class:`EventsPrunedError` instead of skipping what is gone.
"""

from __future__ import annotations

import builtins
import functools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..engine import schema as S
from ..engine import store_rows as R
from ..engine.commits import notify_commit
from ..engine.memory import MemoryLog, MemorySession
from ..errors import (
    EventsPrunedError,
    InvalidEventError,
    StorageDataError,
    StorageNotFoundError,
)
from ..events import StoredEvent, check_flag, check_seq, decode_json, encode_events
from ..integrity import verify_checksums
from .common import (
    EngineTransactions,
    LockedTransactions,
    Transactions,
    advance,
    check_name,
    check_revision,
    decode_value,
    encode_value,
    must_exist,
)

_T = TypeVar("_T")

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
    if isinstance(items, (Mapping, str, bytes)) or not isinstance(items, Iterable):
        raise StorageDataError(f"items must be a list of item mappings, not {type(items).__name__}")
    items = list(items)
    try:
        encoded = encode_events(items)
    except InvalidEventError as exc:
        raise StorageDataError(f"item {exc}") from None
    except TypeError as exc:
        raise StorageDataError(str(exc)) from None
    ids = []
    for index, item in enumerate(items):
        item_id = item.get("id")
        ids.append(check_name(f"item {index} id", item_id))
    if len(set(ids)) != len(ids):
        raise StorageDataError("item ids must be unique within the session (repeated in the batch)")
    return encoded, ids


def _check_load_args(
    after_sequence: int | None, limit: int | None
) -> tuple[int | None, int | None]:
    try:
        after = None if after_sequence is None else check_revision(after_sequence)
        count = None if limit is None else check_revision(limit)
    except StorageDataError as exc:
        raise StorageDataError(
            str(exc).replace("expected_revision", "after_sequence/limit")
        ) from None
    return after, count


def check_keep(keep: object) -> int:
    """``keep`` of a prune: an int >= 0 (a :class:`StorageDataError` otherwise)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise StorageDataError(f"keep must be an int >= 0, not {keep!r}")
    return keep


#: A journal entry as the primitives hand it over: ``(ts, type, json, item_id)``.
Entry = tuple[float, str, bytes, str]
#: A session's stored row: ``(handle, head, revision, metadata json | None,
#: created, updated, newest snapshot's through_sequence | None)``; the handle
#: is whatever the implementation finds the session by.
Row = tuple[Any, int, int, "bytes | None", float, float, "int | None"]


def _record(key: tuple[str, str], row: Row) -> SessionRecord:
    _, head, revision, meta, created, updated, through = row
    metadata = None if meta is None else decode_value(meta, _resource(*key))
    return SessionRecord(*key, revision, head, metadata, through, created, updated)


class SessionStore(Transactions):
    """Tenant-scoped sessions: metadata, an item journal with CAS, snapshots."""

    @staticmethod
    def _key(tenant_id: object, session_id: object) -> tuple[str, str]:
        return check_name("tenant_id", tenant_id), check_name("session_id", session_id)

    def _current(
        self, ctx: Any, key: tuple[str, str], expected: int | None
    ) -> tuple[Any, SessionRecord]:
        """The session at ``expected``: ``(handle, record)``, or a conflict
        (:class:`StorageNotFoundError` when there is none and none was expected:
        only ``create`` makes a session)."""
        row = self._get_row(ctx, key)
        if row is None and expected is None:
            raise StorageNotFoundError(f"no {_resource(*key)}")
        advance(_resource(*key), expected, None if row is None else row[2])
        assert row is not None
        return row[0], _record(key, row)

    def create(self, tenant_id: str, session_id: str, metadata: Any = None) -> SessionRecord:
        """A new, empty session at revision 0 (a conflict when it exists)."""
        key = self._key(tenant_id, session_id)
        meta = encode_value(metadata)

        def work(ctx: Any) -> SessionRecord:
            row = self._get_row(ctx, key)
            advance(_resource(*key), None, None if row is None else row[2])
            now = time.time()
            self._insert_session(ctx, key, meta, now)
            return SessionRecord(*key, 0, 0, decode_json(meta), None, now, now)

        return self._atomic("session create", work)

    def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        """The session's record, or :class:`StorageNotFoundError`."""
        key = self._key(tenant_id, session_id)
        row = self._existing("session get", _resource(*key), lambda ctx: self._get_row(ctx, key))
        return _record(key, row)

    def append(
        self,
        tenant_id: str,
        session_id: str,
        expected_revision: int,
        items: Iterable[Mapping[str, Any]],
    ) -> SessionRecord:
        """Append items (events with unique ``id``s) at contiguous sequences."""
        key = self._key(tenant_id, session_id)
        expected = check_revision(expected_revision)
        encoded, ids = _items(items)

        def work(ctx: Any) -> SessionRecord:
            handle, record = self._current(ctx, key, expected)
            for item_id in ids:
                if self._item_taken(ctx, handle, item_id):
                    raise StorageDataError(f"{_resource(*key)}: item id {item_id!r} is taken")
            head = record.head + len(encoded)
            if head > S.MAX_SEQ:
                raise StorageDataError(f"{_resource(*key)} would exceed {S.MAX_SEQ} items")
            now = time.time()
            entries = [(now, kind, data, i) for (kind, data), i in zip(encoded, ids, strict=True)]
            self._add_items(ctx, handle, record.head, entries, now)
            return replace(record, revision=record.revision + 1, head=head, updated_at=now)

        return self._atomic("session append", work)

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
        key = self._key(tenant_id, session_id)
        after, count = _check_load_args(after_sequence, limit)

        def work(ctx: Any) -> tuple[SessionRecord, Snapshot | None, list[tuple[Any, ...]]]:
            row = must_exist(_resource(*key), self._get_row(ctx, key))
            record = _record(key, row)
            snapshot = None
            if use_snapshot and after is None and record.snapshot_through is not None:
                through, state, created = self._get_snapshot(ctx, row[0], record.snapshot_through)
                snapshot = Snapshot(through, decode_value(state, _resource(*key)), created)
            start = after if after is not None else (snapshot.through_sequence if snapshot else 0)
            stop = record.head if count is None else min(record.head, start + count)
            rows = self._get_items(ctx, row[0], start, max(start, stop))
            if start < stop and (not rows or rows[0][0] != start + 1):
                # Retention pruned the items from start + 1 on: say so, never skip them.
                first = rows[0][0] if rows else self._first_seq(ctx, row[0], record.head)
                raise EventsPrunedError(key[1], start, first)
            return record, snapshot, rows

        record, snapshot, rows = self._reading("session load", work, snapshot=True)
        # Each item against its checksum; one decode call for all, as the engines decode a page.
        payloads = verify_checksums(key[1], rows)
        values = decode_value(b"[" + b",".join(payloads) + b"]", _resource(*key))
        items = [
            StoredEvent(seq, seq - 1, ts, kind, value)
            for (seq, ts, kind, _, _), value in zip(rows, values, strict=True)
        ]
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
        key = self._key(tenant_id, session_id)
        expected = check_revision(expected_revision)
        try:
            through = check_seq("through_sequence", through_sequence)
        except (TypeError, ValueError) as exc:
            raise StorageDataError(str(exc)) from None
        data = encode_value(state)

        def work(ctx: Any) -> SessionRecord:
            handle, record = self._current(ctx, key, expected)
            resource = _resource(*key)
            if through > record.head:
                raise StorageDataError(
                    f"{resource}: cannot compact through {through}, past the head {record.head}"
                )
            floor = record.snapshot_through or 0
            if through <= floor:
                raise StorageDataError(
                    f"{resource}: a snapshot must advance past {floor}, not {through}"
                )
            now = time.time()
            self._add_snapshot(ctx, handle, through, data, now)
            return replace(
                record, revision=record.revision + 1, snapshot_through=through, updated_at=now
            )

        return self._atomic("session compact", work)

    # list() and delete() take the same kind of arguments in every store (a
    # page; a compare-and-set), each store's own: a public signature each, its
    # body one helper call.
    def list(
        self, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[SessionRecord]:
        """The tenant's sessions in id order, ids strictly after ``after``."""
        return self._page("session list", tenant_id, after, limit, self._select, _record)

    def delete(self, tenant_id: str, session_id: str, expected_revision: int) -> None:
        """Remove the session, its items and snapshots, if it is at ``expected_revision``."""
        key = self._key(tenant_id, session_id)
        self._checked_delete(
            "session delete",
            _resource(*key),
            expected_revision,
            lambda ctx: self._get_row(ctx, key),
            lambda row: row[2],
            lambda ctx, row: self._remove(ctx, key, row[0]),
        )

    def prune(self, tenant_id: str, session_id: str, keep: int = 0) -> int:
        """Retention: delete the items the newest snapshot made redundant; their number.

        The items with sequence <= the newest snapshot's ``through_sequence``
        minus ``keep`` go, with the snapshots older than what is left (they
        could no longer be loaded). The newest snapshot, the items after it
        and ``keep`` items before it stay; a session without a snapshot
        keeps everything. Head, revision and ``load()`` are unchanged (so a
        compare-and-set writer never conflicts with retention); reading from
        before the retained start raises :class:`EventsPrunedError`. One
        write transaction, safe while other processes write.
        """
        key = self._key(tenant_id, session_id)
        count = check_keep(keep)

        def work(ctx: Any) -> int:
            row = must_exist(_resource(*key), self._get_row(ctx, key))
            cut, first = self._prune_point(ctx, row, count)
            if cut >= first:
                self._drop_items(ctx, row[0], cut)
            return max(0, cut - first + 1)

        return self._atomic("session prune", work)

    def prune_all(
        self, tenant_id: str, keep: int = 0, *, dry_run: bool = False, batch: int = 100
    ) -> dict[str, int]:
        """:meth:`prune` every session of the tenant that has a snapshot.

        Returns ``{session_id: items deleted}`` for the sessions that lost
        items (with ``dry_run``, what would go; nothing is deleted). The
        tenant is read ``batch`` sessions at a time and each session is
        pruned in a write transaction of its own that reads its snapshot
        afresh, so writers in other processes wait for one session at a
        time and a session deleted meanwhile is skipped.
        """
        tenant = check_name("tenant_id", tenant_id)
        count = check_keep(keep)
        check_flag("dry_run", dry_run)  # "no" would be taken for yes
        pruned: dict[str, int] = {}
        after: str | None = None
        while True:
            page = self.list(tenant, after, batch)
            for record in page:
                through = record.snapshot_through
                if through is None or through - count < 1:
                    continue
                name = record.session_id
                if dry_run:
                    look = functools.partial(self._would_prune, key=(tenant, name), keep=count)
                    gone = self._reading("session prune", look, snapshot=True)
                else:
                    try:
                        gone = self.prune(tenant, name, count)
                    except StorageNotFoundError:
                        continue  # deleted meanwhile
                if gone:
                    pruned[name] = gone
            if len(page) < batch:
                return pruned
            after = page[-1].session_id

    def _would_prune(self, ctx: Any, key: tuple[str, str], keep: int) -> int:
        row = self._get_row(ctx, key)
        if row is None:
            return 0
        cut, first = self._prune_point(ctx, row, keep)
        return max(0, cut - first + 1)

    def _prune_point(self, ctx: Any, row: Row, keep: int) -> tuple[int, int]:
        """``(cut, first)``: a prune of ``row`` deletes the items ``first``..``cut``."""
        through = row[6]
        if through is None or through - keep < 1:
            return 0, 1
        return through - keep, self._first_seq(ctx, row[0], row[1])

    # -- what an implementation supplies ------------------------------------------------

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> Row | None:
        raise NotImplementedError

    def _insert_session(self, ctx: Any, key: tuple[str, str], meta: bytes, now: float) -> None:
        """A new, empty session at revision 0."""
        raise NotImplementedError

    def _item_taken(self, ctx: Any, handle: Any, item_id: str) -> bool:
        raise NotImplementedError

    def _add_items(
        self, ctx: Any, handle: Any, head: int, entries: builtins.list[Entry], now: float
    ) -> None:
        """Insert ``entries`` after ``head``; move the head; add one revision."""
        raise NotImplementedError

    def _add_snapshot(self, ctx: Any, handle: Any, through: int, state: bytes, now: float) -> None:
        """Record a snapshot; add one revision."""
        raise NotImplementedError

    def _get_snapshot(self, ctx: Any, handle: Any, through: int) -> tuple[int, bytes, float]:
        raise NotImplementedError

    def _get_items(
        self, ctx: Any, handle: Any, start: int, stop: int
    ) -> builtins.list[tuple[Any, ...]]:
        """``(seq, ts, type, json, crc)`` of the items ``start`` < seq <= ``stop``
        (``crc`` None where none is stored)."""
        raise NotImplementedError

    def _select(
        self, ctx: Any, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        """``(session_id, row)`` in id order, ids strictly after ``after``."""
        raise NotImplementedError

    def _remove(self, ctx: Any, key: tuple[str, str], handle: Any) -> None:
        raise NotImplementedError

    def _first_seq(self, ctx: Any, handle: Any, head: int) -> int:
        """The sequence of the session's first stored item; ``head + 1`` when none is."""
        raise NotImplementedError

    def _drop_items(self, ctx: Any, handle: Any, cut: int) -> None:
        """Delete the items with sequence <= ``cut`` and the snapshots through less than
        ``cut``; head and revision stay."""
        raise NotImplementedError


class InMemorySessionStore(LockedTransactions, SessionStore):
    """A :class:`SessionStore` in this process's memory (JSON kept encoded): the
    session face of a :class:`~agentlog.engine.memory.MemoryLog`, whose
    Checkpointer face is a :class:`~agentlog.MemoryCheckpointer` on the same log.

    The handle of a session is its :class:`~agentlog.engine.memory.MemorySession`.
    """

    def __init__(self, log: MemoryLog | None = None) -> None:
        self._log = MemoryLog() if log is None else log
        super().__init__(self._log.lock)

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        result = super()._atomic(name, work)
        self._log.notify()  # the followers of the log's Checkpointer faces
        return result

    @staticmethod
    def _row(session: MemorySession) -> Row:
        through = max(session.snapshots) if session.snapshots else None
        return (session, session.head, session.revision, session.meta, session.created,
                session.mtime, through)  # fmt: skip

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> Row | None:
        found = self._log.get(*key)
        return None if found is None else self._row(found)

    def _insert_session(self, ctx: Any, key: tuple[str, str], meta: bytes, now: float) -> None:
        self._log.add(MemorySession(*key, now, revision=0, meta=meta))

    def _item_taken(self, ctx: Any, handle: MemorySession, item_id: str) -> bool:
        return any(entry[3] == item_id for entry in handle.journal)

    def _add_items(
        self, ctx: Any, handle: MemorySession, head: int, entries: builtins.list[Entry], now: float
    ) -> None:
        self._log.touch(handle, now).journal.extend(entries)

    def _add_snapshot(
        self, ctx: Any, handle: MemorySession, through: int, state: bytes, now: float
    ) -> None:
        self._log.touch(handle, now).snapshots[through] = (state, now)

    def _get_snapshot(
        self, ctx: Any, handle: MemorySession, through: int
    ) -> tuple[int, bytes, float]:
        state, created = handle.snapshots[through]
        return through, state, created

    def _get_items(
        self, ctx: Any, handle: MemorySession, start: int, stop: int
    ) -> builtins.list[tuple[Any, ...]]:
        # Python objects, not stored bytes: nothing to checksum.
        low = max(start, handle.dropped)
        entries = handle.journal[low - handle.dropped : max(low, stop) - handle.dropped]
        return [
            (seq, ts, kind, data, None) for seq, (ts, kind, data, _) in enumerate(entries, low + 1)
        ]

    def _select(
        self, ctx: Any, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        found = [s for s in self._log.sessions(tenant) if after is None or s.name > after]
        found.sort(key=lambda session: session.name)
        return [(session.name, self._row(session)) for session in found[:limit]]

    def _remove(self, ctx: Any, key: tuple[str, str], handle: MemorySession) -> None:
        self._log.remove(*key)

    def _first_seq(self, ctx: Any, handle: MemorySession, head: int) -> int:
        return handle.dropped + 1

    def _drop_items(self, ctx: Any, handle: MemorySession, cut: int) -> None:
        del handle.journal[: cut - handle.dropped]
        handle.dropped = cut
        for through in [t for t in handle.snapshots if t < cut]:
            del handle.snapshots[through]


class SqliteSessionStore(EngineTransactions, SessionStore):
    """A :class:`SessionStore` on the session log's own tables (the handle is the sid)."""

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        result = super()._atomic(name, work)
        notify_commit(self._engine)  # the log's followers, on any checkpointer of the engine
        return result

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> Row | None:
        return R.session_record(ctx, *key)

    def _insert_session(self, ctx: Any, key: tuple[str, str], meta: bytes, now: float) -> None:
        self._engine.create_session(ctx, *key, head=0, ts=now, revision=0, metadata=meta)

    def _item_taken(self, ctx: Any, handle: int, item_id: str) -> bool:
        return R.item_taken(ctx, handle, item_id)

    def _add_items(
        self, ctx: Any, handle: int, head: int, entries: builtins.list[Entry], now: float
    ) -> None:
        self._engine.insert_events(ctx, handle, head, entries)
        R.set_head(ctx, handle, head + len(entries), now)

    def _add_snapshot(self, ctx: Any, handle: int, through: int, state: bytes, now: float) -> None:
        R.add_snapshot(ctx, handle, through, state, now)

    def _get_snapshot(self, ctx: Any, handle: int, through: int) -> tuple[int, bytes, float]:
        return R.snapshot(ctx, handle, through)

    def _get_items(
        self, ctx: Any, handle: int, start: int, stop: int
    ) -> builtins.list[tuple[Any, ...]]:
        return R.items(ctx, handle, start, stop)

    def _select(
        self, ctx: Any, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        return [(row[0], (None, *row[1:])) for row in R.session_records(ctx, tenant, after, limit)]

    def _remove(self, ctx: Any, key: tuple[str, str], handle: int) -> None:
        self._engine.delete_session(ctx, handle)

    def _first_seq(self, ctx: Any, handle: int, head: int) -> int:
        return self._engine.first_seq(ctx, handle, head)

    def _drop_items(self, ctx: Any, handle: int, cut: int) -> None:
        R.drop_items(ctx, handle, cut)
