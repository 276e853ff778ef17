"""The CheckpointStore conformance suite in memory and on SQLite with each engine.

The classes live at module level so that spawned racers can import them."""

from __future__ import annotations

from agentlog.testing import CheckpointStoreConformance

from .openers import InMemoryStorageOpener, PostgresStorageOpener, SqliteStorageOpener


class TestInMemoryCheckpointStore(InMemoryStorageOpener, CheckpointStoreConformance):
    pass


class TestSqliteCheckpointStoreC(SqliteStorageOpener, CheckpointStoreConformance):
    engine = "c"


class TestSqliteCheckpointStorePython(SqliteStorageOpener, CheckpointStoreConformance):
    engine = "python"


class TestPostgresCheckpointStore(PostgresStorageOpener, CheckpointStoreConformance):
    pass
