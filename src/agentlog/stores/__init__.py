"""The four tenant-scoped stores beside the session log (ADR-004).

Sessions (:class:`SessionStore`, the tenant-aware face of the log), run
checkpoints (:class:`CheckpointStore`), long-term memory
(:class:`MemoryStore`) and content-addressed artifacts
(:class:`ArtifactStore`), each written once on row primitives that an
in-memory and a SQLite implementation supply, with compare-and-set
revisions. :class:`InMemoryStorage` and :class:`SqliteStorage` open the four
together.
"""

from __future__ import annotations

from .artifacts import ArtifactInfo, ArtifactStore, VerifyingReader
from .checkpoints import RUN_STATUSES, SIDE_EFFECT_STATES, Checkpoint, CheckpointStore, SideEffect
from .common import DEFAULT_TENANT, MAX_PAGE
from .memory import MemoryRecord, MemoryStore
from .sessions import SessionLoad, SessionRecord, SessionStore, Snapshot
from .storage import InMemoryStorage, SqliteStorage, Storage

__all__ = [
    "DEFAULT_TENANT",
    "MAX_PAGE",
    "RUN_STATUSES",
    "SIDE_EFFECT_STATES",
    "ArtifactInfo",
    "ArtifactStore",
    "Checkpoint",
    "CheckpointStore",
    "InMemoryStorage",
    "MemoryRecord",
    "MemoryStore",
    "SessionLoad",
    "SessionRecord",
    "SessionStore",
    "SideEffect",
    "Snapshot",
    "SqliteStorage",
    "Storage",
    "VerifyingReader",
]
