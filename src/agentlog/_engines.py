"""The one place that decides which SQLite engine runs.

``AGENTLOG_NO_EXTENSIONS=1`` forces the pure engine; otherwise the compiled
``agentlog._engine`` is used when it imports, and the pure
``agentlog._engine_py`` when it does not (not built, or not CPython).
"""

from __future__ import annotations

import os
import platform
from typing import Any

from ._engine_py import PyEngine

__all__ = ["AVAILABLE_ENGINES", "DEFAULT_ENGINE", "engine_class", "engine_info"]

#: Engine classes by name, the default first.
AVAILABLE_ENGINES: dict[str, Any] = {}
_extension_error: str | None = "disabled by AGENTLOG_NO_EXTENSIONS"

if not os.environ.get("AGENTLOG_NO_EXTENSIONS") and platform.python_implementation() == "CPython":
    try:
        from ._engine import CEngine  # type: ignore[import-not-found]
    except ImportError as exc:
        _extension_error = f"{type(exc).__name__}: {exc}"
    else:
        AVAILABLE_ENGINES["c"] = CEngine
        _extension_error = None
AVAILABLE_ENGINES["python"] = PyEngine

#: The name of the engine a SqliteCheckpointer uses unless told otherwise.
DEFAULT_ENGINE: str = next(iter(AVAILABLE_ENGINES))


def engine_class(name: str | None = None) -> Any:
    """The engine class called ``name`` (``"c"`` or ``"python"``), or the default."""
    if name is None:
        return AVAILABLE_ENGINES[DEFAULT_ENGINE]
    try:
        return AVAILABLE_ENGINES[name]
    except KeyError:
        if name == "c":
            raise ImportError(f"the C engine is not available ({_extension_error})") from None
        raise ValueError(f"unknown engine {name!r}; expected 'c' or 'python'") from None


def engine_info() -> dict[str, Any]:
    """Which engine runs, with the SQLite version and compile options it uses.

    ``{"engine": "c" | "python", "sqlite_version": …, "sqlite_source_id": …,
    "compile_options": [...], "available": [...], "extension_error": None | str}``
    ``extension_error`` says why the C engine is not available, when it is not.
    """
    engine = engine_class()
    return {
        "engine": engine.name,
        **engine.sqlite_info(),
        "available": list(AVAILABLE_ENGINES),
        "extension_error": _extension_error,
    }
