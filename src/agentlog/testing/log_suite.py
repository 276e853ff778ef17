"""The frame of the ``Checkpointer`` conformance suite: :class:`CheckpointerSuite`.

What every part of the suite stands on: the class attributes a backend sets,
the fixtures, the helpers and the races. The tests themselves are
:class:`~agentlog.testing.log.CheckpointerConformance` and its parts
(:mod:`~agentlog.testing.log_metadata`, :mod:`~agentlog.testing.log_keys`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import (
    CheckpointConflictError,
    StorageConflictError,
)
from ..events import (
    StoredEvent,
)
from ..log.contract import Checkpointer
from .harness import FreshLocation, make_event
from .races import Race


def conversation(n: int, tag: str = "") -> list[dict[str, Any]]:
    kinds = ["user", "assistant", "tool_started", "tool_result"]
    return [make_event(kinds[i % 4], content=f"{tag}message {i}", i=i) for i in range(n)]


def seqs(events: Iterator[StoredEvent]) -> list[int]:
    return [event.seq for event in events]


def open_suite_checkpointer(suite: type[CheckpointerSuite], location: Path) -> Checkpointer:
    """Open the checkpointer of ``suite`` at ``location``: the opener a spawned
    racer receives (picklable because ``suite`` is importable from its module)."""
    return suite().open_checkpointer(location)


class AppendRace(Race):
    """Every round both racers append to ``"race"`` with the same expected
    head (the round number), so exactly one must win."""

    conflict_error = CheckpointConflictError

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        store.append(
            "race", [make_event("user", worker=worker, round=round_no)], expected_head=round_no
        )
        return True

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        return round_no, round_no + 1


class MetadataRace(Race):
    """Every round both racers set the metadata of ``"race"`` expecting the
    revision the round starts at (the round number: each win adds one)."""

    conflict_error = StorageConflictError

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        store.set_metadata("race", {"worker": worker, "round": round_no}, round_no)
        return True

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        return round_no, round_no + 1


class KeyRace(Race):
    """Every round both racers append the same event under the same key
    (``"round-N"``), without an expected head: exactly one writes it, and both
    get the head after it (each round adds one event)."""

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        head = store.append("race", [make_event("user", round=round_no)], key=f"round-{round_no}")
        if head != round_no + 1:
            raise AssertionError(f"round {round_no}: the keyed append returned head {head}")
        return True


class CheckpointerSuite(FreshLocation):
    """The base of the ``Checkpointer`` suite's parts: what a backend sets
    (:meth:`open_checkpointer`, :attr:`durable`, :attr:`multiprocess` …) and
    the fixtures every test uses."""

    #: The store outlives the object: closing and reopening keeps every event.
    durable: ClassVar[bool] = True
    #: Two processes may open one store at once (their appends race safely).
    multiprocess: ClassVar[bool] = False
    #: ``list()`` reports the same mtimes after a reopen (False for stores
    #: that cannot record when a truncate or fork happened).
    persistent_mtime: ClassVar[bool] = True
    #: Rounds of the two-writer races (threads and processes).
    race_rounds: ClassVar[int] = 100
    #: The store keeps session metadata (``metadata`` / ``set_metadata``);
    #: False only for an adapter over a store with no place for it.
    stores_metadata: ClassVar[bool] = True
    #: The store takes append keys (idempotent appends, ``append(..., key=)``);
    #: False only for an adapter over a store with no place for them.
    takes_keys: ClassVar[bool] = True

    def open_checkpointer(self, location: Path) -> Checkpointer:
        """Open (or reopen) the store that lives at ``location``, a directory."""
        raise NotImplementedError

    @pytest.fixture
    def cp(self, location: Path) -> Iterator[Checkpointer]:
        """An open checkpointer on a fresh store."""
        checkpointer = self.open_checkpointer(location)
        yield checkpointer
        checkpointer.close()

    def process_opener(self) -> Callable[[Path], Checkpointer]:
        """A picklable ``opener(location)`` for the multi-process tests."""
        return functools.partial(open_suite_checkpointer, type(self))

    def reopen(self, cp: Checkpointer, location: Path) -> Checkpointer:
        """Close ``cp`` and open the same store again."""
        cp.close()
        return self.open_checkpointer(location)
