"""Spans and metrics of a scripted workload, on SQLite (both engines) and PostgreSQL,
sync and async, read back from the OpenTelemetry SDK's in-memory exporters."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from agentlog import CheckpointConflictError, SqliteCheckpointer, telemetry
from agentlog.aio import AsyncSqliteCheckpointer
from agentlog.events import encode_events
from agentlog.log import base, follow
from agentlog.log.base import BaseCheckpointer

from ..conftest import open_log, require_engine
from .conftest import Telemetry, make_telemetry

EVENT = {"type": "user", "content": "hello"}
BACKENDS = ("sqlite-c", "sqlite-python", "postgres")
SYSTEM = {"sqlite-c": "sqlite", "sqlite-python": "sqlite", "postgres": "postgresql"}


def _workload(log: BaseCheckpointer) -> None:
    """Three appends of two events, a conflict, a keyed append and its repeat, a read."""
    for _ in range(3):
        log.append("s1", [EVENT, EVENT])
    with pytest.raises(CheckpointConflictError):
        log.append("s1", [EVENT], expected_head=0)
    log.append("s1", [EVENT], key="k")
    log.append("s1", [EVENT], key="k")
    assert len(list(log.read("s1"))) == 7


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_workloads_spans_and_metrics(
    backend: str, otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    log = open_log(backend, tmp_path, request)
    try:
        _workload(log)
    finally:
        log.close()
    system = SYSTEM[backend]
    appends = otel.spans("append")
    assert [span.attributes["agentlog.outcome"] for span in appends] == [
        "ok",
        "ok",
        "ok",
        "conflict",
        "ok",
        "repeat",
    ]
    for span in appends:
        assert span.kind is trace.SpanKind.CLIENT
        assert span.attributes["db.system.name"] == system
        assert span.attributes["db.operation.name"] == "append"
        assert span.attributes["agentlog.session.id"] == "s1"
        assert span.attributes["agentlog.tenant"] == "default"
    conflict = appends[3]
    assert conflict.attributes["error.type"] == "CheckpointConflictError"
    assert conflict.status.status_code is trace.StatusCode.ERROR
    assert appends[0].status.status_code is trace.StatusCode.UNSET
    (read,) = otel.spans("read")
    assert read.attributes["agentlog.events"] == 7

    size = sum(len(data) for _, data in encode_events([EVENT]))
    assert otel.total("agentlog.events.appended", **{"db.system.name": system}) == 7
    assert otel.total("agentlog.events.appended.size") == 7 * size
    assert otel.total("agentlog.events.read") == 7
    assert otel.total("agentlog.conflicts", **{"db.operation.name": "append"}) == 1
    duration = "db.client.operation.duration"
    assert otel.total(duration, **{"agentlog.outcome": "ok", "db.operation.name": "append"}) == 4
    assert otel.total(duration, **{"agentlog.outcome": "repeat"}) == 1
    assert otel.total(duration, **{"error.type": "CheckpointConflictError"}) == 1
    assert otel.total(duration, **{"db.operation.name": "read"}) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_truncate_delete_are_spans(
    backend: str, otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    log = open_log(backend, tmp_path, request)
    try:
        log.append("s1", [EVENT, EVENT, EVENT])
        log.fork("s1", 2, "s2")
        log.truncate("s1", 1)
        log.delete("s2")
    finally:
        log.close()
    names = [span.name for span in otel.spans()]
    assert names == ["append", "fork", "truncate", "delete"]
    assert all(span.attributes["agentlog.outcome"] == "ok" for span in otel.spans())


def test_ids_are_left_out_unless_asked(tmp_path: Path) -> None:
    found = make_telemetry()
    try:
        with SqliteCheckpointer(tmp_path / "a.db") as log:
            log.append("personal", [EVENT])
    finally:
        telemetry.uninstrument()
    (span,) = found.spans("append")
    assert "agentlog.session.id" not in span.attributes
    assert "agentlog.tenant" not in span.attributes


def test_off_means_agentlogs_own_methods(tmp_path: Path) -> None:
    """Uninstrumented, the operations are the classes' own functions again, and
    nothing is recorded."""
    own = BaseCheckpointer.__dict__["append"]
    found = make_telemetry()
    assert BaseCheckpointer.__dict__["append"] is not own
    assert telemetry.instrumented()
    telemetry.uninstrument()
    assert not telemetry.instrumented()
    assert BaseCheckpointer.__dict__["append"] is own
    assert base.anchored_page is follow.anchored_page  # a follower's looks are agentlog's own
    with SqliteCheckpointer(tmp_path / "a.db") as log:
        log.append("s1", [EVENT])
        assert len(list(log.read("s1"))) == 1
    assert found.spans() == []
    assert found.points("agentlog.events.appended") == []


def _async_workload(path: Path, engine: str, tracer: trace.Tracer) -> None:
    async def main() -> None:
        log = AsyncSqliteCheckpointer(path, engine=engine, synchronous="full")
        try:
            with tracer.start_as_current_span("turn"):
                await asyncio.gather(*(log.append(f"s{i}", [EVENT]) for i in range(4)))
                await log.truncate("s0", 0)
                assert [e.seq async for e in log.read("s1")] == [1]
        finally:
            await log.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("engine", ["c", "python"])
def test_an_awaited_append_is_a_child_of_its_caller(
    engine: str, otel: Telemetry, tmp_path: Path
) -> None:
    require_engine(engine)
    tracer = otel.tracer_provider.get_tracer("test")
    _async_workload(tmp_path / "a.db", engine, tracer)
    (turn,) = otel.spans("turn")
    appends = otel.spans("append")
    assert len(appends) == 4
    for span in appends:
        assert span.parent is not None and span.parent.span_id == turn.context.span_id
        assert span.attributes["agentlog.outcome"] == "ok"
        # Its span lasts until its commit: it ends after it started, within the turn.
        assert turn.start_time <= span.start_time <= span.end_time <= turn.end_time
    (truncate,) = otel.spans("truncate")
    assert truncate.parent is not None and truncate.parent.span_id == turn.context.span_id
    (read,) = otel.spans("read")
    assert read.attributes["agentlog.events"] == 1
    # Counted once, though the async twin's write ran its sync backend's.
    assert otel.total("agentlog.events.appended") == 4
    assert otel.total("db.client.operation.duration", **{"db.operation.name": "truncate"}) == 1


def test_the_writer_threads_group_is_a_child_linked_to_its_appends(
    otel: Telemetry, tmp_path: Path
) -> None:
    """On the pure engine (no writer thread of its own) with synchronous="full",
    appends are grouped by this package's writer thread: its group's span is
    a child of the first append's span and links every append of the group."""
    require_engine("python")
    tracer = otel.tracer_provider.get_tracer("test")
    _async_workload(tmp_path / "a.db", "python", tracer)
    groups = otel.spans("commit group")
    assert groups, "no commit group was traced"
    appends = {span.context.span_id: span for span in otel.spans("append")}
    linked = set()
    for group in groups:
        assert group.parent is not None and group.parent.span_id in appends
        ids = {link.context.span_id for link in group.links}
        assert group.parent.span_id in ids
        assert len(ids) == group.attributes["agentlog.group.size"]
        linked |= ids
        parent = appends[group.parent.span_id]
        assert parent.start_time <= group.start_time <= group.end_time <= parent.end_time
    assert linked == set(appends)
    assert otel.total("agentlog.commit_group.size") == len(groups)


