"""SQLite specifics: WAL, schema mark, refusing foreign files, integrity, busy writers."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import os
import sqlite3
import subprocess
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from agentlog import (
    CheckpointConflictError,
    CorruptDatabaseError,
    SchemaVersionError,
    SqliteCheckpointer,
    StorageUnavailableError,
    engine_info,
)
from agentlog.engine.schema import APPLICATION_ID, MAX_SEQ, MAX_SID, SCHEMA_VERSION

from .conftest import ENGINES, PYTHON

PINNED_SQLITE_VERSION = "3.50.4"

EVENT = {"type": "user", "content": "hello"}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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


def test_a_file_that_is_not_a_database_is_a_typed_error(tmp_path: Path, engine: str) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all" * 200)
    before = digest(junk)
    with pytest.raises(CorruptDatabaseError):
        SqliteCheckpointer(junk, engine=engine)
    assert digest(junk) == before


def test_missing_directory_is_a_typed_error(tmp_path: Path, engine: str) -> None:
    with pytest.raises(StorageUnavailableError):
        SqliteCheckpointer(tmp_path / "no" / "such" / "dir" / "a.db", engine=engine)


def corrupt_copy(tmp_path: Path, engine: str) -> Path:
    """A database whose event table pages are overwritten with garbage."""
    db = tmp_path / "corrupt.db"
    with SqliteCheckpointer(db, engine=engine) as cp:
        for i in range(40):
            cp.append(f"s{i}", [dict(EVENT, content="x" * 2000)] * 5)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode = DELETE")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(db.read_bytes())
    for page in range(3, len(data) // page_size, 2):
        start = page * page_size
        data[start + 10 : start + 200] = b"\xff" * 190
    db.write_bytes(bytes(data))
    return db


def test_check_integrity_reports_ok_and_corruption(tmp_path: Path, engine: str) -> None:
    with SqliteCheckpointer(tmp_path / "ok.db", engine=engine) as cp:
        cp.append("s", [EVENT])
        assert cp.check_integrity() == (True, "ok")
    db = corrupt_copy(tmp_path, engine)
    with SqliteCheckpointer(db, engine=engine) as cp:
        ok, detail = cp.check_integrity()
        assert not ok
        assert detail


def test_integrity_check_on_open_raises_on_a_corrupt_file(tmp_path: Path, engine: str) -> None:
    db = corrupt_copy(tmp_path, engine)
    before = digest(db)
    with pytest.raises(CorruptDatabaseError):
        SqliteCheckpointer(db, integrity_check_on_open=True, engine=engine)
    assert digest(db) == before
    with SqliteCheckpointer(
        tmp_path / "fine.db", integrity_check_on_open=True, engine=engine
    ) as cp:
        assert cp.append("s", [EVENT]) == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"synchronous": "off"}, ValueError),
        ({"synchronous": "NORMAL"}, ValueError),
        ({"busy_timeout_ms": "5"}, TypeError),
        ({"busy_timeout_ms": True}, TypeError),
    ],
)
def test_bad_options_are_refused(
    tmp_path: Path, kwargs: dict[str, object], error: type, engine: str
) -> None:
    with pytest.raises(error):
        SqliteCheckpointer(tmp_path / "a.db", engine=engine, **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "a.db").exists()


def test_bad_path_type_is_refused() -> None:
    with pytest.raises(TypeError):
        SqliteCheckpointer(42)  # type: ignore[arg-type]


HOLD_WRITE_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def hold_write_lock(db: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding the write lock for ``seconds``."""
    holder = subprocess.Popen(
        [PYTHON, "-c", HOLD_WRITE_LOCK, str(db), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_busy_writer_fails_cleanly_after_the_timeout(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "busy.db"
    # A negative timeout is clamped to 0: fail at once instead of waiting.
    with SqliteCheckpointer(db, busy_timeout_ms=-50, engine=engine) as cp:
        cp.append("s", [EVENT])
        holder = hold_write_lock(db, 1.0)
        begin = time.monotonic()
        with pytest.raises(StorageUnavailableError, match="busy"):
            cp.append("s", [EVENT])
        assert time.monotonic() - begin < 0.5
        assert cp.head("s") == 1  # reads do not wait for the writer
        holder.wait()
        assert cp.append("s", [EVENT], expected_head=1) == 2


def test_busy_writer_waits_within_the_timeout(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "wait.db"
    with SqliteCheckpointer(db, busy_timeout_ms=10_000, engine=engine) as cp:
        cp.append("s", [EVENT])
        holder = hold_write_lock(db, 0.3)
        assert cp.append("s", [EVENT], expected_head=1) == 2
        holder.wait()


@pytest.mark.skipif(len(ENGINES) < 2, reason="needs both engines")
def test_one_process_opens_a_file_with_one_engine_at_a_time(tmp_path: Path) -> None:
    db = tmp_path / "one.db"
    with (
        SqliteCheckpointer(db, engine="c"),
        SqliteCheckpointer(db, engine="c"),
        pytest.raises(StorageUnavailableError, match="engine"),
    ):
        SqliteCheckpointer(db, engine="python")
    with SqliteCheckpointer(db, engine="python") as cp:
        assert cp.append("s", [EVENT]) == 1
        with pytest.raises(StorageUnavailableError, match="engine"):
            SqliteCheckpointer(db, engine="c")
    with SqliteCheckpointer(db, engine="c") as cp:
        assert cp.head("s") == 1


def test_two_objects_on_one_file_see_each_other(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "shared.db"
    with (
        SqliteCheckpointer(db, engine=engine) as one,
        SqliteCheckpointer(db, synchronous="full", engine=engine) as two,
    ):
        one.append("s", [EVENT])
        assert two.head("s") == 1
        two.append("s", [EVENT], expected_head=1)
        assert [e.seq for e in one.read("s")] == [1, 2]


def test_memory_databases_are_private(engine: str) -> None:
    with (
        SqliteCheckpointer(":memory:", engine=engine) as one,
        SqliteCheckpointer(":memory:", engine=engine) as two,
    ):
        one.append("s", [EVENT])
        assert two.head("s") == 0


def test_engine_info_names_engine_and_sqlite(engine: str) -> None:
    info = engine_info()
    assert info["engine"] == ENGINES[0]
    assert info["available"] == ENGINES
    assert info["sqlite_version"].count(".") == 2
    assert isinstance(info["compile_options"], list)
    with SqliteCheckpointer(":memory:", engine=engine) as cp:
        assert cp.engine == engine
    with SqliteCheckpointer(":memory:") as cp:
        assert cp.engine == info["engine"]


def test_extension_loaded_when_required() -> None:
    """CI sets AGENTLOG_REQUIRE_EXTENSIONS=1: a build that lost its C engine fails here."""
    info = engine_info()
    if os.environ.get("AGENTLOG_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        assert info["engine"] == "c", info["extension_error"]
        assert info["sqlite_version"] == PINNED_SQLITE_VERSION
        assert "THREADSAFE=2" in info["compile_options"]
        assert "OMIT_LOAD_EXTENSION" in info["compile_options"]
    elif "c" not in ENGINES:
        assert info["extension_error"]


def test_no_extensions_forces_the_pure_engine_at_import() -> None:
    script = "import agentlog, json; print(json.dumps(agentlog.engine_info()))"
    env = dict(os.environ, AGENTLOG_NO_EXTENSIONS="1")
    env.pop("AGENTLOG_REQUIRE_EXTENSIONS", None)
    run = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, env=env)
    info = json.loads(run.stdout)
    assert info["engine"] == "python"
    assert info["available"] == ["python"]
    assert "AGENTLOG_NO_EXTENSIONS" in info["extension_error"]


def test_unknown_engine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SqliteCheckpointer(tmp_path / "a.db", engine="rust")
    if "c" not in ENGINES:
        with pytest.raises(ImportError):
            SqliteCheckpointer(tmp_path / "a.db", engine="c")


@pytest.mark.parametrize(("writer", "reader"), list(itertools.permutations(ENGINES, 2)))
def test_a_file_written_by_one_engine_is_read_and_extended_by_the_other(
    tmp_path: Path, writer: str, reader: str
) -> None:
    db = tmp_path / "shared.db"
    events = [{"type": "user", "n": i, "text": "é" * i} for i in range(50)]
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


def test_repeated_calls_do_not_leak(tmp_path: Path, engine: str) -> None:
    """Object counts stay flat over many appends, reads and heads."""
    with SqliteCheckpointer(tmp_path / "leak.db", engine=engine) as cp:
        cp.append("s", [EVENT] * 20)

        def work(rounds: int) -> None:
            for i in range(rounds):
                cp.append("s", [dict(EVENT, i=i)], expected_head=cp.head("s"))
                for _ in cp.read("s", since_seq=10):
                    pass
                cp.head("missing")
                with contextlib.suppress(CheckpointConflictError):
                    cp.append("s", [EVENT], expected_head=0)

        work(200)
        gc.collect()
        before = len(gc.get_objects())
        tracemalloc.start()
        work(500)
        gc.collect()
        grown, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        after = len(gc.get_objects())
    # 500 rounds of several calls each: a per-call leak would show hundreds.
    assert after - before < 200
    assert grown < 256 * 1024


@pytest.mark.skipif("c" not in ENGINES, reason="group commit is the C engine's")
def test_group_commit_shares_transactions_and_keeps_results_exact(tmp_path: Path) -> None:
    threads, calls = 8, 150
    errors: list[BaseException] = []
    results: dict[int, list[int]] = {}
    with SqliteCheckpointer(tmp_path / "group.db", engine="c") as cp:
        barrier = threading.Barrier(threads)

        def writer(slot: int) -> None:
            try:
                barrier.wait()
                heads = []
                for n in range(calls):
                    heads.append(cp.append(f"s{slot}", [dict(EVENT, n=n)], expected_head=n))
                    # A stale write in the same groups: refused alone.
                    with contextlib.suppress(CheckpointConflictError):
                        cp.append(f"s{slot}", [EVENT], expected_head=0)
                        raise AssertionError("a stale append was accepted")
                results[slot] = heads
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors, errors
        assert all(heads == list(range(1, calls + 1)) for heads in results.values())
        for slot in range(threads):
            assert [e.event["n"] for e in cp.read(f"s{slot}")] == list(range(calls))
        commits = cp._engine.commits  # type: ignore[attr-defined]
    # Every successful append returned after a commit holding it; fewer
    # transactions than appends means concurrent appends shared them.
    assert 0 < commits < threads * calls * 2  # two appends per round


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
