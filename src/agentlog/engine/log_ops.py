"""The session log's operations, written once for both SQLite engines: the one
path that creates sessions and inserts events, appends (one, a group), the
cold paths (list, metadata, delete, truncate, fork) and retention.

Events arrive already validated and encoded as ``(type, json_bytes)``
pairs; pages leave as :class:`StoredEvent` objects. The hot paths
(``_append_batch``, ``scan``, ``head``) are each twin's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import (
    CheckpointConflictError,
    StorageConflictError,
    damaged_event,
    fork_past_head,
    no_session_to_fork,
    session_exists,
)
from ..events import (
    AppendKey,
    EncodedBatch,
    RawEvent,
    StoredEvent,
    check_retained,
    check_session_id,
)
from ..integrity import (
    GENESIS,
    chain_digest,
    checked_raw_page,
    checksum,
    checksum_problem,
    stored_bytes,
)
from . import migration_rows as M
from . import schema as S
from . import sql as Q
from .connections import ConnectionT, DriverConnection, EngineCore
from .errors import too_long, too_many_sessions
from .interface import AppendCompletions, Connection

__all__ = ["CHECK_PAGE", "LogOperations"]

#: Events per read of a deep check, a verify or a fork's check.
CHECK_PAGE = 1000


def _refuse_damaged(conn: DriverConnection, name: str, after: int, last: int) -> None:
    """Inside a write: raise for the first event with keys in (after, last]
    whose payload fails its checksum. A fork copies rows as they are; a
    damaged one would carry its damage on under another session's name."""
    while True:
        rows = conn.rows(Q.EVENTS_CHECKED, (after, last, CHECK_PAGE))
        for seq, payload, crc, _ in rows:
            problem = checksum_problem(stored_bytes(payload), crc)
            if problem is not None:
                raise damaged_event(name, int(seq), problem)
        if len(rows) < CHECK_PAGE:
            return
        after = (after >> S.SEQ_BITS << S.SEQ_BITS) + int(rows[-1][0])


