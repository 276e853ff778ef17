"""The error classes: typed, and picklable with their fields."""

from __future__ import annotations

import pickle

from agentlog import CheckpointConflictError, UnserializableEventError


def test_error_classes_are_typed_and_picklable() -> None:
    error = UnserializableEventError(3, "bad")
    assert isinstance(error, ValueError) and isinstance(error, TypeError)
    assert pickle.loads(pickle.dumps(error)).index == 3
    conflict = pickle.loads(pickle.dumps(CheckpointConflictError("s", 1, 2)))
    assert (conflict.session_id, conflict.expected, conflict.actual) == ("s", 1, 2)
