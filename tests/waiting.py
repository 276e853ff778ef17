"""Waiting for a state another thread or process reaches, with a deadline.

A test that sleeps for "long enough" is slow where the machine is fast and
flaky where it is loaded; these poll the state itself and return as soon as
it holds. They return whether it held, and the caller asserts the state, so
a failure shows it as it was at the deadline.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections.abc import Callable, Iterable

#: How long a wait goes on before the test's own assertion fails it.
DEADLINE = 30.0


def wait_until(
    condition: Callable[[], bool], timeout: float = DEADLINE, interval: float = 0.01
) -> bool:
    """Call ``condition`` every ``interval`` seconds until it is true (then
    ``True``) or ``timeout`` seconds have passed (then ``False``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


async def wait_until_async(
    condition: Callable[[], bool], timeout: float = DEADLINE, interval: float = 0.01
) -> bool:
    """:func:`wait_until` on an event loop: it runs on between the looks."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True


def os_threads() -> set[str]:
    """This process's OS threads by id, native ones (the C writer) included."""
    return set(os.listdir("/proc/self/task"))


def threads_started_since(before: set[str], count: int = 1) -> set[str]:
    """The OS threads running now that were not in ``before``, waited for
    until there are ``count`` (a joined thread may still be exiting). Ids,
    not a count: threads of an earlier test may end meanwhile."""
    wait_until(lambda: len(os_threads() - before) == count, timeout=5)
    return os_threads() - before


def threads_ended(threads: set[str], timeout: float = 5) -> bool:
    """Whether none of ``threads`` runs any more, waited for."""
    return wait_until(lambda: not os_threads() & threads, timeout=timeout)


def _task_file(thread: int | str, name: str) -> str:
    """``/proc/self/task/<thread>/<name>``; empty once the thread has gone."""
    try:
        with open(f"/proc/self/task/{thread}/{name}") as file:
            return file.read()
    except OSError:
        return ""


def _sleep_and_switches(thread: int | str) -> tuple[str, ...] | None:
    """The thread's context switch counts if it is asleep (state ``S``), else None."""
    fields = dict(
        line.split(":", 1) for line in _task_file(thread, "status").splitlines() if ":" in line
    )
    if not fields.get("State", "").strip().startswith("S"):
        return None
    return (
        fields.get("voluntary_ctxt_switches", ""),
        fields.get("nonvoluntary_ctxt_switches", ""),
    )


def thread_blocked(thread: int | str, settle: float = 0.02) -> bool:
    """Whether OS thread ``thread`` (a ``native_id``, or an id from
    :func:`os_threads`) is asleep and stays asleep for ``settle`` seconds
    without one context switch: it waits on a lock or a condition with no
    deadline near. A thread waiting for the GIL is woken within that time
    (this one gives it up meanwhile), and one in a sleep loop switches."""
    before = _sleep_and_switches(thread)
    if before is None:
        return False
    time.sleep(settle)
    return _sleep_and_switches(thread) == before


def threads_blocked(threads: Iterable[int | str]) -> bool:
    """Whether there are ``threads`` (OS thread ids) and each is blocked (see
    :func:`thread_blocked`)."""
    ids = list(threads)
    return bool(ids) and all(thread_blocked(thread) for thread in ids)


@functools.cache
def wait_channels_shown() -> bool:
    """Whether this kernel names a sleeping thread's wait channel in
    ``/proc`` (some configurations show ``0`` for every thread): looked at
    once, on a thread of its own that sleeps."""
    sleeper = threading.Thread(target=time.sleep, args=(0.5,), daemon=True)
    sleeper.start()
    return wait_until(lambda: "sleep" in _task_file(sleeper.native_id or 0, "wchan"), 0.4)


def thread_in_a_timed_sleep(thread: int | str) -> bool:
    """Whether OS thread ``thread`` sleeps in ``nanosleep`` now, as a thread in
    SQLite's wait for another process's lock does between its tries (an idle
    writer thread waits on a condition instead). Only where
    :func:`wait_channels_shown`."""
    return "nanosleep" in _task_file(thread, "wchan")
