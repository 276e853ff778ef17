"""Waiting for a state another thread or process reaches, with a deadline.

A test that sleeps for "long enough" is slow where the machine is fast and
flaky where it is loaded; these poll the state itself and return as soon as
it holds. They return whether it held, and the caller asserts the state, so
a failure shows it as it was at the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

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
