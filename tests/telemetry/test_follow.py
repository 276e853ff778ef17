"""A follower's lag, in events behind its session's head and in seconds, on every
follower: sync and async (``follow`` and ``follow_json``), SQLite (both engines)
and PostgreSQL, where another object's append reaches the follower through
``LISTEN`` (its poll interval is an hour: nothing else wakes it in time)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from agentlog.aio import AsyncSqliteCheckpointer
from agentlog.log.base import BaseCheckpointer

from ..conftest import open_log, postgres_conninfo, postgres_schema, require_engine
from ..waiting import wait_until, wait_until_async
from .conftest import Telemetry

EVENT = {"type": "user", "content": "hello"}
BACKENDS = ("sqlite-c", "sqlite-python", "postgres")
SYSTEM = {"sqlite-c": "sqlite", "sqlite-python": "sqlite", "postgres": "postgresql"}
#: Long enough that only a commit signal or a NOTIFY wakes a waiting follower in time.
HOUR = 3600.0


def _poll(backend: str) -> float:
    """The follower's poll interval: on SQLite another object's commit is seen by
    polling; on PostgreSQL through LISTEN alone."""
    return HOUR if backend == "postgres" else 0.02


def _assert_lag(otel: Telemetry, system: str) -> None:
    """Three events there when the follower started (2, 1, 0 behind the head),
    then two appended in one batch by another object while it waited (1, 0)."""
    (events,) = otel.points("agentlog.follow.lag.events")
    assert events.attributes == {"db.system.name": system}
    assert events.count == 5
    assert events.sum == 2 + 1 + 0 + 1 + 0
    assert (events.min, events.max) == (0, 2)
    (seconds,) = otel.points("agentlog.follow.lag")
    assert seconds.attributes == {"db.system.name": system}
    assert seconds.count == 5
    assert seconds.min >= 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sync_followers_lag(
    backend: str, otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    log = open_log(backend, tmp_path, request)
    other = open_log(backend, tmp_path, request)
    seen: list[int] = []
    failed: list[BaseException] = []

    def follow(log: BaseCheckpointer = log) -> None:
        try:
            follower = log.follow("s1", poll_interval=_poll(backend))
            for event in follower:
                seen.append(event.seq)
                if len(seen) == 5:
                    break
            follower.close()
        except BaseException as exc:
            failed.append(exc)

    try:
        log.append("s1", [EVENT, EVENT, EVENT])
        thread = threading.Thread(target=follow)
        thread.start()
        try:
            assert wait_until(lambda: len(seen) == 3 or bool(failed))
            other.append("s1", [EVENT, EVENT])
        finally:
            thread.join(30)
        assert not thread.is_alive()
        assert failed == []
    finally:
        other.close()
        log.close()
    assert seen == [1, 2, 3, 4, 5]
    _assert_lag(otel, SYSTEM[backend])


def _async_log(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    if backend == "postgres":
        request.getfixturevalue("postgres_server")
        from agentlog.aio import AsyncPostgresCheckpointer

        return AsyncPostgresCheckpointer(postgres_conninfo(), schema=postgres_schema(tmp_path))
    engine = backend.removeprefix("sqlite-")
    require_engine(engine)
    return AsyncSqliteCheckpointer(tmp_path / "a.db", engine=engine)


@pytest.mark.parametrize("method", ["follow", "follow_json"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_followers_lag(
    backend: str, method: str, otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    log = _async_log(backend, tmp_path, request)
    other = open_log(backend, tmp_path, request)

    async def main() -> list[int]:
        seen: list[int] = []

        async def follow() -> None:
            follower = getattr(log, method)("s1", poll_interval=_poll(backend))
            async for event in follower:
                seen.append(event.seq)
                if len(seen) == 5:
                    break
            await follower.aclose()

        try:
            await log.append("s1", [EVENT, EVENT, EVENT])
            task = asyncio.ensure_future(follow())
            assert await wait_until_async(lambda: len(seen) == 3 or task.done())
            await asyncio.to_thread(other.append, "s1", [EVENT, EVENT])
            await asyncio.wait_for(task, 30)
        finally:
            await log.aclose()
        return seen

    try:
        assert asyncio.run(main()) == [1, 2, 3, 4, 5]
    finally:
        other.close()
    _assert_lag(otel, SYSTEM[backend])
