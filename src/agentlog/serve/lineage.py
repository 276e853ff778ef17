"""The viewer's fork tree: a session's ancestors and descendants, from lineage.

Built on the log's ``lineage()`` and ``forks()`` only (no event is read).
Lineage can loop — a source deleted and re-created as a fork of its own fork —
and a tree can be wide, so the walk remembers what it has seen and stops at
:data:`MAX_TREE` sessions, saying so.
"""

from __future__ import annotations

from typing import Any

from ..events import ForkOrigin
from ..log import BaseCheckpointer

__all__ = ["MAX_DEPTH", "MAX_TREE", "lineage_tree"]

#: The most sessions one fork tree names (ancestors and descendants together).
MAX_TREE = 500
#: The most levels of forks below the session (the JSON stays shallow enough
#: for any encoder: two levels of nesting per generation).
MAX_DEPTH = 64


def _node(log: BaseCheckpointer, session_id: str, seq: int | None) -> dict[str, Any]:
    """A session of the tree, with the seq of its parent there that it was
    forked at (None for the oldest ancestor)."""
    head = log.head(session_id)
    # An empty session with no metadata still exists when it is a recorded
    # fork (a fork at seq 0 of a file store has neither head nor revision).
    exists = (
        head > 0 or log.metadata(session_id).revision > 0 or log.lineage(session_id) is not None
    )
    return {"session_id": session_id, "seq": seq, "head": head, "exists": exists}


def lineage_tree(log: BaseCheckpointer, session_id: str) -> dict[str, Any] | None:
    """The fork tree of ``session_id`` as the API returns it; None when the
    session is unknown and nothing names it as a source.

    ``origin`` is where it was forked from (or None); ``ancestors`` the chain
    of sources from the oldest one recorded down to that origin; ``forks``
    its direct forks, each with theirs (``forks`` again), by fork seq and
    then id. Every node carries ``seq``, the seq of the session above it in
    the tree that it was forked at (None for the oldest ancestor), its
    ``head`` and whether it ``exists`` (a deleted source is still named).
    ``truncated`` says the walk stopped short: at :data:`MAX_TREE` sessions,
    :data:`MAX_DEPTH` generations, or a loop.
    """
    seen = {session_id}
    chain: list[ForkOrigin] = []  # the session's origin, then its source's, and on
    cut = False
    origin = log.lineage(session_id)
    at = origin
    while at is not None:
        if at.session_id in seen or len(seen) >= MAX_TREE:
            cut = True
            break
        seen.add(at.session_id)
        chain.append(at)
        at = log.lineage(at.session_id)
    # Oldest first; each with the seq it was forked at from the one before it.
    ancestors = [
        _node(log, source.session_id, None if i + 1 == len(chain) else chain[i + 1].seq)
        for i, source in enumerate(chain)
    ][::-1]

    def descend(parent: str, depth: int) -> list[dict[str, Any]]:
        nonlocal cut
        found: list[dict[str, Any]] = []
        forks = log.forks(parent)
        if forks and depth >= MAX_DEPTH:
            cut = True
            return found
        for fork in forks:
            if fork.session_id in seen or len(seen) >= MAX_TREE:
                cut = True
                continue
            seen.add(fork.session_id)
            node = _node(log, fork.session_id, fork.seq)
            found.append(node)
            node["forks"] = descend(fork.session_id, depth + 1)
        return found

    forks = descend(session_id, 0)
    here = _node(log, session_id, None if origin is None else origin.seq)
    if not here["exists"] and not forks:
        return None
    return {
        "session_id": session_id,
        "head": here["head"],
        "exists": here["exists"],
        "origin": None if origin is None else _node(log, origin.session_id, origin.seq),
        "ancestors": ancestors,
        "forks": forks,
        "truncated": cut,
    }
