"""The C engine's ``scan_json`` (read_json's page, stepped and built in C) gives
exactly what the shared path of both twins gives (``LogOperations.scan_json``,
in Python, on the same file): the same RawEvents, field by field and type by
type, for every event type, a kind outside the nine, payloads of every size,
pages cut by ``since_seq`` and ``limit``, stamps shared or not; the same error,
in the same words, on a damaged event; and rows stored before checksums take
the shared path's check (each decoded once) on both."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog import CorruptDatabaseError, RawEvent, SqliteCheckpointer
from agentlog.engine.log_ops import LogOperations
from agentlog.events import EVENT_TYPES, REQUIRED_FIELDS

from ..conftest import require_engine


def shapes() -> list[dict[str, Any]]:
    """One event of each type, with the fields it needs, and a few of every size."""
    out: list[dict[str, Any]] = []
    for kind in sorted(EVENT_TYPES):
        event: dict[str, Any] = {"type": kind}
        for name in REQUIRED_FIELDS.get(kind, ()):
            event[name] = "x" if name != "content" else [{"type": "text", "text": "hé ✓"}]
        out.append(event)
    out.append({"type": "user", "content": "", "n": None, "f": 1.5, "b": True})
    out.append({"type": "user", "content": "long " * 20_000})  # past the page's first buffer
    out.append({"type": "assistant", "content": [], "nested": [[[{"a": -(2**63)}]]]})
    return out


def shared(cp: SqliteCheckpointer) -> Callable[[str, str, int, int], list[RawEvent]]:
    """The shared path (both twins' ``LogOperations.scan_json``) on ``cp``'s engine."""
    engine: Any = cp._engine
    return lambda *args: LogOperations.scan_json(engine, *args)


def both(cp: SqliteCheckpointer, since: int, limit: int) -> tuple[list[Any], list[Any]]:
    """The C engine's page and the shared path's, of session ``s``."""
    return (
        cp._engine.scan_json(cp._tenant, "s", since, limit),
        shared(cp)(cp._tenant, "s", since, limit),
    )


def fields(page: list[Any]) -> list[list[tuple[type, object]]]:
    assert all(type(event) is RawEvent for event in page)
    return [[(type(value), value) for value in event] for event in page]


def page_errors(cp: SqliteCheckpointer) -> list[tuple[int | None, str]]:
    """The damaged seq and the message each path's first page of ``s`` raises."""
    errors: list[tuple[int | None, str]] = []
    for scan in (cp._engine.scan_json, shared(cp)):
        with pytest.raises(CorruptDatabaseError) as caught:
            scan(cp._tenant, "s", 0, 10)
        errors.append((caught.value.seq, str(caught.value)))
    return errors


@pytest.fixture
def cp(tmp_path: Path) -> Any:
    require_engine("c")
    with SqliteCheckpointer(tmp_path / "a.db", engine="c") as log:
        yield log


def test_pages_equal_the_shared_path_type_for_type(cp: SqliteCheckpointer) -> None:
    events = shapes()
    for start in range(0, len(events), 3):  # several appends: stamps differ
        cp.append("s", events[start : start + 3])
    cp.append("s", [{"type": "user", "content": f"m {i}"} for i in range(1500)])
    head = cp.head("s")
    for since, limit in ((0, 1000), (0, head + 10), (2, 5), (head - 1, 10), (head, 10), (0, 1)):
        c_page, theirs = both(cp, since, limit)
        assert fields(c_page) == fields(theirs)
        assert len(c_page) == min(limit, head - since)
    assert cp._engine.scan_json(cp._tenant, "unknown", 0, 10) == []
    # What read_json hands out on the C engine is the C page.
    assert fields(list(cp.read_json("s"))) == fields(both(cp, 0, head + 1)[1])


def test_a_kind_outside_the_nine_and_a_gap_read_the_same(
    cp: SqliteCheckpointer, tmp_path: Path
) -> None:
    cp.append("s", [{"type": "user", "content": str(i)} for i in range(6)])
    conn = sqlite3.connect(tmp_path / "a.db")
    with conn:
        # A type column outside the canonical nine (as an older writer may have
        # stored), and a hole in the seqs (as damage would leave).
        conn.execute("UPDATE events SET type = 'legacy_kind' WHERE id & 4294967295 = 2")
        conn.execute("DELETE FROM events WHERE id & 4294967295 = 4")
    conn.close()
    c_page, theirs = both(cp, 0, 10)
    assert fields(c_page) == fields(theirs)
    assert [e.type for e in c_page][:2] == ["user", "legacy_kind"]
    assert [(e.seq, e.parent_seq) for e in c_page][3] == (5, 4)


def test_rows_without_a_checksum_are_checked_as_the_shared_path_checks(
    cp: SqliteCheckpointer, tmp_path: Path
) -> None:
    cp.append("s", [{"type": "user", "content": str(i)} for i in range(6)])
    conn = sqlite3.connect(tmp_path / "a.db")
    with conn:
        conn.execute("UPDATE events SET crc = NULL WHERE id & 4294967295 IN (2, 3)")
    c_page, theirs = both(cp, 0, 10)
    assert fields(c_page) == fields(theirs)
    with conn:  # written before checksums, and not a JSON object
        conn.execute("UPDATE events SET data = ? WHERE id & 4294967295 = 3", (b"[1]",))
    conn.close()
    errors = page_errors(cp)
    assert errors[0] == errors[1] and errors[0][0] == 3


def test_a_damaged_event_raises_the_shared_paths_error(
    cp: SqliteCheckpointer, tmp_path: Path
) -> None:
    cp.append("s", [{"type": "user", "content": str(i)} for i in range(6)])
    conn = sqlite3.connect(tmp_path / "a.db")
    with conn:
        conn.execute(
            "UPDATE events SET data = ? WHERE id & 4294967295 = 4",
            (b'{"type":"user","content":"9"}',),
        )
    conn.close()
    errors = page_errors(cp)
    assert errors[0] == errors[1] and errors[0][0] == 4
    # read_json hands out the events before it, then raises naming it.
    seen: list[int] = []
    with pytest.raises(CorruptDatabaseError):
        seen.extend(event.seq for event in cp.read_json("s"))
    assert seen == [1, 2, 3]
