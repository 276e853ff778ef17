"""The public face the async checkpointers share, written once.

:class:`~.checkpointer.AsyncBaseCheckpointer` (over a synchronous backend)
and :class:`~.postgres.AsyncPostgresCheckpointer` (native psycopg) reach
the storage in different ways but offer the same calls: the signatures,
their checks and their documentation live here, and each class supplies
how it appends, lists and follows.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Literal, overload

from ..errors import CheckpointerClosedError
from ..events import RawEvent, SessionEvent, SessionInfo, SessionListing, StoredEvent, check_flag
from ..lifecycle import AsyncClosable
from ..log import DEFAULT_POLL_INTERVAL

__all__ = ["AsyncLogFace"]


class AsyncLogFace(AsyncClosable):
    """What both built-in async checkpointers offer alike (``append``,
    ``follow``, ``follow_json``, ``list``, ``closed``): the signatures, checks
    and documentation, over the operations each supplies (the ``_face_``
    methods, which raise ``NotImplementedError`` here, as
    ``lifecycle.AsyncClosable``'s do)."""

    #: True once the object is closed or closing: later calls raise.
    _closed: bool

    @property
    def closed(self) -> bool:
        """Whether closing has begun (later calls raise)."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(f"this {type(self).__name__} is closed")

    # The signature is AsyncCheckpointer's (aio/contract.py); mypy checks that they agree.
    async def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent],
        expected_head: int | None = None,
        *,
        key: str | None = None,
    ) -> int:
        """Append ``events`` atomically after the head; return the new head.

        The same contract as :meth:`agentlog.Checkpointer.append`, awaited.
        Appends queued together are written in one transaction; each returns
        after the commit that holds it, and a conflict refuses only its own
        append. Cancelled while it waits: if its group had not been handed
        on, nothing is written; if it had, it is written or refused as a
        whole — ``head()`` tells which. A keyed append is a transaction of
        its own (its key's look-up goes with it), not part of a group, and
        is resolved as the synchronous one is when its connection is lost.
        """
        self._check_open()
        return await self._face_append(session_id, events, expected_head, key)

    async def _face_append(
        self,
        session_id: str,
        events: Iterable[SessionEvent],
        expected_head: int | None,
        key: str | None,
    ) -> int:
        """Write one append (the object is open; the arguments are unchecked)."""
        raise NotImplementedError

    def follow(
        self,
        session_id: str,
        since_seq: int = 0,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> AsyncIterator[StoredEvent]:
        """Yield the events after ``since_seq`` as they are committed, forever.

        The rules of :meth:`agentlog.BaseCheckpointer.follow`, awaited: it
        never blocks the loop, and it can be cancelled at any ``await`` —
        stopping iterating, ``aclose()`` or cancelling the task leaves no
        task or connection behind once the last follower stops. This
        object's commits wake it at once; other processes' are noticed
        within ``poll_interval`` seconds (on PostgreSQL at once, through
        ``NOTIFY``, while the listening connection is up). Closing the
        checkpointer ends it with :class:`CheckpointerClosedError`; a
        truncate below what it yielded with :class:`SessionTruncatedError`.
        """
        return self._face_follow(session_id, since_seq, poll_interval)

    def follow_json(
        self,
        session_id: str,
        since_seq: int = 0,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_bytes: int | None = None,
        expect: Callable[[RawEvent], bool] | None = None,
    ) -> AsyncIterator[RawEvent]:
        """:meth:`follow`, each event's JSON as stored, not decoded (see
        :meth:`agentlog.BaseCheckpointer.read_json`): what a server passing
        a live session on (a Server-Sent Events tail) writes out as it is.

        ``max_bytes`` bounds what one read holds: the first read takes one
        event, each later one as many as ``max_bytes`` of stored JSON hold at
        the largest event seen so far (one at least), so a follower of
        events of tens of megabytes holds one at a time. ``expect``, for a
        reader resuming after ``since_seq``, checks the event at
        ``since_seq`` (called on a worker thread): when it returns False
        (that event is not the one the reader saw: the session was
        truncated and appended to again) the follower raises
        :class:`SessionTruncatedError` with ``rewritten`` set, as it does
        for a rewrite under it."""
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
        ):
            raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes!r}")
        if expect is not None and not callable(expect):
            raise TypeError(f"expect must be callable or None, got {type(expect).__name__}")
        return self._face_follow_json(session_id, since_seq, poll_interval, max_bytes, expect)

    def _face_follow(
        self, session_id: str, since_seq: int, poll_interval: float
    ) -> AsyncIterator[StoredEvent]:
        """The follower :meth:`follow` returns (its arguments unchecked)."""
        raise NotImplementedError

    def _face_follow_json(
        self,
        session_id: str,
        since_seq: int,
        poll_interval: float,
        max_bytes: int | None = None,
        expect: Callable[[RawEvent], bool] | None = None,
    ) -> AsyncIterator[RawEvent]:
        """The follower :meth:`follow_json` returns (its arguments unchecked)."""
        raise NotImplementedError

    # The overloads of contract.AsyncMetadataCheckpointer.list again: mypy types
    # a call on a checkpointer (and the docs show its list()) by the class's own.
    @overload
    async def list(self) -> builtins.list[SessionInfo]: ...

    @overload
    async def list(self, *, with_metadata: Literal[False]) -> builtins.list[SessionInfo]: ...

    @overload
    async def list(self, *, with_metadata: Literal[True]) -> builtins.list[SessionListing]: ...

    async def list(
        self, *, with_metadata: bool = False
    ) -> builtins.list[SessionInfo] | builtins.list[SessionListing]:
        """Every session (on PostgreSQL, the tenant's), most recently active first
        (with ``with_metadata=True``, :class:`~agentlog.SessionListing` rows: see
        :meth:`agentlog.BaseCheckpointer.list`)."""
        with_metadata = check_flag("with_metadata", with_metadata)
        if with_metadata:
            return await self._face_listings()
        return await self._face_sessions()

    async def _face_sessions(self) -> builtins.list[SessionInfo]:
        """``list()``'s rows."""
        raise NotImplementedError

    async def _face_listings(self) -> builtins.list[SessionListing]:
        """``list(with_metadata=True)``'s rows."""
        raise NotImplementedError
