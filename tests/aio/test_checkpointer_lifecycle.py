"""The async checkpointers over their lifetime: loops that end, interrupts, fork
children, drops and closes (and PostgreSQL's run of the suite)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import threading
import weakref
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    CheckpointConflictError,
    CheckpointerClosedError,
    FileCheckpointer,
    SqliteCheckpointer,
)
from agentlog.aio import (
    AsyncBaseCheckpointer,
    AsyncCheckpointer,
    AsyncFileCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)
from agentlog.aio.writer import Job
from agentlog.testing import AsyncCheckpointerConformance

from ..conftest import (
    PYTHON,
    OnPostgres,
    postgres_conninfo,
    postgres_schema,
    require_engine,
)
from ..waiting import wait_until, wait_until_async
from .test_checkpointer import EVENT, HOLD_THE_WRITE_LOCK, KEEP_IT_OPEN, held_elsewhere


def _engines_alive() -> int:
    from agentlog.engine.cengine import CEngine

    gc.collect()
    return sum(isinstance(o, CEngine) for o in gc.get_objects())


@pytest.mark.parametrize("closed", [True, False], ids=["aclose", "dropped"])
def test_checkpointers_leave_a_long_lived_loop(tmp_path: Path, closed: bool) -> None:
    """Two reviewers' probes: each checkpointer whose appends went through the
    writer thread stayed alive on a running loop (engine, writer thread and
    descriptors) until the loop ended: closed, its channel's finalizer held
    the engine; dropped without close(), its loop held its channel, and the
    channel the checkpointer."""
    require_engine("c")
    before = _engines_alive()

    async def main() -> int:
        for n in range(10):
            cp = AsyncSqliteCheckpointer(tmp_path / f"{n}.db", engine="c")
            await asyncio.gather(*(cp.append(f"s{k}", [EVENT]) for k in range(4)))
            if closed:
                await cp.aclose()
            del cp
        gc.collect()
        # Each loop callback letting a channel go runs, and its engine goes.
        await wait_until_async(lambda: _engines_alive() == before, interval=0.05)
        return _engines_alive()

    assert asyncio.run(main()) == before


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_loop_that_ends_with_an_append_taken_leaks_nothing(tmp_path: Path) -> None:
    """A reviewer's probe: a loop ended while the writer thread had one of its
    appends (its caller cancelled); after close() the loop, the engine and
    the loop's pipe were kept for good (the engine held the caller's future,
    and so its loop)."""
    require_engine("c")

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def cancelled_while_taken(cp: AsyncSqliteCheckpointer) -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(cp.append("s", [EVENT]), 0.2)

    def one_round(path: Path) -> None:
        cp = AsyncSqliteCheckpointer(path, engine="c")
        with held_elsewhere(path):
            asyncio.run(cancelled_while_taken(cp))
        cp.close()  # the writer thread writes it first
        with SqliteCheckpointer(path, engine="c") as check:
            assert check.head("s") == 1  # taken: written whole

    before = _engines_alive(), len(os.listdir("/proc/self/fd"))
    for n in range(3):
        one_round(tmp_path / f"{n}.db")
    assert (_engines_alive(), len(os.listdir("/proc/self/fd"))) == before
    assert len(loops) == 3 and not [loop for loop in loops if loop() is not None]


def test_an_interrupt_between_queueing_and_waiting_strands_no_other_caller(
    tmp_path: Path,
) -> None:
    """A reviewer's probe: Ctrl-C right after an append was queued (before its
    caller could wait for it) made the loop's next wake-up fail, and every
    other append of that group never completed. Here the interrupt is raised
    at that very point, as a signal handler would."""
    require_engine("c")
    loop = asyncio.new_event_loop()
    cp = AsyncSqliteCheckpointer(tmp_path / "i.db", engine="c")
    port = cp._port  # the backend's writer, as the async layer reaches it
    real = port.queue_prepared
    calls = 0

    def interrupted(prepared: Any, completions: Any) -> object:
        nonlocal calls
        calls += 1
        queued = real(prepared, completions)
        if calls == 3:
            raise KeyboardInterrupt
        return queued

    port.queue_prepared = interrupted  # type: ignore[method-assign]
    try:
        tasks = [loop.create_task(cp.append(f"s{n}", [EVENT])) for n in range(16)]
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(asyncio.gather(*tasks))
        loop.run_until_complete(asyncio.wait(tasks, timeout=10))
        outcomes = [task.exception() or task.result() for task in tasks if task.done()]
        assert len(outcomes) == 16, "an append never completed"
        assert sum(isinstance(o, KeyboardInterrupt) for o in outcomes) == 1
        assert outcomes.count(1) == 15
        loop.run_until_complete(cp.aclose())
    finally:
        loop.close()
    with SqliteCheckpointer(tmp_path / "i.db", engine="c") as check:
        # The interrupted one was queued: written whole, as a cancelled one taken.
        assert [check.head(f"s{n}") for n in range(16)] == [1] * 16


def test_an_interrupt_while_a_group_is_completed_strands_no_caller(
    tmp_path: Path, engine: str
) -> None:
    """An attacker's probe: Ctrl-C while the loop completed a group's callers
    (after one future was taken out, or part-way through) left the rest
    waiting forever. The interrupt is raised here as a signal handler would,
    just as the fifth caller's future was to be completed."""
    loop = asyncio.new_event_loop()
    cp = AsyncSqliteCheckpointer(tmp_path / "k.db", engine=engine)
    fired = False

    class Interrupting(asyncio.Future[Any]):
        def set_result(self, result: Any) -> None:
            nonlocal fired
            if not fired:
                fired = True
                raise KeyboardInterrupt
            super().set_result(result)

    made = 0
    create_future = loop.create_future

    def counting() -> asyncio.Future[Any]:
        nonlocal made
        made += 1
        return Interrupting(loop=loop) if made == 5 else create_future()

    loop.create_future = counting  # type: ignore[method-assign]
    try:
        tasks = [loop.create_task(cp.append(f"s{n}", [EVENT])) for n in range(16)]
        interrupts = 0
        while True:
            try:
                loop.run_until_complete(asyncio.wait(tasks, timeout=10))
                break
            except KeyboardInterrupt:
                interrupts += 1
        assert fired and interrupts == 1
        assert [task.result() for task in tasks] == [1] * 16  # none left waiting
        loop.run_until_complete(cp.aclose())
    finally:
        loop.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_checkpointers_dropped_with_their_loop_closed_mid_append_leak_nothing(
    tmp_path: Path,
) -> None:
    """An attacker's probe: a loop closed with appends in flight, then its
    checkpointer dropped unclosed, kept the loop, the checkpointer and two
    descriptors for good (the checkpointer's finalizer held its channels,
    whose futures held the loop, whose tasks held the checkpointer)."""
    require_engine("c")
    path = tmp_path / "d.db"

    def one_round() -> None:
        cp = AsyncSqliteCheckpointer(path, engine="c")
        loop = asyncio.new_event_loop()
        tasks = [loop.create_task(cp.append(f"s{n % 3}", [EVENT])) for n in range(20)]
        loop.run_until_complete(asyncio.sleep(0))  # one turn: each task queues its append
        loop.close()  # the tasks are left pending, as a host shutting down leaves them
        del tasks

    one_round()
    gc.collect()
    before = len(os.listdir("/proc/self/fd")), _engines_alive()
    for _ in range(10):
        one_round()
        gc.collect()

    def as_before() -> bool:
        gc.collect()
        return (len(os.listdir("/proc/self/fd")), _engines_alive()) == before

    wait_until(as_before, interval=0.05)  # the writer thread finishes what the last loop queued
    assert (len(os.listdir("/proc/self/fd")), _engines_alive()) == before


