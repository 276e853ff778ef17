"""The four stores and the session log together in one PostgreSQL schema.

Needs ``pip install "agentlog[postgres]"``; imported on first use.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from ..engine.postgres import DEFAULT_SCHEMA, PostgresDatabase, PostgresOptions
from ..errors import CheckpointerClosedError
from ..lifecycle import Closable
from ..log.postgres import PostgresCheckpointer
from ..stores.common import DEFAULT_TENANT, check_name
from ..stores.postgres import (
    PostgresArtifactStore,
    PostgresCheckpointStore,
    PostgresMemoryStore,
    PostgresSessionStore,
)

__all__ = ["PostgresStorage"]


class PostgresStorage(Closable):
    """The four stores in one PostgreSQL schema — the session log's own.

    ``PostgresStorage.open(conninfo_or_pool, schema=..., ...)`` takes the
    options of :class:`~agentlog.PostgresCheckpointer` (pool sizes, timeouts);
    :meth:`checkpointer` is the Checkpointer face of the same log, on the same
    pool.
    """

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        self.sessions = PostgresSessionStore(database)
        self.checkpoints = PostgresCheckpointStore(database)
        self.memory = PostgresMemoryStore(database)
        self.artifacts = PostgresArtifactStore(database)

    @classmethod
    def open(
        cls,
        target: str | ConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        **options: Any,
    ) -> PostgresStorage:
        """Open (creating or migrating forward) the store in ``schema``."""
        return cls(PostgresDatabase(target, options=PostgresOptions(schema=schema, **options)))

    @property
    def database(self) -> PostgresDatabase:
        """The store underneath (its pool and schema)."""
        return self._db

    def checkpointer(self, tenant: str = DEFAULT_TENANT) -> PostgresCheckpointer:
        """The Checkpointer face of this schema's session log, for ``tenant``.

        It shares this storage's pool and closes with it; closing the
        checkpointer alone releases nothing.
        """
        if self.closed:
            raise CheckpointerClosedError("the storage is closed")
        return PostgresCheckpointer.on_database(self._db, check_name("tenant", tenant))

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._db.closed

    def close(self) -> None:
        """Close the pool (if it was made here); later use raises."""
        self._db.close()
