"""The ``Checkpointer`` suite's idempotent-append part: :class:`AppendKeyConformance`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..errors import (
    CheckpointConflictError,
    IdempotencyKeyError,
    StorageDataError,
)
from ..log.contract import Checkpointer
from .log_suite import CheckpointerSuite, KeyRace, conversation, seqs
from .races import run_race


class AppendKeyConformance(CheckpointerSuite):
    """The append-key tests of :class:`~agentlog.testing.CheckpointerConformance`."""

    # -- idempotent appends ------------------------------------------------------------

    def keyed(self, cp: Checkpointer) -> Checkpointer:
        """``cp``, or a skip when this store takes no append keys."""
        if not self.takes_keys:
            pytest.skip("this store takes no append keys")
        return cp

    def test_a_repeated_key_writes_nothing_and_returns_the_first_head(
        self, cp: Checkpointer
    ) -> None:
        cp = self.keyed(cp)
        events = conversation(2)
        assert cp.append("s", events, key="step-1") == 2
        # A retry: with the head its first try saw (stale now), or none at all.
        assert cp.append("s", events, expected_head=0, key="step-1") == 2
        assert cp.append("s", events, key="step-1") == 2
        assert cp.head("s") == 2
        # The same events with their keys in another order are the same events.
        reordered = [dict(reversed(list(event.items()))) for event in events]
        assert cp.append("s", reordered, key="step-1") == 2
        assert cp.append("s", conversation(1, "b"), key="step-2") == 3
        assert cp.append("s", events, key="step-1") == 2  # the first head, not the current one
        assert seqs(cp.read("s")) == [1, 2, 3]
        # Keys are per session: the same key elsewhere is a new append.
        assert cp.append("other", events, key="step-1") == 2
        # A keyed append still checks expected_head when it is new.
        with pytest.raises(CheckpointConflictError):
            cp.append("s", events, expected_head=1, key="step-3")
        assert cp.head("s") == 3

    def test_a_key_with_other_events_is_refused_and_nothing_written(self, cp: Checkpointer) -> None:
        cp = self.keyed(cp)
        cp.append("s", conversation(2), key="k")
        for other in (conversation(2, "x"), conversation(3), conversation(1)):
            with pytest.raises(IdempotencyKeyError) as caught:
                cp.append("s", other, key="k")
            assert (caught.value.session_id, caught.value.key) == ("s", "k")
        assert cp.head("s") == 2
        assert [e.event for e in cp.read("s")] == conversation(2)

    @pytest.mark.parametrize("bad", ["", "a/b", "..", "x\x00y", 7, b"k", "k" * 256])
    def test_bad_keys_are_refused_and_nothing_written(self, cp: Checkpointer, bad: Any) -> None:
        cp = self.keyed(cp)
        with pytest.raises(StorageDataError):
            cp.append("s", conversation(1), key=bad)
        with pytest.raises(StorageDataError):
            cp.append("s", [], key=bad)
        assert cp.head("s") == 0

    def test_an_empty_keyed_append_is_not_recorded(self, cp: Checkpointer) -> None:
        cp = self.keyed(cp)
        assert cp.append("s", [], key="k") == 0
        assert cp.append("s", conversation(1), key="k") == 1
        assert cp.append("s", [], key="k") == 1

    def test_keys_live_with_their_events(self, cp: Checkpointer) -> None:
        """A truncate below an append forgets its key, a fork carries the keys
        of what it copies whole, a delete forgets every key."""
        cp = self.keyed(cp)
        cp.append("s", conversation(2), key="a")  # 1..2
        cp.append("s", conversation(2, "b"), key="b")  # 3..4
        cp.append("s", conversation(2, "c"), key="c")  # 5..6
        cp.fork("s", 4, "f")
        assert cp.append("f", conversation(2, "b"), key="b") == 4
        assert cp.append("f", conversation(2, "c"), key="c") == 6  # not copied: new
        cp.fork("s", 3, "g")  # cuts batch b: its key does not come along
        assert cp.append("g", conversation(2, "b"), key="b") == 5
        cp.truncate("s", 3)
        assert cp.append("s", conversation(2), key="a") == 2
        assert cp.append("s", conversation(2, "b"), key="b") == 5  # forgotten: written again
        assert cp.head("s") == 5
        cp.delete("s")
        assert cp.append("s", conversation(2, "c"), key="c") == 2
        assert seqs(cp.read("s")) == [1, 2]

    def test_keys_survive_a_reopen(self, cp: Checkpointer, location: Path) -> None:
        cp = self.keyed(cp)
        if not self.durable:
            pytest.skip("this store does not outlive its object")
        cp.append("s", conversation(2), key="k")
        cp = self.reopen(cp, location)
        try:
            assert cp.append("s", conversation(2), key="k") == 2
            with pytest.raises(IdempotencyKeyError):
                cp.append("s", conversation(1), key="k")
            assert cp.head("s") == 2
        finally:
            cp.close()

    def test_two_threads_race_one_key_per_round_exactly_once(self, cp: Checkpointer) -> None:
        cp = self.keyed(cp)
        rounds = self.race_rounds
        run_race(KeyRace(), rounds, store=cp)
        assert [e.event["round"] for e in cp.read("race")] == list(range(rounds))

    def test_two_processes_race_one_key_per_round_exactly_once(self, location: Path) -> None:
        if not self.multiprocess or not self.takes_keys:
            pytest.skip("this backend is for one process, or takes no keys")
        rounds = self.race_rounds
        self.open_checkpointer(location).close()
        run_race(KeyRace(), rounds, opener=self.process_opener(), location=location)
        cp = self.open_checkpointer(location)
        try:
            assert [e.event["round"] for e in cp.read("race")] == list(range(rounds))
        finally:
            cp.close()
