"""Counting an event loop's wake-ups from other threads."""

from __future__ import annotations

import asyncio
from typing import Any


class WakeUpCounter:
    """Stands in for a loop's ``call_soon_threadsafe`` and counts its calls: each
    is one wake-up of the loop from another thread. Install it with
    ``monkeypatch.setattr(loop, "call_soon_threadsafe", counter)``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self.original = loop.call_soon_threadsafe

    def __call__(self, callback: Any, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self.original(callback, *args, **kwargs)
