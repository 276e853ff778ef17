"""The base class the built-in backends share: argument checking, the closed
state, paging, following, and the helpers every backend refuses the same way by."""

from __future__ import annotations

import builtins
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypeVar,
    overload,
)

from ..activity import (
    ActivityCursor,
    SessionPage,
    check_page_request,
    page_in_order,
    page_of,
)
from ..engine.commits import CommitSignal, engine_commits, notify_commit
from ..errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    EventsPrunedError,
    StorageConflictError,
    StorageDataError,
)
from ..events import (
    AppendKey,
    EncodedBatch,
    Fork,
    ForkOrigin,
    RawEvent,
    SessionEvent,
    SessionInfo,
    SessionListing,
    SessionMetadata,
    StoredEvent,
    check_flag,
    check_poll_interval,
    check_seq,
    check_session_id,
    decode_json,
    encode_events,
    encode_json,
    encode_metadata,
    sorted_forks,
)
from ..lifecycle import Closable
from .follow import (
    Anchor,
    Expected,
    FollowPort,
    anchored_page,
    anchored_read,
    follow_pages,
    has_new_events,
)
from .writer_port import BoundWriterPort, PreparedAppend, WouldWait, WriterPort

if TYPE_CHECKING:
    from ..engine import AppendCompletions
    from .handle import Session

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "BaseCheckpointer",
    "check_fork",
    "check_revision",
    "decode_metadata",
    "listings",
    "metadata_conflict",
]


def check_revision(value: object) -> int:
    """An expected revision: an int >= 0, else :class:`StorageDataError`."""
    try:
        return check_seq("expected_revision", value)
    except (TypeError, ValueError) as exc:
        raise StorageDataError(str(exc)) from None


def metadata_conflict(session_id: str, expected: int, actual: int) -> StorageConflictError:
    """The error every backend raises when ``set_metadata`` names a stale revision."""
    return StorageConflictError(f"session {session_id!r}", expected, actual)


def listings(
    rows: Iterable[tuple[str, float, int, bytes | None, int]],
) -> builtins.list[SessionListing]:
    """:class:`SessionListing` rows of ``(name, mtime, head, metadata json |
    None, revision)`` as an engine lists them."""
    return [
        SessionListing(name, mtime, head, decode_metadata(meta), revision)
        for name, mtime, head, meta, revision in rows
    ]


def decode_metadata(data: bytes | None) -> Any:
    """A stored metadata value (``None`` when none was ever set);
    :class:`StorageDataError` when what is stored is not JSON."""
    if data is None:
        return None
    try:
        return decode_json(data)
    except ValueError as exc:
        raise StorageDataError(f"stored session metadata is not valid JSON ({exc})") from None


def check_fork(session_id: str, at_seq: int, new_session_id: str) -> tuple[str, int, str]:
    """A fork's arguments, checked (every backend's ``fork`` refuses the same way)."""
    session_id = check_session_id(session_id)
    new_session_id = check_session_id(new_session_id)
    at_seq = check_seq("at_seq", at_seq)
    if new_session_id == session_id:
        raise ValueError("a fork needs a new session id")
    return session_id, at_seq, new_session_id


#: Seconds between a follower's looks for other processes' commits.
DEFAULT_POLL_INTERVAL = 0.01

_T = TypeVar("_T")
#: A page's events: decoded, or their JSON as stored.
_E = TypeVar("_E", StoredEvent, RawEvent)


