"""The test tree's memory reader gives bytes on Linux and macOS alike."""

from __future__ import annotations

import json

from .conftest import PYTHON, child_env
from .memory_use import run_fresh_peak

BLOCK = 64 * 2**20
#: The kernel's peak may trail the current size by its per-thread counters.
SLACK = 2**20

# In a child, importing the helper the way the tests' children do.
SCRIPT = f"""
import json
from memory_use import current_rss_bytes, peak_rss_bytes
before, peak_before = current_rss_bytes(), peak_rss_bytes()
block = b"\\x01" * {BLOCK}  # written, so resident
print(json.dumps([before, peak_before, current_rss_bytes(), peak_rss_bytes()]))
"""


def test_resident_and_peak_sizes_are_bytes_and_follow_an_allocation() -> None:
    # This process has grown first, so that a peak carried into the child would show.
    ballast = b"\x02" * (2 * BLOCK)
    run = run_fresh_peak([PYTHON, "-c", SCRIPT], child_env(), timeout=120)
    del ballast
    assert run.returncode == 0, run.stderr
    before, peak_before, during, peak = json.loads(run.stdout)
    sizes = {"before": before, "peak_before": peak_before, "during": during, "peak": peak}
    # A fresh Python holds megabytes (not kilobytes, not gigabytes).
    assert 4 * 2**20 < before < 2**30, sizes
    assert during - before > BLOCK * 3 // 4, sizes
    # The child's peak is its own (not this process's) and covers what it holds now.
    assert peak_before < before + BLOCK, sizes
    assert peak - peak_before > BLOCK * 3 // 4, sizes
    assert peak >= during - SLACK, sizes
    assert peak < 2**33, sizes  # bytes, not a unit a thousand times larger
