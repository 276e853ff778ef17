"""The one place that decides which SQLite engine runs.

``AGENTLOG_NO_EXTENSIONS=1`` forces the pure engine; otherwise the compiled
``agentlog._engine`` is used when it imports, and the pure
``agentlog._engine_py`` when it does not (not built, or not CPython).
"""

from __future__ import annotations

import os
import platform
from typing import Any

from ._engine_py import PyEngine, sqlite_info

__all__ = ["Engine", "engine_info"]

Engine: Any = PyEngine
_import_error: str | None = "disabled by AGENTLOG_NO_EXTENSIONS"

if not os.environ.get("AGENTLOG_NO_EXTENSIONS") and platform.python_implementation() == "CPython":
    try:
        from ._engine import CEngine as Engine  # type: ignore[import-not-found, no-redef]
    except ImportError as exc:
        _import_error = str(exc)
    else:
        _import_error = None


def engine_info() -> dict[str, Any]:
    """Which engine runs, with the SQLite version and compile options it uses.

    ``{"engine": "c" | "python", "sqlite_version": …, "sqlite_source_id": …,
    "compile_options": [...], "extension_error": None | str}``
    """
    info: dict[str, Any] = {"engine": Engine.name}
    info.update(Engine.sqlite_info() if hasattr(Engine, "sqlite_info") else sqlite_info())
    info["extension_error"] = _import_error
    return info
