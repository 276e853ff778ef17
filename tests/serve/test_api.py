"""The viewer's JSON API on every backend: sessions paged by activity, events
paged from the end, the live tail (with Last-Event-ID), and read-only."""

from __future__ import annotations

import base64
import http.client
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from agentlog.serve import app as app_module
from agentlog.serve import source as source_module

from ..conftest import child_env
from ..waiting import wait_until
from .conftest import Store, Viewer
from .http import get, get_json, post, sse

CALL = {
    "type": "assistant",
    "content": [
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}},
    ],
}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def test_sessions_most_recent_first_paged_by_cursor(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    log = store.writer()
    for n in range(7):
        log.append(f"s{n}", [{"type": "user", "content": f"hello {n}"}])
    log.set_metadata("s3", {"title": "Refund request", "tags": ["billing"]}, 1)
    for n in range(7):  # s0 the least recently active, a second apart
        store.backdate(f"s{n}", 10 - n)
    log = store.writer()
    log.append("s1", [{"type": "user", "content": "again"}])
    viewer = serve(store.source())
    seen: list[str] = []
    cursor = ""
    while True:
        page = get_json(f"{viewer.url}/api/sessions?limit=3&cursor={cursor}")
        assert len(page["sessions"]) <= 3
        seen += [s["id"] for s in page["sessions"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    # the last append moved s1 to the top; each once, most recently active first
    assert seen == ["s1", "s6", "s5", "s4", "s3", "s2", "s0"]
    found = get_json(f"{viewer.url}/api/sessions?q=BILL")["sessions"]
    assert [(s["id"], s["title"], s["tags"]) for s in found] == [
        ("s3", "Refund request", ["billing"])
    ]
    assert [s["id"] for s in get_json(f"{viewer.url}/api/sessions?q=s6")["sessions"]] == ["s6"]


def test_a_filter_looks_at_a_bounded_number_of_sessions(
    store: Store, serve: Callable[..., Viewer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that matches only the oldest session answers each request
    after looking at SCAN_ROWS sessions, with a cursor that looks further."""
    monkeypatch.setattr(source_module, "SCAN_ROWS", 4)
    store.hide_a_needle("old", "a Needle", [f"s{n}" for n in range(10)])
    viewer = serve(store.source())
    found: list[str] = []
    requests, cursor = 0, ""
    while True:
        page = get_json(f"{viewer.url}/api/sessions?q=needle&limit=5&cursor={cursor}")
        requests += 1
        assert page["scanned"] <= 4
        found += [s["id"] for s in page["sessions"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert found == ["old"]
    assert requests == 3  # 11 sessions, 4 looked at a request
    everything = get_json(f"{viewer.url}/api/sessions?limit=20")
    assert everything["next_cursor"] is None and len(everything["sessions"]) == 11


def test_a_cursor_the_api_did_not_give_is_a_400(store: Store, serve: Callable[..., Viewer]) -> None:
    store.writer().append("s", [{"type": "user", "content": "x"}])
    viewer = serve(store.source())
    for raw in [b"[1,2]", b'{"a":1}', b'[NaN,"a"]', b'"x"', b'[1.0,"a","b"]', b"[]", b"7"]:
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        reply = get(f"{viewer.url}/api/sessions?cursor={cursor}")
        assert reply.status == 400, raw
        assert reply.json() == {"error": "cursor is not one this API gave out"}
    # A cursor is a plain (mtime, id): one made by hand pages like one given out.
    cursor = base64.urlsafe_b64encode(b'[1e12,"z"]').decode().rstrip("=")
    assert [
        s["id"] for s in get_json(f"{viewer.url}/api/sessions?cursor={cursor}")["sessions"]
    ] == ["s"]


def test_events_open_at_the_end_and_page_back(store: Store, serve: Callable[..., Viewer]) -> None:
    log = store.writer()
    log.append("long", [{"type": "user", "content": str(n)} for n in range(1, 451)])
    viewer = serve(store.source())
    last = get_json(f"{viewer.url}/api/sessions/long/events")
    assert last["head"] == 450
    assert [e["seq"] for e in last["events"]] == list(range(251, 451))
    assert last["events"][-1] == {
        "seq": 450,
        "parent_seq": 449,
        "ts": last["events"][-1]["ts"],
        "type": "user",
        "event": {"type": "user", "content": "450"},
    }
    before = get_json(f"{viewer.url}/api/sessions/long/events?before=251&limit=200")
    assert [e["seq"] for e in before["events"]] == list(range(51, 251))
    first = get_json(f"{viewer.url}/api/sessions/long/events?before=51")
    assert [e["seq"] for e in first["events"]] == list(range(1, 51))
    after = get_json(f"{viewer.url}/api/sessions/long/events?after=448")
    assert [e["seq"] for e in after["events"]] == [449, 450]
    info = get_json(f"{viewer.url}/api/sessions/long")
    assert (info["id"], info["head"]) == ("long", 450)


def test_unknown_and_bad_ids_are_refused_cleanly(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    store.writer().append("s", [{"type": "user", "content": "x"}])
    viewer = serve(store.source())
    assert get(f"{viewer.url}/api/sessions/nope").status == 404
    for bad in ["..", "a/b", "a\x00b", "x" * 300, "\u202e"]:
        reply = get(f"{viewer.url}/api/sessions/{_q(bad)}/events")
        assert reply.status in (400, 404), bad
        assert "error" in reply.json()
    for query in ["limit=0", "limit=x", "after=-1", "before=0", "after=1&before=3", "cursor=zz"]:
        reply = get(f"{viewer.url}/api/sessions/s/events?{query}")
        if query.startswith("cursor"):
            reply = get(f"{viewer.url}/api/sessions?{query}")
        assert reply.status == 400, query


def _tail(url: str, got: list[Any], headers: dict[str, str] | None = None) -> threading.Thread:
    def run() -> None:
        for item in sse(url, headers):
            got.append(item)
            if item[1] != "event":
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_tail_streams_what_is_committed_from_another_process(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    log = store.writer()
    log.append("live", [{"type": "user", "content": "one"}])
    if store.kind == "files":
        log.close()  # a file store has one writer process: the child takes it
    viewer = serve(store.source())
    got: list[Any] = []
    _tail(f"{viewer.url}/api/sessions/live/tail", got)
    assert wait_until(lambda: len(got) == 1)
    script = (
        "import sys, agentlog\n"
        "kind, where, schema = sys.argv[1:4]\n"
        "if kind == 'sqlite': log = agentlog.SqliteCheckpointer(where)\n"
        "elif kind == 'files': log = agentlog.FileCheckpointer(where)\n"
        "else: log = agentlog.PostgresCheckpointer(where, schema=schema)\n"
        "two, three = ({'type': 'user', 'content': c} for c in ('two', 'three'))\n"
        "log.append('live', [two, three])\n"
        "log.close()\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, store.kind, store.location, store.schema or ""],
        check=True,
        env=child_env(),
        timeout=60,
    )
    assert wait_until(lambda: len(got) == 3)
    assert [(i.split(":")[0], k, d["event"]["content"]) for i, k, d in got] == [
        ("1", "event", "one"),
        ("2", "event", "two"),
        ("3", "event", "three"),
    ]


def test_a_reconnect_with_last_event_id_gets_exactly_what_it_missed(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    log = store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(1, 6)])
    viewer = serve(store.source())
    got: list[Any] = []
    _tail(f"{viewer.url}/api/sessions/s/tail", got, {"Last-Event-ID": "3"})
    assert wait_until(lambda: len(got) == 2)
    log.append("s", [{"type": "user", "content": "6"}])
    assert wait_until(lambda: len(got) == 3)
    assert [int(i.split(":")[0]) for i, _, _ in got] == [4, 5, 6]
    assert [d["seq"] for _, _, d in got] == [4, 5, 6]


def test_a_truncate_under_the_tail_is_told(store: Store, serve: Callable[..., Viewer]) -> None:
    log = store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(1, 6)])
    viewer = serve(store.source())
    got: list[Any] = []
    thread = _tail(f"{viewer.url}/api/sessions/s/tail", got)
    assert wait_until(lambda: len(got) == 5)
    log.truncate("s", 2)
    thread.join(30)
    assert got[-1][1:] == ("truncated", {"head": 2, "seq": 5, "rewritten": False})
    # A reconnect from beyond the head is told at once too.
    again: list[Any] = []
    _tail(f"{viewer.url}/api/sessions/s/tail", again, {"Last-Event-ID": got[4][0]}).join(30)
    assert again == [(None, "truncated", {"head": 2, "seq": 5, "rewritten": False})]


def test_a_truncate_then_appends_past_the_tail_are_told_on_resume(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    """Undo, then go on: append 1..5, truncate to 2, append five more. A client
    that reconnects with the id of event 5 is told, not sent 6 and 7 as if
    its 3..5 were still the session."""
    log = store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(1, 6)])
    viewer = serve(store.source())
    got: list[Any] = []
    _tail(f"{viewer.url}/api/sessions/s/tail", got)
    assert wait_until(lambda: len(got) == 5)
    last_id = got[4][0]
    assert last_id.startswith("5:")
    log.truncate("s", 2)
    log.append("s", [{"type": "user", "content": f"again {n}"} for n in range(3, 8)])
    again: list[Any] = []
    _tail(f"{viewer.url}/api/sessions/s/tail", again, {"Last-Event-ID": last_id}).join(30)
    assert again == [(None, "truncated", {"head": 7, "seq": 5, "rewritten": True})]
    # The id of event 5 as it is now resumes after it; an id without a tag
    # (an older viewer's) resumes as before.
    fresh: list[Any] = []
    tail = _tail(f"{viewer.url}/api/sessions/s/tail?after=4", fresh)
    assert wait_until(lambda: len(fresh) == 3)
    resumed: list[Any] = []
    _tail(f"{viewer.url}/api/sessions/s/tail", resumed, {"Last-Event-ID": fresh[0][0]})
    assert wait_until(lambda: len(resumed) == 2)
    assert [d["seq"] for _, _, d in resumed] == [6, 7]
    assert tail.is_alive()


def test_a_truncate_then_appends_under_a_live_tail_are_told(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    log = store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(1, 6)])
    viewer = serve(store.source())
    got: list[Any] = []
    thread = _tail(f"{viewer.url}/api/sessions/s/tail", got)
    assert wait_until(lambda: len(got) == 5)
    log.truncate("s", 2)
    log.append("s", [{"type": "user", "content": f"again {n}"} for n in range(3, 8)])
    thread.join(30)
    # Told either way: as a truncate (the tail looked between the two writes)
    # or as a rewrite (it looked after both); never sent 6 and 7 as current.
    assert got[-1][1] == "truncated", got
    assert [d["seq"] for _, kind, d in got if kind == "event"] == [1, 2, 3, 4, 5]


def test_writes_are_refused_without_allow_writes_and_the_csrf_token(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    store.writer().append("s", [{"type": "user", "content": str(n)} for n in range(3)])
    viewer = serve(store.source())
    config = get_json(f"{viewer.url}/api/config")
    assert config["allow_writes"] is False and config["csrf"] is None
    reply = post(f"{viewer.url}/api/sessions/s/truncate", {"to": 1})
    assert reply.status == 403 and "read-only" in reply.json()["error"]
    assert get_json(f"{viewer.url}/api/sessions/s")["head"] == 3


def test_fork_and_truncate_with_allow_writes(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(5)])
    viewer = serve(sqlite_store.source(allow_writes=True))
    csrf = get_json(f"{viewer.url}/api/config")["csrf"]
    url = f"{viewer.url}/api/sessions/s"
    for headers in [{}, {"x-agentlog-csrf": "wrong"}]:
        assert post(f"{url}/truncate", {"to": 1}, headers).status == 403
    cross = {"x-agentlog-csrf": csrf, "origin": "http://evil.example"}
    assert post(f"{url}/truncate", {"to": 1}, cross).status == 403
    assert log.head("s") == 5
    good = {"x-agentlog-csrf": csrf, "origin": viewer.url}
    assert post(f"{url}/fork", {"at": 2, "new_session_id": "f"}, good).json()["head"] == 2
    assert post(f"{url}/truncate", {"to": 3}, good).json()["head"] == 3
    assert (log.head("s"), log.head("f")) == (3, 2)
    assert post(f"{url}/truncate", {"to": "3"}, good).status == 400
    assert post(f"{url}/fork", {"at": 1, "new_session_id": "../x"}, good).status == 400
    assert post(f"{url}/delete", {}, good).status == 400


def test_the_viewer_opens_the_store_read_only(sqlite_store: Store) -> None:
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": "x"}])
    source = sqlite_store.source()
    try:
        viewed = source.log("default")
        with pytest.raises(Exception, match=r"read-only|readonly|read only"):
            viewed.append("s", [{"type": "user", "content": "y"}])
    finally:
        source.close()
    assert log.head("s") == 1


def test_tenants_are_listed_and_switched(sqlite_store: Store, serve: Callable[..., Viewer]) -> None:
    sqlite_store.writer().append("mine", [{"type": "user", "content": "x"}])
    sqlite_store.writer("acme").append("theirs", [{"type": "user", "content": "y"}])
    viewer = serve(sqlite_store.source())
    assert get_json(f"{viewer.url}/api/config")["tenants"] == ["acme", "default"]
    ids = [s["id"] for s in get_json(f"{viewer.url}/api/sessions?tenant=acme")["sessions"]]
    assert ids == ["theirs"]
    events = get_json(f"{viewer.url}/api/sessions/theirs/events?tenant=acme")["events"]
    assert [e["event"]["content"] for e in events] == ["y"]
    assert get(f"{viewer.url}/api/sessions/theirs").status == 404


def test_the_live_sessions_stream_moves_an_appended_session_up(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    log = store.writer()
    log.append("old", [{"type": "user", "content": "x"}])
    log.append("new", [{"type": "user", "content": "x"}])
    store.backdate("old", 20)  # seconds apart: by id, "old" would come first
    store.backdate("new", 10)
    log = store.writer()
    viewer = serve(store.source())
    pages: list[list[str]] = []

    def run() -> None:
        for _, kind, data in sse(f"{viewer.url}/api/sessions/stream"):
            assert kind == "sessions"
            pages.append([s["id"] for s in data["sessions"]])
            if len(pages) == 3:
                return

    threading.Thread(target=run, daemon=True).start()
    assert wait_until(lambda: len(pages) == 1)
    assert pages[0] == ["new", "old"]
    log.append("old", [{"type": "user", "content": "y"}])
    assert wait_until(lambda: len(pages) == 2)
    assert pages[1] == ["old", "new"]
    log.append("third", [{"type": "user", "content": "z"}])
    assert wait_until(lambda: len(pages) == 3)
    assert pages[2] == ["third", "old", "new"]


def test_pages_and_scripts_are_served_with_the_security_headers(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    sqlite_store.writer().append("s", [CALL, RESULT])
    viewer = serve(sqlite_store.source())
    for path, kind in [
        ("/", "text/html"),
        ("/session?id=s", "text/html"),
        ("/health", "text/html"),
        ("/stores", "text/html"),
        ("/static/common.js", "text/javascript"),
        ("/static/app.css", "text/css"),
        ("/api/sessions", "application/json"),
    ]:
        reply = get(viewer.url + path)
        assert reply.status == 200, path
        assert reply.headers["content-type"].startswith(kind)
        assert reply.headers["x-content-type-options"] == "nosniff"
        csp = reply.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    for page in ["/", "/session"]:
        assert b"<script>" not in get(viewer.url + page).body  # no inline script
    assert get(viewer.url + "/static/../app.py").status == 404
    assert get(viewer.url + "/static/page.html").status == 404


def test_health_reports_engine_check_and_stats(store: Store, serve: Callable[..., Viewer]) -> None:
    store.writer().append("s", [{"type": "user", "content": "x"}])
    viewer = serve(store.source())
    quick = get_json(f"{viewer.url}/api/health")
    assert quick["check"] == {"deep": False, "ok": True, "detail": quick["check"]["detail"]}
    deep = get_json(f"{viewer.url}/api/health?deep=1")
    assert deep["check"]["deep"] is True and deep["check"]["ok"] is True
    if store.kind == "files":
        assert deep["stats"] is None
    else:
        assert deep["stats"]["sessions"] == 1


def test_an_idle_tail_loses_nothing_after_its_heartbeats(
    sqlite_store: Store, serve: Callable[..., Viewer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_module, "HEARTBEAT_SECONDS", 0.05)
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": "0"}])
    viewer = serve(sqlite_store.source())
    connection = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
    connection.request(
        "GET", "/api/sessions/s/tail?after=1", headers={"Authorization": f"Bearer {viewer.token}"}
    )
    response = connection.getresponse()
    try:
        assert response.status == 200
        beats = 0
        while beats < 3:  # idle: only heartbeats come
            line = response.fp.readline()
            assert line, "the tail ended"
            beats += line.startswith(b": keep-alive")
        log.append("s", [{"type": "user", "content": str(n)} for n in (1, 2, 3)])
        seqs: list[int] = []
        beats = 0
        while len(seqs) < 3:
            line = response.fp.readline()
            assert line, "the tail ended"
            beats += line.startswith(b": keep-alive")
            assert beats < 400, f"only {seqs} came in 20 s of heartbeats"
            if line.startswith(b"id: "):
                seqs.append(int(line[4:].split(b":")[0]))
        assert seqs == [2, 3, 4]
    finally:
        connection.close()
