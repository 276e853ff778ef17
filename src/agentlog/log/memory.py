"""The in-memory backend."""

from __future__ import annotations

import builtins
import threading
from collections import OrderedDict

from ..errors import CheckpointConflictError, SessionExistsError, SessionNotFoundError
from ..events import EncodedBatch, SessionInfo, StoredEvent, decode_payload
from .contract import BaseCheckpointer, metadata_conflict

__all__ = ["MemoryCheckpointer"]


class _MemorySession:
    __slots__ = ("events", "meta", "mtime", "revision")

    def __init__(self, mtime: float, events: list[tuple[float, str, bytes]] | None = None) -> None:
        self.events: list[tuple[float, str, bytes]] = [] if events is None else events
        self.mtime = mtime
        self.meta: bytes | None = None
        self.revision = 0


class MemoryCheckpointer(BaseCheckpointer):
    """A checkpointer in this process's memory: for tests and ephemeral runs.

    Events are kept encoded, so every read returns fresh objects and changing
    an event after appending it (or after reading it) never changes the log.
    Safe to share between threads. Each write changes the log in one step
    (a list or mapping operation done in C), so an interrupt (Ctrl-C, a
    signal handler's exception) leaves it whole: written, or not at all.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Insertion order is activity order: a session that changes moves to
        # the end, so list() is exact even when timestamps tie.
        self._sessions: OrderedDict[str, _MemorySession] = OrderedDict()

    def _add(self, session_id: str, session: _MemorySession) -> _MemorySession:
        """Store a new session, its events included, in one step."""
        session.revision = 1
        self._sessions[session_id] = session
        return session

    def _touch(self, session_id: str, ts: float) -> _MemorySession:
        session = self._sessions.get(session_id)
        if session is None:
            return self._add(session_id, _MemorySession(ts))
        self._sessions.move_to_end(session_id)  # never absent, even for a moment
        session.mtime = ts
        session.revision += 1  # every write to a session is one revision
        return session

    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int:
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            head = 0 if session is None else len(session.events)
            if expected_head is not None and expected_head != head:
                raise CheckpointConflictError(session_id, expected_head, head)
            if not batch:
                return head
            rows = [(ts, kind, data) for kind, data in batch]
            if session is None:
                return len(self._add(session_id, _MemorySession(ts, rows)).events)
            self._touch(session_id, ts).events.extend(rows)  # the whole batch, or none of it
            return len(session.events)

    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]:
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            if session is None:
                return []
            rows = session.events[since_seq : since_seq + limit]
        return [
            StoredEvent(seq, seq - 1, ts, kind, decode_payload(data))
            for seq, (ts, kind, data) in enumerate(rows, since_seq + 1)
        ]

    def _head(self, session_id: str) -> int:
        with self._lock:
            session = self._sessions.get(session_id)
            return 0 if session is None else len(session.events)

    def _list(self) -> builtins.list[SessionInfo]:
        with self._lock:
            return [
                SessionInfo(sid, session.mtime, len(session.events))
                for sid, session in reversed(self._sessions.items())
            ]

    def _delete(self, session_id: str) -> None:
        with self._lock:
            self._check_open()
            self._sessions.pop(session_id, None)

    def _truncate(self, session_id: str, to_seq: int, ts: float) -> int:
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            if session is None:
                return 0
            if to_seq >= len(session.events):
                return len(session.events)
            del self._touch(session_id, ts).events[to_seq:]
            return to_seq

    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int:
        with self._lock:
            self._check_open()
            source = self._sessions.get(session_id)
            if source is None:
                raise SessionNotFoundError(f"no session {session_id!r} to fork")
            if at_seq > len(source.events):
                raise ValueError(
                    f"cannot fork {session_id!r} at {at_seq}: its head is {len(source.events)}"
                )
            if new_session_id in self._sessions:
                raise SessionExistsError(f"session {new_session_id!r} already exists")
            self._add(new_session_id, _MemorySession(ts, source.events[:at_seq]))
            return at_seq

    def _metadata(self, session_id: str) -> tuple[bytes | None, int]:
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            return (None, 0) if session is None else (session.meta, session.revision)

    def _set_metadata(self, session_id: str, data: bytes, expected_revision: int, ts: float) -> int:
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            revision = 0 if session is None else session.revision
            if revision != expected_revision:
                raise metadata_conflict(session_id, expected_revision, revision)
            session = self._touch(session_id, ts)
            session.meta = data
            return session.revision

    def _close(self) -> None:
        with self._lock:
            self._sessions.clear()
