"""What an installed wheel holds: the package with its stub and typed marker and the
compiled engine, and none of the C engine's sources (those ship in the sdist only).

The compiled engine is read with binutils' ``readelf`` (any architecture's ELF): it
exports ``PyInit_cengine`` alone (SQLite is compiled in, private). When
``AGENTLOG_TEST_WHEEL`` names the wheel this environment was installed from
(``scripts/test``, ``scripts/build_wheels``), that wheel is held to its policy too:
its tag is ``manylinux_2_17`` or ``musllinux_1_2`` and installs here, the engine
installed is the wheel's, it needs the C library alone, with no run path, and asks
for no glibc symbol newer than 2.17.

The suite runs against the installed wheel (scripts/test, cibuildwheel); from a source
checkout or an editable install, ``agentlog`` is ``src/agentlog`` and these are skipped.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import agentlog
from agentlog.engine import AVAILABLE_ENGINES

from .conftest import extensions_disabled

PACKAGE = Path(agentlog.__file__).resolve().parent
SOURCES = (".pyx", ".pxi", ".pxd", ".c", ".h")
#: The wheel this environment was installed from, when the test command says so.
WHEEL = os.environ.get("AGENTLOG_TEST_WHEEL", "")
#: The shared libraries a manylinux (glibc) or musllinux wheel's engine may need.
C_LIBRARIES = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "libc.musl-x86_64.so.1"}

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


def compiled_engines() -> list[Path]:
    return [
        PACKAGE / "engine" / f"cengine{suffix}"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (PACKAGE / "engine" / f"cengine{suffix}").is_file()
    ]


def test_the_compiled_engine_is_installed() -> None:
    compiled = compiled_engines()
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


def readelf(*options: str) -> str:
    """``readelf`` on the installed engine (skipped where there is none to read,
    failed where the test command named the wheel and readelf is missing)."""
    compiled = compiled_engines()
    if not sys.platform.startswith("linux") or not compiled:
        pytest.skip("no ELF engine is installed here")
    tool = shutil.which("readelf")
    if tool is None:
        if WHEEL:
            pytest.fail("readelf (binutils) is needed to check the wheel's engine")
        pytest.skip("readelf (binutils) is not installed")
    return subprocess.run(
        [tool, "--wide", *options, str(compiled[0])], capture_output=True, text=True, check=True
    ).stdout


def named_wheel() -> Path:
    """The wheel the test command installed here (skipped when it names none)."""
    if not WHEEL:
        pytest.skip("AGENTLOG_TEST_WHEEL names no wheel")
    return Path(WHEEL)


def test_the_engine_exports_its_init_function_alone() -> None:
    exported = set()
    for line in readelf("--dyn-syms").splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[4] in ("GLOBAL", "WEAK") and fields[6] != "UND":
            exported.add(fields[7].split("@")[0])
    assert not [name for name in exported if name.startswith("sqlite3")]
    assert exported == {"PyInit_cengine"}


def test_the_wheel_is_tagged_for_its_policy_and_installs_here() -> None:
    from packaging.tags import parse_tag, sys_tags

    with zipfile.ZipFile(named_wheel()) as wheel:
        (info,) = {
            name.split("/")[0] for name in wheel.namelist() if name.endswith(".dist-info/WHEEL")
        }
        lines = wheel.read(f"{info}/WHEEL").decode().splitlines()
        tags = {tag for line in lines if line.startswith("Tag: ") for tag in parse_tag(line[5:])}
        (member,) = [
            n
            for n in wheel.namelist()
            if n.startswith("agentlog/engine/cengine") and n.endswith(".so")
        ]
        shipped = wheel.read(member)
    platforms = {tag.platform for tag in tags}
    assert platforms and all(
        re.match(r"(manylinux_2_17|manylinux2014|musllinux_1_2)_", p) for p in platforms
    )
    assert tags & set(sys_tags()), (tags, "none installs on this interpreter")
    (installed,) = compiled_engines()
    assert installed.read_bytes() == shipped  # the suite tests this wheel's engine


def test_the_wheels_engine_needs_the_c_library_alone() -> None:
    named_wheel()
    dynamic = readelf("--dynamic")
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
    assert needed and needed <= C_LIBRARIES, needed
    assert "(RPATH)" not in dynamic and "(RUNPATH)" not in dynamic


def test_the_wheels_engine_asks_for_no_glibc_newer_than_2_17() -> None:
    named_wheel()
    versions = re.findall(r"Name: GLIBC_([0-9.]+)", readelf("--version-info"))
    newest = max((tuple(int(part) for part in v.split(".")) for v in versions), default=())
    assert newest <= (2, 17), newest
