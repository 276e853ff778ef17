"""The synchronous driver: operations (:mod:`.protocol`) run on psycopg's
:class:`~psycopg.Connection`, and :class:`PostgresDatabase`, a store's pool."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from ...errors import CheckpointerClosedError, StorageUnavailableError
from . import operations as ops
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
from .journal import notify_key
from .protocol import ALL, ONE, Execute, Operation, Pipeline, Step
from .schema import open_store, schema_version
from .statements import Statements

__all__ = ["PageReader", "PostgresDatabase", "Rows", "drive", "one_transaction"]

_T = TypeVar("_T")
#: What a page is made of: events decoded, or each one's JSON as stored.
_E = TypeVar("_E")
#: A page's rows, as the scan returns them.
_Rows = list[tuple[Any, ...]]
_P = ParamSpec("_P")


def _fetch(cur: psycopg.Cursor[Any], step: Execute) -> Any:
    if step.fetch is ONE:
        return cur.fetchone()
    if step.fetch is ALL:
        return [] if cur.description is None else cur.fetchall()
    return cur.rowcount


def _run(conn: psycopg.Connection[Any], step: Step, binary: bool) -> Any:
    if isinstance(step, Execute):
        cur = conn.execute(step.statement, step.params, binary=binary or step.binary)
        return _fetch(cur, step)
    if isinstance(step, Pipeline):
        # Results are read inside the block: a fetch syncs the pipeline once.
        with conn.pipeline():
            sent = [(conn.execute(s.statement, s.params, binary=s.binary), s) for s in step.steps]
            return [_fetch(cur, s) for cur, s in sent]
    with conn.cursor() as cur, cur.copy(step.statement) as copy:
        for row in step.rows:
            copy.write_row(row)
    return None


def drive(conn: psycopg.Connection[Any], operation: Operation[_T], *, binary: bool = False) -> _T:
    """Run ``operation`` on ``conn`` (in whatever transaction ``conn`` is in); its
    result. ``binary``: every statement's results in binary."""
    adapt(conn.adapters)
    try:
        step = next(operation)
        while True:
            step = operation.send(_run(conn, step, binary))
    except StopIteration as done:
        result: _T = done.value
        return result
    finally:
        operation.close()


