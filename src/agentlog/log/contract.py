"""The Checkpointer contract: the protocols every backend meets.

The base class the built-in backends share is :mod:`.base`'s; its names are
named here too, where callers have always found them.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Protocol,
    overload,
    runtime_checkable,
)

from ..engine.commits import CommitSignal
from ..events import (
    Fork,
    ForkOrigin,
    SessionEvent,
    SessionInfo,
    SessionListing,
    SessionMetadata,
    StoredEvent,
)
from .base import (
    DEFAULT_POLL_INTERVAL,
    BaseCheckpointer,
    check_fork,
    check_revision,
    decode_metadata,
    listings,
    metadata_conflict,
)
from .writer_port import WOULD_WAIT, PreparedAppend, WouldWait, WriterPort

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "WOULD_WAIT",
    "BaseCheckpointer",
    "Checkpointer",
    "CommitSignal",
    "LineageCheckpointer",
    "MetadataCheckpointer",
    "PreparedAppend",
    "WouldWait",
    "WriterPort",
    "check_fork",
    "check_revision",
    "decode_metadata",
    "listings",
    "metadata_conflict",
]


@runtime_checkable
class Checkpointer(Protocol):
    """An append-only, per-session event log with optimistic concurrency.

    Any object with these methods is a checkpointer; the conformance suite in
    :mod:`agentlog.testing` checks that it behaves like one.
    """

    def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent],
        expected_head: int | None = None,
        *,
        key: str | None = None,
    ) -> int:
        """Append all events or none; return the new head.

        With ``expected_head`` and another current head, raise
        :class:`CheckpointConflictError` and write nothing. With a ``key``
        the session already holds, write nothing and return the first
        append's head (:class:`IdempotencyKeyError` if its events differ).
        """
        ...

    def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> Iterator[StoredEvent]:
        """Yield events with seq > ``since_seq`` in seq order (at most ``limit``)."""
        ...

    def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        ...

    def list(self) -> builtins.list[SessionInfo]:
        """Every session, most recently active first."""
        ...

    def delete(self, session_id: str) -> None:
        """Remove the session and its events; idempotent."""
        ...

    def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove events after ``to_seq``; return the new head."""
        ...

    def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        """Create ``new_session_id`` holding events 1..``at_seq``; return its head."""
        ...

    def close(self) -> None:
        """Release resources; further use raises :class:`CheckpointerClosedError`."""
        ...

    def __enter__(self) -> Checkpointer:
        """Return the checkpointer itself."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the checkpointer."""
        ...


# list()'s overloads are the public signature: mypy needs them here and on each implementation.
@runtime_checkable
class MetadataCheckpointer(Checkpointer, Protocol):
    """A :class:`Checkpointer` that also keeps session metadata, as every
    built-in backend does (:class:`BaseCheckpointer` declares it).

    A separate protocol, so that a checkpointer written to the contract
    without it is still a :class:`Checkpointer` everywhere one is taken.
    """

    @overload
    def list(self) -> builtins.list[SessionInfo]: ...

    @overload
    def list(self, *, with_metadata: Literal[False]) -> builtins.list[SessionInfo]: ...

    @overload
    def list(self, *, with_metadata: Literal[True]) -> builtins.list[SessionListing]: ...

    def list(
        self, *, with_metadata: bool = False
    ) -> builtins.list[SessionInfo] | builtins.list[SessionListing]:
        """Every session, most recently active first (with ``with_metadata=True``,
        :class:`SessionListing` rows that add each one's metadata and revision)."""
        ...

    def metadata(self, session_id: str) -> SessionMetadata:
        """The session's metadata and revision; ``(None, 0)`` for an unknown session."""
        ...

    def set_metadata(self, session_id: str, value: Any, expected_revision: int) -> int:
        """Replace the metadata if the session is at ``expected_revision``; return
        the new revision (a stale revision raises :class:`StorageConflictError`)."""
        ...


@runtime_checkable
class LineageCheckpointer(Checkpointer, Protocol):
    """A :class:`Checkpointer` that records where each fork came from, as every
    built-in backend but the legacy adapter does (:class:`BaseCheckpointer`
    declares it). A separate protocol, as :class:`MetadataCheckpointer` is."""

    def lineage(self, session_id: str) -> ForkOrigin | None:
        """Where ``session_id`` was forked from; None when it was not (or is unknown)."""
        ...

    def forks(self, session_id: str) -> builtins.list[Fork]:
        """The sessions forked from ``session_id``, by fork seq then id."""
        ...
