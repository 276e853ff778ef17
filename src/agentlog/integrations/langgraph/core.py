"""LangGraph checkpointers on agentlog: what changed per step, not the whole state again.

:class:`AgentlogSaver` (sync, with ``a…`` twins that run inline) and
:class:`AsyncAgentlogSaver` (on :mod:`agentlog.aio`, writes on its writer
thread) are LangGraph ``BaseCheckpointSaver`` implementations. By default they
live in an agentlog SQLite file (tenant ``"langgraph"``), beside anything else
in it; any agentlog checkpointer works underneath.

Storage layout
--------------
One agentlog session per ``(thread_id, checkpoint_ns)``, with the id
``lg:<sha256(thread_id)[:24]>:<sha256(checkpoint_ns)[:16]>`` (hashed: a
thread id may hold any character; the real names are in the session). Every
event is a ``context_view`` (so :func:`agentlog.fold_events` ignores them)
with an ``lg`` kind, the session's ``e`` (epoch nonce) and ``o`` (the
session's approximate byte offset after the event):

* ``lg="t"`` — the thread: ``thread_id`` and ``checkpoint_ns``; first in
  every session (and again after a copy, naming the copy's thread).
* ``lg="c"`` — a checkpoint: ``id``, ``p`` (parent id), ``ps`` (the parent's
  seq in this session, 0 for none), ``r`` (the seq of the snapshot this
  checkpoint is rebuilt from), ``ck`` (the checkpoint without its
  ``channel_values``, through the saver's ``serde``), ``m`` (metadata, as
  JSON; ``mt`` through ``serde`` when JSON cannot hold it) and ``v``, the
  channel values **that changed**: for each channel in ``new_versions`` a
  blob — ``["f", type, data]`` the whole value, ``["x", type, data]`` a
  list that extends the parent's value (only the new tail is stored: the
  usual ``messages`` channel), or ``["e"]`` (the channel is empty).
  Unchanged channels are not written at all. Two pointers let a fresh
  process start from the end: ``mx``, the seq of the thread's latest
  (greatest id) checkpoint as of this event, and ``ew``, the seqs of this
  checkpoint's writes appended before it (LangGraph saves checkpoints in the
  background, so a task's writes can land first).
* ``lg="w"`` — one ``put_writes`` call: ``c`` (checkpoint id), ``t`` (task
  id), ``tp`` (task path) and ``w``, the ``[idx, channel, type, data]``
  writes, with LangGraph's ``WRITES_IDX_MAP`` indices for special writes.

``type, data`` is the saver's ``serde.dumps_typed`` of the value, the bytes
held as a latin-1 string (one character per byte: JSON keeps mostly-text
payloads at ~1.1x their size, where base64 costs 1.33x).

**Snapshots bound the replay.** A checkpoint is rebuilt from its ``r``
snapshot by reading the seq range ``r..seq`` once and applying the blobs
along the parent chain. A new checkpoint becomes a snapshot (every channel
written whole, ``r`` = its own seq) when that range would hold more bytes
than ``max(64 KiB, its state's size)``. So rebuilding any checkpoint reads at
most about twice its state's size (the bytes a whole-state saver reads
anyway), and since a snapshot is written only after at least its own size of
deltas, snapshots at most double the deltas: the file grows linearly with the
steps. A checkpoint whose parent is not in the session (a first one) is a
snapshot too, and so, by the rule, is a time-travel put on a parent whose
snapshot lies far back.

**Finding things.** Each process keeps an index per session (checkpoint id
→ seq, the pending writes' seqs per checkpoint, metadata), caught up at each
call with the events after its head, so another process's writes are seen
at the next call. Resuming the latest checkpoint (``get_tuple`` without an
id, and the ``put`` / ``put_writes`` of the next step) needs only a *tail*
index: the last events give ``mx``, and the events from that checkpoint's
snapshot on are read once — the same range its rebuild reads. Anything
older (an id before the tail, ``list``, copies, pruning) reads the whole
session once, then only what is new. An append names the head it expects,
so two writers never interleave a step: the loser rereads and retries. The
last checkpoint put in this process is kept (its values, as objects) to
detect list extensions without reading anything; a put on another parent
rebuilds that parent first.

Extension is detected on the values themselves: a list whose first elements
are the parent's (``is`` or ``==``) stores only the rest. As with any saver
that keeps objects, do not change a checkpointed message in place: LangGraph
reducers replace messages, never mutate them.

``copy_thread`` is the log's own fork of each namespace's session (plus a
thread event naming the copy); ``delete_thread`` deletes the sessions;
``prune`` and ``delete_for_runs`` rewrite the affected sessions (rebuilt,
then written back as a fresh session: not atomic across the two steps).
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import json
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agentlog import (
    BaseCheckpointer,
    CheckpointConflictError,
    SessionEvent,
    SqliteCheckpointer,
    SqliteStorage,
    StorageDataError,
    StorageUnavailableError,
)
from agentlog.aio import AsyncBaseCheckpointer, AsyncSqliteCheckpointer

__all__ = ["DEFAULT_LANGGRAPH_TENANT", "AgentlogSaver", "AsyncAgentlogSaver", "session_id_for"]

#: The tenant a saver opened from a path keeps its sessions in.
DEFAULT_LANGGRAPH_TENANT = "langgraph"

#: A range below this many bytes never forces a snapshot.
SNAPSHOT_MIN_BYTES = 64 * 1024

_EVENT_TYPE = "context_view"
_PREFIX = "lg:"
_RETRIES = 64
_INDEX_CACHE = 64
_T = TypeVar("_T")


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def _thread_prefix(thread_id: str) -> str:
    return f"{_PREFIX}{_digest(thread_id, 24)}:"


def session_id_for(thread_id: str, checkpoint_ns: str) -> str:
    """The agentlog session id holding ``(thread_id, checkpoint_ns)``."""
    return _thread_prefix(thread_id) + _digest(checkpoint_ns, 16)


def _text(data: bytes) -> str:
    """Serialised bytes as a JSON string: one character per byte (latin-1).

    Mostly-text payloads (msgpack of messages) cost ~1.1x their bytes in the
    event's JSON, against 1.33x for base64.
    """
    return data.decode("latin-1")


def _bytes(text: str) -> bytes:
    return text.encode("latin-1")


def _size(event: dict[str, Any]) -> int:
    """The event's encoded size (plus room for its offset field)."""
    return len(orjson.dumps(event)) + 16


