"""The row operations of the four stores on PostgreSQL, each written once and
without I/O (see :mod:`.protocol`).

The stores keep their rules (revisions, state transitions) and ask for rows
here. Each runs inside the store's transaction: in a write, a record is read
``FOR UPDATE`` or, when it does not exist yet, claimed with a placeholder row
that a second creator waits for (:func:`locked`), so a compare-and-set has
exactly one winner per revision across any number of processes and hosts.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .journal import Entry, write_entries
from .operations import notify
from .protocol import Operation, execute, fetch_all, fetch_one
from .statements import Statements

__all__ = [
    "CHECKPOINT_FILTERS",
    "add_items",
    "add_snapshot",
    "artifact_row",
    "artifacts_after",
    "checkpoint_row",
    "checkpoints_after",
    "create_session",
    "delete_artifact",
    "delete_checkpoint",
    "delete_memory",
    "drop_items",
    "first_item",
    "get_chunk",
    "item_taken",
    "items",
    "locked",
    "memory_after",
    "memory_row",
    "put_artifact",
    "put_checkpoint",
    "put_memory",
    "release_blob",
    "remove_session",
    "session_row",
    "sessions_after",
    "snapshot_row",
    "store_blob",
]

#: Columns a checkpoint listing may filter on (each served by an index).
CHECKPOINT_FILTERS = ("run_id", "session_id", "parent_run_id", "status")


def locked(select: str, claim: str, key: Sequence[Any]) -> Operation[tuple[Any, ...] | None]:
    """The record at ``key``, locked until commit; None when there is none.

    ``select`` reads it ``FOR UPDATE``; when there is none, ``claim`` inserts
    a placeholder row ``ON CONFLICT DO NOTHING`` — ours until commit, so a
    second writer creating the same record waits for this transaction and
    then finds the record (a clean conflict). The work replaces the
    placeholder (an upsert) or raises, rolling it back.
    """
    while True:
        found = yield from fetch_one(select, key)
        if found is not None:
            return found
        if (yield from fetch_all(claim, key)):
            return None
        # Created by another transaction in between: read it.


def _record(
    select: str, select_locked: str, claim: str, key: Sequence[Any], writing: bool
) -> Operation[tuple[Any, ...] | None]:
    if writing:
        return (yield from locked(select_locked, claim, key))
    return (yield from fetch_one(select, key))


# -- sessions -----------------------------------------------------------------------------


def session_row(
    q: Statements, key: tuple[str, str], writing: bool
) -> Operation[tuple[Any, ...] | None]:
    """``(head, revision, metadata, created, mtime, newest snapshot's through_seq)``."""
    return (yield from _record(q.session, q.session_locked, q.session_claim, key, writing))


def create_session(q: Statements, key: tuple[str, str], meta: bytes, now: float) -> Operation[None]:
    """The row claimed by :func:`session_row` becomes the session."""
    yield from execute(q.session_create, (now, now, meta, *key))


def item_taken(q: Statements, handle: tuple[str, str], item_id: str) -> Operation[bool]:
    """Whether the session holds an item with this id."""
    return bool((yield from fetch_all(q.item_taken, (*handle, item_id))))


def add_items(
    q: Statements,
    handle: tuple[str, str],
    head: int,
    entries: Sequence[Entry],
    now: float,
    notifying: bool,
) -> Operation[None]:
    """The items after ``head`` through the journal's writer; the head moves past them."""
    yield from write_entries(q, *handle, head, entries)
    yield from execute(q.move_head, (head + len(entries), now, *handle))
    yield from notify(q, *handle, head + len(entries), notifying)


def add_snapshot(
    q: Statements, handle: tuple[str, str], through: int, state: bytes, now: float
) -> Operation[None]:
    """A snapshot through ``through``; the session's revision moves."""
    yield from execute(q.add_snapshot, (*handle, through, state, now))
    yield from execute(q.touch, (now, *handle))


def snapshot_row(
    q: Statements, handle: tuple[str, str], through: int
) -> Operation[tuple[int, bytes, float]]:
    """``(through_seq, state, created)`` of the snapshot through ``through``."""
    rows = yield from fetch_all(q.snapshot, (*handle, through))
    found, state, created = rows[0]
    return int(found), bytes(state), float(created)


def items(
    q: Statements, handle: tuple[str, str], start: int, stop: int
) -> Operation[list[tuple[Any, ...]]]:
    """``(seq, ts, type, payload, crc)`` of the events in ``(start, stop]``."""
    return (yield from fetch_all(q.items, (*handle, start, stop)))


def sessions_after(
    q: Statements, tenant: str, after: str | None, limit: int
) -> Operation[list[tuple[Any, ...]]]:
    """``(name, *session row)`` of the tenant's sessions after ``after``, by name."""
    return (yield from fetch_all(q.sessions_after, (tenant, "" if after is None else after, limit)))


def remove_session(q: Statements, key: tuple[str, str], notifying: bool) -> Operation[None]:
    """The session, its events and its snapshots."""
    yield from execute(q.remove_session, key)
    yield from execute(q.remove_events, key)
    yield from execute(q.remove_snapshots, key)
    yield from execute(q.delete_append_keys, key)
    yield from execute(q.delete_fork_origin, key)
    yield from notify(q, *key, 0, notifying)


def first_item(q: Statements, handle: tuple[str, str]) -> Operation[int | None]:
    """The seq of the session's first stored event, if any."""
    found = yield from fetch_all(q.first_item, handle)
    return int(found[0][0]) if found else None


def drop_items(q: Statements, handle: tuple[str, str], cut: int) -> Operation[None]:
    """Retention: the events through ``cut`` and the snapshots below it."""
    yield from execute(q.drop_items, (*handle, cut))
    yield from execute(q.drop_snapshots, (*handle, cut))


# -- memory -------------------------------------------------------------------------------


def memory_row(
    q: Statements, ident: tuple[str, str, str], writing: bool
) -> Operation[tuple[Any, ...] | None]:
    """``(value, revision, created, updated)`` of a memory record."""
    return (yield from _record(q.memory, q.memory_locked, q.memory_claim, ident, writing))


def put_memory(q: Statements, ident: tuple[str, str, str], row: Sequence[Any]) -> Operation[None]:
    """Insert or replace a memory record."""
    yield from execute(q.memory_put, (*ident, *row))


def delete_memory(q: Statements, ident: tuple[str, str, str]) -> Operation[None]:
    """Remove a memory record."""
    yield from execute(q.memory_delete, ident)


def memory_after(
    q: Statements, tenant: str, namespace: str, after: str | None, limit: int
) -> Operation[list[tuple[Any, ...]]]:
    """``(key, value, revision, created, updated)`` after ``after``, by key."""
    params = (tenant, namespace, "" if after is None else after, limit)
    return (yield from fetch_all(q.memory_list, params))


# -- checkpoints --------------------------------------------------------------------------


def checkpoint_row(
    q: Statements, key: tuple[str, str], writing: bool
) -> Operation[tuple[Any, ...] | None]:
    """A run checkpoint's row (every column)."""
    return (yield from _record(q.checkpoint, q.checkpoint_locked, q.checkpoint_claim, key, writing))


def put_checkpoint(q: Statements, row: Sequence[Any]) -> Operation[None]:
    """Insert or replace a run checkpoint."""
    yield from execute(q.checkpoint_put, row)


def delete_checkpoint(q: Statements, key: tuple[str, str]) -> Operation[None]:
    """Remove a run checkpoint."""
    yield from execute(q.checkpoint_delete, key)


def checkpoints_after(
    q: Statements, tenant: str, filters: Mapping[str, str], after: str | None, limit: int
) -> Operation[list[tuple[Any, ...]]]:
    """The tenant's checkpoints matching ``filters`` after ``after``, by run id."""
    if not set(filters) <= set(CHECKPOINT_FILTERS):
        raise ValueError(f"cannot filter checkpoints on {tuple(filters)!r}")
    where = "".join(f" AND {column} = %s" for column in filters)
    statement = f"{q.checkpoints_from}{where} AND run_id > %s ORDER BY run_id LIMIT %s"
    params = (tenant, *filters.values(), "" if after is None else after, limit)
    return (yield from fetch_all(statement, params))


# -- artifacts ----------------------------------------------------------------------------


def artifact_row(
    q: Statements, key: tuple[str, str], writing: bool
) -> Operation[tuple[Any, ...] | None]:
    """``(sha256, size, media_type, metadata, revision, created, updated)``."""
    return (yield from _record(q.artifact, q.artifact_locked, q.artifact_claim, key, writing))


def put_artifact(q: Statements, key: tuple[str, str], row: Sequence[Any]) -> Operation[None]:
    """Insert or replace an artifact's row."""
    yield from execute(q.artifact_put, (*key, *row))


def delete_artifact(q: Statements, key: tuple[str, str]) -> Operation[None]:
    """Remove an artifact's row."""
    yield from execute(q.artifact_delete, key)


def artifacts_after(
    q: Statements, tenant: str, after: str | None, limit: int
) -> Operation[list[tuple[Any, ...]]]:
    """``(artifact_id, *row)`` after ``after``, by id."""
    return (
        yield from fetch_all(q.artifacts_after, (tenant, "" if after is None else after, limit))
    )


def store_blob(q: Statements, chunks: Iterator[bytes]) -> Operation[tuple[str, int]]:
    """Stream ``chunks`` in under a staging key while hashing them, then file
    them under their sha256 — or drop them for the copy already stored, whose
    count goes up. ``(sha256, size)``."""
    staging = f"staging:{uuid.uuid4().hex}"
    digest, size = hashlib.sha256(), 0
    for n, chunk in enumerate(chunks):
        digest.update(chunk)
        size += len(chunk)
        yield from execute(q.chunk_insert, (staging, n, chunk))
    sha = digest.hexdigest()
    # A second writer of the same content waits here for the first.
    acquired = yield from fetch_all(q.blob_acquire, (sha, size))
    if acquired[0][0]:
        yield from execute(q.chunks_rename, (sha, staging))
    else:
        yield from execute(q.chunks_delete, (staging,))
    return sha, size


def release_blob(q: Statements, sha: str) -> Operation[None]:
    """One reference fewer; the last one removes the bytes."""
    left = yield from fetch_all(q.blob_release, (sha,))
    if left and left[0][0] <= 0:
        yield from execute(q.chunks_delete, (sha,))
        yield from execute(q.blob_delete, (sha,))


def get_chunk(q: Statements, sha: str, n: int) -> Operation[bytes | None]:
    """Chunk ``n`` of a blob, if there is one."""
    found = yield from fetch_all(q.chunk, (sha, n))
    return bytes(found[0][0]) if found else None
