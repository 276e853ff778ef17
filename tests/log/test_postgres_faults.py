"""PostgreSQL under a misbehaving network: a fault proxy (tests/fault_proxy.py)
between the client and the server cuts, resets, delays or black-holes the
connection at every point of each write's exchange.

Each outcome must be success or a typed error; the state exactly before or
after; a keyed append exactly once (its lost commits resolved); an unkeyed
one whose commit was lost :class:`OutcomeUnknownError`, never a plain outage;
a black hole given up at the client-side deadline; and the pool must recover
and keep no connection it lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from agentlog import (
    OutcomeUnknownError,
    PostgresCheckpointer,
    PostgresStorage,
    StorageConflictError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from agentlog.aio import AsyncPostgresCheckpointer

from ..conftest import OnPostgres, postgres_conninfo
from ..fault_proxy import CLIENT, SERVER, FaultProxy
from ..waiting import wait_until

EVENTS = [{"type": "user", "content": "hello"}, {"type": "assistant", "content": "hi"}]
#: Messages an exchange may take in either direction before a sweep ends
#: (a write that never meets its fault is past the last point).
MAX_POINTS = 200


def _host_port(conninfo: str) -> tuple[str, int]:
    fields = dict(part.split("=", 1) for part in conninfo.split())
    return fields["host"], int(fields["port"])


def test_the_deadline_watchdog_ends_when_idle_and_a_call_starts_another() -> None:
    """No call wakes the watchdog (that was a thread switch per call), so it
    sleeps a timeout at a time; idle a whole timeout it ends (a closed store
    leaves no thread), and the next call starts another."""
    from agentlog.engine.postgres.deadline import Deadlines

    def watchdogs() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "agentlog-postgres-deadlines"}

    deadlines = Deadlines(0.2)
    before = watchdogs()
    with deadlines.watch(cast(Any, None)):  # the connection is used only at its deadline
        pass
    (watchdog,) = watchdogs() - before
    assert wait_until(lambda: not watchdog.is_alive())
    with deadlines.watch(cast(Any, None)):
        started = watchdogs() - before
    assert len(started) == 1 and watchdog not in started


def test_a_call_begun_while_the_watchdog_sleeps_idle_is_given_up_at_its_deadline() -> None:
    """Nothing wakes the idle watchdog when a call begins: it must wake within
    a timeout of its own accord and shut the silent call's socket down."""
    import socket

    import psycopg

    from agentlog.engine.postgres.deadline import Deadlines

    deadlines = Deadlines(0.3)
    with deadlines.watch(cast(Any, None)):
        pass  # the watchdog runs, and now sleeps with nothing to watch
    ours, peer = socket.socketpair()
    with ours, peer:
        ours.settimeout(60)  # far past the deadline: a hang fails, never passes
        given_up = pytest.raises(psycopg.OperationalError, match="client-side deadline")
        with given_up, deadlines.watch(cast(Any, ours)):
            # The peer never answers: b"" once the watchdog shuts the socket
            # down (a TimeoutError if it never does), then the lost connection.
            assert ours.recv(1) == b""
            raise psycopg.OperationalError("the connection was closed")


def test_a_watchdog_that_cannot_start_refuses_the_call_and_the_next_starts_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentlog.engine.postgres.deadline import Deadlines

    real = threading.Thread.start
    refused = {"n": 0}

    def no_thread(self: threading.Thread) -> None:
        refused["n"] += 1
        raise RuntimeError("can't start new thread")

    deadlines = Deadlines(0.2)
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    refusal = pytest.raises(RuntimeError, match="can't start new thread")
    with refusal, deadlines.watch(cast(Any, None)):
        pytest.fail("the call ran without a deadline")
    monkeypatch.setattr(threading.Thread, "start", real)
    with deadlines.watch(cast(Any, None)):
        running = [t for t in threading.enumerate() if t.name == "agentlog-postgres-deadlines"]
    assert refused["n"] == 1 and any(t.is_alive() for t in running)
    with pytest.raises(ValueError, match="at most"):
        Deadlines(float("inf"))


