"""The four store suites against the async storages, and what only they can get wrong.

:class:`BlockingStorage` makes an :class:`~agentlog.aio.AsyncStorage` look
like a synchronous storage: each store's coroutine methods become blocking
calls run on the one background event loop the log's
:class:`~agentlog.testing.BlockingFacade` uses. :class:`AsyncStorageSuite`
is the base to mix into the unchanged store suites (implement
:meth:`~AsyncStorageSuite.open_async_storage`); the thread and process
races and reopen run through the facade. :class:`AsyncStorageConformance`
adds the async-only tests: many coroutines doing compare-and-set on one
record (exactly one winner per revision), cancelled writes, a slow stream
that must not block the loop, and ``aclose`` finishing queued writes.
"""

from __future__ import annotations

import asyncio
import functools
import io
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

from ..aio import AsyncStorage
from ..errors import CheckpointerClosedError, StorageConflictError, StorageNotFoundError
from ..lifecycle import Closable
from ..stores import MemoryRecord
from .aio import background_loop
from .harness import StoreSuite

__all__ = [
    "AsyncStorageConformance",
    "AsyncStorageSuite",
    "BlockingStorage",
    "BlockingStore",
    "open_async_storage_suite",
]

_T = TypeVar("_T")


class BlockingStore:
    """One async store seen as its synchronous twin: every coroutine method, blocking."""

    def __init__(self, loop: asyncio.AbstractEventLoop, target: Any) -> None:
        self.loop = loop
        self.target = target

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.target, name)

        @functools.wraps(method)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self.loop).result()

        return blocking


class BlockingStorage(Closable):
    """An :class:`~agentlog.aio.AsyncStorage` seen as a synchronous storage.

    ``opener`` is called (and awaited) on the background loop, as an async
    host would open it; ``close()`` awaits ``aclose()`` there.
    """

    def __init__(self, opener: Callable[[], Awaitable[AsyncStorage]]) -> None:
        self.loop = background_loop()

        async def open_it() -> AsyncStorage:
            return await opener()

        self.target = self._run(open_it())
        self.sessions = BlockingStore(self.loop, self.target.sessions)
        self.checkpoints = BlockingStore(self.loop, self.target.checkpoints)
        self.memory = BlockingStore(self.loop, self.target.memory)
        self.artifacts = BlockingStore(self.loop, self.target.artifacts)

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    @property
    def closed(self) -> bool:
        """Whether the async storage underneath is closed."""
        return self.target.closed

    def close(self) -> None:
        """Close the async storage (``aclose``)."""
        self._run(self.target.aclose())


def open_async_storage_suite(suite: type[AsyncStorageSuite], location: Path) -> BlockingStorage:
    """The facade over ``suite``'s async storage at ``location`` (picklable for spawn)."""
    return BlockingStorage(functools.partial(suite().open_async_storage, location))


class AsyncStorageSuite(StoreSuite):
    """Mix into a store suite to run it against an async storage, through the facade.

    Implement :meth:`open_async_storage` (a coroutine, awaited on a running
    loop) and set ``durable`` / ``multiprocess`` as for the sync suites.
    """

    async def open_async_storage(self, location: Path) -> AsyncStorage:
        """Open (or reopen) the async storage that lives at ``location``, a directory."""
        raise NotImplementedError

    def open_storage(self, location: Path) -> BlockingStorage:
        """The store suites drive the async storage through :class:`BlockingStorage`."""
        return open_async_storage_suite(type(self), location)


class _SlowStream(io.RawIOBase):
    """A stream whose first read waits for ``released`` (set from the loop, later)."""

    def __init__(self, released: threading.Event) -> None:
        self.released = released
        self.sent = False

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        if not self.released.wait(timeout=10):
            raise TimeoutError("the stream was read on the event loop's thread")
        if self.sent:
            return 0
        self.sent = True
        target[:4] = b"slow"
        return 4


def _queue_memory_puts(storage: AsyncStorage, count: int) -> list[asyncio.Future[Any]]:
    """``count`` memory puts (``k0`` … in ``t``/``ns``) queued, none awaited yet."""
    return [
        asyncio.ensure_future(storage.memory.put("t", "ns", f"k{n}", n, None)) for n in range(count)
    ]


