"""scripts/check_commits.py: the commit convention of CONTRIBUTING.md can be checked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import PYTHON, TESTS_DIR

SCRIPT = TESTS_DIR.parent / "scripts" / "check_commits.py"
GOOD = "docs: add the compatibility page\n\nUsers ask which files a release reads.\n"


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    run = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return run.stdout.strip()


def commit(repo: Path, message: str) -> None:
    file = repo.parent / "message"
    file.write_text(message)
    git(repo, "commit", "--allow-empty", "--cleanup=verbatim", "-q", "-F", str(file))


def check(repo: Path, revisions: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, str(SCRIPT), "-C", str(repo), revisions], capture_output=True, text=True
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, "Initial commit that predates the convention")
    git(path, "branch", "base")
    return path


def test_commits_that_keep_the_convention_pass(repo: Path) -> None:
    commit(repo, GOOD)
    commit(repo, "engine/sqlite, cli: refuse a newer file before writing\n\nWhy.\n")
    commit(repo, "x" * 69 + ": y\n\nA subject of exactly 72 characters.\n")
    run = check(repo, "base..")
    assert run.returncode == 0, run.stdout
    assert run.stdout == ""
    assert "3 commit(s) checked, 0 problem(s)" in run.stderr


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("Docs: add a page\n\nWhy.\n", "not 'area: imperative subject'"),
        ("add a page\n\nWhy.\n", "not 'area: imperative subject'"),
        ("docs:add a page\n\nWhy.\n", "not 'area: imperative subject'"),
        ("docs: \n\nWhy.\n", "not 'area: imperative subject'"),
        ("docs(cli): add a page\n\nWhy.\n", "not 'area: imperative subject'"),
        ("docs: " + "a" * 67 + "\n\nWhy.\n", "73 characters, more than 72"),
        ("docs: add a page\nWhy, on the next line.\n", "no blank line after the subject"),
        ("docs: add a page\n", "no body saying why"),
        ("docs: add a page\n\n\n", "no body saying why"),
    ],
)
def test_a_commit_that_breaks_it_fails(repo: Path, message: str, problem: str) -> None:
    commit(repo, GOOD)
    commit(repo, message)
    bad = git(repo, "rev-parse", "HEAD")
    run = check(repo, "base..")
    assert run.returncode == 1
    assert run.stdout.startswith(f"{bad[:12]}: ")
    assert problem in run.stdout
    assert len(run.stdout.splitlines()) == 1  # the good commit is not reported
    # Only the range is checked: the commit before the convention is outside it.
    assert check(repo, "base..HEAD~1").returncode == 0


def test_merge_commits_are_left_out(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, GOOD)
    git(repo, "checkout", "-q", "main")
    commit(repo, "cli: list the tenants\n\nWhy.\n")
    git(repo, "merge", "-q", "--no-ff", "--no-edit", "side")
    run = check(repo, "base..")
    assert run.returncode == 0, run.stdout
    assert "2 commit(s) checked" in run.stderr


def test_a_bad_revision_is_an_error(repo: Path) -> None:
    run = check(repo, "nosuchbranch..")
    assert run.returncode == 2
    assert "git log failed" in run.stderr
