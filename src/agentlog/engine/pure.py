"""The pure-Python twin: the engine interface on the standard library's sqlite3.

See :mod:`.base` for what an engine is; this module adds the driver (a
``sqlite3`` connection wrapped as a :class:`~.base.DriverConnection`, its
errors mapped through the shared result-code table) and the hot paths.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

from ..events import EncodedBatch, StoredEvent
from ..integrity import checked_payloads, checksum
from . import sql as Q
from .base import EngineBase
from .errors import SQLITE_BUSY, SQLITE_CORRUPT, SQLITE_LOCKED, driver_error

__all__ = ["PyConnection", "PyEngine", "sqlite_info"]

_new_stored = tuple.__new__


def sqlite_info() -> dict[str, Any]:
    """Version and compile options of the SQLite the standard library links."""
    conn = sqlite3.connect(":memory:")
    try:
        source_id = conn.execute(Q.SOURCE_ID).fetchone()[0]
        options = [row[0] for row in conn.execute(Q.COMPILE_OPTIONS)]
    finally:
        conn.close()
    return {
        "sqlite_version": sqlite3.sqlite_version,
        "sqlite_source_id": source_id,
        "compile_options": options,
    }


def _result_code(exc: sqlite3.Error) -> int:
    """The SQLite result code of a sqlite3 exception."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code
    # Python 3.10's sqlite3 carries no result code: only the class and the
    # text are left to go by.
    text = str(exc)
    if "locked" in text or "busy" in text:
        return SQLITE_BUSY
    if "malformed" in text or "not a database" in text:
        return SQLITE_CORRUPT
    return 1


def _translate(exc: sqlite3.Error, context: str) -> Exception:
    """A sqlite3 exception as agentlog's typed error, by its result code."""
    return driver_error(_result_code(exc), str(exc), context)


class PyConnection:
    """A ``sqlite3`` connection as the shared code sees it."""

    __slots__ = ("busy_timeout_ms", "db")

    def __init__(self, db: sqlite3.Connection, busy_timeout_ms: int) -> None:
        self.db = db
        self.busy_timeout_ms = busy_timeout_ms

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; return all its rows."""
        return self.db.execute(sql, params).fetchall()

    def begin_write(self, wait: bool) -> bool:
        """``BEGIN IMMEDIATE``; without ``wait``, False instead of waiting for the lock."""
        if wait:
            self.db.execute(Q.BEGIN_WRITE)
            return True
        self.db.execute(Q.busy_timeout(0))
        try:
            self.db.execute(Q.BEGIN_WRITE)
        except sqlite3.OperationalError as exc:
            if _result_code(exc) & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED):
                return False
            raise
        finally:
            self.db.execute(Q.busy_timeout(self.busy_timeout_ms))
        return True

    def checkpoint_truncate(self, wait_ms: int) -> bool:
        """Checkpoint and truncate the WAL, waiting at most ``wait_ms`` for readers
        and writers to get out of the way; True if done."""
        self.db.execute(Q.busy_timeout(wait_ms))
        try:
            return bool(self.db.execute(Q.WAL_CHECKPOINT_TRUNCATE).fetchone()[0] == 0)
        finally:
            self.db.execute(Q.busy_timeout(self.busy_timeout_ms))

    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return self.db.in_transaction

    def close(self) -> None:
        """Close the connection."""
        self.db.close()


class PyEngine(EngineBase[PyConnection]):
    """The engine interface on the standard library's ``sqlite3`` module."""

    name = "python"
    sqlite_info = staticmethod(sqlite_info)

    def _connect(self, query_only: bool, shims: bool = True) -> PyConnection:
        target, uri = self.path, False
        if self.read_only and not self._memory:
            target, uri = f"file:{quote(self.path)}?mode=ro", True
            if self._immutable:
                target += "&immutable=1"
        with self._translating(f"cannot open {self.path!r}"):
            db = sqlite3.connect(
                target,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=64,
                uri=uri,
            )
            try:
                db.execute(Q.busy_timeout(self._busy_timeout_ms))
                for statement in self._read_only_shims if shims else ():
                    db.execute(statement)
                if query_only:
                    db.execute(Q.QUERY_ONLY)
            except BaseException:
                db.close()
                raise
        return PyConnection(db, self._busy_timeout_ms)

    @contextlib.contextmanager
    def _translating(self, context: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise _translate(exc, context) from exc

    # -- the hot paths -----------------------------------------------------------------

    def _append_batch(
        self, tenant: str, name: str, expected_head: int | None, ts: float, batch: EncodedBatch
    ) -> int:
        return self.write(
            "append", lambda conn: self._append_in(conn, tenant, name, expected_head, ts, batch)
        )

    def _insert_batch(
        self, conn: PyConnection, first_key: int, ts: float, batch: EncodedBatch
    ) -> None:
        if self.hash_chain:
            super()._insert_batch(conn, first_key, ts, batch)
        elif len(batch) == 1:
            kind, data = batch[0]
            conn.db.execute(Q.INSERT_EVENT, (first_key, ts, kind, data, checksum(data)))
        else:
            conn.db.executemany(
                Q.INSERT_EVENT,
                [
                    (first_key + i, ts, kind, data, checksum(data))
                    for i, (kind, data) in enumerate(batch)
                ],
            )

    def scan(self, tenant: str, name: str, since_seq: int, limit: int) -> list[StoredEvent]:
        """One page of events after ``since_seq``, at most ``limit`` of them."""
        rows = self.read(
            "read", lambda conn: conn.rows(Q.SCAN_EVENTS, (tenant, name, since_seq, limit))
        )
        if not rows:
            return []
        # Each payload checked against its crc; one decode call for the page.
        events = checked_payloads(name, rows)
        return [
            _new_stored(StoredEvent, (row[0], row[0] - 1, row[1], row[2], event))
            for row, event in zip(rows, events, strict=True)
        ]

    def head(self, tenant: str, name: str) -> int:
        """The session's head; 0 when it is empty or unknown."""
        rows = self.read("head", lambda conn: conn.rows(Q.SELECT_HEAD, (tenant, name)))
        return int(rows[0][0]) if rows else 0
