"""The async checkpointers the integrations' tests run on, opened by kind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog.aio import AsyncFileCheckpointer, AsyncMemoryCheckpointer, AsyncSqliteCheckpointer

from ..conftest import postgres_schema, require_engine


def async_log_opener(
    request: pytest.FixtureRequest, tmp_path: Path, name: str
) -> Callable[[], Any]:
    """Opens the async checkpointer of the kind ``request.param`` names
    (``sqlite-c``, ``sqlite-python``, ``file``, ``postgres``, ``memory``),
    the same storage each call; its files are called ``name``."""
    kind = str(request.param)
    if kind.startswith("sqlite-"):
        engine = kind.removeprefix("sqlite-")
        require_engine(engine)
        return lambda: AsyncSqliteCheckpointer(tmp_path / f"{name}.db", engine=engine)
    if kind == "file":
        return lambda: AsyncFileCheckpointer(tmp_path / name)
    if kind == "postgres":
        conninfo = request.getfixturevalue("postgres_server")
        from agentlog.aio import AsyncPostgresCheckpointer

        schema = postgres_schema(tmp_path)
        return lambda: AsyncPostgresCheckpointer(conninfo, schema=schema)
    assert kind == "memory", kind
    memory = AsyncMemoryCheckpointer()
    return lambda: memory
