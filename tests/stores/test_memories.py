"""The MemoryStore conformance suite in memory, on SQLite with each engine and on
PostgreSQL.

The classes live at module level so that spawned racers can import them."""

from __future__ import annotations

from agentlog.testing import MemoryStoreConformance

from .openers import suite_on_each

globals().update(suite_on_each(MemoryStoreConformance, "MemoryStore", __name__))
