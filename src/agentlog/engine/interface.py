"""The engine interface: everything the log, the stores, migrate and the CLI
may ask of a SQLite engine, typed.

Two engines implement it — :class:`~agentlog.engine.pure.PyEngine` on the
standard library's ``sqlite3`` and ``CEngine`` on the SQLite C API — and
nothing above this layer names either, reaches into their underscores or
issues SQL of its own: statements come from :mod:`agentlog.engine.sql`.

The signatures here stand again on :class:`~agentlog.engine.log_ops.LogOperations`,
the base both twins inherit: the layers above type against these protocols
(they name no implementation), and a Protocol cannot lend its signatures to
a class. The docstrings here are the reference; the implementations' add how.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..events import AppendKey, EncodedBatch, RawEvent, StoredEvent
from ..integrity import ChainReport, DamagedEvent, Progress

if TYPE_CHECKING:
    from .connections import EngineOptions

__all__ = [
    "AppendCompletions",
    "Connection",
    "Database",
    "Engine",
    "EngineFactory",
    "LogEngine",
    "MaintenanceEngine",
    "TransactionEngine",
]

T = TypeVar("T")


class Connection(Protocol):
    """One SQLite connection, as handed to the work of a transaction."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; return all its rows."""
        ...


class AppendCompletions(Protocol):
    """One event loop's channel for the appends it queues for the engine's
    writer thread (:meth:`Engine.queue_append`): a file descriptor that
    becomes readable once per group written, and the appends not yet handed
    back. Used on the loop's thread only."""

    @property
    def pending(self) -> int:
        """How many queued appends it has not handed back yet."""
        ...

    def fileno(self) -> int:
        """Readable once queued appends have finished (for ``loop.add_reader``)."""
        ...

    def drain(self) -> None:
        """Consume the descriptor's readiness: once per wake-up, before
        :meth:`finished` (then anything finished after it wakes the loop again)."""
        ...

    def finished(self) -> list[tuple[object, int | Exception]]:
        """``(handle, outcome)`` of each queued append finished and not yet
        released: its new head, or the exception that refused or failed it."""
        ...

    def release(self, queued: object) -> None:
        """Forget a finished append, its outcome handed on."""
        ...

    def withdraw(self, queued: object) -> bool:
        """Take a queued append back before the writer has taken it: True,
        and it is never written; False once it is written or refused whole."""
        ...

    def close(self) -> bool:
        """Release the descriptor once no queued append is left unfinished;
        whether it did (if not, the engine releases it once its writer
        thread has ended, or a later call does)."""
        ...


class Database(Protocol):
    """An open agentlog database: what every role of an engine tells about it."""

    # Properties, alike in shape: a protocol's plain attribute would ask every
    # engine for a settable one.
    @property
    def name(self) -> str:
        """``"c"`` or ``"python"``."""
        ...

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        ...

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        ...

    @property
    def read_only(self) -> bool:
        """Opened with ``read_only=True``: nothing can be written, not even the schema."""
        ...

    @property
    def schema_version(self) -> int:
        """The file's schema version (older than current only when read-only)."""
        ...

    @property
    def hash_chain(self) -> bool:
        """Whether appends link each event into its session's hash chain (the
        file keeps one: asked for at this open or an earlier one)."""
        ...


