"""An agentlog log as Google ADK's session service.

:class:`AgentlogSessionService` is a ``google.adk.sessions.BaseSessionService``
on any agentlog async checkpointer that keeps metadata (SQLite, memory,
PostgreSQL), so ``Runner(..., session_service=AgentlogSessionService(path))``
keeps every ADK session in an agentlog log:

* one agentlog session per ADK session, one event per ADK event, in append
  order (seq *k* is the *k*-th event appended). A session reads its events
  as ADK's ``DatabaseSessionService`` does: by timestamp, events that share
  one by event id; the metadata records whether the seq order is already
  that order (the usual case), and only a session whose events were appended
  out of that order is read whole and sorted; Each event holds the ADK event whole under
  ``"adk"`` (``Event.model_dump(mode="json")``, read back with
  ``Event.model_validate``) beside what :func:`agentlog.fold_events` reads: a
  ``user`` / ``assistant`` event with the text of the parts, or
  ``context_view`` for an event without text;
* the session's metadata holds its identity, its initial state and its state
  folded through a seq; the state of the events after that seq (none, unless
  a writer stopped between its two writes) is folded on read, so the log is
  the truth and a state change is never lost;
* ``app:`` and ``user:`` state live in the metadata of one empty log per app
  and per (app, user), merged key by key with compare-and-set, so concurrent
  writers from any session never lose each other's keys; ``temp:`` state
  never reaches storage, as in ADK.

Concurrency: a session carries the head it was read at. ``append_event``
appends with that head as ``expected_head``, so a writer holding an older
version of the session (another coroutine, service instance or process) gets
ADK's own ``StaleSessionError`` and nothing is written.

Beyond ADK's stores: :meth:`~AgentlogSessionService.list_sessions` pages
(``page_size`` / ``page_token``) and never reads an event;
:meth:`~AgentlogSessionService.get_session` reads only the events its
``GetSessionConfig`` asks for; :meth:`~AgentlogSessionService.fork_session`
copies a session up to one of its events (agentlog's fork).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic_core import to_jsonable_python

from agentlog import (
    MAX_SESSION_ID_LENGTH,
    CheckpointConflictError,
    SessionExistsError,
    StorageConflictError,
    StoredEvent,
)
from agentlog.aio import AsyncMetadataCheckpointer, AsyncSqliteCheckpointer
from agentlog.integrations import open_or_use
from agentlog.lifecycle import AsyncClosable

try:  # ADK 2.8 and later name the stale-writer error; it is a ValueError before.
    from google.adk.errors import StaleSessionError
except ImportError:  # pragma: no cover - depends on the installed ADK
    StaleSessionError = ValueError  # type: ignore[misc, assignment]

__all__ = [
    "EVENT_FIELD",
    "STALE_SESSION_MESSAGE",
    "AgentlogListSessionsResponse",
    "AgentlogSessionService",
    "event_record",
    "session_key",
    "session_metadata",
    "shared_key",
    "shared_metadata",
]

#: The agentlog event field that holds the ADK event as it was appended.
EVENT_FIELD = "adk"

#: The message of the stale-writer error: ADK's own DatabaseSessionService's.
STALE_SESSION_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)

#: Metadata format mark, so a log another program wrote is never taken for one of ours.
_FORMAT = "agentlog.google_adk/1"
#: How a session's storage marker names the head it was read at.
_MARKER = "agentlog:"
#: Compare-and-set rounds on shared state before giving up (each round is a fresh read).
_CAS_ROUNDS = 64
#: The first window of a backwards scan for ``after_timestamp``.
_SCAN_WINDOW = 64


def _part(text: str) -> str:
    # Every character outside [A-Za-z0-9_.~-] is %-escaped: "|" separates parts.
    return quote(text, safe="")


def _checked_key(key: str, what: str) -> str:
    if len(key) > MAX_SESSION_ID_LENGTH:
        raise ValueError(f"{what} are too long for an agentlog session id ({len(key)} characters)")
    return key


def _session_key(app_name: str, user_id: str, session_id: str) -> str:
    key = f"adk|{_part(app_name)}|{_part(user_id)}|{_part(session_id)}"
    return _checked_key(key, "app name, user id and session id")


def _app_key(app_name: str) -> str:
    return _checked_key(f"adk-app|{_part(app_name)}", "the app name")


def _user_key(app_name: str, user_id: str) -> str:
    return _checked_key(f"adk-user|{_part(app_name)}|{_part(user_id)}", "app name and user id")


# -- the layout, for writers other than the service (``agentlog migrate``) --------------


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    """The agentlog session id that holds an ADK session's events (ids as given)."""
    return _session_key(app_name, user_id, session_id)


