"""What the owning process knows about one session file, kept between calls."""

from __future__ import annotations

from array import array
from pathlib import Path

__all__ = ["SessionState"]


class SessionState:
    """What the owning process knows about one session file."""

    __slots__ = ("activity", "base", "header", "keys", "meta", "meta_loaded", "mtime",
                 "offsets", "path", "session_id", "stamp")  # fmt: skip

    def __init__(
        self,
        session_id: str,
        path: Path,
        offsets: array[int],
        mtime: float,
        stamp: tuple[int, int, int] | None = None,
    ) -> None:
        self.session_id = session_id
        self.path = path
        # offsets[k] is where event k+1 starts; offsets[head] is the end of
        # the committed log. offsets[0] is the end of the header.
        self.offsets = offsets
        # The file's own mtime, so list() reads the same after a reopen; the
        # activity counter orders changes that fall in one clock tick.
        self.mtime = mtime
        self.activity = 0
        # The file as it was read (a read-only checkpointer reloads on change).
        self.stamp = stamp
        # From the metadata file, read on first use: the metadata's JSON and
        # the base of the revision (revision = base + head).
        self.meta: bytes | None = None
        self.base = 0
        self.meta_loaded = False
        # Its append keys (key -> (digest, head)), read from the file on the
        # first keyed append; None until then.
        self.keys: dict[str, tuple[bytes, int]] | None = None
        # The header line, once read (it records a fork's origin; never rewritten).
        self.header: bytes | None = None

    @property
    def head(self) -> int:
        return len(self.offsets) - 1
