"""The named loggers: slow operations, the WAL's bound, bad options."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentlog import SqliteCheckpointer, telemetry

from .conftest import make_telemetry

EVENT = {"type": "user", "content": "hello"}


def test_a_slow_operation_is_logged_above_the_threshold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentlog.telemetry")
    make_telemetry(slow_threshold=0.0)
    try:
        with SqliteCheckpointer(tmp_path / "a.db") as log:
            log.append("s1", [EVENT])
    finally:
        telemetry.uninstrument()
    slow = [r for r in caplog.records if r.name == "agentlog.telemetry"]
    assert len(slow) == 1
    assert slow[0].levelno == logging.WARNING
    assert slow[0].getMessage().startswith("slow append on sqlite: ")

    caplog.clear()
    make_telemetry(slow_threshold=3600.0)
    try:
        with SqliteCheckpointer(tmp_path / "a.db") as log:
            log.append("s1", [EVENT])
    finally:
        telemetry.uninstrument()
    assert [r for r in caplog.records if r.name == "agentlog.telemetry"] == []


def test_a_bad_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="slow_threshold"):
        telemetry.instrument(slow_threshold=-1.0)
    assert not telemetry.instrumented()


def test_the_wal_bound_is_logged_once_per_hit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    caplog.set_level(logging.INFO, logger="agentlog.engine")
    with SqliteCheckpointer(tmp_path / "a.db", wal_size_limit=4096, engine=engine) as log:
        for i in range(64):
            log.append("s1", [{"type": "user", "content": "x" * 512 + str(i)}])
        hits = log.figures()["wal_bounds_hit"]
    lines = [r.getMessage() for r in caplog.records if r.name == "agentlog.engine"]
    assert hits >= 1
    assert len(lines) == hits
    assert all("past its bound of 4096" in line for line in lines)


def test_a_schema_step_is_logged_and_a_new_file_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    from ..engine.test_schema import make_old_file

    caplog.set_level(logging.INFO, logger="agentlog.engine")
    make_old_file(tmp_path / "old.db", 10)
    SqliteCheckpointer(tmp_path / "old.db", engine=engine).close()
    SqliteCheckpointer(tmp_path / "new.db", engine=engine).close()
    lines = [r.getMessage() for r in caplog.records if r.name == "agentlog.engine"]
    assert len(lines) == 1
    assert "old.db: schema steps 10 to " in lines[0]
