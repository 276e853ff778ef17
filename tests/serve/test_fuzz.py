"""The API fuzzed against its own OpenAPI document: whatever a caller sends
to the paths it lists, the answer is never a 500 (hypothesis drives it),
on a viewer with --allow-writes (fork and truncate bodies of every shape)
and on a read-only one, whose store file is byte for byte the same after.
Derandomized and bounded: the same examples each run, in a few seconds."""

from __future__ import annotations

import hashlib
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("httpx")  # Starlette's test client

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from starlette.routing import Route  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from agentlog.serve import create_app  # noqa: E402
from agentlog.serve.openapi import openapi_document  # noqa: E402

from .conftest import Store, guarded_client  # noqa: E402

#: Streams that never end on their own: fuzzed for their refusals only (a
#: request they accept would hold the test open), in test_api.
STREAMS = ("/tail", "/stream")

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
#: Seqs around the edges: negative, the head, past it, 2**63 and 2**64 - 1.
SEQ = st.one_of(st.integers(-3, 8), st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, -(2**64)]))
#: Bodies: the write routes' own shapes (fork, truncate) with odd values, or anything.
BODY = st.one_of(
    st.none(),
    st.fixed_dictionaries({"at": SEQ, "new_session_id": st.one_of(st.just("s"), TEXT)}),
    st.fixed_dictionaries({"to": st.one_of(SEQ, TEXT, st.booleans())}),
    st.dictionaries(TEXT, st.integers() | TEXT, max_size=3),
)


def _value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """Values for a parameter: mostly of its schema's kind, sometimes anything."""
    if schema.get("type") == "integer":
        typed = st.integers(schema.get("minimum", -(10**20)) - 2, schema.get("maximum", 10**20) + 2)
        return st.one_of(typed.map(str), TEXT)
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), TEXT)
    return TEXT


def _requests() -> st.SearchStrategy[tuple[str, str, str, dict[str, str]]]:
    choices = []
    for path, item in openapi_document()["paths"].items():
        for method, operation in item.items():
            if any(path.endswith(end) for end in STREAMS):
                continue
            params = operation.get("parameters", [])
            path_params = {
                p["name"]: st.one_of(st.just("s"), TEXT.filter(bool))
                for p in params
                if p["in"] == "path"
            }
            if "action" in path_params:
                path_params["action"] = st.one_of(
                    st.sampled_from(["fork", "truncate", "x", "Fork"]), TEXT.filter(bool)
                )
            query = {p["name"]: _value(p["schema"]) for p in params if p["in"] == "query"}
            choices.append(
                st.tuples(
                    st.just(method),
                    st.just(path),
                    st.fixed_dictionaries(path_params),
                    st.fixed_dictionaries({}, optional=query),
                    BODY,
                ).map(_build)
            )
    return st.one_of(choices)


def _build(parts: tuple[Any, ...]) -> tuple[str, str, str, dict[str, str]]:
    method, path, path_params, query, body = parts
    for name, value in path_params.items():
        path = path.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
    return method, path, urllib.parse.urlencode(query), body


def _fuzz(client: TestClient, csrf: str | None, examples: int) -> None:
    """Send ``examples`` requests the document describes; none may be a 500."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(_requests())
    def check(request: tuple[str, str, str, Any]) -> None:
        method, path, query, body = request
        url = path + ("?" + query if query else "")
        if method == "get":
            reply = client.get(url)
        else:
            headers = {} if csrf is None else {"x-agentlog-csrf": csrf}
            reply = client.post(url, json=body, headers=headers)
        assert reply.status_code < 500, (method, url, body, reply.status_code, reply.text[:300])
        if path.startswith("/api/") and "/download" not in path:
            assert reply.headers["content-type"].startswith("application/json"), url
            assert reply.headers["x-content-type-options"] == "nosniff"

    check()


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_no_request_the_document_describes_is_a_500(sqlite_store: Store) -> None:
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(5)])
    source = sqlite_store.source(allow_writes=True)
    with guarded_client(source) as client:
        _fuzz(client, client.get("/api/config").json()["csrf"], 400)


def test_fuzzing_a_read_only_viewer_changes_nothing_stored(sqlite_store: Store) -> None:
    log = sqlite_store.writer()
    log.append("s", [{"type": "user", "content": str(n)} for n in range(5)])
    log.set_metadata("m", {"title": "t", "tags": ["a"]}, 0)
    log.close()
    before = _digest(sqlite_store.location)
    source = sqlite_store.source()
    with guarded_client(source) as client:
        _fuzz(client, None, 300)
    assert _digest(sqlite_store.location) == before


def test_the_document_names_every_api_route(sqlite_store: Store) -> None:
    # Other tools read the API by its document: a route left out of it is
    # one they cannot find (and one the fuzzing above never reaches).
    app = create_app(sqlite_store.source())
    served = {
        route.path.replace("{action:str}", "{action}")
        for route in app.routes
        if isinstance(route, Route) and route.path.startswith("/api/")
    }
    documented = set(openapi_document()["paths"])
    assert served - {"/api/openapi.json"} == documented
