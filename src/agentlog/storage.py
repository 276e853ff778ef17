"""Durable stores beside the session log (ADR-004), tenant-scoped with CAS revisions.

This module holds :class:`MemoryStore` (revisable JSON memory keyed by
tenant, namespace and key) and the two ``DurableStorage`` compositions of the
four stores — sessions (:mod:`agentlog.sessions`), run checkpoints
(:mod:`agentlog.checkpoints`), memory and artifacts
(:mod:`agentlog.artifacts`) — in memory, or in the same SQLite file as the
session log. Callers depend only on the store they use.

Revisions: a record is created with ``expected_revision=None`` ("must not
exist yet") at revision 0, and every successful write adds one. A write that
names another revision raises :class:`StorageConflictError` and writes
nothing — never last-write-wins, never an automatic retry.
"""

from __future__ import annotations

import builtins
import os
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from ._engines import engine_class
from ._store_common import (
    DEFAULT_TENANT,
    EngineTransactions,
    LockedTransactions,
    Transactions,
    check_page,
)
from ._store_common import decode as _decode
from ._store_common import encode as _encode
from ._store_common import name as _name
from ._store_common import revision as _revision
from .artifacts import InMemoryArtifactStore, SqliteArtifactStore
from .checkpoints import InMemoryCheckpointStore, SqliteCheckpointStore
from .errors import CheckpointerClosedError, StorageConflictError, StorageNotFoundError
from .events import _loads
from .sessions import InMemorySessionStore, SqliteSessionStore

__all__ = [
    "DEFAULT_TENANT",
    "InMemoryMemoryStore",
    "InMemoryStorage",
    "MemoryRecord",
    "MemoryStore",
    "SqliteMemoryStore",
    "SqliteStorage",
]


