"""Rebuild a conversation (a list of chat messages) from a session log."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .events import StoredEvent

__all__ = ["fold_events"]

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


def fold_events(events: Iterable[StoredEvent | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Fold events, in log order, into the conversation they describe.

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
