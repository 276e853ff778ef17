"""The agentlog command line, as a user runs it: ``python -m agentlog …``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest

import agentlog
from agentlog import FileCheckpointer, SqliteCheckpointer, SqliteStorage
from agentlog.cli import main
from agentlog.log.file import session_file_name

from .conftest import AVAILABLE, PYTHON, child_env

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


def _tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes (SQLite's empty ``-wal``
    and its ``-shm`` index, which a reader may leave, excepted)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.name.endswith(("-shm", "-wal")):
            found[str(path.relative_to(directory))] = path.read_bytes()
        elif path.name.endswith("-wal"):
            assert path.stat().st_size == 0, path
    return found


@pytest.fixture(autouse=True)
def cli_engine(engine: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each SQLite engine in turn for the commands (the engine fixture): a child
    started with :func:`child_env` (this process's environment) gets the pure
    one from ``AGENTLOG_NO_EXTENSIONS=1``."""
    if engine == "python":
        monkeypatch.setenv("AGENTLOG_NO_EXTENSIONS", "1")
    return engine


#: For a test that runs main() in this process (on the engine it imported) or
#: chooses the child's engine itself: once, on this process's default engine.
ONE_ENGINE = pytest.mark.parametrize("engine", [AVAILABLE[0]], indirect=True)


@pytest.fixture(params=["sqlite", "file"])
def kind(request: pytest.FixtureRequest) -> str:
    """Each kind of store: a SQLite file, a file store."""
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path, cli_engine: str) -> Path:
    location = tmp_path / ("s.db" if kind == "sqlite" else "sessions")
    if kind == "sqlite":
        cp: SqliteCheckpointer | FileCheckpointer = SqliteCheckpointer(location, engine=cli_engine)
    else:
        cp = FileCheckpointer(location)
    with cp:
        cp.append("s1", EVENTS[:2])
        cp.append("s1", EVENTS[2:])
    return location


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
    before = _tree(tmp_path)
    for missing in ("nope.db", "nodir/", "nodir/inner.db"):
        line = refused(agentlog_run(*_argv(command, tmp_path / missing), timeout=20))
        assert "no such file or directory" in line and missing.rstrip("/") in line
    line = refused(agentlog_run(*_argv(command, tmp_path / "repo"), timeout=20))
    assert "holds no file store" in line
    assert _tree(tmp_path) == before
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
    before = _tree(store.parent)
    ok(*_argv(command, store))
    assert _tree(store.parent) == before


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
    before = _tree(Path(places["db"]).parent)
    run = agentlog_run(*[part.format(**places) for part in argv], timeout=30)
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith("agentlog")
    assert run.stdout == ""
    assert _tree(Path(places["db"]).parent) == before


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


# -- check ----------------------------------------------------------------------------------


def test_check_reports_a_damaged_file_store(tmp_path: Path) -> None:
    with FileCheckpointer(tmp_path / "files") as cp:
        for event in EVENTS:
            cp.append("s1", [event])
    path = tmp_path / "files" / session_file_name("s1")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"garbage" + lines[2][7:]
    path.write_bytes(b"\n".join(lines))
    run = agentlog_run("check", tmp_path / "files")
    assert run.returncode == 1
    assert run.stdout == f"{path}: unreadable event line 2\n"


