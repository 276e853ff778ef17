"""The viewer's guard: security headers, the Host check, the access token, CSRF.

The viewer shows untrusted text (model output, tool results, file contents),
so every response forbids inline script and sniffing. Every request carries
the token printed at start (any local user could otherwise read every
transcript); a loopback bind also answers only to loopback host names (a
DNS-rebinding page names its own); a request another site's page makes is
refused unless it is a top-level navigation; anything but HTTP (a
websocket) is refused. It is plain ASGI middleware, so a streamed response
(the live tail) passes through it unbuffered.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode

__all__ = [
    "CSRF_HEADER",
    "SECURITY_HEADERS",
    "TOKEN_COOKIE",
    "Guard",
    "cookie_value",
    "is_loopback",
    "same_secret",
    "token_cookie",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The header a write request carries its CSRF token in (a cross-site form
#: cannot set a header, and a cross-site script cannot read the token).
CSRF_HEADER = "x-agentlog-csrf"
#: The prefix of the cookie the access token is kept in after a first
#: ``?token=`` visit; the port follows it (:func:`token_cookie`).
TOKEN_COOKIE = "agentlog_token"


def token_cookie(port: int | None) -> str:
    """The name of the token cookie of a viewer on ``port``: a cookie is sent
    to every port of its host, so a viewer on another port (which has its own
    token) neither accepts this one nor overwrites it."""
    return TOKEN_COOKIE if port is None else f"{TOKEN_COOKIE}_{port}"


def cookie_value(header: str, name: str) -> str | None:
    """The value of cookie ``name`` in a Cookie header, however malformed the
    other cookies in it are (each ``name=value`` pair is read on its own)."""
    for part in header.split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip() == name:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            return value
    return None


#: Sent with every response. No inline script or style, nothing from elsewhere.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)

_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a Host header's name) is this machine only."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_secret(given: str | None, expected: str) -> bool:
    """``given == expected``, in time that does not depend on where they differ."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _host_name(value: str) -> str:
    """The name part of a Host header (``[::1]:8080`` → ``::1``)."""
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}


class Guard:
    """ASGI middleware: refuse what the bind does not allow, add the headers.

    ``token`` is the access token, taken from ``Authorization: Bearer``, the
    port's cookie, or a ``?token=`` query (which then sets the cookie);
    ``loopback`` (a loopback bind) adds the Host check.
    """

    def __init__(self, app: ASGIApp, *, token: str, loopback: bool = True) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            return  # nothing this viewer speaks
        headers = _headers(scope)
        if self.loopback and not is_loopback(_host_name(headers.get("host", ""))):
            await _refuse(send, 421, "this viewer answers only to a loopback host name")
            return
        if _cross_site(headers, scope.get("method", "GET")):
            await _refuse(send, 403, "this viewer refuses requests from other sites' pages")
            return
        server = scope.get("server")
        name = token_cookie(server[1] if server else None)
        set_cookie = False
        given = _bearer(headers) or cookie_value(headers.get("cookie", ""), name)
        if not same_secret(given, self.token):
            query_text = scope.get("query_string", b"").decode("latin-1")
            query = parse_qs(query_text)
            given = (query.get("token") or [None])[0]
            if not same_secret(given, self.token):
                await _refuse(send, 401, "this viewer needs its access token (?token=...)")
                return
            set_cookie = True
            path = scope.get("path", "/")
            if scope.get("method") == "GET" and not path.startswith("/api/"):
                # A page: sent on without the token, which the cookie now
                # holds (the address bar, the history and a shared link then
                # do not carry it).
                rest = [(k, v) for k, v in parse_qsl(query_text) if k != "token"]
                where = path + ("?" + urlencode(rest) if rest else "")
                cookie = f"{name}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                await _refuse(
                    send,
                    303,
                    "logged in",
                    [(b"location", where.encode()), (b"set-cookie", cookie.encode())],
                )
                return

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if set_cookie:
                    cookie = f"{name}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                    extra.append((b"set-cookie", cookie.encode()))
                names = {key for key, _ in extra}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = kept + extra
            await send(message)

        await self.app(scope, receive, guarded)


def _cross_site(headers: dict[str, str], method: str) -> bool:
    """Whether another site's page made this request, and it is not a
    top-level navigation to a page (an image, a script, a fetch, a frame):
    such a request could make the viewer do work for a page that cannot
    read the answer. Browsers without Fetch Metadata send none of these
    headers; the token still stands in their way."""
    site = headers.get("sec-fetch-site")
    if site is None or site in ("same-origin", "none"):
        return False
    navigation = (
        headers.get("sec-fetch-mode") == "navigate"
        and headers.get("sec-fetch-dest", "document") == "document"
        and method == "GET"
    )
    return not navigation


def _bearer(headers: dict[str, str]) -> str | None:
    value = headers.get("authorization", "")
    return value[7:] if value[:7].lower() == "bearer " else None


async def _refuse(
    send: Send, status: int, reason: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = reason.encode() + b"\n"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
