"""The async twins of the log's backends: the whole conformance suite on each,
and the writer's own promises (one transaction and one wake-up per loop per
group, failures that reach every caller, no thread hop per call)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    CheckpointerClosedError,
    SqliteCheckpointer,
    StorageUnavailableError,
)
from agentlog.aio import (
    AsyncCheckpointer,
    AsyncFileCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)
from agentlog.testing import AsyncCheckpointerConformance

from ..conftest import (
    PYTHON,
    OnEngine,
    require_engine,
)
from ..waiting import (
    os_threads,
    threads_blocked,
    wait_until_async,
)
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
        # The callers whose appends the writer took when it died hear that it
        # failed; any queued after (the thread may take a group before all
        # five are queued) that it stopped: each names the crash.
        said = [str(o) for o in outcomes]
        failed, stopped = "the writer failed: ", "the writer stopped after a failure: "
        crash = "Crash('injected')"
        assert said[0] == failed + crash and set(said) <= {failed + crash, stopped + crash}, said
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


def queued_to_the_writer_thread(cp: AsyncSqliteCheckpointer) -> int:
    """How many appends the loops queued to the C engine's writer thread and
    have not had back (written or not)."""
    engine = cp.backend._engine  # type: ignore[attr-defined]
    return sum(channel.pending for channel in list(engine._completions))


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
            # Timed, not a wait on state: the test cannot see the writer thread
            # take this append into its group. Waiting for the thread's busy
            # wait instead let the next append join the same group in CI.
            await asyncio.sleep(0.2)  # the writer thread has it, waiting for the lock
            queued = asyncio.ensure_future(cp.append("t", [EVENT]))
            assert await wait_until_async(lambda: queued_to_the_writer_thread(cp) == 2)
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
    before = set(threading.enumerate())  # (an earlier test's idle writer may still run)

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
            names = [thread.name for thread in set(threading.enumerate()) - before]
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
        before = set(threading.enumerate())  # (an earlier test's idle writer may run)
        async with AsyncSqliteCheckpointer(
            tmp_path / "full.db", engine="c", synchronous="full"
        ) as cp:
            engine = cp.backend._engine  # type: ignore[attr-defined]
            commits = engine.commits
            heads = await asyncio.gather(*(cp.append(f"s{n}", [EVENT]) for n in range(64)))
            names = [thread.name for thread in set(threading.enumerate()) - before]
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
        before = os_threads()
        appends = asyncio.gather(*(cp.append(f"s{n}", [EVENT]) for n in range(8)))
        # All queued, and the writer thread waits for the lock with them.
        assert await wait_until_async(
            lambda: queued_to_the_writer_thread(cp) == 8 and threads_blocked(os_threads() - before)
        )
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
