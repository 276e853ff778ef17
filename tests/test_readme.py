"""The README stays a front door: short, with the manual holding the rest."""

from __future__ import annotations

from .conftest import TESTS_DIR

README = TESTS_DIR.parent / "README.md"
#: The README's budget: past it, move the detail to its page under docs/.
MAX_LINES = 300


def test_the_readme_fits_its_budget() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {MAX_LINES}: move detail to docs/"
    )


def test_the_readme_keeps_the_newcomer_s_two_commands_and_links_the_manual() -> None:
    text = README.read_text(encoding="utf-8")
    assert "agentlog demo" in text  # install and run on embedded SQLite
    assert "bash scripts/test" in text  # the test command
    assert "(docs/index.md)" in text
