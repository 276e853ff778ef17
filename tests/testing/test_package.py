"""agentlog.testing keeps every name it has ever offered, and says how to use it."""

from __future__ import annotations

import importlib

import agentlog.testing

# Spelled out, not read from __all__: the test pins the public names (a copy by design).
#: What ``from agentlog.testing import *`` gives.
ALL = [
    "HOSTILE_SESSION_IDS", "ArtifactStoreConformance", "AsyncCheckpointerConformance",
    "AsyncStorageConformance", "AsyncStorageSuite", "BlockingFacade", "BlockingStorage",
    "CheckpointStoreConformance", "CheckpointerConformance", "MemoryStoreConformance",
    "SessionStoreConformance", "checkpointer_conformance", "make_event",
]  # fmt: skip

#: Every agentlog name the module offered before it became a package (the
#: standard-library modules it happened to import are not re-exported).
BEFORE_THE_SPLIT = [
    "ArtifactInfo", "ArtifactStoreConformance", "Checkpoint",
    "CheckpointConflictError", "CheckpointStoreConformance", "Checkpointer",
    "CheckpointerClosedError", "CheckpointerConformance", "HOSTILE_SESSION_IDS",
    "InvalidEventError", "InvalidSessionIdError", "MAX_SESSION_ID_LENGTH",
    "MemoryStoreConformance", "RaceFunction", "SessionExistsError", "SessionInfo",
    "SessionNotFoundError", "SessionStoreConformance", "SideEffect", "StorageConflictError",
    "StorageDataError", "StorageNotFoundError", "StoredEvent",
    "checkpointer_conformance", "make_event",
]  # fmt: skip


def test_star_import_gives_the_suites() -> None:
    assert sorted(agentlog.testing.__all__) == sorted(ALL)
    namespace: dict[str, object] = {}
    exec("from agentlog.testing import *", namespace)
    assert sorted(name for name in namespace if name != "__builtins__") == sorted(ALL)


def test_every_name_offered_before_the_split_is_still_importable() -> None:
    missing = [name for name in BEFORE_THE_SPLIT if not hasattr(agentlog.testing, name)]
    assert missing == []


def test_each_suite_lives_in_its_own_module() -> None:
    for module, suite in [
        ("log", "CheckpointerConformance"),
        ("sessions", "SessionStoreConformance"),
        ("checkpoints", "CheckpointStoreConformance"),
        ("memory", "MemoryStoreConformance"),
        ("artifacts", "ArtifactStoreConformance"),
        ("aio", "AsyncCheckpointerConformance"),
        ("aio_stores", "AsyncStorageConformance"),
    ]:
        cls = getattr(agentlog.testing, suite)
        assert cls.__module__ == f"agentlog.testing.{module}"
        assert getattr(importlib.import_module(cls.__module__), suite) is cls


def test_the_docstring_says_how_to_run_the_suites() -> None:
    doc = agentlog.testing.__doc__ or ""
    for needed in ("CheckpointerConformance", "open_checkpointer", "open_storage", "spawn"):
        assert needed in doc
