"""Choosing an engine: what engine_info() reports, AGENTLOG_REQUIRE_EXTENSIONS and
AGENTLOG_NO_EXTENSIONS, unknown engines, and one engine per file per process."""

from __future__ import annotations

import gc
import json
import os
import subprocess
from pathlib import Path

import pytest

from agentlog import SqliteCheckpointer, SqliteStorage, StorageUnavailableError, engine_info

from ..conftest import AVAILABLE, PYTHON, extensions_required, require_engine

PINNED_SQLITE_VERSION = "3.50.4"


EVENT = {"type": "user", "content": "hello"}


def test_one_process_opens_a_file_with_one_engine_at_a_time(tmp_path: Path) -> None:
    require_engine("c")  # the other is always there
    db = tmp_path / "one.db"
    with (
        SqliteCheckpointer(db, engine="c"),
        SqliteCheckpointer(db, engine="c"),
        pytest.raises(StorageUnavailableError, match="engine"),
    ):
        SqliteCheckpointer(db, engine="python")
    with SqliteCheckpointer(db, engine="python") as cp:
        assert cp.append("s", [EVENT]) == 1
        with pytest.raises(StorageUnavailableError, match="engine"):
            SqliteCheckpointer(db, engine="c")
    with SqliteCheckpointer(db, engine="c") as cp:
        assert cp.head("s") == 1


@pytest.mark.parametrize(("first", "second"), [("c", "python"), ("python", "c")])
def test_a_collected_checkpointer_gives_up_its_claim(
    tmp_path: Path, first: str, second: str
) -> None:
    # Never closed, only dropped: the collector closes its connections and
    # releases the file, so the other engine may open it afterwards.
    require_engine("c")
    db = tmp_path / "dropped.db"
    cp = SqliteCheckpointer(db, engine=first)
    cp.append("s", [EVENT])
    assert list(cp.read("s"))  # a reader connection in the pool too
    storage = SqliteStorage.open(db, engine=first)
    storage.sessions.create("acme", "chat", None)
    del cp, storage
    gc.collect()
    with SqliteCheckpointer(db, engine=second) as other:
        assert other.head("s") == 1
        other.append("s", [EVENT], expected_head=1)
    # A checkpointer still referenced keeps its claim.
    kept = SqliteCheckpointer(db, engine=first)
    gc.collect()
    with pytest.raises(StorageUnavailableError, match="engine"):
        SqliteCheckpointer(db, engine=second)
    kept.close()


def test_engine_info_names_engine_and_sqlite(engine: str) -> None:
    info = engine_info()
    assert info["engine"] == AVAILABLE[0]
    assert info["available"] == AVAILABLE
    assert info["sqlite_version"].count(".") == 2
    assert isinstance(info["compile_options"], list)
    with SqliteCheckpointer(":memory:", engine=engine) as cp:
        assert cp.engine == engine
    with SqliteCheckpointer(":memory:") as cp:
        assert cp.engine == info["engine"]


def test_extension_loaded_when_required() -> None:
    """CI sets AGENTLOG_REQUIRE_EXTENSIONS=1: a build that lost its C engine fails here."""
    info = engine_info()
    if extensions_required():
        assert info["engine"] == "c", info["extension_error"]
        assert info["sqlite_version"] == PINNED_SQLITE_VERSION
        assert "THREADSAFE=2" in info["compile_options"]
        assert "OMIT_LOAD_EXTENSION" in info["compile_options"]
    elif "c" not in AVAILABLE:
        assert info["extension_error"]


def test_no_extensions_forces_the_pure_engine_at_import() -> None:
    script = "import agentlog, json; print(json.dumps(agentlog.engine_info()))"
    env = dict(os.environ, AGENTLOG_NO_EXTENSIONS="1")
    env.pop("AGENTLOG_REQUIRE_EXTENSIONS", None)
    run = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, env=env)
    info = json.loads(run.stdout)
    assert info["engine"] == "python"
    assert info["available"] == ["python"]
    assert "AGENTLOG_NO_EXTENSIONS" in info["extension_error"]


def test_unknown_engine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SqliteCheckpointer(tmp_path / "a.db", engine="rust")
    if "c" not in AVAILABLE:
        with pytest.raises(ImportError):
            SqliteCheckpointer(tmp_path / "a.db", engine="c")
