"""The four store suites against the async storages — in memory, and on SQLite
with each engine — through the blocking facade, plus the async-only tests.

The classes live at module level so that spawned racers can import them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentlog.aio import AsyncInMemoryStorage, AsyncSqliteStorage, AsyncStorage
from agentlog.testing import (
    ArtifactStoreConformance,
    AsyncStorageConformance,
    AsyncStorageSuite,
    CheckpointStoreConformance,
    MemoryStoreConformance,
    SessionStoreConformance,
)

from ..conftest import OnEngine
from ..stores.openers import SqliteStorageOpener


class AsyncInMemoryOpener(AsyncStorageSuite):
    durable = False
    writes_off_loop = False

    async def open_async_storage(self, location: Path) -> AsyncStorage:
        return AsyncInMemoryStorage()


class AsyncSqliteOpener(OnEngine, AsyncStorageSuite):
    multiprocess = True

    async def open_async_storage(self, location: Path) -> AsyncStorage:
        return await AsyncSqliteStorage.open(location / "agentlog.db", engine=self.engine)

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        return SqliteStorageOpener().tamper(storage, location, sha256)


class TestAsyncInMemorySessionStore(AsyncInMemoryOpener, SessionStoreConformance):
    pass


class TestAsyncSqliteSessionStoreC(AsyncSqliteOpener, SessionStoreConformance):
    engine = "c"


class TestAsyncSqliteSessionStorePython(AsyncSqliteOpener, SessionStoreConformance):
    engine = "python"


class TestAsyncInMemoryCheckpointStore(AsyncInMemoryOpener, CheckpointStoreConformance):
    pass


class TestAsyncSqliteCheckpointStoreC(AsyncSqliteOpener, CheckpointStoreConformance):
    engine = "c"


class TestAsyncSqliteCheckpointStorePython(AsyncSqliteOpener, CheckpointStoreConformance):
    engine = "python"


class TestAsyncInMemoryMemoryStore(AsyncInMemoryOpener, MemoryStoreConformance):
    pass


class TestAsyncSqliteMemoryStoreC(AsyncSqliteOpener, MemoryStoreConformance):
    engine = "c"


class TestAsyncSqliteMemoryStorePython(AsyncSqliteOpener, MemoryStoreConformance):
    engine = "python"


class TestAsyncInMemoryArtifactStore(AsyncInMemoryOpener, ArtifactStoreConformance):
    pass


class TestAsyncSqliteArtifactStoreC(AsyncSqliteOpener, ArtifactStoreConformance):
    engine = "c"


class TestAsyncSqliteArtifactStorePython(AsyncSqliteOpener, ArtifactStoreConformance):
    engine = "python"


class TestAsyncInMemoryStorage(AsyncInMemoryOpener, AsyncStorageConformance):
    pass


class TestAsyncSqliteStorageC(AsyncSqliteOpener, AsyncStorageConformance):
    engine = "c"


class TestAsyncSqliteStoragePython(AsyncSqliteOpener, AsyncStorageConformance):
    engine = "python"


def test_store_writes_share_one_writer_thread(tmp_path: Path) -> None:
    async def main() -> None:
        async with await AsyncSqliteStorage.open(tmp_path / "w.db") as storage:
            await asyncio.gather(
                storage.memory.put("t", "ns", "k", 1, None),
                storage.sessions.create("t", "s"),
                storage.checkpoints.save("t", "r", None, status="running", state={}),
                storage.artifacts.put("t", "a", b"x", "text/plain", None),
            )
            # Four writes of four stores, queued together: one writer, few groups.
            assert 1 <= storage.write_groups <= 4
            assert storage.engine in ("c", "python")

    asyncio.run(main())


def test_no_call_hops_through_to_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("asyncio.to_thread on the hot path")

    monkeypatch.setattr(asyncio, "to_thread", refuse)

    async def main() -> None:
        async with await AsyncSqliteStorage.open(tmp_path / "t.db") as storage:
            assert (await storage.memory.put("t", "ns", "k", 1, None)).revision == 0
            assert (await storage.memory.get("t", "ns", "k")).value == 1

    asyncio.run(main())
