"""PostgreSQL: the schema, every statement, each operation once, and two drivers.

This package needs ``psycopg`` 3 and ``psycopg_pool`` (``pip install
"agentlog[postgres]"``); nothing imports it unless PostgreSQL is asked for.

* :mod:`.schema` — the tables, their versions, opening and migrating a store.
* :mod:`.statements` — every PostgreSQL statement of agentlog (the log's,
  the stores', the migration's), per schema.
* :mod:`.protocol` — the steps an operation yields; :mod:`.operations` (the
  log), :mod:`.rows` (the stores' row operations) and :mod:`.journal` (the
  one writer of events) — each operation written once, without I/O.
* :mod:`.sync` and :mod:`.aio` — the drivers that run operations on psycopg's
  connections and pools; :mod:`.listener` — ``LISTEN`` for followers.

Payloads are ``bytea`` holding agentlog's own JSON encoding, byte for byte:
``jsonb`` would reorder keys and drop duplicate ones (and store numbers as
``numeric``), and ``json``/``text`` would make every value pass the server's
encoding checks and conversions. With ``bytea`` a payload reads back exactly
as it was encoded, whatever the database's encoding. No lock or sequence is
shared between sessions (see :mod:`.journal` for an append).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...errors import InvalidEventError
from ...events import EncodedBatch
from . import migration, operations, rows
from .connect import (
    DEFAULT_OPTIONS,
    OutcomeUnknownIfLost,
    PostgresOptions,
    connect_options,
    connection_lost,
    outcome_unknown,
    pool_sizes,
    statement_timeout_sql,
    translate_errors,
)
from .journal import notify_key, payload_of
from .listener import Listener, WatchedKeys, listen_async
from .operations import MAX_SEQ, AppendRequest, retained_start
from .schema import (
    CHECKSUM_VERSION,
    DEFAULT_SCHEMA,
    SCHEMA_VERSION,
    check_schema_name,
    migrate,
    schema_version,
)
from .statements import Statements
from .sync import PageReader, PostgresDatabase, Rows, drive, one_transaction

__all__ = [
    "CHECKSUM_VERSION",
    "DEFAULT_OPTIONS",
    "DEFAULT_SCHEMA",
    "MAX_BATCH_BYTES",
    "MAX_SEQ",
    "SCHEMA_VERSION",
    "AppendRequest",
    "Listener",
    "OutcomeUnknownIfLost",
    "PageReader",
    "PostgresDatabase",
    "PostgresOptions",
    "Rows",
    "Statements",
    "WatchedKeys",
    "check_schema_name",
    "connect_options",
    "connection_lost",
    "drive",
    "listen_async",
    "migrate",
    "migrate_schema",
    "migration",
    "notify_key",
    "one_transaction",
    "operations",
    "outcome_unknown",
    "oversized_batch",
    "pool_sizes",
    "retained_start",
    "rows",
    "schema_version_of",
    "statement_timeout_sql",
    "translate_errors",
]

#: The most one append sends in its statement, its events' bytes together:
#: PostgreSQL takes a message of at most 1 GiB, and closes the connection
#: on a larger one ("invalid message length").
MAX_BATCH_BYTES = 1_000_000_000


def oversized_batch(batch: EncodedBatch) -> InvalidEventError | None:
    """The error for a batch too large for one append, naming the event that
    takes it past :data:`MAX_BATCH_BYTES`; ``None`` when it fits."""
    if sum(map(len, map(payload_of, batch))) <= MAX_BATCH_BYTES:
        return None  # the common case, counted in C
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


def migrate_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the store in ``schema``, or bring it forward, in one transaction.

    A store of a newer version, or a schema holding other tables, is refused
    with :class:`SchemaVersionError` before anything changes.
    """
    with conn.transaction():
        drive(conn, migrate(schema))


def schema_version_of(conn: psycopg.Connection[Any], schema: str) -> int:
    """The version of the store in ``schema``: 0 when there is none (refusing a foreign one)."""
    return drive(conn, schema_version(schema))
