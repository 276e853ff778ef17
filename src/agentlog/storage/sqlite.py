"""The four stores and the session log together in one SQLite file."""

from __future__ import annotations

import os
import weakref

from ..engine import DEFAULT_WAL_SIZE_LIMIT, Engine, open_database, release_engine
from ..errors import CheckpointerClosedError
from ..files import DEFAULT_FILE_MODE
from ..lifecycle import Closable
from ..log.sqlite import SqliteCheckpointer
from ..stores.artifacts import SqliteArtifactStore
from ..stores.checkpoints import SqliteCheckpointStore
from ..stores.common import DEFAULT_TENANT, StorageHold, check_name
from ..stores.memories import SqliteMemoryStore
from ..stores.sessions import SqliteSessionStore

__all__ = ["SqliteStorage"]


class SqliteStorage(Closable):
    """The four stores in one SQLite file — the same file (and schema) as the session log."""

    def __init__(self, engine: Engine, hold: StorageHold | None = None) -> None:
        """The stores on ``engine``, which :meth:`close` closes; or, with the
        ``hold`` it was shared under (see :meth:`open`), gives up."""
        self._engine = engine
        # The stores see the storage closed through its hold (not through the
        # storage: no cycle, so a storage dropped unclosed is freed at once).
        self._hold = StorageHold() if hold is None else hold
        self._faces: weakref.WeakSet[SqliteCheckpointer] = weakref.WeakSet()
        self.sessions = SqliteSessionStore(engine, self._hold)
        self.checkpoints = SqliteCheckpointStore(engine, self._hold)
        self.memory = SqliteMemoryStore(engine, self._hold)
        self.artifacts = SqliteArtifactStore(engine, self._hold)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "normal",
        busy_timeout_ms: int = 5000,
        engine: str | None = None,
        wal_size_limit: int = DEFAULT_WAL_SIZE_LIMIT,
        file_mode: int = DEFAULT_FILE_MODE,
        read_only: bool = False,
        create: bool = True,
    ) -> SqliteStorage:
        """Open (creating or migrating forward) the database at ``path``; a file
        it creates gets ``file_mode`` (the owner's only unless told otherwise).

        ``read_only=True`` opens an existing agentlog database to read:
        nothing is created, migrated or written, and every write raises
        :class:`StorageUnavailableError`. ``create=False`` opens an existing
        one to read and write but never creates one. With either, a missing
        file raises :class:`StorageNotFoundError`, one that holds no agentlog
        database :class:`SchemaVersionError` (as for :class:`SqliteCheckpointer`).
        """
        hold = StorageHold()
        opened = open_database(
            path,
            read_only=read_only,
            create=create,
            engine=engine,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            wal_size_limit=wal_size_limit,
            file_mode=file_mode,
            holder=hold,
        )
        return cls(opened, hold)

    @property
    def engine(self) -> str:
        """The engine the stores run on: ``"c"`` or ``"python"``."""
        return self._engine.name

    def checkpointer(self, tenant: str = DEFAULT_TENANT) -> SqliteCheckpointer:
        """The Checkpointer face of this file's session log, for ``tenant``.

        It shares this storage's engine (one writer connection for both
        faces) and closes with it; closing the checkpointer alone releases
        nothing.
        """
        if self.closed:
            raise CheckpointerClosedError("the storage is closed")
        face = SqliteCheckpointer.on_engine(
            self._engine, check_name("tenant", tenant), keep=self._hold
        )
        self._faces.add(face)
        return face

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._hold.closed or self._engine.closed

    def close(self) -> None:
        """Close the database (give up this storage's hold on it: the process's
        other holders keep it open); later use of the stores and of the
        checkpointers handed out raises :class:`CheckpointerClosedError`."""
        if self._hold.closed:
            return
        self._hold.closed = True
        for face in list(self._faces):
            face.close()
        release_engine(self._engine, self._hold)  # (an engine not shared: closed)