COLLECTED_WHILE_WRITING = r"""
import asyncio, gc, os, signal, subprocess, sys, threading, weakref
from agentlog import SqliteCheckpointer
from agentlog.aio import AsyncSqliteCheckpointer

path, holder_script = sys.argv[1], sys.argv[2]
# Ctrl-C raises here even where the test runs with SIGINT ignored (nohup ... &).
signal.signal(signal.SIGINT, signal.default_int_handler)
cp = AsyncSqliteCheckpointer(path, engine="c", busy_timeout_ms=8000)
holder = subprocess.Popen([sys.executable, "-c", holder_script, path],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert holder.stdout.readline() == "locked\n"

async def main():
    try:
        await asyncio.wait_for(cp.append("s", [{"type": "user", "content": "y"}] * 50), 0.2)
    except asyncio.TimeoutError:
        pass  # taken by the writer thread, waiting for the lock; its caller gone

asyncio.run(main())
engine = weakref.ref(cp.backend._engine)
del cp
threading.Timer(0.5, holder.stdin.write, ("release\n",)).start()
threading.Timer(0.6, holder.stdin.flush).start()
for delay in (0.2, 0.3):  # Ctrl-C twice while the collector waits for the writer
    threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    gc.collect()
except KeyboardInterrupt:
    pass
gc.collect()
holder.wait()
assert engine() is None
with SqliteCheckpointer(path, engine="c") as check:
    assert check.head("s") == 50  # taken: written whole
print("ok")
"""