# The role protocols spell their implementations' signatures (log_ops.py, connections.py).
class LogEngine(Database, Protocol):
    """The session log's operations on bytes: what the Checkpointer face uses."""

    def append(
        self, tenant: str, name: str, expected_head: int | None, ts: float, batch: EncodedBatch
    ) -> int:
        """Append encoded ``(type, json)`` events atomically; return the new head.

        A stale ``expected_head`` raises ``CheckpointConflictError`` and writes
        nothing. An empty batch writes nothing and returns the head.
        """
        ...

    def append_keyed(
        self,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
        key: AppendKey,
    ) -> int:
        """Append a non-empty batch under ``key`` in one write with the key's
        look-up: a key the session holds writes nothing and returns
        ``key.replay`` of what it stored."""
        ...

    def find_append_key(self, tenant: str, name: str, key: str) -> tuple[bytes, int] | None:
        """``(digest, head)`` stored under the session's ``key``, or None."""
        ...

    def append_many(
        self, tenant: str, requests: Sequence[tuple[str, int | None, EncodedBatch]], ts: float
    ) -> list[int | Exception]:
        """Append several ``(name, expected_head, batch)`` in one write transaction.

        Each is atomic on its own: the result holds its new head, or the
        ``CheckpointConflictError`` / ``ValueError`` that refused it alone.
        """
        ...

    def try_append_many(
        self, tenant: str, requests: Sequence[tuple[str, int | None, EncodedBatch]], ts: float
    ) -> list[int | Exception] | None:
        """:meth:`append_many`, only if it needs no waiting — for the write lock
        or (``synchronous="full"``) the disk; else None, and nothing written."""
        ...

    def append_completions(self) -> AppendCompletions | None:
        """A channel for an event loop's appends to the writer thread, or None
        where this engine has none to queue them to (then the loop hands them
        to a thread of its own)."""
        ...

    def queue_append(
        self,
        tenant: str,
        name: str,
        expected_head: int | None,
        ts: float,
        batch: EncodedBatch,
        completions: AppendCompletions,
    ) -> object:
        """Queue a non-empty batch for the writer thread and return its handle
        at once. ``completions.finished()`` hands back ``(handle, outcome)``
        after the commit that holds it (or once it is refused), as
        :meth:`append` would have returned or raised it."""
        ...

    def scan(self, tenant: str, name: str, since_seq: int, limit: int) -> list[StoredEvent]:
        """One page of events after ``since_seq``, at most ``limit`` of them."""
        ...

    def scan_json(self, tenant: str, name: str, since_seq: int, limit: int) -> list[RawEvent]:
        """:meth:`scan`, each event's JSON as stored (checked, not decoded)."""
        ...

    def head(self, tenant: str, name: str) -> int:
        """The session's head; 0 when it is empty or unknown."""
        ...

    def head_checked(self, tenant: str, name: object) -> int:
        """``head(tenant, check_session_id(name))`` in one call: the id refused
        with :class:`~agentlog.errors.InvalidSessionIdError` as that would."""
        ...

    def list_sessions(self, tenant: str) -> list[tuple[str, float, int]]:
        """``(name, mtime, head)`` of every session, most recently active first."""
        ...

    def list_sessions_metadata(
        self, tenant: str
    ) -> list[tuple[str, float, int, bytes | None, int]]:
        """``(name, mtime, head, metadata json | None, revision)`` of every session,
        most recently active first."""
        ...

    def list_sessions_page(
        self, tenant: str, limit: int, after: tuple[float, str] | None
    ) -> list[tuple[str, float, int, bytes | None, int]]:
        """At most ``limit`` rows of :meth:`list_sessions_metadata`'s shape,
        ``(activity second, name)`` descending, after ``after`` (None: from the start)."""
        ...

    def session_metadata(self, tenant: str, name: str) -> tuple[bytes | None, int]:
        """``(metadata json | None, revision)``; ``(None, 0)`` for an unknown session."""
        ...

    def set_session_metadata(
        self, tenant: str, name: str, data: bytes, expected_revision: int, ts: float
    ) -> int:
        """Compare-and-set the metadata on the session's revision; return the new one."""
        ...

    def list_all_sessions(self) -> list[tuple[str, str, float, int]]:
        """``(tenant, name, mtime, head)`` of every session of every tenant, most
        recently active first."""
        ...

    def delete(self, tenant: str, name: str) -> None:
        """Remove the session with its events and snapshots; nothing if it is unknown."""
        ...

    def truncate(self, tenant: str, name: str, to_seq: int, ts: float) -> int:
        """Remove events after ``to_seq``; return the new head."""
        ...

    def copy_prefix(self, tenant: str, name: str, at_seq: int, new_name: str, ts: float) -> int:
        """Create ``new_name`` holding events 1..``at_seq`` of ``name``; return its head."""
        ...

    def fork_origin(self, tenant: str, name: str) -> tuple[str, int] | None:
        """``(source name, seq)`` the session was forked from, or None."""
        ...

    def forks_of(self, tenant: str, name: str) -> list[tuple[str, int]]:
        """``(name, seq)`` of the sessions forked from ``name``."""
        ...

    def first_retained(self, tenant: str, name: str) -> int:
        """The seq of the session's first stored event: 1 unless retention pruned
        the ones before it (``head + 1`` when none is left; 1 when unknown)."""
        ...

    def data_version(self) -> tuple[int, int]:
        """A cheap token that changes whenever any connection (any process) commits.

        Compare two tokens for equality only: equal means nothing was
        committed in between (a different one may be a false alarm).
        """
        ...