class Rows:
    """What a store's work runs its row operations on: a connection in its
    transaction. ``writing`` says whether this is a write transaction (there
    a record is read locked); ``notifying`` whether its writes notify followers."""

    def __init__(
        self, q: Statements, conn: psycopg.Connection[Any], writing: bool, notifying: bool
    ) -> None:
        self.q = q
        self.conn = conn
        self.writing = writing
        self.notifying = notifying

    def run(
        self,
        operation: Callable[Concatenate[Statements, _P], Operation[_T]],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """``operation(statements, *args, **kwargs)``, run in this transaction."""
        # A read's results in binary: bytea then needs no hex decoding.
        return self.perform(operation(self.q, *args, **kwargs))

    def perform(self, operation: Operation[_T]) -> _T:
        """``operation``, run in this transaction."""
        return drive(self.conn, operation, binary=not self.writing)


@contextlib.contextmanager
def one_transaction(conninfo: str, schema: str, what: str) -> Iterator[Rows]:
    """One write transaction on a connection of its own (not pooled): what a
    migration runs its operations in. Errors are translated; any failure
    rolls the whole transaction back."""
    with (
        translate_errors(what),
        psycopg.connect(conninfo, **connect_options(10.0)) as conn,
        conn.transaction(),
    ):
        yield Rows(Statements(schema), conn, True, False)


class PostgresDatabase:
    """One agentlog store in one PostgreSQL schema, over a connection pool.

    ``target`` is a libpq connection string (the pool is made and owned here)
    or a :class:`psycopg_pool.ConnectionPool` (used, never closed; its
    connections must be in autocommit mode, which the pool made here sets).
    Opening creates the schema, or migrates it forward, in one transaction,
    and refuses a store of a newer version before changing anything.
    ``options`` (:class:`.PostgresOptions`, checked when made) are the public
    openers' keywords, which they document.

    ``create=False`` opens an existing store only (migrating it forward if it
    is older); ``read_only=True`` opens an existing store as it is, changes
    nothing, and refuses every write — here, before a statement is sent, and
    on the server too (the pool's connections made here run with
    ``default_transaction_read_only``). With either, a schema that holds no
    store raises :class:`StorageNotFoundError` and nothing is created.

    ``client_timeout`` (seconds; ``None``: none) bounds each call on a
    connection on the client's side: a server or network that stops
    answering while the connection stays up (where ``statement_timeout``
    and keepalives never fire) is given up at it, as a lost connection
    (see :mod:`.deadline`).
    """

    def __init__(
        self, target: str | ConnectionPool[Any], *, options: PostgresOptions = DEFAULT_OPTIONS
    ) -> None:
        #: What it was opened with.
        self.options = options
        #: Reads tried again on another connection after a lost one (for telemetry).
        self.retries = 0
        self.deadlines = Deadlines(options.client_timeout)
        self.schema = options.schema
        self.read_only = read_only = options.read_only
        self.q = Statements(self.schema)
        #: The NOTIFY channel of this store (one per schema).
        self.channel = self.q.channel
        self.notify = options.notify
        self._closed = False
        create = options.create and not read_only
        opening = open_store(self.schema, create=create, read_only=read_only)
        if isinstance(target, ConnectionPool):
            self._pool: ConnectionPool[Any] = target
            self._owns_pool = False
            # The pool may hold callables (psycopg_pool >= 3.3): the values now.
            conninfo = target.conninfo
            kwargs = target.kwargs
            self.conninfo = conninfo() if callable(conninfo) else conninfo
            self.connect_kwargs: dict[str, Any] = dict(
                (kwargs() if callable(kwargs) else kwargs) or {}
            )
            with (
                translate_errors("opening the store"),
                self._pool.connection() as conn,
                conn.transaction(),
            ):
                self._opened_at(drive(conn, opening))
            return
        if not isinstance(target, str):
            raise TypeError(
                "target must be a connection string or a psycopg_pool.ConnectionPool,"
                f" not {type(target).__name__}"
            )
        self.conninfo = target
        self.connect_kwargs = connect_options(options.connect_timeout)
        settings = session_settings(options)
        configure = None
        if settings:

            def configure(conn: psycopg.Connection[Any]) -> None:
                for setting in settings:
                    conn.execute(setting)

        # The pool connects in the background while the store is opened on a
        # connection of its own (a wrong address fails there at once, not
        # after the pool's timeout): the first call finds a connection ready.
        made = pool_arguments(self.connect_kwargs, options, configure, f"agentlog-{self.schema}")
        self._pool = ConnectionPool(target, open=True, **made)
        self._owns_pool = True
        try:
            with (
                translate_errors("opening the store"),
                psycopg.connect(target, **self.connect_kwargs) as conn,
                conn.transaction(),
            ):
                self._opened_at(drive(conn, opening))
        except BaseException:
            self.close()
            raise

    def _opened_at(self, version: int) -> None:
        # A store opened read-only stays at its version.
        self.q.opened_at(version)

    def check_writable(self, what: str) -> None:
        """Refuse a write to a store opened ``read_only``."""
        if self.read_only:
            raise StorageUnavailableError(f"{what}: the PostgreSQL store was opened read-only")

    @property
    def schema_version(self) -> int:
        """The version of the store's schema as it is now."""
        with self.connection("reading the schema version") as conn:
            return drive(conn, schema_version(self.schema))

    # -- connections -------------------------------------------------------------------

    @contextlib.contextmanager
    def connection(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit), with errors translated."""
        if self._closed:
            raise CheckpointerClosedError("the PostgreSQL store is closed")
        with translate_errors(what), self._pool.connection() as conn, self.deadlines.watch(conn):
            yield conn

    def read(self, what: str, work: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """``work(connection)`` for a read, tried again once on a lost connection.

        A read changes nothing, so a connection the server dropped while it
        sat in the pool (a restart, an idle timeout, a terminated backend)
        costs a retry on the next connection, not an error. Writes are never
        retried: whether a write that lost its connection committed is
        unknown, so it raises :class:`StorageUnavailableError`.
        """
        # Each dead connection fails at once and is discarded: after as many
        # tries as the pool holds connections, the next one is a fresh one.
        attempts = self._pool.max_size + 1
        for attempt in range(1, attempts + 1):
            if self._closed:
                raise CheckpointerClosedError("the PostgreSQL store is closed")
            with translate_errors(what):
                try:
                    with self._pool.connection() as conn, self.deadlines.watch(conn):
                        result = work(conn)
                except psycopg.Error as exc:
                    if not retried(what, exc, attempt, attempts):
                        raise
                    self.retries += 1
                    continue
            recovered(what, attempt)
            return result
        raise AssertionError("unreachable")

    def query(
        self,
        what: str,
        operation: Callable[Concatenate[Statements, _P], Operation[_T]],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """A read: ``operation(statements, *args)`` in autocommit, tried again on
        a lost connection (see :meth:`read`)."""
        return self.read(what, lambda conn: drive(conn, operation(self.q, *args, **kwargs)))

    def query_snapshot(
        self,
        what: str,
        operation: Callable[Concatenate[Statements, _P], Operation[_T]],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """A read in one transaction (the operation asks for its snapshot), tried
        again on a lost connection."""

        def work(conn: psycopg.Connection[Any]) -> _T:
            with conn.transaction():
                return drive(conn, operation(self.q, *args, **kwargs))

        return self.read(what, work)

    def decode_ahead(self, step: Execute, work: Callable[[], _T]) -> tuple[_T, _Rows | None]:
        """``work()`` (a page's checking and decoding) while ``step``'s rows (the
        next page's) are on their way, and those rows.

        ``step`` is sent in pipeline mode on a pooled connection before
        ``work`` runs, so that the server reads and sends them meanwhile; its
        rows are fetched after, and the connection given back before this
        returns. A read ahead that fails (a lost connection, a closed pool) is
        ``None`` rows: the caller reads the next page the usual way, which
        retries or raises. What ``work`` raises is raised."""
        if self._closed:
            raise CheckpointerClosedError("the PostgreSQL store is closed")
        done: list[_T] = []
        try:
            with self._pool.connection() as conn, self.deadlines.watch(conn):
                adapt(conn.adapters)
                with conn.pipeline():
                    cur = conn.execute(step.statement, step.params, binary=step.binary)
                    done.append(work())
                    rows: _Rows = cur.fetchall()
        except psycopg.Error:
            return (done[0] if done else work()), None
        return done[0], rows

    def single(self, what: str, operation: Operation[_T]) -> _T:
        """A write of one statement (or a retry of it) in autocommit: never retried."""
        self.check_writable(what)
        if self._closed:
            raise CheckpointerClosedError("the PostgreSQL store is closed")
        # The hot path (every append): no context manager but the pool's.
        try:
            with self._pool.connection() as conn, self.deadlines.watch(conn):
                return drive(conn, operation)
        except psycopg.Error as exc:
            raise translated(what, exc) from exc

    def write(self, what: str, operation: Operation[_T], *, pipelined: bool = False) -> _T:
        """``operation`` in one (write) transaction; ``pipelined``: sent in pipeline
        mode, ``BEGIN`` and ``COMMIT`` included."""
        self.check_writable(what)
        with self.connection(what) as conn:
            pipe = conn.pipeline() if pipelined else contextlib.nullcontext()
            with pipe, conn.transaction():
                return drive(conn, operation)

    def atomic(self, what: str, work: Callable[[Rows], _T]) -> _T:
        """``work(rows)`` in one read-committed transaction: a store's write.

        The store reads its record locked (its row operations do), so a
        compare-and-set holds the row until commit.
        """
        self.check_writable(what)
        with self.connection(what) as conn, conn.transaction():
            return work(Rows(self.q, conn, True, self.notify))

    def reading(self, what: str, work: Callable[[Rows], _T], *, snapshot: bool = False) -> _T:
        """``work(rows)`` for a store's read: one snapshot if asked, else autocommit."""

        def run(conn: psycopg.Connection[Any]) -> _T:
            if not snapshot:
                return work(Rows(self.q, conn, False, self.notify))
            with conn.transaction():
                drive(conn, ops.snapshot(self.q))
                return work(Rows(self.q, conn, False, self.notify))

        return self.read(what, run)

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool."""
        return self._pool

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    # BaseCheckpointer.close's idempotent idiom too, but a database has no
    # followers to wake, and a checkpointer on it (on_database) does not own it.
    def close(self) -> None:
        """Close the pool if it was made here; idempotent."""
        if not self._closed:
            self._closed = True
            if self._owns_pool:
                self._pool.close()

    def notify_key(self, tenant: str, name: str) -> str:
        """The text a notification carries after the head: the session's key."""
        return notify_key(tenant, name)

    def connect(self) -> psycopg.Connection[Any]:
        """A new connection of its own (not pooled), autocommit."""
        kwargs = dict(self.connect_kwargs)
        kwargs["autocommit"] = True
        return psycopg.connect(self.conninfo, **kwargs)


class PageReader(Generic[_E]):
    """The scan of one read (``(name, since, limit)``: a page, as
    ``BaseCheckpointer`` reads them one after another), which asks for each
    full page's successor before it decodes the page: the server reads and
    sends the next page while this one is checked and decoded (see
    :meth:`PostgresDatabase.decode_ahead`; no connection is held between
    pages).

    A page asked for that the rows read ahead cover (the same session and
    start, no more events than they were read for) is cut from them, with no
    statement of its own: the next page, or the events before a damaged one
    (``BaseCheckpointer`` reads those again). Any other is read as usual.
    ``decode`` makes a page of rows (``operations.stored_page`` or
    ``checked_raw_page``). One per read: it is not shared between threads."""

    def __init__(
        self, db: PostgresDatabase, tenant: str, decode: Callable[[str, _Rows], list[_E]]
    ) -> None:
        self._db = db
        self._tenant = tenant
        self._decode = decode
        self._ahead: tuple[str, int, int, _Rows] | None = None

    def __call__(self, name: str, since: int, limit: int) -> list[_E]:
        rows, cut = self._take(name, since, limit)
        if rows is None:
            rows = self._db.query("reading", ops.scan_rows, self._tenant, name, since, limit)
        # Kept: where a damaged event stops the page, the events before it are cut from these.
        self._ahead = (name, since, limit, rows)
        # A page cut shorter than it was read is the read's last (its limit)
        # or the events before a damaged one: nothing after it is read ahead.
        if cut or len(rows) < limit or rows[-1][0] >= ops.MAX_SEQ:
            return self._decode(name, rows)
        after = int(rows[-1][0])
        step = ops.scan_statement(self._db.q, self._tenant, name, after, limit)
        page, ahead = self._db.decode_ahead(step, lambda: self._decode(name, rows))
        if ahead is not None:
            self._ahead = (name, after, limit, ahead)
        return page

    def _take(self, name: str, since: int, limit: int) -> tuple[_Rows | None, bool]:
        """The rows read ahead for this page, if they cover it, and whether they were cut."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead[:2] != (name, since) or limit > ahead[2]:
            return None, False
        rows = ahead[3]
        return (rows, False) if limit == ahead[2] else (rows[:limit], True)
