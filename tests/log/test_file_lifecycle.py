"""The file backend's ownership of its directory across ``os.fork()`` and the
garbage collector: a fork child never writes its parent's store, and a
checkpointer dropped without ``close()`` gives the directory up."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from agentlog import FileCheckpointer

from ..forking import in_child, refusals

EVENT = {"type": "user", "content": "hello"}


def test_a_collected_file_checkpointer_gives_the_directory_up(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    cp.append("s", [EVENT])
    del cp
    gc.collect()
    with FileCheckpointer(tmp_path) as again:
        assert again.head("s") == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork() here")
def test_a_fork_child_refuses_its_parents_file_checkpointer(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    cp.append("s", [EVENT])
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        # A parent thread inside the checkpointer's lock at the fork.
        with cp._lock:  # the state a fork must not inherit
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(10)

    def in_the_child() -> list[Any]:
        found = refusals(
            {
                "append": lambda: cp.append("s", [EVENT]),
                "head": lambda: cp.head("s"),
                "read": lambda: list(cp.read("s")),
                "list": cp.list,
                "truncate": lambda: cp.truncate("s", 0),
                "delete": lambda: cp.delete("s"),
            }
        )
        cp.close()
        return found

    found = in_child(in_the_child)
    release.set()
    holder.join(10)
    assert found == [[name, "refused"] for name, _ in found] and len(found) == 6, found
    # The parent still owns the directory and its session.
    assert cp.append("s", [EVENT], expected_head=1) == 2
    cp.close()
