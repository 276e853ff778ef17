"""What both SQLite engines share: opening, the schema guard, the reader pool,
transactions, the error table and the cold paths.

An engine is the narrow, bytes-level layer under the SQLite backend and the
stores (:class:`~agentlog.engine.interface.Engine`): it owns the connections,
allocates seq inside the write transaction, writes a whole batch at once and
scans forward a page at a time. Events arrive already validated and encoded
as ``(type, json_bytes)`` pairs; pages leave as :class:`StoredEvent` objects.
The hot paths (``_append_batch``, ``scan``, ``head``) are each twin's own;
everything else is written once here, on one driver primitive per twin,
``_connect``, which returns a :class:`Connection` with ``rows``,
``in_transaction`` and ``close``.

Threads: one writer connection guarded by a lock (SQLite serialises writers
anyway; the lock keeps one transaction per connection), and a pool of
read-only connections that a reading thread borrows and gives back under a
lock of its own, so reads never wait for the writer — WAL lets them see the
last committed state while a write is in progress. A private ``":memory:"``
database has a single connection, so there reads take the write lock too.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    StorageConflictError,
    StorageDataError,
    StorageUnavailableError,
    damaged_event,
)
from ..events import EncodedBatch, StoredEvent, check_retained, check_session_id
from ..files import DEFAULT_FILE_MODE, create_private_file, remove_created
from ..integrity import (
    GENESIS,
    ChainReport,
    DamagedEvent,
    Progress,
    chain_digest,
    checksum,
    checksum_problem,
    session_damage,
    stored_bytes,
    walk_chain,
)
from . import schema as S
from . import sql as Q
from .interface import AppendCompletions, Connection

__all__ = ["DEFAULT_WAL_SIZE_LIMIT", "DriverConnection", "EngineBase", "driver_error"]

#: The size (bytes) past which the writer truncates the write-ahead log as soon
#: as no reader or writer is in the way; SQLite also cuts it back to this size
#: whenever it restarts from the beginning.
DEFAULT_WAL_SIZE_LIMIT = 64 * 1024 * 1024
#: Commits between two looks at the WAL's size (one stat() each).
_COMMITS_PER_WAL_LOOK = 16
#: How long a checkpoint of a WAL past its bound waits for other processes'
#: readers and writers to get out of its way. Under a steady write load some
#: transaction always holds a snapshot, so a checkpoint that waits for nobody
#: never completes and the WAL grows without end; this short wait (appends of
#: every process pause for it, once per ``wal_size_limit`` written) is what
#: lets it finish.
_CHECKPOINT_WAIT_MS = 100

#: Pages one write transaction of vacuum() gives back (1 MiB of 4 KiB pages):
#: what another process's writer may wait for.
_VACUUM_STEP = 256
#: ``PRAGMA auto_vacuum``'s values.
_AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}

_T = TypeVar("_T")

#: The setting that says the file keeps a hash chain.
_HASH_CHAIN = "hash_chain"
#: Events per read of a deep check or a verify.
_CHECK_PAGE = 1000


def _refuse_undecodable(path: str) -> None:
    """SQLite takes UTF-8 names; an undecodable byte reaches Python as a surrogate."""
    try:
        path.encode()
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "backslashreplace").decode()
        raise StorageUnavailableError(
            f"cannot open '{shown}': SQLite needs a path in UTF-8 (rename the file)"
        ) from None


def _refuse_special_file(path: str) -> None:
    """Refuse a path that is no regular file, or whose directory is missing,
    in words (SQLite says "unable to open database file" or "disk I/O error"):
    SQLite's open of a FIFO waits for a writer forever, and a device is no
    database."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            raise StorageUnavailableError(
                f"cannot open {path!r}: no such directory {parent!r}"
            ) from None
        return  # not there: created, or refused, by the open itself
    except OSError:
        return  # refused by the open itself, in its words
    if stat.S_ISDIR(mode):
        raise StorageUnavailableError(
            f"cannot open {path!r}: it is a directory, not a database file"
        )
    if not stat.S_ISREG(mode):
        raise StorageUnavailableError(f"cannot open {path!r}: it is not a regular file")


# -- one table from SQLite's primary result codes to agentlog's errors ---------------

SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM = 5, 6, 7
SQLITE_CORRUPT, SQLITE_TOOBIG, SQLITE_NOTADB = 11, 18, 26
_ERRORS: dict[int, type[Exception]] = {
    SQLITE_BUSY: StorageUnavailableError,
    SQLITE_LOCKED: StorageUnavailableError,
    SQLITE_NOMEM: MemoryError,
    SQLITE_CORRUPT: CorruptDatabaseError,
    SQLITE_TOOBIG: StorageDataError,  # no retry makes it fit
    SQLITE_NOTADB: CorruptDatabaseError,
}


#: The attribute a driver error carries its ``(code, message)`` in.
_DRIVER_DETAIL = "sqlite_error"


def driver_error(code: int, message: str, context: str) -> Exception:
    """The typed error for a SQLite result code (extended codes too), in ``context``.

    Busy and locked become :class:`StorageUnavailableError` saying so, corrupt
    and not-a-database :class:`CorruptDatabaseError`, out-of-memory
    ``MemoryError``; every other failure (I/O, a full disk, a read-only or
    unopenable file, …) :class:`StorageUnavailableError`.
    """
    primary = code & 0xFF
    kind = _ERRORS.get(primary, StorageUnavailableError)
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        error = kind(f"{context}: database is busy ({message})")
    else:
        error = kind(f"{context}: {message}")
    # Kept so that an error met while opening can be restated naming the file.
    setattr(error, _DRIVER_DETAIL, (code, message))
    return error


def _opening_error(exc: BaseException, path: str) -> BaseException:
    """A driver error met while opening ``path``, restated so that it names the file."""
    detail = getattr(exc, _DRIVER_DETAIL, None)
    if detail is None:
        return exc
    code, message = detail
    return driver_error(code, message, f"cannot open {path!r}")


# The files open in this process: (st_dev, st_ino) -> (engine name, claims);
# see EngineBase._claim_file.
_OPEN_FILES: dict[tuple[int, int], tuple[str, int]] = {}
_OPEN_FILES_LOCK = threading.Lock()


