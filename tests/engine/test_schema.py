"""The file format both engines share: WAL and the schema marks, refusing newer
and foreign files untouched, 64-bit keys at the seq bound, rows written by hand."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentlog import (
    SchemaVersionError,
    SessionListing,
    SessionMetadata,
    SqliteCheckpointer,
    SqliteStorage,
    StorageUnavailableError,
)
from agentlog.activity import activity_key
from agentlog.engine.schema import APPLICATION_ID, MAX_SEQ, MAX_SID, MIGRATIONS, SCHEMA_VERSION

from ..conftest import digest

EVENT = {"type": "user", "content": "hello"}


def test_open_sets_wal_and_marks_the_schema(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    SqliteCheckpointer(db, engine=engine).close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    finally:
        conn.close()


def test_newer_schema_is_refused_before_anything_changes(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "new.db"
    with SqliteCheckpointer(db, engine=engine) as cp:
        cp.append("s", [EVENT])
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = digest(db)
    with pytest.raises(SchemaVersionError, match="newer"):
        SqliteCheckpointer(db, engine=engine)
    assert digest(db) == before
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1
    finally:
        conn.close()


def test_another_applications_database_is_left_alone(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "theirs.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)")
    conn.execute("INSERT INTO accounts VALUES (1, 100)")
    conn.commit()
    conn.close()
    before = digest(db)
    with pytest.raises(SchemaVersionError, match="another application"):
        SqliteCheckpointer(db, engine=engine)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA application_id = 1234")
    conn.close()
    assert digest(db) != before
    before = digest(db)
    with pytest.raises(SchemaVersionError, match="not an agentlog database"):
        SqliteCheckpointer(db, engine=engine)
    assert digest(db) == before


def test_64_bit_keys_and_the_seq_bound(tmp_path: Path, engine: str) -> None:
    """Seq values near 2**32 and event keys near 2**63 come back exactly."""
    db = tmp_path / "big.db"
    SqliteCheckpointer(db, engine=engine).close()
    conn = sqlite3.connect(db)
    start = MAX_SEQ - 3
    conn.execute(
        "INSERT INTO sessions (sid, tenant, name, head, created, mtime)"
        " VALUES (?, 'default', 'edge', ?, 0, 0)",
        (MAX_SID, start),
    )
    conn.execute(
        "INSERT INTO events (id, ts, type, data) VALUES (?, 0, 'user', ?)",
        ((MAX_SID << 32) | start, b'{"type":"user"}'),
    )
    conn.commit()
    conn.close()
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert cp.head("edge") == start
        assert cp.append("edge", [EVENT, EVENT], expected_head=start) == MAX_SEQ - 1
        assert cp.append("edge", [EVENT]) == MAX_SEQ
        with pytest.raises(ValueError, match="exceed"):
            cp.append("edge", [EVENT])
        stored = list(cp.read("edge", since_seq=start - 1))
        assert [e.seq for e in stored] == [start, MAX_SEQ - 2, MAX_SEQ - 1, MAX_SEQ]
        assert [e.parent_seq for e in stored] == [start - 1, start, MAX_SEQ - 2, MAX_SEQ - 1]
        assert stored[-1].seq == 2**32 - 1
        # The file's largest session number is taken: no new one fits above it.
        with pytest.raises(StorageUnavailableError, match="too many sessions"):
            cp.fork("edge", MAX_SEQ - 1, "edge-copy")
        with pytest.raises(StorageUnavailableError, match="too many sessions"):
            cp.append("new", [EVENT])
        assert cp.truncate("edge", start) == start
        assert cp.head("edge") == start


def test_rows_written_by_hand_are_read_as_they_are(tmp_path: Path, engine: str) -> None:
    """A type outside the nine (a hand-edited or future file) comes back verbatim."""
    db = tmp_path / "hand.db"
    with SqliteCheckpointer(db, engine=engine) as cp:
        cp.append("s", [EVENT])
    conn = sqlite3.connect(db)
    sid = conn.execute("SELECT sid FROM sessions WHERE name = 's'").fetchone()[0]
    conn.execute(
        "INSERT INTO events (id, ts, type, data) VALUES (?, 2.5, 'custom-kind', ?)",
        ((sid << 32) | 2, b'{"type":"custom-kind","x":1}'),
    )
    conn.execute("UPDATE sessions SET head = 2 WHERE sid = ?", (sid,))
    conn.commit()
    conn.close()
    with SqliteCheckpointer(db, engine=engine) as cp:
        first, second = cp.read("s")
        assert (first.type, second.type, second.ts) == ("user", "custom-kind", 2.5)
        assert second.event == {"type": "custom-kind", "x": 1}


def _activity_index(db: Path) -> dict[str, list[str]]:
    """The columns of the file's activity indexes, by name (none: no index)."""
    conn = sqlite3.connect(db)
    try:
        return {
            name: [row[2] for row in conn.execute(f"PRAGMA index_info({name})")]
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions'"
                " AND name LIKE 'sessions_by_act%' ORDER BY name"
            )
        }
    finally:
        conn.close()


