"""One race runner for every suite: two racers, as threads or as spawned processes.

A race is many rounds of one contest: every round both racers wait at a
barrier, then try the same compare-and-set write, so exactly one may win and
the other must lose cleanly. A suite supplies only its per-round step, as a
:class:`Race` subclass (module-level, so that spawned children can unpickle
it); :meth:`Race.__call__` plays the rounds and checks every conflict, and
:func:`run_race` starts the two racers and collects their tallies.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from ..errors import CheckpointConflictError, StorageConflictError

#: What one racer runs: ``race(store, worker, rounds, barrier) -> (wins, conflicts)``.
RaceFunction = Callable[[Any, int, int, Any], tuple[int, int]]


class Tally(NamedTuple):
    """One racer's result."""

    worker: int
    wins: int
    conflicts: int


class Race:
    """A contest both racers enter every round; exactly one may win each.

    Subclasses implement :meth:`step` and :meth:`conflict`, and set
    :attr:`conflict_error` to the error their store raises for a lost
    compare-and-set.
    """

    #: The error a losing write raises.
    conflict_error: ClassVar[type[CheckpointConflictError] | type[StorageConflictError]] = (
        StorageConflictError
    )

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        """Try to win round ``round_no``: True when this racer's write won;
        False when it saw, before writing, that the other had won already.
        A write that loses raises :attr:`conflict_error`."""
        raise NotImplementedError

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        """The ``(expected, actual)`` a lost write of ``round_no`` must report."""
        raise NotImplementedError

    def __call__(self, store: Any, worker: int, rounds: int, barrier: Any) -> tuple[int, int]:
        """Play ``rounds`` rounds as racer ``worker``; returns (wins, conflicts)."""
        wins = conflicts = 0
        for round_no in range(rounds):
            barrier.wait(timeout=60)
            try:
                won = self.step(store, worker, round_no)
            except self.conflict_error as exc:
                if reported_conflict(exc) != self.conflict(round_no):
                    raise AssertionError(f"bad conflict {exc}") from None
                won = False
            if won:
                wins += 1
            else:
                conflicts += 1
        return wins, conflicts


def reported_conflict(
    exc: CheckpointConflictError | StorageConflictError,
) -> tuple[int | None, int | None]:
    """The ``(expected, actual)`` a conflict error reports."""
    if isinstance(exc, CheckpointConflictError):
        return exc.expected, exc.actual
    return exc.expected_revision, exc.actual_revision


def run_race(
    race: RaceFunction,
    rounds: int,
    *,
    store: Any = None,
    opener: Callable[[Path], Any] | None = None,
    location: Path | None = None,
) -> list[Tally]:
    """Two racers run ``race`` for ``rounds`` rounds; their tallies.

    Given ``store``, they are two threads sharing it. Given ``opener`` and
    ``location``, they are two processes started with ``spawn``, each opening
    the store at ``location`` with ``opener(location)`` (which, like ``race``,
    must be picklable). Every racer must account for every round.
    """
    if (store is None) == (opener is None) or (opener is None) != (location is None):
        raise TypeError("run_race needs a store, or an opener and a location")
    if opener is not None and location is not None:
        tallies = race_processes(opener, race, location, rounds)
    else:
        tallies = race_threads(store, race, rounds)
    assert all(wins + conflicts == rounds for _, wins, conflicts in tallies), tallies
    return tallies


def run_in_threads(target: Callable[[int], object], count: int) -> None:
    """``target(n)`` for each ``n`` below ``count``, each in a thread of its own,
    all at once; fails, listing them, if any of them raised."""
    failures: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            target(worker)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def race_threads(store: Any, race: RaceFunction, rounds: int) -> list[Tally]:
    """Two threads run ``race`` on one shared store."""
    barrier = threading.Barrier(2)
    tallies: list[Tally] = []

    def racer(worker: int) -> None:
        try:
            tallies.append(Tally(worker, *race(store, worker, rounds, barrier)))
        except BaseException:
            barrier.abort()  # so that the other racer stops waiting for this one
            raise

    run_in_threads(racer, 2)
    return sorted(tallies)


def race_worker(
    opener: Callable[[Path], Any],
    race: RaceFunction,
    location: str,
    worker: int,
    rounds: int,
    barrier: Any,
    results: Any,
) -> None:
    """A racing child process: opens the store itself and reports its tally."""
    store = opener(Path(location))
    try:
        outcome = race(store, worker, rounds, barrier)
    finally:
        store.close()
    results.put(Tally(worker, *outcome))


def race_processes(
    opener: Callable[[Path], Any], race: RaceFunction, location: Path, rounds: int
) -> list[Tally]:
    """Two spawned processes run ``race`` on the store at ``location``.

    Fails at once (not after a timeout) when a child dies without reporting.
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    children = [
        context.Process(
            target=race_worker, args=(opener, race, str(location), w, rounds, barrier, results)
        )
        for w in (0, 1)
    ]
    for child in children:
        child.start()
    tallies: list[Tally] = []
    deadline = time.monotonic() + 300
    try:
        while len(tallies) < len(children):
            try:
                tallies.append(Tally(*results.get(timeout=0.5)))
            except queue.Empty:
                dead = [c.exitcode for c in children if c.exitcode not in (None, 0)]
                if dead:
                    raise AssertionError(f"a racing process died (exit code {dead[0]})") from None
                if time.monotonic() > deadline:
                    raise AssertionError("the racing processes did not finish") from None
    finally:
        for child in children:
            child.join(timeout=60)
            if child.is_alive():
                child.kill()
    assert all(child.exitcode == 0 for child in children)
    return sorted(tallies)
