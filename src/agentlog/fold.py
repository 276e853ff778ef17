"""Rebuild a conversation (a list of chat messages) from a session log.

One folder, :class:`Folder`, applies events one at a time; :func:`fold_events`
runs it over a whole log, and a session handle keeps one up to date as it
appends and reads, so a long session is never re-folded from the start.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .events import StoredEvent

__all__ = ["SHAPES", "TEXT_BLOCK_TYPES", "Folder", "fold_events"]

#: The content blocks that hold plain text: Anthropic's ``text``, and the
#: OpenAI Responses API's ``output_text`` (a model's) and ``input_text`` (a user's).
TEXT_BLOCK_TYPES = frozenset({"text", "output_text", "input_text"})

# Bookkeeping events record what happened around the conversation; they are
# part of the log but never become messages.
_BOOKKEEPING = frozenset(
    {"tool_started", "file_snapshot", "artifact_verified", "permission_decision", "context_view"}
)

#: The message shapes :func:`fold_events` can produce.
SHAPES = ("anthropic", "openai")


def _tool_result_block(event: Mapping[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": event.get("tool_use_id"),
        "content": event.get("content"),
    }
    if "is_error" in event:
        block["is_error"] = event["is_error"]
    return block


def _tool_call(block: Mapping[str, Any]) -> dict[str, Any]:
    arguments = block.get("input", {})
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {
            "name": block.get("name"),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def _tool_uses(content: object) -> list[Mapping[str, Any]]:
    """The ``tool_use`` blocks of an assistant's content (none unless it is a list)."""
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]


