"""The viewer's guard: the Host check on loopback, the token elsewhere, the
command line's mistakes as one line."""

from __future__ import annotations

import http.client
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import StorageUnavailableError
from agentlog.locations import scrub, shown
from agentlog.serve import access_token, guarded_app, is_loopback, login_file

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


def test_every_bind_needs_the_token_kept_in_a_cookie_of_its_port(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    # A loopback bind too: any local user could read every transcript.
    viewer = serve(sqlite_store.source(), token="s3cret-token")
    assert get(viewer.url + "/api/sessions", auth=False).status == 401
    assert get(viewer.url + "/api/sessions?token=wrong", auth=False).status == 401
    assert get(viewer.url + "/", {"Authorization": "Bearer nope"}).status == 401
    first = get(viewer.url + "/api/config?token=s3cret-token", auth=False)
    assert first.status == 200
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"agentlog_token_{viewer.port}=s3cret-token;")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert get(viewer.url + "/api/sessions", {"Cookie": cookie.split(";")[0]}).status == 200
    # Another port's cookie (another viewer's token) is not this viewer's.
    other = {"Cookie": "agentlog_token=s3cret-token; agentlog_token_1=s3cret-token"}
    assert get(viewer.url + "/api/sessions", other).status == 401
    bearer = {"Authorization": "Bearer s3cret-token"}
    assert get(viewer.url + "/api/sessions", bearer).status == 200
    # A page visited with the token is sent on without it, the cookie set.
    connection = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
    try:
        connection.request("GET", "/stores?q=a+b&token=s3cret-token")
        reply = connection.getresponse()
        reply.read()
        assert reply.status == 303 and reply.getheader("location") == "/stores?q=a+b"
        assert reply.getheader("set-cookie", "").startswith(f"agentlog_token_{viewer.port}=")
    finally:
        connection.close()


@pytest.mark.parametrize("foreign", ["theme=a b", 'x="unterminated', "sess=[1]"])
def test_the_token_cookie_is_found_past_a_malformed_foreign_one(
    sqlite_store: Store, serve: Callable[..., Viewer], foreign: str
) -> None:
    viewer = serve(sqlite_store.source(), token="tok")
    header = {"Cookie": f"{foreign}; agentlog_token_{viewer.port}=tok"}
    assert get(viewer.url + "/api/sessions", header).status == 200
    assert get(viewer.url + "/api/sessions", {"Cookie": foreign}).status == 401


def test_another_sites_subresources_are_refused(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    # <img src=http://127.0.0.1:PORT/api/sessions?tenant=N> on any page.
    viewer = serve(sqlite_store.source())
    url = viewer.url + "/api/sessions"
    for site in ["cross-site", "same-site"]:
        for mode, dest in [("no-cors", "image"), ("cors", "empty"), ("navigate", "iframe")]:
            fetch = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest}
            assert get(url, fetch).status == 403, fetch
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert get(viewer.url + "/", {**navigation, "Sec-Fetch-Dest": "document"}).status == 200
    own = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
    assert get(url, own).status == 200
    assert get(url, {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}).status == 200


def test_a_websocket_is_refused(sqlite_store: Store) -> None:
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    headers = {"Authorization": "Bearer tok"}
    app = guarded_app(sqlite_store.source(), token="tok")
    with TestClient(app, base_url="http://127.0.0.1", headers=headers) as client:
        with (
            pytest.raises(WebSocketDisconnect) as refused,
            client.websocket_connect("/api/sessions/stream"),
        ):
            pass
        assert refused.value.code == 1008
        assert client.get("/api/sessions").status_code == 200


def test_made_up_tenants_open_nothing(sqlite_store: Store, serve: Callable[..., Viewer]) -> None:
    sqlite_store.writer("acme").append("theirs", [{"type": "user", "content": "hi"}])
    source = sqlite_store.source()
    viewer = serve(source)
    for n in range(60):
        reply = get(f"{viewer.url}/api/sessions?tenant=made-up-{n}")
        assert reply.status == 404 and b"no tenant" in reply.body
    assert sorted(source._logs) == ["default"]
    assert get(f"{viewer.url}/api/sessions?tenant=acme").status == 200
    assert sorted(source._logs) == ["acme", "default"]


