"""What a child of ``os.fork()`` must give up: the open objects that hold a
resource the parent still owns (a SQLite engine's connections, a file store's
directory lock). Each registers itself once; the child abandons every one that
is still open, before it runs anything else."""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

__all__ = ["Abandonable", "abandon_in_fork_children"]


class Abandonable(Protocol):
    """An object open in this process, which a fork child must abandon."""

    @property
    def closed(self) -> bool:
        """Whether it is closed (a closed one is left alone)."""
        ...

    def abandon_after_fork(self) -> None:
        """Give up, in the child, what the parent still owns."""
        ...


# Held weakly: registering must not keep an object alive.
_LIVE: weakref.WeakSet[Abandonable] = weakref.WeakSet()


def abandon_in_fork_children(owner: Abandonable) -> None:
    """Have a child of ``os.fork()`` call ``owner.abandon_after_fork()``
    (unless it is closed by then); ``owner`` is held weakly."""
    _LIVE.add(owner)


_log = logging.getLogger("agentlog.engine")


def _after_fork_in_child() -> None:
    abandoned = 0
    for owner in list(_LIVE):
        if not owner.closed:
            owner.abandon_after_fork()
            abandoned += 1
    _LIVE.clear()
    if abandoned:
        _log.info(
            "in a child of os.fork() (pid %d): %d open store(s) of the parent abandoned;"
            " their use here is refused: open them again in this process",
            os.getpid(),
            abandoned,
        )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