def shared_key(app_name: str, user_id: str | None = None) -> str:
    """The agentlog session id whose metadata holds an app's ``app:`` state
    or, with ``user_id``, that user's ``user:`` state."""
    return _app_key(app_name) if user_id is None else _user_key(app_name, user_id)


def shared_metadata(app_name: str, user_id: str | None, state: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of :func:`shared_key`'s log: ``state`` keys without their prefix."""
    names = (
        {"app_name": app_name} if user_id is None else {"app_name": app_name, "user_id": user_id}
    )
    return {"format": _FORMAT, **names, "state": _json_safe(state)}


def session_metadata(
    app_name: str,
    user_id: str,
    session_id: str,
    *,
    initial: Mapping[str, Any],
    state: Mapping[str, Any],
    through: int,
    updated: float,
    ordered: bool = False,
    last: tuple[float, str] | None = None,
) -> dict[str, Any]:
    """The metadata of a session's log: its identity, its session-scoped
    ``initial`` state (at creation), its ``state`` after the first ``through``
    events and the time of that state (``last_update_time``). ``ordered``
    says the first ``through`` events are in read order (timestamp, then
    event id) by seq, ``last`` is the order of the last of them; left
    False, reads sort the events (always right, slower)."""
    return {
        "format": _FORMAT,
        "app_name": app_name,
        "user_id": user_id,
        "id": session_id,
        "initial": _json_safe(initial),
        "state": _json_safe(state),
        "through": through,
        "updated": updated,
        "ordered": ordered,
        "last": None if last is None else list(last),
    }


def event_record(event: Event | Mapping[str, Any]) -> dict[str, Any]:
    """The agentlog event that stores one ADK event, given as an ``Event`` or
    its JSON form (as ADK's database keeps it; a malformed one raises
    pydantic's ``ValidationError``). A copy: later changes do not reach it."""
    return _record_of(event if isinstance(event, Event) else Event.model_validate(event))


def _normalized(session_id: str) -> str:
    # As ADK's in-memory and SQLite services: surrounding whitespace is not part of an id.
    return session_id.strip() if session_id else session_id


def _json_safe(state: Mapping[str, Any]) -> dict[str, Any]:
    """State as JSON values (datetimes, models … as ADK's stores write them)."""
    safe = to_jsonable_python(dict(state))
    assert isinstance(safe, dict)
    return safe


def _scopes(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` parts of a state or delta, prefixes removed; temp dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return app, user, own


def _stored_delta(stored: StoredEvent) -> dict[str, Any]:
    """The session-scoped state delta of a stored ADK event."""
    actions = stored.event.get(EVENT_FIELD, {}).get("actions") or {}
    return _scopes(actions.get("state_delta") or {})[2]


def _stored_time(stored: StoredEvent) -> float:
    stamp = stored.event.get(EVENT_FIELD, {}).get("timestamp")
    return float(stamp) if stamp is not None else stored.ts


def _order(stored: StoredEvent) -> tuple[float, str]:
    """Where a stored event reads: by timestamp, then by event id (as ADK's
    ``DatabaseSessionService`` orders them)."""
    return _stored_time(stored), str(stored.event.get(EVENT_FIELD, {}).get("id", ""))


def _start(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata of the session before its first event."""
    return {**meta, "state": meta["initial"], "through": 0, "ordered": True, "last": None}


def _record_of(event: Event) -> dict[str, Any]:
    """The agentlog event that stores one ADK event (a copy: later changes do not reach it)."""
    data = event.model_dump(mode="json", exclude_none=True)
    parts = event.content.parts if event.content and event.content.parts else []
    text = "".join(part.text for part in parts if part.text and not part.thought)
    if text:
        kind = "user" if event.author == "user" else "assistant"
        return {"type": kind, "content": text, EVENT_FIELD: data}
    return {"type": "context_view", EVENT_FIELD: data}


def _session(
    meta: dict[str, Any], state: dict[str, Any], events: list[Event], updated: float, head: int
) -> Session:
    """The ADK session a session's metadata names, read at ``head``."""
    session = Session(
        id=meta["id"],
        app_name=meta["app_name"],
        user_id=meta["user_id"],
        state=state,
        events=events,
        last_update_time=updated,
    )
    _set_marker(session, head)
    return session


def _set_marker(session: Session, head: int) -> None:
    # ADK's own stale-writer protocol: its stores keep the version a session
    # was read at in this private attribute of ADK's Session, which copies keep.
    session._storage_update_marker = f"{_MARKER}{head}"  # noqa: SLF001


def _marker_of(session: Session) -> str | None:
    marker: str | None = session._storage_update_marker  # noqa: SLF001 (see _set_marker)
    return marker


class AgentlogListSessionsResponse(ListSessionsResponse):
    """ADK's ``ListSessionsResponse`` plus the token of the next page (None: the last)."""

    next_page_token: str | None = None


class AgentlogSessionService(AsyncClosable, BaseSessionService):
    """Google ADK's ``BaseSessionService`` on an agentlog async checkpointer.

    ``store`` is a path — the service opens an
    :class:`~agentlog.aio.AsyncSqliteCheckpointer` on it (``options`` go to
    it) and closes it in :meth:`close` — or an open
    :class:`~agentlog.aio.AsyncMetadataCheckpointer` (SQLite, memory,
    PostgreSQL), which the service only uses. Services on the same path in
    one process share the file's one engine; services in several processes
    share the file through SQLite's locking.
    """

    def __init__(
        self, store: str | os.PathLike[str] | AsyncMetadataCheckpointer, **options: Any
    ) -> None:
        self._log: AsyncMetadataCheckpointer
        self._owned: AsyncSqliteCheckpointer | None
        self._log, self._owned = open_or_use(store, options, AsyncMetadataCheckpointer)
        self._closed = False

    @property
    def checkpointer(self) -> AsyncMetadataCheckpointer:
        """The agentlog log the sessions live in (read it, fold it, follow it)."""
        return self._log

    @staticmethod
    def session_key(app_name: str, user_id: str, session_id: str) -> str:
        """The agentlog session id that holds an ADK session's events."""
        return _session_key(app_name, user_id, _normalized(session_id))

    # -- create, get, list, delete ------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new session; ``app:`` / ``user:`` keys of ``state`` go to the shared state.

        A taken ``session_id`` raises ADK's ``AlreadyExistsError`` and changes nothing.
        """
        session_id = _normalized(session_id) if session_id else str(uuid.uuid4())
        key = _session_key(app_name, user_id, session_id)
        app, user, own = (_json_safe(part) for part in _scopes(state or {}))
        now = time.time()
        meta = session_metadata(
            app_name,
            user_id,
            session_id,
            initial=own,
            state=own,
            through=0,
            updated=now,
            ordered=True,
        )
        try:
            await self._log.set_metadata(key, meta, 0)  # revision 0: only a new session
        except StorageConflictError:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        app_state, user_state = await self._merge_shared(app_name, user_id, app, user)
        return _session(meta, _merged(own, app_state, user_state), [], now, 0)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its merged state, or None. Events come by timestamp, ties by
        event id, as from ADK's ``DatabaseSessionService``; ``config`` keeps the
        ``num_recent_events`` latest of them and those at or after ``after_timestamp``.
        When the log's seq order is that order, only the events asked for are read
        (``num_recent_events`` from the head back, ``after_timestamp`` by a backwards
        scan that stops at the first older event)."""
        session_id = _normalized(session_id)
        key = _session_key(app_name, user_id, session_id)
        found = await self._current(key)
        if found is None:
            return None
        head, meta, tail = found
        folded = _fold(meta, tail)
        events = await self._events_for(key, head, config, tail, ordered=folded.ordered)
        app_state = await self._shared(_app_key(app_name))
        user_state = await self._shared(_user_key(app_name, user_id))
        state = _merged(folded.state, app_state, user_state)
        return _session(meta, state, events, folded.updated, head)

    async def list_sessions(
        self,
        *,
        app_name: str,
        user_id: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> AgentlogListSessionsResponse:
        """The sessions of an app (of one user, with ``user_id``), oldest update first.

        No event is read: each session comes with its merged state and no
        events. Beyond ADK's signature, ``page_size`` returns at most that many
        and ``next_page_token``, which ``page_token`` continues from (None:
        this was the last page); without ``page_size``, every session.
        """
        if page_size is not None and (isinstance(page_size, bool) or page_size < 1):
            raise ValueError(f"page_size must be an int >= 1, not {page_size!r}")
        after = _decode_token(page_token)
        prefix = f"adk|{_part(app_name)}|" + ("" if user_id is None else f"{_part(user_id)}|")
        users_prefix = f"adk-user|{_part(app_name)}|"
        app_state: dict[str, Any] = {}
        user_states: dict[str, dict[str, Any]] = {}
        rows = []
        for row in await self._log.list(with_metadata=True):
            meta = row.metadata
            if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
                continue
            if row.id.startswith(prefix):
                rows.append(row)
            elif row.id.startswith(users_prefix):
                user_states[meta["user_id"]] = meta["state"]
            elif row.id == _app_key(app_name):
                app_state = meta["state"]
        # A session whose last write stopped before its metadata: fold the events after it.
        listed = []
        for row in rows:
            meta, tail = await self._from(row.id, row.metadata, row.head)
            folded = _fold(meta, tail)
            listed.append(((folded.updated, meta["user_id"], meta["id"]), folded.state))
        listed.sort(key=lambda item: item[0])
        if after is not None:
            listed = [item for item in listed if item[0] > after]
        token = None
        if page_size is not None and len(listed) > page_size:
            listed = listed[:page_size]
            token = orjson.dumps(list(listed[-1][0])).decode()
        sessions = [
            Session(
                id=sid,
                app_name=app_name,
                user_id=uid,
                state=_merged(own, app_state, user_states.get(uid, {})),
                last_update_time=updated,
            )
            for (updated, uid, sid), own in listed
        ]
        return AgentlogListSessionsResponse(sessions=sessions, next_page_token=token)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events (nothing else); deleting twice is fine."""
        await self._log.delete(_session_key(app_name, user_id, _normalized(session_id)))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's shared state, keys without the ``user:`` prefix (``{}`` when none)."""
        return await self._shared(_user_key(app_name, user_id))

    # -- append --------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append ``event`` to ``session`` if the session is current; apply its state.

        A partial event is returned unstored. ``temp:`` keys reach
        ``session.state`` but not storage (they leave the event's delta).
        A session read before another writer appended raises ADK's
        ``StaleSessionError`` ("modified in storage") and nothing is written;
        an unknown session raises ``SessionNotFoundError``.
        """
        if event.partial:
            return event
        delta = dict(event.actions.state_delta) if event.actions else {}
        for name, value in delta.items():
            if name.startswith(State.TEMP_PREFIX):
                session.state[name] = value
        if event.actions and delta:
            event.actions.state_delta = {
                name: value
                for name, value in delta.items()
                if not name.startswith(State.TEMP_PREFIX)
            }
        app, user, _ = _scopes(delta)
        key = _session_key(session.app_name, session.user_id, session.id)
        record = _record_of(event)  # encoded now: later changes to the event stay out
        current = await self._log.metadata(key)
        if not _ours(current.value):
            raise SessionNotFoundError(f"Session {session.id} not found.")
        expected = await self._expected_head(session, key)
        try:
            head = await self._log.append(key, [record], expected_head=expected)
        except CheckpointConflictError:
            raise StaleSessionError(STALE_SESSION_MESSAGE) from None
        if app or user:
            await self._merge_shared(
                session.app_name, session.user_id, _json_safe(app), _json_safe(user)
            )
        await self._settle(key, head)
        _set_marker(session, head)
        session.last_update_time = event.timestamp
        for name, value in delta.items():
            if not name.startswith(State.TEMP_PREFIX):
                session.state[name] = value
        session.events.append(event)
        return event

    # -- fork ----------------------------------------------------------------------

    async def fork_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        event_id: str,
        new_session_id: str | None = None,
    ) -> Session:
        """A new session of the same user holding the events appended up to and
        including ``event_id`` (in append order, which a fork keeps), with the
        session state as it was after that event (agentlog's fork: the source is
        untouched; ``app:`` / ``user:`` state stays shared).

        Raises ``SessionNotFoundError`` for an unknown session, ``ValueError`` when
        the session holds no such event, ``AlreadyExistsError`` for a taken id.
        """
        session_id = _normalized(session_id)
        key = _session_key(app_name, user_id, session_id)
        found = await self._current(key)
        if found is None:
            raise SessionNotFoundError(f"Session {session_id} not found.")
        head, meta, _ = found
        upto = []
        async for stored in self._log.read(key, 0, head):
            upto.append(stored)
            if stored.event.get(EVENT_FIELD, {}).get("id") == event_id:
                break
        else:
            raise ValueError(f"session {session_id!r} holds no event {event_id!r}")
        new_id = _normalized(new_session_id) if new_session_id else str(uuid.uuid4())
        new_key = _session_key(app_name, user_id, new_id)
        at_seq = upto[-1].seq
        try:
            await self._log.fork(key, at_seq, new_key)
        except SessionExistsError:
            raise AlreadyExistsError(f"Session with id {new_id} already exists.") from None
        folded = _fold(_start(meta), upto)
        forked = {**meta, "id": new_id, **folded.settled(at_seq)}
        revision = (await self._log.metadata(new_key)).revision
        await self._log.set_metadata(new_key, forked, revision)
        got = await self.get_session(app_name=app_name, user_id=user_id, session_id=new_id)
        assert got is not None
        return got

    # -- the parts -----------------------------------------------------------------

    async def _current(self, key: str) -> tuple[int, dict[str, Any], list[StoredEvent]] | None:
        """``(head, metadata, events after the metadata's seq)``, or None for no session."""
        for _ in range(_CAS_ROUNDS):
            head = await self._log.head(key)
            meta = (await self._log.metadata(key)).value
            if not _ours(meta):
                return None
            if meta["through"] <= head:  # else a write landed between the two reads
                return head, *(await self._from(key, meta, head))
        # The log was cut below the metadata's seq (a truncate): fold it from the start.
        return head, *(await self._from(key, meta, head))

    async def _from(
        self, key: str, meta: dict[str, Any], head: int
    ) -> tuple[dict[str, Any], list[StoredEvent]]:
        """The metadata to fold from and the events after it, up to ``head``."""
        through = meta["through"]
        if through > head:  # cut below it: from the initial state and the first event
            meta, through = _start(meta), 0
        return meta, (await self._read(key, through, head) if head > through else [])

    async def _read(self, key: str, since: int, until: int) -> list[StoredEvent]:
        return [stored async for stored in self._log.read(key, since, until - since)]

    async def _events_for(
        self,
        key: str,
        head: int,
        config: GetSessionConfig | None,
        tail: list[StoredEvent],
        *,
        ordered: bool,
    ) -> list[Event]:
        recent = None if config is None else config.num_recent_events
        # As ADK's persistent stores: an after_timestamp of 0 filters nothing.
        after = (config.after_timestamp or None) if config is not None else None
        if recent == 0:
            return []
        if not ordered:  # appended out of read order: read it all and sort it
            stored = sorted(await self._read(key, 0, head), key=_order)
            if after is not None:
                stored = [event for event in stored if _stored_time(event) >= after]
            if recent is not None:
                stored = stored[len(stored) - recent :] if recent < len(stored) else stored
            return [Event.model_validate(s.event[EVENT_FIELD]) for s in stored]
        since = 0 if recent is None else max(0, head - recent)
        if after is None:
            if tail and tail[0].seq <= since + 1:
                stored = [event for event in tail if event.seq > since]
            else:
                stored = await self._read(key, since, head)
        else:
            # Back from the head, a window at a time, until an event older than ``after``.
            window = _SCAN_WINDOW
            while True:
                start = max(since, head - window)
                stored = await self._read(key, start, head)
                if start == since or any(_stored_time(s) < after for s in stored):
                    break
                window *= 2
            cut = 0
            for index in range(len(stored) - 1, -1, -1):
                if _stored_time(stored[index]) < after:
                    cut = index + 1
                    break
            stored = stored[cut:]
        return [Event.model_validate(s.event[EVENT_FIELD]) for s in stored]

    async def _expected_head(self, session: Session, key: str) -> int:
        """The head ``session`` was read at: its marker, or for a session without one
        (built by hand, or by another service) the stored head if the stored event
        that reads last (by timestamp, then id, as ADK's DatabaseSessionService
        compares) is the session's last event."""
        marker = _marker_of(session)
        if marker is not None and marker.startswith(_MARKER):
            return int(marker.removeprefix(_MARKER))
        found = await self._current(key)
        head = found[0] if found is not None else await self._log.head(key)
        last = await self._read(key, head - 1, head) if head else []
        if last and found is not None and not _fold(found[1], found[2]).ordered:
            last = [max(await self._read(key, 0, head), key=_order)]
        stored_last = last[0].event.get(EVENT_FIELD, {}).get("id") if last else None
        held_last = session.events[-1].id if session.events else None
        if stored_last != held_last:
            raise StaleSessionError(STALE_SESSION_MESSAGE)
        return head

    async def _settle(self, key: str, head: int) -> None:
        """Fold the session's state through ``head`` into its metadata (compare-and-set)."""
        for _ in range(_CAS_ROUNDS):
            current = await self._log.metadata(key)
            meta = current.value
            if not _ours(meta):
                return  # deleted meanwhile
            if meta["through"] >= head:
                now = await self._log.head(key)
                if meta["through"] <= now:
                    return  # a later writer folded it already
                head = now  # the log was cut below the metadata's seq: fold it afresh
            start, tail = await self._from(key, meta, head)
            if "ordered" not in start:  # written without its order: find it once
                start = {**start, **await self._order_through(key, start["through"])}
            settled = {**meta, **_fold(start, tail).settled(head)}
            try:
                await self._log.set_metadata(key, settled, current.revision)
                return
            except StorageConflictError:
                continue
        # Still contended: readers fold the events after the metadata's seq anyway.

    async def _order_through(self, key: str, through: int) -> dict[str, Any]:
        """The ``ordered`` and ``last`` metadata fields of the first ``through`` events."""
        last = None
        for stored in await self._read(key, 0, through) if through else []:
            order = _order(stored)
            if last is not None and order < last:
                return {"ordered": False, "last": list(order)}
            last = order
        return {"ordered": True, "last": None if last is None else list(last)}

    async def _shared(self, key: str) -> dict[str, Any]:
        meta = (await self._log.metadata(key)).value
        return dict(meta["state"]) if _ours(meta) else {}

    async def _merge_shared(
        self, app_name: str, user_id: str, app: dict[str, Any], user: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Merge the deltas into the app's and the user's state; return both states."""
        app_state = await self._merge(app_name, None, app)
        user_state = await self._merge(app_name, user_id, user)
        return app_state, user_state

    async def _merge(
        self, app_name: str, user_id: str | None, delta: dict[str, Any]
    ) -> dict[str, Any]:
        """Key by key, compare-and-set: a concurrent writer's keys are never lost."""
        key = shared_key(app_name, user_id)
        for _ in range(_CAS_ROUNDS):
            current = await self._log.metadata(key)
            state = dict(current.value["state"]) if _ours(current.value) else {}
            if not delta:
                return state
            state.update(delta)
            try:
                await self._log.set_metadata(
                    key, shared_metadata(app_name, user_id, state), current.revision
                )
                return state
            except StorageConflictError:
                continue
        raise StorageConflictError(key, None, None)

    # -- closing -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    async def aclose(self) -> None:
        """Close the checkpointer if this service opened it (else nothing); idempotent."""
        self._closed = True
        if self._owned is not None:
            await self._owned.aclose()

    async def close(self) -> None:
        """:meth:`aclose`, under the name ADK's ``DatabaseSessionService`` gives it."""
        await self.aclose()

    def __repr__(self) -> str:
        return f"AgentlogSessionService({type(self._log).__name__})"


def _ours(meta: object) -> bool:
    return isinstance(meta, dict) and meta.get("format") == _FORMAT


@dataclass
class _Folded:
    """A session folded through some seq: its state, last update time and order."""

    state: dict[str, Any]
    updated: float
    #: Whether the events through the seq are in read order (timestamp, id) by seq.
    ordered: bool
    #: The read order of the last of them (None: no event).
    last: tuple[float, str] | None

    def settled(self, through: int) -> dict[str, Any]:
        """The metadata fields that record this fold through seq ``through``."""
        return {
            "state": self.state,
            "through": through,
            "updated": self.updated,
            "ordered": self.ordered,
            "last": None if self.last is None else list(self.last),
        }


def _fold(meta: dict[str, Any], tail: list[StoredEvent]) -> _Folded:
    """The session after ``tail`` (the events after the metadata's ``through``).

    Metadata without an order (older, or written by another program) is taken
    as out of order: reads sort, which is always right."""
    own = dict(meta["state"])
    updated = float(meta["updated"])
    ordered = bool(meta.get("ordered", False))
    stamp = meta.get("last")
    last = None if stamp is None else (float(stamp[0]), str(stamp[1]))
    for stored in tail:
        own.update(_stored_delta(stored))
        updated = _stored_time(stored)
        order = _order(stored)
        if last is not None and order < last:
            ordered = False
        last = order
    return _Folded(own, updated, ordered, last)


def _merged(own: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    state = dict(own)
    state.update({State.APP_PREFIX + key: value for key, value in app.items()})
    state.update({State.USER_PREFIX + key: value for key, value in user.items()})
    return state


def _decode_token(token: str | None) -> tuple[float, str, str] | None:
    if token is None:
        return None
    try:
        updated, user_id, session_id = orjson.loads(token)
        return float(updated), str(user_id), str(session_id)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        raise ValueError(f"page_token is not a token list_sessions returned: {token!r}") from None
