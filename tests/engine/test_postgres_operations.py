"""PostgreSQL's operations without a server: each is a generator of statements
(sans-I/O), so what it sends and what it makes of each answer is checked by
playing the server's part here."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

pytest.importorskip("psycopg")

from agentlog.engine.postgres import PostgresOptions, Statements, oversized_batch
from agentlog.engine.postgres import operations as ops
from agentlog.engine.postgres.aio import AsyncDatabase
from agentlog.engine.postgres.arrays import ByteaArray
from agentlog.engine.postgres.connect import session_settings
from agentlog.engine.postgres.protocol import Execute, Operation, Pipeline
from agentlog.errors import CheckpointConflictError, CorruptDatabaseError, EventsPrunedError
from agentlog.events import StoredEvent
from agentlog.integrity import checked_payloads

from ..conftest import require_engine

Q = Statements("agentlog")
BATCH = [("user", b'{"type":"user","content":"hi"}')]


def play(operation: Operation[Any], answers: Sequence[Any]) -> tuple[list[Any], Any]:
    """Run ``operation`` sending it ``answers`` in turn: (the steps it yielded, its result)."""
    steps = [next(operation)]
    for answer in answers:
        try:
            steps.append(operation.send(answer))
        except StopIteration as done:
            return steps, done.value
    raise AssertionError(f"still running after {len(answers)} answers: {steps[-1]!r}")


def test_an_append_is_one_statement_and_its_row_is_the_new_head() -> None:
    steps, head = play(ops.append(Q, "t", ("s", 2, BATCH), 1.0, True), [(3, "")])
    assert len(steps) == 1 and isinstance(steps[0], Execute)
    assert steps[0].statement == Q.append[False, True]
    # The payloads go out already dumped as one binary bytea[] (engine/postgres/arrays.py).
    payloads = steps[0].params["payloads"]
    assert steps[0].params["exp"] == 2 and payloads.data == ByteaArray([BATCH[0][1]]).data
    assert head == 3


def test_a_refused_append_reads_the_head_for_its_conflict() -> None:
    with pytest.raises(CheckpointConflictError) as caught:
        play(ops.append(Q, "t", ("s", 2, BATCH), 1.0, False), [None, (5,)])
    assert (caught.value.expected, caught.value.actual) == (2, 5)


def test_an_append_whose_head_moved_to_the_expected_one_is_sent_again() -> None:
    steps, head = play(ops.append(Q, "t", ("s", 2, BATCH), 1.0, False), [None, (2,), (3,)])
    cas = Q.append[False, False]
    assert [step.statement for step in steps] == [cas, Q.head, cas]
    assert head == 3


def test_a_group_of_distinct_sessions_is_one_pipeline_in_id_order() -> None:
    requests = [("b", None, BATCH), ("a", 1, BATCH)]
    plan = ops.plan_group(requests, oversized_batch)
    assert plan.pipelined and plan.order == [1, 0]
    steps, results = play(ops.append_group(Q, "t", requests, 1.0, False, plan), [[(2,), (1,)]])
    assert isinstance(steps[0], Pipeline)
    assert [step.params["name"] for step in steps[0].steps] == ["a", "b"]
    assert results == [1, 2]


def test_a_group_refuses_a_conflict_alone() -> None:
    requests = [("a", 1, BATCH), ("b", 4, BATCH)]
    plan = ops.plan_group(requests, oversized_batch)
    # b's CAS refused in the pipeline, and again alone; its head is 7.
    answers = [[(2,), None], None, (7,)]
    _, results = play(ops.append_group(Q, "t", requests, 1.0, False, plan), answers)
    assert results[0] == 2 and isinstance(results[1], CheckpointConflictError)


def test_a_truncate_of_an_unknown_session_stops_at_its_first_statement() -> None:
    steps, result = play(ops.truncate(Q, "t", "s", 3, 1.0, True), [None])
    assert [step.statement for step in steps] == [Q.head_for_update]
    assert result == (0, False)


def test_an_empty_page_after_pruned_events_is_refused() -> None:
    # No events after 0 here, and the session's first stored one is 11.
    with pytest.raises(EventsPrunedError):
        play(ops.checked_page(Q, "t", "s", 0, 100), [[], (20, 11)])


def _rows(count: int, crc: bool = True) -> list[tuple[Any, ...]]:
    payloads = [orjson.dumps({"type": "user", "n": n, "text": "é" * n}) for n in range(count)]
    return [
        (n + 1, 1.5 + n, "user", payload, zlib.crc32(payload) if crc else None)
        for n, payload in enumerate(payloads)
    ]


def _pure_page(name: str, rows: list[tuple[Any, ...]]) -> list[StoredEvent]:
    # The pure twin: what stored_page does without the C engine.
    events = checked_payloads(name, rows)
    return [StoredEvent(r[0], r[0] - 1, r[1], r[2], e) for r, e in zip(rows, events, strict=True)]


def test_the_c_page_is_the_pure_pages_twin() -> None:
    require_engine("c")
    from agentlog.engine import cengine

    rows = _rows(300)
    rows[100:120] = _rows(20, crc=False)  # rows stored before checksums, and a gap in seqs
    rows = [(n * 2 if n > 150 else n, *rest) for n, *rest in rows]
    page = cengine.postgres_page("s", rows)
    assert page == _pure_page("s", rows) == ops.stored_page("s", rows)
    assert all(type(event) is StoredEvent for event in page)
    assert cengine.postgres_page("s", []) == []
    # Rows it does not know (not tuples, or TEXT payloads) are the pure twin's.
    assert cengine.postgres_page("s", [list(row) for row in rows]) is None
    assert cengine.postgres_page("s", [(*rows[0][:3], rows[0][3].decode(), None)]) is None


@pytest.mark.parametrize("damage", ["crc", "json", "count"])
def test_the_c_page_names_the_first_damaged_event_as_the_pure_one(damage: str) -> None:
    require_engine("c")
    from agentlog.engine import cengine

    rows = _rows(10)
    if damage == "crc":
        rows[6] = (*rows[6][:4], rows[6][4] ^ 1)
    elif damage == "json":
        rows[6] = (*rows[6][:3], b'{"type": "us', None)
    else:
        rows[6] = (*rows[6][:3], b'{"type":"user"},{"type":"user"}', None)
    with pytest.raises(CorruptDatabaseError) as pure:
        _pure_page("s", rows)
    with pytest.raises(CorruptDatabaseError) as compiled:
        cengine.postgres_page("s", rows)
    assert str(compiled.value) == str(pure.value)
    assert compiled.value.seq == pure.value.seq == 7


@pytest.mark.parametrize("read", [ops.scan, ops.scan_json, ops.checked_page, ops.checked_json_page])
def test_a_page_after_the_last_seq_sends_no_statement(read: Any) -> None:
    # The bound the contract allows but bigint cannot pass: nothing is sent.
    operation = read(Q, "t", "s", ops.MAX_SEQ, 10)
    if read in (ops.checked_page, ops.checked_json_page):
        # An empty page still asks where retention starts.
        assert next(operation).statement == Q.retained
        return
    with pytest.raises(StopIteration) as done:
        next(operation)
    assert done.value.value == []


def test_the_options_are_checked_once_when_made() -> None:
    with pytest.raises(ValueError, match="schema must match"):
        PostgresOptions(schema="Not-A-Name")
    with pytest.raises(ValueError, match="client_timeout must be"):
        PostgresOptions(client_timeout=0)
    with pytest.raises(TypeError):
        PostgresOptions("agentlog")  # type: ignore[misc]  # keywords only: no order to rely on
    for refused in [PostgresOptions(read_only=True), PostgresOptions(create=False)]:
        with pytest.raises(ValueError, match="opens a store to write"):
            AsyncDatabase("postgresql://unused", options=refused)  # refused before connecting
    assert session_settings(PostgresOptions(statement_timeout_ms=None)) == []
    assert session_settings(PostgresOptions(statement_timeout_ms=250, read_only=True)) == [
        "SET statement_timeout = 250",
        "SET default_transaction_read_only = on",
    ]
