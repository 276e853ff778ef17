"""The four tenant-scoped stores beside the session log (ADR-004).

Sessions (:class:`SessionStore`, the tenant-aware face of the log), run
checkpoints (:class:`CheckpointStore`), long-term memory
(:class:`MemoryStore`) and content-addressed artifacts
(:class:`ArtifactStore`), each written once on row primitives that an
in-memory and a SQLite implementation supply, with compare-and-set
revisions. :class:`InMemoryStorage`, :class:`SqliteStorage` and
:class:`PostgresStorage`, which open the four together with the log's face,
live in :mod:`agentlog.storage`; they are named here too, and imported when
first named (the stores never import the log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .artifacts import ArtifactInfo, ArtifactStore, VerifyingReader
from .checkpoints import RUN_STATUSES, SIDE_EFFECT_STATES, Checkpoint, CheckpointStore, SideEffect
from .common import DEFAULT_TENANT, MAX_PAGE
from .memories import MemoryRecord, MemoryStore
from .sessions import SessionLoad, SessionRecord, SessionStore, Snapshot
from .storage import Storage

if TYPE_CHECKING:
    from ..storage import InMemoryStorage, PostgresStorage, SqliteStorage

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
    "PostgresStorage",
    "SessionLoad",
    "SessionRecord",
    "SessionStore",
    "SideEffect",
    "Snapshot",
    "SqliteStorage",
    "Storage",
    "VerifyingReader",
]


# The compositions import the log, which imports the stores: they are named
# here for the callers that know them as agentlog.stores.*, and imported then.
__getattr__ = lazy_names(
    __name__,
    {
        "InMemoryStorage": "..storage",
        "PostgresStorage": "..storage",
        "SqliteStorage": "..storage",
    },
)
