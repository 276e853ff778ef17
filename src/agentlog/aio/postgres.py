"""The async twin of the PostgreSQL backend (imported on first use: it needs psycopg)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from ..log.postgres import PostgresCheckpointer
from .checkpointer import AsyncBaseCheckpointer

__all__ = ["AsyncPostgresCheckpointer"]


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
