"""Shared fixtures for agentlog's own tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from agentlog.engine import AVAILABLE_ENGINES

#: The SQLite engines every SQLite test runs on.
ENGINES = list(AVAILABLE_ENGINES)

# Child processes (crash and two-process tests) run helper modules from here.
TESTS_DIR = Path(__file__).resolve().parent


def child_env() -> dict[str, str]:
    """The environment for a child Python process: this one's, plus tests/ on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TESTS_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    return env


PYTHON = sys.executable


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each SQLite engine in turn."""
    return str(request.param)
