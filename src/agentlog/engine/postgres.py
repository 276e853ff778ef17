"""PostgreSQL: the connection pool, the schema and every statement of the log.

This module needs ``psycopg`` 3 and ``psycopg_pool`` (``pip install
"agentlog[postgres]"``); nothing imports it unless PostgreSQL is asked for.

Layout (one schema per agentlog store, ``agentlog`` unless told otherwise):

* ``agentlog_version``: one row, the schema version this store was written at.
  A store of a newer version is refused before anything is changed; an older
  one is migrated forward in one transaction.
* ``sessions (tenant, name)``: the head, the revision, created / mtime.
* ``events (tenant, session, seq)``: ``ts``, ``type``, ``payload`` (and the
  ``item_id`` the SessionStore gives), ``snapshots (tenant, session,
  through_seq)``. Every key starts with the tenant (a distribution column
  for Citus), and a session is one contiguous range of the primary key's
  B-tree.
* version 2: the stores beside the log, as in SQLite — ``memory``,
  ``checkpoints``, ``artifacts`` (tenant first), ``blobs`` and
  ``blob_chunks`` (by sha256, shared by every tenant).
* version 3: ``events.crc``, the CRC-32 of the payload (``zlib.crc32``),
  verified on every read; ``NULL`` for events written before (read unverified).

Payloads are ``bytea`` holding agentlog's own JSON encoding, byte for byte:
``jsonb`` would reorder keys and drop duplicate ones (and store numbers as
``numeric``), and ``json``/``text`` would make every value pass the server's
encoding checks and conversions. With ``bytea`` a payload reads back exactly
as it was encoded, whatever the database's encoding.

An append is one statement (and so one round trip and one transaction in
autocommit): an ``UPDATE … WHERE head = expected RETURNING head`` (or, for a
session that may not exist yet, ``INSERT … ON CONFLICT DO UPDATE … WHERE``)
whose row lock serialises writers of one session, and an ``INSERT … SELECT
FROM unnest(types, payloads)`` of the batch in the same statement, numbered
from the head it returned. The arrays are sent in binary (``%b``): psycopg's
default, text, escapes every element in Python. Measured for a 100-event
batch (``benchmarks/postgres.py``): this statement 0.48 ms; ``BEGIN``, a
``SELECT … FOR UPDATE``, the insert and an ``UPDATE`` of the head, then
``COMMIT``: 0.70 ms with the same binary ``unnest``, 0.74 ms with ``COPY``,
1.41 ms with one multi-row ``VALUES``, 1.52 ms with text arrays, 1.80 ms
with ``executemany`` (pipelined). A stale ``expected_head`` updates no row,
so nothing is inserted; only then a second statement reads the actual head
for the error. No lock or sequence is shared between sessions.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
import re
import selectors
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    InvalidEventError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    StorageConflictError,
    StorageDataError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from ..events import MAX_POSITION, EncodedBatch, StoredEvent, check_retained
from ..integrity import (
    DamagedEvent,
    Progress,
    checked_payloads,
    checksum,
    session_damage,
)

__all__ = [
    "CHECKSUM_VERSION",
    "DEFAULT_SCHEMA",
    "MAX_BATCH_BYTES",
    "MAX_SEQ",
    "SCHEMA_VERSION",
    "AppendRequest",
    "Listener",
    "PostgresDatabase",
    "Rows",
    "Statements",
    "check_schema_name",
    "connect_options",
    "migrate_schema",
    "notify_key",
    "oversized_batch",
    "pool_sizes",
    "retained_start",
    "schema_version_of",
    "statement_timeout_sql",
    "translate_errors",
]

_T = TypeVar("_T")

#: The schema an agentlog store lives in unless told otherwise.
DEFAULT_SCHEMA = "agentlog"

#: The version this agentlog writes; a store of a larger one is refused.
SCHEMA_VERSION = 4

#: The version from which events carry ``crc``.
CHECKSUM_VERSION = 4

#: Seqs are ``bigint``: the contract's own bound (events.MAX_POSITION).
MAX_SEQ = MAX_POSITION

#: ``(session_id, expected_head, batch)``: one append of a group.
AppendRequest = tuple[str, "int | None", EncodedBatch]

#: Events per read of a deep check.
_CHECK_PAGE = 1000

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}\Z")

# Text keys compare as code points (the order Python's str has), never by a
# locale: "C" is also the cheapest collation.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE {s}.sessions (
            tenant text COLLATE "C" NOT NULL,
            name text COLLATE "C" NOT NULL,
            head bigint NOT NULL,
            revision bigint NOT NULL,
            created double precision NOT NULL,
            mtime double precision NOT NULL,
            metadata bytea,
            PRIMARY KEY (tenant, name)
        )""",
        "CREATE INDEX sessions_by_activity ON {s}.sessions (tenant, mtime DESC)",
        """CREATE TABLE {s}.events (
            tenant text COLLATE "C" NOT NULL,
            session text COLLATE "C" NOT NULL,
            seq bigint NOT NULL,
            ts double precision NOT NULL,
            type text NOT NULL,
            payload bytea NOT NULL,
            item_id text COLLATE "C",
            PRIMARY KEY (tenant, session, seq)
        )""",
        "CREATE UNIQUE INDEX events_by_item ON {s}.events (tenant, session, item_id)"
        " WHERE item_id IS NOT NULL",
        """CREATE TABLE {s}.snapshots (
            tenant text COLLATE "C" NOT NULL,
            session text COLLATE "C" NOT NULL,
            through_seq bigint NOT NULL,
            state bytea NOT NULL,
            created double precision NOT NULL,
            PRIMARY KEY (tenant, session, through_seq)
        )""",
    ),
    2: (
        # The stores beside the log (memory, run checkpoints, artifacts).
        """CREATE TABLE {s}.memory (
            tenant text COLLATE "C" NOT NULL,
            namespace text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value bytea NOT NULL,
            revision bigint NOT NULL,
            created double precision NOT NULL,
            updated double precision NOT NULL,
            PRIMARY KEY (tenant, namespace, key)
        )""",
        """CREATE TABLE {s}.checkpoints (
            tenant text COLLATE "C" NOT NULL,
            run_id text COLLATE "C" NOT NULL,
            session_id text COLLATE "C",
            parent_run_id text COLLATE "C",
            status text COLLATE "C" NOT NULL,
            data bytea NOT NULL,
            revision bigint NOT NULL,
            created double precision NOT NULL,
            updated double precision NOT NULL,
            PRIMARY KEY (tenant, run_id)
        )""",
        "CREATE INDEX checkpoints_by_session ON {s}.checkpoints (tenant, session_id, run_id)",
        "CREATE INDEX checkpoints_by_status ON {s}.checkpoints (tenant, status, run_id)",
        "CREATE INDEX checkpoints_by_parent ON {s}.checkpoints (tenant, parent_run_id, run_id)",
        # Artifact bytes are stored once per content (sha256), in 1 MiB
        # chunks, and counted by the artifacts that refer to them.
        """CREATE TABLE {s}.blobs (
            sha256 text COLLATE "C" PRIMARY KEY,
            size bigint NOT NULL,
            refcount bigint NOT NULL
        )""",
        """CREATE TABLE {s}.blob_chunks (
            sha256 text COLLATE "C" NOT NULL,
            n integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (sha256, n)
        )""",
        """CREATE TABLE {s}.artifacts (
            tenant text COLLATE "C" NOT NULL,
            artifact_id text COLLATE "C" NOT NULL,
            sha256 text COLLATE "C" NOT NULL,
            size bigint NOT NULL,
            media_type text NOT NULL,
            metadata bytea NOT NULL,
            revision bigint NOT NULL,
            created double precision NOT NULL,
            updated double precision NOT NULL,
            PRIMARY KEY (tenant, artifact_id)
        )""",
    ),
    3: (
        # ``agentlog migrate`` into PostgreSQL: one row per migrated source
        # unit (a file, or a session of a SQLite source) and tenant, as in SQLite.
        """CREATE TABLE {s}.migration_ledger (
            source_id text COLLATE "C" NOT NULL,
            source_key text COLLATE "C" NOT NULL,
            sha256 text NOT NULL,
            tenant text COLLATE "C" NOT NULL,
            session_id text COLLATE "C" NOT NULL,
            migrated double precision NOT NULL,
            source_format text,
            PRIMARY KEY (source_id, tenant, source_key)
        )""",
    ),
    CHECKSUM_VERSION: (
        # The CRC-32 of each event's payload (zlib.crc32), verified on every
        # read; NULL for an event written before this step.
        "ALTER TABLE {s}.events ADD COLUMN crc bigint",
    ),
}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))