class LogOperations(EngineCore[ConnectionT]):
    """The log's operations on the shared transactions (the hot paths: each twin's)."""

    def _append_batch(
        self, tenant: str, name: str, expected_head: int | None, ts: float, batch: EncodedBatch
    ) -> int:
        """Append a non-empty batch atomically; return the new head (the hot path)."""
        raise NotImplementedError

    def append_completions(self) -> AppendCompletions | None:
        """A channel for an event loop's appends to a writer thread; None: this
        engine has none (the C twin has; see :meth:`queue_append`)."""
        self._check_open()
        return None

    def queue_append(self, *args: Any, **kwargs: Any) -> object:
        """Refused: this engine has no writer thread to queue an append to, so
        :meth:`append_completions` gives no channel and nobody calls this (the
        C twin's is the one that queues, with the protocol's arguments)."""
        raise NotImplementedError(f"the {self.name} engine has no writer thread to queue to")

    def scan(self, tenant: str, name: str, since_seq: int, limit: int) -> list[StoredEvent]:
        """One page of events after ``since_seq``, at most ``limit`` of them."""
        raise NotImplementedError

    def scan_json(self, tenant: str, name: str, since_seq: int, limit: int) -> list[RawEvent]:
        """:meth:`scan`, each event's JSON as stored (checked against its crc,
        not decoded): written once, for both twins."""
        rows = self.read(
            "read", lambda conn: conn.rows(Q.SCAN_EVENTS, (tenant, name, since_seq, limit))
        )
        return checked_raw_page(name, rows)

    def head(self, tenant: str, name: str) -> int:
        """The session's head; 0 when it is empty or unknown."""
        raise NotImplementedError

    def head_checked(self, tenant: str, name: object) -> int:
        """``head(tenant, check_session_id(name))``: a checkpointer's ``head()``,
        one call (the C twin checks the common id without a Python call)."""
        return self.head(tenant, check_session_id(name))

    # -- the one path that creates sessions and inserts events ----------------------

    def create_session(
        self,
        conn: Connection,
        tenant: str,
        name: str,
        *,
        head: int,
        ts: float,
        revision: int,
        metadata: bytes | None = None,
        mtime: float | None = None,
    ) -> int:
        """Inside a write: insert a new session row created at ``ts`` and last
        changed at ``mtime`` (default: ``ts``); return its sid.

        The sid is one past the largest (the C engine's hot path allocates the
        same way, in C); past the bound nothing is inserted.
        """
        sid = int(conn.rows(Q.NEXT_SID)[0][0])
        if sid > S.MAX_SID:
            raise too_many_sessions()
        changed = ts if mtime is None else mtime
        conn.rows(Q.INSERT_SESSION, (sid, tenant, name, head, ts, changed, revision, metadata))
        return sid

    def insert_events(
        self,
        conn: Connection,
        sid: int,
        after_seq: int,
        events: Sequence[tuple[float, str, bytes, str | None]],
    ) -> None:
        """Inside a write: insert ``(ts, type, json, item_id)`` events at ``after_seq + 1``…."""
        if after_seq + len(events) > S.MAX_SEQ:
            raise ValueError(f"a session cannot exceed {S.MAX_SEQ} events")
        previous = self._previous_digest(conn, sid, after_seq)
        for seq, (ts, kind, data, item_id) in enumerate(events, after_seq + 1):
            digest = None
            if previous is not None:
                digest = previous = chain_digest(previous, data, seq)
            key = S.event_key(sid, seq)
            conn.rows(Q.INSERT_ITEM, (key, ts, kind, data, checksum(data), digest, item_id))

    def _previous_digest(self, conn: Connection, sid: int, seq: int) -> bytes | None:
        """Inside a write: the chain link to extend after event ``seq`` of ``sid``,
        or None when this file keeps no hash chain."""
        if not self.hash_chain:
            return None
        if seq == 0:
            return GENESIS
        rows = conn.rows(Q.EVENT_DIGEST, (S.event_key(sid, seq),))
        # An event written before the chain was kept has no link: the chain
        # starts again from nothing (verify names the event that lacks one).
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else GENESIS

    def _append_in(
        self,
        conn: ConnectionT,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
    ) -> int:
        """Inside a write: append a non-empty batch after the head; return the new head.

        A conflict or the seq bound is found before anything of this batch is
        written, so it refuses this batch alone.
        """
        rows = conn.rows(Q.SELECT_SESSION, (tenant, name))
        head = rows[0][1] if rows else 0
        if expected_head is not None and expected_head != head:
            raise CheckpointConflictError(name, expected_head, head)
        new_head = head + len(batch)
        if new_head > S.MAX_SEQ:
            raise too_long(name)
        if rows:
            sid = rows[0][0]
            conn.rows(Q.UPDATE_SESSION, (new_head, ts, sid))
        else:
            sid = self.create_session(conn, tenant, name, head=new_head, ts=ts, revision=1)
        self._insert_batch(conn, S.event_key(sid, head + 1), ts, batch)
        return new_head

    def _insert_batch(
        self, conn: ConnectionT, first_key: int, ts: float, batch: EncodedBatch
    ) -> None:
        """Insert ``batch`` at consecutive keys from ``first_key`` (a twin may do it
        faster, without a hash chain)."""
        sid, after_seq = first_key >> S.SEQ_BITS, (first_key & S.MAX_SEQ) - 1
        self.insert_events(conn, sid, after_seq, [(ts, kind, data, None) for kind, data in batch])

    def append_many(
        self, tenant: str, requests: Sequence[tuple[str, int | None, EncodedBatch]], ts: float
    ) -> list[int | Exception]:
        """Append several batches in ONE write transaction, each atomically on its own.

        ``requests`` are ``(name, expected_head, batch)``; the result holds, in
        order, each one's new head, or the error that refused it alone
        (:class:`CheckpointConflictError`, or ``ValueError`` past the seq bound).
        Any other failure rolls the whole transaction back and is raised. An
        empty batch writes nothing: its head is read (and checked) after the
        group, as :meth:`append` does.
        """
        self._check_open()
        written = self._append_group(tenant, [r for r in requests if r[2]], ts, wait=True)
        assert written is not None
        return self._with_empty_batches(tenant, requests, ts, written)

    def try_append_many(
        self, tenant: str, requests: Sequence[tuple[str, int | None, EncodedBatch]], ts: float
    ) -> list[int | Exception] | None:
        """:meth:`append_many`, only if it needs no waiting; else None, nothing written.

        It waits for nothing: not for the write lock (held by another thread
        of this process or another connection to the file), and not for the
        disk — with ``synchronous="full"`` every commit does, so the answer is
        always None.
        """
        self._check_open()
        if self.synchronous == "full":
            return None
        written = self._append_group(tenant, [r for r in requests if r[2]], ts, wait=False)
        if written is None:
            return None
        return self._with_empty_batches(tenant, requests, ts, written)

    def _with_empty_batches(
        self,
        tenant: str,
        requests: Sequence[tuple[str, int | None, EncodedBatch]],
        ts: float,
        written: list[int | Exception],
    ) -> list[int | Exception]:
        """The results of ``requests``: ``written`` for the non-empty batches, in
        order, and for each empty one its head (checked), read now."""
        if len(written) == len(requests):
            return written
        results: list[int | Exception] = []
        non_empty = iter(written)
        for name, expected_head, batch in requests:
            if batch:
                results.append(next(non_empty))
                continue
            try:
                results.append(self.append(tenant, name, expected_head, ts, batch))
            except CheckpointConflictError as exc:
                results.append(exc)
        return results

    def _append_group(
        self,
        tenant: str,
        requests: Sequence[tuple[str, int | None, EncodedBatch]],
        ts: float,
        *,
        wait: bool,
    ) -> list[int | Exception] | None:
        """Non-empty batches in one transaction (the C twin's is C); None only
        without ``wait``, when the write could not begin at once."""
        if not requests:
            return []

        def work(conn: ConnectionT) -> list[int | Exception]:
            results: list[int | Exception] = []
            for name, expected_head, batch in requests:
                try:
                    results.append(self._append_in(conn, tenant, name, expected_head, ts, batch))
                except (CheckpointConflictError, ValueError) as exc:
                    results.append(exc)
            return results

        if wait:
            return self.write("append", work)
        return self.try_write("append", work)[1]

    # -- the log's cold paths --------------------------------------------------------

    def append(
        self, tenant: str, name: str, expected_head: int | None, ts: float, batch: EncodedBatch
    ) -> int:
        """Append a batch atomically; return the new head.

        An empty batch writes nothing and returns the head (a stale
        ``expected_head`` still conflicts).
        """
        # Checked before the twin's queue and locks (a fork child must not wait on them).
        self._check_open()
        if batch:
            return self._append_batch(tenant, name, expected_head, ts, batch)
        head = self.head(tenant, name)
        if expected_head is not None and expected_head != head:
            raise CheckpointConflictError(name, expected_head, head)
        return head

    def append_keyed(
        self,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
        key: AppendKey,
    ) -> int:
        """Append a non-empty batch under ``key``, or replay the append the
        session holds under it (see ``BaseCheckpointer._append_keyed``).

        One write transaction: the look-up, the append and the key's row, so
        two processes racing the same key serialise on the write lock and the
        second one finds the first one's row. A cold path, off the twins'
        hot one: an unkeyed append never reads the keys.
        """
        self._check_open()

        def work(conn: ConnectionT) -> int:
            rows = conn.rows(Q.SELECT_SESSION, (tenant, name))
            if rows:
                found = conn.rows(Q.SELECT_APPEND_KEY, (rows[0][0], key.name))
                if found:
                    return key.replay(name, bytes(found[0][0]), int(found[0][1]))
            head = self._append_in(conn, tenant, name, expected_head, ts, batch)
            sid = rows[0][0] if rows else conn.rows(Q.SELECT_SESSION, (tenant, name))[0][0]
            conn.rows(Q.INSERT_APPEND_KEY, (sid, key.name, key.digest, head))
            return head

        return self.write("append", work)

    def find_append_key(self, tenant: str, name: str, key: str) -> tuple[bytes, int] | None:
        """``(digest, head)`` stored under the session's ``key``, or None."""
        rows = self.read(
            "append key", lambda conn: conn.rows(Q.FIND_APPEND_KEY, (tenant, name, key))
        )
        return (bytes(rows[0][0]), int(rows[0][1])) if rows else None

    def list_sessions(self, tenant: str) -> list[tuple[str, float, int]]:
        """``(name, mtime, head)`` of every session, most recently active first."""
        rows = self.read("list", lambda conn: conn.rows(Q.LIST_SESSIONS, (tenant,)))
        return [(name, mtime, head) for name, mtime, head in rows]

    def list_sessions_metadata(
        self, tenant: str
    ) -> list[tuple[str, float, int, bytes | None, int]]:
        """``(name, mtime, head, metadata json | None, revision)`` of every session,
        most recently active first (one read)."""
        rows = self.read("list", lambda conn: conn.rows(Q.LIST_SESSIONS_METADATA, (tenant,)))
        return [(n, mtime, head, meta, rev) for n, mtime, head, meta, rev in rows]

    def list_sessions_page(
        self, tenant: str, limit: int, after: tuple[float, str] | None
    ) -> list[tuple[str, float, int, bytes | None, int]]:
        """The first ``limit`` rows of :meth:`list_sessions_metadata`'s shape in
        ``(activity second, name)`` descending order after ``after`` (None: from the start)."""
        sql, args = (
            (Q.LIST_SESSIONS_PAGE, (tenant, limit))
            if after is None
            else (Q.LIST_SESSIONS_PAGE_AFTER, (tenant, after[0], after[1], limit))
        )
        rows = self.read("list", lambda conn: conn.rows(sql, args))
        return [(n, mtime, head, meta, rev) for n, mtime, head, meta, rev in rows]

    def session_metadata(self, tenant: str, name: str) -> tuple[bytes | None, int]:
        """``(metadata json | None, revision)``; ``(None, 0)`` for an unknown session."""
        rows = self.read("metadata", lambda conn: conn.rows(Q.SELECT_METADATA, (tenant, name)))
        if not rows:
            return None, 0
        meta, revision = rows[0]
        return (None if meta is None else bytes(meta)), int(revision)

    def set_session_metadata(
        self, tenant: str, name: str, data: bytes, expected_revision: int, ts: float
    ) -> int:
        """Replace the metadata if the session is at ``expected_revision`` (an
        unknown session is at 0: it is created, empty); return the new revision.

        A stale revision raises :class:`StorageConflictError`, nothing written.
        """

        def work(conn: DriverConnection) -> int:
            rows = conn.rows(Q.SELECT_REVISION, (tenant, name))
            revision = int(rows[0][1]) if rows else 0
            if revision != expected_revision:
                raise StorageConflictError(f"session {name!r}", expected_revision, revision)
            if not rows:
                self.create_session(conn, tenant, name, head=0, ts=ts, revision=1, metadata=data)
                return 1
            conn.rows(Q.SET_METADATA, (data, ts, rows[0][0]))
            return revision + 1

        return self.write("metadata", work)

    def list_all_sessions(self) -> list[tuple[str, str, float, int]]:
        """``(tenant, name, mtime, head)`` of every session of every tenant, most
        recently active first."""
        rows = self.read("list", lambda conn: conn.rows(Q.LIST_ALL_SESSIONS))
        return [(tenant, name, mtime, head) for tenant, name, mtime, head in rows]

    def delete(self, tenant: str, name: str) -> None:
        """Remove the session and all its events; nothing if it does not exist."""

        def work(conn: DriverConnection) -> None:
            for sid, _ in conn.rows(Q.SELECT_SESSION, (tenant, name)):
                self.delete_session(conn, sid)

        self.write("delete", work)

    def delete_session(self, conn: Connection, sid: int) -> None:
        """Inside a write: remove session ``sid`` with its events and snapshots."""
        conn.rows(Q.DELETE_EVENTS_BETWEEN, (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)))
        conn.rows(Q.DELETE_SNAPSHOTS_AFTER, (sid, -1))
        conn.rows(Q.DELETE_APPEND_KEYS_AFTER, (sid, -1))
        conn.rows(Q.DELETE_FORK_ORIGIN, (sid,))
        conn.rows(Q.DELETE_SESSION, (sid,))

    def truncate(self, tenant: str, name: str, to_seq: int, ts: float) -> int:
        """Remove events after ``to_seq``; return the new head."""

        def work(conn: DriverConnection) -> int:
            rows = conn.rows(Q.SELECT_SESSION, (tenant, name))
            if not rows:
                return 0
            sid, head = rows[0]
            if to_seq >= head:
                return int(head)
            self._check_retained(conn, name, sid, head, "truncate", to_seq)
            bounds = (S.event_key(sid, to_seq), S.event_key(sid, S.MAX_SEQ))
            conn.rows(Q.DELETE_EVENTS_BETWEEN, bounds)
            # A snapshot of events that are gone would resurrect them on load.
            conn.rows(Q.DELETE_SNAPSHOTS_AFTER, (sid, to_seq))
            conn.rows(Q.DELETE_APPEND_KEYS_AFTER, (sid, to_seq))
            conn.rows(Q.UPDATE_SESSION, (to_seq, ts, sid))
            return to_seq

        return self.write("truncate", work)

    def copy_prefix(self, tenant: str, name: str, at_seq: int, new_name: str, ts: float) -> int:
        """Create ``new_name`` holding events 1..``at_seq`` of ``name``."""

        def work(conn: DriverConnection) -> int:
            rows = conn.rows(Q.SELECT_SESSION, (tenant, name))
            if not rows:
                raise no_session_to_fork(name)
            sid, head = rows[0]
            if at_seq > head:
                raise fork_past_head(name, at_seq, head)
            self._check_retained(conn, name, sid, head, "fork", at_seq)
            if conn.rows(Q.SELECT_SESSION, (tenant, new_name)):
                raise session_exists(new_name)
            source = S.event_key(sid, 0)
            _refuse_damaged(conn, name, source, source + at_seq)
            new_sid = self.create_session(conn, tenant, new_name, head=at_seq, ts=ts, revision=1)
            target = S.event_key(new_sid, 0)
            conn.rows(Q.COPY_EVENTS, (source, target, source, source + at_seq))
            conn.rows(Q.COPY_SNAPSHOTS, (new_sid, sid, at_seq))
            conn.rows(Q.COPY_APPEND_KEYS, (new_sid, sid, at_seq))
            M.insert_fork_origin(conn, new_sid, tenant, (name, at_seq))
            return at_seq

        return self.write("fork", work)

    def fork_origin(self, tenant: str, name: str) -> tuple[str, int] | None:
        """``(source name, seq)`` the session was forked from; None when it
        has no record (not a fork, forked before lineage, or unknown)."""
        return self.read("lineage", lambda conn: M.source_origin(conn, tenant, name))

    def forks_of(self, tenant: str, name: str) -> list[tuple[str, int]]:
        """``(name, seq)`` of the sessions whose recorded source is ``name`` (one index range)."""
        rows = self.read("lineage", lambda conn: conn.rows(Q.FORKS_OF, (tenant, name)))
        return [(str(fork), int(seq)) for fork, seq in rows]

    # -- retention ---------------------------------------------------------------------

    def first_seq(self, conn: Connection, sid: int, head: int) -> int:
        """Inside a transaction: the seq of session ``sid``'s first stored event
        (one seek); ``head + 1`` when it holds none."""
        found = conn.rows(Q.FIRST_EVENT, (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)))
        return int(found[0][0]) if found else head + 1

    def _check_retained(
        self, conn: Connection, name: str, sid: int, head: int, what: str, point: int
    ) -> None:
        """Inside a write: refuse to go back below what retention left."""
        first = self.first_seq(conn, sid, head)
        if first > 1:
            oldest = conn.rows(Q.OLDEST_SNAPSHOT, (sid,))[0][0]
            check_retained(name, what, point, first, oldest)

    def first_retained(self, tenant: str, name: str) -> int:
        """The seq of the session's first stored event: 1 unless retention pruned
        it (``head + 1`` when it holds none; 1 for an unknown session)."""
        rows = self.read("read", lambda conn: conn.rows(Q.RETAINED, (tenant, name)))
        if not rows:
            return 1
        head, first = rows[0]
        return int(head) + 1 if first is None else int(first)

    # -- the file ----------------------------------------------------------------------

    def data_version(self) -> tuple[int, int]:
        """A token that changes when any connection commits to the file.

        ``PRAGMA data_version`` on a pooled reader; its value only compares
        with the same connection's, so the token pairs it with which reader
        answered: a new reader gives a different token (a needless look,
        never a missed commit). Compare tokens for equality only.
        """

        def work(conn: ConnectionT) -> tuple[int, int]:
            return (id(conn), int(conn.rows(Q.DATA_VERSION)[0][0]))

        return self.read("data version", work)