ACTIVITY_INDEX = {"sessions_by_active_second": ["tenant", "active", "name"]}


def test_a_version_9_file_gets_the_keyset_activity_index_and_nothing_else(
    tmp_path: Path, engine: str
) -> None:
    """Version 10 dropped sessions_by_activity (tenant, mtime); version 12
    built it again with the name, for list_page's keyset, and version 13
    replaced it with the one-second activity index. list() still orders as
    it did."""
    db = tmp_path / "v9.db"
    with SqliteCheckpointer(db, engine=engine) as cp:
        for name in ("a", "b", "c"):
            cp.append(name, [EVENT])
        cp.append("a", [EVENT])
    conn = sqlite3.connect(db)
    conn.execute("DROP INDEX sessions_by_active_second")  # what step 13 adds
    conn.execute("DROP TRIGGER sessions_active_on_insert")
    conn.execute("DROP TRIGGER sessions_active_on_update")
    conn.execute("ALTER TABLE sessions DROP COLUMN active")
    conn.execute("CREATE INDEX sessions_by_activity ON sessions (tenant, mtime)")
    conn.execute("DROP TABLE append_keys")  # what step 11 adds: a real version-9 file
    conn.execute("DROP TABLE fork_origins")  # and step 12
    conn.execute("PRAGMA user_version = 9")
    conn.close()
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert [(info.id, info.head) for info in cp.list()] == [("a", 2), ("c", 1), ("b", 1)]
        assert [event.seq for event in cp.read("a")] == [1, 2]
        by_activity = sorted(cp.list(), key=lambda s: activity_key(s.mtime, s.id), reverse=True)
        assert [row.id for row in cp.list_page(2).sessions] == [s.id for s in by_activity[:2]]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()
    assert _activity_index(db) == ACTIVITY_INDEX


