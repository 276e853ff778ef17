"""The writer: one thread that runs a backend's writes in groups.

Coroutines queue the writes that would have to wait (see
:class:`~agentlog.aio.AsyncBaseCheckpointer`); the writer thread drains the
queue and runs every queued append in one call to the backend's
:meth:`~agentlog.log.WriterPort.append_prepared` — one transaction on
SQLite — so each caller completes after the commit that holds its events, and
a conflict refuses only its own append. Other writes (delete, truncate, fork)
run in queue order between the groups. Completions go back to each caller's
event loop with one ``call_soon_threadsafe`` per loop per group, never one per
append.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from ..engine import AppendCompletions
from ..errors import CheckpointerClosedError, StorageUnavailableError
from ..log import PreparedAppend, WriterPort

__all__ = [
    "Closing",
    "GroupObserver",
    "Job",
    "LoopChannel",
    "Writer",
    "off_loop",
    "outcome",
    "settle",
]

_T = TypeVar("_T")

# How often (seconds) an idle writer thread looks whether its owner is gone.
_OWNER_LOOK = 1.0


#: What the writer thread calls around each group of appends it writes (the
#: jobs of the group), when one is set on :attr:`Writer.observer`:
#: agentlog.telemetry's span of the group. None (the default): nothing.
GroupObserver = Callable[[list["Job"]], contextlib.AbstractContextManager[None]]


class Job:
    """One queued write and the future its caller awaits.

    ``context``: the caller's context variables, when someone asked for them
    (agentlog.telemetry, while instrumented): a call job runs in it on the
    writer thread, so what it does is seen as the caller's.
    """

    __slots__ = ("append", "call", "channel", "context", "future", "loop", "queued")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        append: PreparedAppend | None = None,
        call: Callable[[], Any] | None = None,
    ) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.append = append
        self.call = call
        # Queued to the backend's own writer thread instead: through which
        # channel, and its handle there (to withdraw it).
        self.channel: LoopChannel | None = None
        self.queued: object = None
        self.context: contextvars.Context | None = None


def outcome(result: int | Exception) -> tuple[int | None, Exception | None]:
    """One append's outcome (its new head, or the exception that refused it
    alone) as what its future gets: ``(head, None)`` or ``(None, error)``."""
    if isinstance(result, Exception):
        return None, result
    return result, None


def settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """On the caller's loop: complete every future of one group (cancelled ones
    stay so). Interrupted (Ctrl-C), it completes the rest on the next turn."""
    settled = 0
    try:
        for future, result, error in outcomes:
            if not future.done():
                if error is None:
                    future.set_result(result)
                else:
                    future.set_exception(error)
            settled += 1
    finally:
        if settled < len(outcomes):
            asyncio.get_running_loop().call_soon(settle, outcomes[settled:])


async def off_loop(call: Callable[[], _T], abandon: Callable[[_T], object] | None = None) -> _T:
    """Run ``call`` on a thread of its own and await its outcome, the loop running meanwhile.

    For the rare blocking step that has no writer to go to (opening a file,
    draining a writer). The thread is joined once it has answered, so none is
    left running (at interpreter exit, say). If the caller is cancelled
    meanwhile, ``abandon(result)`` releases what ``call`` made.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def deliver(result: _T) -> None:
        if not done.cancelled():
            done.set_result(result)
        elif abandon is not None:
            abandon(result)

    def fail(error: BaseException) -> None:
        if not done.cancelled():
            done.set_exception(error)

    def run() -> None:
        try:
            result = call()
        except BaseException as exc:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                loop.call_soon_threadsafe(fail, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(deliver, result)

    thread = threading.Thread(target=run, name="agentlog off-loop", daemon=True)
    thread.start()
    result = await done
    thread.join()  # it has answered: only its last steps are left
    return result


class Closing:
    """A close run once: a close from any thread or loop while another runs
    waits for that one to finish (a failed one is tried again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Whether a close has finished.
        self.done = False

    def run(self, shut: Callable[[], None]) -> None:
        """``shut()``, or wait for the close under way; return once one has finished."""
        with self._lock:
            if not self.done:
                shut()
                self.done = True


class Writer:
    """A thread running ``backend``'s writes; ``inline=True`` runs them on the caller's thread.

    Inline suits a backend whose writes never block (memory): it skips the
    thread hop and the group, not the semantics. Without a ``backend`` the
    writer runs only ``call=`` jobs (the async stores' writer). The thread
    starts with the first job it is given: a checkpointer whose appends are
    all written on the loop never starts one.
    """

    #: Called around each group of appends (see :data:`GroupObserver`); None: off.
    observer: GroupObserver | None = None

    def __init__(
        self,
        backend: WriterPort | None,
        name: str,
        *,
        inline: bool = False,
        owner: object = None,
    ) -> None:
        self._backend = backend
        # The object this writer works for, weakly: collected without being
        # closed, its idle thread stops (and lets the backend go).
        self._owner = None if owner is None else weakref.ref(owner)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[Job] = deque()
        self._closing = False
        self._failure: BaseException | None = None
        #: Groups the writer has run (for tests and tuning).
        self.groups = 0
        #: Appends written in those groups (for tests, tuning and telemetry).
        self.appends = 0
        self._name = name
        self._inline = inline
        self._thread: threading.Thread | None = None

    # -- what callers do ---------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job`` (or, inline, run it now); its future settles when it is done."""
        with self._lock:
            self._refuse_if_stopped()
            if not self._inline:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name=f"agentlog writer {self._name}", daemon=True
                    )
                    self._thread.start()
                self._queue.append(job)
                self._wake.notify()
                return
        self._execute([job])

    async def run(self, job: Job) -> Any:
        """Submit ``job`` and await its outcome.

        Cancelled before the writer took it, the job is withdrawn and never
        runs; taken, it runs (or is refused) as a whole and the caller sees
        the cancellation.
        """
        self.submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            self.withdraw(job)
            raise

    @property
    def pending(self) -> int:
        """How many jobs wait in the queue now (the writer's queue depth)."""
        return len(self._queue)

    def withdraw(self, job: Job) -> bool:
        """Take ``job`` back if the writer has not started it: then it is never written."""
        with self._lock:
            try:
                self._queue.remove(job)
            except ValueError:
                return False
            return True

    def close(self) -> None:
        """Refuse new work, finish every queued job, stop the thread. Idempotent."""
        with self._lock:
            self._closing = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _refuse_if_stopped(self) -> None:
        if os.getpid() != self._pid and not self._inline:
            # A child of os.fork(): the writer thread stayed in the parent (an
            # inline writer has none: the child's copy goes on, as a sync one does).
            raise CheckpointerClosedError(
                f"this writer was started in process {self._pid}, before os.fork(); "
                "open a new one in this process"
            )
        if self._failure is not None:
            raise StorageUnavailableError(
                f"the writer stopped after a failure: {self._failure!r}"
            ) from self._failure
        if self._closing:
            raise CheckpointerClosedError("the checkpointer is closed")

    # -- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    if not self._wake.wait(_OWNER_LOOK) and self._owner_gone():
                        self._closing = True
                if not self._queue:
                    return  # closing, and everything queued is done
                jobs = list(self._queue)
                self._queue.clear()
            try:
                self._execute(jobs)
            except BaseException as exc:  # a bug or an interpreter shutdown: fail, never hang
                self._fail(jobs, exc)
                return
            # Done with: held while idle, their calls would keep the owner alive.
            del jobs

    def _owner_gone(self) -> bool:
        return self._owner is not None and self._owner() is None

    def _fail(self, jobs: list[Job], exc: BaseException) -> None:
        with self._lock:
            self._failure = exc
            jobs = jobs + list(self._queue)
            self._queue.clear()
        error = StorageUnavailableError(f"the writer failed: {exc!r}")
        self._complete([(job, None, error) for job in jobs])

    def _execute(self, jobs: list[Job]) -> None:
        """Run ``jobs`` in order: consecutive appends as one group, other calls one by one."""
        self.groups += 1
        outcomes: list[tuple[Job, Any, BaseException | None]] = []
        run: list[tuple[Job, PreparedAppend]] = []

        def flush() -> None:
            if not run:
                return
            observer = self.observer
            try:
                if self._backend is None:
                    raise TypeError("this writer has no backend to append to")
                appends = [append for _, append in run]
                self.appends += len(appends)
                if observer is None:
                    results = self._backend.append_prepared(appends)
                else:
                    with observer([job for job, _ in run]):
                        results = self._backend.append_prepared(appends)
            except Exception as exc:
                outcomes.extend((job, None, exc) for job, _ in run)
            else:
                outcomes.extend(
                    (job, *outcome(result)) for (job, _), result in zip(run, results, strict=True)
                )
            run.clear()

        for job in jobs:
            if job.append is not None:
                run.append((job, job.append))
                continue
            flush()
            assert job.call is not None
            try:
                context = job.context
                done = job.call() if context is None else context.run(job.call)
                outcomes.append((job, done, None))
            except Exception as exc:
                outcomes.append((job, None, exc))
        flush()
        self._complete(outcomes)

    @staticmethod
    def _complete(outcomes: list[tuple[Job, Any, BaseException | None]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for job, result, error in outcomes:
            by_loop.setdefault(job.loop, []).append((job.future, result, error))
        for loop, items in by_loop.items():
            # A closed loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, items)


class LoopChannel:
    """One event loop's appends queued to the backend's own writer thread.

    Where the backend has one (SQLite on the C engine:
    :meth:`~agentlog.log.WriterPort.append_completions`), the loop
    queues each append to it as a thread's append is queued, and the writer
    thread writes the loop's appends and the threads' together, one group per
    transaction, without the GIL. It then makes this loop's channel readable
    once per group: the loop wakes once and completes every future of the
    group, with no thread of this package in between. The futures stay here:
    the engine holds nothing of the loop's, so a loop that ends is collected.
    """

    def __init__(
        self,
        backend: WriterPort,
        completions: AppendCompletions,
        loop: asyncio.AbstractEventLoop,
        shared: weakref.WeakSet[asyncio.AbstractEventLoop],
    ) -> None:
        self._backend = backend
        self._completions = completions
        self._fd = completions.fileno()
        # The loops where several tasks append (the checkpointer's, see
        # AsyncBaseCheckpointer._alone_in_turn), kept up to date from here: a
        # group of several marks the loop, one append alone with none left
        # shows its other tasks have stopped. (Not the checkpointer itself:
        # this must not keep it alive.)
        self._shared = shared
        self._futures: dict[object, asyncio.Future[Any]] = {}
        self._closing = False
        #: Groups completed on the loop (each one wake-up of it).
        self.groups = 0
        loop.add_reader(self._fd, self._ready)  # NotImplementedError on a loop without it
        # A loop that ends first leaves the channel to be closed (by the
        # engine, once its writer thread is done with what the loop queued).
        self._finalizer = weakref.finalize(loop, completions.close)

    def queue(self, prepared: PreparedAppend, future: asyncio.Future[Any]) -> object:
        """Queue ``prepared`` (non-empty); ``future`` settles after the commit
        that holds it. Returns its handle for :meth:`withdraw`."""
        queued = self._backend.queue_prepared(prepared, self._completions)
        self._futures[queued] = future
        return queued

    def withdraw(self, queued: object) -> bool:
        """Take a queued append back if the writer thread has not taken it into
        a group: then it is never written. Taken, it is written or refused whole."""
        if not self._completions.withdraw(queued):
            return False
        del self._futures[queued]
        return True

    async def append(self, prepared: PreparedAppend) -> int:
        """Queue ``prepared`` (non-empty) and await its commit (cancelled: see
        :meth:`withdraw`)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        queued = self.queue(prepared, future)
        try:
            return await future
        except asyncio.CancelledError:
            self.withdraw(queued)
            raise

    def _ready(self) -> None:
        """On the loop: complete every append that has finished. Settled once
        before the pipe's readiness is consumed (interrupted there, by Ctrl-C
        say, the pipe stays readable and the loop calls again) and once after."""
        self._settle()
        try:
            self._completions.drain()
            self._settle()
        except BaseException:
            asyncio.get_running_loop().call_soon(self._ready)
            raise
        if self._closing:
            self._release()

    def _settle(self) -> None:
        finished = self._completions.finished()
        if not finished:
            return
        written = False
        for queued, outcome in finished:
            # Each stays until released: interrupted here (Ctrl-C), the next
            # pass completes it. None: its caller was interrupted between
            # queueing it and waiting.
            future = self._futures.get(queued)
            if future is None or future.done():  # nobody waits (cancelled)
                written = written or not isinstance(outcome, Exception)
            elif isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                written = True
                future.set_result(outcome)
            self._futures.pop(queued, None)
            self._completions.release(queued)
        self.groups += 1
        if len(finished) > 1:
            self._shared.add(asyncio.get_running_loop())
        elif not self._completions.pending:
            self._shared.discard(asyncio.get_running_loop())
        if written:
            self._backend.notify_commit()

    def shut(self) -> None:
        """On the loop, once the checkpointer is closing: complete what has
        finished, and release the channel once every queued append has."""
        self._closing = True
        self._ready()

    def abandon(self) -> None:
        """The loop has closed: nobody waits. Release the channel (or leave it
        to the engine, while its writer thread still has some of them)."""
        self._futures.clear()
        self._finalizer()

    def _release(self) -> None:
        if self._completions.pending:
            return  # the writer thread still has some: the next wake-up tries again
        asyncio.get_running_loop().remove_reader(self._fd)
        self._finalizer()  # closes the channel, and lets the loop go
