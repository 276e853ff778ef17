"""The in-memory backend runs the conformance suite (it does not outlive its object),
as does the Checkpointer face of an in-memory storage."""

from __future__ import annotations

from pathlib import Path

from agentlog import Checkpointer, InMemoryStorage, MemoryCheckpointer
from agentlog.testing import CheckpointerConformance

from ..stores.openers import InMemoryStorageOpener


class TestMemoryCheckpointer(CheckpointerConformance):
    durable = False

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return MemoryCheckpointer()


class TestMemoryStorageFace(InMemoryStorageOpener, CheckpointerConformance):
    """The Checkpointer face of an in-memory storage's session log."""

    def open_checkpointer(self, location: Path) -> Checkpointer:
        storage: InMemoryStorage = self.open_storage(location)
        storage.sessions.create("acme", "other", metadata={"tenant": "acme"})  # out of sight
        return storage.checkpointer()
