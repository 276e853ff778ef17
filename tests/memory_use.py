"""How much memory this process uses, read the same way on Linux and macOS.

Importable by the tests (``from ..memory_use import …``) and by their child
processes, which have ``tests/`` on their path (``from memory_use import …``).
Linux reports ``ru_maxrss`` in kilobytes and has ``/proc``; macOS reports it
in bytes and has no ``/proc``. Linux also carries the peak of the process that
starts a program into it (across ``exec``), so a child that measures its own
peak is started through :func:`fresh_peak_command` (:func:`run_fresh_peak`).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys


def current_rss_bytes() -> int:
    """The resident set size of this process now."""
    if os.path.exists("/proc/self/statm"):
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    # macOS and the BSDs: ps reports the resident size in kilobytes.
    run = subprocess.run(
        ["ps", "-o", "rss=", "-p", str(os.getpid())], capture_output=True, text=True, check=True
    )
    return int(run.stdout.strip()) * 1024


def peak_rss_bytes() -> int:
    """The largest resident set size this process has had."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def mb(size: int) -> float:
    """``size`` bytes in MiB."""
    return size / 2**20


#: Runs ``argv[1:]`` and exits with its status: a small process in between.
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


def fresh_peak_command(command: list[str]) -> list[str]:
    """``command`` started through a small launcher, so that the peak it reads
    is its own and not that of the (possibly large) test process."""
    return [sys.executable, "-c", LAUNCHER, *command]


def run_fresh_peak(
    command: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` through :func:`fresh_peak_command` with ``env``; its
    output captured as text."""
    return subprocess.run(
        fresh_peak_command(command), capture_output=True, text=True, env=env, timeout=timeout
    )