def _extends(value: Any, old: builtins.list[Any]) -> bool:
    """Whether ``value`` is a list starting with ``old``'s elements (``is`` or ``==``)."""
    if type(value) is not list or len(value) < len(old):
        return False
    try:
        return bool(value[: len(old)] == old)
    except Exception:  # an element whose == does not answer (arrays): store it whole
        return False


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    conf = config.get("configurable")
    if not isinstance(conf, dict):
        raise ValueError("a LangGraph config needs a 'configurable' mapping with a thread_id")
    return conf


def _thread_of(config: RunnableConfig) -> tuple[str, str]:
    conf = _configurable(config)
    if "thread_id" not in conf:
        raise ValueError("a LangGraph config needs configurable.thread_id")
    ns = conf.get("checkpoint_ns") or ""
    return str(conf["thread_id"]), str(ns)


def _tuple_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# -- the in-process index ------------------------------------------------------


@dataclass
class _Ckpt:
    """What the index keeps of one checkpoint event."""

    id: str
    seq: int
    parent: str | None
    pseq: int
    root: int
    end: int
    metadata: dict[str, Any] | None
    metadata_typed: list[str] | None = None
    # Writes events for this checkpoint appended before it (a racing put_writes).
    early: tuple[int, ...] = ()


@dataclass
class _State:
    """A checkpoint's channel values as objects, with what a child needs."""

    seq: int
    values: dict[str, Any]
    sizes: dict[str, int]
    root: int
    # For list values: the element references as of this checkpoint.
    lists: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class _Session:
    """One (thread_id, checkpoint_ns) session as this process knows it."""

    sid: str
    # Events 1..base are not indexed (a tail index, made to resume fast); 0: all are.
    base: int = 0
    thread_id: str = ""
    ns: str = ""
    epoch: str = ""
    head: int = 0
    off: int = 0
    ckpts: dict[str, int] = field(default_factory=dict)
    info: dict[int, _Ckpt] = field(default_factory=dict)
    writes: dict[str, list[int]] = field(default_factory=dict)
    wkeys: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    latest: str | None = None
    tip: _State | None = None
    valid: bool = True

    def apply(self, seq: int, ev: dict[str, Any]) -> bool:
        """Index one event; False when it belongs to another incarnation."""
        kind = ev.get("lg")
        if kind == "t":
            self.thread_id = str(ev["thread_id"])
            self.ns = str(ev["checkpoint_ns"])
            self.epoch = str(ev["e"])
        elif ev.get("e") != self.epoch:
            return False
        elif kind == "c":
            cid = str(ev["id"])
            meta = ev.get("m")
            info = _Ckpt(
                cid,
                seq,
                ev.get("p"),
                int(ev["ps"]),
                int(ev["r"]),
                int(ev["o"]),
                meta if isinstance(meta, dict) else None,
                ev.get("mt"),
                tuple(ev.get("ew", ())),
            )
            self.ckpts[cid] = seq
            self.info[seq] = info
            if self.latest is None or cid >= self.latest:
                self.latest = cid
        elif kind == "w":
            cid = str(ev["c"])
            self.writes.setdefault(cid, []).append(seq)
            keys = self.wkeys.setdefault(cid, set())
            for idx, *_ in ev["w"]:
                keys.add((str(ev["t"]), int(idx)))
        self.head = seq
        self.off = int(ev.get("o", self.off))
        return True


class _Plan:
    """Events to append to one session, and how to index them once written."""

    def __init__(self, sess: _Session, events: list[dict[str, Any]], tip: _State | None) -> None:
        self.sess = sess
        self.events = events
        self.tip = tip
        self.expected = sess.head


# -- the core both savers share --------------------------------------------------


