"""The session handle (sync and async) and session metadata beyond the
conformance suite: incremental folding, crash and resume in another process,
one metadata column for both SQLite faces (one value in memory), the file
backend's metadata file."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    CheckpointConflictError,
    Checkpointer,
    FileCheckpointer,
    InMemoryStorage,
    MemoryCheckpointer,
    Session,
    SessionInfo,
    SessionMetadata,
    SqliteCheckpointer,
    SqliteStorage,
    StorageConflictError,
    StorageDataError,
    StoredEvent,
    fold_events,
)
from agentlog.aio import AsyncMemoryCheckpointer, AsyncSession, AsyncSqliteCheckpointer
from agentlog.log import MetadataCheckpointer

from ..conftest import PYTHON


def tool_call(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "run", "input": {"n": call_id}}


class CountingCheckpointer(MemoryCheckpointer):
    """Counts the events its reads hand out."""

    def __init__(self) -> None:
        super().__init__()
        self.events_read = 0

    def _scan(self, session_id: str, since_seq: int, limit: int) -> list[StoredEvent]:
        page = super()._scan(session_id, since_seq, limit)
        self.events_read += len(page)
        return page


def test_the_handle_folds_incrementally_never_rereading_the_log() -> None:
    log = CountingCheckpointer()
    log.append("s", [{"type": "user", "content": f"q{n}"} for n in range(100)])
    handle = log.session("s")
    assert log.events_read == 100  # resumed by replay, once
    for turn in range(50):
        handle.append(
            [
                {"type": "user", "content": f"turn {turn}"},
                {"type": "assistant", "content": [tool_call(f"c{turn}")]},
                {"type": "tool_result", "tool_use_id": f"c{turn}", "content": "ok"},
            ]
        )
    assert log.events_read == 100  # 150 events appended and folded, none read back
    assert handle.head == 250
    assert handle.turn == 150
    assert handle.messages == fold_events(log.read("s"))
    log.append("s", [{"type": "assistant", "content": "from elsewhere"}])
    before = log.events_read
    assert handle.reload() == 1
    assert log.events_read - before == 2  # the event at its head (a check), and what is new
    assert handle.messages[-1] == {"role": "assistant", "content": "from elsewhere"}


def test_pending_tool_calls_and_turn() -> None:
    log = MemoryCheckpointer()
    handle = log.session("s")
    assert (handle.head, handle.turn, handle.pending_tool_calls, handle.messages) == (0, 0, [], [])
    handle.append([{"type": "user", "content": "q"}])
    handle.append([{"type": "assistant", "content": [tool_call("a"), tool_call("b")]}])
    handle.append([{"type": "tool_started", "tool_use_id": "a"}])
    assert [c["id"] for c in handle.pending_tool_calls] == ["a", "b"]  # started is not done
    handle.append([{"type": "tool_result", "tool_use_id": "b", "content": "2"}])
    assert handle.pending_tool_calls == [tool_call("a")]
    handle.append([{"type": "summary", "content": "so far"}])
    assert (handle.turn, [c["id"] for c in handle.pending_tool_calls]) == (1, ["a"])
    handle.append([{"type": "tool_result", "tool_use_id": "a", "content": "1"}])
    handle.append([{"type": "user", "content": "next"}])
    assert (handle.turn, handle.pending_tool_calls) == (2, [])
    # Changing what the handle handed out changes nothing inside it.
    handle.pending_tool_calls.append({"id": "x"})
    handle.messages.clear()
    assert handle.messages == fold_events(log.read("s"))


@pytest.mark.parametrize("shape", ["anthropic", "openai"])
def test_the_handle_folds_in_either_shape(shape: str) -> None:
    log = MemoryCheckpointer()
    events = [
        {"type": "user", "content": "size?"},
        {"type": "assistant", "content": [{"type": "text", "text": "let me see"}, tool_call("a")]},
        {"type": "tool_result", "tool_use_id": "a", "content": "12"},
        {"type": "tool_result", "tool_use_id": "b", "content": "13"},
    ]
    handle = log.session("s", shape=shape)
    for event in events:
        handle.append([event])
    assert handle.shape == shape
    assert handle.messages == fold_events(events, shape=shape)
    assert Session(log, "s", shape=shape).messages == handle.messages


def test_a_conflict_leaves_the_handle_as_it_was_until_reload() -> None:
    log = MemoryCheckpointer()
    mine, theirs = log.session("s"), log.session("s")
    mine.append([{"type": "user", "content": "mine"}])
    with pytest.raises(CheckpointConflictError) as caught:
        theirs.append([{"type": "user", "content": "theirs"}])
    assert (caught.value.expected, caught.value.actual) == (0, 1)
    assert (theirs.head, theirs.messages) == (0, [])
    assert log.head("s") == 1  # nothing of the refused append was written
    theirs.reload()
    assert theirs.append([{"type": "assistant", "content": "ok"}]) == 2
    with pytest.raises(ValueError):
        theirs.append([{"type": "mystery"}])
    assert theirs.head == 2


RESUME_CHILD = """
import json, sys
from agentlog import SqliteCheckpointer
log = SqliteCheckpointer(sys.argv[1])
handle = log.session("job")
handle.append([{"type": "user", "content": "list the files"}])
handle.set_metadata({"title": "files", "step": 1})
handle.append([{"type": "assistant", "content": [
    {"type": "tool_use", "id": "t1", "name": "ls", "input": {}},
    {"type": "tool_use", "id": "t2", "name": "wc", "input": {}}]}])
