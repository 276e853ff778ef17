"""The async twins of the session log's backends, on one writer each.

Each twin holds the synchronous backend (which checks every argument and
owns the storage) and a :class:`~.writer.Writer`. On the event loop's own
thread it checks and encodes appends, reads pages and heads (a page read is
a short, lock-free WAL read on SQLite; see the README for the measurement);
every write goes to the writer, so the loop never waits for a lock, a disk
or a busy timeout, and no call hops through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

from ..errors import CheckpointerClosedError
from ..events import SessionEvent, SessionInfo, StoredEvent
from ..log import BaseCheckpointer, FileCheckpointer, MemoryCheckpointer, SqliteCheckpointer
from .writer import Job, Writer, settle

__all__ = [
    "AsyncBaseCheckpointer",
    "AsyncFileCheckpointer",
    "AsyncMemoryCheckpointer",
    "AsyncSqliteCheckpointer",
]

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="AsyncBaseCheckpointer")


class AsyncBaseCheckpointer:
    """The :class:`~agentlog.aio.AsyncCheckpointer` contract over a synchronous backend."""

    def __init__(self, backend: BaseCheckpointer, *, inline_writes: bool = False) -> None:
        self._backend = backend
        self._writer = Writer(backend, type(backend).__name__, inline=inline_writes)
        self._closed = False

    @property
    def backend(self) -> BaseCheckpointer:
        """The synchronous checkpointer underneath (share it only for reads)."""
        return self._backend

    @property
    def write_groups(self) -> int:
        """How many groups the writer has run (each one transaction on SQLite)."""
        return self._writer.groups

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(f"this {type(self).__name__} is closed")

    async def _submit(self, job: Job) -> Any:
        self._writer.submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            # Withdrawn before the writer took it: never written. Taken: it is
            # written (or refused) as a whole; the caller sees the cancellation.
            self._writer.withdraw(job)
            raise

    async def _write(self, call: Callable[[], _T]) -> _T:
        self._check_open()
        result: _T = await self._submit(Job(asyncio.get_running_loop(), call=call))
        return result

    async def append(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> int:
        """Append ``events`` atomically after the head; return the new head.

        The same contract as :meth:`agentlog.Checkpointer.append`. Appends
        queued together are written in one transaction; each returns after
        the commit that holds it. Cancelled while it waits: if the writer had
        not yet taken it, nothing is written; if it had, it is written or
        refused as a whole — ``head()`` tells which.
        """
        self._check_open()
        prepared = self._backend.prepare_append(session_id, events, expected_head)
        head: int = await self._submit(Job(asyncio.get_running_loop(), append=prepared))
        return head

    async def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        """Yield the events after ``since_seq`` in seq order, a page at a time.

        Other tasks run between pages.
        """
        self._check_open()
        pages = self._backend.read(session_id, since_seq, limit)
        for count, event in enumerate(pages, 1):
            yield event
            if count % 1000 == 0:
                await asyncio.sleep(0)

    async def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        self._check_open()
        return self._backend.head(session_id)

    async def list(self) -> builtins.list[SessionInfo]:
        """Every session, most recently active first."""
        self._check_open()
        return self._backend.list()

    async def delete(self, session_id: str) -> None:
        """Remove the session and its events; idempotent."""
        await self._write(lambda: self._backend.delete(session_id))

    async def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove events after ``to_seq``; return the new head."""
        return await self._write(lambda: self._backend.truncate(session_id, to_seq))

    async def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        """Create ``new_session_id`` holding events 1..``at_seq``; return its head."""
        return await self._write(lambda: self._backend.fork(session_id, at_seq, new_session_id))

    async def aclose(self) -> None:
        """Finish every queued write, then close the backend; later calls raise."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def stop() -> None:
            error: BaseException | None = None
            try:
                self._writer.close()
                self._backend.close()
            except BaseException as exc:
                error = exc
            loop.call_soon_threadsafe(settle, [(done, None, error)])

        # Waiting for the writer's last group must not block the loop.
        threading.Thread(target=stop, name="agentlog writer close", daemon=True).start()
        await done

    def close(self) -> None:
        """Synchronous close (from outside the loop): drain the writer, close the backend."""
        self._closed = True
        self._writer.close()
        self._backend.close()

    async def __aenter__(self: _Self) -> _Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class AsyncSqliteCheckpointer(AsyncBaseCheckpointer):
    """:class:`~agentlog.SqliteCheckpointer`, async: appends group-committed by one writer."""

    def __init__(self, file: str | os.PathLike[str], **options: Any) -> None:
        super().__init__(SqliteCheckpointer(file, **options))


class AsyncFileCheckpointer(AsyncBaseCheckpointer):
    """:class:`~agentlog.FileCheckpointer`, async: writes (and fsyncs) on the writer."""

    def __init__(self, directory: str | os.PathLike[str], **options: Any) -> None:
        super().__init__(FileCheckpointer(directory, **options))


class AsyncMemoryCheckpointer(AsyncBaseCheckpointer):
    """:class:`~agentlog.MemoryCheckpointer`, async: its writes never block, so they run inline."""

    def __init__(self) -> None:
        super().__init__(MemoryCheckpointer(), inline_writes=True)
