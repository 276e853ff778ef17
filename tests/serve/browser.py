"""Debian's Chromium, driven by Playwright, for the viewer's browser tests.

The browser is the system's (``apt-get install chromium``), never one
Playwright downloads. Without Playwright or the browser the tests are
skipped — or failed, under ``AGENTLOG_REQUIRE_BROWSER=1`` (scripts/test).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import zlib

import pytest

__all__ = ["CHROMIUM_FLAGS", "browser_missing", "distinct_rows", "require_browser"]

#: Headless, and nothing that reaches the network or a profile of its own.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """The system Chromium, if there is one."""
    return os.environ.get("AGENTLOG_CHROMIUM") or shutil.which("chromium")


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed (pip install playwright)"
    if chromium() is None:
        return "Chromium is not installed (apt-get install chromium)"
    return None


def require_browser() -> str:
    """The Chromium to drive; the test is skipped (or failed) without one."""
    reason = browser_missing()
    if reason is not None:
        if os.environ.get("AGENTLOG_REQUIRE_BROWSER", "") not in ("", "0"):
            pytest.fail(f"{reason} (AGENTLOG_REQUIRE_BROWSER is set)", pytrace=False)
        pytest.skip(reason)
    found = chromium()
    assert found is not None
    return found


def distinct_rows(png: bytes) -> int:
    """How many different rows a PNG's image data holds, as stored (each row
    filtered against the one above it): a blank image has one or two."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, width, channels, data = 8, 0, 4, b""
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            width, _, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8
            channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
        elif kind == b"IDAT":
            data += body
        at += 12 + length
    raw = zlib.decompress(data)
    stride = width * channels + 1
    return len({raw[at : at + stride] for at in range(0, len(raw), stride)})
