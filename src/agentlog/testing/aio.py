"""The async twin of the log's conformance suite.

:class:`AsyncCheckpointerConformance` runs every test of
:class:`~agentlog.testing.CheckpointerConformance` — the whole contract, bad
input, hostile ids, the two-thread and two-process races, tailing, reopen —
against an :class:`~agentlog.aio.AsyncCheckpointer`, by driving it through
:class:`BlockingFacade` on an event loop of its own; then it adds what only an
async backend can get wrong: many coroutines appending at once, a cancelled
append, and closing with writes still queued.
"""

from __future__ import annotations

import asyncio
import atexit
import builtins
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

from .. import events as E
from ..activity import SessionPage
from ..aio import AsyncCheckpointer, AsyncLineageCheckpointer, AsyncMetadataCheckpointer
from ..errors import CheckpointConflictError, CheckpointerClosedError, SessionTruncatedError
from ..events import SessionMetadata, StoredEvent
from ..lifecycle import Closable
from .harness import make_event
from .log import CheckpointerConformance
from .log_suite import conversation

__all__ = ["AsyncCheckpointerConformance", "BlockingFacade", "background_loop", "open_async_suite"]

_T = TypeVar("_T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    """One event loop per process, on a daemon thread, for every facade."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="agentlog facade loop", daemon=True
            )
            thread.start()
            atexit.register(_stop_loop, loop, thread)
            _loop = loop
        return _loop


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """At exit: stop the shared loop and its thread (none is left running)."""
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


