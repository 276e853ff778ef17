"""The agentlog command line, as a user runs it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentlog import FileCheckpointer, SqliteCheckpointer
from agentlog.cli import main

from .conftest import PYTHON, child_env


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    run = subprocess.run(
        [PYTHON, "-m", "agentlog", "demo", "--db", str(db)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "CheckpointConflictError: expected 7, actual 9" in out
    assert "integrity: ok" in out
    with SqliteCheckpointer(db) as cp:
        assert cp.head("demo-session") == 10
        assert cp.head("demo-session-alt") == 7
        assert [info.id for info in cp.list()] == ["demo-session-alt", "demo-session"]
        # The second process really wrote events 8 and 9.
        texts = [e.event["content"] for e in cp.read("demo-session", since_seq=7)]
        assert texts == ["Summarise main.py.", "It parses arguments and runs the agent.", "Thanks!"]


@pytest.fixture(params=["sqlite", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    location = tmp_path / ("s.db" if request.param == "sqlite" else "sessions")
    cp = SqliteCheckpointer(location) if request.param == "sqlite" else FileCheckpointer(location)
    with cp:
        cp.append("s1", [{"type": "user", "content": "hi"}, {"type": "assistant", "content": "yo"}])
        cp.append("s1", [{"type": "tool_result", "tool_use_id": "t", "content": "r"}])
    return str(location)


def test_list_show_fork_truncate(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    main(["list", store])
    assert capsys.readouterr().out.split("\t")[:2] == ["s1", "3"]
    main(["show", store, "s1"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].strip() for line in out] == ["user", "assistant", "user"]
    main(["show", store, "s1", "--json", "--since", "1"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["seq"] for row in rows] == [2, 3]
    main(["fork", store, "s1", "2", "s2"])
    main(["truncate", store, "s1", "1"])
    capsys.readouterr()
    main(["tail", store, "s2", "--once"])
    assert len(capsys.readouterr().out.splitlines()) == 2
    main(["list", store])
    heads = dict(line.split("\t")[:2] for line in capsys.readouterr().out.splitlines())
    assert heads == {"s1": "1", "s2": "2"}


def test_errors_are_reported_not_raised(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["show", store, "../etc"])
    assert info.value.code == 2
    assert "InvalidSessionIdError" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fork", store, "s1", "9", "s9"])


def test_check_and_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "c.db"
    SqliteCheckpointer(db).close()
    main(["check", str(db)])
    assert capsys.readouterr().out.strip() == "ok"
    main(["info"])
    assert json.loads(capsys.readouterr().out)["engine"] in ("c", "python")


def test_bench_runs_the_checkouts_benchmark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    assert "--quick" in capsys.readouterr().out