def test_postgres_async_spans(
    otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue("postgres_server")
    from agentlog.aio import AsyncPostgresCheckpointer

    from ..conftest import postgres_conninfo, postgres_schema

    async def main() -> None:
        schema = postgres_schema(tmp_path)
        async with AsyncPostgresCheckpointer(postgres_conninfo(), schema=schema) as log:
            await log.append("s1", [EVENT, EVENT])
            with pytest.raises(CheckpointConflictError):
                await log.append("s1", [EVENT], expected_head=0)
            assert [e.seq async for e in log.read("s1")] == [1, 2]
            await log.delete("s1")

    asyncio.run(main())
    names = [(s.name, s.attributes["agentlog.outcome"]) for s in otel.spans()]
    assert names == [("append", "ok"), ("append", "conflict"), ("read", "ok"), ("delete", "ok")]
    assert all(s.attributes["db.system.name"] == "postgresql" for s in otel.spans())
    assert otel.total("agentlog.events.appended") == 2
    assert otel.total("agentlog.conflicts") == 1


def test_gauges_read_the_engines_figures(otel: Telemetry, tmp_path: Path) -> None:
    """The WAL's size and bound, the reader pool's misses, read by the gauges."""
    with SqliteCheckpointer(tmp_path / "a.db", wal_size_limit=4096) as log:
        for i in range(64):
            log.append("s1", [{"type": "user", "content": "x" * 512 + str(i)}])
        list(log.read("s1"))
        figures = log.figures()
        assert figures["wal_bounds_hit"] >= 1
        assert figures["wal_truncations"] >= 1
        assert otel.total("agentlog.sqlite.wal.bounds_hit") == figures["wal_bounds_hit"]
        assert otel.total("agentlog.sqlite.wal.checkpoints") == figures["wal_truncations"]
        assert otel.total("agentlog.sqlite.wal.size") == log.figures()["wal_bytes"]
        assert otel.total("agentlog.sqlite.readers.opened") >= 1


def test_postgres_pool_gauges(
    otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    log: Any = open_log("postgres", tmp_path, request)
    try:
        log.append("s1", [EVENT])
        states = {
            p.attributes["state"]: p.value
            for p in otel.points("agentlog.postgres.pool.connections")
        }
        assert set(states) == {"idle", "used", "waiting"}
        assert states["idle"] + states["used"] >= 1
        assert otel.total("agentlog.postgres.retries") == 0
    finally:
        log.close()


def test_a_check_that_finds_damage_is_counted(
    otel: Telemetry, tmp_path: Path, engine: str, caplog: pytest.LogCaptureFixture
) -> None:
    import sqlite3

    path = tmp_path / "a.db"
    with SqliteCheckpointer(path, engine=engine) as log:
        log.append("s1", [EVENT, EVENT])
        assert log.check_integrity(deep=True) == (True, "ok")
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE events SET data = ? WHERE rowid = (SELECT max(rowid) FROM events)",
        (b'{"type":"user","content":"forged"}',),
    )
    conn.commit()
    conn.close()
    with SqliteCheckpointer(path, engine=engine) as log:
        ok, _ = log.check_integrity(deep=True)
    assert not ok
    checks = otel.spans("check")
    assert [span.attributes["agentlog.check.ok"] for span in checks] == [True, False]
    assert otel.total("agentlog.check.damaged", **{"db.system.name": "sqlite"}) == 1
    assert any(
        r.name == "agentlog.telemetry" and "damage" in r.getMessage() for r in caplog.records
    )


def test_a_followers_lag_is_measured(otel: Telemetry, tmp_path: Path, engine: str) -> None:
    with SqliteCheckpointer(tmp_path / "a.db", engine=engine) as log:
        log.append("s1", [EVENT, EVENT, EVENT])
        follower = log.follow("s1")
        seen = [next(follower).seq for _ in range(3)]
        follower.close()
    assert seen == [1, 2, 3]
    (point,) = otel.points("agentlog.follow.lag")
    assert point.count == 3
    assert point.attributes == {"db.system.name": "sqlite"}
    assert point.min >= 0
    # A span while it follows, ended when it is closed (no duration recorded).
    (span,) = otel.spans("follow")
    assert span.kind is trace.SpanKind.CLIENT
    assert span.attributes["db.operation.name"] == "follow"
    assert span.attributes["db.system.name"] == "sqlite"
    assert span.attributes["agentlog.session.id"] == "s1"
    assert span.attributes["agentlog.events"] == 3
    assert span.attributes["agentlog.outcome"] == "ok"
    assert span.status.status_code is trace.StatusCode.UNSET
    assert otel.total("db.client.operation.duration", **{"db.operation.name": "follow"}) == 0


def test_a_follower_that_fails_ends_its_span_with_the_error(
    otel: Telemetry, tmp_path: Path
) -> None:
    from agentlog import SessionTruncatedError

    with SqliteCheckpointer(tmp_path / "a.db") as log:
        log.append("s1", [EVENT])
        follower = log.follow("s1", since_seq=5)  # past the head: refused at its first look
        with pytest.raises(SessionTruncatedError):
            next(follower)
    (span,) = otel.spans("follow")
    assert span.attributes["agentlog.outcome"] == "error"
    assert span.attributes["error.type"] == "SessionTruncatedError"
    assert span.status.status_code is trace.StatusCode.ERROR


def test_an_async_followers_lag_is_measured(otel: Telemetry, tmp_path: Path) -> None:
    async def main() -> list[int]:
        log = AsyncSqliteCheckpointer(tmp_path / "a.db")
        try:
            await log.append("s1", [EVENT, EVENT])
            seen = []
            async for event in log.follow("s1"):
                seen.append(event.seq)
                if len(seen) == 2:
                    break
            return seen
        finally:
            await log.aclose()

    tracer = otel.tracer_provider.get_tracer("test")

    async def traced() -> list[int]:
        with tracer.start_as_current_span("turn"):
            return await main()

    assert asyncio.run(traced()) == [1, 2]
    (point,) = otel.points("agentlog.follow.lag")
    assert point.count == 2
    (turn,) = otel.spans("turn")
    (span,) = otel.spans("follow")  # ended by the break (the generator closed)
    assert span.parent is not None and span.parent.span_id == turn.context.span_id
    assert span.attributes["agentlog.events"] == 2
    assert span.attributes["agentlog.outcome"] == "ok"


def test_the_stores_writes_are_spans(otel: Telemetry, tmp_path: Path) -> None:
    from agentlog.errors import StorageConflictError
    from agentlog.storage.sqlite import SqliteStorage

    storage = SqliteStorage.open(tmp_path / "m.db")
    store = storage.memory
    try:
        record = store.put("t1", "ns", "k", {"v": 1}, None)
        with pytest.raises(StorageConflictError):
            store.put("t1", "ns", "k", {"v": 2}, record.revision + 5)
        store.delete("t1", "ns", "k", record.revision)
    finally:
        storage.close()
    found = [(s.name, s.attributes["agentlog.outcome"]) for s in otel.spans()]
    assert found == [("put memory", "ok"), ("put memory", "conflict"), ("delete memory", "ok")]
    for span in otel.spans():
        assert span.attributes["db.system.name"] == "sqlite"
        assert span.attributes["db.collection.name"] == "memory"
        assert span.attributes["agentlog.tenant"] == "t1"
    assert otel.total("agentlog.conflicts", **{"db.collection.name": "memory"}) == 1


def _open_storage(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    if backend == "postgres":
        request.getfixturevalue("postgres_server")
        from agentlog.storage.postgres import PostgresStorage

        from ..conftest import postgres_conninfo, postgres_schema

        return PostgresStorage.open(postgres_conninfo(), schema=postgres_schema(tmp_path))
    from agentlog.storage.sqlite import SqliteStorage

    engine = backend.removeprefix("sqlite-")
    require_engine(engine)
    return SqliteStorage.open(tmp_path / "m.db", engine=engine)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_session_stores_operations_are_spans(
    backend: str, otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SessionStore's writes and reads, and the other stores' reads: a span each,
    a conflict counted, the items a load read counted; prune_all is one span."""
    from agentlog.errors import StorageConflictError

    storage = _open_storage(backend, tmp_path, request)
    sessions = storage.sessions
    try:
        sessions.create("t1", "s1", {"title": "x"})
        record = sessions.append("t1", "s1", 0, [{"id": "a", **EVENT}])
        sessions.append("t1", "s1", record.revision, [{"id": "b", **EVENT}])
        with pytest.raises(StorageConflictError):
            sessions.append("t1", "s1", 0, [{"id": "c", **EVENT}])
        assert sessions.get("t1", "s1").head == 2
        sessions.compact("t1", "s1", 2, 2, {"n": 2})
        assert len(sessions.load("t1", "s1", use_snapshot=False).items) == 2
        assert [r.session_id for r in sessions.list("t1")] == ["s1"]
        assert sessions.prune_all("t1") == {"s1": 2}
        sessions.delete("t1", "s1", 3)
        storage.memory.put("t1", "ns", "k", {"v": 1}, None)
        assert storage.memory.get("t1", "ns", "k").value == {"v": 1}
        assert storage.checkpoints.list("t1") == []
    finally:
        storage.close()
    found = [(s.name, s.attributes["agentlog.outcome"]) for s in otel.spans()]
    assert found == [
        ("create sessions", "ok"),
        ("append sessions", "ok"),
        ("append sessions", "ok"),
        ("append sessions", "conflict"),
        ("get sessions", "ok"),
        ("compact sessions", "ok"),
        ("load sessions", "ok"),
        ("list sessions", "ok"),
        ("prune_all sessions", "ok"),
        ("delete sessions", "ok"),
        ("put memory", "ok"),
        ("get memory", "ok"),
        ("list checkpoints", "ok"),
    ]
    for span in otel.spans():
        assert span.kind is trace.SpanKind.CLIENT
        assert span.attributes["db.system.name"] == SYSTEM[backend]
        assert span.attributes["agentlog.tenant"] == "t1"
    (load,) = otel.spans("load sessions")
    assert load.attributes["agentlog.events"] == 2
    assert otel.total("agentlog.conflicts", **{"db.collection.name": "sessions"}) == 1
    assert otel.total("agentlog.events.read", **{"db.collection.name": "sessions"}) == 2
    duration = "db.client.operation.duration"
    assert otel.total(duration, **{"db.collection.name": "sessions"}) == 10


def test_an_async_stores_write_is_a_child_of_its_caller(
    otel: Telemetry, tmp_path: Path, engine: str
) -> None:
    """An async store's write runs on the storage's writer thread, in its caller's
    context: its span is a child of the caller's, as a read's (run on the loop) is."""
    from agentlog.aio.stores import AsyncSqliteStorage

    tracer = otel.tracer_provider.get_tracer("test")

    async def main() -> None:
        storage = await AsyncSqliteStorage.open(tmp_path / "m.db", engine=engine)
        try:
            with tracer.start_as_current_span("turn"):
                await storage.sessions.create("t1", "s1")
                await storage.sessions.append("t1", "s1", 0, [{"id": "a", **EVENT}])
                assert (await storage.sessions.get("t1", "s1")).head == 1
        finally:
            await storage.aclose()

    asyncio.run(main())
    (turn,) = otel.spans("turn")
    names = [span.name for span in otel.spans() if span is not turn]
    assert names == ["create sessions", "append sessions", "get sessions"]
    for span in otel.spans():
        if span is not turn:
            assert span.parent is not None and span.parent.span_id == turn.context.span_id


def _assert_c_groups(otel: Telemetry, appends: int) -> None:
    """Each append the C engine's writer thread wrote has one ``commit group``
    child within its span; each group is counted once, at its size."""
    spans = {span.context.span_id: span for span in otel.spans("append")}
    assert len(spans) == appends
    children = otel.spans("commit group")
    assert sorted(c.parent.span_id for c in children if c.parent) == sorted(spans)
    groups = set()
    for child in children:
        assert child.parent is not None
        parent = spans[child.parent.span_id]
        assert parent.start_time <= child.start_time <= child.end_time <= parent.end_time
        groups.add((child.start_time, child.end_time, child.attributes["agentlog.group.size"]))
    assert sum(size for _, _, size in groups) == appends
    (point,) = otel.points("agentlog.commit_group.size")
    assert (point.count, point.sum) == (len(groups), appends)


def test_the_c_writer_threads_groups_of_threads_appends(otel: Telemetry, tmp_path: Path) -> None:
    """Threads whose appends queue (the write lock is held) are written by the C
    engine's writer thread: its groups are measured and traced from the
    times that thread took."""
    require_engine("c")
    import threading

    from ..engine.test_group_commit import blocked
    from ..waiting import wait_until

    with SqliteCheckpointer(tmp_path / "a.db", engine="c") as log:
        lock = log._engine._write_lock  # type: ignore[attr-defined]
        threads = [threading.Thread(target=log.append, args=(f"s{i}", [EVENT])) for i in range(3)]
        with lock:  # as if a long write were under way: every append queues
            for thread in threads:
                thread.start()
            assert wait_until(lambda: blocked(threads))  # each queued, waiting
        for thread in threads:
            thread.join(30)
        assert [log.head(f"s{i}") for i in range(3)] == [1, 1, 1]
    _assert_c_groups(otel, 3)


def test_the_c_writer_threads_groups_of_an_event_loops_appends(
    otel: Telemetry, tmp_path: Path
) -> None:
    """With synchronous="full" an event loop's appends queue to the C engine's
    writer thread through the loop's channel: the same groups, the same spans."""
    require_engine("c")

    async def main() -> None:
        async with AsyncSqliteCheckpointer(
            tmp_path / "a.db", engine="c", synchronous="full"
        ) as log:
            await asyncio.gather(*(log.append(f"s{i}", [EVENT]) for i in range(8)))

    asyncio.run(main())
    _assert_c_groups(otel, 8)


def test_an_append_whose_outcome_is_unknown_is_recorded_as_such(
    otel: Telemetry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """PostgreSQL: an unkeyed append whose connection is killed while the
    server holds it ends ``outcome_unknown``, on its span and its duration."""
    import threading

    import psycopg

    from agentlog import OutcomeUnknownError

    from ..conftest import postgres_conninfo, postgres_schema
    from ..waiting import wait_until

    server = request.getfixturevalue("postgres_server")
    log = open_log("postgres", tmp_path, request)
    schema = postgres_schema(tmp_path)
    failed: list[BaseException] = []

    def append() -> None:
        try:
            log.append("s", [EVENT])
        except BaseException as exc:
            failed.append(exc)

    try:
        log.append("s", [EVENT])
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute("BEGIN")  # holds the session's row: the append waits in the server
            admin.execute(f"SELECT 1 FROM {schema}.sessions WHERE name = 's' FOR UPDATE")
            holder = admin.info.backend_pid
            worker = threading.Thread(target=append)
            worker.start()
            with psycopg.connect(postgres_conninfo(), autocommit=True) as look:
                blocked: list[int] = []

                def waiting() -> bool:
                    blocked[:] = [
                        row[0]
                        for row in look.execute(
                            "SELECT pid FROM pg_stat_activity"
                            " WHERE %s = ANY(pg_blocking_pids(pid))",
                            (holder,),
                        ).fetchall()
                    ]
                    return bool(blocked)

                assert wait_until(waiting)
                look.execute("SELECT pg_terminate_backend(%s)", (blocked[0],))
            admin.execute("ROLLBACK")
            worker.join(timeout=60)
            assert not worker.is_alive()
    finally:
        log.close()
    (error,) = failed
    assert isinstance(error, OutcomeUnknownError), error
    first, lost = otel.spans("append")
    assert first.attributes["agentlog.outcome"] == "ok"
    assert lost.attributes["agentlog.outcome"] == "outcome_unknown"
    assert lost.attributes["error.type"] == "OutcomeUnknownError"
    assert lost.status.status_code is trace.StatusCode.ERROR
    duration = "db.client.operation.duration"
    assert otel.total(duration, **{"agentlog.outcome": "outcome_unknown"}) == 1
    assert otel.total("agentlog.events.appended") == 1
