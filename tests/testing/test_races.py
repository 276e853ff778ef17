"""The one race runner the suites share: it plays every round, refuses a conflict
that reports the wrong revisions, and fails at once when a racing process dies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog import Checkpointer, MemoryCheckpointer, SqliteCheckpointer
from agentlog.testing.log import AppendRace
from agentlog.testing.races import Race, Tally, run_race

ROUNDS = 25


class WrongConflictRace(AppendRace):
    """Expects the loser to be told a head one further on than the truth."""

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        return round_no, round_no + 2


class NoContestRace(Race):
    """Each racer writes its own session: nobody ever loses."""

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        store.append(f"racer-{worker}", [{"type": "user", "content": "x", "round": round_no}])
        return True


def open_sqlite(location: Path) -> Checkpointer:
    return SqliteCheckpointer(location / "race.db")


def open_nothing(location: Path) -> Checkpointer:
    raise RuntimeError("this racer cannot open its store")


def test_threads_play_every_round_and_exactly_one_wins_each() -> None:
    with MemoryCheckpointer() as cp:
        tallies = run_race(AppendRace(), ROUNDS, store=cp)
        assert [t.worker for t in tallies] == [0, 1]
        assert all(isinstance(t, Tally) and t.wins + t.conflicts == ROUNDS for t in tallies)
        assert sum(t.wins for t in tallies) == ROUNDS
        assert cp.head("race") == ROUNDS


def test_the_tallies_show_a_round_both_racers_won() -> None:
    with MemoryCheckpointer() as cp:
        tallies = run_race(NoContestRace(), ROUNDS, store=cp)
    assert [(t.wins, t.conflicts) for t in tallies] == [(ROUNDS, 0), (ROUNDS, 0)]


def test_a_conflict_reporting_the_wrong_revisions_fails_the_race() -> None:
    with MemoryCheckpointer() as cp, pytest.raises(AssertionError, match="bad conflict"):
        run_race(WrongConflictRace(), ROUNDS, store=cp)


def test_processes_play_every_round_and_exactly_one_wins_each(tmp_path: Path) -> None:
    open_sqlite(tmp_path).close()
    tallies = run_race(AppendRace(), ROUNDS, opener=open_sqlite, location=tmp_path)
    assert [t.worker for t in tallies] == [0, 1]
    assert sum(t.wins for t in tallies) == ROUNDS
    with open_sqlite(tmp_path) as cp:
        assert cp.head("race") == ROUNDS


def test_a_racing_process_that_dies_fails_the_race_at_once(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="a racing process died"):
        run_race(AppendRace(), ROUNDS, opener=open_nothing, location=tmp_path)


def test_a_race_needs_a_store_or_an_opener_and_a_location(tmp_path: Path) -> None:
    with MemoryCheckpointer() as cp:
        for arguments in [
            {},
            {"opener": open_sqlite},
            {"location": tmp_path},
            {"store": cp, "opener": open_sqlite, "location": tmp_path},
        ]:
            with pytest.raises(TypeError):
                run_race(AppendRace(), ROUNDS, **arguments)
