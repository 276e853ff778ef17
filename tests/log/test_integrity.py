"""Integrity the log can prove: real damage made behind agentlog's back (raw
sqlite3 on SQLite, both engines; bytes changed on disk in a file store) is caught
on read, naming session and seq after every event before it, and listed by a deep
check; the opt-in hash chain proves edits, reordering and cuts. Old files and
lines without checksums keep reading."""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentlog import CorruptDatabaseError, FileCheckpointer, SqliteCheckpointer
from agentlog.engine.schema import (
    APPLICATION_ID,
    INTEGRITY_VERSION,
    MIGRATIONS,
    SCHEMA_VERSION,
)
from agentlog.integrity import GENESIS, chain_digest
from agentlog.log import BaseCheckpointer
from agentlog.log.file import session_file_name
from agentlog.log.follow import anchor_of

from ..conftest import postgres_conninfo, postgres_schema, undo_postgres_version_7

KEY = 1 << 32  # session 1's event keys: KEY | seq


def events(n: int, start: int = 1) -> list[dict[str, object]]:
    return [{"type": "user", "content": f"message {i}"} for i in range(start, start + n)]


def fill(db: Path, engine: str, n: int) -> None:
    with SqliteCheckpointer(db, engine=engine) as cp:
        cp.append("s", events(n))


def damage(db: Path, seq: int, data: bytes, sid: int = 1, *, keep_crc: bool = True) -> None:
    """Rewrite event ``seq``'s payload behind agentlog's back: its crc stays as
    it was, or (not ``keep_crc``) is cleared as in a row written before checksums."""
    key = (sid << 32) | seq
    if keep_crc:
        raw(db, ("UPDATE events SET data = ? WHERE id = ?", (data, key)))
    else:
        raw(db, ("UPDATE events SET data = ?, crc = NULL WHERE id = ?", (data, key)))


def read_until_error(cp: BaseCheckpointer, session: str) -> tuple[list[int], CorruptDatabaseError]:
    seen: list[int] = []
    with pytest.raises(CorruptDatabaseError) as caught:
        for event in cp.read(session):
            seen.append(event.seq)
    return seen, caught.value


def test_every_event_is_stored_with_its_payload_crc(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    fill(db, engine, 3)
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT data, crc FROM events ORDER BY id").fetchall()
    conn.close()
    assert [crc for _, crc in rows] == [zlib.crc32(data) for data, _ in rows]


@pytest.mark.parametrize("bad", [5, 1000, 1001, 1500])
def test_a_changed_payload_that_stays_valid_json_is_caught(
    tmp_path: Path, engine: str, bad: int
) -> None:
    db = tmp_path / "a.db"
    fill(db, engine, 2500)
    damage(db, bad, b'{"type":"user","content":"forged"}')
    with SqliteCheckpointer(db, engine=engine) as cp:
        seen, error = read_until_error(cp, "s")
        assert seen == list(range(1, bad))
        assert (error.session_id, error.seq) == ("s", bad)
        assert f"session 's', event {bad}: payload checksum mismatch" in str(error)
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), copy.session_id, copy.seq) == (
            CorruptDatabaseError,
            str(error),
            "s",
            bad,
        )
        # Past the damaged event, the log reads on.
        assert [e.seq for e in cp.read("s", since_seq=bad)][:2] == [bad + 1, bad + 2]
        # A follower gets the events before it, then the error (each look
        # checks the event at its cursor against the one it handed on).
        port = cp.writer_port()
        at = {e.seq: anchor_of(e) for e in cp.read("s", since_seq=bad - 3, limit=2)}
        assert [e.seq for e in port.follow_page("s", bad - 2, at[bad - 2])] == [bad - 1]
        with pytest.raises(CorruptDatabaseError):
            port.follow_page("s", bad - 1, at[bad - 1])


@pytest.mark.parametrize("keep_crc", [True, False], ids=["checksummed", "old-row"])
def test_an_undecodable_payload_names_its_event(
    tmp_path: Path, engine: str, keep_crc: bool
) -> None:
    db = tmp_path / "a.db"
    fill(db, engine, 10)
    damage(db, 7, b'{"type":"user","content":"cut', keep_crc=keep_crc)
    with SqliteCheckpointer(db, engine=engine) as cp:
        seen, error = read_until_error(cp, "s")
        assert seen == [1, 2, 3, 4, 5, 6]
        assert (error.session_id, error.seq) == ("s", 7)
        expected = "checksum mismatch" if keep_crc else "does not decode"
        assert expected in str(error)