class AsyncStorageConformance(AsyncStorageSuite):
    """What only an async storage can get wrong; subclass with an opener to run them."""

    #: Coroutines racing in the compare-and-set tests.
    coroutines: ClassVar[int] = 32
    #: Rounds of the compare-and-set tests.
    rounds: ClassVar[int] = 10
    #: Whether writes leave the loop's thread (False for an inline writer).
    writes_off_loop: ClassVar[bool] = True

    def run_async(self, location: Path, main: Callable[[AsyncStorage], Awaitable[None]]) -> None:
        """Open the storage on a fresh loop, run ``main`` on it, close it."""

        async def run() -> None:
            storage = await self.open_async_storage(location)
            try:
                await main(storage)
            finally:
                await storage.aclose()

        asyncio.run(run())

    def test_many_coroutines_one_memory_record_one_winner_per_revision(
        self, location: Path
    ) -> None:
        async def main(storage: AsyncStorage) -> None:
            for round_no in range(self.rounds):
                expected = None if round_no == 0 else round_no - 1
                outcomes = await asyncio.gather(
                    *(
                        storage.memory.put("t", "ns", "counter", {"n": n}, expected)
                        for n in range(self.coroutines)
                    ),
                    return_exceptions=True,
                )
                winners = [o for o in outcomes if not isinstance(o, BaseException)]
                losers = [o for o in outcomes if isinstance(o, StorageConflictError)]
                assert len(winners) == 1, outcomes
                assert len(losers) == self.coroutines - 1, outcomes
                assert all(
                    (e.expected_revision, e.actual_revision) == (expected, round_no) for e in losers
                )
                record = await storage.memory.get("t", "ns", "counter")
                assert record.revision == round_no == winners[0].revision
                assert record.value == winners[0].value

        self.run_async(location, main)

    def test_many_coroutines_append_to_one_session_one_winner_per_revision(
        self, location: Path
    ) -> None:
        async def main(storage: AsyncStorage) -> None:
            await storage.sessions.create("t", "s")
            for revision in range(self.rounds):
                outcomes = await asyncio.gather(
                    *(
                        storage.sessions.append(
                            "t",
                            "s",
                            revision,
                            [{"type": "user", "content": "x", "id": f"{revision}-{n}"}],
                        )
                        for n in range(self.coroutines)
                    ),
                    return_exceptions=True,
                )
                winners = [o for o in outcomes if not isinstance(o, BaseException)]
                assert len(winners) == 1, outcomes
                assert all(
                    isinstance(o, StorageConflictError) for o in outcomes if o is not winners[0]
                )
                assert winners[0].revision == revision + 1
            loaded = await storage.sessions.load("t", "s")
            assert loaded.session.head == self.rounds
            assert [item.seq for item in loaded.items] == list(range(1, self.rounds + 1))

        self.run_async(location, main)

    def test_a_cancelled_write_is_whole_or_absent(self, location: Path) -> None:
        async def main(storage: AsyncStorage) -> None:
            tasks = [
                asyncio.ensure_future(storage.memory.put("t", "ns", f"k{n}", {"n": n}, None))
                for n in range(40)
            ]
            await asyncio.sleep(0)
            for task in tasks[::2]:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            for n, outcome in enumerate(outcomes):
                if isinstance(outcome, asyncio.CancelledError):
                    # Withdrawn (absent) or taken by the writer (whole).
                    try:
                        record = await storage.memory.get("t", "ns", f"k{n}")
                    except StorageNotFoundError:
                        continue
                    assert (record.value, record.revision) == ({"n": n}, 0)
                else:
                    assert isinstance(outcome, MemoryRecord), outcome
                    assert outcome.revision == 0
                    assert (await storage.memory.get("t", "ns", f"k{n}")).value == {"n": n}

        self.run_async(location, main)

    def test_a_stream_put_does_not_block_the_loop(self, location: Path) -> None:
        if not self.writes_off_loop:
            pytest.skip("this storage's writes run inline, on the loop's thread")

        async def main(storage: AsyncStorage) -> None:
            released = threading.Event()
            put = asyncio.ensure_future(
                storage.artifacts.put(
                    "t", "a", io.BufferedReader(_SlowStream(released)), "text/plain", None
                )
            )
            # The loop still runs (timers, reads) while the writer waits on the stream.
            await asyncio.sleep(0.01)
            assert not put.done()
            assert await storage.memory.list("t", "ns") == []
            released.set()
            info = await put
            assert info.size == 4
            assert (await storage.artifacts.get("t", "a"))[1] == b"slow"

        self.run_async(location, main)

    def test_a_second_aclose_returns_once_the_first_has_finished(self, location: Path) -> None:
        async def main() -> None:
            storage = await self.open_async_storage(location)
            pending = _queue_memory_puts(storage, 50)
            await asyncio.sleep(0)
            first = asyncio.ensure_future(storage.aclose())
            await asyncio.sleep(0)
            await storage.aclose()
            if self.durable:  # finished: every queued write is stored already
                with self.reopened(location) as reopened:
                    assert len(reopened.memory.list("t", "ns")) == 50
            outcomes = await asyncio.gather(*pending, return_exceptions=True)
            assert all(not isinstance(o, BaseException) for o in outcomes), outcomes
            await first

        asyncio.run(main())

    def test_aclose_finishes_queued_writes_then_refuses(self, location: Path) -> None:
        async def main() -> None:
            storage = await self.open_async_storage(location)
            pending = _queue_memory_puts(storage, 50)
            pending.append(asyncio.ensure_future(storage.sessions.create("t", "s")))
            await asyncio.sleep(0)
            await storage.aclose()
            outcomes = await asyncio.gather(*pending, return_exceptions=True)
            assert all(not isinstance(o, BaseException) for o in outcomes), outcomes
            with pytest.raises(CheckpointerClosedError):
                await storage.memory.put("t", "ns", "late", 1, None)
            with pytest.raises(CheckpointerClosedError):
                await storage.memory.get("t", "ns", "k0")
            await storage.aclose()  # idempotent

        asyncio.run(main())
        if self.durable:
            with self.reopened(location) as reopened:
                assert len(reopened.memory.list("t", "ns")) == 50
                assert reopened.sessions.get("t", "s").revision == 0