@pytest.fixture
def proxy(postgres_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(*_host_port(postgres_server)) as running:
        yield running


@pytest.fixture
def schema(request: pytest.FixtureRequest) -> str:
    return "f_" + str(abs(hash(request.node.nodeid)) % 10**12)


@pytest.fixture
def direct(schema: str) -> Iterator[PostgresCheckpointer]:
    """The store, reached without the proxy: the truth about what is stored."""
    with PostgresCheckpointer(postgres_conninfo(), schema=schema, pool_max_size=2) as log:
        yield log


def through(proxy: FaultProxy, schema: str, **options: Any) -> PostgresCheckpointer:
    """A checkpointer on ``schema`` whose every connection goes through ``proxy``."""
    options.setdefault("client_timeout", 5.0)
    options.setdefault("pool_max_size", 2)
    return PostgresCheckpointer(proxy.conninfo(postgres_conninfo()), schema=schema, **options)


def sweep(proxy: FaultProxy, mode: str, write: Callable[[int], None]) -> int:
    """``write(point)`` with the fault armed at each point of each direction in
    turn, until a write never meets it; the number of faults that fired."""
    fired = 0
    for direction in (CLIENT, SERVER):
        for point in range(MAX_POINTS):
            proxy.arm(direction, point, mode)
            write(point)
            proxy.disarm()
            if not proxy.fired:
                break
            fired += 1
        else:
            raise AssertionError(f"a write took more than {MAX_POINTS} messages")
    return fired


def settled(direct: PostgresCheckpointer) -> bool:
    """No backend of the test database but ours is in a transaction (a lost
    connection's transaction has ended, committed or rolled back)."""
    with direct.database.connection("looking") as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction',"
            " 'idle in transaction (aborted)') AND backend_type = 'client backend'"
            " AND query NOT ILIKE '%LISTEN%'"
        ).fetchone()
    return row is not None and row[0] == 0


def sweep_unkeyed(
    proxy: FaultProxy, mode: str, direct: PostgresCheckpointer, append: Callable[[], int]
) -> None:
    """Sweep ``append()`` (an unkeyed append of ``EVENTS`` to ``"s"``): each
    whole or absent, an unknown outcome said so, and the pool recovered."""
    outcomes: set[str] = set()

    def write(point: int) -> None:
        before = direct.head("s")
        try:
            head = append()
        except OutcomeUnknownError:
            assert wait_until(lambda: settled(direct))
            assert direct.head("s") in (before, before + len(EVENTS))
            outcomes.add("unknown-" + ("in" if direct.head("s") > before else "out"))
            return
        assert head == before + len(EVENTS) == direct.head("s")
        outcomes.add("ok")

    sweep(proxy, mode, write)
    # Cut before the statement: never written; after its commit: written, unknown.
    assert {"unknown-out", "unknown-in"} <= outcomes
    assert append() == direct.head("s")  # the pool recovered
    heads = [e.seq for e in direct.read("s")]
    assert heads == list(range(1, len(heads) + 1))


class TestAppendUnderCuts(OnPostgres):
    @pytest.mark.parametrize("mode", ["cut", "reset"])
    def test_a_keyed_append_is_stored_exactly_once_at_every_cut(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer, mode: str
    ) -> None:
        with through(proxy, schema) as log:

            def write(point: int) -> None:
                before = direct.head("s")
                key = f"k-{mode}-{proxy_count[0]}"
                proxy_count[0] += 1
                head = log.append("s", EVENTS, key=key)  # resolved: never an error
                assert head == before + len(EVENTS) == direct.head("s")
                assert log.append("s", EVENTS, key=key) == head  # and a retry is a no-op

            proxy_count = [0]
            fired = sweep(proxy, mode, write)
            assert fired >= 6
            stored = [e.event["content"] for e in direct.read("s")]
            assert stored == ["hello", "hi"] * proxy_count[0]
            assert wait_until(lambda: proxy.connections() <= 2)

    @pytest.mark.parametrize("mode", ["cut", "reset"])
    def test_an_unkeyed_append_is_whole_or_absent_and_says_so(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer, mode: str
    ) -> None:
        with through(proxy, schema) as log:
            sweep_unkeyed(proxy, mode, direct, lambda: log.append("s", EVENTS))


