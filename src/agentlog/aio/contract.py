"""The async contract of the session log: the seed's shape (coroutines, async reads)."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterable
from typing import Any, Literal, Protocol, overload, runtime_checkable

from .. import events as E
from ..events import SessionEvent, SessionInfo, SessionListing, SessionMetadata, StoredEvent

__all__ = ["AsyncCheckpointer", "AsyncLineageCheckpointer", "AsyncMetadataCheckpointer"]


@runtime_checkable
class AsyncCheckpointer(Protocol):
    """:class:`agentlog.Checkpointer` for asyncio: the same rules, awaited.

    The conformance suite :class:`agentlog.testing.AsyncCheckpointerConformance`
    checks that an object behaves like one.
    """

    # Every method's signature is the sync contract's, awaited, spelled again
    # as it must be (a Protocol lends no signature, and no async one can be
    # derived from a sync one); the built-in twins take append, follow,
    # follow_json and list from face.py.
    async def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent],
        expected_head: int | None = None,
        *,
        key: str | None = None,
    ) -> int:
        """Append all events or none; return the new head (a stale head conflicts;
        a ``key`` the session holds writes nothing and returns the first head)."""
        ...

    def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> AsyncIterator[StoredEvent]:
        """Yield events with seq > ``since_seq`` in seq order (at most ``limit``)."""
        ...

    def follow(
        self, session_id: str, since_seq: int = 0, *, poll_interval: float = ...
    ) -> AsyncIterator[StoredEvent]:
        """Yield events with seq > ``since_seq`` as they are committed, until cancelled."""
        ...

    async def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        ...

    async def list(self) -> builtins.list[SessionInfo]:
        """Every session, most recently active first."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove the session and its events; idempotent."""
        ...

    async def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove events after ``to_seq``; return the new head."""
        ...

    async def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        """Create ``new_session_id`` holding events 1..``at_seq``; return its head."""
        ...

    async def aclose(self) -> None:
        """Finish queued writes and release resources; later calls raise."""
        ...


@runtime_checkable
# list()'s overloads are the public signature: mypy needs them here and on aio/face.py.
class AsyncMetadataCheckpointer(AsyncCheckpointer, Protocol):
    """An :class:`AsyncCheckpointer` that also keeps session metadata, as every
    built-in async backend does (the twin of
    :class:`agentlog.log.MetadataCheckpointer`)."""

    @overload
    async def list(self) -> builtins.list[SessionInfo]: ...

    @overload
    async def list(self, *, with_metadata: Literal[False]) -> builtins.list[SessionInfo]: ...

    @overload
    async def list(self, *, with_metadata: Literal[True]) -> builtins.list[SessionListing]: ...

    async def list(
        self, *, with_metadata: bool = False
    ) -> builtins.list[SessionInfo] | builtins.list[SessionListing]:
        """Every session, most recently active first (with ``with_metadata=True``,
        :class:`~agentlog.SessionListing` rows)."""
        ...

    async def metadata(self, session_id: str) -> SessionMetadata:
        """The session's metadata and revision; ``(None, 0)`` for an unknown session."""
        ...

    async def set_metadata(self, session_id: str, value: Any, expected_revision: int) -> int:
        """Compare-and-set the metadata on the session's revision; return the new one."""
        ...


@runtime_checkable
class AsyncLineageCheckpointer(AsyncCheckpointer, Protocol):
    """An :class:`AsyncCheckpointer` that records fork lineage, as every built-in
    async backend does (the twin of :class:`agentlog.log.LineageCheckpointer`)."""

    async def lineage(self, session_id: str) -> E.ForkOrigin | None:
        """Where ``session_id`` was forked from; None when it was not (or is unknown)."""
        ...

    async def forks(self, session_id: str) -> builtins.list[E.Fork]:
        """The sessions forked from ``session_id``, by fork seq then id."""
        ...
