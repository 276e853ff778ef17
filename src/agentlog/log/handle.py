"""A session handle for agent loops: resume by replay, track the head, fold as you go.

Built only on the public :class:`~agentlog.Checkpointer` contract, so it works
on every backend, a user's own included. :class:`SessionView` is the state it
keeps (shared with the async twin, :class:`agentlog.aio.AsyncSession`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import StorageConflictError
from ..events import (
    Fork,
    ForkOrigin,
    SessionEvent,
    SessionMetadata,
    StoredEvent,
    check_session_id,
    store_events,
)
from ..fold import Folder
from .contract import Checkpointer, LineageCheckpointer, MetadataCheckpointer

__all__ = ["Session", "SessionView"]


class SessionView:
    """What a session handle knows: the folded conversation at a head, and metadata.

    It is kept up to date event by event (one :class:`~agentlog.Folder`),
    never re-folded from the start unless the log was truncated under it.
    """

    def __init__(self, session_id: str, shape: str = "anthropic") -> None:
        self._session_id = check_session_id(session_id)
        self._folder = Folder(shape)
        self._metadata = SessionMetadata(None, 0)
        # The type and content of the event at the head: how a reload tells
        # that the log it folded is still the log (not truncated under it).
        self._last: tuple[str, dict[str, Any]] | None = None

    # Properties, alike in shape (as on the checkpointers): read-only views of
    # the folded state, one small property each.
    @property
    def session_id(self) -> str:
        """The session this handle is on."""
        return self._session_id

    @property
    def shape(self) -> str:
        """The message shape of :attr:`messages` (``"anthropic"`` or ``"openai"``)."""
        return self._folder.shape

    @property
    def head(self) -> int:
        """The seq of the last event this handle has folded: the ``expected_head``
        of its next append."""
        return self._folder.seq

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation through :attr:`head`, as :func:`~agentlog.fold_events`
        gives it (a new list)."""
        return self._folder.messages

    @property
    def pending_tool_calls(self) -> list[dict[str, Any]]:
        """The ``tool_use`` blocks no ``tool_result`` has answered yet, in call
        order (see :class:`~agentlog.Folder`): what to run after a crash."""
        return self._folder.pending_tool_calls

    @property
    def turn(self) -> int:
        """How many ``user`` events the session holds through :attr:`head`
        (``tool_result`` events are not counted; a ``summary`` does not reset it)."""
        return self._folder.turn

    @property
    def metadata(self) -> Any:
        """The session's metadata as this handle last read or set it."""
        return self._metadata.value

    @property
    def metadata_revision(self) -> int:
        """The session's revision when this handle last read or set the metadata."""
        return self._metadata.revision

    def fold(self, events: Iterable[StoredEvent]) -> int:
        """Fold events that follow :attr:`head`; return how many.

        ``ValueError`` if one does not follow (its seq is not the next one).
        """
        count = 0
        for event in events:
            if event.seq != self._folder.seq + 1:
                raise ValueError(
                    f"event {event.seq} does not follow the handle's head {self._folder.seq}"
                )
            self._folder.add(event)
            self._last = (event.type, event.event)
            count += 1
        return count

    def reset(self) -> None:
        """Forget everything folded (the head goes back to 0)."""
        self._folder = Folder(self._folder.shape)
        self._last = None

    def still_at_head(self, at_head: list[StoredEvent]) -> bool:
        """Whether ``at_head`` — what the log now holds at :attr:`head` (a read
        of at most one event after ``head - 1``) — is the event this handle
        folded there: False after a truncate under it (the event is gone, or
        another one took its seq)."""
        if self.head == 0:
            return True
        return len(at_head) == 1 and (at_head[0].type, at_head[0].event) == self._last

    def seen_metadata(self, metadata: SessionMetadata) -> None:
        """Record the metadata and revision just read or written."""
        self._metadata = metadata

    def check_metadata_unchanged(self, current: SessionMetadata) -> None:
        """Raise :class:`StorageConflictError` if ``current`` (just read) holds
        other metadata than this handle last saw."""
        if current.value != self._metadata.value:
            raise StorageConflictError(
                f"session {self._session_id!r}", self._metadata.revision, current.revision
            )

    def stored(self, head: int, events: list[SessionEvent]) -> list[StoredEvent]:
        """``events`` as the log stores them after ``head`` (JSON copies), to fold."""
        return store_events(self._session_id, head, events)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._session_id!r} head={self.head} turn={self.turn}"
            f" pending={len(self._folder.pending_tool_calls)}>"
        )


def _events(events: Iterable[SessionEvent]) -> list[SessionEvent]:
    if isinstance(events, (Mapping, str, bytes)) or not isinstance(events, Iterable):
        raise TypeError(f"events must be a list of event mappings, not {type(events).__name__}")
    return list(events)


