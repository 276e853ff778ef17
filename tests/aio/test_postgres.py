"""The native async PostgreSQL checkpointer: the loop runs while a call waits
on the server, a backend killed mid-append is a typed error with the batch
absent, and the pool goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentlog import EventsPrunedError, InvalidEventError, StorageUnavailableError

from ..conftest import postgres_schema
from ..waiting import wait_until_async

EVENT = {"type": "user", "content": "hello"}


@pytest.fixture
def admin(postgres_server: str) -> Any:
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        yield conn


async def _blocked_backend(conninfo: str, holder: int) -> int:
    """The pid of the backend that waits for a lock ``holder`` holds."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as look:
        for _ in range(1000):
            cur = await look.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder,),
            )
            row = await cur.fetchone()
            if row is not None:
                return int(row[0])
            await asyncio.sleep(0.01)
    raise AssertionError("no backend waited for the lock")


def _hold_the_row_of_s(admin: Any, schema: str) -> None:
    """Another connection holds session ``s``'s row: an append to it waits in the server."""
    admin.execute("BEGIN")
    admin.execute(f"SELECT 1 FROM {schema}.sessions WHERE name = 's' FOR UPDATE")


def test_the_loop_runs_while_an_append_waits_and_a_killed_backend_is_typed(
    postgres_server: str, tmp_path: Path, admin: Any
) -> None:
    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncPostgresCheckpointer(postgres_server, schema=schema) as log:
            await log.append("s", [EVENT])
            _hold_the_row_of_s(admin, schema)  # the append waits in the server
            append = asyncio.create_task(log.append("s", [EVENT] * 5))
            ticks = 0
            for _ in range(20):  # the loop is free meanwhile
                await asyncio.sleep(0.005)
                ticks += 1
            assert ticks == 20 and not append.done()
            assert await log.head("other") == 0  # and other calls go through
            victim = await _blocked_backend(postgres_server, admin.info.backend_pid)
            admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
            admin.execute("ROLLBACK")
            with pytest.raises(StorageUnavailableError):
                await append
            assert await log.head("s") == 1  # absent, as a whole
            assert await log.append("s", [EVENT], expected_head=1) == 2  # the pool goes on
            assert [e.seq async for e in log.read("s")] == [1, 2]

    asyncio.run(main())


def test_the_synchronous_backend_keeps_the_callers_timeouts(
    postgres_server: str, tmp_path: Path, admin: Any
) -> None:
    """``backend`` used to open with the default timeouts: a 200 ms statement
    timeout asked for became 30 s for a thread's calls."""
    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncPostgresCheckpointer(
            postgres_server, schema=schema, statement_timeout_ms=200
        ) as log:
            await log.append("s", [EVENT])
            _hold_the_row_of_s(admin, schema)
            try:
                blocked = asyncio.to_thread(log.backend.append, "s", [EVENT, EVENT])
                with pytest.raises(StorageUnavailableError, match=r"statement timeout|cancel"):
                    await asyncio.wait_for(blocked, timeout=15)  # far below the default 30 s
            finally:
                admin.execute("ROLLBACK")
            assert await log.head("s") == 1

    asyncio.run(main())


def test_a_group_interrupted_mid_write_leaves_no_caller_waiting(
    postgres_server: str, tmp_path: Path, admin: Any
) -> None:
    """The task writing a group is cancelled while the server holds its
    statement (as at a loop's shutdown): each caller hears that the outcome
    is unknown, none waits for ever, and the checkpointer goes on."""
    from agentlog import OutcomeUnknownError
    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncPostgresCheckpointer(postgres_server, schema=schema) as log:
            await log.append("s", [EVENT])
            _hold_the_row_of_s(admin, schema)
            calls = [asyncio.ensure_future(log.append("s", [EVENT])) for _ in range(3)]
            await _blocked_backend(postgres_server, admin.info.backend_pid)
            (group,) = log._groups  # the one group under way, as the loop's shutdown sees it
            group.cancel()
            outcomes = await asyncio.wait_for(
                asyncio.gather(*calls, return_exceptions=True), timeout=30
            )
            admin.execute("ROLLBACK")
            assert all(isinstance(o, OutcomeUnknownError) for o in outcomes), outcomes
            head = await log.head("s")
            assert await log.append("s", [EVENT], expected_head=head) == head + 1

    asyncio.run(main())


