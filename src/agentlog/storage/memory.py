"""The four stores and the session log together in this process's memory."""

from __future__ import annotations

import weakref

from ..errors import CheckpointerClosedError
from ..lifecycle import Closable
from ..log.memory import MemoryCheckpointer, MemoryLog
from ..stores.artifacts import InMemoryArtifactStore
from ..stores.checkpoints import InMemoryCheckpointStore
from ..stores.common import DEFAULT_TENANT, check_name
from ..stores.memories import InMemoryMemoryStore
from ..stores.sessions import InMemorySessionStore

__all__ = ["InMemoryStorage"]


class InMemoryStorage(Closable):
    """The four stores in this process's memory: for tests and ephemeral runs.

    As in :class:`SqliteStorage`, the session log is one: the ``SessionStore``
    and the Checkpointer faces that :meth:`checkpointer` hands out read and
    write the same sessions (one :class:`~agentlog.engine.memory.MemoryLog`).
    """

    def __init__(self) -> None:
        self._log = MemoryLog()
        self._faces: weakref.WeakSet[MemoryCheckpointer] = weakref.WeakSet()
        self.sessions = InMemorySessionStore(self._log)
        self.checkpoints = InMemoryCheckpointStore()
        self.memory = InMemoryMemoryStore()
        self.artifacts = InMemoryArtifactStore()
        self._closed = False

    def checkpointer(self, tenant: str = DEFAULT_TENANT) -> MemoryCheckpointer:
        """The Checkpointer face of this storage's session log, for ``tenant``: the
        snapshot-less face of the same sessions ``sessions`` holds for it.

        It closes with the storage; closing the checkpointer alone releases nothing.
        """
        if self._closed:
            raise CheckpointerClosedError("the storage is closed")
        face = MemoryCheckpointer.on_log(self._log, check_name("tenant", tenant))
        self._faces.add(face)
        return face

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Nothing to release; marks the storage closed, like :class:`SqliteStorage`,
        and closes the checkpointers handed out (later use of them raises
        :class:`CheckpointerClosedError`)."""
        self._closed = True
        for face in list(self._faces):
            face.close()
