"""The file store's check of its lines' CRCs, in C when the C engine is built.

The check itself (``line_check.pxi``) is compiled into the C engine's
extension module, the one C module agentlog builds, though it serves the
file store, not SQLite: :data:`first_bad_crc_line` is it, or None where the
C engine is not available (then the file store checks in Python).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable

__all__ = ["first_bad_crc_line"]

#: The index of the first line of a page of file-store lines whose ``"crc"``
#: is not the CRC-32 of its event bytes, or -1; None without the C engine.
first_bad_crc_line: Callable[[bytes], int] | None = None

if not os.environ.get("AGENTLOG_NO_EXTENSIONS") and platform.python_implementation() == "CPython":
    try:
        from .cengine import first_bad_line
    except ImportError:
        pass  # (engine_info() says why the C engine did not load)
    else:
        first_bad_crc_line = first_bad_line
