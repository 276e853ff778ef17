"""The schema of a PostgreSQL store: its tables, its versions, and the steps between.

One schema per agentlog store (``agentlog`` unless told otherwise):

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
* version 3: ``migration_ledger``, what ``agentlog migrate`` copied in.
* version 4: ``events.crc``, the CRC-32 of the payload (``zlib.crc32``),
  verified on every read; ``NULL`` for events written before (read unverified).
* version 5: ``append_keys (tenant, session, key)``: the digest and the head
  of each keyed append (idempotent appends), written in its transaction.
* version 6: ``fork_origins (tenant, session)``: where a fork came from (the
  source's id and the seq), written in the fork's transaction.

Opening a store and migrating it are operations (:mod:`.protocol`): the
drivers run them on a connection.
"""

from __future__ import annotations

import logging
import re

from psycopg import sql

from ...errors import SchemaVersionError, StorageNotFoundError
from ..errors import refused
from .protocol import Operation, execute, fetch_all, fetch_one

_log = logging.getLogger("agentlog.postgres")

__all__ = [
    "ACTIVITY_VERSION",
    "CHECKSUM_VERSION",
    "DEFAULT_SCHEMA",
    "LINEAGE_VERSION",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "check_schema_name",
    "migrate",
    "open_store",
    "quoted",
    "schema_version",
]

#: The schema an agentlog store lives in unless told otherwise.
DEFAULT_SCHEMA = "agentlog"

#: The version this agentlog writes; a store of a larger one is refused.
SCHEMA_VERSION = 7

#: The version from which events carry ``crc``.
CHECKSUM_VERSION = 4
#: The version that added ``fork_origins`` (a read-only open of an older
#: store has no lineage to read).
LINEAGE_VERSION = 6

#: The version from which sessions carry ``active``, their activity second
#: (a page of sessions read read-only from an older store computes it).
ACTIVITY_VERSION = 7

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
    5: (
        # Idempotent appends: a keyed append claims its key's row first (a
        # racer on the same key waits on the row's unique index, then finds
        # it), then appends and records the head. Unkeyed appends never touch it.
        """CREATE TABLE {s}.append_keys (
            tenant text COLLATE "C" NOT NULL,
            session text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            digest bytea NOT NULL,
            head bigint NOT NULL,
            PRIMARY KEY (tenant, session, key)
        )""",
    ),
    6: (
        # -- fork lineage (step 6) --------------------------------------------
        # Where a fork came from: one row per session a fork made, removed
        # with the session; the source named by its id (the record outlives
        # it). Earlier forks have none. The index finds a session's forks.
        """CREATE TABLE {s}.fork_origins (
            tenant text COLLATE "C" NOT NULL,
            session text COLLATE "C" NOT NULL,
            source text COLLATE "C" NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (tenant, session)
        )""",
        "CREATE INDEX fork_origins_by_source ON {s}.fork_origins (tenant, source)",
        # -- end of fork lineage ----------------------------------------------
    ),
    7: (
        # Activity at one-second resolution, as SQLite's step 13: pages are
        # ordered by (active, name), and the index holds the second, not
        # mtime. A stored generated column, so every statement that writes
        # mtime keeps it; and since no index names mtime any more, an append
        # within the same second changes no indexed value and is a HOT update
        # (no index entry written). Rewrites the sessions table once.
        "ALTER TABLE {s}.sessions ADD COLUMN active bigint"
        " GENERATED ALWAYS AS (trunc(mtime)::bigint) STORED",
        "DROP INDEX IF EXISTS {s}.sessions_by_activity",
        "CREATE INDEX sessions_by_active_second ON {s}.sessions (tenant, active DESC, name DESC)",
    ),
}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))


def check_schema_name(schema: object) -> str:
    """``schema`` if it is a plain lower-case SQL identifier of at most 48 characters."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ValueError(
            f"schema must match [a-z_][a-z0-9_]* and have at most 48 characters, not {schema!r}"
        )
    return schema


def quoted(schema: str) -> str:
    """The schema's name as it goes into a statement (checked, then quoted)."""
    return sql.Identifier(check_schema_name(schema)).as_string()


def _newer(schema: str, version: int) -> SchemaVersionError:
    return refused(
        SchemaVersionError(
            f"schema {schema!r} was written by a newer agentlog (version {version};"
            f" this one knows {SCHEMA_VERSION})"
        ),
        "agentlog.postgres",
    )


def schema_version(schema: str) -> Operation[int]:
    """The version of the store in ``schema``: 0 when there is none (refusing a foreign one)."""
    s = quoted(schema)
    exists = yield from fetch_one(
        "SELECT to_regclass(%s) IS NOT NULL, EXISTS (SELECT 1 FROM pg_tables"
        " WHERE schemaname = %s)",
        (f"{s}.agentlog_version", schema),
    )
    assert exists is not None
    has_version, has_tables = exists
    if not has_version:
        if has_tables:
            raise SchemaVersionError(f"schema {schema!r} holds tables but no agentlog store")
        return 0
    rows = yield from fetch_all(f"SELECT application, version FROM {s}.agentlog_version")
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


def migrate(schema: str) -> Operation[None]:
    """Create the store in ``schema``, or bring it forward (run in one transaction).

    A store of a newer version, or a schema holding other tables, is refused
    with :class:`SchemaVersionError` before anything changes.
    """
    s = quoted(schema)
    # Two processes opening a new store at once: one creates it, the
    # other waits here and then finds it (a lock for opening only).
    yield from fetch_one(
        "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"agentlog schema {schema}",)
    )
    version = yield from schema_version(schema)
    if version > SCHEMA_VERSION:
        raise _newer(schema, version)
    if version == SCHEMA_VERSION:
        return
    yield from execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
    if version == 0:
        yield from execute(
            f"CREATE TABLE {s}.agentlog_version (application text NOT NULL,"
            " version integer NOT NULL)"
        )
        yield from execute(f"INSERT INTO {s}.agentlog_version VALUES ('agentlog', 0)")
    for step in range(version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[step]:
            yield from execute(statement.format(s=s))
    yield from execute(f"UPDATE {s}.agentlog_version SET version = %s", (SCHEMA_VERSION,))
    if version:  # 0: a new store, created rather than upgraded
        _log.info("schema %r: steps %d to %d, in one transaction", schema, version, SCHEMA_VERSION)


def open_store(schema: str, *, create: bool, read_only: bool) -> Operation[int]:
    """Opening a store (run in one transaction): create or migrate it, or, with
    ``create=False`` or ``read_only``, refuse a schema without one
    (:class:`StorageNotFoundError`); ``read_only`` changes nothing. Returns
    the version the store is at once opened (an older one only read-only)."""
    if create and not read_only:
        yield from migrate(schema)
        return SCHEMA_VERSION
    version = yield from schema_version(schema)
    if version == 0:
        raise StorageNotFoundError(
            f"no agentlog store in schema {schema!r} of this database (opened without creating one)"
        )
    if version > SCHEMA_VERSION:
        raise _newer(schema, version)
    if not read_only:
        yield from migrate(schema)
        return SCHEMA_VERSION
    return version
