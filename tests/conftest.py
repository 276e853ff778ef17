"""Shared fixtures for agentlog's own tests.

The layout mirrors ``src/agentlog``: ``engine/`` (the SQLite engines),
``log/`` (the Checkpointer backends), ``stores/`` (the four stores),
``testing/`` (the shipped suites themselves), and the top-level modules'
tests here.

Engines: one matrix. A test on a SQLite engine takes the :func:`engine`
fixture; a class whose every test does (a conformance suite on SQLite)
derives from :class:`OnEngine`, which takes it for each of its tests. Every
engine agentlog has is a case; one that is not built here is skipped with
the reason it is missing — or, under ``AGENTLOG_REQUIRE_EXTENSIONS=1``,
fails in setup (see :func:`require_engine`). The fixture also names its
engine in ``AGENTLOG_TEST_ENGINE``, so that a child process the test starts
(a suite's spawned racer) opens the same one (:func:`current_engine`).

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
from typing import Any

import pytest

from agentlog import FileCheckpointer, MemoryCheckpointer, SqliteCheckpointer, engine_info
from agentlog import engine as engines
from agentlog.log import BaseCheckpointer

from .postgres_server import PostgresServer, missing_reason
from .waiting import wait_until

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


#: Where the :func:`engine` fixture names its engine for child processes.
ENGINE_ENV = "AGENTLOG_TEST_ENGINE"


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each SQLite engine in turn (see require_engine for one that is not built),
    named in ``AGENTLOG_TEST_ENGINE`` for the children the test starts."""
    name = str(request.param)
    require_engine(name)
    monkeypatch.setenv(ENGINE_ENV, name)
    return name


def current_engine() -> str:
    """The engine of the running test's :func:`engine` fixture — in the test,
    or in a child process it started."""
    name = os.environ.get(ENGINE_ENV)
    if name is None:
        raise RuntimeError(f"{ENGINE_ENV} is not set: the test does not take the engine fixture")
    return name


class OnEngine:
    """A test class each of whose tests runs on each SQLite engine (it takes the
    :func:`engine` fixture before any other fixture opens a store); ``engine``
    is the test's engine, also in a child process the test started."""

    @pytest.fixture(autouse=True)
    def _on_each_engine(self, engine: str) -> None:
        return None

    @property
    def engine(self) -> str:
        """The test's SQLite engine (``"c"`` or ``"python"``)."""
        return current_engine()


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


def terminate_idle_backends(admin: Any) -> list[int]:
    """End every idle client backend of the test database but ``admin``'s own
    (a pool's connections, killed behind its back), and wait until each is
    gone: the pids ended."""
    killed = [
        row[0]
        for row in admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND application_name = '' AND state = 'idle'"
        ).fetchall()
    ]

    def gone() -> bool:
        alive = admin.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (killed,))
        return not alive.fetchall()

    # A termination is a signal: each backend, gone, has closed its socket.
    assert wait_until(gone)
    return killed


def undo_postgres_version_7(conn: Any, schema: str) -> None:
    """Take what PostgreSQL schema version 7 added out of ``schema`` (the
    activity second and its index; version 1's index on mtime back), so a
    test can make a store as an older version wrote it."""
    conn.execute(f"DROP INDEX {schema}.sessions_by_active_second")
    conn.execute(f"ALTER TABLE {schema}.sessions DROP COLUMN active")
    conn.execute(f"CREATE INDEX sessions_by_activity ON {schema}.sessions (tenant, mtime DESC)")


#: The log backends :func:`open_log` opens by name.
LOG_BACKENDS = ("memory", "sqlite-c", "sqlite-python", "files", "postgres")


def open_log(kind: str, location: Path, request: pytest.FixtureRequest) -> BaseCheckpointer:
    """A new, empty checkpointer of backend ``kind`` (one of :data:`LOG_BACKENDS`)
    at ``location``, the test's directory: skipped (or failed, when required)
    where that engine or the PostgreSQL server is missing."""
    if kind == "memory":
        return MemoryCheckpointer()
    if kind.startswith("sqlite-"):
        engine = kind.removeprefix("sqlite-")
        require_engine(engine)
        return SqliteCheckpointer(location / "a.db", engine=engine)
    if kind == "files":
        return FileCheckpointer(location / "files")
    if kind == "postgres":
        request.getfixturevalue("postgres_server")
        from agentlog import PostgresCheckpointer

        return PostgresCheckpointer(postgres_conninfo(), schema=postgres_schema(location))
    raise ValueError(f"no log backend {kind!r}")


class OnPostgres:
    """A test class that needs the PostgreSQL server (skipped or failed without one)."""

    @pytest.fixture(autouse=True)
    def _postgres_is_up(self, postgres_server: str) -> None:
        return None
