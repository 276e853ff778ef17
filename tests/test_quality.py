"""Lint, format and type checks run with the tests, so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
    ],
    ids=" ".join,
)
def test_tool_is_clean(command: list[str]) -> None:
    """ruff check, ruff format --check and mypy on the checkout. mypy takes
    about 35 s: strict, over the whole package, without a cache (a cache in
    the checkout could hide what a clean clone finds)."""
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("runs from a source checkout only")
    run = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
