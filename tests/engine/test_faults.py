"""Fault injection in the C engine: every error path frees what it allocated and
leaves the log consistent.

The C engine built with ``AGENTLOG_FAULTS=1`` has a seam
(:mod:`agentlog.engine.faults`) that fails an allocation (SQLite's or the
engine's own), or a file write / truncate / sync with ``SQLITE_IOERR_*`` or
``SQLITE_FULL``, after N operations, once or from then on. For each kind and
mode, each operation here — append (one event, a 100-event batch, appends of
several threads through group commit), truncate, fork, delete, read, head,
open, and the four stores' writes — is swept over its fault points: the
operation is run once to count its operations of that kind, then with the
fault at each point (every point of a short operation; of a long one, the
first two, the last and a sample of the rest: see :func:`points`). Each run
must end in a typed error or success, never a crash or a hang; after
disarming, the same handle shows exactly the state before the operation (it
failed) or after it (it succeeded), the next write works, and the file
reopens, passes its integrity check and shows the same state.

``scripts/test`` runs these under AddressSanitizer and LeakSanitizer, where a
leak on any error path fails the run. Without the seam they are skipped,
saying so; with ``AGENTLOG_REQUIRE_FAULTS=1`` (``scripts/test`` sets it for
that run) they fail instead.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentlog import SqliteCheckpointer
from agentlog.aio import AsyncSqliteCheckpointer
from agentlog.engine.faults import FAULT_KINDS, FaultKind, FaultSeam, fault_seam
from agentlog.errors import StorageNotFoundError, StorageUnavailableError
from agentlog.stores import SqliteStorage

from ..conftest import require_engine

# What a sweep opens afresh for each fault point: the log, or the four stores.
_Opened = TypeVar("_Opened", SqliteCheckpointer, SqliteStorage)

#: What a fault may surface as: SQLite's out-of-memory is ``MemoryError``
#: (agentlog.engine.base's error table), every I/O failure and a full disk
#: :class:`StorageUnavailableError`.
TYPED = (MemoryError, StorageUnavailableError)

#: At most this many fault points per sweep (all of them when there are fewer).
MAX_POINTS = int(os.environ.get("AGENTLOG_FAULT_POINTS", "60"))

#: ``AGENTLOG_FULL_SWEEP=1`` fails every point of every operation, however many.
FULL_SWEEP = os.environ.get("AGENTLOG_FULL_SWEEP", "") not in ("", "0")

#: The seed of the sampled points: the same points on every run, unless
#: ``AGENTLOG_SWEEP_SEED`` picks others (a failure names the seed it ran with).
SWEEP_SEED = int(os.environ.get("AGENTLOG_SWEEP_SEED", "20261207"))

MODES = {"once": False, "persistent": True}


def faults_required() -> bool:
    """Whether ``AGENTLOG_REQUIRE_FAULTS`` is set (the ASan run of ``scripts/test``)."""
    return os.environ.get("AGENTLOG_REQUIRE_FAULTS", "") not in ("", "0")


# Every sweep runs under each kind of fault and each mode: fixtures, so the
# four sweeps ask for them by name rather than each parametrizing again.
@pytest.fixture(params=FAULT_KINDS)
def kind(request: pytest.FixtureRequest) -> FaultKind:
    """Each kind of fault in turn."""
    found: FaultKind = request.param
    return found


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    """Each mode in turn: a fault once, or one that stays (see :data:`MODES`)."""
    found: str = request.param
    return found


@pytest.fixture
def seam() -> Iterator[FaultSeam]:
    """The seam (skipped, or failed under ``AGENTLOG_REQUIRE_FAULTS``, without it),
    disarmed after the test whatever happened."""
    require_engine("c")
    found = fault_seam()
    if found is None:
        reason = (
            "the C engine here was built without the fault-injection seam "
            "(build it with AGENTLOG_FAULTS=1)"
        )
        if faults_required():
            pytest.fail(f"{reason}; AGENTLOG_REQUIRE_FAULTS is set", pytrace=False)
        pytest.skip(reason)
    try:
        yield found
    finally:
        found.disarm()


def points(total: int) -> list[int]:
    """The fault points of an operation that does ``total`` operations of a kind:
    every one when few (and ``total`` itself: no fault fires) or under
    :data:`FULL_SWEEP`; else the first two, the last, and a sample of the rest
    drawn from :data:`SWEEP_SEED` and the running test's id, so each sweep
    tries its own points and a run is repeatable. The seed is printed, and
    pytest shows it beside a failure."""
    if FULL_SWEEP or total + 1 <= MAX_POINTS:
        return list(range(total + 1))
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    rng = random.Random(f"{SWEEP_SEED}:{test}:{total}")
    print(
        f"{test}: {MAX_POINTS} of {total + 1} fault points, sampled with "
        f"AGENTLOG_SWEEP_SEED={SWEEP_SEED} (AGENTLOG_FULL_SWEEP=1 tries every one)"
    )
    return sorted({0, 1, total} | set(rng.sample(range(2, total), MAX_POINTS - 3)))


# -- the log ------------------------------------------------------------------------

EVENT = {"type": "user", "content": "x"}


#: The append key the keyed cases use: each session's row under it is part of its state.
KEY = "k"


def log_state(cp: SqliteCheckpointer) -> dict[str, Any]:
    """Every session's head and events (seq, parent, event), and what it stores
    under :data:`KEY`: all the log holds."""
    state: dict[str, Any] = {}
    engine = cp._engine
    for info in cp.list():
        events = [(e.seq, e.parent_seq, e.event) for e in cp.read(info.id)]
        key = engine.find_append_key(cp._tenant, info.id, KEY)
        state[info.id] = (cp.head(info.id), events) + ((key,) if key is not None else ())
    return state


def seed(cp: SqliteCheckpointer) -> None:
    cp.append("a", [dict(EVENT, n=i) for i in range(10)])
    cp.append("b", [dict(EVENT, n=i) for i in range(3)])


@dataclass
class LogCase:
    """One operation on a seeded log; ``run`` returns what a read returned (or None)."""

    name: str
    run: Callable[[SqliteCheckpointer], Any]


def read_all(cp: SqliteCheckpointer) -> Any:
    return [(e.seq, e.event) for e in cp.read("a")]


LOG_CASES = [
    LogCase("append-1", lambda cp: cp.append("a", [dict(EVENT, n="new")], expected_head=10)),
    LogCase("append-1-new", lambda cp: cp.append("c", [dict(EVENT, n="new")])),
    LogCase("append-100", lambda cp: cp.append("a", [dict(EVENT, n=i) for i in range(100)])),
    # The key's look-up, its row and the events are one transaction: a fault
    # anywhere leaves all of them or none (log_state holds the key's row).
    LogCase(
        "append-keyed-1",
        lambda cp: cp.append("a", [dict(EVENT, n="new")], expected_head=10, key=KEY),
    ),
    LogCase("append-keyed-1-new", lambda cp: cp.append("c", [dict(EVENT, n="new")], key=KEY)),
    LogCase(
        "append-keyed-100",
        lambda cp: cp.append("a", [dict(EVENT, n=i) for i in range(100)], key=KEY),
    ),
    LogCase("truncate", lambda cp: cp.truncate("a", 4)),
    LogCase("fork", lambda cp: cp.fork("a", 6, "f")),
    LogCase("delete", lambda cp: cp.delete("a")),
    LogCase("read", read_all),
    # read_json's page is stepped and built in C too (scan.pxi).
    LogCase("read-json", lambda cp: [(e.seq, e.json) for e in cp.read_json("a")]),
    LogCase("read-paged", lambda cp: [e.seq for e in cp.read("a", since_seq=2, limit=5)]),
    LogCase("head", lambda cp: cp.head("a")),
    LogCase("list", lambda cp: [info.id for info in cp.list()]),
]


def fresh_log(path: Path) -> SqliteCheckpointer:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    cp = SqliteCheckpointer(path, engine="c")
    seed(cp)
    log_state(cp)  # a reader is open: the sweeps count the operation, not opening one
    return cp


def check_recovered(cp: SqliteCheckpointer, path: Path, expected: dict[str, Any]) -> None:
    """After disarming: the handle shows ``expected`` and takes the next append; the
    file reopens sound, showing the same."""
    assert log_state(cp) == expected
    head = cp.head("b")
    assert cp.append("b", [dict(EVENT, n="next")], expected_head=head) == head + 1
    expected = dict(expected)
    expected["b"] = (head + 1, [*expected["b"][1], (head + 1, head, dict(EVENT, n="next"))])
    assert log_state(cp) == expected  # no reader kept a snapshot from before
    cp.close()
    with SqliteCheckpointer(path, engine="c", integrity_check_on_open=True) as again:
        assert again.check_integrity() == (True, "ok")
        assert log_state(again) == expected


def sweep(
    seam: FaultSeam,
    kind: FaultKind,
    mode: str,
    path: Path,
    fresh: Callable[[Path], _Opened],
    state: Callable[[_Opened], Any],
    run: Callable[[_Opened], object],
    recovered: Callable[[_Opened, Path, Any], None],
) -> None:
    """Fail ``run`` at each of its operations of ``kind`` in turn, on a
    ``fresh`` database each time: it either gives the reference result, the
    state after, or a typed error, the state before; and the database
    ``recovered`` either way."""
    # The reference run: the operation's operations of this kind, its result and after-state.
    opened = fresh(path)
    before = state(opened)
    seam.count(kind)
    result = run(opened)
    total, _ = seam.counts()
    seam.disarm()
    after = state(opened)
    opened.close()
    failures = 0
    for point in points(total):
        opened = fresh(path)
        seam.arm(kind, after=point, persistent=MODES[mode])
        try:
            got = run(opened)
        except TYPED as exc:
            assert seam.disarm(), "an error without a fault"
            assert str(exc), "an error that does not say what failed"
            failures += 1
            recovered(opened, path, before)
        except BaseException:
            seam.disarm()
            opened.close()
            raise
        else:
            seam.disarm()
            assert got == result, f"fault point {point}: a wrong result"
            recovered(opened, path, after)
    # The sweep reached the faults: an operation with operations of this kind failed.
    assert failures or total == 0


@pytest.mark.parametrize("case", LOG_CASES, ids=[case.name for case in LOG_CASES])
def test_log_operation_under_faults(
    tmp_path: Path, seam: FaultSeam, case: LogCase, kind: FaultKind, mode: str
) -> None:
    sweep(seam, kind, mode, tmp_path / "log.db", fresh_log, log_state, case.run, check_recovered)


def test_open_under_faults(tmp_path: Path, seam: FaultSeam) -> None:
    """Opening an existing file and creating a new one, under each kind and mode."""
    existing = tmp_path / "old.db"
    with SqliteCheckpointer(existing, engine="c") as cp:
        seed(cp)
        expected = log_state(cp)
    for kind in FAULT_KINDS:
        for persistent in MODES.values():
            for new in (False, True):
                path = tmp_path / "new.db" if new else existing
                seam.count(kind)
                SqliteCheckpointer(path, engine="c").close()
                total, _ = seam.counts()
                seam.disarm()
                for point in points(total):
                    if new:
                        for suffix in ("", "-wal", "-shm"):
                            Path(f"{path}{suffix}").unlink(missing_ok=True)
                    seam.arm(kind, after=point, persistent=persistent)
                    try:
                        cp = SqliteCheckpointer(path, engine="c")
                    except TYPED:
                        assert seam.disarm()
                        # A file it created is gone again; an old one untouched.
                        assert path.exists() != new
                        continue
                    seam.disarm()
                    with cp:
                        if not new:
                            assert log_state(cp) == expected
                        cp.append("b" if not new else "n", [EVENT])
                    with SqliteCheckpointer(path, engine="c") as cp:
                        assert cp.check_integrity() == (True, "ok")
                    if not new:  # undo the append: the next point sees the same file
                        with SqliteCheckpointer(path, engine="c") as cp:
                            cp.truncate("b", 3)


# -- group commit: several threads --------------------------------------------------

THREADS = 4
APPENDS = 6


def race(cp: SqliteCheckpointer) -> dict[str, list[int]]:
    """THREADS threads each append APPENDS single events to a session of its own,
    all at once; return the appends each had acknowledged (the others raised a
    typed error)."""
    start = threading.Barrier(THREADS)
    acked: dict[str, list[int]] = {f"t{t}": [] for t in range(THREADS)}
    unexpected: list[BaseException] = []

    def work(name: str) -> None:
        start.wait()
        for i in range(APPENDS):
            try:
                cp.append(name, [dict(EVENT, n=i)])
            except TYPED as exc:
                if not str(exc):
                    unexpected.append(exc)  # an error that does not say what failed
                continue
            except BaseException as exc:
                unexpected.append(exc)
                return
            acked[name].append(i)

    threads = [threading.Thread(target=work, args=(name,)) for name in acked]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an append hangs"
    assert not unexpected, unexpected
    return acked


def with_acked(before: dict[str, Any], acked: dict[str, list[int]]) -> dict[str, Any]:
    """The log state ``before`` and then exactly the acknowledged appends of a race."""
    expected = dict(before)
    for name, appends in acked.items():
        if appends:
            events = [(s, s - 1, dict(EVENT, n=i)) for s, i in enumerate(appends, 1)]
            expected[name] = (len(appends), events)
    return expected


def test_group_commit_under_faults(
    tmp_path: Path, seam: FaultSeam, kind: FaultKind, mode: str
) -> None:
    """Appends of several threads (written in shared transactions): each ends
    in its head or a typed error, and the log holds exactly the acknowledged
    ones, each whole, in order."""
    path = tmp_path / "group.db"
    cp = fresh_log(path)
    seam.count(kind)
    assert all(len(v) == APPENDS for v in race(cp).values())
    total, _ = seam.counts()
    seam.disarm()
    cp.close()
    failed = 0
    for point in points(total):
        cp = fresh_log(path)
        before = log_state(cp)
        seam.arm(kind, after=point, persistent=MODES[mode])
        try:
            acked = race(cp)
        finally:
            seam.disarm()
        failed += sum(APPENDS - len(appends) for appends in acked.values())
        check_recovered(cp, path, with_acked(before, acked))
    assert failed or total == 0


async def async_race(cp: AsyncSqliteCheckpointer) -> dict[str, list[int]]:
    """As :func:`race`, with THREADS coroutines on one event loop: the appends
    go to the engine's writer thread through the loop's channel."""
    acked: dict[str, list[int]] = {f"t{t}": [] for t in range(THREADS)}

    async def work(name: str) -> None:
        for i in range(APPENDS):
            try:
                await cp.append(name, [dict(EVENT, n=i)])
            except TYPED as exc:
                assert str(exc), "an error that does not say what failed"
                continue
            acked[name].append(i)

    await asyncio.wait_for(asyncio.gather(*(work(name) for name in acked)), timeout=60)
    return acked


def test_async_group_commit_under_faults(
    tmp_path: Path, seam: FaultSeam, kind: FaultKind, mode: str
) -> None:
    """Coroutines' appends, written by the writer thread in shared transactions
    and completed through the loop's channel: each ends in its head or a typed
    error (never a hang), and the log holds exactly the acknowledged ones."""
    path = tmp_path / "async.db"

    async def run(armed: int | None) -> tuple[dict[str, Any], dict[str, list[int]], int]:
        """The race on a fresh log: the state before, the acknowledged appends,
        and (unarmed) how many operations of ``kind`` it did."""
        fresh_log(path).close()
        with SqliteCheckpointer(path, engine="c") as cp:
            before = log_state(cp)
        async with AsyncSqliteCheckpointer(path, engine="c") as cp:
            if armed is None:
                seam.count(kind)
            else:
                seam.arm(kind, after=armed, persistent=MODES[mode])
            try:
                acked = await async_race(cp)
                total, _ = seam.counts()
            finally:
                seam.disarm()
        return before, acked, total

    _, acked, total = asyncio.run(run(None))
    assert all(len(v) == APPENDS for v in acked.values())
    failed = 0
    for point in points(total):
        before, acked, _ = asyncio.run(run(point))
        failed += sum(APPENDS - len(appends) for appends in acked.values())
        check_recovered(SqliteCheckpointer(path, engine="c"), path, with_acked(before, acked))
    assert failed or total == 0


# -- the stores -----------------------------------------------------------------------

T = "tenant"


def store_state(storage: SqliteStorage) -> Any:
    """What the four stores hold, without timestamps."""
    memory = [(r.key, r.value, r.revision) for r in storage.memory.list(T, "ns")]
    sessions = []
    for record in storage.sessions.list(T):
        load = storage.sessions.load(T, record.session_id)
        items = [(e.seq, e.event) for e in load.items]
        sessions.append((record.session_id, record.revision, record.head, record.metadata, items))
    checkpoints = [(c.run_id, c.status, c.state, c.revision) for c in storage.checkpoints.list(T)]
    artifacts = []
    for info in storage.artifacts.list(T):
        _, data = storage.artifacts.get(T, info.artifact_id)
        artifacts.append((info.artifact_id, info.sha256, info.revision, data))
    return memory, sessions, checkpoints, artifacts


def seed_stores(storage: SqliteStorage) -> None:
    storage.memory.put(T, "ns", "k", {"v": 1}, None)
    record = storage.sessions.create(T, "s")
    storage.sessions.append(
        T, "s", record.revision, [{"id": "i1", "type": "user", "content": "hi"}]
    )
    storage.checkpoints.save(T, "r", None, status="running", state={"step": 1})
    storage.artifacts.put(T, "art", b"x" * 5000, "application/octet-stream", None)


def memory_lookup(storage: SqliteStorage) -> Any:
    try:
        return storage.memory.get(T, "ns", "missing")
    except StorageNotFoundError:
        return None


STORE_CASES: dict[str, Callable[[SqliteStorage], Any]] = {
    "memory-put": lambda s: s.memory.put(T, "ns", "k", {"v": 2}, 0).revision,
    "memory-create": lambda s: s.memory.put(T, "ns", "k2", [1, 2], None).revision,
    "memory-delete": lambda s: s.memory.delete(T, "ns", "k", 0),
    "memory-get": lambda s: (s.memory.get(T, "ns", "k").value, memory_lookup(s)),
    "sessions-append": lambda s: (
        s.sessions.append(
            T, "s", 1, [{"id": f"n{i}", "type": "user", "content": "c"} for i in range(20)]
        ).head
    ),
    "sessions-create": lambda s: s.sessions.create(T, "s2", {"m": "x" * 2000}).revision,
    "sessions-delete": lambda s: s.sessions.delete(T, "s", 1),
    "checkpoints-save": lambda s: (
        s.checkpoints.save(T, "r", 0, status="completed", state={"step": 2}).revision
    ),
    "checkpoints-delete": lambda s: s.checkpoints.delete(T, "r", 0),
    "artifacts-put": lambda s: (
        s.artifacts.put(T, "art2", bytes(range(256)) * 400, "application/octet-stream", None).size
    ),
    "artifacts-delete": lambda s: s.artifacts.delete(T, "art", 0),
    "artifacts-get": lambda s: s.artifacts.get(T, "art")[1],
    "sessions-load": lambda s: [e.seq for e in s.sessions.load(T, "s").items],
    "stats": lambda s: s.checkpointer(T).stats()["events"],
}


def fresh_storage(path: Path) -> SqliteStorage:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    storage = SqliteStorage.open(path, engine="c")
    seed_stores(storage)
    store_state(storage)  # a reader is open (see fresh_log)
    return storage


def check_stores_recovered(storage: SqliteStorage, path: Path, expected: Any) -> None:
    assert store_state(storage) == expected
    storage.memory.put(T, "ns", "after", 1, None)
    # No reader kept a snapshot from before the write.
    assert storage.memory.get(T, "ns", "after").value == 1
    storage.sessions.create(T, "after")
    assert storage.sessions.load(T, "after").session.head == 0  # a snapshot read
    storage.close()
    with SqliteStorage.open(path, engine="c") as again:
        assert again.checkpointer(T).check_integrity() == (True, "ok")
        assert again.memory.get(T, "ns", "after").value == 1
        again.memory.delete(T, "ns", "after", 0)
        again.sessions.delete(T, "after", 0)
        assert store_state(again) == expected


@pytest.mark.parametrize("case", list(STORE_CASES))
def test_store_operation_under_faults(
    tmp_path: Path, seam: FaultSeam, case: str, kind: FaultKind, mode: str
) -> None:
    sweep(
        seam,
        kind,
        mode,
        tmp_path / "stores.db",
        fresh_storage,
        store_state,
        STORE_CASES[case],
        check_stores_recovered,
    )


# -- the seam itself -------------------------------------------------------------------


def test_the_seam_counts_and_fires_where_armed(tmp_path: Path, seam: FaultSeam) -> None:
    """``after`` operations pass and the next fails; once fires one fault,
    persistent every later one; disarmed, nothing fires."""
    with SqliteCheckpointer(tmp_path / "seam.db", engine="c") as cp:
        seed(cp)
        seam.count("full")
        cp.append("a", [EVENT])
        total, fired = seam.counts()
        assert total > 0 and fired == 0
        seam.arm("full", after=total)  # exactly enough: nothing fires
        cp.append("a", [EVENT])
        assert seam.disarm() == 0
        seam.arm("full", after=0)
        with pytest.raises(StorageUnavailableError, match="full"):
            cp.append("a", [EVENT])
        assert seam.disarm() == 1
        seam.arm("ioerr-write", after=0, persistent=True)
        for _ in range(3):
            with pytest.raises(StorageUnavailableError, match="I/O"):
                cp.append("a", [EVENT])
        assert seam.disarm() >= 3
        assert cp.head("a") == 12
        with pytest.raises(ValueError, match="fault kind"):
            seam.arm("disk", after=0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="after"):
            seam.arm("alloc", after=-1)
