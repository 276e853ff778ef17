"""What an install says and does when it cannot build the C engine, as pip
runs it at its default verbosity: it says so on the installer's terminal,
installs the pure-Python engine, and fetches nothing for the C one."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not (ROOT / "setup.py").exists(), reason="needs the checkout's setup.py"
)

#: Stands in for scripts/fetch_sqlite.py in the copy: any fetch is recorded.
FETCH_STUB = """
from pathlib import Path

def is_verified(directory):
    return False

def fetch(dest, source="pypi"):
    Path(__file__).with_name("FETCHED").write_text("fetch was called")
    raise RuntimeError("the test's stand-in refuses to fetch")
"""


def checkout_without_sqlite(tmp_path: Path) -> Path:
    """A copy of the checkout's sources without the SQLite amalgamation, whose
    fetcher records any call."""
    copy = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("*.so", "*.c", "__pycache__", "sqlite3.*")
    shutil.copytree(ROOT / "src", copy / "src", ignore=ignore)
    shutil.copytree(ROOT / "csrc", copy / "csrc", ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, copy / name)
    (copy / "scripts").mkdir()
    (copy / "scripts" / "fetch_sqlite.py").write_text(FETCH_STUB)
    return copy


def pip_wheel_on_a_terminal(copy: Path, **env: str) -> tuple[int, str, str]:
    """``pip wheel`` as a user runs it from a terminal: (the exit status,
    pip's own output, what reached the terminal)."""
    script = (
        "import os, subprocess, sys\n"
        "os.setsid()\n"  # a session whose controlling terminal is the pty below
        "os.close(os.open(os.ttyname(0), os.O_RDWR))\n"
        "run = subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps',"
        " '--wheel-dir', 'dist', '.'], stdin=subprocess.DEVNULL, capture_output=True, text=True)\n"
        "open('pip-output.txt', 'w').write(run.stdout + run.stderr)\n"
        "sys.exit(run.returncode)\n"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    environment.update(env)
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=copy,
        env=environment,
        stdin=slave,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    status = process.wait(timeout=600)
    output = (copy / "pip-output.txt").read_text()
    return status, output, seen.decode(errors="replace")


def test_without_a_compiler_pip_says_so_and_nothing_is_fetched(tmp_path: Path) -> None:
    copy = checkout_without_sqlite(tmp_path)
    status, output, terminal = pip_wheel_on_a_terminal(copy, CC="/nonexistent/cc")
    assert status == 0, output
    notice = "no C compiler (/nonexistent/cc) was found; installing the pure-Python engine"
    assert notice in terminal  # seen at pip's default verbosity
    assert notice not in output  # pip itself kept the build's output to itself
    assert not (copy / "scripts" / "FETCHED").exists()
    (wheel,) = (copy / "dist").glob("agentlog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "agentlog/engine/pure.py" in names
    assert not [n for n in names if n.startswith("agentlog/engine/cengine") and n.endswith(".so")]


def test_a_required_c_engine_without_a_compiler_fails_the_install(tmp_path: Path) -> None:
    copy = checkout_without_sqlite(tmp_path)
    status, output, _ = pip_wheel_on_a_terminal(
        copy, CC="/nonexistent/cc", AGENTLOG_REQUIRE_EXTENSIONS="1"
    )
    assert status != 0
    assert "the C engine cannot be built: no C compiler" in output
    assert not (copy / "scripts" / "FETCHED").exists()
