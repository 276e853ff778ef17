"""The pure-Python engine: the engine interface on the standard library's sqlite3.

See ``_engine_base.py`` for what an engine is; this module adds the driver
(``sqlite3`` connections and its error mapping) and the hot paths.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from . import _schema as S
from ._engine_base import EngineBase
from .errors import (
    AgentlogError,
    CheckpointConflictError,
    CorruptDatabaseError,
    StorageUnavailableError,
)
from .events import StoredEvent, _loads

__all__ = ["PyEngine", "sqlite_info"]

_new_stored = tuple.__new__

# Result codes (the primary code is the low byte of an extended code).
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


def sqlite_info() -> dict[str, Any]:
    """Version and compile options of the SQLite the standard library links."""
    conn = sqlite3.connect(":memory:")
    try:
        source_id = conn.execute("SELECT sqlite_source_id()").fetchone()[0]
        options = [row[0] for row in conn.execute("PRAGMA compile_options")]
    finally:
        conn.close()
    return {
        "sqlite_version": sqlite3.sqlite_version,
        "sqlite_source_id": source_id,
        "compile_options": options,
    }


def _translate(exc: sqlite3.Error, context: str) -> AgentlogError:
    """Map a sqlite3 exception to agentlog's typed errors, by result code."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary in _BUSY_CODES or (primary is None and "locked" in text):
        return StorageUnavailableError(f"{context}: database is busy ({text})")
    if primary in _CORRUPT_CODES or (
        primary is None and ("malformed" in text or "not a database" in text)
    ):
        return CorruptDatabaseError(f"{context}: {text}")
    return StorageUnavailableError(f"{context}: {text}")


class PyEngine(EngineBase):
    """The engine interface on the standard library's ``sqlite3`` module."""

    name = "python"
    sqlite_info = staticmethod(sqlite_info)

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        with self._translating(f"cannot open {self.path!r}"):
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=64,
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
                if read_only:
                    conn.execute("PRAGMA query_only = 1")
            except BaseException:
                conn.close()
                raise
        return conn

    def _rows(
        self, conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        return conn.execute(sql, params).fetchall()

    def _in_transaction(self, conn: sqlite3.Connection) -> bool:
        return conn.in_transaction

    @contextlib.contextmanager
    def _translating(self, context: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise _translate(exc, context) from exc

    # -- the hot paths -----------------------------------------------------------------

    def append(
        self,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: Sequence[tuple[str, bytes]],
    ) -> int:
        """Append a batch atomically; return the new head."""
        if not batch:
            head = self.head(tenant, name)
            if expected_head is not None and expected_head != head:
                raise CheckpointConflictError(name, expected_head, head)
            return head

        def work(conn: sqlite3.Connection) -> int:
            row = conn.execute(S.SELECT_SESSION, (tenant, name)).fetchone()
            head = 0 if row is None else row[1]
            if expected_head is not None and expected_head != head:
                raise CheckpointConflictError(name, expected_head, head)
            new_head = head + len(batch)
            if new_head > S.MAX_SEQ:
                raise ValueError(f"session {name!r} would exceed {S.MAX_SEQ} events")
            if row is None:
                sid = conn.execute(S.INSERT_SESSION, (tenant, name, new_head, ts, ts)).lastrowid
                assert sid is not None
                if sid > S.MAX_SID:
                    raise StorageUnavailableError("the database holds too many sessions")
            else:
                sid = row[0]
                conn.execute(S.UPDATE_SESSION, (new_head, ts, sid))
            base = (sid << S.SEQ_BITS) + head
            if len(batch) == 1:
                conn.execute(S.INSERT_EVENT, (base + 1, ts, batch[0][0], batch[0][1]))
            else:
                conn.executemany(
                    S.INSERT_EVENT,
                    [(base + i, ts, kind, data) for i, (kind, data) in enumerate(batch, 1)],
                )
            return new_head

        return self._write("append", work)

    def scan(self, tenant: str, name: str, since_seq: int, limit: int) -> list[StoredEvent]:
        """One page of events after ``since_seq``, at most ``limit`` of them."""
        rows = self._read(
            "read", lambda conn: self._rows(conn, S.SCAN_EVENTS, (tenant, name, since_seq, limit))
        )
        if not rows:
            return []
        # One decode call for the whole page instead of one per event.
        events = _loads(b"[" + b",".join([row[3] for row in rows]) + b"]")
        return [
            _new_stored(StoredEvent, (row[0], row[0] - 1, row[1], row[2], event))
            for row, event in zip(rows, events, strict=True)
        ]

    def head(self, tenant: str, name: str) -> int:
        """The session's head; 0 when it is empty or unknown."""
        rows = self._read("head", lambda conn: self._rows(conn, S.SELECT_HEAD, (tenant, name)))
        return int(rows[0][0]) if rows else 0
