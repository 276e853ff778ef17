"""One engine per database file per process: every checkpointer and storage a
process opens on one file (with the same options) shares one writer
connection, one group-commit queue and one reader pool; each gives up only its
own hold when it closes (or is collected), and the last closes the file."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentlog import CheckpointerClosedError, SqliteCheckpointer, SqliteStorage
from agentlog.aio import AsyncSqliteCheckpointer, AsyncSqliteStorage
from agentlog.aio.writer import Writer
from agentlog.engine import open_shared_engine, release_engine

from ..conftest import PYTHON, require_engine
from ..log.test_sqlite import HOLD_WRITE_LOCK
from ..waiting import (
    os_threads,
    thread_in_a_timed_sleep,
    threads_ended,
    threads_started_since,
    wait_channels_shown,
    wait_until,
    wait_until_async,
)

EVENT = {"type": "user", "content": "hello"}


def test_checkpointers_on_one_file_share_one_engine(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "one.db"
    first = SqliteCheckpointer(path, engine=engine)
    os.symlink(path, tmp_path / "link.db")
    second = SqliteCheckpointer(tmp_path / "link.db", engine=engine)  # the same file
    full = SqliteCheckpointer(path, engine=engine, synchronous="full")  # other options
    shared = first._engine
    assert second._engine is shared
    assert full._engine is not shared
    first.append("s", [EVENT])
    assert second.head("s") == 1 and full.head("s") == 1

    first.close()
    with pytest.raises(CheckpointerClosedError):
        first.append("s", [EVENT])
    assert not shared.closed  # the other holder keeps it open
    assert second.append("s", [EVENT], expected_head=1) == 2
    second.close()
    assert shared.closed  # the last hold closes it
    full.close()
    assert full._engine.closed


def test_appends_through_different_objects_share_transactions(tmp_path: Path) -> None:
    require_engine("c")  # group commit is the C engine's
    path = tmp_path / "group.db"
    logs = [SqliteCheckpointer(path, engine="c") for _ in range(4)]
    barrier = threading.Barrier(len(logs))
    calls = 200

    def writer(slot: int) -> None:
        barrier.wait()
        head = 0
        for _ in range(calls):
            head = logs[slot].append(f"s{slot}", [EVENT], expected_head=head)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(len(logs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine = logs[0]._engine
    assert all(log._engine is engine for log in logs)
    assert [logs[0].head(f"s{n}") for n in range(len(logs))] == [calls] * len(logs)
    # Four objects, one queue: some commits held appends of several of them.
    assert engine.commits < calls * len(logs), engine.commits  # type: ignore[attr-defined]
    for log in logs:
        log.close()
    assert engine.closed


def test_a_checkpointer_collected_unclosed_gives_up_its_hold(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "dropped.db"
    kept = SqliteCheckpointer(path, engine=engine)
    dropped = SqliteCheckpointer(path, engine=engine)
    shared = kept._engine
    dropped.append("s", [EVENT])
    del dropped
    gc.collect()
    assert not shared.closed
    assert kept.head("s") == 1
    kept.close()
    assert shared.closed  # the dropped one's hold was given back


def test_a_replaced_file_gets_an_engine_of_its_own(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "replaced.db"
    old = SqliteCheckpointer(path, engine=engine)
    old.append("s", [EVENT])
    moved = tmp_path / "moved.db"
    os.rename(path, moved)
    new = SqliteCheckpointer(path, engine=engine)  # a new file at the old name
    assert new._engine is not old._engine
    assert new.head("s") == 0
    old.close()
    new.close()


def test_a_storage_and_a_checkpointer_share_and_close_apart(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "both.db"
    storage = SqliteStorage.open(path, engine=engine)
    log = SqliteCheckpointer(path, engine=engine)
    face = storage.checkpointer()
    shared = log._engine
    assert storage._engine is shared
    storage.sessions.create("acme", "a", None)
    log.append("s", [EVENT])

    storage.close()
    assert storage.closed
    with pytest.raises(CheckpointerClosedError, match="storage is closed"):
        storage.sessions.create("acme", "b", None)
    with pytest.raises(CheckpointerClosedError, match="storage is closed"):
        storage.memory.get("acme", "ns", "k")
    with pytest.raises(CheckpointerClosedError):
        face.head("s")  # the storage's face closed with it
    assert not shared.closed
    assert log.append("s", [EVENT], expected_head=1) == 2
    log.close()
    assert shared.closed


class Holder:
    """Something that holds a shared engine (weakly referenced by the registry)."""


def test_open_shared_engine_is_matched_by_release(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "direct.db"
    first, second = Holder(), Holder()
    one = open_shared_engine(path, first, engine=engine)
    two = open_shared_engine(str(path), second, engine=engine)
    assert one is two
    release_engine(one, first)
    release_engine(one, first)  # a holder gives up once, however often it says so
    assert not one.closed
    release_engine(two, second)
    assert one.closed
    three = open_shared_engine(path, first, engine=engine)  # afresh after the last release
    assert three is not one and not three.closed
    release_engine(three, first)
    memory = open_shared_engine(":memory:", first, engine=engine)  # always its own database
    assert open_shared_engine(":memory:", second, engine=engine) is not memory
    with pytest.raises(TypeError, match="busy_timeout_ms"):  # checked before any sharing
        open_shared_engine(path, first, engine=engine, busy_timeout_ms=5000.0)


def test_a_joining_holder_takes_up_a_hash_chain_turned_on_since(
    tmp_path: Path, engine: str
) -> None:
    path = tmp_path / "chain.db"
    kept = SqliteCheckpointer(path, engine=engine)
    SqliteCheckpointer(path, engine=engine, hash_chain=True).close()  # turned on meanwhile
    joined = SqliteCheckpointer(path, engine=engine)
    assert joined._engine is kept._engine
    joined.append("s", [EVENT])
    assert joined.hash_chain
    assert joined.verify("s").problem is None
    joined.close()
    kept.close()


def test_a_read_stops_when_its_checkpointer_closes(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "pages.db"
    other = SqliteCheckpointer(path, engine=engine)  # keeps the shared engine open
    log = SqliteCheckpointer(path, engine=engine)
    log.append("s", [EVENT] * 3000)
    events = log.read("s")
    next(events)
    log.close()
    with pytest.raises(CheckpointerClosedError):
        sum(1 for _ in events)  # the next page is refused
    other.close()


def test_a_storage_face_outlives_its_storage_collected_unclosed(
    tmp_path: Path, engine: str
) -> None:
    face = SqliteStorage.open(tmp_path / "face.db", engine=engine).checkpointer()
    face.append("s", [EVENT])
    gc.collect()
    assert face.append("s", [EVENT], expected_head=1) == 2


# Objects dropped unclosed, and collected at any moment (a tiny gc threshold):
# inside another open, inside a write. Run in a child, so that a deadlock fails
# the test instead of hanging it.
COLLECTED_AT_ANY_MOMENT = """
import gc, os, sys
from agentlog import SqliteCheckpointer, SqliteStorage
directory, engine = sys.argv[1], sys.argv[2]
gc.set_threshold(10)
for i in range(300):
    forgotten = SqliteCheckpointer(os.path.join(directory, "a.db"), engine=engine)
    forgotten.me = forgotten  # in a cycle: only the collector frees it
    del forgotten
    SqliteCheckpointer(os.path.join(directory, f"b{i % 7}.db"), engine=engine).close()
    SqliteStorage.open(os.path.join(directory, "c.db"), engine=engine)  # dropped unclosed
