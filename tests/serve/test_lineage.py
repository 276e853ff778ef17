"""The viewer's fork tree through its JSON API, on every backend: a session's
origin, its ancestors and its forks with their fork points; a deleted source;
a loop; fork-at-this-event recording lineage. (The page: test_browser.py.)"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from agentlog.serve.openapi import openapi_document

from .conftest import Store, Viewer
from .http import get, get_json, post

EVENTS = [{"type": "user", "content": str(n)} for n in range(4)]


def _tree(viewer: Viewer, session_id: str) -> Any:
    return get_json(f"{viewer.url}/api/sessions/{urllib.parse.quote(session_id, safe='')}/lineage")


def _names(nodes: list[Any]) -> list[Any]:
    """The tree's shape: ``(id, seq, shape of its forks)`` each."""
    return [(n["session_id"], n["seq"], _names(n.get("forks", []))) for n in nodes]


# Each test writes its own tree (appends and forks, alike in shape): the
# tree is what the test is about, so it is spelled out where it is checked.
def test_the_tree_names_ancestors_and_descendants_with_their_fork_points(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    log = store.writer()
    log.append("trunk", EVENTS)
    log.fork("trunk", 2, "branch <b>")
    log.append("branch <b>", EVENTS)
    log.fork("branch <b>", 5, "twig")
    log.fork("trunk", 1, "side")
    viewer = serve(store.source())

    trunk = _tree(viewer, "trunk")
    assert trunk["origin"] is None and trunk["ancestors"] == []
    assert _names(trunk["forks"]) == [("side", 1, []), ("branch <b>", 2, [("twig", 5, [])])]
    assert trunk["truncated"] is False

    branch = _tree(viewer, "branch <b>")
    assert {k: branch["origin"][k] for k in ("session_id", "seq", "exists")} == {
        "session_id": "trunk",
        "seq": 2,
        "exists": True,
    }
    assert _names(branch["ancestors"]) == [("trunk", None, [])]
    assert _names(branch["forks"]) == [("twig", 5, [])]

    twig = _tree(viewer, "twig")
    assert [(a["session_id"], a["seq"]) for a in twig["ancestors"]] == [
        ("trunk", None),
        ("branch <b>", 2),
    ]
    assert twig["origin"]["session_id"] == "branch <b>" and twig["origin"]["seq"] == 5
    assert twig["forks"] == []

    plain = get(f"{viewer.url}/api/sessions/nobody/lineage")
    assert plain.status == 404
    assert get(f"{viewer.url}/api/sessions/%2E%2E/lineage").status == 400


def test_a_deleted_source_is_named_and_a_loop_ends(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    log = sqlite_store.writer()
    viewer = serve(sqlite_store.source())
    log.append("a", EVENTS)
    log.fork("a", 3, "b")
    log.delete("a")
    b = _tree(viewer, "b")
    assert (b["origin"]["session_id"], b["origin"]["exists"]) == ("a", False)
    gone = _tree(viewer, "a")  # unknown now, but still named as a source
    assert gone["exists"] is False and _names(gone["forks"]) == [("b", 3, [])]

    log.fork("b", 1, "a")  # "a" again, as a fork of its own fork: a loop
    looped = _tree(viewer, "a")
    assert looped["origin"]["session_id"] == "b"
    assert _names(looped["ancestors"]) == [("b", None, [])]
    assert looped["truncated"] is True
    assert _names(looped["forks"]) == []  # "b" is above it already


def test_fork_at_this_event_records_lineage(
    sqlite_store: Store, serve: Callable[..., Viewer]
) -> None:
    log = sqlite_store.writer()
    log.append("s", EVENTS)
    viewer = serve(sqlite_store.source(allow_writes=True))
    csrf = get_json(f"{viewer.url}/api/config")["csrf"]
    good = {"x-agentlog-csrf": csrf, "origin": viewer.url}
    reply = post(f"{viewer.url}/api/sessions/s/fork", {"at": 2, "new_session_id": "f"}, good)
    assert reply.status == 200
    assert _tree(viewer, "f")["origin"]["session_id"] == "s"
    assert _names(_tree(viewer, "s")["forks"]) == [("f", 2, [])]
    assert tuple(log.lineage("f")) == ("s", 2)


def test_the_openapi_document_lists_the_lineage_path() -> None:
    paths = openapi_document()["paths"]
    assert "get" in paths["/api/sessions/{session_id}/lineage"]


def test_an_empty_fork_is_in_the_tree_and_has_its_own(
    store: Store, serve: Callable[..., Viewer]
) -> None:
    # A fork at seq 0 holds no event (and, on a file store, no revision):
    # its recorded origin is what says it exists.
    log = store.writer()
    log.append("trunk", EVENTS)
    log.fork("trunk", 0, "empty")
    viewer = serve(store.source())
    empty = _tree(viewer, "empty")
    assert empty["exists"] is True and empty["head"] == 0
    assert empty["origin"]["session_id"] == "trunk" and empty["origin"]["seq"] == 0
    trunk = _tree(viewer, "trunk")
    assert [(n["session_id"], n["seq"], n["exists"]) for n in trunk["forks"]] == [
        ("empty", 0, True)
    ]