def _fetch(
    statement: str, params: tuple[Any, ...], conn: psycopg.Connection[Any]
) -> builtins.list[tuple[Any, ...]]:
    """One page of a deep check (``params`` then the page size)."""
    return conn.execute(statement, (*params, _CHECK_PAGE)).fetchall()


def check_schema_name(schema: object) -> str:
    """``schema`` if it is a plain lower-case SQL identifier of at most 48 characters."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ValueError(
            f"schema must match [a-z_][a-z0-9_]* and have at most 48 characters, not {schema!r}"
        )
    return schema


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn psycopg's errors into agentlog's typed ones.

    Lost connections, a server that is gone or shutting down, pool timeouts,
    statement timeouts, deadlocks and serialisation failures are
    :class:`StorageUnavailableError` (retryable: nothing of a failed call is
    half-written, but a write that failed may have committed — read the
    head to know); bad data is :class:`StorageDataError`.
    """
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise StorageUnavailableError(f"{what}: PostgreSQL is unavailable: {exc}") from exc
    except (psycopg.DataError, psycopg.IntegrityError) as exc:
        raise StorageDataError(f"{what}: {exc}") from exc
    except psycopg.Error as exc:
        raise StorageUnavailableError(f"{what}: {type(exc).__name__}: {exc}") from exc


def migrate_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the store in ``schema``, or bring it forward, in one transaction.

    A store of a newer version, or a schema holding other tables, is refused
    with :class:`SchemaVersionError` before anything changes.
    """
    s = sql.Identifier(check_schema_name(schema)).as_string()
    with conn.transaction():
        # Two processes opening a new store at once: one creates it, the
        # other waits here and then finds it (a lock for opening only).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"agentlog schema {schema}",))
        version = schema_version_of(conn, schema)
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"schema {schema!r} was written by a newer agentlog (version {version};"
                f" this one knows {SCHEMA_VERSION})"
            )
        if version == SCHEMA_VERSION:
            return
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        if version == 0:
            conn.execute(
                f"CREATE TABLE {s}.agentlog_version (application text NOT NULL,"
                " version integer NOT NULL)"
            )
            conn.execute(f"INSERT INTO {s}.agentlog_version VALUES ('agentlog', 0)")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(statement.format(s=s))
        conn.execute(f"UPDATE {s}.agentlog_version SET version = %s", (SCHEMA_VERSION,))


#: The most one append sends in its statement, its events' bytes together:
#: PostgreSQL takes a message of at most 1 GiB, and closes the connection
#: on a larger one ("invalid message length").
MAX_BATCH_BYTES = 1_000_000_000


def oversized_batch(batch: EncodedBatch) -> InvalidEventError | None:
    """The error for a batch too large for one append, naming the event that
    takes it past :data:`MAX_BATCH_BYTES`; ``None`` when it fits."""
    total = 0
    for index, (_, payload) in enumerate(batch):
        total += len(payload)
        if total > MAX_BATCH_BYTES:
            return InvalidEventError(
                index,
                f"with it the batch is over {MAX_BATCH_BYTES:,} bytes encoded, more than"
                " PostgreSQL takes in one append: append the events in smaller batches",
            )
    return None


def schema_version_of(conn: psycopg.Connection[Any], schema: str) -> int:
    """The version of the store in ``schema``: 0 when there is none (refusing a foreign one)."""
    s = sql.Identifier(check_schema_name(schema)).as_string()
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL, EXISTS (SELECT 1 FROM pg_tables"
        " WHERE schemaname = %s)",
        (f"{s}.agentlog_version", schema),
    ).fetchone()
    assert exists is not None
    has_version, has_tables = exists
    if not has_version:
        if has_tables:
            raise SchemaVersionError(f"schema {schema!r} holds tables but no agentlog store")
        return 0
    rows = conn.execute(f"SELECT application, version FROM {s}.agentlog_version").fetchall()
    if not any(row[0] == "agentlog" for row in rows):
        raise SchemaVersionError(f"schema {schema!r} is not an agentlog store")
    # Only a hand-edited table gets here otherwise: refused, never migrated from.
    if len(rows) != 1:
        raise SchemaVersionError(
            f"schema {schema!r} has {len(rows)} rows in agentlog_version; a store has one"
        )
    version = rows[0][1]
    if type(version) is not int or version < 1:
        raise SchemaVersionError(f"schema {schema!r} has an invalid version ({version!r})")
    return version


def connect_options(connect_timeout: float) -> dict[str, Any]:
    """How every connection of a store is opened (the sync and async twins alike)."""
    return {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}


def pool_sizes(pool_min_size: int, pool_max_size: int, pool_timeout: float) -> dict[str, Any]:
    """A store's pool bounds, as ``ConnectionPool`` and ``AsyncConnectionPool`` take them."""
    return {
        "min_size": pool_min_size,
        "max_size": max(pool_min_size, pool_max_size),
        "timeout": pool_timeout,
    }


