"""``agentlog migrate`` from LangGraph's own ``SqliteSaver`` database: a real
graph (a tool loop, a subgraph, an ``interrupt()``) run on SqliteSaver,
migrated, then read, time-travelled and resumed on :class:`AgentlogSaver` —
equal to what SqliteSaver gives for the same calls."""

from __future__ import annotations

import hashlib
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..conftest import extensions_required

try:
    import langgraph.checkpoint.sqlite  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    if extensions_required():
        pytest.fail(f"LangGraph's SqliteSaver is not installed ({exc})", pytrace=False)
    pytest.skip(f"LangGraph's SqliteSaver is not installed ({exc})", allow_module_level=True)

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agentlog import PostgresCheckpointer, SqliteStorage
from agentlog.cli import main
from agentlog.integrations.langgraph import AgentlogSaver
from agentlog.migrate import MigrationError, migrate

from ..test_migrate_postgres import pg_target
from .langgraph_child import build_graph, first_input, transcript

THREADS = ("t-1", "t-2")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def sqlite_saver(path: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def config(thread: str, **more: Any) -> Any:
    return {"configurable": {"thread_id": thread, **more}}


@pytest.fixture
def saver_db(tmp_path: Path) -> Path:
    """Two threads stopped at the review subgraph's interrupt, on SqliteSaver."""
    db = tmp_path / "checkpoints.db"
    with sqlite_saver(db) as saver:
        graph = build_graph(saver)
        for thread in THREADS:
            graph.invoke(first_input(f"weather for {thread}"), config(thread))
    return db


def history(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    graph = build_graph(saver)
    return [
        (
            s.config["configurable"]["checkpoint_id"],
            s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None,
            s.metadata,
            transcript(s.values),
            s.next,
            [(i.value, i.id) for i in s.interrupts],
            s.created_at,
        )
        for s in graph.get_state_history(config(thread))
    ]


def tuples(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    found = []
    for t in saver.list(config(thread)):
        c = t.checkpoint
        found.append(
            (
                t.config["configurable"],
                t.parent_config,
                t.metadata,
                {k: c[k] for k in ("id", "ts", "channel_versions", "versions_seen")},  # type: ignore[literal-required]
                sorted(c["channel_values"]),
                [(task, channel, repr(value)) for task, channel, value in t.pending_writes or []],
            )
        )
    return found


def assert_reads_alike(ours: BaseCheckpointSaver[Any], theirs: BaseCheckpointSaver[Any]) -> None:
    """Each thread reads back the same from both savers: its checkpoints and
    pending writes, its history, its interrupts and its subgraph's state."""
    for thread in THREADS:
        assert tuples(ours, thread) == tuples(theirs, thread)
        assert history(ours, thread) == history(theirs, thread)
        mine = build_graph(ours).get_state(config(thread), subgraphs=True)
        their = build_graph(theirs).get_state(config(thread), subgraphs=True)
        assert mine.interrupts and mine.interrupts == their.interrupts
        assert [t.state.values for t in mine.tasks if t.state] == [  # type: ignore[union-attr]
            t.state.values
            for t in their.tasks
            if t.state  # type: ignore[union-attr]
        ]


def assert_time_travels_alike(
    ours: BaseCheckpointSaver[Any], theirs: BaseCheckpointSaver[Any]
) -> None:
    """An old checkpoint of t-1 reads and runs on from there the same on both."""
    old = [s for s in build_graph(theirs).get_state_history(config("t-1")) if s.next][-2]
    at = config("t-1", checkpoint_id=old.config["configurable"]["checkpoint_id"])
    assert transcript(build_graph(ours).get_state(at).values) == transcript(old.values)
    mine = build_graph(ours).invoke(None, at)
    their = build_graph(theirs).invoke(None, at)
    assert transcript(mine) == transcript(their)


def assert_rerun_skips_and_change_is_refused(
    source: Any, target: Path, saver: Callable[[Any], AbstractContextManager[Any]]
) -> None:
    """A second run skips every thread; once t-2 goes on (on ``saver(source)``)
    the plan says it changed and the apply refuses."""
    first = migrate(source, target)
    again = migrate(source, target)
    assert (again.migrated, again.skipped) == (0, len(first.sessions))
    with saver(source) as theirs:
        build_graph(theirs).invoke(Command(resume="no"), config("t-2"))
    plan = migrate(source, target, dry_run=True)
    assert "changed" in {s.action for s in plan.sessions}
    with pytest.raises(MigrationError, match="nothing migrated"):
        migrate(source, target)


def test_a_graph_reads_back_and_resumes_as_on_sqlitesaver(
    saver_db: Path, tmp_path: Path, engine: str
) -> None:
    before = digest(saver_db)
    target = tmp_path / "agentlog.db"
    plan = migrate(saver_db, target, dry_run=True, engine=engine)
    assert plan.source_kind == "langgraph-sqlite"
    assert not target.exists()
    namespaces = {s.source_key for s in plan.sessions}
    assert len(namespaces) >= 2 * len(THREADS)  # the subgraph's namespace too
    report = migrate(saver_db, target, engine=engine)
    assert report.migrated == len(plan.sessions)
    assert digest(saver_db) == before
    with sqlite_saver(saver_db) as theirs, AgentlogSaver(target, engine=engine) as ours:
        assert_reads_alike(ours, theirs)
    # Resuming: the next step is the same on both (each on its own copy).
    their_copy = tmp_path / "theirs.db"
    their_copy.write_bytes(saver_db.read_bytes())
    with sqlite_saver(their_copy) as theirs, AgentlogSaver(target, engine=engine) as ours:
        for thread in THREADS:
            mine = build_graph(ours).invoke(Command(resume="yes"), config(thread))
            their = build_graph(theirs).invoke(Command(resume="yes"), config(thread))
            assert transcript(mine) == transcript(their)
            assert "HumanMessage:decision: yes" in transcript(mine)


def test_time_travel_to_an_old_checkpoint(saver_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "agentlog.db"
    migrate(saver_db, target)
    their_copy = tmp_path / "theirs.db"
    their_copy.write_bytes(saver_db.read_bytes())
    with sqlite_saver(their_copy) as theirs, AgentlogSaver(target) as ours:
        assert_time_travels_alike(ours, theirs)


def test_a_rerun_skips_and_a_changed_thread_is_refused(saver_db: Path, tmp_path: Path) -> None:
    assert_rerun_skips_and_change_is_refused(saver_db, tmp_path / "agentlog.db", sqlite_saver)


class Exploding:
    """Unpickling this object would run code (write ``marker``): it must not happen."""

    marker = Path()

    def __reduce__(self) -> Any:
        return (Path.write_text, (self.marker, "unpickled"))


def test_pickled_and_extension_values_are_never_decoded(saver_db: Path, tmp_path: Path) -> None:
    Exploding.marker = tmp_path / "unpickled"
    payload = pickle.dumps(Exploding())
    with sqlite3.connect(saver_db) as conn:
        row = conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints"
            " WHERE thread_id = 't-1' AND checkpoint_ns = '' ORDER BY checkpoint_id DESC"
        ).fetchone()
        conn.execute(
            "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,"
            " channel, type, value) VALUES (?, ?, ?, 'task-x', 0, 'decision', 'pickle', ?)",
            (*row, payload),
        )
    conn.close()
    target = tmp_path / "agentlog.db"
    with pytest.raises(MigrationError, match=r"pickled values in .*--allow-pickle"):
        migrate(saver_db, target, dry_run=True)
    with pytest.raises(MigrationError, match="pickled"):
        migrate(saver_db, target)
    assert not target.exists()
    report = migrate(saver_db, target, allow_pickle=True)
    assert report.migrated == len(report.sessions)
    assert not Exploding.marker.exists()  # carried, never unpickled
    # The messages (objects of extension types) were copied, not built: said.
    assert any("extension types" in n for s in report.sessions for n in s.notes)
    with SqliteStorage.open(target) as storage:
        log = storage.checkpointer("langgraph")
        sid = next(
            i.id for i in log.list() if any(e.event.get("t") == "task-x" for e in log.read(i.id))
        )
        (write,) = [e.event for e in log.read(sid) if e.event.get("t") == "task-x"]
    assert write["w"] == [[0, "decision", "pickle", payload.decode("latin-1")]]


def test_the_command_line_and_bad_files(
    saver_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "agentlog.db"
    main(["migrate", str(saver_db), str(target), "--from", "langgraph-sqlite", "--dry-run"])
    assert capsys.readouterr().out.startswith("langgraph-sqlite source,")
    with sqlite3.connect(saver_db) as conn:
        conn.execute("UPDATE checkpoints SET checkpoint = X'c1' WHERE thread_id = 't-2'")
    conn.close()
    before = digest(saver_db)
    with pytest.raises(SystemExit) as exited:
        main(["migrate", str(saver_db), str(target)])
    assert exited.value.code != 0
    err = capsys.readouterr().err
    assert "corrupt" in err and len(err.strip().splitlines()) == 1
    assert not target.exists()
    assert digest(saver_db) == before


def test_into_postgresql_resumes_as_on_sqlitesaver(
    saver_db: Path, tmp_path: Path, postgres_server: str
) -> None:
    url, schema = pg_target(postgres_server, tmp_path)
    report = migrate(saver_db, url, schema=schema, backup_dir=tmp_path / "backup")
    assert report.migrated == len(report.sessions) >= 2 * len(THREADS)
    their_copy = tmp_path / "theirs.db"
    their_copy.write_bytes(saver_db.read_bytes())
    log = PostgresCheckpointer(postgres_server, tenant="langgraph", schema=schema)
    with log, sqlite_saver(their_copy) as theirs, AgentlogSaver(log) as ours:
        assert history(ours, "t-1") == history(theirs, "t-1")
        mine = build_graph(ours).invoke(Command(resume="yes"), config("t-1"))
        their = build_graph(theirs).invoke(Command(resume="yes"), config("t-1"))
        assert transcript(mine) == transcript(their)
