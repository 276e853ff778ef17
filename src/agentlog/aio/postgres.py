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
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..activity import ActivityCursor, SessionPage, check_page_request, page_of
from ..engine.postgres import (
    DEFAULT_SCHEMA,
    AppendRequest,
    OutcomeUnknownIfLost,
    PostgresOptions,
    Statements,
    WatchedKeys,
    connection_lost,
    listen_async,
    notify_key,
    operations,
    oversized_batch,
)
from ..engine.postgres.aio import AsyncDatabase
from ..engine.postgres.protocol import Operation
from ..engine.schema import DEFAULT_TENANT
from ..errors import (
    CheckpointConflictError,
    CorruptDatabaseError,
    EventsPrunedError,
    OutcomeUnknownError,
    StorageDataError,
    StorageUnavailableError,
)
from ..events import (
    AppendKey,
    EncodedBatch,
    Fork,
    ForkOrigin,
    RawEvent,
    SessionEvent,
    SessionInfo,
    SessionListing,
    SessionMetadata,
    StoredEvent,
    check_identifier,
    check_poll_interval,
    check_seq,
    check_session_id,
    encode_events,
    encode_metadata,
    sorted_forks,
)
from ..log import (
    AsyncFollowPort,
    check_fork,
    check_revision,
    decode_metadata,
    follow_pages_async,
    has_new_events,
    listings,
)
from ..log.follow import Anchor, Expected, anchored_page, anchored_read, wake, woken_or_timed_out
from ..log.postgres import PostgresCheckpointer
from ..storage.postgres import PostgresStorage
from .face import AsyncLogFace
from .handle import AsyncSession
from .stores import AsyncStorage
from .writer import off_loop, outcome, settle

__all__ = ["AsyncPostgresCheckpointer", "AsyncPostgresStorage"]

_PAGE = 1000
#: An event of either kind a page is read as: decoded, or its JSON as stored.
_E = TypeVar("_E", StoredEvent, RawEvent)
#: The operation reading one checked page after ``since``: ``(q, tenant, name, since, limit)``.
_PageOf = Callable[[Statements, str, str, int, int], Operation[list[_E]]]
#: A queued append: ``(session_id, expected_head, batch, the caller's future)``.
_Job = tuple[str, "int | None", EncodedBatch, "asyncio.Future[int]"]


