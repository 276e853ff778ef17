"""A reader holds one page: the events it has handed out are the caller's alone.

``read``, ``read_json``, ``follow`` and ``follow_json`` fetch a page at a time.
When a reader reads its next page, no list of the reader's still holds an
event of the page before: a long replay keeps one page in memory, not two,
and the cyclic collector does not walk events the caller has dropped
(holding the old page while the next was read cost a PostgreSQL replay a
fifth of its time). Each backend's page read is watched: at each read after
the first page, the first page's first event must be held by no list.
Checked on every backend, sync and async.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.aio import AsyncMemoryCheckpointer, AsyncSqliteCheckpointer
from agentlog.log import BaseCheckpointer

from ..conftest import LOG_BACKENDS, open_log, postgres_conninfo, postgres_schema

#: More than two pages (every backend reads 1,000 events a page).
EVENTS = [{"type": "user", "content": f"m {i}", "parts": [{"n": i}]} for i in range(2500)]
#: The events a reader has handed out once it holds the second page.
PAST_THE_FIRST_PAGE = 1001

#: The calls that page through a session, each given the session's id
#: (``follow_json`` is the async checkpointers' own).
READERS: dict[str, Callable[[Any, str], Any]] = {
    "read": lambda log, session: log.read(session),
    "read_json": lambda log, session: log.read_json(session),
    "follow": lambda log, session: log.follow(session, poll_interval=0.05),
}
ASYNC_READERS: dict[str, Callable[[Any, str], Any]] = {
    **READERS,
    "follow_json": lambda log, session: log.follow_json(session, poll_interval=0.05),
}


def pages_holding(event: object) -> list[list[Any]]:
    """The lists that still hold ``event`` (its page, while a reader keeps it)."""
    gc.collect()
    return [holder for holder in gc.get_referrers(event) if type(holder) is list]


class PageWatch:
    """Wraps a backend's page reads: each read made once :attr:`first` is set
    records the lists then holding it (the reader's old page, if it kept it)."""

    def __init__(self) -> None:
        self.first: object | None = None
        self.seen: list[list[list[Any]]] = []

    def wrap(self, monkeypatch: pytest.MonkeyPatch, target: object, *names: str) -> None:
        """Wrap ``target``'s page reads ``names`` (sync or async methods)."""
        for name in names:
            read = getattr(target, name)
            if asyncio.iscoroutinefunction(read):

                async def watched_async(*args: Any, _read: Any = read) -> Any:
                    self.look()
                    return await _read(*args)

                monkeypatch.setattr(target, name, watched_async)
            else:

                def watched(*args: Any, _read: Any = read) -> Any:
                    self.look()
                    return _read(*args)

                monkeypatch.setattr(target, name, watched)

    def wrap_pages(self, monkeypatch: pytest.MonkeyPatch, log: BaseCheckpointer) -> None:
        """Wrap the page read that ``log``'s reads hand to ``_pages``: a backend
        may read its pages with a reader of its own rather than ``_scan``
        (PostgreSQL reads each next page ahead)."""
        pages = log._pages

        def watched_pages(session_id: str, since: int, limit: int | None, scan: Any) -> Any:
            def watched_scan(*args: Any) -> Any:
                self.look()
                return scan(*args)

            return pages(session_id, since, limit, watched_scan)

        monkeypatch.setattr(log, "_pages", watched_pages)

    def look(self) -> None:
        """Record what holds the first event, at a page read after the first page."""
        if self.first is not None:
            self.seen.append(pages_holding(self.first))


@pytest.fixture(params=LOG_BACKENDS)
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointer]:
    """A checkpointer of each backend holding ``EVENTS`` in session ``s``."""
    with open_log(request.param, tmp_path, request) as found:
        found.append("s", EVENTS)
        yield found


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_reading_its_next_page_holds_none_of_the_last(
    log: BaseCheckpointer, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = PageWatch()
    watch.wrap(monkeypatch, log, "_scan", "_scan_json")
    watch.wrap_pages(monkeypatch, log)
    events = READERS[reader](log, "s")
    try:
        first = next(events)
        assert pages_holding(first), "the page is the reader's while it hands it out"
        watch.first = first
        for _ in range(PAST_THE_FIRST_PAGE - 1):
            last = next(events)
        assert last.seq == PAST_THE_FIRST_PAGE
    finally:
        events.close()
    assert watch.seen, "the second page was read"
    assert watch.seen == [[]] * len(watch.seen)


@pytest.mark.parametrize("reader", sorted(ASYNC_READERS))
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_an_async_reader_reading_its_next_page_holds_none_of_the_last(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kind: str,
    reader: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watch = PageWatch()

    async def main() -> None:
        if kind == "memory":
            log: Any = AsyncMemoryCheckpointer()
        elif kind == "sqlite":
            log = AsyncSqliteCheckpointer(tmp_path / "a.db")
        else:
            request.getfixturevalue("postgres_server")
            from agentlog.aio import AsyncPostgresCheckpointer

            log = AsyncPostgresCheckpointer(postgres_conninfo(), schema=postgres_schema(tmp_path))
        async with log:
            await log.append("s", EVENTS)
            if kind == "postgres":
                watch.wrap(monkeypatch, log, "_checked_scan")
            else:
                watch.wrap(monkeypatch, log.backend, "_scan", "_scan_json")
            events: AsyncIterator[Any] = ASYNC_READERS[reader](log, "s")
            try:
                first = await anext(events)
                assert pages_holding(first), "the page is the reader's while it hands it out"
                watch.first = first
                for _ in range(PAST_THE_FIRST_PAGE - 1):
                    last = await anext(events)
                assert last.seq == PAST_THE_FIRST_PAGE
            finally:
                await events.aclose()  # type: ignore[attr-defined]

    asyncio.run(main())
    assert watch.seen, "the second page was read"
    assert watch.seen == [[]] * len(watch.seen)
