"""``os.fork()`` with an open database: the child refuses the parent's
checkpointer or storage with a typed error on any use — never touching the
parent's connections, never deadlocking on a lock a parent thread held — and
may open the file anew; the parent goes on undisturbed."""

from __future__ import annotations

import gc
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog import SqliteCheckpointer, SqliteStorage

from ..conftest import require_engine
from ..forking import in_child, refusals
from .test_group_commit import busy_appends

EVENT = {"type": "user", "content": "hello"}

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork() here")


def test_the_child_refuses_the_parents_checkpointer(tmp_path: Path, engine: str) -> None:
    db = tmp_path / "fork.db"
    cp = SqliteCheckpointer(db, engine=engine)
    cp.append("s", [EVENT])
    assert len(list(cp.read("s"))) == 1  # a pooled reader, too

    def child() -> list[Any]:
        calls: dict[str, Callable[[], object]] = {
            "append": lambda: cp.append("s", [EVENT]),
            "append empty": lambda: cp.append("s", []),
            "read": lambda: list(cp.read("s")),
            "head": lambda: cp.head("s"),
            "list": cp.list,
            "list_all_tenants": cp.list_all_tenants,
            "truncate": lambda: cp.truncate("s", 0),
            "fork": lambda: cp.fork("s", 1, "t"),
            "delete": lambda: cp.delete("s"),
            "check_integrity": cp.check_integrity,
        }
        found = refusals(calls)
        cp.close()  # closes nothing of the parent's
        gc.collect()
        with SqliteCheckpointer(db, engine=engine) as fresh:  # a new open is fine
            found.append(["fresh head", fresh.head("s")])
        return found

    result = in_child(child)
    assert result[:-1] == [[name, "refused"] for name, _ in result[:-1]], result
    assert result[-1] == ["fresh head", 1]
    # The parent's connections are intact.
    assert cp.append("s", [EVENT], expected_head=1) == 2
    assert [e.seq for e in cp.read("s")] == [1, 2]
    cp.close()


# Opened as test_shared's store tests open a file (a storage, a log, one
# append), alike in shape: the two files test different things on it.
def test_a_fork_while_a_parent_thread_writes_does_not_deadlock_the_child(
    tmp_path: Path, engine: str
) -> None:
    db = tmp_path / "busy.db"
    storage = SqliteStorage.open(db, engine=engine)
    log = storage.checkpointer()
    log.append("s", [EVENT])
    inside, release = threading.Event(), threading.Event()

    class SlowStream(io.BytesIO):
        """A stream read inside the artifact's write transaction."""

        def __init__(self) -> None:
            super().__init__()
            self.sent = False

        def read(self, size: int | None = -1, /) -> bytes:
            inside.set()
            release.wait(10)
            if self.sent:
                return b""
            self.sent = True
            return b"payload"

    writer = threading.Thread(
        target=lambda: storage.artifacts.put("acme", "a", SlowStream(), "text/plain", None)
    )
    writer.start()
    assert inside.wait(10)
    try:

        def child() -> list[Any]:
            return refusals(
                {
                    "append": lambda: log.append("s", [EVENT]),
                    "head": lambda: log.head("s"),
                    "session create": lambda: storage.sessions.create("acme", "c", None),
                    "memory get": lambda: storage.memory.get("acme", "ns", "k"),
                    "close": storage.close,
                }
            )

        result = in_child(child)
    finally:
        release.set()
        writer.join(10)
    expected = [[name, "refused"] for name in ("append", "head", "session create", "memory get")]
    assert result == [*expected, ["close", "allowed"]], result
    assert storage.artifacts.get("acme", "a")[1] == b"payload"
    assert log.append("s", [EVENT], expected_head=1) == 2
    storage.close()


def test_a_fork_after_the_writer_thread_started(tmp_path: Path) -> None:
    """The C engine's writer thread does not cross a fork: the child refuses
    the parent's log (its close and collection leave the thread's locks
    alone) and writes through a log of its own; the parent's thread goes on."""
    require_engine("c")
    db = tmp_path / "w.db"
    cp = SqliteCheckpointer(db, engine="c")
    busy_appends(cp)  # the writer thread starts

    def child() -> list[Any]:
        found = refusals({"append": lambda: cp.append("s", [EVENT]), "close": cp.close})
        own = SqliteCheckpointer(db, engine="c")
        found.append(["own append", own.append("child", [EVENT])])
        own.close()
        gc.collect()
        return found

    assert in_child(child) == [["append", "refused"], ["close", "allowed"], ["own append", 1]]
    busy_appends(cp)  # through the same thread
    assert [cp.head(f"busy{n}") for n in range(4)] == [2, 2, 2, 2]
    assert cp.head("child") == 1
    cp.close()