handle.append([{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}])
import os
os._exit(0)  # a crash: nothing closed, t2 never answered
"""


def test_crash_and_resume_in_another_process(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    subprocess.run([PYTHON, "-c", RESUME_CHILD, str(db)], check=True, timeout=60)
    with SqliteCheckpointer(db) as log:
        handle = log.session("job")
        assert (handle.head, handle.turn) == (3, 1)
        assert [c["id"] for c in handle.pending_tool_calls] == ["t2"]
        assert handle.metadata == {"title": "files", "step": 1}
        handle.append([{"type": "tool_result", "tool_use_id": "t2", "content": "3"}])
        handle.set_metadata({**handle.metadata, "step": 2})
        assert handle.pending_tool_calls == []
        [row] = log.list(with_metadata=True)
        assert (row.id, row.head, row.metadata) == ("job", 4, {"title": "files", "step": 2})


def test_handle_metadata_is_compare_and_set_on_what_it_saw() -> None:
    log = MemoryCheckpointer()
    mine, theirs = log.session("s"), log.session("s")
    mine.set_metadata({"title": "a"})
    mine.append([{"type": "user", "content": "appends do not get in the way"}])
    log.append("s", [{"type": "user", "content": "nor do others' appends"}])
    mine.set_metadata({"title": "b"})
    assert log.metadata("s") == SessionMetadata({"title": "b"}, mine.metadata_revision)
    with pytest.raises(StorageConflictError):
        theirs.set_metadata({"title": "stale"})  # it saw no metadata; there is some now
    assert log.metadata("s").value == {"title": "b"}
    theirs.reload()
    assert theirs.metadata == {"title": "b"}
    theirs.set_metadata({"title": "c"})
    assert log.metadata("s").value == {"title": "c"}


def test_a_truncate_then_appends_past_the_handle_is_noticed() -> None:
    log = MemoryCheckpointer()
    handle = log.session("s")
    handle.append([{"type": "user", "content": "1"}, {"type": "user", "content": "2"}])
    log.truncate("s", 1)
    log.append("s", [{"type": "assistant", "content": "x"}, {"type": "assistant", "content": "y"}])
    assert log.head("s") == 3  # past the handle's head of 2: the head alone shows nothing
    handle.reload()
    assert (handle.head, handle.turn) == (3, 1)
    assert handle.messages == fold_events(log.read("s"))


def test_truncate_under_the_handle_rebuilds_it() -> None:
    log = MemoryCheckpointer()
    handle = log.session("s")
    handle.append(
        [{"type": "user", "content": "1"}, {"type": "assistant", "content": [tool_call("a")]}]
    )
    handle.append([{"type": "tool_result", "tool_use_id": "a", "content": "x"}])
    log.truncate("s", 1)
    log.append("s", [{"type": "assistant", "content": "retried"}])
    handle.reload()
    assert handle.head == 2
    assert handle.pending_tool_calls == []
    assert handle.messages == fold_events(log.read("s"))


def test_async_handle(tmp_path: Path) -> None:
    async def main() -> None:
        for log in (AsyncMemoryCheckpointer(), AsyncSqliteCheckpointer(tmp_path / "a.db")):
            try:
                handle = await log.session("s")
                assert isinstance(handle, AsyncSession)
                await handle.append([{"type": "user", "content": "q"}])
                await handle.append([{"type": "assistant", "content": [tool_call("a")]}])
                await handle.set_metadata({"title": "async"})
                await log.append("s", [{"type": "tool_result", "tool_use_id": "a", "content": "1"}])
                with pytest.raises(CheckpointConflictError):
                    await handle.append([{"type": "user", "content": "late"}])
                assert await handle.reload() == 1
                assert (handle.head, handle.turn, handle.pending_tool_calls) == (3, 1, [])
                await log.truncate("s", 2)
                await handle.reload()
                assert [c["id"] for c in handle.pending_tool_calls] == ["a"]
                again = await AsyncSession.open(log, "s")
                assert again.messages == handle.messages
                assert again.metadata == {"title": "async"}
                [row] = await log.list(with_metadata=True)
                assert row.metadata == {"title": "async"}
            finally:
                await log.aclose()

    asyncio.run(main())


def check_one_metadata_column(storage: InMemoryStorage | SqliteStorage) -> None:
    """The storage's two faces keep one metadata value and one revision per session."""
    log = storage.checkpointer()
    record = storage.sessions.create("default", "s", metadata={"from": "store"})
    assert log.metadata("s") == SessionMetadata({"from": "store"}, record.revision)
    revision = log.set_metadata("s", {"from": "log"}, record.revision)
    assert storage.sessions.get("default", "s").metadata == {"from": "log"}
    assert storage.sessions.get("default", "s").revision == revision
    # One revision: a write through either face is seen by the other's CAS.
    storage.sessions.append(
        "default", "s", revision, [{"type": "user", "content": "x", "id": "i1"}]
    )
    with pytest.raises(StorageConflictError):
        log.set_metadata("s", "stale", revision)
    assert [row.metadata for row in log.list(with_metadata=True)] == [{"from": "log"}]


