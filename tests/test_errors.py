"""The error classes: typed, and picklable with their fields."""

from __future__ import annotations

import pickle

from agentlog import CheckpointConflictError, EventsPrunedError, UnserializableEventError


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
