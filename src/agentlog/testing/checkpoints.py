"""The ``CheckpointStore`` conformance suite: :class:`CheckpointStoreConformance`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import StorageConflictError, StorageDataError, StorageNotFoundError
from ..stores.checkpoints import Checkpoint, SideEffect
from .harness import (
    HOSTILE_SESSION_IDS,
    StoreSuite,
    assert_delete_is_compare_and_set,
    assert_each_refused,
)
from .races import Race


class StartEffectRace(Race):
    """Every round both racers try to claim the round's side effect, the way a
    resumer must: load, and only if it is still pending, save it as started at
    the revision seen. Exactly one may win; the loser either sees it started
    or gets a conflict."""

    def step(self, store: Any, worker: int, round_no: int) -> bool:
        current = store.checkpoints.load("tenant", f"run-{round_no}")
        if current.side_effects[0].state != "pending":
            return False  # someone else already claimed it
        started = [
            SideEffect(e.id, e.kind, "started", e.payload, {"by": worker})
            for e in current.side_effects
        ]
        store.checkpoints.save(
            "tenant", current.run_id, current.revision,
            status="awaiting_side_effect", state=current.state, side_effects=started,
        )  # fmt: skip
        return True

    def conflict(self, round_no: int) -> tuple[int | None, int | None]:
        return 0, 1


class CheckpointStoreConformance(StoreSuite):
    """The :class:`agentlog.CheckpointStore` contract as tests.

    Implement :meth:`open_storage` returning an object with a ``checkpoints``
    attribute and a ``close()`` method.
    """

    race_rounds: ClassVar[int] = 40

    @staticmethod
    def _awaiting(storage: Any, run_id: str, **fields: Any) -> Checkpoint:
        return storage.checkpoints.save(  # type: ignore[no-any-return]
            "t", run_id, None, status="awaiting_approval", state={"step": 3},
            side_effects=[SideEffect("fx-1", "send_email", payload={"to": "a@b.c"})], **fields,
        )  # fmt: skip

    def test_every_field_round_trips_and_revisions_count(self, storage: Any) -> None:
        cps = storage.checkpoints
        first = cps.save(
            "t", "run-1", None, status="running", state={"messages": 3, "plan": ["a", "b"]},
            session_id="s-1", interruption=None, trace={"trace_id": "abc", "span_id": "01"},
        )  # fmt: skip
        assert (first.revision, first.status, first.session_id) == (0, "running", "s-1")
        time.sleep(0.01)
        second = cps.save(
            "t", "run-1", 0, status="interrupted", state={"messages": 4},
            session_id="s-1", interruption={"reason": "user_cancel", "at": 4},
            side_effects=[{"id": "fx", "kind": "http_post", "payload": {"url": "/x"}}],
            trace={"trace_id": "abc"},
        )  # fmt: skip
        loaded = cps.load("t", "run-1")
        assert loaded == second
        assert (loaded.revision, loaded.created_at) == (1, first.created_at)
        assert loaded.updated_at > first.updated_at
        assert loaded.interruption == {"reason": "user_cancel", "at": 4}
        assert loaded.side_effects == (SideEffect("fx", "http_post", "pending", {"url": "/x"}),)
        assert loaded.trace == {"trace_id": "abc"}

    def test_conflicts_write_nothing(self, storage: Any) -> None:
        cps = storage.checkpoints
        cps.save("t", "r", None, status="running", state=1)
        for expected, actual in [(None, 0), (1, 0), (7, 0)]:
            with pytest.raises(StorageConflictError) as info:
                cps.save("t", "r", expected, status="failed", state=2)
            assert (info.value.expected_revision, info.value.actual_revision) == (expected, actual)
        with pytest.raises(StorageConflictError) as info:
            cps.save("t", "missing", 0, status="running", state=1)
        assert info.value.actual_revision is None
        assert (cps.load("t", "r").status, cps.load("t", "r").revision) == ("running", 0)
        with pytest.raises(StorageNotFoundError):
            cps.load("t", "missing")

    def test_side_effects_only_move_forward(self, storage: Any) -> None:
        cps = storage.checkpoints
        cp = self._awaiting(storage, "r")

        def save(
            state: str, *extra: SideEffect, status: str = "awaiting_side_effect"
        ) -> Checkpoint:
            effects = [SideEffect("fx-1", "send_email", state, {"to": "a@b.c"}), *extra]
            saved: Checkpoint = cps.save(
                "t", "r", cps.load("t", "r").revision, status=status, state={},
                side_effects=effects,
            )  # fmt: skip
            return saved

        for bad in ("succeeded", "failed", "unknown"):
            with pytest.raises(StorageDataError, match="pending -> "):
                save(bad)
        with pytest.raises(StorageDataError, match="must start pending"):
            save("pending", SideEffect("fx-2", "x", "started"))
        with pytest.raises(StorageDataError, match="dropped"):
            cps.save("t", "r", cp.revision, status="running", state={})
        with pytest.raises(StorageDataError, match="kind"):
            cps.save("t", "r", cp.revision, status="running", state={},
                     side_effects=[SideEffect("fx-1", "other")])  # fmt: skip
        with pytest.raises(StorageDataError, match="unique"):
            save("pending", SideEffect("fx-1", "send_email"))
        with pytest.raises(StorageDataError):
            save("exploded")
        assert cps.load("t", "r").revision == cp.revision  # nothing written
        save("started")
        with pytest.raises(StorageDataError, match="started -> pending"):
            save("pending")
        redirected = SideEffect("fx-1", "send_email", "succeeded", {"to": "evil@b.c"})
        with pytest.raises(StorageDataError, match="changed its payload after it started"):
            cps.save("t", "r", cps.load("t", "r").revision, status="running", state={},
                     side_effects=[redirected])  # fmt: skip
        save("unknown")
        save("succeeded", status="completed")
        with pytest.raises(StorageDataError, match="succeeded -> failed"):
            save("failed")
        final = cps.load("t", "r")
        assert (final.status, final.side_effects[0].state, final.revision) == (
            "completed", "succeeded", cp.revision + 3,
        )  # fmt: skip

    def test_listing_by_run_session_status_and_parent(self, storage: Any) -> None:
        cps = storage.checkpoints
        cps.save("t", "a", None, status="running", state=0, session_id="s1")
        cps.save("t", "b", None, status="awaiting_approval", state=0, session_id="s1")
        cps.save("t", "c", None, status="awaiting_side_effect", state=0, session_id="s2")
        cps.save("t", "a.1", None, status="running", state=0, session_id="s1", parent_run_id="a")
        cps.save("t", "a.2", None, status="completed", state=0, session_id="s1", parent_run_id="a")
        cps.save("other", "a", None, status="running", state=0, session_id="s1")

        def ids(**filters: Any) -> list[str]:
            return [cp.run_id for cp in cps.list("t", **filters)]

        assert ids() == ["a", "a.1", "a.2", "b", "c"]
        assert ids(session_id="s1") == ["a", "a.1", "a.2", "b"]
        assert ids(status="awaiting_approval") == ["b"]
        assert ids(status="awaiting_side_effect") == ["c"]
        assert ids(parent_run_id="a") == ["a.1", "a.2"]
        assert ids(run_id="c") == ["c"]
        assert ids(session_id="s1", status="running") == ["a", "a.1"]
        assert ids(after="a.2", limit=1) == ["b"]
        assert [cp.run_id for cp in cps.list("other")] == ["a"]
        with pytest.raises(StorageDataError):
            cps.list("t", status="sleeping")
        with pytest.raises(StorageDataError):
            cps.list("t", limit=0)

    def test_delete_is_compare_and_set(self, storage: Any) -> None:
        cps = storage.checkpoints
        cps.save("t", "r", None, status="running", state=0)
        cps.save("t", "r", 0, status="completed", state=1)
        assert_delete_is_compare_and_set(
            lambda revision: cps.delete("t", "r", revision),
            0,
            1,
            lambda: cps.load("t", "r"),
            lambda: cps.delete("t", "r", 1),
        )

    @pytest.mark.parametrize(
        "fields",
        [
            {"status": "sleeping"},
            {"state": math.nan},
            {"state": {1, 2}},
            {"interruption": b"x"},
            {"trace": {"t": datetime(2024, 1, 1)}},
            {"session_id": "../x"},
            {"parent_run_id": "r"},
            {"side_effects": ["not an effect"]},
            {"side_effects": [{"id": "x"}]},
            {"side_effects": [SideEffect("", "kind")]},
            {"status": ["running"]},
            {"status": None},
            {"side_effects": None},
            {"side_effects": 5},
            {"side_effects": "fx"},
            {"side_effects": {"id": "fx", "kind": "k"}},
            {"side_effects": [{"id": "fx", "kind": "kind", "state": ["pending"]}]},
        ],
    )
    def test_bad_input_is_refused(self, storage: Any, fields: dict[str, Any]) -> None:
        arguments: dict[str, Any] = {"status": "running", "state": 0}
        arguments.update(fields)
        with pytest.raises(StorageDataError):
            storage.checkpoints.save("t", "r", None, **arguments)
        assert storage.checkpoints.list("t") == []

    @pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
    def test_hostile_ids_are_refused(self, storage: Any, hostile: Any) -> None:
        cps = storage.checkpoints
        calls: list[Callable[[], Any]] = [
            lambda: cps.save(hostile, "r", None, status="running", state=0),
            lambda: cps.save("t", hostile, None, status="running", state=0),
            lambda: cps.load("t", hostile),
            lambda: cps.list(hostile),
            lambda: cps.delete("t", hostile, 0),
        ]
        assert_each_refused(calls)

    def test_reopen_keeps_everything(self, storage: Any, location: Path) -> None:
        self.skip_unless_durable()
        saved = self._awaiting(storage, "r", session_id="s", trace={"id": 1})
        storage.close()
        with self.reopened(location) as reopened:
            assert reopened.checkpoints.load("t", "r") == saved

    def _prepare_race(self, storage: Any) -> None:
        for round_no in range(self.race_rounds):
            storage.checkpoints.save(
                "tenant", f"run-{round_no}", None, status="awaiting_approval", state={},
                side_effects=[SideEffect("fx", "charge_card")],
            )  # fmt: skip

    def test_two_threads_race_to_start_a_side_effect(self, storage: Any) -> None:
        self._prepare_race(storage)
        tallies = self.race_in_threads(storage, StartEffectRace())
        self.assert_one_winner_per_round(tallies)
        for round_no in range(self.race_rounds):
            checkpoint = storage.checkpoints.load("tenant", f"run-{round_no}")
            assert (checkpoint.revision, checkpoint.side_effects[0].state) == (1, "started")

    def test_two_processes_race_to_start_a_side_effect(self, location: Path) -> None:
        self.skip_unless_multiprocess()
        with self.reopened(location) as storage:
            self._prepare_race(storage)
        outcomes = self.race_in_processes(location, StartEffectRace())
        self.assert_one_winner_per_round(outcomes)