class BlockingFacade(Closable):
    """An :class:`~agentlog.aio.AsyncCheckpointer` seen as a synchronous ``Checkpointer``.

    Every call runs on a background event loop and blocks until it is done,
    so a synchronous suite (or a synchronous host) can drive an async backend.
    """

    def __init__(self, opener: Callable[[], AsyncCheckpointer]) -> None:
        self._loop = background_loop()
        self._closed = False
        self.target = self._run(self._open(opener))

    @staticmethod
    async def _open(opener: Callable[[], AsyncCheckpointer]) -> AsyncCheckpointer:
        return opener()  # constructed on the loop, as an async host would

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    # Arguments pass through as given: the async backend is the one that must
    # check them (a facade that read them would hide its mistakes), and the
    # signatures are the contract's (agentlog.Checkpointer and its twins).
    def append(self, *args: Any, **kwargs: Any) -> int:
        """See :meth:`agentlog.Checkpointer.append`."""
        return self._run(self.target.append(*args, **kwargs))

    def read(self, *args: Any, **kwargs: Any) -> Iterator[StoredEvent]:
        """See :meth:`agentlog.Checkpointer.read` (collected on the loop, then iterated)."""

        async def collect() -> builtins.list[StoredEvent]:
            return [event async for event in self.target.read(*args, **kwargs)]

        return iter(self._run(collect()))

    def head(self, *args: Any, **kwargs: Any) -> int:
        """See :meth:`agentlog.Checkpointer.head`."""
        return self._run(self.target.head(*args, **kwargs))

    def list(self, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`agentlog.BaseCheckpointer.list`."""
        target = self._with_metadata() if kwargs.get("with_metadata") else self.target
        return self._run(target.list(*args, **kwargs))

    def list_page(self, *args: Any, **kwargs: Any) -> SessionPage:
        """See :meth:`agentlog.BaseCheckpointer.list_page`."""
        target: Any = self._with_metadata()
        if not callable(getattr(target, "list_page", None)):
            raise NotImplementedError(f"{type(target).__name__} does not list pages")
        page: SessionPage = self._run(target.list_page(*args, **kwargs))
        return page

    def metadata(self, *args: Any, **kwargs: Any) -> SessionMetadata:
        """See :meth:`agentlog.log.MetadataCheckpointer.metadata`."""
        return self._run(self._with_metadata().metadata(*args, **kwargs))

    def set_metadata(self, *args: Any, **kwargs: Any) -> int:
        """See :meth:`agentlog.log.MetadataCheckpointer.set_metadata`."""
        return self._run(self._with_metadata().set_metadata(*args, **kwargs))

    def delete(self, *args: Any, **kwargs: Any) -> None:
        """See :meth:`agentlog.Checkpointer.delete`."""
        self._run(self.target.delete(*args, **kwargs))

    def truncate(self, *args: Any, **kwargs: Any) -> int:
        """See :meth:`agentlog.Checkpointer.truncate`."""
        return self._run(self.target.truncate(*args, **kwargs))

    def fork(self, *args: Any, **kwargs: Any) -> int:
        """See :meth:`agentlog.Checkpointer.fork`."""
        return self._run(self.target.fork(*args, **kwargs))

    def lineage(self, *args: Any, **kwargs: Any) -> E.ForkOrigin | None:
        """See :meth:`agentlog.BaseCheckpointer.lineage`."""
        return self._run(self._with_lineage().lineage(*args, **kwargs))

    def forks(self, *args: Any, **kwargs: Any) -> builtins.list[E.Fork]:
        """See :meth:`agentlog.BaseCheckpointer.forks`."""
        return self._run(self._with_lineage().forks(*args, **kwargs))

    def _with_metadata(self) -> AsyncMetadataCheckpointer:
        target = self.target
        if not isinstance(target, AsyncMetadataCheckpointer):
            raise NotImplementedError(f"{type(target).__name__} does not store session metadata")
        return target

    def _with_lineage(self) -> AsyncLineageCheckpointer:
        target = self.target
        if not isinstance(target, AsyncLineageCheckpointer):
            raise NotImplementedError(f"{type(target).__name__} does not record fork lineage")
        return target

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Close the async checkpointer (``aclose``)."""
        self._closed = True
        self._run(self.target.aclose())


def open_async_suite(suite: type[AsyncCheckpointerConformance], location: Path) -> BlockingFacade:
    """The facade over ``suite``'s async checkpointer at ``location`` (picklable for spawn)."""
    return BlockingFacade(functools.partial(suite().open_async_checkpointer, location))


class AsyncCheckpointerConformance(CheckpointerConformance):
    """The contract of ``AsyncCheckpointer`` as tests; subclass to run them.

    Implement :meth:`open_async_checkpointer` (called on a running event
    loop) and set :attr:`durable` / :attr:`multiprocess` as for the sync suite.
    """

    #: Coroutines appending at once in the concurrency test.
    coroutines: ClassVar[int] = 64

    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        """Open (or reopen) the async store that lives at ``location``, a directory."""
        raise NotImplementedError

    def open_checkpointer(self, location: Path) -> BlockingFacade:
        """The sync suite's tests drive the async checkpointer through a facade."""
        return open_async_suite(type(self), location)

    def process_opener(self) -> Callable[[Path], BlockingFacade]:
        """A picklable ``opener(location)`` for the multi-process tests."""
        return functools.partial(open_async_suite, type(self))

    def run_async(
        self, location: Path, main: Callable[[AsyncCheckpointer], Awaitable[None]]
    ) -> None:
        """Open the async checkpointer on a fresh loop, run ``main`` on it, close it."""

        async def run() -> None:
            cp = self.open_async_checkpointer(location)
            try:
                await main(cp)
            finally:
                await cp.aclose()

        asyncio.run(run())

    # -- what only an async backend can get wrong ---------------------------------

    def test_many_coroutines_append_at_once(self, location: Path) -> None:
        async def main(cp: AsyncCheckpointer) -> None:
            async def writer(n: int) -> builtins.list[int]:
                heads = []
                for i in range(5):
                    event = make_event("user", content=f"{n}:{i}")
                    heads.append(await cp.append(f"s{n}", [event], expected_head=i))
                return heads

            results = await asyncio.gather(*(writer(n) for n in range(self.coroutines)))
            assert all(heads == [1, 2, 3, 4, 5] for heads in results)
            shared = await asyncio.gather(
                *(cp.append("shared", [make_event("user", content=str(n))]) for n in range(20))
            )
            assert sorted(shared) == list(range(1, 21))
            events = [e async for e in cp.read("shared")]
            assert [e.seq for e in events] == list(range(1, 21))
            assert len({e.event["content"] for e in events}) == 20

        self.run_async(location, main)

    def test_a_follower_notices_a_truncate_then_appends_past_it(  # type: ignore[override]
        self, location: Path
    ) -> None:
        """As the sync suite's test, awaited: a truncate below what a follower
        yielded, then appends past its seq, ends it with SessionTruncatedError."""

        async def main(cp: AsyncCheckpointer) -> None:
            follow = getattr(cp, "follow", None)
            if follow is None:
                pytest.skip("this store has no follow()")
            await cp.append("s", conversation(5))
            follower = follow("s", poll_interval=0.01)
            try:
                assert [(await follower.__anext__()).seq for _ in range(5)] == [1, 2, 3, 4, 5]
                await cp.truncate("s", 2)
                await cp.append("s", conversation(5, "again"))
                with pytest.raises(SessionTruncatedError) as caught:
                    await follower.__anext__()
                assert (caught.value.session_id, caught.value.seq) == ("s", 5)
                assert caught.value.rewritten and caught.value.head == 7
            finally:
                await follower.aclose()

        self.run_async(location, main)

    def test_one_conflict_refuses_only_its_own_append(self, location: Path) -> None:
        async def main(cp: AsyncCheckpointer) -> None:
            await cp.append("s", [make_event("user")])
            outcomes = await asyncio.gather(
                cp.append("s", [make_event("user", n=1)], expected_head=1),
                cp.append("s", [make_event("user", n=2)], expected_head=1),
                cp.append("other", [make_event("user")], expected_head=0),
                return_exceptions=True,
            )
            assert outcomes[0] == 2
            assert isinstance(outcomes[1], CheckpointConflictError)
            assert (outcomes[1].expected, outcomes[1].actual) == (1, 2)
            assert outcomes[2] == 1
            assert [e.seq for e in [e async for e in cp.read("s")]] == [1, 2]

        self.run_async(location, main)

    def test_a_cancelled_append_is_whole_or_absent(self, location: Path) -> None:
        async def main(cp: AsyncCheckpointer) -> None:
            tasks = [
                asyncio.ensure_future(cp.append("s", [make_event("user", n=n)] * 3))
                for n in range(30)
            ]
            await asyncio.sleep(0)
            for task in tasks[::2]:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            written = [o for o in outcomes if isinstance(o, int)]
            assert all(isinstance(o, (int, asyncio.CancelledError)) for o in outcomes)
            head = await cp.head("s")
            events = [e async for e in cp.read("s")]
            # Whatever was cancelled is absent or whole: never a torn batch.
            assert head == len(events) and head % 3 == 0
            assert len(written) <= head // 3
            for start in range(0, head, 3):
                assert len({e.event["n"] for e in events[start : start + 3]}) == 1

        self.run_async(location, main)

    def test_a_second_aclose_returns_once_the_first_has_finished(self, location: Path) -> None:
        """Two closes at once (an ``async with`` exit and a shutdown hook): the
        second returns only when the first has written what was queued and
        let the store go, so it can be opened again at once."""

        async def main() -> builtins.list[int | BaseException]:
            cp = self.open_async_checkpointer(location)
            pending = [
                asyncio.ensure_future(cp.append(f"s{n % 5}", [make_event("user", n=n)] * 20))
                for n in range(50)
            ]
            await asyncio.sleep(0)
            first = asyncio.ensure_future(cp.aclose())
            await asyncio.sleep(0)
            await cp.aclose()
            reopened = self.open_async_checkpointer(location)  # the first let go
            try:
                outcomes = await asyncio.gather(*pending, return_exceptions=True)
                await first
                if self.durable:
                    heads = [await reopened.head(f"s{n}") for n in range(5)]
                    assert heads == [200] * 5
            finally:
                await reopened.aclose()
            return outcomes

        outcomes = asyncio.run(main())
        assert all(isinstance(o, int) for o in outcomes), outcomes

    def test_options_of_the_wrong_type_are_refused(self, location: Path) -> None:
        """A string is not taken for a yes, nor a bool for a number of seconds."""

        async def main(cp: AsyncCheckpointer) -> None:
            await cp.append("s", [make_event("user")])
            # with_metadata is beyond the protocol: a backend without it refuses too.
            with pytest.raises(TypeError, match="with_metadata"):
                await getattr(cp, "list")(with_metadata="no")  # noqa: B009
            wrong: tuple[Any, ...] = (True, "0.5", None)  # True is not one second
            for bad in wrong:
                with pytest.raises(TypeError, match="poll_interval"):
                    await cp.follow("s", poll_interval=bad).__anext__()
            for interval in (0, -1, float("nan")):
                with pytest.raises(ValueError, match="poll_interval"):
                    await cp.follow("s", poll_interval=interval).__anext__()

        self.run_async(location, main)

    def test_aclose_finishes_queued_writes_then_refuses(self, location: Path) -> None:
        async def main() -> None:
            cp = self.open_async_checkpointer(location)
            pending = [
                asyncio.ensure_future(cp.append("s", [make_event("user", n=n)])) for n in range(50)
            ]
            await asyncio.sleep(0)
            await cp.aclose()
            outcomes = await asyncio.gather(*pending, return_exceptions=True)
            assert sorted(o for o in outcomes if isinstance(o, int)) == list(range(1, 51))
            with pytest.raises(CheckpointerClosedError):
                await cp.append("s", [make_event("user")])
            with pytest.raises(CheckpointerClosedError):
                await cp.head("s")

        asyncio.run(main())
        if self.durable:
            facade = self.open_checkpointer(location)
            try:
                assert facade.head("s") == 50
            finally:
                facade.close()