def test_made_up_tenants_take_no_postgres_connections(
    request: pytest.FixtureRequest, tmp_path: Path, serve: Callable[..., Viewer]
) -> None:
    import psycopg

    from ..conftest import postgres_conninfo
    from .conftest import make_store

    stores = make_store("postgres", tmp_path, request)
    store = next(stores)
    try:
        viewer = serve(store.source())

        def connections() -> int:
            with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity").fetchone()
                assert row is not None
                return int(row[0])

        assert get(f"{viewer.url}/api/sessions").status == 200
        before = connections()
        for n in range(50):
            assert get(f"{viewer.url}/api/sessions?tenant=made_up_{n}").status == 404
        # Each tenant opened used to be a pool of its own (+50 at least).
        assert connections() - before < 10
        # The tenants the store has share the first one's pool.
        for tenant in ["acme", "globex"]:
            store.writer(tenant).append("s", [{"type": "user", "content": "hi"}])
            assert get(f"{viewer.url}/api/sessions?tenant={tenant}").status == 200
        databases = {id(log.database) for log in viewer.source._logs.values()}
        assert len(databases) == 1 and len(viewer.source._logs) == 3
    finally:
        next(stores, None)


def test_a_store_outage_is_a_503_without_its_details(
    sqlite_store: Store, serve: Callable[..., Viewer], caplog: pytest.LogCaptureFixture
) -> None:
    source = sqlite_store.source()
    detail = "connection to server at db.internal (10.1.2.3), port 5432 failed"

    def down(*args: object, **kwargs: object) -> None:
        raise StorageUnavailableError(detail)

    source.sessions = down  # type: ignore[method-assign]
    source.session = down  # type: ignore[method-assign]
    viewer = serve(source)
    with caplog.at_level(logging.WARNING, logger="agentlog.serve"):
        for path in ["/api/sessions", "/api/sessions/s"]:
            reply = get(viewer.url + path)
            assert reply.status == 503, (path, reply.body)
            assert b"db.internal" not in reply.body and b"5432" not in reply.body
    assert detail in caplog.text


def test_secret_parts_of_a_connection_string_are_hidden() -> None:
    for location in [
        "host=db user=me password=pw1 sslpassword=pw2 dbname=x",
        "postgresql://me:pw1@db/x?sslmode=require&sslpassword=pw2",
        "postgresql://me@db/x?password=pw1&sslpassword=pw2",
    ]:
        hidden = shown(location)
        assert "pw1" not in hidden and "pw2" not in hidden, hidden
        assert "pw2" not in scrub(f"cannot connect: {location}", location)


def test_the_login_file_keeps_the_token_off_the_command_line(tmp_path: Path) -> None:
    url = "http://127.0.0.1:1/?token=abc&x=<y>"
    path = login_file(url, str(tmp_path))
    assert "abc" not in path
    assert os.stat(path).st_mode & 0o777 == 0o600
    text = Path(path).read_text()
    assert 'url=http://127.0.0.1:1/?token=abc&amp;x=&lt;y&gt;"' in text


def test_only_a_non_loopback_bind_skips_the_host_check() -> None:
    token = access_token()
    assert len(token) >= 24 and token != access_token()
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


def _serving(store: Store, sigint: Any = signal.SIG_DFL) -> tuple[subprocess.Popen[str], int, str]:
    """``agentlog serve`` of ``store`` on a free port, that port and its token; the
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
    found = re.search(r"at http://127\.0\.0\.1:(\d+)/\?token=([\w-]+) ", line)
    if not found:
        process.kill()
        process.wait(30)
        raise AssertionError(line)
    return process, int(found.group(1)), found.group(2)


def test_the_command_serves_until_stopped(sqlite_store: Store) -> None:
    process, port, token = _serving(sqlite_store)
    try:
        assert get(f"http://127.0.0.1:{port}/api/sessions").status == 401
        sessions = get_json(f"http://127.0.0.1:{port}/api/sessions?token={token}")["sessions"]
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
    process, port, token = _serving(sqlite_store, sigint)
    streams: list[socket.socket] = []
    try:
        for path in ["/api/sessions/stream", "/api/sessions/s/tail"]:
            stream = socket.create_connection(("127.0.0.1", port), timeout=30)
            head = f"GET {path}?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
            stream.sendall(head.encode())
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
