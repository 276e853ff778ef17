"""The benchmark package run in a child process, as its smoke tests run it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .conftest import PYTHON, TESTS_DIR, child_env

#: The checkout: where the ``benchmarks`` package lives (it is not installed).
ROOT = TESTS_DIR.parent


def run_benchmark(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python *argv`` in ``cwd``, the checkout on its path; its output as text."""
    env = {**child_env(), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [PYTHON, *argv], cwd=cwd, capture_output=True, text=True, env=env, timeout=600
    )
