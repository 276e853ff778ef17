"""PostgreSQL crashing under load: writer processes append while the server
is stopped with ``pg_ctl stop -m immediate`` and started again.

Every acknowledged append is in the log once, nothing is stored twice, and
the session is gapless; with keyed retries, every append is in exactly once.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlog import PostgresCheckpointer

from ..conftest import PYTHON, child_env, postgres_required
from ..postgres_server import PostgresServer, missing_reason
from ..waiting import wait_until

# By path: the test command runs pytest outside the checkout, where no
# `tests` package is importable for `python -m`.
CHILD = Path(__file__).with_name("postgres_writer_child.py")
WRITERS = 3
COUNT = 150


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A cluster of this module's own: crashing it spares the other tests'."""
    reason = missing_reason()
    if reason is not None:
        if postgres_required():
            pytest.fail(f"{reason} (AGENTLOG_REQUIRE_POSTGRES is set)", pytrace=False)
        pytest.skip(reason)
    # Commits acknowledged only once in the WAL: what a crash must not lose.
    with PostgresServer(dbname="agentlog_crash", synchronous_commit="on") as running:
        yield running


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_a_crash_under_load_loses_and_duplicates_nothing_acknowledged(
    server: PostgresServer, keyed: bool
) -> None:
    schema = "crash_keyed" if keyed else "crash_unkeyed"
    with PostgresCheckpointer(server.conninfo, schema=schema) as log:
        log.delete("shared")
    writers = [
        subprocess.Popen(
            [
                PYTHON,
                str(CHILD),
                server.conninfo,
                schema,
                str(worker),
                str(COUNT),
                "1" if keyed else "0",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for worker in range(WRITERS)
    ]
    try:
        with PostgresCheckpointer(server.conninfo, schema=schema) as log:

            def under_load() -> bool:
                # Every writer open and appending (none is caught opening the store).
                writing = {event.event["w"] for event in log.read("shared")}
                return len(writing) == WRITERS and log.head("shared") >= COUNT // 2

            assert wait_until(under_load, timeout=120)
        server.crash()
        server.start_server()
        outputs = [writer.communicate(timeout=300)[0] for writer in writers]
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    assert [writer.returncode for writer in writers] == [0] * WRITERS
    acknowledged = {
        (worker, int(line)) for worker, out in enumerate(outputs) for line in out.split()
    }
    with PostgresCheckpointer(server.conninfo, schema=schema) as log:
        stored = list(log.read("shared"))
    assert [event.seq for event in stored] == list(range(1, len(stored) + 1))  # gapless
    counts = Counter((event.event["w"], event.event["n"]) for event in stored)
    assert max(counts.values()) == 1  # nothing stored twice
    assert acknowledged <= set(counts)  # every acknowledged append is there
    if keyed:  # retried with its key until acknowledged: every one, exactly once
        assert set(counts) == acknowledged == {(w, n) for w in range(WRITERS) for n in range(COUNT)}
