"""The CheckpointStore: run state, interruptions and side effects (ADR-004).

A checkpoint is the resumable state of one agent run: its status, its state
(any JSON), why it stopped (``interruption``), the side effects it has asked
for, its trace context and, for a nested run, its parent. Like every store it
is tenant-scoped and written with compare-and-set revisions: a checkpoint is
created with ``expected_revision=None`` at revision 0 and every save adds one.

Side effects move only forward: ``pending → started → succeeded | failed |
unknown``, and an ``unknown`` one (the process died between starting it and
recording the result) is resolved to ``succeeded`` or ``failed`` once the host
has checked. With the revision check this gives exactly-once execution: two
resumers both try to move ``pending`` to ``started``; one save wins, the other
gets :class:`StorageConflictError` and must not perform the effect.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine import store_rows as R
from ..errors import StorageDataError
from ..events import decode_json
from .common import (
    EngineTransactions,
    LockedTransactions,
    Transactions,
    advance,
    check_name,
    check_page,
    check_revision,
    encode_value,
)

__all__ = [
    "RUN_STATUSES",
    "SIDE_EFFECT_STATES",
    "Checkpoint",
    "CheckpointStore",
    "InMemoryCheckpointStore",
    "SideEffect",
    "SqliteCheckpointStore",
]

#: Where a run can be. Waiting for a person and waiting for a side effect are
#: different states, so a host can list the runs that need approval.
RUN_STATUSES = frozenset(
    {
        "running",
        "interrupted",
        "awaiting_approval",
        "awaiting_side_effect",
        "completed",
        "failed",
        "cancelled",
    }
)

#: Where a side effect can be.
SIDE_EFFECT_STATES = frozenset({"pending", "started", "succeeded", "failed", "unknown"})

_NEXT_STATES: dict[str, frozenset[str]] = {
    "pending": frozenset({"started"}),
    "started": frozenset({"succeeded", "failed", "unknown"}),
    "unknown": frozenset({"succeeded", "failed"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
}


@dataclass(frozen=True, slots=True)
class SideEffect:
    """One side effect a run asked for, and how far it got."""

    id: str
    kind: str
    state: str = "pending"
    payload: Any = None
    result: Any = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A run's checkpoint as stored."""

    tenant_id: str
    run_id: str
    status: str
    state: Any
    revision: int
    session_id: str | None = None
    parent_run_id: str | None = None
    interruption: Any = None
    side_effects: tuple[SideEffect, ...] = field(default=())
    trace: Any = None
    created_at: float = 0.0
    updated_at: float = 0.0


def _resource(tenant_id: str, run_id: str) -> str:
    return f"checkpoint {tenant_id!r}/{run_id!r}"


def _check_status(status: object) -> str:
    if not isinstance(status, str) or status not in RUN_STATUSES:
        raise StorageDataError(
            f"unknown run status {status!r}; expected one of {', '.join(sorted(RUN_STATUSES))}"
        )
    return status


def _side_effects(items: Iterable[SideEffect | Mapping[str, Any]]) -> tuple[SideEffect, ...]:
    if isinstance(items, (Mapping, SideEffect, str, bytes)) or not isinstance(items, Iterable):
        raise StorageDataError(
            f"side_effects must be a list of SideEffect (or mappings), not {type(items).__name__}"
        )
    effects = []
    for item in items:
        if isinstance(item, Mapping):
            try:
                item = SideEffect(**item)
            except TypeError as exc:
                raise StorageDataError(f"side effect: {exc}") from None
        if not isinstance(item, SideEffect):
            raise StorageDataError(f"a side effect must be a SideEffect, not {type(item).__name__}")
        check_name("side effect id", item.id)
        check_name("side effect kind", item.kind)
        if not isinstance(item.state, str) or item.state not in SIDE_EFFECT_STATES:
            raise StorageDataError(f"side effect {item.id!r}: unknown state {item.state!r}")
        effects.append(item)
    if len({effect.id for effect in effects}) != len(effects):
        raise StorageDataError("side effect ids must be unique within a checkpoint")
    return tuple(effects)


