"""The viewer's limits: malformed requests are 4xx, pages have a byte budget,
streams and connections are capped, half-sent headers time out, the socket
answers keep-alive requests at once (TCP_NODELAY), and identical list
streams share one poll; a live tail queues a bounded number of bytes."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentlog.serve import source as source_module

from ..waiting import wait_until
from .conftest import Store, Viewer, guarded_client
from .http import get, post, sse

pytest.importorskip("httpx")  # Starlette's test client

from starlette.testclient import TestClient

from agentlog.serve import create_app

HUGE = "9" * 5000  # int() of this many digits raises in Python


@pytest.fixture
def client(sqlite_store: Store) -> Iterator[tuple[TestClient, str, Any]]:
    """A writable viewer of a store holding session ``s`` (5 events)."""
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(5)])
    source = sqlite_store.source(allow_writes=True)
    with guarded_client(source) as found:
        yield found, found.get("/api/config").json()["csrf"], log


def _post(client: TestClient, csrf: str, path: str, body: Any) -> Any:
    return client.post(path, json=body, headers={"x-agentlog-csrf": csrf})


@pytest.mark.parametrize("action", ["x", "Fork", "delete", "truncate2"])
def test_an_unknown_action_is_a_400_and_truncates_nothing(
    client: tuple[TestClient, str, Any], action: str
) -> None:
    found, csrf, log = client
    reply = _post(found, csrf, f"/api/sessions/s/{action}", {"to": 1})
    assert reply.status_code == 400
    assert "fork or truncate" in reply.json()["error"]
    assert log.head("s") == 5


@pytest.mark.parametrize(
    ("action", "body", "says"),
    [
        ("fork", {"at": -1, "new_session_id": "f"}, "between 0 and the head"),
        ("fork", {"at": 6, "new_session_id": "f"}, "between 0 and the head"),
        ("fork", {"at": 2**64 - 1, "new_session_id": "f"}, "between 0 and the head"),
        ("fork", {"at": 2, "new_session_id": "s"}, "onto itself"),
        ("truncate", {"to": -5}, "between 0 and"),
        ("truncate", {"to": 2**64 - 1}, "between 0 and"),
    ],
)
def test_bad_fork_and_truncate_positions_are_400s(
    client: tuple[TestClient, str, Any], action: str, body: dict[str, Any], says: str
) -> None:
    found, csrf, log = client
    reply = _post(found, csrf, f"/api/sessions/s/{action}", body)
    assert reply.status_code == 400, reply.text
    assert says in reply.json()["error"]
    assert log.head("s") == 5
    assert log.head("f") == 0


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/api/sessions/s/tail", {"last-event-id": HUGE}),
        (f"/api/sessions?limit={HUGE}", {}),
        (f"/api/sessions/s/events?limit={HUGE}", {}),
        (f"/api/stores/sessions?limit={HUGE}", {}),
        (f"/api/stores/checkpoints?limit={HUGE}", {}),
        ("/static/%00.js", {}),
        ("/static/..%2Fapp.py", {}),
    ],
)
def test_malformed_requests_are_4xx_with_a_message(
    client: tuple[TestClient, str, Any], path: str, headers: dict[str, str]
) -> None:
    found, _, _ = client
    reply = found.get(path, headers=headers)
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text[:200])
    assert reply.json()["error"]


def test_an_events_page_ends_at_its_byte_budget_with_a_cursor(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [{"type": "user", "content": f"{n}:" + "x" * 1000} for n in range(12)]
    sqlite_store.writer().append("s", events)
    monkeypatch.setattr(source_module, "PAGE_BYTES", 3500)  # three events a page
    with TestClient(create_app(sqlite_store.source()), base_url="http://127.0.0.1") as found:
        page = found.get("/api/sessions/s/events", params={"after": 0}).json()
        assert [e["seq"] for e in page["events"]] == [1, 2, 3]
        assert page["next_after"] == 3
        seen, after = [], 0
        while after is not None:  # following the cursor gives each event once
            page = found.get("/api/sessions/s/events", params={"after": after}).json()
            seen += page["events"]
            after = page["next_after"]
        assert [e["event"] for e in seen] == events
        # The last page (no after): cut short too, and its cursor reaches the head.
        last = found.get("/api/sessions/s/events", params={"limit": 5}).json()
        assert [e["seq"] for e in last["events"]] == [8, 9, 10]
        assert last["next_after"] == 10
        # One event larger than the budget still makes a page of its own.
        monkeypatch.setattr(source_module, "PAGE_BYTES", 10)
        one = found.get("/api/sessions/s/events", params={"after": 0, "limit": 3}).json()
        assert [e["seq"] for e in one["events"]] == [1]
        assert one["next_after"] == 1


def test_the_session_store_page_counts_items_without_loading_them(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlog.storage import SqliteStorage
    from agentlog.stores.sessions import SqliteSessionStore

    with SqliteStorage.open(sqlite_store.location) as storage:
        record = storage.sessions.create("default", "t")
        items = [{"type": "user", "content": str(n), "id": f"i{n}"} for n in range(7)]
        record = storage.sessions.append("default", "t", record.revision, items)
        storage.sessions.compact("default", "t", record.revision, 3, {"n": 3})
    source = sqlite_store.source()
    read: list[tuple[int, int]] = []
    real = SqliteSessionStore._get_items

    def spy(self: Any, ctx: Any, handle: Any, start: int, stop: int) -> Any:
        read.append((start, stop))
        return real(self, ctx, handle, start, stop)

    monkeypatch.setattr(SqliteSessionStore, "_get_items", spy)
    with TestClient(create_app(source), base_url="http://127.0.0.1") as found:
        reply = found.get("/api/stores/sessions/t").json()
    assert reply["items_after_snapshot"] == 4
    assert reply["snapshot"]["through_sequence"] == 3
    assert all(start >= stop for start, stop in read), read  # no item was read


def test_accepted_connections_have_tcp_nodelay(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    viewer = serve(sqlite_store.source())
    conn = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=10)
    try:
        for _ in range(3):  # keep-alive: the same connection each time
            conn.request("GET", "/api/config", headers=_auth(viewer))
            reply = conn.getresponse()
            assert reply.status == 200, reply.read()
            assert reply.read()
        protocols = list(viewer.server.server_state.connections)
        assert protocols
        for protocol in protocols:
            sock = protocol.transport.get_extra_info("socket")  # type: ignore[attr-defined]
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        conn.close()


def _auth(viewer: Viewer) -> dict[str, str]:
    return {"Authorization": f"Bearer {viewer.token}"}


def _open_stream(viewer: Viewer, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=10)
    conn.request("GET", path, headers=_auth(viewer))
    reply = conn.getresponse()
    assert reply.status == 200, reply.read()
    return reply


def _next_sessions(reply: http.client.HTTPResponse) -> bytes:
    """Read the stream up to its next ``sessions`` event."""
    got = b""
    while b"event: sessions" not in got:
        chunk = reply.read1(65536)
        assert chunk, "the stream ended"
        got += chunk
    return got


def test_streams_beyond_the_cap_are_503_and_a_slot_frees_on_close(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    sqlite_store.writer().append("s", [{"type": "user", "content": "hi"}])
    viewer = serve(sqlite_store.source(), max_streams=2)
    first = _open_stream(viewer, "/api/sessions/stream")
    second = _open_stream(viewer, "/api/sessions/s/tail")
    try:
        refused = get(f"{viewer.url}/api/sessions/stream?q=x")
        assert refused.status == 503
        assert "too many live streams" in refused.json()["error"]
        assert get(f"{viewer.url}/api/config").status == 200  # ordinary requests still served
    finally:
        second.close()
    assert wait_until(lambda: get(f"{viewer.url}/api/sessions/s/tail?after=9").status != 503)
    first.close()


def test_connections_beyond_the_cap_are_503(sqlite_store: Store) -> None:
    from agentlog.serve.server import server_config

    config = server_config(create_app(sqlite_store.source()), max_connections=3)
    assert config.limit_concurrency == 3
    viewer = Viewer(sqlite_store.source(), max_connections=2).__enter__()
    idle = [socket.create_connection(("127.0.0.1", viewer.port), timeout=10) for _ in range(2)]
    try:
        assert wait_until(lambda: len(viewer.server.server_state.connections) >= 2)
        reply = get(f"{viewer.url}/api/config")
        assert reply.status == 503
    finally:
        for sock in idle:
            sock.close()
        viewer.__exit__()


def test_the_connection_cap_stays_under_the_file_descriptor_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import resource

    from agentlog.serve.server import connection_limit

    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 4096))
    assert connection_limit(1000) == 256 - 64
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1 << 20, 1 << 20))
    assert connection_limit(1000) == 1000


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_half_sent_headers_time_out(sqlite_store: Store, serve: Callable[..., Viewer]) -> None:
    viewer = serve(sqlite_store.source(), header_seconds=0.3)
    silent = socket.create_connection(("127.0.0.1", viewer.port), timeout=0.5)
    partial = socket.create_connection(("127.0.0.1", viewer.port), timeout=0.5)
    keep = socket.create_connection(("127.0.0.1", viewer.port), timeout=0.5)
    try:
        partial.sendall(b"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        # A keep-alive connection whose second request stalls mid-headers.
        keep.sendall(b"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert wait_until(lambda: b"\r\n\r\n" in keep.recv(65536, socket.MSG_PEEK))
        keep.recv(65536)
        keep.sendall(b"GET /api/config HTTP/1.1\r\nHo")
        for sock in (silent, partial, keep):
            assert wait_until(lambda sock=sock: _closed_by_server(sock), timeout=15)
    finally:
        for sock in (silent, partial, keep):
            sock.close()


def test_a_complete_request_is_not_cut_by_the_header_timeout(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": "hi"}])
    viewer = serve(sqlite_store.source(), header_seconds=0.2)
    stream = _open_stream(viewer, "/api/sessions/stream")
    try:
        assert b'"s"' in _next_sessions(stream)
        time.sleep(0.5)  # past the header timeout: the stream's request was whole
        log.append("t", [{"type": "user", "content": "later"}])
        assert b'"t"' in _next_sessions(stream)
    finally:
        stream.close()


def test_identical_list_streams_share_one_poll(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    sqlite_store.writer().append("s", [{"type": "user", "content": "hi"}])
    source = sqlite_store.source()
    viewer = serve(source)
    polls = viewer.app_state().list_polls
    conns = [_open_stream(viewer, "/api/sessions/stream?q=s") for _ in range(5)]
    other = _open_stream(viewer, "/api/sessions/stream?q=t")
    try:
        assert wait_until(lambda: sum(p.subscribers for p in polls.values()) == 6)
        assert sorted(p.subscribers for p in polls.values()) == [1, 5]
        for conn in conns:  # each gets the list from the shared poll
            assert b'"s"' in _next_sessions(conn)
    finally:
        for conn in [*conns, other]:
            conn.close()
    assert wait_until(lambda: not polls)  # the last subscriber gone, its poll ends


def test_writes_stay_refused_on_a_read_only_viewer_for_an_unknown_action(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    sqlite_store.writer().append("s", [{"type": "user", "content": "hi"}])
    viewer = serve(sqlite_store.source())
    assert post(f"{viewer.url}/api/sessions/s/zap", {"to": 0}).status == 400
    assert post(f"{viewer.url}/api/sessions/s/truncate", {"to": 0}).status == 403


BIG_PAGE = r"""
import argparse, json, sys
from agentlog import SqliteCheckpointer
from agentlog.cli.serve import viewer_source
from memory_use import current_rss_bytes, mb, peak_rss_bytes

