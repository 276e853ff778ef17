"""The four stores' row operations in the SQLite file, typed.

The stores (:mod:`agentlog.stores`) keep their rules — revisions, state
transitions, what a row means — and ask here for the rows, inside the
transaction the engine runs their work in (``conn``). Each operation is a
statement or a few of :mod:`.sql`; event keys are packed here
(:func:`.schema.event_key`), never above the engine.
"""

from __future__ import annotations

from typing import Any

from . import schema as S
from . import sql as Q
from .interface import Connection

__all__ = [
    "Row",
    "add_snapshot",
    "artifact",
    "artifacts",
    "blob_chunk",
    "checkpoint",
    "checkpoints",
    "delete_artifact",
    "delete_checkpoint",
    "delete_memory",
    "drop_items",
    "file_blob",
    "item_taken",
    "items",
    "memory",
    "memory_records",
    "put_artifact",
    "put_checkpoint",
    "put_memory",
    "release_blob",
    "session_record",
    "session_records",
    "set_head",
    "snapshot",
    "stage_chunk",
]

#: One row as SQLite returns it.
Row = tuple[Any, ...]


def _first(rows: list[Row]) -> Row | None:
    return rows[0] if rows else None


def _after(after: str | None) -> str:
    """A keyset page's lower bound: every key is greater than ``""``."""
    return "" if after is None else after


# -- sessions (the SessionStore's face of the log's tables) -----------------------------


def session_record(conn: Connection, tenant: str, name: str) -> Row | None:
    """``(sid, head, revision, metadata, created, mtime, newest snapshot's
    through_seq or None)`` of a session, or None."""
    return _first(conn.rows(Q.SESSION_RECORD, (tenant, name)))


def session_records(conn: Connection, tenant: str, after: str | None, limit: int) -> list[Row]:
    """A page of a tenant's sessions after the name ``after``, by name:
    ``(name, head, revision, metadata, created, mtime, through_seq or None)``."""
    return conn.rows(Q.SESSION_RECORDS, (tenant, _after(after), limit))


def item_taken(conn: Connection, sid: int, item_id: str) -> bool:
    """Whether session ``sid`` holds an item with id ``item_id``."""
    return bool(conn.rows(Q.ITEM_TAKEN, (sid, item_id)))


def set_head(conn: Connection, sid: int, head: int, now: float) -> None:
    """Move session ``sid``'s head (one more revision, activity at ``now``)."""
    conn.rows(Q.UPDATE_SESSION, (head, now, sid))


def add_snapshot(conn: Connection, sid: int, through: int, state: bytes, now: float) -> None:
    """Save a snapshot of session ``sid`` through ``through`` (one more revision)."""
    conn.rows(Q.INSERT_SNAPSHOT, (sid, through, state, now))
    conn.rows(Q.TOUCH_SESSION, (now, sid))


def snapshot(conn: Connection, sid: int, through: int) -> tuple[int, bytes, float]:
    """``(through_seq, state, created)`` of session ``sid``'s snapshot through ``through``."""
    found, state, created = conn.rows(Q.SELECT_SNAPSHOT, (sid, through))[0]
    return int(found), state, created


def items(conn: Connection, sid: int, start: int, stop: int) -> list[Row]:
    """Session ``sid``'s items with seq in (``start``, ``stop``], in order:
    ``(seq, ts, type, data, crc)``."""
    return conn.rows(Q.ITEMS_BETWEEN, (S.event_key(sid, start), S.event_key(sid, stop)))


def drop_items(conn: Connection, sid: int, cut: int) -> None:
    """Retention: remove session ``sid``'s items up to ``cut`` and the snapshots
    before it (they serve nothing any more)."""
    conn.rows(Q.DELETE_EVENTS_BETWEEN, (S.event_key(sid, 0), S.event_key(sid, cut)))
    conn.rows(Q.DELETE_SNAPSHOTS_BEFORE, (sid, cut))


# -- memory ------------------------------------------------------------------------------


def memory(conn: Connection, tenant: str, namespace: str, key: str) -> Row | None:
    """``(value, revision, created, updated)`` of a memory record, or None."""
    return _first(conn.rows(Q.MEMORY_GET, (tenant, namespace, key)))


def put_memory(
    conn: Connection, tenant: str, namespace: str, key: str, row: tuple[Any, ...]
) -> None:
    """Write a memory record: ``row`` is ``(value, revision, created, updated)``."""
    conn.rows(Q.MEMORY_PUT, (tenant, namespace, key, *row))


