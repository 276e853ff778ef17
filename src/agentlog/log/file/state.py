"""What the owning process knows about one session file, kept between calls."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SessionState"]


@dataclass(slots=True, eq=False)
class SessionState:
    """What the owning process knows about one session file."""

    session_id: str
    path: Path
    # offsets[k] is where event k+1 starts; offsets[head] is the end of
    # the committed log. offsets[0] is the end of the header.
    offsets: array[int] = field(repr=False)  # one per event: never in a traceback
    # The file's own mtime, so list() reads the same after a reopen; the
    # activity counter orders changes that fall in one clock tick.
    mtime: float
    # The file as it was read (a read-only checkpointer reloads on change).
    stamp: tuple[int, int, int] | None = None
    activity: int = field(default=0, init=False)
    # From the metadata file, read on first use: the metadata's JSON and
    # the base of the revision (revision = base + head).
    meta: bytes | None = field(default=None, init=False, repr=False)
    base: int = field(default=0, init=False)
    meta_loaded: bool = field(default=False, init=False)
    # Its append keys (key -> (digest, head)), read from the file on the
    # first keyed append; None until then.
    keys: dict[str, tuple[bytes, int]] | None = field(default=None, init=False, repr=False)
    # The header line, once read (it records a fork's origin; never rewritten).
    header: bytes | None = field(default=None, init=False, repr=False)

    @property
    def head(self) -> int:
        return len(self.offsets) - 1
