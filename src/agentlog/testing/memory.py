"""The ``MemoryStore`` conformance suite: :class:`MemoryStoreConformance`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import StorageConflictError, StorageDataError, StorageNotFoundError
from .harness import HOSTILE_SESSION_IDS, StoreSuite, assert_each_refused
from .races import Race


class CounterRace(Race):
    """Every round both racers write the counter expecting the same revision
    (none in the first round); exactly one must win."""

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        expected = None if round_no == 0 else round_no - 1
        store.memory.put(
            "tenant", "race", "counter", {"worker": worker, "round": round_no}, expected
        )
        return True

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        return (None if round_no == 0 else round_no - 1), round_no


class MemoryStoreConformance(StoreSuite):
    """The :class:`agentlog.MemoryStore` contract as tests.

    Implement :meth:`open_storage` returning an object with a ``memory``
    attribute and a ``close()`` method (a ``SqliteStorage``, say).
    """

    race_rounds: ClassVar[int] = 60

    def test_create_read_update(self, storage: Any) -> None:
        memory = storage.memory
        before = time.time()
        created = memory.put("t", "prefs", "theme", {"mode": "dark"}, None)
        assert (created.revision, created.value) == (0, {"mode": "dark"})
        assert (created.tenant_id, created.namespace, created.key) == ("t", "prefs", "theme")
        assert before - 1 <= created.created_at == created.updated_at <= time.time() + 1
        time.sleep(0.01)
        updated = memory.put("t", "prefs", "theme", {"mode": "light"}, 0)
        assert updated.revision == 1
        assert updated.created_at == created.created_at
        assert updated.updated_at > created.updated_at
        got = memory.get("t", "prefs", "theme")
        assert (got.value, got.revision) == ({"mode": "light"}, 1)

    def test_conflicts_write_nothing(self, storage: Any) -> None:
        memory = storage.memory
        memory.put("t", "ns", "k", 1, None)
        memory.put("t", "ns", "k", 2, 0)
        for expected, actual in [(None, 1), (0, 1), (5, 1)]:
            with pytest.raises(StorageConflictError) as info:
                memory.put("t", "ns", "k", "lost", expected)
            assert (info.value.expected_revision, info.value.actual_revision) == (expected, actual)
        with pytest.raises(StorageConflictError) as info:
            memory.put("t", "ns", "missing", "x", 0)
        assert info.value.actual_revision is None
        assert (memory.get("t", "ns", "k").value, memory.get("t", "ns", "k").revision) == (2, 1)
        with pytest.raises(StorageNotFoundError):
            memory.get("t", "ns", "missing")

    def test_tenants_and_namespaces_are_part_of_the_key(self, storage: Any) -> None:
        memory = storage.memory
        memory.put("a", "ns", "k", "a-ns", None)
        memory.put("b", "ns", "k", "b-ns", None)
        memory.put("a", "other", "k", "a-other", None)
        assert memory.get("a", "ns", "k").value == "a-ns"
        assert memory.get("b", "ns", "k").value == "b-ns"
        assert memory.get("a", "other", "k").value == "a-other"
        memory.put("b", "ns", "k", "b2", 0)
        assert memory.get("a", "ns", "k").revision == 0
        assert [r.key for r in memory.list("b", "ns")] == ["k"]
        assert memory.list("c", "ns") == []

    def test_list_pages_by_key(self, storage: Any) -> None:
        memory = storage.memory
        keys = [f"key-{n:02d}" for n in range(25)]
        for key in reversed(keys):
            memory.put("t", "ns", key, {"k": key}, None)
        memory.put("t", "elsewhere", "key-00", 0, None)
        pages, after = [], None
        while True:
            page = memory.list("t", "ns", after=after, limit=10)
            if not page:
                break
            pages.append([r.key for r in page])
            after = page[-1].key
        assert [len(p) for p in pages] == [10, 10, 5]
        assert [key for page in pages for key in page] == keys
        assert [r.value for r in memory.list("t", "ns", limit=2)] == [
            {"k": "key-00"},
            {"k": "key-01"},
        ]
        for bad in (0, -1, 1001, "5", True):
            with pytest.raises(StorageDataError):
                memory.list("t", "ns", limit=bad)

    def test_delete_is_compare_and_set(self, storage: Any) -> None:
        memory = storage.memory
        memory.put("t", "ns", "k", "v", None)
        memory.put("t", "ns", "k", "v2", 0)
        with pytest.raises(StorageConflictError):
            memory.delete("t", "ns", "k", 0)
        assert memory.get("t", "ns", "k").value == "v2"
        memory.delete("t", "ns", "k", 1)
        with pytest.raises(StorageNotFoundError):
            memory.get("t", "ns", "k")
        with pytest.raises(StorageNotFoundError):
            memory.delete("t", "ns", "k", 1)
        assert memory.put("t", "ns", "k", "again", None).revision == 0

    def test_values_round_trip_and_are_copies(self, storage: Any) -> None:
        memory = storage.memory
        values: list[Any] = [
            None, True, 0, -(2**63), 2**63 - 1, 1.5e-300, "", "héllo 🚀 \u2028",
            [], {}, [1, [2, [3]]], {"nested": {"list": [None, 1.0, "x"]}},
        ]  # fmt: skip
        for n, value in enumerate(values):
            memory.put("t", "ns", f"v{n}", value, None)
        assert [memory.get("t", "ns", f"v{n}").value for n in range(len(values))] == values
        record = memory.get("t", "ns", "v11")
        record.value["nested"]["list"].append("changed")
        assert memory.get("t", "ns", "v11").value == values[11]
        with pytest.raises(AttributeError):
            record.revision = 9

    @pytest.mark.parametrize(
        "value",
        [math.nan, math.inf, {1, 2}, b"bytes", object(), {1: "int key"}, datetime(2024, 1, 1)],
    )
    def test_values_json_cannot_hold_are_refused(self, storage: Any, value: Any) -> None:
        with pytest.raises(StorageDataError):
            storage.memory.put("t", "ns", "k", {"x": value}, None)
        with pytest.raises(StorageNotFoundError):
            storage.memory.get("t", "ns", "k")

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_names_are_refused(self, storage: Any, hostile: Any) -> None:
        memory = storage.memory
        calls: list[Callable[[], Any]] = [
            lambda: memory.put(hostile, "ns", "k", 1, None),
            lambda: memory.put("t", hostile, "k", 1, None),
            lambda: memory.put("t", "ns", hostile, 1, None),
            lambda: memory.get(hostile, "ns", "k"),
            lambda: memory.list("t", hostile),
            lambda: memory.delete("t", "ns", hostile, 0),
        ]
        assert_each_refused(calls)
        assert memory.list("t", "ns") == []

    @pytest.mark.parametrize("bad", [-1, "0", 1.0, True])
    def test_bad_revisions_are_refused(self, storage: Any, bad: Any) -> None:
        storage.memory.put("t", "ns", "k", 1, None)
        with pytest.raises(StorageDataError):
            storage.memory.put("t", "ns", "k", 2, bad)
        with pytest.raises(StorageDataError):
            storage.memory.delete("t", "ns", "k", bad)
        assert storage.memory.get("t", "ns", "k").revision == 0

    def test_reopen_keeps_everything(self, storage: Any, location: Path) -> None:
        self.skip_unless_durable()
        storage.memory.put("t", "ns", "k", {"v": 1}, None)
        storage.memory.put("t", "ns", "k", {"v": 2}, 0)
        storage.memory.put("u", "ns", "k", [1], None)
        storage.close()
        with self.reopened(location) as reopened:
            record = reopened.memory.get("t", "ns", "k")
            assert (record.value, record.revision) == ({"v": 2}, 1)
            assert reopened.memory.get("u", "ns", "k").value == [1]
            reopened.memory.put("t", "ns", "k", {"v": 3}, 1)

    def test_two_threads_race_exactly_one_winner_per_revision(self, storage: Any) -> None:
        tallies = self.race_in_threads(storage, CounterRace())
        self.assert_one_winner_per_round(tallies)
        final = storage.memory.get("tenant", "race", "counter")
        assert (final.revision, final.value["round"]) == (self.race_rounds - 1,) * 2

    def test_two_processes_race_exactly_one_winner_per_revision(self, location: Path) -> None:
        with self.raced_in_processes(location, CounterRace()) as storage:
            final = storage.memory.get("tenant", "race", "counter")
            assert (final.revision, final.value["round"]) == (self.race_rounds - 1,) * 2
