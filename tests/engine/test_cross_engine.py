"""A file written by one engine is read and extended by the other."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agentlog import SqliteCheckpointer

from ..conftest import ENGINES, require_engine


@pytest.mark.parametrize(("writer", "reader"), list(itertools.permutations(ENGINES, 2)))
def test_a_file_written_by_one_engine_is_read_and_extended_by_the_other(
    tmp_path: Path, writer: str, reader: str
) -> None:
    require_engine(writer)
    require_engine(reader)
    db = tmp_path / "shared.db"
    events = [{"type": "user", "content": "é" * i, "n": i} for i in range(50)]
    with SqliteCheckpointer(db, engine=writer) as cp:
        cp.append("a", events[:30])
        cp.append("b", events[:5])
        cp.fork("a", 10, "c")
        cp.truncate("b", 2)
    with SqliteCheckpointer(db, engine=reader) as cp:
        assert [e.event for e in cp.read("a")] == events[:30]
        assert [e.event for e in cp.read("c")] == events[:10]
        assert cp.head("b") == 2
        assert cp.append("a", events[30:], expected_head=30) == 50
        assert {info.id: info.head for info in cp.list()} == {"a": 50, "b": 2, "c": 10}
    with SqliteCheckpointer(db, engine=writer) as cp:
        assert [e.event for e in cp.read("a")] == events
        assert [e.seq for e in cp.read("a", since_seq=45)] == [46, 47, 48, 49, 50]
