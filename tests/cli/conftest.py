"""The command-line tests' fixtures: each engine for the commands, each kind of store."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlog import FileCheckpointer, SqliteCheckpointer

from .running import EVENTS


@pytest.fixture(autouse=True)
def cli_engine(engine: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each SQLite engine in turn for the commands (the engine fixture): a child
    started with :func:`child_env` (this process's environment) gets the pure
    one from ``AGENTLOG_NO_EXTENSIONS=1``."""
    if engine == "python":
        monkeypatch.setenv("AGENTLOG_NO_EXTENSIONS", "1")
    return engine


@pytest.fixture(params=["sqlite", "file"])
def kind(request: pytest.FixtureRequest) -> str:
    """Each kind of store: a SQLite file, a file store."""
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path, cli_engine: str) -> Path:
    location = tmp_path / ("s.db" if kind == "sqlite" else "sessions")
    if kind == "sqlite":
        cp: SqliteCheckpointer | FileCheckpointer = SqliteCheckpointer(location, engine=cli_engine)
    else:
        cp = FileCheckpointer(location)
    with cp:
        cp.append("s1", EVENTS[:2])
        cp.append("s1", EVENTS[2:])
    return location
