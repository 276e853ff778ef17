"""The error classes: typed, and picklable with their fields."""

from __future__ import annotations

import pickle

import pytest

from agentlog import (
    CheckpointConflictError,
    EventsPrunedError,
    IdempotencyKeyError,
    SessionTruncatedError,
    StorageConflictError,
    UnserializableEventError,
)


def test_error_classes_are_typed_and_picklable() -> None:
    error = UnserializableEventError(3, "bad")
    assert isinstance(error, ValueError) and isinstance(error, TypeError)
    assert pickle.loads(pickle.dumps(error)).index == 3
    conflict = pickle.loads(pickle.dumps(CheckpointConflictError("s", 1, 2)))
    assert (conflict.session_id, conflict.expected, conflict.actual) == ("s", 1, 2)


def test_events_pruned_error_is_typed_and_picklable() -> None:
    error = EventsPrunedError("s", 3, 46, "truncate to 50 or later")
    assert isinstance(error, LookupError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.session_id, copy.seq, copy.first_retained, copy.detail) == (
        "s", 3, 46, "truncate to 50 or later",
    )  # fmt: skip
    assert str(copy) == str(error)
    assert "before seq 46 were pruned" in str(error)


@pytest.mark.parametrize(
    ("error", "fields"),
    [
        (SessionTruncatedError("s", 9, 4), {"session_id": "s", "seq": 9, "head": 4}),
        (IdempotencyKeyError("s", "k-1"), {"session_id": "s", "key": "k-1"}),
        (
            StorageConflictError("run r", 2, None),
            {"resource": "run r", "expected_revision": 2, "actual_revision": None},
        ),
        (
            CheckpointConflictError("s", 1, 2),
            {"session_id": "s", "expected": 1, "actual": 2},
        ),
    ],
)
def test_an_error_with_fields_comes_back_from_pickle_whole(
    error: Exception, fields: dict[str, object]
) -> None:
    """Across a process pool or a task queue: the same type, message and fields."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert {name: getattr(copy, name) for name in fields} == fields
