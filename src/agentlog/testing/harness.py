"""What the suites share: hostile ids, ``make_event``, and the store-suite base.

:class:`StoreSuite` is the base of the four store suites: the ``location``
and ``storage`` fixtures, the flags a store promises, a picklable opener for
spawned racers, and the two ways of racing (see :mod:`agentlog.testing.races`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import StorageConflictError, StorageDataError, StorageNotFoundError
from ..events import MAX_SESSION_ID_LENGTH, REQUIRED_FIELDS
from .races import RaceFunction, Tally, run_race

#: Ids every backend must refuse.
HOSTILE_SESSION_IDS: tuple[Any, ...] = (
    "",
    ".",
    "..",
    "../x",
    "a/b",
    "/abs",
    "a\\b",
    "\x00",
    "a\x00b",
    "line\nbreak",
    "tab\there",
    "\x1b[31m",
    "bidi\u202eoverride",
    "zero\u200bwidth",
    "\ufeffbom",
    "lone\ud800surrogate",
    "para\u2029graph",
    "x" * 10_000,
    "x" * (MAX_SESSION_ID_LENGTH + 1),
    None,
    123,
    b"bytes",
)


def able(log: Any, promised: bool, protocol: type[object], what: str) -> Any:
    """``log`` as ``protocol`` for a test of ``what`` it keeps; when the backend
    promises no place for it (``promised`` is False), ``log`` is closed and
    the test skipped."""
    if not promised:
        log.close()
        pytest.skip(f"this backend has no place for {what}")
    assert isinstance(log, protocol), f"{type(log).__name__} keeps no {what}"
    return log


def make_event(kind: str = "user", **fields: Any) -> dict[str, Any]:
    """A small valid event of type ``kind``: the fields its type needs filled in
    (``content``, ``tool_use_id``), then ``fields``."""
    event: dict[str, Any] = {"type": kind}
    for field in REQUIRED_FIELDS.get(kind, ()):
        event[field] = "t1" if field == "tool_use_id" else f"{kind} text"
    event.update(fields)
    return event


def assert_each_refused(calls: Iterable[Callable[[], Any]]) -> None:
    """Each of ``calls`` raises :class:`StorageDataError`."""
    for call in calls:
        with pytest.raises(StorageDataError):
            call()


def assert_delete_is_compare_and_set(
    delete: Callable[[int], Any], stale: int, current: int, *gone: Callable[[], Any]
) -> None:
    """``delete(stale)`` conflicts, ``delete(current)`` deletes, and then
    each of ``gone`` raises :class:`StorageNotFoundError`."""
    with pytest.raises(StorageConflictError):
        delete(stale)
    delete(current)
    for call in gone:
        with pytest.raises(StorageNotFoundError):
            call()


class FreshLocation:
    """The ``location`` fixture every suite uses: a fresh, empty directory,
    named :attr:`location_name`, for the test's store to live in."""

    #: The directory's name under pytest's ``tmp_path``.
    location_name: ClassVar[str] = "store"

    @pytest.fixture
    def location(self, tmp_path: Path) -> Path:
        """A fresh, empty directory for this test's store."""
        path = tmp_path / self.location_name
        path.mkdir()
        return path


def open_store_suite(suite: type[StoreSuite], location: Path) -> Any:
    """Open the storage of ``suite`` at ``location``: the opener a spawned racer
    receives (picklable because ``suite`` is importable from its module)."""
    return suite().open_storage(location)


class StoreSuite(FreshLocation):
    """What the four store suites share: the storage fixture and the races.

    Implement :meth:`open_storage` returning an object with the store as an
    attribute (``sessions``, ``checkpoints``, ``memory``, ``artifacts``) and a
    ``close()`` method — a ``SqliteStorage`` or an ``InMemoryStorage``.
    """

    # Flags, an opener and its fixture, alike in shape to the log suite's: each
    # suite's public hooks, named and documented for what it opens.
    location_name = "storage"
    #: The storage outlives the object: closing and reopening keeps everything.
    durable: ClassVar[bool] = True
    #: Two processes may open one storage at once.
    multiprocess: ClassVar[bool] = False
    #: Rounds of the two-writer races.
    race_rounds: ClassVar[int] = 40

    def open_storage(self, location: Path) -> Any:
        """Open (or reopen) the storage at ``location``, a directory."""
        raise NotImplementedError

    @pytest.fixture
    def storage(self, location: Path) -> Iterator[Any]:
        """An open storage on a fresh location."""
        opened = self.open_storage(location)
        yield opened
        opened.close()

    def skip_unless_durable(self) -> None:
        """Skip the test when the storage does not outlive its object."""
        if not self.durable:
            pytest.skip("this storage does not outlive its object")

    def skip_unless_multiprocess(self) -> None:
        """Skip the test when two processes may not share the storage."""
        if not self.multiprocess:
            pytest.skip("this storage is for one process")

    @contextlib.contextmanager
    def reopened(self, location: Path) -> Iterator[Any]:
        """The storage at ``location`` opened anew, closed on leaving the block."""
        opened = self.open_storage(location)
        try:
            yield opened
        finally:
            opened.close()

    def assert_one_winner_per_round(self, tallies: list[Tally]) -> None:
        """Exactly one racer won each of the race's rounds."""
        assert sum(wins for _, wins, _ in tallies) == self.race_rounds

    def race_in_threads(self, storage: Any, race: RaceFunction) -> list[Tally]:
        """Two threads run ``race`` on one storage."""
        return run_race(race, self.race_rounds, store=storage)

    def race_in_processes(self, location: Path, race: RaceFunction) -> list[Tally]:
        """Two spawned processes run ``race`` on the storage at ``location``."""
        opener = functools.partial(open_store_suite, type(self))
        return run_race(race, self.race_rounds, opener=opener, location=location)

    @contextlib.contextmanager
    def raced_in_processes(self, location: Path, race: RaceFunction) -> Iterator[Any]:
        """Skip unless :attr:`multiprocess`; else create the storage at
        ``location``, race ``race`` in two processes on it, check one winner
        per round, and yield the storage reopened (closed on leaving)."""
        self.skip_unless_multiprocess()
        self.open_storage(location).close()
        self.assert_one_winner_per_round(self.race_in_processes(location, race))
        with self.reopened(location) as storage:
            yield storage
