"""Serve a legacy whole-message-array store through the Checkpointer contract."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable
from typing import Any, Protocol

import orjson

from ..errors import (
    CheckpointConflictError,
    CorruptDatabaseError,
    fork_past_head,
    no_session_to_fork,
    session_exists,
)
from ..events import EncodedBatch, SessionInfo, StoredEvent, decode_payload
from .contract import BaseCheckpointer

__all__ = ["LegacyStore", "legacy_store_adapter", "message_event"]

_ROLE_TO_TYPE = {"user": "user", "assistant": "assistant", "tool": "tool_result"}


def message_event(message: object) -> dict[str, Any] | None:
    """The event a role/content chat message stands for, or ``None`` for anything else.

    ``user`` and ``assistant`` keep their role as the type; ``tool`` becomes a
    ``tool_result`` answering ``tool_call_id`` (or ``tool_use_id``). The one
    mapping of legacy messages, used by the adapter and by ``agentlog migrate``.
    """
    role = message.get("role") if isinstance(message, dict) else None
    kind = _ROLE_TO_TYPE.get(role) if isinstance(role, str) else None
    if kind is None:
        return None
    assert isinstance(message, dict)
    event = {"type": kind, "content": message.get("content")}
    if kind == "tool_result":
        event["tool_use_id"] = message.get("tool_call_id", message.get("tool_use_id"))
    return event


class LegacyStore(Protocol):
    """A store that keeps a whole array per session.

    ``load`` returns the saved array (``None`` or ``[]`` for an unknown id).
    Optional methods used when present: ``list() -> Iterable[str]`` (the
    session ids) and ``delete(session_id)``.
    """

    def load(self, session_id: str) -> builtins.list[Any] | None: ...

    def save(self, session_id: str, messages: builtins.list[Any]) -> None: ...


def _record_to_event(seq: int, item: Any) -> StoredEvent:
    if isinstance(item, dict) and isinstance(item.get("event"), dict):
        # A copy, so that changing what read() returned never changes the store.
        event = decode_payload(orjson.dumps(item["event"]))
        return StoredEvent(seq, seq - 1, float(item.get("ts", 0.0)), event["type"], event)
    message = message_event(item)
    if message is not None:
        return StoredEvent(seq, seq - 1, 0.0, message["type"], message)
    raise CorruptDatabaseError(f"legacy item {seq} is neither an event record nor a chat message")


class LegacyStoreCheckpointer(BaseCheckpointer):
    """The adapter :func:`legacy_store_adapter` returns."""

    def __init__(self, store: LegacyStore) -> None:
        if not (callable(getattr(store, "load", None)) and callable(getattr(store, "save", None))):
            raise TypeError("a legacy store needs load(session_id) and save(session_id, messages)")
        self.store = store
        self._lock = threading.Lock()
        # The legacy format has no place for a change time: changes made
        # through this adapter are remembered here, others fall back to the
        # time of the last event.
        self._changed: dict[str, float] = {}

    def _items(self, session_id: str) -> builtins.list[Any]:
        items = self.store.load(session_id)
        return [] if items is None else builtins.list(items)

    def _exists(self, session_id: str) -> bool:
        return self.store.load(session_id) is not None

    def _append(
        self, session_id: str, batch: EncodedBatch, expected_head: int | None, ts: float
    ) -> int:
        with self._lock:
            self._check_open()
            items = self._items(session_id)
            head = len(items)
            if expected_head is not None and expected_head != head:
                raise CheckpointConflictError(session_id, expected_head, head)
            if not batch:
                return head
            items.extend(
                {"seq": seq, "ts": ts, "event": decode_payload(data)}
                for seq, (_, data) in enumerate(batch, head + 1)
            )
            self.store.save(session_id, items)
            self._changed[session_id] = ts
            return len(items)

    def _scan(self, session_id: str, since_seq: int, limit: int) -> builtins.list[StoredEvent]:
        with self._lock:
            self._check_open()
            items = self._items(session_id)[since_seq : since_seq + limit]
        return [_record_to_event(seq, item) for seq, item in enumerate(items, since_seq + 1)]

    def _head(self, session_id: str) -> int:
        with self._lock:
            return len(self._items(session_id))

    def _list(self) -> builtins.list[SessionInfo]:
        lister = getattr(self.store, "list", None)
        if not callable(lister):
            raise NotImplementedError("this legacy store has no list(); sessions cannot be listed")
        with self._lock:
            infos = []
            ids: Iterable[str] = lister()
            for session_id in ids:
                items = self._items(session_id)
                last = items[-1] if items else None
                mtime = float(last.get("ts", 0.0)) if isinstance(last, dict) else 0.0
                mtime = max(mtime, self._changed.get(session_id, 0.0))
                infos.append(SessionInfo(session_id, mtime, len(items)))
        infos.sort(key=lambda info: info.mtime, reverse=True)
        return infos

    def _delete(self, session_id: str) -> None:
        with self._lock:
            self._check_open()
            deleter = getattr(self.store, "delete", None)
            self._changed.pop(session_id, None)
            if callable(deleter):
                deleter(session_id)
            elif self._exists(session_id):
                self.store.save(session_id, [])

    def _truncate(self, session_id: str, to_seq: int, ts: float) -> int:
        with self._lock:
            self._check_open()
            items = self._items(session_id)
            if to_seq >= len(items):
                return len(items)
            self.store.save(session_id, items[:to_seq])
            self._changed[session_id] = ts
            return to_seq

    def _fork(self, session_id: str, at_seq: int, new_session_id: str, ts: float) -> int:
        with self._lock:
            self._check_open()
            if not self._exists(session_id):
                raise no_session_to_fork(session_id)
            items = self._items(session_id)
            if at_seq > len(items):
                raise fork_past_head(session_id, at_seq, len(items))
            if self._exists(new_session_id):
                raise session_exists(new_session_id)
            copied = [
                {"seq": e.seq, "ts": e.ts, "event": e.event}
                for e in (_record_to_event(seq, item) for seq, item in enumerate(items[:at_seq], 1))
            ]
            self.store.save(new_session_id, copied)
            self._changed[new_session_id] = ts
            return at_seq

    def _close(self) -> None:
        pass


def legacy_store_adapter(store: LegacyStore) -> LegacyStoreCheckpointer:
    """Wrap a legacy whole-message-array store as a :class:`Checkpointer`.

    Existing arrays keep working: chat messages already saved
    (``{"role": "user" | "assistant" | "tool", "content": …}``) are read as
    ``user`` / ``assistant`` / ``tool_result`` events at their positions.
    New events are saved as records ``{"seq", "ts", "event"}`` appended to
    the same array, so the store's own format and identity are unchanged.
    Every append loads and saves the whole array (that is the legacy store's
    cost model), and concurrency control covers this process only. ``list()``
    needs the store's ``list()``; it orders sessions by their last event, or
    by the last change made through this adapter (a truncate, a fork), which
    only this adapter object remembers.
    """
    return LegacyStoreCheckpointer(store)
