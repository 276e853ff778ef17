"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .conftest import PYTHON, TESTS_DIR, child_env

README = (TESTS_DIR.parent / "README.md").read_text()
PROGRAMS = [
    block
    for block in re.findall(r"```python\n(.*?)```", README, flags=re.S)
    # A block that imports agentlog is a whole program; the others are fragments.
    if re.search(r"^from agentlog import", block, flags=re.M)
]
#: The programs that need a PostgreSQL server (they read its address from
#: AGENTLOG_POSTGRES); they run against the tests' server.
POSTGRES_EXAMPLES = [block for block in PROGRAMS if "AGENTLOG_POSTGRES" in block]
EXAMPLES = [block for block in PROGRAMS if block not in POSTGRES_EXAMPLES]


def test_the_readme_has_runnable_examples() -> None:
    assert len(EXAMPLES) >= 4


def run_twice(example: str, cwd: Path, env: dict[str, str]) -> None:
    """Run ``example`` as a newcomer does: once, then again in the same place
    (a copied example is run more than once; the second run must not fail on
    what the first one stored)."""
    for attempt in ("first", "second"):
        run = subprocess.run(
            [PYTHON, "-c", example], cwd=cwd, capture_output=True, text=True, env=env
        )
        assert run.returncode == 0, f"{attempt} run: {run.stderr}"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda block: block.splitlines()[0][:60])
def test_readme_example_runs(example: str, tmp_path: Path) -> None:
    run_twice(example, tmp_path, child_env())


def test_the_readme_shows_postgres() -> None:
    assert len(POSTGRES_EXAMPLES) >= 1


@pytest.mark.parametrize("example", POSTGRES_EXAMPLES, ids=lambda block: block.splitlines()[0][:60])
def test_readme_postgres_example_runs(example: str, tmp_path: Path, postgres_server: str) -> None:
    env = child_env()
    env["AGENTLOG_POSTGRES"] = postgres_server
    run_twice(example, tmp_path, env)