class _Core:
    """Planning, indexing and rebuilding; the savers only append and await."""

    def __init__(self, log: BaseCheckpointer, serde: SerializerProtocol) -> None:
        self.log = log
        self.serde = serde
        self.lock = threading.RLock()
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        # The events a tail index just read (the rebuild after it needs the same range).
        self._read: tuple[str, dict[int, dict[str, Any]]] | None = None

    # -- encoding -----------------------------------------------------------------

    def dumps(self, value: Any) -> tuple[str, bytes]:
        kind, data = self.serde.dumps_typed(value)
        return kind, data

    def loads(self, kind: str, text: str) -> Any:
        return self.serde.loads_typed((kind, _bytes(text)))

    def blob(self, tag: str, value: Any) -> tuple[builtins.list[Any], int]:
        kind, data = self.dumps(value)
        return [tag, kind, _text(data)], len(data)

    # -- the index ----------------------------------------------------------------

    def session(self, thread_id: str, ns: str, full: bool = True) -> _Session | None:
        """The caught-up index of a session, or None when it does not exist
        (``full=False``: a tail index is enough)."""
        return self.refresh(session_id_for(thread_id, ns), full, (thread_id, ns))

    def refresh(
        self, sid: str, full: bool = True, names: tuple[str, str] | None = None
    ) -> _Session | None:
        """The session's index, caught up with the log: read once, then only
        what was appended since. ``full=False`` accepts a tail index, built
        from the latest checkpoint's snapshot on (bounded like a rebuild)."""
        self._read = None
        head = self.log.head(sid)
        sess = self.sessions.get(sid)
        if sess is not None:
            self.sessions.move_to_end(sid)
            if sess.valid and (head == sess.head or (head > sess.head and self._catch_up(sess))):
                if not head:
                    return None
                return self._full(sess) if full and sess.base else sess
        if head == 0:
            self.sessions.pop(sid, None)
            return None
        fresh = None if full or names is None else self._tail_index(sid, head, names)
        if fresh is None:
            fresh = self._full(_Session(sid))
        self.sessions[sid] = fresh
        while len(self.sessions) > _INDEX_CACHE:
            self.sessions.popitem(last=False)
        return fresh

    def _full(self, old: _Session) -> _Session:
        """An index of every event of the session (keeping what is cached)."""
        sess = _Session(old.sid)
        if not self._catch_up(sess):
            raise StorageDataError(f"session {old.sid!r} does not hold a LangGraph thread")
        if old.tip is not None and old.valid and old.tip.seq in sess.info:
            sess.tip = old.tip
        self.sessions[old.sid] = sess
        return sess

    def _tail_index(self, sid: str, head: int, names: tuple[str, str]) -> _Session | None:
        """An index of the events from the latest checkpoint's snapshot on,
        or None (then the whole session is read)."""
        window = 32
        while True:
            start = max(0, head - window)
            events = list(self.log.read(sid, start, head - start))
            last = next((e for e in reversed(events) if e.event.get("lg") == "c"), None)
            if last is not None or start == 0:
                break
            window *= 8
        if last is None or "mx" not in last.event:
            return None
        top = int(last.event["mx"])
        top_event = next((e.event for e in events if e.seq == top), None)
        if top_event is None:
            top_event = self._event(sid, top)
        root = int(top_event["r"])
        if root <= start:
            events = list(self.log.read(sid, root - 1, head - root + 1))
            start = root - 1
        sess = _Session(sid, base=start, head=start, epoch=str(top_event["e"]))
        sess.thread_id, sess.ns = names
        for event in events:
            if not sess.apply(event.seq, event.event):
                return None
        self._read = (sid, {event.seq: event.event for event in events})
        info = sess.info.get(top)
        if info is None or sess.latest != info.id:
            return None
        return sess

    def _catch_up(self, sess: _Session) -> bool:
        for event in self.log.read(sess.sid, sess.head):
            if not sess.apply(event.seq, event.event):
                return False
        return True

    def forget(self, sid: str) -> None:
        self.sessions.pop(sid, None)

    def thread_sessions(self, thread_id: str | None) -> builtins.list[str]:
        prefix = _thread_prefix(thread_id) if thread_id is not None else _PREFIX
        return [info.id for info in self.log.list() if info.id.startswith(prefix)]

    def _event(self, sid: str, seq: int) -> dict[str, Any]:
        for event in self.log.read(sid, seq - 1, 1):
            return event.event
        raise StorageDataError(f"event {seq} of {sid!r} is missing")

    # -- rebuilding -----------------------------------------------------------------

    def state(
        self, sess: _Session, seq: int, cache: dict[int, dict[str, Any]] | None = None
    ) -> _State:
        """The channel values of the checkpoint at ``seq``, rebuilt from its
        snapshot (``cache``: events already read, seq → event, added to)."""
        return self._state(sess, seq, cache)

    def _state(self, sess: _Session, seq: int, cache: dict[int, dict[str, Any]] | None) -> _State:
        read, self._read = self._read, None
        if cache is None:
            cache = read[1] if read and read[0] == sess.sid else None
        events: dict[int, dict[str, Any]] = cache if cache is not None else {}
        top = events.get(seq) or self._event(sess.sid, seq)
        root = int(top["r"])
        if root == seq:
            chain = [top]
        else:
            if root not in events or seq not in events:
                fetched = {
                    e.seq: e.event for e in self.log.read(sess.sid, root - 1, seq - root + 1)
                }
                if cache is None:
                    events = fetched
                else:
                    events.update(fetched)
            chain = []
            at = seq
            while True:
                ev = events.get(at)
                if ev is None or ev.get("lg") != "c":
                    raise StorageDataError(f"broken checkpoint chain in {sess.sid!r} at {at}")
                chain.append(ev)
                if at == root:
                    break
                at = int(ev["ps"])
                if at < root:
                    raise StorageDataError(f"broken checkpoint chain in {sess.sid!r} at {at}")
            chain.reverse()
        values: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        for ev in chain:
            for channel, blob in ev["v"].items():
                tag = blob[0]
                if tag == "e":
                    values.pop(channel, None)
                    sizes.pop(channel, None)
                    continue
                data = _bytes(blob[2])
                value = self.serde.loads_typed((blob[1], data))
                if tag == "x":
                    base = values.get(channel)
                    if not isinstance(base, list) or not isinstance(value, list):
                        raise StorageDataError(f"extension of a non-list in {sess.sid!r}")
                    base.extend(value)
                    sizes[channel] = sizes.get(channel, 0) + len(data)
                else:
                    values[channel] = value
                    sizes[channel] = len(data)
        lists = {k: list(v) for k, v in values.items() if type(v) is list}
        return _State(seq, values, sizes, root, lists)

    def tuple_at(
        self,
        sess: _Session,
        seq: int,
        config: RunnableConfig | None = None,
        cache: dict[int, dict[str, Any]] | None = None,
        thread_id: str | None = None,
    ) -> CheckpointTuple:
        """The CheckpointTuple LangGraph stored at ``seq`` (``thread_id``: the
        caller's, which the session id is made of — authoritative even in a
        copy a crash kept from getting its thread event)."""
        thread = thread_id if thread_id is not None else sess.thread_id
        info = sess.info[seq]
        values = self.state(sess, seq, cache).values
        ev = cache[seq] if cache is not None and seq in cache else self._event(sess.sid, seq)
        body = cast(dict[str, Any], self.loads(*ev["ck"]))
        versions = body.get("channel_versions") or {}
        body["channel_values"] = {k: values[k] for k in versions if k in values}
        parent = info.parent
        return CheckpointTuple(
            config=config or _tuple_config(thread, sess.ns, info.id),
            checkpoint=cast(Checkpoint, body),
            metadata=self.metadata(info),
            parent_config=_tuple_config(thread, sess.ns, parent) if parent else None,
            pending_writes=self.pending_writes(sess, info.id),
        )

    def metadata(self, info: _Ckpt) -> CheckpointMetadata:
        if info.metadata_typed is not None:
            return cast(CheckpointMetadata, self.loads(*info.metadata_typed))
        # A fresh copy: the caller may change what it gets.
        return cast(CheckpointMetadata, orjson.loads(orjson.dumps(info.metadata or {})))

    def pending_writes(self, sess: _Session, checkpoint_id: str) -> builtins.list[PendingWrite]:
        found: dict[tuple[str, int], tuple[str, str, str, str, str]] = {}
        seqs = set(sess.writes.get(checkpoint_id, ()))
        if checkpoint_id in sess.ckpts:
            seqs.update(sess.info[sess.ckpts[checkpoint_id]].early)
        for seq in sorted(seqs):
            ev = self._event(sess.sid, seq)
            task_id, task_path = str(ev["t"]), str(ev.get("tp", ""))
            for idx, channel, kind, data in ev["w"]:
                key = (task_id, int(idx))
                if key[1] >= 0 and key in found:
                    continue
                found[key] = (task_id, channel, kind, data, task_path)
        ordered = sorted(found, key=lambda k: writes_sort_key(found[k][4], *k))
        return [(found[k][0], found[k][1], self.loads(found[k][2], found[k][3])) for k in ordered]

    # -- reads --------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = _thread_of(config)
        with self.lock:
            sess = self.session(thread_id, ns, full=False)
            if sess is None:
                return None
            wanted = get_checkpoint_id(config)
            if wanted and wanted not in sess.ckpts and sess.base:
                sess = self.session(thread_id, ns)
                assert sess is not None
            checkpoint_id = wanted or sess.latest
            seq = sess.ckpts.get(checkpoint_id) if checkpoint_id else None
            if seq is None:
                return None
            return self.tuple_at(sess, seq, config if wanted else None, thread_id=thread_id)

    def list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        with self.lock:
            if config is not None:
                thread_id, _ = _thread_of(config)
                conf = _configurable(config)
                ns_wanted = conf.get("checkpoint_ns")
                only_id = get_checkpoint_id(config)
                sids = self.thread_sessions(thread_id)
            else:
                ns_wanted, only_id, thread_id = None, None, None
                sids = self.thread_sessions(None)
            before_id = get_checkpoint_id(before) if before else None
            candidates: builtins.list[tuple[str, _Session, int]] = []
            for sid in sids:
                sess = self.refresh(sid)
                if sess is None:
                    continue
                if config is None and sid != session_id_for(sess.thread_id, sess.ns):
                    continue  # a copy that never got its thread event: not listed
                if ns_wanted is not None and sess.ns != ns_wanted:
                    continue
                for cid, seq in sess.ckpts.items():
                    if only_id and cid != only_id:
                        continue
                    if before_id and cid >= before_id:
                        continue
                    candidates.append((cid, sess, seq))
            candidates.sort(key=lambda c: c[0], reverse=True)
            out: builtins.list[CheckpointTuple] = []
            # Newest first, so the first rebuild of a snapshot's segment reads
            # the events the older ones need too: each is read once.
            caches: dict[str, dict[int, dict[str, Any]]] = {}
            for _, sess, seq in candidates:
                if limit is not None and len(out) >= limit:
                    break
                info = sess.info[seq]
                if filter:
                    meta = self.metadata(info)
                    if not all(meta.get(k) == v for k, v in filter.items()):
                        continue
                cache = caches.setdefault(sess.sid, {})
                out.append(self.tuple_at(sess, seq, cache=cache, thread_id=thread_id))
            return out

    # -- planning writes ------------------------------------------------------------

    def _new_session(self, thread_id: str, ns: str) -> tuple[_Session, dict[str, Any]]:
        sess = _Session(session_id_for(thread_id, ns))
        header = self.thread_event(sess, thread_id, ns)
        return sess, header

    def thread_event(self, sess: _Session, thread_id: str, ns: str) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "type": _EVENT_TYPE,
            "lg": "t",
            "e": secrets.token_hex(6),
            "thread_id": thread_id,
            "checkpoint_ns": ns,
        }
        ev["o"] = sess.off + _size(ev)
        return ev

    def _parent_state(self, sess: _Session, pseq: int) -> _State:
        tip = sess.tip
        if tip is not None and tip.seq == pseq:
            return tip
        return self.state(sess, pseq)

    def plan_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> _Plan:
        thread_id, ns = _thread_of(config)
        parent_id = get_checkpoint_id(config)
        sess = self.session(thread_id, ns, full=False)
        if sess is not None and sess.base:
            pseq = sess.ckpts.get(parent_id, 0) if parent_id else 0
            if not pseq or sess.info[pseq].root not in sess.info:
                sess = self.session(thread_id, ns)
        events: builtins.list[dict[str, Any]] = []
        if sess is None:
            sess, header = self._new_session(thread_id, ns)
            events.append(header)
        pseq = sess.ckpts.get(parent_id, 0) if parent_id else 0
        parent = self._parent_state(sess, pseq) if pseq else None
        off = int(events[-1]["o"]) if events else sess.off
        seq = sess.head + len(events) + 1
        event, tip = self.checkpoint_event(
            sess,
            seq,
            off,
            checkpoint,
            parent_id,
            parent,
            self.stored_metadata(config, metadata),
            new_versions,
        )
        events.append(event)
        return _Plan(sess, events, tip)

    def stored_metadata(
        self, config: RunnableConfig, metadata: CheckpointMetadata
    ) -> dict[str, Any]:
        """The metadata as the event holds it: JSON when it can, else ``mt`` (serde)."""
        meta = get_checkpoint_metadata(config, metadata)
        try:
            text = json.dumps(meta, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError):
            kind, data = self.dumps(meta)
            return {"mt": [kind, _text(data)]}
        return {"m": json.loads(text)}

    def checkpoint_event(
        self,
        sess: _Session,
        seq: int,
        off: int,
        checkpoint: Checkpoint,
        parent_id: str | None,
        parent: _State | None,
        stored_meta: dict[str, Any],
        new_versions: ChannelVersions,
    ) -> tuple[dict[str, Any], _State]:
        """The event for one checkpoint at ``seq``, and the state it leaves."""
        incoming = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        ck_kind, ck_data = self.dumps(body)
        if parent is None:
            # No parent here: a snapshot of what the checkpoint carries.
            values = {k: incoming[k] for k in versions if k in incoming}
            for k in new_versions:
                if k not in incoming:
                    values.pop(k, None)
            sizes: dict[str, int] = {}
            blobs: dict[str, builtins.list[Any]] = {}
            for k, value in values.items():
                blobs[k], sizes[k] = self.blob("f", value)
            lists = {k: list(v) for k, v in values.items() if type(v) is list}
            event = self._ckpt_event(
                sess, seq, ck_kind, ck_data, checkpoint, parent_id, 0, seq, stored_meta
            )
            event["v"] = blobs
            event["o"] = off + _size(event)
            return event, _State(seq, values, sizes, seq, lists)
        values = dict(parent.values)
        sizes = dict(parent.sizes)
        lists = dict(parent.lists)
        blobs = {}
        for k in new_versions:
            if k not in incoming:
                blobs[k] = ["e"]
                values.pop(k, None)
                sizes.pop(k, None)
                lists.pop(k, None)
                continue
            value = incoming[k]
            old = parent.lists.get(k)
            if old is not None and k in parent.values and _extends(value, old):
                blobs[k], grown = self.blob("x", value[len(old) :])
                sizes[k] = parent.sizes.get(k, 0) + grown
            else:
                blobs[k], sizes[k] = self.blob("f", value)
            values[k] = value
            if type(value) is list:
                lists[k] = list(value)
            else:
                lists.pop(k, None)
        for k in [k for k in values if k not in versions]:
            del values[k]
            sizes.pop(k, None)
            lists.pop(k, None)
        event = self._ckpt_event(
            sess, seq, ck_kind, ck_data, checkpoint, parent_id, parent.seq, parent.root, stored_meta
        )
        event["v"] = blobs
        size = _size(event)
        state_bytes = sum(sizes.values())
        root_end = sess.info[parent.root].end if parent.root in sess.info else 0
        if off + size - root_end > max(SNAPSHOT_MIN_BYTES, state_bytes):
            # Snapshot: every channel whole, and the chain starts here.
            event["r"] = seq
            full: dict[str, builtins.list[Any]] = {}
            for k, value in values.items():
                full[k], sizes[k] = self.blob("f", value)
            event["v"] = full
            size = _size(event)
            event["o"] = off + size
            return event, _State(seq, values, sizes, seq, lists)
        event["o"] = off + size
        return event, _State(seq, values, sizes, parent.root, lists)

    def _ckpt_event(
        self,
        sess: _Session,
        seq: int,
        ck_kind: str,
        ck_data: bytes,
        checkpoint: Checkpoint,
        parent_id: str | None,
        pseq: int,
        root: int,
        stored_meta: dict[str, Any],
    ) -> dict[str, Any]:
        cid = checkpoint["id"]
        latest = sess.latest
        return {
            "type": _EVENT_TYPE,
            "lg": "c",
            "e": "",
            "id": checkpoint["id"],
            "p": parent_id,
            "ps": pseq,
            "r": root,
            "ck": [ck_kind, _text(ck_data)],
            # Where the thread's latest (greatest id) checkpoint is, this one
            # included: a fresh process finds it from the last event.
            "mx": seq if latest is None or cid >= latest else sess.ckpts[latest],
            # This checkpoint's writes appended before it (racing puts).
            "ew": builtins.list(sess.writes.get(cid, ())),
            **stored_meta,
        }

    def plan_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> _Plan | None:
        thread_id, ns = _thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise ValueError("put_writes needs configurable.checkpoint_id")
        sess = self.session(thread_id, ns, full=False)
        if sess is not None and sess.base:
            seq = sess.ckpts.get(checkpoint_id)
            if seq is None or any(s <= sess.base for s in sess.info[seq].early):
                sess = self.session(thread_id, ns)
        events: builtins.list[dict[str, Any]] = []
        if sess is None:
            sess, header = self._new_session(thread_id, ns)
            events.append(header)
        seen = set(sess.wkeys.get(checkpoint_id, set()))
        if checkpoint_id in sess.ckpts:
            for seq in sess.info[sess.ckpts[checkpoint_id]].early:
                if seq > sess.base and seq not in sess.writes.get(checkpoint_id, ()):
                    ev = self._event(sess.sid, seq)
                    seen.update((str(ev["t"]), int(w[0])) for w in ev["w"])
        rows: builtins.list[builtins.list[Any]] = []
        mine: set[tuple[str, int]] = set()
        for idx, (channel, value) in enumerate(writes):
            at = WRITES_IDX_MAP.get(channel, idx)
            if at >= 0 and ((task_id, at) in seen or (task_id, at) in mine):
                continue
            mine.add((task_id, at))
            kind, data = self.dumps(value)
            rows.append([at, channel, kind, _text(data)])
        if not rows:
            return None
        off = int(events[-1]["o"]) if events else sess.off
        event: dict[str, Any] = {
            "type": _EVENT_TYPE,
            "lg": "w",
            "e": "",
            "c": checkpoint_id,
            "t": task_id,
            "tp": task_path,
            "w": rows,
        }
        event["o"] = off + _size(event)
        events.append(event)
        return _Plan(sess, events, None)

    def stamp(self, plan: _Plan) -> builtins.list[SessionEvent]:
        """The plan's events with the session's epoch filled in."""
        epoch = plan.sess.epoch
        for ev in plan.events:
            if ev["lg"] == "t":
                epoch = ev["e"]
            else:
                ev["e"] = epoch
        return list(plan.events)

    def committed(self, plan: _Plan) -> None:
        """Index a plan's events once the log holds them."""
        sess = plan.sess
        end = plan.expected + len(plan.events)
        if sess.head == plan.expected:
            seq = plan.expected
            for ev in plan.events:
                seq += 1
                sess.apply(seq, ev)
        elif sess.head < end:
            sess.valid = False  # someone else's events are in between: reread
        if plan.tip is not None and sess.valid:
            sess.tip = plan.tip
        self.sessions[sess.sid] = sess
        self.sessions.move_to_end(sess.sid)

    def conflicted(self, plan: _Plan) -> None:
        """Another writer went first: reread unless this process wrote it."""
        if plan.sess.head == plan.expected:
            plan.sess.valid = False
            plan.sess.tip = None

    # -- rewriting (prune, delete_for_runs) ----------------------------------------

    def rewrite_events(
        self, sess: _Session, keep: builtins.list[int]
    ) -> builtins.list[dict[str, Any]]:
        """A fresh session's events holding only the checkpoints at ``keep``."""
        fresh = _Session(sess.sid)
        events = [self.thread_event(fresh, sess.thread_id, sess.ns)]
        fresh.apply(1, events[0])
        previous: _State | None = None
        previous_id: str | None = None
        for seq in sorted(keep):
            info = sess.info[seq]
            tup = self.tuple_at(sess, seq)
            checkpoint = tup.checkpoint
            parent_state = previous if previous is not None and info.parent == previous_id else None
            prior = (
                self.loads(*self._event(sess.sid, sess.ckpts[previous_id])["ck"])
                if parent_state is not None and previous_id is not None
                else {}
            )
            old_versions = prior.get("channel_versions", {}) if isinstance(prior, dict) else {}
            new_versions = {
                k: v for k, v in checkpoint["channel_versions"].items() if old_versions.get(k) != v
            }
            meta_ev = self._event(sess.sid, seq)
            stored_meta: dict[str, Any] = {k: meta_ev[k] for k in ("m", "mt") if k in meta_ev}
            event, state = self.checkpoint_event(
                fresh,
                fresh.head + 1,
                fresh.off,
                checkpoint,
                info.parent,
                parent_state,
                stored_meta,
                new_versions,
            )
            if parent_state is None:
                event["r"] = fresh.head + 1
            event["e"] = fresh.epoch
            fresh.apply(fresh.head + 1, event)
            events.append(event)
            previous, previous_id = state, info.id
            for wseq in sess.writes.get(info.id, ()):
                wev = dict(self._event(sess.sid, wseq))
                wev["e"] = fresh.epoch
                wev["o"] = fresh.off + _size(wev)
                fresh.apply(fresh.head + 1, wev)
                events.append(wev)
        return events


