"""The SQLite backend: the conformance suite on a file and on ``:memory:`` with each
engine, and with ``synchronous="full"``; refusing what is not a database,
integrity, options, busy writers in another process, sharing a file."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from agentlog import (
    Checkpointer,
    CorruptDatabaseError,
    SqliteCheckpointer,
    StorageUnavailableError,
)
from agentlog.testing import CheckpointerConformance, checkpointer_conformance

from ..conftest import PYTHON, OnEngine, digest


# At module level, so that the two-process tests' children (started with
# spawn) can import them; each runs on each engine (OnEngine).
class TestSqliteCheckpointer(OnEngine, CheckpointerConformance):
    multiprocess = True

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return SqliteCheckpointer(location / "agentlog.db", engine=self.engine)


class TestSqliteInMemory(OnEngine, CheckpointerConformance):
    durable = False

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return SqliteCheckpointer(":memory:", engine=self.engine)


def open_sqlite_full(location: Path) -> Checkpointer:
    return SqliteCheckpointer(location / "full.db", synchronous="full")


# The function form of the suite, as a third party would use it (default engine).
TestSqliteSynchronousFull = checkpointer_conformance(
    open_sqlite_full, multiprocess=True, name="TestSqliteSynchronousFull"
)


EVENT = {"type": "user", "content": "hello"}


def test_a_file_that_is_not_a_database_is_a_typed_error(tmp_path: Path, engine: str) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all" * 200)
    before = digest(junk)
    with pytest.raises(CorruptDatabaseError):
        SqliteCheckpointer(junk, engine=engine)
    assert digest(junk) == before


def test_missing_directory_is_a_typed_error(tmp_path: Path, engine: str) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(StorageUnavailableError, match="no such directory") as raised:
        SqliteCheckpointer(missing / "a.db", engine=engine)
    assert str(missing) in str(raised.value)
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_directory_is_no_database(tmp_path: Path, engine: str, read_only: bool) -> None:
    # SQLite itself says "unable to open database file" or "disk I/O error".
    with pytest.raises(StorageUnavailableError, match="it is a directory, not a database file"):
        SqliteCheckpointer(tmp_path, engine=engine, read_only=read_only)
    assert list(tmp_path.iterdir()) == []


def corrupt_copy(tmp_path: Path, engine: str) -> Path:
    """A database whose event table pages are overwritten with garbage."""
    db = tmp_path / "corrupt.db"
    SqliteCheckpointer(db, engine=engine).close()
    conn = sqlite3.connect(db)
    # The schema's own pages (page 1, and the leaves it has split into once
    # it outgrew page 1: the empty file's pages that are no table's root)
    # stay whole, so that the file still opens and its tables are damaged.
    roots = {row[0] for row in conn.execute("SELECT rootpage FROM sqlite_master")}
    schema = set(range(1, conn.execute("PRAGMA page_count").fetchone()[0] + 1)) - roots
    conn.close()
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
        if page + 1 in schema:  # (page numbers count from 1)
            continue
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
time.sleep(float(sys.argv[2]))  # holds the lock this long, as a long write would
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
