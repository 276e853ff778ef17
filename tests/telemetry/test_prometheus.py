"""``/metrics`` during a workload, parsed back with prometheus_client's parser,
and the viewer's health page showing the same figures (``agentlog serve --metrics``)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from prometheus_client.parser import text_string_to_metric_families

from agentlog import SqliteCheckpointer, telemetry
from agentlog.telemetry.prometheus import active, enable

from ..serve.conftest import Viewer, make_store
from ..serve.http import get, get_json

EVENT = {"type": "user", "content": "hello"}


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    found: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        found[family.name] = [(s.name, s.labels, s.value) for s in family.samples]
    return found


def test_a_scrape_during_a_workload(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    metrics = enable()
    try:
        store = next(make_store("sqlite", tmp_path, request))
        writer = store.writer()
        writer.append("s0", [EVENT])
        with Viewer(store.source()) as viewer:
            stop = threading.Event()
            appended = [0]

            def work() -> None:
                while not stop.is_set() and appended[0] < 2000:
                    writer.append("s1", [EVENT, EVENT])
                    appended[0] += 2

            worker = threading.Thread(target=work)
            worker.start()
            try:
                reply = get(viewer.login("/metrics"))
            finally:
                stop.set()
                worker.join()
            assert reply.status == 200
            assert reply.headers["content-type"].startswith("text/plain")
            families = _families(reply.body.decode())
            # Counted while the workload ran: between the first append and all of them.
            ((_, labels, value),) = families["agentlog_events_appended"]
            assert labels == {"db_system_name": "sqlite", "db_operation_name": "append"}
            assert 1 <= value <= 1 + appended[0]
            duration = families["db_client_operation_duration_seconds"]
            counts = [v for name, lab, v in duration if name.endswith("_count")]
            assert counts and sum(counts) >= 1
            assert any(lab.get("le") == "+Inf" for _, lab, _ in duration)
            for name in (
                "agentlog_events_appended_size_bytes",
                "agentlog_sqlite_wal_size_bytes",
                "agentlog_sqlite_wal_checkpoints",
                "agentlog_writer_queue_depth",
            ):
                assert name in families, name

            # After the workload: the scrape and the health page agree.
            text = get(viewer.login("/metrics")).body.decode()
            total = _families(text)["agentlog_events_appended"][0][2]
            assert total == 1 + appended[0]
            health = get_json(viewer.login("/api/health"))
            shown = {
                row["name"]: row["value"]
                for row in health["telemetry"]["metrics"]
                if row["name"] == "agentlog_events_appended_total"
            }
            assert shown == {"agentlog_events_appended_total": total}
            assert health["telemetry"]["figures"]["wal_size_limit"] > 0
        assert active() is metrics
    finally:
        telemetry.uninstrument()
        metrics.shutdown()
    assert active() is None


def test_without_metrics_there_is_no_endpoint(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = next(make_store("sqlite", tmp_path, request))
    with SqliteCheckpointer(store.location) as log:
        log.append("s0", [EVENT])
    with Viewer(store.source()) as viewer:
        assert get(viewer.login("/metrics")).status == 404
        health = get_json(viewer.login("/api/health"))
        assert health["telemetry"]["metrics"] is None
        assert health["telemetry"]["figures"]["wal_bytes"] >= 0
