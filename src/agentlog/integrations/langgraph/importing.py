"""A thread of another LangGraph saver as the events of this package's layout
(see :mod:`agentlog.integrations.langgraph`), for ``agentlog migrate``.

Nothing is decoded into objects: a ``msgpack`` checkpoint is unpacked with its
extension types (LangGraph's encoding of messages, pydantic models, any class)
kept as raw :class:`ormsgpack.Ext` values, split into its channels and packed
again, so each channel's blob is the very value the framework stored, and no
class is ever constructed; pending writes are copied as their ``(type,
bytes)``, and so is each blob of a saver that stores channels apart
(PostgresSaver's) — :class:`Typed`. Every checkpoint becomes a snapshot (its channels whole), so no
value needs comparing with its parent's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import ormsgpack
from langgraph.checkpoint.base import Checkpoint

from agentlog import MemoryCheckpointer

from .core import Core
from .encoding import EVENT_TYPE, as_text, event_size, session_id_for
from .index import SessionIndex

__all__ = [
    "ForeignCheckpoint",
    "ForeignWrite",
    "Typed",
    "has_ext",
    "stored_value",
    "thread_events",
    "unpack_raw",
    "unpickled_checkpoint",
]

_OPTION = ormsgpack.OPT_NON_STR_KEYS


def unpack_raw(data: bytes) -> Any:
    """A msgpack value with every extension type left as a raw ``Ext``."""
    return ormsgpack.unpackb(data, ext_hook=ormsgpack.Ext, option=_OPTION)


@dataclass(frozen=True, slots=True)
class Typed:
    """A channel value as a serializer stored it, ``(type, bytes)``: carried
    on as it is, never decoded."""

    kind: str
    data: bytes


def stored_value(kind: str, data: bytes) -> Typed:
    """A stored channel blob as a :class:`Typed` value; a msgpack one is
    unpacked (extension types raw) to refuse one that is corrupt."""
    if kind == "msgpack":
        unpack_raw(data)
    return Typed(kind, data)


def unpickled_checkpoint(data: bytes) -> dict[str, Any]:
    """A checkpoint a serializer with ``pickle_fallback`` pickled whole, made
    one of :func:`unpack_raw`'s: each channel value stored again as that
    serializer stores it (msgpack where it can, pickled again where it
    cannot). It unpickles ``data``: call it only when the user allows it."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer(pickle_fallback=True)
    try:
        body = serde.loads_typed(("pickle", data))
    except Exception as exc:  # whatever unpickling raises: the data is bad
        raise ValueError(f"cannot be unpickled: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("channel_values"), dict):
        raise ValueError("not a checkpoint")
    values = {k: Typed(*serde.dumps_typed(v)) for k, v in body["channel_values"].items()}
    rest = {k: v for k, v in body.items() if k != "channel_values"}
    return {**unpack_raw(_RawSerde().dumps_typed(rest)[1]), "channel_values": values}


def has_ext(value: Any) -> bool:
    """Whether an :func:`unpack_raw` value holds an extension type (an object
    LangGraph's serializer would construct when it reads the value)."""
    if isinstance(value, ormsgpack.Ext):
        return True
    if isinstance(value, Typed):
        return value.kind == "msgpack" and has_ext(unpack_raw(value.data))
    if isinstance(value, dict):
        return any(has_ext(k) or has_ext(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_ext(item) for item in value)
    return False


class _RawSerde:
    """Packs :func:`unpack_raw` values again, extension types as they were,
    and gives a :class:`Typed` value's own bytes."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, Typed):
            return obj.kind, obj.data
        return "msgpack", ormsgpack.packb(obj, option=_OPTION)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return unpack_raw(data[1])


@dataclass(frozen=True, slots=True)
class ForeignCheckpoint:
    """One checkpoint as another saver stored it."""

    checkpoint: dict[str, Any]
    """The checkpoint, unpacked by :func:`unpack_raw`."""
    parent_id: str | None
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ForeignWrite:
    """One pending write as another saver stored it."""

    checkpoint_id: str
    task_id: str
    task_path: str
    idx: int
    channel: str
    kind: str
    data: bytes


def thread_events(
    thread_id: str,
    ns: str,
    checkpoints: Sequence[ForeignCheckpoint],
    writes: Sequence[ForeignWrite],
) -> tuple[str, list[dict[str, Any]]]:
    """``(session id, events)``: the session :class:`AgentlogSaver` reads back
    as the thread's namespace, every checkpoint (in id order) followed by
    its pending writes (one event per task). Writes of a checkpoint that is
    not among ``checkpoints`` have nothing to be pending on: they are left out."""
    core = Core(MemoryCheckpointer(), cast(Any, _RawSerde()))
    sid = session_id_for(thread_id, ns)
    sess = SessionIndex(sid)
    header = core.thread_event(sess, thread_id, ns)
    sess.apply(1, header)
    events = [header]
    by_checkpoint: dict[str, list[ForeignWrite]] = {}
    for write in writes:
        by_checkpoint.setdefault(write.checkpoint_id, []).append(write)
    for foreign in sorted(checkpoints, key=lambda c: str(c.checkpoint["id"])):
        checkpoint = cast(Checkpoint, foreign.checkpoint)
        seq = sess.head + 1
        event, _ = core.checkpoint_event(
            sess, seq, sess.off, checkpoint, foreign.parent_id, None, {"m": foreign.metadata}, {}
        )
        event["e"] = sess.epoch
        sess.apply(seq, event)
        events.append(event)
        tasks: dict[tuple[str, str], list[list[Any]]] = {}
        for write in by_checkpoint.get(str(checkpoint["id"]), ()):
            row = [write.idx, write.channel, write.kind, as_text(write.data)]
            tasks.setdefault((write.task_id, write.task_path), []).append(row)
        for (task_id, task_path), rows in tasks.items():
            wev: dict[str, Any] = {
                "type": EVENT_TYPE,
                "lg": "w",
                "e": sess.epoch,
                "c": checkpoint["id"],
                "t": task_id,
                "tp": task_path,
                "w": rows,
            }
            wev["o"] = sess.off + event_size(wev)
            sess.apply(sess.head + 1, wev)
            events.append(wev)
    return sid, events
