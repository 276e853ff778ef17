"""What a process knows of a LangGraph session: its checkpoints, their
states and writes, indexed from the log's events; and a planned append."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChannelState", "CheckpointInfo", "Plan", "SessionIndex"]


@dataclass
class CheckpointInfo:
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
class ChannelState:
    """A checkpoint's channel values as objects, with what a child needs."""

    seq: int
    values: dict[str, Any]
    sizes: dict[str, int]
    root: int
    # For list values: the element references as of this checkpoint.
    lists: dict[str, list[Any]] = field(default_factory=dict)
    # The checkpoint's channel versions, when known without a read.
    versions: dict[str, Any] | None = None
    # For the other values: their stored ``(kind, text)``, to hand out a
    # fresh copy without reading the log (see ``Core.tuple_at``).
    raw: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class SessionIndex:
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
    info: dict[int, CheckpointInfo] = field(default_factory=dict)
    writes: dict[str, list[int]] = field(default_factory=dict)
    wkeys: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    latest: str | None = None
    tip: ChannelState | None = None
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
            info = CheckpointInfo(
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


class Plan:
    """Events to append to one session, and how to index them once written."""

    def __init__(
        self, sess: SessionIndex, events: list[dict[str, Any]], tip: ChannelState | None
    ) -> None:
        self.sess = sess
        self.events = events
        self.tip = tip
        self.expected = sess.head
