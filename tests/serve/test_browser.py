"""The viewer in a real browser (Playwright driving Debian's headless Chromium):
list → session → live tail from another process, the filter, the tenant
switcher, a screenshot that is not blank, and hostile content that never runs."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import child_env
from .browser import CHROMIUM_FLAGS, distinct_rows, require_browser
from .conftest import Store, Viewer

#: A run of an agent, as a demo store holds it: a tool call answered, one
#: failed, one still pending, bookkeeping around them, and a summary. (Alike
#: in shape to test_fold's TURN, as any turn is: this one is what the viewer
#: draws, that one what the fold's exact output is checked against.)
DEMO = [
    {"type": "user", "content": "Why does the nightly build fail?"},
    {
        "type": "assistant",
        "content": [
            {"type": "text", "text": "Let me look at the last build log."},
            {"type": "tool_use", "id": "call-1", "name": "read_file", "input": {"path": "ci.log"}},
        ],
    },
    {"type": "tool_started", "tool_use_id": "call-1"},
    {"type": "tool_result", "tool_use_id": "call-1", "content": "error: test_sync timed out"},
    {
        "type": "assistant",
        "content": [
            {"type": "tool_use", "id": "call-2", "name": "run", "input": {"cmd": "pytest -k sync"}}
        ],
    },
    {"type": "permission_decision", "tool_use_id": "call-2", "decision": "allow"},
    {"type": "tool_result", "tool_use_id": "call-2", "content": "1 failed", "is_error": True},
    {"type": "summary", "content": "The sync test times out on a slow disk."},
    {
        "type": "assistant",
        "content": [
            {"type": "text", "text": "I will raise the timeout and re-run."},
            {"type": "tool_use", "id": "call-3", "name": "edit", "input": {"file": "test_sync.py"}},
        ],
    },
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module, with an empty profile."""
    executable = require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver, tempfile.TemporaryDirectory() as profile:
        context = driver.chromium.launch_persistent_context(
            profile,
            executable_path=executable,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1100, "height": 800},
        )
        context.set_default_timeout(30_000)
        yield context
        context.close()


class Watched:
    """A page, with every dialog, page error and console error it raised."""

    def __init__(self, context: Any) -> None:
        self.page = context.new_page()
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on(
            "console",
            lambda message: self.errors.append(message.text) if message.type == "error" else None,
        )

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    found = Watched(browser)
    yield found
    found.page.close()


def _append_from_another_process(store: Store, session: str, content: str) -> None:
    script = (
        "import sys, agentlog\n"
        "log = agentlog.SqliteCheckpointer(sys.argv[1])\n"
        "log.append(sys.argv[2], [{'type': 'user', 'content': sys.argv[3]}])\n"
        "log.close()\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, store.location, session, content],
        check=True,
        env=child_env(),
        timeout=60,
    )


