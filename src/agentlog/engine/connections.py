"""What both SQLite engines share beneath the operations: opening and the
schema guard, the claim on the file, the reader pool, transactions, the
write-ahead log's bound, closing, and the fork guard.

Threads: one writer connection guarded by a lock (SQLite serialises writers
anyway; the lock keeps one transaction per connection), and a pool of
read-only connections (:class:`ReaderPool`) that a reading thread borrows and
gives back, so reads never wait for the writer — WAL lets them see the last
committed state while a write is in progress. A private ``":memory:"``
database has a single connection, so there reads take the write lock too.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..errors import (
    CheckpointerClosedError,
    CorruptDatabaseError,
    SchemaVersionError,
    StorageUnavailableError,
)
from ..files import DEFAULT_FILE_MODE, create_private_file, remove_created
from . import schema as S
from . import sql as Q
from .errors import CLOSED, opening_error, read_only_refusal, refused
from .forks import abandon_in_fork_children

#: Operators' news of the engine: schema steps, WAL bounds hit, refused files;
#: never a line per event.
_log = logging.getLogger("agentlog.engine")

__all__ = [
    "DEFAULT_OPTIONS",
    "DEFAULT_WAL_SIZE_LIMIT",
    "ConnectionT",
    "DriverConnection",
    "EngineCore",
    "EngineOptions",
    "ReaderPool",
    "WriteLock",
    "refuse_undecodable",
]

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
#: Bytes of a WAL file's header: a WAL longer than that holds frames.
_WAL_HEADER_BYTES = 32

_T = TypeVar("_T")


#: The setting that says the file keeps a hash chain.
_HASH_CHAIN = "hash_chain"


def refuse_undecodable(path: str) -> None:
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
        raise refused(
            StorageUnavailableError(f"cannot open {path!r}: it is a directory, not a database file")
        )
    if not stat.S_ISREG(mode):
        raise refused(StorageUnavailableError(f"cannot open {path!r}: it is not a regular file"))


# The files open in this process: (st_dev, st_ino) -> (engine name, claims);
# see EngineCore._claim_file.
_OPEN_FILES: dict[tuple[int, int], tuple[str, int]] = {}
_OPEN_FILES_LOCK = threading.Lock()


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


class ReaderPool(Generic[ConnectionT]):
    """An engine's idle read connections: a reading thread borrows one (a new
    one when none is idle) and gives it back. Both twins read through it (the
    C twin's hot paths too).

    A deque, whose pop() and append() are atomic on their own (free-threaded
    builds included), so it needs no lock. Once the engine closes, borrowing
    is refused and a connection given back is closed.
    """

    __slots__ = ("_connect", "_idle", "opened", "refusal")

    def __init__(self, connect: Callable[[], ConnectionT]) -> None:
        self._connect = connect
        self._idle: collections.deque[ConnectionT] = collections.deque()
        #: Why borrowing is refused (the engine closed), or None.
        self.refusal: str | None = None
        #: Readers opened because none was idle (a borrow that found the pool
        #: empty: the pool's "wait", paid as a new connection).
        self.opened = 0

    def borrow(self) -> ConnectionT:
        """A read connection: an idle one, else a new one."""
        refusal = self.refusal
        if refusal is not None:
            raise CheckpointerClosedError(refusal)
        try:
            return self._idle.pop()
        except IndexError:
            self.opened += 1
            return self._connect()

    @property
    def idle(self) -> int:
        """How many read connections wait idle in the pool now."""
        return len(self._idle)

    def give_back(self, conn: ConnectionT) -> None:
        """Return a borrowed connection (closed, if the engine closed meanwhile)."""
        self._idle.append(conn)
        if self.refusal is not None:  # closed meanwhile: the pool may be drained already
            self.drain()

    def shut(self, refusal: str) -> None:
        """Refuse every later borrow, saying ``refusal`` (the idle ones: :meth:`drain`)."""
        self.refusal = refusal

    def drain(self) -> None:
        """Close every idle connection."""
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return
            conn.close()


def _reader_factory(engine: EngineCore[ConnectionT]) -> Callable[[], ConnectionT]:
    """How ``engine``'s pool opens a reader, holding the engine weakly (the pool
    outlives it in the finalizer, which must not keep it alive)."""
    ref = weakref.ref(engine)

    def connect() -> ConnectionT:
        found = ref()
        if found is None:
            raise CheckpointerClosedError(CLOSED)
        return found.new_reader()

    return connect


@dataclass(frozen=True)
class EngineOptions:
    """How an engine opens its file: the options of
    :func:`~agentlog.engine.open_engine` (which documents them), as it checked
    them. One object, so that an engine class and its factory protocol do not
    spell the list again."""

    synchronous: str = "normal"
    busy_timeout_ms: int = 5000
    integrity_check_on_open: bool = False
    read_only: bool = False
    wal_size_limit: int = DEFAULT_WAL_SIZE_LIMIT
    file_mode: int = DEFAULT_FILE_MODE
    immutable: bool = False
    hash_chain: bool = False


#: The options an engine opens with when given none (those of ``open_engine``).
DEFAULT_OPTIONS = EngineOptions()


class EngineCore(Generic[ConnectionT]):
    """An engine's connections and transactions, less the driver and the operations.

    ``ConnectionT`` is the twin's connection class.
    """

    name: ClassVar[str] = "base"

    def __init__(self, path: str, *, options: EngineOptions = DEFAULT_OPTIONS) -> None:
        synchronous = options.synchronous
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = path
        self.read_only = bool(options.read_only)
        self.schema_version = 0
        # Whether appends link each event into its session's hash chain: asked
        # for here, or kept by the file since an earlier open asked (_prepare).
        self.hash_chain = bool(options.hash_chain)
        self._memory = path == ":memory:"
        # A read of a file no process has open (no -wal, no -shm): SQLite
        # creates nothing beside it and takes no locks (read_only only).
        self._immutable = bool(options.immutable) and self.read_only and not self._memory
        self._busy_timeout_ms = max(0, int(options.busy_timeout_ms))
        self.synchronous = synchronous
        self.wal_size_limit = options.wal_size_limit
        self._commits_unlooked = 0
        #: Looks that found the WAL past ``wal_size_limit``, and of them the
        #: checkpoints that truncated it (see :meth:`figures`).
        self.wal_bounds_hit = 0
        self.wal_truncations = 0
        # A read-only open of an older file: run on each connection first
        # (schema.read_only_shims), set once the file's version is known.
        self._read_only_shims: tuple[str, ...] = ()
        self._write_lock: WriteLock = self._new_write_lock()
        self._readers: ReaderPool[ConnectionT] = ReaderPool(_reader_factory(self))
        self._closed = False
        self._closed_message = CLOSED
        self._file_key: tuple[int, int] | None = None
        if not self._memory:
            refuse_undecodable(path)
            _refuse_special_file(path)
        # A new file is created here, with file_mode (the owner's only unless
        # told otherwise); SQLite gives its -wal and -shm files the same mode.
        created = (
            not self._memory and not self.read_only and create_private_file(path, options.file_mode)
        )
        # A WAL holding frames (past its 32-byte header) before the first
        # connection: what a process that ended without closing left, which
        # SQLite replays now (or another process has the file open).
        left = 0 if self._memory or self._immutable else self._wal_size()
        try:
            # Read-only opens need no query_only: the file itself is opened read-only.
            self._writer = self._connect(query_only=False)
        except BaseException:
            if created:
                remove_created(path)
            raise
        try:
            first = self._claim_file()
            with self._translating(f"cannot open {path!r}"):
                self._prepare(synchronous, options.integrity_check_on_open)
        except BaseException as exc:
            self._release_file()
            self._writer.close()
            if created:
                remove_created(path)
            restated = opening_error(exc, path)
            if restated is exc:
                raise
            raise restated from exc
        if left > _WAL_HEADER_BYTES and first:
            _log.info(
                "%s: opened with a write-ahead log of %d bytes that no close removed"
                " (a process ended without closing the file, or another process has it"
                " open): SQLite recovers the commits it holds",
                path,
                left,
            )
        # An engine dropped without close() (a checkpointer never closed, then
        # collected) still closes its connections and gives up its claim on
        # the file. The callback holds the connections and the claim, never
        # the engine. Not at interpreter exit: a daemon thread may still be
        # using a connection then, and the process's end releases everything.
        self._finalizer = weakref.finalize(
            self,
            _shut_down,
            self._writer,
            self._readers,
            self._file_key,
            self._stop_before_shut_down(),
        )
        self._finalizer.atexit = False
        # A SQLite connection must not cross os.fork(): the child refuses this
        # engine (see _after_fork_in_child).
        self._pid = os.getpid()
        abandon_in_fork_children(self)

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

    def _claim_file(self) -> bool:
        """Claim the file for this engine; whether no other engine of this
        process had it open."""
        if self._memory:
            return False
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
        return count == 0

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

    def _connect(self, query_only: bool, shims: bool = True) -> ConnectionT:
        """A new connection to ``self.path`` with the busy timeout set.

        ``query_only`` connections never write; an engine opened ``read_only``
        also never creates the file. ``shims=False`` leaves out a read-only
        open's TEMP stand-ins for an older file's schema (for a connection
        that copies the file as it is).
        """
        raise NotImplementedError

    def check_integrity(self) -> tuple[bool, str]:
        """``PRAGMA quick_check`` and the log's shape, which an open with
        ``integrity_check_on_open`` runs (see :class:`.maintenance.Maintenance`)."""
        raise NotImplementedError

    def new_reader(self) -> ConnectionT:
        """A new read connection (``query_only``), for the reader pool."""
        return self._connect(query_only=True)

    def _translating(self, context: str) -> contextlib.AbstractContextManager[None]:
        """A context that turns the driver's own errors into agentlog's typed errors."""
        return contextlib.nullcontext()

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
            raise refused(
                SchemaVersionError(
                    f"{self.path!r} is not an agentlog database (application_id {app_id:#x})"
                )
            )
        if version > S.SCHEMA_VERSION:
            raise refused(
                SchemaVersionError(
                    f"{self.path!r} has schema version {version}, newer than this agentlog "
                    f"supports ({S.SCHEMA_VERSION}); upgrade agentlog to open it"
                )
            )
        if app_id == 0 and version == 0 and self._value(Q.ANY_TABLE):
            raise refused(
                SchemaVersionError(f"{self.path!r} is a SQLite database of another application")
            )
        return version

    def _migrate(self, conn: ConnectionT) -> None:
        # Inside the write transaction: another process may have created or
        # migrated it while we waited for the lock. An older file is brought
        # forward through every step it lacks, all in this one transaction.
        version = self._check_identity()
        if version < S.SCHEMA_VERSION:
            for statement in S.migration(version):
                conn.rows(statement)
            if version:  # 0: a new file, created rather than upgraded
                _log.info(
                    "%s: schema steps %d to %d, in one transaction",
                    self.path,
                    version,
                    S.SCHEMA_VERSION,
                )
        self.schema_version = S.SCHEMA_VERSION

    # -- connections ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(self._closed_message)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[ConnectionT]:
        """A connection to read on: borrowed from the pool, or the only one."""
        if self._memory:
            with self._write_lock:
                self._check_open()
                yield self._writer
            return
        conn = self._readers.borrow()
        try:
            yield conn
        finally:
            if conn.in_transaction():
                # A read transaction that could not be ended (see read): pooled,
                # it would keep its old snapshot for every later read.
                conn.close()
            else:
                self._readers.give_back(conn)

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
                raise read_only_refusal(context, self.path)
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
        size = self._wal_size()
        if size > self.wal_size_limit:
            self.wal_bounds_hit += 1
            # The commit is done: a checkpoint that fails (a full disk, an I/O
            # error) must never turn it into an error its caller would retry.
            # The next look tries again.
            done = False
            with contextlib.suppress(Exception):
                done = self._truncate_wal()
            if done:
                self.wal_truncations += 1
            _log.info(
                "WAL of %s at %d bytes, past its bound of %d: %s",
                self.path,
                size,
                self.wal_size_limit,
                "checkpointed and truncated" if done else "a transaction was in the way",
            )

    def figures(self) -> dict[str, int]:
        """Cheap figures for monitoring, read without touching the file's pages:
        ``wal_bytes``, ``wal_size_limit``, ``wal_bounds_hit`` and
        ``wal_truncations`` (since this open), ``readers_opened`` (borrows
        that found no idle reader) and ``readers_idle``."""
        return {
            "wal_bytes": self._wal_size(),
            "wal_size_limit": int(self.wal_size_limit),
            "wal_bounds_hit": self.wal_bounds_hit,
            "wal_truncations": self.wal_truncations,
            "readers_opened": self._readers.opened,
            "readers_idle": self._readers.idle,
        }

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

    def close(self) -> None:
        """Close every connection; idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            self._readers.shut(self._closed_message)
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
        _ABANDONED.append((self._writer, self._readers))
        self._readers = ReaderPool(_reader_factory(self))
        self._readers.shut(self._closed_message)
        self._file_key = None  # the child's claims start afresh (_after_fork_in_child)


# In a fork child each open engine is abandoned (EngineCore.abandon_after_fork,
# through engine/forks.py) and its connections kept here, never closed:
# closing a connection inherited from the parent would act on the parent's file.
_ABANDONED: list[tuple[Any, Any]] = []


def _after_fork_in_child() -> None:
    global _OPEN_FILES_LOCK
    _OPEN_FILES_LOCK = threading.Lock()  # a parent thread may have held it
    _OPEN_FILES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _release_claim(key: tuple[int, int] | None) -> None:
    """Give up one claim on the file ``key`` (see ``EngineCore._claim_file``)."""
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
    readers: ReaderPool[Any],
    key: tuple[int, int] | None,
    stop_first: Callable[[], object] | None,
) -> None:
    """Close an engine's connections and release its claim: at :meth:`EngineCore.close`,
    or when the engine is collected without it (this holds no reference to it)."""
    try:
        if stop_first is not None:
            stop_first()
        readers.drain()
        writer.close()
    finally:
        _release_claim(key)
