"""The async twin of :class:`agentlog.Session`: a session handle for async agent loops."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from ..events import Fork, ForkOrigin, SessionEvent
from ..log import SessionView
from .contract import AsyncCheckpointer, AsyncLineageCheckpointer, AsyncMetadataCheckpointer

__all__ = ["AsyncSession"]


class AsyncSession(SessionView):
    """:class:`agentlog.Session` for asyncio: the same rules, awaited.

    Open it with ``await log.session("s_1")`` (or ``await
    AsyncSession.open(log, "s_1")`` on any :class:`AsyncCheckpointer`): it
    resumes by replay. :meth:`append` uses the handle's head as
    ``expected_head`` and folds what it wrote; a conflict raises and changes
    nothing; :meth:`reload` folds only what others appended (or starts over
    after a truncate under it); :meth:`set_metadata` is compare-and-set on the
    metadata the handle saw. One handle per task.
    """

    def __init__(self, log: AsyncCheckpointer, session_id: str, *, shape: str = "anthropic"):
        super().__init__(session_id, shape)
        self._log = log

    @classmethod
    async def open(
        cls, log: AsyncCheckpointer, session_id: str, *, shape: str = "anthropic"
    ) -> AsyncSession:
        """A handle on ``session_id``, resumed by reading its log."""
        handle = cls(log, session_id, shape=shape)
        await handle.reload()
        return handle

    @property
    def log(self) -> AsyncCheckpointer:
        """The async checkpointer underneath."""
        return self._log

    async def append(self, events: Iterable[SessionEvent]) -> int:
        """Append after the handle's head, all or none; return the new head
        (see :meth:`agentlog.Session.append`)."""
        if isinstance(events, (Mapping, str, bytes)) or not isinstance(events, Iterable):
            raise TypeError(f"events must be a list of event mappings, not {type(events).__name__}")
        batch = list(events)
        head = self.head
        new_head = await self._log.append(self.session_id, batch, expected_head=head)
        self.fold(self.stored(head, batch))
        return new_head

    async def reload(self) -> int:
        """Fold what was appended since the handle's head (everything again after
        a truncate under it: see :meth:`agentlog.Session.reload`) and re-read the
        metadata; return how many events."""
        log, session_id = self._log, self.session_id
        if self.head:
            at_head = [event async for event in log.read(session_id, self.head - 1, 1)]
            if not self.still_at_head(at_head):
                self.reset()
        count = 0
        async for event in log.read(session_id, since_seq=self.head):
            count += self.fold((event,))
        if isinstance(log, AsyncMetadataCheckpointer):
            with contextlib.suppress(NotImplementedError):  # a store with no place for it
                self.seen_metadata(await log.metadata(session_id))
        return count

    async def lineage(self) -> ForkOrigin | None:
        """Where this session was forked from (see :meth:`agentlog.Session.lineage`)."""
        return await self._lineage_log().lineage(self.session_id)

    async def forks(self) -> list[Fork]:
        """The sessions forked from this one (see :meth:`agentlog.Session.forks`)."""
        return await self._lineage_log().forks(self.session_id)

    def _lineage_log(self) -> AsyncLineageCheckpointer:
        log = self._log
        if not isinstance(log, AsyncLineageCheckpointer):
            raise NotImplementedError(f"{type(log).__name__} does not record fork lineage")
        return log

    async def set_metadata(self, value: Any) -> int:
        """Compare-and-set the metadata on what this handle saw; return the new
        revision (see :meth:`agentlog.Session.set_metadata`)."""
        log = self._log
        if not isinstance(log, AsyncMetadataCheckpointer):
            raise NotImplementedError(f"{type(log).__name__} does not store session metadata")
        current = await log.metadata(self.session_id)
        self.check_metadata_unchanged(current)
        revision = await log.set_metadata(self.session_id, value, current.revision)
        self.seen_metadata(await log.metadata(self.session_id))
        return revision
