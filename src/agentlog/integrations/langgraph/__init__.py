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
  channel values **that changed**: for each channel in ``new_versions`` (or
  whose version is not the parent's, as in a ``__copy__`` fork) a
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

from .async_saver import AsyncAgentlogSaver
from .core import SNAPSHOT_MIN_BYTES as SNAPSHOT_MIN_BYTES
from .encoding import session_id_for
from .saver import DEFAULT_LANGGRAPH_TENANT, AgentlogSaver

__all__ = ["DEFAULT_LANGGRAPH_TENANT", "AgentlogSaver", "AsyncAgentlogSaver", "session_id_for"]
