"""The ArtifactStore conformance suite in memory and on SQLite with each engine.

The classes live at module level so that spawned racers can import them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentlog.testing import ArtifactStoreConformance

from .openers import InMemoryStorageOpener, PostgresStorageOpener, SqliteStorageOpener


class TestInMemoryArtifactStore(InMemoryStorageOpener, ArtifactStoreConformance):
    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        chunks = storage.artifacts._blobs[sha256][0]
        chunks[0] = b"X" + chunks[0][1:]
        return True


class TestSqliteArtifactStoreC(SqliteStorageOpener, ArtifactStoreConformance):
    engine = "c"


class TestSqliteArtifactStorePython(SqliteStorageOpener, ArtifactStoreConformance):
    engine = "python"


class TestPostgresArtifactStore(PostgresStorageOpener, ArtifactStoreConformance):
    pass