def test_a_damaged_sqlite_file_is_refused_not_passed(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
    data = bytearray(db.read_bytes())
    data[4096 : 4096 + 64] = b"\xff" * 64  # the first page after the header page
    db.write_bytes(bytes(data))
    run = agentlog_run("check", db)
    assert run.returncode != 0
    assert "ok" not in run.stdout.split()
    assert "Traceback" not in run.stderr
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    agentlog_run("check", db)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_check_deep_lists_every_damaged_event(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
        cp.append("s2", EVENTS)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET data = ? WHERE id = ?", (b'{"type":"user"}', (1 << 32) | 2))
    conn.execute("UPDATE events SET data = ? WHERE id = ?", (b"{", (2 << 32) | 3))
    conn.commit()
    conn.close()
    assert ok("check", db) == "ok\n"  # SQLite's own pages are sound
    run = agentlog_run("check", db, "--deep")
    assert (run.returncode, run.stderr) == (1, "")
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "session 's1' (tenant default), event 2",
        "session 's2' (tenant default), event 3",
    ]
    assert "payload checksum mismatch" in lines[0] and "payload checksum mismatch" in lines[1]
    report = json.loads(agentlog_run("check", db, "--deep", "--json").stdout)
    assert (report["deep"], report["ok"], report["detail"]) == (True, False, run.stdout.strip())
    files = tmp_path / "files"
    with FileCheckpointer(files) as store:
        store.append("s1", EVENTS)
    assert ok("check", files, "--deep") == "ok\n"
    path = files / session_file_name("s1")
    path.write_bytes(path.read_bytes().replace(b'"yo"', b'"YO"'))
    run = agentlog_run("check", files, "--deep")
    assert run.returncode == 1
    assert run.stdout.startswith("session 's1', event 2: ")


def test_verify_proves_a_session_unchanged_or_names_what_changed(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "s.db"
    with SqliteCheckpointer(db, hash_chain=True) as cp:
        cp.append("s1", EVENTS)
        cp.append("s2", EVENTS[:1])
        digest = cp.verify("s1").digest
    assert digest is not None
    assert ok("verify", db, "s1") == f"s1  head 3  {digest}  ok\n"
    assert ok("verify", db, "s1", "--expect", digest.upper()) == f"s1  head 3  {digest}  ok\n"
    assert [line.split()[0] for line in ok("verify", db).splitlines()] == ["s1", "s2"]
    row = json.loads(ok("verify", db, "s1", "--json"))
    assert row == {"session": "s1", "head": 3, "digest": digest, "ok": True, "problem": None}
    # Cut the last event (head and all): only the kept digest shows it.
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE id = ?", ((1 << 32) | 3,))
    conn.execute("UPDATE sessions SET head = 2 WHERE name = 's1'")
    conn.commit()
    assert agentlog_run("verify", db, "s1").returncode == 0
    run = agentlog_run("verify", db, "s1", "--expect", digest)
    assert run.returncode == 1 and "FAILED: head digest is not the expected" in run.stdout
    # An edit, with its checksum made to match.
    forged = b'{"type":"user","content":"HI"}'
    conn.execute(
        "UPDATE events SET data = ?, crc = ? WHERE id = ?",
        (forged, zlib.crc32(forged), (1 << 32) | 1),
    )
    conn.commit()
    conn.close()
    run = agentlog_run("verify", db)
    assert run.returncode == 1
    assert run.stdout.splitlines()[0].endswith("FAILED: event 1 does not match its chain link")
    assert run.stdout.splitlines()[1].endswith("  ok")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["s1", "--expect", "abc"], "--expect takes a sha256 digest"),
        (["--expect", "0" * 64], "--expect needs exactly one SESSION"),
        (["nobody"], "no session 'nobody'"),
    ],
)
def test_verify_refuses_mistakes_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db, hash_chain=True) as cp:
        cp.append("s1", EVENTS)
    assert message in refused(agentlog_run("verify", db, *args))
    files = tmp_path / "files"
    with FileCheckpointer(files) as store:
        store.append("s1", EVENTS)
    assert "works on a SQLite file" in refused(agentlog_run("verify", files))


def test_verify_of_a_file_without_the_chain_says_so(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
    # Nothing to verify is a mistake, not a failed check (nor a silent "ok").
    assert "keeps no hash chain" in refused(agentlog_run("verify", db))
    # The head digest is still recomputed: --expect compares it, and only it.
    with SqliteCheckpointer(db) as cp:
        digest = cp.verify("s1").digest
    assert digest is not None
    run = agentlog_run("verify", db, "s1", "--expect", digest)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith(f"{digest}  ok\n")
    run = agentlog_run("verify", db, "s1", "--expect", "0" * 64)
    assert run.returncode == 1
    assert "FAILED: head digest is not the expected" in run.stdout


# -- bench ----------------------------------------------------------------------------------


@ONE_ENGINE
def test_bench_runs_the_checkouts_benchmark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    assert "--quick" in capsys.readouterr().out


def test_migrate_errors_name_the_file_they_are_about(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text)")
    line = refused(agentlog_run("migrate", other, tmp_path / "new.db", "--dry-run"))
    assert "other.db" in line and "new.db" not in line  # the source, not the target
    assert not (tmp_path / "new.db").exists()


def test_a_path_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as cp:
        cp.append("s1", EVENTS)
    odd, copy = (tmp_path / os.fsdecode(name) for name in (b"\xff.db", b"\xfe.db"))
    odd.write_bytes(db.read_bytes())  # a byte no UTF-8 name holds
    for command in (["list", odd], ["backup", db, copy]):
        line = refused(agentlog_run(*command))
        assert "SQLite needs a path in UTF-8" in line, command
    assert not copy.exists()


def test_bench_outside_a_checkout_is_one_line(tmp_path: Path) -> None:
    line = refused(agentlog_run("bench", cwd=tmp_path))
    assert line.startswith("agentlog bench: error:") and "checkout" in line


def test_bench_help_outside_a_checkout_is_help(tmp_path: Path) -> None:
    # Every other --help works anywhere; this one says where the benchmark runs.
    run = agentlog_run("bench", "--help", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.startswith("usage: agentlog bench") and "checkout" in run.stdout


def test_unrecognized_arguments_name_the_subcommand(store: Path) -> None:
    line = refused(agentlog_run("show", store, "s1", "extra"))
    assert line.startswith("agentlog show: error: unrecognized arguments: extra")
    assert "agentlog show --help" in line


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
