"""A TCP proxy on loopback that misbehaves on cue, between a client and PostgreSQL.

:class:`FaultProxy` forwards every connection it accepts to the server,
counting the PostgreSQL protocol's messages in each direction (a type byte
and a length; the startup exchange, which has no type byte, is forwarded
before counting starts). :meth:`FaultProxy.arm` sets one fault, counted from
that moment over all connections: when the chosen direction has forwarded
``after`` more messages, the next one is not forwarded and instead

* ``"cut"``: both sockets are closed (the peers see an orderly end);
* ``"reset"``: both are closed with a reset (``SO_LINGER`` 0);
* ``"blackhole"``: nothing more is forwarded either way, and the sockets
  stay open — the peers see a connection that simply stops answering;
* ``"delay"``: it and everything after it is forwarded ``delay`` seconds late.

A fault fires once; :attr:`fired` says whether it did. Later connections pass
(a retry's new connection reaches the server). :meth:`heal` ends a black
hole by closing what it holds.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass

__all__ = ["CLIENT", "SERVER", "FaultProxy"]

#: The direction of the client's messages to the server.
CLIENT = "client"
#: The direction of the server's messages to the client.
SERVER = "server"


@dataclass
class _Fault:
    direction: str
    after: int
    mode: str
    delay: float


class _Link:
    """One proxied connection: the client's socket and the server's."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.closed = False
        self.held = False  # black-holed: nothing more is forwarded


class FaultProxy:
    """A proxy from a loopback port of its own to ``(host, port)``."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._fault: _Fault | None = None
        self._counts = {CLIENT: 0, SERVER: 0}
        self._links: list[_Link] = []
        self.fired = False
        self._running = True
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def conninfo(self, conninfo: str) -> str:
        """``conninfo`` (``host=… port=…``) pointed at this proxy."""
        parts = [p for p in conninfo.split() if not p.startswith(("host=", "port="))]
        return " ".join(["host=127.0.0.1", f"port={self.port}", "sslmode=disable", *parts])

    # -- faults ---------------------------------------------------------------

    def arm(self, direction: str, after: int, mode: str = "cut", delay: float = 0.0) -> None:
        """Fault the message that follows ``after`` more of ``direction``'s."""
        assert direction in (CLIENT, SERVER) and mode in ("cut", "reset", "blackhole", "delay")
        with self._lock:
            self._fault = _Fault(direction, after, mode, delay)
            self._counts = {CLIENT: 0, SERVER: 0}
            self.fired = False

    def disarm(self) -> None:
        """No fault pending (one that fired stays fired)."""
        with self._lock:
            self._fault = None

    def heal(self) -> None:
        """End every black hole: close the connections it holds."""
        with self._lock:
            held = [link for link in self._links if link.held]
        for link in held:
            self._close(link, reset=False)

    def connections(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return sum(1 for link in self._links if not link.closed)

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._running = False
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            self._close(link, reset=False)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- forwarding -----------------------------------------------------------

    def _accept(self) -> None:
        while self._running:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, server)
            with self._lock:
                self._links.append(link)
            threading.Thread(target=self._pump, args=(link, CLIENT), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, SERVER), daemon=True).start()

    def _pump(self, link: _Link, direction: str) -> None:
        source, sink = (
            (link.client, link.server) if direction == CLIENT else (link.server, link.client)
        )
        buffer = b""
        # The client's startup packet (and an SSL request) have no type byte;
        # the server's first answer to an SSL request is one byte.
        started = direction == SERVER
        delay = 0.0
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._close(link, reset=False)
                return
            buffer += data
            while True:
                if not started:
                    if len(buffer) < 4:
                        break
                    (length,) = struct.unpack("!I", buffer[:4])
                    if len(buffer) < length:
                        break
                    message, buffer = buffer[:length], buffer[length:]
                    code = struct.unpack("!I", message[4:8])[0] if length >= 8 else 0
                    if code != 80877103:  # not an SSL request: the startup packet
                        started = True
                    if not self._send(link, sink, message, delay):
                        return
                    continue
                if direction == SERVER and buffer[:1] == b"N" and len(buffer) == 1:
                    message, buffer = buffer, b""  # the answer to an SSL request
                elif len(buffer) < 5:
                    break
                else:
                    (length,) = struct.unpack("!I", buffer[1:5])
                    if len(buffer) < 1 + length:
                        break
                    message, buffer = buffer[: 1 + length], buffer[1 + length :]
                action = self._count(direction)
                if action is not None:
                    mode, seconds = action
                    if mode == "delay":
                        delay = seconds
                    elif mode == "blackhole":
                        link.held = True
                        return
                    else:
                        self._close(link, reset=mode == "reset")
                        return
                if link.held:
                    return
                if not self._send(link, sink, message, delay):
                    return

    def _count(self, direction: str) -> tuple[str, float] | None:
        """Count one message of ``direction``; the fault to apply to it, if any."""
        with self._lock:
            fault = self._fault
            if fault is None or fault.direction != direction:
                return None
            if self._counts[direction] < fault.after:
                self._counts[direction] += 1
                return None
            self._fault = None
            self.fired = True
            return fault.mode, fault.delay

    def _send(self, link: _Link, sink: socket.socket, message: bytes, delay: float) -> bool:
        if delay:
            time.sleep(delay)  # the fault itself: this connection runs late
        if link.held:
            return False
        try:
            sink.sendall(message)
        except OSError:
            self._close(link, reset=False)
            return False
        return True

    def _close(self, link: _Link, *, reset: bool) -> None:
        with self._lock:
            if link.closed:
                return
            link.closed = True
        for sock in (link.client, link.server):
            with contextlib.suppress(OSError):
                if reset:
                    # Closed with linger 0: a reset. SHUT_RD first wakes the
                    # other pump's recv (a close alone does not, and the
                    # socket would live on until it returned).
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.shutdown(socket.SHUT_RD)
                else:
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
