"""The file backend's ownership of its directory across ``os.fork()`` and the
garbage collector: a fork child never writes its parent's store, and a
checkpointer dropped without ``close()`` gives the directory up."""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog import CheckpointerClosedError, FileCheckpointer

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
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(read_end)
            signal.alarm(10)
            found: list[Any] = []
            calls: dict[str, Callable[[], object]] = {
                "append": lambda: cp.append("s", [EVENT]),
                "head": lambda: cp.head("s"),
                "read": lambda: list(cp.read("s")),
                "list": cp.list,
                "truncate": lambda: cp.truncate("s", 0),
                "delete": lambda: cp.delete("s"),
            }
            for name, call in calls.items():
                try:
                    call()
                except CheckpointerClosedError as exc:
                    found.append([name, "fork" in str(exc)])
                except BaseException as exc:
                    found.append([name, repr(exc)])
                else:
                    found.append([name, "allowed"])
            cp.close()
            os.write(write_end, json.dumps(found).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    release.set()
    holder.join(10)
    assert not os.WIFSIGNALED(status), f"the child died of signal {os.WTERMSIG(status)}"
    found = json.loads(data)
    assert found == [[name, True] for name, _ in found] and len(found) == 6, found
    # The parent still owns the directory and its session.
    assert cp.append("s", [EVENT], expected_head=1) == 2
    cp.close()
