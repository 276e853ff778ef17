"""The session log: the Checkpointer contract and its backends.

:class:`Checkpointer` is the contract (append with an expected head, read
forward, head, list, delete, truncate, fork); :class:`BaseCheckpointer`
checks arguments once for every backend; the backends are
:class:`MemoryCheckpointer`, :class:`FileCheckpointer` (JSONL files),
:class:`SqliteCheckpointer` (on the engine layer, :mod:`agentlog.engine`),
:class:`PostgresCheckpointer` (imported on first use: it needs psycopg) and
the legacy adapter over role/content message arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .contract import (
    DEFAULT_POLL_INTERVAL,
    BaseCheckpointer,
    Checkpointer,
    CommitSignal,
    MetadataCheckpointer,
    PreparedAppend,
    WouldWait,
    WriterPort,
    check_fork,
    check_revision,
    decode_metadata,
    listings,
    metadata_conflict,
)
from .file import (
    METADATA_SUFFIX,
    FileCheckpointer,
    is_file_store,
    read_metadata_file,
    read_session_file,
)
from .follow import (
    AsyncFollowPort,
    FollowPort,
    follow_pages,
    follow_pages_async,
    follow_steps,
    has_new_events,
)
from .handle import Session, SessionView
from .legacy import legacy_store_adapter, message_event
from .memory import MemoryCheckpointer
from .sqlite import SqliteCheckpointer

if TYPE_CHECKING:
    from .postgres import PostgresCheckpointer

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "METADATA_SUFFIX",
    "AsyncFollowPort",
    "BaseCheckpointer",
    "Checkpointer",
    "CommitSignal",
    "FileCheckpointer",
    "FollowPort",
    "MemoryCheckpointer",
    "MetadataCheckpointer",
    "PostgresCheckpointer",
    "PreparedAppend",
    "Session",
    "SessionView",
    "SqliteCheckpointer",
    "WouldWait",
    "WriterPort",
    "check_fork",
    "check_revision",
    "decode_metadata",
    "follow_pages",
    "follow_pages_async",
    "follow_steps",
    "has_new_events",
    "is_file_store",
    "legacy_store_adapter",
    "listings",
    "message_event",
    "metadata_conflict",
    "read_metadata_file",
    "read_session_file",
]


# PostgreSQL's backend needs psycopg: it is imported when first named.
__getattr__ = lazy_names(__name__, {"PostgresCheckpointer": ".postgres"})
