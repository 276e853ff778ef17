"""The stores page and the health page in a real browser (the same headless
Chromium as test_browser.py): each store filled through the public API, each
page opened, what it shows asserted; an artifact downloaded is its bytes and
its sha256, a hostile name and media type only ever an attachment."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog import SqliteStorage

from .conftest import Store, Viewer, make_store
from .test_browser import Watched, browser, watched

__all__ = ["browser", "watched"]  # the fixtures, shared with test_browser.py

#: An artifact whose name, media type and bytes would run if they were rendered.
HOSTILE_NAME = '<img src=x onerror=alert(1)>"; filename=evil.html'
HOSTILE_BODY = b"<script>alert('artifact')</script>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(2)"></svg>'


def _fill(location: str) -> None:
    with SqliteStorage.open(location) as storage:
        effects = [
            {"id": "e1", "kind": "email", "state": "started"},
            {"id": "e2", "kind": "charge", "state": "succeeded"},
        ]
        question = {"question": "<script>approve?</script>"}
        run: dict[str, Any] = {"session_id": "s", "interruption": question, "side_effects": effects}
        storage.checkpoints.save("default", "run-1", None, status="interrupted", state={}, **run)
        storage.checkpoints.save("default", "run-2", None, status="completed", state={})
        storage.memory.put("default", "prefs", "tone", {"formal": True}, None)
        storage.memory.put("default", "prefs", "name", "<b>Ada</b>", None)
        storage.memory.put("default", "prefs", "name", "Ada", 0)
        storage.artifacts.put("default", HOSTILE_NAME, HOSTILE_BODY, "text/html", None)
        storage.artifacts.put("default", "pic.svg", SVG, "image/svg+xml", None)
        record = storage.sessions.create("default", "chat")
        items = [{"type": "user", "content": "hi", "id": "i1"}]
        record = storage.sessions.append("default", "chat", record.revision, items)
        record = storage.sessions.compact(
            "default", "chat", record.revision, 1, {"summary": "<i>greeted</i>"}
        )
        more = [{"type": "user", "content": "and then", "id": "i2"}]
        storage.sessions.append("default", "chat", record.revision, more)


def _cells(page: Any) -> list[list[str]]:
    rows = page.locator("#store tbody tr")
    return [rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())]


def _tab(page: Any, name: str, key: str | None = None) -> None:
    """Choose a tab (and a key), and wait until the page shows that view: the
    rows of the tab before it are never read as this one's."""
    from playwright.sync_api import expect

    page.click(f"button[data-view='{name}']")
    if key is not None:
        page.fill("#key", key)
        page.press("#key", "Enter")
    shown = f"{name}:{key or ''}"
    expect(page.locator("#store")).to_have_attribute("data-shown", shown)


def test_a_slow_answer_for_a_tab_left_behind_never_paints_over_the_tab_chosen(
    sqlite_store: Store, serve: Callable[..., Viewer], watched: Watched
) -> None:
    """The first tab's answer is held back until another tab is shown; when
    it arrives, the page stays on the tab the user chose."""
    from playwright.sync_api import expect

    _fill(sqlite_store.location)
    viewer = serve(sqlite_store.source())
    page = watched.page
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    page.route("**/api/stores/checkpoints*", hold)
    page.goto(viewer.login("/stores"))  # the checkpoints tab asks first
    for _ in range(300):  # until the page has asked (30 s at most)
        if held:
            break
        page.wait_for_timeout(100)
    assert len(held) == 1
    _tab(page, "artifacts")
    expect(page.locator("#store tbody tr")).to_have_count(2)
    with page.expect_response("**/api/stores/checkpoints*") as answered:
        held[0].continue_()
    answered.value.finished()
    page.evaluate("() => new Promise((done) => setTimeout(done, 200))")  # its tasks run
    expect(page.locator("#store")).to_have_attribute("data-shown", "artifacts:")
    assert {row[0] for row in _cells(page)} == {HOSTILE_NAME, "pic.svg"}
    assert watched.errors == []


