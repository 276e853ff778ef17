"""The MemoryStore: revisable JSON memory keyed by tenant, namespace and key (ADR-004).

Revisions: a record is created with ``expected_revision=None`` ("must not
exist yet") at revision 0, and every successful write adds one. A write that
names another revision raises :class:`StorageConflictError` and writes
nothing — never last-write-wins, never an automatic retry.
"""

from __future__ import annotations

import builtins
import time
from dataclasses import dataclass
from typing import Any

from ..engine import store_rows as R
from ..events import decode_json
from .common import (
    EngineTransactions,
    LockedTransactions,
    Transactions,
    advance,
    check_name,
    check_page,
    check_revision,
    decode_value,
    encode_value,
)

__all__ = ["InMemoryMemoryStore", "MemoryRecord", "MemoryStore", "SqliteMemoryStore"]


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


class MemoryStore(Transactions):
    """Revisable JSON memory keyed by (tenant, namespace, key).

    The namespace is part of the key: the same key in two namespaces (or two
    tenants) names two records.
    """

    @staticmethod
    def _keys(tenant_id: object, namespace: object, key: object) -> tuple[str, str, str]:
        return (
            check_name("tenant_id", tenant_id),
            check_name("namespace", namespace),
            check_name("key", key),
        )

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
        expected = check_revision(expected_revision)
        data = encode_value(value)

        def work(ctx: Any) -> MemoryRecord:
            current = self._get_row(ctx, ident)
            new = advance(_resource(*ident), expected, None if current is None else current[1])
            now = time.time()
            created = now if current is None else current[2]
            self._put_row(ctx, ident, (data, new, created, now))
            return MemoryRecord(*ident, decode_json(data), new, created, now)

        return self._atomic("memory put", work)

    def get(self, tenant_id: str, namespace: str, key: str) -> MemoryRecord:
        """The record, or :class:`StorageNotFoundError`."""
        ident = self._keys(tenant_id, namespace, key)
        current = self._existing(
            "memory get", _resource(*ident), lambda ctx: self._get_row(ctx, ident)
        )
        data, revision, created, updated = current
        return MemoryRecord(
            *ident, decode_value(data, _resource(*ident)), revision, created, updated
        )

    def list(
        self, tenant_id: str, namespace: str, after: str | None = None, limit: int = 100
    ) -> builtins.list[MemoryRecord]:
        """Records of one namespace in key order, keys strictly after ``after``."""
        tenant, space = check_name("tenant_id", tenant_id), check_name("namespace", namespace)
        start, count = check_page(after, limit)
        return [
            MemoryRecord(tenant, space, k, decode_value(d, _resource(tenant, space, k)), r, c, u)
            for k, d, r, c, u in self._select(tenant, space, start, count)
        ]

    def delete(self, tenant_id: str, namespace: str, key: str, expected_revision: int) -> None:
        """Remove the record if it is at ``expected_revision``."""
        ident = self._keys(tenant_id, namespace, key)
        self._checked_delete(
            "memory delete",
            _resource(*ident),
            expected_revision,
            lambda ctx: self._get_row(ctx, ident),
            lambda row: row[1],
            lambda ctx, row: self._delete_row(ctx, ident),
        )

    # -- what an implementation supplies ------------------------------------------------
    # The same four row operations as the other stores' (and their in-memory
    # versions alike in shape), each on its own table's key and row: the rules
    # above are the store's, the rows below the engine's or a dict's.

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


class InMemoryMemoryStore(LockedTransactions, MemoryStore):
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


class SqliteMemoryStore(EngineTransactions, MemoryStore):
    """A :class:`MemoryStore` in the SQLite file of the session log.

    Each write is one ``BEGIN IMMEDIATE`` transaction that reads the current
    revision and writes only if it matches, so writers in any number of
    processes get exactly one winner per revision.
    """

    def _get_row(self, ctx: Any, ident: tuple[str, str, str]) -> tuple[Any, ...] | None:
        return R.memory(ctx, *ident)

    def _put_row(self, ctx: Any, ident: tuple[str, str, str], row: tuple[Any, ...]) -> None:
        R.put_memory(ctx, *ident, row)

    def _delete_row(self, ctx: Any, ident: tuple[str, str, str]) -> None:
        R.delete_memory(ctx, *ident)

    def _select(
        self, tenant: str, namespace: str, after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        return self._reading(
            "memory list", lambda conn: R.memory_records(conn, tenant, namespace, after, limit)
        )
