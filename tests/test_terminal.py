"""The command line on a real terminal (a pseudo-terminal): colour, tables,
tool calls on lines of their own and progress bars there; plain text when
piped, under NO_COLOR, or without rich; stored escapes inert either way."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
from pathlib import Path

import pytest

from agentlog import SqliteCheckpointer
from agentlog.terminal import Screen, colour_wanted, screen_for

from .cli.running import agentlog_run
from .cli.test_escapes import HOSTILE, assert_inert, hostile_sqlite
from .conftest import PYTHON, child_env

pytest.importorskip("rich", reason="the cli extra (rich) is not installed")

#: The colour codes rich writes (SGR); any other escape came from somewhere else.
SGR = re.compile(r"\x1b\[[0-9;]*m")


def on_terminal(*args: str | Path, env: dict[str, str] | None = None) -> str:
    """Run ``python -m agentlog ARGS`` with a pseudo-terminal as its stdout and stderr."""
    master, slave = pty.openpty()
    environment = {**(env or child_env()), "TERM": "xterm-256color", "COLUMNS": "120"}
    environment.pop("NO_COLOR", None)
    if env and "NO_COLOR" in env:
        environment["NO_COLOR"] = env["NO_COLOR"]
    with subprocess.Popen(
        [PYTHON, "-m", "agentlog", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=environment,
    ) as process:
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(master)
        assert process.wait(timeout=60) == 0, b"".join(chunks)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with SqliteCheckpointer(path) as log:
        log.append("s1", [{"type": "user", "content": "list the files"}])
        log.append(
            "s1",
            [
                {
                    "type": "assistant",
                    "content": [
                        {"type": "text", "text": "Looking."},
                        {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}},
                    ],
                },
                {"type": "tool_result", "tool_use_id": "t1", "content": "a.py b.py"},
                {"type": "assistant", "content": "Two files."},
            ],
        )
    return path


def test_a_terminal_gets_colour_a_table_and_tool_calls_on_their_own_lines(store: Path) -> None:
    listed = on_terminal("list", store)
    assert SGR.search(listed)
    plain = SGR.sub("", listed)
    assert plain.split("\n")[0].split() == ["session", "head", "last", "active"]
    shown = SGR.sub("", on_terminal("show", store, "s1"))
    lines = [line.strip() for line in shown.strip().split("\n")]
    assert lines == [
        "user  list the files",
        "assistant  Looking.",
        '→ ls({"path": "."})',
        "user  ← t1  a.py b.py",
        "assistant  Two files.",
    ]


def test_piped_or_no_color_output_is_plain_and_unchanged(store: Path) -> None:
    piped = agentlog_run("show", store, "s1")
    assert "\x1b" not in piped.stdout
    assert piped.stdout.split("\n")[0] == "     user: list the files"
    no_color = on_terminal("list", store, env={**child_env(), "NO_COLOR": "1"})
    assert "\x1b" not in no_color
    assert no_color.startswith("s1\t4\t")


def test_stored_escapes_stay_inert_in_colour(tmp_path: Path) -> None:
    hostile_sqlite(tmp_path / "h.db")
    for argv in (["list", tmp_path / "h.db"], ["show", tmp_path / "h.db", "s1"]):
        text = SGR.sub("", on_terminal(*argv))
        # Newlines are the output's own; everything else a terminal acts on is escaped.
        assert_inert(text.replace("\n", ""), str(argv))
        assert "owned" in text or argv[0] == "list"


def test_migrate_shows_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    sessions = tmp_path / "legacy" / "sessions"
    sessions.mkdir(parents=True)
    for n in range(3):
        document = {"version": 1, "id": f"s{n}", "messages": [{"role": "user", "content": "x"}]}
        (sessions / f"s{n}.json").write_text(json.dumps(document))
    out = SGR.sub("", on_terminal("migrate", tmp_path / "legacy", tmp_path / "t.db"))
    assert "sessions" in out and "100%" in out
    assert "migrated 3, skipped 0" in out


def test_without_rich_a_terminal_gets_the_plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert colour_wanted(Terminal())
    monkeypatch.setattr("agentlog.terminal.rich_available", lambda: False)
    stream = Terminal()
    screen = screen_for(stream)
    assert not screen.colour
    screen.table(["session", "head"], [["s1", "2"]])
    screen.transcript([{"role": "user", "content": HOSTILE}])
    assert stream.getvalue().startswith("s1\t2\n     user: \\t\\n\\x1b]0;owned")


def test_a_plain_progress_bar_counts_to_the_end() -> None:
    stream = io.StringIO()
    advance = Screen(stream, colour=False).progress(4, "sessions")
    for done in range(1, 5):
        advance(done)
    assert stream.getvalue().endswith("[" + "#" * 30 + "] 4/4 sessions\n")


def test_check_deep_shows_a_progress_bar_on_a_terminal(store: Path) -> None:
    with SqliteCheckpointer(store) as log:
        for n in range(5):
            log.append(f"more-{n}", [{"type": "user", "content": "x"}])
    out = SGR.sub("", on_terminal("check", store, "--deep"))
    assert "sessions checked" in out and "100%" in out
    assert out.rstrip().endswith("ok")
    piped = agentlog_run("check", store, "--deep")
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, "ok\n", "")
