"""The former name of :mod:`agentlog.stores.memories` (the long-term MemoryStore).

Kept so that code importing from it goes on working; agentlog itself imports
:mod:`~agentlog.stores.memories` (this name read as "the in-memory stores").
"""

from __future__ import annotations

from .memories import InMemoryMemoryStore as InMemoryMemoryStore
from .memories import MemoryRecord as MemoryRecord
from .memories import MemoryStore as MemoryStore
from .memories import SqliteMemoryStore as SqliteMemoryStore

__all__ = ["InMemoryMemoryStore", "MemoryRecord", "MemoryStore", "SqliteMemoryStore"]
