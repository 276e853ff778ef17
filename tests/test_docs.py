"""Every code block of README.md and docs/ runs, and the documentation site builds.

The convention, for whoever writes a page:

- A ```python block is a whole program. The blocks of one page run in page
  order, each as its own process, in one temporary directory per page, so a
  later block can reopen what an earlier one stored ("resume in a new
  process"). Then the whole page runs again in the same directory: a copied
  example must survive a second run. A block that reads ``AGENTLOG_POSTGRES``
  runs against the tests' PostgreSQL server.
- A ```console block is a transcript: each ``$ `` line is run by bash in the
  page's directory, after the page's blocks above it, and what it prints must
  be the lines shown, up to numbers, digests and spacing (a session's time, a
  checksum, a column's width), in any order of stdout and stderr. A command
  that must fail ends with ``# exit N``.
- Any other block (an install or build command, a diagram, a synopsis) is not
  run, and must say so visibly: the line before it is an HTML comment
  ``<!-- not run: why -->``. Only such marked blocks are skipped, and never a
  ```python block.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import PYTHON, TESTS_DIR, child_env, extensions_required

ROOT = TESTS_DIR.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    flags=re.M | re.S,
)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.+?)\s*-->\s*\Z", flags=re.S)
RUNNABLE = ("python", "console")
#: How a transcript's command says it must fail: ``$ agentlog check x.db  # exit 1``.
EXIT = re.compile(r"\s+#\s*exit\s+(?P<status>\d+)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    lang: str
    body: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order, each with its not-run reason if marked."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip()
        marker = NOT_RUN.search(before)
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                lang=match["lang"],
                body=match["body"],
                not_run=marker["reason"] if marker else None,
            )
        )
    return found


BLOCKS = {page: blocks_of(page) for page in PAGES}
ALL = [block for blocks in BLOCKS.values() for block in blocks]
RUN_PAGES = [page for page, blocks in BLOCKS.items() if any(b.not_run is None for b in blocks)]


def test_every_block_runs_or_says_why_not() -> None:
    unmarked = [b.name for b in ALL if b.lang not in RUNNABLE and b.not_run is None]
    assert unmarked == [], "a block that is not run needs <!-- not run: why --> before it"
    python_marked = [b.name for b in ALL if b.lang == "python" and b.not_run is not None]
    assert python_marked == [], "a python block always runs"
    console_marked = [b.name for b in ALL if b.lang == "console" and b.not_run is not None]
    assert console_marked == [], "a transcript always runs"


def test_the_pages_have_programs() -> None:
    readme = [b for b in BLOCKS[ROOT / "README.md"] if b.lang == "python"]
    assert len(readme) >= 3
    assert len([b for b in ALL if b.lang == "python"]) >= 20
    assert any("AGENTLOG_POSTGRES" in b.body for b in ALL)
    assert any(b.lang == "console" for b in ALL)


def test_the_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip("no .ci/run beside these tests")
    assert "bash scripts/test" in ci.read_text()
    assert "bash scripts/test" in readme


def test_the_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?://|#|mailto:)([^)#\s]+)", readme)
    assert targets, "the README links into the manual"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []


def normalize(line: str) -> str:
    """A transcript line up to what changes from run to run: numbers, digests,
    spacing, and the engine (a transcript shows the C one)."""
    line = re.sub(r"\b(?=[0-9a-f]*[0-9])[0-9a-f]{8,}\b", "H", line)
    line = re.sub(r"\bengine (c|python)\b", "engine E", line)
    line = re.sub(r"\d[\d,.]*", "0", line)
    return " ".join(line.split())


def run_transcript(block: Block, cwd: Path, env: dict[str, str]) -> None:
    """Run each ``$`` command of a console block and compare what it prints."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"{block.name}: output before any command"
            commands[-1][1].append(line)
    for command, expected in commands:
        wanted = EXIT.search(command)
        status = int(wanted["status"]) if wanted else 0
        run = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        where = f"{block.name}: $ {command}"
        assert run.returncode == status, f"{where}\n{run.stdout}"
        got = sorted(normalize(line) for line in run.stdout.splitlines())
        assert got == sorted(normalize(line) for line in expected), f"{where}\n{run.stdout}"


