"""``LISTEN``: a store's notifications, for followers (a thread, or a task of a loop)."""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from .statements import Statements

__all__ = ["Listener", "WatchedKeys", "listen_async", "parse_note"]


def _listen_statement(q: Statements) -> sql.Composed:
    return q.listen.format(sql.Identifier(q.channel))


def parse_note(payload: str) -> tuple[int, str] | None:
    """``(head, session key)`` of a notification's payload; ``None`` for one of another kind."""
    head, _, key = payload.partition(" ")
    try:
        return int(head), key
    except ValueError:
        return None


class WatchedKeys:
    """The session keys followers watch, each with its count of followers and
    of the notifications seen for it: what a change token is made of while a
    listener runs. Unlocked: the sync checkpointer holds its lock around it,
    the async one uses it on its loop only."""

    def __init__(self) -> None:
        self._followers: dict[str, int] = {}
        self._notes: dict[str, int] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._followers

    def add(self, key: str) -> None:
        """One more follower of ``key``."""
        self._followers[key] = self._followers.get(key, 0) + 1

    def remove(self, key: str) -> bool:
        """One follower of ``key`` fewer (its notes go with the last); whether
        no key is watched any more (the listener can stop)."""
        count = self._followers.get(key, 0) - 1
        if count > 0:
            self._followers[key] = count
        else:
            self._followers.pop(key, None)
            self._notes.pop(key, None)
        return not self._followers

    def note(self, key: str) -> bool:
        """Count a notification for ``key``; whether anyone watches it (if not,
        it is not counted)."""
        if key not in self._followers:
            return False
        self._notes[key] = self._notes.get(key, 0) + 1
        return True

    def notes(self, key: str) -> int:
        """How many notifications for ``key`` its followers have seen."""
        return self._notes.get(key, 0)

    def clear(self) -> None:
        """Forget every key (the checkpointer closes)."""
        self._followers.clear()
        self._notes.clear()


class Listener:
    """One ``LISTEN`` connection and the thread that waits on it.

    ``on_notify(head, key_text)`` is called on the listener's thread for each
    notification on the channel; ``on_state()`` whenever the connection is
    (re)established or lost — notifications may have been missed then, so
    the caller looks again. :attr:`generation` counts the connections made;
    :attr:`connected` says whether one is listening now. :meth:`stop` ends
    the thread at once (a self-pipe wakes its ``select``) and joins it.
    ``connect()`` makes the connection (autocommit, not pooled).
    """

    def __init__(
        self,
        q: Statements,
        connect: Callable[[], psycopg.Connection[Any]],
        on_notify: Callable[[int, str], None],
        on_state: Callable[[], None],
        retry_interval: float = 0.2,
    ) -> None:
        self._q = q
        self._connect = connect
        self._on_notify = on_notify
        self._on_state = on_state
        self._retry = retry_interval
        self.generation = 0
        self.connected = False
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(
            target=self._run, name=f"agentlog-listen-{q.schema_name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping:
                with contextlib.suppress(psycopg.Error, OSError):
                    self._listen()
                if self.connected:
                    self.connected = False
                    self._on_state()
                if not self._stopping and self._wait_wake(self._retry):
                    break
        finally:
            os.close(self._wake_r)

    def _wait_wake(self, timeout: float) -> bool:
        """Sleep ``timeout`` unless woken by stop (True then)."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake_r, selectors.EVENT_READ)
            sel.select(timeout)
        return self._stopping

    def _listen(self) -> None:
        conn = self._connect()
        try:
            conn.execute(_listen_statement(self._q))
            pgconn = conn.pgconn
            self.generation += 1
            self.connected = True
            self._on_state()
            with selectors.DefaultSelector() as sel:
                sel.register(pgconn.socket, selectors.EVENT_READ)
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._stopping:
                    sel.select(30.0)
                    if self._stopping:
                        return
                    pgconn.consume_input()
                    while (note := pgconn.notifies()) is not None:
                        parsed = parse_note(note.extra.decode())
                        if parsed is not None:
                            self._on_notify(*parsed)
                    if pgconn.status != psycopg.pq.ConnStatus.OK:
                        return
        finally:
            conn.close()

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread and join it."""
        self._stopping = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with contextlib.suppress(OSError):
            os.close(self._wake_w)


#: How often (seconds) a listening loop looks whether it is to stop.
_STOP_LOOK = 1.0


async def listen_async(
    q: Statements,
    conninfo: str,
    kwargs: dict[str, Any],
    on_connected: Callable[[], None],
    on_notify: Callable[[int, str], None],
    on_lost: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """One listening connection's life on a loop: ``on_connected()`` once it
    listens, ``on_notify(head, key)`` per notification, ``on_lost()`` as it
    ends (before it is closed); returns once ``stopping()`` (looked at least
    every :data:`_STOP_LOOK` seconds), or raises :class:`psycopg.Error`,
    :class:`OSError` when the connection is lost."""
    conn = await psycopg.AsyncConnection.connect(conninfo, **dict(kwargs, autocommit=True))
    try:
        await conn.execute(_listen_statement(q))
        on_connected()
        while not stopping():
            # Not stopped by cancellation alone: psycopg's wait for
            # notifications (3.2.2 at least) can swallow a CancelledError,
            # which left the task listening for ever.
            async for note in conn.notifies(timeout=_STOP_LOOK):
                parsed = parse_note(note.payload)
                if parsed is not None:
                    on_notify(*parsed)
    finally:
        on_lost()
        await conn.close()