def _run_id(metadata: CheckpointMetadata) -> str | None:
    run_id = dict(metadata).get("run_id")
    return str(run_id) if run_id is not None else None


#: One maintenance step on the log: ("delete", sid) | ("fork", sid, at, new) |
#: ("append", sid, events, expected_head).
_Op = tuple[Any, ...]


class _Maintenance:
    """The log operations of copy, prune, delete: planned under the lock, then run."""

    def __init__(self, core: _Core) -> None:
        self.core = core

    def delete_thread(self, thread_id: str) -> builtins.list[_Op]:
        return [("delete", sid) for sid in self.core.thread_sessions(str(thread_id))]

    def copy_thread(self, source: str, target: str) -> builtins.list[_Op]:
        core = self.core
        if str(source) == str(target):
            return []  # a thread is already its own copy
        ops = self.delete_thread(target)
        for sid in core.thread_sessions(str(source)):
            sess = core.refresh(sid)
            if sess is None:
                continue
            new = session_id_for(str(target), sess.ns)
            event = core.thread_event(_Session(new, off=sess.off), str(target), sess.ns)
            ops.append(("fork", sid, sess.head, new))
            ops.append(("append", new, [event], sess.head))
        return ops

    def prune(self, thread_ids: Sequence[str], strategy: str) -> builtins.list[_Op]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        core = self.core
        ops: builtins.list[_Op] = []
        for thread_id in thread_ids:
            if strategy == "delete":
                ops.extend(self.delete_thread(thread_id))
                continue
            for sid in core.thread_sessions(str(thread_id)):
                sess = core.refresh(sid)
                if sess is not None and sess.latest is not None:
                    keep = self._with_delta_seeds(sess, sess.ckpts[sess.latest])
                    ops.extend(self._rewrite(sess, keep))
        return ops

    def _with_delta_seeds(self, sess: _Session, seq: int) -> builtins.list[int]:
        """The checkpoint at ``seq`` and the ancestors its ``DeltaChannel``s are
        rebuilt from: LangGraph stores such a channel's value only every
        ``snapshot_frequency`` steps and replays the writes since from the
        parent chain, so dropping those parents would empty the channel."""
        core = self.core
        info = sess.info[seq]
        counters = core.metadata(info).get("counters_since_delta_snapshot") or {}
        needed = set(counters) - core.tuple_at(sess, seq).checkpoint["channel_values"].keys()
        keep = [seq]
        parent = info.parent
        while needed and parent is not None and parent in sess.ckpts:
            parent_seq = sess.ckpts[parent]
            keep.append(parent_seq)
            needed -= core.tuple_at(sess, parent_seq).checkpoint["channel_values"].keys()
            parent = sess.info[parent_seq].parent
        return keep

    def delete_for_runs(self, run_ids: Sequence[str]) -> builtins.list[_Op]:
        wanted = {str(r) for r in run_ids}
        core = self.core
        ops: builtins.list[_Op] = []
        if not wanted:
            return ops
        for sid in core.thread_sessions(None):
            sess = core.refresh(sid)
            if sess is None:
                continue
            keep = [
                seq
                for seq in sess.ckpts.values()
                if _run_id(core.metadata(sess.info[seq])) not in wanted
            ]
            if len(keep) == len(sess.ckpts):
                continue
            ops.extend(self._rewrite(sess, keep) if keep else [("delete", sid)])
        return ops

    def _rewrite(self, sess: _Session, keep: builtins.list[int]) -> builtins.list[_Op]:
        events = self.core.rewrite_events(sess, keep)
        return [("delete", sess.sid), ("append", sess.sid, events, 0)]

    def done(self, ops: builtins.list[_Op]) -> None:
        for op in ops:
            self.core.forget(op[-1] if op[0] == "fork" else op[1])