def test_ctrl_c_while_the_collector_waits_for_the_writer_thread(tmp_path: Path) -> None:
    """A reviewer's probe: an engine dropped unclosed while its writer thread
    still wrote a loop's append; Ctrl-C during the collection interrupted the
    wait for that thread, and the collector freed what it was writing (a
    segfault on the second Ctrl-C). The wait is not interruptible there."""
    require_engine("c")
    run = subprocess.run(
        [PYTHON, "-c", COLLECTED_WHILE_WRITING, str(tmp_path / "g.db"), HOLD_THE_WRITE_LOCK],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


def test_a_loop_hearing_of_its_appends_after_the_close_does_not_crash(tmp_path: Path) -> None:
    """A reviewer's probe: the loop collected its finished appends after a
    close() from another thread, when the WAL was due its look; the look ran
    on the closed engine's connection (a segfault)."""
    require_engine("c")
    path = tmp_path / "w.db"
    payload = [{"type": "user", "content": "x" * 2000}]
    cp = AsyncSqliteCheckpointer(path, engine="c", wal_size_limit=4096)
    cp.backend.append("warm", payload)
    engine = cp.backend._engine  # type: ignore[attr-defined]

    async def main() -> list[int]:
        await asyncio.gather(*(cp.append(f"a{k}", payload) for k in range(3)))  # shared loop
        while engine._commits_unlooked != 15:  # the next commit counted is due the look
            cp.backend.append("warm", payload)
        tasks = [asyncio.ensure_future(cp.append(f"s{k}", payload)) for k in range(8)]
        await asyncio.sleep(0)  # queued to the writer thread
        closer = threading.Thread(target=cp.close)
        closer.start()
        closer.join()  # the loop is busy meanwhile: it hears of them only now
        assert engine.closed
        return await asyncio.gather(*tasks)

    with held_elsewhere(path, KEEP_IT_OPEN):  # so the WAL outlives our close
        assert asyncio.run(main()) == [1] * 8


def in_fork_child(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run the coroutine ``body()`` in a child of ``os.fork()``; it must return
    (an assertion or a hang, cut at 20 s, fails the test through the exit status)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(20)
            asyncio.run(body())
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX")
def test_a_fork_child_is_refused_never_left_waiting(tmp_path: Path, engine: str) -> None:
    """The writer thread stays in the parent: a child's writes are refused at
    once with a typed error, whichever way they would have gone."""
    cp = AsyncSqliteCheckpointer(tmp_path / "f.db", engine=engine)
    asyncio.run(cp.append("s", [EVENT]))

    async def child() -> None:
        with pytest.raises(CheckpointerClosedError):
            await cp.append("s", [EVENT])  # offered on the loop: the engine refuses
        job = Job(asyncio.get_running_loop(), call=lambda: None)
        with pytest.raises(CheckpointerClosedError, match=r"before os\.fork"):
            cp._writer.submit(job)  # the writer thread's queue refuses too

    in_fork_child(child)
    assert asyncio.run(cp.append("s", [EVENT])) == 2  # the parent goes on
    cp.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX")
def test_a_fork_childs_memory_checkpointer_goes_on_as_a_sync_one_does() -> None:
    """The in-memory writer has no thread: a child's copy writes, as a
    MemoryCheckpointer's does, and the parent's log is its own."""
    cp = AsyncMemoryCheckpointer()
    asyncio.run(cp.append("s", [EVENT]))

    async def child() -> None:
        assert await cp.append("s", [EVENT, EVENT], expected_head=1) == 3
        assert [e.seq async for e in cp.read("s")] == [1, 2, 3]

    in_fork_child(child)
    assert asyncio.run(cp.head("s")) == 1  # the parent's own log
    cp.close()


class TestAsyncPostgresCheckpointer(OnPostgres, AsyncCheckpointerConformance):
    multiprocess = True

    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        from agentlog.aio import AsyncPostgresCheckpointer

        return AsyncPostgresCheckpointer(
            postgres_conninfo(), schema=postgres_schema(location), pool_max_size=4
        )


def test_a_task_appending_alone_is_written_without_a_turn_of_the_loop(
    tmp_path: Path, engine: str
) -> None:
    """One task appending: each append is written in the call (no other task
    runs meanwhile), but never more than 16 in a row, so a tight loop of
    appends still lets the loop turn; several tasks appending group again."""

    async def main() -> tuple[int, int, int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        async with AsyncSqliteCheckpointer(tmp_path / "alone.db", engine=engine) as cp:
            running = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            start = ticks
            for seq in range(1, 6):
                assert await cp.append("s", [EVENT], expected_head=seq - 1) == seq
            no_turn = ticks - start
            start = ticks
            for seq in range(6, 106):
                assert await cp.append("s", [EVENT], expected_head=seq - 1) == seq
            turns = ticks - start
            with pytest.raises(CheckpointConflictError):
                await cp.append("s", [EVENT], expected_head=3)
            groups = cp.write_groups
            await asyncio.gather(*(cp.append(f"g{n}", [EVENT]) for n in range(64)))
            await asyncio.gather(*(cp.append(f"g{n}", [EVENT]) for n in range(64)))
            together = cp.write_groups - groups
            running.cancel()
            assert await cp.head("s") == 105
            return no_turn, turns, groups, together

    no_turn, turns, groups, together = asyncio.run(main())
    assert no_turn == 0
    assert turns >= 100 // 17, turns
    assert groups >= 105  # one transaction per append: nothing waited to group
    # 128 appends of 64 tasks: grouped (per turn of the loop on the pure
    # engine; on the C engine, each group as the writer thread takes what has
    # been queued while it wrote the last).
    assert together <= 32, together


def test_a_file_group_reports_each_append_as_written(tmp_path: Path) -> None:
    """Async callers whose appends share a writer group on the file backend:
    the one the store refuses gets the error; the others their heads."""
    from agentlog import CorruptDatabaseError
    from agentlog.aio import AsyncFileCheckpointer
    from agentlog.log.file import session_file_name

    store = tmp_path / "store"

    async def main() -> list[Any]:
        log = AsyncFileCheckpointer(store)
        try:
            await log.append("bad", [{"type": "user", "content": "first"}])
            os.link(store / session_file_name("bad"), tmp_path / "outside-link")
            return await asyncio.gather(
                log.append("good", [{"type": "user", "content": "mine"}], expected_head=0),
                log.append("bad", [{"type": "user", "content": "x"}]),
                return_exceptions=True,
            )
        finally:
            await log.aclose()

    good, bad = asyncio.run(main())
    assert good == 1
    assert isinstance(bad, CorruptDatabaseError)


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_dropped_checkpointer_lets_its_thread_and_store_go(tmp_path: Path, kind: str) -> None:
    """Dropped without aclose() after a write the writer thread ran (a
    truncate): the checkpointer is collected, its thread stops, and the file
    store's directory can be opened again."""

    async def use() -> tuple[weakref.ref[AsyncBaseCheckpointer], threading.Thread | None]:
        cp: AsyncBaseCheckpointer = (
            AsyncFileCheckpointer(tmp_path / "store")
            if kind == "file"
            else AsyncSqliteCheckpointer(tmp_path / "a.db")
        )
        await cp.append("s", [EVENT, EVENT])
        await cp.truncate("s", 1)
        return weakref.ref(cp), cp._writer._thread

    ref, thread = asyncio.run(use())
    assert thread is not None

    def gone() -> bool:
        gc.collect()
        return ref() is None and not thread.is_alive()

    wait_until(gone, interval=0.05)  # its idle thread looks for its owner, then stops
    assert ref() is None and not thread.is_alive()
    if kind == "file":
        FileCheckpointer(tmp_path / "store").close()  # not "in use by another checkpointer"


def test_file_store_reads_never_wait_on_the_loop_for_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write under way holds the file store: head, read, list and metadata
    go behind it on the writer thread instead of stopping the loop."""
    armed, inside, release = threading.Event(), threading.Event(), threading.Event()
    released: list[bool] = []
    fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        if armed.is_set() and not inside.is_set():
            inside.set()
            released.append(release.wait(30))  # False: only the timeout let it go
        fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)

    async def main() -> None:
        cp = AsyncFileCheckpointer(tmp_path / "store", fsync=True)
        try:
            await cp.append("s", [EVENT])
            armed.set()
            writing = asyncio.ensure_future(cp.append("s", [EVENT]))
            assert await wait_until_async(inside.is_set, interval=0.001)
            head = asyncio.ensure_future(cp.head("s"))
            listed = asyncio.ensure_future(cp.list())
            metadata = asyncio.ensure_future(cp.metadata("s"))

            async def read() -> list[int]:
                return [event.seq async for event in cp.read("s")]

            seqs = asyncio.ensure_future(read())
            # The loop runs on while they wait, each queued behind the write.
            assert await wait_until_async(lambda: len(cp._writer._queue) == 4)
            release.set()
            assert await writing == 2
            assert await head == 2 and await seqs == [1, 2]
            assert [info.head for info in await listed] == [2]
            assert (await metadata).revision == 2
        finally:
            await cp.aclose()

    asyncio.run(main())
    assert released == [True]
