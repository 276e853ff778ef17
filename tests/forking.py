"""Running a test's work in a child of ``os.fork()`` and reading back what it found."""

from __future__ import annotations

import json
import os
import signal
import warnings
from collections.abc import Callable
from typing import Any

from agentlog import CheckpointerClosedError


def in_child(work: Callable[[], list[Any]]) -> list[Any]:
    """Run ``work`` in a forked child (killed by SIGALRM after 10 s, so a
    deadlock fails instead of hanging); its JSON result, read by the parent."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(read_end)
            signal.alarm(10)
            payload = json.dumps(work()).encode()
            os.write(write_end, payload)
            status = 0
        except BaseException as exc:
            os.write(write_end, json.dumps(["child failed", repr(exc)]).encode())
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert not os.WIFSIGNALED(status), f"the child died of signal {os.WTERMSIG(status)}"
    result: list[Any] = json.loads(b"".join(chunks) or b'["no output"]')
    return result


def refusals(calls: dict[str, Callable[[], object]]) -> list[Any]:
    """Each call's ``[name, outcome]``: ``"refused"`` for the typed error that
    names the fork, else the error or ``"allowed"``."""
    found: list[Any] = []
    for name, call in calls.items():
        try:
            call()
        except CheckpointerClosedError as exc:
            found.append([name, "fork" in str(exc) and "refused"])
        except BaseException as exc:
            found.append([name, repr(exc)])
        else:
            found.append([name, "allowed"])
    return found
