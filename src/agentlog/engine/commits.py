"""The commit signal: how this process's followers hear of a write at once.

A signal belongs to what is written: a checkpointer of its own backend
(memory, files, PostgreSQL), or, for SQLite, the engine — one per open
database, shared by every checkpointer on it and raised by every writer on
it (the checkpointers and the ``SessionStore`` face alike), so a follower on
any of them wakes for a write through any other. Other processes' commits
are not signalled: followers poll for them (``data_version``).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

from .interface import Database

__all__ = ["CommitSignal", "EngineCommits", "engine_commits", "notify_commit"]


class CommitSignal:
    """Tells this process's followers that their checkpointer wrote something.

    The checkpointer calls :meth:`notify` after each successful write (an
    append, a group of appends, a truncate, a fork, a delete) and when it
    closes. Threads block in :meth:`wait`; an event loop subscribes a
    callback (called on the writing thread, so it must only hand over, e.g.
    with ``call_soon_threadsafe``).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._count = 0
        self._waiting = 0
        self._listeners: tuple[Callable[[], None], ...] = ()

    @property
    def count(self) -> int:
        """How many times it has been notified: take it before looking at the log."""
        return self._count

    @property
    def waiters(self) -> int:
        """How many threads block in :meth:`wait` now."""
        return self._waiting

    @property
    def subscribers(self) -> int:
        """How many listeners are subscribed (an event loop with followers is one)."""
        return len(self._listeners)

    def notify(self) -> None:
        """One write has committed: wake every waiter, call every listener."""
        with self._cond:
            self._count += 1
            if self._waiting:
                self._cond.notify_all()
            listeners = self._listeners
        for listener in listeners:
            listener()

    def wait(self, mark: int, timeout: float) -> bool:
        """Block until :attr:`count` is no longer ``mark`` (True) or ``timeout`` passes."""
        with self._cond:
            if self._count != mark:
                return True
            self._waiting += 1
            try:
                return self._cond.wait_for(lambda: self._count != mark, timeout)
            finally:
                self._waiting -= 1

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every notification, until :meth:`unsubscribe`."""
        with self._cond:
            self._listeners = (*self._listeners, listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener`` (nothing if it is not subscribed)."""
        with self._cond:
            listeners = list(self._listeners)
            if listener in listeners:
                listeners.remove(listener)
            self._listeners = tuple(listeners)


class EngineCommits:
    """One engine's commit signal, made when a follower first asks for it (so
    that a write costs one attribute check while nobody follows)."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal: CommitSignal | None = None

    def get(self) -> CommitSignal:
        """The signal, made on first use."""
        signal = self.signal
        if signal is None:
            with _LOCK:
                signal = self.signal
                if signal is None:
                    signal = self.signal = CommitSignal()
        return signal

    def notify(self) -> None:
        """A write through the engine has committed: wake its followers, if any."""
        signal = self.signal
        if signal is not None:
            signal.notify()


# Per engine, or per checkpointer of a backend of its own (weakly: one closed
# and dropped takes its signal along).
_COMMITS: weakref.WeakKeyDictionary[Database | object, EngineCommits] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def engine_commits(engine: Database | object) -> EngineCommits:
    """``engine``'s commit signal holder, shared by everything that writes
    through it (or a checkpointer's own, for a backend without an engine)."""
    with _LOCK:
        commits = _COMMITS.get(engine)
        if commits is None:
            commits = _COMMITS[engine] = EngineCommits()
        return commits


def notify_commit(engine: Database | object) -> None:
    """After a write through ``engine``: wake the followers of every checkpointer on it."""
    commits = _COMMITS.get(engine)  # (no checkpointer on it yet: no follower either)
    if commits is not None:
        commits.notify()


def _fresh_lock_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # a parent thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)
