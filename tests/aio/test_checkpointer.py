"""The async twins of the log's backends: the whole conformance suite on each,
and the writer's own promises (one transaction and one wake-up per loop per
group, failures that reach every caller, no thread hop per call)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    CheckpointConflictError,
    CheckpointerClosedError,
    FileCheckpointer,
    SqliteCheckpointer,
    StorageUnavailableError,
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
    OnEngine,
    OnPostgres,
    postgres_conninfo,
    postgres_schema,
    require_engine,
)
from ..waiting import wait_until, wait_until_async
from .wake_ups import WakeUpCounter

EVENT = {"type": "user", "content": "hi"}


class TestAsyncMemoryCheckpointer(AsyncCheckpointerConformance):
    durable = False

    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        return AsyncMemoryCheckpointer()


class TestAsyncFileCheckpointer(AsyncCheckpointerConformance):
    stamps_mtime = False  # a session's mtime is its file's

    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        return AsyncFileCheckpointer(location / "sessions")


# At module level, so the two-process tests' spawned children can import it;
# it runs on each engine (OnEngine).
class TestAsyncSqliteCheckpointer(OnEngine, AsyncCheckpointerConformance):
    multiprocess = True

    def open_async_checkpointer(self, location: Path) -> AsyncCheckpointer:
        return AsyncSqliteCheckpointer(location / "agentlog.db", engine=self.engine)


def test_concurrent_appends_share_transactions_and_wake_ups(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        wake_ups = WakeUpCounter(loop)
        monkeypatch.setattr(loop, "call_soon_threadsafe", wake_ups)
        async with AsyncSqliteCheckpointer(tmp_path / "g.db", engine=engine) as cp:
            for _ in range(10):
                await asyncio.gather(*(cp.append(f"s{n}", [EVENT]) for n in range(64)))
            assert all([await cp.head(f"s{n}") == 10 for n in range(64)])
            return cp.write_groups, wake_ups.count

    groups, wake_ups = asyncio.run(main())
    # 640 appends; each group is one transaction, written on the loop (no
    # wake-up) or by the writer thread (one wake-up of this loop).
    assert groups < 640 / 4, groups
    assert wake_ups <= groups, (wake_ups, groups)


HOLD_THE_WRITE_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""

KEEP_IT_OPEN = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("SELECT 1 FROM sqlite_master")
print("locked", flush=True)
sys.stdin.readline()
"""


