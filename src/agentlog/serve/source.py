"""What the viewer reads: one store, opened per tenant, through the public API.

The viewer never opens a store itself (the command line does, read-only
unless ``--allow-writes``): it is given an opener, ``tenant -> checkpointer``,
and keeps one checkpointer per tenant it was asked about. Every call here is
blocking; the web layer runs them on its worker threads.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..activity import ActivityCursor, check_page_request
from ..aio import AsyncBaseCheckpointer
from ..errors import damaged_event
from ..events import RawEvent, SessionListing, check_session_id
from ..log import BaseCheckpointer
from ..log.follow import budget_step
from ..stores import DEFAULT_TENANT

__all__ = [
    "MAX_PAGE",
    "PAGE_BYTES",
    "SCAN_ROWS",
    "BadRequest",
    "Source",
    "UnknownTenant",
    "event_frame",
    "event_json",
    "event_line",
    "listing_json",
    "page_sessions",
]

#: The most rows or events one API page returns.
MAX_PAGE = 1000
#: The stored bytes past which a page of events ends early (always after at
#: least one event): it then names ``next_after``, where the rest resumes.
PAGE_BYTES = 4 << 20


class BadRequest(ValueError):
    """A request the API refuses with 400 (its message is shown to the caller)."""


class UnknownTenant(BadRequest):
    """A tenant the store does not have (refused with 404)."""


def event_json(event: RawEvent) -> dict[str, Any]:
    """An event as the API shows it (seq, parent_seq, ts, type and the event
    itself), ready for ``orjson.dumps``: the event's stored bytes are set in
    place as they are (an :class:`orjson.Fragment`), never decoded, so an
    event as deep as the store accepts is passed on as it is."""
    return {
        "seq": event.seq,
        "parent_seq": event.parent_seq,
        "ts": event.ts,
        "type": event.type,
        "event": orjson.Fragment(event.json),
    }


def event_frame(session_id: str, event: RawEvent) -> tuple[bytes, bytes, bytes]:
    """:func:`event_json` encoded for a Server-Sent Events ``data:`` line, in
    three parts: what comes before the event's stored bytes, those bytes (the
    very object the store gave, not copied), and the closing brace. Joined,
    they are :func:`event_line`; a writer sends them one after the other, so
    an event of tens of megabytes is never copied into a line.

    The stored JSON is compact and holds no line break (a string's are
    escaped), so it fits the line as it is; bytes that hold one were not
    written by agentlog's encoder: they are decoded and encoded again, or
    refused as damaged when they do not decode."""
    data = event.json
    if b"\n" in data or b"\r" in data:
        try:
            data = orjson.dumps(orjson.loads(data))
        except orjson.JSONDecodeError:
            raise damaged_event(session_id, event.seq, "payload does not decode") from None
    head = {"seq": event.seq, "parent_seq": event.parent_seq, "ts": event.ts, "type": event.type}
    return orjson.dumps(head)[:-1] + b',"event":', data, b"}"


def event_line(session_id: str, event: RawEvent) -> bytes:
    """:func:`event_frame`, joined: the whole ``data:`` line of an event."""
    return b"".join(event_frame(session_id, event))


def _metadata_text(metadata: Any) -> tuple[str | None, list[str]]:
    """The title and tags a session's metadata names (when it is a mapping)."""
    if not isinstance(metadata, Mapping):
        return None, []
    title = metadata.get("title")
    tags = metadata.get("tags")
    tag_list = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
    return (title if isinstance(title, str) else None), tag_list


def listing_json(row: SessionListing) -> dict[str, Any]:
    """A session row as the API shows it."""
    title, tags = _metadata_text(row.metadata)
    return {
        "id": row.id,
        "mtime": row.mtime,
        "head": row.head,
        "title": title,
        "tags": tags,
        "metadata": row.metadata,
    }