class TransactionEngine(Database, Protocol):
    """Named write transactions and reads, with the row primitives of the log's
    tables: what the stores (and :mod:`.store_rows`) use."""

    def write(self, context: str, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction; roll back if it raises.

        ``context`` names the operation in the error a driver failure becomes.
        """
        ...

    def read(self, context: str, work: Callable[[Connection], T], *, snapshot: bool = False) -> T:
        """Run ``work`` on a read connection (inside one read transaction with ``snapshot``)."""
        ...

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
        changed at ``mtime`` (default: ``ts``); return its sid."""
        ...

    def insert_events(
        self,
        conn: Connection,
        sid: int,
        after_seq: int,
        events: Sequence[tuple[float, str, bytes, str | None]],
    ) -> None:
        """Inside a write: insert ``(ts, type, json, item_id)`` events at ``after_seq + 1``…."""
        ...

    def delete_session(self, conn: Connection, sid: int) -> None:
        """Inside a write: remove session ``sid`` with its events and snapshots."""
        ...

    def first_seq(self, conn: Connection, sid: int, head: int) -> int:
        """Inside a transaction: the seq of session ``sid``'s first stored event;
        ``head + 1`` when it holds none."""
        ...


class MaintenanceEngine(Database, Protocol):
    """An operator's operations on the file: checks, backup, stats, vacuum,
    idle-session deletion, the WAL checkpoint."""

    def check_integrity(self) -> tuple[bool, str]:
        """``PRAGMA quick_check``, then the log's shape (no gaps; a pruned start
        covered by a snapshot): ``(True, "ok")``, or ``(False, detail)``."""
        ...

    def damaged_events(self, progress: Progress | None = None) -> list[DamagedEvent]:
        """Every stored event of every session whose payload fails its checksum or
        does not decode, and every missing seq (a deep check)."""
        ...

    def verify_chain(self, tenant: str, name: str) -> ChainReport:
        """Recompute a session's hash chain and compare it with the stored links
        (:class:`SessionNotFoundError` for an unknown session)."""
        ...

    def backup_to(self, path: str) -> None:
        """Write a consistent copy of the whole database to the new file ``path``,
        while writers (in this process and others) go on."""
        ...

    def checkpoint_wal(self) -> bool:
        """Checkpoint the write-ahead log and truncate it now, waiting briefly for
        other transactions to end: True if done, False if one was in the way."""
        ...

    def stats(self) -> dict[str, Any]:
        """Sizes (file, WAL, free pages), counts (sessions, tenants, events) and
        the largest sessions."""
        ...

    def figures(self) -> dict[str, int]:
        """Cheap monitoring figures (the WAL's size and bound hits, the reader
        pool's misses), read without a transaction."""
        ...

    def vacuum(self, max_pages: int | None = None) -> dict[str, Any]:
        """Give free pages back to the file system in bounded steps (a file with
        incremental ``auto_vacuum``); what it did."""
        ...

    def delete_idle(self, tenant: str, before: float, batch: int = 100) -> list[str]:
        """Delete ``tenant``'s sessions last changed before ``before`` (epoch
        seconds), a batch per transaction; return their names."""
        ...


class Engine(LogEngine, TransactionEngine, MaintenanceEngine, Protocol):
    """An open agentlog database: every role, and its sharing and closing.

    Callers type against the role they use (:class:`LogEngine`,
    :class:`TransactionEngine`, :class:`MaintenanceEngine`); what opens and
    shares engines deals in the whole.
    """

    def join(self, *, hash_chain: bool = False) -> None:
        """Another holder starts using this open engine: take up the file's
        settings (a hash chain turned on since), keep one if ``hash_chain``."""
        ...

    def close(self) -> None:
        """Close every connection; idempotent."""
        ...


class EngineFactory(Protocol):
    """An engine class: opens a database."""

    name: str

    def __call__(self, path: str, *, options: EngineOptions = ...) -> Engine:
        """Open (creating and migrating forward, unless ``options.read_only``) ``path``."""
        ...

    def sqlite_info(self) -> dict[str, Any]:
        """Version, source id and compile options of the SQLite it drives."""
        ...
