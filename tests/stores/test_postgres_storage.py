"""The four stores on PostgreSQL as a whole: one log read and written through
both faces, the schema migrated forward from version 1, a closed storage."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import DEFAULT_TENANT, AgentlogError

from ..conftest import postgres_schema


@pytest.fixture
def storage(postgres_server: str, tmp_path: Path) -> Iterator[Any]:
    from agentlog import PostgresStorage

    with PostgresStorage.open(postgres_server, schema=postgres_schema(tmp_path)) as opened:
        yield opened


def test_one_log_two_faces(storage: Any, postgres_server: str, tmp_path: Path) -> None:
    """The Checkpointer and the SessionStore read and write the same sessions."""
    from agentlog import PostgresCheckpointer

    user = {"type": "user", "content": "hi"}
    with PostgresCheckpointer(postgres_server, schema=postgres_schema(tmp_path)) as log:
        sessions = storage.sessions
        log.append("chat", [user, {"type": "assistant", "content": "hello"}])
        record = sessions.get(DEFAULT_TENANT, "chat")
        assert (record.head, record.revision, record.metadata) == (2, 1, None)
        record = sessions.append(
            DEFAULT_TENANT, "chat", record.revision, [{"type": "user", "id": "m3", "content": "x"}]
        )
        assert [e.seq for e in log.read("chat")] == [1, 2, 3]
        assert log.append("chat", [user], expected_head=3) == 4
        record = sessions.get(DEFAULT_TENANT, "chat")
        assert (record.head, record.revision) == (4, 3)
        sessions.compact(DEFAULT_TENANT, "chat", record.revision, 3, {"summary": "three"})
        loaded = sessions.load(DEFAULT_TENANT, "chat")
        assert loaded.snapshot is not None and loaded.snapshot.through_sequence == 3
        assert [e.seq for e in loaded.items] == [4]
        assert len(list(log.read("chat"))) == 4  # compaction keeps the journal
        log.fork("chat", 3, "chat-c")  # the fork keeps the snapshot and the item ids
        assert sessions.load(DEFAULT_TENANT, "chat-c").snapshot is not None
        # Time travel through the log drops snapshots of what it removed.
        log.truncate("chat", 2)
        loaded = sessions.load(DEFAULT_TENANT, "chat")
        assert (loaded.snapshot, [e.seq for e in loaded.items]) == (None, [1, 2])
        log.fork("chat", 2, "chat-b")
        assert sessions.get(DEFAULT_TENANT, "chat-b").head == 2
        # Other tenants are invisible to the Checkpointer face.
        sessions.create("acme", "private", metadata={"owner": "acme"})
        sessions.create(DEFAULT_TENANT, "empty")
        assert {info.id: info.head for info in log.list()} == {
            "chat": 2,
            "chat-b": 2,
            "chat-c": 3,
            "empty": 0,
        }
        assert log.head("private") == 0
        assert storage.checkpointer("acme").head("private") == 0
        sessions.delete(DEFAULT_TENANT, "chat", sessions.get(DEFAULT_TENANT, "chat").revision)
        assert log.head("chat") == 0


def test_a_session_store_append_wakes_a_follower(storage: Any) -> None:
    log = storage.checkpointer()
    record = storage.sessions.create(DEFAULT_TENANT, "live")

    def write() -> None:
        storage.sessions.append(
            DEFAULT_TENANT, "live", record.revision, [{"type": "user", "id": "a", "content": "x"}]
        )

    timer = threading.Timer(0.1, write)
    timer.start()
    # A poll far longer than the test: only the notification can wake it.
    follower = log.follow("live", poll_interval=30)
    assert next(follower).event["id"] == "a"
    follower.close()
    timer.join()


def test_version_1_is_migrated_forward_in_place(
    storage: Any, postgres_server: str, tmp_path: Path
) -> None:
    import psycopg

    from agentlog import PostgresStorage

    schema = postgres_schema(tmp_path)
    storage.checkpointer().append("kept", [{"type": "user", "content": "from version 1"}])
    storage.close()
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        # What versions 2 to 5 added: the stores, the ledger, checksums, append keys.
        for table in ("memory", "checkpoints", "blobs", "blob_chunks", "artifacts"):
            conn.execute(f"DROP TABLE {schema}.{table}")
        conn.execute(f"DROP TABLE {schema}.migration_ledger")
        conn.execute(f"ALTER TABLE {schema}.events DROP COLUMN crc")  # added by version 4
        conn.execute(f"DROP TABLE {schema}.append_keys")  # added by version 5
        conn.execute(f"UPDATE {schema}.agentlog_version SET version = 1")
    from agentlog.engine.postgres.schema import SCHEMA_VERSION

    with PostgresStorage.open(postgres_server, schema=schema) as again:
        assert again.database.schema_version == SCHEMA_VERSION
        assert [e.event["content"] for e in again.checkpointer().read("kept")] == ["from version 1"]
        assert again.memory.put(DEFAULT_TENANT, "n", "k", 1, None).revision == 0


def test_a_closed_storage_raises_a_typed_error_everywhere(storage: Any) -> None:
    storage.close()
    calls: list[Any] = [
        lambda: storage.sessions.create("t", "s"),
        lambda: storage.sessions.load("t", "s"),
        lambda: storage.checkpoints.save("t", "r", None, status="running", state=0),
        lambda: storage.checkpoints.list("t"),
        lambda: storage.memory.put("t", "n", "k", 1, None),
        lambda: storage.memory.get("t", "n", "k"),
        lambda: storage.artifacts.put("t", "a", b"x", "text/plain", None),
        lambda: storage.artifacts.list("t"),
        lambda: storage.checkpointer(),
    ]
    for call in calls:
        with pytest.raises(AgentlogError, match="closed"):
            call()
    storage.close()  # idempotent