def test_the_stores_page_shows_each_store(
    sqlite_store: Store, serve: Callable[..., Viewer], watched: Watched, tmp_path: Path
) -> None:
    _fill(sqlite_store.location)
    viewer = serve(sqlite_store.source())
    page = watched.page
    from playwright.sync_api import expect

    page.goto(viewer.login("/stores"))
    expect(page.locator("#store")).to_have_attribute("data-shown", "checkpoints:")
    expect(page.locator("#store tbody tr")).to_have_count(2)
    runs = {row[0]: row for row in _cells(page)}
    assert runs["run-1"][1:3] == ["interrupted", "s"]
    assert "<script>approve?</script>" in runs["run-1"][3]  # shown as text
    assert page.locator("#store li.effect-started").inner_text() == "email e1: started"
    assert page.locator("#store li.effect-succeeded").inner_text() == "charge e2: succeeded"
    assert runs["run-2"][1] == "completed"
    _tab(page, "checkpoints", "nobody")
    expect(page.locator("#store tbody tr")).to_have_count(0)

    _tab(page, "memory")
    expect(page.locator("#store")).to_contain_text("Name a namespace")
    _tab(page, "memory", "prefs")
    expect(page.locator("#store tbody tr")).to_have_count(2)
    memory = {row[0]: row for row in _cells(page)}
    assert memory["name"][1:3] == ['"Ada"', "1"]
    assert memory["tone"][2] == "0" and '"formal": true' in memory["tone"][1]

    _tab(page, "artifacts")
    expect(page.locator("#store tbody tr")).to_have_count(2)
    artifacts = {row[0]: row for row in _cells(page)}
    assert artifacts[HOSTILE_NAME][1:4] == [
        "text/html",
        str(len(HOSTILE_BODY)),
        hashlib.sha256(HOSTILE_BODY).hexdigest(),
    ]
    saved_as = {HOSTILE_NAME: "img_src_x_onerror_alert_1_filename_evil.html", "pic.svg": "pic.svg"}
    for name, body in [(HOSTILE_NAME, HOSTILE_BODY), ("pic.svg", SVG)]:
        link = page.locator("#store tbody tr", has_text=name).locator("a")
        with page.expect_download() as caught:
            link.click()
        download = caught.value
        saved = Path(download.path()).read_bytes()
        assert saved == body
        assert hashlib.sha256(saved).hexdigest() == artifacts[name][3]
        assert download.suggested_filename == saved_as[name]  # no quote, no path
    assert page.url.endswith("/stores")  # saved, never opened in the page

    _tab(page, "sessions")
    expect(page.locator("#store tbody tr")).to_have_count(1)
    assert _cells(page)[0][:4] == ["chat", "2", "1", "3"]
    page.click("#store button.open")
    expect(page.locator("#snapshot")).to_contain_text("<i>greeted</i>")
    assert "snapshot through item 1 · 1 items after it" in page.inner_text("#snapshot")
    assert page.locator("#store img, #store script, #store svg, #store i").count() == 0
    assert watched.dialogs == [] and watched.errors == []


def test_the_health_page_runs_both_checks(
    sqlite_store: Store, serve: Callable[..., Viewer], watched: Watched
) -> None:
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": f"m {i}"} for i in range(1, 6)])
    log.close()
    with sqlite3.connect(sqlite_store.location) as conn:  # damage behind agentlog's back
        conn.execute("UPDATE events SET data = ? WHERE id = ?", (b'{"type":"user"}', (1 << 32) | 3))
    viewer = serve(sqlite_store.source())
    page = watched.page
    from playwright.sync_api import expect

    from agentlog import engine_info
    from agentlog.engine.schema import SCHEMA_VERSION

    page.goto(viewer.login("/health"))
    expect(page.locator("#check")).to_have_class("ok")
    text = page.inner_text("#health")
    assert f"engine {engine_info()['engine']}" in text
    assert f"SQLite {engine_info()['sqlite_version']}" in text and "store sqlite" in text
    assert page.inner_text("#schema") == str(SCHEMA_VERSION)
    assert "check --deep" not in page.inner_text("#health h2 >> nth=1")
    assert '"sessions": 1' in text and '"events": 5' in text  # stats
    page.click("#deep")
    expect(page.locator("#health h2 >> nth=1")).to_have_text("check --deep")
    expect(page.locator("#check")).to_have_class("error")
    assert "session 's'" in page.inner_text("#check") and "event 3" in page.inner_text("#check")
    assert watched.dialogs == [] and watched.errors == []


def test_a_file_store_has_health_but_no_stores(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    serve: Callable[..., Viewer],
    watched: Watched,
) -> None:
    store = next(make_store("files", tmp_path, request))
    store.writer().append("s", [{"type": "user", "content": "one"}])
    viewer = serve(store.source())
    page = watched.page
    from playwright.sync_api import expect

    page.goto(viewer.login("/health"))
    expect(page.locator("#check")).to_have_class("ok")
    assert "store files" in page.inner_text("#health")
    assert page.locator("#schema").count() == 0
    assert "a file store keeps no statistics" in page.inner_text("#health")
    assert page.locator("#bar nav a", has_text="Stores").count() == 0
    page.click("#deep")
    expect(page.locator("#health h2 >> nth=1")).to_have_text("check --deep")
    expect(page.locator("#check")).to_have_class("ok")
    assert watched.dialogs == [] and watched.errors == []
