"""``agentlog migrate postgresql://…`` from LangGraph's own ``PostgresSaver``:
a real graph (a tool loop, a subgraph, an ``interrupt()``) run on
PostgresSaver (the test server), migrated, then read, time-travelled and
resumed on :class:`AgentlogSaver` — equal to what PostgresSaver gives for
the same calls. The server is only read, in read-only transactions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..conftest import extensions_required, postgres_required, postgres_schema

try:
    import langgraph.checkpoint.postgres  # noqa: F401
    import psycopg
except ImportError as exc:  # pragma: no cover - depends on the environment
    if extensions_required() or postgres_required():
        pytest.fail(f"LangGraph's PostgresSaver is not installed ({exc})", pytrace=False)
    pytest.skip(f"LangGraph's PostgresSaver is not installed ({exc})", allow_module_level=True)

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.types import Command

from agentlog.cli import main
from agentlog.engine import foreign as F
from agentlog.errors import AgentlogError
from agentlog.integrations.langgraph import AgentlogSaver
from agentlog.migrate import MigrationError, migrate

from ..benchmark_run import run_benchmark
from ..test_migrate_postgres import as_url
from .langgraph_child import build_graph, first_input, transcript
from .test_migrate_langgraph import (
    THREADS,
    assert_reads_alike,
    assert_rerun_skips_and_change_is_refused,
    assert_time_travels_alike,
    config,
)

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


@contextmanager
def postgres_saver(url: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(url) as saver:
        yield saver


def new_schema(postgres_server: str, name: str) -> str:
    """The URL of a fresh schema of its own (the URL's ``search_path``)."""
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    return f"{as_url(postgres_server)}?options=-csearch_path%3D{name}"


def contents(url: str) -> str:
    """A digest of every row of the saver's tables (the source, as it is)."""
    digest = hashlib.sha256()
    with psycopg.connect(url) as conn:
        for table in TABLES:
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            digest.update(repr(sorted(map(repr, rows))).encode())
    return digest.hexdigest()


@pytest.fixture
def source(postgres_server: str, tmp_path: Path) -> str:
    """Two threads stopped at the review subgraph's interrupt, on PostgresSaver."""
    url = new_schema(postgres_server, postgres_schema(tmp_path / "source"))
    with postgres_saver(url) as saver:
        saver.setup()
        graph = build_graph(saver)
        for thread in THREADS:
            graph.invoke(first_input(f"weather for {thread}"), config(thread))
    return url


@pytest.fixture
def theirs_copy(postgres_server: str, source: str, tmp_path: Path) -> str:
    """Another schema holding the same rows: PostgresSaver's own next steps
    go there, so the source stays as it was migrated."""
    name = postgres_schema(tmp_path / "theirs")
    url = new_schema(postgres_server, name)
    with postgres_saver(url) as saver:
        saver.setup()
    with psycopg.connect(source) as conn:
        for table in TABLES:
            conn.execute(f"INSERT INTO {name}.{table} SELECT * FROM {table}")
    return url


def test_a_graph_reads_back_and_resumes_as_on_postgressaver(
    source: str, theirs_copy: str, tmp_path: Path
) -> None:
    before = contents(source)
    target = tmp_path / "agentlog.db"
    plan = migrate(source, target, dry_run=True)
    assert plan.source_kind == "langgraph-postgres"
    assert not target.exists()
    assert len(plan.sessions) >= 2 * len(THREADS)  # the subgraph's namespace too
    report = migrate(source, target)
    assert report.migrated == len(plan.sessions)
    assert [(s.source_key, s.sha256) for s in report.sessions] == [
        (s.source_key, s.sha256) for s in plan.sessions
    ]
    assert report.backup is not None and (report.backup / "source").is_dir()
    assert contents(source) == before
    with postgres_saver(theirs_copy) as theirs, AgentlogSaver(target) as ours:
        assert_reads_alike(ours, theirs)
        # Resuming: the next step is the same on both.
        for thread in THREADS:
            mine_out = build_graph(ours).invoke(Command(resume="yes"), config(thread))
            their_out = build_graph(theirs).invoke(Command(resume="yes"), config(thread))
            assert transcript(mine_out) == transcript(their_out)
            assert "HumanMessage:decision: yes" in transcript(mine_out)
    assert contents(source) == before


def test_time_travel_and_the_backup_copy(source: str, theirs_copy: str, tmp_path: Path) -> None:
    target = tmp_path / "agentlog.db"
    report = migrate(source, target, backup_dir=tmp_path / "backup")
    with postgres_saver(theirs_copy) as theirs, AgentlogSaver(target) as ours:
        assert_time_travels_alike(ours, theirs)
    # The backup is a SQLite copy of the saver's tables: a source itself,
    # planning every thread as the server did.
    (copy,) = (tmp_path / "backup" / "source").iterdir()
    again = migrate(copy, tmp_path / "again.db", dry_run=True)
    assert again.source_kind == "langgraph-postgres"
    assert [(s.source_key, s.sha256) for s in again.sessions] == [
        (s.source_key, s.sha256) for s in report.sessions
    ]


def test_a_rerun_skips_and_a_changed_thread_is_refused(source: str, tmp_path: Path) -> None:
    assert_rerun_skips_and_change_is_refused(source, tmp_path / "agentlog.db", postgres_saver)


def test_reads_are_read_only_transactions(source: str) -> None:
    db = F.ForeignPostgres(source, "the source")
    try:
        assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes"} <= db.tables
        with pytest.raises(AgentlogError, match="in a read-only transaction"):
            db.read(lambda rows: rows.rows("DELETE FROM checkpoints"))
    finally:
        db.close()


def test_pickled_blobs_are_refused_then_carried(source: str, tmp_path: Path) -> None:
    with psycopg.connect(source) as conn:
        conn.execute(
            "UPDATE checkpoint_blobs SET type = 'pickle' WHERE thread_id = 't-1'"
            " AND channel = 'messages'"
        )
    before = contents(source)
    target = tmp_path / "agentlog.db"
    with pytest.raises(MigrationError, match=r"pickled values in .*channel messages"):
        migrate(source, target, dry_run=True)
    assert not target.exists()
    report = migrate(source, target, allow_pickle=True)
    assert report.migrated == len(report.sessions)
    assert contents(source) == before


def test_the_command_line_and_bad_sources(
    source: str, postgres_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "agentlog.db"
    main(["migrate", source, str(target), "--from", "langgraph-postgres", "--dry-run"])
    assert capsys.readouterr().out.startswith("langgraph-postgres source,")
    with psycopg.connect(source) as conn:
        conn.execute("UPDATE checkpoints SET checkpoint = '[1]' WHERE thread_id = 't-2'")
    before = contents(source)
    with pytest.raises(SystemExit) as exited:
        main(["migrate", source, str(target)])
    assert exited.value.code != 0
    err = capsys.readouterr().err
    assert "not a checkpoint" in err and len(err.strip().splitlines()) == 1
    assert not target.exists()
    assert contents(source) == before
    empty = new_schema(postgres_server, postgres_schema(tmp_path / "empty"))
    with pytest.raises(SystemExit):
        main(["migrate", empty, str(target)])
    assert "no checkpoint_blobs table" in capsys.readouterr().err
    assert not target.exists()


def test_the_benchmark_runs(tmp_path: Path, postgres_server: str) -> None:
    """``python -m benchmarks.migrate_frameworks`` at a tiny size (a smoke
    test: no timings asserted): each source is written, migrated and measured."""
    out = tmp_path / "bench.json"
    argv = ["--sessions", "3", "--items", "2", "--conninfo", postgres_server, "--json", str(out)]
    # The two LangGraph sources only: each framework's import is a cost of its own.
    argv += ["--sources", "langgraph-sqlite,langgraph-postgres"]
    done = run_benchmark(tmp_path, "-m", "benchmarks.migrate_frameworks", *argv)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [row["source"] for row in rows] == ["langgraph-sqlite", "langgraph-postgres"]
    for row in rows:
        assert row["units"] >= row["sessions"] == 3 and row["items"] == 6
        assert row["items_per_s"] > 0 and row["source_bytes"] > 0 and row["agentlog_bytes"] > 0
    assert "sessions/s" in done.stdout
