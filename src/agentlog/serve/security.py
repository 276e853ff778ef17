"""The viewer's guard: security headers, the Host check, the access token, CSRF.

The viewer shows untrusted text (model output, tool results, file contents),
so every response forbids inline script and sniffing; a loopback bind
answers only to loopback host names (a DNS-rebinding page names its own);
any other bind answers only to a request carrying the token printed at start.
It is plain ASGI middleware, so a streamed response (the live tail) passes
through it unbuffered.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

__all__ = [
    "CSRF_HEADER",
    "SECURITY_HEADERS",
    "TOKEN_COOKIE",
    "Guard",
    "is_loopback",
    "same_secret",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The header a write request carries its CSRF token in (a cross-site form
#: cannot set a header, and a cross-site script cannot read the token).
CSRF_HEADER = "x-agentlog-csrf"
#: The cookie the access token is kept in after a first ``?token=`` visit.
TOKEN_COOKIE = "agentlog_token"

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

    ``token`` is None on a loopback bind (the Host header is checked instead)
    and the access token otherwise: taken from ``Authorization: Bearer``,
    the cookie, or a ``?token=`` query (which then sets the cookie).
    """

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        set_cookie = False
        if self.token is None:
            if not is_loopback(_host_name(headers.get("host", ""))):
                await _refuse(send, 421, "this viewer answers only to a loopback host name")
                return
        else:
            given = _bearer(headers) or _cookie(headers)
            if not same_secret(given, self.token):
                query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
                given = (query.get("token") or [None])[0]
                if not same_secret(given, self.token):
                    await _refuse(send, 401, "this viewer needs its access token (?token=...)")
                    return
                set_cookie = True

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if set_cookie and self.token is not None:
                    cookie = f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                    extra.append((b"set-cookie", cookie.encode()))
                names = {name for name, _ in extra}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = kept + extra
            await send(message)

        await self.app(scope, receive, guarded)


def _bearer(headers: dict[str, str]) -> str | None:
    value = headers.get("authorization", "")
    return value[7:] if value[:7].lower() == "bearer " else None


def _cookie(headers: dict[str, str]) -> str | None:
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed cookie header is no token
        return None
    found = cookie.get(TOKEN_COOKIE)
    return None if found is None else found.value


async def _refuse(send: Send, status: int, reason: str) -> None:
    body = reason.encode() + b"\n"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