def statement_timeout_sql(ms: int) -> str:
    """What a pool runs on each new connection to bound its statements."""
    return f"SET statement_timeout = {int(ms)}"


def notify_key(tenant: str, name: str) -> str:
    """The text a notification carries after the head: the session's key."""
    return orjson.dumps([tenant, name]).decode()


def retained_start(row: Sequence[Any] | None) -> int:
    """Where a session's events start, from a ``(head, first stored seq)`` row."""
    if row is None:
        return 1
    return int(row[0]) + 1 if row[1] is None else int(row[1])


class Statements:
    """Every statement of the log, with the schema's name quoted into it."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema).as_string()
        self.schema = s
        events = f"""INSERT INTO {s}.events (tenant, session, seq, ts, type, payload, crc)
            SELECT %(t)s, %(name)s, h.head - %(n)s + e.ord, %(ts)s, e.type, e.payload, e.crc
            FROM h, unnest(%(types)b::text[], %(payloads)b::bytea[], %(crcs)b::bigint[])
                WITH ORDINALITY AS e(type, payload, crc, ord)"""
        notify = "pg_notify(%(channel)s, h.head::text || ' ' || %(key)s)"
        # A session that may be new (expected head None or 0).
        upsert = f"""INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime)
            VALUES (%(t)s, %(name)s, %(n)s, 1, %(ts)s, %(ts)s)
            ON CONFLICT (tenant, name) DO UPDATE
                SET head = sessions.head + EXCLUDED.head, mtime = EXCLUDED.mtime,
                    revision = sessions.revision + 1
                WHERE %(exp)s::bigint IS NULL OR sessions.head = %(exp)s::bigint
            RETURNING head"""
        # A session that must exist (expected head > 0).
        update = f"""UPDATE {s}.sessions
            SET head = head + %(n)s, mtime = %(ts)s, revision = revision + 1
            WHERE tenant = %(t)s AND name = %(name)s AND head = %(exp)s::bigint
            RETURNING head"""
        self.append: dict[tuple[bool, bool], str] = {}
        for new in (True, False):
            for notifying in (True, False):
                final = f"SELECT h.head, {notify} FROM h" if notifying else "SELECT h.head FROM h"
                self.append[new, notifying] = (
                    f"WITH h AS ({upsert if new else update}), ins AS ({events}) {final}"
                )
        self.head = f"SELECT head FROM {s}.sessions WHERE tenant = %s AND name = %s"
        self.head_for_update = self.head + " FOR UPDATE"
        self.head_mtime = f"SELECT head, mtime FROM {s}.sessions WHERE tenant = %s AND name = %s"
        # Retention: where a session's stored events start (its primary key's first entry).
        self.first_seq = (
            f"SELECT seq FROM {s}.events WHERE tenant = %s AND session = %s ORDER BY seq LIMIT 1"
        )
        self.retained = (
            f"SELECT s.head, (SELECT e.seq FROM {s}.events e WHERE e.tenant = s.tenant"
            " AND e.session = s.name ORDER BY e.seq LIMIT 1)"
            f" FROM {s}.sessions s WHERE s.tenant = %s AND s.name = %s"
        )
        self.oldest_snapshot = (
            f"SELECT min(through_seq) FROM {s}.snapshots WHERE tenant = %s AND session = %s"
        )
        self.scan = (
            f"SELECT seq, ts, type, payload, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq > %s ORDER BY seq LIMIT %s"
        )
        #: Every session of every tenant, for a deep check.
        # With the seq each newest snapshot covers: retention may have pruned up to it.
        self.all_sessions = (
            "SELECT tenant, name, head, coalesce((SELECT max(through_seq)"
            f" FROM {s}.snapshots p WHERE p.tenant = s.tenant AND p.session = s.name), 0)"
            f" FROM {s}.sessions s ORDER BY tenant, name"
        )
        self.checked = (
            f"SELECT seq, payload, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq > %s ORDER BY seq LIMIT %s"
        )
        self.list = (
            f"SELECT name, mtime, head FROM {s}.sessions WHERE tenant = %s"
            " ORDER BY mtime DESC, name"
        )
        self.list_all = (
            f"SELECT tenant, name, mtime, head FROM {s}.sessions ORDER BY mtime DESC, tenant, name"
        )
        self.delete_session = (
            f"DELETE FROM {s}.sessions WHERE tenant = %s AND name = %s RETURNING head"
        )
        self.delete_events = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s"
        self.delete_snapshots = f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s"
        self.cut_events = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s AND seq > %s"
        self.cut_snapshots = (
            f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s AND through_seq > %s"
        )
        self.set_head = (
            f"UPDATE {s}.sessions SET head = %s, mtime = %s, revision = revision + 1"
            " WHERE tenant = %s AND name = %s"
        )
        self.create_session = (
            f"INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime)"
            " VALUES (%s, %s, %s, 1, %s, %s) ON CONFLICT DO NOTHING RETURNING head"
        )
        self.copy_events = (
            f"INSERT INTO {s}.events (tenant, session, seq, ts, type, payload, item_id, crc)"
            f" SELECT tenant, %s, seq, ts, type, payload, item_id, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq <= %s"
        )
        self.copy_snapshots = (
            f"INSERT INTO {s}.snapshots (tenant, session, through_seq, state, created)"
            f" SELECT tenant, %s, through_seq, state, created FROM {s}.snapshots"
            " WHERE tenant = %s AND session = %s AND through_seq <= %s"
        )
        self.notify = "SELECT pg_notify(%s, %s)"
        # Operations (agentlog stats / gc / check).
        self.totals = (
            f"SELECT count(*), count(DISTINCT tenant), coalesce(sum(head), 0) FROM {s}.sessions"
        )
        self.largest = (
            f"SELECT tenant, name, head, mtime FROM {s}.sessions"
            " ORDER BY head DESC, tenant, name LIMIT %s"
        )
        # FOR UPDATE re-reads a row another transaction changed meanwhile and
        # checks mtime again on its new version: a session appended to after
        # the cut-off is not picked.
        self.idle = (
            f"SELECT name FROM {s}.sessions WHERE tenant = %s AND mtime < %s"
            " ORDER BY mtime, name LIMIT %s FOR UPDATE"
        )
        self.delete_sessions = f"DELETE FROM {s}.sessions WHERE tenant = %s AND name = ANY(%s)"
        self.delete_events_of = f"DELETE FROM {s}.events WHERE tenant = %s AND session = ANY(%s)"
        self.delete_snapshots_of = (
            f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = ANY(%s)"
        )
        # Every session whose events are not a gapless run ending at its head
        # and starting at 1 or after what a snapshot covers (retention), and
        # events that belong to no session.
        covered = (
            f"EXISTS (SELECT 1 FROM {s}.snapshots p WHERE p.tenant = s.tenant"
            " AND p.session = s.name AND p.through_seq >= {seq})"
        )
        self.damaged = (
            "SELECT s.tenant, s.name, s.head, coalesce(e.n, 0), coalesce(e.lo, 0),"
            f" coalesce(e.hi, 0) FROM {s}.sessions s LEFT JOIN (SELECT tenant, session,"
            f" count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM {s}.events"
            " GROUP BY tenant, session) e ON e.tenant = s.tenant AND e.session = s.name"
            " WHERE NOT (CASE WHEN e.n IS NULL THEN s.head = 0 OR "
            + covered.format(seq="s.head")
            + " ELSE e.hi = s.head AND e.n = e.hi - e.lo + 1 AND (e.lo = 1 OR "
            + covered.format(seq="e.lo - 1")
            + ") END) ORDER BY s.tenant, s.name LIMIT %s"
        )
        self.orphans = (
            f"SELECT e.tenant, e.session, count(*) FROM {s}.events e WHERE NOT EXISTS"
            f" (SELECT 1 FROM {s}.sessions s WHERE s.tenant = e.tenant AND s.name = e.session)"
            " GROUP BY e.tenant, e.session ORDER BY e.tenant, e.session LIMIT %s"
        )
        # Metadata: the column the SessionStore face reads; CAS on the revision.
        self.metadata = (
            f"SELECT metadata, revision FROM {s}.sessions WHERE tenant = %s AND name = %s"
        )
        self.revision_for_update = (
            f"SELECT revision FROM {s}.sessions WHERE tenant = %s AND name = %s FOR UPDATE"
        )
        self.create_with_metadata = (
            f"INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime, metadata)"
            " VALUES (%s, %s, 0, 1, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING revision"
        )
        self.set_metadata = (
            f"UPDATE {s}.sessions SET metadata = %s, revision = revision + 1, mtime = %s"
            " WHERE tenant = %s AND name = %s AND revision = %s RETURNING revision"
        )
        self.list_metadata = (
            f"SELECT name, mtime, head, metadata, revision FROM {s}.sessions WHERE tenant = %s"
            " ORDER BY mtime DESC, name"
        )


def set_metadata_in(
    execute: Callable[..., Any],
    q: Statements,
    tenant: str,
    name: str,
    data: bytes,
    expected_revision: int,
    ts: float,
) -> int:
    """Inside a transaction (sync): the metadata's compare-and-set."""
    row = execute(q.revision_for_update, (tenant, name)).fetchone()
    if row is None:
        if expected_revision == 0:
            created = execute(q.create_with_metadata, (tenant, name, ts, ts, data)).fetchone()
            if created is not None:
                return int(created[0])
        # Created by another writer meanwhile: its revision now.
        row = execute(q.metadata, (tenant, name)).fetchone()
    actual = 0 if row is None else int(row[-1])
    if actual == expected_revision:
        done = execute(q.set_metadata, (data, ts, tenant, name, expected_revision)).fetchone()
        if done is not None:
            return int(done[0])
        actual = int(execute(q.metadata, (tenant, name)).fetchone()[1])
    raise StorageConflictError(f"session {name!r}", expected_revision, actual)


