"""The async twins of the session log's backends, on one writer each.

Each twin holds the synchronous backend (which checks every argument and
owns the storage) and a :class:`~.writer.Writer`. On the event loop's own
thread it checks and encodes appends, reads pages and heads (a page read is
a short, lock-free WAL read on SQLite; see the README for the measurement).
On SQLite, a task appending alone is written right there if that needs no
waiting (the write lock free at once, no fsync per commit). Other appends go
to the engine's own writer thread where it has one (the C engine: see
:class:`~.writer.LoopChannel`), or are offered per turn of the loop as one
group, then handed to the Writer; every other write goes to the Writer. So
the loop never waits for a lock, a disk or a busy timeout, and no call hops
through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import itertools
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator
from typing import Any, TypeVar

from ..activity import ActivityCursor, SessionPage
from ..events import (
    Fork,
    ForkOrigin,
    RawEvent,
    SessionEvent,
    SessionInfo,
    SessionListing,
    SessionMetadata,
    StoredEvent,
    check_poll_interval,
    check_seq,
    check_session_id,
)
from ..log import (
    AsyncFollowPort,
    BaseCheckpointer,
    CommitSignal,
    FileCheckpointer,
    MemoryCheckpointer,
    PreparedAppend,
    SqliteCheckpointer,
    WouldWait,
    WriterPort,
    follow_pages_async,
)
from ..log.follow import Anchor, Expected, wake, woken_or_timed_out
from .face import AsyncLogFace
from .handle import AsyncSession
from .writer import Closing, Job, LoopChannel, Writer, off_loop, outcome, settle

__all__ = [
    "AsyncBaseCheckpointer",
    "AsyncFileCheckpointer",
    "AsyncMemoryCheckpointer",
    "AsyncSqliteCheckpointer",
]

_T = TypeVar("_T")

# How many appends one task may have written at once (see
# AsyncBaseCheckpointer._alone_in_turn) before the loop gets a turn.
_APPENDS_NOW_PER_TURN = 16


#: What a read or a follower yields: events, or events with their JSON undecoded.
_E = TypeVar("_E", StoredEvent, RawEvent)


def _take(events: Iterator[_E], count: int) -> tuple[builtins.list[_E], Exception | None]:
    """Up to ``count`` events, and the error that stopped them (every event
    before a damaged one is handed out first)."""
    taken: builtins.list[_E] = []
    try:
        for event in itertools.islice(events, count):
            taken.append(event)
    except Exception as exc:
        return taken, exc
    return taken, None


def _follow_step(
    port: WriterPort,
    page: Callable[[str, int, Anchor | Expected | None, int | None], builtins.list[_E]],
    session_id: str,
    last: int,
    anchor: Anchor | Expected | None,
    limit: int | None,
) -> tuple[Any, builtins.list[_E]]:
    return port.change_token(session_id), page(session_id, last, anchor, limit)


class _LoopWaker:
    """The followers waiting on one event loop, woken together after a commit.

    Subscribed to the backend's :class:`CommitSignal` while it has followers;
    a commit (on the writer thread, or inline on the loop) schedules one
    ``call_soon_threadsafe`` per loop however many followers wait, and none
    while a wake-up is already pending or nobody waits.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, signal: CommitSignal) -> None:
        self.loop = loop
        self.signal = signal
        self.followers = 0
        self._lock = threading.Lock()
        self._waiting: set[asyncio.Future[None]] = set()
        self._scheduled = False

    def on_commit(self) -> None:
        """Any thread: a commit happened; wake this loop's waiting followers once."""
        with self._lock:
            if self._scheduled or not self._waiting:
                return
            self._scheduled = True
        # A closed loop has nobody waiting on it any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        with self._lock:
            self._scheduled = False
            waiting, self._waiting = self._waiting, set()
        for future in waiting:
            wake(future)

    async def wait(self, mark: int, timeout: float) -> bool:
        """Until the signal's count moves past ``mark`` (True), or ``timeout`` seconds."""
        future = self.loop.create_future()
        with self._lock:
            self._waiting.add(future)
        # Registered first, then looked: a commit in between is never missed.
        if self.signal.count != mark:
            with self._lock:
                self._waiting.discard(future)
            return True
        try:
            await woken_or_timed_out(future, timeout)
        finally:
            with self._lock:
                self._waiting.discard(future)
        return self.signal.count != mark


