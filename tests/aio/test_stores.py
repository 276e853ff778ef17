"""The four store suites against the async storages — in memory, on SQLite with
each engine and on PostgreSQL — through the blocking facade, plus the async-only
tests.

The classes live at module level so that spawned racers can import them."""

from __future__ import annotations

import asyncio
import inspect
import io
import threading
from pathlib import Path
from typing import Any

import pytest

from agentlog import aio
from agentlog.aio import AsyncSqliteStorage, AsyncStorage
from agentlog.stores import (
    ArtifactStore,
    CheckpointStore,
    MemoryStore,
    SessionStore,
    SqliteStorage,
)
from agentlog.testing import (
    ArtifactStoreConformance,
    AsyncStorageConformance,
    AsyncStorageSuite,
    CheckpointStoreConformance,
    MemoryStoreConformance,
    SessionStoreConformance,
)

from ..conftest import OnEngine, OnPostgres, postgres_conninfo, postgres_schema
from ..stores.openers import Backend, PostgresStorageOpener, SqliteStorageOpener, suite_on_each
from ..waiting import wait_until_async


class AsyncInMemoryOpener(AsyncStorageSuite):
    durable = False
    writes_off_loop = False

    async def open_async_storage(self, location: Path) -> AsyncStorage:
        return aio.AsyncInMemoryStorage()


class AsyncSqliteOpener(OnEngine, AsyncStorageSuite):
    multiprocess = True

    async def open_async_storage(self, location: Path) -> AsyncStorage:
        return await AsyncSqliteStorage.open(location / "agentlog.db", engine=self.engine)

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        return SqliteStorageOpener().tamper(storage, location, sha256)


class AsyncPostgresOpener(OnPostgres, AsyncStorageSuite):
    multiprocess = True

    async def open_async_storage(self, location: Path) -> AsyncStorage:
        from agentlog.aio import AsyncPostgresStorage

        return await AsyncPostgresStorage.open(
            postgres_conninfo(), schema=postgres_schema(location), pool_max_size=4
        )

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        return PostgresStorageOpener().tamper(storage, location, sha256)


ASYNC_STORAGES: tuple[Backend, ...] = (
    ("AsyncInMemory", AsyncInMemoryOpener),
    ("AsyncSqlite", AsyncSqliteOpener),
    ("AsyncPostgres", AsyncPostgresOpener),
)

for _suite, _stem in (
    (SessionStoreConformance, "SessionStore"),
    (CheckpointStoreConformance, "CheckpointStore"),
    (MemoryStoreConformance, "MemoryStore"),
    (ArtifactStoreConformance, "ArtifactStore"),
    (AsyncStorageConformance, "Storage"),
):
    globals().update(suite_on_each(_suite, _stem, __name__, ASYNC_STORAGES))


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


SYNC_AND_ASYNC = [
    (SessionStore, aio.AsyncSessionStore),
    (CheckpointStore, aio.AsyncCheckpointStore),
    (MemoryStore, aio.AsyncMemoryStore),
    (ArtifactStore, aio.AsyncArtifactStore),
]


@pytest.mark.parametrize(("sync", "twin"), SYNC_AND_ASYNC, ids=lambda c: c.__name__)
def test_every_public_method_has_a_coroutine_twin_with_its_signature(
    sync: type[Any], twin: type[Any]
) -> None:
    public = {
        name for name in vars(sync) if not name.startswith("_") and callable(vars(sync)[name])
    }
    for name in public:
        method = getattr(twin, name)
        assert inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(getattr(sync, name)), name
        assert method.__doc__ == getattr(sync, name).__doc__


def test_every_write_runs_on_the_writer_and_every_read_on_the_loop(tmp_path: Path) -> None:
    async def main() -> dict[str, set[str]]:
        threads: dict[str, set[str]] = {"atomic": set(), "reading": set()}
        async with await AsyncSqliteStorage.open(tmp_path / "r.db") as storage:
            sync = storage.storage
            for store in (sync.sessions, sync.checkpoints, sync.memory, sync.artifacts):
                for kind in ("atomic", "reading"):
                    original = getattr(store, f"_{kind}")

                    def spy(*args: Any, _o: Any = original, _k: str = kind, **kw: Any) -> Any:
                        threads[_k].add(threading.current_thread().name)
                        return _o(*args, **kw)

                    setattr(store, f"_{kind}", spy)
            s, c, m, a = storage.sessions, storage.checkpoints, storage.memory, storage.artifacts
            await s.create("t", "s")
            await s.append("t", "s", 0, [{"type": "user", "content": "x", "id": "1"}])
            await s.compact("t", "s", 1, 1, {"state": 1})
            await s.get("t", "s")
            await s.load("t", "s")
            await s.list("t")
            await s.delete("t", "s", 2)
            await c.save("t", "r", None, status="running", state={})
            await c.load("t", "r")
            await c.list("t")
            await c.delete("t", "r", 0)
            await m.put("t", "ns", "k", 1, None)
            await m.get("t", "ns", "k")
            await m.list("t", "ns")
            await m.delete("t", "ns", "k", 0)
            await a.put("t", "a", io.BytesIO(b"x"), "text/plain", None)
            await a.info("t", "a")
            (await a.open("t", "a")).read()
            await a.get("t", "a")
            await a.list("t")
            await a.delete("t", "a", 0)
        return threads

    loop_thread = threading.current_thread().name
    threads = asyncio.run(main())
    assert len(threads["atomic"]) == 1
    assert next(iter(threads["atomic"])).startswith("agentlog writer")
    assert threads["reading"] == {loop_thread}


def test_a_cancelled_open_closes_what_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[SqliteStorage] = []
    entered, release = threading.Event(), threading.Event()
    real_open = SqliteStorage.open

    def slow_open(*args: Any, **kwargs: Any) -> SqliteStorage:
        entered.set()
        release.wait(10)
        storage = real_open(*args, **kwargs)
        opened.append(storage)
        return storage

    monkeypatch.setattr(SqliteStorage, "open", slow_open)

    async def main() -> None:
        task = asyncio.ensure_future(AsyncSqliteStorage.open(tmp_path / "c.db"))
        assert await wait_until_async(entered.is_set)  # the open is under way
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(500):  # a poll with its own deadline (5 s)
            if opened and opened[0].closed:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert len(opened) == 1 and opened[0].closed
