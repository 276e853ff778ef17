"""The in-memory backend: one log of every tenant's sessions, and its Checkpointer face.

The sessions live in a :class:`~agentlog.engine.memory.MemoryLog` (the
in-memory engine), which holds what a SQLite file holds for the session log,
so that the Checkpointer and the in-memory ``SessionStore`` are two faces of
the same data.
:class:`MemoryCheckpointer` is the default-tenant, snapshot-less face
(:meth:`MemoryCheckpointer.on_log` gives one for any tenant);
``InMemoryStorage.checkpointer()`` hands one out beside the stores.
"""

from __future__ import annotations

import builtins

from ..engine.memory import Entry, MemoryLog, MemorySession
from ..engine.schema import DEFAULT_TENANT
from ..errors import CheckpointConflictError, fork_past_head, no_session_to_fork, session_exists
from ..events import (
    AppendKey,
    EncodedBatch,
    RawEvent,
    SessionInfo,
    StoredEvent,
    decode_payload,
)
from .contract import BaseCheckpointer, CommitSignal, PreparedAppend, metadata_conflict

__all__ = ["Entry", "MemoryCheckpointer", "MemoryLog", "MemorySession"]


class MemoryCheckpointer(BaseCheckpointer):
    """A checkpointer in this process's memory: for tests and ephemeral runs.

    Events are kept encoded, so every read returns fresh objects and changing
    an event after appending it (or after reading it) never changes the log.
    Safe to share between threads. Each write changes the log in one step
    (a list or mapping operation done in C), so an interrupt (Ctrl-C, a
    signal handler's exception) leaves it whole: written, or not at all.
    """

    def __init__(self) -> None:
        self._attach(MemoryLog(), DEFAULT_TENANT, owns=True)

    @classmethod
    def on_log(cls, log: MemoryLog, tenant: str = DEFAULT_TENANT) -> MemoryCheckpointer:
        """The Checkpointer face of ``log`` for ``tenant`` (closing it releases nothing).

        :class:`~agentlog.InMemoryStorage` hands this out, so that its
        ``SessionStore`` and the face read and write the same sessions.
        """
        self = cls.__new__(cls)
        self._attach(log, tenant, owns=False)
        return self

    def _attach(self, log: MemoryLog, tenant: str, *, owns: bool) -> None:
        self._log = log
        self._tenant = tenant
        self._owns_log = owns

    @property
    def tenant(self) -> str:
        """The tenant whose sessions this checkpointer reads and writes."""
        return self._tenant

    @property
    def commits(self) -> CommitSignal:
        """The signal every face of this log raises after each write (made on
        first use): a follower on one wakes at once for a write through any."""
        return self._log.commits

    def _notify_commit(self) -> None:
        """Wake the followers of every face of this log, if any, after a write."""
        self._log.notify()

    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int:
        log = self._log
        with log.lock:
            self._check_open()
            session = log.get(self._tenant, session_id)
            head = 0 if session is None else session.head
            if expected_head is not None and expected_head != head:
                raise CheckpointConflictError(session_id, expected_head, head)
            if not batch:
                return head
            rows: list[Entry] = [(ts, kind, data, None) for kind, data in batch]
            if session is None:
                return log.add(MemorySession(self._tenant, session_id, ts, rows)).head
            log.touch(session, ts).journal.extend(rows)  # the whole batch, or none of it
            return session.head

    def _append_keyed(self, append: PreparedAppend, ts: float, key: AppendKey) -> int:
        session_id, batch, expected_head = append
        log = self._log
        with log.lock:  # reentrant: the look-up and the append are one step
            self._check_open()
            session = log.get(self._tenant, session_id)
            found = None if session is None else session.keys.get(key.name)
            if found is not None:
                return key.replay(session_id, *found)
            head = self._append(session_id, batch, expected_head, ts)
            written = log.get(self._tenant, session_id)
            assert written is not None
            written.keys[key.name] = (key.digest, head)
            return head

    def _journal(
        self, session_id: str, since_seq: int, limit: int
    ) -> tuple[int, builtins.list[Entry]]:
        """The seq before a page, and the page's stored ``(ts, type, json, …)`` entries."""
        with self._log.lock:
            self._check_open()
            session = self._log.get(self._tenant, session_id)
            if session is None:
                return since_seq, []
            # From the first retained event on: a page that starts past
            # since_seq + 1 tells the caller that retention pruned the rest.
            start = max(since_seq, session.dropped)
            offset = start - session.dropped
            return start, session.journal[offset : offset + limit]

    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]:
        start, rows = self._journal(session_id, since_seq, limit)
        return [
            StoredEvent(seq, seq - 1, ts, kind, decode_payload(data))
            for seq, (ts, kind, data, _) in enumerate(rows, start + 1)
        ]

    def _scan_json(self, session_id: str, since_seq: int, limit: int) -> builtins.list[RawEvent]:
        # The bytes this process encoded and kept: nothing else can change them.
        start, rows = self._journal(session_id, since_seq, limit)
        return [
            RawEvent(seq, seq - 1, ts, kind, data)
            for seq, (ts, kind, data, _) in enumerate(rows, start + 1)
        ]

    def _head(self, session_id: str) -> int:
        with self._log.lock:
            session = self._log.get(self._tenant, session_id)
            return 0 if session is None else session.head

    def _first_retained(self, session_id: str) -> int:
        with self._log.lock:
            session = self._log.get(self._tenant, session_id)
            return 1 if session is None else session.dropped + 1

    def _list(self) -> builtins.list[SessionInfo]:
        with self._log.lock:
            return [
                SessionInfo(session.name, session.mtime, session.head)
                for session in reversed(self._log.sessions(self._tenant))
            ]

    def _delete(self, session_id: str) -> None:
        with self._log.lock:
            self._check_open()
            self._log.remove(self._tenant, session_id)

    def _truncate(self, session_id: str, to_seq: int, ts: float) -> int:
        log = self._log
        with log.lock:
            self._check_open()
            session = log.get(self._tenant, session_id)
            if session is None:
                return 0
            if to_seq >= session.head:
                return session.head
            session.check_retained("truncate", to_seq)
            if any(through > to_seq for through in session.snapshots):
                # A snapshot of events that are gone would resurrect them on
                # load. Dropped first: interrupted here, the events all stay.
                session.snapshots = {t: s for t, s in session.snapshots.items() if t <= to_seq}
            session.forget_keys_after(to_seq)
            del log.touch(session, ts).journal[to_seq - session.dropped :]
            return to_seq

    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int:
        log = self._log
        with log.lock:
            self._check_open()
            source = log.get(self._tenant, session_id)
            if source is None:
                raise no_session_to_fork(session_id)
            if at_seq > source.head:
                raise fork_past_head(session_id, at_seq, source.head)
            source.check_retained("fork", at_seq)
            if log.get(self._tenant, new_session_id) is not None:
                raise session_exists(new_session_id)
            # The copy is pruned as its source is: the same retained events,
            # the snapshots that cover them.
            copy = MemorySession(
                self._tenant, new_session_id, ts, source.journal[: at_seq - source.dropped]
            )
            copy.dropped = source.dropped
            copy.snapshots = {t: s for t, s in source.snapshots.items() if t <= at_seq}
            copy.keys = {k: v for k, v in source.keys.items() if v[1] <= at_seq}
            copy.origin = (session_id, at_seq)
            log.add(copy)
            return at_seq

    def _lineage(self, session_id: str) -> tuple[str, int] | None:
        with self._log.lock:
            session = self._log.get(self._tenant, session_id)
            return None if session is None else session.origin

    def _forks(self, session_id: str) -> builtins.list[tuple[str, int]]:
        with self._log.lock:
            return self._log.forks(self._tenant, session_id)

    def _metadata(self, session_id: str) -> tuple[bytes | None, int]:
        with self._log.lock:
            self._check_open()
            session = self._log.get(self._tenant, session_id)
            return (None, 0) if session is None else (session.meta, session.revision)

    def _set_metadata(self, session_id: str, data: bytes, expected_revision: int, ts: float) -> int:
        log = self._log
        with log.lock:
            self._check_open()
            session = log.get(self._tenant, session_id)
            revision = 0 if session is None else session.revision
            if revision != expected_revision:
                raise metadata_conflict(session_id, expected_revision, revision)
            if session is None:
                log.add(MemorySession(self._tenant, session_id, ts, meta=data))
                return 1
            log.touch(session, ts).meta = data
            return session.revision

    def _close(self) -> None:
        if self._owns_log:
            with self._log.lock:
                self._log.clear()