class Folder:
    """Folds events into the conversation they describe, one event at a time.

    :func:`fold_events` is ``Folder(shape).extend(events).messages``; a
    caller that keeps the folder and feeds it each new event pays for that
    event only. Besides the messages it tracks:

    * :attr:`pending_tool_calls` — the ``tool_use`` blocks of ``assistant``
      events (blocks of a list ``content`` with ``"type": "tool_use"`` and an
      ``id``) that no ``tool_result`` event has answered yet (matched by
      ``tool_use_id``; a ``tool_started`` does not answer a call). A
      ``summary`` does not clear them: a call left open is still open.
    * :attr:`turn` — the number of ``user`` events folded so far: 0 before
      the first, 1 during the first exchange, and so on. ``tool_result``
      events are not ``user`` events (though they fold into user messages),
      and a ``summary`` does not reset the count.
    * :attr:`seq` — the ``seq`` of the last :class:`StoredEvent` folded (0
      when none; plain mappings leave it as it is).

    An event of unknown type raises ``ValueError`` and changes nothing.
    Messages already handed out are never changed by later events.
    """

    __slots__ = ("_merging", "_messages", "_pending", "_shape", "seq", "turn")

    def __init__(self, shape: str = "anthropic") -> None:
        if shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {shape!r}")
        self._shape = shape
        self._messages: list[dict[str, Any]] = []
        self._merging = False
        self._pending: dict[Any, Mapping[str, Any]] = {}
        self.turn = 0
        self.seq = 0

    @property
    def shape(self) -> str:
        """The message shape, ``"anthropic"`` or ``"openai"``."""
        return self._shape

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far: a new list (the messages themselves are shared)."""
        return list(self._messages)

    @property
    def pending_tool_calls(self) -> list[dict[str, Any]]:
        """The ``tool_use`` blocks still waiting for their result, in call order (copies)."""
        return [dict(block) for block in self._pending.values()]

    def extend(self, items: Iterable[StoredEvent | Mapping[str, Any]]) -> Folder:
        """Fold every event of ``items`` in order; return the folder itself."""
        add = self.add
        for item in items:
            add(item)
        return self

    def add(self, item: StoredEvent | Mapping[str, Any]) -> None:
        """Fold one event (a :class:`StoredEvent` or a plain event mapping)."""
        if isinstance(item, StoredEvent):
            event: Mapping[str, Any] = item.event
        else:
            event = item
        kind = event.get("type")
        if kind == "tool_result":
            self._pending.pop(event.get("tool_use_id"), None)
            self._add_result(event)
        elif kind in _BOOKKEEPING:
            # A tool_started between two results does not split their turn.
            pass
        elif kind == "user":
            self._merging = False
            self.turn += 1
            self._messages.append({"role": "user", "content": event.get("content")})
        elif kind == "assistant":
            self._merging = False
            content = event.get("content")
            for block in _tool_uses(content):
                if block.get("id") is not None:
                    self._pending[block.get("id")] = block
            self._messages.append(self._assistant(content))
        elif kind == "summary":
            self._merging = False
            self._messages = [{"role": "user", "content": event.get("content")}]
        else:
            raise ValueError(f"cannot fold an event of unknown type {kind!r}")
        if isinstance(item, StoredEvent):
            self.seq = item.seq

    def _add_result(self, event: Mapping[str, Any]) -> None:
        if self._shape == "openai":
            content = event.get("content")
            self._messages.append(
                {
                    "role": "tool",
                    "tool_call_id": event.get("tool_use_id"),
                    "content": content if isinstance(content, str) else json.dumps(content),
                }
            )
            return
        block = _tool_result_block(event)
        if self._merging:
            # A new message, not the old one changed: messages handed out stay as they were.
            last = self._messages[-1]
            self._messages[-1] = {"role": "user", "content": [*last["content"], block]}
        else:
            self._messages.append({"role": "user", "content": [block]})
            self._merging = True

    def _assistant(self, content: Any) -> dict[str, Any]:
        if self._shape == "anthropic" or not isinstance(content, list):
            return {"role": "assistant", "content": content}
        # OpenAI: text blocks (of either API) become the content, tool_use blocks the tool_calls.
        blocks = [b for b in content if isinstance(b, Mapping)]
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") in TEXT_BLOCK_TYPES]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "\n".join(texts) if texts else None,
        }
        calls = [_tool_call(b) for b in blocks if b.get("type") == "tool_use"]
        if calls:
            message["tool_calls"] = calls
        return message


def fold_events(
    events: Iterable[StoredEvent | Mapping[str, Any]], *, shape: str = "anthropic"
) -> list[dict[str, Any]]:
    """Fold events, in log order, into the conversation they describe.

    ``shape="anthropic"`` (the default) gives the messages described below;
    ``shape="openai"`` the Chat Completions shape (below). Both are one
    :class:`Folder` run over ``events``.

    Accepts :class:`StoredEvent` objects (as :meth:`read` yields them) or plain
    event mappings. The rules:

    * ``user`` and ``assistant`` events become ``{"role": type, "content":
      event["content"]}``.
    * Consecutive ``tool_result`` events merge into *one* user message whose
      content is a list of ``tool_result`` blocks — the turn shape a model API
      expects after an assistant turn that called several tools::

        assistant(tool_use a, b), tool_result(a), tool_result(b)
        -> [{"role": "assistant", ...},
            {"role": "user", "content": [{"type": "tool_result",
                                          "tool_use_id": "a", ...},
                                         {"type": "tool_result",
                                          "tool_use_id": "b", ...}]}]

    * A ``summary`` event resets the transcript: everything before it is
      replaced by one user message holding the summary's ``content``::

        user, assistant, summary("so far: …"), user
        -> [{"role": "user", "content": "so far: …"}, {"role": "user", ...}]

    * Bookkeeping events (``tool_started``, ``file_snapshot``,
      ``artifact_verified``, ``permission_decision``, ``context_view``) do not
      become messages.

    The OpenAI shape of the same conversation:

    * ``user`` → ``{"role": "user", "content": …}`` (as stored);
    * ``assistant`` → ``{"role": "assistant", "content": …}``; when its
      content is a list of blocks, its ``text`` blocks become the content (one
      string, ``None`` when there is none) and its ``tool_use`` blocks become
      ``tool_calls`` (``id``, ``type: "function"``, ``function.name`` and
      ``function.arguments``, the input as a JSON string);
    * each ``tool_result`` → ``{"role": "tool", "tool_call_id": …,
      "content": …}`` (a content that is not a string is written as JSON;
      OpenAI's shape has no ``is_error``, so it is dropped);
    * ``summary`` resets the transcript, bookkeeping is skipped, as above.

    The returned messages are new dicts; ``content`` values are shared with
    the events passed in.
    """
    return Folder(shape).extend(events).messages