def _refuse_damaged(conn: DriverConnection, name: str, after: int, last: int) -> None:
    """Inside a write: raise for the first event with keys in (after, last]
    whose payload fails its checksum. A fork copies rows as they are; a
    damaged one would carry its damage on under another session's name."""
    while True:
        rows = conn.rows(Q.EVENTS_CHECKED, (after, last, _CHECK_PAGE))
        for seq, payload, crc, _ in rows:
            problem = checksum_problem(stored_bytes(payload), crc)
            if problem is not None:
                raise damaged_event(name, int(seq), problem)
        if len(rows) < _CHECK_PAGE:
            return
        after = (after >> S.SEQ_BITS << S.SEQ_BITS) + int(rows[-1][0])


class _WouldWait(Exception):
    """``BEGIN IMMEDIATE`` without waiting found the write lock held."""


class WriteLock(Protocol):
    """The engine's write lock: ``threading.Lock``'s face (the C twin's is one
    its writer thread takes without the GIL)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> bool: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...


class DriverConnection(Protocol):
    """What a twin's connection offers the shared code."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def begin_write(self, wait: bool) -> bool:
        """``BEGIN IMMEDIATE``; without ``wait``, False (nothing begun) if the file's
        write lock is held by another connection, instead of waiting for it."""
        ...

    def checkpoint_truncate(self, wait_ms: int) -> bool:
        """Copy the WAL into the database and truncate it, waiting at most
        ``wait_ms`` for readers and writers to get out of the way: True if
        done, False if one was still in the way."""
        ...

    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


ConnectionT = TypeVar("ConnectionT", bound=DriverConnection)