def test_a_new_file_has_the_keyset_activity_index(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "new.db"
    SqliteCheckpointer(db, engine=engine).close()
    assert _activity_index(db) == ACTIVITY_INDEX
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    finally:
        conn.close()


def test_the_activity_second_follows_every_write_of_mtime(tmp_path: Path, engine: str) -> None:
    """Schema step 13's column is mtime truncated, after whichever write
    stamped it: the first append, later appends, metadata, a truncate, a fork."""
    db = tmp_path / "active.db"
    with SqliteCheckpointer(db, engine=engine) as cp:
        cp.append("s", [EVENT, EVENT])
        cp.append("s", [EVENT])
        cp.set_metadata("s", {"title": "t"}, cp.metadata("s").revision)
        cp.append("t", [EVENT])
        cp.truncate("t", 0)
        cp.fork("s", 2, "f")
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT name, mtime, active FROM sessions ORDER BY name").fetchall()
    finally:
        conn.close()
    assert [name for name, _, _ in rows] == ["f", "s", "t"]
    assert all(active == int(mtime) for _, mtime, active in rows), rows


def test_the_activity_second_is_rewritten_only_in_a_new_second(tmp_path: Path) -> None:
    """A write of mtime within the session's second leaves ``active`` (and so
    its index entry) alone: the trigger changes a row only when the second
    moves, which ``total_changes`` counts (it includes triggers' rows)."""
    db = tmp_path / "seconds.db"
    SqliteCheckpointer(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        second = 1_800_000_000
        conn.execute(
            "INSERT INTO sessions (sid, tenant, name, head, created, mtime, revision)"
            " VALUES (1, 'default', 's', 0, ?, ?, 1)",
            (second + 0.5, second + 0.5),
        )
        assert conn.execute("SELECT active FROM sessions").fetchone() == (second,)
        changed = []
        for mtime in (second + 0.75, second + 0.99, second + 1.25, second + 1.5, second - 3.5):
            before = conn.total_changes
            conn.execute("UPDATE sessions SET mtime = ? WHERE sid = 1", (mtime,))
            changed.append(conn.total_changes - before)
            assert conn.execute("SELECT active FROM sessions").fetchone() == (int(mtime),)
        assert changed == [1, 1, 2, 1, 2]
    finally:
        conn.close()


def test_a_page_by_activity_reads_the_index(tmp_path: Path, engine: str) -> None:
    """The page's statements are ranges of the index, not a sort of the table."""
    from agentlog.engine import sql as Q

    db = tmp_path / "plan.db"
    SqliteCheckpointer(db, engine=engine).close()
    conn = sqlite3.connect(db)
    try:
        for statement, args in (
            (Q.LIST_SESSIONS_PAGE, ("default", 10)),
            (Q.LIST_SESSIONS_PAGE_AFTER, ("default", 1.0, "s", 10)),
        ):
            plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, args))
            assert "USING INDEX sessions_by_active_second" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
    finally:
        conn.close()


def make_old_file(path: Path, version: int) -> None:
    """A file of schema ``version`` built by that version's own statements,
    holding session "old" with one event."""
    conn = sqlite3.connect(path)
    for step in range(1, version + 1):
        for statement in MIGRATIONS[step]:
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute(
        "INSERT INTO sessions (sid, tenant, name, head, created, mtime) "
        "VALUES (1, 'default', 'old', 1, 1.0, 2.0)"
    )
    if version >= 5:  # an append there gave the session revision 1
        conn.execute("UPDATE sessions SET revision = 1")
    payload = b'{"type":"user","content":"hi"}'
    conn.execute(
        "INSERT INTO events (id, ts, type, data) VALUES (?, 1.5, 'user', ?)",
        ((1 << 32) | 1, payload),
    )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_an_older_file_is_read_in_full_read_only_and_left_as_it_is(
    tmp_path: Path, engine: str, version: int
) -> None:
    """A read-only open cannot migrate: every read (the log's, its metadata,
    the stores', a deep check) sees the file as the current version would,
    with what the file lacks empty, and the file is not written."""
    db = tmp_path / f"v{version}.db"
    make_old_file(db, version)
    before = digest(db)
    with SqliteCheckpointer(db, engine=engine, read_only=True) as cp:
        assert [(e.seq, e.event["content"]) for e in cp.read("old")] == [(1, "hi")]
        assert cp.head("old") == 1
        assert cp.metadata("old") == SessionMetadata(None, 1)
        assert cp.list(with_metadata=True) == [SessionListing("old", 2.0, 1, None, 1)]
        assert cp.check_integrity(deep=True) == (True, "ok")
    with SqliteStorage.open(db, engine=engine, read_only=True) as storage:
        loaded = storage.sessions.load("default", "old")
        assert (loaded.session.revision, loaded.snapshot, len(loaded.items)) == (1, None, 1)
        assert storage.memory.list("default", "ns") == []
        assert storage.checkpoints.list("default") == []
        assert storage.artifacts.list("default") == []
    assert digest(db) == before
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def test_a_version_10_file_gains_append_keys_and_keeps_its_events(
    tmp_path: Path, engine: str
) -> None:
    """Version 11 adds append_keys: an older file's events stay, and keyed
    appends work on it at once (its old appends have no keys)."""
    db = tmp_path / "v10.db"
    make_old_file(db, 10)
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert [event.seq for event in cp.read("old")] == [1]
        assert cp.append("old", [EVENT], key="k") == 2
        assert cp.append("old", [EVENT], expected_head=1, key="k") == 2
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT key, head FROM append_keys").fetchall() == [("k", 2)]
    finally:
        conn.close()
