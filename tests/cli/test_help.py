"""The command line's help, version, mistakes, JSON output and ``info``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

import agentlog
from agentlog import FileCheckpointer, SqliteCheckpointer
from agentlog.cli import main

from ..conftest import child_env
from .running import EVENTS, ONE_ENGINE, agentlog_run, ok, refused, tree

# -- help, version, mistakes ----------------------------------------------------------------

COMMANDS = ["demo", "list", "show", "tail", "fork", "truncate", "check", "info", "migrate"]


def test_help_lists_the_commands_and_nothing_internal() -> None:
    text = ok("--help")
    for name in COMMANDS:
        assert f"\n    {name} " in text
    assert "_demo" not in text
    assert "SUPPRESS" not in text
    assert "``" not in text and ":class:" not in text
    for name in COMMANDS:
        sub = ok(name, "--help")
        assert sub.startswith(f"usage: agentlog {name}")
        assert "``" not in sub and ":class:" not in sub


def test_version() -> None:
    assert ok("--version") == f"agentlog {agentlog.__version__}\n"


def test_check_help_tells_what_it_accepts(store: Path) -> None:
    assert "file store" in ok("check", "--help")
    assert ok("check", store) == "ok\n"


MISTAKES = [
    [],
    ["lst"],
    ["_demo-resume"],
    ["list"],
    ["list", "{db}", "extra"],
    ["list", "{db}", "--bogus"],
    ["list", "{db}", "--tenant", "acme", "--all-tenants"],
    ["list", "{missing}"],
    ["list", "{dir}"],
    ["list", "{text}"],
    ["list", "{empty}"],
    ["show", "{db}"],
    ["show", "{db}", "s1", "--raw", "--json"],
    ["show", "{db}", "s1", "--since", "-5"],
    ["show", "{db}", "s1", "--since", "x"],
    ["show", "{db}", "../etc"],
    ["show", "{db}", "typo"],
    ["show", "{files}", "s1", "--tenant", "acme"],
    ["tail", "{db}", "s1", "--interval", "0"],
    ["tail", "{db}", "s1", "--interval", "inf"],
    ["tail", "{db}", "typo"],
    ["fork", "{db}", "s1", "9", "s2"],
    ["fork", "{db}", "s1", "-1", "s2"],
    ["fork", "{db}", "s1", "1", "s1"],
    ["fork", "{db}", "s1", "1", "taken"],
    ["truncate", "{db}", "s1", "-1"],
    ["truncate", "{db}", "typo", "1"],
    ["truncate", "{missing}", "s1", "1"],
    ["check", "{missing}"],
    ["check", "{text}"],
    ["check", "{dir}"],
    ["info", "extra"],
    ["demo", "--db", "{dir}"],
    ["demo", "--db", "{text}"],
    ["demo", "--db", "{dir}/typo/demo.db"],
    ["demo", "--force"],
    ["migrate", "{missing}", "{db}"],
    ["migrate", "{dir}", "{db}"],
    # A typo'd tenant, where the store's sessions are in another one.
    ["list", "{db}", "--tenant", "defualt"],
    ["migrate", "{db}", "{missing}", "--tenant", "defualt"],
    ["migrate", "{db}", "{missing}", "--tenant", "defualt", "--dry-run"],
]


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
        cp.append("taken", EVENTS[:1])
    with FileCheckpointer(tmp_path / "files") as cp:
        cp.append("s1", EVENTS)
    (tmp_path / "dir").mkdir()
    (tmp_path / "notes.txt").write_text("hello\n" * 100)
    (tmp_path / "empty.db").touch()
    return {
        "db": str(db),
        "files": str(tmp_path / "files"),
        "missing": str(tmp_path / "missing.db"),
        "dir": str(tmp_path / "dir"),
        "text": str(tmp_path / "notes.txt"),
        "empty": str(tmp_path / "empty.db"),
    }


@pytest.mark.parametrize("argv", MISTAKES, ids=lambda argv: " ".join(argv) or "(nothing)")
def test_every_mistake_is_one_line_and_a_non_zero_exit(
    places: dict[str, str], argv: Sequence[str]
) -> None:
    before = tree(Path(places["db"]).parent)
    run = agentlog_run(*[part.format(**places) for part in argv], timeout=30)
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith("agentlog")
    assert run.stdout == ""
    assert tree(Path(places["db"]).parent) == before


def test_errors_speak_the_command_lines_words(places: dict[str, str]) -> None:
    line = refused(agentlog_run("show", places["db"], "s1", "--since", "-5"))
    assert "--since must be >= 0" in line and "since_seq" not in line
    line = refused(agentlog_run("truncate", places["db"], "s1", "-1"))
    assert "TO must be >= 0" in line and "to_seq" not in line
    line = refused(agentlog_run("show", places["db"], "s1", "--raw", "--json"))
    assert "--json: not allowed with argument --raw" in line
    line = refused(agentlog_run("list", places["text"]))
    assert "notes.txt" in line and "not a database" in line
    line = refused(agentlog_run("list", places["empty"]))
    assert "empty.db" in line and "not an agentlog database" in line


# -- JSON and info ----------------------------------------------------------------------------


def test_json_on_every_read_command(store: Path) -> None:
    (row,) = [json.loads(line) for line in ok("list", store, "--json").splitlines()]
    assert (row["tenant"], row["id"], row["head"]) == ("default", "s1", 3)
    assert isinstance(row["mtime"], float)
    events = [json.loads(line) for line in ok("show", store, "s1", "--json").splitlines()]
    assert [e["event"] for e in events] == EVENTS
    tailed = [json.loads(line) for line in ok("tail", store, "s1", "--json", "--once").splitlines()]
    assert tailed == events
    check = json.loads(ok("check", store, "--json"))
    assert check == {
        "store": str(store),
        "kind": "file" if store.is_dir() else "sqlite",
        "deep": False,
        "ok": True,
        "detail": "ok",
    }
    info = json.loads(ok("info", "--json"))
    assert info["engine"] in ("c", "python")
    assert {"sqlite_version", "compile_options", "available", "extension_error"} <= set(info)


def test_the_commands_run_on_each_engine(cli_engine: str) -> None:
    assert json.loads(ok("info", "--json"))["engine"] == cli_engine


def test_info_is_a_short_summary() -> None:
    lines = ok("info").splitlines()
    assert lines[0] == f"agentlog {agentlog.__version__}"
    assert lines[1].startswith("engine:  ")
    assert any(line.startswith("SQLite:  ") for line in lines)
    assert len(lines) <= 5


@ONE_ENGINE
def test_the_pools_retry_log_is_not_the_commands_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg's pool logs each failed reconnect (a server gone during tail: 25
    lines on stderr before the command's own); the command's line is enough."""
    import logging

    pool_log = logging.getLogger("psycopg.pool")
    monkeypatch.setattr(pool_log, "level", logging.NOTSET)
    assert pool_log.isEnabledFor(logging.WARNING)
    main(["info"])
    assert not pool_log.isEnabledFor(logging.ERROR)


@ONE_ENGINE
def test_info_says_why_the_c_engine_is_missing() -> None:
    run = agentlog_run("info", env={**child_env(), "AGENTLOG_NO_EXTENSIONS": "1"})
    assert run.returncode == 0, run.stderr
    assert "engine:  python" in run.stdout
    assert "the C engine is not available: disabled by AGENTLOG_NO_EXTENSIONS" in run.stdout
    assert "standard library" in run.stdout
