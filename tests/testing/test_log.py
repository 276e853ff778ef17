"""The function form of the Checkpointer suite, as the README shows it."""

from __future__ import annotations

import pickle
from pathlib import Path

from agentlog import Checkpointer, SqliteCheckpointer
from agentlog.testing import checkpointer_conformance


def open_my_backend(location: Path) -> Checkpointer:
    return SqliteCheckpointer(location / "store.db")


def test_the_function_form_hands_spawned_racers_its_opener(tmp_path: Path) -> None:
    # Built under its default name, which is not the name it is bound to here
    # (nor anywhere): the children must get the opener, not the class.
    suite = checkpointer_conformance(open_my_backend, multiprocess=True)
    opener = suite().process_opener()
    assert pickle.loads(pickle.dumps(opener)) is open_my_backend
    location = tmp_path / "store"
    location.mkdir()
    suite().test_two_processes_race_exactly_one_winner_per_round(location)
    with open_my_backend(location) as cp:
        assert cp.head("race") == suite.race_rounds