class AsyncBaseCheckpointer(AsyncLogFace):
    """The :class:`~agentlog.aio.AsyncCheckpointer` contract over a synchronous backend.

    Its followers start no thread and no task: their pages and the cheap look
    for other processes' commits are short reads on the loop's thread, and
    this object's commits wake each loop once per commit group.
    """

    def __init__(
        self,
        backend: BaseCheckpointer,
        *,
        inline_writes: bool = False,
        appends_on_loop: bool = False,
    ) -> None:
        self._backend = backend
        # The backend's writer, as the async layer reaches it (a port of its own).
        self._port = backend.writer_port()
        self._writer = Writer(self._port, type(backend).__name__, inline=inline_writes, owner=self)
        # With appends_on_loop, the appends queued on one loop in one turn of
        # it are first offered to the backend as one group on the loop's own
        # thread (written only if that needs no waiting), then to the writer.
        self._appends_on_loop = appends_on_loop
        self._loop_groups: dict[asyncio.AbstractEventLoop, builtins.list[Job]] = {}
        # Per loop, in this turn of it: the task whose appends are written at
        # once, and how many were; and the loops where several tasks append
        # (see _alone_in_turn). Weakly: a loop that ended leaves.
        self._loop_turns: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, builtins.list[Any]
        ] = weakref.WeakKeyDictionary()
        self._loop_shared: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._loop_flushes = 0
        self._closed = False
        self._closing = Closing()
        self._wakers: dict[asyncio.AbstractEventLoop, _LoopWaker] = {}
        self._wakers_lock = threading.Lock()
        # Per loop, its channel to the backend's own writer thread (None: the
        # loop cannot watch it), weakly both ways: a running loop keeps its
        # channel (it watches the pipe); a closed one's is collected with its
        # waiting tasks. None at all once the backend has shown it has no
        # such thread.
        self._channels: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, weakref.ref[LoopChannel] | None
        ] = weakref.WeakKeyDictionary()
        self._has_channels = True
        # Closed, or dropped without closing: each loop lets its channel go
        # (a channel holds the engine, and its loop holds the channel).
        self._channels_finalizer = weakref.finalize(self, _shut_channels, self._channels)
        self._channels_finalizer.atexit = False

    @property
    def backend(self) -> BaseCheckpointer:
        """The synchronous checkpointer underneath (share it only for reads)."""
        return self._backend

    @property
    def write_groups(self) -> int:
        """How many groups of writes have run (each one transaction on SQLite)."""
        live = [ref() for ref in self._channels.values() if ref is not None]
        channels = sum(channel.groups for channel in live if channel is not None)
        return self._writer.groups + self._loop_flushes + channels

    async def _write(self, call: Callable[[], _T]) -> _T:
        self._check_open()
        result: _T = await self._writer.run(Job(asyncio.get_running_loop(), call=call))
        return result

    async def _read(self, read: Callable[[], _T]) -> _T:
        """``read()`` on the loop; behind the write under way, on the writer
        thread, when it would wait for that write (the file store's lock)."""
        self._check_open()
        result = self._port.try_read(read)
        if isinstance(result, WouldWait):
            return await self._write(read)
        return result

    async def _face_append(
        self,
        session_id: str,
        events: Iterable[SessionEvent],
        expected_head: int | None,
        key: str | None,
    ) -> int:
        # A keyed append is a write of its own on the writer.
        if key is not None:
            call = functools.partial(self._backend.append, session_id, events, expected_head)
            return await self._write(functools.partial(call, key=key))
        prepared = self._port.prepare_append(session_id, events, expected_head)
        loop = asyncio.get_running_loop()
        if not self._appends_on_loop:
            # Never written on the loop (every commit waits for the disk, or
            # the backend's writes block): on the backend's own writer thread
            # if it has one, else on this package's.
            channel = self._channel(loop) if prepared.batch else None
            if channel is not None:
                return await channel.append(prepared)
            head: int = await self._writer.run(Job(loop, append=prepared))
            return head
        group = self._loop_groups.get(loop)
        if group is None:
            alone = self._alone_in_turn(loop)
            if alone:
                written = self._port.try_append_prepared([prepared])
                if written is not None:
                    self._loop_flushes += 1
                    if isinstance(written[0], Exception):
                        raise written[0]
                    return written[0]
            if (alone or loop in self._loop_shared) and prepared.batch:
                # The write would wait, or several tasks append: to the
                # backend's own writer thread, where it has one.
                channel = self._channel(loop)
                if channel is not None:
                    return await channel.append(prepared)
            group = self._loop_groups[loop] = []
            loop.call_soon(self._flush_loop_group, loop)
        job = Job(loop, append=prepared)
        group.append(job)
        try:
            head = await job.future
        except asyncio.CancelledError:
            # Not yet written: never will be. Handed to a writer: withdrawn
            # if it has not taken it; otherwise written or refused as a whole.
            if job in group:
                group.remove(job)
            elif job.channel is not None:
                job.channel.withdraw(job.queued)
            else:
                self._writer.withdraw(job)
            raise
        return head

    def _alone_in_turn(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether an append is to be written at once, if that needs no waiting:
        while one task appends alone on ``loop``.

        A task appending one event at a time (the common agent loop) then
        costs about what a synchronous append does: no future, no turn of the
        loop. Once another task appends in the same turn, or a group of
        several is written, every append is queued and grouped (to the
        backend's writer thread, or per turn: see _flush_loop_group) until a
        group of one shows the others have stopped. A task that keeps
        appending without awaiting anything else is queued after
        _APPENDS_NOW_PER_TURN, so that other tasks run.
        """
        if loop in self._loop_shared:
            return False
        turn = self._loop_turns.get(loop)
        task = asyncio.current_task(loop)
        if turn is None:
            turn = self._loop_turns[loop] = [task, 0]
            loop.call_soon(self._loop_turns.pop, loop, None)
        elif turn[0] is not task:
            self._loop_shared.add(loop)
            return False
        elif turn[1] >= _APPENDS_NOW_PER_TURN:
            return False
        turn[1] += 1
        return True

    def _channel(self, loop: asyncio.AbstractEventLoop) -> LoopChannel | None:
        """``loop``'s channel to the backend's writer thread, made on first use;
        None where the backend has none (then appends group per turn here)."""
        if not self._has_channels:
            return None
        if loop in self._channels:
            ref = self._channels[loop]
            if ref is None:
                return None  # this loop cannot watch a descriptor
            live = ref()
            if live is not None:
                return live
        completions = self._port.append_completions()
        if completions is None:
            self._has_channels = False
            return None
        try:
            channel = LoopChannel(self._port, completions, loop, self._loop_shared)
        except NotImplementedError:  # a loop that cannot watch a descriptor
            completions.close()
            self._channels[loop] = None
            return None
        self._channels[loop] = weakref.ref(channel)
        return channel

    def _flush_loop_group(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: write its queued appends in one transaction if nothing
        has to wait for it, else hand them to the writer thread."""
        group = self._loop_groups.pop(loop, None) or []
        if len(group) > 1:
            self._loop_shared.add(loop)
        else:
            self._loop_shared.discard(loop)
        jobs = [job for job in group if not job.future.done()]  # cancelled ones are out
        group.clear()
        if not jobs:
            return
        appends: builtins.list[PreparedAppend] = []
        for job in jobs:  # a loop group holds appends only
            assert job.append is not None
            appends.append(job.append)
        try:
            results = self._port.try_append_prepared(appends)
        except Exception as exc:  # the whole group failed (closed, a disk error): each hears
            for job in jobs:
                job.future.set_exception(exc)
            return
        except BaseException:
            # Interrupted (Ctrl-C) around the write: each append is written
            # whole or not at all, and its caller sees CancelledError, as a
            # cancelled caller would; head() tells which.
            for job in jobs:
                job.future.cancel()
            raise
        if results is None:
            try:
                channel = self._channel(loop)
            except Exception:  # closed meanwhile, or no descriptor left: to the writer
                channel = None
            for job, prepared in zip(jobs, appends, strict=True):
                try:
                    if channel is not None and prepared.batch:
                        job.channel = channel
                        job.queued = channel.queue(prepared, job.future)
                    else:
                        self._writer.submit(job)
                except Exception as exc:  # the writer is closed or failed
                    job.future.set_exception(exc)
            return
        self._loop_flushes += 1
        settle([(job.future, *outcome(result)) for job, result in zip(jobs, results, strict=True)])

    def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        """Yield the events after ``since_seq`` in seq order, a page at a time.

        Other tasks run between pages.
        """
        return self._paged(functools.partial(self._backend.read, session_id, since_seq, limit))

    def read_json(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[RawEvent]:
        """:meth:`read`, each event's JSON as stored (see
        :meth:`agentlog.BaseCheckpointer.read_json`)."""
        return self._paged(functools.partial(self._backend.read_json, session_id, since_seq, limit))

    async def _paged(self, read: Callable[[], Iterator[_E]]) -> AsyncGenerator[_E, None]:
        """``read()``'s events a page at a time off the loop (its arguments checked
        on the first look, as a generator's are); other tasks run between pages."""
        self._check_open()
        events = read()
        while True:
            taken, error = await self._read(functools.partial(_take, events, 1000))
            for event in taken:
                yield event
            if error is not None:
                raise error
            if len(taken) < 1000:
                return
            del taken  # as the sync base's _pages: one page held, not two
            await asyncio.sleep(0)

    async def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        return await self._read(functools.partial(self._backend.head, session_id))

    def _face_follow(
        self, session_id: str, since_seq: int, poll_interval: float
    ) -> AsyncIterator[StoredEvent]:
        return self._follow(session_id, since_seq, poll_interval, self._port.follow_page)

    def _face_follow_json(
        self,
        session_id: str,
        since_seq: int,
        poll_interval: float,
        max_bytes: int | None = None,
        expect: Callable[[RawEvent], bool] | None = None,
    ) -> AsyncIterator[RawEvent]:
        return self._follow(
            session_id, since_seq, poll_interval, self._port.follow_json_page, max_bytes, expect
        )

    async def _follow(
        self,
        session_id: str,
        since_seq: int,
        poll_interval: float,
        read_page: Callable[[str, int, Anchor | Expected | None, int | None], builtins.list[_E]],
        max_bytes: int | None = None,
        expect: Callable[[RawEvent], bool] | None = None,
    ) -> AsyncGenerator[_E, None]:
        self._check_open()
        backend = self._backend
        session_id = check_session_id(session_id)
        last = check_seq("since_seq", since_seq)
        poll_interval = check_poll_interval(poll_interval)
        signal = backend.commits
        backend.watch(session_id)
        waker = self._join_waker(asyncio.get_running_loop(), signal)
        port = AsyncFollowPort(
            check_open=self._check_open,
            mark=lambda: signal.count,
            look=lambda after, anchor, limit: self._read(
                functools.partial(
                    _follow_step, self._port, read_page, session_id, after, anchor, limit
                )
            ),
            token=lambda: self._read(functools.partial(self._port.change_token, session_id)),
            wait=lambda mark: waker.wait(mark, poll_interval),
        )
        try:
            # Closed when this generator is: no finalizer task is left to close it.
            follower = follow_pages_async(port, last, max_bytes=max_bytes, expect=expect)
            async with contextlib.aclosing(follower) as pages:
                async for page in pages:
                    for event in page:
                        yield event
                    del page  # as _paged: the next look holds no page handed out
        finally:
            self._leave_waker(waker)
            backend.unwatch(session_id)

    def _join_waker(self, loop: asyncio.AbstractEventLoop, signal: CommitSignal) -> _LoopWaker:
        with self._wakers_lock:
            waker = self._wakers.get(loop)
            if waker is None:
                waker = self._wakers[loop] = _LoopWaker(loop, signal)
                signal.subscribe(waker.on_commit)
            waker.followers += 1
            return waker

    def _leave_waker(self, waker: _LoopWaker) -> None:
        with self._wakers_lock:
            waker.followers -= 1
            if waker.followers == 0:
                del self._wakers[waker.loop]
                waker.signal.unsubscribe(waker.on_commit)

    async def _face_sessions(self) -> builtins.list[SessionInfo]:
        return await self._read(self._backend.list)

    async def _face_listings(self) -> builtins.list[SessionListing]:
        return await self._read(lambda: self._backend.list(with_metadata=True))

    async def list_page(
        self, limit: int = 50, *, after: ActivityCursor | None = None
    ) -> SessionPage:
        """A page of the sessions by activity (see :meth:`agentlog.BaseCheckpointer.list_page`)."""
        return await self._read(functools.partial(self._backend.list_page, limit, after=after))

    async def metadata(self, session_id: str) -> SessionMetadata:
        """The session's metadata and revision (see :meth:`agentlog.BaseCheckpointer.metadata`)."""
        return await self._read(functools.partial(self._backend.metadata, session_id))

    async def lineage(self, session_id: str) -> ForkOrigin | None:
        """Where the session was forked from (see :meth:`agentlog.BaseCheckpointer.lineage`)."""
        return await self._read(functools.partial(self._backend.lineage, session_id))

    async def forks(self, session_id: str) -> builtins.list[Fork]:
        """The session's forks (see :meth:`agentlog.BaseCheckpointer.forks`)."""
        return await self._read(functools.partial(self._backend.forks, session_id))

    async def set_metadata(self, session_id: str, value: Any, expected_revision: int) -> int:
        """Compare-and-set the metadata on the session's revision; return the new
        one (see :meth:`agentlog.BaseCheckpointer.set_metadata`)."""
        return await self._write(
            lambda: self._backend.set_metadata(session_id, value, expected_revision)
        )

    async def session(self, session_id: str, *, shape: str = "anthropic") -> AsyncSession:
        """An :class:`~agentlog.aio.AsyncSession` on ``session_id``, resumed by replay."""
        return await AsyncSession.open(self, session_id, shape=shape)

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
        """Finish every queued write, then close the backend; later calls raise.

        Appends that another event loop queued and has not handed on yet (at
        its next turn) are refused with ``CheckpointerClosedError``."""
        if self._closing.done:
            return
        if not self._closed:
            self._closed = True
            # This loop's queued appends are written (or handed to the writer)
            # now; another loop's, flushed after the close, are refused.
            self._flush_loop_group(asyncio.get_running_loop())
        # Waiting for the writer's last group must not block the loop; a
        # second aclose() waits for the first to finish.
        await off_loop(self.close)

    def close(self) -> None:
        """Synchronous close (from outside the loop): drain the writer, close the backend."""
        self._closed = True
        self._closing.run(self._shut)

    def _shut(self) -> None:
        self._writer.close()
        self._backend.close()
        # Every append queued to the backend's writer thread has finished now
        # (or will, on an engine another holder keeps open): each loop
        # completes its own, on its own thread.
        self._channels_finalizer()


def _shut_channels(
    channels: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.ref[LoopChannel] | None],
) -> None:
    """Have each loop complete what its channel has finished and let it go
    (see :meth:`LoopChannel.shut`); a closed loop's channel is abandoned."""
    for loop, ref in list(channels.items()):
        channel = ref() if ref is not None else None
        if channel is not None:
            try:
                loop.call_soon_threadsafe(channel.shut)
            except RuntimeError:  # a closed loop: nobody waits
                channel.abandon()


class AsyncSqliteCheckpointer(AsyncBaseCheckpointer):
    """:class:`~agentlog.SqliteCheckpointer`, async: a lone task's append written
    on the loop when nothing has to wait; the others queued to the engine's
    writer thread (the C engine's, shared with the threads appending to the
    file) or, on the pure engine, grouped per turn of the loop."""

    def __init__(self, file: str | os.PathLike[str], **options: Any) -> None:
        backend = SqliteCheckpointer(file, **options)
        # With synchronous="full" every commit waits for the disk: never on the loop.
        super().__init__(backend, appends_on_loop=options.get("synchronous") != "full")


class AsyncFileCheckpointer(AsyncBaseCheckpointer):
    """:class:`~agentlog.FileCheckpointer`, async: writes (and fsyncs) on the writer."""

    def __init__(self, directory: str | os.PathLike[str], **options: Any) -> None:
        super().__init__(FileCheckpointer(directory, **options))


class AsyncMemoryCheckpointer(AsyncBaseCheckpointer):
    """:class:`~agentlog.MemoryCheckpointer`, async: its writes never block, so they run inline."""

    def __init__(self) -> None:
        super().__init__(MemoryCheckpointer(), inline_writes=True)
