"""No command writes a terminal escape a store holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlog import FileCheckpointer, SqliteCheckpointer
from agentlog.log.file import session_file_name

from .running import EVENTS, agentlog_run, ok, refused

# -- terminal escapes ----------------------------------------------------------------

#: What a terminal acts on: C0 controls (ESC, BEL, CR, …), DEL, C1 controls
#: (CSI, OSC as one code point) and the bidirectional overrides. Newline and
#: tab are the output's own line and column separators.
HOSTILE = "\t\n\x1b]0;owned\x07\x1b[2J\rfake line\x7f\x9b31m\x9d0;t\x9c\u202etxt.exe\u2066\u2028"
UNSAFE = set(
    [chr(c) for c in range(0x20) if c not in (0x09, 0x0A)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u061c", "\u200e", "\u200f", "\u2028", "\u2029"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)


def assert_inert(text: str, label: str = "") -> None:
    found = sorted({f"U+{ord(ch):04X}" for ch in text if ch in UNSAFE})
    assert not found, (label, found, text)


def hostile_sqlite(location: Path) -> None:
    """A database whose events carry escapes, and whose session and tenant ids —
    written behind agentlog's back — do too."""
    with SqliteCheckpointer(location) as cp:
        cp.append("s1", [{"type": "user", "content": HOSTILE}])
        cp.append("s1", [{"type": "tool_result", "tool_use_id": "t", "content": HOSTILE}])
        cp.append("s1", [{"type": "assistant", "content": "ok", HOSTILE: HOSTILE}])
        cp.append("crafted", EVENTS)
    import sqlite3

    with sqlite3.connect(location) as db:
        db.execute("UPDATE sessions SET name = ? WHERE name = 'crafted'", ("id" + HOSTILE,))
    db.close()


def hostile_file_store(location: Path) -> None:
    with FileCheckpointer(location) as cp:
        cp.append("s1", [{"type": "user", "content": HOSTILE}])
        cp.append("s1", [{"type": "tool_result", "tool_use_id": "t", "content": HOSTILE}])
        cp.append("s1", [{"type": "assistant", "content": "ok", HOSTILE: HOSTILE}])
    crafted = "id" + HOSTILE
    header = json.dumps({"agentlog": 1, "session": crafted, "created": 1.0})
    line = json.dumps({"seq": 1, "end": 1, "ts": 1.0, "event": EVENTS[0]})
    (location / session_file_name(crafted)).write_text(header + "\n" + line + "\n")


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_output_never_carries_terminal_escapes(tmp_path: Path, kind: str) -> None:
    location = tmp_path / ("s.db" if kind == "sqlite" else "sessions")
    (hostile_sqlite if kind == "sqlite" else hostile_file_store)(location)
    outputs = {
        "list": ok("list", location),
        "show": ok("show", location, "s1"),
        "show --raw": ok("show", location, "s1", "--raw"),
        "tail --once": ok("tail", location, "s1", "--once"),
    }
    if kind == "sqlite":
        outputs["list --all-tenants"] = ok("list", location, "--all-tenants")
    for command, out in outputs.items():
        assert_inert(out, command)
    assert r"\x1b]0;owned\x07" in outputs["show"]
    assert "\\u202e" in outputs["show --raw"]
    # The crafted id is listed, visibly escaped, on a line of its own.
    assert sum(r"id\t\n\x1b]0;owned" in row for row in outputs["list"].splitlines()) == 1
    assert len(outputs["show"].splitlines()) == 3  # one line per message
    # JSON stays exact: the same values, escaped so that a terminal ignores them.
    for args in (("show", location, "s1", "--json"), ("tail", location, "s1", "--once", "--json")):
        out = ok(*args)
        assert_inert(out)
        events = [json.loads(line) for line in out.splitlines()]
        assert events[0]["event"]["content"] == HOSTILE
        assert events[2]["event"][HOSTILE] == HOSTILE
    listed = [json.loads(line)["id"] for line in ok("list", location, "--json").splitlines()]
    assert "id" + HOSTILE in listed


def test_errors_never_carry_terminal_escapes(tmp_path: Path) -> None:
    location = tmp_path / "s.db"
    hostile_sqlite(location)
    line = refused(agentlog_run("show", location, "no\x1b[2Jsuch"))
    assert_inert(line)
    line = refused(agentlog_run("list", tmp_path / "missing\x1b]0;x\x07.db"))
    assert_inert(line)


def test_a_seq_beyond_any_store_is_one_line(tmp_path: Path) -> None:
    """A seq no store can hold (beyond 64 bits) is refused as an argument, not
    passed down to a driver that overflows."""
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as log:
        log.append("s1", EVENTS)
    for argv in (["show", db, "s1", "--since", str(1 << 64)], ["truncate", db, "s1", str(1 << 70)]):
        line = refused(agentlog_run(*argv))
        assert "must be at most 9223372036854775807" in line