face = SqliteStorage.open(os.path.join(directory, "d.db"), engine=engine).checkpointer()
for i in range(300):
    face.append("s", [{"type": "user", "content": "x" * 100}] * 20)
print("done", face.head("s"))
"""


def test_objects_collected_at_any_moment_never_deadlock(tmp_path: Path, engine: str) -> None:
    done = subprocess.run(
        [PYTHON, "-c", COLLECTED_AT_ANY_MOMENT, str(tmp_path), engine],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["done", "6000"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_an_async_checkpointer_dropped_unclosed_stops_its_writer(
    tmp_path: Path, engine: str
) -> None:
    path = tmp_path / "dropped.db"
    gc.collect()
    before = os_threads()
    writer: set[str] = set()

    async def main() -> None:
        # synchronous="full": every append goes to a writer thread (the C
        # engine's own, or a Python one on the pure engine).
        log = AsyncSqliteCheckpointer(path, engine=engine, synchronous="full")
        assert await log.append("s", [EVENT]) == 1
        writer.update(threads_started_since(before))
        assert len(writer) == 1

    asyncio.run(main())
    gc.collect()
    assert threads_ended(writer, timeout=10)  # its idle writer saw it go


def test_many_async_checkpointers_share_one_engine_and_start_no_thread(
    tmp_path: Path, engine: str
) -> None:
    """The drop-in pattern: an object per conversation, each opened on the path."""
    path = tmp_path / "many.db"
    SqliteCheckpointer(path, engine=engine).close()
    before = set(threading.enumerate())

    async def main() -> set[threading.Thread]:
        logs = [AsyncSqliteCheckpointer(path, engine=engine) for _ in range(100)]
        for n, log in enumerate(logs):
            assert await log.append(f"conversation-{n}", [EVENT]) == 1
        engines = {id(log.backend._engine) for log in logs}  # type: ignore[attr-defined]
        started = set(threading.enumerate()) - before
        for log in logs:
            await log.aclose()
        assert len(engines) == 1
        return started

    assert asyncio.run(main()) == set()  # every append written on the loop
    with SqliteCheckpointer(path, engine=engine) as log:
        assert [log.head(f"conversation-{n}") for n in range(100)] == [1] * 100


def test_a_follower_wakes_at_once_for_a_write_through_another_holder(
    tmp_path: Path, engine: str
) -> None:
    path = tmp_path / "follow.db"
    writer = SqliteCheckpointer(path, engine=engine)
    reader = SqliteCheckpointer(path, engine=engine)
    assert seconds_to_delivery(reader, lambda: writer.append("s", [EVENT])) < 5
    writer.close()
    reader.close()


def seconds_to_delivery(log: SqliteCheckpointer, write: Callable[[], object]) -> float:
    """How long after ``write()`` a follower of ``log``'s session "s", waiting
    already, gets the event; with a poll interval far beyond the test, only the
    commit signal can wake it in time."""
    seen: list[float] = []

    def follow() -> None:
        for _event in log.follow("s", poll_interval=60):
            seen.append(time.monotonic())
            return

    follower = threading.Thread(target=follow)
    follower.start()
    assert wait_until(lambda: log.commits.waiters == 1)  # the follower waits
    start = time.monotonic()
    write()
    follower.join(timeout=10)
    assert not follower.is_alive() and seen
    return seen[0] - start


def test_a_storage_face_keeps_the_engine_when_another_holder_comes_and_goes(
    tmp_path: Path, engine: str
) -> None:
    path = tmp_path / "orphan.db"
    face = SqliteStorage.open(path, engine=engine).checkpointer()  # the storage dropped
    gc.collect()
    SqliteCheckpointer(path, engine=engine).close()  # joins the face's engine, then leaves
    assert face.append("s", [EVENT]) == 1  # the face still holds it


def test_an_async_store_kept_alone_keeps_its_writer(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[tuple[Writer, bool]] = []  # each idle writer's look for its owner
    owner_gone = Writer._owner_gone

    def look(writer: Writer) -> bool:
        looks.append((writer, owner_gone(writer)))
        return looks[-1][1]

    monkeypatch.setattr(Writer, "_owner_gone", look)

    async def main() -> None:
        storage = await AsyncSqliteStorage.open(tmp_path / "alone.db", engine=engine)
        memory = storage.memory
        del storage
        gc.collect()
        await memory.put("acme", "ns", "k1", {"v": 1}, None)
        own = memory.queue.writer
        # Its idle writer looks for its owner (what the stores share), and finds it.
        assert await wait_until_async(lambda: any(w is own for w, _ in looks))
        assert not any(gone for w, gone in looks if w is own)
        await memory.put("acme", "ns", "k2", {"v": 2}, None)
        assert (await memory.get("acme", "ns", "k2")) is not None

    asyncio.run(main())


@dataclasses.dataclass(frozen=True)
class EqualHolder:
    """Holders that compare equal: still two holds."""


class UnhashableHolder:
    __hash__ = None  # type: ignore[assignment]


def test_holds_are_counted_per_holder_by_identity(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "holds.db"
    twice = Holder()
    one = open_shared_engine(path, twice, engine=engine)
    assert open_shared_engine(path, twice, engine=engine) is one
    release_engine(one, twice)
    assert not one.closed  # its second hold is still there
    first, second = EqualHolder(), EqualHolder()
    assert first == second
    assert open_shared_engine(path, first, engine=engine) is one
    assert open_shared_engine(path, second, engine=engine) is one
    odd = UnhashableHolder()
    assert open_shared_engine(path, odd, engine=engine) is one
    for holder in (twice, first, second):
        release_engine(one, holder)
        assert not one.closed
    release_engine(one, odd)
    assert one.closed
    with pytest.raises(TypeError):  # a holder must be weakly referable, checked first
        open_shared_engine(tmp_path / "never.db", object(), engine=engine)
    assert not (tmp_path / "never.db").exists()


def test_entries_of_collected_engines_do_not_pile_up(tmp_path: Path, engine: str) -> None:
    from agentlog.engine import _SHARED

    for n in range(20):
        SqliteCheckpointer(tmp_path / f"f{n}.db", engine=engine).append("s", [EVENT])
    gc.collect()
    kept = SqliteCheckpointer(tmp_path / "kept.db", engine=engine)
    assert len([key for key in _SHARED if key[1] != 0]) <= 2, len(_SHARED)
    kept.close()


def test_a_session_store_write_wakes_the_logs_followers_at_once(
    tmp_path: Path, engine: str
) -> None:
    path = tmp_path / "store-follow.db"
    storage = SqliteStorage.open(path, engine=engine)
    log = SqliteCheckpointer(path, engine=engine)
    record = storage.sessions.create("default", "s")

    def write() -> object:
        return storage.sessions.append("default", "s", record.revision, [{**EVENT, "id": "i1"}])

    assert seconds_to_delivery(log, write) < 5
    log.close()
    storage.close()


def test_a_slow_open_of_one_file_never_holds_up_another_files_close(
    tmp_path: Path, engine: str
) -> None:
    slow, other = tmp_path / "slow.db", tmp_path / "other.db"
    SqliteCheckpointer(slow, engine=engine).close()
    unrelated = SqliteCheckpointer(other, engine=engine)
    holder = subprocess.Popen(
        [PYTHON, "-c", HOLD_WRITE_LOCK, str(slow), "3"], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    # Turning the chain on writes: this open waits for the other process's lock.
    opening = threading.Thread(
        target=lambda: SqliteCheckpointer(slow, engine=engine, hash_chain=True).close()
    )
    opening.start()
    # It waits for the lock: SQLite's busy wait sleeps between its tries
    # (where the kernel does not say where a thread sleeps, given time to).
    if wait_channels_shown():
        assert wait_until(lambda: thread_in_a_timed_sleep(opening.native_id or 0))
    else:
        time.sleep(0.3)
    start = time.monotonic()
    unrelated.close()
    took = time.monotonic() - start
    opening.join(timeout=30)
    assert holder.wait(timeout=30) == 0
    assert took < 1.5, took
