"""The async twins of the log's backends: the whole conformance suite on each,
and the writer's own promises (one transaction and one wake-up per loop per
group, failures that reach every caller, no thread hop per call)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentlog import StorageUnavailableError
from agentlog.aio import (
    AsyncCheckpointer,
    AsyncFileCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)
from agentlog.testing import AsyncCheckpointerConformance

from ..conftest import OnEngine

EVENT = {"type": "user", "content": "hi"}


class TestAsyncMemoryCheckpointer(AsyncCheckpointerConformance):
    durable = False

    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        return AsyncMemoryCheckpointer()


class TestAsyncFileCheckpointer(AsyncCheckpointerConformance):
    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        return AsyncFileCheckpointer(location / "sessions")


class AsyncSqliteConformance(OnEngine, AsyncCheckpointerConformance):
    multiprocess = True

    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        return AsyncSqliteCheckpointer(location / "agentlog.db", engine=self.engine)


# At module level, so the two-process tests' spawned children can import them.
class TestAsyncSqliteCheckpointerC(AsyncSqliteConformance):
    engine = "c"


class TestAsyncSqliteCheckpointerPython(AsyncSqliteConformance):
    engine = "python"


def test_concurrent_appends_share_transactions_and_wake_ups(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        wake_ups = 0
        original = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal wake_ups
            wake_ups += 1
            return original(callback, *args, **kwargs)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
        async with AsyncSqliteCheckpointer(tmp_path / "g.db", engine=engine) as cp:
            for _ in range(10):
                await asyncio.gather(*(cp.append(f"s{n}", [EVENT]) for n in range(64)))
            assert all([await cp.head(f"s{n}") == 10 for n in range(64)])
            return cp.write_groups, wake_ups

    groups, wake_ups = asyncio.run(main())
    # 640 appends; each group is one transaction and one wake-up of this loop.
    assert groups < 640 / 4, groups
    assert wake_ups == groups, (wake_ups, groups)


def test_no_call_hops_through_to_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("asyncio.to_thread on the hot path")

    monkeypatch.setattr(asyncio, "to_thread", refuse)

    async def main() -> None:
        async with AsyncSqliteCheckpointer(tmp_path / "t.db") as cp:
            assert await cp.append("s", [EVENT]) == 1
            assert [e.seq async for e in cp.read("s")] == [1]
            assert await cp.head("s") == 1

    asyncio.run(main())


def test_a_writer_failure_reaches_every_caller_and_later_ones(tmp_path: Path) -> None:
    async def main() -> None:
        cp = AsyncSqliteCheckpointer(tmp_path / "f.db")
        await cp.append("s", [EVENT])
        backend = cp.backend

        class Crash(BaseException):
            """Not an error a write reports: the writer thread itself dies."""

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise Crash("injected")

        backend.append_prepared = broken  # type: ignore[method-assign]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(cp.append("s", [EVENT]) for _ in range(5)), return_exceptions=True),
            timeout=10,
        )
        assert all(isinstance(o, StorageUnavailableError) for o in outcomes), outcomes
        assert all("writer failed" in str(o) for o in outcomes)
        with pytest.raises(StorageUnavailableError, match="writer stopped"):
            await cp.delete("s")
        assert await cp.head("s") == 1  # nothing of the failed group was written
        await cp.aclose()

    asyncio.run(main())
