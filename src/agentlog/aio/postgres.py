"""The async twins of the PostgreSQL backend and storage (imported on first use:
they need psycopg)."""

from __future__ import annotations

import functools
from typing import Any

from psycopg_pool import ConnectionPool

from ..engine.postgres import DEFAULT_SCHEMA
from ..log.postgres import PostgresCheckpointer
from ..stores.postgres import PostgresStorage
from .checkpointer import AsyncBaseCheckpointer
from .stores import AsyncStorage
from .writer import off_loop

__all__ = ["AsyncPostgresCheckpointer", "AsyncPostgresStorage"]


class AsyncPostgresCheckpointer(AsyncBaseCheckpointer):
    """:class:`~agentlog.PostgresCheckpointer`, async, on the writer thread.

    Takes the synchronous backend's arguments. Every write (appends, grouped
    into one transaction per batch the writer takes; deletes, truncates,
    forks) runs on one writer thread, so the loop never waits for the
    server's commit. Reads (``head()``, a page of ``read()``, a follower's
    look) are one round trip on the loop's thread — about 0.1 ms on
    loopback, more across a network. Followers are woken by ``NOTIFY``.
    """

    def __init__(self, target: str | ConnectionPool[Any], **options: Any) -> None:
        super().__init__(PostgresCheckpointer(target, **options))


class AsyncPostgresStorage(AsyncStorage):
    """:class:`~agentlog.PostgresStorage`, async: every write on one writer thread.

    Open it with ``await AsyncPostgresStorage.open(conninfo, schema=...)``
    (connecting and migrating off the loop), or wrap an open
    :class:`~agentlog.PostgresStorage`. Reads run on the loop: one round trip
    each.
    """

    def __init__(self, storage: PostgresStorage) -> None:
        super().__init__(storage)
        self._postgres = storage

    @classmethod
    async def open(
        cls,
        target: str | ConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        **options: Any,
    ) -> AsyncPostgresStorage:
        """Open (creating or migrating forward) the store in ``schema``, off the loop."""
        opener = functools.partial(PostgresStorage.open, target, schema=schema, **options)
        # Cancelled while it opens: the opened storage is closed, not leaked.
        return cls(await off_loop(opener, abandon=PostgresStorage.close))
