"""The events API and the live tail pass each event's stored JSON on as it is:
the bytes in the response are the stored bytes; bytes that hold a line break
(never written by agentlog's encoder) still make one SSE ``data:`` line, and
bytes that do not decode end the tail with an error, never garbage. An event
larger than one write goes out in slices of its stored bytes, the stream
byte for byte what one joined frame an event would be."""

from __future__ import annotations

import sqlite3
import threading
import urllib.request
import zlib
from collections.abc import Callable
from typing import Any

from ..waiting import wait_until
from .conftest import Store, Viewer
from .http import _authorized, get, sse

EVENTS = [
    {"type": "user", "content": "a\nb \u2028 <script>alert(1)</script>"},
    {"type": "assistant", "content": [{"type": "text", "text": "ok"}]},
    {"type": "user", "content": "three"},
    {"type": "user", "content": "four"},
]


def _stored(path: str) -> list[bytes]:
    with sqlite3.connect(path) as conn:
        return [bytes(row[0]) for row in conn.execute("SELECT data FROM events ORDER BY id")]


def _forge(path: str, seq: int, data: bytes) -> None:
    """Replace event ``seq`` of session 1 behind agentlog's back, its crc made to match."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE events SET data = ?, crc = ? WHERE id = ?",
            (data, zlib.crc32(data), (1 << 32) | seq),
        )


def test_the_events_api_sends_the_stored_bytes(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    sqlite_store.writer().append("s", EVENTS)
    viewer = serve(sqlite_store.source())
    reply = get(f"{viewer.url}/api/sessions/s/events?after=0")
    assert reply.status == 200
    for data in _stored(sqlite_store.location):
        assert b'"event":' + data + b"}" in reply.body
    assert [e["event"] for e in reply.json()["events"]] == EVENTS


def test_the_tail_keeps_one_data_line_per_event_and_ends_at_damage(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    sqlite_store.writer().append("s", EVENTS)
    _forge(sqlite_store.location, 2, b'{"type":"assistant",\n"content":\r\n"two"}')
    _forge(sqlite_store.location, 3, b'{"type":"user"\n')
    viewer = serve(sqlite_store.source())
    got: list[Any] = []

    def run() -> None:
        for item in sse(f"{viewer.url}/api/sessions/s/tail"):
            got.append(item)
            if item[1] != "event":
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert wait_until(lambda: len(got) == 3)
    thread.join(30)
    seen = [(i and i.split(":")[0], k) for i, k, _ in got]
    assert seen == [("1", "event"), ("2", "event"), (None, "error")]
    assert got[0][2]["event"] == EVENTS[0]
    assert got[1][2]["event"] == {"type": "assistant", "content": "two"}
    assert "event 3" in got[2][2]["error"] and "does not decode" in got[2][2]["error"]


def test_the_tail_sends_a_large_event_in_slices_byte_for_byte(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    from agentlog.serve import app
    from agentlog.serve.source import event_line

    big = {"type": "user", "content": "y" * (3 * app._WRITE_BYTES + 17)}
    log = sqlite_store.writer()
    log.append("s", [EVENTS[1], big, EVENTS[2]])
    frames = b"".join(
        app._sse("event", event_line("s", e), app._event_id(e)) for e in log.read_json("s")
    )
    viewer = serve(sqlite_store.source())
    url = f"{viewer.url}/api/sessions/s/tail"
    request = urllib.request.Request(url, headers=_authorized(url, None, True))
    with urllib.request.urlopen(request, timeout=30) as response:
        got = response.read(len(b"retry: 1000\n\n") + len(frames))
    assert got == b"retry: 1000\n\n" + frames