def _check_transitions(
    resource: str, before: tuple[SideEffect, ...], after: tuple[SideEffect, ...]
) -> None:
    known = {effect.id: effect for effect in before}
    kept = {effect.id for effect in after}
    for effect in before:
        if effect.id not in kept:
            raise StorageDataError(f"{resource}: side effect {effect.id!r} cannot be dropped")
    for effect in after:
        old = known.get(effect.id)
        if old is None:
            if effect.state != "pending":
                raise StorageDataError(
                    f"{resource}: new side effect {effect.id!r} must start pending"
                )
        elif effect.state != old.state and effect.state not in _NEXT_STATES[old.state]:
            raise StorageDataError(
                f"{resource}: side effect {effect.id!r} cannot go {old.state} -> {effect.state}"
            )
        elif old is not None and effect.kind != old.kind:
            raise StorageDataError(f"{resource}: side effect {effect.id!r} changed its kind")
        elif old is not None and old.state != "pending" and effect.payload != old.payload:
            # What was claimed is what runs: a resumer must not act on other input.
            raise StorageDataError(
                f"{resource}: side effect {effect.id!r} changed its payload after it {old.state}"
            )


def _encode_body(checkpoint: Checkpoint) -> bytes:
    return encode_value(
        {
            "state": checkpoint.state,
            "interruption": checkpoint.interruption,
            "trace": checkpoint.trace,
            "side_effects": [
                {
                    "id": e.id,
                    "kind": e.kind,
                    "state": e.state,
                    "payload": e.payload,
                    "result": e.result,
                }
                for e in checkpoint.side_effects
            ],
        }
    )


