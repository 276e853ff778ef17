"""Fork lineage in the ``Checkpointer`` conformance suite: :class:`LineageConformance`.

A mixin of :class:`~agentlog.testing.CheckpointerConformance` (every backend
that runs the suite runs these): a fork records where it came from, read by
``lineage()`` and found by ``forks()``; nothing else has lineage. A backend
with no place for it (an adapter over a foreign store) sets
:attr:`LineageConformance.records_lineage` to False.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import CheckpointerClosedError, InvalidSessionIdError
from ..events import Fork, ForkOrigin
from ..log.contract import Checkpointer, LineageCheckpointer
from .harness import able, make_event

__all__ = ["LineageConformance"]


def _events(n: int) -> list[dict[str, Any]]:
    return [make_event("user", content=f"message {i}") for i in range(n)]


class LineageConformance:
    """The lineage tests; mixed into the ``Checkpointer`` suite."""

    #: The store records fork lineage (``lineage`` / ``forks``); False only
    #: for an adapter over a store with no place for it.
    records_lineage: ClassVar[bool] = True
    durable: ClassVar[bool]

    def open_checkpointer(self, location: Path) -> Checkpointer:
        """Open (or reopen) the store at ``location`` (the suite's own)."""
        raise NotImplementedError

    def reopen(self, cp: Checkpointer, location: Path) -> Checkpointer:
        """Close ``cp`` and open the same store again (the suite's own)."""
        raise NotImplementedError

    def with_lineage(self, cp: Checkpointer) -> LineageCheckpointer:
        """``cp`` as a :class:`LineageCheckpointer` (skips the test when this
        backend records none: :attr:`records_lineage` is False)."""
        log: LineageCheckpointer = able(cp, self.records_lineage, LineageCheckpointer, "lineage")
        return log

    def test_a_fork_records_its_origin(self, cp: Checkpointer) -> None:
        log = self.with_lineage(cp)
        log.append("src", _events(5))
        log.fork("src", 3, "copy")
        origin = log.lineage("copy")
        assert origin == ForkOrigin("src", 3) and isinstance(origin, ForkOrigin)
        assert (origin.session_id, origin.seq) == ("src", 3)
        forks = log.forks("src")
        assert forks == [Fork("copy", 3)] and isinstance(forks[0], Fork)
        assert log.forks("copy") == []

    def test_only_forks_have_lineage(self, cp: Checkpointer) -> None:
        log = self.with_lineage(cp)
        log.append("plain", _events(2))
        log.truncate("plain", 1)
        assert log.lineage("plain") is None
        assert log.lineage("unknown") is None
        assert log.forks("plain") == [] and log.forks("unknown") == []

    def test_forks_are_direct_and_ordered_by_seq_then_id(self, cp: Checkpointer) -> None:
        log = self.with_lineage(cp)
        log.append("root", _events(4))
        log.fork("root", 2, "b")
        log.fork("root", 0, "z")
        log.fork("root", 2, "a")
        log.fork("a", 1, "grandchild")
        assert log.forks("root") == [Fork("z", 0), Fork("a", 2), Fork("b", 2)]
        assert log.forks("a") == [Fork("grandchild", 1)]
        # A fork of a fork names its direct source; the chain is followed by hand.
        assert log.lineage("grandchild") == ForkOrigin("a", 1)
        assert log.lineage("a") == ForkOrigin("root", 2)
        assert log.lineage("root") is None

    def test_the_fork_keeps_its_record_when_the_source_goes(self, cp: Checkpointer) -> None:
        log = self.with_lineage(cp)
        log.append("src", _events(5))
        log.fork("src", 4, "copy")
        log.truncate("src", 1)  # below the fork point
        assert log.lineage("copy") == ForkOrigin("src", 4)
        log.delete("src")
        assert log.lineage("copy") == ForkOrigin("src", 4)
        assert log.forks("src") == [Fork("copy", 4)]
        # Re-created under the same id: the record names the id, as it did.
        log.append("src", _events(1))
        assert log.lineage("src") is None
        assert log.forks("src") == [Fork("copy", 4)]
        assert [e.seq for e in log.read("copy")] == [1, 2, 3, 4]

    def test_the_record_is_the_forks_own(self, cp: Checkpointer) -> None:
        log = self.with_lineage(cp)
        log.append("src", _events(3))
        log.fork("src", 2, "copy")
        log.append("copy", _events(2))
        log.truncate("copy", 1)  # the fork's own writes keep its origin
        assert log.lineage("copy") == ForkOrigin("src", 2)
        log.delete("copy")
        assert log.lineage("copy") is None
        assert log.forks("src") == []
        log.append("copy", _events(1))  # a new session under the fork's old id
        assert log.lineage("copy") is None
        assert log.forks("src") == []

    def test_lineage_keeps_exact_ids(self, cp: Checkpointer) -> None:
        log = self.with_lineage(cp)
        source, fork = 'Src \u00e9 <b>"&', 'src \u00e9 <b>"&'  # differ by case only
        log.append(source, _events(2))
        log.fork(source, 1, fork)
        assert log.lineage(fork) == ForkOrigin(source, 1)
        assert log.forks(source) == [Fork(fork, 1)]
        assert log.lineage(source) is None

    def test_lineage_survives_a_reopen(self, cp: Checkpointer, location: Path) -> None:
        log = self.with_lineage(cp)
        if not self.durable:
            cp.close()
            pytest.skip("the store does not outlive the object")
        log.append("src", _events(3))
        log.fork("src", 2, "copy")
        reopened = self.reopen(log, location)
        try:
            assert isinstance(reopened, LineageCheckpointer)
            assert reopened.lineage("copy") == ForkOrigin("src", 2)
            assert reopened.forks("src") == [Fork("copy", 2)]
        finally:
            reopened.close()

    @pytest.mark.parametrize("bad", ["", "../x", "a/b", "\x00"])
    def test_lineage_refuses_bad_ids(self, cp: Checkpointer, bad: str) -> None:
        log = self.with_lineage(cp)
        with pytest.raises(InvalidSessionIdError):
            log.lineage(bad)
        with pytest.raises(InvalidSessionIdError):
            log.forks(bad)

    def test_lineage_on_a_closed_checkpointer_is_refused(self, cp: Checkpointer) -> None:
        log = self.with_lineage(cp)
        log.close()
        with pytest.raises(CheckpointerClosedError):
            log.lineage("s")
        with pytest.raises(CheckpointerClosedError):
            log.forks("s")
