"""The stores page's API: checkpoints with side effects, memory, artifacts
(downloaded as attachments, never rendered) and SessionStore snapshots."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from agentlog import SqliteStorage

from .conftest import Store, Viewer, make_store
from .http import get, get_json

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"></svg>'


@pytest.fixture
def filled(sqlite_store: Store) -> Store:
    with SqliteStorage.open(sqlite_store.location) as storage:
        storage.checkpoints.save(
            "default",
            "run-1",
            None,
            status="interrupted",
            state={"step": 2},
            session_id="s",
            interruption={"question": "<script>approve?</script>"},
            side_effects=[{"id": "e1", "kind": "email", "state": "started"}],
        )
        storage.memory.put("default", "prefs", "tone", {"formal": True}, None)
        storage.artifacts.put("default", "pic.svg", SVG, "image/svg+xml", None)
        storage.artifacts.put("default", "page.html", b"<script>x</script>", "text/html", None)
        record = storage.sessions.create("default", "chat")
        item = {"type": "user", "content": "hi", "id": "i1"}
        record = storage.sessions.append("default", "chat", record.revision, [item])
        storage.sessions.compact("default", "chat", record.revision, 1, {"summary": "greeted"})
    return sqlite_store


def test_checkpoints_memory_and_snapshots(filled: Store, serve: Callable[..., Viewer]) -> None:
    viewer = serve(filled.source())
    runs = get_json(f"{viewer.url}/api/stores/checkpoints?session_id=s")["checkpoints"]
    assert [(r["run_id"], r["status"]) for r in runs] == [("run-1", "interrupted")]
    assert runs[0]["side_effects"][0]["state"] == "started"
    assert runs[0]["interruption"] == {"question": "<script>approve?</script>"}
    records = get_json(f"{viewer.url}/api/stores/memory?namespace=prefs")["records"]
    assert [(r["key"], r["value"], r["revision"]) for r in records] == [
        ("tone", {"formal": True}, 0)
    ]
    assert get(f"{viewer.url}/api/stores/memory").status == 400  # a namespace is needed
    sessions = get_json(f"{viewer.url}/api/stores/sessions")["sessions"]
    assert [(s["session_id"], s["snapshot_through"]) for s in sessions] == [("chat", 1)]
    loaded = get_json(f"{viewer.url}/api/stores/sessions/chat")
    assert loaded["snapshot"]["state"] == {"summary": "greeted"}
    assert get(f"{viewer.url}/api/stores/sessions/nope").status == 404


def test_artifacts_download_as_attachments_verified(
    filled: Store, serve: Callable[..., Viewer]
) -> None:
    viewer = serve(filled.source())
    listed = get_json(f"{viewer.url}/api/stores/artifacts")["artifacts"]
    assert sorted(a["artifact_id"] for a in listed) == ["page.html", "pic.svg"]
    for name, body in [("pic.svg", SVG), ("page.html", b"<script>x</script>")]:
        reply = get(f"{viewer.url}/api/stores/artifacts/{name}/download")
        assert reply.status == 200
        assert reply.body == body
        assert reply.headers["content-type"] == "application/octet-stream"
        assert reply.headers["content-disposition"].startswith("attachment")
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["x-agentlog-sha256"] == hashlib.sha256(body).hexdigest()
    assert get(f"{viewer.url}/api/stores/artifacts/nope/download").status == 404


def test_a_file_store_has_no_stores(
    request: pytest.FixtureRequest, tmp_path: Path, serve: Callable[..., Viewer]
) -> None:
    store = next(make_store("files", tmp_path, request))
    viewer = serve(store.source())
    assert get_json(f"{viewer.url}/api/config")["has_stores"] is False
    assert get(f"{viewer.url}/api/stores/artifacts").status == 400
