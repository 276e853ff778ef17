"""The C engine's fault-injection seam, for tests: make SQLite (and the engine's
own C buffers) fail on purpose, to prove that every error path frees what it
allocated and leaves the log consistent.

The seam exists only in a C engine built with ``AGENTLOG_FAULTS=1`` (the
AddressSanitizer run of ``scripts/test`` builds it so); :func:`fault_seam`
returns None in every other build, including every shipped wheel, whose hot
paths carry no trace of it. See ``csrc/fault_injection.h`` for how it works.

A fault is process-wide and hits every connection of the C engine (never the
pure engine, which drives the standard library's SQLite)::

    seam = fault_seam()
    seam.arm("full", after=3)  # the 4th write, truncate or sync fails with SQLITE_FULL
    try:
        ...
    finally:
        fired = seam.disarm()
"""

from __future__ import annotations

import os
from typing import Any, Literal, get_args

__all__ = ["FAULT_KINDS", "FaultKind", "FaultSeam", "fault_seam"]

#: ``alloc``: an allocation fails (SQLite's, or the engine's own buffers);
#: ``ioerr-write``: a file write, truncate or sync fails with ``SQLITE_IOERR_*``;
#: ``full``: the same operations fail with ``SQLITE_FULL``.
FaultKind = Literal["alloc", "ioerr-write", "full"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
_CODES = {"alloc": 1, "ioerr-write": 2, "full": 3}


class FaultSeam:
    """Arms and disarms the one fault of the C engine's seam."""

    def __init__(self, module: Any) -> None:
        self._arm = module.fault_arm
        self._disarm = module.fault_disarm
        self._counts = module.fault_counts

    def arm(self, kind: FaultKind, *, after: int = 0, persistent: bool = False) -> None:
        """Let ``after`` operations of ``kind`` succeed and fail the next one;
        ``persistent``, fail every one after it too. Replaces any armed fault
        and zeroes the counts."""
        if kind not in _CODES:
            raise ValueError(f"fault kind must be one of {', '.join(FAULT_KINDS)}, not {kind!r}")
        if isinstance(after, bool) or not isinstance(after, int):
            raise TypeError("after must be an int")
        if after < 0:
            raise ValueError(f"after must be >= 0, not {after}")
        self._arm(_CODES[kind], after, bool(persistent))

    def count(self, kind: FaultKind) -> None:
        """Arm ``kind`` never to fire, to count its operations (:meth:`counts`)."""
        self.arm(kind, after=2**62)

    def counts(self) -> tuple[int, int]:
        """``(operations of the armed kind seen, faults fired)`` since arming."""
        seen, fired = self._counts()
        return int(seen), int(fired)

    def disarm(self) -> int:
        """Stop injecting; return how many faults fired since arming."""
        return int(self._disarm())


def fault_seam() -> FaultSeam | None:
    """The seam, when the C engine here was built with it; else None."""
    if os.environ.get("AGENTLOG_NO_EXTENSIONS"):
        return None
    try:
        from . import cengine
    except ImportError:
        return None
    if not hasattr(cengine, "fault_arm"):
        return None
    return FaultSeam(cengine)
