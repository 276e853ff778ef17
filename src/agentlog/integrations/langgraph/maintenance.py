"""The savers' maintenance: delete, copy and prune threads, delete runs.

Each is planned as log operations under the core's lock, then run by the
saver (inline, or on the async checkpointer's writer thread)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import CheckpointMetadata

from .core import Core
from .encoding import session_id_for
from .index import SessionIndex

__all__ = ["Maintenance", "Op"]


def _run_id(metadata: CheckpointMetadata) -> str | None:
    run_id = dict(metadata).get("run_id")
    return str(run_id) if run_id is not None else None


#: One maintenance step on the log: ("delete", sid) | ("fork", sid, at, new) |
#: ("append", sid, events, expected_head).
Op = tuple[Any, ...]


class Maintenance:
    """The log operations of copy, prune, delete: planned under the lock, then run."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def delete_thread(self, thread_id: str) -> builtins.list[Op]:
        return [("delete", sid) for sid in self.core.thread_sessions(str(thread_id))]

    def copy_thread(self, source: str, target: str) -> builtins.list[Op]:
        core = self.core
        if str(source) == str(target):
            return []  # a thread is already its own copy
        ops = self.delete_thread(target)
        for sid in core.thread_sessions(str(source)):
            sess = core.refresh(sid)
            if sess is None:
                continue
            new = session_id_for(str(target), sess.ns)
            event = core.thread_event(SessionIndex(new, off=sess.off), str(target), sess.ns)
            ops.append(("fork", sid, sess.head, new))
            ops.append(("append", new, [event], sess.head))
        return ops

    def prune(self, thread_ids: Sequence[str], strategy: str) -> builtins.list[Op]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        core = self.core
        ops: builtins.list[Op] = []
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

    def _with_delta_seeds(self, sess: SessionIndex, seq: int) -> builtins.list[int]:
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

    def delete_for_runs(self, run_ids: Sequence[str]) -> builtins.list[Op]:
        wanted = {str(r) for r in run_ids}
        core = self.core
        ops: builtins.list[Op] = []
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

    def _rewrite(self, sess: SessionIndex, keep: builtins.list[int]) -> builtins.list[Op]:
        events = self.core.rewrite_events(sess, keep)
        return [("delete", sess.sid), ("append", sess.sid, events, 0)]

    def done(self, ops: builtins.list[Op]) -> None:
        for op in ops:
            self.core.forget(op[-1] if op[0] == "fork" else op[1])
