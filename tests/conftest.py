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

PostgreSQL: a test that needs a server derives from :class:`OnPostgres` (or
takes the :func:`postgres_server` fixture). One throwaway cluster is started
for the whole run (``tests/postgres_server.py``) — or, when
``AGENTLOG_TEST_POSTGRES`` holds a connection string, that server is used.
Without server binaries or psycopg the tests are skipped, saying why; under
``AGENTLOG_REQUIRE_POSTGRES=1`` (``scripts/test`` sets it) they fail instead.
Each test gets a schema of its own (:func:`postgres_schema`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from agentlog import engine as engines
from agentlog import engine_info

from .postgres_server import PostgresServer, missing_reason

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


def extensions_disabled() -> bool:
    """Whether ``AGENTLOG_NO_EXTENSIONS`` turns the C engine off here (the pure
    pass of ``scripts/test``): a built C engine is then not loaded, by choice."""
    return bool(os.environ.get("AGENTLOG_NO_EXTENSIONS"))


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


# -- PostgreSQL ----------------------------------------------------------------------

#: The connection string of the test server (set for this process and the
#: children it starts, so a spawned racer reaches the same server).
POSTGRES_ENV = "AGENTLOG_TEST_POSTGRES"


def postgres_required() -> bool:
    """Whether ``AGENTLOG_REQUIRE_POSTGRES`` is set (``scripts/test`` sets it)."""
    return os.environ.get("AGENTLOG_REQUIRE_POSTGRES", "") not in ("", "0")


def _postgres_missing() -> str | None:
    for module in ("psycopg", "psycopg_pool"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'agentlog[postgres]')"
    if os.environ.get(POSTGRES_ENV):
        return None
    return missing_reason()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The connection string of a PostgreSQL server for this run.

    A throwaway cluster started here and removed at the end — or the server
    ``AGENTLOG_TEST_POSTGRES`` names. Skipped when neither is possible, or
    failed under ``AGENTLOG_REQUIRE_POSTGRES=1``.
    """
    reason = _postgres_missing()
    if reason is not None:
        if postgres_required():
            pytest.fail(f"{reason} (AGENTLOG_REQUIRE_POSTGRES is set)", pytrace=False)
        pytest.skip(reason)
    given = os.environ.get(POSTGRES_ENV)
    if given:
        yield given
        return
    server = PostgresServer().start()
    os.environ[POSTGRES_ENV] = server.conninfo
    try:
        yield server.conninfo
    finally:
        os.environ.pop(POSTGRES_ENV, None)
        server.stop()


def postgres_conninfo() -> str:
    """The test server's connection string (in a test, or in a child it started)."""
    return os.environ[POSTGRES_ENV]


def postgres_schema(location: Path | str) -> str:
    """The schema of the store that lives at ``location``: one per test directory."""
    return "t_" + hashlib.sha256(str(location).encode()).hexdigest()[:24]


class OnPostgres:
    """A test class that needs the PostgreSQL server (skipped or failed without one)."""

    @pytest.fixture(autouse=True)
    def _postgres_is_up(self, postgres_server: str) -> None:
        return None
