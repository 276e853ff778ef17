"""What an installed wheel holds: the package with its stub and typed marker and the
compiled engine, and none of the C engine's sources (those ship in the sdist only).

The suite runs against the installed wheel (scripts/test, cibuildwheel); from a source
checkout or an editable install, ``agentlog`` is ``src/agentlog`` and these are skipped.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
from pathlib import Path

import pytest

import agentlog
from agentlog.engine import AVAILABLE_ENGINES

from .conftest import extensions_disabled

PACKAGE = Path(agentlog.__file__).resolve().parent
SOURCES = (".pyx", ".pxi", ".pxd", ".c", ".h")

pytestmark = pytest.mark.skipif(
    PACKAGE.parent.name == "src" and (PACKAGE.parent.parent / "pyproject.toml").exists(),
    reason="agentlog is imported from a source checkout, not an installed wheel",
)


def test_no_c_or_cython_sources_are_installed() -> None:
    installed = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*") if path.suffix in SOURCES
    )
    assert installed == []
    recorded = [str(path) for path in importlib.metadata.files("agentlog") or []]
    assert [path for path in recorded if path.endswith(SOURCES)] == []


def test_the_stub_and_the_typed_marker_are_installed() -> None:
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "engine" / "cengine.pyi").is_file()


def test_the_compiled_engine_is_installed() -> None:
    compiled = [
        PACKAGE / "engine" / f"cengine{suffix}"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (PACKAGE / "engine" / f"cengine{suffix}").is_file()
    ]
    required = any(
        os.environ.get(name, "") not in ("", "0")
        for name in ("AGENTLOG_REQUIRE_EXTENSIONS", "CIBUILDWHEEL")
    )
    if not compiled and not required:
        pytest.skip("this install has the pure-Python engine only")
    assert len(compiled) == 1, compiled
    if extensions_disabled():  # installed, and turned off (the pure pass of scripts/test)
        assert "c" not in AVAILABLE_ENGINES
    else:
        assert "c" in AVAILABLE_ENGINES


def test_the_license_is_an_spdx_expression_and_its_text_is_installed() -> None:
    metadata = importlib.metadata.metadata("agentlog")
    assert metadata["License-Expression"] == "MIT"
    recorded = [str(path) for path in importlib.metadata.files("agentlog") or []]
    assert any(path.endswith("LICENSE") for path in recorded), recorded


def test_the_viewer_pages_and_scripts_are_installed() -> None:
    static = PACKAGE / "serve" / "static"
    shipped = sorted(path.name for path in static.iterdir())
    for page in ("sessions", "session", "health", "stores"):
        assert f"{page}.js" in shipped, shipped
    assert {"page.html", "common.js", "app.css"} <= set(shipped), shipped
