"""The session commands, as a user runs them: the demo, list, show, tail, fork,
truncate, reading without creating, pipes and tenants."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agentlog import FileCheckpointer, SqliteCheckpointer, SqliteStorage
from agentlog.cli import main
from agentlog.log.file import session_file_name

from ..conftest import PYTHON, child_env
from .running import EVENTS, ONE_ENGINE, agentlog_run, ok, refused, tree

# -- the demo ----------------------------------------------------------------------------


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = ok("demo", "--db", db)
    assert f"store: {db}" in out
    assert "CheckpointConflictError: expected 7, actual 9" in out
    assert "integrity: ok" in out
    assert f"kept in {db}" in out
    with SqliteCheckpointer(db) as cp:
        assert cp.head("demo-session") == 10
        assert cp.head("demo-session-alt") == 7
        assert [info.id for info in cp.list()] == ["demo-session-alt", "demo-session"]
        # The second process really wrote events 8 and 9.
        texts = [e.event["content"] for e in cp.read("demo-session", since_seq=7)]
        assert texts == [
            "Summarise main.py.",
            "It parses arguments and runs the agent.",
            "Thanks!",
        ]


def test_demo_says_where_its_database_is() -> None:
    first = ok("demo").splitlines()[0]
    assert "demo.db (temporary" in first
    assert "--db FILE" in first


def test_demo_refuses_to_reset_sessions_it_would_overwrite(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("demo-session", [{"type": "user", "content": "mine"}])
        cp.append("other", [{"type": "user", "content": "keep"}])
    line = refused(agentlog_run("demo", "--db", db))
    assert "demo-session" in line and "--force" in line
    with SqliteCheckpointer(db) as cp:
        assert [e.event["content"] for e in cp.read("demo-session")] == ["mine"]
    assert "integrity: ok" in ok("demo", "--db", db, "--force")
    with SqliteCheckpointer(db) as cp:
        assert cp.head("demo-session") == 10
        assert cp.head("other") == 1


# -- the everyday commands ----------------------------------------------------------------


def test_list_show_tail_fork_truncate(store: Path) -> None:
    assert ok("list", store).split("\t")[:2] == ["s1", "3"]
    out = ok("show", store, "s1").splitlines()
    assert [line.split(":")[0].strip() for line in out] == ["user", "assistant", "user"]
    rows = [
        json.loads(line) for line in ok("show", store, "s1", "--json", "--since", "1").splitlines()
    ]
    assert [row["seq"] for row in rows] == [2, 3]
    assert len(ok("show", store, "s1", "--raw").splitlines()) == 3
    assert ok("fork", store, "s1", "2", "s2") == "forked s1 at 2 into s2 (head 2)\n"
    assert ok("truncate", store, "s1", "1") == "s1: head 1\n"
    assert ok("truncate", store, "s1", "5") == "s1: head 1 (nothing after 5 to drop)\n"
    assert len(ok("tail", store, "s2", "--once").splitlines()) == 2
    heads = dict(line.split("\t")[:2] for line in ok("list", store).splitlines())
    assert heads == {"s1": "1", "s2": "2"}


@ONE_ENGINE
def test_the_in_process_entry_point_works_too(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["list", str(store)])
    assert capsys.readouterr().out.split("\t")[:2] == ["s1", "3"]
    with pytest.raises(SystemExit) as info:
        main(["show", str(store), "../etc"])
    assert info.value.code == 2
    assert "session id '../etc' is not allowed" in capsys.readouterr().err


# -- no silent creation -----------------------------------------------------------------

READ_AND_WRITE_COMMANDS = [
    ["list"],
    ["list", "--all-tenants"],
    ["show", "{}", "s1"],
    ["tail", "{}", "s1", "--once"],
    ["tail", "{}", "s1"],
    ["check"],
    ["fork", "{}", "s1", "1", "s2"],
    ["truncate", "{}", "s1", "1"],
]


def _argv(command: list[str], store: Path | str) -> list[str]:
    argv = [str(store) if part == "{}" else part for part in command]
    return argv if "{}" in command else [argv[0], str(store), *argv[1:]]


@pytest.mark.parametrize("command", READ_AND_WRITE_COMMANDS, ids=" ".join)
def test_no_command_creates_a_store(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "notes.txt").write_text("not a store")
    before = tree(tmp_path)
    for missing in ("nope.db", "nodir/", "nodir/inner.db"):
        line = refused(agentlog_run(*_argv(command, tmp_path / missing), timeout=20))
        assert "no such file or directory" in line and missing.rstrip("/") in line
    line = refused(agentlog_run(*_argv(command, tmp_path / "repo"), timeout=20))
    assert "holds no file store" in line
    assert tree(tmp_path) == before
    assert sorted(os.listdir(tmp_path / "repo")) == ["notes.txt"]  # no lock file


@pytest.mark.parametrize(
    "command",
    [["list"], ["list", "--json"], ["show", "{}", "s1"], ["tail", "{}", "s1", "--once"], ["check"]],
    ids=" ".join,
)
def test_read_commands_change_nothing(store: Path, command: list[str]) -> None:
    if store.is_dir():
        (store / ".agentlog.lock").unlink()  # a store whose owner is gone
        with (store / session_file_name("s1")).open("ab") as handle:
            handle.write(b'{"seq":4,"end":4,"ts":1.0,"ev')  # and a torn tail
    before = tree(store.parent)
    ok(*_argv(command, store))
    assert tree(store.parent) == before


def test_a_file_store_can_be_read_while_its_owner_writes(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path / "sessions") as owner:
        owner.append("s1", EVENTS)
        assert ok("list", tmp_path / "sessions").split("\t")[:2] == ["s1", "3"]
        assert len(ok("show", tmp_path / "sessions", "s1", "--raw").splitlines()) == 3
        line = refused(agentlog_run("truncate", tmp_path / "sessions", "s1", "1"))
        assert "in use" in line
        assert owner.head("s1") == 3


def test_tail_follows_a_session_its_owner_appends_to(tmp_path: Path, kind: str) -> None:
    location = tmp_path / ("s.db" if kind == "sqlite" else "sessions")
    owner = SqliteCheckpointer(location) if kind == "sqlite" else FileCheckpointer(location)
    with owner:
        owner.append("s1", EVENTS[:1])
        env = {**child_env(), "PYTHONUNBUFFERED": "1"}
        argv = ["tail", str(location), "s1", "--json", "--interval", "0.05"]
        with subprocess.Popen(
            [PYTHON, "-m", "agentlog", *argv], stdout=subprocess.PIPE, text=True, env=env
        ) as child:
            assert child.stdout is not None
            try:
                assert json.loads(child.stdout.readline())["seq"] == 1
                owner.append("s1", EVENTS[1:])
                assert json.loads(child.stdout.readline())["seq"] == 2
                assert json.loads(child.stdout.readline())["seq"] == 3
            finally:
                child.terminate()


# -- unknown sessions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["show", "{}", "typo"],
        ["show", "{}", "typo", "--json"],
        ["tail", "{}", "typo", "--once"],
        ["tail", "{}", "typo"],  # would otherwise wait forever
        ["truncate", "{}", "typo", "1"],
        ["fork", "{}", "typo", "1", "new"],
    ],
    ids=" ".join,
)
def test_an_unknown_session_is_an_error(store: Path, command: list[str]) -> None:
    line = refused(agentlog_run(*_argv(command, store), timeout=20))
    assert "no session 'typo'" in line
    assert [info.id for info in _open(store).list()] == ["s1"]


def test_a_session_truncated_to_nothing_still_exists(store: Path) -> None:
    assert ok("truncate", store, "s1", "0") == "s1: head 0\n"
    assert ok("show", store, "s1") == ""
    assert ok("tail", store, "s1", "--once") == ""


def _open(store: Path) -> SqliteCheckpointer | FileCheckpointer:
    if store.is_dir():
        return FileCheckpointer(store, read_only=True)
    return SqliteCheckpointer(store, read_only=True)


# -- pipes ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose every listing is far larger than a pipe's buffer (64 KiB)."""
    db = tmp_path_factory.mktemp("big") / "big.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("big", [{"type": "user", "content": "x" * 100}] * 3000)
        for n in range(1000):
            cp.append(f"s{n:04}-" + "x" * 120, EVENTS[:1])
    return db


