"""The ``ArtifactStore`` conformance suite: :class:`ArtifactStoreConformance`."""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import StorageConflictError, StorageDataError, StorageNotFoundError
from ..stores.artifacts import ArtifactInfo
from .harness import (
    HOSTILE_SESSION_IDS,
    StoreSuite,
    assert_delete_is_compare_and_set,
    assert_each_refused,
)
from .races import Race


class ReplaceRace(Race):
    """Every round both racers replace the artifact expecting the same
    revision (none in the first round); exactly one must win."""

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        expected = None if round_no == 0 else round_no - 1
        store.artifacts.put(
            "tenant", "report", f"{worker}:{round_no}".encode(), "text/plain", expected
        )
        return True

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        return (None if round_no == 0 else round_no - 1), round_no


class ArtifactStoreConformance(StoreSuite):
    """The :class:`agentlog.ArtifactStore` contract as tests.

    Implement :meth:`open_storage` returning an object with an ``artifacts``
    attribute and a ``close()`` method. :meth:`tamper` must change the
    stored bytes of an artifact behind the store's back (return ``False`` to
    skip that test for a store that cannot be tampered with).
    """

    race_rounds: ClassVar[int] = 30

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        """Flip stored bytes of the content ``sha256``; False if not possible."""
        return False

    def test_put_get_info_and_revisions(self, storage: Any) -> None:
        arts = storage.artifacts
        data = bytes(range(256)) * 5000  # more than one chunk
        info = arts.put("t", "img-1", data, "image/png", None, metadata={"w": 10, "tags": ["x"]})
        assert (info.revision, info.size, info.media_type) == (0, len(data), "image/png")
        assert info.sha256 == hashlib.sha256(data).hexdigest()
        got_info, got = arts.get("t", "img-1")
        assert (got, got_info) == (data, info)
        assert arts.info("t", "img-1").metadata == {"w": 10, "tags": ["x"]}
        replaced = arts.put("t", "img-1", b"new", "text/plain", 0)
        assert (replaced.revision, replaced.created_at) == (1, info.created_at)
        assert arts.get("t", "img-1")[1] == b"new"
        assert arts.put("t", "empty", b"", "application/octet-stream", None).size == 0
        assert arts.get("t", "empty")[1] == b""

    def test_streams_in_and_out(self, storage: Any) -> None:
        arts = storage.artifacts
        data = b"0123456789abcdef" * 300_000  # ~4.8 MB
        arts.put("t", "big", io.BytesIO(data), "application/octet-stream", None)
        with arts.open("t", "big") as reader:
            parts = []
            while True:
                part = reader.read(777_777)
                if not part:
                    break
                parts.append(part)
        assert b"".join(parts) == data

    def test_conflicts_write_nothing(self, storage: Any) -> None:
        arts = storage.artifacts
        arts.put("t", "a", b"one", "text/plain", None)
        for expected, actual in [(None, 0), (3, 0)]:
            with pytest.raises(StorageConflictError) as info:
                arts.put("t", "a", b"two", "text/plain", expected)
            assert (info.value.expected_revision, info.value.actual_revision) == (expected, actual)
        with pytest.raises(StorageConflictError):
            arts.put("t", "missing", b"x", "text/plain", 0)
        assert arts.get("t", "a")[1] == b"one"
        with pytest.raises(StorageNotFoundError):
            arts.info("t", "missing")

    def test_identical_content_is_shared_and_counted(self, storage: Any) -> None:
        arts = storage.artifacts
        a = arts.put("t", "a", b"same bytes", "text/plain", None)
        b = arts.put("t", "b", b"same bytes", "text/plain", None)
        c = arts.put("u", "c", b"same bytes", "text/plain", None)
        assert a.sha256 == b.sha256 == c.sha256
        arts.delete("t", "a", 0)
        assert arts.get("t", "b")[1] == b"same bytes"
        arts.put("t", "b", b"other", "text/plain", 0)
        assert arts.get("u", "c")[1] == b"same bytes"
        arts.delete("u", "c", 0)
        assert arts.get("t", "b")[1] == b"other"
        assert arts.put("t", "d", b"same bytes", "text/plain", None).size == 10
        assert arts.get("t", "d")[1] == b"same bytes"

    def test_list_returns_metadata_only_and_pages(self, storage: Any) -> None:
        arts = storage.artifacts
        for n in range(12):
            arts.put("t", f"art-{n:02d}", b"x" * n, "text/plain", None, metadata={"n": n})
        arts.put("other", "art-00", b"y", "text/plain", None)
        first = arts.list("t", limit=5)
        assert [i.artifact_id for i in first] == [f"art-{n:02d}" for n in range(5)]
        assert all(isinstance(i, ArtifactInfo) for i in first)
        assert not any(hasattr(i, "data") for i in first)
        rest = arts.list("t", after=first[-1].artifact_id, limit=100)
        assert [i.metadata["n"] for i in rest] == list(range(5, 12))
        assert [i.artifact_id for i in arts.list("other")] == ["art-00"]

    def test_delete_is_compare_and_set(self, storage: Any) -> None:
        arts = storage.artifacts
        arts.put("t", "a", b"1", "text/plain", None)
        assert_delete_is_compare_and_set(
            lambda revision: arts.delete("t", "a", revision),
            1,
            0,
            lambda: arts.get("t", "a"),
            lambda: arts.delete("t", "a", 0),
        )

    def test_tampered_bytes_are_detected_on_read(self, storage: Any, location: Path) -> None:
        info = storage.artifacts.put("t", "a", b"trust me" * 1000, "text/plain", None)
        if not self.tamper(storage, location, info.sha256):
            pytest.skip("this store cannot be tampered with from outside")
        with pytest.raises(StorageDataError, match="sha256"):
            storage.artifacts.get("t", "a")

    @pytest.mark.parametrize(
        ("data", "media_type", "metadata"),
        [
            ("text, not bytes", "text/plain", None),
            (12, "text/plain", None),
            (b"x", "plain", None),
            (b"x", "", None),
            (b"x", 5, None),
            (b"x", "text/plain", {"bad": math.nan}),
            (b"x", "text/plain", {"bad": {1, 2}}),
        ],
    )
    def test_bad_input_is_refused(
        self, storage: Any, data: Any, media_type: Any, metadata: Any
    ) -> None:
        with pytest.raises(StorageDataError):
            storage.artifacts.put("t", "a", data, media_type, None, metadata=metadata)
        assert storage.artifacts.list("t") == []

    def test_a_failing_stream_writes_nothing(self, storage: Any) -> None:
        class Broken:
            def __init__(self) -> None:
                self.calls = 0

            def read(self, size: int) -> bytes:
                self.calls += 1
                if self.calls > 2:
                    raise OSError("disk went away")
                return b"z" * size

        with pytest.raises(OSError):
            storage.artifacts.put("t", "a", Broken(), "application/octet-stream", None)
        assert storage.artifacts.list("t") == []
        assert storage.artifacts.put("t", "a", b"ok", "text/plain", None).revision == 0

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_ids_are_refused(self, storage: Any, hostile: Any) -> None:
        arts = storage.artifacts
        calls: list[Callable[[], Any]] = [
            lambda: arts.put(hostile, "a", b"x", "text/plain", None),
            lambda: arts.put("t", hostile, b"x", "text/plain", None),
            lambda: arts.get("t", hostile),
            lambda: arts.open(hostile, "a"),
            lambda: arts.list(hostile),
            lambda: arts.delete("t", hostile, 0),
        ]
        assert_each_refused(calls)

    def test_reopen_keeps_everything(self, storage: Any, location: Path) -> None:
        self.skip_unless_durable()
        info = storage.artifacts.put("t", "a", b"kept" * 100_000, "text/plain", None, metadata=[1])
        storage.close()
        with self.reopened(location) as reopened:
            assert reopened.artifacts.get("t", "a") == (info, b"kept" * 100_000)

    def test_two_threads_race_exactly_one_winner_per_revision(self, storage: Any) -> None:
        tallies = self.race_in_threads(storage, ReplaceRace())
        self.assert_one_winner_per_round(tallies)
        assert storage.artifacts.info("tenant", "report").revision == self.race_rounds - 1

    def test_two_processes_race_exactly_one_winner_per_revision(self, location: Path) -> None:
        with self.raced_in_processes(location, ReplaceRace()) as storage:
            assert storage.artifacts.info("tenant", "report").revision == self.race_rounds - 1
