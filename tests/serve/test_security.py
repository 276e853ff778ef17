"""The viewer's guard: the Host check on loopback, the token elsewhere, the
command line's mistakes as one line."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog.serve import access_token, is_loopback

from ..conftest import child_env
from .conftest import Store, Viewer
from .http import get, get_json


def test_a_loopback_bind_refuses_a_foreign_host_header(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    viewer = serve(sqlite_store.source())
    for host in ["evil.example", "evil.example:80", "10.0.0.1", "127.0.0.1.evil.example"]:
        reply = get(viewer.url + "/api/sessions", {"Host": host})
        assert reply.status == 421, host
        assert reply.headers["x-content-type-options"] == "nosniff"
    for host in [f"127.0.0.1:{viewer.port}", f"localhost:{viewer.port}", f"[::1]:{viewer.port}"]:
        assert get(viewer.url + "/api/sessions", {"Host": host}).status == 200, host


def test_a_token_is_needed_when_one_is_set(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    viewer = serve(sqlite_store.source(), token="s3cret-token")
    assert get(viewer.url + "/api/sessions").status == 401
    assert get(viewer.url + "/api/sessions?token=wrong").status == 401
    assert get(viewer.url + "/", {"Authorization": "Bearer nope"}).status == 401
    first = get(viewer.url + "/?token=s3cret-token")
    assert first.status == 200
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert get(viewer.url + "/api/sessions", {"Cookie": cookie.split(";")[0]}).status == 200
    bearer = {"Authorization": "Bearer s3cret-token"}
    assert get(viewer.url + "/api/sessions", bearer).status == 200


def test_only_a_non_loopback_bind_gets_a_token() -> None:
    assert access_token("127.0.0.1") is None and access_token("::1") is None
    assert access_token("localhost") is None
    token = access_token("0.0.0.0")
    assert token is not None and len(token) >= 24 and token != access_token("0.0.0.0")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    assert is_loopback("127.0.0.2") and is_loopback("[::1]")


def _agentlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentlog", *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )


def test_command_line_mistakes_are_one_line(tmp_path: Path, sqlite_store: Store) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    try:
        for args in [
            [str(tmp_path / "missing.db")],
            [str(tmp_path)],
            [sqlite_store.location, "--port", "70000"],
            [sqlite_store.location, "--port", "x"],
            [sqlite_store.location, "--port", port],
        ]:
            run = _agentlog("serve", *args)
            assert run.returncode == 2, (args, run.stderr)
            assert run.stderr.count("\n") == 1 and run.stderr.startswith("agentlog serve: ")
            assert run.stdout == ""
    finally:
        taken.close()
    assert not (tmp_path / "missing.db").exists()


def _serving(store: Store, sigint: Any = signal.SIG_DFL) -> tuple[subprocess.Popen[str], int]:
    """``agentlog serve`` of ``store`` on a free port, and that port; the
    process begins with ``sigint`` as its SIGINT handling, as it would from a
    terminal (the default) or from a script's ``nohup ... &`` (ignored)."""
    store.writer().append("s", [{"type": "user", "content": "hi"}])
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlog", "serve", store.location, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"at http://127\.0\.0\.1:(\d+)/ ", line)
    if not found:
        process.kill()
        process.wait(30)
        raise AssertionError(line)
    return process, int(found.group(1))


def test_the_command_serves_until_stopped(sqlite_store: Store) -> None:
    process, port = _serving(sqlite_store)
    try:
        sessions = get_json(f"http://127.0.0.1:{port}/api/sessions")["sessions"]
        assert [s["id"] for s in sessions] == ["s"]
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["terminal", "nohup"])
def test_ctrl_c_with_live_streams_open_stops_quietly(sqlite_store: Store, sigint: Any) -> None:
    # Every open page holds a live stream: a stop must end them, not leave
    # uvicorn to cancel them and log the cancellation as an error. Where
    # SIGINT was ignored at the start, uvicorn still stops on it, and the
    # exit used to be 0.
    process, port = _serving(sqlite_store, sigint)
    streams: list[socket.socket] = []
    try:
        for path in ["/api/sessions/stream", "/api/sessions/s/tail"]:
            stream = socket.create_connection(("127.0.0.1", port), timeout=30)
            stream.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            assert stream.recv(4096).startswith(b"HTTP/1.1 200"), path  # the stream is open
            streams.append(stream)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 130
        assert process.stderr is not None
        rest = process.stderr.read()
        assert "Traceback" not in rest and "ERROR" not in rest, rest
    finally:
        for stream in streams:
            stream.close()
        if process.poll() is None:
            process.kill()
            process.wait(30)
