"""Listing a tenant's sessions by last activity, a page at a time.

``list_page(limit, after=cursor)`` on every checkpointer returns the
``limit`` most recently active sessions after ``cursor``: the order is
``(activity second, id)`` descending, where the activity second is
``mtime`` truncated to whole seconds, a total order, so a page ends at a
row that names exactly where the next one starts (keyset paging). Sessions
active in the same second are listed by id: that is what lets SQLite and
PostgreSQL keep the index an append does not have to move more than once a
second. A store that nobody writes to is listed whole, each session once,
however the pages are cut. A session that is written to while someone pages
gets a newer ``mtime`` and moves to the front: a reader already past it does
not see it again on this pass (and, if it had not reached it yet, sees it on
the next).

This module holds the types and the check of a request, and the order
itself for backends that have no index to ask (memory, file store).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from .events import SessionListing

__all__ = [
    "MAX_PAGE_LIMIT",
    "ActivityCursor",
    "SessionPage",
    "activity_key",
    "check_page_request",
    "page_in_order",
    "page_of",
]

#: The most sessions one :meth:`~agentlog.BaseCheckpointer.list_page` returns.
MAX_PAGE_LIMIT = 10_000


class ActivityCursor(NamedTuple):
    """Where a page of sessions ended: its last row's ``mtime`` and id.

    Pass it as ``after`` to get the page that follows. It is a plain value
    (a float and a string), so it can be kept, sent to a client and rebuilt.
    """

    mtime: float
    """The last activity of the last session of the page, epoch seconds."""
    id: str
    """The id of the last session of the page."""


class SessionPage(NamedTuple):
    """One page of :meth:`~agentlog.BaseCheckpointer.list_page`."""

    sessions: list[SessionListing]
    """At most ``limit`` sessions, most recently active first (the same second: id descending)."""
    next: ActivityCursor | None
    """The cursor of the next page; None when this page is the last."""


def check_page_request(limit: object, after: object) -> tuple[int, ActivityCursor | None]:
    """``(limit, after)`` checked: ``limit`` an int from 1 to
    :data:`MAX_PAGE_LIMIT`, ``after`` None or an :class:`ActivityCursor` (any
    pair of a finite number and a string is taken as one); else
    ``TypeError`` / ``ValueError``."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise ValueError(f"limit must be from 1 to {MAX_PAGE_LIMIT}, got {limit}")
    if after is None:
        return limit, None
    if not isinstance(after, tuple) or len(after) != 2:
        raise TypeError(f"after must be an ActivityCursor or None, not {type(after).__name__}")
    mtime, session_id = after
    if isinstance(mtime, bool) or not isinstance(mtime, (int, float)):
        raise TypeError(f"after.mtime must be a number, not {type(mtime).__name__}")
    if not math.isfinite(mtime):
        raise ValueError(f"after.mtime must be finite, got {mtime}")
    if not isinstance(session_id, str):
        raise TypeError(f"after.id must be a str, not {type(session_id).__name__}")
    return limit, ActivityCursor(float(mtime), session_id)


def activity_key(mtime: float, session_id: str) -> tuple[int, str]:
    """The key :meth:`~agentlog.BaseCheckpointer.list_page` orders by
    (descending): the activity second (``mtime`` truncated, as SQLite's
    ``CAST(mtime AS INTEGER)`` and PostgreSQL's ``trunc`` do) and the id."""
    return int(mtime), session_id


def page_in_order(
    rows: Iterable[SessionListing], limit: int, after: ActivityCursor | None
) -> list[SessionListing]:
    """The first ``limit`` of ``rows`` after ``after`` in activity order: for a
    backend with no index on activity (it looks at every row)."""
    if after is None:
        found = list(rows)
    else:
        key = activity_key(*after)
        found = [r for r in rows if activity_key(r.mtime, r.id) < key]
    found.sort(key=lambda r: activity_key(r.mtime, r.id), reverse=True)
    return found[:limit]


def page_of(rows: list[SessionListing], limit: int) -> SessionPage:
    """The page that ``limit + 1`` fetched ``rows`` make: ``limit`` of them,
    and a cursor only when the extra row shows there is more."""
    if len(rows) <= limit:
        return SessionPage(rows, None)
    last = rows[limit - 1]
    return SessionPage(rows[:limit], ActivityCursor(last.mtime, last.id))
