"""fold_events: turning a log into the messages a model reads."""

from __future__ import annotations

from typing import Any

import pytest

from agentlog import Folder, StoredEvent, fold_events, store_events


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


TURN = [
    {"type": "user", "content": "how big is main.py?"},
    {
        "type": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "t1", "name": "wc", "input": {"path": "main.py"}},
            {"type": "tool_use", "id": "t2", "name": "ls", "input": {}},
        ],
    },
    {"type": "tool_started", "tool_use_id": "t1"},
    {"type": "tool_result", "tool_use_id": "t1", "content": "120 main.py"},
    {"type": "tool_result", "tool_use_id": "t2", "content": ["main.py"], "is_error": False},
    {"type": "assistant", "content": "120 lines."},
]


def test_fold_in_the_openai_shape() -> None:
    assert fold_events(stored(*TURN), shape="openai") == [
        {"role": "user", "content": "how big is main.py?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "wc", "arguments": '{"path": "main.py"}'},
                },
                {"id": "t2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "120 main.py"},
        {"role": "tool", "tool_call_id": "t2", "content": '["main.py"]'},
        {"role": "assistant", "content": "120 lines."},
    ]


def test_the_openai_shape_resets_at_a_summary_and_refuses_unknown_types() -> None:
    events = [*TURN, {"type": "summary", "content": "so far"}, {"type": "user", "content": "q"}]
    assert fold_events(events, shape="openai") == [
        {"role": "user", "content": "so far"},
        {"role": "user", "content": "q"},
    ]
    only_calls = {"type": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "n"}]}
    assert fold_events([only_calls], shape="openai")[0]["content"] is None
    with pytest.raises(ValueError, match="unknown type"):
        fold_events([{"type": "nope"}], shape="openai")
    with pytest.raises(ValueError, match="shape"):
        fold_events(TURN, shape="gemini")


def test_a_folder_folds_one_event_at_a_time_as_fold_events_does() -> None:
    events = stored(
        {"type": "user", "content": "q"},
        {"type": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "ls"}]},
        {"type": "tool_result", "tool_use_id": "a", "content": "1"},
        {"type": "tool_started", "tool_use_id": "b"},
        {"type": "tool_result", "tool_use_id": "b", "content": "2"},
        {"type": "summary", "content": "s"},
        {"type": "user", "content": "q2"},
    )
    for shape in ("anthropic", "openai"):
        folder = Folder(shape)
        handed_out = []
        for event in events:
            folder.add(event)
            handed_out.append(folder.messages)
            assert folder.messages == fold_events(events[: event.seq], shape=shape)
            assert folder.seq == event.seq
        # What was handed out before the second result merged is as it was then.
        assert handed_out[2] == fold_events(events[:3], shape=shape)
        assert (folder.turn, folder.pending_tool_calls) == (2, [])
    with pytest.raises(ValueError):
        Folder("gemini")
    folder = Folder()
    with pytest.raises(ValueError):
        folder.add({"type": "mystery"})
    assert (folder.seq, folder.messages) == (0, [])


def test_the_openai_sdk_output_text_blocks_are_the_reply() -> None:
    """The OpenAI Agents SDK stores a model's reply as ``output_text`` blocks
    (and a user's as ``input_text``): they are text, in the fold and on screen."""
    import io

    from agentlog.terminal import Screen

    reply = [
        {"type": "output_text", "text": "seen 1 items", "annotations": []},
        {"type": "output_text", "text": "and more", "annotations": []},
    ]
    events = [{"type": "user", "content": "hi"}, {"type": "assistant", "content": reply}]
    assert fold_events(events, shape="openai")[1] == {
        "role": "assistant",
        "content": "seen 1 items\nand more",
    }
    out = io.StringIO()
    Screen(out, colour=False).transcript(fold_events(events))
    assert out.getvalue().splitlines()[1] == "assistant: seen 1 items and more"
