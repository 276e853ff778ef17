"""A client-side deadline on the synchronous driver's calls.

``statement_timeout`` is the server's: it needs the server to answer. A
connection whose peer stops answering while TCP stays up (a black-holed
route, a stalled proxy, a frozen host) acknowledges every byte at the TCP
level, so neither keepalives nor ``tcp_user_timeout`` ever notice it, and
psycopg waits on the socket for ever. Here one watchdog thread per store
holds the deadline of each call under way; at a call's deadline it shuts the
call's socket down, which wakes psycopg's wait with a lost connection (the
pool then discards it). The caller gets a typed error, never a hang: a lost
connection, with what it means for a write (see ``connection_lost``).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import psycopg

__all__ = ["Deadlines", "check_client_timeout"]

#: A connection of either driver: both give their socket's descriptor.
_Connection = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]


def check_client_timeout(timeout: float | None) -> float | None:
    """``timeout`` if it is ``None`` or a number of seconds a thread can wait."""
    if timeout is not None and not 0 < timeout <= threading.TIMEOUT_MAX:
        raise ValueError(
            "client_timeout must be a number of seconds > 0 and at most"
            f" {threading.TIMEOUT_MAX:.0f}, not {timeout!r}"
        )
    return timeout


class Deadlines:
    """The deadlines of the calls under way on a store's connections.

    The async driver's calls are watched by the same thread: the watch is
    entered and left without awaiting, and shutting the socket down wakes
    the event loop's wait on it as it wakes a blocking one. (Cancelling the
    awaited call instead would not do: psycopg answers a cancellation by
    asking the server to cancel the query, then waits again on the same
    silent socket — seconds more, or for ever in older releases.)

    ``timeout`` is the seconds a call may take, from when it has its
    connection; ``None`` watches nothing (each :meth:`watch` costs nothing).
    The thread starts with a call and sleeps until the earliest deadline; it
    ends once no call has been under way for a whole timeout, and the next
    call starts another. A call that ends in time costs a lock and a dict
    entry, and never wakes the thread. Every call has the same timeout, so
    the calls in the order they began are the deadlines in order: the
    earliest is the oldest call under way.
    """

    def __init__(self, timeout: float | None) -> None:
        self.timeout = check_client_timeout(timeout)
        self._lock = threading.Condition(threading.Lock())
        self._calls: OrderedDict[int, tuple[float, _Connection]] = OrderedDict()
        self._expired: set[int] = set()
        self._count = itertools.count()
        self._thread: threading.Thread | None = None
        self._last_end = 0.0  # when the last call ended (time.monotonic())

    @contextlib.contextmanager
    def watch(self, conn: _Connection) -> Iterator[None]:
        """Around one call on ``conn``: past the deadline its socket is shut down,
        and the lost connection is raised as a ``psycopg.OperationalError``
        that says the deadline gave it up."""
        if self.timeout is None:
            yield
            return
        ticket = next(self._count)
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name="agentlog-postgres-deadlines", daemon=True
                )
                # Noted only once it runs: a start that fails (no thread to be
                # had) refuses this call and leaves the next to try again.
                thread.start()
                self._thread = thread
            self._calls[ticket] = (time.monotonic() + self.timeout, conn)
        try:
            yield
        except psycopg.Error as exc:
            with self._lock:
                expired = ticket in self._expired
            if expired:
                raise psycopg.OperationalError(
                    f"no answer within the client-side deadline ({self.timeout} s);"
                    " the connection was given up"
                ) from exc
            raise
        finally:
            with self._lock:
                self._calls.pop(ticket, None)
                self._expired.discard(ticket)
                self._last_end = time.monotonic()

    def _run(self) -> None:
        try:
            self._watch_calls()
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None  # it died: the next call starts another

    def _watch_calls(self) -> None:
        timeout = self.timeout
        assert timeout is not None  # a thread runs only for a store with a deadline
        with self._lock:
            while True:
                if not self._calls:
                    idle = time.monotonic() - self._last_end
                    if idle >= timeout:
                        # No call for a whole timeout: end, so that a closed
                        # store leaves no thread; the next call starts another.
                        self._thread = None
                        return
                    # A call that begins while this sleeps is due a whole
                    # timeout after it began, so waking within one timeout is
                    # in time: no call wakes this thread (that wake-up, a
                    # thread switch on each call, cost more than the call's
                    # own work on a busy machine).
                    self._lock.wait(timeout - idle)
                    continue
                ticket, (due, conn) = next(iter(self._calls.items()))
                wait = due - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                del self._calls[ticket]
                self._expired.add(ticket)
                _shut_down(conn)


def _shut_down(conn: _Connection) -> None:
    """Shut ``conn``'s socket down (both ways): its waiting call wakes at once."""
    with contextlib.suppress(OSError, psycopg.Error, ValueError):
        fd = conn.fileno()
        # A socket object on a duplicate of the descriptor: shutting it down
        # shuts the one socket down; closing it closes only the duplicate.
        with socket.socket(fileno=socket.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