class Session(SessionView):
    """A handle on one session of a checkpointer, for an agent loop.

    ``log.session("s_1")`` (or ``Session(log, "s_1")`` on any
    :class:`~agentlog.Checkpointer`) resumes by replay: it reads the log once
    and folds it. From then on:

    * :meth:`append` appends with the handle's own :attr:`head` as
      ``expected_head`` and folds what it wrote — the caller never carries a
      head, and nothing is read or folded again.
    * A :class:`~agentlog.CheckpointConflictError` from :meth:`append` means
      someone else wrote: the handle does not retry and changes nothing.
      :meth:`reload` reads only the events after its head and folds them in;
      the caller then decides what to append.
    * :meth:`reload` also notices a truncate under the handle — the event it
      folded at its head is gone, or another one holds that seq (a truncate
      followed by other appends) — and then rebuilds from the start. It looks
      at that one event only: a truncate whose re-appended events end with
      an identical event at the handle's head is not noticed.
    * :attr:`messages`, :attr:`pending_tool_calls` and :attr:`turn` answer
      from the folded state; :attr:`metadata` is read when the handle opens
      and on each :meth:`reload` (it stays ``None`` on a checkpointer that
      keeps none: one that is not a :class:`~agentlog.log.MetadataCheckpointer`,
      or the legacy adapter).

    Not safe to share between threads: one handle per loop.
    """

    def __init__(self, log: Checkpointer, session_id: str, *, shape: str = "anthropic") -> None:
        super().__init__(session_id, shape)
        self._log = log
        self.reload()

    @property
    def log(self) -> Checkpointer:
        """The checkpointer underneath."""
        return self._log

    def append(self, events: Iterable[SessionEvent]) -> int:
        """Append ``events`` after the handle's head, all or none; return the new head.

        Raises :class:`~agentlog.CheckpointConflictError` (nothing written,
        the handle unchanged) when the log moved on without it: call
        :meth:`reload`, then decide. Bad events raise what
        :meth:`~agentlog.Checkpointer.append` raises, and change nothing.
        """
        batch = _events(events)
        head = self.head
        new_head = self._log.append(self.session_id, batch, expected_head=head)
        self.fold(self.stored(head, batch))
        return new_head

    def reload(self) -> int:
        """Read what others appended since the handle's head and fold it in;
        re-read the metadata. Returns how many events were folded.

        When the log no longer holds, at the handle's head, the event the
        handle folded there (a truncate under it), the handle starts over and
        folds the whole log again.
        """
        log, session_id = self._log, self.session_id
        if self.head and not self.still_at_head(list(log.read(session_id, self.head - 1, 1))):
            self.reset()
        count = self.fold(log.read(session_id, since_seq=self.head))
        if isinstance(log, MetadataCheckpointer):
            # A store with no place for metadata (the legacy adapter) has none.
            with contextlib.suppress(NotImplementedError):
                self.seen_metadata(log.metadata(session_id))
        return count

    def lineage(self) -> ForkOrigin | None:
        """Where this session was forked from (see :meth:`agentlog.BaseCheckpointer.lineage`);
        ``NotImplementedError`` on a checkpointer that records no lineage."""
        return self._lineage_log().lineage(self.session_id)

    def forks(self) -> list[Fork]:
        """The sessions forked from this one (see :meth:`agentlog.BaseCheckpointer.forks`)."""
        return self._lineage_log().forks(self.session_id)

    def _lineage_log(self) -> LineageCheckpointer:
        log = self._log
        if not isinstance(log, LineageCheckpointer):
            raise NotImplementedError(f"{type(log).__name__} does not record fork lineage")
        return log

    def set_metadata(self, value: Any) -> int:
        """Replace the session's metadata with ``value`` (any JSON value); return
        the new revision.

        Compare-and-set on what this handle saw: if the metadata changed since
        it last read it (or changes between this call's read and its write),
        :class:`~agentlog.StorageConflictError` is raised and nothing changes;
        :meth:`reload` reads it again. Appends — the handle's own or others' —
        do not make it fail. ``NotImplementedError`` on a checkpointer that
        keeps no metadata (not a :class:`~agentlog.log.MetadataCheckpointer`,
        or the legacy adapter).
        """
        log = self._log
        if not isinstance(log, MetadataCheckpointer):
            raise NotImplementedError(f"{type(log).__name__} does not store session metadata")
        current = log.metadata(self.session_id)
        self.check_metadata_unchanged(current)
        revision = log.set_metadata(self.session_id, value, current.revision)
        self.seen_metadata(log.metadata(self.session_id))
        return revision
