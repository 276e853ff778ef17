"""Operating a SQLite file: a bounded WAL, statistics, online backup, retention,
and waiting for the write lock (on both engines, against real processes)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agentlog import (
    CorruptDatabaseError,
    EventsPrunedError,
    SqliteCheckpointer,
    SqliteStorage,
    StorageUnavailableError,
)

from ..cli.running import agentlog_run, ok, refused
from ..conftest import PYTHON

EVENT = {"type": "user", "content": "x" * 2000}
LIMIT = 256 * 1024

#: Another process holds a read snapshot (or the write lock) until told.
HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE" if sys.argv[2] == "write" else "BEGIN")
db.execute("SELECT count(*) FROM events").fetchone()
print("holding", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


class Holder:
    """A process holding a read snapshot or the write lock of ``path``."""

    def __init__(self, path: Path, kind: str) -> None:
        self.process = subprocess.Popen(
            [PYTHON, "-c", HOLD, str(path), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "holding\n"

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=30) == 0


def wal_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_the_wal_stays_bounded_and_shrinks_once_a_reader_lets_go(
    tmp_path: Path, engine: str
) -> None:
    def peak_wal(path: Path, limit: int) -> int:
        peak = 0
        with SqliteCheckpointer(path, engine=engine, wal_size_limit=limit) as log:
            for n in range(1500):  # ~3 MB of events, 1,500 commits
                log.append(f"s{n % 7}", [EVENT])
                peak = max(peak, wal_size(path))
        return peak

    # Bounded: the limit plus what the 16 commits between two looks add
    # (~8 pages each here); SQLite alone lets it reach its 1,000-page
    # automatic checkpoint, and more while readers hold it.
    bound = LIMIT + 16 * 8 * 4200
    assert peak_wal(tmp_path / "bounded.db", LIMIT) < bound
    assert peak_wal(tmp_path / "default.db", 64 * 1024 * 1024) > bound

    path = tmp_path / "w.db"
    with SqliteCheckpointer(path, engine=engine, wal_size_limit=LIMIT) as log:
        for n in range(1500):
            log.append(f"s{n % 7}", [EVENT])
        assert wal_size(path) < bound

        # A reader holding an old snapshot keeps the WAL from being cut back...
        reader = Holder(path, "read")
        try:
            for _ in range(600):
                log.append("held", [EVENT])
            held = wal_size(path)
            assert held > LIMIT
            assert not log.checkpoint_wal()  # in the way: refused at once, nothing lost
        finally:
            reader.release()
        # ...and once it lets go, the WAL is truncated.
        assert log.checkpoint_wal()
        assert wal_size(path) == 0
        assert log.head("held") == 600
        assert sum(info.head for info in log.list()) == 2100


def test_wal_size_limit_is_checked(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        SqliteCheckpointer(tmp_path / "a.db", wal_size_limit="big")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SqliteCheckpointer(tmp_path / "a.db", wal_size_limit=-1)
    assert not (tmp_path / "a.db").exists()


def test_stats_count_every_tenant_and_see_free_space(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "s.db"
    with SqliteStorage.open(path, engine=engine) as storage:
        acme, globex = storage.checkpointer("acme"), storage.checkpointer("globex")
        acme.append("big", [EVENT] * 300)
        acme.append("small", [EVENT] * 2)
        globex.append("mid", [EVENT] * 40)
        figures = acme.stats()
        assert (figures["sessions"], figures["tenants"], figures["events"]) == (3, 2, 342)
        assert [(r["tenant"], r["session"], r["events"]) for r in figures["largest_sessions"]] == [
            ("acme", "big", 300),
            ("globex", "mid", 40),
            ("acme", "small", 2),
        ]
        assert figures["engine"] == engine and figures["page_size"] > 0
        assert figures["file_bytes"] == path.stat().st_size
        assert figures["wal_bytes"] == wal_size(path)
        acme.delete("big")
        acme.checkpoint_wal()
        after = acme.stats()
        assert after["events"] == 42 and after["free_pages"] > 0
        assert after["free_bytes"] == after["free_pages"] * after["page_size"]


def test_backup_while_a_writer_goes_on_is_a_consistent_verified_copy(
    tmp_path: Path, engine: str
) -> None:
    path, copy = tmp_path / "live.db", tmp_path / "copy.db"
    stop = threading.Event()
    with SqliteCheckpointer(path, engine=engine) as log:
        log.append("s", [EVENT] * 200)

        def write() -> None:
            n = 0
            while not stop.is_set():
                log.append(f"w{n % 5}", [dict(EVENT, n=n)])
                n += 1

        writer = threading.Thread(target=write)
        writer.start()
        try:
            figures = log.backup(copy)
        finally:
            stop.set()
            writer.join()
        assert figures["events"] >= 200
        with pytest.raises(StorageUnavailableError, match="already exists"):
            log.backup(copy)
    with SqliteCheckpointer(copy, read_only=True, engine=engine) as restored:
        assert restored.check_integrity() == (True, "ok")
        assert restored.head("s") == 200
        for info in restored.list():  # every session a gapless prefix
            assert [e.seq for e in restored.read(info.id)] == list(range(1, info.head + 1))
        assert sum(info.head for info in restored.list()) == figures["events"]


def test_a_backup_that_fails_its_check_is_removed(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "copy.db"
    with SqliteCheckpointer(tmp_path / "live.db", engine=engine) as log:
        log.append("s", [EVENT])
        real_backup = log._engine.backup_to

        def damaged(target: str) -> None:
            real_backup(target)
            with open(target, "r+b") as file:  # overwrite the schema's pages
                file.seek(4096)
                file.write(b"\xff" * 8192)

        monkeypatch.setattr(log._engine, "backup_to", damaged)
        with pytest.raises(CorruptDatabaseError):
            log.backup(copy)
    assert not copy.exists()


def test_delete_idle_returns_oldest_first_whatever_the_creation_order(
    tmp_path: Path, engine: str
) -> None:
    """Batches go in sid order (no index on activity); the names come back by
    last activity, and another tenant's idle sessions between them stay."""
    path = tmp_path / "r.db"
    with SqliteStorage.open(path, engine=engine) as storage:
        log, other = storage.checkpointer("acme"), storage.checkpointer("globex")
        for n in range(205):  # three batches of deletes
            log.append(f"s{n}", [EVENT])
            other.append(f"o{n}", [EVENT])
    conn = sqlite3.connect(path)
    # Activity the reverse of creation, all long ago.
    conn.execute("UPDATE sessions SET mtime = 1000 - sid")
    conn.commit()
    conn.close()
    with SqliteStorage.open(path, engine=engine) as storage:
        log = storage.checkpointer("acme")
        assert log.delete_idle(1) == [f"s{n}" for n in reversed(range(205))]
        assert log.list() == []
        assert len(storage.checkpointer("globex").list()) == 205


