"""``read_json`` and ``follow_json``: the events' stored JSON handed on undecoded.

On every backend the bytes decode to exactly what ``read`` gives, with the
same seq, parent_seq, ts and type, paged by ``since_seq`` and ``limit`` the
same way; damage made behind agentlog's back is a typed error naming the
event after the events before it, never bytes passed on; the async twins
read and follow the same way.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentlog import (
    CorruptDatabaseError,
    FileCheckpointer,
    RawEvent,
    SessionTruncatedError,
    SqliteCheckpointer,
)
from agentlog.aio import AsyncBaseCheckpointer
from agentlog.log import BaseCheckpointer
from agentlog.log.file import session_file_name
from agentlog.log.follow import anchor_of

from ..conftest import open_log, postgres_conninfo, postgres_schema
from ..waiting import wait_until_async

EVENTS: list[dict[str, Any]] = [
    {"type": "user", "content": "line one\nline two\r\n\u2028 and <script>"},
    {"type": "assistant", "content": [{"type": "text", "text": "ok"}], "nested": [[[{"a": 1}]]]},
    {"type": "tool_result", "tool_use_id": "t1", "content": "x" * 5000, "is_error": False},
] * 5


LONG = [{"type": "user", "content": f"m {i}"} for i in range(2500)]


def _fill(log: BaseCheckpointer) -> None:
    log.append("s", EVENTS[:7])
    log.append("s", EVENTS[7:])
    log.append("long", LONG)


@pytest.fixture(
    params=["memory", "sqlite-c", "sqlite-python", "files", "files-read-only", "postgres"]
)
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointer]:
    """A checkpointer of each backend holding ``EVENTS`` in session ``s``, and
    ``LONG`` in session ``long``."""
    kind = request.param
    if kind.startswith("files"):
        with FileCheckpointer(tmp_path / "files") as owner:
            _fill(owner)
        found: BaseCheckpointer = FileCheckpointer(
            tmp_path / "files", read_only=kind == "files-read-only"
        )
    else:
        found = open_log(kind, tmp_path, request)
        _fill(found)
    with found:
        yield found


def test_read_json_is_read_with_the_stored_bytes(log: BaseCheckpointer) -> None:
    decoded = list(log.read("s"))
    raw = list(log.read_json("s"))
    assert all(isinstance(event, RawEvent) for event in raw)
    assert [(e.seq, e.parent_seq, e.ts, e.type) for e in raw] == [
        (e.seq, e.parent_seq, e.ts, e.type) for e in decoded
    ]
    assert [orjson.loads(e.json) for e in raw] == [e.event for e in decoded]
    # Compact, one object, no raw line break (a string's are escaped).
    for event in raw:
        assert isinstance(event.json, bytes) and event.json.startswith(b"{")
        assert b"\n" not in event.json and b"\r" not in event.json
    assert [e.seq for e in log.read_json("s", since_seq=4, limit=3)] == [5, 6, 7]
    assert [e.seq for e in log.read_json("s", since_seq=15)] == []
    assert list(log.read_json("unknown")) == []


def test_read_json_pages_through_a_long_session(log: BaseCheckpointer) -> None:
    seqs = [e.seq for e in log.read_json("long", since_seq=10)]
    assert seqs == list(range(11, 2501))


def test_read_json_refuses_bad_arguments_and_a_closed_log(log: BaseCheckpointer) -> None:
    with pytest.raises(ValueError):
        log.read_json("../x")
    with pytest.raises(ValueError):
        log.read_json("s", since_seq=-1)
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.read_json("s")


def _until_error(events: Iterator[RawEvent]) -> tuple[list[int], CorruptDatabaseError]:
    """The seqs read before the damage, and the error naming it."""
    seen: list[int] = []
    with pytest.raises(CorruptDatabaseError) as caught:
        seen.extend(event.seq for event in events)
    return seen, caught.value


@pytest.mark.parametrize("keep_crc", [True, False], ids=["checksummed", "old-row"])
def test_a_damaged_sqlite_payload_is_an_error_not_bytes(
    tmp_path: Path, engine: str, keep_crc: bool
) -> None:
    db = tmp_path / "a.db"
    with SqliteCheckpointer(db, engine=engine) as cp:
        cp.append("s", [{"type": "user", "content": f"m {i}"} for i in range(1, 1501)])
    conn = sqlite3.connect(db)
    key = (1 << 32) | 1200
    crc = "crc" if keep_crc else "NULL"
    conn.execute(
        f"UPDATE events SET data = ?, crc = {crc} WHERE id = ?", (b'{"type":"user"\n', key)
    )
    conn.commit()
    conn.close()
    with SqliteCheckpointer(db, engine=engine) as cp:
        seen, error = _until_error(cp.read_json("s"))
        assert seen == list(range(1, 1200))
        assert (error.session_id, error.seq) == ("s", 1200)
        assert ("checksum mismatch" if keep_crc else "does not decode") in str(error)
        assert next(iter(cp.read_json("s", since_seq=1200))).seq == 1201
        port = cp.writer_port()
        at = {e.seq: anchor_of(e) for e in cp.read_json("s", since_seq=1196, limit=3)}
        assert [e.seq for e in port.follow_json_page("s", 1197, at[1197])] == [1198, 1199]
        with pytest.raises(CorruptDatabaseError):
            port.follow_json_page("s", 1199, at[1199])


def test_a_changed_file_line_is_an_error_not_bytes(tmp_path: Path) -> None:
    directory = tmp_path / "files"
    with FileCheckpointer(directory) as cp:
        cp.append("s", [{"type": "user", "content": f"m {i}"} for i in range(1, 11)])
    path = directory / session_file_name("s")
    path.write_bytes(path.read_bytes().replace(b'"m 7"', b'"M 7"'))
    for read_only in (False, True):
        with FileCheckpointer(directory, read_only=read_only) as cp:
            seen, error = _until_error(cp.read_json("s"))
            assert seen == [1, 2, 3, 4, 5, 6] and error.seq == 7
            assert "checksum mismatch" in str(error)


def test_a_file_line_without_a_checksum_gives_its_event_whatever_its_key_order(
    tmp_path: Path,
) -> None:
    # A line written before checksums, or by hand: nothing vouches for a slice
    # of it, so its event is encoded from what the line decodes to.
    directory = tmp_path / "files"
    with FileCheckpointer(directory) as cp:
        cp.append("s", [{"type": "user", "content": f"m {i}"} for i in range(1, 4)])
    path = directory / session_file_name("s")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"event":{"type":"user","content":"by hand"},"seq":2,"end":2,"ts":1.5}'
    path.write_bytes(b"\n".join(lines))
    with FileCheckpointer(directory, read_only=True) as cp:
        raw = list(cp.read_json("s"))
        assert [orjson.loads(e.json) for e in raw] == [e.event for e in cp.read("s")]
        assert orjson.loads(raw[1].json) == {"type": "user", "content": "by hand"}


def _forge_the_fourth(conninfo: str, schema: str, session: str) -> None:
    """Another payload at seq 4 of ``session``, behind agentlog's back (its crc stays)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(
            f"UPDATE {schema}.events SET payload = %s WHERE session = %s AND seq = 4",
            (b'{"type":"user","content":"forged"}', session),
        )


