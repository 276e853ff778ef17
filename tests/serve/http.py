"""Small HTTP helpers for the viewer's tests (the standard library's client)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

__all__ = ["TOKENS", "Reply", "get", "get_json", "post", "sse"]

#: The access token of each viewer a test serves, by port: sent as a bearer
#: token unless the request names its own credentials (or ``auth=False``).
TOKENS: dict[int, str] = {}


def _authorized(url: str, headers: dict[str, str] | None, auth: bool) -> dict[str, str]:
    found = dict(headers or {})
    names = {name.lower() for name in found}
    port = urllib.parse.urlsplit(url).port
    if auth and port in TOKENS and not names & {"authorization", "cookie"}:
        found["Authorization"] = f"Bearer {TOKENS[port]}"
    return found


class Reply:
    """A response: status, headers (lower-case names) and body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def _send(request: urllib.request.Request) -> Reply:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return Reply(response.status, headers, response.read())
    except urllib.error.HTTPError as exc:
        headers = {k.lower(): v for k, v in exc.headers.items()}
        return Reply(exc.code, headers, exc.read())


def get(url: str, headers: dict[str, str] | None = None, *, auth: bool = True) -> Reply:
    """GET ``url`` (with the viewer's token unless ``auth`` is false)."""
    return _send(urllib.request.Request(url, headers=_authorized(url, headers, auth)))


def get_json(url: str) -> Any:
    """GET ``url``, which must answer 200 with JSON."""
    reply = get(url)
    assert reply.status == 200, (reply.status, reply.body[:300])
    assert reply.headers["content-type"].startswith("application/json")
    return reply.json()


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> Reply:
    """POST ``body`` as JSON."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"content-type": "application/json", **_authorized(url, headers, True)},
    )
    return _send(request)


def sse(url: str, headers: dict[str, str] | None = None) -> Iterator[tuple[str | None, str, Any]]:
    """The Server-Sent Events of ``url``: ``(id, event, data)`` each (comments skipped)."""
    request = urllib.request.Request(
        url, headers={"accept": "text/event-stream", **_authorized(url, headers, True)}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        event_id, kind, data = None, "message", []
        for raw in response:
            line = raw.decode().rstrip("\n")
            if not line:
                if data:
                    yield event_id, kind, json.loads("\n".join(data))
                event_id, kind, data = None, "message", []
            elif line.startswith(":") or line.startswith("retry:"):
                continue
            else:
                name, _, value = line.partition(": ")
                if name == "id":
                    event_id = value
                elif name == "event":
                    kind = value
                elif name == "data":
                    data.append(value)
