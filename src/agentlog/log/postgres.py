"""The PostgreSQL backend: one log shared by many processes on many hosts.

Needs ``pip install "agentlog[postgres]"`` (psycopg 3 and psycopg_pool);
``import agentlog`` works without them, and only naming
:class:`PostgresCheckpointer` imports them.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from psycopg_pool import ConnectionPool

from ..activity import ActivityCursor
from ..engine.postgres import (
    DEFAULT_SCHEMA,
    Listener,
    OutcomeUnknownIfLost,
    PageReader,
    PostgresDatabase,
    PostgresOptions,
    WatchedKeys,
    connection_lost,
    notify_key,
    operations,
    oversized_batch,
)
from ..engine.schema import DEFAULT_TENANT
from ..errors import StorageDataError, StorageUnavailableError
from ..events import (
    AppendKey,
    EncodedBatch,
    RawEvent,
    SessionInfo,
    SessionListing,
    StoredEvent,
    check_identifier,
    idle_cutoff,
)
from ..integrity import (
    DamagedEvent,
    Progress,
    checked_raw_page,
    describe_damage,
    session_damage,
)
from .contract import BaseCheckpointer, PreparedAppend, listings

__all__ = ["PostgresCheckpointer"]


class PostgresCheckpointer(BaseCheckpointer):
    """A checkpointer in a PostgreSQL database, shared by any number of processes.

    * ``target`` is a libpq connection string (``"host=db dbname=agents
      user=agentlog"`` or a ``postgresql://`` URI): a
      :class:`psycopg_pool.ConnectionPool` of ``pool_min_size`` to
      ``pool_max_size`` connections is made and closed with the
      checkpointer. Or pass your own ``ConnectionPool`` (its connections in
      autocommit mode); it is used and never closed here.
    * ``schema`` is the PostgreSQL schema the store lives in (created, or
      migrated forward in one transaction, on open; a store written by a
      newer agentlog is refused with :class:`SchemaVersionError` before
      anything changes). ``tenant`` is the tenant whose sessions this
      checkpointer sees.
    * An append is one statement — one round trip, one transaction — that
      moves the session's head with a compare-and-set and inserts the batch;
      writers of one session are serialised by that session's row lock
      alone, and a stale ``expected_head`` is a clean
      :class:`CheckpointConflictError`. A group (:meth:`WriterPort.append_prepared`)
      is one transaction.
    * Lost connections, a server that is gone, pool and statement timeouts
      (``statement_timeout_ms``) raise :class:`StorageUnavailableError`:
      retry; a failed append is whole or absent. An unkeyed append whose
      connection is lost raises :class:`OutcomeUnknownError` (a subclass):
      it may have committed (read the head to know). A keyed append
      (``append(..., key=...)``) in that case is tried again on another
      connection, where its key tells whether it committed: its real
      outcome is returned. The pool replaces broken connections by itself.
    * ``client_timeout`` (seconds, 60 unless told; ``None``: none) gives up a
      call whose server stops answering while its connection stays up (a
      black-holed network, which keepalives never notice): it is then a
      lost connection, never a hang.
    * ``follow()`` is woken by ``LISTEN``/``NOTIFY``: every write notifies
      the store's channel in its own transaction (``notify=False`` turns
      that off; followers then poll). While a follower runs, one listening
      connection and one thread wake it within a round trip of another
      process's commit; when that connection drops, followers poll the
      session's head every ``poll_interval`` until it is back.
    * ``create=False`` opens an existing store only (never creates the
      schema); ``read_only=True`` opens an existing store as it is and
      refuses every write with :class:`StorageUnavailableError` (on the
      server too: its connections run with ``default_transaction_read_only``).
      With either, a schema that holds no store raises
      :class:`StorageNotFoundError`, and nothing is created.

    One object is safe to share between threads. Open it after ``fork()``,
    never before: a pool's connections cannot cross into a child process.
    """

    # Spelled out rather than **options (and again in AsyncPostgresCheckpointer):
    # help(), the docs and mypy show callers every keyword with its default.
    def __init__(
        self,
        target: str | ConnectionPool[Any],
        *,
        tenant: str = DEFAULT_TENANT,
        schema: str = DEFAULT_SCHEMA,
        pool_min_size: int = 1,
        pool_max_size: int = 8,
        pool_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        statement_timeout_ms: int | None = 30_000,
        notify: bool = True,
        create: bool = True,
        read_only: bool = False,
        client_timeout: float | None = 60.0,
    ) -> None:
        self._tenant = check_identifier(tenant, "tenant", StorageDataError)
        # Handed on by name (as AsyncPostgresCheckpointer does): checked once, there.
        options = PostgresOptions(
            schema=schema,
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            pool_timeout=pool_timeout,
            connect_timeout=connect_timeout,
            statement_timeout_ms=statement_timeout_ms,
            notify=notify,
            create=create,
            read_only=read_only,
            client_timeout=client_timeout,
        )
        self._db = PostgresDatabase(target, options=options)
        self._owns_db = True
        self._init_following()

    @classmethod
    def on_database(
        cls, database: PostgresDatabase, tenant: str = DEFAULT_TENANT
    ) -> PostgresCheckpointer:
        """The Checkpointer face of an open store (it is not closed with it)."""
        self = cls.__new__(cls)
        self._tenant = check_identifier(tenant, "tenant", StorageDataError)
        self._db = database
        self._owns_db = False
        self._init_following()
        return self

    def _init_following(self) -> None:
        self._watch_lock = threading.Lock()
        self._watched = WatchedKeys()
        self._listener: Listener | None = None

    # Properties, alike in shape on every checkpointer (the async twins' too):
    # read-only views of what it was opened with, one small property each.
    @property
    def tenant(self) -> str:
        """The tenant whose sessions this checkpointer reads and writes."""
        return self._tenant

    @property
    def schema(self) -> str:
        """The PostgreSQL schema the store lives in."""
        return self._db.schema

    @property
    def database(self) -> PostgresDatabase:
        """The store underneath (its pool, schema and statements)."""
        return self._db

    @property
    def read_only(self) -> bool:
        """Whether it was opened ``read_only`` (every write raises)."""
        return self._db.read_only

    def stats(self) -> dict[str, Any]:
        """What an operator looks at first, for the whole schema (every tenant).

        ``sessions``, ``tenants``, ``events``; ``relation_bytes`` (each table's
        ``pg_total_relation_size``, indexes and TOAST included) and
        ``total_bytes``; ``largest_sessions`` (the ten with the most events);
        ``schema``, ``schema_version``, ``server_version``.
        """
        self._check_open()
        return self._db.query_snapshot("reading the statistics", operations.stats, 10)

    def delete_idle(self, idle_for: float) -> builtins.list[str]:
        """Retention: delete this tenant's sessions not changed for ``idle_for``
        seconds; return their ids, oldest first.

        Safe while other processes write: each batch of 100 locks the sessions
        it picks and looks at their time on the locked rows, so a session
        appended to after the cut-off is kept.
        """
        self._check_open()
        before, batch, db = idle_cutoff(idle_for), 100, self._db
        deleted: builtins.list[str] = []
        while True:
            names = db.write(
                "deleting idle sessions",
                operations.delete_idle_batch(db.q, self._tenant, before, batch, db.notify),
            )
            deleted.extend(names)
            if len(names) < batch:
                break
        if deleted:
            self._notify_commit()
        return deleted

    def list_all_tenants(self) -> builtins.list[tuple[str, SessionInfo]]:
        """``(tenant, SessionInfo)`` for every session of every tenant, most
        recently active first (:meth:`list` shows this tenant's)."""
        self._check_open()
        return [
            (tenant, SessionInfo(name, mtime, head))
            for tenant, name, mtime, head in self._db.query("listing", operations.list_all_sessions)
        ]

    def check_integrity(
        self, deep: bool = False, progress: Progress | None = None
    ) -> tuple[bool, str]:
        """The log's shape, for every tenant: each session's events run without
        a gap up to its head (from 1, or from after what a snapshot covers)
        and every event has its session. ``deep=True`` also reads every event
        and checks its payload against its checksum (and that it decodes).
        ``(True, "ok")``, or ``(False, detail)``: one line per problem, and
        per damaged event (see :meth:`damaged_events`); ``progress``, if given,
        is told ``(sessions checked, sessions in all)`` as it goes. The server
        keeps its own pages sound (checksummed pages are a cluster setting).
        """
        self._check_open()
        problems = self._db.query_snapshot("checking the store", operations.damage_report, 20)
        lines = list(problems)
        if deep:
            lines += describe_damage(self.damaged_events(progress))
        return (not lines, "\n".join(lines) or "ok")

    def damaged_events(self, progress: Progress | None = None) -> builtins.list[DamagedEvent]:
        """Every damaged event of the store (every tenant), in session order: its
        payload fails its checksum or does not decode, or its seq is missing."""
        self._check_open()
        sessions = self._db.query("checking", operations.all_sessions)
        damaged: builtins.list[DamagedEvent] = []
        for done, (tenant, name, head, covered) in enumerate(sessions, 1):
            damaged += session_damage(tenant, name, head, covered, self._stored(tenant, name))
            if progress is not None:
                progress(done, len(sessions))
        return damaged

    def _stored(self, tenant: str, name: str) -> Iterator[tuple[int, bytes, int | None]]:
        """Every stored ``(seq, payload, crc)`` of a session, a page (one read) at a time."""
        after = 0
        while True:
            page = self._db.query("checking", operations.checked_rows, tenant, name, after)
            yield from page
            if len(page) < operations.CHECK_PAGE:
                return
            after = page[-1][0]

    # -- the primitives ------------------------------------------------------------------

    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int:
        db = self._db
        db.check_writable("appending")
        if (oversized := oversized_batch(batch)) is not None:
            raise oversized
        request = (session_id, expected_head, batch)
        append = operations.append(db.q, self._tenant, request, ts, db.notify)
        with OutcomeUnknownIfLost("appending"):
            return db.single("appending", append)

    def _append_keyed(self, append: PreparedAppend, ts: float, key: AppendKey) -> int:
        """A keyed append, resolved when its connection is lost: it is tried
        again on another connection, where the key's row tells whether the
        first try committed (then its head is returned, nothing written) —
        the claim waits for a first try the server is still finishing."""
        session_id, batch, expected_head = append
        db = self._db
        db.check_writable("appending")
        if (oversized := oversized_batch(batch)) is not None:
            raise oversized
        request = (session_id, expected_head, batch)
        # As a read: after as many tries as the pool holds connections, a fresh one.
        attempts = db.pool.max_size + 1
        for attempt in range(1, attempts + 1):
            keyed = operations.append_keyed(db.q, self._tenant, request, ts, db.notify, key)
            try:
                return db.write("appending", keyed)
            except StorageUnavailableError as exc:
                if attempt == attempts or not connection_lost(exc):
                    raise
        raise AssertionError("unreachable")

    def _append_many(
        self, appends: Sequence[PreparedAppend], ts: float
    ) -> builtins.list[int | Exception]:
        db = self._db
        db.check_writable("appending a group")
        requests = [(session_id, expected, batch) for session_id, batch, expected in appends]
        plan = operations.plan_group(requests, oversized_batch)
        group = operations.append_group(db.q, self._tenant, requests, ts, db.notify, plan)
        with OutcomeUnknownIfLost("appending a group"):
            return db.write("appending a group", group, pipelined=plan.pipelined)

    # read and read_json: each read has a page reader of its own, which asks
    # for each next page while it decodes this one.
    def _read_pages(self) -> Callable[[str, int, int], builtins.list[StoredEvent]]:
        return PageReader(self._db, self._tenant, operations.stored_page)

    def _read_json_pages(self) -> Callable[[str, int, int], builtins.list[RawEvent]]:
        return PageReader(self._db, self._tenant, checked_raw_page)

    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]:
        return self._db.query(
            "reading", operations.scan, self._tenant, session_id, since_seq, limit
        )

    def _scan_json(self, session_id: str, since_seq: int, limit: int) -> builtins.list[RawEvent]:
        return self._db.query(
            "reading", operations.scan_json, self._tenant, session_id, since_seq, limit
        )

    def _head(self, session_id: str) -> int:
        return self._db.query("reading the head", operations.head, self._tenant, session_id)

    def _first_retained(self, session_id: str) -> int:
        return self._db.query("reading", operations.first_retained, self._tenant, session_id)

    def _list(self) -> builtins.list[SessionInfo]:
        found = self._db.query("listing", operations.list_sessions, self._tenant)
        return [SessionInfo(*row) for row in found]

    def _list_metadata(self) -> builtins.list[SessionListing]:
        return listings(self._db.query("listing", operations.list_sessions_metadata, self._tenant))

    def _list_page(self, limit: int, after: ActivityCursor | None) -> builtins.list[SessionListing]:
        return listings(
            self._db.query("listing", operations.list_sessions_page, self._tenant, limit, after)
        )

    def _metadata(self, session_id: str) -> tuple[bytes | None, int]:
        return self._db.query(
            "reading metadata", operations.session_metadata, self._tenant, session_id
        )

    def _set_metadata(self, session_id: str, data: bytes, expected_revision: int, ts: float) -> int:
        db = self._db
        change = operations.set_metadata(
            db.q, self._tenant, session_id, data, expected_revision, ts
        )
        return db.write("setting metadata", change)

    def _delete(self, session_id: str) -> None:
        db = self._db
        db.write("deleting", operations.delete(db.q, self._tenant, session_id, db.notify))

    def _truncate(self, session_id: str, to_seq: int, ts: float) -> int:
        db = self._db
        cut = operations.truncate(db.q, self._tenant, session_id, to_seq, ts, db.notify)
        return db.write("truncating", cut)[0]

    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int:
        db = self._db
        copy = operations.fork(
            db.q, self._tenant, session_id, at_seq, new_session_id, ts, db.notify
        )
        return db.write("forking", copy)

    def _lineage(self, session_id: str) -> tuple[str, int] | None:
        return self._db.query("reading lineage", operations.fork_origin, self._tenant, session_id)

    def _forks(self, session_id: str) -> builtins.list[tuple[str, int]]:
        return self._db.query("reading lineage", operations.forks_of, self._tenant, session_id)

    def _close(self) -> None:
        with self._watch_lock:
            listener, self._listener = self._listener, None
            self._watched.clear()
        if listener is not None:
            listener.stop()
        if self._owns_db:
            self._db.close()

    # -- following -------------------------------------------------------------------------

    def _key(self, session_id: str) -> str:
        return notify_key(self._tenant, session_id)

    def watch(self, session_id: str) -> None:
        """A follower of ``session_id`` starts: listen for notifications.

        The first follower starts the listening connection and its thread;
        :meth:`unwatch` of the last one stops them, so no thread outlives
        its followers.
        """
        self._check_open()
        if not self._db.notify:
            return
        key = self._key(session_id)
        with self._watch_lock:
            self._watched.add(key)
            if self._listener is None:
                self._listener = Listener(
                    self._db.q, self._db.connect, self._on_notify, self._on_listener_state
                )

    def unwatch(self, session_id: str) -> None:
        """A follower of ``session_id`` stops (see :meth:`watch`)."""
        if not self._db.notify:
            return
        key = self._key(session_id)
        listener = None
        with self._watch_lock:
            if self._watched.remove(key):
                listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def _on_notify(self, head: int, key: str) -> None:
        # On the listener's thread.
        with self._watch_lock:
            if not self._watched.note(key):
                return
        self.commits.notify()

    def _on_listener_state(self) -> None:
        # Connected or lost: anything may have been missed, so every follower looks.
        self.commits.notify()

    def _change_token(self, session_id: str) -> Hashable:
        listener = self._listener
        if listener is not None and listener.connected:
            key = self._key(session_id)
            with self._watch_lock:
                if key in self._watched:
                    return ("notified", listener.generation, self._watched.notes(key))
        # Nobody listening (not yet, or the connection dropped): poll.
        polled = self._db.query(
            "reading the head", operations.head_and_mtime, self._tenant, session_id
        )
        return ("polled", *polled)
