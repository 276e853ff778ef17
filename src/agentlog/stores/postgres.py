"""The four stores on PostgreSQL, in the schema of the session log.

Needs ``pip install "agentlog[postgres]"``; imported on first use. Each
store supplies the row primitives of its base class with PostgreSQL
statements. A write is one read-committed transaction in which the record
is read ``FOR UPDATE`` (or, when it does not exist yet, claimed with a
placeholder row that a second creator waits for), so a compare-and-set has
exactly one winner per revision across any number of processes and hosts.
"""

from __future__ import annotations

import builtins
import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

from psycopg_pool import ConnectionPool

from ..engine.postgres import DEFAULT_SCHEMA, PostgresDatabase, Rows
from ..errors import CheckpointerClosedError
from ..integrity import checksum
from ..lifecycle import Closable
from ..log.postgres import PostgresCheckpointer
from .artifacts import ArtifactStore
from .artifacts import Row as ArtifactRow
from .checkpoints import CheckpointStore
from .common import DEFAULT_TENANT, Transactions, check_name
from .memories import MemoryStore
from .sessions import Entry, Row, SessionStore

__all__ = [
    "PostgresArtifactStore",
    "PostgresCheckpointStore",
    "PostgresMemoryStore",
    "PostgresSessionStore",
    "PostgresStorage",
]


