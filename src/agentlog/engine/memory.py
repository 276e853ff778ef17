"""The in-memory engine: one log of every tenant's sessions, in this process's memory.

A :class:`MemoryLog` holds what a SQLite file holds for the session log —
per session its row (head, revision, metadata, times), its events with their
item ids, and its snapshots — so that, as in the file, the Checkpointer
(:class:`~agentlog.log.memory.MemoryCheckpointer`) and the in-memory
``SessionStore`` are two faces of the same data. It sits in the engine, below
both faces, as the SQLite file does.
"""

from __future__ import annotations

import builtins
import threading
from collections import OrderedDict

from ..events import check_retained
from .commits import CommitSignal, EngineCommits

__all__ = ["Entry", "MemoryLog", "MemorySession"]

#: An event as kept: ``(ts, type, json, item_id)`` (the item id None when the
#: Checkpointer face wrote it).
Entry = tuple[float, str, bytes, "str | None"]


class MemorySession:
    """One session of a :class:`MemoryLog`: its row, its events and its snapshots.

    As in the file, a session that a write creates (an append, a fork, a
    metadata change) starts at revision 1; ``SessionStore.create`` makes one
    at revision 0.
    """

    __slots__ = (
        "created",
        "dropped",
        "journal",
        "keys",
        "meta",
        "mtime",
        "name",
        "origin",
        "revision",
        "snapshots",
        "tenant",
    )

    def __init__(
        self,
        tenant: str,
        name: str,
        ts: float,
        journal: list[Entry] | None = None,
        *,
        revision: int = 1,
        meta: bytes | None = None,
    ) -> None:
        self.tenant = tenant
        self.name = name
        self.created = self.mtime = ts
        #: ``journal[i]`` is the event at seq ``dropped + i + 1`` (retention drops a prefix).
        self.journal: list[Entry] = [] if journal is None else journal
        self.dropped = 0
        #: ``through_sequence -> (state json, created)``.
        self.snapshots: dict[int, tuple[bytes, float]] = {}
        self.meta = meta
        self.revision = revision
        #: The append keys it holds: ``key -> (digest, head after that append)``.
        self.keys: dict[str, tuple[bytes, int]] = {}
        #: ``(source name, seq)`` when a fork made it (its lineage), else None.
        self.origin: tuple[str, int] | None = None

    def forget_keys_after(self, seq: int) -> None:
        """A truncate to ``seq``: forget the keys of the appends it undoes."""
        if self.keys:
            self.keys = {k: v for k, v in self.keys.items() if v[1] <= seq}

    @property
    def head(self) -> int:
        """The seq of the last event (0 when there is none)."""
        return self.dropped + len(self.journal)

    def check_retained(self, what: str, point: int) -> None:
        """Refuse to ``what`` (truncate, fork) back to ``point`` below what
        retention left (see :func:`~agentlog.events.check_retained`)."""
        oldest = min(self.snapshots) if self.snapshots else None
        check_retained(self.name, what, point, self.dropped + 1, oldest)


class MemoryLog:
    """Every tenant's sessions in this process's memory, under one lock.

    The faces (:class:`MemoryCheckpointer`, the in-memory ``SessionStore``)
    read and write the sessions holding :attr:`lock`, and call
    :meth:`notify` after a write so that the followers of every face wake.
    Per tenant, insertion order is activity order: a session that changes
    moves to the end, so a listing is exact even when timestamps tie.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._tenants: dict[str, OrderedDict[str, MemorySession]] = {}
        self._commits = EngineCommits()

    def get(self, tenant: str, name: str) -> MemorySession | None:
        """The session, or None."""
        sessions = self._tenants.get(tenant)
        return None if sessions is None else sessions.get(name)

    def add(self, session: MemorySession) -> MemorySession:
        """Store a new session, its events included, in one step."""
        self._tenants.setdefault(session.tenant, OrderedDict())[session.name] = session
        return session

    def touch(self, session: MemorySession, ts: float) -> MemorySession:
        """A write to ``session`` at ``ts``: one revision, and the most recent activity."""
        self._tenants[session.tenant].move_to_end(session.name)  # never absent, even for a moment
        session.mtime = ts
        session.revision += 1
        return session

    def remove(self, tenant: str, name: str) -> None:
        """Forget the session (nothing if there is none)."""
        sessions = self._tenants.get(tenant)
        if sessions is not None:
            sessions.pop(name, None)

    def sessions(self, tenant: str) -> builtins.list[MemorySession]:
        """The tenant's sessions, least recently active first."""
        sessions = self._tenants.get(tenant)
        return [] if sessions is None else list(sessions.values())

    def forks(self, tenant: str, name: str) -> builtins.list[tuple[str, int]]:
        """``(name, seq)`` of the tenant's sessions whose origin is ``name``."""
        return [
            (session.name, session.origin[1])
            for session in self.sessions(tenant)
            if session.origin is not None and session.origin[0] == name
        ]

    def clear(self) -> None:
        """Forget every session."""
        self._tenants.clear()

    @property
    def commits(self) -> CommitSignal:
        """The signal every face raises after each write (made on first use)."""
        return self._commits.get()

    def notify(self) -> None:
        """Wake the followers of every face, if any, after a write."""
        self._commits.notify()
