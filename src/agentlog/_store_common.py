"""What every store shares: names, revisions, JSON values and paging."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from . import _schema as S
from .errors import StorageDataError
from .events import _loads, check_identifier, check_seq, encode_json

#: The tenant used when a host has no tenants of its own (an explicit name, never "").
DEFAULT_TENANT = S.DEFAULT_TENANT

_T = TypeVar("_T")

#: The most records one list call returns.
MAX_PAGE = 1000


def name(what: str, value: object) -> str:
    """``value`` if it is a safe identifier (see ``check_identifier``), else StorageDataError."""
    return check_identifier(value, what, StorageDataError)


def revision(value: object) -> int | None:
    """An expected revision: ``None`` (must not exist) or an int >= 0."""
    if value is None:
        return None
    try:
        return check_seq("expected_revision", value)
    except (TypeError, ValueError) as exc:
        raise StorageDataError(str(exc)) from None


def encode(value: object) -> bytes:
    """A JSON value as bytes, or StorageDataError for what JSON cannot hold."""
    try:
        return encode_json(value)
    except (TypeError, ValueError) as exc:
        raise StorageDataError(f"value {exc}") from None


def decode(data: bytes, resource: str) -> Any:
    """A stored JSON value; StorageDataError when it is corrupt."""
    try:
        return _loads(data)
    except ValueError as exc:
        raise StorageDataError(f"{resource}: stored value is not valid JSON ({exc})") from None


def check_page(after: object, limit: object) -> tuple[str | None, int]:
    """Validated keyset paging arguments: ``(after, limit)``."""
    checked_after = None if after is None else name("after", after)
    try:
        checked_limit = check_seq("limit", limit)
    except (TypeError, ValueError) as exc:
        raise StorageDataError(str(exc)) from None
    if not 1 <= checked_limit <= MAX_PAGE:
        raise StorageDataError(f"limit must be 1 to {MAX_PAGE}, got {checked_limit}")
    return checked_after, checked_limit


class Transactions:
    """How a store runs work atomically (writes) or consistently (reads)."""

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        raise NotImplementedError

    def _reading(self, name: str, work: Callable[[Any], _T]) -> _T:
        raise NotImplementedError


class LockedTransactions(Transactions):
    """Transactions of an in-memory store: its work runs under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        with self._lock:
            return work(None)

    _reading = _atomic


class EngineTransactions(Transactions):
    """Transactions of a SQLite store: a write transaction, or a pooled read."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def _atomic(self, name: str, work: Callable[[Any], _T]) -> _T:
        return self._engine._write(name, work)  # type: ignore[no-any-return]

    def _reading(self, name: str, work: Callable[[Any], _T]) -> _T:
        return self._engine._read(name, work)  # type: ignore[no-any-return]