def test_a_deep_check_lists_every_damaged_event(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    with SqliteCheckpointer(db, engine=engine) as cp:
        cp.append("s", events(5))
        cp.append("t", events(3))
    damage(db, 2, b'{"type":"user","content":"forged"}')
    damage(db, 4, b"{not json", keep_crc=False)
    damage(db, 3, b'{"type":"user","content":"x"}', sid=2)
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert cp.check_integrity() == (True, "ok")  # the pages are sound
        ok, detail = cp.check_integrity(deep=True)
        assert not ok
        lines = detail.splitlines()
        assert len(lines) == 3
        assert lines[0].startswith("session 's' (tenant default), event 2: payload checksum")
        assert lines[1].startswith("session 's' (tenant default), event 4: payload does not decode")
        assert lines[2].startswith("session 't' (tenant default), event 3: payload checksum")
        assert [(d.session_id, d.seq) for d in cp.damaged_events()] == [
            ("s", 2),
            ("s", 4),
            ("t", 3),
        ]


def test_a_deep_check_of_a_sound_file_is_ok(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    fill(db, engine, 1200)
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert cp.check_integrity(deep=True) == (True, "ok")


def test_both_engines_write_the_same_checksums(tmp_path: Path) -> None:
    from ..conftest import require_engine

    require_engine("c")
    for writer, reader in (("c", "python"), ("python", "c")):
        db = tmp_path / f"{writer}.db"
        fill(db, writer, 50)
        with SqliteCheckpointer(db, engine=reader) as cp:
            assert len(list(cp.read("s"))) == 50
            assert cp.check_integrity(deep=True) == (True, "ok")


def make_file_before_checksums(path: Path) -> None:
    """A file as the version before checksums wrote it: events without a crc column."""
    conn = sqlite3.connect(path)
    for version in range(1, INTEGRITY_VERSION):
        for statement in MIGRATIONS[version]:
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {INTEGRITY_VERSION - 1}")
    conn.execute("INSERT INTO sessions VALUES (1, 'default', 'old', 2, 1.0, 1.0, 1, NULL)")
    for seq in (1, 2):
        conn.execute(
            "INSERT INTO events (id, ts, type, data) VALUES (?, 1.0, 'user', ?)",
            (KEY | seq, b'{"type":"user","content":"v7 %d"}' % seq),
        )
    conn.commit()
    conn.close()


def test_a_file_from_before_checksums_reads_as_it_is_and_migrates_forward(
    tmp_path: Path, engine: str
) -> None:
    db = tmp_path / "v7.db"
    make_file_before_checksums(db)
    with SqliteCheckpointer(db, engine=engine, read_only=True) as cp:
        assert [e.event["content"] for e in cp.read("old")] == ["v7 1", "v7 2"]
        assert cp.check_integrity(deep=True) == (True, "ok")
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert [e.event["content"] for e in cp.read("old")] == ["v7 1", "v7 2"]
        cp.append("old", events(1, 3), expected_head=2)
        assert cp.check_integrity(deep=True) == (True, "ok")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    crcs = [row[0] for row in conn.execute("SELECT crc FROM events ORDER BY id")]
    conn.close()
    assert crcs[:2] == [None, None] and crcs[2] is not None
    # An old row is read unverified, but damage that breaks its JSON is still named.
    damage(db, 2, b"{", keep_crc=False)
    with SqliteCheckpointer(db, engine=engine) as cp:
        seen, error = read_until_error(cp, "old")
        assert (seen, error.seq) == ([1], 2)


def test_the_session_store_verifies_the_items_it_loads(tmp_path: Path, engine: str) -> None:
    from agentlog import SqliteStorage

    db = tmp_path / "a.db"
    with SqliteStorage.open(db, engine=engine) as storage:
        record = storage.sessions.create("default", "s")
        items = [{"id": f"i{n}", "type": "user", "content": f"item {n}"} for n in range(1, 4)]
        storage.sessions.append("default", "s", record.revision, items)
        assert [e.seq for e in storage.sessions.load("default", "s").items] == [1, 2, 3]
    damage(db, 2, b'{"id":"i2","type":"user","content":"forged"}')
    with SqliteStorage.open(db, engine=engine) as storage:
        with pytest.raises(CorruptDatabaseError) as caught:
            storage.sessions.load("default", "s")
        assert (caught.value.session_id, caught.value.seq) == ("s", 2)
    with SqliteCheckpointer(db, engine=engine) as cp:  # the same rows, through the log
        seen, error = read_until_error(cp, "s")
        assert (seen, error.seq) == ([1], 2)


# -- the hash chain -------------------------------------------------------------------


def rows(db: Path) -> list[tuple[int, bytes, bytes | None]]:
    conn = sqlite3.connect(db)
    found = conn.execute("SELECT id, data, digest FROM events ORDER BY id").fetchall()
    conn.close()
    return found


def test_the_hash_chain_links_every_event(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    with SqliteCheckpointer(db, engine=engine, hash_chain=True) as cp:
        assert cp.hash_chain
        cp.append("s", events(3))
        cp.append("s", events(2, 4))
        port = cp.writer_port()
        group = [port.prepare_append("s", events(1, 6), 5), port.prepare_append("t", events(2))]
        assert port.append_prepared(group) == [6, 2]
        assert port.try_append_prepared([port.prepare_append("t", events(1, 3))]) == [3]
        assert cp.verify("t").problem is None
        report = cp.verify("s")
    previous = GENESIS
    for key, data, stored in rows(db)[:6]:
        previous = chain_digest(previous, data, key & 0xFFFFFFFF)
        assert stored == previous
    assert (report.head, report.digest, report.problem) == (6, previous.hex(), None)
    # The file keeps the chain: a later writer that does not ask extends it too.
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert cp.hash_chain
        cp.append("s", events(1, 7))
        assert cp.verify("s").problem is None


def raw(db: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    """Run statements through the standard library's sqlite3, behind agentlog's
    back (closed before agentlog opens the file again: two SQLite libraries in
    one process do not see each other's locks)."""
    conn = sqlite3.connect(db)
    for sql, params in statements:
        conn.execute(sql, params)
    conn.commit()
    conn.close()


SET_DATA = "UPDATE events SET data = ?, crc = ? WHERE id = ?"


def test_verify_finds_an_edit_a_reordering_and_a_cut(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    with SqliteCheckpointer(db, engine=engine, hash_chain=True) as cp:
        cp.append("s", events(5))
        head = cp.verify("s").digest
    data = {key & 0xFFFFFFFF: payload for key, payload, _ in rows(db)}
    # An edit that fixes the crc too: only the chain catches it.
    forged = b'{"type":"user","content":"forged"}'
    raw(db, (SET_DATA, (forged, zlib.crc32(forged), KEY | 3)))
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert [e.seq for e in cp.read("s")] == [1, 2, 3, 4, 5]
        report = cp.verify("s")
        assert report.problem == "event 3 does not match its chain link"
        assert report.digest != head
    # Put back; then two events swapped, checksums and all.
    raw(db, (SET_DATA, (data[3], zlib.crc32(data[3]), KEY | 3)))
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert cp.verify("s") == ("s", 5, head, None)
    raw(
        db,
        (SET_DATA, (data[4], zlib.crc32(data[4]), KEY | 2)),
        (SET_DATA, (data[2], zlib.crc32(data[2]), KEY | 4)),
    )
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert len(list(cp.read("s"))) == 5
        assert cp.verify("s").problem == "event 2 does not match its chain link"
    # Put back; then the last event cut (and the head with it): the chain that
    # is left is consistent, only the head digest kept elsewhere shows the cut.
    raw(
        db,
        (SET_DATA, (data[2], zlib.crc32(data[2]), KEY | 2)),
        (SET_DATA, (data[4], zlib.crc32(data[4]), KEY | 4)),
        ("DELETE FROM events WHERE id = ?", (KEY | 5,)),
        ("UPDATE sessions SET head = 4", ()),
    )
    with SqliteCheckpointer(db, engine=engine) as cp:
        report = cp.verify("s")
        assert report.problem is None and report.head == 4 and report.digest != head


def test_truncate_and_fork_keep_the_chain(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    with SqliteCheckpointer(db, engine=engine, hash_chain=True) as cp:
        cp.append("s", events(6))
        cp.fork("s", 3, "f")
        # A fork's chain is its source's chain up to the fork.
        cp.fork("s", 6, "copy")
        cp.truncate("copy", 3)
        assert cp.verify("f") == ("f", 3, cp.verify("copy").digest, None)
        cp.append("f", events(2, 100))
        assert cp.verify("f").problem is None
        cp.truncate("s", 4)
        assert cp.verify("s").problem is None
        cp.append("s", events(1, 50))
        assert cp.verify("s").problem is None


def test_a_session_written_before_the_chain_is_reported(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "a.db"
    fill(db, engine, 2)
    with SqliteCheckpointer(db, engine=engine, hash_chain=True) as cp:
        cp.append("s", events(1, 3))
        assert cp.verify("s").problem == "event 1 has no chain link (written without hash_chain)"


# -- the file backend -------------------------------------------------------------------


def file_store(tmp_path: Path, n: int, batch: int = 1) -> Path:
    directory = tmp_path / "store"
    with FileCheckpointer(directory) as cp:
        for start in range(1, n + 1, batch):
            cp.append("s", events(min(batch, n - start + 1), start))
    return directory


def flip(path: Path, old: bytes, new: bytes) -> None:
    """Change bytes of the file on disk, in place, behind agentlog's back."""
    data = path.read_bytes()
    assert data.count(old) == 1 and len(old) == len(new)
    path.write_bytes(data.replace(old, new))


def session_path(directory: Path) -> Path:
    return directory / session_file_name("s")


def test_every_file_line_carries_its_event_crc(tmp_path: Path) -> None:
    directory = file_store(tmp_path, 3)
    lines = session_path(directory).read_bytes().splitlines()[1:]
    for line in lines:
        record = orjson.loads(line)
        payload = line[line.index(b'"event":') + 8 : -1]
        assert record["crc"] == zlib.crc32(payload)
        assert orjson.loads(payload) == record["event"]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (b"message 1500", b"massage 1500", "payload checksum mismatch"),
        (b'"message 1500"', b'"message 1500 ', "payload checksum mismatch"),
    ],
    ids=["valid-json", "broken-json"],
)
def test_a_byte_changed_in_a_file_is_caught(
    tmp_path: Path, old: bytes, new: bytes, problem: str
) -> None:
    directory = file_store(tmp_path, 2500, batch=100)
    flip(session_path(directory), old, new)
    for read_only in (False, True):
        with FileCheckpointer(directory, read_only=read_only) as cp:
            seen: list[int] = []
            with pytest.raises(CorruptDatabaseError) as caught:
                for event in cp.read("s"):
                    seen.append(event.seq)
            assert seen == list(range(1, 1500))
            assert (caught.value.session_id, caught.value.seq) == ("s", 1500)
            assert problem in str(caught.value)
            assert next(iter(cp.read("s", since_seq=1500))).seq == 1501
            ok, detail = cp.check_integrity(deep=True)
            assert not ok and detail.startswith("session 's', event 1500: ")
            assert [(d.session_id, d.seq) for d in cp.damaged_events()] == [("s", 1500)]


def test_damage_to_the_last_line_leaves_the_rest_readable(tmp_path: Path) -> None:
    directory = file_store(tmp_path, 5)
    flip(session_path(directory), b'"message 5"', b'"message 5 ')
    with FileCheckpointer(directory) as cp:
        assert cp.head("s") == 5
        seen, error = [], None
        try:
            for event in cp.read("s"):
                seen.append(event.seq)
        except CorruptDatabaseError as exc:
            error = exc
        assert seen == [1, 2, 3, 4] and error is not None and error.seq == 5
        ok, detail = cp.check_integrity(deep=True)
        assert not ok and detail.startswith("session 's', event 5: payload checksum mismatch")


def test_a_truncate_never_gives_damage_a_fresh_checksum(tmp_path: Path) -> None:
    directory = file_store(tmp_path, 6, batch=6)
    flip(session_path(directory), b"message 2", b"massage 2")
    with FileCheckpointer(directory) as cp:
        with pytest.raises(CorruptDatabaseError) as caught:
            cp.truncate("s", 3)  # would rewrite lines 1..3 to close the batch at 3
        assert caught.value.seq == 2
        assert cp.head("s") == 6
    assert b"massage 2" in session_path(directory).read_bytes()


def test_lines_written_before_checksums_still_read(tmp_path: Path) -> None:
    directory = tmp_path / "old"
    directory.mkdir()
    lines = [b'{"agentlog":1,"session":"s","created":1.0}']
    lines += [
        b'{"seq":%d,"end":2,"ts":1.0,"event":{"type":"user","content":"old %d"}}' % (i, i)
        for i in (1, 2)
    ]
    session_path(directory).write_bytes(b"\n".join(lines) + b"\n")
    with FileCheckpointer(directory) as cp:
        assert [e.event["content"] for e in cp.read("s")] == ["old 1", "old 2"]
        assert cp.check_integrity(deep=True) == (True, "ok")
        cp.append("s", events(1, 3))
        cp.truncate("s", 1)  # rewrites line 1 (no crc) closing its batch
        assert [e.event["content"] for e in cp.read("s")] == ["old 1"]
        assert cp.check_integrity(deep=True) == (True, "ok")


# -- PostgreSQL -------------------------------------------------------------------------


@pytest.fixture
def pg_admin(postgres_server: str) -> Iterator[Any]:
    """A plain autocommit connection to the test database, to damage rows behind the store."""
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_postgres_catches_a_changed_payload(tmp_path: Path, pg_admin: Any, flavour: str) -> None:
    from agentlog import PostgresCheckpointer
    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
        log.append("s", events(1200))
        log.append("t", events(3))
    stored = pg_admin.execute(
        f"SELECT payload, crc FROM {schema}.events WHERE session = 's' ORDER BY seq LIMIT 2"
    ).fetchall()
    assert [crc for _, crc in stored] == [zlib.crc32(bytes(payload)) for payload, _ in stored]
    pg_admin.execute(
        f"UPDATE {schema}.events SET payload = %s WHERE session = 's' AND seq = 1100",
        (b'{"type":"user","content":"forged"}',),
    )
    pg_admin.execute(
        f"UPDATE {schema}.events SET payload = %s, crc = NULL WHERE session = 't' AND seq = 2",
        (b'{"type":"user"',),
    )
    if flavour == "sync":
        with PostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
            seen, error = read_until_error(log, "s")
            assert (seen, error.session_id, error.seq) == (list(range(1, 1100)), "s", 1100)
            assert "payload checksum mismatch" in str(error)
            seen, error = read_until_error(log, "t")
            assert (seen, error.seq) == ([1], 2) and "does not decode" in str(error)
            assert log.check_integrity() == (True, "ok")
            ok, detail = log.check_integrity(deep=True)
            assert not ok
            assert [line.split(":")[0] for line in detail.splitlines()] == [
                "session 's' (tenant default), event 1100",
                "session 't' (tenant default), event 2",
            ]
        return

    async def read_async() -> tuple[list[int], CorruptDatabaseError]:
        seen: list[int] = []
        async with AsyncPostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
            with pytest.raises(CorruptDatabaseError) as caught:
                async for event in log.read("s"):
                    seen.append(event.seq)
        return seen, caught.value

    seen, error = asyncio.run(read_async())
    assert (seen, error.session_id, error.seq) == (list(range(1, 1100)), "s", 1100)


def test_a_postgres_store_from_before_checksums_is_migrated_and_reads(
    tmp_path: Path, pg_admin: Any
) -> None:
    from agentlog import PostgresCheckpointer
    from agentlog.engine.postgres import CHECKSUM_VERSION

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
        log.append("s", events(2))
    pg_admin.execute(f"ALTER TABLE {schema}.events DROP COLUMN crc")
    pg_admin.execute(f"DROP TABLE {schema}.append_keys")  # what version 5 adds: a real 3
    pg_admin.execute(f"DROP TABLE {schema}.fork_origins")  # and version 6
    undo_postgres_version_7(pg_admin, schema)  # and version 7
    pg_admin.execute(f"UPDATE {schema}.agentlog_version SET version = {CHECKSUM_VERSION - 1}")
    with PostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
        assert [e.seq for e in log.read("s")] == [1, 2]
        log.append("s", events(1, 3))
        log.fork("s", 3, "f")
        assert log.check_integrity(deep=True) == (True, "ok")
    crcs = pg_admin.execute(
        f"SELECT crc FROM {schema}.events WHERE session = 'f' ORDER BY seq"
    ).fetchall()
    assert [row[0] is None for row in crcs] == [True, True, False]


# -- with retention: a pruned start is not damage ----------------------------------------


def pruned_session(storage: Any) -> None:
    """Session 'job' of tenant 'default': 10 items, a snapshot through 6, the first
    4 pruned (keep 2), then 2 more appended; and 'gone': a snapshot through its
    head, every item pruned."""
    sessions = storage.sessions

    def items(n: int, start: int = 1) -> list[dict[str, object]]:
        return [{**event, "id": f"i{event['content']}"} for event in events(n, start)]

    sessions.create("default", "job")
    record = sessions.append("default", "job", 0, items(10))
    record = sessions.compact("default", "job", record.revision, 6, {"summary": "1..6"})
    assert sessions.prune("default", "job", keep=2) == 4
    sessions.append("default", "job", record.revision, items(2, start=11))
    sessions.create("default", "gone")
    record = sessions.append("default", "gone", 0, items(3, start=20))
    sessions.compact("default", "gone", record.revision, 3, {"summary": "all"})
    assert sessions.prune("default", "gone", keep=0) == 3


def test_a_deep_check_and_verify_accept_what_retention_pruned(tmp_path: Path, engine: str) -> None:
    from agentlog import SqliteStorage

    db = tmp_path / "pruned.db"
    SqliteCheckpointer(db, engine=engine, hash_chain=True).close()
    with SqliteStorage.open(db, engine=engine) as storage:
        pruned_session(storage)
    with SqliteCheckpointer(db, engine=engine) as cp:
        assert cp.check_integrity(deep=True) == (True, "ok")
        report = cp.verify("job")
        assert (report.head, report.problem) == (12, None)
        assert cp.verify("gone").problem is None
    # Damage after the retained start is still found, by both.
    stored = dict(((key & 0xFFFFFFFF), data) for key, data, _ in rows(db) if key >> 32 == 1)
    damage(db, 8, stored[8].replace(b"message", b"massage"))
    with SqliteCheckpointer(db, engine=engine) as cp:
        ok, detail = cp.check_integrity(deep=True)
        assert not ok and "event 8: payload checksum mismatch" in detail
        assert "event 8" in (cp.verify("job").problem or "")


def test_postgres_deep_check_accepts_what_retention_pruned(
    tmp_path: Path, postgres_server: str
) -> None:
    from agentlog import PostgresCheckpointer, PostgresStorage

    schema = postgres_schema(tmp_path)
    with PostgresStorage.open(postgres_conninfo(), schema=schema) as storage:
        pruned_session(storage)
    with PostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
        assert log.check_integrity(deep=True) == (True, "ok")


def test_a_payload_turned_into_text_is_damage_not_a_crash(tmp_path: Path, engine: str) -> None:
    """SQL's ``replace()`` on a BLOB payload stores TEXT: every read, the deep
    check and the CLI report that event as damaged, never a TypeError."""
    import subprocess

    from ..conftest import PYTHON

    db = tmp_path / "a.db"
    fill(db, engine, 10)
    with sqlite3.connect(db) as raw:
        raw.execute(
            "UPDATE events SET data = replace(data, 'user', 'USER') WHERE rowid IN"
            " (SELECT rowid FROM events ORDER BY rowid LIMIT 1 OFFSET 6)"
        )
        assert raw.execute(
            "SELECT count(*) FROM events WHERE typeof(data) = 'text'"
        ).fetchone() == (1,)
    with SqliteCheckpointer(db, engine=engine) as cp:
        seen, error = read_until_error(cp, "s")
        assert (seen, error.seq) == ([1, 2, 3, 4, 5, 6], 7)
        ok, report = cp.check_integrity(deep=True)
        assert not ok and "event 7: payload checksum mismatch" in report
    for command in (["show", str(db), "s"], ["check", str(db), "--deep"]):
        done = subprocess.run([PYTHON, "-m", "agentlog", *command], capture_output=True, text=True)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
        assert "event 7: payload checksum mismatch" in done.stdout + done.stderr


def test_a_fork_over_a_damaged_event_is_refused_and_writes_nothing(
    tmp_path: Path, engine: str
) -> None:
    """A fork copies rows as they are: over a damaged event it would pass the
    damage on under a new name. It names the event instead; a fork that stops
    before it is made as usual."""
    db = tmp_path / "a.db"
    fill(db, engine, 1500)  # more than one page of the check
    damage(db, 1200, b'{"type":"user","content":"changed"}')
    with SqliteCheckpointer(db, engine=engine) as cp:
        with pytest.raises(CorruptDatabaseError, match="event 1200: payload checksum") as caught:
            cp.fork("s", 1300, "copy")
        assert (caught.value.session_id, caught.value.seq) == ("s", 1200)
        assert "copy" not in [info.id for info in cp.list()]
        assert cp.fork("s", 1199, "before") == 1199
        assert [e.seq for e in cp.read("before")][-1] == 1199
