"""The OpenAPI document of the viewer's JSON API (written out, so it says what is meant)."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..events import MAX_POSITION
from .source import MAX_PAGE, SCAN_ROWS

__all__ = ["openapi_document"]

_ERROR = {
    "description": "refused",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"error": {"type": "string"}},
                "required": ["error"],
            }
        }
    },
}
_JSON_OBJECT = {"content": {"application/json": {"schema": {"type": "object"}}}}
_SSE = {"content": {"text/event-stream": {"schema": {"type": "string"}}}}


def _query(name: str, schema: dict[str, Any], text: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": text}


def _path(name: str, text: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        "description": text,
    }


_TENANT = _query(
    "tenant", {"type": "string", "maxLength": 255}, "the tenant (default: the one shown)"
)
_LIMIT = _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, "page size")
_SEQ = {"type": "integer", "minimum": 0, "maximum": MAX_POSITION}
_SESSION = _path("session_id", "the session id")


def _get(
    summary: str,
    params: list[dict[str, Any]],
    ok: dict[str, Any] = _JSON_OBJECT,
    *,
    missing: bool = True,
) -> Any:
    """A GET; ``missing=False`` where an unknown name is not a 404 (a session
    that does not exist yet has no events, and its tail waits for them)."""
    responses: dict[str, Any] = {"200": {"description": "found", **ok}, "400": _ERROR}
    if missing:
        responses["404"] = _ERROR
    return {"get": {"summary": summary, "parameters": params, "responses": responses}}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.0 document of ``/api``."""
    after = _query("after", {"type": "string"}, "the key to list after")
    paths: dict[str, Any] = {
        "/api/config": _get("the store, its tenants, and whether writes are allowed", []),
        "/api/sessions": _get(
            "a page of sessions, most recently active first",
            [
                _TENANT,
                _LIMIT,
                _query("cursor", {"type": "string"}, "next_cursor of the page before"),
                _query(
                    "q",
                    {"type": "string"},
                    "keep sessions whose id, title or a tag holds it (one request looks at"
                    f" {SCAN_ROWS} sessions at most: a page may hold fewer matches, even"
                    " none, and a next_cursor that looks further)",
                ),
            ],
        ),
        "/api/sessions/stream": _get(
            "the live sessions list: Server-Sent Events, each a ``sessions`` event holding"
            " the first page (as /api/sessions gives it) whenever it changes",
            [_TENANT, _LIMIT, _query("q", {"type": "string"}, "as for /api/sessions")],
            _SSE,
            missing=False,
        ),
        "/api/sessions/{session_id}": _get("a session's head and metadata", [_SESSION, _TENANT]),
        "/api/sessions/{session_id}/events": _get(
            "a page of a session's events (default: its last page)",
            [
                _SESSION,
                _TENANT,
                _LIMIT,
                _query("after", _SEQ, "the events after this seq"),
                _query("before", {**_SEQ, "minimum": 1}, "the events before this seq"),
            ],
            missing=False,
        ),
        "/api/sessions/{session_id}/tail": _get(
            "the live tail: Server-Sent Events, one per event (its id the seq); "
            "Last-Event-ID resumes after it",
            [_SESSION, _TENANT, _query("after", _SEQ, "start after this seq")],
            _SSE,
            missing=False,
        ),
        "/api/sessions/{session_id}/lineage": _get(
            "the fork tree: where the session was forked from (origin, and the chain of "
            "ancestors) and its forks, each with its fork seq and theirs",
            [_SESSION, _TENANT],
        ),
        "/api/sessions/{session_id}/{action}": {
            "post": {
                "summary": "fork ({at, new_session_id}) or truncate ({to}); needs "
                "--allow-writes and the X-Agentlog-CSRF header from /api/config",
                "parameters": [
                    _SESSION,
                    {
                        "name": "action",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": ["fork", "truncate"]},
                    },
                    _TENANT,
                ],
                "requestBody": {"required": True, **_JSON_OBJECT},
                "responses": {
                    "200": {"description": "done", **_JSON_OBJECT},
                    "400": _ERROR,
                    "403": _ERROR,
                    "415": _ERROR,
                },
            }
        },
        "/api/stores/checkpoints": _get(
            "run checkpoints",
            [_TENANT, _LIMIT, after, _query("session_id", {"type": "string"}, "of this session")],
        ),
        "/api/stores/memory": _get(
            "memory records of a namespace",
            [_TENANT, _LIMIT, after, _query("namespace", {"type": "string"}, "the namespace")],
        ),
        "/api/stores/artifacts": _get("artifact metadata", [_TENANT, _LIMIT, after]),
        "/api/stores/artifacts/{artifact_id}/download": _get(
            "an artifact's bytes as an attachment, verified against its sha256",
            [_path("artifact_id", "the artifact id"), _TENANT],
            {"content": {"application/octet-stream": {"schema": {"type": "string"}}}},
        ),
        "/api/stores/sessions": _get("SessionStore records", [_TENANT, _LIMIT, after]),
        "/api/stores/sessions/{session_id}": _get(
            "a SessionStore session's newest snapshot", [_SESSION, _TENANT]
        ),
        "/api/health": _get(
            "engine, schema version, integrity check and statistics",
            [_query("deep", {"type": "string", "enum": ["0", "1"]}, "also read every event")],
        ),
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "agentlog serve", "version": __version__},
        "paths": paths,
    }
