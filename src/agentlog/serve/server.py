"""How ``agentlog serve`` is served: the socket, uvicorn's settings, its limits.

- The listening socket is made with ``IPPROTO_TCP``: asyncio sets
  ``TCP_NODELAY`` only on sockets whose protocol says TCP, and an accepted
  socket inherits the listener's, so without it every keep-alive request
  after the first waits for the peer's delayed ACK (~40 ms).
- At most :data:`MAX_CONNECTIONS` connections at once (fewer when the file
  descriptor limit is low), a 503 beyond (uvicorn's ``limit_concurrency``).
- A request's headers must arrive within :data:`HEADER_SECONDS` of its first
  byte (or of the connection, for its first request): uvicorn has no such
  timeout, so :func:`header_timeout_protocol` adds one to its h11 protocol.
  An idle keep-alive connection closes after :data:`KEEP_ALIVE_SECONDS`;
  headers past :data:`MAX_HEADER_BYTES` are a 400 (h11's own limit).
- Out of file descriptors, asyncio's accept would log a traceback at each
  retry: :func:`quiet_accept_errors` says so once a minute, in one line
  (and keeps quiet about the retry asyncio leaves behind when it stops).
  uvicorn logs a line for every request it answers 503 beyond the
  connection limit: :class:`OncePerMinute` lets one through a minute.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "HEADER_SECONDS",
    "KEEP_ALIVE_SECONDS",
    "MAX_CONNECTIONS",
    "MAX_HEADER_BYTES",
    "OncePerMinute",
    "QuietServer",
    "connection_limit",
    "header_timeout_protocol",
    "listening_socket",
    "quiet_accept_errors",
    "server_config",
]

#: Seconds a request's headers may take to arrive.
HEADER_SECONDS = 10.0
#: Seconds an idle keep-alive connection stays open.
KEEP_ALIVE_SECONDS = 5
#: The most connections served at once (a 503 beyond).
MAX_CONNECTIONS = 256
#: The most bytes of a request's headers.
MAX_HEADER_BYTES = 16 * 1024
#: File descriptors kept free of connections (the store, the log, a reload).
_SPARE_FDS = 64
#: Seconds between two "out of file descriptors" lines.
_ACCEPT_NOTICE_SECONDS = 60.0

_logger = logging.getLogger("agentlog.serve")


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (an OSError when the
    port is taken, for the caller to report)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # listening before the address is printed: no refused first look
    except OSError:
        sock.close()
        raise
    return sock


def connection_limit(limit: int = MAX_CONNECTIONS) -> int:
    """``limit``, lowered to leave :data:`_SPARE_FDS` descriptors free under
    the process's soft limit on open files."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return limit
    if soft == resource.RLIM_INFINITY:
        return limit
    return min(limit, max(8, soft - _SPARE_FDS))


def header_timeout_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request headers are
    not all there ``seconds`` after its first byte (or, for a connection's
    first request, after the connection was made)."""

    class Protocol(H11Protocol):
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.watch_headers()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self.watch_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_timer()
            super().connection_lost(exc)

        def stop_timer(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def waiting_for_headers(self) -> bool:
            return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

        def watch_headers(self) -> None:
            if not self.waiting_for_headers():
                self.stop_timer()
            elif self.header_timer is None:
                self.header_timer = self.loop.call_later(seconds, self.headers_late)

        def headers_late(self) -> None:
            self.header_timer = None
            if self.waiting_for_headers():
                self.transport.close()

    return Protocol


def quiet_accept_errors(
    loop: asyncio.AbstractEventLoop, stopping: Callable[[], bool] = lambda: False
) -> None:
    """Make ``loop`` report running out of file descriptors in one line a
    minute, not a traceback at each retry; anything else as before.

    asyncio retries ``accept()`` a second later on a timer that closing the
    listening socket does not cancel: once ``stopping()``, that retry's
    failure on the closed socket is dropped, not logged as a traceback."""
    last = [float("-inf")]

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "out of system resource" not in str(context.get("message", "")):
            if not (
                stopping()
                and isinstance(context.get("exception"), ValueError)
                and "_start_serving" in repr(context.get("handle"))
            ):
                loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - last[0] >= _ACCEPT_NOTICE_SECONDS:
            last[0] = now
            _logger.warning(
                "agentlog serve: out of file descriptors (%s); new connections wait",
                context.get("exception"),
            )

    loop.set_exception_handler(handler)


class OncePerMinute(logging.Filter):
    """Let one log record whose message is ``message`` through a minute
    (a line per refused request would let any client fill the log)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message
        self.last = float("-inf")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != self.message:
            return True
        now = time.monotonic()
        if now - self.last < _ACCEPT_NOTICE_SECONDS:
            return False
        self.last = now
        return True


#: What uvicorn logs for each request it answers 503 beyond the connection limit.
_OVER_LIMIT = "Exceeded concurrency limit."


class QuietServer(uvicorn.Server):
    """uvicorn's server, its loop set up by :func:`quiet_accept_errors`, its
    503s beyond the connection limit logged once a minute."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        quiet_accept_errors(asyncio.get_running_loop(), lambda: self.should_exit)
        quiet = OncePerMinute(_OVER_LIMIT)
        logger = logging.getLogger("uvicorn.error")
        logger.addFilter(quiet)
        try:
            await super().serve(sockets)
        finally:
            logger.removeFilter(quiet)


def server_config(
    app: Any,
    *,
    header_seconds: float = HEADER_SECONDS,
    max_connections: int = MAX_CONNECTIONS,
    **options: Any,
) -> uvicorn.Config:
    """uvicorn's settings for ``app``, with the limits above (``options``
    are passed on: ``log_level``, ``timeout_graceful_shutdown``...)."""
    return uvicorn.Config(
        app,
        http=header_timeout_protocol(header_seconds),
        loop="asyncio",
        lifespan="on",
        limit_concurrency=connection_limit(max_connections),
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        **options,
    )
