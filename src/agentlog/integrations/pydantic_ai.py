"""Pydantic AI message history in an agentlog session.

:class:`MessageHistory` (on any agentlog checkpointer) and
:class:`AsyncMessageHistory` (on any :class:`~agentlog.aio.AsyncCheckpointer`)
keep a conversation's ``ModelMessage`` list in one session::

    history = MessageHistory(log, "chat-1")
    result = agent.run_sync("hello", message_history=history.load())
    history.save(result.new_messages())

:meth:`~MessageHistory.load` gives back exactly what was saved (Pydantic AI's
own ``ModelMessagesTypeAdapter`` round trip) and remembers the session's head;
:meth:`~MessageHistory.save` appends after that head only, atomically: when
another run continued the same history first, it raises
:class:`~agentlog.CheckpointConflictError` and writes nothing.

Each message is stored whole (its JSON, as the type adapter writes it) under
the ``"message"`` field of its first event, beside the fields agentlog's own
event types need, so ``agentlog show`` and :func:`agentlog.fold_events` read
the conversation:

* a request's user prompt → a ``user`` event (``content``: the prompt);
* a tool's return, or a retry sent back for a tool call → a ``tool_result``
  event (``tool_use_id`` = the tool call id; a retry has ``is_error``);
* a retry not tied to a tool → a ``user`` event;
* a response → an ``assistant`` event whose content is its text and its tool
  calls as ``tool_use`` blocks;
* other parts (system prompts, thinking, parts Pydantic AI adds later) get
  no event of their own; a message of only those → ``context_view``, the
  bookkeeping type folding skips.

A message with several such parts gets one event per part; only the first
holds the message, and a load reads only those.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from agentlog import BaseCheckpointer, UnserializableEventError, check_session_id
from agentlog.aio import AsyncCheckpointer

__all__ = [
    "MESSAGE_FIELD",
    "AsyncMessageHistory",
    "MessageHistory",
    "events_of_messages",
    "messages_of_events",
]

#: The event field that holds a message as Pydantic AI's type adapter writes it.
MESSAGE_FIELD = "message"


def events_of_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """The agentlog events that store ``messages`` (at least one event each).

    Raises :class:`~agentlog.UnserializableEventError` (naming its index)
    for anything that is not a Pydantic AI message."""
    for index, message in enumerate(messages):
        if getattr(message, "kind", None) not in ("request", "response"):
            kind = type(message).__name__
            raise UnserializableEventError(
                index, f"expected a ModelRequest or ModelResponse, not {kind}"
            )
    dumped = cast(
        list[dict[str, Any]], ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    )
    events: list[dict[str, Any]] = []
    for stored in dumped:
        mine = _response_events(stored) if stored["kind"] == "response" else _request_events(stored)
        if not mine:
            mine = [{"type": "context_view"}]
        mine[0][MESSAGE_FIELD] = stored
        events.extend(mine)
    return events


def messages_of_events(events: Iterable[Mapping[str, Any]]) -> list[ModelMessage]:
    """The messages the events hold, in order (events without one are skipped)."""
    found = [event[MESSAGE_FIELD] for event in events if isinstance(event.get(MESSAGE_FIELD), dict)]
    return ModelMessagesTypeAdapter.validate_python(found)


def _response_events(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.get("parts", ()):
        kind = part.get("part_kind")
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("content", "")})
        elif kind == "tool-call":
            args = part.get("args")
            if isinstance(args, str):
                args = _object_or_text(args)
            blocks.append(
                {
                    "type": "tool_use",
                    "id": part.get("tool_call_id"),
                    "name": part.get("tool_name"),
                    "input": args,
                }
            )
    return [{"type": "assistant", "content": blocks}] if blocks else []


def _request_events(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for part in message.get("parts", ()):
        kind = part.get("part_kind")
        content = part.get("content")
        if kind == "user-prompt" and content is not None:
            events.append({"type": "user", "content": content})
        elif kind in ("tool-return", "retry-prompt") and part.get("tool_call_id"):
            event = {"type": "tool_result", "tool_use_id": part["tool_call_id"]}
            event["content"] = content
            # A retry: a retry-prompt part, or (2.x) a tool return with another outcome.
            if kind == "retry-prompt" or part.get("outcome") not in (None, "success"):
                event["is_error"] = True
            events.append(event)
        elif kind == "retry-prompt" and content is not None:
            events.append({"type": "user", "content": content})
    return events


def _object_or_text(text: str) -> Any:
    """``text`` decoded when it is a JSON object (a tool call's arguments), else as it is."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return text
    return decoded if isinstance(decoded, dict) else text


class _History:
    """What both histories share: the session and the head last seen."""

    def __init__(self, session_id: str) -> None:
        self.session_id = check_session_id(session_id)
        self._head = 0

    @property
    def head(self) -> int:
        """The session's head as this object last saw it (0 before a load)."""
        return self._head


class MessageHistory(_History):
    """A Pydantic AI conversation in one session of an agentlog checkpointer.

    ``log`` is any :class:`~agentlog.BaseCheckpointer` (SQLite, PostgreSQL,
    file, memory); the history only uses it, its owner closes it. One object
    follows one run: :meth:`load`, run the agent, :meth:`save` its new
    messages.
    """

    def __init__(self, log: BaseCheckpointer, session_id: str) -> None:
        super().__init__(session_id)
        self.log = log

    def load(self) -> list[ModelMessage]:
        """Every message of the session, in order; what a save continues from."""
        head = self.log.head(self.session_id)
        stored = self.log.read(self.session_id, 0, head)
        self._head = head
        return messages_of_events(e.event for e in stored)

    def save(self, messages: Sequence[ModelMessage]) -> int:
        """Append ``messages`` (a run's ``new_messages()``) after the head the
        last :meth:`load` saw (0 without one), atomically; the new head.

        Raises :class:`~agentlog.CheckpointConflictError` when the session
        moved on since (another run continued it first): nothing is written
        and :meth:`load` gives the history that run left. An empty list
        writes nothing."""
        events = events_of_messages(messages)
        if events:
            self._head = self.log.append(self.session_id, events, expected_head=self._head)
        return self._head


class AsyncMessageHistory(_History):
    """:class:`MessageHistory` on an :class:`~agentlog.aio.AsyncCheckpointer`."""

    def __init__(self, log: AsyncCheckpointer, session_id: str) -> None:
        super().__init__(session_id)
        self.log = log

    async def load(self) -> list[ModelMessage]:
        """Every message of the session, in order; what a save continues from."""
        head = await self.log.head(self.session_id)
        stored = [e.event async for e in self.log.read(self.session_id, 0, head)]
        self._head = head
        return messages_of_events(stored)

    async def save(self, messages: Sequence[ModelMessage]) -> int:
        """:meth:`MessageHistory.save`, awaited."""
        events = events_of_messages(messages)
        if events:
            self._head = await self.log.append(self.session_id, events, self._head)
        return self._head