class PostgresTransactions(Transactions):
    """Transactions of a PostgreSQL store: a locked write, or a (snapshot) read."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        self.q = _StoreStatements(database.q.schema)

    def _atomic(self, name: str, work: Any) -> Any:
        return self._db.atomic(name, work)

    def _reading(self, name: str, work: Any, *, snapshot: bool = False) -> Any:
        return self._db.reading(name, work, snapshot=snapshot)


class _StoreStatements:
    """The stores' statements, with the schema's quoted name in them."""

    def __init__(self, s: str) -> None:
        record = (
            "SELECT s.head, s.revision, s.metadata, s.created, s.mtime,"
            f" (SELECT max(through_seq) FROM {s}.snapshots n"
            "  WHERE n.tenant = s.tenant AND n.session = s.name)"
            f" FROM {s}.sessions s"
        )
        self.session = record + " WHERE s.tenant = %s AND s.name = %s"
        self.session_locked = self.session + " FOR UPDATE OF s"
        self.session_claim = (
            f"INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime)"
            " VALUES (%s, %s, 0, -1, 0, 0) ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.session_create = (
            f"UPDATE {s}.sessions SET head = 0, revision = 0, created = %s, mtime = %s,"
            " metadata = %s WHERE tenant = %s AND name = %s"
        )
        self.sessions_after = (
            f"SELECT s.name, {record.removeprefix('SELECT ')}"
            " WHERE s.tenant = %s AND s.name > %s ORDER BY s.name LIMIT %s"
        )
        self.item_taken = (
            f"SELECT 1 FROM {s}.events WHERE tenant = %s AND session = %s AND item_id = %s"
        )
        self.add_items = (
            f"INSERT INTO {s}.events (tenant, session, seq, ts, type, payload, item_id, crc)"
            " SELECT %s, %s, %s + e.ord, e.ts, e.type, e.payload, e.item_id, e.crc"
            " FROM unnest(%b::float8[], %b::text[], %b::bytea[], %b::text[], %b::bigint[])"
            " WITH ORDINALITY AS e(ts, type, payload, item_id, crc, ord)"
        )
        self.move_head = (
            f"UPDATE {s}.sessions SET head = %s, mtime = %s, revision = revision + 1"
            " WHERE tenant = %s AND name = %s"
        )
        self.touch = (
            f"UPDATE {s}.sessions SET mtime = %s, revision = revision + 1"
            " WHERE tenant = %s AND name = %s"
        )
        self.add_snapshot = (
            f"INSERT INTO {s}.snapshots (tenant, session, through_seq, state, created)"
            " VALUES (%s, %s, %s, %s, %s)"
        )
        self.snapshot = (
            f"SELECT through_seq, state, created FROM {s}.snapshots"
            " WHERE tenant = %s AND session = %s AND through_seq = %s"
        )
        self.items = (
            f"SELECT seq, ts, type, payload, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq > %s AND seq <= %s ORDER BY seq"
        )
        self.first_item = (
            f"SELECT seq FROM {s}.events WHERE tenant = %s AND session = %s ORDER BY seq LIMIT 1"
        )
        self.drop_items = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s AND seq <= %s"
        self.drop_snapshots = (
            f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s AND through_seq < %s"
        )
        self.remove_events = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s"
        self.remove_snapshots = f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s"
        self.remove_session = f"DELETE FROM {s}.sessions WHERE tenant = %s AND name = %s"
        # memory
        memory = f"SELECT value, revision, created, updated FROM {s}.memory"
        self.memory = memory + " WHERE tenant = %s AND namespace = %s AND key = %s"
        self.memory_locked = self.memory + " FOR UPDATE"
        self.memory_claim = (
            f"INSERT INTO {s}.memory VALUES (%s, %s, %s, '', -1, 0, 0)"
            " ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.memory_put = (
            f"INSERT INTO {s}.memory (tenant, namespace, key, value, revision, created, updated)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, namespace, key) DO UPDATE"
            " SET value = EXCLUDED.value, revision = EXCLUDED.revision,"
            " created = EXCLUDED.created, updated = EXCLUDED.updated"
        )
        self.memory_delete = (
            f"DELETE FROM {s}.memory WHERE tenant = %s AND namespace = %s AND key = %s"
        )
        self.memory_list = (
            f"SELECT key, value, revision, created, updated FROM {s}.memory"
            " WHERE tenant = %s AND namespace = %s AND key > %s ORDER BY key LIMIT %s"
        )
        # checkpoints
        columns = (
            "tenant, run_id, session_id, parent_run_id, status, data, revision, created, updated"
        )
        self.checkpoint_columns = columns
        self.checkpoint = f"SELECT {columns} FROM {s}.checkpoints WHERE tenant = %s AND run_id = %s"
        self.checkpoint_locked = self.checkpoint + " FOR UPDATE"
        self.checkpoint_claim = (
            f"INSERT INTO {s}.checkpoints VALUES (%s, %s, NULL, NULL, '', '', -1, 0, 0)"
            " ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.checkpoint_put = (
            f"INSERT INTO {s}.checkpoints ({columns}) VALUES ({', '.join(['%s'] * 9)})"
            " ON CONFLICT (tenant, run_id) DO UPDATE SET session_id = EXCLUDED.session_id,"
            " parent_run_id = EXCLUDED.parent_run_id, status = EXCLUDED.status,"
            " data = EXCLUDED.data, revision = EXCLUDED.revision,"
            " created = EXCLUDED.created, updated = EXCLUDED.updated"
        )
        self.checkpoint_delete = f"DELETE FROM {s}.checkpoints WHERE tenant = %s AND run_id = %s"
        self.checkpoints_from = f"SELECT {columns} FROM {s}.checkpoints WHERE tenant = %s"
        # artifacts
        artifact = "sha256, size, media_type, metadata, revision, created, updated"
        self.artifact = (
            f"SELECT {artifact} FROM {s}.artifacts WHERE tenant = %s AND artifact_id = %s"
        )
        self.artifact_locked = self.artifact + " FOR UPDATE"
        self.artifact_claim = (
            f"INSERT INTO {s}.artifacts VALUES (%s, %s, '', 0, '', '', -1, 0, 0)"
            " ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.artifact_put = (
            f"INSERT INTO {s}.artifacts (tenant, artifact_id, {artifact})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (tenant, artifact_id) DO UPDATE SET sha256 = EXCLUDED.sha256,"
            " size = EXCLUDED.size, media_type = EXCLUDED.media_type,"
            " metadata = EXCLUDED.metadata, revision = EXCLUDED.revision,"
            " created = EXCLUDED.created, updated = EXCLUDED.updated"
        )
        self.artifact_delete = f"DELETE FROM {s}.artifacts WHERE tenant = %s AND artifact_id = %s"
        self.artifacts_after = (
            f"SELECT artifact_id, {artifact} FROM {s}.artifacts"
            " WHERE tenant = %s AND artifact_id > %s ORDER BY artifact_id LIMIT %s"
        )
        self.chunk_insert = f"INSERT INTO {s}.blob_chunks (sha256, n, data) VALUES (%s, %s, %b)"
        self.chunk = f"SELECT data FROM {s}.blob_chunks WHERE sha256 = %s AND n = %s"
        self.chunks_rename = f"UPDATE {s}.blob_chunks SET sha256 = %s WHERE sha256 = %s"
        self.chunks_delete = f"DELETE FROM {s}.blob_chunks WHERE sha256 = %s"
        # One more reference, or a new blob: "inserted" tells which.
        self.blob_acquire = (
            f"INSERT INTO {s}.blobs (sha256, size, refcount) VALUES (%s, %s, 1)"
            " ON CONFLICT (sha256) DO UPDATE SET refcount = blobs.refcount + 1"
            " RETURNING (xmax = 0) AS inserted"
        )
        self.blob_release = (
            f"UPDATE {s}.blobs SET refcount = refcount - 1 WHERE sha256 = %s RETURNING refcount"
        )
        self.blob_delete = f"DELETE FROM {s}.blobs WHERE sha256 = %s"


class PostgresSessionStore(PostgresTransactions, SessionStore):
    """A :class:`SessionStore` on the session log's own tables (the handle is the key)."""

    def _get_row(self, ctx: Rows, key: tuple[str, str]) -> Row | None:
        if ctx.writing:
            found = ctx.locked(self.q.session_locked, self.q.session_claim, key)
        else:
            rows = ctx.rows(self.q.session, key)
            found = rows[0] if rows else None
        return None if found is None else (key, *found)

    def _insert_session(self, ctx: Rows, key: tuple[str, str], meta: bytes, now: float) -> None:
        # The row claimed by _get_row becomes the session.
        ctx.rows(self.q.session_create, (now, now, meta, *key))

    def _item_taken(self, ctx: Rows, handle: tuple[str, str], item_id: str) -> bool:
        return bool(ctx.rows(self.q.item_taken, (*handle, item_id)))

    def _add_items(
        self,
        ctx: Rows,
        handle: tuple[str, str],
        head: int,
        entries: builtins.list[Entry],
        now: float,
    ) -> None:
        columns = (
            [entry[0] for entry in entries],
            [entry[1] for entry in entries],
            [entry[2] for entry in entries],
            [entry[3] for entry in entries],
            [checksum(entry[2]) for entry in entries],
        )
        ctx.rows(self.q.add_items, (*handle, head, *columns))
        ctx.rows(self.q.move_head, (head + len(entries), now, *handle))
        ctx.notify(*handle, head + len(entries))

    def _add_snapshot(
        self, ctx: Rows, handle: tuple[str, str], through: int, state: bytes, now: float
    ) -> None:
        ctx.rows(self.q.add_snapshot, (*handle, through, state, now))
        ctx.rows(self.q.touch, (now, *handle))

    def _get_snapshot(
        self, ctx: Rows, handle: tuple[str, str], through: int
    ) -> tuple[int, bytes, float]:
        found, state, created = ctx.rows(self.q.snapshot, (*handle, through))[0]
        return int(found), bytes(state), float(created)

    def _get_items(
        self, ctx: Rows, handle: tuple[str, str], start: int, stop: int
    ) -> builtins.list[tuple[Any, ...]]:
        return ctx.rows(self.q.items, (*handle, start, stop))

    def _select(
        self, ctx: Rows, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        rows = ctx.rows(self.q.sessions_after, (tenant, "" if after is None else after, limit))
        return [(row[0], ((tenant, row[0]), *row[1:])) for row in rows]

    def _remove(self, ctx: Rows, key: tuple[str, str], handle: tuple[str, str]) -> None:
        ctx.rows(self.q.remove_session, key)
        ctx.rows(self.q.remove_events, key)
        ctx.rows(self.q.remove_snapshots, key)
        ctx.notify(*key, 0)

    def _first_seq(self, ctx: Rows, handle: tuple[str, str], head: int) -> int:
        found = ctx.rows(self.q.first_item, handle)
        return int(found[0][0]) if found else head + 1

    def _drop_items(self, ctx: Rows, handle: tuple[str, str], cut: int) -> None:
        ctx.rows(self.q.drop_items, (*handle, cut))
        ctx.rows(self.q.drop_snapshots, (*handle, cut))


class PostgresMemoryStore(PostgresTransactions, MemoryStore):
    """A :class:`MemoryStore` on PostgreSQL: one row per (tenant, namespace, key)."""

    def _get_row(self, ctx: Rows, ident: tuple[str, str, str]) -> tuple[Any, ...] | None:
        if ctx.writing:
            return ctx.locked(self.q.memory_locked, self.q.memory_claim, ident)
        rows = ctx.rows(self.q.memory, ident)
        return rows[0] if rows else None

    def _put_row(self, ctx: Rows, ident: tuple[str, str, str], row: tuple[Any, ...]) -> None:
        ctx.rows(self.q.memory_put, (*ident, *row))

    def _delete_row(self, ctx: Rows, ident: tuple[str, str, str]) -> None:
        ctx.rows(self.q.memory_delete, ident)

    def _select(
        self, tenant: str, namespace: str, after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        params = (tenant, namespace, "" if after is None else after, limit)
        rows: builtins.list[tuple[Any, ...]] = self._reading(
            "memory list", lambda ctx: ctx.rows(self.q.memory_list, params)
        )
        return rows


#: Columns a checkpoint listing may filter on (each served by an index).
_CHECKPOINT_FILTERS = ("run_id", "session_id", "parent_run_id", "status")


class PostgresCheckpointStore(PostgresTransactions, CheckpointStore):
    """A :class:`CheckpointStore` on PostgreSQL; listings served by indexes."""

    def _get_row(self, ctx: Rows, key: tuple[str, str]) -> tuple[Any, ...] | None:
        if ctx.writing:
            return ctx.locked(self.q.checkpoint_locked, self.q.checkpoint_claim, key)
        rows = ctx.rows(self.q.checkpoint, key)
        return rows[0] if rows else None

    def _put_row(self, ctx: Rows, row: tuple[Any, ...]) -> None:
        ctx.rows(self.q.checkpoint_put, row)

    def _delete_row(self, ctx: Rows, key: tuple[str, str]) -> None:
        ctx.rows(self.q.checkpoint_delete, key)

    def _select(
        self, tenant: str, filters: dict[str, str], after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        if not set(filters) <= set(_CHECKPOINT_FILTERS):
            raise ValueError(f"cannot filter checkpoints on {tuple(filters)!r}")
        where = "".join(f" AND {column} = %s" for column in filters)
        statement = f"{self.q.checkpoints_from}{where} AND run_id > %s ORDER BY run_id LIMIT %s"
        params = (tenant, *filters.values(), "" if after is None else after, limit)
        rows: builtins.list[tuple[Any, ...]] = self._reading(
            "checkpoint list", lambda ctx: ctx.rows(statement, params)
        )
        return rows


class PostgresArtifactStore(PostgresTransactions, ArtifactStore):
    """An :class:`ArtifactStore` on PostgreSQL.

    A put is one transaction: the bytes are streamed into 1 MiB chunks under
    a staging key while the sha256 is computed, then filed under that sha256
    — or dropped in favour of the copy already stored, whose count goes up.
    """

    def _get_row(self, ctx: Rows, key: tuple[str, str]) -> ArtifactRow | None:
        if ctx.writing:
            return ctx.locked(self.q.artifact_locked, self.q.artifact_claim, key)
        rows = ctx.rows(self.q.artifact, key)
        return rows[0] if rows else None

    def _put_row(self, ctx: Rows, key: tuple[str, str], row: ArtifactRow) -> None:
        ctx.rows(self.q.artifact_put, (*key, *row))

    def _delete_row(self, ctx: Rows, key: tuple[str, str]) -> None:
        ctx.rows(self.q.artifact_delete, key)

    def _select(
        self, ctx: Rows, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, ArtifactRow]]:
        rows = ctx.rows(self.q.artifacts_after, (tenant, "" if after is None else after, limit))
        return [(row[0], row[1:]) for row in rows]

    def _store_blob(self, ctx: Rows, chunks: Iterator[bytes]) -> tuple[str, int]:
        staging = f"staging:{uuid.uuid4().hex}"
        digest, size = hashlib.sha256(), 0
        for n, chunk in enumerate(chunks):
            digest.update(chunk)
            size += len(chunk)
            ctx.rows(self.q.chunk_insert, (staging, n, chunk))
        sha = digest.hexdigest()
        # A second writer of the same content waits here for the first.
        if ctx.rows(self.q.blob_acquire, (sha, size))[0][0]:
            ctx.rows(self.q.chunks_rename, (sha, staging))
        else:
            ctx.rows(self.q.chunks_delete, (staging,))
        return sha, size

    def _release_blob(self, ctx: Rows, sha: str) -> None:
        left = ctx.rows(self.q.blob_release, (sha,))
        if left and left[0][0] <= 0:
            ctx.rows(self.q.chunks_delete, (sha,))
            ctx.rows(self.q.blob_delete, (sha,))

    def _get_chunk(self, ctx: Rows, sha: str, n: int) -> bytes | None:
        found = ctx.rows(self.q.chunk, (sha, n))
        return bytes(found[0][0]) if found else None


class PostgresStorage(Closable):
    """The four stores in one PostgreSQL schema — the session log's own.

    ``PostgresStorage.open(conninfo_or_pool, schema=..., ...)`` takes the
    options of :class:`~agentlog.PostgresCheckpointer` (pool sizes, timeouts);
    :meth:`checkpointer` is the Checkpointer face of the same log, on the same
    pool.
    """

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        self.sessions = PostgresSessionStore(database)
        self.checkpoints = PostgresCheckpointStore(database)
        self.memory = PostgresMemoryStore(database)
        self.artifacts = PostgresArtifactStore(database)

    @classmethod
    def open(
        cls,
        target: str | ConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        **options: Any,
    ) -> PostgresStorage:
        """Open (creating or migrating forward) the store in ``schema``."""
        return cls(PostgresDatabase(target, schema=schema, **options))

    @property
    def database(self) -> PostgresDatabase:
        """The store underneath (its pool and schema)."""
        return self._db

    def checkpointer(self, tenant: str = DEFAULT_TENANT) -> PostgresCheckpointer:
        """The Checkpointer face of this schema's session log, for ``tenant``.

        It shares this storage's pool and closes with it; closing the
        checkpointer alone releases nothing.
        """
        if self.closed:
            raise CheckpointerClosedError("the storage is closed")
        return PostgresCheckpointer.on_database(self._db, check_name("tenant", tenant))

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._db.closed

    def close(self) -> None:
        """Close the pool (if it was made here); later use raises."""
        self._db.close()