class BaseCheckpointer(Closable, ABC):
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

    def _append_keyed(self, append: PreparedAppend, ts: float, key: AppendKey) -> int:
        """:meth:`_append` of a non-empty batch under ``key``, atomically with the
        look-up: when the session holds the key, write nothing and return
        ``key.replay(...)`` of what is stored (before any ``expected_head``
        check: a repeat comes with the head its first try saw); else append
        and remember ``(key.digest, new head)`` in the same write. A truncate
        below that head, or a delete, forgets the key."""
        raise NotImplementedError(f"{type(self).__name__} does not take append keys")

    @abstractmethod
    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]: ...

    def _scan_json(self, session_id: str, since_seq: int, limit: int) -> builtins.list[RawEvent]:
        """:meth:`_scan` with each event's stored JSON bytes, not decoded (checked
        as :meth:`_scan` checks it). This default encodes what :meth:`_scan`
        decoded; a backend that stores the bytes hands them on."""
        return [
            RawEvent(e.seq, e.parent_seq, e.ts, e.type, encode_json(e.event))
            for e in self._scan(session_id, since_seq, limit)
        ]

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

    def _change_token(self, session_id: str) -> Hashable:
        """What changes when another process writes ``session_id`` (None: none can)."""
        return None

    def _metadata(self, session_id: str) -> tuple[bytes | None, int]:
        """``(metadata json or None, revision)``; ``(None, 0)`` for an unknown session."""
        raise NotImplementedError(f"{type(self).__name__} does not store session metadata")

    def _set_metadata(self, session_id: str, data: bytes, expected_revision: int, ts: float) -> int:
        """Replace the metadata at ``expected_revision`` (creating an empty session
        when it is 0 and there is none); return the new revision, or raise
        :func:`metadata_conflict`."""
        raise NotImplementedError(f"{type(self).__name__} does not store session metadata")

    def _lineage(self, session_id: str) -> tuple[str, int] | None:
        """``(source id, seq)`` that :meth:`_fork` recorded for ``session_id``, or None."""
        raise NotImplementedError(f"{type(self).__name__} does not record fork lineage")

    def _forks(self, session_id: str) -> builtins.list[tuple[str, int]]:
        """``(fork id, seq)`` of every session whose recorded source is ``session_id``
        (any order: :meth:`forks` sorts them), found without reading events."""
        raise NotImplementedError(f"{type(self).__name__} does not record fork lineage")

    def _list_metadata(self) -> builtins.list[SessionListing]:
        """:meth:`_list` with each session's metadata (a backend may do it in one read)."""
        listing = []
        for info in self._list():
            data, revision = self._metadata(info.id)
            listing.append(SessionListing(*info, decode_metadata(data), revision))
        return listing

    def _list_page(self, limit: int, after: ActivityCursor | None) -> builtins.list[SessionListing]:
        """The first ``limit`` sessions after ``after``, ``(activity second,
        id)`` descending. This one sorts :meth:`_list_metadata`; a backend with an
        index on activity reads the page alone."""
        return page_in_order(self._list_metadata(), limit, after)

    def _first_retained(self, session_id: str) -> int:
        """The seq of the session's first stored event (``head + 1`` when it holds
        none, 1 for an unknown session). A backend whose sessions retention can
        prune (SQLite, PostgreSQL) looks; the others start every session at 1."""
        return 1

    def _check_page(
        self, session_id: str, since_seq: int, page: builtins.list[_E]
    ) -> builtins.list[_E]:
        """``page`` read after ``since_seq``, or :class:`EventsPrunedError` when
        retention pruned the events right after ``since_seq`` (never skip them).

        A page that starts past ``since_seq + 1`` is one; an empty page asks
        the backend where the session's events start now.
        """
        first = page[0].seq if page else self._first_retained(session_id)
        if first > since_seq + 1:
            raise EventsPrunedError(session_id, since_seq, first)
        return page

    # -- the contract -----------------------------------------------------------
    # The public signatures (append's, list's overloads …) are the contract's
    # (contract.py; awaited in agentlog.aio): a Protocol lends a class none, so
    # they stand here again, and mypy checks that the two agree.

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointerClosedError(f"this {type(self).__name__} is closed")

    def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent],
        expected_head: int | None = None,
        *,
        key: str | None = None,
    ) -> int:
        """Append ``events`` atomically after the head; return the new head.

        Seq numbers ``head + 1 … head + n`` are allocated inside the write, so
        concurrent appends never interleave. With ``expected_head`` given and a
        different current head, raise :class:`CheckpointConflictError` and
        write nothing. An empty list writes nothing and returns the head (still
        checking ``expected_head``). Invalid events raise
        :class:`InvalidEventError` naming the first offending index, and
        nothing is written.

        ``key`` makes the append idempotent: the session remembers it with a
        digest of the events (see :class:`~agentlog.events.AppendKey`), and a
        later append of the same key — a retry, from any process, after a
        reopen — writes nothing and returns the head the first one returned,
        whatever ``expected_head`` it names. The same key with other events
        raises :class:`IdempotencyKeyError`, nothing written. A key is
        remembered as long as the session holds the events it appended: a
        truncate below them or a delete forgets it. An empty list is never
        recorded under a key.
        """
        session_id, batch, expected_head = self._checked(session_id, events, expected_head)
        keyed = None if key is None else AppendKey.of(key, batch)
        if keyed is None or not batch:
            head = self._append(session_id, batch, expected_head, time.time())
        else:
            prepared = PreparedAppend(session_id, batch, expected_head)
            head = self._append_keyed(prepared, time.time(), keyed)
        self._notify_commit()
        return head

    def _prepare_append(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None = None
    ) -> PreparedAppend:
        """Check and encode an append without writing it (see :meth:`_append_prepared`).

        Raises what :meth:`append` raises for bad input; writes nothing.
        """
        return PreparedAppend(*self._checked(session_id, events, expected_head))

    def _checked(
        self, session_id: str, events: Iterable[SessionEvent], expected_head: int | None
    ) -> tuple[str, EncodedBatch, int | None]:
        """An append's arguments, checked and encoded (a plain tuple: the hot path)."""
        self._check_open()
        session_id = check_session_id(session_id)
        if expected_head is not None:
            expected_head = check_seq("expected_head", expected_head)
        return session_id, encode_events(events), expected_head

    def _append_prepared(self, appends: Sequence[PreparedAppend]) -> builtins.list[int | Exception]:
        """Write prepared appends, each atomically and on its own terms.

        The result holds, in order, each append's new head, or the
        :class:`CheckpointConflictError` (or ``ValueError``, past the seq bound)
        that refused it alone. Where the backend can (SQLite, PostgreSQL), all
        of them are one transaction: a group commit. Any other failure raises,
        and then nothing of the group was written. On a backend whose appends
        are writes of their own (files, memory), a failure after another
        append of the group was written is instead that append's own outcome
        (the exception, in its place), since what was written stays.
        """
        self._check_open()
        results = self._append_many(appends, time.time())
        self._notify_commit()
        return results

    def _try_append_prepared(
        self, appends: Sequence[PreparedAppend]
    ) -> builtins.list[int | Exception] | None:
        """:meth:`_append_prepared`, only if it can be written without waiting.

        None, and nothing written, when it would have to wait — for a lock
        another writer holds, or for the disk. For a caller that must not
        block (an event loop): it hands the appends to a thread instead. This
        base class never claims to write without waiting; SQLite can.
        """
        self._check_open()
        results = self._try_append_many(appends, time.time())
        if results is not None:
            self._notify_commit()
        return results

    def writer_port(self) -> WriterPort:
        """The async layer's way to this checkpointer's writer (see :class:`WriterPort`).

        A port of its own, kept off the checkpointer's face: its methods are
        this class's underscored ones (``_prepare_append``,
        ``_append_prepared`` …), bound now, which a backend may override.
        """
        return BoundWriterPort(
            prepare_append=self._prepare_append,
            append_prepared=self._append_prepared,
            try_append_prepared=self._try_append_prepared,
            append_completions=self._append_completions,
            queue_prepared=self._queue_prepared,
            notify_commit=self._notify_commit,
            try_read=self._try_read,
            change_token=self._checked_change_token,
            follow_page=self._follow_page,
            follow_json_page=self._follow_json_page,
        )

    def _append_completions(self) -> AppendCompletions | None:
        """A channel for an event loop's appends to this backend's writer
        thread (see :meth:`_queue_prepared`), or None where it has none (then
        the loop hands its appends to a thread of its own)."""
        self._check_open()
        return None

    def _queue_prepared(self, prepared: PreparedAppend, completions: AppendCompletions) -> object:
        """Queue a prepared, non-empty append for the writer thread and return
        its handle at once. Once it is written or refused,
        ``completions.finished()`` hands back ``(handle, outcome)``; then call
        :meth:`_notify_commit` for the followers. Only where
        :meth:`_append_completions` gave the channel."""
        raise NotImplementedError

    def _notify_commit(self) -> None:
        """Wake this process's followers, if any, after a write."""
        notify_commit(self)

    def _try_append_many(
        self, appends: Sequence[PreparedAppend], ts: float
    ) -> builtins.list[int | Exception] | None:
        return None

    def _try_read(self, read: Callable[[], _T]) -> _T | WouldWait:
        """``read()`` (calls of this checkpointer's reads), unless it would wait
        for a write under way: then a :class:`WouldWait`, and it has not run.

        For a caller that must not block (an event loop): it hands the read
        to a thread instead. This base class's reads never wait for a write
        (memory; SQLite's readers in WAL mode); the file store's do.
        """
        return read()

    def _append_many(
        self, appends: Sequence[PreparedAppend], ts: float
    ) -> builtins.list[int | Exception]:
        """One append after another, each a write of its own (a backend with
        transactions does better). Once one of them is written a later failure
        cannot take it back: from then on a failure is that append's own
        outcome, and the rest are still tried."""
        results: builtins.list[int | Exception] = []
        written = False
        for session_id, batch, expected_head in appends:
            try:
                results.append(self._append(session_id, batch, expected_head, ts))
                written = True
            except (CheckpointConflictError, ValueError) as exc:
                results.append(exc)
            except Exception as exc:
                if not written:
                    raise  # nothing of the group is written
                results.append(exc)
        return results

    def read(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> Iterator[StoredEvent]:
        """Yield the events after ``since_seq`` (exclusive), in seq order.

        An unknown session yields nothing. The scan takes no lock and fetches
        a page at a time, so it is also the primitive for tailing a live
        session: call again with the last seq seen. Reading from before a
        pruned session's retained start (see ``SessionStore.prune``) raises
        :class:`EventsPrunedError`; nothing is skipped silently.
        """
        return self._read_with(self._read_pages(), session_id, since_seq, limit)

    def read_json(
        self, session_id: str, since_seq: int = 0, limit: int | None = None
    ) -> Iterator[RawEvent]:
        """:meth:`read`, each event as a :class:`~agentlog.RawEvent`: its stored
        JSON bytes, not decoded, for a server that only passes events on.

        The same rules as :meth:`read`: every payload is checked against its
        checksum, and a damaged one raises :class:`CorruptDatabaseError`
        naming it after the events before it; pruned events raise
        :class:`EventsPrunedError`.
        """
        return self._read_with(self._read_json_pages(), session_id, since_seq, limit)

    def _read_pages(self) -> Callable[[str, int, int], builtins.list[StoredEvent]]:
        """The page read of one :meth:`read`: :meth:`_scan`, unless the backend
        keeps state across one read's pages (PostgreSQL reads each next page
        ahead)."""
        return self._scan

    def _read_json_pages(self) -> Callable[[str, int, int], builtins.list[RawEvent]]:
        """:meth:`_read_pages` for :meth:`read_json`: :meth:`_scan_json`."""
        return self._scan_json

    def _read_with(
        self,
        scan: Callable[[str, int, int], builtins.list[_E]],
        session_id: str,
        since_seq: int,
        limit: int | None,
    ) -> Iterator[_E]:
        """:meth:`read`'s checks, then its pages as ``scan`` reads them."""
        self._check_open()
        session_id = check_session_id(session_id)
        since_seq = check_seq("since_seq", since_seq)
        if limit is not None:
            limit = check_seq("limit", limit)
        return self._pages(session_id, since_seq, limit, scan)

    def _pages(
        self,
        session_id: str,
        since_seq: int,
        limit: int | None,
        scan: Callable[[str, int, int], builtins.list[_E]],
    ) -> Iterator[_E]:
        remaining = limit
        page_size = self._page_size
        while True:
            want = page_size if remaining is None else min(page_size, remaining)
            if want == 0:
                return
            page, damage = self._scan_to_damage(session_id, since_seq, want, scan)
            page = self._check_page(session_id, since_seq, page)
            yield from page
            if damage is not None:
                raise damage
            if len(page) < want:
                return
            since_seq = page[-1].seq
            if remaining is not None:
                remaining -= len(page)
            # Let the page go before the next is read: the reader holds one
            # page, not two, and the collector walks no event the caller dropped.
            del page
            self._check_open()  # closed between pages: the next one is refused

    def head(self, session_id: str) -> int:
        """The seq of the last event; 0 for an empty or unknown session."""
        self._check_open()
        return self._head(check_session_id(session_id))

    @overload
    def list(self) -> builtins.list[SessionInfo]: ...

    @overload
    def list(self, *, with_metadata: Literal[False]) -> builtins.list[SessionInfo]: ...

    @overload
    def list(self, *, with_metadata: Literal[True]) -> builtins.list[SessionListing]: ...

    def list(
        self, *, with_metadata: bool = False
    ) -> builtins.list[SessionInfo] | builtins.list[SessionListing]:
        """Every session as :class:`SessionInfo`, most recently active first.

        With ``with_metadata=True``, each row is a :class:`SessionListing`
        (``id, mtime, head, metadata, revision``) instead: opt-in, so code
        that unpacks a :class:`SessionInfo` into three names keeps working.
        """
        self._check_open()
        if check_flag("with_metadata", with_metadata):
            return self._list_metadata()
        return self._list()

    def list_page(self, limit: int = 50, *, after: ActivityCursor | None = None) -> SessionPage:
        """The ``limit`` most recently active sessions after cursor ``after``.

        Returns a :class:`~agentlog.SessionPage`: ``sessions``, rows of
        :class:`SessionListing` ordered by ``(activity second, id)``
        descending (the second: ``mtime`` truncated; sessions active in the
        same second come by id), and
        ``next``, the :class:`~agentlog.ActivityCursor` to pass as ``after``
        for the page that follows (None after the last page). On a store
        nobody writes to, the pages list every session exactly once; a
        session written to meanwhile moves to the front (past a reader who
        already passed it). SQLite and PostgreSQL read a page from an index
        on activity, so a page costs the same at ten sessions or a million;
        the memory and file backends sort every session per page.
        ``limit`` is from 1 to :data:`~agentlog.activity.MAX_PAGE_LIMIT`.
        """
        self._check_open()
        limit, after = check_page_request(limit, after)
        return page_of(self._list_page(limit + 1, after), limit)

    def metadata(self, session_id: str) -> SessionMetadata:
        """The session's metadata and revision: ``SessionMetadata(value, revision)``.

        ``value`` is the JSON value last set (``None`` until one is); an
        unknown session reads ``(None, 0)``. The revision is the session's:
        every write to the session — an append, a truncate, a metadata change
        — advances it, so a :meth:`set_metadata` with it succeeds only if
        nothing changed the session in between.
        """
        self._check_open()
        data, revision = self._metadata(check_session_id(session_id))
        return SessionMetadata(decode_metadata(data), revision)

    def set_metadata(self, session_id: str, value: Any, expected_revision: int) -> int:
        """Replace the session's metadata with ``value`` (any JSON value); return
        the new revision.

        Compare-and-set: if the session's revision is not
        ``expected_revision``, raise :class:`StorageConflictError` (with
        ``expected_revision`` and ``actual_revision``) and change nothing.
        With ``expected_revision=0`` on an unknown session it creates the
        session, empty (head 0), holding the metadata. A value JSON cannot
        hold (NaN, a set, bytes …) or a revision that is not an int >= 0
        raises :class:`StorageDataError`, and nothing changes. A fork starts
        without metadata; a delete removes it with the session.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        expected = check_revision(expected_revision)
        data = encode_metadata(value)
        revision = self._set_metadata(session_id, data, expected, time.time())
        self._notify_commit()
        return revision

    def session(self, session_id: str, *, shape: str = "anthropic") -> Session:
        """A :class:`~agentlog.Session` handle on ``session_id`` for an agent loop,
        resumed by reading the log (see :class:`agentlog.Session`)."""
        from .handle import Session  # the handle is built on this module's contract

        return Session(self, session_id, shape=shape)

    def delete(self, session_id: str) -> None:
        """Remove every event and the session itself; deleting twice is fine."""
        self._check_open()
        self._delete(check_session_id(session_id))
        self._notify_commit()

    def truncate(self, session_id: str, to_seq: int) -> int:
        """Remove every event with seq > ``to_seq``; return the new head.

        ``to_seq`` at or beyond the head changes nothing; an unknown session
        returns 0. The session stays listed, with head ``to_seq``.
        """
        self._check_open()
        session_id = check_session_id(session_id)
        to_seq = check_seq("to_seq", to_seq)
        head = self._truncate(session_id, to_seq, time.time())
        self._notify_commit()
        return head

    def fork(self, session_id: str, at_seq: int, new_session_id: str) -> int:
        """Create ``new_session_id`` with events 1…``at_seq`` of ``session_id``.

        The source is untouched. Raises :class:`SessionNotFoundError` for an
        unknown source, ``ValueError`` when ``at_seq`` is past its head and
        :class:`SessionExistsError` when the new id is taken. Returns the new
        session's head (``at_seq``). The new session records its origin in
        the same write: :meth:`lineage` reads it, :meth:`forks` of the source
        lists it.
        """
        self._check_open()
        session_id, at_seq, new_session_id = check_fork(session_id, at_seq, new_session_id)
        head = self._fork(session_id, at_seq, new_session_id, time.time())
        self._notify_commit()
        return head

    def lineage(self, session_id: str) -> ForkOrigin | None:
        """Where ``session_id`` was forked from: ``ForkOrigin(session_id, seq)``.

        None for a session that was not made by :meth:`fork`, for one forked
        before its store recorded lineage (nothing is guessed from the
        events), and for an unknown session. The record is the fork's own: it
        stays when the source is later deleted, truncated below ``seq`` or
        re-created under the same id (then it names that id, whatever it
        holds now), and goes when the fork itself is deleted. A fork of a
        fork names its direct source; follow :meth:`lineage` for the rest.
        """
        self._check_open()
        origin = self._lineage(check_session_id(session_id))
        return None if origin is None else ForkOrigin(*origin)

    def forks(self, session_id: str) -> builtins.list[Fork]:
        """The sessions whose :meth:`lineage` names ``session_id``, as
        ``Fork(session_id, seq)``, by fork seq and then id.

        Direct forks only (call again for theirs). Found from the recorded
        origins, never by reading events. An unknown id lists the forks that
        still name it (its forks outlive a deleted source); forks of a
        session deleted and re-created under the same id are listed too.
        """
        self._check_open()
        return sorted_forks(self._forks(check_session_id(session_id)))

    # -- following --------------------------------------------------------------

    @property
    def commits(self) -> CommitSignal:
        """The signal this checkpointer raises after each write (made on first use)."""
        return engine_commits(self).get()

    def _checked_change_token(self, session_id: str) -> Hashable:
        """A cheap token that changes when another process writes ``session_id``.

        SQLite: ``PRAGMA data_version`` (any commit to the file changes it);
        a read-only file store: the session file's size and mtime; a backend
        that no other process can write: ``None``. Compare for equality only.
        """
        self._check_open()
        return self._change_token(check_session_id(session_id))

    def _follow_page(
        self,
        session_id: str,
        after_seq: int,
        anchor: Anchor | Expected | None = None,
        limit: int | None = None,
    ) -> builtins.list[StoredEvent]:
        """A follower's step, its events decoded (see :meth:`_follow_scan`)."""
        return self._follow_scan(session_id, after_seq, anchor, limit, self._scan)

    def _follow_json_page(
        self,
        session_id: str,
        after_seq: int,
        anchor: Anchor | Expected | None = None,
        limit: int | None = None,
    ) -> builtins.list[RawEvent]:
        """A follower's step, its events' JSON as stored (see :meth:`_follow_scan`)."""
        return self._follow_scan(session_id, after_seq, anchor, limit, self._scan_json)

    def _follow_scan(
        self,
        session_id: str,
        after_seq: int,
        anchor: Anchor | Expected | None,
        limit: int | None,
        scan: Callable[[str, int, int], builtins.list[_E]],
    ) -> builtins.list[_E]:
        """One step of a follower: up to a page of events after ``after_seq``
        (``limit`` at most, when set; read with ``scan``), the event at
        ``after_seq`` read too: checked against ``anchor`` and left out, or
        without an anchor first in the page
        (:func:`~agentlog.log.follow.anchored_page`).

        An empty list means nothing new. Raises
        :class:`SessionTruncatedError` when the head is below ``after_seq``
        (the session was truncated or deleted under the follower), or when
        the event at ``after_seq`` is not ``anchor`` (truncated, then
        appended to again past it).
        """
        self._check_open()
        session_id = check_session_id(session_id)
        after_seq = check_seq("after_seq", after_seq)
        head = self._head(session_id)
        if not has_new_events(session_id, after_seq, head) and after_seq == 0:
            return []
        start, count = anchored_read(after_seq, self._page_size, limit)
        # Up to a damaged event; the next step starts at it and raises (it is
        # the first new one when the events before it are the cursor's).
        read, damage = self._scan_to_damage(session_id, start, count, scan)
        if damage is not None and (not read or read[-1].seq <= after_seq):
            raise damage
        page = anchored_page(session_id, after_seq, anchor, read, head)
        del read
        return self._check_page(session_id, after_seq, page) if head > after_seq else page

    def _scan_to_damage(
        self,
        session_id: str,
        since_seq: int,
        limit: int,
        scan: Callable[[str, int, int], builtins.list[_E]],
    ) -> tuple[builtins.list[_E], CorruptDatabaseError | None]:
        """A page, or when it holds a damaged event, the events before it and
        the error naming it (raised at once when the damaged event is the first)."""
        try:
            return scan(session_id, since_seq, limit), None
        except CorruptDatabaseError as exc:
            if exc.seq is None or not since_seq + 1 < exc.seq <= since_seq + limit:
                raise
            return scan(session_id, since_seq, exc.seq - 1 - since_seq), exc

    def follow(
        self,
        session_id: str,
        since_seq: int = 0,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> Iterator[StoredEvent]:
        """Yield the events after ``since_seq`` as they are committed, forever.

        First what is there, then each new event once it is committed. It
        stops only when the caller stops iterating (``break``, or closing
        the generator), which leaves nothing behind: no thread, no lock.
        Writes through this checkpointer wake the follower at once; other
        processes' writes (and other objects' on the same file) are noticed
        by a cheap look every ``poll_interval`` seconds (see
        :meth:`WriterPort.change_token`). Closing the checkpointer ends a waiting
        follower with :class:`CheckpointerClosedError`. A ``since_seq`` past
        the head raises :class:`SessionTruncatedError` at once (the session
        is behind that position: truncated, deleted, or never that long), so
        a follower resuming from a saved seq never skips events silently. A
        truncate (or a delete) below the last seq it yielded raises
        :class:`SessionTruncatedError` when the follower next looks (it
        reads a page at a time, so events of a page read before the
        truncate are still yielded), and so does a truncate followed by
        appends past that seq before the follower looks: each look checks
        that the event at its seq is still the one it yielded
        (``rewritten`` on the error).
        """
        self._check_open()
        session_id = check_session_id(session_id)
        since_seq = check_seq("since_seq", since_seq)
        interval = check_poll_interval(poll_interval)
        # A longer wait than a lock can take is a wait without end (``inf``).
        return self._follow(session_id, since_seq, min(interval, threading.TIMEOUT_MAX))

    def watch(self, session_id: str) -> None:
        """A follower of ``session_id`` starts: a backend may start listening.

        Called by every follower (sync and async) before its first look,
        and matched by one :meth:`unwatch` when it stops. This base class
        does nothing; PostgreSQL opens its ``LISTEN`` connection for the
        first follower and closes it after the last.
        """

    def unwatch(self, session_id: str) -> None:
        """A follower of ``session_id`` stops (see :meth:`watch`)."""

    def _follow(self, session_id: str, last: int, poll_interval: float) -> Iterator[StoredEvent]:
        signal = self.commits
        port = FollowPort(
            check_open=self._check_open,
            mark=lambda: signal.count,
            look=lambda after, anchor, limit: (
                self._checked_change_token(session_id),
                self._follow_page(session_id, after, anchor, limit),
            ),
            token=lambda: self._checked_change_token(session_id),
            wait=lambda mark: signal.wait(mark, poll_interval),
        )
        self.watch(session_id)
        try:
            for page in follow_pages(port, last):
                yield from page
                del page  # as _pages: the next look holds no page handed out
        finally:
            self.unwatch(session_id)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Release the backend; idempotent. Later calls raise an error."""
        if not self._closed:
            self._closed = True
            try:
                self._close()
            finally:
                self._notify_commit()  # a waiting follower sees the close
