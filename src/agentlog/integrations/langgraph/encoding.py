"""How the savers name and encode what they store: session ids, serialised
bytes as JSON text, event sizes, and LangGraph's configs."""

from __future__ import annotations

import builtins
import hashlib
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig

__all__ = [
    "EVENT_TYPE",
    "PREFIX",
    "as_bytes",
    "as_text",
    "configurable",
    "event_size",
    "extends",
    "session_id_for",
    "thread_of",
    "thread_prefix",
    "tuple_config",
]

#: Every event the savers append is of this type (fold_events ignores it).
EVENT_TYPE = "context_view"
#: What every session id the savers use starts with.
PREFIX = "lg:"


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def thread_prefix(thread_id: str) -> str:
    """What the session ids of every namespace of ``thread_id`` start with."""
    return f"{PREFIX}{_digest(thread_id, 24)}:"


def session_id_for(thread_id: str, checkpoint_ns: str) -> str:
    """The agentlog session id holding ``(thread_id, checkpoint_ns)``."""
    return thread_prefix(thread_id) + _digest(checkpoint_ns, 16)


def as_text(data: bytes) -> str:
    """Serialised bytes as a JSON string: one character per byte (latin-1).

    Mostly-text payloads (msgpack of messages) cost ~1.1x their bytes in the
    event's JSON, against 1.33x for base64.
    """
    return data.decode("latin-1")


def as_bytes(text: str) -> bytes:
    """The bytes :func:`as_text` made a JSON string of."""
    return text.encode("latin-1")


def event_size(event: dict[str, Any]) -> int:
    """The event's encoded size (plus room for its offset field)."""
    return len(orjson.dumps(event)) + 16


def extends(value: Any, old: builtins.list[Any]) -> bool:
    """Whether ``value`` is a list starting with ``old``'s elements (``is`` or ``==``)."""
    if type(value) is not list or len(value) < len(old):
        return False
    try:
        return bool(value[: len(old)] == old)
    except Exception:  # an element whose == does not answer (arrays): store it whole
        return False


def configurable(config: RunnableConfig) -> dict[str, Any]:
    """``config['configurable']``; a clear ``ValueError`` when it is missing."""
    conf = config.get("configurable")
    if not isinstance(conf, dict):
        raise ValueError("a LangGraph config needs a 'configurable' mapping with a thread_id")
    return conf


def thread_of(config: RunnableConfig) -> tuple[str, str]:
    """``(thread_id, checkpoint_ns)`` of a LangGraph config (the namespace ``''`` by default)."""
    conf = configurable(config)
    if "thread_id" not in conf:
        raise ValueError("a LangGraph config needs configurable.thread_id")
    ns = conf.get("checkpoint_ns") or ""
    return str(conf["thread_id"]), str(ns)


def tuple_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The config naming one checkpoint, as LangGraph hands it back."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