@contextlib.contextmanager
def held_elsewhere(path: Path, script: str = HOLD_THE_WRITE_LOCK) -> Iterator[Callable[[], None]]:
    """Another process (two SQLite libraries in one process do not see each
    other's locks) holds ``path``'s write lock (or, with ``KEEP_IT_OPEN``, only
    keeps the file open) until the ``release()`` it yields, or the block's end."""
    with subprocess.Popen(
        [PYTHON, "-c", script, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "locked\n"
        stdin = holder.stdin

        def release() -> None:
            if holder.poll() is None:
                stdin.write("release\n")
                stdin.flush()
                assert holder.wait(timeout=30) == 0

        try:
            yield release
        finally:
            release()


def test_appends_go_to_the_writer_while_another_process_writes(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's write lock held elsewhere: the loop never waits for it. Appends
    go to the writer thread (grouped, one wake-up per group) and the loop keeps
    running meanwhile; they complete once the lock is released."""
    path = tmp_path / "busy.db"
    SqliteCheckpointer(path, engine=engine).close()

    async def main(release: Callable[[], None]) -> tuple[int, int, int, list[int]]:
        loop = asyncio.get_running_loop()
        wake_ups = WakeUpCounter(loop)
        monkeypatch.setattr(loop, "call_soon_threadsafe", wake_ups)
        async with AsyncSqliteCheckpointer(path, engine=engine) as cp:
            appends = asyncio.gather(*(cp.append(f"s{n}", [EVENT]) for n in range(32)))
            ticks = 0
            for _ in range(20):  # the loop runs while the appends wait for the lock
                await asyncio.sleep(0.005)
                ticks += 1
            assert not appends.done()
            release()
            heads = await appends
            return ticks, cp.write_groups, wake_ups.count, heads

    with held_elsewhere(path) as release:
        ticks, groups, wake_ups, heads = asyncio.run(main(release))
    assert ticks == 20
    assert heads == [1] * 32
    assert 1 <= groups <= 32, groups
    if engine == "c":
        # The C engine's writer thread wakes the loop through the loop's own
        # channel (a byte on a pipe it watches), never by a call from its thread.
        assert wake_ups == 0, wake_ups
    else:
        assert wake_ups == groups, (groups, wake_ups)


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
    """The Python writer thread (the pure engine's, and every backend's other
    writes) dying: each waiting caller hears it, typed. The C engine's writer
    thread fails by group, typed, under the fault seam (tests/engine/test_faults.py)."""

    async def main() -> None:
        cp = AsyncSqliteCheckpointer(tmp_path / "f.db", engine="python")
        await cp.append("s", [EVENT])

        class Crash(BaseException):
            """Not an error a write reports: the writer thread itself dies."""

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise Crash("injected")

        port = cp._port  # the backend's writer, as the async layer reaches it
        port.append_prepared = broken  # type: ignore[method-assign]
        # As if another process held the lock: the appends go to the writer thread.
        port.try_append_prepared = lambda appends: None  # type: ignore[method-assign]
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


def test_a_cancelled_append_is_absent_before_its_group_and_whole_after(tmp_path: Path) -> None:
    """The two outcomes a cancelled caller can observe, each made to happen
    (appends grouped per turn of the loop, as on the pure engine)."""

    async def main() -> None:
        async with AsyncSqliteCheckpointer(tmp_path / "c.db", engine="python") as cp:
            # Two tasks append in one turn: the first is written at once, the
            # second queued (and every later one, until a group of one).
            first = asyncio.ensure_future(cp.append("t", [EVENT]))
            early = asyncio.ensure_future(cp.append("s", [EVENT, EVENT]))
            await asyncio.sleep(0)  # queued; its group is written on the next turn
            assert first.done() and first.result() == 1
            early.cancel()
            with pytest.raises(asyncio.CancelledError):
                await early
            assert await cp.head("s") == 0  # never written

            second = asyncio.ensure_future(cp.append("t", [EVENT]))
            late = asyncio.ensure_future(cp.append("s", [EVENT, EVENT]))
            await asyncio.sleep(0)
            await asyncio.sleep(0)  # its group has been written
            assert second.done() and second.result() == 2
            late.cancel()
            with pytest.raises(asyncio.CancelledError):
                await late
            assert await cp.head("s") == 2  # written whole
            assert [e.seq async for e in cp.read("s")] == [1, 2]

    asyncio.run(main())


def test_a_cancelled_append_on_the_writer_thread_is_absent_or_whole(tmp_path: Path) -> None:
    """The C engine's writer thread, the two outcomes a cancelled caller can
    observe, each made to happen: another process holds the write lock, so
    the writer thread waits with the first append taken into its group, and
    the next one stays queued behind it."""
    require_engine("c")
    path = tmp_path / "c.db"
    SqliteCheckpointer(path, engine="c").close()

    async def main(release: Callable[[], None]) -> tuple[int, int, list[int]]:
        async with AsyncSqliteCheckpointer(path, engine="c") as cp:
            taken = asyncio.ensure_future(cp.append("s", [EVENT, EVENT]))
            await asyncio.sleep(0.2)  # the writer thread has it, waiting for the lock
            queued = asyncio.ensure_future(cp.append("t", [EVENT]))
            await asyncio.sleep(0.05)
            for task in (taken, queued):
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            release()
            assert await cp.append("u", [EVENT]) == 1  # queued after both
            return await cp.head("s"), await cp.head("t"), [e.seq async for e in cp.read("s")]

    with held_elsewhere(path) as release:
        head_s, head_t, seqs = asyncio.run(main(release))
    assert (head_s, seqs) == (2, [1, 2])  # taken into a group: written whole
    assert head_t == 0  # still queued when cancelled: never written


def test_threads_and_coroutines_share_one_writer_thread(tmp_path: Path) -> None:
    """A synchronous and an async checkpointer on one file in one process share
    its engine: threads' appends and a loop's queue to the same writer thread
    (one thread, no other started for the loop), in shared transactions, and
    every acknowledged append is there, in order."""
    require_engine("c")
    path = tmp_path / "shared.db"
    sync_cp = SqliteCheckpointer(path, engine="c")
    engine = sync_cp._engine  # type: ignore[attr-defined]
    per_caller = 50

    def thread_appends(name: str) -> None:
        head = 0
        for i in range(per_caller):
            head = sync_cp.append(name, [dict(EVENT, n=i)], expected_head=head)

    async def main() -> None:
        async with AsyncSqliteCheckpointer(path, engine="c") as cp:
            assert cp.backend._engine is engine  # type: ignore[attr-defined]

            async def coroutine_appends(name: str) -> None:
                head = 0
                for i in range(per_caller):
                    head = await cp.append(name, [dict(EVENT, n=i)], expected_head=head)

            threads = [threading.Thread(target=thread_appends, args=(f"t{n}",)) for n in range(4)]
            for thread in threads:
                thread.start()
            await asyncio.gather(*(coroutine_appends(f"c{n}") for n in range(16)))
            for thread in threads:
                thread.join()
            names = [thread.name for thread in threading.enumerate()]
            assert not [name for name in names if name.startswith("agentlog writer")], names

    commits = engine.commits
    asyncio.run(main())
    appends = 20 * per_caller
    assert engine.commits - commits < appends / 2, engine.commits - commits
    for name in [f"t{n}" for n in range(4)] + [f"c{n}" for n in range(16)]:
        assert [e.event["n"] for e in sync_cp.read(name)] == list(range(per_caller))
    sync_cp.close()


def test_synchronous_full_appends_share_the_writer_threads_fsyncs(tmp_path: Path) -> None:
    """With synchronous="full" no append is written on the loop (each commit
    waits for the disk): on the C engine they queue to its writer thread, and
    64 coroutines' appends share a few commits and their fsyncs."""
    require_engine("c")

    async def main() -> tuple[int, list[int]]:
        async with AsyncSqliteCheckpointer(
            tmp_path / "full.db", engine="c", synchronous="full"
        ) as cp:
            engine = cp.backend._engine  # type: ignore[attr-defined]
            commits = engine.commits
            heads = await asyncio.gather(*(cp.append(f"s{n}", [EVENT]) for n in range(64)))
            names = [thread.name for thread in threading.enumerate()]
            assert not [name for name in names if name.startswith("agentlog writer")], names
            return engine.commits - commits, heads

    commits, heads = asyncio.run(main())
    assert heads == [1] * 64
    assert 1 <= commits <= 16, commits


def test_aclose_writes_what_coroutines_queued_on_the_writer_thread(tmp_path: Path) -> None:
    """Appends queued to the C engine's writer thread when the checkpointer
    closes: each is written, and each caller gets its head."""
    require_engine("c")

    async def main() -> list[int]:
        cp = AsyncSqliteCheckpointer(tmp_path / "drain.db", engine="c")
        lock = cp.backend._engine._write_lock  # type: ignore[attr-defined]
        lock.acquire()  # the appends queue; the writer thread waits for this
        appends = asyncio.gather(*(cp.append(f"s{n}", [EVENT]) for n in range(8)))
        await asyncio.sleep(0.05)
        assert not appends.done()
        asyncio.get_running_loop().call_later(0.1, lock.release)
        await cp.aclose()
        heads = await asyncio.wait_for(appends, 10)
        with pytest.raises(CheckpointerClosedError):
            await cp.append("s0", [EVENT])
        return heads

    assert asyncio.run(main()) == [1] * 8
    with SqliteCheckpointer(tmp_path / "drain.db", engine="c") as cp:
        assert [cp.head(f"s{n}") for n in range(8)] == [1] * 8


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
        loop.run_until_complete(asyncio.sleep(0))
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
            while not inside.is_set():
                await asyncio.sleep(0.001)
            head = asyncio.ensure_future(cp.head("s"))
            listed = asyncio.ensure_future(cp.list())
            metadata = asyncio.ensure_future(cp.metadata("s"))

            async def read() -> list[int]:
                return [event.seq async for event in cp.read("s")]

            seqs = asyncio.ensure_future(read())
            await asyncio.sleep(0.05)  # the loop runs on while they wait
            release.set()
            assert await writing == 2
            assert await head == 2 and await seqs == [1, 2]
            assert [info.head for info in await listed] == [2]
            assert (await metadata).revision == 2
        finally:
            await cp.aclose()

    asyncio.run(main())
    assert released == [True]
