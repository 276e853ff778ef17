"""agentlog for asyncio: the session log's contract as coroutines, on one writer.

:class:`AsyncCheckpointer` is the seed's asynchronous contract (``append``,
``head``, ``list``, ``delete``, ``truncate``, ``fork`` awaited; ``read`` an
async iterator). :class:`AsyncSqliteCheckpointer`,
:class:`AsyncFileCheckpointer` and :class:`AsyncMemoryCheckpointer` implement
it over the synchronous backends: the appends of any number of coroutines
are grouped, each group one transaction — written on the loop's own thread
when that needs no waiting (SQLite, its write lock free), else by one writer
thread, which wakes each caller's loop once per group.
:class:`AsyncPostgresCheckpointer` (imported on first use, like
:class:`AsyncPostgresStorage`: they need psycopg) is native, on psycopg's
async pool.

:class:`AsyncInMemoryStorage` and :class:`AsyncSqliteStorage` are the four
stores (``sessions``, ``checkpoints``, ``memory``, ``artifacts``) as
coroutines, every write of the four on one writer per storage.

:class:`IdempotencyKeyError` and :class:`OutcomeUnknownError` (an append's
``key`` reused with other events; an unkeyed append lost around its commit)
are the synchronous package's, named here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import IdempotencyKeyError, OutcomeUnknownError
from ..lazy import lazy_names
from .checkpointer import (
    AsyncBaseCheckpointer,
    AsyncFileCheckpointer,
    AsyncMemoryCheckpointer,
    AsyncSqliteCheckpointer,
)
from .contract import AsyncCheckpointer, AsyncLineageCheckpointer, AsyncMetadataCheckpointer
from .handle import AsyncSession
from .stores import (
    AsyncArtifactStore,
    AsyncCheckpointStore,
    AsyncInMemoryStorage,
    AsyncMemoryStore,
    AsyncSessionStore,
    AsyncSqliteStorage,
    AsyncStorage,
)

if TYPE_CHECKING:
    from .postgres import AsyncPostgresCheckpointer, AsyncPostgresStorage

__all__ = [
    "AsyncArtifactStore",
    "AsyncBaseCheckpointer",
    "AsyncCheckpointStore",
    "AsyncCheckpointer",
    "AsyncFileCheckpointer",
    "AsyncInMemoryStorage",
    "AsyncLineageCheckpointer",
    "AsyncMemoryCheckpointer",
    "AsyncMemoryStore",
    "AsyncMetadataCheckpointer",
    "AsyncPostgresCheckpointer",
    "AsyncPostgresStorage",
    "AsyncSession",
    "AsyncSessionStore",
    "AsyncSqliteCheckpointer",
    "AsyncSqliteStorage",
    "AsyncStorage",
    "IdempotencyKeyError",
    "OutcomeUnknownError",
]


# The PostgreSQL twin needs psycopg: it is imported when first named.
__getattr__ = lazy_names(
    __name__, {"AsyncPostgresCheckpointer": ".postgres", "AsyncPostgresStorage": ".postgres"}
)
