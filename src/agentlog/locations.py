"""What a store's location string names, and how it is printed.

A location is a SQLite file's path, a file store's directory, or a PostgreSQL
database: a URL (``postgresql://…`` or ``postgres://…``) or a libpq
``host=… dbname=…`` string. Shared by the command line and ``agentlog
migrate``, so both read a location the same way and never print a password.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

__all__ = ["POSTGRES_SCHEMES", "is_postgres", "scrub", "shown"]

#: What a PostgreSQL store's location starts with (a libpq URI).
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

# A libpq key=value connection string ("host=db dbname=agents user=agentlog")
# starts with one of libpq's keywords (a path that exists is a path still).
_CONNINFO = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options"
    r"|application_name|connect_timeout|target_session_attrs)\s*="
)
_URL_PASSWORD = re.compile(r"([?&](?:ssl)?password=)([^&#]*)")
_CONNINFO_PASSWORD = re.compile(r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)")


def is_postgres(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL database: a ``postgresql://`` or
    ``postgres://`` URL, or a libpq ``key=value`` string that is not a path."""
    if location.startswith(POSTGRES_SCHEMES):
        return True
    return bool(_CONNINFO.match(location)) and not os.path.lexists(location)


def _url_parts(location: str) -> tuple[str, str, str]:
    """A URL's scheme, authority (``user:password@hosts``) and the rest."""
    scheme, rest = location.split("://", 1)
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    return scheme, authority, rest[len(authority) :]


def _passwords(location: str) -> list[str]:
    """The passwords a PostgreSQL location carries (as written, and decoded)."""
    if not is_postgres(location):
        return []
    found: list[str] = []
    if location.startswith(POSTGRES_SCHEMES):
        _, authority, _ = _url_parts(location)
        userinfo = authority.rsplit("@", 1)[0] if "@" in authority else ""
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
        found += [match.group(2) for match in _URL_PASSWORD.finditer(location)]
        found += [unquote(text) for text in found]
    else:
        for match in _CONNINFO_PASSWORD.finditer(location):
            value = match.group(2)
            found.append(value)
            if value.startswith("'"):
                found.append(re.sub(r"\\(.)", r"\1", value[1:-1]))
    return sorted({text for text in found if text}, key=len, reverse=True)


def _hide(match: re.Match[str]) -> str:
    return match.group(1) + "***"


def shown(location: str) -> str:
    """``location`` as it is printed: a PostgreSQL location with its password as ``***``."""
    if not is_postgres(location):
        return location
    if not location.startswith(POSTGRES_SCHEMES):
        return _CONNINFO_PASSWORD.sub(_hide, location)
    scheme, authority, tail = _url_parts(location)
    if "@" in authority:
        userinfo, hosts = authority.rsplit("@", 1)
        if ":" in userinfo:
            authority = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    return f"{scheme}://{authority}{_URL_PASSWORD.sub(_hide, tail)}"


def scrub(message: str, *locations: str | None) -> str:
    """``message`` with any password of ``locations`` in it replaced by ``***``."""
    for location in locations:
        if location:
            for secret in _passwords(location):
                message = message.replace(secret, "***")
    return message
