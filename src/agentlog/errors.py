"""The typed errors agentlog raises.

Every error derives from :class:`AgentlogError`, so a host can catch the whole
family in one place. Errors about bad arguments also derive from the matching
built-in (``ValueError`` / ``TypeError`` / ``LookupError``) so that code written
against the standard exceptions keeps working.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentlogError",
    "CheckpointConflictError",
    "CheckpointerClosedError",
    "CorruptDatabaseError",
    "DirectoryLockedError",
    "EventsPrunedError",
    "IdempotencyKeyError",
    "InvalidEventError",
    "InvalidSessionIdError",
    "OutcomeUnknownError",
    "SchemaVersionError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionTruncatedError",
    "StorageConflictError",
    "StorageDataError",
    "StorageNotFoundError",
    "StorageUnavailableError",
    "UnserializableEventError",
    "damaged_event",
    "fork_past_head",
    "no_session_to_fork",
    "session_exists",
]


class AgentlogError(Exception):
    """Base class of every error raised by agentlog."""

    # An error made from fields sets them here, so that it pickles (to
    # another process) as it was made; one made from a message needs nothing.
    _made_from: tuple[Any, ...] | None = None

    def _made(self, **fields: Any) -> None:
        """Keep ``fields`` as attributes, and pickle as made from them (in
        the order of ``__init__``'s parameters, which they must follow)."""
        self.__dict__.update(fields)
        self._made_from = tuple(fields.values())

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._made_from is None:
            return super().__reduce__()
        return (type(self), self._made_from)


class CheckpointConflictError(AgentlogError):
    """An append or write found a head other than the one the caller expected.

    Nothing of the failed call was written. Reload the session (read and fold),
    then retry with the new head, or fork from an earlier point.
    """

    session_id: str
    expected: int
    actual: int

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session_id!r}: expected head {expected}, but the head is {actual}"
        )
        self._made(session_id=session_id, expected=expected, actual=actual)


class InvalidSessionIdError(AgentlogError, ValueError):
    """A session id is not a non-empty, bounded, path- and key-safe string."""


