"""Rebuild a conversation (a list of chat messages) from a session log."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .events import StoredEvent

__all__ = ["SHAPES", "fold_events"]

# Bookkeeping events record what happened around the conversation; they are
# part of the log but never become messages.
_BOOKKEEPING = frozenset(
    {"tool_started", "file_snapshot", "artifact_verified", "permission_decision", "context_view"}
)


def _tool_result_block(event: Mapping[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": event.get("tool_use_id"),
        "content": event.get("content"),
    }
    if "is_error" in event:
        block["is_error"] = event["is_error"]
    return block


#: The message shapes :func:`fold_events` can produce.
SHAPES = ("anthropic", "openai")


def fold_events(
    events: Iterable[StoredEvent | Mapping[str, Any]], *, shape: str = "anthropic"
) -> list[dict[str, Any]]:
    """Fold events, in log order, into the conversation they describe.

    ``shape="anthropic"`` (the default) gives the messages described below;
    ``shape="openai"`` the Chat Completions shape (see :func:`_openai`).

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

    The returned messages are new dicts; ``content`` values are shared with
    the events passed in.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {shape!r}")
    if shape == "openai":
        return _openai(events)
    messages: list[dict[str, Any]] = []
    merging_results = False
    for item in events:
        event = item.event if isinstance(item, StoredEvent) else item
        kind = event.get("type")
        if kind == "tool_result":
            block = _tool_result_block(event)
            if merging_results:
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
                merging_results = True
            continue
        if kind in _BOOKKEEPING:
            # A tool_started between two results does not split their turn.
            continue
        merging_results = False
        if kind == "user" or kind == "assistant":
            messages.append({"role": kind, "content": event.get("content")})
        elif kind == "summary":
            messages = [{"role": "user", "content": event.get("content")}]
        else:
            raise ValueError(f"cannot fold an event of unknown type {kind!r}")
    return messages


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


def _openai(events: Iterable[StoredEvent | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Chat Completions shape of the same conversation.

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
    """
    messages: list[dict[str, Any]] = []
    for item in events:
        event = item.event if isinstance(item, StoredEvent) else item
        kind = event.get("type")
        content = event.get("content")
        if kind == "tool_result":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": event.get("tool_use_id"),
                    "content": content if isinstance(content, str) else json.dumps(content),
                }
            )
        elif kind in _BOOKKEEPING:
            continue
        elif kind == "user":
            messages.append({"role": "user", "content": content})
        elif kind == "assistant":
            if not isinstance(content, list):
                messages.append({"role": "assistant", "content": content})
                continue
            blocks = [b for b in content if isinstance(b, Mapping)]
            texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "\n".join(texts) if texts else None,
            }
            calls = [_tool_call(b) for b in blocks if b.get("type") == "tool_use"]
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        elif kind == "summary":
            messages = [{"role": "user", "content": content}]
        else:
            raise ValueError(f"cannot fold an event of unknown type {kind!r}")
    return messages
