"""What both SQLite engines share: opening, the schema guard, and cold paths.

An engine is the narrow, bytes-level layer under :class:`SqliteCheckpointer`:
it owns the connections, allocates seq inside the write transaction, writes a
whole batch at once and scans forward a page at a time. Events arrive already
validated and encoded as ``(type, json_bytes)`` pairs; pages leave as
:class:`StoredEvent` objects. The hot paths (``append``, ``scan``, ``head``)
are each engine's own; everything else is written once here, on three
driver primitives: ``_connect``, ``_rows`` and ``_in_transaction``.

Threads: one writer connection guarded by a lock (SQLite serialises writers
anyway; the lock keeps one transaction per connection), and a pool of
read-only connections that a reading thread borrows and gives back, so reads
never wait for the writer — WAL lets them see the last committed state while
a write is in progress. A private ``":memory:"`` database has a single
connection, so there reads take the lock too.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

from . import _schema as S
from .errors import (
    CheckpointerClosedError,
    CorruptDatabaseError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    StorageUnavailableError,
)

_T = TypeVar("_T")
_SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}


class EngineBase:
    """The engine interface, less the driver and the hot paths."""

    name = "base"

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
        self._readers_lock = threading.Lock()
        self._idle_readers: list[Any] = []
        self._closed = False
        self._file_key: tuple[int, int] | None = None
        self._writer = self._connect(read_only=False)
        try:
            self._claim_file()
            with self._translating(f"cannot open {path!r}"):
                self._prepare(_SYNCHRONOUS[synchronous], integrity_check_on_open)
        except BaseException:
            self._release_file()
            self._close_connection(self._writer)
            raise

    # SQLite's locks are POSIX advisory locks, which belong to the process: two
    # SQLite libraries in one process (the C engine's embedded one and the
    # standard library's) cannot see each other's locks, and closing a file in
    # one drops the other's. So one process opens a file with one engine at a
    # time; a second engine is refused instead of risking the file.
    _open_files: ClassVar[dict[tuple[int, int], tuple[str, int]]] = {}
    _open_files_lock: ClassVar[threading.Lock] = threading.Lock()

    def _claim_file(self) -> None:
        if self._memory:
            return
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise StorageUnavailableError(f"cannot open {self.path!r}: {exc}") from exc
        key = (stat.st_dev, stat.st_ino)
        with EngineBase._open_files_lock:
            engine, count = EngineBase._open_files.get(key, (self.name, 0))
            if engine != self.name:
                raise StorageUnavailableError(
                    f"{self.path!r} is open with the {engine!r} engine in this process; "
                    f"close it before opening it with the {self.name!r} engine (two SQLite "
                    "libraries in one process do not see each other's locks)"
                )
            EngineBase._open_files[key] = (engine, count + 1)
        self._file_key = key

    def _release_file(self) -> None:
        key, self._file_key = self._file_key, None
        if key is None:
            return
        with EngineBase._open_files_lock:
            engine, count = EngineBase._open_files[key]
            if count > 1:
                EngineBase._open_files[key] = (engine, count - 1)
            else:
                del EngineBase._open_files[key]

    # -- the driver ----------------------------------------------------------------

    def _connect(self, read_only: bool) -> Any:
        """A new connection to ``self.path`` with the busy timeout set."""
        raise NotImplementedError

    def _rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; return all its rows."""
        raise NotImplementedError

    def _in_transaction(self, conn: Any) -> bool:
        raise NotImplementedError

    def _close_connection(self, conn: Any) -> None:
        conn.close()

    def _translating(self, context: str) -> contextlib.AbstractContextManager[None]:
        """A context that turns driver errors into agentlog's typed errors."""
        return contextlib.nullcontext()

    # -- opening -------------------------------------------------------------------

    def _value(self, sql: str) -> Any:
        return self._rows(self._writer, sql)[0][0]

    def _prepare(self, synchronous: str, integrity_check: bool) -> None:
        # Look before touching: nothing below may change a file that is not
        # ours or was written by a newer version.
        version = self._check_identity()
        if integrity_check:
            ok, detail = self.check_integrity()
            if not ok:
                raise CorruptDatabaseError(f"{self.path!r} failed its integrity check: {detail}")
        if not self._memory:
            mode = self._value("PRAGMA journal_mode = WAL")
            if str(mode).lower() != "wal":
                raise StorageUnavailableError(
                    f"{self.path!r}: cannot switch to WAL journal mode (got {mode!r})"
                )
        self._rows(self._writer, f"PRAGMA synchronous = {synchronous}")
        if version < S.SCHEMA_VERSION:
            self._write("migrate schema", self._migrate)

    def _check_identity(self) -> int:
        """Refuse a file of another application or a newer version; return its version."""
        app_id = self._value("PRAGMA application_id")
        version = int(self._value("PRAGMA user_version"))
        if app_id not in (0, S.APPLICATION_ID):
            raise SchemaVersionError(
                f"{self.path!r} is not an agentlog database (application_id {app_id:#x})"
            )
        if version > S.SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path!r} has schema version {version}, newer than this agentlog "
                f"supports ({S.SCHEMA_VERSION}); upgrade agentlog to open it"
            )
        if app_id == 0 and version == 0 and self._value("SELECT count(*) FROM sqlite_master"):
            raise SchemaVersionError(f"{self.path!r} is a SQLite database of another application")
        return version

    def _migrate(self, conn: Any) -> None:
        # Inside the write transaction: another process may have created or
        # migrated it while we waited for the lock. An older file is brought
        # forward through every step it lacks, all in this one transaction.
        version = self._check_identity()
        if version < S.SCHEMA_VERSION:
            for statement in S.migration(version):
                self._rows(conn, statement)

    # -- plumbing ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError("the database is closed")

    def _borrow_reader(self) -> Any:
        """A read connection from the pool (a new one when none is idle)."""
        self._check_open()
        with self._readers_lock:
            if self._idle_readers:
                return self._idle_readers.pop()
        return self._connect(read_only=True)

    def _return_reader(self, conn: Any) -> None:
        with self._readers_lock:
            if not self._closed:
                self._idle_readers.append(conn)
                return
        self._close_connection(conn)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[Any]:
        """A connection to read on: borrowed from the pool, or the only one."""
        if self._memory:
            with self._write_lock:
                self._check_open()
                yield self._writer
            return
        conn = self._borrow_reader()
        try:
            yield conn
        finally:
            self._return_reader(conn)

    def _read(self, context: str, work: Callable[[Any], _T]) -> _T:
        try:
            with self._translating(context), self._reader() as conn:
                return work(conn)
        except StorageUnavailableError as exc:
            if self._closed:
                raise CheckpointerClosedError("the database is closed") from exc
            raise

    def _write(self, context: str, work: Callable[[Any], _T]) -> _T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction; roll back on error."""
        with self._write_lock, self._translating(context):
            self._check_open()
            conn = self._writer
            self._rows(conn, "BEGIN IMMEDIATE")
            try:
                result = work(conn)
                self._rows(conn, "COMMIT")
                return result
            except BaseException:
                if self._in_transaction(conn):
                    self._rows(conn, "ROLLBACK")
                raise

    # -- the cold half of the engine interface -----------------------------------------

    def list_sessions(self, tenant: str) -> list[tuple[str, float, int]]:
        """``(name, mtime, head)`` of every session, most recently active first."""
        return self._read("list", lambda conn: self._rows(conn, S.LIST_SESSIONS, (tenant,)))

    def delete(self, tenant: str, name: str) -> None:
        """Remove the session and all its events; nothing if it does not exist."""

        def work(conn: Any) -> None:
            for sid, _ in self._rows(conn, S.SELECT_SESSION, (tenant, name)):
                bounds = (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ))
                self._rows(conn, S.DELETE_EVENTS_AFTER, bounds)
                self._rows(conn, S.DELETE_SNAPSHOTS_AFTER, (sid, -1))
                self._rows(conn, S.DELETE_SESSION, (sid,))

        self._write("delete", work)

    def truncate(self, tenant: str, name: str, to_seq: int, ts: float) -> int:
        """Remove events after ``to_seq``; return the new head."""

        def work(conn: Any) -> int:
            rows = self._rows(conn, S.SELECT_SESSION, (tenant, name))
            if not rows:
                return 0
            sid, head = rows[0]
            if to_seq >= head:
                return int(head)
            bounds = (S.event_key(sid, to_seq), S.event_key(sid, S.MAX_SEQ))
            self._rows(conn, S.DELETE_EVENTS_AFTER, bounds)
            # A snapshot of events that are gone would resurrect them on load.
            self._rows(conn, S.DELETE_SNAPSHOTS_AFTER, (sid, to_seq))
            self._rows(conn, S.UPDATE_SESSION, (to_seq, ts, sid))
            return to_seq

        return self._write("truncate", work)

    def copy_prefix(self, tenant: str, name: str, at_seq: int, new_name: str, ts: float) -> int:
        """Create ``new_name`` holding events 1..``at_seq`` of ``name``."""

        def work(conn: Any) -> int:
            rows = self._rows(conn, S.SELECT_SESSION, (tenant, name))
            if not rows:
                raise SessionNotFoundError(f"no session {name!r} to fork")
            sid, head = rows[0]
            if at_seq > head:
                raise ValueError(f"cannot fork {name!r} at {at_seq}: its head is {head}")
            if self._rows(conn, S.SELECT_SESSION, (tenant, new_name)):
                raise SessionExistsError(f"session {new_name!r} already exists")
            self._rows(conn, S.INSERT_SESSION, (tenant, new_name, at_seq, ts, ts))
            new_sid = self._rows(conn, S.SELECT_SESSION, (tenant, new_name))[0][0]
            if new_sid > S.MAX_SID:
                raise StorageUnavailableError("the database holds too many sessions")
            self._rows(conn, S.COPY_EVENTS, (S.event_key(sid, 0), S.event_key(new_sid, 0), at_seq))
            self._rows(conn, S.COPY_SNAPSHOTS, (sid, new_sid, at_seq))
            return at_seq

        return self._write("fork", work)

    def check_integrity(self) -> tuple[bool, str]:
        """Run ``PRAGMA quick_check``; ``(True, "ok")`` for a sound file."""
        try:
            with self._write_lock, self._translating("integrity check"):
                self._check_open()
                rows = self._rows(self._writer, "PRAGMA quick_check")
        except (CorruptDatabaseError, StorageUnavailableError) as exc:
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
                self._close_connection(conn)
            self._close_connection(self._writer)
            self._release_file()
