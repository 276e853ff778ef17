"""LangGraph's names the saver tests use, or a skip where it is not installed
(a failure under ``AGENTLOG_REQUIRE_EXTENSIONS``): the guard written once."""

from __future__ import annotations

import pytest

from ..conftest import extensions_required

try:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.channels.delta import DeltaChannel
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        Checkpoint,
        CheckpointTuple,
        empty_checkpoint,
    )
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - depends on the environment
    reason = f"langgraph is not installed ({exc}); pip install -e '.[langgraph]'"
    if extensions_required():
        pytest.fail(f"{reason} (AGENTLOG_REQUIRE_EXTENSIONS is set)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

__all__ = [
    "ERROR",
    "INTERRUPT",
    "AIMessage",
    "BaseCheckpointSaver",
    "Checkpoint",
    "CheckpointTuple",
    "Command",
    "DeltaChannel",
    "HumanMessage",
    "InMemorySaver",
    "JsonPlusSerializer",
    "RunnableConfig",
    "SqliteSaver",
    "empty_checkpoint",
]
