"""The async twins of the PostgreSQL backend and storage (imported on first use:
they need psycopg).

:class:`AsyncPostgresCheckpointer` is native: every call is a coroutine on
psycopg's :class:`~psycopg_pool.AsyncConnectionPool`, so the loop never waits
for the network — no writer thread, no thread hop, reads included. Appends
queued in one turn of the loop go out as one group (one statement alone;
several in one transaction, pipelined), one group at a time, so many
coroutines share commits as they do on the SQLite writer thread. Followers
are woken by ``LISTEN``/``NOTIFY`` on a listening connection that a task of
the loop holds while followers run.

:class:`AsyncPostgresStorage` is the four stores, on one writer thread over
the synchronous :class:`~agentlog.PostgresStorage` (as for SQLite).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from typing import Any, Literal, TypeVar, overload

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from ..engine.postgres import (
    DEFAULT_SCHEMA,
    MAX_SEQ,
    Statements,
    check_schema_name,
    connect_options,
    migrate_schema,
    notify_key,
    oversized_batch,
    pool_sizes,
    retained_start,
    statement_timeout_sql,
    translate_errors,
)
from ..engine.schema import DEFAULT_TENANT
from ..errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    EventsPrunedError,
    SessionExistsError,
    SessionNotFoundError,
    SessionTruncatedError,
    StorageDataError,
)
from ..events import (
    EncodedBatch,
    SessionEvent,
    SessionInfo,
    SessionListing,
    SessionMetadata,
    StoredEvent,
    check_flag,
    check_identifier,
    check_poll_interval,
    check_retained,
    check_seq,
    check_session_id,
    encode_events,
    encode_metadata,
)
from ..integrity import checked_payloads, checksum
from ..lifecycle import AsyncClosable
from ..log import (
    DEFAULT_POLL_INTERVAL,
    check_fork,
    check_revision,
    decode_metadata,
    metadata_conflict,
)
from ..log.postgres import PostgresCheckpointer
from ..stores.postgres import PostgresStorage
from .handle import AsyncSession
from .stores import AsyncStorage
from .writer import off_loop

__all__ = ["AsyncPostgresCheckpointer", "AsyncPostgresStorage"]

_T = TypeVar("_T")
_PAGE = 1000
#: A queued append: ``(session_id, expected_head, batch, the caller's future)``.
_Job = tuple[str, "int | None", EncodedBatch, "asyncio.Future[int]"]


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class AsyncPostgresCheckpointer(AsyncClosable):
    """:class:`~agentlog.PostgresCheckpointer` as coroutines, on an async pool.

    Takes the synchronous backend's arguments; ``target`` is a connection
    string or a :class:`psycopg_pool.AsyncConnectionPool` (autocommit
    connections; used, never closed here). The schema is created or
    migrated when the object is made, on a short-lived connection of its own
    (the one blocking step, as opening a SQLite file is). The pool opens on
    the first call; use the object from one event loop.

    * An append is the synchronous backend's one statement, awaited. The
      appends queued in one turn of the loop (or while the previous group
      was being written) go out together: one alone is one statement and
      one round trip; several are one transaction, their statements
      pipelined when each names another session. A conflict refuses only
      its own append. Cancelled before its group was sent, an append is
      never written; after, its group writes or refuses it as a whole and
      the caller sees ``CancelledError`` either way — ``head()`` tells which.
    * Errors are the synchronous backend's: ``StorageUnavailableError`` for
      a lost or unreachable server and for timeouts; reads are tried again
      on the pool's next connection when the server dropped theirs.
    * ``follow()`` is an async iterator woken by this object's writes at once
      and by other processes' through ``NOTIFY``; it polls the head every
      ``poll_interval`` while the listening connection is down.
    * ``aclose()`` refuses new calls, lets the calls already running finish,
      then closes the pool and ends waiting followers with
      :class:`CheckpointerClosedError`.
    """

    def __init__(
        self,
        target: str | AsyncConnectionPool[Any],
        *,
        tenant: str = DEFAULT_TENANT,
        schema: str = DEFAULT_SCHEMA,
        pool_min_size: int = 1,
        pool_max_size: int = 8,
        pool_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        statement_timeout_ms: int | None = 30_000,
        notify: bool = True,
    ) -> None:
        self._tenant = check_identifier(tenant, "tenant", StorageDataError)
        self._schema = check_schema_name(schema)
        self._q = Statements(self._schema)
        self._channel = f"agentlog.{self._schema}"
        self._notify = notify
        self._closed = False
        if isinstance(target, AsyncConnectionPool):
            conninfo, kwargs = target.conninfo, target.kwargs
            if not isinstance(conninfo, str):
                raise TypeError("the pool must have a connection string, not a callable")
            # The schema's migration and the listener connect with these too.
            self._conninfo: str = conninfo
            self._kwargs: dict[str, Any] = dict(kwargs) if isinstance(kwargs, dict) else {}
            self._pool: AsyncConnectionPool[Any] = target
            self._owns_pool = False
        elif isinstance(target, str):
            self._conninfo = target
            self._kwargs = connect_options(connect_timeout)
            configure = None
            if statement_timeout_ms is not None:
                bound = statement_timeout_sql(statement_timeout_ms)

                async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
                    await conn.execute(bound)

            self._pool = AsyncConnectionPool(
                target,
                kwargs=self._kwargs,
                **pool_sizes(pool_min_size, pool_max_size, pool_timeout),
                configure=configure,
                open=False,
                name=f"agentlog-async-{self._schema}",
            )
            self._owns_pool = True
        else:
            raise TypeError(
                "target must be a connection string or a psycopg_pool.AsyncConnectionPool,"
                f" not {type(target).__name__}"
            )
        kwargs = dict(self._kwargs, autocommit=True)
        with (
            translate_errors("opening the store"),
            psycopg.connect(self._conninfo, **kwargs) as conn,
        ):
            migrate_schema(conn, self._schema)
        self._opening: asyncio.Future[None] | None = None
        self._running = 0
        self._drained: asyncio.Event | None = None
        # Following: commits seen (this object's writes, notifications, the
        # listener's state), the followers waiting for the next, and per
        # session key the followers and the notifications seen.
        self._commits = 0
        self._waiting: set[asyncio.Future[None]] = set()
        self._watchers: dict[str, int] = {}
        self._notified: dict[str, int] = {}
        self._listener: asyncio.Task[None] | None = None
        self._generation = 0
        self._listening = False
        self._sync: PostgresCheckpointer | None = None
        # Appends queued in this turn of the loop, and the groups being written.
        self._queued: builtins.list[_Job] = []
        self._groups: set[asyncio.Task[None]] = set()
        #: How many groups of appends have been written.
        self.write_groups = 0

    # -- state -------------------------------------------------------------------------

    @property
    def tenant(self) -> str:
        """The tenant whose sessions this checkpointer reads and writes."""
        return self._tenant

    @property
    def schema(self) -> str:
        """The PostgreSQL schema the store lives in."""
        return self._schema

    @property
    def closed(self) -> bool:
        """Whether closing has begun (later calls raise)."""
        return self._closed

    @property
    def backend(self) -> PostgresCheckpointer:
        """A synchronous checkpointer on the same store and tenant (made on first use).

        For a thread that cannot await; it has a small pool of its own and
        closes with this object. Its writes wake this object's followers
        through ``NOTIFY``.
        """
        self._check_open()
        if self._sync is None:
            self._sync = PostgresCheckpointer(
                self._conninfo,
                tenant=self._tenant,
                schema=self._schema,
                pool_max_size=2,
                notify=self._notify,
            )
        return self._sync

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(f"this {type(self).__name__} is closed")

    @contextlib.asynccontextmanager
    async def _call(self) -> AsyncIterator[None]:
        """One call: refused once closed; counted until it ends (aclose waits)."""
        self._check_open()
        self._running += 1
        try:
            opening = self._opening
            if opening is None:
                opening = self._opening = asyncio.ensure_future(self._open_pool())
            try:
                # Shielded: a caller cancelled meanwhile leaves the opening whole.
                await asyncio.shield(opening)
            except Exception:
                if self._opening is opening:
                    self._opening = None  # failed: the next call tries again
                raise
            yield
        finally:
            self._running -= 1
            if self._running == 0 and self._drained is not None:
                self._drained.set()

    async def _open_pool(self) -> None:
        if self._owns_pool:
            with translate_errors("opening the pool"):
                await self._pool.open()

    @contextlib.asynccontextmanager
    async def _connection(self, what: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        with translate_errors(what):
            async with self._pool.connection() as conn:
                yield conn

    async def _read(
        self, what: str, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[_T]]
    ) -> _T:
        """``work(connection)``, tried again on the next connection when the
        server dropped the one it got (a read changes nothing)."""
        attempts = self._pool.max_size + 1
        for attempt in range(1, attempts + 1):
            with translate_errors(what):
                try:
                    async with self._pool.connection() as conn:
                        return await work(conn)
                except (PoolTimeout, psycopg.errors.QueryCanceled):
                    raise
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt == attempts:
                        raise
        raise AssertionError("unreachable")

    # -- the log -----------------------------------------------------------------------

    async def append(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> int:
        """Append ``events`` atomically after the head; return the new head.

        The same contract as :meth:`agentlog.Checkpointer.append`, awaited.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        if expected_head is not None:
            expected_head = check_seq("expected_head", expected_head)
        batch = encode_events(events)
        if (oversized := oversized_batch(batch)) is not None:
            raise oversized
        async with self._call():
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._queued.append((session_id, expected_head, batch, future))
            if len(self._queued) == 1:
                asyncio.get_running_loop().call_soon(self._flush)
            # Cancelled before its group is sent: never written. After: the
            # group's transaction writes or refuses it as a whole.
            return await future

    def _flush(self) -> None:
        """What was queued goes out as one group: once per turn of the loop,
        or, while a group is being written, when it is done (so a busy
        checkpointer writes larger groups, one transaction at a time)."""
        if self._groups:
            return
        jobs, self._queued = self._queued, []
        jobs = [job for job in jobs if not job[3].done()]  # cancelled ones are out
        if not jobs:
            return
        self._running += 1
        task = asyncio.ensure_future(self._write_group(jobs))
        self._groups.add(task)
        task.add_done_callback(self._group_done)

    def _group_done(self, task: asyncio.Task[None]) -> None:
        self._groups.discard(task)
        if self._queued:
            self._flush()
        self._running -= 1
        if self._running == 0 and self._drained is not None:
            self._drained.set()

    async def _write_group(self, jobs: builtins.list[_Job]) -> None:
        """One append alone (one statement), or several in one transaction."""
        ts = time.time()
        results: builtins.list[int | CheckpointConflictError] = []
        try:
            async with self._connection("appending") as conn:
                if len(jobs) == 1:
                    name, expected, batch, _ = jobs[0]
                    results = [await self._append_or_conflict(conn, name, expected, ts, batch)]
                else:
                    async with conn.transaction():
                        results = await self._append_group_on(conn, jobs, ts)
        except Exception as exc:  # the whole group failed: each caller hears
            for *_, future in jobs:
                if not future.done():
                    future.set_exception(exc)
            return
        for (*_, future), result in zip(jobs, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)
        self.write_groups += 1
        self._commit()

    async def _append_or_conflict(
        self,
        conn: psycopg.AsyncConnection[Any],
        name: str,
        expected: int | None,
        ts: float,
        batch: EncodedBatch,
    ) -> int | CheckpointConflictError:
        try:
            return await self._append_on(conn, name, expected, ts, batch)
        except CheckpointConflictError as exc:
            return exc

    async def _append_group_on(
        self, conn: psycopg.AsyncConnection[Any], jobs: builtins.list[_Job], ts: float
    ) -> builtins.list[int | CheckpointConflictError]:
        """The appends of a group in the caller's transaction, sessions in id order
        (so that two groups never deadlock). One append per session: sent as
        one pipeline. Else one after another."""
        results: builtins.list[int | CheckpointConflictError] = [0] * len(jobs)
        order = sorted(range(len(jobs)), key=lambda index: jobs[index][0])
        names = {job[0] for job in jobs}
        simple = all(batch and (exp is None or exp <= MAX_SEQ) for _, exp, batch, _ in jobs)
        if len(names) < len(jobs) or not simple:
            for index in order:
                name, expected, batch, _ = jobs[index]
                results[index] = await self._append_or_conflict(conn, name, expected, ts, batch)
            return results
        refused = []
        async with conn.pipeline():
            sent = []
            for index in order:
                name, expected, batch, _ = jobs[index]
                cur = conn.cursor()
                await cur.execute(*self._append_statement(name, expected, ts, batch))
                sent.append((index, cur))
            for index, cur in sent:
                row = await cur.fetchone()
                if row is None:
                    refused.append(index)
                else:
                    results[index] = int(row[0])
        for index in refused:
            name, expected, batch, _ = jobs[index]
            results[index] = await self._append_or_conflict(conn, name, expected, ts, batch)
        return results

    def _append_statement(
        self, name: str, expected: int | None, ts: float, batch: EncodedBatch
    ) -> tuple[str, dict[str, Any]]:
        params = {
            "t": self._tenant,
            "name": name,
            "n": len(batch),
            "ts": ts,
            "exp": expected,
            "types": [kind for kind, _ in batch],
            "payloads": [payload for _, payload in batch],
            "crcs": [checksum(payload) for _, payload in batch],
            "channel": self._channel,
            "key": notify_key(self._tenant, name),
        }
        return self._q.append[not expected, self._notify], params

    async def _append_on(
        self,
        conn: psycopg.AsyncConnection[Any],
        name: str,
        expected: int | None,
        ts: float,
        batch: EncodedBatch,
    ) -> int:
        if expected is not None and expected > MAX_SEQ:
            raise CheckpointConflictError(name, expected, await self._head_on(conn, name))
        if not batch:
            head = await self._head_on(conn, name)
            if expected is not None and expected != head:
                raise CheckpointConflictError(name, expected, head)
            return head
        statement, params = self._append_statement(name, expected, ts, batch)
        while True:
            row = await (await conn.execute(statement, params)).fetchone()
            if row is not None:
                return int(row[0])
            head = await self._head_on(conn, name)
            if expected is not None and head != expected:
                raise CheckpointConflictError(name, expected, head)

    async def _head_on(self, conn: psycopg.AsyncConnection[Any], name: str) -> int:
        row = await (await conn.execute(self._q.head, (self._tenant, name))).fetchone()
        return 0 if row is None else int(row[0])

    async def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        """Yield the events after ``since_seq`` in seq order, a keyset page at a time."""
        self._check_open()
        session_id = check_session_id(session_id)
        since = check_seq("since_seq", since_seq)
        remaining = None if limit is None else check_seq("limit", limit)
        while True:
            want = _PAGE if remaining is None else min(_PAGE, remaining)
            if want == 0:
                return
            try:
                page, damage = await self._checked_scan(session_id, since, want), None
            except CorruptDatabaseError as exc:
                # The events before a damaged one first (as the sync base class does).
                if exc.seq is None or not since + 1 < exc.seq <= since + want:
                    raise
                page = await self._checked_scan(session_id, since, exc.seq - 1 - since)
                damage = exc
            for event in page:
                yield event
            if damage is not None:
                raise damage
            if len(page) < want:
                return
            since = page[-1].seq
            if remaining is not None:
                remaining -= len(page)

    async def _checked_scan(self, name: str, since: int, limit: int) -> builtins.list[StoredEvent]:
        """A page after ``since``, or :class:`EventsPrunedError` when retention pruned
        the events right after it (the rule of ``BaseCheckpointer.read``)."""
        page = await self._scan(name, since, limit)
        if page:
            first = page[0].seq
        else:

            async def retained(conn: psycopg.AsyncConnection[Any]) -> Any:
                return await (await conn.execute(self._q.retained, (self._tenant, name))).fetchone()

            async with self._call():
                first = retained_start(await self._read("reading", retained))
        if first > since + 1:
            raise EventsPrunedError(name, since, first)
        return page

    async def _check_retained(
        self, cur: psycopg.AsyncCursor[Any], name: str, what: str, point: int, head: int
    ) -> None:
        """Inside a write: refuse to go back below what retention left."""
        await cur.execute(self._q.first_seq, (self._tenant, name))
        found = await cur.fetchone()
        first = head + 1 if found is None else int(found[0])
        if first > 1:
            await cur.execute(self._q.oldest_snapshot, (self._tenant, name))
            oldest = await cur.fetchone()
            check_retained(name, what, point, first, None if oldest is None else oldest[0])

    async def _scan(self, name: str, since: int, limit: int) -> builtins.list[StoredEvent]:
        if since >= MAX_SEQ:
            return []

        async def page(conn: psycopg.AsyncConnection[Any]) -> builtins.list[Any]:
            async with conn.cursor(binary=True) as cur:
                await cur.execute(self._q.scan, (self._tenant, name, since, limit))
                return await cur.fetchall()

        async with self._call():
            rows = await self._read("reading", page)
        if not rows:
            return []
        events = checked_payloads(name, rows)
        return [
            StoredEvent(seq, seq - 1, ts, kind, event)
            for (seq, ts, kind, _, _), event in zip(rows, events, strict=True)
        ]

    async def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        session_id = check_session_id(session_id) if not self._closed else session_id
        async with self._call():
            return await self._read(
                "reading the head", lambda conn: self._head_on(conn, session_id)
            )

    @overload
    async def list(self) -> builtins.list[SessionInfo]: ...

    @overload
    async def list(self, *, with_metadata: Literal[False]) -> builtins.list[SessionInfo]: ...

    @overload
    async def list(self, *, with_metadata: Literal[True]) -> builtins.list[SessionListing]: ...

    async def list(
        self, *, with_metadata: bool = False
    ) -> builtins.list[SessionInfo] | builtins.list[SessionListing]:
        """Every session of the tenant, most recently active first (with
        ``with_metadata=True``, :class:`~agentlog.SessionListing` rows)."""
        with_metadata = check_flag("with_metadata", with_metadata)
        query = self._q.list_metadata if with_metadata else self._q.list

        async def rows(conn: psycopg.AsyncConnection[Any]) -> builtins.list[Any]:
            return await (await conn.execute(query, (self._tenant,))).fetchall()

        async with self._call():
            found = await self._read("listing", rows)
        if with_metadata:
            return [
                SessionListing(str(n), float(m), int(h), decode_metadata(d), int(r))
                for n, m, h, d, r in found
            ]
        return [SessionInfo(str(n), float(m), int(h)) for n, m, h in found]

    async def metadata(self, session_id: str) -> SessionMetadata:
        """The session's metadata and revision (see :meth:`agentlog.BaseCheckpointer.metadata`)."""
        session_id = check_session_id(session_id) if not self._closed else session_id

        async def row(conn: psycopg.AsyncConnection[Any]) -> Any:
            return await (
                await conn.execute(self._q.metadata, (self._tenant, session_id))
            ).fetchone()

        async with self._call():
            found = await self._read("reading metadata", row)
        if found is None:
            return SessionMetadata(None, 0)
        return SessionMetadata(decode_metadata(found[0]), int(found[1]))

    async def set_metadata(self, session_id: str, value: Any, expected_revision: int) -> int:
        """Compare-and-set the metadata on the session's revision; return the new
        one (see :meth:`agentlog.BaseCheckpointer.set_metadata`)."""
        self._check_open()
        session_id = check_session_id(session_id)
        expected = check_revision(expected_revision)
        data = encode_metadata(value)
        tenant, ts, q = self._tenant, time.time(), self._q
        async with (
            self._call(),
            self._connection("setting metadata") as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            row = await (await cur.execute(q.revision_for_update, (tenant, session_id))).fetchone()
            if row is None:
                if expected == 0:
                    created = await (
                        await cur.execute(
                            q.create_with_metadata, (tenant, session_id, ts, ts, data)
                        )
                    ).fetchone()
                    if created is not None:
                        return int(created[0])
                row = await (await cur.execute(q.metadata, (tenant, session_id))).fetchone()
            actual = 0 if row is None else int(row[-1])
            if actual == expected:
                done = await (
                    await cur.execute(q.set_metadata, (data, ts, tenant, session_id, expected))
                ).fetchone()
                if done is not None:
                    return int(done[0])
                row = await (await cur.execute(q.metadata, (tenant, session_id))).fetchone()
                actual = 0 if row is None else int(row[-1])
            raise metadata_conflict(session_id, expected, actual)

    async def session(self, session_id: str, *, shape: str = "anthropic") -> AsyncSession:
        """An :class:`~agentlog.aio.AsyncSession` on ``session_id``, resumed by replay."""
        return await AsyncSession.open(self, session_id, shape=shape)

    async def _notify_on(self, cur: psycopg.AsyncCursor[Any], name: str, head: int) -> None:
        if self._notify:
            payload = f"{head} {notify_key(self._tenant, name)}"
            await cur.execute(self._q.notify, (self._channel, payload))

    async def delete(self, session_id: str) -> None:
        """Remove the session and its events; idempotent."""
        session_id = check_session_id(session_id) if not self._closed else session_id
        key = (self._tenant, session_id)
        async with (
            self._call(),
            self._connection("deleting") as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            await cur.execute(self._q.delete_session, key)
            if await cur.fetchone() is None:
                return
            await cur.execute(self._q.delete_events, key)
            await cur.execute(self._q.delete_snapshots, key)
            await self._notify_on(cur, session_id, 0)
        self._commit()

    async def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove the events after ``to_seq``; return the new head."""
        self._check_open()
        session_id = check_session_id(session_id)
        to_seq = check_seq("to_seq", to_seq)
        key = (self._tenant, session_id)
        async with (
            self._call(),
            self._connection("truncating") as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            await cur.execute(self._q.head_for_update, key)
            row = await cur.fetchone()
            if row is None:
                return 0
            if to_seq >= int(row[0]):
                return int(row[0])
            await self._check_retained(cur, session_id, "truncate", to_seq, int(row[0]))
            await cur.execute(self._q.cut_events, (*key, to_seq))
            await cur.execute(self._q.cut_snapshots, (*key, to_seq))
            await cur.execute(self._q.set_head, (to_seq, time.time(), *key))
            await self._notify_on(cur, session_id, to_seq)
        self._commit()
        return to_seq

    async def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        """Create ``new_session_id`` holding events 1…``at_seq``; return its head."""
        self._check_open()
        session_id, at_seq, new_session_id = check_fork(session_id, at_seq, new_session_id)
        tenant, ts = self._tenant, time.time()
        async with (
            self._call(),
            self._connection("forking") as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            await cur.execute(self._q.head + " FOR SHARE", (tenant, session_id))
            row = await cur.fetchone()
            if row is None:
                raise SessionNotFoundError(f"no session {session_id!r} to fork")
            if at_seq > int(row[0]):
                raise ValueError(f"cannot fork {session_id!r} at {at_seq}: its head is {row[0]}")
            await self._check_retained(cur, session_id, "fork", at_seq, int(row[0]))
            await cur.execute(self._q.create_session, (tenant, new_session_id, at_seq, ts, ts))
            if await cur.fetchone() is None:
                raise SessionExistsError(f"session {new_session_id!r} already exists")
            await cur.execute(self._q.copy_events, (new_session_id, tenant, session_id, at_seq))
            await cur.execute(self._q.copy_snapshots, (new_session_id, tenant, session_id, at_seq))
            await self._notify_on(cur, new_session_id, at_seq)
        self._commit()
        return at_seq

    # -- following ---------------------------------------------------------------------

    def _commit(self) -> None:
        """Something committed (or the listener changed state): wake every waiter."""
        self._commits += 1
        waiting, self._waiting = self._waiting, set()
        for future in waiting:
            _wake(future)

    async def _wait(self, mark: int, timeout: float) -> None:
        if self._commits != mark:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.add(future)
        timer = loop.call_later(timeout, _wake, future)
        try:
            await future
        finally:
            timer.cancel()
            self._waiting.discard(future)

    async def _change_token(self, session_id: str, key: str) -> Hashable:
        if self._listening and key in self._watchers:
            return ("notified", self._generation, self._notified.get(key, 0))

        async def head_and_mtime(conn: psycopg.AsyncConnection[Any]) -> Any:
            query = self._q.head_mtime
            return await (await conn.execute(query, (self._tenant, session_id))).fetchone()

        async with self._call():
            row = await self._read("reading the head", head_and_mtime)
        return ("polled", *(row or (0, 0.0)))

    async def follow(
        self,
        session_id: str,
        since_seq: int = 0,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> AsyncIterator[StoredEvent]:
        """Yield the events after ``since_seq`` as they are committed, forever.

        The rules of :meth:`agentlog.BaseCheckpointer.follow`, awaited: this
        object's writes wake it at once, other processes' through ``NOTIFY``
        (or within ``poll_interval`` while the listening connection is
        down). Stopping (``break``, ``aclose()``, cancelling the task) leaves
        no task or connection behind once the last follower stops.
        ``aclose()`` of the checkpointer ends it with
        :class:`CheckpointerClosedError`; a truncate below what it yielded
        with :class:`SessionTruncatedError`.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        last = check_seq("since_seq", since_seq)
        poll_interval = check_poll_interval(poll_interval)
        key = notify_key(self._tenant, session_id)
        self._watch(key)
        try:
            while True:
                self._check_open()
                mark = self._commits
                token = await self._change_token(session_id, key)
                head = await self.head(session_id)
                if head < last:
                    raise SessionTruncatedError(session_id, last, head)
                if head > last:
                    for event in await self._checked_scan(session_id, last, _PAGE):
                        last = event.seq
                        yield event
                    await asyncio.sleep(0)
                    continue
                while True:
                    await self._wait(mark, poll_interval)
                    self._check_open()
                    if self._commits != mark:
                        break
                    if await self._change_token(session_id, key) != token:
                        break
        finally:
            await self._unwatch(key)

    def _watch(self, key: str) -> None:
        self._watchers[key] = self._watchers.get(key, 0) + 1
        if self._notify and self._listener is None:
            self._listener = asyncio.ensure_future(self._listen())

    async def _unwatch(self, key: str) -> None:
        count = self._watchers.get(key, 0) - 1
        if count > 0:
            self._watchers[key] = count
        else:
            self._watchers.pop(key, None)
            self._notified.pop(key, None)
        if not self._watchers:
            await self._stop_listening()

    async def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    async def _listen(self) -> None:
        """The listening connection, kept (re)connected while followers run."""
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))
        kwargs = dict(self._kwargs, autocommit=True)
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, **kwargs)
                try:
                    await conn.execute(listen)
                    self._generation += 1
                    self._listening = True
                    self._commit()  # anything may have been missed before
                    async for note in conn.notifies():
                        _, _, key = note.payload.partition(" ")
                        if key in self._watchers:
                            self._notified[key] = self._notified.get(key, 0) + 1
                            self._commit()
                finally:
                    self._listening = False
                    await conn.close()
            except (psycopg.Error, OSError):
                pass
            self._commit()  # lost: followers poll until it is back
            await asyncio.sleep(0.2)

    # -- closing -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Let running calls finish, then close the pool; later calls raise."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            self._drained = asyncio.Event()
            await self._drained.wait()
        await self._stop_listening()
        self._commit()  # waiting followers see the close
        if self._owns_pool:
            await self._pool.close()
        if self._sync is not None:
            await off_loop(self._sync.close)


class AsyncPostgresStorage(AsyncStorage):
    """:class:`~agentlog.PostgresStorage`, async: every write on one writer thread.

    Open it with ``await AsyncPostgresStorage.open(conninfo, schema=...)``
    (connecting and migrating off the loop), or wrap an open
    :class:`~agentlog.PostgresStorage`. Reads run on the loop: one round trip
    each.
    """

    def __init__(self, storage: PostgresStorage) -> None:
        super().__init__(storage)
        self._postgres = storage

    @classmethod
    async def open(
        cls,
        target: str | ConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        **options: Any,
    ) -> AsyncPostgresStorage:
        """Open (creating or migrating forward) the store in ``schema``, off the loop."""
        opener = functools.partial(PostgresStorage.open, target, schema=schema, **options)
        # Cancelled while it opens: the opened storage is closed, not leaked.
        return cls(await off_loop(opener, abandon=PostgresStorage.close))