def _swallow_a_cancellation(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """psycopg 3.2.2's wait for notifications can catch a CancelledError and
    go on waiting (found hanging a test at the oldest end of the range): each
    wait does so once here, and notes it in the list returned."""
    import psycopg

    real = psycopg.AsyncConnection.notifies
    swallowed: list[bool] = []

    async def swallowing(self: Any, **kwargs: Any) -> Any:
        try:
            async for note in real(self, **kwargs):
                yield note
        except asyncio.CancelledError:
            swallowed.append(True)  # caught, as that wait does, and waited on
            async for note in real(self, **kwargs):
                yield note

    monkeypatch.setattr(psycopg.AsyncConnection, "notifies", swallowing)
    return swallowed


async def _a_listening_follower(log: Any) -> Any:
    """A follower of session ``s`` past its one event, with the listener
    connected and waiting for notifications."""
    await log.append("s", [EVENT])
    follower = log.follow("s", 0)
    assert (await follower.__anext__()).seq == 1
    assert await wait_until_async(lambda: log._listening)
    return follower


def test_a_follower_stops_where_psycopg_swallows_the_cancellation(
    postgres_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last follower's stop ends the listening task all the same."""
    from agentlog.aio import AsyncPostgresCheckpointer

    swallowed = _swallow_a_cancellation(monkeypatch)
    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncPostgresCheckpointer(postgres_server, schema=schema) as log:
            follower = await _a_listening_follower(log)
            # Waited for, not wait_for(): its timeout's second cancellation
            # would end the swallowing wait and hide the hang.
            closing = asyncio.ensure_future(follower.aclose())
            done, _ = await asyncio.wait({closing}, timeout=30)
            assert closing in done, "the follower's stop waits on the listener for ever"
            assert swallowed == [True]
            listening = [t for t in asyncio.all_tasks() if "_listen" in repr(t.get_coro())]
            assert listening == []  # no listening task left

    asyncio.run(main())


def test_a_listener_still_ending_leaves_the_next_one_listening(
    postgres_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower starts while the last one's listener, its cancellation
    swallowed, still waits: that old listener's end must not mark the new
    one's connection lost (which left every follower polling the head).
    About 10 s: the old listener is made to linger 5 s, so that the new one
    surely starts before it ends, even on a loaded machine."""
    from agentlog.aio import AsyncPostgresCheckpointer
    from agentlog.engine.postgres import listener

    monkeypatch.setattr(listener, "_STOP_LOOK", 5.0)  # the old one lingers well past the start
    swallowed = _swallow_a_cancellation(monkeypatch)
    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncPostgresCheckpointer(postgres_server, schema=schema) as log:
            first = await _a_listening_follower(log)
            old = log._listener
            assert old is not None
            closing = asyncio.ensure_future(first.aclose())
            assert await wait_until_async(lambda: swallowed == [True])
            second = log.follow("s", 1)
            waiting = asyncio.ensure_future(second.__anext__())

            def new_one_listening() -> bool:
                return log._listener not in (None, old) and log._listening

            assert await wait_until_async(new_one_listening)
            assert not old.done()  # the old one still waits, its stop swallowed
            await asyncio.wait({closing}, timeout=30)
            assert closing.done() and old.done()
            assert log._listening  # still: the old one's end was its own
            await log.append("s", [EVENT])
            assert (await asyncio.wait_for(waiting, timeout=30)).seq == 2
            await second.aclose()

    asyncio.run(main())


# Each test here opens its own checkpointer in its own coroutine (a pool, a
# killed backend...), alike in shape to the other async PostgreSQL tests.
def test_an_async_pool_passed_in_is_used_and_left_open(
    postgres_server: str, tmp_path: Path
) -> None:
    from psycopg_pool import AsyncConnectionPool

    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)

    async def main() -> None:
        async with AsyncConnectionPool(
            postgres_server, kwargs={"autocommit": True}, min_size=1, open=False
        ) as pool:
            async with AsyncPostgresCheckpointer(pool, schema=schema) as log:
                assert await log.append("s", [EVENT]) == 1
            assert not pool.closed
            async with AsyncPostgresCheckpointer(pool, schema=schema) as log:
                assert await log.head("s") == 1

    asyncio.run(main())


def test_a_batch_larger_than_one_statement_takes_is_refused(
    postgres_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlog.aio import AsyncPostgresCheckpointer
    from agentlog.engine import postgres as engine_postgres

    monkeypatch.setattr(engine_postgres, "MAX_BATCH_BYTES", 200)
    large = [{"type": "user", "content": "x" * 50} for _ in range(3)]  # ~80 bytes each

    async def main() -> None:
        schema = postgres_schema(tmp_path)
        async with AsyncPostgresCheckpointer(postgres_server, schema=schema) as log:
            with pytest.raises(InvalidEventError, match="event 2: with it the batch is over"):
                await log.append("s", large)
            assert await log.append("s", large[:2]) == 2
            assert await log.head("s") == 2

    asyncio.run(main())


def test_a_pruned_session_refuses_reads_and_going_back_before_its_retained_start(
    postgres_server: str, tmp_path: Path
) -> None:
    from agentlog import PostgresStorage
    from agentlog.aio import AsyncPostgresCheckpointer

    schema = postgres_schema(tmp_path)
    with PostgresStorage.open(postgres_server, schema=schema) as storage:
        ss = storage.sessions
        ss.create("default", "s")
        items = [dict(EVENT, id=f"i{n}") for n in range(1, 11)]
        ss.compact("default", "s", ss.append("default", "s", 0, items).revision, 6, {})
        assert ss.prune("default", "s", keep=2) == 4  # 1..4 go

    async def main() -> None:
        async with AsyncPostgresCheckpointer(postgres_server, schema=schema) as log:
            for since in (0, 3):
                with pytest.raises(EventsPrunedError) as info:
                    [e async for e in log.read("s", since)]
                assert (info.value.seq, info.value.first_retained) == (since, 5)
            assert [e.seq async for e in log.read("s", 4)] == [5, 6, 7, 8, 9, 10]
            follower = log.follow("s", 2)
            with pytest.raises(EventsPrunedError):
                await follower.__anext__()
            follower = log.follow("s", 9)
            assert (await follower.__anext__()).seq == 10
            await follower.aclose()
            for to in (3, 5):  # back no further than the snapshot at 6
                with pytest.raises(EventsPrunedError):
                    await log.truncate("s", to)
                with pytest.raises(EventsPrunedError):
                    await log.fork("s", to, "copy")
            assert await log.head("copy") == 0
            assert await log.fork("s", 8, "copy") == 8
            assert [e.seq async for e in log.read("copy", 4)] == [5, 6, 7, 8]
            assert await log.truncate("s", 6) == 6
            assert [e.seq async for e in log.read("s", 4)] == [5, 6]

    asyncio.run(main())