class TestOtherWritesUnderCuts(OnPostgres):
    """Truncate, fork, delete, set_metadata and the stores' compare-and-set
    writes: success or a typed error, and the state exactly before or after."""

    @pytest.mark.parametrize("kind", ["truncate", "fork", "delete", "set_metadata"])
    def test_log_writes(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer, kind: str
    ) -> None:
        direct.append("src", EVENTS * 2)
        with through(proxy, schema) as log:
            counter = [0]

            def write(point: int) -> None:
                n = counter[0]
                counter[0] += 1
                direct.append(f"t{n}", EVENTS * 2)
                acts: dict[str, tuple[Callable[[], object], Callable[[], object], set[Any]]] = {
                    "truncate": (
                        lambda: log.truncate(f"t{n}", 1),
                        lambda: direct.head(f"t{n}"),
                        {4, 1},
                    ),
                    "fork": (
                        lambda: log.fork("src", 3, f"f{n}"),
                        lambda: direct.head(f"f{n}"),
                        {0, 3},
                    ),
                    "delete": (lambda: log.delete(f"t{n}"), lambda: direct.head(f"t{n}"), {4, 0}),
                    "set_metadata": (
                        lambda: log.set_metadata(f"t{n}", {"n": n}, 1),
                        lambda: direct.metadata(f"t{n}").revision,
                        {1, 2},
                    ),
                }
                act, look, allowed = acts[kind]
                try:
                    act()
                except StorageUnavailableError:
                    assert wait_until(lambda: settled(direct))
                assert look() in allowed, (point, look(), allowed)

            assert sweep(proxy, "cut", write) >= 4
            assert wait_until(lambda: proxy.connections() <= 2)  # no lost connection kept

    def test_store_compare_and_set_writes(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        with PostgresStorage.open(
            proxy.conninfo(postgres_conninfo()), schema=schema, client_timeout=5.0
        ) as storage:
            counter = [0]

            def write(point: int) -> None:
                n = counter[0]
                counter[0] += 1
                with contextlib.suppress(StorageUnavailableError, StorageConflictError):
                    storage.memory.put("t", "ns", f"k{n}", {"n": n}, None)
                with contextlib.suppress(StorageUnavailableError, StorageConflictError):
                    storage.sessions.create("t", f"s{n}", {"n": n})
                assert wait_until(lambda: settled(direct))
                for read in (
                    lambda: storage.memory.get("t", "ns", f"k{n}").value,
                    lambda: storage.sessions.get("t", f"s{n}").metadata,
                ):
                    with contextlib.suppress(StorageNotFoundError):  # not written: before
                        assert read() == {"n": n}

            assert sweep(proxy, "cut", write) >= 4

    @pytest.mark.parametrize("kind", ["checkpoints", "artifacts"])
    def test_checkpoint_and_artifact_compare_and_set_writes(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer, kind: str
    ) -> None:
        """A create and a replace at its revision, cut at every point: each
        returns or raises ``StorageUnavailableError``, and what is stored is
        exactly the state before the write or after it (after, if it returned)."""
        with (
            PostgresStorage.open(postgres_conninfo(), schema=schema, pool_max_size=2) as truth,
            PostgresStorage.open(
                proxy.conninfo(postgres_conninfo()),
                schema=schema,
                client_timeout=5.0,
                pool_max_size=2,
            ) as storage,
        ):
            writes, looks = _compare_and_set(kind, storage, truth)
            counter = itertools.count()

            def write(point: int) -> None:
                n = next(counter)
                writes["seed"](n)  # directly: revision 0, the state before
                for step in ("create", "replace"):
                    try:
                        writes[step](n)
                    except StorageUnavailableError:
                        assert wait_until(lambda: settled(direct))
                        assert looks[step](n) in ("before", "after"), (point, step)
                    else:
                        assert looks[step](n) == "after", (point, step)

            assert sweep(proxy, "cut", write) >= 6
            assert wait_until(lambda: proxy.connections() <= 2)  # no lost connection kept


def _compare_and_set(
    kind: str, storage: PostgresStorage, truth: PostgresStorage
) -> tuple[dict[str, Callable[[int], object]], dict[str, Callable[[int], str]]]:
    """For a store of ``kind``: the writes (``seed`` on ``truth``; ``create``
    and ``replace`` through ``storage``) and, per write, a look at the truth
    that says ``"before"`` or ``"after"`` (anything else is neither)."""
    if kind == "checkpoints":

        def save(store: PostgresStorage, run: str, revision: int | None, state: int) -> object:
            return store.checkpoints.save("t", run, revision, status="running", state=state)

        def checkpoint(run: str, before: tuple[int, int] | None, after: tuple[int, int]) -> str:
            try:
                found = truth.checkpoints.load("t", run)
            except StorageNotFoundError:
                return "before" if before is None else "missing"
            stored = (found.revision, found.state)
            return {before: "before", after: "after"}.get(stored, repr(stored))

        return (
            {
                "seed": lambda n: save(truth, f"r{n}", None, 0),
                "create": lambda n: save(storage, f"c{n}", None, 1),
                "replace": lambda n: save(storage, f"r{n}", 0, 1),
            },
            {
                "create": lambda n: checkpoint(f"c{n}", None, (0, 1)),
                "replace": lambda n: checkpoint(f"r{n}", (0, 0), (1, 1)),
            },
        )

    def put(store: PostgresStorage, name: str, revision: int | None, data: bytes) -> object:
        return store.artifacts.put("t", name, data, "text/plain", revision, {"size": len(data)})

    def artifact(name: str, before: tuple[int, bytes] | None, after: tuple[int, bytes]) -> str:
        try:
            info, data = truth.artifacts.get("t", name)
        except StorageNotFoundError:
            return "before" if before is None else "missing"
        stored = (info.revision, data)
        return {before: "before", after: "after"}.get(stored, repr(stored))

    old, new = b"old " * 64, b"new " * 256
    return (
        {
            "seed": lambda n: put(truth, f"a{n}", None, old),
            "create": lambda n: put(storage, f"c{n}", None, new),
            "replace": lambda n: put(storage, f"a{n}", 0, new),
        },
        {
            "create": lambda n: artifact(f"c{n}", None, (0, new)),
            "replace": lambda n: artifact(f"a{n}", (0, old), (1, new)),
        },
    )


class TestBlackHolesAndDelays(OnPostgres):
    def test_a_black_holed_append_is_given_up_at_the_deadline(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        # One connection, set up before the fault: the hole is in the append's exchange.
        with through(proxy, schema, client_timeout=1.0, pool_max_size=1) as log:
            for direction in (CLIENT, SERVER):
                # The pool's one connection, set up and idle, alone (the
                # opening one, or the one the hole held, has ended).
                log.append("s", EVENTS)
                assert wait_until(lambda: proxy.connections() == 1)
                proxy.arm(direction, 2, "blackhole")
                started = time.monotonic()
                with pytest.raises(OutcomeUnknownError, match="client-side deadline"):
                    log.append("s", EVENTS)
                assert time.monotonic() - started < 30  # bounded, not a hang
                proxy.heal()
                assert wait_until(lambda: settled(direct))
            # A keyed append through a black hole: given up, then resolved on
            # the next connection (the hole lets new connections through).
            log.append("s", EVENTS)
            assert wait_until(lambda: proxy.connections() == 1)
            proxy.arm(SERVER, 2, "blackhole")
            before = direct.head("s")
            assert log.append("s", EVENTS, key="through-the-hole") == before + 2
            proxy.heal()
            assert direct.head("s") == before + 2

    def test_a_delayed_connection_still_answers(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        with through(proxy, schema) as log:
            log.append("s", EVENTS)
            proxy.arm(SERVER, 1, "delay", delay=0.05)
            assert log.append("s", EVENTS, key="late") == 4
            assert direct.head("s") == 4


@contextlib.contextmanager
def async_through(
    proxy: FaultProxy, schema: str, **options: Any
) -> Iterator[tuple[asyncio.AbstractEventLoop, AsyncPostgresCheckpointer]]:
    """An async checkpointer on ``schema`` through ``proxy``, and the one loop
    it runs on (each sweep's write is one ``run_until_complete``)."""
    options.setdefault("client_timeout", 5.0)
    options.setdefault("pool_max_size", 2)
    loop = asyncio.new_event_loop()
    try:
        log = AsyncPostgresCheckpointer(
            proxy.conninfo(postgres_conninfo()), schema=schema, **options
        )
        try:
            yield loop, log
        finally:
            loop.run_until_complete(log.aclose())
    finally:
        loop.close()


class TestAsyncUnderFaults(OnPostgres):
    """The async driver: the same outcomes as the synchronous one's."""

    def test_a_keyed_append_is_stored_exactly_once_at_every_cut(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        with async_through(proxy, schema) as (loop, log):
            keys = itertools.count()

            async def append_twice() -> None:
                before = direct.head("s")
                key = f"k-{next(keys)}"
                head = await log.append("s", EVENTS, key=key)  # resolved: never an error
                assert head == before + len(EVENTS) == direct.head("s")
                assert await log.append("s", EVENTS, key=key) == head  # a retry: a no-op

            fired = sweep(proxy, "cut", lambda point: loop.run_until_complete(append_twice()))
            assert fired >= 6
            stored = [e.event["content"] for e in direct.read("s")]
            assert stored == ["hello", "hi"] * next(keys)
            assert wait_until(lambda: proxy.connections() <= 2)

    def test_an_unkeyed_append_is_whole_or_absent_and_says_so(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        with async_through(proxy, schema) as (loop, log):

            def append() -> int:
                return loop.run_until_complete(log.append("s", EVENTS))

            sweep_unkeyed(proxy, "cut", direct, append)

    def test_a_black_holed_append_is_given_up_at_the_deadline(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        options = {"client_timeout": 1.0, "pool_min_size": 1, "pool_max_size": 1}
        with async_through(proxy, schema, **options) as (loop, log):
            for direction in (CLIENT, SERVER):
                loop.run_until_complete(log.append("s", EVENTS))
                assert wait_until(lambda: proxy.connections() == 1)
                proxy.arm(direction, 2, "blackhole")
                with pytest.raises(OutcomeUnknownError, match="client-side deadline"):
                    loop.run_until_complete(log.append("s", EVENTS))
                proxy.heal()
                assert wait_until(lambda: settled(direct))
            loop.run_until_complete(log.append("s", EVENTS))
            assert wait_until(lambda: proxy.connections() == 1)
            proxy.arm(SERVER, 2, "blackhole")
            before = direct.head("s")
            keyed = log.append("s", EVENTS, key="through-the-hole")
            assert loop.run_until_complete(keyed) == before + 2
            proxy.heal()
            assert direct.head("s") == before + 2
            # The pool replaced what the deadline gave up: reads answer.
            assert loop.run_until_complete(log.head("s")) == before + 2


class TestAdaptersUnderCuts(OnPostgres):
    """An adapter's write cut at every point, then retried: stored exactly once."""

    def test_an_openai_agents_add_is_stored_once_at_every_cut(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        pytest.importorskip("agents")
        from agentlog.integrations.openai_agents import AgentlogSession

        with async_through(proxy, schema) as (loop, log):
            session = AgentlogSession("chat", log)
            added: list[str] = []

            async def add() -> None:
                content = f"m{len(added)}"
                # Its lost commits resolved by the add's key: never an error.
                await session.add_items([{"role": "user", "content": content}])
                added.append(content)
                assert direct.head("chat") == len(added)

            assert sweep(proxy, "cut", lambda point: loop.run_until_complete(add())) >= 6
            items = loop.run_until_complete(session.get_items())
            assert [item["content"] for item in items] == added

    def test_a_langgraph_put_is_stored_once_at_every_cut(
        self, proxy: FaultProxy, schema: str, direct: PostgresCheckpointer
    ) -> None:
        pytest.importorskip("langgraph")
        from langgraph.checkpoint.base import empty_checkpoint

        from agentlog.integrations.langgraph import AgentlogSaver

        with through(proxy, schema) as log:
            saver = AgentlogSaver(log)
            parent: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            put: list[str] = []

            def put_and_retry(point: int) -> None:
                nonlocal parent
                n = len(put)
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"n": n}
                checkpoint["channel_versions"] = {"n": n + 1}
                args = (parent, checkpoint, {"step": n}, {"n": n + 1})
                stored = saver.put(*args)  # its lost commits resolved by the id's key
                put.append(checkpoint["id"])
                [(session, head)] = [(info.id, info.head) for info in direct.list()]
                # The host did not hear (say) and puts it again: the id's key
                # is in the log, so the repeat writes nothing.
                assert saver.put(*args) == stored
                assert direct.head(session) == head  # nothing more stored
                parent = stored

            assert sweep(proxy, "cut", put_and_retry) >= 6
            [info] = direct.list()
            assert info.head == len(put) + 1  # the thread's header, then one event each
            listed = [t.checkpoint["id"] for t in saver.list(None)]
            assert listed == put[::-1]  # each once, newest first
            fresh = AgentlogSaver(direct)  # what the store holds, read anew
            assert [t.checkpoint["id"] for t in fresh.list(None)] == put[::-1]