def test_list_session_live_tail_filter_and_tenants(
    sqlite_store: Store, serve: Callable[..., Viewer], watched: Watched, tmp_path: Path
) -> None:
    log = sqlite_store.writer()
    log.append("nightly-build", DEMO)
    log.set_metadata("nightly-build", {"title": "Nightly build triage", "tags": ["ci"]}, 1)
    log.append("refund-chat", [{"type": "user", "content": "Can I get a refund?"}])
    sqlite_store.writer("acme").append("acme-only", [{"type": "user", "content": "hello"}])
    sqlite_store.backdate("nightly-build", 20)  # seconds apart: a second is listed by id
    sqlite_store.backdate("refund-chat", 10)
    source = sqlite_store.source()
    source.location = "sessions.db"  # as the screenshot in the manual shows it
    viewer = serve(source)
    page = watched.page
    from playwright.sync_api import expect

    page.goto(viewer.login("/"))
    rows = page.locator("#sessions tr")
    rows.first.wait_for()
    assert rows.count() == 2
    assert rows.nth(0).get_attribute("data-id") == "refund-chat"  # most recent first

    # Live: an append from another process moves a session to the top.
    _append_from_another_process(sqlite_store, "nightly-build", "any news?")
    expect(rows.first).to_have_attribute("data-id", "nightly-build")

    # The filter, by tag.
    page.fill("#filter", "ci")
    expect(rows).to_have_count(1)
    assert rows.nth(0).get_attribute("data-id") == "nightly-build"

    # The session: paired calls, a pending one, the error, the summary marker.
    page.click("#sessions a.sid")
    page.locator("#events li.event").last.wait_for()
    assert page.locator("#events li.event").count() == len(DEMO) + 1
    assert page.locator(".call.answered").count() == 1
    assert page.locator(".call.failed").count() == 1
    assert page.locator(".call.pending").count() == 1
    assert "the context restarts here" in page.inner_text(".type-summary")
    assert page.locator("details").count() == 2  # the bookkeeping, folded
    page.locator("li[data-seq='1'] .rawbutton").click()
    assert "parent_seq 0" in page.inner_text("li[data-seq='1'] .raw")

    # The live tail: another process appends; the event appears.
    _append_from_another_process(sqlite_store, "nightly-build", "appended elsewhere")
    page.locator("li[data-seq='11']").wait_for()
    assert "appended elsewhere" in page.inner_text("li[data-seq='11']")
    assert page.locator("#bar").inner_text().count("null") == 0
    shot = page.screenshot(full_page=False)
    assert distinct_rows(shot) > 50  # not blank
    keep = os.environ.get("AGENTLOG_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(shot)

    # The tenant switcher.
    page.select_option("#tenant", "acme")
    page.wait_for_url("**/?tenant=acme")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", "acme-only")
    assert watched.dialogs == [] and watched.errors == []


def test_a_filter_searches_further_a_bounded_scan_at_a_time(
    sqlite_store: Store,
    serve: Callable[..., Viewer],
    watched: Watched,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A filter looks at SCAN_ROWS sessions a request: with none matching
    there, the page says so and "search further" looks at the next ones."""
    from playwright.sync_api import expect

    from agentlog.serve import source as source_module

    monkeypatch.setattr(source_module, "SCAN_ROWS", 2)
    sqlite_store.hide_a_needle("oldest", "the needle", [f"hay-{n}" for n in range(4)])
    viewer = serve(sqlite_store.source())
    page = watched.page
    page.goto(viewer.login("/?q=needle"))
    expect(page.locator("#status")).to_contain_text("No match among the 2 most recently")
    more = page.locator("#more")
    expect(more).to_have_text("search further")
    listing = "/api/sessions?"
    with page.expect_response(lambda reply: listing in reply.url):
        more.click()  # hay-1, hay-0: still nothing
    expect(page.locator("#sessions tr")).to_have_count(0)
    with page.expect_response(lambda reply: listing in reply.url):
        more.click()
    expect(page.locator("#sessions tr")).to_have_count(1)
    expect(page.locator("#sessions tr").first).to_have_attribute("data-id", "oldest")
    expect(more).to_be_hidden()
    assert watched.dialogs == [] and watched.errors == []


#: Ids may hold markup too: only "/", "\\", controls and the like are refused.
HOSTILE_ID = "<b onmouseover=alert(1)>x<img src=x onerror=alert(3)>"
HOSTILE = [
    "<script>alert('script')</script>",
    "<img src=x onerror=\"alert('img')\">",
    "[click](javascript:alert('link'))",
    "<a href=\"javascript:alert('a')\">a</a>",
    "\u202egnp.exe",
    "<svg onload=alert('svg')>",
]


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def test_hostile_content_never_runs_and_the_page_stays_responsive(
    sqlite_store: Store, serve: Callable[..., Viewer], watched: Watched
) -> None:
    log = sqlite_store.writer()
    events: list[dict[str, Any]] = [{"type": "user", "content": text} for text in HOSTILE]
    events.append(
        {
            "type": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "<b>x</b>",
                    "name": "<script>alert(1)</script>",
                    "input": {"q": "<img src=x onerror=alert(2)>"},
                }
            ],
        }
    )
    events.append({"type": "tool_result", "tool_use_id": "<b>x</b>", "content": HOSTILE[1]})
    events.append({"type": "user", "content": "x" * 10_000_000})  # 10 MB
    # As deep as the store accepts: the event mapping and 253 lists (see docs/serve.md).
    events.append({"type": "context_view", "deep": _deep(253)})
    log.append(HOSTILE_ID, events)
    log.set_metadata(HOSTILE_ID, {"title": HOSTILE[1], "tags": [HOSTILE[0]]}, 1)
    with pytest.raises(ValueError):  # one level deeper is refused when appended
        log.append("deeper", [{"type": "context_view", "deep": _deep(254)}])
    viewer = serve(sqlite_store.source())
    page = watched.page
    page.goto(viewer.login("/"))
    page.locator("#sessions a.sid").first.wait_for()
    assert page.inner_text("#sessions .title") == HOSTILE[1]  # shown, as text
    page.click("#sessions a.sid")
    page.locator("#events li.event").nth(len(events) - 1).wait_for()
    texts = page.locator("#events li.event .text").all_inner_texts()
    for text in HOSTILE[:4]:
        assert any(text in shown for shown in texts), text
    assert any("\u27e6U+202E\u27e7" in shown for shown in texts)  # the override, named
    assert page.locator("#events img, #events script, #events svg, #events a").count() == 0
    big = page.locator("li[data-seq='9'] .text")
    assert len(big.inner_text()) < 10_000  # cut, with "show all"
    assert "show all" in page.inner_text("li[data-seq='9']")
    page.locator("li[data-seq='10'] details summary").click()
    assert "show all" in page.inner_text("li[data-seq='10']")  # cut too
    page.locator("li[data-seq='10'] button.more").click()
    assert "bottom" in page.inner_text("li[data-seq='10']")
    assert page.evaluate("1 + 1") == 2  # responsive
    assert watched.dialogs == []
    assert watched.errors == []


def test_list_session_fork_tree_and_a_click_to_the_fork(
    sqlite_store: Store, serve: Callable[..., Viewer], watched: Watched
) -> None:
    log = sqlite_store.writer()
    log.append("trunk", DEMO)
    log.fork("trunk", 4, HOSTILE_ID)  # a fork whose id is markup
    log.fork(HOSTILE_ID, 2, "twig")
    log.append("twig", [{"type": "user", "content": "on the twig"}])
    viewer = serve(sqlite_store.source())
    page = watched.page
    from playwright.sync_api import expect

    page.goto(viewer.login("/"))
    page.locator("#sessions tr[data-id='trunk'] a.sid").click()
    tree = page.locator("#forktree")
    tree.wait_for()
    assert page.inner_text("#origin").startswith("Not a fork")
    assert HOSTILE_ID in page.inner_text("#forks")  # shown as text
    assert page.locator("#lineage img, #lineage script, #lineage b").count() == 0

    # The tree: the fork, and its own fork below it, each one click away.
    twig = tree.locator("li[data-session='twig']")
    assert twig.inner_text() == "twig forked at seq 2"
    assert "forked at seq 4" in tree.locator("li[data-session] > ul > li").first.inner_text()
    twig.locator("> a.sid").click()
    page.wait_for_url("**/session?id=twig*")
    page.locator("#forktree").wait_for()
    assert "on the twig" in page.inner_text("#events")
    origin = page.locator("#origin")
    assert HOSTILE_ID in origin.inner_text() and "seq 2" in origin.inner_text()

    # The fork point: the source, at the event the fork was made at.
    origin.locator("a.forkpoint").click()
    expect(page.locator("li.event.target")).to_have_attribute("data-seq", "2")
    page.locator("#lineage[data-ready='1']").wait_for()
    assert "trunk" in page.inner_text("#origin")
    assert watched.dialogs == [] and watched.errors == []
