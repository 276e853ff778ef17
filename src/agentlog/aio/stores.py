"""The async twins of the four stores, on one writer per storage.

:class:`AsyncInMemoryStorage` and :class:`AsyncSqliteStorage` hold the
synchronous storage (which checks every argument and owns the data) and one
:class:`~.writer.Writer`: every write of every store (``create``,
``append``, ``compact``, ``save``, ``put``, ``delete``) is queued to it as a
``call=`` job, so the event loop never waits for the write lock, a busy
timeout or a stream being read into ``put``; reads run on the loop's own
thread against the synchronous store (short, lock-free WAL reads on SQLite).
The SQLite writer is a thread; the in-memory one runs inline (its writes
never block).

Each async store is written once: a class per store lists which sync
methods are reads and which are writes, and :func:`_reads` / :func:`_writes`
derive each coroutine's signature from the sync method through a
``ParamSpec``, so mypy checks every call against the sync store's own
signature without a second copy of it.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from ..errors import CheckpointerClosedError
from ..files import DEFAULT_FILE_MODE
from ..lifecycle import AsyncClosable
from ..storage import InMemoryStorage, SqliteStorage
from ..stores import ArtifactStore, CheckpointStore, MemoryStore, SessionStore
from .writer import Closing, Job, Writer, off_loop

if TYPE_CHECKING:
    from ..storage.postgres import PostgresStorage

__all__ = [
    "AsyncArtifactStore",
    "AsyncCheckpointStore",
    "AsyncInMemoryStorage",
    "AsyncMemoryStore",
    "AsyncSessionStore",
    "AsyncSqliteStorage",
    "AsyncStorage",
]

_T = TypeVar("_T")
_R = TypeVar("_R")
_P = ParamSpec("_P")
_Store = TypeVar("_Store")


class WriteQueue:
    """What the four stores of one storage share: its writer and whether it is closed."""

    def __init__(self, name: str, *, inline: bool = False) -> None:
        # The writer works for this queue, which every store holds: its idle
        # thread stops only once the storage and all its stores are gone.
        self.writer = Writer(None, name, inline=inline, owner=self)
        self.closed = False

    def check_open(self) -> None:
        """Raise :class:`CheckpointerClosedError` once the storage is closed."""
        if self.closed:
            raise CheckpointerClosedError("the storage is closed")

    async def write(self, call: Callable[[], _T]) -> _T:
        """Run ``call`` on the writer; cancelled before it is taken, it never runs."""
        self.check_open()
        result: _T = await self.writer.run(Job(asyncio.get_running_loop(), call=call))
        return result


class AsyncStore(Generic[_Store]):
    """One store's async face: reads on the loop, writes through the storage's writer."""

    def __init__(self, store: _Store, queue: WriteQueue) -> None:
        self.sync = store
        self.queue = queue


# _reads and _writes are one wrapper but for where the call runs; folded into
# one factory, the four store tables below matched each other instead.
def _reads(
    method: Callable[Concatenate[_Store, _P], _R],
) -> Callable[Concatenate[AsyncStore[_Store], _P], Coroutine[Any, Any, _R]]:
    """The coroutine twin of a sync read: runs on the loop's thread."""
    name = method.__name__

    @functools.wraps(method)
    async def read(self: AsyncStore[_Store], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        self.queue.check_open()
        # Looked up on the instance, so an implementation's override is the one run.
        bound: Callable[_P, _R] = getattr(self.sync, name)
        return bound(*args, **kwargs)

    return read


def _writes(
    method: Callable[Concatenate[_Store, _P], _R],
) -> Callable[Concatenate[AsyncStore[_Store], _P], Coroutine[Any, Any, _R]]:
    """The coroutine twin of a sync write: one ``call=`` job on the storage's writer."""
    name = method.__name__

    @functools.wraps(method)
    async def write(self: AsyncStore[_Store], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        bound: Callable[_P, _R] = getattr(self.sync, name)
        return await self.queue.write(functools.partial(bound, *args, **kwargs))

    return write


class AsyncSessionStore(AsyncStore[SessionStore]):
    """:class:`~agentlog.stores.SessionStore` as coroutines (same arguments, same errors)."""

    create = _writes(SessionStore.create)
    append = _writes(SessionStore.append)
    compact = _writes(SessionStore.compact)
    delete = _writes(SessionStore.delete)
    prune = _writes(SessionStore.prune)
    prune_all = _writes(SessionStore.prune_all)
    get = _reads(SessionStore.get)
    load = _reads(SessionStore.load)
    list = _reads(SessionStore.list)


class AsyncCheckpointStore(AsyncStore[CheckpointStore]):
    """:class:`~agentlog.stores.CheckpointStore` as coroutines (same arguments, same errors)."""

    save = _writes(CheckpointStore.save)
    delete = _writes(CheckpointStore.delete)
    load = _reads(CheckpointStore.load)
    list = _reads(CheckpointStore.list)


class AsyncMemoryStore(AsyncStore[MemoryStore]):
    """:class:`~agentlog.stores.MemoryStore` as coroutines (same arguments, same errors)."""

    put = _writes(MemoryStore.put)
    delete = _writes(MemoryStore.delete)
    get = _reads(MemoryStore.get)
    list = _reads(MemoryStore.list)


class AsyncArtifactStore(AsyncStore[ArtifactStore]):
    """:class:`~agentlog.stores.ArtifactStore` as coroutines (same arguments, same errors).

    ``put`` from a stream reads the stream on the writer (a thread for
    SQLite), never on the loop. ``open`` returns the synchronous
    :class:`~agentlog.stores.VerifyingReader`: each of its reads is one short
    read transaction on the calling thread, verified at the end, like ``get``.
    """

    put = _writes(ArtifactStore.put)
    delete = _writes(ArtifactStore.delete)
    info = _reads(ArtifactStore.info)
    open = _reads(ArtifactStore.open)
    get = _reads(ArtifactStore.get)
    list = _reads(ArtifactStore.list)


class AsyncStorage(AsyncClosable):
    """The four async stores over one synchronous storage, with one writer for all."""

    def __init__(
        self,
        storage: InMemoryStorage | SqliteStorage | PostgresStorage,
        *,
        inline_writes: bool = False,
    ) -> None:
        self._storage = storage
        self._queue = WriteQueue(type(storage).__name__, inline=inline_writes)
        self._closing = Closing()
        self.sessions = AsyncSessionStore(storage.sessions, self._queue)
        self.checkpoints = AsyncCheckpointStore(storage.checkpoints, self._queue)
        self.memory = AsyncMemoryStore(storage.memory, self._queue)
        self.artifacts = AsyncArtifactStore(storage.artifacts, self._queue)

    @property
    def storage(self) -> InMemoryStorage | SqliteStorage | PostgresStorage:
        """The synchronous storage underneath (share it only for reads)."""
        return self._storage

    @property
    def write_groups(self) -> int:
        """How many groups the writer has run."""
        return self._queue.writer.groups

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` (or :meth:`close`) has been called."""
        return self._queue.closed

    def _shut(self) -> None:
        self._queue.writer.close()
        self._storage.close()

    async def aclose(self) -> None:
        """Finish every queued write, then close the storage; later calls raise.

        A second ``aclose()`` returns once the first has finished."""
        if self._closing.done:
            return
        self._queue.closed = True
        # Waiting for the writer's last group must not block the loop.
        await off_loop(self.close)

    def close(self) -> None:
        """Synchronous close (from outside the loop): drain the writer, close the storage."""
        self._queue.closed = True
        self._closing.run(self._shut)


class AsyncInMemoryStorage(AsyncStorage):
    """:class:`~agentlog.storage.InMemoryStorage`, async: its writes never block, so run inline."""

    def __init__(self) -> None:
        super().__init__(InMemoryStorage(), inline_writes=True)


class AsyncSqliteStorage(AsyncStorage):
    """:class:`~agentlog.storage.SqliteStorage`, async: every write on one writer thread.

    Open it with ``await AsyncSqliteStorage.open(path, engine=...)`` (the
    file is opened, created or migrated off the loop), or wrap an open
    :class:`~agentlog.storage.SqliteStorage` with ``AsyncSqliteStorage(storage)``.
    """

    def __init__(self, storage: SqliteStorage) -> None:
        super().__init__(storage)
        self._sqlite = storage

    # SqliteStorage.open's options (those that fit an async storage) again:
    # the public signature is spelled out so the docs and mypy show it.
    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "normal",
        busy_timeout_ms: int = 5000,
        engine: str | None = None,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> AsyncSqliteStorage:
        """Open (creating or migrating forward) the database at ``path``, off the loop."""
        opener = functools.partial(
            SqliteStorage.open,
            path,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            engine=engine,
            file_mode=file_mode,
        )
        # Cancelled while the file opens: the opened storage is closed, not leaked.
        return cls(await off_loop(opener, abandon=SqliteStorage.close))

    @property
    def engine(self) -> str:
        """The engine the stores run on: ``"c"`` or ``"python"``."""
        return self._sqlite.engine
