"""Listing sessions by activity, a page at a time: :class:`ActivityListingConformance`.

Part of :class:`~agentlog.testing.CheckpointerConformance` (its base), so
every backend the suite runs on is held to ``list_page``: the order
``(activity second, id)`` descending (the second: ``mtime`` truncated), so
sessions active in the same second come by id, each session of a stable store
listed once however the pages fall, a session written to while someone
pages moving to the front, and bad arguments refused with nothing changed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..activity import MAX_PAGE_LIMIT, ActivityCursor, SessionPage, activity_key
from ..errors import CheckpointerClosedError
from ..events import SessionListing
from .harness import make_event


def _pages(cp: Any, limit: int) -> Iterator[SessionPage]:
    """Every page of ``cp.list_page(limit)``, following the cursors."""
    page = cp.list_page(limit)
    yield page
    while page.next is not None:
        page = cp.list_page(limit, after=page.next)
        yield page


def _walk(cp: Any, limit: int) -> list[str]:
    return [row.id for page in _pages(cp, limit) for row in page.sessions]


@contextmanager
def _clock_at(monkeypatch: pytest.MonkeyPatch, stamp: float) -> Iterator[None]:
    """Every write in the block stamped ``stamp``: sessions that tie in mtime,
    as they do on a coarse clock or in one batch."""
    with monkeypatch.context() as patched:
        patched.setattr(time, "time", lambda: stamp)
        yield


class ActivityListingConformance:
    """``list_page`` as tests (mixed into the ``Checkpointer`` suite)."""

    #: A write's mtime is ``time.time()`` at the write. False for a store that
    #: takes it from elsewhere (the file store reads its files' mtimes): the
    #: tests that set the clock to make ties and moves then skip, and the
    #: others take the order from the mtimes the store lists.
    stamps_mtime: ClassVar[bool] = True

    def open_checkpointer(self, location: Path) -> Any:
        """Open (or reopen) the store at ``location`` (the suite's own)."""
        raise NotImplementedError

    def paged(self, cp: Any) -> Any:
        """``cp``, which must list pages (skips on a backend that keeps no
        metadata: ``list_page`` returns :class:`SessionListing` rows)."""
        if not getattr(self, "stores_metadata", True):
            cp.close()
            pytest.skip("list_page lists metadata; this backend has no place for it")
        assert callable(getattr(cp, "list_page", None)), f"{type(cp).__name__} has no list_page"
        return cp

    def clocked(self, cp: Any) -> Any:
        """:meth:`paged`, on a store whose mtimes the test can set (skips the
        test otherwise: :attr:`stamps_mtime`)."""
        if not self.stamps_mtime:
            cp.close()
            pytest.skip("this store does not stamp mtime with time.time()")
        return self.paged(cp)

    def test_list_page_of_an_empty_store(self, cp: Any) -> None:
        log = self.paged(cp)
        assert log.list_page() == SessionPage([], None)
        assert log.list_page(1, after=ActivityCursor(1e12, "z")) == SessionPage([], None)

    def test_list_page_orders_by_activity_then_id(
        self, cp: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = self.clocked(cp)
        now = time.time()
        with _clock_at(monkeypatch, now - 10):
            log.append("old", [make_event("user")])
        with _clock_at(monkeypatch, now - 5):
            for name in ("b", "e", "a", "g", "c", "f", "d"):
                log.append(name, [make_event("user")])
        with _clock_at(monkeypatch, now):
            log.append("new", [make_event("user")])
        expected = ["new", "g", "f", "e", "d", "c", "b", "a", "old"]
        for limit in (1, 2, 3, 4, 8, 9, 10, 50):
            assert _walk(log, limit) == expected, limit
        first = log.list_page(3)
        assert [r.id for r in first.sessions] == ["new", "g", "f"]
        assert first.next == ActivityCursor(first.sessions[-1].mtime, "f")
        # A cursor is a plain value: a tuple rebuilt from it pages the same.
        again = log.list_page(3, after=(first.next.mtime, first.next.id))
        assert [r.id for r in again.sessions] == ["e", "d", "c"]
        last = log.list_page(9)
        assert last.next is None and len(last.sessions) == 9

    def test_list_page_orders_a_second_by_id(
        self, cp: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Sessions active in the same second are listed by id, whatever
        their order within it; a cursor with an exact mtime resumes there."""
        log = self.clocked(cp)
        second = float(int(time.time()) - 100)
        for offset, name in ((0.9, "a"), (0.5, "c"), (0.1, "b"), (0.7, "d")):
            with _clock_at(monkeypatch, second + offset):
                log.append(name, [make_event("user")])
        with _clock_at(monkeypatch, second + 1.05):
            log.append("later", [make_event("user")])
        with _clock_at(monkeypatch, second - 0.5):
            log.append("earlier", [make_event("user")])
        expected = ["later", "d", "c", "b", "a", "earlier"]
        for limit in (1, 2, 3, 6, 10):
            assert _walk(log, limit) == expected, limit
        rows = {row.id: row for row in log.list(with_metadata=True)}
        after_c = log.list_page(10, after=ActivityCursor(rows["c"].mtime, "c"))
        assert [row.id for row in after_c.sessions] == ["b", "a", "earlier"]

    def test_list_page_rows_are_listings(self, cp: Any) -> None:
        log = self.paged(cp)
        log.append("s", [make_event("user"), make_event("assistant")])
        revision = log.metadata("s").revision
        revision = log.set_metadata("s", {"title": "hello", "tags": ["x"]}, revision)
        log.append("t", [make_event("user")])
        page = log.list_page(10)
        assert page.next is None
        rows = {row.id: row for row in page.sessions}
        assert rows == {row.id: row for row in log.list(with_metadata=True)}
        assert rows["s"] == SessionListing(
            "s", rows["s"].mtime, 2, {"title": "hello", "tags": ["x"]}, revision
        )
        assert all(isinstance(row, SessionListing) for row in page.sessions)
        assert all(isinstance(row.mtime, float) for row in page.sessions)

    def test_list_page_walks_a_stable_store_once(self, cp: Any) -> None:
        log = self.paged(cp)
        for n in range(23):
            log.append(f"s{n % 7}-{n}", [make_event("user", n=n)])
        for n in (3, 11, 3):
            log.append(f"s{n % 7}-{n}", [make_event("user", again=n)])
        every = sorted(
            log.list(with_metadata=True), key=lambda r: activity_key(r.mtime, r.id), reverse=True
        )
        for limit in (1, 4, 5, 23, 100):
            rows = [row for page in _pages(log, limit) for row in page.sessions]
            assert rows == every, limit

    def test_list_page_a_session_written_meanwhile_moves_to_the_front(
        self, cp: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = self.clocked(cp)
        now = time.time()
        for n, name in enumerate(("a", "b", "c", "d", "e")):
            with _clock_at(monkeypatch, now + n):
                log.append(name, [make_event("user")])
        first = log.list_page(2)
        assert [r.id for r in first.sessions] == ["e", "d"]
        with _clock_at(monkeypatch, now + 10):
            log.append("b", [make_event("user")])  # not reached yet: moves past the reader
        with _clock_at(monkeypatch, now + 11):
            log.append("e", [make_event("user")])  # already shown: not shown again
        with _clock_at(monkeypatch, now + 12):
            log.append("f", [make_event("user")])  # new: at the front, for the next pass
        rest = [row.id for row in log.list_page(10, after=first.next).sessions]
        assert rest == ["c", "a"]
        assert [r.id for r in log.list_page(3).sessions] == ["f", "e", "b"]

    def test_list_page_after_a_delete_of_the_cursor_session(
        self, cp: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = self.clocked(cp)
        now = time.time()
        for n, name in enumerate(("a", "b", "c")):
            with _clock_at(monkeypatch, now + n):
                log.append(name, [make_event("user")])
        first = log.list_page(1)
        assert first.next is not None and first.next.id == "c"
        log.delete("c")
        assert [r.id for r in log.list_page(5, after=first.next).sessions] == ["b", "a"]

    @pytest.mark.parametrize(
        ("limit", "after", "error"),
        [
            (0, None, ValueError),
            (-1, None, ValueError),
            (MAX_PAGE_LIMIT + 1, None, ValueError),
            (True, None, TypeError),
            ("3", None, TypeError),
            (2.0, None, TypeError),
            (2, "cursor", TypeError),
            (2, (1.0,), TypeError),
            (2, (1.0, "a", "b"), TypeError),
            (2, (1.0, 2), TypeError),
            (2, ("1.0", "a"), TypeError),
            (2, (True, "a"), TypeError),
            (2, (math.nan, "a"), ValueError),
            (2, (math.inf, "a"), ValueError),
        ],
    )
    def test_list_page_refuses_bad_arguments(
        self, cp: Any, limit: Any, after: Any, error: type[Exception]
    ) -> None:
        log = self.paged(cp)
        log.append("s", [make_event("user")])
        before = log.list(with_metadata=True)
        with pytest.raises(error):
            log.list_page(limit, after=after)
        assert log.list(with_metadata=True) == before

    def test_list_page_when_closed(self, location: Path) -> None:
        log = self.paged(self.open_checkpointer(location))
        log.close()
        with pytest.raises(CheckpointerClosedError):
            log.list_page()
