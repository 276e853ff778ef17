"""docs/cli.md and the command's own --help texts agree.

Every command ``agentlog --help`` lists has a section on the page, and every
section is a command; in each, the arguments and options the page documents
are exactly those ``agentlog COMMAND --help`` shows. An option added to the
parser without a line on the page (or documented but gone) fails here.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from agentlog.cli import main

from .conftest import TESTS_DIR

ROOT = TESTS_DIR.parent
PAGE = (ROOT / "docs" / "cli.md").read_text()

#: ``### `agentlog COMMAND` `` starts a command's section; ``### `agentlog` `` the global one.
_SECTION = re.compile(r"^### `agentlog(?: (\w+))?`\n(.*?)(?=^##|\Z)", re.M | re.S)
#: A table row documenting an argument or option: its first cell starts with one.
_ROW = re.compile(r"^\| `(-{1,2}[\w-]+|[A-Z][A-Z_]*)[ `]", re.M)
_OPTION = re.compile(r"(?<![\w-])(-{1,2}[a-zA-Z][\w-]*)")


def documented() -> dict[str, set[str]]:
    """``{command: the names its section's tables document}`` ("" is ``agentlog`` itself)."""
    return {name or "": set(_ROW.findall(body)) for name, body in _SECTION.findall(PAGE)}


def help_text(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code in (0, None), out.getvalue()
    return out.getvalue()


def names_in(text: str) -> set[str]:
    """The options (from the usage lines) and positional arguments of a --help text."""
    # The usage lines, without the program's name (bench's is "python -m benchmarks").
    usage = re.sub(r"^usage: (python -m \S+|agentlog(?: \w+)?)", "", text.split("\n\n", 1)[0])
    # argparse's usage shows its help option by the short name only.
    names = {"--help" if name == "-h" else name for name in _OPTION.findall(usage)}
    positional = re.search(r"^positional arguments:\n(.*?)(?:\n\n|\Z)", text, re.M | re.S)
    if positional:
        names |= set(re.findall(r"^  ([A-Z][A-Z_]*)\b", positional[1], re.M))
    return names


def commands() -> list[str]:
    listed = help_text().split("\ncommands:\n", 1)[1]
    return re.findall(r"^    (\w+)  ", listed, re.M)


def test_the_page_has_a_section_for_every_command_and_no_other() -> None:
    assert commands(), "agentlog --help lists no commands"
    assert sorted(set(documented()) - {""}) == sorted(commands())


def test_the_global_options_are_documented() -> None:
    assert documented()[""] == names_in(help_text())


@pytest.mark.parametrize("command", commands())
def test_a_command_s_options_are_those_its_help_shows(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench shows the checkout's benchmark options only from the checkout's top.
    monkeypatch.chdir(ROOT)
    shown = names_in(help_text(command)) - {"--help"}
    assert shown, f"agentlog {command} --help: no usage line found"
    page = documented()[command]
    assert sorted(shown - page) == [], f"in --help but not on docs/cli.md: {command}"
    assert sorted(page - shown) == [], f"on docs/cli.md but not in --help: {command}"


def test_the_synopsis_names_every_command() -> None:
    synopsis = PAGE.split("```\n", 2)[1]
    assert sorted(set(re.findall(r"^agentlog (\w+)", synopsis, re.M))) == sorted(commands())


def test_a_new_option_without_docs_would_fail() -> None:
    """The check itself: an option the page lacks is found."""
    text = help_text("list").replace("[--json]", "[--json] [--brand-new]")
    assert "--brand-new" in names_in(text) - documented()["list"]


def test_every_example_command_exists() -> None:
    run = re.findall(r"^\$ agentlog (\w+)", PAGE, re.M)
    assert run
    assert set(run) <= set(commands())
