"""The async layer's port to a checkpointer's writer: :class:`WriterPort`.

What :mod:`agentlog.aio` needs of a checkpointer beyond the contract, kept off
the checkpointer's public face; :meth:`BaseCheckpointer.writer_port
<agentlog.log.contract.BaseCheckpointer.writer_port>` hands out a
:class:`BoundWriterPort`.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from ..events import EncodedBatch, RawEvent, SessionEvent, StoredEvent

if TYPE_CHECKING:
    from ..engine import AppendCompletions
    from .follow import Anchor, Expected

__all__ = ["WOULD_WAIT", "BoundWriterPort", "PreparedAppend", "WouldWait", "WriterPort"]


class PreparedAppend(NamedTuple):
    """An append checked and encoded by :meth:`WriterPort.prepare_append`."""

    session_id: str
    batch: EncodedBatch
    expected_head: int | None


_T = TypeVar("_T")
_E = TypeVar("_E", StoredEvent, RawEvent)


class WouldWait:
    """What :meth:`WriterPort.try_read` returns for a read it did not run:
    it would have waited for a write under way."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "WouldWait()"


#: The one :class:`WouldWait`.
WOULD_WAIT = WouldWait()


class WriterPort(Protocol):
    """What the async layer (:mod:`agentlog.aio`) needs of a checkpointer beyond
    the contract: appends prepared apart from their writing, written in
    groups (or without waiting, or queued to the backend's own writer
    thread), reads that must not wait for a write, and a follower's steps.

    The async twins reach a checkpointer's writer only through the port
    :meth:`BaseCheckpointer.writer_port` gives them.
    """

    def prepare_append(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> PreparedAppend:
        """Check and encode an append without writing it."""
        ...

    def append_prepared(self, appends: Sequence[PreparedAppend]) -> builtins.list[int | Exception]:
        """Write prepared appends, each on its own terms (one transaction where it can)."""
        ...

    def try_append_prepared(
        self, appends: Sequence[PreparedAppend]
    ) -> builtins.list[int | Exception] | None:
        """:meth:`append_prepared` only if it need not wait; else None, nothing written."""
        ...

    def append_completions(self) -> AppendCompletions | None:
        """A channel to the backend's own writer thread, or None where it has none."""
        ...

    def queue_prepared(self, prepared: PreparedAppend, completions: AppendCompletions) -> object:
        """Queue a non-empty prepared append to that writer thread; its handle."""
        ...

    def notify_commit(self) -> None:
        """Wake this process's followers after a write."""
        ...

    def try_read(self, read: Callable[[], _T]) -> _T | WouldWait:
        """``read()``, unless it would wait for a write under way."""
        ...

    def change_token(self, session_id: str) -> Hashable:
        """A cheap token that changes when another process writes the session."""
        ...

    def follow_page(
        self,
        session_id: str,
        after_seq: int,
        anchor: Anchor | Expected | None,
        limit: int | None = None,
    ) -> builtins.list[StoredEvent]:
        """One step of a follower: up to a page of events after ``after_seq``
        (no more than ``limit`` when set), the event at it checked against
        ``anchor`` (see ``follow.Look``)."""
        ...

    def follow_json_page(
        self,
        session_id: str,
        after_seq: int,
        anchor: Anchor | Expected | None,
        limit: int | None = None,
    ) -> builtins.list[RawEvent]:
        """:meth:`follow_page`, the events' JSON not decoded (``follow_json``'s step)."""
        ...


class _PrepareAppend(Protocol):
    """The type of :meth:`WriterPort.prepare_append` (its default argument kept)."""

    def __call__(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> PreparedAppend: ...


class _FollowPage(Protocol[_E]):
    """The type of :meth:`WriterPort.follow_page` and ``follow_json_page``."""

    def __call__(
        self,
        session_id: str,
        after_seq: int,
        anchor: Anchor | Expected | None,
        limit: int | None = None,
    ) -> builtins.list[_E]: ...


class _TryRead(Protocol):
    """The type of :meth:`WriterPort.try_read` (generic in what it reads)."""

    def __call__(self, read: Callable[[], _T]) -> _T | WouldWait: ...


@dataclass(slots=True)
class BoundWriterPort:
    """A :class:`BaseCheckpointer`'s :class:`WriterPort`: its underscored
    methods, bound (a plain holder, so that a test may replace one)."""

    prepare_append: _PrepareAppend
    append_prepared: Callable[[Sequence[PreparedAppend]], builtins.list[int | Exception]]
    try_append_prepared: Callable[[Sequence[PreparedAppend]], builtins.list[int | Exception] | None]
    append_completions: Callable[[], AppendCompletions | None]
    queue_prepared: Callable[[PreparedAppend, AppendCompletions], object]
    notify_commit: Callable[[], None]
    try_read: _TryRead
    change_token: Callable[[str], Hashable]
    follow_page: _FollowPage[StoredEvent]
    follow_json_page: _FollowPage[RawEvent]