class AsyncPostgresCheckpointer(AsyncLogFace):
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
      ``client_timeout`` (seconds, 60 unless told; ``None``: none) gives up
      a call whose connection stops answering, as a lost connection.
    * ``follow()`` is an async iterator woken by this object's writes at once
      and by other processes' through ``NOTIFY``; it polls the head every
      ``poll_interval`` while the listening connection is down.
    * ``aclose()`` refuses new calls, lets the calls already running finish,
      then closes the pool and ends waiting followers with
      :class:`CheckpointerClosedError`.
    """

    # The keywords of PostgresCheckpointer again, each spelled out rather than
    # **options: help(), the docs and mypy show callers every one with its default.
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
        client_timeout: float | None = 60.0,
    ) -> None:
        self._tenant = check_identifier(tenant, "tenant", StorageDataError)
        # Handed on by name (as PostgresCheckpointer does): checked once, there.
        options = PostgresOptions(
            schema=schema,
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            pool_timeout=pool_timeout,
            connect_timeout=connect_timeout,
            statement_timeout_ms=statement_timeout_ms,
            notify=notify,
            client_timeout=client_timeout,
        )
        self._schema = options.schema
        self._closed = False
        self._db = AsyncDatabase(target, options=options)
        self._opening: asyncio.Future[None] | None = None
        self._running = 0
        self._drained: asyncio.Event | None = None
        # Following: commits seen (this object's writes, notifications, the
        # listener's state), the followers waiting for the next, and per
        # session key the followers and the notifications seen.
        self._commits = 0
        self._waiting: set[asyncio.Future[None]] = set()
        self._watched = WatchedKeys()
        self._listener: asyncio.Task[None] | None = None
        # Which listening task's turn it is: each start and stop moves it on.
        self._listen_turn = 0
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
    def backend(self) -> PostgresCheckpointer:
        """A synchronous checkpointer on the same store and tenant (made on first use).

        For a thread that cannot await; it has a small pool of its own and
        this object's timeouts, and it closes with this object. Its writes
        wake this object's followers through ``NOTIFY``.
        """
        self._check_open()
        if self._sync is None:
            # Every option the caller chose (its timeouts too), on a smaller pool:
            # PostgresOptions' fields are PostgresCheckpointer's keywords.
            options = dataclasses.replace(self._db.options, pool_min_size=1, pool_max_size=2)
            self._sync = PostgresCheckpointer(
                self._db.conninfo, tenant=self._tenant, **dataclasses.asdict(options)
            )
        return self._sync

    @contextlib.asynccontextmanager
    async def _call(self) -> AsyncIterator[None]:
        """One call: refused once closed; counted until it ends (aclose waits)."""
        self._check_open()
        self._running += 1
        try:
            opening = self._opening
            if opening is None:
                opening = self._opening = asyncio.ensure_future(self._db.open())
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

    # -- the log -----------------------------------------------------------------------

    async def _face_append(
        self,
        session_id: str,
        events: Iterable[SessionEvent],
        expected_head: int | None,
        key: str | None,
    ) -> int:
        session_id = check_session_id(session_id)
        if expected_head is not None:
            expected_head = check_seq("expected_head", expected_head)
        batch = encode_events(events)
        keyed = None if key is None else AppendKey.of(key, batch)
        if (oversized := oversized_batch(batch)) is not None:
            raise oversized
        if keyed is not None and batch:
            async with self._call():
                return await self._append_keyed((session_id, expected_head, batch), keyed)
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
        futures = [future for *_, future in jobs]
        try:
            results = await self._write(jobs, time.time())
        except Exception as exc:  # the whole group failed: each caller hears
            settle([(future, None, exc) for future in futures])
            return
        except BaseException as exc:
            # This task was interrupted mid-write (cancelled, Ctrl-C): no
            # caller is left waiting, and none is told it was not written.
            unknown = OutcomeUnknownError(
                f"appending: interrupted ({exc!r}) before the outcome was known; the write"
                " may or may not be in the store (append with a key to have it resolved)"
            )
            settle([(future, None, unknown) for future in futures])
            raise
        settle(
            [(future, *outcome(result)) for future, result in zip(futures, results, strict=True)]
        )
        self.write_groups += 1
        self._commit()

    async def _append_keyed(self, request: AppendRequest, key: AppendKey) -> int:
        """One keyed append (see ``PostgresCheckpointer._append_keyed``)."""
        db, ts = self._db, time.time()
        attempts = db.pool.max_size + 1
        for attempt in range(1, attempts + 1):
            append = operations.append_keyed(db.q, self._tenant, request, ts, db.notify, key)
            try:
                head: int = await db.write("appending", append)
            except StorageUnavailableError as exc:
                if attempt == attempts or not connection_lost(exc):
                    raise
                continue
            self._commit()
            return head
        raise AssertionError("unreachable")

    async def _write(self, jobs: builtins.list[_Job], ts: float) -> builtins.list[int | Exception]:
        with OutcomeUnknownIfLost("appending"):
            return await self._write_unkeyed(jobs, ts)

    async def _write_unkeyed(
        self, jobs: builtins.list[_Job], ts: float
    ) -> builtins.list[int | Exception]:
        db, tenant = self._db, self._tenant
        if len(jobs) == 1:
            name, expected, batch, _ = jobs[0]
            append = operations.append(db.q, tenant, (name, expected, batch), ts, db.notify)
            try:
                return [await db.single("appending", append)]
            except CheckpointConflictError as exc:
                return [exc]
        requests = [(name, expected, batch) for name, expected, batch, _ in jobs]
        plan = operations.plan_group(requests, oversized_batch)
        group = operations.append_group(db.q, tenant, requests, ts, db.notify, plan)
        return await db.write("appending", group, pipelined=plan.pipelined)

    def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        """Yield the events after ``since_seq`` in seq order, a keyset page at a time."""
        return self._read(operations.checked_page, session_id, since_seq, limit)

    def read_json(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[RawEvent]:
        """:meth:`read`, each event as a :class:`~agentlog.RawEvent` (its stored
        JSON bytes, checked against its checksum, not decoded): the rules of
        :meth:`agentlog.BaseCheckpointer.read_json`, awaited."""
        return self._read(operations.checked_json_page, session_id, since_seq, limit)

    async def _read(
        self, page_of: _PageOf[_E], session_id: str, since_seq: int, limit: int | None
    ) -> AsyncIterator[_E]:
        """The pages ``page_of`` reads (the arguments checked on the first
        look, as a generator's are)."""
        self._check_open()
        session_id = check_session_id(session_id)
        since = check_seq("since_seq", since_seq)
        remaining = None if limit is None else check_seq("limit", limit)
        while True:
            want = _PAGE if remaining is None else min(_PAGE, remaining)
            if want == 0:
                return
            try:
                page, damage = await self._checked_scan(page_of, session_id, since, want), None
            except CorruptDatabaseError as exc:
                # The events before a damaged one first (as the sync base class does).
                if exc.seq is None or not since + 1 < exc.seq <= since + want:
                    raise
                page = await self._checked_scan(page_of, session_id, since, exc.seq - 1 - since)
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
            del page  # as the sync base's _pages: one page held, not two

    async def _checked_scan(
        self, page_of: _PageOf[_E], name: str, since: int, limit: int
    ) -> builtins.list[_E]:
        """A page after ``since``, or :class:`EventsPrunedError` when retention pruned
        the events right after it (the rule of ``BaseCheckpointer.read``)."""
        async with self._call():
            return await self._db.query("reading", page_of, self._tenant, name, since, limit)

    async def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        session_id = check_session_id(session_id) if not self._closed else session_id
        async with self._call():
            return await self._db.query(
                "reading the head", operations.head, self._tenant, session_id
            )

    async def _face_sessions(self) -> builtins.list[SessionInfo]:
        async with self._call():
            found = await self._db.query("listing", operations.list_sessions, self._tenant)
        return [SessionInfo(*row) for row in found]

    async def _face_listings(self) -> builtins.list[SessionListing]:
        async with self._call():
            rows = await self._db.query("listing", operations.list_sessions_metadata, self._tenant)
        return listings(rows)

    async def list_page(
        self, limit: int = 50, *, after: ActivityCursor | None = None
    ) -> SessionPage:
        """A page of the tenant's sessions by activity (see
        :meth:`agentlog.BaseCheckpointer.list_page`)."""
        limit, after = check_page_request(limit, after)
        async with self._call():
            rows = await self._db.query(
                "listing", operations.list_sessions_page, self._tenant, limit + 1, after
            )
        return page_of(listings(rows), limit)

    async def metadata(self, session_id: str) -> SessionMetadata:
        """The session's metadata and revision (see :meth:`agentlog.BaseCheckpointer.metadata`)."""
        session_id = check_session_id(session_id) if not self._closed else session_id
        async with self._call():
            data, revision = await self._db.query(
                "reading metadata", operations.session_metadata, self._tenant, session_id
            )
        return SessionMetadata(decode_metadata(data), revision)

    async def lineage(self, session_id: str) -> ForkOrigin | None:
        """Where the session was forked from (see :meth:`agentlog.BaseCheckpointer.lineage`)."""
        session_id = check_session_id(session_id) if not self._closed else session_id
        async with self._call():
            origin = await self._db.query(
                "reading lineage", operations.fork_origin, self._tenant, session_id
            )
        return None if origin is None else ForkOrigin(*origin)

    async def forks(self, session_id: str) -> builtins.list[Fork]:
        """The session's forks (see :meth:`agentlog.BaseCheckpointer.forks`)."""
        session_id = check_session_id(session_id) if not self._closed else session_id
        async with self._call():
            found = await self._db.query(
                "reading lineage", operations.forks_of, self._tenant, session_id
            )
        return sorted_forks(found)

    async def set_metadata(self, session_id: str, value: Any, expected_revision: int) -> int:
        """Compare-and-set the metadata on the session's revision; return the new
        one (see :meth:`agentlog.BaseCheckpointer.set_metadata`)."""
        self._check_open()
        session_id = check_session_id(session_id)
        expected = check_revision(expected_revision)
        data = encode_metadata(value)
        db = self._db
        change = operations.set_metadata(
            db.q, self._tenant, session_id, data, expected, time.time()
        )
        async with self._call():
            return await db.write("setting metadata", change)

    async def session(self, session_id: str, *, shape: str = "anthropic") -> AsyncSession:
        """An :class:`~agentlog.aio.AsyncSession` on ``session_id``, resumed by replay."""
        return await AsyncSession.open(self, session_id, shape=shape)

    async def delete(self, session_id: str) -> None:
        """Remove the session and its events; idempotent."""
        session_id = check_session_id(session_id) if not self._closed else session_id
        db = self._db
        async with self._call():
            deleted = await db.write(
                "deleting", operations.delete(db.q, self._tenant, session_id, db.notify)
            )
        if deleted:
            self._commit()

    async def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove the events after ``to_seq``; return the new head."""
        self._check_open()
        session_id = check_session_id(session_id)
        to_seq = check_seq("to_seq", to_seq)
        db = self._db
        cut = operations.truncate(db.q, self._tenant, session_id, to_seq, time.time(), db.notify)
        async with self._call():
            head, changed = await db.write("truncating", cut)
        if changed:
            self._commit()
        return head

    async def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        """Create ``new_session_id`` holding events 1…``at_seq``; return its head."""
        self._check_open()
        session_id, at_seq, new_session_id = check_fork(session_id, at_seq, new_session_id)
        db = self._db
        copy = operations.fork(
            db.q, self._tenant, session_id, at_seq, new_session_id, time.time(), db.notify
        )
        async with self._call():
            head = await db.write("forking", copy)
        self._commit()
        return head

    # -- following ---------------------------------------------------------------------

    def _commit(self) -> None:
        """Something committed (or the listener changed state): wake every waiter."""
        self._commits += 1
        waiting, self._waiting = self._waiting, set()
        for future in waiting:
            wake(future)

    async def _wait(self, mark: int, timeout: float) -> None:
        if self._commits != mark:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.add(future)
        try:
            await woken_or_timed_out(future, timeout)
        finally:
            self._waiting.discard(future)

    async def _change_token(self, session_id: str, key: str) -> Hashable:
        if self._listening and key in self._watched:
            return ("notified", self._generation, self._watched.notes(key))

        async with self._call():
            polled = await self._db.query(
                "reading the head", operations.head_and_mtime, self._tenant, session_id
            )
        return ("polled", *polled)

    def _face_follow(
        self, session_id: str, since_seq: int, poll_interval: float
    ) -> AsyncIterator[StoredEvent]:
        return self._follow(operations.checked_page, session_id, since_seq, poll_interval)

    def _face_follow_json(
        self,
        session_id: str,
        since_seq: int,
        poll_interval: float,
        max_bytes: int | None = None,
        expect: Callable[[RawEvent], bool] | None = None,
    ) -> AsyncIterator[RawEvent]:
        return self._follow(
            operations.checked_json_page, session_id, since_seq, poll_interval, max_bytes, expect
        )

    async def _follow(
        self,
        page_of: _PageOf[_E],
        session_id: str,
        since_seq: int,
        poll_interval: float,
        max_bytes: int | None = None,
        expect: Callable[[RawEvent], bool] | None = None,
    ) -> AsyncIterator[_E]:
        """The events ``page_of`` reads as they are committed (the arguments
        checked on the first look, as a generator's are)."""
        self._check_open()
        session_id = check_session_id(session_id)
        last = check_seq("since_seq", since_seq)
        poll_interval = check_poll_interval(poll_interval)
        key = notify_key(self._tenant, session_id)

        async def look(
            after: int, anchor: Anchor | Expected | None, limit: int | None
        ) -> tuple[Hashable, builtins.list[_E]]:
            token = await self._change_token(session_id, key)
            head = await self.head(session_id)
            if not has_new_events(session_id, after, head) and after == 0:
                return token, []
            start, count = anchored_read(after, _PAGE, limit)
            try:  # from the event at the cursor, to check it (follow.anchored_page)
                read = await self._checked_scan(page_of, session_id, start, count)
            except EventsPrunedError:  # it was pruned, so never appended again
                page_size = count - (after - start)
                return token, await self._checked_scan(page_of, session_id, after, page_size)
            return token, anchored_page(session_id, after, anchor, read, head)

        async def wait(mark: int) -> bool:
            await self._wait(mark, poll_interval)
            return self._commits != mark

        port = AsyncFollowPort(
            check_open=self._check_open,
            mark=lambda: self._commits,
            look=look,
            token=lambda: self._change_token(session_id, key),
            wait=wait,
        )
        self._watch(key)
        try:
            follower = follow_pages_async(port, last, max_bytes=max_bytes, expect=expect)
            async with contextlib.aclosing(follower) as pages:
                async for page in pages:
                    for event in page:
                        yield event
                    del page  # as _pages: the next look holds no page handed out
        finally:
            await self._unwatch(key)

    def _watch(self, key: str) -> None:
        self._watched.add(key)
        if self._db.notify and self._listener is None:
            self._listen_turn += 1
            self._listener = asyncio.ensure_future(self._listen(self._listen_turn))

    async def _unwatch(self, key: str) -> None:
        if self._watched.remove(key):
            await self._stop_listening()

    async def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            self._listen_turn += 1  # its turn is over, whether it sees the cancel or not
            self._listening = False
            listener.cancel()
            # Waited for, not awaited: its CancelledError is its own, while a
            # cancellation of this caller still reaches the caller.
            await asyncio.wait({listener})
            if not listener.cancelled():
                listener.result()  # what else ended it is raised, as before

    async def _listen(self, turn: int) -> None:
        """The listening connection, kept (re)connected while followers run,
        until :meth:`_stop_listening` ends this task's ``turn``. A turn, not
        the task object: under an eager task factory this runs before the
        task is stored, and a task whose stop psycopg swallowed may still
        run beside the next one, whose state it must not touch."""
        db = self._db

        def stopping() -> bool:
            return self._listen_turn != turn

        def connected() -> None:
            if not stopping():
                self._on_listening()

        def noted(head: int, key: str) -> None:
            if not stopping():
                self._on_note(head, key)

        def lost() -> None:
            if not stopping():
                self._on_lost()

        while not stopping():
            with contextlib.suppress(psycopg.Error, OSError):
                await listen_async(
                    db.q, db.conninfo, db.connect_kwargs, connected, noted, lost, stopping
                )
            if stopping():
                return
            self._commit()  # lost: followers poll until it is back
            await asyncio.sleep(0.2)

    def _on_listening(self) -> None:
        self._generation += 1
        self._listening = True
        self._commit()  # anything may have been missed before

    def _on_lost(self) -> None:
        self._listening = False

    def _on_note(self, head: int, key: str) -> None:
        if self._watched.note(key):
            self._commit()

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
        await self._db.close()
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
