"""An agentlog session log as the OpenAI Agents SDK's ``Session``.

:class:`AgentlogSession` implements the SDK's ``Session`` protocol
(``session_id``, ``session_settings``, ``get_items``, ``add_items``,
``pop_item``, ``clear_session``) on any agentlog async checkpointer, so
``Runner.run(agent, input, session=AgentlogSession(...))`` keeps its
conversation in an agentlog log: one event per SDK item, appended atomically,
readable by :func:`agentlog.fold_events` and ``agentlog show``.

Each item is stored whole under the event's ``"item"`` field (it comes back
equal, whatever its type) beside the fields agentlog's own event types need:

* a ``user`` or ``assistant`` message (``role`` user / assistant) → a ``user``
  / ``assistant`` event whose ``content`` is the message's content (one
  without content → ``context_view``);
* a tool call (``function_call``, ``custom_tool_call``, ``computer_call``,
  ``shell_call``, … — every kind that has a matching output item) → an
  ``assistant`` event whose content is one ``tool_use`` block
  (``id`` = the call id, ``name``, ``input`` = the arguments, decoded when
  they are a JSON object in a string, as a ``function_call``'s are);
* a tool call's output (``function_call_output`` …) → a ``tool_result``
  event (``tool_use_id`` = the call id, ``content`` = the output);
* a call or output without a call id (a provider-executed tool search the
  provider left anonymous) → ``context_view``: it pairs with nothing;
* anything else (system and developer messages, reasoning, hosted tool
  calls, item references, kinds the SDK adds later) → ``context_view``, the
  bookkeeping type that folding skips.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, cast

import orjson
from agents import SessionSettings, TResponseInputItem
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from agentlog import CheckpointConflictError, UnserializableEventError, check_session_id
from agentlog.aio import AsyncCheckpointer, AsyncSqliteCheckpointer
from agentlog.integrations import open_or_use

__all__ = ["ITEM_FIELD", "AgentlogSession", "event_of_item", "item_of_event"]

#: The event field that holds the SDK item exactly as it was added.
ITEM_FIELD = "item"

#: Tool-call item types and their output types (the SDK's call/output pairs).
_CALL_OUTPUTS: dict[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "tool_search_call": "tool_search_output",
    "program": "program_output",
}
_OUTPUTS = frozenset(_CALL_OUTPUTS.values())
#: The fields a call item carries its input in, by preference.
_CALL_INPUT_FIELDS = ("arguments", "input", "action", "operation", "code")

#: Per checkpointer object: a lock (and its users) per event loop and session
#: id, so that in one process a pop never runs between another task's read of
#: the head and its write. Entries go when their last user leaves.
_WRITE_LOCKS: weakref.WeakKeyDictionary[
    object, dict[tuple[asyncio.AbstractEventLoop, str], tuple[asyncio.Lock, list[int]]]
] = weakref.WeakKeyDictionary()

#: Conflicting appends retried with the head the conflict reported before the
#: batch is appended without a check (still atomic and contiguous).
_MAX_CONFLICT_RETRIES = 16


def event_of_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """The agentlog event that stores one SDK item (the item kept under ``"item"``).

    The mapping is not copied here: encoding it (on append) takes the copy.
    """
    kind = item.get("type")
    role = item.get("role")
    if kind in (None, "message") and role in ("user", "assistant"):
        if item.get("content") is None:  # nothing to fold: kept, as bookkeeping
            return {"type": "context_view", ITEM_FIELD: item}
        return {"type": role, "content": item.get("content"), ITEM_FIELD: item}
    call_id = item.get("call_id", item.get("id"))
    if call_id is None and (kind in _CALL_OUTPUTS or kind in _OUTPUTS):
        # A provider-executed call or output without a call id (an anonymous
        # tool search) pairs with nothing: kept whole, as bookkeeping.
        return {"type": "context_view", ITEM_FIELD: item}
    if isinstance(kind, str) and kind in _CALL_OUTPUTS:
        tool_input = next((item[f] for f in _CALL_INPUT_FIELDS if f in item), None)
        if isinstance(tool_input, str) and tool_input.startswith("{"):
            # A function call's arguments are a JSON object in a string: the
            # tool_use block holds the object, as every other tool_use does.
            tool_input = _json_object_or_text(tool_input)
        block = {
            "type": "tool_use",
            "id": call_id,
            "name": item.get("name", kind),
            "input": tool_input,
        }
        return {"type": "assistant", "content": [block], ITEM_FIELD: item}
    if kind in _OUTPUTS:
        return {
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": item.get("output"),
            ITEM_FIELD: item,
        }
    return {"type": "context_view", ITEM_FIELD: item}


def _json_object_or_text(text: str) -> Any:
    """``text`` decoded when it is a JSON object, else ``text`` as it is."""
    try:
        decoded = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return decoded if isinstance(decoded, dict) else text


def item_of_event(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The SDK item an event holds, or None for an event that holds none.

    Events written by this adapter give back their item. A ``user`` or
    ``assistant`` event written by other agentlog code reads as the SDK's
    plain message (``{"role", "content"}``), so such a log can be resumed
    by the SDK; any other event is not an item (skipped, as the SDK's own
    ``SQLiteSession`` skips a row it cannot decode).
    """
    item = event.get(ITEM_FIELD)
    if isinstance(item, dict):
        return item
    kind = event.get("type")
    if kind in ("user", "assistant") and "content" in event:
        return {"role": kind, "content": event["content"]}
    return None


