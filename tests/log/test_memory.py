"""The in-memory backend runs the conformance suite (it does not outlive its object)."""

from __future__ import annotations

from pathlib import Path

from agentlog import Checkpointer, MemoryCheckpointer
from agentlog.testing import CheckpointerConformance


class TestMemoryCheckpointer(CheckpointerConformance):
    durable = False

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return MemoryCheckpointer()
