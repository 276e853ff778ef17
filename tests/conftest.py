"""Shared fixtures for agentlog's own tests.

The layout mirrors ``src/agentlog``: ``engine/`` (the SQLite engines),
``log/`` (the Checkpointer backends), ``stores/`` (the four stores),
``testing/`` (the shipped suites themselves), and the top-level modules'
tests here.

Engines: a test on one SQLite engine takes the :func:`engine` fixture (or,
for a class bound to one engine, derives from :class:`OnEngine`). Every
engine agentlog has is a case; one that is not built here is skipped with
the reason it is missing — or, under ``AGENTLOG_REQUIRE_EXTENSIONS=1``,
fails in setup (see :func:`require_engine`).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from agentlog import engine as engines
from agentlog import engine_info

#: Every SQLite engine agentlog has, the preferred first: each is a test case
#: whether or not it is built here (see require_engine).
ENGINES = ("c", "python")

#: The engines built here, the default first (what engine_info() reports).
AVAILABLE = list(engines.AVAILABLE_ENGINES)

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


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes (to show that a refused file was left untouched)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extensions_required() -> bool:
    """Whether ``AGENTLOG_REQUIRE_EXTENSIONS`` is set (CI and ``scripts/test`` set it)."""
    return os.environ.get("AGENTLOG_REQUIRE_EXTENSIONS", "") not in ("", "0")


def require_engine(name: str) -> None:
    """Go on only if the engine called ``name`` is built here.

    When it is not, skip the test, saying why the engine is missing; under
    ``AGENTLOG_REQUIRE_EXTENSIONS=1`` fail it instead, because there a
    missing engine is a broken build, not a choice.
    """
    if name in engines.AVAILABLE_ENGINES:
        return
    reason = f"the {name} engine is not available: {engine_info()['extension_error']}"
    if extensions_required():
        pytest.fail(f"{reason} (AGENTLOG_REQUIRE_EXTENSIONS is set)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each SQLite engine in turn (see require_engine for one that is not built)."""
    name = str(request.param)
    require_engine(name)
    return name


class OnEngine:
    """A test class bound to one SQLite engine: set ``engine``. Its tests
    follow :func:`require_engine`'s rule before any fixture opens a store."""

    engine: ClassVar[str]

    @pytest.fixture(autouse=True)
    def _engine_is_built(self) -> None:
        require_engine(self.engine)
