"""PostgreSQL reads ask for each next page while they decode this one
(``engine.postgres.PageReader``): one statement a page and none again for a
damaged page's events, the same events as before, and a read ahead that
fails falls back to reading the page the usual way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import CorruptDatabaseError, PostgresCheckpointer

from ..conftest import postgres_conninfo, postgres_schema, terminate_idle_backends

PAGE = 10


def _events(count: int) -> list[dict[str, Any]]:
    return [{"type": "user", "content": f"event {n}"} for n in range(1, count + 1)]


@pytest.fixture
def admin(postgres_server: str) -> Iterator[Any]:
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        yield conn


@pytest.fixture
def log(tmp_path: Path, postgres_server: str) -> Iterator[PostgresCheckpointer]:
    with PostgresCheckpointer(
        postgres_conninfo(), schema=postgres_schema(tmp_path), pool_min_size=1, pool_max_size=2
    ) as opened:
        opened._page_size = PAGE  # pages of ten events: a read of 35 is four pages
        yield opened


def _counting(log: PostgresCheckpointer, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many pages the read asks for the usual way, and how many ahead."""
    db = log._db
    calls = {"query": 0, "ahead": 0}
    query, ahead = db.query, db.decode_ahead

    def counted_query(what: str, operation: Any, *args: Any) -> Any:
        if what == "reading":
            calls["query"] += 1
        return query(what, operation, *args)

    def counted_ahead(step: Any, work: Any) -> Any:
        calls["ahead"] += 1
        return ahead(step, work)

    monkeypatch.setattr(db, "query", counted_query)
    monkeypatch.setattr(db, "decode_ahead", counted_ahead)
    return calls


def test_each_next_page_is_read_ahead_and_the_events_are_the_same(
    log: PostgresCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(35)
    log.append("s", events)
    calls = _counting(log, monkeypatch)
    read = list(log.read("s"))
    assert [e.seq for e in read] == list(range(1, 36))
    assert [e.event for e in read] == events
    assert [e.parent_seq for e in read] == list(range(0, 35))
    # The first page the usual way, each of the three after it read ahead.
    assert calls == {"query": 1, "ahead": 3}
    assert [bytes(e.json) for e in log.read_json("s", since_seq=5)] == [
        bytes(e.json) for e in log.read_json("s", since_seq=5, limit=100)
    ]
    assert [e.seq for e in log.read("s", since_seq=3, limit=12)] == list(range(4, 16))


def test_events_appended_between_pages_are_read(log: PostgresCheckpointer) -> None:
    log.append("s", _events(25))
    reading = log.read("s")
    first = [next(reading).seq for _ in range(PAGE)]
    log.append("s", _events(20), expected_head=25)  # the third page is full now
    assert first + [e.seq for e in reading] == list(range(1, 46))


def test_a_damaged_event_is_raised_after_the_events_before_it_with_no_reread(
    log: PostgresCheckpointer, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append("s", _events(35))
    schema = log._db.schema
    admin.execute(
        f"UPDATE {schema}.events SET payload = %s WHERE seq = 24", (b'{"type":"user","x":1}',)
    )
    calls = _counting(log, monkeypatch)
    seen: list[int] = []
    with pytest.raises(CorruptDatabaseError) as raised:
        seen.extend(e.seq for e in log.read("s"))
    assert seen == list(range(1, 24))
    assert raised.value.seq == 24
    # The events before the damaged one are cut from the rows already read.
    assert calls == {"query": 1, "ahead": 3}


def test_a_read_ahead_on_a_lost_connection_falls_back_to_the_usual_read(
    log: PostgresCheckpointer, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.append("s", _events(35))
    calls = _counting(log, monkeypatch)
    reading = log.read("s")
    seqs = [next(reading).seq for _ in range(PAGE)]  # the second page is read ahead
    assert terminate_idle_backends(admin)
    seqs += [e.seq for e in reading]
    assert seqs == list(range(1, 36))
    # The third page's read ahead met a dead connection: it was read again,
    # the usual way (which retries on the next connection), and read ahead on.
    assert calls["query"] == 2 and calls["ahead"] == 3
