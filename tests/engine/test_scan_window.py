"""The C engine builds a page of events with the cyclic collector held off
(its collections fall at the page's end) and gives the caller's collector
state back exactly: on or off, after a page that reads, one that is damaged
and one whose decode raises, on SQLite and in the PostgreSQL page builder.
The objects it returns stay tracked, so a cycle made of them is collected."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentlog import CorruptDatabaseError, RawEvent, SqliteCheckpointer, StoredEvent

from ..conftest import require_engine

PAGE = 1000  # the checkpointer's page size: one page, one window


def event(i: int) -> dict[str, Any]:
    return {"type": "user", "content": [{"type": "text", "text": f"message {i}"}], "n": i}


@pytest.fixture
def cengine() -> Any:
    require_engine("c")
    from agentlog.engine import cengine

    return cengine


@pytest.fixture(params=[True, False], ids=["collector-on", "collector-off"])
def collector(request: pytest.FixtureRequest) -> Iterator[bool]:
    """The collector's state before the read (and put back after the test)."""
    was = gc.isenabled()
    if request.param:
        gc.enable()
    else:
        gc.disable()
    try:
        yield request.param
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def collections_during(action: Callable[[], object]) -> int:
    """How many collections start while ``action`` runs, young ones every 100
    allocations (so a page of 1000 events built with it on would start 30)."""
    started = 0

    def count(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        started += phase == "start"

    threshold = gc.get_threshold()
    gc.set_threshold(100, 10, 10)
    gc.callbacks.append(count)
    try:
        action()
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
    return started


def filled(tmp_path: Path, n: int = PAGE) -> Path:
    db = tmp_path / "a.db"
    with SqliteCheckpointer(db, engine="c") as cp:
        cp.append("s", [event(i) for i in range(n)])
    return db


def rows(n: int = PAGE) -> list[tuple[int, float, str, bytes, int | None]]:
    """A PostgreSQL page as psycopg hands it over: ``(seq, ts, type, payload, crc)``."""
    from agentlog.engine.cengine import crc32

    payloads = [orjson.dumps(event(i)) for i in range(n)]
    return [(i + 1, 1.5, "user", p, crc32(p)) for i, p in enumerate(payloads)]


def test_a_page_starts_no_collection_while_it_is_built(tmp_path: Path, cengine: Any) -> None:
    db = filled(tmp_path)
    gc.enable()
    with SqliteCheckpointer(db, engine="c") as cp:
        kept: list[StoredEvent] = []
        during = collections_during(lambda: kept.extend(cp.read("s")))
    assert len(kept) == PAGE
    # 3000 tracked objects: 30 young collections if they ran as the page was
    # built; deferred, the page's end starts one (and the read path's own few
    # allocations at most one more).
    assert during <= 2, during
    assert gc.isenabled()


def test_a_read_json_page_starts_no_collection_while_it_is_built(
    tmp_path: Path, cengine: Any
) -> None:
    """read_json's page is built in C in the same window: its 1000 RawEvents
    (tracked tuples) start no young collection each 100 of them."""
    db = filled(tmp_path)
    gc.enable()
    with SqliteCheckpointer(db, engine="c") as cp:
        kept: list[RawEvent] = []
        during = collections_during(lambda: kept.extend(cp.read_json("s")))
    assert len(kept) == PAGE and orjson.loads(kept[7].json) == event(7)
    assert during <= 2, during
    assert gc.isenabled()
    # A RawEvent (ints, a float, a str, bytes; no __dict__) can be in no cycle:
    # the collector's later collections never walk what read_json returned.
    assert not any(map(gc.is_tracked, kept))
    assert not hasattr(kept[7], "__dict__")


def test_the_postgres_page_starts_no_collection_while_it_is_built(cengine: Any) -> None:
    page = rows()
    gc.enable()
    built: list[list[StoredEvent]] = []
    during = collections_during(lambda: built.append(cengine.postgres_page("s", page)))
    assert len(built[0]) == PAGE
    assert during <= 2, during
    assert gc.isenabled()


def test_a_read_gives_the_collector_state_back(
    tmp_path: Path, cengine: Any, collector: bool
) -> None:
    db = filled(tmp_path, PAGE + 5)  # two pages
    with SqliteCheckpointer(db, engine="c") as cp:
        kept = list(cp.read("s"))
    assert gc.isenabled() is collector
    assert [e.seq for e in kept] == list(range(1, PAGE + 6))
    assert kept[7].event == event(7)
    # Still tracked: a cycle made of what a read returned is collectable.
    assert gc.is_tracked(kept[7]) and gc.is_tracked(kept[7].event)
    assert gc.isenabled() is collector
    built = cengine.postgres_page("s", rows(3))
    assert gc.isenabled() is collector
    assert [e.event for e in built] == [event(0), event(1), event(2)]
    assert gc.is_tracked(built[0])


def test_a_damaged_page_gives_the_collector_state_back(
    tmp_path: Path, cengine: Any, collector: bool
) -> None:
    db = filled(tmp_path, 10)
    # A row written before checksums (crc NULL) and damaged since: it passes
    # the crc check, and the page's decode (in the window) refuses it.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE events SET data = ?, crc = NULL WHERE id = ?", (b'{"ty', 1 << 32 | 4))
    conn.close()
    with SqliteCheckpointer(db, engine="c") as cp, pytest.raises(CorruptDatabaseError) as caught:
        list(cp.read("s"))
    assert caught.value.seq == 4
    assert gc.isenabled() is collector
    with SqliteCheckpointer(db, engine="c") as cp, pytest.raises(CorruptDatabaseError) as caught:
        list(cp.read_json("s"))
    assert caught.value.seq == 4
    assert gc.isenabled() is collector
    page = rows(5)
    page[2] = (3, 1.5, "user", b'{"ty', None)
    with pytest.raises(CorruptDatabaseError) as caught:
        cengine.postgres_page("s", page)
    assert caught.value.seq == 3
    assert gc.isenabled() is collector


def test_a_decode_that_raises_gives_the_collector_state_back(
    tmp_path: Path, cengine: Any, collector: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error out of the window that is not a damaged page (here the decode
    runs out of memory) goes to the caller, the collector's state put back;
    and the decode did run with the collector off."""
    db = filled(tmp_path, 10)
    seen: list[bool] = []

    def failing(data: object) -> object:
        seen.append(gc.isenabled())
        raise MemoryError("decode: out of memory")

    monkeypatch.setattr(cengine, "decode_json", failing)
    with SqliteCheckpointer(db, engine="c") as cp, pytest.raises(MemoryError):
        list(cp.read("s"))
    assert gc.isenabled() is collector
    with pytest.raises(MemoryError):
        cengine.postgres_page("s", rows(3))
    assert gc.isenabled() is collector
    assert seen == [False, False]
