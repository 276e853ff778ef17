"""``python -m benchmarks.telemetry`` end to end at a tiny size (a smoke test: no
timings asserted), on each engine."""

from __future__ import annotations

import json
from pathlib import Path

from ..benchmark_run import run_benchmark


def test_the_cost_benchmark_measures_every_mode(tmp_path: Path, engine: str) -> None:
    out = tmp_path / "cost.json"
    argv = ("--appends", "40", "--rounds", "1", "--engines", engine, "--json", str(out))
    run = run_benchmark(tmp_path, "-m", "benchmarks.telemetry", *argv)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "µs/append" in run.stdout
    rows = json.loads(out.read_text())
    found = {(row["workload"], row["mode"]) for row in rows if row["engine"] == engine}
    assert found == {
        (workload, mode)
        for workload in ("1 thread", "4 threads")
        for mode in ("off", "noop", "sdk", "export")
    }
    assert all(row["us_per_append"] > 0 and len(row["rounds_us"]) == 1 for row in rows)
    assert all(row["over_off_us"] == 0 for row in rows if row["mode"] == "off")