# -- the savers --------------------------------------------------------------------


class _SaverBase(BaseCheckpointSaver[int]):
    """What both savers share: the reads and the versions."""

    _core: _Core
    _maintenance: _Maintenance

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the namespace's latest without a
        checkpoint_id), with its pending writes in LangGraph's order."""
        return self._core.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id), of one thread (and namespace, if
        given) or of all, matching ``filter`` on metadata, older than
        ``before``, at most ``limit``."""
        return iter(self._core.list(config, filter, before, limit))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` (a short read, on the caller's loop)."""
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` (short reads, on the caller's loop)."""
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    def get_next_version(self, current: int | None, channel: None) -> int:
        """The next version: 1, 2, 3 … per channel (LangGraph's default).

        Savers that key stored values by version add a random suffix so two
        branches never share a key; values here are found along the parent
        chain, not by version, so plain integers do — and every checkpoint's
        ``channel_versions`` and ``versions_seen`` stay short. (A version
        another saver wrote, ``"000…7.0.123"``, continues from its number.)
        """
        if current is None:
            return 1
        if isinstance(current, int):
            return current + 1
        return int(str(current).split(".")[0]) + 1


class AgentlogSaver(_SaverBase):
    """A LangGraph checkpointer on an agentlog log: deltas per step, bounded snapshots.

    ``target`` is a path (an agentlog SQLite file is opened — created if
    missing — for ``tenant`` on ``engine``, and closed with the saver), an
    open :class:`~agentlog.SqliteStorage` (its log for ``tenant``), or any
    :class:`~agentlog.BaseCheckpointer` (used as it is, with its own tenant,
    and not closed by the saver). The ``a…`` methods run the same code
    inline (SQLite writes are short); :class:`AsyncAgentlogSaver` keeps
    writes off the event loop. One saver is safe to share between threads.
    The module docstring describes what is stored.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | BaseCheckpointer | SqliteStorage,
        *,
        tenant: str = DEFAULT_LANGGRAPH_TENANT,
        engine: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._owns = False
        if isinstance(target, BaseCheckpointer):
            log = target
        elif isinstance(target, SqliteStorage):
            log = target.checkpointer(tenant)
        else:
            log = SqliteCheckpointer(target, tenant=tenant, engine=engine)
            self._owns = True
        self.log: BaseCheckpointer = log
        self._core = _Core(log, self.serde)
        self._maintenance = _Maintenance(self._core)

    def close(self) -> None:
        """Close the log if the saver opened it (from a path)."""
        if self._owns:
            self.log.close()

    def __enter__(self) -> AgentlogSaver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------

    def _commit(self, make: Callable[[], _Plan | None]) -> None:
        core = self._core
        for _ in range(_RETRIES):
            with core.lock:
                plan = make()
                if plan is None:
                    return
                try:
                    self.log.append(plan.sess.sid, core.stamp(plan), expected_head=plan.expected)
                except CheckpointConflictError:
                    core.conflicted(plan)
                    continue
                core.committed(plan)
                return
        raise StorageUnavailableError(f"gave up after {_RETRIES} conflicting writers")

    def _run(self, plan: Callable[[], builtins.list[_Op]]) -> None:
        core = self._core
        with core.lock:
            ops = plan()
            try:
                for op in ops:
                    if op[0] == "delete":
                        self.log.delete(op[1])
                    elif op[0] == "fork":
                        self.log.fork(op[1], op[2], op[3])
                    else:
                        self.log.append(op[1], op[2], expected_head=op[3])
            finally:
                self._maintenance.done(ops)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: the channels in ``new_versions`` (a list that
        grew, only its new tail), the others by reference to the parent."""
        self._commit(lambda: self._core.plan_put(config, checkpoint, metadata, new_versions))
        thread_id, ns = _thread_of(config)
        return _tuple_config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for the checkpoint in ``config``: a regular
        write already stored under the same ``(task_id, idx)`` is kept, a
        special one (error, interrupt, …; ``WRITES_IDX_MAP``) replaced."""
        self._commit(lambda: self._core.plan_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every namespace of ``thread_id`` (an unknown thread is fine)."""
        self._run(lambda: self._maintenance.delete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another (replacing
        what it held) with the log's own fork of each namespace."""
        self._run(lambda: self._maintenance.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep each namespace's latest checkpoint (a
        snapshot) and its writes, with the ancestors back to the last full
        value of each ``DeltaChannel`` it holds; ``"delete"``: delete the
        threads."""
        self._run(lambda: self._maintenance.prune(thread_ids, strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id``
        is one of ``run_ids``; the others stay readable. As LangGraph warns,
        a later checkpoint's ``DeltaChannel`` rebuilt from a deleted one's
        writes loses them: deleting is what was asked."""
        self._run(lambda: self._maintenance.delete_for_runs(run_ids))

    # -- async twins (inline) -------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, inline."""
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, inline."""
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, inline."""
        self.delete_thread(thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, inline."""
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, inline."""
        self.prune(thread_ids, strategy=strategy)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, inline."""
        self.delete_for_runs(run_ids)


class AsyncAgentlogSaver(_SaverBase):
    """:class:`AgentlogSaver` for asyncio hosts, on :mod:`agentlog.aio`.

    ``target`` is a path (an :class:`~agentlog.aio.AsyncSqliteCheckpointer`
    is opened for ``tenant`` on ``engine`` and closed by :meth:`aclose`) or
    an open :class:`~agentlog.aio.AsyncBaseCheckpointer` (not closed). Every
    write goes to that checkpointer's writer thread (group-committed with
    others); reads are short WAL reads on the loop, as in :mod:`agentlog.aio`.
    The sync methods work from other threads (they run on the saver's loop);
    called on the loop itself, the writing ones raise.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | AsyncBaseCheckpointer,
        *,
        tenant: str = DEFAULT_LANGGRAPH_TENANT,
        engine: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._owns = not isinstance(target, AsyncBaseCheckpointer)
        if isinstance(target, AsyncBaseCheckpointer):
            self.log = target
        else:
            self.log = AsyncSqliteCheckpointer(target, tenant=tenant, engine=engine)
        self._core = _Core(self.log.backend, self.serde)
        self._maintenance = _Maintenance(self._core)
        self.loop: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        """Finish queued writes and close the log if the saver opened it."""
        if self._owns:
            await self.log.aclose()

    async def __aenter__(self) -> AsyncAgentlogSaver:
        self.loop = asyncio.get_running_loop()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- writes -----------------------------------------------------------------

    async def _commit(self, make: Callable[[], _Plan | None]) -> None:
        self.loop = asyncio.get_running_loop()
        core = self._core
        for _ in range(_RETRIES):
            with core.lock:
                plan = make()
                if plan is None:
                    return
                events = core.stamp(plan)
            try:
                await self.log.append(plan.sess.sid, events, expected_head=plan.expected)
            except CheckpointConflictError:
                with core.lock:
                    core.conflicted(plan)
                continue
            with core.lock:
                core.committed(plan)
            return
        raise StorageUnavailableError(f"gave up after {_RETRIES} conflicting writers")

    async def _run(self, plan: Callable[[], builtins.list[_Op]]) -> None:
        self.loop = asyncio.get_running_loop()
        core = self._core
        with core.lock:
            ops = plan()
        try:
            for op in ops:
                if op[0] == "delete":
                    await self.log.delete(op[1])
                elif op[0] == "fork":
                    await self.log.fork(op[1], op[2], op[3])
                else:
                    await self.log.append(op[1], op[2], expected_head=op[3])
        finally:
            with core.lock:
                self._maintenance.done(ops)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`AgentlogSaver.put`, written by the writer thread."""
        await self._commit(lambda: self._core.plan_put(config, checkpoint, metadata, new_versions))
        thread_id, ns = _thread_of(config)
        return _tuple_config(thread_id, ns, checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`AgentlogSaver.put_writes`, written by the writer thread."""
        await self._commit(lambda: self._core.plan_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`AgentlogSaver.delete_thread`, written by the writer thread."""
        await self._run(lambda: self._maintenance.delete_thread(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`AgentlogSaver.copy_thread`, written by the writer thread."""
        await self._run(lambda: self._maintenance.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`AgentlogSaver.prune`, written by the writer thread."""
        await self._run(lambda: self._maintenance.prune(thread_ids, strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`AgentlogSaver.delete_for_runs`, written by the writer thread."""
        await self._run(lambda: self._maintenance.delete_for_runs(run_ids))

    # -- sync faces, from other threads ----------------------------------------

    def _on_loop(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            raise asyncio.InvalidStateError(
                "AsyncAgentlogSaver writes are coroutines: await the a… method "
                "(the sync ones are for other threads, once the saver has a loop)"
            )
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`aput` from another thread."""
        return self._on_loop(lambda: self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`aput_writes` from another thread."""
        self._on_loop(lambda: self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """:meth:`adelete_thread` from another thread."""
        self._on_loop(lambda: self.adelete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`acopy_thread` from another thread."""
        self._on_loop(lambda: self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`aprune` from another thread."""
        self._on_loop(lambda: self.aprune(thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`adelete_for_runs` from another thread."""
        self._on_loop(lambda: self.adelete_for_runs(run_ids))
