"""The core both savers share: planning, indexing and rebuilding checkpoints.

The savers only append what it plans and tell it the outcome; the storage
layout it reads and writes is described in :mod:`agentlog.integrations.langgraph`."""

from __future__ import annotations

import builtins
import json
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
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

from agentlog import BaseCheckpointer, SessionEvent, StorageDataError
from agentlog.events import check_identifier

from .encoding import (
    EVENT_TYPE,
    PREFIX,
    as_bytes,
    as_text,
    configurable,
    event_size,
    extends,
    session_id_for,
    thread_of,
    thread_prefix,
    tuple_config,
)
from .index import ChannelState, CheckpointInfo, Plan, SessionIndex

__all__ = ["RETRIES", "SNAPSHOT_MIN_BYTES", "Core"]

#: A range below this many bytes never forces a snapshot.
SNAPSHOT_MIN_BYTES = 64 * 1024
#: How many times a write is planned again after losing to another writer.
RETRIES = 64
# How many sessions' indexes a saver keeps.
_INDEX_CACHE = 64


def _raw_of(
    raw: dict[str, tuple[str, str]], lists: dict[str, builtins.list[Any]]
) -> dict[str, tuple[str, str]]:
    """The stored form of the values that are not lists (a list is kept as its elements)."""
    return {k: v for k, v in raw.items() if k not in lists}


