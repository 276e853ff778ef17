"""The Checkpointer contract and the base class the built-in backends share."""

from __future__ import annotations

import builtins
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from ..errors import CheckpointConflictError, CheckpointerClosedError
from ..events import (
    EncodedBatch,
    SessionEvent,
    SessionInfo,
    StoredEvent,
    check_seq,
    check_session_id,
    encode_events,
)

__all__ = ["BaseCheckpointer", "Checkpointer", "PreparedAppend"]

_Self = TypeVar("_Self", bound="BaseCheckpointer")


@runtime_checkable
class Checkpointer(Protocol):
    """An append-only, per-session event log with optimistic concurrency.

    Any object with these methods is a checkpointer; the conformance suite in
    :mod:`agentlog.testing` checks that it behaves like one.
    """

    def append(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> int:
        """Append all events or none; return the new head.

        With ``expected_head`` and another current head, raise
        :class:`CheckpointConflictError` and write nothing.
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


class PreparedAppend(NamedTuple):
    """An append checked and encoded by :meth:`BaseCheckpointer.prepare_append`."""

    session_id: str
    batch: EncodedBatch
    expected_head: int | None


class BaseCheckpointer(ABC):
    """Argument checking, the closed state and the context manager, shared.

    A backend implements the underscored methods; they receive arguments that
    are already validated (ids checked, events encoded to ``(type, bytes)``).
    """

    _closed: bool = False
    _page_size = 1000

    # -- what a backend implements -------------------------------------------

    @abstractmethod
    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int: ...

    @abstractmethod
    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]: ...

    @abstractmethod
    def _head(self, session_id: str) -> int: ...

    @abstractmethod
    def _list(self) -> builtins.list[SessionInfo]: ...

    @abstractmethod
    def _delete(self, session_id: str) -> None: ...

    @abstractmethod
    def _truncate(self, session_id: str, to_seq: int, ts: float) -> int: ...

    @abstractmethod
    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int: ...

    @abstractmethod
    def _close(self) -> None: ...

    # -- the contract -----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(f"this {type(self).__name__} is closed")

    def append(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> int:
        """Append ``events`` atomically after the head; return the new head.

        Seq numbers ``head + 1 … head + n`` are allocated inside the write, so
        concurrent appends never interleave. With ``expected_head`` given and a
        different current head, raise :class:`CheckpointConflictError` and
        write nothing. An empty list writes nothing and returns the head (still
        checking ``expected_head``). Invalid events raise
        :class:`InvalidEventError` naming the first offending index, and
        nothing is written.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        if expected_head is not None:
            expected_head = check_seq("expected_head", expected_head)
        batch = encode_events(events)
        return self._append(session_id, batch, expected_head, time.time())

    def prepare_append(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> PreparedAppend:
        """Check and encode an append without writing it (see :meth:`append_prepared`).

        Raises what :meth:`append` raises for bad input; writes nothing.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        if expected_head is not None:
            expected_head = check_seq("expected_head", expected_head)
        return PreparedAppend(session_id, encode_events(events), expected_head)

    def append_prepared(
        self, appends: Sequence[PreparedAppend]
    ) -> builtins.list[int | CheckpointConflictError | ValueError]:
        """Write prepared appends, each atomically and on its own terms.

        The result holds, in order, each append's new head, or the
        :class:`CheckpointConflictError` (or ``ValueError``, past the seq bound)
        that refused it alone. Where the backend can (SQLite), all of them are
        one transaction: a group commit. Any other failure raises, and then
        nothing of the group was written.
        """
        self._check_open()
        return self._append_many(appends, time.time())

    def _append_many(
        self, appends: Sequence[PreparedAppend], ts: float
    ) -> builtins.list[int | CheckpointConflictError | ValueError]:
        """One append after another (a backend with transactions does better)."""
        results: builtins.list[int | CheckpointConflictError | ValueError] = []
        for session_id, batch, expected_head in appends:
            try:
                results.append(self._append(session_id, batch, expected_head, ts))
            except (CheckpointConflictError, ValueError) as exc:
                results.append(exc)
        return results

    def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> Iterator[StoredEvent]:
        """Yield the events after ``since_seq`` (exclusive), in seq order.

        An unknown session yields nothing. The scan takes no lock and fetches
        a page at a time, so it is also the primitive for tailing a live
        session: call again with the last seq seen.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        since_seq = check_seq("since_seq", since_seq)
        if limit is not None:
            limit = check_seq("limit", limit)
        return self._pages(session_id, since_seq, limit)

    def _pages(self, session_id: str, since_seq: int, limit: int | None) -> Iterator[StoredEvent]:
        remaining = limit
        page_size = self._page_size
        while True:
            want = page_size if remaining is None else min(page_size, remaining)
            if want == 0:
                return
            page = self._scan(session_id, since_seq, want)
            yield from page
            if len(page) < want:
                return
            since_seq = page[-1].seq
            if remaining is not None:
                remaining -= len(page)

    def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        self._check_open()
        return self._head(check_session_id(session_id))

    def list(self) -> builtins.list[SessionInfo]:
        """Every session as :class:`SessionInfo`, most recently active first."""
        self._check_open()
        return self._list()

    def delete(self, session_id: str) -> None:
        """Remove every event and the session itself; deleting twice is fine."""
        self._check_open()
        self._delete(check_session_id(session_id))

    def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove every event with seq > ``to_seq``; return the new head.

        ``to_seq`` at or beyond the head changes nothing; an unknown session
        returns 0. The session stays listed, with head ``to_seq``.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        to_seq = check_seq("to_seq", to_seq)
        return self._truncate(session_id, to_seq, time.time())

    def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        """Create ``new_session_id`` with events 1…``at_seq`` of ``session_id``.

        The source is untouched. Raises :class:`SessionNotFoundError` for an
        unknown source, ``ValueError`` when ``at_seq`` is past its head and
        :class:`SessionExistsError` when the new id is taken. Returns the new
        session's head (``at_seq``).
        """
        self._check_open()
        session_id = check_session_id(session_id)
        new_session_id = check_session_id(new_session_id)
        at_seq = check_seq("at_seq", at_seq)
        if new_session_id == session_id:
            raise ValueError("a fork needs a new session id")
        return self._fork(session_id, at_seq, new_session_id, time.time())

    def close(self) -> None:
        """Release the backend; idempotent. Later calls raise an error."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self: _Self) -> _Self:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