class AgentlogSession:
    """The OpenAI Agents SDK's ``Session`` on an agentlog async checkpointer.

    ``store`` is either a path — the session opens an
    :class:`~agentlog.aio.AsyncSqliteCheckpointer` on it (``options`` go to
    it), **owns** it and closes it in :meth:`aclose` / :meth:`close` or on
    leaving ``async with`` — or an open :class:`~agentlog.aio.AsyncCheckpointer`
    (SQLite, file or memory), which the session only uses: its owner closes
    it. Sessions given the same path share the process's one engine for
    the file (see :func:`~agentlog.engine.open_shared_engine`).

    ``session_settings`` (an SDK ``SessionSettings`` or a dict) gives the
    default ``limit`` of :meth:`get_items`, as for the SDK's sessions.

    Concurrency: :meth:`add_items` appends the batch with the head this
    object last saw as ``expected_head``. A conflict means another writer
    (another session object, task or process) changed the session since;
    the SDK's adds are unconditional, so the batch is re-based onto the head
    the conflict reported and appended again — never interleaved with
    another batch, never lost, never failed for a conflict.
    :attr:`conflicts` counts those retries. Every try of one add carries
    the same append key, so no retry can store the batch twice, and on
    PostgreSQL an add whose connection was lost around its commit gets its
    real outcome instead of an error. In one process, the adds and
    pops of a session on one checkpointer object take turns (see
    :meth:`pop_item` for pops across processes).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: str | os.PathLike[str] | AsyncCheckpointer,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.session_id = check_session_id(session_id)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self._log: AsyncCheckpointer
        self._owned: AsyncSqliteCheckpointer | None
        self._log, self._owned = open_or_use(store, options, AsyncCheckpointer)
        self._head: int | None = None  # the head this object last saw (None: not yet read)
        self.conflicts = 0

    # Properties, alike in shape (as on the checkpointers): read-only views of
    # what the session was opened with.
    @property
    def checkpointer(self) -> AsyncCheckpointer:
        """The agentlog log the items live in (read it, fold it, follow it)."""
        return self._log

    @property
    def owns_checkpointer(self) -> bool:
        """Whether this session opened its checkpointer (and so closes it)."""
        return self._owned is not None

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in chronological order: the last ``limit`` of them.

        ``limit=None`` takes ``session_settings.limit``; when that is None
        too, every item. ``0`` gives none and a negative limit every item, as
        the SDK's ``SQLiteSession``. With a limit, only the tail is read
        (from ``head - limit``). Each call returns new objects: changing them
        never changes the session.
        """
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is None or limit < 0:
            return _as_items(await self._read(0, None))
        if limit == 0:
            return []
        head = await self._log.head(self.session_id)
        self._head = head
        window = limit
        while True:
            since = max(0, head - window)
            found = await self._read(since, head - since)
            if len(found) >= limit or since == 0:
                return _as_items(found[-limit:])
            window *= 2  # events that hold no item were skipped: look further back

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` as one atomic batch, one event each, after the head.

        Nothing is written when any item fails: a non-mapping or a value JSON
        cannot hold raises :class:`~agentlog.UnserializableEventError` (or
        :class:`~agentlog.InvalidEventError` for NaN) naming its index. The
        items are encoded before this returns, so changing them afterwards
        never changes the session. A conflict with another writer is retried
        (see the class). An empty list writes nothing; on a closed
        checkpointer it raises :class:`~agentlog.CheckpointerClosedError`,
        as any call does.
        """
        events = [event_of_item(_as_mapping(index, item)) for index, item in enumerate(items)]
        async with self._exclusive():
            await self._append(events)

    async def _append(self, events: list[dict[str, Any]]) -> None:
        # One key for every try of this add: a try whose outcome was lost
        # (PostgreSQL resolves it by the key) is never stored twice.
        key = f"add-{uuid.uuid4().hex}"
        expected = self._head
        if expected is None or not events:
            # An empty add writes nothing, but a closed log still refuses it.
            expected = self._head = await self._log.head(self.session_id)
            if not events:
                return
        for _ in range(_MAX_CONFLICT_RETRIES):
            try:
                self._head = await self._log.append(self.session_id, events, expected, key=key)
                return
            except CheckpointConflictError as conflict:
                self.conflicts += 1
                expected = conflict.actual
        # Still contended: the log allocates the seqs inside the write anyway.
        self._head = await self._log.append(self.session_id, events, key=key)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the most recent item and return it; None on an empty session.

        A truncate by one event (the log's time travel). Events that hold no
        item are dropped on the way, as the SDK drops undecodable rows.
        In one process, pops and adds of one session on one checkpointer
        object take turns, so a pop never removes another task's add. The
        log has no conditional truncate, so a pop racing an add to the same
        session from another process (or another checkpointer object) can
        remove that add: keep one writer per session across processes (the
        SDK's pattern: one run at a time per session).
        """
        async with self._exclusive():
            while True:
                head = await self._log.head(self.session_id)
                if head == 0:
                    self._head = 0
                    return None
                last = await self._read(head - 1, 1)
                self._head = await self._log.truncate(self.session_id, head - 1)
                if last:
                    return _as_items(last)[0]

    async def clear_session(self) -> None:
        """Delete this session and all its items; other sessions are untouched."""
        await self._log.delete(self.session_id)
        self._head = 0

    @asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        """Hold this process's lock on (checkpointer, loop, session id) for one write."""
        key = (asyncio.get_running_loop(), self.session_id)
        locks = _WRITE_LOCKS.setdefault(self._log, {})
        entry = locks.get(key)
        if entry is None:
            entry = locks[key] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del locks[key]

    async def _read(self, since: int, limit: int | None) -> list[dict[str, Any]]:
        """The items of the events after ``since`` (at most ``limit`` events)."""
        found: list[dict[str, Any]] = []
        async for stored in self._log.read(self.session_id, since, limit):
            item = item_of_event(stored.event)
            if item is not None:
                found.append(item)
        return found

    # -- closing ----------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the checkpointer if this session opened it (else nothing)."""
        if self._owned is not None:
            await self._owned.aclose()

    def close(self) -> None:
        """:meth:`aclose` from outside the event loop (as ``SQLiteSession.close``)."""
        if self._owned is not None:
            self._owned.close()

    async def __aenter__(self) -> AgentlogSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AgentlogSession({self.session_id!r}, {type(self._log).__name__})"


def _as_mapping(index: int, item: object) -> Mapping[str, Any]:
    """An SDK item (a TypedDict, so a dict at run time) as a mapping, or a typed refusal."""
    if not isinstance(item, Mapping):
        kind = type(item).__name__
        raise UnserializableEventError(index, f"an item must be a mapping, not {kind}")
    return cast(Mapping[str, Any], item)


def _as_items(items: Sequence[dict[str, Any]]) -> list[TResponseInputItem]:
    """Decoded items as the SDK's item type (they are the dicts the SDK added)."""
    return cast(list[TResponseInputItem], list(items))
