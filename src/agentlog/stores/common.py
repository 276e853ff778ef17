"""What every store shares: names, revisions, JSON values, paging and transactions.

Every store is written once, in a base class, on row primitives; an
implementation supplies only rows (in this process's memory, or in the
SQLite file through the engine interface) and the transactions they are read
and written in. Revisions follow one rule, :func:`advance`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..engine import schema as S
from ..engine.interface import TransactionEngine
from ..errors import (
    CheckpointerClosedError,
    StorageConflictError,
    StorageDataError,
    StorageNotFoundError,
)
from ..events import check_identifier, check_seq, decode_json, encode_storable

#: The tenant used when a host has no tenants of its own (an explicit name, never "").
DEFAULT_TENANT = S.DEFAULT_TENANT

_T = TypeVar("_T")
_Row = TypeVar("_Row")

#: The most records one list call returns.
MAX_PAGE = 1000


def check_name(what: str, value: object) -> str:
    """``value`` if it is a safe identifier (see ``check_identifier``), else StorageDataError."""
    return check_identifier(value, what, StorageDataError)


def check_revision(value: object) -> int | None:
    """An expected revision: ``None`` (must not exist) or an int >= 0."""
    if value is None:
        return None
    try:
        return check_seq("expected_revision", value)
    except (TypeError, ValueError) as exc:
        raise StorageDataError(str(exc)) from None


def advance(resource: str, expected: int | None, actual: int | None) -> int:
    """The revision a write expecting ``expected`` gives a record now at ``actual``.

    ``None`` means "no record": creating expects ``None`` and gives revision 0,
    every later write gives one more. Any other expectation is a
    :class:`StorageConflictError` — never last-write-wins.
    """
    if actual != expected:
        raise StorageConflictError(resource, expected, actual)
    return 0 if actual is None else actual + 1


def must_exist(resource: str, row: _Row | None) -> _Row:
    """``row``, or :class:`StorageNotFoundError` when there is none."""
    if row is None:
        raise StorageNotFoundError(f"no {resource}")
    return row


def encode_value(value: object) -> bytes:
    """A JSON value as bytes, or StorageDataError for what JSON cannot hold."""
    return encode_storable(value, "value")


def decode_value(data: bytes, resource: str) -> Any:
    """A stored JSON value; StorageDataError when it is corrupt."""
    try:
        return decode_json(data)
    except ValueError as exc:
        raise StorageDataError(f"{resource}: stored value is not valid JSON ({exc})") from None


def check_page(after: object, limit: object) -> tuple[str | None, int]:
    """Validated keyset paging arguments: ``(after, limit)``."""
    checked_after = None if after is None else check_name("after", after)
    try:
        checked_limit = check_seq("limit", limit)
    except (TypeError, ValueError) as exc:
        raise StorageDataError(str(exc)) from None
    if not 1 <= checked_limit <= MAX_PAGE:
        raise StorageDataError(f"limit must be 1 to {MAX_PAGE}, got {checked_limit}")
    return checked_after, checked_limit


class Transactions:
    """How a store runs work atomically (writes) or consistently (reads).

    ``work`` receives the context its rows live in: nothing for an in-memory
    store, the engine's :class:`~agentlog.engine.Connection` for SQLite.

    Each store's contract is written once, in its class, on row primitives
    (the underscored methods at its end) that the in-memory and the SQLite
    implementation supply.
    """

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        raise NotImplementedError

    def _reading(self, name: str, work: Callable[[Any], _T], *, snapshot: bool = False) -> _T:
        raise NotImplementedError

    def _existing(self, name: str, resource: str, get_row: Callable[[Any], _Row | None]) -> _Row:
        """The row ``get_row`` reads, or :class:`StorageNotFoundError` for ``resource``."""
        return must_exist(resource, self._reading(name, get_row))

    def _page(
        self,
        name: str,
        tenant_id: object,
        after: object,
        limit: object,
        select: Callable[[Any, str, str | None, int], Iterable[tuple[str, _Row]]],
        make: Callable[[tuple[str, str], _Row], _T],
    ) -> list[_T]:
        """One page of a tenant's records: ``make`` of each ``(id, row)`` that
        ``select`` reads, ids strictly after ``after``, at most ``limit``."""
        tenant = check_name("tenant_id", tenant_id)
        start, count = check_page(after, limit)
        rows = self._reading(name, lambda ctx: select(ctx, tenant, start, count))
        return [make((tenant, ident), row) for ident, row in rows]

    def _checked_delete(
        self,
        name: str,
        resource: str,
        expected_revision: object,
        get_row: Callable[[Any], _Row | None],
        revision: Callable[[_Row], int],
        remove: Callable[[Any, _Row], object],
    ) -> None:
        """Atomically ``remove`` the row ``get_row`` finds, if it exists and its
        ``revision`` is ``expected_revision`` (the one rule, :func:`advance`)."""
        expected = check_revision(expected_revision)

        def work(ctx: Any) -> None:
            row = must_exist(resource, get_row(ctx))
            advance(resource, expected, revision(row))
            remove(ctx, row)

        self._atomic(name, work)


class LockedTransactions(Transactions):
    """Transactions of an in-memory store: its work runs under one lock (its
    own, or ``lock``: the one the data it works on is shared under)."""

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self._lock = threading.RLock() if lock is None else lock

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        with self._lock:
            return work(None)

    def _reading(self, name: str, work: Callable[[Any], _T], *, snapshot: bool = False) -> _T:
        with self._lock:
            return work(None)


class StorageHold:
    """A storage's hold on its engine, shared with its four stores: the holder
    the process's shared engine knows (weakly: while the storage or one of its
    stores is in use, the engine stays theirs), and whether the storage was
    closed (then the stores refuse work; see EngineTransactions)."""

    __slots__ = ("__weakref__", "closed")

    def __init__(self) -> None:
        self.closed = False


class EngineTransactions(Transactions):
    """Transactions of a SQLite store: a write transaction, or a pooled read.

    Once its storage is closed (``hold.closed``), it refuses work, though the
    engine may stay open for the process's other holders.
    """

    def __init__(self, engine: TransactionEngine, hold: StorageHold | None = None) -> None:
        self._engine = engine
        self._hold = hold

    def _check_storage_open(self) -> None:
        # (A closed engine refuses on its own, saying why: closed, or forked.)
        if self._hold is not None and self._hold.closed and not self._engine.closed:
            raise CheckpointerClosedError("the storage is closed")

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        self._check_storage_open()
        return self._engine.write(name, work)

    def _reading(self, name: str, work: Callable[[Any], _T], *, snapshot: bool = False) -> _T:
        self._check_storage_open()
        return self._engine.read(name, work, snapshot=snapshot)
