"""PostgresCheckpointer for operators: opening without creating, read-only,
statistics, retention (``delete_idle``) and the integrity check."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentlog import (
    SchemaVersionError,
    StorageNotFoundError,
    StorageUnavailableError,
)

from ..conftest import OnPostgres, postgres_conninfo, postgres_schema
from .test_postgres import _waiting_backend

EVENT = {"type": "user", "content": "hello"}


def _open(location: Path, **options: Any) -> Any:
    from agentlog import PostgresCheckpointer

    return PostgresCheckpointer(
        postgres_conninfo(), schema=postgres_schema(location), pool_max_size=2, **options
    )


def _sql(statement: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def _schema_exists(schema: str) -> bool:
    return bool(_sql(f"SELECT 1 FROM pg_namespace WHERE nspname = '{schema}'"))


class TestOpening(OnPostgres):
    @pytest.mark.parametrize("options", [{"create": False}, {"read_only": True}])
    def test_without_create_nothing_is_created(self, tmp_path: Path, options: Any) -> None:
        with pytest.raises(StorageNotFoundError, match="no agentlog store in schema"):
            _open(tmp_path, **options)
        assert not _schema_exists(postgres_schema(tmp_path))

    def test_a_newer_store_is_refused_read_only_too(self, tmp_path: Path) -> None:
        _open(tmp_path).close()
        _sql(f"UPDATE {postgres_schema(tmp_path)}.agentlog_version SET version = 99")
        for options in ({"create": False}, {"read_only": True}):
            with pytest.raises(SchemaVersionError, match="newer agentlog"):
                _open(tmp_path, **options)

    def test_read_only_reads_and_refuses_every_write(self, tmp_path: Path) -> None:
        with _open(tmp_path) as log:
            log.append("s", [EVENT])
        with _open(tmp_path, read_only=True) as log:
            assert log.read_only
            assert [event.event for event in log.read("s")] == [EVENT]
            port = log.writer_port()
            writes = [
                lambda: log.append("s", [EVENT]),
                lambda: port.append_prepared([port.prepare_append("s", [EVENT])]),
                lambda: log.truncate("s", 0),
                lambda: log.fork("s", 1, "t"),
                lambda: log.delete("s"),
                lambda: log.delete_idle(0),
            ]
            for write in writes:
                with pytest.raises(StorageUnavailableError, match="read-only"):
                    write()
            # The server refuses too: the pool's connections are read-only.
            with log.database.pool.connection() as conn:
                import psycopg

                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    conn.execute(f"DELETE FROM {log.schema}.events")
        with _open(tmp_path) as log:
            assert log.head("s") == 1

    def test_create_false_opens_an_existing_store_to_write(self, tmp_path: Path) -> None:
        _open(tmp_path).close()
        with _open(tmp_path, create=False) as log:
            assert log.append("s", [EVENT]) == 1


class TestOperations(OnPostgres):
    def test_stats(self, tmp_path: Path) -> None:
        with _open(tmp_path) as log:
            log.append("a", [EVENT] * 3)
            log.append("b", [EVENT])
            figures = log.stats()
        assert (figures["sessions"], figures["tenants"], figures["events"]) == (2, 1, 4)
        assert [row["session"] for row in figures["largest_sessions"]] == ["a", "b"]
        assert set(figures["relation_bytes"]) >= {"sessions", "events", "snapshots"}
        assert figures["total_bytes"] == sum(figures["relation_bytes"].values()) > 0
        from agentlog.engine.postgres import SCHEMA_VERSION

        assert figures["schema_version"] == SCHEMA_VERSION

    def test_delete_idle_keeps_what_was_written_after_the_cut(self, tmp_path: Path) -> None:
        with _open(tmp_path) as log, _open(tmp_path, tenant="other") as other:
            log.append("old-1", [EVENT])
            log.append("old-2", [EVENT])
            other.append("old-3", [EVENT])
            time.sleep(0.05)  # the clock moves past the cut (0.04 s) for these three
            log.append("new", [EVENT])
            assert log.delete_idle(0.04) == ["old-1", "old-2"]
            assert [info.id for info in log.list()] == ["new"]
            assert [event.seq for event in log.read("old-1")] == []
            assert other.head("old-3") == 1  # another tenant's
            with pytest.raises(ValueError):
                log.delete_idle(-1)

    def test_delete_idle_waits_for_an_append_and_keeps_its_session(self, tmp_path: Path) -> None:
        with _open(tmp_path) as log:
            log.append("busy", [EVENT])
            time.sleep(0.05)  # the clock moves past the cut (0.04 s): "busy" is idle
            schema = log.schema
            import psycopg

            # Another writer holds the session's row, then moves its mtime on.
            with psycopg.connect(postgres_conninfo()) as conn:
                conn.execute(f"SELECT 1 FROM {schema}.sessions WHERE name = 'busy' FOR UPDATE")
                result: list[Any] = []
                worker = threading.Thread(target=lambda: result.append(log.delete_idle(0.04)))
                worker.start()
                _waiting_backend(conn.info.backend_pid, postgres_conninfo())
                assert worker.is_alive()  # waiting for the row
                conn.execute(f"UPDATE {schema}.sessions SET mtime = %s", (time.time(),))
                conn.commit()
            worker.join(10)
            assert result == [[]]
            assert log.head("busy") == 1

    def test_check_integrity_finds_gaps_and_orphans(self, tmp_path: Path) -> None:
        with _open(tmp_path) as log:
            log.append("s", [EVENT] * 3)
            assert log.check_integrity() == (True, "ok")
            _sql(f"DELETE FROM {log.schema}.events WHERE seq = 1")
            _sql(
                f"INSERT INTO {log.schema}.events (tenant, session, seq, ts, type, payload)"
                " VALUES ('default', 'ghost', 1, 0, 'user', '\\x7b7d')"
            )
            ok, detail = log.check_integrity()
        assert not ok
        assert detail.splitlines() == [
            "session default/s: head 3, but 2 event(s) numbered 2..3",
            "1 event(s) of default/ghost, which has no session row",
        ]