class PostgresDatabase:
    """One agentlog store in one PostgreSQL schema, over a connection pool.

    ``target`` is a libpq connection string (the pool is made and owned here)
    or a :class:`psycopg_pool.ConnectionPool` (used, never closed; its
    connections must be in autocommit mode, which the pool made here sets).
    Opening creates the schema, or migrates it forward, in one transaction,
    and refuses a store of a newer version before changing anything.

    ``create=False`` opens an existing store only (migrating it forward if it
    is older); ``read_only=True`` opens an existing store as it is, changes
    nothing, and refuses every write — here, before a statement is sent, and
    on the server too (the pool's connections made here run with
    ``default_transaction_read_only``). With either, a schema that holds no
    store raises :class:`StorageNotFoundError` and nothing is created.
    """

    def __init__(
        self,
        target: str | ConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        pool_min_size: int = 1,
        pool_max_size: int = 8,
        pool_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        statement_timeout_ms: int | None = 30_000,
        notify: bool = True,
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.create = create and not read_only
        self.read_only = read_only
        self.q = Statements(self.schema)
        #: The NOTIFY channel of this store (one per schema).
        self.channel = f"agentlog.{self.schema}"
        self.notify = notify
        self.connect_timeout = connect_timeout
        self._closed = False
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
        elif isinstance(target, str):
            self.conninfo = target
            self.connect_kwargs = connect_options(connect_timeout)
            # Connect and migrate first: a wrong address fails here at once,
            # not after the pool's timeout.
            with (
                translate_errors("opening the store"),
                psycopg.connect(target, **self.connect_kwargs) as conn,
            ):
                self._migrate(conn)
            settings = []
            if statement_timeout_ms is not None:
                settings.append(statement_timeout_sql(statement_timeout_ms))
            if read_only:
                settings.append("SET default_transaction_read_only = on")
            configure = None
            if settings:

                def configure(conn: psycopg.Connection[Any]) -> None:
                    for setting in settings:
                        conn.execute(setting)

            self._pool = ConnectionPool(
                target,
                kwargs=self.connect_kwargs,
                **pool_sizes(pool_min_size, pool_max_size, pool_timeout),
                configure=configure,
                open=True,
                name=f"agentlog-{self.schema}",
            )
            self._owns_pool = True
            return
        else:
            raise TypeError(
                "target must be a connection string or a psycopg_pool.ConnectionPool,"
                f" not {type(target).__name__}"
            )
        with translate_errors("opening the store"), self._pool.connection() as conn:
            self._migrate(conn)

    # -- schema ------------------------------------------------------------------------

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        if not self.create:
            version = schema_version_of(conn, self.schema)
            if version == 0:
                raise StorageNotFoundError(
                    f"no agentlog store in schema {self.schema!r} of this database"
                    " (opened without creating one)"
                )
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"schema {self.schema!r} was written by a newer agentlog (version"
                    f" {version}; this one knows {SCHEMA_VERSION})"
                )
            if self.read_only:
                return  # read as it is
        migrate_schema(conn, self.schema)

    def check_writable(self, what: str) -> None:
        """Refuse a write to a store opened ``read_only``."""
        if self.read_only:
            raise StorageUnavailableError(f"{what}: the PostgreSQL store was opened read-only")

    @property
    def schema_version(self) -> int:
        """The version of the store's schema as it is now."""
        with self.connection("reading the schema version") as conn:
            return schema_version_of(conn, self.schema)

    # -- connections -------------------------------------------------------------------

    @contextlib.contextmanager
    def connection(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit), with errors translated."""
        if self._closed:
            raise CheckpointerClosedError("the PostgreSQL store is closed")
        with translate_errors(what), self._pool.connection() as conn:
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
                    with self._pool.connection() as conn:
                        return work(conn)
                except (PoolTimeout, psycopg.errors.QueryCanceled):
                    raise
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt == attempts:
                        raise
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def transaction(self, what: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor inside one (write) transaction on a pooled connection."""
        self.check_writable(what)
        with self.connection(what) as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    def run(self, what: str, work: Callable[[psycopg.Cursor[Any]], _T]) -> _T:
        """``work(cursor)`` inside one transaction; its result."""
        with self.transaction(what) as cur:
            return work(cur)

    def atomic(self, what: str, work: Callable[[Rows], _T]) -> _T:
        """``work(rows)`` in one read-committed transaction: a store's write.

        The store reads its record with ``FOR UPDATE`` (see :meth:`Rows.locked`),
        so a compare-and-set holds the row until commit.
        """
        with self.transaction(what) as cur:
            return work(Rows(self, cur, writing=True))

    def reading(self, what: str, work: Callable[[Rows], _T], *, snapshot: bool = False) -> _T:
        """``work(rows)`` for a store's read: one snapshot if asked, else autocommit."""

        def run(conn: psycopg.Connection[Any]) -> _T:
            with conn.cursor(binary=True) as cur:
                if not snapshot:
                    return work(Rows(self, cur, writing=False))
                with conn.transaction():
                    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    return work(Rows(self, cur, writing=False))

        return self.read(what, run)

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool."""
        return self._pool

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Close the pool if it was made here; idempotent."""
        if not self._closed:
            self._closed = True
            if self._owns_pool:
                self._pool.close()

    def connect(self) -> psycopg.Connection[Any]:
        """A new connection of its own (not pooled), autocommit."""
        kwargs = dict(self.connect_kwargs)
        kwargs["autocommit"] = True
        return psycopg.connect(self.conninfo, **kwargs)

    # -- the log -----------------------------------------------------------------------

    def notify_key(self, tenant: str, name: str) -> str:
        """The text a notification carries after the head: the session's key."""
        return notify_key(tenant, name)

    def _append_on(
        self,
        cur: psycopg.Cursor[Any],
        tenant: str,
        name: str,
        expected: int | None,
        ts: float,
        batch: EncodedBatch,
    ) -> int:
        """One append on ``cur`` (autocommit: its own transaction; else the caller's)."""
        if expected is not None and expected > MAX_SEQ:
            raise CheckpointConflictError(name, expected, self._head_on(cur, tenant, name))
        if not batch:
            head = self._head_on(cur, tenant, name)
            if expected is not None and expected != head:
                raise CheckpointConflictError(name, expected, head)
            return head
        statement, params = self.append_statement(tenant, name, expected, ts, batch)
        while True:
            row = cur.execute(statement, params).fetchone()
            if row is not None:
                return int(row[0])
            # Nothing written: the head was not the expected one. Which is it?
            head = self._head_on(cur, tenant, name)
            if expected is not None and head != expected:
                raise CheckpointConflictError(name, expected, head)
            # It moved to the expected one in between: try again.

    def append_statement(
        self, tenant: str, name: str, expected: int | None, ts: float, batch: EncodedBatch
    ) -> tuple[str, dict[str, Any]]:
        """The one statement of an append, and its parameters (see the module's notes)."""
        params = {
            "t": tenant,
            "name": name,
            "n": len(batch),
            "ts": ts,
            "exp": expected,
            "types": [kind for kind, _ in batch],
            "payloads": [payload for _, payload in batch],
            "crcs": [checksum(payload) for _, payload in batch],
            "channel": self.channel,
            "key": self.notify_key(tenant, name),
        }
        return self.q.append[not expected, self.notify], params

    def _head_on(self, cur: psycopg.Cursor[Any], tenant: str, name: str) -> int:
        row = cur.execute(self.q.head, (tenant, name)).fetchone()
        return 0 if row is None else int(row[0])

    def append(
        self, tenant: str, name: str, expected: int | None, ts: float, batch: EncodedBatch
    ) -> int:
        """Append ``batch`` after the head (checking ``expected``); the new head."""
        self.check_writable("appending")
        if (oversized := oversized_batch(batch)) is not None:
            raise oversized
        with self.connection("appending") as conn, conn.cursor() as cur:
            return self._append_on(cur, tenant, name, expected, ts, batch)

    def append_many(
        self, tenant: str, requests: Sequence[AppendRequest], ts: float
    ) -> builtins.list[int | Exception]:
        """Several appends in one transaction, each refused (a conflict) alone.

        Sessions are locked in id order (each one's appends keep their order),
        so two groups never deadlock.
        """
        self.check_writable("appending a group")
        refused = {
            index: error
            for index, (_, _, batch) in enumerate(requests)
            if (error := oversized_batch(batch)) is not None
        }
        if refused:  # refused alone, as a conflict is; the others go on
            rest = [index for index in range(len(requests)) if index not in refused]
            written = iter(self.append_many(tenant, [requests[i] for i in rest], ts))
            return [refused[i] if i in refused else next(written) for i in range(len(requests))]
        results: builtins.list[int | Exception] = [0] * len(requests)
        order = sorted(range(len(requests)), key=lambda index: requests[index][0])
        names = {name for name, _, _ in requests}
        if len(requests) > 1 and len(names) == len(requests):
            simple = all(batch and (exp is None or exp <= MAX_SEQ) for _, exp, batch in requests)
            if simple:
                return self._append_pipelined(tenant, requests, order, ts)
        with self.transaction("appending a group") as cur:
            for index in order:
                name, expected, batch = requests[index]
                try:
                    results[index] = self._append_on(cur, tenant, name, expected, ts, batch)
                except CheckpointConflictError as exc:
                    results[index] = exc
        return results

    def _append_pipelined(
        self, tenant: str, requests: Sequence[AppendRequest], order: Sequence[int], ts: float
    ) -> builtins.list[int | Exception]:
        """A group of one append per session, its statements sent in one pipeline.

        Each statement is the single append's; they are sent together and their
        results read after, so the group costs about one round trip, not one
        per append. An append refused by its compare-and-set reads the head
        afterwards for the error (no other append of the group touched that
        session).
        """
        results: builtins.list[int | Exception] = [0] * len(requests)
        with self.connection("appending a group") as conn, conn.pipeline(), conn.transaction():
            sent = []
            for index in order:
                name, expected, batch = requests[index]
                cur = conn.cursor()
                cur.execute(*self.append_statement(tenant, name, expected, ts, batch))
                sent.append((index, cur))
            refused = []
            for index, cur in sent:
                row = cur.fetchone()
                if row is None:
                    refused.append(index)
                else:
                    results[index] = int(row[0])
            with conn.cursor() as cur:
                for index in refused:
                    name, expected, batch = requests[index]
                    try:
                        # Its head moved to the expected one meanwhile: try it again.
                        results[index] = self._append_on(cur, tenant, name, expected, ts, batch)
                    except CheckpointConflictError as exc:
                        results[index] = exc
        return results

    def scan(self, tenant: str, name: str, since: int, limit: int) -> builtins.list[StoredEvent]:
        """Up to ``limit`` events after ``since``, in seq order (one keyset page)."""
        if since >= MAX_SEQ:
            return []

        def page(conn: psycopg.Connection[Any]) -> builtins.list[Any]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(self.q.scan, (tenant, name, since, limit)).fetchall()

        rows = self.read("reading", page)
        if not rows:
            return []
        events = checked_payloads(name, rows)
        return [
            StoredEvent(seq, seq - 1, ts, kind, event)
            for (seq, ts, kind, _, _), event in zip(rows, events, strict=True)
        ]

    def damaged_events(self, progress: Progress | None = None) -> builtins.list[DamagedEvent]:
        """Every stored event of every session (every tenant) whose payload fails
        its checksum or does not decode, and every missing seq (a deep check)."""
        sessions = self.read("checking", lambda conn: conn.execute(self.q.all_sessions).fetchall())
        damaged: builtins.list[DamagedEvent] = []
        for done, (tenant, name, head, covered) in enumerate(sessions, 1):
            stored = self._stored_events(tenant, name)
            damaged += session_damage(tenant, name, head, covered, stored)
            if progress is not None:
                progress(done, len(sessions))
        return damaged

    def _stored_events(self, tenant: str, name: str) -> Iterator[tuple[int, bytes, int | None]]:
        """Every stored ``(seq, payload, crc)`` of a session, a page (one read) at a time."""
        after = 0
        while True:
            rows = self.read(
                "checking", functools.partial(_fetch, self.q.checked, (tenant, name, after))
            )
            for seq, payload, crc in rows:
                yield int(seq), bytes(payload), crc
            if len(rows) < _CHECK_PAGE:
                return
            after = int(rows[-1][0])

    def head(self, tenant: str, name: str) -> int:
        """The head of a session; 0 for an unknown one."""
        row = self.read(
            "reading the head", lambda conn: conn.execute(self.q.head, (tenant, name)).fetchone()
        )
        return 0 if row is None else int(row[0])

    def head_and_mtime(self, tenant: str, name: str) -> tuple[int, float]:
        """The head and the mtime of a session; ``(0, 0.0)`` for an unknown one."""
        row = self.read(
            "reading the head",
            lambda conn: conn.execute(self.q.head_mtime, (tenant, name)).fetchone(),
        )
        return (0, 0.0) if row is None else (int(row[0]), float(row[1]))

    def list_sessions(self, tenant: str) -> builtins.list[tuple[str, float, int]]:
        """``(name, mtime, head)`` of the tenant's sessions, most recently active first."""
        rows = self.read("listing", lambda conn: conn.execute(self.q.list, (tenant,)).fetchall())
        return [(str(n), float(m), int(h)) for n, m, h in rows]

    def list_all_sessions(self) -> builtins.list[tuple[str, str, float, int]]:
        """``(tenant, name, mtime, head)`` of every session, most recently active first."""
        rows = self.read("listing", lambda conn: conn.execute(self.q.list_all).fetchall())
        return [(str(t), str(n), float(m), int(h)) for t, n, m, h in rows]

    def list_sessions_metadata(
        self, tenant: str
    ) -> builtins.list[tuple[str, float, int, bytes | None, int]]:
        """``(name, mtime, head, metadata json | None, revision)`` of the tenant's
        sessions, most recently active first."""
        rows = self.read(
            "listing", lambda conn: conn.execute(self.q.list_metadata, (tenant,)).fetchall()
        )
        return [
            (str(n), float(m), int(h), None if d is None else bytes(d), int(r))
            for n, m, h, d, r in rows
        ]

    def session_metadata(self, tenant: str, name: str) -> tuple[bytes | None, int]:
        """``(metadata json | None, revision)``; ``(None, 0)`` for an unknown session."""
        row = self.read(
            "reading metadata",
            lambda conn: conn.execute(self.q.metadata, (tenant, name)).fetchone(),
        )
        if row is None:
            return None, 0
        return (None if row[0] is None else bytes(row[0])), int(row[1])

    def set_session_metadata(
        self, tenant: str, name: str, data: bytes, expected_revision: int, ts: float
    ) -> int:
        """Compare-and-set the metadata on the session's revision (an unknown
        session is at 0 and is created, empty); return the new revision."""
        with self.transaction("setting metadata") as cur:
            return set_metadata_in(cur.execute, self.q, tenant, name, data, expected_revision, ts)

    def _notify_on(self, cur: psycopg.Cursor[Any], tenant: str, name: str, head: int) -> None:
        if self.notify:
            cur.execute(self.q.notify, (self.channel, f"{head} {self.notify_key(tenant, name)}"))

    def delete(self, tenant: str, name: str) -> None:
        """Remove a session and everything of it; nothing for an unknown one."""
        with self.transaction("deleting") as cur:
            # The session's row first: its lock waits for a running append,
            # and the later statements see everything that append wrote.
            if cur.execute(self.q.delete_session, (tenant, name)).fetchone() is None:
                return
            cur.execute(self.q.delete_events, (tenant, name))
            cur.execute(self.q.delete_snapshots, (tenant, name))
            self._notify_on(cur, tenant, name, 0)

    def truncate(self, tenant: str, name: str, to_seq: int, ts: float) -> int:
        """Remove the events after ``to_seq``; the new head."""
        with self.transaction("truncating") as cur:
            row = cur.execute(self.q.head_for_update, (tenant, name)).fetchone()
            if row is None:
                return 0
            head = int(row[0])
            if to_seq >= head:
                return head
            self._check_retained(cur, tenant, name, "truncate", to_seq, head)
            cur.execute(self.q.cut_events, (tenant, name, to_seq))
            cur.execute(self.q.cut_snapshots, (tenant, name, to_seq))
            cur.execute(self.q.set_head, (to_seq, ts, tenant, name))
            self._notify_on(cur, tenant, name, to_seq)
            return to_seq

    def _check_retained(
        self, cur: psycopg.Cursor[Any], tenant: str, name: str, what: str, point: int, head: int
    ) -> None:
        """Inside a write: refuse to go back below what retention left (see
        :func:`agentlog.events.check_retained`)."""
        found = cur.execute(self.q.first_seq, (tenant, name)).fetchone()
        first = head + 1 if found is None else int(found[0])
        if first > 1:
            oldest = cur.execute(self.q.oldest_snapshot, (tenant, name)).fetchone()
            check_retained(name, what, point, first, None if oldest is None else oldest[0])

    def first_retained(self, tenant: str, name: str) -> int:
        """The seq of the session's first stored event (``head + 1`` when none is;
        1 for an unknown session)."""
        row = self.read(
            "reading", lambda conn: conn.execute(self.q.retained, (tenant, name)).fetchone()
        )
        return retained_start(row)

    def copy_prefix(self, tenant: str, name: str, at_seq: int, new_name: str, ts: float) -> int:
        """Fork: a new session holding events 1…``at_seq`` of ``name``."""
        with self.transaction("forking") as cur:
            row = cur.execute(self.q.head + " FOR SHARE", (tenant, name)).fetchone()
            if row is None:
                raise SessionNotFoundError(f"no session {name!r} to fork")
            if at_seq > int(row[0]):
                raise ValueError(f"cannot fork {name!r} at {at_seq}: its head is {row[0]}")
            self._check_retained(cur, tenant, name, "fork", at_seq, int(row[0]))
            created = cur.execute(
                self.q.create_session, (tenant, new_name, at_seq, ts, ts)
            ).fetchone()
            if created is None:
                raise SessionExistsError(f"session {new_name!r} already exists")
            cur.execute(self.q.copy_events, (new_name, tenant, name, at_seq))
            cur.execute(self.q.copy_snapshots, (new_name, tenant, name, at_seq))
            self._notify_on(cur, tenant, new_name, at_seq)
            return at_seq

    # -- operations ----------------------------------------------------------------------

    def stats(self, largest: int = 10) -> dict[str, Any]:
        """Counts, the largest sessions and the tables' sizes, from one snapshot.

        ``relation_bytes`` maps each table of the schema to its
        ``pg_total_relation_size`` (indexes and TOAST included); ``total_bytes``
        is their sum.
        """

        def work(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                totals = conn.execute(self.q.totals).fetchone()
                assert totals is not None
                rows = conn.execute(self.q.largest, (largest,)).fetchall()
                sizes = conn.execute(
                    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname",
                    (self.schema,),
                ).fetchall()
                version = schema_version_of(conn, self.schema)
                server = conn.info.server_version
            relation_bytes = {str(name): int(size) for name, size in sizes}
            return {
                "schema": self.schema,
                "schema_version": version,
                "server_version": f"{server // 10000}.{server % 10000}",
                "sessions": int(totals[0]),
                "tenants": int(totals[1]),
                "events": int(totals[2]),
                "relation_bytes": relation_bytes,
                "total_bytes": sum(relation_bytes.values()),
                "largest_sessions": [
                    {"tenant": str(t), "session": str(n), "events": int(h), "mtime": float(m)}
                    for t, n, h, m in rows
                ],
            }

        return self.read("reading the statistics", work)

    def delete_idle(self, tenant: str, before: float, batch: int = 100) -> builtins.list[str]:
        """Delete ``tenant``'s sessions last changed before ``before`` (epoch
        seconds), a batch per transaction; their names, oldest first.

        Each batch locks the sessions it picks and checks their ``mtime`` on
        the locked rows, so a session another process appends to meanwhile is
        kept.
        """
        deleted: builtins.list[str] = []
        while True:
            with self.transaction("deleting idle sessions") as cur:
                names = [
                    str(row[0])
                    for row in cur.execute(self.q.idle, (tenant, before, batch)).fetchall()
                ]
                if names:
                    cur.execute(self.q.delete_events_of, (tenant, names))
                    cur.execute(self.q.delete_snapshots_of, (tenant, names))
                    cur.execute(self.q.delete_sessions, (tenant, names))
                    for name in names:
                        self._notify_on(cur, tenant, name, 0)
            deleted.extend(names)
            if len(names) < batch:
                return deleted

    def check_integrity(self, limit: int = 20) -> tuple[bool, str]:
        """Every session's events run without a gap up to its head, from 1 or
        from after what a snapshot covers (retention), and every event has
        its session: ``(True, "ok")``, or ``(False, one line per problem)``."""

        def work(conn: psycopg.Connection[Any]) -> tuple[Any, Any]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                damaged = conn.execute(self.q.damaged, (limit,)).fetchall()
                orphans = conn.execute(self.q.orphans, (limit,)).fetchall()
            return damaged, orphans

        damaged, orphans = self.read("checking the store", work)
        problems = [
            f"session {tenant}/{name}: head {head}, but {count} event(s) numbered {lo}..{hi}"
            for tenant, name, head, count, lo, hi in damaged
        ]
        problems += [
            f"{count} event(s) of {tenant}/{name}, which has no session row"
            for tenant, name, count in orphans
        ]
        if not problems:
            return True, "ok"
        return False, "\n".join(problems)


class Rows:
    """What a store's work runs statements on (a cursor in its transaction).

    ``writing`` says whether this is a write transaction; there a record is
    read with :meth:`locked`.
    """

    def __init__(self, database: PostgresDatabase, cur: psycopg.Cursor[Any], writing: bool):
        self.database = database
        self.cur = cur
        self.writing = writing

    def rows(self, statement: str, params: Sequence[Any] = ()) -> builtins.list[tuple[Any, ...]]:
        """Run ``statement``; its rows (none for a statement that returns none)."""
        self.cur.execute(statement, params)
        if self.cur.description is None:
            return []
        return self.cur.fetchall()

    def locked(self, select: str, claim: str, key: Sequence[Any]) -> tuple[Any, ...] | None:
        """The record at ``key``, locked until commit; None when there is none.

        ``select`` reads it ``FOR UPDATE``; when there is none,
        ``claim`` inserts a placeholder row ``ON CONFLICT DO NOTHING`` — ours
        until commit, so a second writer creating the same record waits for
        this transaction and then finds the record (a clean conflict). The
        work replaces the placeholder (an upsert) or raises, rolling it back.
        """
        while True:
            found = self.rows(select, key)
            if found:
                return found[0]
            if self.rows(claim, key):
                return None
            # Created by another transaction in between: read it.

    def notify(self, tenant: str, name: str, head: int) -> None:
        """Tell followers of the session (delivered at commit)."""
        if self.database.notify:
            payload = f"{head} {self.database.notify_key(tenant, name)}"
            self.cur.execute(self.database.q.notify, (self.database.channel, payload))


class Listener:
    """One ``LISTEN`` connection and the thread that waits on it.

    ``on_notify(head, key_text)`` is called on the listener's thread for each
    notification on the channel; ``on_state()`` whenever the connection is
    (re)established or lost — notifications may have been missed then, so
    the caller looks again. :attr:`generation` counts the connections made;
    :attr:`connected` says whether one is listening now. :meth:`stop` ends
    the thread at once (a self-pipe wakes its ``select``) and joins it.
    """

    def __init__(
        self,
        database: PostgresDatabase,
        on_notify: Callable[[int, str], None],
        on_state: Callable[[], None],
        retry_interval: float = 0.2,
    ) -> None:
        self._database = database
        self._on_notify = on_notify
        self._on_state = on_state
        self._retry = retry_interval
        self.generation = 0
        self.connected = False
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(
            target=self._run, name=f"agentlog-listen-{database.schema}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping:
                with contextlib.suppress(psycopg.Error, OSError):
                    self._listen()
                if self.connected:
                    self.connected = False
                    self._on_state()
                if not self._stopping and self._wait_wake(self._retry):
                    break
        finally:
            os.close(self._wake_r)

    def _wait_wake(self, timeout: float) -> bool:
        """Sleep ``timeout`` unless woken by stop (True then)."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake_r, selectors.EVENT_READ)
            sel.select(timeout)
        return self._stopping

    def _listen(self) -> None:
        conn = self._database.connect()
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._database.channel)))
            pgconn = conn.pgconn
            self.generation += 1
            self.connected = True
            self._on_state()
            with selectors.DefaultSelector() as sel:
                sel.register(pgconn.socket, selectors.EVENT_READ)
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._stopping:
                    sel.select(30.0)
                    if self._stopping:
                        return
                    pgconn.consume_input()
                    while (note := pgconn.notifies()) is not None:
                        head, _, key = note.extra.decode().partition(" ")
                        with contextlib.suppress(ValueError):
                            self._on_notify(int(head), key)
                    if pgconn.status != psycopg.pq.ConnStatus.OK:
                        return
        finally:
            conn.close()

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread and join it."""
        self._stopping = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with contextlib.suppress(OSError):
            os.close(self._wake_w)
