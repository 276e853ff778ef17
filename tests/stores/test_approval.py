"""Exactly once across crashes: a run killed at its approval point is resumed
by racing processes, and by one that dies after acting; the effect happens once."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from agentlog import SqliteStorage

from ..conftest import PYTHON, child_env

CHILD = str(Path(__file__).resolve().parent / "approval_child.py")


def start_run_and_kill_at_approval(db: Path) -> None:
    child = subprocess.Popen(
        [PYTHON, CHILD, "run", str(db)], stdout=subprocess.PIPE, text=True, env=child_env()
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "waiting for approval"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with SqliteStorage.open(db) as storage:
        cp = storage.checkpoints.load("acme", "run-7")
        assert (cp.status, cp.side_effects[0].state) == ("awaiting_approval", "pending")
        assert [c.run_id for c in storage.checkpoints.list("acme", status="awaiting_approval")] == [
            "run-7"
        ]


def resume(db: Path, outbox: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, CHILD, "resume", str(db), str(outbox), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def assert_sent_once_and_completed(db: Path, outbox: Path) -> None:
    """The email went out once, and the run is completed with its effect succeeded."""
    assert outbox.read_text().splitlines() == ["email-1"]
    with SqliteStorage.open(db) as storage:
        cp = storage.checkpoints.load("acme", "run-7")
        assert (cp.status, cp.side_effects[0].state) == ("completed", "succeeded")


def test_racing_resumers_perform_the_side_effect_exactly_once(tmp_path: Path) -> None:
    db, outbox = tmp_path / "runs.db", tmp_path / "outbox.txt"
    start_run_and_kill_at_approval(db)
    resumers = [resume(db, outbox) for _ in range(4)]
    outcomes = sorted(child.communicate(timeout=120)[0].strip() for child in resumers)
    assert outcomes.count("performed") == 1, outcomes
    assert set(outcomes) <= {"performed", "another resumer claimed it", "nothing to do"}
    assert outbox.read_text().splitlines() == ["email-1"]
    again = resume(db, outbox)
    assert again.communicate(timeout=60)[0].strip() == "nothing to do"
    assert_sent_once_and_completed(db, outbox)


def test_a_resumer_that_dies_after_acting_is_reconciled_not_repeated(tmp_path: Path) -> None:
    db, outbox = tmp_path / "runs.db", tmp_path / "outbox.txt"
    start_run_and_kill_at_approval(db)
    crashed = resume(db, outbox, "crash-after-effect")
    crashed.communicate(timeout=60)
    assert crashed.returncode == 3
    with SqliteStorage.open(db) as storage:
        assert storage.checkpoints.load("acme", "run-7").side_effects[0].state == "started"
    after = resume(db, outbox)
    assert after.communicate(timeout=60)[0].strip() == "reconciled"
    assert_sent_once_and_completed(db, outbox)