def _from_row(
    tenant_id: str,
    run_id: str,
    session_id: str | None,
    parent_run_id: str | None,
    status: str,
    data: bytes,
    revision: int,
    created: float,
    updated: float,
) -> Checkpoint:
    try:
        body = decode_json(data)
        effects = tuple(SideEffect(**effect) for effect in body["side_effects"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageDataError(f"{_resource(tenant_id, run_id)}: corrupt ({exc})") from None
    return Checkpoint(
        tenant_id,
        run_id,
        status,
        body["state"],
        revision,
        session_id,
        parent_run_id,
        body["interruption"],
        effects,
        body["trace"],
        created,
        updated,
    )


class CheckpointStore(Transactions):
    """Run checkpoints, tenant-scoped, written with compare-and-set revisions."""

    @staticmethod
    def _next(
        checkpoint: Checkpoint, expected: int | None, current: Checkpoint | None, now: float
    ) -> Checkpoint:
        """The checkpoint to store over ``current``, or a conflict."""
        resource = _resource(checkpoint.tenant_id, checkpoint.run_id)
        revision = advance(resource, expected, None if current is None else current.revision)
        if current is not None:
            _check_transitions(resource, current.side_effects, checkpoint.side_effects)
        return replace(
            checkpoint,
            revision=revision,
            created_at=now if current is None else current.created_at,
            updated_at=now,
        )

    @staticmethod
    def _filters(
        tenant_id: str,
        run_id: str | None,
        session_id: str | None,
        status: str | None,
        parent_run_id: str | None,
        after: str | None,
        limit: int,
    ) -> tuple[str, dict[str, str], str | None, int]:
        tenant = check_name("tenant_id", tenant_id)
        filters = {}
        for column, value in (
            ("run_id", run_id),
            ("session_id", session_id),
            ("parent_run_id", parent_run_id),
        ):
            if value is not None:
                filters[column] = check_name(column, value)
        if status is not None:
            filters["status"] = _check_status(status)
        start, count = check_page(after, limit)
        return tenant, filters, start, count

    # -- the contract, written once on the row primitives below ---------------------

    def save(
        self,
        tenant_id: str,
        run_id: str,
        expected_revision: int | None,
        *,
        status: str,
        state: Any,
        session_id: str | None = None,
        parent_run_id: str | None = None,
        interruption: Any = None,
        side_effects: Iterable[SideEffect | Mapping[str, Any]] = (),
        trace: Any = None,
    ) -> Checkpoint:
        """Create (``expected_revision=None``) or replace the run's checkpoint."""
        tenant, run = check_name("tenant_id", tenant_id), check_name("run_id", run_id)
        expected = check_revision(expected_revision)
        status = _check_status(status)
        session = None if session_id is None else check_name("session_id", session_id)
        parent = None if parent_run_id is None else check_name("parent_run_id", parent_run_id)
        if parent == run:
            raise StorageDataError("a run cannot be its own parent")
        checkpoint = Checkpoint(
            tenant, run, status, state, -1, session, parent, interruption,
            _side_effects(side_effects), trace,
        )  # fmt: skip
        data = _encode_body(checkpoint)
        key = (checkpoint.tenant_id, checkpoint.run_id)

        def work(ctx: Any) -> Checkpoint:
            row = self._get_row(ctx, key)
            stored = self._next(checkpoint, expected, None if row is None else _from_row(*row),
                                time.time())  # fmt: skip
            new_row = (
                stored.tenant_id, stored.run_id, stored.session_id, stored.parent_run_id,
                stored.status, data, stored.revision, stored.created_at, stored.updated_at,
            )  # fmt: skip
            self._put_row(ctx, new_row)
            return _from_row(*new_row)

        return self._atomic("checkpoint save", work)

    def load(self, tenant_id: str, run_id: str) -> Checkpoint:
        """The checkpoint, or :class:`StorageNotFoundError`."""
        key = (check_name("tenant_id", tenant_id), check_name("run_id", run_id))
        row = self._existing(
            "checkpoint load", _resource(*key), lambda ctx: self._get_row(ctx, key)
        )
        return _from_row(*row)

    def list(
        self,
        tenant_id: str,
        *,
        run_id: str | None = None,
        session_id: str | None = None,
        status: str | None = None,
        parent_run_id: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> builtins.list[Checkpoint]:
        """Checkpoints matching every filter given, in run id order after ``after``."""
        tenant, filters, start, count = self._filters(
            tenant_id, run_id, session_id, status, parent_run_id, after, limit
        )
        return [_from_row(*row) for row in self._select(tenant, filters, start, count)]

    def delete(self, tenant_id: str, run_id: str, expected_revision: int) -> None:
        """Remove the checkpoint if it is at ``expected_revision``."""
        key = (check_name("tenant_id", tenant_id), check_name("run_id", run_id))
        self._checked_delete(
            "checkpoint delete",
            _resource(*key),
            expected_revision,
            lambda ctx: self._get_row(ctx, key),
            lambda row: row[6],
            lambda ctx, row: self._delete_row(ctx, key),
        )

    # -- what an implementation supplies: rows of the checkpoints table ----------------
    # A row is (tenant, run_id, session_id, parent_run_id, status, data, revision,
    # created, updated); ``ctx`` is whatever _atomic/_reading hand to their work.
    # The other stores supply row operations of the same kind (get, put,
    # delete, list), alike in shape, on their own keys and tables.

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> tuple[Any, ...] | None:
        raise NotImplementedError

    def _put_row(self, ctx: Any, row: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _delete_row(self, ctx: Any, key: tuple[str, str]) -> None:
        raise NotImplementedError

    def _select(
        self, tenant: str, filters: dict[str, str], after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        raise NotImplementedError


class InMemoryCheckpointStore(LockedTransactions, CheckpointStore):
    """A :class:`CheckpointStore` in this process's memory (JSON kept encoded)."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: dict[tuple[str, str], tuple[Any, ...]] = {}

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> tuple[Any, ...] | None:
        return self._rows.get(key)

    def _put_row(self, ctx: Any, row: tuple[Any, ...]) -> None:
        self._rows[(row[0], row[1])] = row

    def _delete_row(self, ctx: Any, key: tuple[str, str]) -> None:
        del self._rows[key]

    def _select(
        self, tenant: str, filters: dict[str, str], after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        columns = {"run_id": 1, "session_id": 2, "parent_run_id": 3, "status": 4}
        with self._lock:
            return sorted(
                row
                for (t, run), row in self._rows.items()
                if t == tenant
                and (after is None or run > after)
                and all(row[columns[c]] == v for c, v in filters.items())
            )[:limit]


class SqliteCheckpointStore(EngineTransactions, CheckpointStore):
    """A :class:`CheckpointStore` in the SQLite file of the session log.

    Listing by session, status and parent run is served by indexes on
    ``(tenant, column, run_id)``.
    """

    def _get_row(self, ctx: Any, key: tuple[str, str]) -> tuple[Any, ...] | None:
        return R.checkpoint(ctx, *key)

    def _put_row(self, ctx: Any, row: tuple[Any, ...]) -> None:
        R.put_checkpoint(ctx, row)

    def _delete_row(self, ctx: Any, key: tuple[str, str]) -> None:
        R.delete_checkpoint(ctx, *key)

    def _select(
        self, tenant: str, filters: dict[str, str], after: str | None, limit: int
    ) -> builtins.list[tuple[Any, ...]]:
        return self._reading(
            "checkpoint list", lambda conn: R.checkpoints(conn, tenant, filters, after, limit)
        )