def test_a_changed_postgres_payload_is_an_error_not_bytes(
    tmp_path: Path, postgres_server: str
) -> None:
    from agentlog import PostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
        log.append("s", [{"type": "user", "content": f"m {i}"} for i in range(1, 11)])
        _forge_the_fourth(postgres_server, schema, "s")
        seen, error = _until_error(log.read_json("s"))
        assert seen == [1, 2, 3] and error.seq == 4


async def _reads_and_follows(log: Any) -> None:
    """What every async twin does: read_json from a seq, follow_json from
    one, woken by an append, ended by a truncate below what it yielded."""
    await log.append("s", EVENTS[:3])
    raw = [event async for event in log.read_json("s", since_seq=1)]
    assert [(e.seq, orjson.loads(e.json)) for e in raw] == [(2, EVENTS[1]), (3, EVENTS[2])]
    assert [e.seq async for e in log.read_json("s", limit=2)] == [1, 2]
    followed: list[RawEvent] = []
    truncated = asyncio.Event()

    async def follow() -> None:
        try:
            async for event in log.follow_json("s", 1, poll_interval=0.05):
                followed.append(event)
        except SessionTruncatedError:
            truncated.set()

    task = asyncio.ensure_future(follow())
    await log.append("s", [{"type": "user", "content": "new"}])
    assert await wait_until_async(lambda: len(followed) == 3)
    assert [e.seq for e in followed] == [2, 3, 4]
    assert orjson.loads(followed[-1].json) == {"type": "user", "content": "new"}
    await log.truncate("s", 1)
    assert await wait_until_async(truncated.is_set)
    await task
    with pytest.raises(ValueError):  # checked on the first look, as a generator's are
        await log.read_json("s", since_seq=-1).__anext__()


def test_the_async_twins_read_and_follow_the_stored_json(tmp_path: Path, engine: str) -> None:
    async def main() -> None:
        backend = SqliteCheckpointer(tmp_path / "a.db", engine=engine)
        async with AsyncBaseCheckpointer(backend) as log:
            await _reads_and_follows(log)

    asyncio.run(main())


def test_the_async_postgresql_checkpointer_reads_and_follows_the_stored_json(
    tmp_path: Path, postgres_server: str
) -> None:

    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncPostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
            await _reads_and_follows(log)
            await log.append("d", [{"type": "user", "content": f"m {i}"} for i in range(1, 11)])
            _forge_the_fourth(postgres_server, schema, "d")
            seen: list[int] = []
            with pytest.raises(CorruptDatabaseError) as caught:
                async for event in log.read_json("d"):
                    seen.append(event.seq)
            assert seen == [1, 2, 3] and caught.value.seq == 4

    asyncio.run(main())