def delete_memory(conn: Connection, tenant: str, namespace: str, key: str) -> None:
    """Remove a memory record (nothing if there is none)."""
    conn.rows(Q.MEMORY_DELETE, (tenant, namespace, key))


def memory_records(
    conn: Connection, tenant: str, namespace: str, after: str | None, limit: int
) -> list[Row]:
    """A page of a namespace's records after the key ``after``, by key:
    ``(key, value, revision, created, updated)``."""
    return conn.rows(Q.MEMORY_LIST, (tenant, namespace, _after(after), limit))


# -- checkpoints -------------------------------------------------------------------------


def checkpoint(conn: Connection, tenant: str, run_id: str) -> Row | None:
    """A checkpoint's row (:data:`.sql.CHECKPOINT_COLUMNS`), or None."""
    return _first(conn.rows(Q.CHECKPOINT_GET, (tenant, run_id)))


def put_checkpoint(conn: Connection, row: tuple[Any, ...]) -> None:
    """Write a checkpoint's row (:data:`.sql.CHECKPOINT_COLUMNS`, in order)."""
    conn.rows(Q.CHECKPOINT_PUT, row)


def delete_checkpoint(conn: Connection, tenant: str, run_id: str) -> None:
    """Remove a checkpoint (nothing if there is none)."""
    conn.rows(Q.CHECKPOINT_DELETE, (tenant, run_id))


def checkpoints(
    conn: Connection, tenant: str, filters: dict[str, str], after: str | None, limit: int
) -> list[Row]:
    """A page of a tenant's checkpoints matching ``column = value`` for each
    filter (:data:`.sql.CHECKPOINT_FILTERS`), after the run id ``after``."""
    statement = Q.checkpoint_list(tuple(filters))
    return conn.rows(statement, (tenant, *filters.values(), _after(after), limit))


# -- artifacts ---------------------------------------------------------------------------


def artifact(conn: Connection, tenant: str, artifact_id: str) -> Row | None:
    """An artifact's row (:data:`.sql.ARTIFACT_COLUMNS`), or None."""
    return _first(conn.rows(Q.ARTIFACT_GET, (tenant, artifact_id)))


def put_artifact(conn: Connection, tenant: str, artifact_id: str, row: tuple[Any, ...]) -> None:
    """Write an artifact's row (:data:`.sql.ARTIFACT_COLUMNS`, in order)."""
    conn.rows(Q.ARTIFACT_PUT, (tenant, artifact_id, *row))


def delete_artifact(conn: Connection, tenant: str, artifact_id: str) -> None:
    """Remove an artifact's row (its blob is released by :func:`release_blob`)."""
    conn.rows(Q.ARTIFACT_DELETE, (tenant, artifact_id))


def artifacts(conn: Connection, tenant: str, after: str | None, limit: int) -> list[Row]:
    """A page of a tenant's artifacts after the id ``after``, by id:
    ``(artifact_id, *ARTIFACT_COLUMNS)``."""
    return conn.rows(Q.ARTIFACT_LIST, (tenant, _after(after), limit))


def stage_chunk(conn: Connection, staging: str, n: int, chunk: bytes) -> None:
    """Store chunk ``n`` of a blob being written under the key ``staging``."""
    conn.rows(Q.CHUNK_INSERT, (staging, n, chunk))


def file_blob(conn: Connection, staging: str, sha: str, size: int) -> None:
    """File the chunks staged under ``staging`` as the blob ``sha``: a new blob,
    or, when that content is already stored, one more reference to it (the
    staged copy dropped)."""
    if conn.rows(Q.BLOB_EXISTS, (sha,)):
        conn.rows(Q.CHUNKS_DELETE, (staging,))
        conn.rows(Q.BLOB_ACQUIRE, (sha,))
    else:
        conn.rows(Q.CHUNKS_RENAME, (sha, staging))
        conn.rows(Q.BLOB_INSERT, (sha, size))


def release_blob(conn: Connection, sha: str) -> None:
    """One reference to the blob ``sha`` fewer; the last removes its chunks."""
    conn.rows(Q.BLOB_RELEASE, (sha,))
    if conn.rows(Q.BLOB_REFCOUNT, (sha,))[0][0] <= 0:
        conn.rows(Q.CHUNKS_DELETE, (sha,))
        conn.rows(Q.BLOB_DELETE, (sha,))


def blob_chunk(conn: Connection, sha: str, n: int) -> bytes | None:
    """Chunk ``n`` of the blob ``sha``, or None past its last."""
    found = conn.rows(Q.CHUNK_GET, (sha, n))
    return found[0][0] if found else None