def _encode_cursor(cursor: ActivityCursor | None) -> str | None:
    if cursor is None:
        return None
    raw = orjson.dumps([cursor.mtime, cursor.id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> ActivityCursor:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        _, after = check_page_request(1, tuple(orjson.loads(raw)))
    except (binascii.Error, orjson.JSONDecodeError, TypeError, ValueError):
        raise BadRequest("cursor is not one this API gave out") from None
    assert after is not None
    return after


def _matches(row: SessionListing, needle: str) -> bool:
    if needle in row.id.casefold():
        return True
    title, tags = _metadata_text(row.metadata)
    if title is not None and needle in title.casefold():
        return True
    return any(needle in tag.casefold() for tag in tags)


#: The most sessions one filtered request looks at: a filter that matches
#: little in a million sessions answers in bounded time with what it found
#: and a cursor to look further, instead of reading the whole store.
SCAN_ROWS = 2000


def page_sessions(
    log: BaseCheckpointer, *, cursor: str | None, limit: int, query: str | None
) -> tuple[list[SessionListing], str | None, int]:
    """One page of ``log``'s sessions, most recently active first (ties by id,
    descending), after ``cursor``, those whose id, title or a tag holds
    ``query``; the cursor of the next page (None: this is the last); and how
    many sessions were looked at. A filtered page looks at no more than
    :data:`SCAN_ROWS` sessions: it may hold fewer than ``limit`` matches (none,
    even) and still have a next cursor, which looks further."""
    after = None if cursor is None else _decode_cursor(cursor)
    if not query:
        page = log.list_page(limit, after=after)
        return page.sessions, _encode_cursor(page.next), len(page.sessions)
    needle = query.casefold()
    page = log.list_page(SCAN_ROWS, after=after)
    found: list[SessionListing] = []
    for n, row in enumerate(page.sessions, 1):
        if _matches(row, needle):
            found.append(row)
            if len(found) == limit:
                more = n < len(page.sessions) or page.next is not None
                return found, _encode_cursor(ActivityCursor(row.mtime, row.id) if more else None), n
    return found, _encode_cursor(page.next), len(page.sessions)


@dataclass
class Source:
    """The store the viewer shows: ``open(tenant)`` gives its checkpointer."""

    open: Callable[[str], BaseCheckpointer]
    """Opens the store for one tenant (read-only unless writes are allowed)."""
    location: str
    """The store as the user named it (its password hidden), for display."""
    kind: str
    """``sqlite``, ``files`` or ``postgres``."""
    tenant: str = DEFAULT_TENANT
    """The tenant shown first."""
    allow_writes: bool = False
    """Whether fork and truncate are offered."""
    storage: Callable[[], Any] | None = None
    """Opens the four stores (SQLite and PostgreSQL), or None (a file store)."""
    _logs: dict[str, BaseCheckpointer] = field(default_factory=dict)
    _async: dict[str, AsyncBaseCheckpointer] = field(default_factory=dict)
    _storage: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def log(self, tenant: str) -> BaseCheckpointer:
        """The checkpointer of ``tenant`` (opened on first use): only a tenant
        the store has (or the one shown first) is opened, so a request naming
        made-up tenants opens nothing (on PostgreSQL, each would be a pool of
        connections; anywhere, memory held until the viewer stops)."""
        with self._lock:
            found = self._logs.get(tenant)
            if found is not None:
                return found
            if self.kind == "files" and tenant != DEFAULT_TENANT:
                raise BadRequest("a file store has no tenants")
        if tenant != self.tenant and tenant not in self.tenants():
            raise UnknownTenant(f"no tenant {tenant!r} in this store")
        with self._lock:
            found = self._logs.get(tenant)
            if found is None:
                found = self._logs[tenant] = self.open(tenant)
            return found

    def keep(self, tenant: str, log: BaseCheckpointer) -> None:
        """Use ``log``, already open, for ``tenant`` (closed with the viewer)."""
        with self._lock:
            self._logs[tenant] = log

    def async_log(self, tenant: str) -> AsyncBaseCheckpointer:
        """The async twin of :meth:`log` (for the live tail's follow)."""
        log = self.log(tenant)
        with self._lock:
            found = self._async.get(tenant)
            if found is None:
                found = self._async[tenant] = AsyncBaseCheckpointer(log)
            return found

    def stores(self) -> Any:
        """The four stores, opened on first use; None for a file store."""
        if self.storage is None:
            return None
        with self._lock:
            if self._storage is None:
                self._storage = self.storage()
            return self._storage

    def tenants(self) -> list[str]:
        """Every tenant with sessions, and the one shown first."""
        log = self.log(self.tenant)
        found = {self.tenant}
        every = getattr(log, "list_all_tenants", None)
        if every is not None:
            found.update(tenant for tenant, _ in every())
        return sorted(found)

    def sessions(
        self, tenant: str, *, cursor: str | None, limit: int, query: str | None
    ) -> dict[str, Any]:
        """A page of ``tenant``'s sessions, as the API returns it."""
        rows, after, scanned = page_sessions(
            self.log(tenant), cursor=cursor, limit=limit, query=query
        )
        return {
            "sessions": [listing_json(r) for r in rows],
            "next_cursor": after,
            "scanned": scanned,
        }

    def session(self, tenant: str, session_id: str) -> dict[str, Any] | None:
        """A session's head and metadata; None when there is no such session."""
        log = self.log(tenant)
        head = log.head(session_id)
        meta = log.metadata(session_id)
        if head == 0 and meta.revision == 0:
            return None
        title, tags = _metadata_text(meta.value)
        return {
            "id": session_id,
            "tenant": tenant,
            "head": head,
            "revision": meta.revision,
            "metadata": meta.value,
            "title": title,
            "tags": tags,
        }

    def events(
        self, tenant: str, session_id: str, *, after: int | None, before: int | None, limit: int
    ) -> bytes:
        """A page of a session's events, as JSON: after seq ``after``, or the last
        ``limit`` before seq ``before`` (neither: the session's last page).

        A page whose events pass :data:`PAGE_BYTES` ends early: ``next_after``
        is then the seq the rest of the asked range resumes after (None when
        the page holds all of it)."""
        log = self.log(tenant)
        head = log.head(session_id)
        if after is None:
            end = head + 1 if before is None else min(before, head + 1)
            after = max(0, end - 1 - limit)
            limit = max(0, end - 1 - after)
        # Read in steps sized by the largest event seen so far (the first step
        # is one event): the scan never holds much more than the budget, even
        # when each event is tens of megabytes.
        page: list[dict[str, Any]] = []
        size, largest, cut = 0, 0, None
        while limit > 0 and cut is None:
            step = budget_step(PAGE_BYTES - size, largest, min(limit, 256))
            chunk = list(log.read_json(session_id, since_seq=after, limit=step))
            for event in chunk:
                if page and size + len(event.json) > PAGE_BYTES:
                    cut = page[-1]["seq"]
                    break
                size += len(event.json)
                largest = max(largest, len(event.json), 1)
                page.append(event_json(event))
            if cut is None and (len(chunk) < step or size >= PAGE_BYTES):
                if len(chunk) == step and limit > step:
                    cut = page[-1]["seq"]
                break
            after, limit = chunk[-1].seq, limit - len(chunk)
            del chunk
        return orjson.dumps({"head": head, "events": page, "next_after": cut})

    def close(self) -> None:
        """Close every checkpointer (and the stores) the viewer opened."""
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
            self._async.clear()
            storage, self._storage = self._storage, None
        for log in logs:
            log.close()
        if storage is not None:
            storage.close()


def check_id(value: str) -> str:
    """A session id from a URL, by the store's rules (a 400 otherwise)."""
    try:
        return check_session_id(value)
    except (ValueError, TypeError) as exc:
        raise BadRequest(str(exc)) from None
