"""The four stores on PostgreSQL, in the schema of the session log.

Needs ``pip install "agentlog[postgres]"``; imported on first use. Each
store supplies the row primitives of its base class with the engine's row
operations (:mod:`agentlog.engine.postgres.rows`). A write is one
read-committed transaction in which the record is read ``FOR UPDATE`` (or,
when it does not exist yet, claimed with a placeholder row that a second
creator waits for), so a compare-and-set has exactly one winner per revision
across any number of processes and hosts.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any

from ..engine.postgres import PostgresDatabase, Rows, rows
from .artifacts import ArtifactStore
from .artifacts import Row as ArtifactRow
from .checkpoints import CheckpointStore
from .common import Transactions
from .memories import MemoryStore
from .sessions import Entry, Row, SessionStore

__all__ = [
    "PostgresArtifactStore",
    "PostgresCheckpointStore",
    "PostgresMemoryStore",
    "PostgresSessionStore",
]


class PostgresTransactions(Transactions):
    """Transactions of a PostgreSQL store: a locked write, or a (snapshot) read."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database

    def _atomic(self, name: str, work: Any) -> Any:
        return self._db.atomic(name, work)

    def _reading(self, name: str, work: Any, *, snapshot: bool = False) -> Any:
        return self._db.reading(name, work, snapshot=snapshot)


class PostgresSessionStore(PostgresTransactions, SessionStore):
    """A :class:`SessionStore` on the session log's own tables (the handle is the key)."""

    def _get_row(self, ctx: Rows, key: tuple[str, str]) -> Row | None:
        found = ctx.run(rows.session_row, key, ctx.writing)
        return None if found is None else (key, *found)

    def _insert_session(self, ctx: Rows, key: tuple[str, str], meta: bytes, now: float) -> None:
        ctx.run(rows.create_session, key, meta, now)

    def _item_taken(self, ctx: Rows, handle: tuple[str, str], item_id: str) -> bool:
        return ctx.run(rows.item_taken, handle, item_id)

    def _add_items(
        self,
        ctx: Rows,
        handle: tuple[str, str],
        head: int,
        entries: builtins.list[Entry],
        now: float,
    ) -> None:
        ctx.run(rows.add_items, handle, head, entries, now, ctx.notifying)

    def _add_snapshot(
        self, ctx: Rows, handle: tuple[str, str], through: int, state: bytes, now: float
    ) -> None:
        ctx.run(rows.add_snapshot, handle, through, state, now)

    def _get_snapshot(
        self, ctx: Rows, handle: tuple[str, str], through: int
    ) -> tuple[int, bytes, float]:
        return ctx.run(rows.snapshot_row, handle, through)

    def _get_items(
        self, ctx: Rows, handle: tuple[str, str], start: int, stop: int
    ) -> builtins.list[tuple[Any, ...]]:
        return ctx.run(rows.items, handle, start, stop)

    def _select(
        self, ctx: Rows, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, Row]]:
        found = ctx.run(rows.sessions_after, tenant, after, limit)
        return [(row[0], ((tenant, row[0]), *row[1:])) for row in found]

    def _remove(self, ctx: Rows, key: tuple[str, str], handle: tuple[str, str]) -> None:
        ctx.run(rows.remove_session, key, ctx.notifying)

    def _first_seq(self, ctx: Rows, handle: tuple[str, str], head: int) -> int:
        first = ctx.run(rows.first_item, handle)
        return head + 1 if first is None else first

    def _drop_items(self, ctx: Rows, handle: tuple[str, str], cut: int) -> None:
        ctx.run(rows.drop_items, handle, cut)


class PostgresMemoryStore(PostgresTransactions, MemoryStore):
    """A :class:`MemoryStore` on PostgreSQL: one row per (tenant, namespace, key)."""

    def _get_row(self, ctx: Rows, ident: tuple[str, str, str]) -> tuple[Any, ...] | None:
        return ctx.run(rows.memory_row, ident, ctx.writing)

    def _put_row(self, ctx: Rows, ident: tuple[str, str, str], row: tuple[Any, ...]) -> None:
        ctx.run(rows.put_memory, ident, row)

    def _delete_row(self, ctx: Rows, ident: tuple[str, str, str]) -> None:
        ctx.run(rows.delete_memory, ident)

    def _select(
        self, tenant: str, namespace: str, after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        found: builtins.list[tuple[Any, ...]] = self._reading(
            "memory list", lambda ctx: ctx.run(rows.memory_after, tenant, namespace, after, limit)
        )
        return found


class PostgresCheckpointStore(PostgresTransactions, CheckpointStore):
    """A :class:`CheckpointStore` on PostgreSQL; listings served by indexes."""

    def _get_row(self, ctx: Rows, key: tuple[str, str]) -> tuple[Any, ...] | None:
        return ctx.run(rows.checkpoint_row, key, ctx.writing)

    def _put_row(self, ctx: Rows, row: tuple[Any, ...]) -> None:
        ctx.run(rows.put_checkpoint, row)

    def _delete_row(self, ctx: Rows, key: tuple[str, str]) -> None:
        ctx.run(rows.delete_checkpoint, key)

    def _select(
        self, tenant: str, filters: dict[str, str], after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        found: builtins.list[tuple[Any, ...]] = self._reading(
            "checkpoint list",
            lambda ctx: ctx.run(rows.checkpoints_after, tenant, filters, after, limit),
        )
        return found


class PostgresArtifactStore(PostgresTransactions, ArtifactStore):
    """An :class:`ArtifactStore` on PostgreSQL.

    A put is one transaction: the bytes are streamed into 1 MiB chunks under
    a staging key while the sha256 is computed, then filed under that sha256
    — or dropped in favour of the copy already stored, whose count goes up.
    """

    def _get_row(self, ctx: Rows, key: tuple[str, str]) -> ArtifactRow | None:
        return ctx.run(rows.artifact_row, key, ctx.writing)

    def _put_row(self, ctx: Rows, key: tuple[str, str], row: ArtifactRow) -> None:
        ctx.run(rows.put_artifact, key, row)

    def _delete_row(self, ctx: Rows, key: tuple[str, str]) -> None:
        ctx.run(rows.delete_artifact, key)

    def _select(
        self, ctx: Rows, tenant: str, after: str | None, limit: int
    ) -> builtins.list[tuple[str, ArtifactRow]]:
        found = ctx.run(rows.artifacts_after, tenant, after, limit)
        return [(row[0], row[1:]) for row in found]

    def _store_blob(self, ctx: Rows, chunks: Iterator[bytes]) -> tuple[str, int]:
        return ctx.run(rows.store_blob, chunks)

    def _release_blob(self, ctx: Rows, sha: str) -> None:
        ctx.run(rows.release_blob, sha)

    def _get_chunk(self, ctx: Rows, sha: str, n: int) -> bytes | None:
        return ctx.run(rows.get_chunk, sha, n)
