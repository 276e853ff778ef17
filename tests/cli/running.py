"""What the command-line tests share: running ``python -m agentlog`` as a user does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..conftest import AVAILABLE, PYTHON, child_env

EVENTS = [
    {"type": "user", "content": "hi"},
    {"type": "assistant", "content": "yo"},
    {"type": "tool_result", "tool_use_id": "t", "content": "r"},
]


def agentlog_run(
    *args: str | Path,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m agentlog ARGS`` as a user would."""
    return subprocess.run(
        [PYTHON, "-m", "agentlog", *map(str, args)],
        capture_output=True,
        text=True,
        env=env or child_env(),
        timeout=timeout,
        cwd=cwd,
    )


def ok(*args: str | Path) -> str:
    """The standard output of a command that must succeed and say nothing on stderr."""
    run = agentlog_run(*args)
    assert (run.returncode, run.stderr) == (0, ""), run
    return run.stdout


def refused(run: subprocess.CompletedProcess[str], rc: int = 2) -> str:
    """The one line a refused command printed on stderr (nothing on stdout)."""
    assert run.returncode == rc, run
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert run.stdout == ""
    return lines[0]


def tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes (SQLite's empty ``-wal``
    and its ``-shm`` index, which a reader may leave, excepted)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.name.endswith(("-shm", "-wal")):
            found[str(path.relative_to(directory))] = path.read_bytes()
        elif path.name.endswith("-wal"):
            assert path.stat().st_size == 0, path
    return found


#: For a test that runs main() in this process (on the engine it imported) or
#: chooses the child's engine itself: once, on this process's default engine.
ONE_ENGINE = pytest.mark.parametrize("engine", [AVAILABLE[0]], indirect=True)
