"""``agentlog serve`` out of file descriptors (finding 5 of issue 40).

With ``ulimit -n 256`` and more connections than that, ``accept()`` failed
with EMFILE and asyncio logged a traceback at each of its retries (13 MB in
ten seconds), and uvicorn a line for each request refused beyond its
connection limit. Here a server whose descriptor limit is low is given
requests past its connection limit, then more connections than it has
descriptors: it must say each in one line, answer again once they close,
and keep its stderr small; and a stop while an accept() retry is still to
come must not log one either.
"""

from __future__ import annotations

import re
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ..conftest import child_env
from ..waiting import wait_until
from .conftest import Store
from .http import get

resource = pytest.importorskip("resource")

#: The server's soft limit on open files: its connection limit is then 32
#: (64 kept spare), and it runs out of descriptors at about 80 connections.
LIMIT = 96
#: The connections the test opens: more than the server has descriptors.
CONNECTIONS = LIMIT + 24
#: Connections within its descriptors but past its connection limit.
OVER_LIMIT = 40
#: The most bytes the server may write on stderr through it all: its start
#: line, one "out of file descriptors" line and one 503 line.
STDERR_BYTES = 1024


def _low_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))


class Output:
    """A child's stderr, read as it comes by a thread."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        self.stream = process.stderr
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self) -> None:
        while chunk := self.stream.read1(65536):
            self.chunks.append(chunk)

    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")


def _waiting(port: int) -> int:
    """How many connections to the listener on ``port`` wait in its accept
    queue (Linux shows it as the listening socket's ``rx_queue``)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:  # LISTEN
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"no listener on port {port}")


def _answered(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server has answered (or closed)."""
    poller = select.poll()
    for sock in socks:
        poller.register(sock, select.POLLIN)
    return len(poller.poll(0))


def _server(store: Store) -> tuple[subprocess.Popen[bytes], Output, int, str]:
    """``agentlog serve`` of ``store`` with a low descriptor limit: the process,
    its stderr, its port and its token."""
    store.writer().append("s", [{"type": "user", "content": "hi"}])
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlog", "serve", store.location, "--port", "0"],
        stderr=subprocess.PIPE,
        env=child_env(),
        preexec_fn=_low_limit,
    )
    output = Output(process)
    assert wait_until(lambda: "(Ctrl-C stops)" in output.text() or process.poll() is not None)
    found = re.search(r"at http://127\.0\.0\.1:(\d+)/\?token=([\w-]+) ", output.text())
    if not found:
        process.kill()
        process.wait(30)
        raise AssertionError(output.text())
    return process, output, int(found[1]), found[2]


def _stop(process: subprocess.Popen[bytes], output: Output, socks: list[socket.socket]) -> str:
    """Stop the server (as Ctrl-C does) and close ``socks``; what it said."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(30)
    finally:
        _close(process, socks)
        output.thread.join(30)
    return output.text()


def _close(process: subprocess.Popen[Any], socks: list[socket.socket]) -> None:
    """Close ``socks`` and make sure ``process`` has ended (killed if it has not)."""
    for sock in socks:
        sock.close()
    if process.poll() is None:
        process.kill()
        process.wait(30)


def _saturate(port: int, output: Output) -> list[socket.socket]:
    """More connections than the server has descriptors, once it has said so."""
    socks = []
    for _ in range(CONNECTIONS):  # the kernel takes them all; the server cannot
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=30))
    assert wait_until(lambda: "Too many open files" in output.text()), output.text()
    return socks


def _quiet(said: str) -> None:
    assert "Traceback" not in said, said[:3000]
    assert said.count("out of file descriptors") <= 1, said[:3000]
    assert said.count("Exceeded concurrency limit") <= 1, said[:3000]
    assert len(said.encode()) <= STDERR_BYTES, said[:3000]


LINUX = pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="reads Linux's /proc")


@LINUX
def test_out_of_descriptors_is_one_line_and_the_server_answers_after(
    sqlite_store: Store,
) -> None:
    process, output, port, token = _server(sqlite_store)
    socks: list[socket.socket] = []
    try:
        # Within its descriptors but past its connection limit, every
        # request is a 503, which uvicorn logs: once here.
        for _ in range(OVER_LIMIT):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        assert wait_until(lambda: _waiting(port) == 0)
        request = f"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        for sock in socks:
            sock.sendall(request)
        assert wait_until(lambda: _answered(socks) == len(socks))
        assert all(sock.recv(64).startswith(b"HTTP/1.1 503") for sock in socks)
        for sock in socks:
            sock.close()
        socks = _saturate(port, output)
        # Three more of asyncio's accept retries, each seen: the oldest
        # connection (accepted: the queue is first in, first out) closes, a
        # retry accepts one that waited, and runs out of descriptors again.
        for _ in range(3):
            waiting = _waiting(port)
            assert waiting > 0
            socks.pop(0).close()
            assert wait_until(lambda w=waiting: _waiting(port) < w), output.text()
        for sock in socks:
            sock.close()
        socks.clear()
        sessions = f"http://127.0.0.1:{port}/api/sessions?token={token}"
        assert wait_until(lambda: get(sessions).status == 200)
        assert [s["id"] for s in get(sessions).json()["sessions"]] == ["s"]
    finally:
        said = _stop(process, output, socks)
    _quiet(said)
    assert said.count("out of file descriptors") == 1
    assert said.count("Exceeded concurrency limit") == 1


#: A child that runs out of descriptors on an asyncio server, closes it and
#: waits for asyncio's retry of accept() on the closed socket: what uvicorn's
#: stop does when a retry is still to come (it is, while out of descriptors).
_STOPPED_CHILD = f"""
import asyncio, resource, socket, sys
from agentlog.serve.server import quiet_accept_errors

resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
looked = asyncio.Event()

def stopping():
    looked.set()  # the handler asked: an error came after the stop
    return True

async def main():
    loop = asyncio.get_running_loop()
    quiet_accept_errors(loop, stopping)
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0, backlog=2048)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    sys.stdin.readline()  # the parent's connections are all made
    while True:  # until no descriptor is left (accept has failed for want of one)
        try:
            socket.socket().close()
        except OSError:
            break
        await asyncio.sleep(0.01)
    server.close()
    await asyncio.wait_for(looked.wait(), 30)
    print("retried", flush=True)

asyncio.run(main())
"""


@LINUX
def test_the_accept_retry_after_a_stop_is_quiet() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert process.stdin is not None and process.stdout is not None
    socks: list[socket.socket] = []
    try:
        port = int(process.stdout.readline())
        for _ in range(CONNECTIONS):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        process.stdin.write("\n")
        process.stdin.flush()
        out, err = process.communicate(timeout=60)
    finally:
        _close(process, socks)
    assert (process.returncode, out) == (0, "retried\n"), err[-3000:]
    _quiet(err)
    assert err.count("out of file descriptors") == 1, err
