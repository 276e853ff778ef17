"""The asynchronous driver: operations (:mod:`.protocol`) awaited on psycopg's
:class:`~psycopg.AsyncConnection`, and :class:`AsyncDatabase`, a store's async pool.

The same operations as the synchronous driver (:mod:`.sync`) runs: only the
waiting differs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from .arrays import adapt
from .connect import (
    DEFAULT_OPTIONS,
    PostgresOptions,
    connect_options,
    pool_arguments,
    recovered,
    retried,
    session_settings,
    translate_errors,
    translated,
)
from .deadline import Deadlines
from .protocol import ALL, ONE, Execute, Operation, Pipeline, Step
from .schema import migrate
from .statements import Statements
from .sync import drive

__all__ = ["AsyncDatabase", "drive_async"]

_T = TypeVar("_T")
_P = ParamSpec("_P")


# sync._fetch and sync._run, awaited: the drivers are twins by design (see
# drive_async), written once for each kind of waiting, as are the two
# database classes and the listener's two loops.
async def _fetch(cur: psycopg.AsyncCursor[Any], step: Execute) -> Any:
    if step.fetch is ONE:
        return await cur.fetchone()
    if step.fetch is ALL:
        return [] if cur.description is None else await cur.fetchall()
    return cur.rowcount


async def _run(conn: psycopg.AsyncConnection[Any], step: Step, binary: bool) -> Any:
    if isinstance(step, Execute):
        cur = await conn.execute(step.statement, step.params, binary=binary or step.binary)
        return await _fetch(cur, step)
    if isinstance(step, Pipeline):
        # Results are read inside the block: a fetch syncs the pipeline once.
        async with conn.pipeline():
            sent = [
                (await conn.execute(s.statement, s.params, binary=s.binary), s) for s in step.steps
            ]
            return [await _fetch(cur, s) for cur, s in sent]
    async with conn.cursor() as cur, cur.copy(step.statement) as copy:
        for row in step.rows:
            await copy.write_row(row)
    return None


async def drive_async(
    conn: psycopg.AsyncConnection[Any], operation: Operation[_T], *, binary: bool = False
) -> _T:
    """Await ``operation`` on ``conn`` (in whatever transaction ``conn`` is in);
    its result. ``binary``: every statement's results in binary."""
    # sync.drive's loop, awaited: the one place the two drivers differ (as
    # psycopg's own wait and wait_async do); the operations are written once.
    adapt(conn.adapters)
    try:
        step = next(operation)
        while True:
            step = operation.send(await _run(conn, step, binary))
    except StopIteration as done:
        result: _T = done.value
        return result
    finally:
        operation.close()


class AsyncDatabase:
    """One agentlog store in one PostgreSQL schema, over an async connection pool.

    ``target`` is a connection string (the pool is made here, opened by
    :meth:`open`, closed by :meth:`close`) or a
    :class:`psycopg_pool.AsyncConnectionPool` (autocommit connections; used,
    never opened or closed here). The schema is created or migrated when the
    object is made, on a short-lived connection of its own.

    ``options`` are :class:`~.sync.PostgresDatabase`'s. Their
    ``client_timeout`` bounds each call on a connection on the client's
    side, as the synchronous driver's does (see :mod:`.deadline`): a
    connection that stops answering is given up, as a lost connection, and
    the pool discards it.
    """

    def __init__(
        self, target: str | AsyncConnectionPool[Any], *, options: PostgresOptions = DEFAULT_OPTIONS
    ) -> None:
        if options.read_only or not options.create:
            # Its checkpointer always opens to write, so these were never built here.
            raise ValueError(
                "the async database opens a store to write: create=True, read_only=False"
            )
        #: What it was opened with.
        self.options = options
        self.deadlines = Deadlines(options.client_timeout)
        self.schema = options.schema
        self.q = Statements(self.schema)
        self.notify = options.notify
        if isinstance(target, AsyncConnectionPool):
            conninfo, kwargs = target.conninfo, target.kwargs
            if not isinstance(conninfo, str):
                raise TypeError("the pool must have a connection string, not a callable")
            # The schema's migration and the listener connect with these too.
            self.conninfo: str = conninfo
            self.connect_kwargs: dict[str, Any] = dict(kwargs) if isinstance(kwargs, dict) else {}
            self._pool: AsyncConnectionPool[Any] = target
            self._owns_pool = False
        elif isinstance(target, str):
            self.conninfo = target
            self.connect_kwargs = connect_options(options.connect_timeout)
            settings = session_settings(options)
            configure = None
            if settings:

                async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
                    for setting in settings:
                        await conn.execute(setting)

            name = f"agentlog-async-{self.schema}"
            made = pool_arguments(self.connect_kwargs, options, configure, name)
            self._pool = AsyncConnectionPool(target, open=False, **made)
            self._owns_pool = True
        else:
            raise TypeError(
                "target must be a connection string or a psycopg_pool.AsyncConnectionPool,"
                f" not {type(target).__name__}"
            )
        kwargs = dict(self.connect_kwargs, autocommit=True)
        with (
            translate_errors("opening the store"),
            psycopg.connect(self.conninfo, **kwargs) as conn,
            conn.transaction(),
        ):
            drive(conn, migrate(self.schema))

    async def open(self) -> None:
        """Open the pool made here (nothing for one passed in)."""
        if self._owns_pool:
            with translate_errors("opening the pool"):
                await self._pool.open()

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool."""
        return self._pool

    async def close(self) -> None:
        """Close the pool made here."""
        if self._owns_pool:
            await self._pool.close()

    @contextlib.asynccontextmanager
    async def connection(self, what: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection (autocommit), with errors translated."""
        with translate_errors(what):
            async with self._pool.connection() as conn:
                with self.deadlines.watch(conn):
                    yield conn

    async def read(
        self, what: str, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[_T]]
    ) -> _T:
        """``work(connection)``, tried again on the next connection when the
        server dropped the one it got (a read changes nothing)."""
        attempts = self._pool.max_size + 1
        attempt = 0
        while True:
            attempt += 1
            with translate_errors(what):
                try:
                    async with self._pool.connection() as conn:
                        with self.deadlines.watch(conn):
                            result = await work(conn)
                except psycopg.Error as exc:
                    if not retried(what, exc, attempt, attempts):
                        raise
                    continue
            recovered(what, attempt)
            return result

    async def query(
        self,
        what: str,
        operation: Callable[Concatenate[Statements, _P], Operation[_T]],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """A read: ``operation(statements, *args)`` in autocommit, tried again on
        a lost connection (see :meth:`read`)."""

        async def work(conn: psycopg.AsyncConnection[Any]) -> _T:
            return await drive_async(conn, operation(self.q, *args, **kwargs))

        return await self.read(what, work)

    async def single(self, what: str, operation: Operation[_T]) -> _T:
        """A write of one statement (or a retry of it) in autocommit: never retried."""
        # The hot path (every append): no context manager but the pool's.
        try:
            async with self._pool.connection() as conn:
                with self.deadlines.watch(conn):
                    return await drive_async(conn, operation)
        except psycopg.Error as exc:
            raise translated(what, exc) from exc

    async def write(self, what: str, operation: Operation[_T], *, pipelined: bool = False) -> _T:
        """``operation`` in one (write) transaction; ``pipelined``: sent in pipeline
        mode, ``BEGIN`` and ``COMMIT`` included."""
        async with self.connection(what) as conn:
            if pipelined:
                async with conn.pipeline(), conn.transaction():
                    return await drive_async(conn, operation)
            async with conn.transaction():
                return await drive_async(conn, operation)
