"""fold_events: turning a log into the messages a model reads."""

from __future__ import annotations

from typing import Any

import pytest

from agentlog import StoredEvent, fold_events, store_events


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