class InvalidEventError(AgentlogError, ValueError):
    """An event was refused; ``index`` is its position in the appended list."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"event {index}: {message}")
        self.index = index

    def __reduce__(self) -> tuple[type[InvalidEventError], tuple[int, str]]:
        text = str(self.args[0]).split(": ", 1)[1]
        return (type(self), (self.index, text))


class UnserializableEventError(InvalidEventError, TypeError):
    """An event is not a mapping, or holds a value JSON cannot encode."""


class SessionNotFoundError(AgentlogError, LookupError):
    """The operation needs an existing session and there is none by that id."""


class SessionExistsError(AgentlogError, ValueError):
    """The operation would create a session whose id is already taken."""


class SessionTruncatedError(AgentlogError):
    """A followed session is no longer what the follower yielded.

    The session was truncated (or deleted) under a follower, so the events it
    already yielded are no longer the log: its head is below the follower's
    position, or (``rewritten``) it was truncated below it and appended to
    again, so that the event at the follower's seq is another one. Or the
    follower started past the head (``since_seq`` from a session since
    truncated, or never that long). Read the session again (from ``head``,
    or from the start) and follow from there.
    """

    session_id: str
    seq: int
    head: int
    rewritten: bool

    def __init__(self, session_id: str, seq: int, head: int, rewritten: bool = False) -> None:
        if rewritten:
            message = (
                f"session {session_id!r} was truncated below the follower's seq {seq} and"
                f" appended to again: the event at seq {seq} is another one (head {head})"
            )
        else:
            message = (
                f"session {session_id!r} ends at seq {head}, before the follower's seq {seq}"
                " (truncated or deleted since, or never that long)"
            )
        super().__init__(message)
        self._made(session_id=session_id, seq=seq, head=head, rewritten=rewritten)


class EventsPrunedError(AgentlogError, LookupError):
    """The events asked for were deleted by retention (a session pruned after a snapshot).

    ``first_retained`` is the session's first stored seq: reads from
    ``first_retained - 1`` on work; ``seq`` is the point asked for (a read's
    ``since_seq``, a ``load``'s ``after_sequence``, a truncate's or fork's
    target). Nothing is skipped silently: read from the snapshot instead
    (``SessionStore.load``), or from ``first_retained - 1``. ``detail``
    says more where there is more to say.
    """

    session_id: str
    seq: int
    first_retained: int
    detail: str

    def __init__(self, session_id: str, seq: int, first_retained: int, detail: str = "") -> None:
        message = (
            f"session {session_id!r}: the events before seq {first_retained} were pruned "
            f"(asked for the events after {seq})"
        )
        super().__init__(f"{message}; {detail}" if detail else message)
        self._made(session_id=session_id, seq=seq, first_retained=first_retained, detail=detail)


class CheckpointerClosedError(AgentlogError, RuntimeError):
    """The checkpointer (or storage) was closed; open a new one to continue."""


class SchemaVersionError(AgentlogError):
    """The store was written by a newer, incompatible agentlog (or is not ours).

    Raised at open, before anything in the store is changed.
    """


class CorruptDatabaseError(AgentlogError):
    """The store is damaged or is not an agentlog store at all.

    When one stored event is damaged (its payload does not match its checksum
    or does not decode), ``session_id`` and ``seq`` name it; otherwise both
    are ``None``. A read yields every event before a damaged one first.
    """

    def __init__(
        self, message: str, *, session_id: str | None = None, seq: int | None = None
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.seq = seq

    def __reduce__(
        self,
    ) -> tuple[Any, ...]:
        return (_corrupt, (type(self), str(self), self.session_id, self.seq))


def _corrupt(
    kind: type[CorruptDatabaseError], message: str, session_id: str | None, seq: int | None
) -> CorruptDatabaseError:
    """Unpickle a :class:`CorruptDatabaseError` with its keyword fields."""
    return kind(message, session_id=session_id, seq=seq)


# A fork's refusals, worded here once for every backend's fork.
def no_session_to_fork(session_id: str) -> SessionNotFoundError:
    """The error for a fork of ``session_id``, which does not exist."""
    return SessionNotFoundError(f"no session {session_id!r} to fork")


def fork_past_head(session_id: str, at_seq: int, head: int) -> ValueError:
    """The error for a fork of ``session_id`` at ``at_seq``, past its ``head``."""
    return ValueError(f"cannot fork {session_id!r} at {at_seq}: its head is {head}")


def session_exists(session_id: str) -> SessionExistsError:
    """The error for a fork into ``session_id``, which exists already."""
    return SessionExistsError(f"session {session_id!r} already exists")


def damaged_event(session_id: str, seq: int, what: str) -> CorruptDatabaseError:
    """The error for event ``seq`` of ``session_id``, damaged as ``what`` says."""
    return CorruptDatabaseError(
        f"session {session_id!r}, event {seq}: {what}", session_id=session_id, seq=seq
    )


class DirectoryLockedError(AgentlogError):
    """Another process (or another open checkpointer) owns this directory."""


class StorageUnavailableError(AgentlogError):
    """The store could not be reached in time (busy database, I/O failure)."""


class OutcomeUnknownError(StorageUnavailableError):
    """The connection was lost around the commit of an append without a key:
    it may or may not be in the log, and nothing can tell which.

    A :class:`StorageUnavailableError` (code that catches outages still
    catches it), but its own type, so that a host knows a blind retry may
    store the events twice. Read the session to find out, or append with a
    ``key``: a keyed append in the same window is resolved on a new
    connection and returns its real outcome.
    """


class IdempotencyKeyError(AgentlogError):
    """An append reused a key of its session with other events.

    The first append under the key stands and nothing was written; a key
    names one batch of events (see the manual's idempotency page).
    """

    session_id: str
    key: str

    def __init__(self, session_id: str, key: str) -> None:
        super().__init__(f"session {session_id!r}: key {key!r} was already used for other events")
        self._made(session_id=session_id, key=key)


class StorageConflictError(AgentlogError):
    """A store write named a revision other than the record's current one.

    ``actual_revision`` is ``None`` when the record does not exist (and
    ``expected_revision`` is ``None`` when the write expected it not to).
    Nothing was written; stores never fall back to last-write-wins.
    """

    resource: str
    expected_revision: int | None
    actual_revision: int | None

    def __init__(
        self, resource: str, expected_revision: int | None, actual_revision: int | None
    ) -> None:
        super().__init__(
            f"{resource}: expected revision {expected_revision}, found {actual_revision}"
        )
        self._made(
            resource=resource, expected_revision=expected_revision, actual_revision=actual_revision
        )


class StorageNotFoundError(AgentlogError, LookupError):
    """The record asked for does not exist — or the store itself does not, when
    it is opened without creating one (``read_only=True`` or ``create=False``)."""


class StorageDataError(AgentlogError, ValueError):
    """Invalid data given to a store (bad key, non-JSON value), or corrupt data read."""
