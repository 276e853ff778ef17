"""kill -9 mid-append: the store reopens holding a gapless prefix of whole batches
that contains every append whose call had returned."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agentlog import Checkpointer, FileCheckpointer, SqliteCheckpointer
from agentlog.engine import DEFAULT_ENGINE

from ..conftest import (
    ENGINES,
    PYTHON,
    child_env,
    postgres_conninfo,
    postgres_schema,
    require_engine,
)

KILLS = 22
CHILD = str(Path(__file__).resolve().parent / "crash_child.py")


def open_store(backend: str, location: Path | str) -> Checkpointer:
    if backend == "file":
        return FileCheckpointer(location)
    if backend == "postgres":
        from agentlog import PostgresCheckpointer

        return PostgresCheckpointer(postgres_conninfo(), schema=str(location))
    return SqliteCheckpointer(location, engine=backend.split("-")[2])


BACKENDS = [
    "file",
    *(f"sqlite-normal-{engine}" for engine in ENGINES),
    f"sqlite-full-{DEFAULT_ENGINE}",
    "postgres",  # the client killed: the server commits the statement or rolls it back
]


def check_store(backend: str, location: Path | str, acknowledged: int) -> int:
    cp = open_store(backend, location)
    try:
        events = list(cp.read("crash"))
        head = cp.head("crash")
        if backend.startswith("sqlite"):
            assert cp.check_integrity() == (True, "ok")  # type: ignore[attr-defined]
    finally:
        cp.close()
    assert [e.seq for e in events] == list(range(1, head + 1)), "gap or duplicate"
    assert head >= acknowledged, f"lost a returned append: head {head} < {acknowledged}"
    batch_no = 0
    position = 0
    while position < len(events):
        first = events[position].event
        assert first["batch"] == batch_no + 1, "a batch is missing"
        batch_no = first["batch"]
        size = first["n"]
        batch = [e.event for e in events[position : position + size]]
        assert [(e["batch"], e["i"]) for e in batch] == [(batch_no, i) for i in range(size)], (
            "part of a batch"
        )
        position += size
    return head


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_mid_append_keeps_a_whole_prefix(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """KILLS children in turn append batches until a SIGKILL lands at a random
    moment; after each, the store reopens holding a gapless prefix of whole
    batches with every acknowledged append.

    Slow (10 s a SQLite backend, 40 s the file store, on two cores): 22
    processes each, and every check reads the whole store so far, which the
    file store's children grow fastest. Fewer kills would land in fewer kinds
    of write (mid-line, mid-batch, mid-checkpoint).
    """
    location: Path | str
    if backend == "postgres":
        request.getfixturevalue("postgres_server")  # skipped or failed without one
        location = postgres_schema(tmp_path)
    else:
        if backend != "file":
            require_engine(backend.split("-")[2])
        location = tmp_path / ("sessions" if backend == "file" else "crash.db")
    rng = random.Random(backend)
    acknowledged = 0
    heads = []
    for kill in range(KILLS):
        child = subprocess.Popen(
            [PYTHON, CHILD, backend, str(location), str(kill)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert child.stdout is not None
        ready = child.stdout.readline()
        assert ready.startswith("ready"), ready + (child.stderr.read() if child.stderr else "")
        assert int(ready.split()[1]) >= acknowledged
        time.sleep(rng.uniform(0.0, 0.15))  # jitter: the kill lands anywhere in its writes
        os.kill(child.pid, signal.SIGKILL)
        output, _ = child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL
        # A line cut by the kill has no newline: it is not an acknowledgement.
        complete_lines = output.split("\n")[:-1]
        acks = [int(line.split()[1]) for line in complete_lines if line.startswith("ok ")]
        if acks:
            acknowledged = acks[-1]
        heads.append(check_store(backend, location, acknowledged))
    # The children really appended between kills.
    assert heads[-1] > KILLS
