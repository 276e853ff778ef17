"""The SessionStore conformance suite in memory and on SQLite with each engine.

The classes live at module level so that spawned racers can import them."""

from __future__ import annotations

from agentlog.testing import SessionStoreConformance

from .openers import InMemoryStorageOpener, PostgresStorageOpener, SqliteStorageOpener


class TestInMemorySessionStore(InMemoryStorageOpener, SessionStoreConformance):
    pass


class TestSqliteSessionStoreC(SqliteStorageOpener, SessionStoreConformance):
    engine = "c"


class TestSqliteSessionStorePython(SqliteStorageOpener, SessionStoreConformance):
    engine = "python"


class TestPostgresSessionStore(PostgresStorageOpener, SessionStoreConformance):
    pass
