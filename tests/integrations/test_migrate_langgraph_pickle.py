"""A SqliteSaver whose serializer falls back to pickle (``pickle_fallback=True``
and a value msgpack cannot hold): refused without ``--allow-pickle``,
naming the checkpoints, and with it migrated so the graph resumes equal. And
a msgpack extension value that would construct a class when decoded: copied,
never constructed."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pytest

from ..conftest import extensions_required

try:
    import langgraph.checkpoint.sqlite  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    if extensions_required():
        pytest.fail(f"LangGraph's SqliteSaver is not installed ({exc})", pytrace=False)
    pytest.skip(f"LangGraph's SqliteSaver is not installed ({exc})", allow_module_level=True)

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_KW_ARGS, JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from agentlog.cli import main
from agentlog.integrations.langgraph import AgentlogSaver
from agentlog.migrate import MigrationError, migrate

from ..conftest import digest


class Opaque:
    """A value LangGraph's msgpack cannot encode: its serializer pickles the
    whole checkpoint that holds it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.n == self.n

    def __hash__(self) -> int:
        return self.n


class State(TypedDict, total=False):
    count: int
    box: Opaque
    decision: str


def fill(state: State) -> dict[str, Any]:
    return {"count": state["count"] + 1, "box": Opaque(state["count"] * 10)}


def ask(state: State) -> dict[str, Any]:
    return {"decision": str(interrupt({"box": state["box"].n}))}


def finish(state: State) -> dict[str, Any]:
    return {"count": state["count"] + state["box"].n + len(state["decision"])}


def build(saver: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
    graph = StateGraph(State)
    graph.add_node("fill", fill)
    graph.add_node("ask", ask)
    graph.add_node("finish", finish)
    graph.add_edge(START, "fill")
    graph.add_edge("fill", "ask")
    graph.add_edge("ask", "finish")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=saver)


def serde() -> JsonPlusSerializer:
    return JsonPlusSerializer(pickle_fallback=True)


@contextmanager
def sqlite_saver(path: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(conn, serde=serde())
    finally:
        conn.close()


CONFIG: Any = {"configurable": {"thread_id": "p-1"}}


@pytest.fixture
def pickled_db(tmp_path: Path) -> Path:
    db = tmp_path / "pickled.db"
    with sqlite_saver(db) as saver:
        build(saver).invoke({"count": 1}, CONFIG)
    return db


def pickled_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT checkpoint_id FROM checkpoints WHERE type = 'pickle'")
        found = sorted(row[0] for row in rows)
    conn.close()
    return found


def snapshot(saver: Any) -> list[Any]:
    return [
        (s.config["configurable"]["checkpoint_id"], s.metadata, s.values, s.next, s.created_at)
        for s in build(saver).get_state_history(CONFIG)
    ]


def test_pickled_checkpoints_are_refused_by_id_then_carried_with_the_flag(
    pickled_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = pickled_ids(pickled_db)
    assert ids  # the serializer did fall back to pickle
    before = digest(pickled_db)
    target = tmp_path / "agentlog.db"
    with pytest.raises(MigrationError, match="--allow-pickle") as refused:
        migrate(pickled_db, target, dry_run=True)
    assert ids[0] in str(refused.value)
    with pytest.raises(SystemExit):
        main(["migrate", str(pickled_db), str(target)])
    err = capsys.readouterr().err
    assert "pickled values in" in err and ids[0] in err and len(err.strip().splitlines()) == 1
    assert not target.exists()
    main(["migrate", str(pickled_db), str(target), "--allow-pickle"])
    assert "migrated 1," in capsys.readouterr().out
    assert digest(pickled_db) == before
    their_copy = tmp_path / "theirs.db"
    their_copy.write_bytes(pickled_db.read_bytes())
    with sqlite_saver(their_copy) as theirs, AgentlogSaver(target, serde=serde()) as ours:
        assert snapshot(ours) == snapshot(theirs)
        waiting = build(ours).get_state(CONFIG).interrupts
        assert waiting and waiting == build(theirs).get_state(CONFIG).interrupts
        mine = build(ours).invoke(Command(resume="yes"), CONFIG)
        their = build(theirs).invoke(Command(resume="yes"), CONFIG)
        assert mine == their and mine["count"] == 2 + 10 + 3


@dataclass
class Constructs:
    """Decoding this (a msgpack extension value) builds it, which writes a file."""

    marker: str

    def __post_init__(self) -> None:
        Path(self.marker).write_text("constructed")


def test_an_extension_value_is_copied_never_constructed(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    graph = StateGraph(State)
    graph.add_node("step", lambda state: {"count": state["count"] + 1})
    graph.add_edge(START, "step")
    with sqlite3.connect(db, check_same_thread=False) as conn:
        graph.compile(checkpointer=SqliteSaver(conn)).invoke({"count": 1}, CONFIG)
    conn.close()
    marker = tmp_path / "constructed"
    # What LangGraph's msgpack makes of a dataclass: its module, name and fields.
    fields = ormsgpack.packb([__name__, "Constructs", {"marker": str(marker)}])
    ext = ormsgpack.Ext(EXT_CONSTRUCTOR_KW_ARGS, fields)
    # LangGraph's own serializer, allowed to, would build it:
    JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed(("msgpack", ormsgpack.packb(ext)))
    assert marker.exists()
    marker.unlink()
    with sqlite3.connect(db) as conn:
        cid, blob = conn.execute(
            "SELECT checkpoint_id, checkpoint FROM checkpoints ORDER BY checkpoint_id DESC"
        ).fetchone()
        body = ormsgpack.unpackb(blob, ext_hook=ormsgpack.Ext)
        body["channel_values"]["decision"] = ext
        body["channel_versions"]["decision"] = max(body["channel_versions"].values())
        conn.execute(
            "UPDATE checkpoints SET checkpoint = ? WHERE checkpoint_id = ?",
            (ormsgpack.packb(body), cid),
        )
    conn.close()
    plan = migrate(db, tmp_path / "agentlog.db", dry_run=True)
    report = migrate(db, tmp_path / "agentlog.db")
    assert report.migrated == 1
    for planned in (plan.sessions[0], report.sessions[0]):
        assert any("extension types" in note and cid in note for note in planned.notes)
    assert not marker.exists()