def run_page(page: Path, cwd: Path, env: dict[str, str]) -> None:
    """Run the page's blocks in order: programs as processes, transcripts by bash."""
    for number, block in enumerate(BLOCKS[page]):
        if block.not_run is not None:
            continue
        if block.lang == "python":
            program = cwd / f"block_{number}.py"
            program.write_text(block.body)
            run = subprocess.run(
                [PYTHON, program.name], cwd=cwd, capture_output=True, text=True, env=env
            )
            assert run.returncode == 0, f"{block.name}:\n{run.stderr}"
        else:
            run_transcript(block, cwd, env)


#: The extras a page's programs may need: what they import, and the module it takes.
EXTRAS = {
    "agentlog.integrations.openai_agents": ("agents", "openai-agents"),
    "agentlog.integrations.langgraph": ("langgraph", "langgraph"),
    "agentlog.integrations.google_adk": ("google.adk", "google-adk"),
    "agentlog.integrations.pydantic_ai": ("pydantic_ai", "pydantic-ai"),
    "DatabaseSessionService": ("aiosqlite", "test"),
}


def require_extras(page: Path) -> None:
    """Skip a page whose programs need an extra that is not installed, saying
    which (as the integration tests do), or fail under AGENTLOG_REQUIRE_EXTENSIONS."""
    text = "".join(block.body for block in BLOCKS[page])
    for trigger, (module, extra) in EXTRAS.items():
        if trigger in text and importlib.util.find_spec(module) is None:
            reason = f"{module} is not installed (pip install 'agentlog[{extra}]')"
            if extensions_required():
                pytest.fail(f"{reason}; AGENTLOG_REQUIRE_EXTENSIONS is set", pytrace=False)
            pytest.skip(reason)


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_page_runs_twice(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Every block of a page runs, twice, in a fresh directory. The README and
    the migration and CLI pages take 10-20 s: their transcripts start
    ``agentlog`` (and the frameworks) in a process per command, as a reader
    would type them."""
    require_extras(page)
    env = child_env()
    # A transcript's `agentlog` is this interpreter's: the installed one.
    env["PATH"] = os.pathsep.join([str(Path(PYTHON).parent), env.get("PATH", "")])
    if any("AGENTLOG_POSTGRES" in block.body for block in BLOCKS[page]):
        env["AGENTLOG_POSTGRES"] = request.getfixturevalue("postgres_server")
    for attempt in ("first", "second"):
        try:
            run_page(page, tmp_path, env)
        except AssertionError as error:
            raise AssertionError(f"{attempt} run: {error}") from None


def docs_required() -> bool:
    """Whether ``AGENTLOG_REQUIRE_DOCS`` is set (``scripts/test`` sets it)."""
    return os.environ.get("AGENTLOG_REQUIRE_DOCS", "") not in ("", "0")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    missing = [m for m in ("mkdocs", "material", "mkdocstrings") if not importlib.util.find_spec(m)]
    if missing:
        reason = f"{', '.join(missing)} not installed (pip install 'agentlog[docs]')"
        if docs_required():
            pytest.fail(f"{reason} (AGENTLOG_REQUIRE_DOCS is set)", pytrace=False)
        pytest.skip(reason)
    config, site = str(ROOT / "mkdocs.yml"), str(tmp_path / "site")
    # From elsewhere than the checkout: mkdocs.yml finds the sources beside itself.
    run = subprocess.run(
        [PYTHON, "-m", "mkdocs", "build", "--strict", "--config-file", config, "--site-dir", site],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**child_env(), "NO_MKDOCS_2_WARNING": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "site" / "reference" / "agentlog" / "index.html").is_file()
