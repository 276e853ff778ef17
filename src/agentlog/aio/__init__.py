"""agentlog for asyncio: the session log's contract as coroutines, on one writer.

:class:`AsyncCheckpointer` is the seed's asynchronous contract (``append``,
``head``, ``list``, ``delete``, ``truncate``, ``fork`` awaited; ``read`` an
async iterator). :class:`AsyncSqliteCheckpointer`,
:class:`AsyncFileCheckpointer` and :class:`AsyncMemoryCheckpointer` implement
it over the synchronous backends: the appends of any number of coroutines
are grouped, each group one transaction — written on the loop's own thread
when that needs no waiting (SQLite, its write lock free), else by one writer
thread, which wakes each caller's loop once per group.

:class:`AsyncInMemoryStorage` and :class:`AsyncSqliteStorage` are the four
stores (``sessions``, ``checkpoints``, ``memory``, ``artifacts``) as
coroutines, every write of the four on one writer per storage.
"""

from __future__ import annotations

from .checkpointer import (
    AsyncBaseCheckpointer,
    AsyncFileCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)
from .contract import AsyncCheckpointer
from .stores import (
    AsyncArtifactStore,
    AsyncCheckpointStore,
    AsyncInMemoryStorage,
    AsyncMemoryStore,
    AsyncSessionStore,
    AsyncSqliteStorage,
    AsyncStorage,
)

__all__ = [
    "AsyncArtifactStore",
    "AsyncBaseCheckpointer",
    "AsyncCheckpointStore",
    "AsyncCheckpointer",
    "AsyncFileCheckpointer",
    "AsyncInMemoryStorage",
    "AsyncMemoryCheckpointer",
    "AsyncMemoryStore",
    "AsyncSessionStore",
    "AsyncSqliteCheckpointer",
    "AsyncSqliteStorage",
    "AsyncStorage",
]
