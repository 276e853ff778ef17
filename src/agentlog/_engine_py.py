"""The pure-Python engine: the engine interface on the standard library's sqlite3.

An engine is the narrow, bytes-level layer under :class:`SqliteCheckpointer`:
it owns the connections, allocates seq inside the write transaction, writes a
whole batch at once and scans forward a page at a time. Events arrive already
validated and encoded as ``(type, json_bytes)`` pairs; pages leave as
:class:`StoredEvent` objects. The C engine implements the same methods on the
same schema (see ``_schema.py``).

Threads: one writer connection guarded by a lock (SQLite serialises writers
anyway; the lock keeps one transaction per connection), and one read-only
connection per reading thread, so reads never wait for the writer — WAL lets
them see the last committed state while a write is in progress. A private
``":memory:"`` database has a single connection, so there reads take the lock
too.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from . import _schema as S
from .errors import (
    AgentlogError,
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    StorageUnavailableError,
)
from .events import StoredEvent, _loads

__all__ = ["PyEngine", "sqlite_info"]

_T = TypeVar("_T")
_new_stored = tuple.__new__
_SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}

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


class PyEngine:
    """The engine interface on the standard library's ``sqlite3`` module."""

    name = "python"

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "normal",
        busy_timeout_ms: int = 5000,
        integrity_check_on_open: bool = False,
    ) -> None:
        self.path = path
        self._memory = path == ":memory:"
        self._busy_timeout_ms = max(0, busy_timeout_ms)
        self._write_lock = threading.Lock()
        # Idle read-only connections. A reading thread borrows one and gives
        # it back, so there are never more than the most concurrent reads.
        self._readers_lock = threading.Lock()
        self._idle_readers: list[sqlite3.Connection] = []
        self._closed = False
        self._writer = self._connect()
        try:
            self._prepare(_SYNCHRONOUS[synchronous], integrity_check_on_open)
        except BaseException:
            self._writer.close()
            raise

    # -- opening -----------------------------------------------------------------

    def _connect(self, read_only: bool = False) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=64,
            )
        except sqlite3.Error as exc:
            raise _translate(exc, f"cannot open {self.path!r}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            if read_only:
                conn.execute("PRAGMA query_only = 1")
        except sqlite3.Error as exc:
            conn.close()
            raise _translate(exc, f"cannot open {self.path!r}") from exc
        return conn

    def _prepare(self, synchronous: str, integrity_check: bool) -> None:
        conn = self._writer
        try:
            # Look before touching: nothing below may change a file that is
            # not ours or was written by a newer version.
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_identity(conn, app_id, version)
            if integrity_check:
                ok, detail = self.check_integrity()
                if not ok:
                    raise CorruptDatabaseError(
                        f"{self.path!r} failed its integrity check: {detail}"
                    )
            if not self._memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StorageUnavailableError(
                        f"{self.path!r}: cannot switch to WAL journal mode (got {mode!r})"
                    )
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            if version < S.SCHEMA_VERSION:
                self._create_schema(conn)
        except sqlite3.Error as exc:
            raise _translate(exc, f"cannot open {self.path!r}") from exc

    def _check_identity(self, conn: sqlite3.Connection, app_id: int, version: int) -> None:
        if app_id not in (0, S.APPLICATION_ID):
            raise SchemaVersionError(
                f"{self.path!r} is not an agentlog database (application_id {app_id:#x})"
            )
        if version > S.SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path!r} has schema version {version}, newer than this agentlog "
                f"supports ({S.SCHEMA_VERSION}); upgrade agentlog to open it"
            )
        if app_id == 0 and version == 0:
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise SchemaVersionError(
                    f"{self.path!r} is a SQLite database of another application"
                )

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have created it while we waited.
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_identity(conn, app_id, version)
            if version == 0:
                for statement in S.CREATE_SCHEMA:
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # -- plumbing ----------------------------------------------------------------

    def _borrow_reader(self) -> sqlite3.Connection:
        with self._readers_lock:
            if self._idle_readers:
                return self._idle_readers.pop()
        return self._connect(read_only=True)

    def _return_reader(self, conn: sqlite3.Connection) -> None:
        with self._readers_lock:
            if not self._closed:
                self._idle_readers.append(conn)
                return
        conn.close()

    def _read(self, context: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise CheckpointerClosedError("the checkpointer is closed")
        try:
            if self._memory:
                with self._write_lock:
                    self._check_open()
                    return work(self._writer)
            conn = self._borrow_reader()
            try:
                return work(conn)
            finally:
                self._return_reader(conn)
        except sqlite3.Error as exc:
            if self._closed:
                raise CheckpointerClosedError("the checkpointer is closed") from exc
            raise _translate(exc, context) from exc

    def _write(self, context: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction; roll back on error."""
        with self._write_lock:
            self._check_open()
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _translate(exc, context) from exc
            try:
                result = work(conn)
                conn.execute("COMMIT")
                return result
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc, context) from exc
                raise

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError("the checkpointer is closed")

    # -- the engine interface ----------------------------------------------------

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
            "read",
            lambda conn: conn.execute(S.SCAN_EVENTS, (tenant, name, since_seq, limit)).fetchall(),
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
        row = self._read(
            "head", lambda conn: conn.execute(S.SELECT_HEAD, (tenant, name)).fetchone()
        )
        return 0 if row is None else int(row[0])

    def list_sessions(self, tenant: str) -> list[tuple[str, float, int]]:
        """``(name, mtime, head)`` of every session, most recently active first."""
        return self._read("list", lambda conn: conn.execute(S.LIST_SESSIONS, (tenant,)).fetchall())

    def delete(self, tenant: str, name: str) -> None:
        """Remove the session and all its events; nothing if it does not exist."""

        def work(conn: sqlite3.Connection) -> None:
            row = conn.execute(S.SELECT_SESSION, (tenant, name)).fetchone()
            if row is not None:
                sid = row[0]
                conn.execute(
                    S.DELETE_EVENTS_AFTER, (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ))
                )
                conn.execute(S.DELETE_SESSION, (sid,))

        self._write("delete", work)

    def truncate(self, tenant: str, name: str, to_seq: int, ts: float) -> int:
        """Remove events after ``to_seq``; return the new head."""

        def work(conn: sqlite3.Connection) -> int:
            row = conn.execute(S.SELECT_SESSION, (tenant, name)).fetchone()
            if row is None:
                return 0
            sid, head = row
            if to_seq >= head:
                return int(head)
            conn.execute(
                S.DELETE_EVENTS_AFTER, (S.event_key(sid, to_seq), S.event_key(sid, S.MAX_SEQ))
            )
            conn.execute(S.UPDATE_SESSION, (to_seq, ts, sid))
            return to_seq

        return self._write("truncate", work)

    def copy_prefix(self, tenant: str, name: str, at_seq: int, new_name: str, ts: float) -> int:
        """Create ``new_name`` holding events 1..``at_seq`` of ``name``."""

        def work(conn: sqlite3.Connection) -> int:
            row = conn.execute(S.SELECT_SESSION, (tenant, name)).fetchone()
            if row is None:
                raise SessionNotFoundError(f"no session {name!r} to fork")
            sid, head = row
            if at_seq > head:
                raise ValueError(f"cannot fork {name!r} at {at_seq}: its head is {head}")
            if conn.execute(S.SELECT_SESSION, (tenant, new_name)).fetchone() is not None:
                raise SessionExistsError(f"session {new_name!r} already exists")
            new_sid = conn.execute(S.INSERT_SESSION, (tenant, new_name, at_seq, ts, ts)).lastrowid
            assert new_sid is not None
            conn.execute(S.COPY_EVENTS, (S.event_key(sid, 0), S.event_key(new_sid, 0), at_seq))
            return at_seq

        return self._write("fork", work)

    def check_integrity(self) -> tuple[bool, str]:
        """Run ``PRAGMA quick_check``; ``(True, "ok")`` for a sound file."""
        try:
            with self._write_lock:
                self._check_open()
                rows = self._writer.execute("PRAGMA quick_check").fetchall()
        except sqlite3.Error as exc:
            return False, str(exc)
        detail = "\n".join(str(row[0]) for row in rows)
        return detail == "ok", detail

    def close(self) -> None:
        """Close every connection; idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            with self._readers_lock:
                idle, self._idle_readers = self._idle_readers, []
            for conn in idle:
                conn.close()
            self._writer.close()
