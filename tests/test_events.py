"""Events and ids: the nine event types, check_session_id, store_events, StoredEvent."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, KeysView, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    EVENT_TYPES,
    InvalidEventError,
    InvalidSessionIdError,
    MemoryCheckpointer,
    SqliteCheckpointer,
    StoredEvent,
    check_session_id,
    store_events,
)
from agentlog import events as events_module
from agentlog.events import encode_events
from agentlog.testing import HOSTILE_SESSION_IDS

from .conftest import PYTHON, child_env
from .memory_use import run_fresh_peak


def test_the_nine_event_types() -> None:
    # Spelled out, not read from EVENT_TYPES: the test pins the public types (a copy by design).
    assert {
        "user", "assistant", "tool_started", "tool_result", "file_snapshot",
        "artifact_verified", "permission_decision", "summary", "context_view",
    } == EVENT_TYPES  # fmt: skip


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
        store_events("../x", 0, [{"type": "user", "content": "x"}])
    with pytest.raises(ValueError):
        store_events("s", -1, [{"type": "user", "content": "x"}])
    with pytest.raises(InvalidEventError) as info:
        store_events("s", 0, [{"type": "user", "content": "x"}, {"type": "nope"}])
    assert info.value.index == 1


def test_nan_is_caught_even_next_to_null_values_and_null_text() -> None:
    fine = {
        "type": "user",
        "content": "x",
        "a": None,
        "text": "null null",
        "nested": [None, {"x": None}],
    }
    assert store_events("s", 0, [fine])[0].event == fine
    with pytest.raises(InvalidEventError, match="event 0"):
        store_events("s", 0, [{"type": "user", "content": "x", "a": None, "b": math.nan}])


def test_stored_event_is_an_immutable_tuple() -> None:
    event = StoredEvent(1, 0, 1.5, "user", {"type": "user"})
    assert event.seq == 1 and event.parent_seq == 0 and event.type == "user"
    seq, parent, ts, kind, body = event
    assert (seq, parent, ts, kind, body) == (1, 0, 1.5, "user", {"type": "user"})
    with pytest.raises(AttributeError):
        event.seq = 2  # type: ignore[misc]


class _KeysLie(Mapping[str, Any]):
    """A mapping whose ``keys()`` names a key its items do not have."""

    def __init__(self) -> None:
        self._data = {"type": "user", "content": "hi"}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> Any:
        return ["type", "content", "ghost"]


class _IterLies(_KeysLie):
    """Iterates over a key that ``__getitem__`` refuses."""

    def __iter__(self) -> Iterator[str]:
        return iter(["type", "phantom"])

    def keys(self) -> Any:
        return KeysView(self)


@pytest.mark.parametrize("liar", [_KeysLie, _IterLies])
def test_a_mapping_that_lies_about_its_keys_is_an_invalid_event(liar: type) -> None:
    good = {"type": "user", "content": "ok"}
    with MemoryCheckpointer() as log:
        log.append("s", [good])
        with pytest.raises(InvalidEventError) as caught:
            log.append("s", [good, liar()])
        assert caught.value.index == 1
        assert log.head("s") == 1
    with pytest.raises(InvalidEventError, match="event 0"):
        store_events("s", 0, [liar()])


def test_each_type_needs_its_fields_and_the_message_names_them() -> None:
    with pytest.raises(InvalidEventError, match=r"event 1: a 'user' event needs a 'content' field"):
        store_events("s", 0, [{"type": "user", "content": "hi"}, {"type": "user", "text": "hi"}])
    with pytest.raises(InvalidEventError, match="'tool_use_id'"):
        store_events("s", 0, [{"type": "tool_result", "content": "x"}])
    # Empty content is content; other types need only their type.
    assert [
        e.type
        for e in store_events(
            "s",
            0,
            [
                {"type": "user", "content": ""},
                {"type": "tool_result", "tool_use_id": "t", "content": None},
                {"type": "file_snapshot"},
                {"type": "context_view"},
            ],
        )
    ] == ["user", "tool_result", "file_snapshot", "context_view"]


ENCODE_A_BIG_BATCH = """
import json
from memory_use import current_rss_bytes, peak_rss_bytes
events = [{"type": "user", "content": f"m{i}"} for i in range(200_000)]
before = current_rss_bytes()
from agentlog.events import encode_events
encoded = encode_events(events)
size = sum(len(payload) for _, payload in encoded)
print(json.dumps([peak_rss_bytes() - before, size, len(encoded)]))
"""


def test_a_big_batch_takes_memory_in_proportion_to_what_it_encodes() -> None:
    """200,000 small events (~6 MB of JSON): each encoding is kept in bytes of
    its own size, not in the ~4 KiB buffer orjson encoded it into (that held
    ~800 MB here)."""
    run = run_fresh_peak([PYTHON, "-c", ENCODE_A_BIG_BATCH], child_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    grown, size, count = json.loads(run.stdout)
    assert count == 200_000
    # The encodings, their tuples and the list: ~160 bytes an event beyond the JSON.
    assert grown < size + count * 400, (grown, size)


def test_an_event_larger_than_any_backend_takes_is_refused_by_its_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SQLite stores at most 1,000,000,000 bytes in one value (and said "NOT
    NULL constraint failed" or "string or blob too big", as an outage);
    PostgreSQL closes the connection. The bound is lowered here so that the
    test need not build a gigabyte."""
    monkeypatch.setattr(events_module, "MAX_EVENT_BYTES", 200)
    small, large = {"type": "user", "content": "hi"}, {"type": "user", "content": "x" * 300}
    with pytest.raises(InvalidEventError, match=r"event 1: it is 3\d\d bytes encoded") as caught:
        encode_events([small, large])
    assert caught.value.index == 1
    with pytest.raises(InvalidEventError, match="event 0:"):
        encode_events([{"type": "odd-kind", "content": "x" * 300}])  # the careful path too
    assert events_module.MAX_EVENT_BYTES < 2**30  # below PostgreSQL's own bound
    logs = [MemoryCheckpointer(), SqliteCheckpointer(tmp_path / "a.db", engine="python")]
    for log in logs:
        log.append("s", [small])
        with pytest.raises(InvalidEventError):
            log.append("s", [small, large])
        assert [event.seq for event in log.read("s")] == [1]
        log.close()
