"""The four stores on PostgreSQL as a whole: one log read and written through
both faces, the schema migrated forward from version 1, a closed storage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import DEFAULT_TENANT

from ..conftest import postgres_schema, undo_postgres_version_7
from .test_storage import (
    check_a_closed_storage_refuses,
    check_a_session_store_write_wakes_a_follower,
    check_one_log_two_faces,
)


@pytest.fixture
def storage(postgres_server: str, tmp_path: Path) -> Iterator[Any]:
    from agentlog import PostgresStorage

    with PostgresStorage.open(postgres_server, schema=postgres_schema(tmp_path)) as opened:
        yield opened


def test_one_log_two_faces(storage: Any, postgres_server: str, tmp_path: Path) -> None:
    """The Checkpointer and the SessionStore read and write the same sessions."""
    from agentlog import PostgresCheckpointer

    with PostgresCheckpointer(postgres_server, schema=postgres_schema(tmp_path)) as log:
        check_one_log_two_faces(log, storage.sessions)
        assert storage.checkpointer("acme").head("private") == 0


def test_a_fork_keeps_the_snapshot(storage: Any) -> None:
    """A fork of a compacted session keeps the snapshot and the item ids."""
    log, sessions = storage.checkpointer(), storage.sessions
    log.append("chat", [{"type": "user", "id": f"m{n}", "content": "x"} for n in range(4)])
    record = sessions.get(DEFAULT_TENANT, "chat")
    sessions.compact(DEFAULT_TENANT, "chat", record.revision, 3, {"summary": "three"})
    log.fork("chat", 3, "chat-c")
    assert sessions.load(DEFAULT_TENANT, "chat-c").snapshot is not None
    assert {info.id: info.head for info in log.list()} == {"chat": 4, "chat-c": 3}


def test_a_session_store_append_wakes_a_follower(storage: Any) -> None:
    check_a_session_store_write_wakes_a_follower(storage)


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
        conn.execute(f"DROP TABLE {schema}.fork_origins")  # added by version 6
        undo_postgres_version_7(conn, schema)  # and version 7
        conn.execute(f"UPDATE {schema}.agentlog_version SET version = 1")
    from agentlog.engine.postgres.schema import SCHEMA_VERSION

    with PostgresStorage.open(postgres_server, schema=schema) as again:
        assert again.database.schema_version == SCHEMA_VERSION
        assert [e.event["content"] for e in again.checkpointer().read("kept")] == ["from version 1"]
        assert again.memory.put(DEFAULT_TENANT, "n", "k", 1, None).revision == 0


def test_a_closed_storage_raises_a_typed_error_everywhere(storage: Any) -> None:
    check_a_closed_storage_refuses(storage, lambda: storage.checkpointer())
