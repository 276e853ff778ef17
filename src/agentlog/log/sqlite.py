"""The SQLite backend: the embedded default, for many processes on one host."""

from __future__ import annotations

import builtins
import contextlib
import os
import time
from collections.abc import Sequence
from typing import Any

from ..activity import ActivityCursor
from ..engine import (
    DEFAULT_WAL_SIZE_LIMIT,
    AppendCompletions,
    Engine,
    open_database,
    open_engine,
    release_engine,
)
from ..engine.commits import engine_commits
from ..engine.schema import DEFAULT_TENANT
from ..errors import (
    CorruptDatabaseError,
    StorageDataError,
)
from ..events import (
    AppendKey,
    EncodedBatch,
    RawEvent,
    SessionInfo,
    SessionListing,
    StoredEvent,
    check_identifier,
    check_seq,
    check_session_id,
    idle_cutoff,
)
from ..files import DEFAULT_FILE_MODE, check_file_mode
from ..integrity import ChainReport, DamagedEvent, Progress, describe_damage
from .contract import (
    BaseCheckpointer,
    CommitSignal,
    PreparedAppend,
    listings,
)

__all__ = ["SqliteCheckpointer"]


class SqliteCheckpointer(BaseCheckpointer):
    """A checkpointer in one SQLite file, shared by the processes of one host.

    * The file is switched to WAL on open: readers never block the writer and
      see the last committed state.
    * Appends, truncates, deletes and forks are one ``BEGIN IMMEDIATE``
      transaction each: a competing writer waits up to ``busy_timeout_ms``
      (clamped at 0) for the write lock instead of failing, then reads the
      fresh head, so a stale ``expected_head`` is a clean
      :class:`CheckpointConflictError`. Seq is allocated inside that
      transaction. A writer still locked out after the timeout gets
      :class:`StorageUnavailableError`.
    * ``synchronous="normal"`` survives a crash of the process (safe under
      WAL); ``"full"`` also survives a crash of the operating system, at the
      cost of an fsync per commit.
    * The file carries a schema version (``PRAGMA user_version``) and an
      application id. A file written by a newer, incompatible version — or by
      another application — is refused with :class:`SchemaVersionError`
      before anything in it is changed.
    * ``":memory:"`` opens a private database that lives as long as the
      checkpointer.
    * ``engine`` picks the engine: ``"c"`` (the compiled one, the default when
      it is built) or ``"python"`` (the standard library's ``sqlite3``). Both
      read and write the same file format.
    * ``read_only=True`` opens an existing agentlog database for reading
      only: nothing is created, migrated or written, and every write raises
      :class:`StorageUnavailableError`. A file of an older schema version is
      read as it is. ``create=False`` opens an existing agentlog database for
      reading and writing but never creates one. With either, a missing file
      raises :class:`StorageNotFoundError` and a file that holds no agentlog
      database (an empty one included) :class:`SchemaVersionError`.
    * ``tenant`` is the tenant whose sessions this checkpointer sees
      (:data:`DEFAULT_TENANT` unless told otherwise; the stores write any).
    * ``file_mode`` is the mode of a file it creates, and of its ``-wal`` and
      ``-shm``: the owner's only (``0o600``) unless told otherwise.
    * Every event is stored with the CRC-32 of its payload and verified on
      every read (see :mod:`agentlog.integrity`). ``hash_chain=True`` makes
      the file also keep a hash chain per session from now on, for every
      later writer (it is a setting of the file); :meth:`verify` checks it.

    One object is safe to share between threads. Every checkpointer this
    process opens on one file with the same options shares one engine: one
    writer connection and group-commit queue, one reader pool (see
    :func:`~agentlog.engine.open_shared_engine`); closing one gives up its
    hold, and the last closes the file.
    """

    def __init__(
        self,
        file: str | os.PathLike[str],
        synchronous: str = "normal",
        busy_timeout_ms: int = 5000,
        integrity_check_on_open: bool = False,
        engine: str | None = None,
        *,
        read_only: bool = False,
        create: bool = True,
        tenant: str = DEFAULT_TENANT,
        wal_size_limit: int = DEFAULT_WAL_SIZE_LIMIT,
        file_mode: int = DEFAULT_FILE_MODE,
        hash_chain: bool = False,
    ) -> None:
        tenant = check_identifier(tenant, "tenant", StorageDataError)
        check_file_mode(file_mode)
        self._engine = open_database(
            file,
            read_only=read_only,
            create=create,
            engine=engine,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            integrity_check_on_open=integrity_check_on_open,
            wal_size_limit=wal_size_limit,
            file_mode=file_mode,
            hash_chain=hash_chain and not read_only,
            holder=self,
        )
        self._commits = engine_commits(self._engine)
        self.file = self._engine.path
        self._tenant = tenant

    @classmethod
    def on_engine(
        cls, engine: Engine, tenant: str = DEFAULT_TENANT, *, keep: object = None
    ) -> SqliteCheckpointer:
        """The Checkpointer face of an already open database (it is not closed with it).

        :class:`~agentlog.SqliteStorage` hands this out, so both faces share one
        engine and one writer connection; ``keep`` is kept alive as long as
        the face (the storage's hold on a shared engine, so that the engine
        stays the face's while it is used).
        """
        self = cls.__new__(cls)
        self._keep = keep
        self._engine = engine
        self._commits = engine_commits(engine)
        self.file = engine.path
        self._tenant = tenant
        self._owns_engine = False
        return self

    _owns_engine = True
    _keep: object = None

    def _notify_commit(self) -> None:
        self._commits.notify()

    @property
    def commits(self) -> CommitSignal:
        """The signal every checkpointer on this engine raises after each write
        (made on first use): with the engine shared (one per file per
        process), a follower on any of them wakes at once for a write through
        any other."""
        return self._commits.get()

    # Properties, alike in shape on every checkpointer (the async twins' too):
    # read-only views of what it was opened with, one small property each.
    @property
    def tenant(self) -> str:
        """The tenant whose sessions this checkpointer reads and writes."""
        return self._tenant

    @property
    def read_only(self) -> bool:
        """Whether it was opened ``read_only`` (every write raises)."""
        return self._engine.read_only

    def list_all_tenants(self) -> builtins.list[tuple[str, SessionInfo]]:
        """``(tenant, SessionInfo)`` for every session of every tenant in the
        file, most recently active first (:meth:`list` shows this tenant's)."""
        self._check_open()
        return [
            (tenant, SessionInfo(name, mtime, head))
            for tenant, name, mtime, head in self._engine.list_all_sessions()
        ]

    def check_integrity(
        self, deep: bool = False, progress: Progress | None = None
    ) -> tuple[bool, str]:
        """Run ``PRAGMA quick_check``, then check the log's shape: every session
        holds its events without a gap from its first stored seq to its head,
        and one whose first events were pruned has a snapshot covering them.
        ``(True, "ok")``, or ``(False, detail)``.

        ``deep=True`` also reads every event of every session of every tenant
        and checks its payload against its checksum (and that it decodes);
        ``detail`` then holds one line per damaged event (see
        :meth:`damaged_events`); ``progress``, if given, is told ``(sessions
        checked, sessions in all)`` as it goes.
        """
        self._check_open()
        ok, detail = self._engine.check_integrity()
        if not deep:
            return ok, detail
        lines = [] if ok else [detail]
        try:
            lines += describe_damage(self._engine.damaged_events(progress))
        except CorruptDatabaseError as exc:
            lines.append(f"cannot read every event: {exc}")
        return (not lines, "\n".join(lines) or "ok")

    def damaged_events(self, progress: Progress | None = None) -> builtins.list[DamagedEvent]:
        """Every damaged event of the file (every tenant), in session order: its
        payload fails its checksum or does not decode, or its seq is missing."""
        self._check_open()
        return self._engine.damaged_events(progress)

    @property
    def hash_chain(self) -> bool:
        """Whether the file keeps a hash chain per session (see :meth:`verify`)."""
        return self._engine.hash_chain

    def verify(self, session_id: str) -> ChainReport:
        """Recompute ``session_id``'s hash chain from its stored events and compare
        every stored link with it.

        The report's ``digest`` is the head digest (hex): equal to one kept
        elsewhere, it proves that the session is what it was when that digest
        was taken — not edited, reordered or cut. ``problem`` names the first
        event whose stored link does not match, or that has none (written
        while the file kept no chain). An unknown session raises
        :class:`SessionNotFoundError`.
        """
        self._check_open()
        return self._engine.verify_chain(self._tenant, check_session_id(session_id))

    # -- operations ----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """What an operator looks at first, for the whole file (every tenant).

        ``sessions``, ``tenants``, ``events``; ``file_bytes``, ``wal_bytes``
        (and ``wal_size_limit``), ``pages``, ``free_pages`` and ``free_bytes``
        (space that deleted, truncated and pruned sessions left, reused by
        later writes or given back by :meth:`vacuum`), ``auto_vacuum``
        (``"incremental"`` when :meth:`vacuum` can shrink the file);
        ``largest_sessions`` (the ten with the highest heads); ``path``,
        ``engine``, ``schema_version``. ``events`` counts the stored events
        (retention's pruned ones are not).
        """
        self._check_open()
        return self._engine.stats()

    def figures(self) -> dict[str, int]:
        """Cheap figures for monitoring (what agentlog.telemetry's gauges read),
        without a transaction: ``wal_bytes``, ``wal_size_limit``,
        ``wal_bounds_hit`` and ``wal_truncations`` since this open,
        ``readers_opened`` (reads that found no idle connection and opened
        one) and ``readers_idle``."""
        self._check_open()
        return self._engine.figures()

    def backup(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Copy the whole file to the new file ``path``, consistent while writers
        go on, then verify the copy; return its :meth:`stats`.

        The copy is one committed state (SQLite's ``VACUUM INTO``, compacted:
        free pages are left out). Verified: opened read-only, it passes
        ``quick_check`` and is an agentlog database of this schema. A copy that
        fails is removed and :class:`CorruptDatabaseError` raised.
        """
        self._check_open()
        target = os.fspath(path)
        self._engine.backup_to(target)
        try:
            copy = open_engine(target, engine=self._engine.name, read_only=True)
            try:
                ok, detail = copy.check_integrity()
                if not ok or copy.schema_version != self._engine.schema_version:
                    raise CorruptDatabaseError(f"the backup {target!r} failed its check: {detail}")
                return copy.stats()
            finally:
                copy.close()
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise

    def checkpoint_wal(self) -> bool:
        """Checkpoint the write-ahead log into the file and truncate it, now.

        It waits up to 100 ms for other connections' transactions to end:
        False if one was still in the way (nothing is lost; a later commit
        tries again). Appends keep it within ``wal_size_limit`` on their own.
        """
        self._check_open()
        return self._engine.checkpoint_wal()

    def vacuum(self, max_pages: int | None = None) -> dict[str, Any]:
        """Give the file's free pages back to the file system: the file shrinks.

        Free pages (left by deleted, truncated and pruned sessions) are
        moved to the end and cut off, 256 pages (1 MiB at the default page
        size) per write transaction, so writers in other processes wait for
        one step at a time; at most ``max_pages`` in all (``None``: every
        one). The file is truncated when the WAL is checkpointed, which this
        does at the end. Works on a file with incremental ``auto_vacuum`` —
        every file this version creates, and every :meth:`backup` copy; on
        an older file nothing changes (its free pages are reused by later
        writes). Returns ``auto_vacuum`` ("incremental" or "none"),
        ``pages_returned``, ``free_pages`` (left), ``file_bytes_before`` and
        ``file_bytes``.
        """
        self._check_open()
        if max_pages is not None:
            max_pages = check_seq("max_pages", max_pages)
        return self._engine.vacuum(max_pages)

    def delete_idle(self, idle_for: float) -> builtins.list[str]:
        """Retention: delete this tenant's sessions not changed for ``idle_for``
        seconds; return their ids, oldest first.

        Safe while other processes write: a session appended to after the
        cut-off is kept (each batch of deletes looks at the time inside its
        own transaction). Their space is reused by later writes.
        """
        self._check_open()
        deleted = self._engine.delete_idle(self._tenant, idle_cutoff(idle_for))
        if deleted:
            self._notify_commit()
        return deleted

    @property
    def engine(self) -> str:
        """The engine this checkpointer runs on: ``"c"`` or ``"python"``."""
        return self._engine.name

    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int:
        return self._engine.append(self._tenant, session_id, expected_head, ts, batch)

    def _append_keyed(self, append: PreparedAppend, ts: float, key: AppendKey) -> int:
        session_id, batch, expected_head = append
        return self._engine.append_keyed(self._tenant, session_id, expected_head, ts, batch, key)

    def _append_many(
        self, appends: Sequence[PreparedAppend], ts: float
    ) -> builtins.list[int | Exception]:
        requests = [(session_id, expected, batch) for session_id, batch, expected in appends]
        return self._engine.append_many(self._tenant, requests, ts)

    def _try_append_many(
        self, appends: Sequence[PreparedAppend], ts: float
    ) -> builtins.list[int | Exception] | None:
        requests = [(session_id, expected, batch) for session_id, batch, expected in appends]
        return self._engine.try_append_many(self._tenant, requests, ts)

    def _append_completions(self) -> AppendCompletions | None:
        """The engine's channel for an event loop's appends to its writer thread
        (the C engine has one; see :meth:`WriterPort.queue_prepared`)."""
        self._check_open()
        return self._engine.append_completions()

    def _queue_prepared(self, prepared: PreparedAppend, completions: AppendCompletions) -> object:
        """Queue a prepared, non-empty append for the engine's writer thread
        (see :meth:`WriterPort.queue_prepared`)."""
        self._check_open()
        session_id, batch, expected = prepared
        return self._engine.queue_append(
            self._tenant, session_id, expected, time.time(), batch, completions
        )

    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]:
        return self._engine.scan(self._tenant, session_id, since_seq, limit)

    def _scan_json(self, session_id: str, since_seq: int, limit: int) -> builtins.list[RawEvent]:
        return self._engine.scan_json(self._tenant, session_id, since_seq, limit)

    def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        # The base class's method, one call shorter: head() is a hot path.
        if self._closed:
            self._check_open()
        return self._engine.head_checked(self._tenant, session_id)

    def _head(self, session_id: str) -> int:
        return self._engine.head(self._tenant, session_id)

    def _first_retained(self, session_id: str) -> int:
        return self._engine.first_retained(self._tenant, session_id)

    def _list(self) -> builtins.list[SessionInfo]:
        return [SessionInfo(*row) for row in self._engine.list_sessions(self._tenant)]

    def _list_metadata(self) -> builtins.list[SessionListing]:
        return listings(self._engine.list_sessions_metadata(self._tenant))

    def _list_page(self, limit: int, after: ActivityCursor | None) -> builtins.list[SessionListing]:
        return listings(self._engine.list_sessions_page(self._tenant, limit, after))

    def _metadata(self, session_id: str) -> tuple[bytes | None, int]:
        return self._engine.session_metadata(self._tenant, session_id)

    def _set_metadata(self, session_id: str, data: bytes, expected_revision: int, ts: float) -> int:
        return self._engine.set_session_metadata(
            self._tenant, session_id, data, expected_revision, ts
        )

    def _delete(self, session_id: str) -> None:
        self._engine.delete(self._tenant, session_id)

    def _truncate(self, session_id: str, to_seq: int, ts: float) -> int:
        return self._engine.truncate(self._tenant, session_id, to_seq, ts)

    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int:
        return self._engine.copy_prefix(self._tenant, session_id, at_seq, new_session_id, ts)

    def _lineage(self, session_id: str) -> tuple[str, int] | None:
        return self._engine.fork_origin(self._tenant, session_id)

    def _forks(self, session_id: str) -> builtins.list[tuple[str, int]]:
        return self._engine.forks_of(self._tenant, session_id)

    def _change_token(self, session_id: str) -> tuple[int, int]:
        # Any commit to the file, from any connection or process.
        return self._engine.data_version()

    def _close(self) -> None:
        if self._owns_engine:
            release_engine(self._engine, self)
