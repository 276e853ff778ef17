"""Every built-in backend runs the shipped conformance suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from agentlog import (
    Checkpointer,
    FileCheckpointer,
    MemoryCheckpointer,
    SqliteCheckpointer,
    legacy_store_adapter,
)
from agentlog.testing import CheckpointerConformance, checkpointer_conformance

from .conftest import ENGINES


class TestMemoryCheckpointer(CheckpointerConformance):
    durable = False

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return MemoryCheckpointer()


class TestFileCheckpointer(CheckpointerConformance):
    def open_checkpointer(self, location: Path) -> Checkpointer:
        return FileCheckpointer(location / "sessions")


class TestFileCheckpointerFsync(CheckpointerConformance):
    race_rounds = 20

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return FileCheckpointer(location / "sessions", fsync=True)


class SqliteConformance(CheckpointerConformance):
    engine: ClassVar[str]
    multiprocess = True

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return SqliteCheckpointer(location / "agentlog.db", engine=self.engine)


class SqliteInMemoryConformance(CheckpointerConformance):
    engine: ClassVar[str]
    durable = False

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return SqliteCheckpointer(":memory:", engine=self.engine)


# One class per engine, bound to a module-level name so that the two-process
# tests' children (started with spawn) can import it.
for _engine in ENGINES:
    for _base, _name in [
        (SqliteConformance, f"TestSqliteCheckpointer_{_engine}"),
        (SqliteInMemoryConformance, f"TestSqliteInMemory_{_engine}"),
    ]:
        globals()[_name] = type(_name, (_base,), {"engine": _engine, "__qualname__": _name})


def open_sqlite_full(location: Path) -> Checkpointer:
    return SqliteCheckpointer(location / "full.db", synchronous="full")


# The function form of the suite, as a third party would use it (default engine).
TestSqliteSynchronousFull = checkpointer_conformance(
    open_sqlite_full, multiprocess=True, name="TestSqliteSynchronousFull"
)


class DictLegacyStore:
    """A legacy whole-array store kept in a dict per location, like a JSON file."""

    stores: ClassVar[dict[str, dict[str, list[Any]]]] = {}

    def __init__(self, location: Path) -> None:
        self.data = self.stores.setdefault(str(location), {})

    def load(self, session_id: str) -> list[Any] | None:
        items = self.data.get(session_id)
        return None if items is None else list(items)

    def save(self, session_id: str, messages: list[Any]) -> None:
        self.data[session_id] = list(messages)

    def list(self) -> list[str]:
        return list(self.data)

    def delete(self, session_id: str) -> None:
        self.data.pop(session_id, None)


class TestLegacyStoreAdapter(CheckpointerConformance):
    persistent_mtime = False

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return legacy_store_adapter(DictLegacyStore(location))
