"""``AsyncBaseCheckpointer.follow()`` on every async backend: woken at once by
this process's commits (one wake-up per loop per commit group), by a bounded
poll for another process's; cancellable at any await, leaving no task or
thread behind; ended by aclose() and by a truncate with typed errors."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from agentlog import CheckpointerClosedError, SessionTruncatedError, StoredEvent
from agentlog.aio import (
    AsyncBaseCheckpointer,
    AsyncFileCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)

from ..conftest import postgres_conninfo, postgres_schema, require_engine
from ..log.test_follow import EVENT, KINDS, PATIENCE, appender_store, start_appender
from ..log.test_follow import kind as kind  # the backends' fixture, for pytest to find here
from ..waiting import wait_until, wait_until_async
from .wake_ups import WakeUpCounter

_T = TypeVar("_T")


def open_async(kind: str, location: Path) -> AsyncBaseCheckpointer:
    if kind == "memory":
        return AsyncMemoryCheckpointer()
    if kind == "file":
        return AsyncFileCheckpointer(location / "sessions")
    if kind == "postgres":
        from agentlog.aio import AsyncPostgresCheckpointer

        return AsyncPostgresCheckpointer(postgres_conninfo(), schema=postgres_schema(location))
    engine = kind.removeprefix("sqlite-")
    require_engine(engine)
    return AsyncSqliteCheckpointer(location / "agentlog.db", engine=engine)


def waiting_followers(cp: AsyncBaseCheckpointer) -> int:
    """How many of ``cp``'s followers wait for a commit now, each with its
    future registered to be woken (on any loop)."""
    if isinstance(cp, AsyncBaseCheckpointer):
        return sum(len(waker._waiting) for waker in list(cp._wakers.values()))
    return len(cp._waiting)  # type: ignore[unreachable]  # PostgreSQL's native twin


def run(kind: str, tmp_path: Path, test: Callable[[AsyncBaseCheckpointer], Awaitable[_T]]) -> _T:
    """Run ``test`` on a fresh async checkpointer, bounded in time, and close it."""

    async def main() -> _T:
        cp = open_async(kind, tmp_path)
        try:
            return await asyncio.wait_for(test(cp), PATIENCE)
        finally:
            await cp.aclose()

    return asyncio.run(main())


async def take(events: AsyncIterator[StoredEvent], count: int) -> list[StoredEvent]:
    taken: list[StoredEvent] = []
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        async for event in events:
            taken.append(event)
            if len(taken) == count:
                break
    return taken


def test_follow_yields_what_is_there_then_each_later_append(kind: str, tmp_path: Path) -> None:
    async def test(cp: AsyncBaseCheckpointer) -> list[int]:
        await cp.append("s", [EVENT, EVENT])

        async def write() -> None:
            for _ in range(3):
                assert await wait_until_async(lambda: waiting_followers(cp) == 1, PATIENCE)
                await cp.append("s", [EVENT])

        writer = asyncio.create_task(write())
        # Only the commit wake-up can deliver in time: the poll is far longer.
        seen = await take(cp.follow("s", poll_interval=PATIENCE * 2), 5)
        await writer
        return [event.seq for event in seen]

    assert run(kind, tmp_path, test) == [1, 2, 3, 4, 5]


def test_a_sync_thread_writing_the_backend_wakes_an_async_follower(
    kind: str, tmp_path: Path
) -> None:
    async def test(cp: AsyncBaseCheckpointer) -> list[int]:
        def write() -> None:
            for _ in range(3):
                assert wait_until(lambda: waiting_followers(cp) == 1, PATIENCE)
                cp.backend.append("s", [EVENT])

        thread = threading.Thread(target=write)
        thread.start()
        seen = await take(cp.follow("s", poll_interval=PATIENCE * 2), 3)
        thread.join()
        return [event.seq for event in seen]

    assert run(kind, tmp_path, test) == [1, 2, 3]


def test_many_followers_on_one_loop_share_one_wake_up_per_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> tuple[list[list[int]], int]:
        loop = asyncio.get_running_loop()
        wake_ups = WakeUpCounter(loop)
        async with AsyncMemoryCheckpointer() as cp:
            followers = [asyncio.create_task(take(cp.follow("s"), 1)) for _ in range(8)]
            assert await wait_until_async(lambda: waiting_followers(cp) == 8)  # all wait now
            monkeypatch.setattr(loop, "call_soon_threadsafe", wake_ups)
            # From a plain thread, so the only hand-over to the loop is the wake-up.
            writer = threading.Thread(target=cp.backend.append, args=("s", [EVENT]))
            writer.start()
            seen = await asyncio.wait_for(asyncio.gather(*followers), PATIENCE)
            writer.join()
            monkeypatch.setattr(loop, "call_soon_threadsafe", wake_ups.original)
            return [[event.seq for event in events] for events in seen], wake_ups.count

    seen, wake_ups = asyncio.run(main())
    assert seen == [[1]] * 8
    assert wake_ups == 1


def test_cancelling_or_closing_a_follower_leaves_no_task_thread_or_listener(
    kind: str, tmp_path: Path
) -> None:
    async def test(cp: AsyncBaseCheckpointer) -> None:
        await cp.append("s", [EVENT])
        threads = set(threading.enumerate())
        tasks = asyncio.all_tasks()
        # Cancelled while it waits.
        waiting = asyncio.create_task(take(cp.follow("s"), 2))
        assert await wait_until_async(lambda: waiting_followers(cp) == 1)
        # (PostgreSQL's async twin is native: its followers wait on the loop
        # itself, and its listener is a task, checked with the tasks below.)
        native = kind == "postgres"
        assert native or cp.backend.commits.subscribers == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # Stopped by break (and aclose, through aclosing).
        assert [event.seq for event in await take(cp.follow("s"), 1)] == [1]
        # Stopped by aclose() while it waits for the next event.
        follower = cp.follow("s", since_seq=1)
        pending = asyncio.ensure_future(follower.__anext__())
        assert await wait_until_async(lambda: waiting_followers(cp) == 1)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        await follower.aclose()
        assert native or cp.backend.commits.subscribers == 0
        assert asyncio.all_tasks() == tasks
        assert set(threading.enumerate()) <= threads  # (an earlier close thread may end)
        # And the checkpointer still works.
        await cp.append("s", [EVENT])
        assert [event.seq for event in await take(cp.follow("s", 1), 1)] == [2]

    run(kind, tmp_path, test)


def test_closing_the_checkpointer_ends_a_waiting_follower(kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        cp = open_async(kind, tmp_path)
        await cp.append("s", [EVENT])
        follower = asyncio.create_task(take(cp.follow("s", poll_interval=PATIENCE * 2), 2))
        assert await wait_until_async(lambda: waiting_followers(cp) == 1)
        await cp.aclose()
        with pytest.raises(CheckpointerClosedError):
            await asyncio.wait_for(follower, PATIENCE)
        with pytest.raises(CheckpointerClosedError):
            await take(cp.follow("s"), 1)

    asyncio.run(main())


def test_a_truncate_below_the_follower_raises(kind: str, tmp_path: Path) -> None:
    async def test(cp: AsyncBaseCheckpointer) -> None:
        await cp.append("s", [EVENT] * 2)
        follower = cp.follow("s")
        assert [(await follower.__anext__()).seq for _ in range(2)] == [1, 2]
        waiting = asyncio.ensure_future(follower.__anext__())
        assert await wait_until_async(lambda: waiting_followers(cp) == 1)
        await cp.truncate("s", 1)
        with pytest.raises(SessionTruncatedError):
            await waiting
        await follower.aclose()

    run(kind, tmp_path, test)


def test_follow_checks_its_arguments(tmp_path: Path) -> None:
    async def test(cp: AsyncBaseCheckpointer) -> None:
        with pytest.raises(ValueError, match="poll_interval"):
            await take(cp.follow("s", poll_interval=0), 1)
        with pytest.raises(ValueError):
            await take(cp.follow("", 0), 1)

    run("memory", tmp_path, test)


@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind != "memory"], indirect=True)
def test_follow_sees_another_process_append(kind: str, tmp_path: Path) -> None:
    location = appender_store(kind, tmp_path)
    child = start_appender(kind, location)

    async def main() -> list[tuple[int, str]]:
        if kind == "file":
            cp: AsyncBaseCheckpointer = AsyncFileCheckpointer(location, read_only=True)
        elif kind == "postgres":
            cp = open_async(kind, tmp_path)
        else:
            cp = AsyncSqliteCheckpointer(location, engine=kind.removeprefix("sqlite-"))
        async with cp:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
            seen = await asyncio.wait_for(take(cp.follow("s"), 5), PATIENCE)
        return [(event.seq, event.event["content"]) for event in seen]

    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        assert asyncio.run(main()) == [(i + 1, f"child {i}") for i in range(5)]
    finally:
        assert child.wait(PATIENCE) == 0
