"""Type stub of the compiled C twin (``cengine.pyx``)."""

from typing import Any, ClassVar

from .base import EngineBase

class CConnection:
    def rows(self, sql: str, params: Any = ...) -> list[tuple[Any, ...]]: ...
    def begin_write(self, wait: bool) -> bool: ...
    def in_transaction(self) -> bool: ...
    def close(self) -> None: ...

class CEngine(EngineBase[CConnection]):
    name: ClassVar[str]
    commits: int
    """Write transactions that appends used (group commit), for tests and tuning."""
    @staticmethod
    def sqlite_info() -> dict[str, Any]: ...