def test_sqlite_metadata_is_one_column_for_both_faces(tmp_path: Path, engine: str) -> None:
    storage = SqliteStorage.open(tmp_path / "both.db", engine=engine)
    try:
        check_one_metadata_column(storage)
    finally:
        storage.close()


def test_in_memory_metadata_is_one_value_for_both_faces() -> None:
    with InMemoryStorage() as storage:
        check_one_metadata_column(storage)


def test_file_metadata_lives_in_a_file_beside_the_log(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path) as log:
        log.append("s", [{"type": "user", "content": "hi"}])
        log.set_metadata("s", {"title": "t"}, log.metadata("s").revision)
        (session_file,) = tmp_path.glob("*.jsonl")
    meta_file = session_file.with_name(session_file.name + ".meta")
    header, body = meta_file.read_bytes().split(b"\n", 1)
    assert json.loads(header) == {"agentlog": 1, "session": "s", "base": 1}
    assert json.loads(body) == {"title": "t"}
    # A file written before metadata existed (no metadata file) reads as none.
    meta_file.unlink()
    with FileCheckpointer(tmp_path) as log:
        assert log.metadata("s") == SessionMetadata(None, 1)
        assert log.set_metadata("s", "again", 1) == 2
        log.delete("s")
        assert not list(tmp_path.glob("*.meta"))
        # A metadata file left by a crash between a delete's two steps is
        # not adopted by the next session of that id.
        meta_file.write_bytes(b'{"agentlog":1,"session":"s","base":7}\nnull')
        log.append("s", [{"type": "user", "content": "new"}])
        assert log.metadata("s") == SessionMetadata(None, 1)


class ContractOnly:
    """A user's checkpointer written to the contract alone: no metadata."""

    def __init__(self) -> None:
        self.inner = MemoryCheckpointer()

    def append(self, session_id: str, events: Any, expected_head: int | None = None) -> int:
        return self.inner.append(session_id, events, expected_head)

    def read(self, session_id: str, since_seq: int = 0, limit: int | None = None) -> Any:
        return self.inner.read(session_id, since_seq, limit)

    def head(self, session_id: str) -> int:
        return self.inner.head(session_id)

    def list(self) -> list[SessionInfo]:
        return self.inner.list()

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)

    def truncate(self, session_id: str, to_seq: int) -> int:
        return self.inner.truncate(session_id, to_seq)

    def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        return self.inner.fork(session_id, at_seq, new_session_id)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> ContractOnly:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_a_checkpointer_without_metadata_is_still_one_and_gets_a_handle() -> None:
    log = ContractOnly()
    assert isinstance(log, Checkpointer)
    assert not isinstance(log, MetadataCheckpointer)
    assert isinstance(MemoryCheckpointer(), MetadataCheckpointer)
    handle = Session(log, "s")
    handle.append([{"type": "user", "content": "hi"}])
    handle.reload()
    assert (handle.turn, handle.metadata) == (1, None)
    with pytest.raises(NotImplementedError):
        handle.set_metadata({"title": "t"})


def test_metadata_that_is_not_json_is_a_typed_error(tmp_path: Path) -> None:
    import sqlite3

    with SqliteCheckpointer(tmp_path / "m.db") as log:
        log.set_metadata("s", {"title": "t"}, 0)
    conn = sqlite3.connect(tmp_path / "m.db")
    conn.execute("UPDATE sessions SET metadata = x'7b6e6f' WHERE name = 's'")  # "{no"
    conn.commit()
    conn.close()
    with SqliteCheckpointer(tmp_path / "m.db") as log:
        with pytest.raises(StorageDataError, match="not valid JSON"):
            log.metadata("s")
        with pytest.raises(StorageDataError):
            log.list(with_metadata=True)
        assert log.head("s") == 0