class EngineBase(Generic[ConnectionT]):
    """The engine interface, less the driver and the hot paths.

    ``ConnectionT`` is the twin's connection class.
    """

    name: ClassVar[str] = "base"

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "normal",
        busy_timeout_ms: int = 5000,
        integrity_check_on_open: bool = False,
        read_only: bool = False,
        wal_size_limit: int = DEFAULT_WAL_SIZE_LIMIT,
        file_mode: int = DEFAULT_FILE_MODE,
        immutable: bool = False,
        hash_chain: bool = False,
    ) -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = path
        self.read_only = bool(read_only)
        self.schema_version = 0
        # Whether appends link each event into its session's hash chain: asked
        # for here, or kept by the file since an earlier open asked (_prepare).
        self.hash_chain = bool(hash_chain)
        self._memory = path == ":memory:"
        # A read of a file no process has open (no -wal, no -shm): SQLite
        # creates nothing beside it and takes no locks (read_only only).
        self._immutable = bool(immutable) and self.read_only and not self._memory
        self._busy_timeout_ms = max(0, int(busy_timeout_ms))
        self.synchronous = synchronous
        self.wal_size_limit = wal_size_limit
        self._commits_unlooked = 0
        # A read-only open of an older file: run on each connection first
        # (schema.read_only_shims), set once the file's version is known.
        self._read_only_shims: tuple[str, ...] = ()
        self._write_lock: WriteLock = self._new_write_lock()
        # The reader pool: a deque, whose pop() and append() are atomic on
        # their own (free-threaded builds included), so it needs no lock.
        self._idle_readers: collections.deque[ConnectionT] = collections.deque()
        self._closed = False
        self._closed_message = "the database is closed"
        self._file_key: tuple[int, int] | None = None
        if not self._memory:
            _refuse_undecodable(path)
            _refuse_special_file(path)
        # A new file is created here, with file_mode (the owner's only unless
        # told otherwise); SQLite gives its -wal and -shm files the same mode.
        created = not self._memory and not self.read_only and create_private_file(path, file_mode)
        try:
            # Read-only opens need no query_only: the file itself is opened read-only.
            self._writer = self._connect(query_only=False)
        except BaseException:
            if created:
                remove_created(path)
            raise
        try:
            self._claim_file()
            with self._translating(f"cannot open {path!r}"):
                self._prepare(synchronous, integrity_check_on_open)
        except BaseException as exc:
            self._release_file()
            self._writer.close()
            if created:
                remove_created(path)
            restated = _opening_error(exc, path)
            if restated is exc:
                raise
            raise restated from exc
        # An engine dropped without close() (a checkpointer never closed, then
        # collected) still closes its connections and gives up its claim on
        # the file. The callback holds the connections and the claim, never
        # the engine. Not at interpreter exit: a daemon thread may still be
        # using a connection then, and the process's end releases everything.
        self._finalizer = weakref.finalize(
            self,
            _shut_down,
            self._writer,
            self._idle_readers,
            self._file_key,
            self._stop_before_shut_down(),
        )
        self._finalizer.atexit = False
        # A SQLite connection must not cross os.fork(): the child refuses this
        # engine (see _after_fork_in_child).
        self._pid = os.getpid()
        _LIVE_ENGINES.add(self)

    def _stop_before_shut_down(self) -> Callable[[], object] | None:
        """What must stop before the connections close, also when the engine is
        collected without :meth:`close` (the C twin's writer thread, which may
        still be writing appends queued from an event loop); None here. It
        must not hold the engine."""
        return None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    # SQLite's locks are POSIX advisory locks, which belong to the process: two
    # SQLite libraries in one process (the C engine's embedded one and the
    # standard library's) cannot see each other's locks, and closing a file in
    # one drops the other's. So one process opens a file with one engine at a
    # time; a second engine is refused instead of risking the file.

    def _claim_file(self) -> None:
        if self._memory:
            return
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise StorageUnavailableError(f"cannot open {self.path!r}: {exc}") from exc
        key = (stat.st_dev, stat.st_ino)
        with _OPEN_FILES_LOCK:
            engine, count = _OPEN_FILES.get(key, (self.name, 0))
            if engine != self.name:
                raise StorageUnavailableError(
                    f"{self.path!r} is open with the {engine!r} engine in this process; "
                    f"close it before opening it with the {self.name!r} engine (two SQLite "
                    "libraries in one process do not see each other's locks)"
                )
            _OPEN_FILES[key] = (engine, count + 1)
        self._file_key = key

    def _release_file(self) -> None:
        key, self._file_key = self._file_key, None
        _release_claim(key)

    # -- the driver: what each twin supplies ---------------------------------------

    @staticmethod
    def sqlite_info() -> dict[str, Any]:
        """Version, source id and compile options of the SQLite this twin drives."""
        raise NotImplementedError

    def _new_write_lock(self) -> WriteLock:
        """The lock that every write on the writer connection holds."""
        return threading.Lock()

    def _connect(self, query_only: bool) -> ConnectionT:
        """A new connection to ``self.path`` with the busy timeout set.

        ``query_only`` connections never write; an engine opened ``read_only``
        also never creates the file.
        """
        raise NotImplementedError

    def _translating(self, context: str) -> contextlib.AbstractContextManager[None]:
        """A context that turns the driver's own errors into agentlog's typed errors."""
        return contextlib.nullcontext()

    def _append_batch(
        self,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
    ) -> int:
        """Append a non-empty batch atomically; return the new head (the hot path)."""
        raise NotImplementedError

    def append_completions(self) -> AppendCompletions | None:
        """A channel for an event loop's appends to a writer thread; None: this
        engine has none (the C twin has; see :meth:`queue_append`)."""
        self._check_open()
        return None

    def queue_append(
        self,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
        completions: AppendCompletions,
    ) -> object:
        """Queue an append for the writer thread (only where
        :meth:`append_completions` gave a channel)."""
        raise NotImplementedError

    def scan(self, tenant: str, name: str, since_seq: int, limit: int) -> list[StoredEvent]:
        """One page of events after ``since_seq``, at most ``limit`` of them."""
        raise NotImplementedError

    def head(self, tenant: str, name: str) -> int:
        """The session's head; 0 when it is empty or unknown."""
        raise NotImplementedError

    def head_checked(self, tenant: str, name: object) -> int:
        """``head(tenant, check_session_id(name))``: a checkpointer's ``head()``,
        one call (the C twin checks the common id without a Python call)."""
        return self.head(tenant, check_session_id(name))

    # -- opening -------------------------------------------------------------------

    def _value(self, sql: str) -> Any:
        return self._writer.rows(sql)[0][0]

    def _prepare(self, synchronous: str, integrity_check: bool) -> None:
        # Look before touching: nothing below may change a file that is not
        # ours or was written by a newer version.
        self.schema_version = self._check_identity()
        if self.read_only:
            self._read_only_shims = tuple(S.read_only_shims(self.schema_version))
            for statement in self._read_only_shims:
                self._writer.rows(statement)
        if integrity_check:
            ok, detail = self.check_integrity()
            if not ok:
                raise CorruptDatabaseError(f"{self.path!r} failed its integrity check: {detail}")
        if self.read_only:
            self._read_settings()
            return
        if self.schema_version == 0 and not self._value(Q.ANY_TABLE):
            # A new file keeps a map of its pages, so that vacuum() can give
            # free pages back to the file system (only possible before the
            # first table is written, so before WAL writes the file's header).
            self._writer.rows(Q.AUTO_VACUUM_INCREMENTAL)
        if not self._memory:
            mode = self._value(Q.JOURNAL_WAL)
            if str(mode).lower() != "wal":
                raise StorageUnavailableError(
                    f"{self.path!r}: cannot switch to WAL journal mode (got {mode!r})"
                )
        self._writer.rows(Q.synchronous(synchronous))
        self._writer.rows(Q.journal_size_limit(self.wal_size_limit))
        if self.schema_version < S.SCHEMA_VERSION:
            self.write("migrate schema", self._migrate)
        if self.hash_chain:
            self.write("hash chain", self._keep_hash_chain)
        self._read_settings()

    def join(self, *, hash_chain: bool = False) -> None:
        """Another holder starts using this open engine (see
        :func:`~agentlog.engine.open_shared_engine`): take up the file's
        settings as a fresh open would — another holder or process may have
        turned the hash chain on — and keep a hash chain if ``hash_chain``."""
        if self.hash_chain:
            return
        if hash_chain:
            self.write("hash chain", self._keep_hash_chain)
            self.hash_chain = True
        elif self.read("settings", lambda conn: conn.rows(Q.SETTING_GET, (_HASH_CHAIN,))):
            self.hash_chain = True

    def _keep_hash_chain(self, conn: ConnectionT) -> None:
        """Inside a write: the file keeps a hash chain from now on, for every writer."""
        if not conn.rows(Q.SETTING_GET, (_HASH_CHAIN,)):
            conn.rows(Q.SETTING_PUT, (_HASH_CHAIN, "1"))

    def _read_settings(self) -> None:
        """Take the file's settings."""
        if self._writer.rows(Q.SETTING_GET, (_HASH_CHAIN,)):
            self.hash_chain = True

    def _check_identity(self) -> int:
        """Refuse a file of another application or a newer version; return its version."""
        app_id = self._value(Q.APPLICATION_ID)
        version = int(self._value(Q.USER_VERSION))
        if app_id not in (0, S.APPLICATION_ID):
            raise SchemaVersionError(
                f"{self.path!r} is not an agentlog database (application_id {app_id:#x})"
            )
        if version > S.SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path!r} has schema version {version}, newer than this agentlog "
                f"supports ({S.SCHEMA_VERSION}); upgrade agentlog to open it"
            )
        if app_id == 0 and version == 0 and self._value(Q.ANY_TABLE):
            raise SchemaVersionError(f"{self.path!r} is a SQLite database of another application")
        return version

    def _migrate(self, conn: ConnectionT) -> None:
        # Inside the write transaction: another process may have created or
        # migrated it while we waited for the lock. An older file is brought
        # forward through every step it lacks, all in this one transaction.
        version = self._check_identity()
        if version < S.SCHEMA_VERSION:
            for statement in S.migration(version):
                conn.rows(statement)
        self.schema_version = S.SCHEMA_VERSION

    # -- connections ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(self._closed_message)

    def _borrow_reader(self) -> ConnectionT:
        """A read connection from the pool (a new one when none is idle).

        The C twin inlines this and :meth:`_return_reader` on its hot paths.
        """
        if self._closed:
            raise CheckpointerClosedError(self._closed_message)
        try:
            return self._idle_readers.pop()
        except IndexError:
            return self._connect(query_only=True)

    def _return_reader(self, conn: ConnectionT) -> None:
        self._idle_readers.append(conn)
        if self._closed:  # closed meanwhile: close() may have drained the pool already
            self._drain_readers()

    def _drain_readers(self) -> None:
        """Close every idle reader."""
        while True:
            try:
                conn = self._idle_readers.pop()
            except IndexError:
                return
            conn.close()

    @contextlib.contextmanager
    def _reader(self) -> Iterator[ConnectionT]:
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
            if conn.in_transaction():
                # A read transaction that could not be ended (see read): pooled,
                # it would keep its old snapshot for every later read.
                conn.close()
            else:
                self._return_reader(conn)

    # -- transactions --------------------------------------------------------------

    def read(
        self, context: str, work: Callable[[ConnectionT], _T], *, snapshot: bool = False
    ) -> _T:
        """Run ``work`` on a read connection (inside one read transaction with ``snapshot``)."""
        try:
            with self._translating(context), self._reader() as conn:
                if not snapshot:
                    return work(conn)
                conn.rows(Q.BEGIN_READ)
                try:
                    return work(conn)
                finally:
                    # Ending a read loses nothing: if even that fails (out of
                    # memory), the read's own outcome stands, and _reader drops
                    # the connection, still in its transaction.
                    with contextlib.suppress(Exception):
                        conn.rows(Q.COMMIT)
        except StorageUnavailableError as exc:
            if self._closed:
                raise CheckpointerClosedError(self._closed_message) from exc
            raise

    def write(self, context: str, work: Callable[[ConnectionT], _T]) -> _T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction; roll back on error."""
        with self._write_lock:
            return self._write_locked(context, work, wait=True)

    def try_write(self, context: str, work: Callable[[ConnectionT], _T]) -> tuple[bool, _T | None]:
        """:meth:`write`, only if it can begin at once: ``(True, result)``; or
        ``(False, None)``, ``work`` not run, while another thread of this process
        or another connection to the file holds the write lock."""
        if not self._write_lock.acquire(blocking=False):
            return False, None
        try:
            return True, self._write_locked(context, work, wait=False)
        except _WouldWait:
            return False, None
        finally:
            self._write_lock.release()

    def _write_locked(self, context: str, work: Callable[[ConnectionT], _T], *, wait: bool) -> _T:
        with self._translating(context):
            self._check_open()
            if self.read_only:
                raise StorageUnavailableError(f"{context}: {self.path!r} is open read-only")
            conn = self._writer
            self._end_leftover_transaction(conn)
            if not conn.begin_write(wait):
                raise _WouldWait
            try:
                result = work(conn)
                conn.rows(Q.COMMIT)
            except BaseException:
                if conn.in_transaction():
                    # A rollback that fails too (out of memory, an I/O error)
                    # leaves the transaction to _end_leftover_transaction; the
                    # caller sees the error that failed the write.
                    with contextlib.suppress(Exception):
                        conn.rows(Q.ROLLBACK)
                raise
            self._note_commit()
            return result

    @staticmethod
    def _end_leftover_transaction(conn: ConnectionT) -> None:
        """Under the write lock: roll back a transaction that a failed write left
        open because its own rollback failed too (out of memory, an I/O error),
        before the writer is used again; else every later write would fail
        ("cannot start a transaction within a transaction") and a read on the
        writer would see the failed write's changes."""
        if conn.in_transaction():
            conn.rows(Q.ROLLBACK)

    # -- the write-ahead log's bound --------------------------------------------------

    def _note_commit(self) -> None:
        """Under the write lock, after each commit: now and then, keep the WAL bounded.

        Every 16th commit looks at the WAL's size; past ``wal_size_limit`` it
        is checkpointed and truncated, waiting up to 100 ms for other
        connections' transactions to end (if one outlasts that, the next look
        tries again). SQLite's own automatic checkpoint copies pages back as
        the WAL grows but cannot finish while transactions overlap without
        end; this is what bounds the file under a steady load.
        """
        if self._count_commits(1):
            self._bound_wal()

    def _count_commits(self, count: int) -> bool:
        """Count ``count`` more commits; whether the WAL is due its look."""
        self._commits_unlooked += count
        if self._commits_unlooked < _COMMITS_PER_WAL_LOOK:
            return False
        self._commits_unlooked = 0
        return True

    def _bound_wal(self) -> None:
        """Under the write lock: checkpoint and truncate the WAL if it is past
        ``wal_size_limit`` (see :meth:`_note_commit`)."""
        if self._wal_size() > self.wal_size_limit:
            # The commit is done: a checkpoint that fails (a full disk, an I/O
            # error) must never turn it into an error its caller would retry.
            # The next look tries again.
            with contextlib.suppress(Exception):
                self._truncate_wal()

    def _truncate_wal(self) -> bool:
        """Under the write lock: checkpoint and truncate the WAL, trying for up to
        100 ms (another process's checkpoint holds the checkpoint lock without
        a busy handler being asked, so a refused try is retried)."""
        deadline = time.monotonic() + _CHECKPOINT_WAIT_MS / 1000
        while True:
            left = deadline - time.monotonic()
            if self._writer.checkpoint_truncate(max(1, int(left * 1000))):
                return True
            if left <= 0:
                return False
            time.sleep(0.001)

    def _wal_size(self) -> int:
        if self._memory:
            return 0
        try:
            return os.stat(self.path + "-wal").st_size
        except OSError:
            return 0

    def checkpoint_wal(self) -> bool:
        """Checkpoint the WAL and truncate it now (waiting up to 100 ms for other
        transactions to end); True if done."""
        if self._memory or self.read_only:
            return True
        with self._write_lock, self._translating("checkpoint"):
            self._check_open()
            return self._truncate_wal()

    # -- the one path that creates sessions and inserts events ----------------------

    def create_session(
        self,
        conn: Connection,
        tenant: str,
        name: str,
        *,
        head: int,
        ts: float,
        revision: int,
        metadata: bytes | None = None,
        mtime: float | None = None,
    ) -> int:
        """Inside a write: insert a new session row created at ``ts`` and last
        changed at ``mtime`` (default: ``ts``); return its sid.

        The sid is one past the largest (the C engine's hot path allocates the
        same way, in C); past the bound nothing is inserted.
        """
        sid = int(conn.rows(Q.NEXT_SID)[0][0])
        if sid > S.MAX_SID:
            raise StorageUnavailableError("the database holds too many sessions")
        changed = ts if mtime is None else mtime
        conn.rows(Q.INSERT_SESSION, (sid, tenant, name, head, ts, changed, revision, metadata))
        return sid

    def insert_events(
        self,
        conn: Connection,
        sid: int,
        after_seq: int,
        events: Sequence[tuple[float, str, bytes, str | None]],
    ) -> None:
        """Inside a write: insert ``(ts, type, json, item_id)`` events at ``after_seq + 1``…."""
        if after_seq + len(events) > S.MAX_SEQ:
            raise ValueError(f"a session cannot exceed {S.MAX_SEQ} events")
        previous = self._previous_digest(conn, sid, after_seq)
        for seq, (ts, kind, data, item_id) in enumerate(events, after_seq + 1):
            digest = None
            if previous is not None:
                digest = previous = chain_digest(previous, data, seq)
            key = S.event_key(sid, seq)
            conn.rows(Q.INSERT_ITEM, (key, ts, kind, data, checksum(data), digest, item_id))

    def _previous_digest(self, conn: Connection, sid: int, seq: int) -> bytes | None:
        """Inside a write: the chain link to extend after event ``seq`` of ``sid``,
        or None when this file keeps no hash chain."""
        if not self.hash_chain:
            return None
        if seq == 0:
            return GENESIS
        rows = conn.rows(Q.EVENT_DIGEST, (S.event_key(sid, seq),))
        # An event written before the chain was kept has no link: the chain
        # starts again from nothing (verify names the event that lacks one).
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else GENESIS

    def _append_in(
        self,
        conn: ConnectionT,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
    ) -> int:
        """Inside a write: append a non-empty batch after the head; return the new head.

        A conflict or the seq bound is found before anything of this batch is
        written, so it refuses this batch alone.
        """
        rows = conn.rows(Q.SELECT_SESSION, (tenant, name))
        head = rows[0][1] if rows else 0
        if expected_head is not None and expected_head != head:
            raise CheckpointConflictError(name, expected_head, head)
        new_head = head + len(batch)
        if new_head > S.MAX_SEQ:
            raise ValueError(f"session {name!r} would exceed {S.MAX_SEQ} events")
        if rows:
            sid = rows[0][0]
            conn.rows(Q.UPDATE_SESSION, (new_head, ts, sid))
        else:
            sid = self.create_session(conn, tenant, name, head=new_head, ts=ts, revision=1)
        self._insert_batch(conn, S.event_key(sid, head + 1), ts, batch)
        return new_head

    def _insert_batch(
        self, conn: ConnectionT, first_key: int, ts: float, batch: EncodedBatch
    ) -> None:
        """Insert ``batch`` at consecutive keys from ``first_key`` (a twin may do it
        faster, without a hash chain)."""
        sid, after_seq = first_key >> S.SEQ_BITS, (first_key & S.MAX_SEQ) - 1
        self.insert_events(conn, sid, after_seq, [(ts, kind, data, None) for kind, data in batch])

    def append_many(
        self, tenant: str, requests: Sequence[tuple[str, int | None, EncodedBatch]], ts: float
    ) -> list[int | Exception]:
        """Append several batches in ONE write transaction, each atomically on its own.

        ``requests`` are ``(name, expected_head, batch)``; the result holds, in
        order, each one's new head, or the error that refused it alone
        (:class:`CheckpointConflictError`, or ``ValueError`` past the seq bound).
        Any other failure rolls the whole transaction back and is raised. An
        empty batch writes nothing: its head is read (and checked) after the
        group, as :meth:`append` does.
        """
        self._check_open()
        written = self._append_group(tenant, [r for r in requests if r[2]], ts, wait=True)
        assert written is not None
        return self._with_empty_batches(tenant, requests, ts, written)

    def try_append_many(
        self, tenant: str, requests: Sequence[tuple[str, int | None, EncodedBatch]], ts: float
    ) -> list[int | Exception] | None:
        """:meth:`append_many`, only if it needs no waiting; else None, nothing written.

        It waits for nothing: not for the write lock (held by another thread
        of this process or another connection to the file), and not for the
        disk — with ``synchronous="full"`` every commit does, so the answer is
        always None.
        """
        self._check_open()
        if self.synchronous == "full":
            return None
        written = self._append_group(tenant, [r for r in requests if r[2]], ts, wait=False)
        if written is None:
            return None
        return self._with_empty_batches(tenant, requests, ts, written)

    def _with_empty_batches(
        self,
        tenant: str,
        requests: Sequence[tuple[str, int | None, EncodedBatch]],
        ts: float,
        written: list[int | Exception],
    ) -> list[int | Exception]:
        """The results of ``requests``: ``written`` for the non-empty batches, in
        order, and for each empty one its head (checked), read now."""
        if len(written) == len(requests):
            return written
        results: list[int | Exception] = []
        non_empty = iter(written)
        for name, expected_head, batch in requests:
            if batch:
                results.append(next(non_empty))
                continue
            try:
                results.append(self.append(tenant, name, expected_head, ts, batch))
            except CheckpointConflictError as exc:
                results.append(exc)
        return results

    def _append_group(
        self,
        tenant: str,
        requests: Sequence[tuple[str, int | None, EncodedBatch]],
        ts: float,
        *,
        wait: bool,
    ) -> list[int | Exception] | None:
        """Non-empty batches in one transaction (the C twin's is C); None only
        without ``wait``, when the write could not begin at once."""
        if not requests:
            return []

        def work(conn: ConnectionT) -> list[int | Exception]:
            results: list[int | Exception] = []
            for name, expected_head, batch in requests:
                try:
                    results.append(self._append_in(conn, tenant, name, expected_head, ts, batch))
                except (CheckpointConflictError, ValueError) as exc:
                    results.append(exc)
            return results

        if wait:
            return self.write("append", work)
        return self.try_write("append", work)[1]

    # -- the log's cold paths --------------------------------------------------------

    def append(
        self,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
    ) -> int:
        """Append a batch atomically; return the new head.

        An empty batch writes nothing and returns the head (a stale
        ``expected_head`` still conflicts).
        """
        # Checked before the twin's queue and locks (a fork child must not wait on them).
        self._check_open()
        if batch:
            return self._append_batch(tenant, name, expected_head, ts, batch)
        head = self.head(tenant, name)
        if expected_head is not None and expected_head != head:
            raise CheckpointConflictError(name, expected_head, head)
        return head

    def list_sessions(self, tenant: str) -> list[tuple[str, float, int]]:
        """``(name, mtime, head)`` of every session, most recently active first."""
        rows = self.read("list", lambda conn: conn.rows(Q.LIST_SESSIONS, (tenant,)))
        return [(name, mtime, head) for name, mtime, head in rows]

    def list_sessions_metadata(
        self, tenant: str
    ) -> list[tuple[str, float, int, bytes | None, int]]:
        """``(name, mtime, head, metadata json | None, revision)`` of every session,
        most recently active first (one read)."""
        rows = self.read("list", lambda conn: conn.rows(Q.LIST_SESSIONS_METADATA, (tenant,)))
        return [(n, mtime, head, meta, rev) for n, mtime, head, meta, rev in rows]

    def session_metadata(self, tenant: str, name: str) -> tuple[bytes | None, int]:
        """``(metadata json | None, revision)``; ``(None, 0)`` for an unknown session."""
        rows = self.read("metadata", lambda conn: conn.rows(Q.SELECT_METADATA, (tenant, name)))
        if not rows:
            return None, 0
        meta, revision = rows[0]
        return (None if meta is None else bytes(meta)), int(revision)

    def set_session_metadata(
        self, tenant: str, name: str, data: bytes, expected_revision: int, ts: float
    ) -> int:
        """Replace the metadata if the session is at ``expected_revision`` (an
        unknown session is at 0: it is created, empty); return the new revision.

        A stale revision raises :class:`StorageConflictError`, nothing written.
        """

        def work(conn: DriverConnection) -> int:
            rows = conn.rows(Q.SELECT_REVISION, (tenant, name))
            revision = int(rows[0][1]) if rows else 0
            if revision != expected_revision:
                raise StorageConflictError(f"session {name!r}", expected_revision, revision)
            if not rows:
                self.create_session(conn, tenant, name, head=0, ts=ts, revision=1, metadata=data)
                return 1
            conn.rows(Q.SET_METADATA, (data, ts, rows[0][0]))
            return revision + 1

        return self.write("metadata", work)

    def list_all_sessions(self) -> list[tuple[str, str, float, int]]:
        """``(tenant, name, mtime, head)`` of every session of every tenant, most
        recently active first."""
        rows = self.read("list", lambda conn: conn.rows(Q.LIST_ALL_SESSIONS))
        return [(tenant, name, mtime, head) for tenant, name, mtime, head in rows]

    def delete(self, tenant: str, name: str) -> None:
        """Remove the session and all its events; nothing if it does not exist."""

        def work(conn: DriverConnection) -> None:
            for sid, _ in conn.rows(Q.SELECT_SESSION, (tenant, name)):
                self.delete_session(conn, sid)

        self.write("delete", work)

    def delete_session(self, conn: Connection, sid: int) -> None:
        """Inside a write: remove session ``sid`` with its events and snapshots."""
        conn.rows(Q.DELETE_EVENTS_BETWEEN, (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)))
        conn.rows(Q.DELETE_SNAPSHOTS_AFTER, (sid, -1))
        conn.rows(Q.DELETE_SESSION, (sid,))

    def truncate(self, tenant: str, name: str, to_seq: int, ts: float) -> int:
        """Remove events after ``to_seq``; return the new head."""

        def work(conn: DriverConnection) -> int:
            rows = conn.rows(Q.SELECT_SESSION, (tenant, name))
            if not rows:
                return 0
            sid, head = rows[0]
            if to_seq >= head:
                return int(head)
            self._check_retained(conn, name, sid, head, "truncate", to_seq)
            bounds = (S.event_key(sid, to_seq), S.event_key(sid, S.MAX_SEQ))
            conn.rows(Q.DELETE_EVENTS_BETWEEN, bounds)
            # A snapshot of events that are gone would resurrect them on load.
            conn.rows(Q.DELETE_SNAPSHOTS_AFTER, (sid, to_seq))
            conn.rows(Q.UPDATE_SESSION, (to_seq, ts, sid))
            return to_seq

        return self.write("truncate", work)

    def copy_prefix(self, tenant: str, name: str, at_seq: int, new_name: str, ts: float) -> int:
        """Create ``new_name`` holding events 1..``at_seq`` of ``name``."""

        def work(conn: DriverConnection) -> int:
            rows = conn.rows(Q.SELECT_SESSION, (tenant, name))
            if not rows:
                raise SessionNotFoundError(f"no session {name!r} to fork")
            sid, head = rows[0]
            if at_seq > head:
                raise ValueError(f"cannot fork {name!r} at {at_seq}: its head is {head}")
            self._check_retained(conn, name, sid, head, "fork", at_seq)
            if conn.rows(Q.SELECT_SESSION, (tenant, new_name)):
                raise SessionExistsError(f"session {new_name!r} already exists")
            source = S.event_key(sid, 0)
            _refuse_damaged(conn, name, source, source + at_seq)
            new_sid = self.create_session(conn, tenant, new_name, head=at_seq, ts=ts, revision=1)
            target = S.event_key(new_sid, 0)
            conn.rows(Q.COPY_EVENTS, (source, target, source, source + at_seq))
            conn.rows(Q.COPY_SNAPSHOTS, (new_sid, sid, at_seq))
            return at_seq

        return self.write("fork", work)

    # -- retention ---------------------------------------------------------------------

    def first_seq(self, conn: Connection, sid: int, head: int) -> int:
        """Inside a transaction: the seq of session ``sid``'s first stored event
        (one seek); ``head + 1`` when it holds none."""
        found = conn.rows(Q.FIRST_EVENT, (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)))
        return int(found[0][0]) if found else head + 1

    def _check_retained(
        self, conn: Connection, name: str, sid: int, head: int, what: str, point: int
    ) -> None:
        """Inside a write: refuse to go back below what retention left."""
        first = self.first_seq(conn, sid, head)
        if first > 1:
            oldest = conn.rows(Q.OLDEST_SNAPSHOT, (sid,))[0][0]
            check_retained(name, what, point, first, oldest)

    def first_retained(self, tenant: str, name: str) -> int:
        """The seq of the session's first stored event: 1 unless retention pruned
        it (``head + 1`` when it holds none; 1 for an unknown session)."""
        rows = self.read("read", lambda conn: conn.rows(Q.RETAINED, (tenant, name)))
        if not rows:
            return 1
        head, first = rows[0]
        return int(head) + 1 if first is None else int(first)

    # -- the file ----------------------------------------------------------------------

    def data_version(self) -> tuple[int, int]:
        """A token that changes when any connection commits to the file.

        ``PRAGMA data_version`` on a pooled reader; its value only compares
        with the same connection's, so the token pairs it with which reader
        answered: a new reader gives a different token (a needless look,
        never a missed commit). Compare tokens for equality only.
        """

        def work(conn: ConnectionT) -> tuple[int, int]:
            return (id(conn), int(conn.rows(Q.DATA_VERSION)[0][0]))

        return self.read("data version", work)

    def check_integrity(self) -> tuple[bool, str]:
        """Run ``PRAGMA quick_check``; ``(True, "ok")`` for a sound file."""
        try:
            with self._write_lock, self._translating("integrity check"):
                self._check_open()
                self._end_leftover_transaction(self._writer)
                rows = self._writer.rows(Q.QUICK_CHECK)
        except (CorruptDatabaseError, StorageUnavailableError) as exc:
            return False, str(exc)
        detail = "\n".join(str(row[0]) for row in rows)
        if detail != "ok" or self.schema_version < S.SCHEMA_VERSION:
            return detail == "ok", detail
        try:
            problems = self.read("integrity check", _log_problems, snapshot=True)
        except (CorruptDatabaseError, StorageUnavailableError) as exc:
            return False, str(exc)
        return (True, "ok") if not problems else (False, "\n".join(problems))

    def _session_rows(self) -> list[tuple[int, str, str, int, int]]:
        """``(sid, tenant, name, head, seq the newest snapshot covers)`` of every session."""
        rows = self.read("check", lambda conn: conn.rows(Q.ALL_SESSIONS))
        return [(int(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4])) for r in rows]

    def _checked_events(self, sid: int) -> Iterator[tuple[int, bytes, int | None, bytes | None]]:
        """Every stored ``(seq, payload, crc, digest)`` of session ``sid``, a page
        (one read) at a time."""
        after, last = S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)
        while True:
            rows = self.read(
                "check", functools.partial(_page_rows, Q.EVENTS_CHECKED, (after, last, _CHECK_PAGE))
            )
            for row in rows:
                yield int(row[0]), stored_bytes(row[1]), row[2], row[3]
            if len(rows) < _CHECK_PAGE:
                return
            after = S.event_key(sid, int(rows[-1][0]))

    def damaged_events(self, progress: Progress | None = None) -> list[DamagedEvent]:
        """Every stored event of every session whose payload fails its checksum or
        does not decode, and every gap in a session's seqs (a deep check)."""
        damaged: list[DamagedEvent] = []
        sessions = self._session_rows()
        for done, (sid, tenant, name, head, covered) in enumerate(sessions, 1):
            stored = ((seq, data, crc) for seq, data, crc, _ in self._checked_events(sid))
            damaged += session_damage(tenant, name, head, covered, stored)
            if progress is not None:
                progress(done, len(sessions))
        return damaged

    def verify_chain(self, tenant: str, name: str) -> ChainReport:
        """Recompute session ``name``'s hash chain and compare it with the stored links."""
        rows = self.read("verify", lambda conn: conn.rows(Q.SELECT_SESSION, (tenant, name)))
        if not rows:
            raise SessionNotFoundError(f"no session {name!r}")
        sid, head = int(rows[0][0]), int(rows[0][1])
        covered = self.read("verify", lambda conn: conn.rows(Q.SNAPSHOT_COVERS, (sid,)))[0][0]
        events = ((seq, data, digest) for seq, data, _, digest in self._checked_events(sid))
        return walk_chain(name, head, events, int(covered))

    def backup_to(self, path: str) -> None:
        """Write a consistent copy of the whole database to the new file ``path``.

        ``VACUUM INTO`` reads in one transaction, so the copy is a committed
        state even while other processes write. It runs on a connection of its
        own (a pooled reader is ``query_only``, which refuses it), so appends
        in this process go on meanwhile too.
        """
        # Created here, empty and the owner's only (VACUUM INTO fills an empty file).
        _refuse_undecodable(path)
        if os.path.lexists(path):
            raise StorageUnavailableError(f"backup target {path!r} already exists")
        if not create_private_file(path, DEFAULT_FILE_MODE):
            parent = os.path.dirname(os.path.abspath(path))
            why = "no such directory" if not os.path.isdir(parent) else "cannot be created"
            raise StorageUnavailableError(f"backup target {path!r}: {why}")
        try:
            if self._memory:
                with self._write_lock, self._translating("backup"):
                    self._check_open()
                    self._writer.rows(Q.BACKUP_INTO, (path,))
            else:
                self._check_open()
                with self._translating("backup"):
                    conn = self._connect(query_only=False)
                    try:
                        # The copy keeps a page map (vacuum() works on it), whatever
                        # the source does: a copy is how an older file converts. (On
                        # a file that has one, the copy takes it as it is; setting
                        # it again would write, which a read-only open cannot.)
                        if int(conn.rows(Q.AUTO_VACUUM)[0][0]) != 2:
                            conn.rows(Q.AUTO_VACUUM_INCREMENTAL)
                        conn.rows(Q.BACKUP_INTO, (path,))
                    finally:
                        conn.close()
        except BaseException:
            remove_created(path)
            raise

    def stats(self) -> dict[str, Any]:
        """What an operator looks at first: sizes, counts and the largest sessions."""

        def work(conn: ConnectionT) -> dict[str, Any]:
            sessions, tenants, events = conn.rows(Q.SESSION_TOTALS)[0]
            page_size = int(conn.rows(Q.PAGE_SIZE)[0][0])
            largest = [
                {"tenant": tenant, "session": name, "events": head, "mtime": mtime}
                for tenant, name, head, mtime in conn.rows(Q.LARGEST_SESSIONS, (10,))
            ]
            return {
                "sessions": int(sessions),
                "tenants": int(tenants),
                "events": int(events),
                "page_size": page_size,
                "pages": int(conn.rows(Q.PAGE_COUNT)[0][0]),
                "free_pages": int(conn.rows(Q.FREELIST_COUNT)[0][0]),
                "auto_vacuum": _AUTO_VACUUM.get(int(conn.rows(Q.AUTO_VACUUM)[0][0]), "?"),
                "largest_sessions": largest,
            }

        figures = self.read("stats", work, snapshot=True)
        file_size = 0 if self._memory else os.stat(self.path).st_size
        figures.update(
            path=self.path,
            engine=self.name,
            schema_version=self.schema_version,
            file_bytes=file_size,
            wal_bytes=self._wal_size(),
            wal_size_limit=self.wal_size_limit,
            free_bytes=figures["free_pages"] * figures["page_size"],
        )
        return figures

    def vacuum(self, max_pages: int | None = None) -> dict[str, Any]:
        """Give free pages back to the file system: the file shrinks.

        Free pages (what deleted, truncated and pruned sessions left) are
        moved to the end of the file and cut off, ``_VACUUM_STEP`` pages per
        write transaction, so writers in other processes wait for one step at
        a time, never for the whole run; at most ``max_pages`` in all. Then
        the WAL is checkpointed, which is when the file itself is truncated.
        Only a file that keeps a page map (``auto_vacuum`` incremental: every
        file this version creates, and every :meth:`backup_to` copy) can;
        on another, nothing changes (the free pages are reused by later
        writes). Returns ``{"auto_vacuum", "pages_returned", "free_pages",
        "file_bytes_before", "file_bytes"}``.
        """
        self._check_open()
        if self.read_only:
            raise StorageUnavailableError(f"vacuum: {self.path!r} is open read-only")
        mode = self.read("vacuum", lambda conn: int(conn.rows(Q.AUTO_VACUUM)[0][0]))
        before = self._file_size()
        returned = 0
        if mode == 2:
            while max_pages is None or returned < max_pages:
                left = _VACUUM_STEP if max_pages is None else max_pages - returned
                want = min(_VACUUM_STEP, left)
                step = self.write("vacuum", functools.partial(_vacuum_step, want))
                returned += step
                if step < want:
                    break
            if returned:
                self.checkpoint_wal()
        free = self.read("vacuum", lambda conn: int(conn.rows(Q.FREELIST_COUNT)[0][0]))
        return {
            "auto_vacuum": _AUTO_VACUUM.get(mode, "?"),
            "pages_returned": returned,
            "free_pages": free,
            "file_bytes_before": before,
            "file_bytes": self._file_size(),
        }

    def _file_size(self) -> int:
        return 0 if self._memory else os.stat(self.path).st_size

    def delete_idle(self, tenant: str, before: float, batch: int = 100) -> list[str]:
        """Delete ``tenant``'s sessions last changed before ``before`` (epoch
        seconds); return their names, oldest first.

        Safe while other processes write: each batch is one write transaction
        that looks at ``mtime`` inside it, so a session appended to meanwhile
        is kept. Space the sessions held is reused by later writes.
        """
        deleted: list[tuple[float, int, str]] = []

        def work(conn: ConnectionT, after: int) -> list[tuple[int, str, float]]:
            rows = conn.rows(Q.IDLE_SESSIONS, (tenant, before, after, batch))
            for sid, _, _ in rows:
                self.delete_session(conn, sid)
            return rows

        # In sid order, each batch after the last (there is no index on
        # activity to walk); the names come back oldest first.
        after = 0
        while True:
            rows = self.write("delete idle sessions", functools.partial(work, after=after))
            deleted.extend((mtime, sid, name) for sid, name, mtime in rows)
            if len(rows) < batch:
                return [name for _, _, name in sorted(deleted)]
            after = rows[-1][0]

    def close(self) -> None:
        """Close every connection; idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            self._file_key = None
            self._finalizer()  # the readers, the writer, the claim on the file

    def abandon_after_fork(self) -> None:
        """In a child of ``os.fork()`` (called by the fork hook): refuse every
        later use, and never touch the parent's connections (not even to close
        them, here or when this is collected). Fresh locks: a parent thread may
        have held one at the fork."""
        self._closed_message = (
            f"{self.path!r} was opened in process {self._pid}, before os.fork(): a SQLite "
            "connection cannot be used across a fork; open the database again in this process"
        )
        self._closed = True
        self._write_lock = self._new_write_lock()
        self._finalizer.detach()
        _ABANDONED.append((self._writer, self._idle_readers))
        self._idle_readers = collections.deque()
        self._file_key = None  # the child's claims start afresh (_after_fork_in_child)


def _vacuum_step(pages: int, conn: Connection) -> int:
    """Inside a write: give up to ``pages`` free pages back; how many it gave.

    The standard library's ``sqlite3`` steps a statement without result
    columns once, so there each ``incremental_vacuum`` gives one page back;
    the C engine's runs it to the end. Counting the free list serves both.
    """
    start = free = int(conn.rows(Q.FREELIST_COUNT)[0][0])
    target = max(0, free - pages)
    while free > target:
        conn.rows(Q.incremental_vacuum(free - target))
        now = int(conn.rows(Q.FREELIST_COUNT)[0][0])
        if now >= free:
            break
        free = now
    return start - free


def _log_problems(conn: Connection) -> list[str]:
    """What is wrong with the log's own shape, beyond SQLite's page checks: each
    session must hold its events with no gap from its first stored seq through
    its head, and a session whose events start past 1 (retention pruned them)
    must have a snapshot at or past the pruned ones, none past its head;
    every event must belong to a session. Each session's events are one range of the events table,
    so this reads every event once, in key order, with no sort."""
    problems = []
    counted = 0
    for sid, tenant, name, head, snapshot in conn.rows(Q.SESSION_EXTENTS):
        where = f"session {tenant!r}/{name!r}"
        bounds = (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ))
        count, first, last = conn.rows(Q.EVENT_EXTENT, bounds)[0]
        counted += count
        if not count:
            first, last = head + 1, head
        if last != head:
            problems.append(f"{where}: its head is {head} but its last event is {last}")
        elif count != last - first + 1:
            problems.append(
                f"{where}: {last - first + 1 - count} event(s) missing between {first} and {last}"
            )
        elif first > 1 and (snapshot is None or snapshot < first - 1):
            problems.append(f"{where}: events 1..{first - 1} are gone and no snapshot covers them")
        elif snapshot is not None and snapshot > head:  # truncate drops such snapshots
            problems.append(f"{where}: its head is {head} but a snapshot covers up to {snapshot}")
    orphans = int(conn.rows(Q.EVENT_COUNT)[0][0]) - counted
    if orphans:
        problems.append(f"{orphans} event(s) belong to no session")
    return problems


# Engines open in this process; in a fork child each is abandoned (see
# EngineBase.abandon_after_fork) and its connections kept here, never closed:
# closing a connection inherited from the parent would act on the parent's file.
_LIVE_ENGINES: weakref.WeakSet[EngineBase[Any]] = weakref.WeakSet()
_ABANDONED: list[tuple[Any, Any]] = []


def _after_fork_in_child() -> None:
    global _OPEN_FILES_LOCK
    _OPEN_FILES_LOCK = threading.Lock()  # a parent thread may have held it
    _OPEN_FILES.clear()
    for engine in list(_LIVE_ENGINES):
        if not engine.closed:
            engine.abandon_after_fork()
    _LIVE_ENGINES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _page_rows(sql: str, params: tuple[Any, ...], conn: DriverConnection) -> list[tuple[Any, ...]]:
    """The rows of one statement (a page of a deep check, bound with its params)."""
    return conn.rows(sql, params)


def _release_claim(key: tuple[int, int] | None) -> None:
    """Give up one claim on the file ``key`` (see ``EngineBase._claim_file``)."""
    if key is None:
        return
    with _OPEN_FILES_LOCK:
        engine, count = _OPEN_FILES[key]
        if count > 1:
            _OPEN_FILES[key] = (engine, count - 1)
        else:
            del _OPEN_FILES[key]


def _shut_down(
    writer: DriverConnection,
    readers: collections.deque[Any],
    key: tuple[int, int] | None,
    stop_first: Callable[[], object] | None,
) -> None:
    """Close an engine's connections and release its claim: at :meth:`EngineBase.close`,
    or when the engine is collected without it (this holds no reference to it)."""
    try:
        if stop_first is not None:
            stop_first()
        while True:
            try:
                conn = readers.pop()
            except IndexError:
                break
            conn.close()
        writer.close()
    finally:
        _release_claim(key)