@pytest.mark.parametrize(
    "command",
    [
        ["show", "{}", "big"],
        ["show", "{}", "big", "--raw"],
        ["show", "{}", "big", "--json"],
        ["tail", "{}", "big", "--once"],
        ["list"],
        ["demo"],
    ],
    ids=" ".join,
)
def test_a_closed_pipe_ends_quietly(big_store: Path, command: list[str]) -> None:
    db = big_store
    argv = _argv(command, db) if command != ["demo"] else command
    env = {**child_env(), "PYTHONUNBUFFERED": "1"}  # every line leaves at once
    with subprocess.Popen(
        [PYTHON, "-m", "agentlog", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.readline()  # like `| head -1`: read a line, then go away
        child.stdout.close()
        err = child.stderr.read().decode()
        rc = child.wait(timeout=60)
    assert err == ""
    assert rc == 141  # as for a process that SIGPIPE ended


# -- tenants ---------------------------------------------------------------------------------


def test_tenant_on_every_session_command(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SqliteStorage.open(db) as storage:
        rec = storage.sessions.create("acme", "chat-9", metadata={"title": "Refunds"})
        storage.sessions.append(
            "acme",
            "chat-9",
            rec.revision,
            [{**event, "id": f"m{n}"} for n, event in enumerate(EVENTS)],
        )
        storage.checkpointer().append("mine", EVENTS[:1])
    assert [line.split("\t")[0] for line in ok("list", db).splitlines()] == ["mine"]
    assert ok("list", db, "--tenant", "acme").split("\t")[:2] == ["chat-9", "3"]
    every = [line.split("\t")[:3] for line in ok("list", db, "--all-tenants").splitlines()]
    assert every == [["default", "mine", "1"], ["acme", "chat-9", "3"]]
    rows = [json.loads(line) for line in ok("list", db, "--all-tenants", "--json").splitlines()]
    assert [(row["tenant"], row["id"]) for row in rows] == [("default", "mine"), ("acme", "chat-9")]
    assert "Refunds" not in ok("show", db, "chat-9", "--tenant", "acme")
    assert len(ok("show", db, "chat-9", "--tenant", "acme", "--raw").splitlines()) == 3
    assert len(ok("tail", db, "chat-9", "--tenant", "acme", "--once").splitlines()) == 3
    line = refused(agentlog_run("show", db, "chat-9"))
    assert "no session 'chat-9'" in line and "add --tenant acme" in line
    line = refused(agentlog_run("show", db, "mine", "--tenant", "acme"))
    assert "tenant 'acme'" in line
    line = refused(agentlog_run("fork", db, "chat-9", "1", "new"))
    assert "no session 'chat-9'" in line and "add --tenant acme" in line
    line = refused(agentlog_run("verify", db, "chat-9", "--expect", "0" * 64))
    assert "no session 'chat-9'" in line and "add --tenant acme" in line
    ok("fork", db, "chat-9", "2", "chat-10", "--tenant", "acme")
    assert ok("truncate", db, "chat-9", "1", "--tenant", "acme") == "chat-9: head 1\n"
    heads = dict(line.split("\t")[:2] for line in ok("list", db, "--tenant", "acme").splitlines())
    assert heads == {"chat-9": "1", "chat-10": "2"}
    refused(agentlog_run("list", db, "--tenant", "acme", "--all-tenants"))
    line = refused(agentlog_run("list", db, "--tenant", "a/b"))
    assert "tenant 'a/b' is not allowed" in line
    # A tenant without sessions, beside tenants with some: named, never "nothing".
    line = refused(agentlog_run("list", db, "--tenant", "acm"))
    assert "no sessions in tenant 'acm'" in line and "'acme', 'default'" in line
    line = refused(agentlog_run("migrate", db, tmp_path / "copy.db", "--tenant", "acm"))
    assert "no sessions in tenant 'acm'" in line and "'acme', 'default'" in line
    assert not (tmp_path / "copy.db").exists()
    line = refused(agentlog_run("gc", db, "--idle-days", "0", "--tenant", "acm"))
    assert "no sessions in tenant 'acm'" in line and "'acme', 'default'" in line
    assert "migrated 2, skipped 0" in ok("migrate", db, tmp_path / "copy.db", "--tenant", "acme")


def test_an_empty_store_lists_nothing_without_error(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    SqliteCheckpointer(db).close()
    assert ok("list", db) == ""
    assert ok("list", db, "--tenant", "acme", "--json") == ""


def test_a_file_store_has_no_tenants(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path / "files") as cp:
        cp.append("s1", EVENTS)
    line = refused(agentlog_run("show", tmp_path / "files", "s1", "--tenant", "acme"))
    assert "file store, which has no tenants" in line
    every = ok("list", tmp_path / "files", "--all-tenants").splitlines()
    assert [line.split("\t")[:2] for line in every] == [["default", "s1"]]