def _resource(tenant_id: str, namespace: str, key: str) -> str:
    return f"memory {tenant_id!r}/{namespace!r}/{key!r}"


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory entry as stored."""

    tenant_id: str
    namespace: str
    key: str
    value: Any
    """The JSON value, decoded afresh for every read."""
    revision: int
    """0 when created, plus one per successful write."""
    created_at: float
    updated_at: float


@runtime_checkable
class MemoryStore(Protocol):
    """Revisable JSON memory keyed by (tenant, namespace, key).

    The namespace is part of the key: the same key in two namespaces (or two
    tenants) names two records.
    """

    def put(
        self,
        tenant_id: str,
        namespace: str,
        key: str,
        value: Any,
        expected_revision: int | None,
    ) -> MemoryRecord:
        """Create (``expected_revision=None``) or replace (the current revision) a record."""
        ...

    def get(self, tenant_id: str, namespace: str, key: str) -> MemoryRecord:
        """The record, or :class:`StorageNotFoundError`."""
        ...

    def list(
        self, tenant_id: str, namespace: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[MemoryRecord]:
        """Records of one namespace in key order, keys strictly after ``after``."""
        ...

    def delete(self, tenant_id: str, namespace: str, key: str, expected_revision: int) -> None:
        """Remove the record if it is at ``expected_revision``."""
        ...


class _MemoryStoreBase(Transactions):
    """The contract, written once; an implementation supplies rows and transactions.

    A row is ``(value, revision, created, updated)`` under the key
    ``(tenant, namespace, key)``.
    """

    @staticmethod
    def _keys(tenant_id: object, namespace: object, key: object) -> tuple[str, str, str]:
        return _name("tenant_id", tenant_id), _name("namespace", namespace), _name("key", key)

    def put(
        self,
        tenant_id: str,
        namespace: str,
        key: str,
        value: Any,
        expected_revision: int | None,
    ) -> MemoryRecord:
        """Create (``expected_revision=None``) or replace (the current revision) a record."""
        ident = self._keys(tenant_id, namespace, key)
        expected = _revision(expected_revision)
        data = _encode(value)

        def work(ctx: Any) -> MemoryRecord:
            current = self._get_row(ctx, ident)
            actual = None if current is None else current[1]
            if actual != expected:
                raise StorageConflictError(_resource(*ident), expected, actual)
            now = time.time()
            revision = 0 if current is None else current[1] + 1
            created = now if current is None else current[2]
            self._put_row(ctx, ident, (data, revision, created, now))
            return MemoryRecord(*ident, _loads(data), revision, created, now)

        return self._atomic("memory put", work)

    def get(self, tenant_id: str, namespace: str, key: str) -> MemoryRecord:
        """The record, or :class:`StorageNotFoundError`."""
        ident = self._keys(tenant_id, namespace, key)
        current = self._reading("memory get", lambda ctx: self._get_row(ctx, ident))
        if current is None:
            raise StorageNotFoundError(f"no {_resource(*ident)}")
        data, revision, created, updated = current
        return MemoryRecord(*ident, _decode(data, _resource(*ident)), revision, created, updated)

    def list(
        self, tenant_id: str, namespace: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[MemoryRecord]:
        """Records of one namespace in key order, keys strictly after ``after``."""
        tenant, space = _name("tenant_id", tenant_id), _name("namespace", namespace)
        start, count = check_page(after, limit)
        return [
            MemoryRecord(tenant, space, k, _decode(d, _resource(tenant, space, k)), r, c, u)
            for k, d, r, c, u in self._select(tenant, space, start, count)
        ]

    def delete(self, tenant_id: str, namespace: str, key: str, expected_revision: int) -> None:
        """Remove the record if it is at ``expected_revision``."""
        ident = self._keys(tenant_id, namespace, key)
        expected = _revision(expected_revision)

        def work(ctx: Any) -> None:
            current = self._get_row(ctx, ident)
            if current is None:
                raise StorageNotFoundError(f"no {_resource(*ident)}")
            if current[1] != expected:
                raise StorageConflictError(_resource(*ident), expected, current[1])
            self._delete_row(ctx, ident)

        self._atomic("memory delete", work)

    # -- what an implementation supplies ------------------------------------------------

    def _get_row(self, ctx: Any, ident: tuple[str, str, str]) -> tuple[Any, ...] | None:
        raise NotImplementedError

    def _put_row(self, ctx: Any, ident: tuple[str, str, str], row: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _delete_row(self, ctx: Any, ident: tuple[str, str, str]) -> None:
        raise NotImplementedError

    def _select(
        self, tenant: str, namespace: str, after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        """``(key, value, revision, created, updated)`` rows in key order."""
        raise NotImplementedError


class InMemoryMemoryStore(LockedTransactions, _MemoryStoreBase):
    """A :class:`MemoryStore` in this process's memory (values kept encoded)."""

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[tuple[str, str, str], tuple[Any, ...]] = {}

    def _get_row(self, ctx: Any, ident: tuple[str, str, str]) -> tuple[Any, ...] | None:
        return self._records.get(ident)

    def _put_row(self, ctx: Any, ident: tuple[str, str, str], row: tuple[Any, ...]) -> None:
        self._records[ident] = row

    def _delete_row(self, ctx: Any, ident: tuple[str, str, str]) -> None:
        del self._records[ident]

    def _select(
        self, tenant: str, namespace: str, after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        with self._lock:
            keys = sorted(
                k
                for (t, n, k) in self._records
                if t == tenant and n == namespace and (after is None or k > after)
            )[:limit]
            return [(k, *self._records[(tenant, namespace, k)]) for k in keys]


class SqliteMemoryStore(EngineTransactions, _MemoryStoreBase):
    """A :class:`MemoryStore` in the SQLite file of the session log.

    Each write is one ``BEGIN IMMEDIATE`` transaction that reads the current
    revision and writes only if it matches, so writers in any number of
    processes get exactly one winner per revision.
    """

    def _get_row(self, ctx: Any, ident: tuple[str, str, str]) -> tuple[Any, ...] | None:
        found = self._engine._rows(
            ctx,
            "SELECT value, revision, created, updated FROM memory"
            " WHERE tenant = ? AND namespace = ? AND key = ?",
            ident,
        )
        return found[0] if found else None

    def _put_row(self, ctx: Any, ident: tuple[str, str, str], row: tuple[Any, ...]) -> None:
        self._engine._rows(
            ctx,
            "INSERT OR REPLACE INTO memory"
            " (tenant, namespace, key, value, revision, created, updated)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*ident, *row),
        )

    def _delete_row(self, ctx: Any, ident: tuple[str, str, str]) -> None:
        self._engine._rows(
            ctx, "DELETE FROM memory WHERE tenant = ? AND namespace = ? AND key = ?", ident
        )

    def _select(
        self, tenant: str, namespace: str, after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        return self._reading(
            "memory list",
            lambda conn: self._engine._rows(
                conn,
                "SELECT key, value, revision, created, updated FROM memory"
                " WHERE tenant = ? AND namespace = ? AND key > ? ORDER BY key LIMIT ?",
                (tenant, namespace, "" if after is None else after, limit),
            ),
        )


class InMemoryStorage:
    """The four stores in this process's memory: for tests and ephemeral runs."""

    def __init__(self) -> None:
        self.sessions = InMemorySessionStore()
        self.checkpoints = InMemoryCheckpointStore()
        self.memory = InMemoryMemoryStore()
        self.artifacts = InMemoryArtifactStore()

    def close(self) -> None:
        """Nothing to release; present for symmetry with :class:`SqliteStorage`."""


class SqliteStorage:
    """The four stores in one SQLite file — the same file (and schema) as the session log."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.sessions = SqliteSessionStore(engine)
        self.checkpoints = SqliteCheckpointStore(engine)
        self.memory = SqliteMemoryStore(engine)
        self.artifacts = SqliteArtifactStore(engine)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "normal",
        busy_timeout_ms: int = 5000,
        engine: str | None = None,
    ) -> SqliteStorage:
        """Open (creating or migrating forward) the database at ``path``."""
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        return cls(
            engine_class(engine)(
                os.fspath(path), synchronous=synchronous, busy_timeout_ms=max(0, busy_timeout_ms)
            )
        )

    def close(self) -> None:
        """Close the database; later use raises :class:`CheckpointerClosedError`."""
        self._engine.close()

    def __enter__(self) -> SqliteStorage:
        if self._engine._closed:
            raise CheckpointerClosedError("the storage is closed")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
