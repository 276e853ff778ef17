"""The four stores together (ADR-004): the :class:`Storage` protocol.

Its implementations, which also hand out the log's Checkpointer face of the
same sessions, live above both the log and the stores, in
:mod:`agentlog.storage`. Callers depend only on the store they use (each has
its own protocol).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .artifacts import ArtifactStore
from .checkpoints import CheckpointStore
from .memories import MemoryStore
from .sessions import SessionStore

__all__ = ["Storage"]


@runtime_checkable
class Storage(Protocol):
    """The four stores, opened and closed together."""

    sessions: SessionStore
    checkpoints: CheckpointStore
    memory: MemoryStore
    artifacts: ArtifactStore

    def close(self) -> None:
        """Release the stores (a closed SQLite storage refuses further use)."""
        ...