path = sys.argv[1]
with SqliteCheckpointer(path) as log:  # written first, then the peak starts from here
    for n in range(8):
        log.append("s", [{"type": "user", "content": str(n) * (20 << 20)}])
source = viewer_source(argparse.Namespace(store=path, tenant="default", schema=None,
                                          allow_writes=False))
start = mb(current_rss_bytes())

pages, after, seen = 0, None, 0
while True:
    body = json.loads(source.events("default", "s", after=after, before=None, limit=200))
    pages += 1
    seen += len(body["events"])
    after = body["next_after"]
    del body
    if after is None:
        break
source.close()
peak = mb(peak_rss_bytes())
print(json.dumps({"pages": pages, "seen": seen, "start_mb": start, "peak_mb": peak}))
"""


def test_a_page_of_large_events_stays_within_its_byte_budget(tmp_path: Any) -> None:
    # Eight 20 MB events: read as one page, they held them all (and their
    # JSON again), 300+ MB; by the budget a page holds one event at a time.
    from ..conftest import PYTHON, child_env
    from ..memory_use import run_fresh_peak

    command = [PYTHON, "-c", BIG_PAGE, str(tmp_path / "big.db")]
    run = run_fresh_peak(command, child_env(), timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["seen"] == 8
    assert result["pages"] >= 8
    assert result["peak_mb"] < 250, result


def test_a_tail_queue_holds_its_byte_budget_until_the_bytes_are_sent() -> None:
    from agentlog.serve import app

    def framed(size: int) -> Any:
        return app._Framed(b"", b"x" * size, b"")

    async def main() -> None:
        queue = app._ByteQueue(100)
        await queue.put(framed(500))  # larger than the budget, alone: it fits
        blocked = asyncio.ensure_future(queue.put(framed(10)))
        for _ in range(20):  # every other task runs; the put still waits for room
            await asyncio.sleep(0)
        assert not blocked.done() and queue.size == 500
        assert (await queue.get()).size == 500
        for _ in range(20):  # taken is not sent: the bytes still count
            await asyncio.sleep(0)
        assert not blocked.done() and queue.size == 500
        queue.sent(500)
        await asyncio.wait_for(blocked, 5)
        assert queue.size == 10 and queue.get_nowait().size == 10 and queue.empty()

    asyncio.run(main())


def test_a_tail_catches_up_in_budgeted_reads_and_keeps_every_event(
    sqlite_store: Store, serve: Callable[..., Viewer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlog.serve import app

    # A budget of about three events: the backlog is read and queued in steps.
    monkeypatch.setattr(app, "TAIL_BYTES", 3000)
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": f"{n}:" + "x" * 900} for n in range(40)])
    viewer = serve(sqlite_store.source())
    seen = []
    for event_id, kind, data in sse(f"{viewer.url}/api/sessions/s/tail"):
        assert kind == "event"
        seen.append(data["seq"])
        assert event_id is not None and event_id.startswith(f"{data['seq']}:")
        if len(seen) == 40:
            break
    assert seen == list(range(1, 41))


class _Follower:
    """A stand-in for the async checkpointer a tail follows: it hands out
    ``events`` (then waits, as a live follower does) and records, each time
    the tail asks it for one more event, how many bytes the client had
    received by then. It has no ``read_json``: the tail reads through
    ``follow_json`` alone (a backlog read of its own would fail here)."""

    def __init__(self, events: list[Any], received: list[bytes]) -> None:
        self.events = events
        self.received = received
        self.asked: list[tuple[int, int]] = []  # (event about to be read, bytes received)
        self.budget: int | None = None

    def follow_json(self, session_id: str, since_seq: int, **options: Any) -> Any:
        self.budget = options["max_bytes"]

        async def follow() -> Any:
            for event in self.events:
                self.asked.append((event.seq, sum(map(len, self.received))))
                yield event
            await asyncio.Event().wait()

        return follow()

    async def head(self, session_id: str) -> int:
        return len(self.events)


def test_a_tail_reads_no_event_while_the_last_large_one_is_unsent() -> None:
    """The byte cap, seen from the follower: with events larger than the
    queue's budget, the tail asks for event N+1 only once every byte of
    event N's SSE frame has been handed to the server, however often the
    pump gets to run while the client is slow; each write is at most a
    slice of the event (a memoryview of its stored bytes), and the bytes
    are those of one joined SSE frame per event."""
    from agentlog.events import RawEvent
    from agentlog.serve import app
    from agentlog.serve.source import event_line

    size = 3 * app._WRITE_BYTES + 5  # four writes an event
    events = [
        RawEvent(n, n - 1 or None, 1.0 + n, "user", b'{"c":"' + bytes([96 + n]) * size + b'"}')
        for n in range(1, 5)
    ]
    frames = [app._sse("event", event_line("s", e), app._event_id(e)) for e in events]
    received: list[bytes] = []
    follower = _Follower(events, received)

    async def main() -> None:
        queue = app._ByteQueue(1000)  # far below one event
        tail = app._tail(follower, "s", 0, None, app.Stopping(), queue)
        try:
            assert await tail.__anext__() == b"retry: 1000\n\n"
            while sum(map(len, received)) < len(b"".join(frames)):
                # A tail stuck for want of room would fail here, not hang.
                write = await asyncio.wait_for(tail.__anext__(), 30)
                assert len(write) <= app._WRITE_BYTES
                received.append(bytes(write))
                for _ in range(50):  # a slow client: the pump runs as far as it may
                    await asyncio.sleep(0)
        finally:
            await tail.aclose()

    asyncio.run(main())
    assert follower.budget == 1000  # the follower reads within the queue's budget
    assert b"".join(received) == b"".join(frames)
    assert [seq for seq, _ in follower.asked] == [1, 2, 3, 4]
    for seq, had in follower.asked[1:]:  # (the retry line is not counted)
        assert had >= sum(map(len, frames[: seq - 1])), (seq, had)
