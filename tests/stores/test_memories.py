"""The MemoryStore conformance suite in memory and on SQLite with each engine.

The classes live at module level so that spawned racers can import them."""

from __future__ import annotations

from agentlog.testing import MemoryStoreConformance

from .openers import InMemoryStorageOpener, PostgresStorageOpener, SqliteStorageOpener


class TestInMemoryMemoryStore(InMemoryStorageOpener, MemoryStoreConformance):
    pass


class TestSqliteMemoryStoreC(SqliteStorageOpener, MemoryStoreConformance):
    engine = "c"


class TestSqliteMemoryStorePython(SqliteStorageOpener, MemoryStoreConformance):
    engine = "python"


class TestPostgresMemoryStore(PostgresStorageOpener, MemoryStoreConformance):
    pass
