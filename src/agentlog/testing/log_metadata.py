"""The ``Checkpointer`` suite's session-metadata part: :class:`MetadataConformance`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..errors import (
    CheckpointerClosedError,
    InvalidSessionIdError,
    StorageConflictError,
    StorageDataError,
)
from ..events import (
    SessionListing,
    SessionMetadata,
)
from ..log.contract import Checkpointer, MetadataCheckpointer
from .log_suite import CheckpointerSuite, MetadataRace, conversation
from .races import run_race


class MetadataConformance(CheckpointerSuite):
    """The metadata tests of :class:`~agentlog.testing.CheckpointerConformance`."""

    # -- metadata ---------------------------------------------------------------------

    def with_metadata(self, cp: Checkpointer) -> MetadataCheckpointer:
        """``cp`` as a :class:`MetadataCheckpointer` (skips the test when this
        backend keeps no metadata: :attr:`stores_metadata` is False)."""
        if not self.stores_metadata:
            cp.close()
            pytest.skip("this backend has no place for session metadata")
        assert isinstance(cp, MetadataCheckpointer), f"{type(cp).__name__} keeps no metadata"
        return cp

    def test_metadata_compare_and_set(self, cp: Checkpointer) -> None:
        log = self.with_metadata(cp)
        assert log.metadata("s") == SessionMetadata(None, 0)
        value = {"title": "Fix the build", "tags": ["ci", "urgent"], "n": 1, "ok": True}
        first = log.set_metadata("s", value, 0)
        assert first > 0
        assert log.metadata("s") == SessionMetadata(value, first)
        # Created, empty and listed; list() rows still unpack into three names.
        assert log.head("s") == 0
        [(session_id, mtime, head)] = log.list()
        assert (session_id, head) == ("s", 0)
        assert log.list(with_metadata=True) == [SessionListing("s", mtime, 0, value, first)]
        second = log.set_metadata("s", ["any", "json"], first)
        assert second > first
        for stale in (0, first, second + 1):
            with pytest.raises(StorageConflictError) as caught:
                log.set_metadata("s", "lost", stale)
            assert (caught.value.expected_revision, caught.value.actual_revision) == (
                stale,
                second,
            )
        assert log.metadata("s") == SessionMetadata(["any", "json"], second)
        assert log.set_metadata("s", None, second) > second
        assert log.metadata("s").value is None
        with pytest.raises(StorageConflictError):
            log.set_metadata("other", 1, 1)  # an unknown session is at revision 0
        assert log.metadata("other") == SessionMetadata(None, 0)
        assert [info.id for info in log.list()] == ["s"]

    def test_every_write_advances_the_revision(self, cp: Checkpointer) -> None:
        log = self.with_metadata(cp)
        log.append("s", conversation(3))
        seen = [log.metadata("s").revision]
        log.append("s", conversation(1))
        seen.append(log.metadata("s").revision)
        revision = log.set_metadata("s", {"title": "t"}, seen[-1])
        seen.append(revision)
        log.truncate("s", 1)
        seen.append(log.metadata("s").revision)
        log.append("s", conversation(3))  # back to the head it had: still a new revision
        seen.append(log.metadata("s").revision)
        assert seen == sorted(set(seen)), seen
        with pytest.raises(StorageConflictError):
            log.set_metadata("s", "stale", revision)
        assert log.metadata("s").value == {"title": "t"}  # appends and truncates keep it
        assert log.head("s") == 4

    def test_metadata_across_fork_delete_and_reopen(self, cp: Checkpointer, location: Path) -> None:
        log = self.with_metadata(cp)
        log.append("s", conversation(2))
        revision = log.set_metadata("s", {"title": "kept"}, log.metadata("s").revision)
        log.fork("s", 1, "fork")
        assert log.metadata("fork").value is None  # a fork starts without metadata
        log.set_metadata("gone", "x", 0)
        log.delete("gone")
        assert log.metadata("gone") == SessionMetadata(None, 0)
        if self.durable:
            log = self.with_metadata(self.reopen(log, location))
        try:
            assert log.metadata("s") == SessionMetadata({"title": "kept"}, revision)
            assert log.metadata("gone") == SessionMetadata(None, 0)
            assert log.set_metadata("s", {"title": "new"}, revision) > revision
            assert log.append("s", conversation(1), expected_head=2) == 3
            listed = {row.id: row for row in log.list(with_metadata=True)}
            assert listed["s"].metadata == {"title": "new"}
            assert listed["s"].head == 3
            assert listed["fork"].metadata is None
        finally:
            log.close()

    @pytest.mark.parametrize("bad", [float("nan"), {1, 2}, b"bytes", {"k": object()}])
    def test_bad_metadata_is_refused_and_nothing_changes(self, cp: Checkpointer, bad: Any) -> None:
        log = self.with_metadata(cp)
        revision = log.set_metadata("s", {"title": "t"}, 0)
        with pytest.raises(StorageDataError):
            log.set_metadata("s", bad, revision)
        bad_revisions: list[Any] = [-1, "1", 1.5, True, None]
        for revision_bad in bad_revisions:
            with pytest.raises(StorageDataError):
                log.set_metadata("s", "x", revision_bad)
        with pytest.raises(InvalidSessionIdError):
            log.set_metadata("../x", "x", 0)
        with pytest.raises(InvalidSessionIdError):
            log.metadata("a/b")
        assert log.metadata("s") == SessionMetadata({"title": "t"}, revision)
        log.close()
        with pytest.raises(CheckpointerClosedError):
            log.metadata("s")
        with pytest.raises(CheckpointerClosedError):
            log.set_metadata("s", "x", revision)

    def test_two_threads_race_metadata_exactly_one_winner_per_round(self, cp: Checkpointer) -> None:
        log = self.with_metadata(cp)
        rounds = self.race_rounds
        tallies = run_race(MetadataRace(), rounds, store=log)
        assert sum(wins for _, wins, _ in tallies) == rounds
        assert log.metadata("race").revision == rounds
        assert log.metadata("race").value["round"] == rounds - 1

    def test_two_processes_race_metadata_exactly_one_winner_per_round(self, location: Path) -> None:
        self.with_metadata(self.open_checkpointer(location)).close()
        if not self.multiprocess:
            pytest.skip("this backend is for one process")
        rounds = self.race_rounds
        outcomes = run_race(MetadataRace(), rounds, opener=self.process_opener(), location=location)
        assert sum(wins for _, wins, _ in outcomes) == rounds
        log = self.with_metadata(self.open_checkpointer(location))
        try:
            value, revision = log.metadata("race")
            assert revision == rounds
            assert value["round"] == rounds - 1
            assert value["worker"] in (0, 1)
        finally:
            log.close()