def test_delete_idle_keeps_what_was_written_after_the_cut_off(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "r.db"
    with SqliteStorage.open(path, engine=engine) as storage:
        log, other = storage.checkpointer("acme"), storage.checkpointer("globex")
        for n in range(250):  # more than one batch of deletes
            log.append(f"old{n}", [EVENT])
        other.append("old-elsewhere", [EVENT])
        time.sleep(0.05)  # the clock moves past the cut (0.02 s) for the old ones
        cut = 0.02
        log.append("fresh", [EVENT])
        log.append("old7", [EVENT])  # active again: kept
        deleted = log.delete_idle(cut)
        assert len(deleted) == 249 and "old7" not in deleted and "fresh" not in deleted
        assert deleted[0] == "old0"  # oldest first
        assert sorted(info.id for info in log.list()) == ["fresh", "old7"]
        assert [info.id for info in other.list()] == ["old-elsewhere"]  # another tenant's
        assert log.delete_idle(3600) == []
        with pytest.raises(ValueError):
            log.delete_idle(-1)


def test_a_waiting_append_gets_the_lock_when_it_is_released_and_gives_up_after_its_timeout(
    tmp_path: Path, engine: str
) -> None:
    path = tmp_path / "b.db"
    with SqliteCheckpointer(path, engine=engine, busy_timeout_ms=10_000) as log:
        log.append("s", [EVENT])
        holder = Holder(path, "write")
        threading.Timer(0.3, holder.release).start()
        assert log.append("s", [EVENT]) == 2  # waited, then wrote
    with SqliteCheckpointer(path, engine=engine, busy_timeout_ms=200) as log:
        holder = Holder(path, "write")
        try:
            started = time.monotonic()
            with pytest.raises(StorageUnavailableError, match="busy"):
                log.append("s", [EVENT])
            assert time.monotonic() - started >= 0.15  # it did wait for its timeout
        finally:
            holder.release()
        assert log.head("s") == 2


def test_the_commands(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with SqliteCheckpointer(path) as log:
        log.append("a", [EVENT] * 3)
        log.append("b", [EVENT])
    stats = ok("stats", path)
    assert "sessions 2 in 1 tenant(s), events 4" in stats and "largest sessions:" in stats
    assert '"events": 4' in ok("stats", path, "--json")
    assert "2 sessions, 4 events" in ok("backup", path, tmp_path / "copy.db")
    assert "already exists" in refused(agentlog_run("backup", path, tmp_path / "copy.db"))
    missing = tmp_path / "no-such-dir" / "copy.db"
    assert "no such directory" in refused(agentlog_run("backup", path, missing))
    assert "would delete 2 session(s)" in ok("gc", path, "--idle-days", "0", "--dry-run")
    assert "deleted 0 session(s) idle for more than 1 day(s)\n" in ok(
        "gc", path, "--idle-days", "1"
    )
    assert "days >= 0" in refused(agentlog_run("gc", path, "--idle-days", "-2"))
    assert "directory" in refused(agentlog_run("stats", tmp_path))
    assert "no such file" in refused(agentlog_run("backup", tmp_path / "nope.db", tmp_path / "x"))
    assert not (tmp_path / "nope.db").exists() and not (tmp_path / "x").exists()
    assert "deleted 2 session(s)" in ok("gc", path, "--idle-days", "0")
    with sqlite3.connect(tmp_path / "copy.db") as copy:  # the backup kept them
        assert copy.execute("SELECT count(*) FROM sessions").fetchone() == (2,)
    os.unlink(tmp_path / "copy.db")


def test_a_failing_wal_checkpoint_never_fails_the_committed_append(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SqliteCheckpointer(tmp_path / "f.db", engine=engine, wal_size_limit=0) as log:

        def broken() -> bool:
            raise StorageUnavailableError("checkpoint: disk I/O error")

        monkeypatch.setattr(log._engine, "_truncate_wal", broken)
        heads = [log.append("s", [EVENT]) for _ in range(40)]  # a look every 16th commit
        assert heads == list(range(1, 41))
        assert log.head("s") == 40


#: Another process appends to its own session until told to stop, then says
#: how many appends returned (any error ends it with a traceback).
APPENDER = """
import sys
from agentlog import SqliteCheckpointer
with SqliteCheckpointer(sys.argv[1], engine=sys.argv[2]) as log:
    log.append("other", [{"type": "user", "content": "first"}])
    print("appending", flush=True)
    n = 1
    while not sys.stdin.closed:
        log.append("other", [{"type": "user", "content": "y" * 500}], expected_head=n)
        n += 1
        if n % 50 == 0 and sys.stdin.readline() == "stop\\n":
            break
    print(n, flush=True)
"""


def fill(storage: SqliteStorage, sessions: int, events: int) -> None:
    """``sessions`` sessions of ``events`` 2 KB items each, in tenant ``t``."""
    for n in range(sessions):
        rev = storage.sessions.create("t", f"s{n}").revision
        items = [dict(EVENT, id=f"i{k}") for k in range(events)]
        storage.sessions.append("t", f"s{n}", rev, items)


def test_vacuum_gives_space_back_while_another_process_appends(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "v.db"
    with SqliteStorage.open(path, engine=engine) as storage:
        log = storage.checkpointer("t")
        fill(storage, 40, 100)  # ~8 MB
        assert log.stats()["auto_vacuum"] == "incremental"  # every new file
        for n in range(0, 40, 2):
            log.delete(f"s{n}")  # half the sessions
        for n in range(1, 40, 4):  # and most of the items of a quarter
            rev = storage.sessions.get("t", f"s{n}").revision
            storage.sessions.compact("t", f"s{n}", rev, 90, {"summary": n})
        assert sum(storage.sessions.prune_all("t", keep=0).values()) == 10 * 90
        kept = {info.id: list(log.read(info.id, 90 if int(info.id[1:]) % 4 == 1 else 0))
                for info in log.list()}  # fmt: skip
        log.checkpoint_wal()
        before = path.stat().st_size
        free = log.stats()["free_pages"]
        assert free * log.stats()["page_size"] > before * 0.6
        other = subprocess.Popen(
            [PYTHON, "-c", APPENDER, str(path), engine],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert other.stdout is not None and other.stdin is not None
        assert other.stdout.readline() == "appending\n"
        try:
            first = log.vacuum(max_pages=300)  # bounded
            assert first["pages_returned"] == 300
            done = log.vacuum()
        finally:
            other.stdin.write("stop\n" * 10_000)
            other.stdin.close()
            appended = int(other.stdout.readline())
            assert other.wait(timeout=60) == 0  # no error in the other process
        assert done["auto_vacuum"] == "incremental"
        assert done["pages_returned"] >= free - 300 - 10  # the appender reused a few
        log.checkpoint_wal()
        after = path.stat().st_size
        assert after < before * 0.4, (before, after)
        assert done["file_bytes"] < before
        assert log.check_integrity() == (True, "ok")
        assert {info.id: list(log.read(info.id, 90 if int(info.id[1:]) % 4 == 1 else 0))
                for info in log.list()} == kept  # fmt: skip
        assert storage.checkpointer().head("other") == appended


def test_a_file_without_a_page_map_keeps_working_and_its_backup_can_shrink(
    tmp_path: Path, engine: str
) -> None:
    path, copy = tmp_path / "old.db", tmp_path / "copy.db"
    with SqliteStorage.open(path, engine=engine) as storage:
        fill(storage, 10, 100)
    with sqlite3.connect(path, isolation_level=None) as db:  # as files before this version
        db.execute("PRAGMA auto_vacuum = NONE")
        db.execute("VACUUM")
        assert db.execute("PRAGMA auto_vacuum").fetchone() == (0,)
    with SqliteCheckpointer(path, engine=engine, tenant="t") as log:
        for n in range(5):
            log.delete(f"s{n}")
        log.checkpoint_wal()
        size = path.stat().st_size
        done = log.vacuum()
        assert (done["auto_vacuum"], done["pages_returned"]) == ("none", 0)
        assert done["free_pages"] > 0 and path.stat().st_size == size
        assert log.backup(copy)["auto_vacuum"] == "incremental"
    assert copy.stat().st_size < size * 0.7  # a copy leaves the free pages out
    with SqliteCheckpointer(copy, engine=engine, tenant="t") as log:
        log.delete("s5")
        log.checkpoint_wal()
        before = copy.stat().st_size
        assert log.vacuum()["pages_returned"] > 0
        assert copy.stat().st_size < before


def test_stats_and_the_integrity_check_know_a_pruned_session_from_a_gap(
    tmp_path: Path, engine: str
) -> None:
    path = tmp_path / "i.db"
    with SqliteStorage.open(path, engine=engine) as storage:
        fill(storage, 3, 10)
        for n in range(2):
            storage.sessions.compact("t", f"s{n}", 1, 6, {})
        storage.sessions.prune("t", "s0", keep=2)  # 1..4 go
        log = storage.checkpointer("t")
        assert log.stats()["events"] == 26
        assert log.check_integrity() == (True, "ok")
    damage = {
        "DELETE FROM events WHERE id = (1 << 32) + 7": "1 event(s) missing between 5 and 10",
        "DELETE FROM events WHERE id = (3 << 32) + 1": "events 1..1 are gone and no snapshot",
        "DELETE FROM snapshots WHERE sid = 1": "events 1..4 are gone and no snapshot",
        "DELETE FROM events WHERE id = (2 << 32) + 10": "its head is 10 but its last event is 9",
        "DELETE FROM sessions WHERE sid = 3": "10 event(s) belong to no session",
        "UPDATE snapshots SET through_seq = 12 WHERE sid = 2": "a snapshot covers up to 12",
    }
    for statement, problem in damage.items():
        copy = tmp_path / "damaged.db"
        with SqliteCheckpointer(path, engine=engine) as log:
            log.backup(copy)
        with sqlite3.connect(copy) as db:
            db.execute(statement)
        with SqliteCheckpointer(copy, engine=engine, read_only=True) as log:
            ok_, detail = log.check_integrity()
            assert not ok_ and problem in detail, (statement, detail)
        os.unlink(copy)


def test_gc_prunes_after_snapshots_and_gives_the_space_back(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    with SqliteStorage.open(path) as storage:
        fill(storage, 4, 50)
        for n in range(3):
            storage.sessions.compact("t", f"s{n}", 1, 40, {})
        storage.sessions.create("u", "s0")
        storage.sessions.append("u", "s0", 0, [dict(EVENT, id="a")])
        storage.sessions.compact("u", "s0", 1, 1, {})
    out = ok("gc", path, "--keep-after-snapshot", "10", "--tenant", "t", "--dry-run")
    assert "would prune 30 event(s) of s0" in out
    assert "would prune 90 event(s) of 3 session(s)" in out
    assert "would give" in out
    with SqliteStorage.open(path) as storage:  # the dry run deleted nothing
        assert next(iter(storage.checkpointer("t").read("s0"))).seq == 1
    out = ok("gc", path, "--keep-after-snapshot", "10", "--tenant", "t")
    assert "pruned 90 event(s) of 3 session(s), keeping each snapshot" in out
    assert "back to the file system; the file is" in out
    with SqliteStorage.open(path) as storage:
        log = storage.checkpointer("t")
        with pytest.raises(EventsPrunedError):
            list(log.read("s1"))
        assert [e.seq for e in log.read("s1", 30)] == list(range(31, 51))
        assert [e.seq for e in log.read("s3")] == list(range(1, 51))  # no snapshot
        assert [e.seq for e in storage.checkpointer("u").read("s0")] == [1]  # another tenant
        assert log.stats()["free_pages"] == 0
    assert "pruned 0 event(s) of 0 session(s)" in ok("gc", path, "--keep-after-snapshot", "1",
                                                       "--tenant", "u")  # fmt: skip
    assert "gave" in ok("gc", path)  # on its own: gives free space back
    for command in ("show", "tail"):
        line = refused(agentlog_run(command, path, "s1", "--tenant", "t", "--since", "29"))
        assert "before seq 31 were pruned" in line and "add --since 30" in line
    assert "s1-fork" not in ok("list", path, "--tenant", "t")
    assert "earliest point left is 40" in refused(
        agentlog_run("fork", path, "s1", "35", "s1-fork", "--tenant", "t")
    )
    for bad in ("-1", "x", "1.5"):
        assert "--keep-after-snapshot" in refused(
            agentlog_run("gc", path, "--keep-after-snapshot", bad)
        )
    assert "no such file" in refused(
        agentlog_run("gc", tmp_path / "nope.db", "--keep-after-snapshot", "1")
    )
    assert not (tmp_path / "nope.db").exists()
