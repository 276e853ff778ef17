"""Events, ids, fold_events, store_events and the legacy store adapter."""

from __future__ import annotations

import math
import pickle
import time
from typing import Any

import pytest

from agentlog import (
    EVENT_TYPES,
    CheckpointConflictError,
    InvalidEventError,
    InvalidSessionIdError,
    StoredEvent,
    UnserializableEventError,
    check_session_id,
    fold_events,
    legacy_store_adapter,
    store_events,
)
from agentlog.testing import HOSTILE_SESSION_IDS


def test_the_nine_event_types() -> None:
    assert {
        "user",
        "assistant",
        "tool_started",
        "tool_result",
        "file_snapshot",
        "artifact_verified",
        "permission_decision",
        "summary",
        "context_view",
    } == EVENT_TYPES


@pytest.mark.parametrize("hostile", HOSTILE_SESSION_IDS, ids=repr)
def test_check_session_id_refuses_hostile_ids(hostile: Any) -> None:
    with pytest.raises(InvalidSessionIdError):
        check_session_id(hostile)


def test_check_session_id_accepts_and_normalises_str_subclasses() -> None:
    class Name(str):
        pass

    assert check_session_id("ok-1") == "ok-1"
    checked = check_session_id(Name("abc"))
    assert checked == "abc"
    assert type(checked) is str


def test_store_events_stamps_and_copies() -> None:
    source = [{"type": "user", "content": ["hi"]}, {"type": "assistant", "content": "yo"}]
    before = time.time()
    stored = store_events("s", 5, source)
    assert [(e.seq, e.parent_seq, e.type) for e in stored] == [(6, 5, "user"), (7, 6, "assistant")]
    assert all(before <= e.ts <= time.time() for e in stored)
    assert [e.event for e in stored] == source
    source[0]["content"].append("later")
    assert stored[0].event["content"] == ["hi"]
    assert store_events("s", 0, [], ts=1.0) == []
    assert store_events("s", 0, source, ts=3.0)[0].ts == 3.0


def test_store_events_validates_like_append() -> None:
    with pytest.raises(InvalidSessionIdError):
        store_events("../x", 0, [{"type": "user"}])
    with pytest.raises(ValueError):
        store_events("s", -1, [{"type": "user"}])
    with pytest.raises(InvalidEventError) as info:
        store_events("s", 0, [{"type": "user"}, {"type": "nope"}])
    assert info.value.index == 1


def test_nan_is_caught_even_next_to_null_values_and_null_text() -> None:
    fine = {"type": "user", "a": None, "text": "null null", "nested": [None, {"x": None}]}
    assert store_events("s", 0, [fine])[0].event == fine
    with pytest.raises(InvalidEventError, match="event 0"):
        store_events("s", 0, [{"type": "user", "a": None, "b": math.nan}])


def test_error_classes_are_typed_and_picklable() -> None:
    error = UnserializableEventError(3, "bad")
    assert isinstance(error, ValueError) and isinstance(error, TypeError)
    assert pickle.loads(pickle.dumps(error)).index == 3
    conflict = pickle.loads(pickle.dumps(CheckpointConflictError("s", 1, 2)))
    assert (conflict.session_id, conflict.expected, conflict.actual) == ("s", 1, 2)


def test_stored_event_is_an_immutable_tuple() -> None:
    event = StoredEvent(1, 0, 1.5, "user", {"type": "user"})
    assert event.seq == 1 and event.parent_seq == 0 and event.type == "user"
    seq, parent, ts, kind, body = event
    assert (seq, parent, ts, kind, body) == (1, 0, 1.5, "user", {"type": "user"})
    with pytest.raises(AttributeError):
        event.seq = 2  # type: ignore[misc]


def stored(*events: dict[str, Any]) -> list[StoredEvent]:
    return store_events("s", 0, list(events), ts=1.0)


def test_fold_user_and_assistant_turns() -> None:
    messages = fold_events(
        stored(
            {"type": "user", "content": "hi"},
            {"type": "assistant", "content": [{"type": "text", "text": "hello"}]},
        )
    )
    assert messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ]


def test_fold_merges_consecutive_tool_results_into_one_user_message() -> None:
    events = stored(
        {"type": "user", "content": "list files and read one"},
        {
            "type": "assistant",
            "content": [{"type": "tool_use", "id": "a"}, {"type": "tool_use", "id": "b"}],
        },
        {"type": "tool_started", "tool_use_id": "a"},
        {"type": "tool_result", "tool_use_id": "a", "content": "x.py"},
        {"type": "tool_started", "tool_use_id": "b"},
        {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": True},
        {"type": "file_snapshot", "path": "x.py"},
        {"type": "assistant", "content": "done"},
        {"type": "tool_result", "tool_use_id": "c", "content": "late"},
    )
    messages = fold_events(events)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "x.py"},
        {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": True},
    ]
    assert messages[4]["content"] == [
        {"type": "tool_result", "tool_use_id": "c", "content": "late"}
    ]


def test_fold_summary_resets_the_transcript() -> None:
    messages = fold_events(
        stored(
            {"type": "user", "content": "q1"},
            {"type": "assistant", "content": "a1"},
            {"type": "summary", "content": "so far: q1 answered"},
            {"type": "context_view", "tokens": 10},
            {"type": "user", "content": "q2"},
        )
    )
    assert messages == [
        {"role": "user", "content": "so far: q1 answered"},
        {"role": "user", "content": "q2"},
    ]


def test_fold_skips_bookkeeping_and_accepts_plain_mappings() -> None:
    plain = [
        {"type": "permission_decision", "allow": True},
        {"type": "artifact_verified", "sha256": "0" * 64},
        {"type": "user", "content": "hi"},
    ]
    assert fold_events(plain) == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError):
        fold_events([{"type": "mystery"}])


class ListStore:
    """A legacy store without list() or delete()."""

    def __init__(self) -> None:
        self.data: dict[str, list[Any]] = {}

    def load(self, session_id: str) -> list[Any] | None:
        return self.data.get(session_id)

    def save(self, session_id: str, messages: list[Any]) -> None:
        self.data[session_id] = list(messages)


def test_legacy_adapter_reads_existing_messages_and_appends_after_them() -> None:
    store = ListStore()
    store.data["old"] = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi!"},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
    ]
    cp = legacy_store_adapter(store)
    assert cp.head("old") == 3
    assert [e.type for e in cp.read("old")] == ["user", "assistant", "tool_result"]
    assert fold_events(cp.read("old"))[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}],
    }
    with pytest.raises(CheckpointConflictError):
        cp.append("old", [{"type": "user", "content": "again"}], expected_head=2)
    assert cp.append("old", [{"type": "user", "content": "again"}], expected_head=3) == 4
    # The old messages are kept exactly as they were.
    assert store.data["old"][:3] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi!"},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
    ]
    assert store.data["old"][3]["event"] == {"type": "user", "content": "again"}
    with pytest.raises(NotImplementedError):
        cp.list()
    cp.delete("old")
    assert cp.head("old") == 0


def test_legacy_adapter_needs_load_and_save() -> None:
    with pytest.raises(TypeError):
        legacy_store_adapter(object())  # type: ignore[arg-type]