class Core:
    """Planning, indexing and rebuilding; the savers only append and await."""

    def __init__(self, log: BaseCheckpointer, serde: SerializerProtocol) -> None:
        self.log = log
        self.serde = serde
        self.lock = threading.RLock()
        self.sessions: OrderedDict[str, SessionIndex] = OrderedDict()
        # The events a tail index just read (the rebuild after it needs the same range).
        self._read: tuple[str, dict[int, dict[str, Any]]] | None = None

    # -- encoding -----------------------------------------------------------------

    def dumps(self, value: Any) -> tuple[str, bytes]:
        kind, data = self.serde.dumps_typed(value)
        return kind, data

    def loads(self, kind: str, text: str) -> Any:
        return self.serde.loads_typed((kind, as_bytes(text)))

    def blob(self, tag: str, value: Any) -> tuple[builtins.list[Any], int]:
        kind, data = self.dumps(value)
        return [tag, kind, as_text(data)], len(data)

    # -- the index ----------------------------------------------------------------

    def session(self, thread_id: str, ns: str, full: bool = True) -> SessionIndex | None:
        """The caught-up index of a session, or None when it does not exist
        (``full=False``: a tail index is enough)."""
        return self.refresh(session_id_for(thread_id, ns), full, (thread_id, ns))

    def refresh(
        self, sid: str, full: bool = True, names: tuple[str, str] | None = None
    ) -> SessionIndex | None:
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
            fresh = self._full(SessionIndex(sid))
        self.sessions[sid] = fresh
        while len(self.sessions) > _INDEX_CACHE:
            self.sessions.popitem(last=False)
        return fresh

    def _full(self, old: SessionIndex) -> SessionIndex:
        """An index of every event of the session (keeping what is cached)."""
        sess = SessionIndex(old.sid)
        if not self._catch_up(sess):
            raise StorageDataError(f"session {old.sid!r} does not hold a LangGraph thread")
        if old.tip is not None and old.valid and old.tip.seq in sess.info:
            sess.tip = old.tip
        self.sessions[old.sid] = sess
        return sess

    def _tail_index(self, sid: str, head: int, names: tuple[str, str]) -> SessionIndex | None:
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
        sess = SessionIndex(sid, base=start, head=start, epoch=str(top_event["e"]))
        sess.thread_id, sess.ns = names
        for event in events:
            if not sess.apply(event.seq, event.event):
                return None
        self._read = (sid, {event.seq: event.event for event in events})
        info = sess.info.get(top)
        if info is None or sess.latest != info.id:
            return None
        return sess

    def _catch_up(self, sess: SessionIndex) -> bool:
        for event in self.log.read(sess.sid, sess.head):
            if not sess.apply(event.seq, event.event):
                return False
        return True

    def forget(self, sid: str) -> None:
        self.sessions.pop(sid, None)

    def thread_sessions(self, thread_id: str | None) -> builtins.list[str]:
        prefix = thread_prefix(thread_id) if thread_id is not None else PREFIX
        return [info.id for info in self.log.list() if info.id.startswith(prefix)]

    def _event(self, sid: str, seq: int) -> dict[str, Any]:
        for event in self.log.read(sid, seq - 1, 1):
            return event.event
        raise StorageDataError(f"event {seq} of {sid!r} is missing")

    # -- rebuilding -----------------------------------------------------------------

    def state(
        self, sess: SessionIndex, seq: int, cache: dict[int, dict[str, Any]] | None = None
    ) -> ChannelState:
        """The channel values of the checkpoint at ``seq``, rebuilt from its
        snapshot (``cache``: events already read, seq → event, added to)."""
        return self._state(sess, seq, cache)

    def _state(
        self, sess: SessionIndex, seq: int, cache: dict[int, dict[str, Any]] | None
    ) -> ChannelState:
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
        raw: dict[str, tuple[str, str]] = {}
        for ev in chain:
            for channel, blob in ev["v"].items():
                tag = blob[0]
                if tag == "e":
                    values.pop(channel, None)
                    sizes.pop(channel, None)
                    raw.pop(channel, None)
                    continue
                data = as_bytes(blob[2])
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
                    raw[channel] = (blob[1], blob[2])
        lists = {k: list(v) for k, v in values.items() if type(v) is list}
        return ChannelState(seq, values, sizes, root, lists, raw=_raw_of(raw, lists))

    def tuple_at(
        self,
        sess: SessionIndex,
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
        ev = cache[seq] if cache is not None and seq in cache else self._event(sess.sid, seq)
        values = self._tip_values(sess, seq, ev)
        if values is None:
            values = self.state(sess, seq, cache).values
        body = cast(dict[str, Any], self.loads(*ev["ck"]))
        versions = body.get("channel_versions") or {}
        body["channel_values"] = {k: values[k] for k in versions if k in values}
        parent = info.parent
        return CheckpointTuple(
            config=config or tuple_config(thread, sess.ns, info.id),
            checkpoint=cast(Checkpoint, body),
            metadata=self.metadata(info),
            parent_config=tuple_config(thread, sess.ns, parent) if parent else None,
            pending_writes=self.pending_writes(sess, info.id),
        )

    def _tip_values(
        self, sess: SessionIndex, seq: int, ev: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The values of the checkpoint at ``seq`` from the state this saver
        last wrote, when that is it (else None: rebuild from the log).

        The caller has checked the session's head against the log; ``ev``,
        the event at ``seq`` as the log holds it now, must also be the one
        indexed (same incarnation, same end offset), so a session another
        writer deleted and rewrote is never answered from memory. Lists are
        handed out as fresh lists of the elements put (LangGraph's reducers
        make new messages, never change one in place), other values decoded
        afresh from their stored bytes (small: the lists are the state)."""
        tip = sess.tip
        info = sess.info[seq]
        if tip is None or tip.seq != seq or ev.get("e") != sess.epoch or ev.get("o") != info.end:
            return None
        values: dict[str, Any] = {}
        for k in tip.values:
            items = tip.lists.get(k)
            if items is not None:
                values[k] = list(items)
                continue
            stored = tip.raw.get(k)
            if stored is None:
                return None
            values[k] = self.loads(*stored)
        return values

    def metadata(self, info: CheckpointInfo) -> CheckpointMetadata:
        if info.metadata_typed is not None:
            return cast(CheckpointMetadata, self.loads(*info.metadata_typed))
        # A fresh copy: the caller may change what it gets.
        return cast(CheckpointMetadata, orjson.loads(orjson.dumps(info.metadata or {})))

    def pending_writes(self, sess: SessionIndex, checkpoint_id: str) -> builtins.list[PendingWrite]:
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
        thread_id, ns = thread_of(config)
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
                thread_id, _ = thread_of(config)
                conf = configurable(config)
                ns_wanted = conf.get("checkpoint_ns")
                only_id = get_checkpoint_id(config)
                sids = self.thread_sessions(thread_id)
            else:
                ns_wanted, only_id, thread_id = None, None, None
                sids = self.thread_sessions(None)
            before_id = get_checkpoint_id(before) if before else None
            candidates: builtins.list[tuple[str, SessionIndex, int]] = []
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

    def _new_session(self, thread_id: str, ns: str) -> tuple[SessionIndex, dict[str, Any]]:
        sess = SessionIndex(session_id_for(thread_id, ns))
        header = self.thread_event(sess, thread_id, ns)
        return sess, header

    def thread_event(self, sess: SessionIndex, thread_id: str, ns: str) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "type": EVENT_TYPE,
            "lg": "t",
            "e": secrets.token_hex(6),
            "thread_id": thread_id,
            "checkpoint_ns": ns,
        }
        ev["o"] = sess.off + event_size(ev)
        return ev

    def _parent_state(self, sess: SessionIndex, pseq: int) -> ChannelState:
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
    ) -> Plan:
        thread_id, ns = thread_of(config)
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
        return Plan(sess, events, tip)

    def stored_metadata(
        self, config: RunnableConfig, metadata: CheckpointMetadata
    ) -> dict[str, Any]:
        """The metadata as the event holds it: JSON when it can, else ``mt`` (serde)."""
        meta = get_checkpoint_metadata(config, metadata)
        try:
            text = json.dumps(meta, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError):
            kind, data = self.dumps(meta)
            return {"mt": [kind, as_text(data)]}
        return {"m": json.loads(text)}

    def checkpoint_event(
        self,
        sess: SessionIndex,
        seq: int,
        off: int,
        checkpoint: Checkpoint,
        parent_id: str | None,
        parent: ChannelState | None,
        stored_meta: dict[str, Any],
        new_versions: ChannelVersions,
    ) -> tuple[dict[str, Any], ChannelState]:
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
            event["o"] = off + event_size(event)
            raw = _raw_of({k: (b[1], b[2]) for k, b in blobs.items()}, lists)
            return event, ChannelState(seq, values, sizes, seq, lists, dict(versions), raw)
        values = dict(parent.values)
        sizes = dict(parent.sizes)
        lists = dict(parent.lists)
        raw = dict(parent.raw)
        blobs = {}
        for k in self._changed(sess, parent, versions, new_versions):
            raw.pop(k, None)
            if k not in incoming:
                blobs[k] = ["e"]
                values.pop(k, None)
                sizes.pop(k, None)
                lists.pop(k, None)
                continue
            value = incoming[k]
            old = parent.lists.get(k)
            if old is not None and k in parent.values and extends(value, old):
                blobs[k], grown = self.blob("x", value[len(old) :])
                sizes[k] = parent.sizes.get(k, 0) + grown
            else:
                blobs[k], sizes[k] = self.blob("f", value)
            values[k] = value
            if type(value) is list:
                lists[k] = list(value)
            else:
                lists.pop(k, None)
                raw[k] = (blobs[k][1], blobs[k][2])
        for k in [k for k in values if k not in versions]:
            del values[k]
            sizes.pop(k, None)
            lists.pop(k, None)
            raw.pop(k, None)
        event = self._ckpt_event(
            sess, seq, ck_kind, ck_data, checkpoint, parent_id, parent.seq, parent.root, stored_meta
        )
        event["v"] = blobs
        size = event_size(event)
        state_bytes = sum(sizes.values())
        root_end = sess.info[parent.root].end if parent.root in sess.info else 0
        if off + size - root_end > max(SNAPSHOT_MIN_BYTES, state_bytes):
            # Snapshot: every channel whole, and the chain starts here.
            event["r"] = seq
            full: dict[str, builtins.list[Any]] = {}
            for k, value in values.items():
                full[k], sizes[k] = self.blob("f", value)
            event["v"] = full
            size = event_size(event)
            event["o"] = off + size
            raw = _raw_of({k: (b[1], b[2]) for k, b in full.items()}, lists)
            return event, ChannelState(seq, values, sizes, seq, lists, dict(versions), raw)
        event["o"] = off + size
        return event, ChannelState(seq, values, sizes, parent.root, lists, dict(versions), raw)

    def _changed(
        self,
        sess: SessionIndex,
        parent: ChannelState,
        versions: ChannelVersions,
        new_versions: ChannelVersions,
    ) -> builtins.list[str]:
        """The channels a child must store: ``new_versions``, and any other
        whose version is not its parent's — a ``__copy__`` fork puts the
        copied checkpoint under the copy's parent with no new versions."""
        prior = parent.versions
        if prior is None:
            body = self.loads(*self._event(sess.sid, parent.seq)["ck"])
            prior = dict(body.get("channel_versions") or {}) if isinstance(body, dict) else {}
            parent.versions = prior
        return [
            *new_versions,
            *(k for k, v in versions.items() if k not in new_versions and prior.get(k) != v),
        ]

    def _ckpt_event(
        self,
        sess: SessionIndex,
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
            "type": EVENT_TYPE,
            "lg": "c",
            "e": "",
            "id": checkpoint["id"],
            "p": parent_id,
            "ps": pseq,
            "r": root,
            "ck": [ck_kind, as_text(ck_data)],
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
    ) -> Plan | None:
        thread_id, ns = thread_of(config)
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
            rows.append([at, channel, kind, as_text(data)])
        if not rows:
            return None
        off = int(events[-1]["o"]) if events else sess.off
        event: dict[str, Any] = {
            "type": EVENT_TYPE,
            "lg": "w",
            "e": "",
            "c": checkpoint_id,
            "t": task_id,
            "tp": task_path,
            "w": rows,
        }
        event["o"] = off + event_size(event)
        events.append(event)
        return Plan(sess, events, None)

    @staticmethod
    def append_key(plan: Plan) -> str | None:
        """The append key of a plan: a checkpoint's id, its natural key (a
        checkpoint is put once); None for writes, which carry no such id."""
        last = plan.events[-1]
        if last["lg"] != "c":
            return None
        key = f"checkpoint-{last['id']}"
        try:
            return check_identifier(key, "append key", ValueError)
        except ValueError:
            return None  # an id no key can hold: appended unkeyed, as before

    def stamp(self, plan: Plan) -> builtins.list[SessionEvent]:
        """The plan's events with the session's epoch filled in."""
        epoch = plan.sess.epoch
        for ev in plan.events:
            if ev["lg"] == "t":
                epoch = ev["e"]
            else:
                ev["e"] = epoch
        return list(plan.events)

    def committed(self, plan: Plan) -> None:
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

    def conflicted(self, plan: Plan) -> None:
        """Another writer went first: reread unless this process wrote it."""
        if plan.sess.head == plan.expected:
            plan.sess.valid = False
            plan.sess.tip = None

    # -- rewriting (prune, delete_for_runs) ----------------------------------------

    def rewrite_events(
        self, sess: SessionIndex, keep: builtins.list[int]
    ) -> builtins.list[dict[str, Any]]:
        """A fresh session's events holding only the checkpoints at ``keep``."""
        fresh = SessionIndex(sess.sid)
        events = [self.thread_event(fresh, sess.thread_id, sess.ns)]
        fresh.apply(1, events[0])
        previous: ChannelState | None = None
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
                wev["o"] = fresh.off + event_size(wev)
                fresh.apply(fresh.head + 1, wev)
                events.append(wev)
        return events
