"""The legacy store adapter: the conformance suite on a whole-array store, and
reading and extending messages an existing store already holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentlog import CheckpointConflictError, Checkpointer, fold_events, legacy_store_adapter
from agentlog.testing import CheckpointerConformance


class DictLegacyStore:
    """A legacy whole-array store kept in a dict per location, like a JSON file."""

    stores: ClassVar[dict[str, dict[str, list[Any]]]] = {}

    def __init__(self, location: Path) -> None:
        self.data = self.stores.setdefault(str(location), {})

    def load(self, session_id: str) -> list[Any] | None:
        items = self.data.get(session_id)
        return None if items is None else list(items)

    def save(self, session_id: str, messages: list[Any]) -> None:
        self.data[session_id] = list(messages)

    def list(self) -> list[str]:
        return list(self.data)

    def delete(self, session_id: str) -> None:
        self.data.pop(session_id, None)


class TestLegacyStoreAdapter(CheckpointerConformance):
    persistent_mtime = False
    stores_metadata = False  # a whole-array store has no place for it
    records_lineage = False  # nor for fork lineage
    takes_keys = False  # nor for append keys

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return legacy_store_adapter(DictLegacyStore(location))


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
