"""agentlog: an append-only, event-sourced storage engine for AI-agent sessions.

Every session is a log of events behind one small contract
(:class:`Checkpointer`): append with an expected head, read forward, head,
list, delete, truncate and fork. Backends: :class:`MemoryCheckpointer`,
:class:`FileCheckpointer` (JSONL files), :class:`SqliteCheckpointer` (the
embedded default) and :class:`PostgresCheckpointer` (imported on first use:
it needs ``agentlog[postgres]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .activity import ActivityCursor, SessionPage
from .engine import engine_info
from .errors import (
    AgentlogError,
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    DirectoryLockedError,
    EventsPrunedError,
    IdempotencyKeyError,
    InvalidEventError,
    InvalidSessionIdError,
    OutcomeUnknownError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionTruncatedError,
    StorageConflictError,
    StorageDataError,
    StorageNotFoundError,
    StorageUnavailableError,
    UnserializableEventError,
)
from .events import (
    EVENT_TYPES,
    MAX_EVENT_BYTES,
    MAX_SESSION_ID_LENGTH,
    REQUIRED_FIELDS,
    Fork,
    ForkOrigin,
    RawEvent,
    SessionEvent,
    SessionInfo,
    SessionListing,
    SessionMetadata,
    StoredEvent,
    check_session_id,
    store_events,
)
from .fold import Folder, fold_events
from .lazy import lazy_names
from .log import (
    BaseCheckpointer,
    Checkpointer,
    FileCheckpointer,
    MemoryCheckpointer,
    Session,
    SqliteCheckpointer,
    legacy_store_adapter,
)
from .storage import InMemoryStorage, SqliteStorage
from .stores import (
    DEFAULT_TENANT,
    ArtifactInfo,
    ArtifactStore,
    Checkpoint,
    CheckpointStore,
    MemoryRecord,
    MemoryStore,
    SessionLoad,
    SessionRecord,
    SessionStore,
    SideEffect,
    Snapshot,
    Storage,
)

if TYPE_CHECKING:
    from .log.postgres import PostgresCheckpointer
    from .storage.postgres import PostgresStorage

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TENANT",
    "EVENT_TYPES",
    "MAX_EVENT_BYTES",
    "MAX_SESSION_ID_LENGTH",
    "REQUIRED_FIELDS",
    "ActivityCursor",
    "AgentlogError",
    "ArtifactInfo",
    "ArtifactStore",
    "BaseCheckpointer",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointStore",
    "Checkpointer",
    "CheckpointerClosedError",
    "CorruptDatabaseError",
    "DirectoryLockedError",
    "EventsPrunedError",
    "FileCheckpointer",
    "Folder",
    "Fork",
    "ForkOrigin",
    "IdempotencyKeyError",
    "InMemoryStorage",
    "InvalidEventError",
    "InvalidSessionIdError",
    "MemoryCheckpointer",
    "MemoryRecord",
    "MemoryStore",
    "OutcomeUnknownError",
    "PostgresCheckpointer",
    "PostgresStorage",
    "RawEvent",
    "SchemaVersionError",
    "Session",
    "SessionEvent",
    "SessionExistsError",
    "SessionInfo",
    "SessionListing",
    "SessionLoad",
    "SessionMetadata",
    "SessionNotFoundError",
    "SessionPage",
    "SessionRecord",
    "SessionStore",
    "SessionTruncatedError",
    "SideEffect",
    "Snapshot",
    "SqliteCheckpointer",
    "SqliteStorage",
    "Storage",
    "StorageConflictError",
    "StorageDataError",
    "StorageNotFoundError",
    "StorageUnavailableError",
    "StoredEvent",
    "UnserializableEventError",
    "__version__",
    "check_session_id",
    "engine_info",
    "fold_events",
    "legacy_store_adapter",
    "store_events",
]


# The PostgreSQL classes need psycopg: each is imported when first named.
__getattr__ = lazy_names(
    __name__,
    {"PostgresCheckpointer": ".log.postgres", "PostgresStorage": ".storage.postgres"},
)
