"""The benchmark runs end to end in its quick mode (a smoke test: no timings asserted)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .conftest import AVAILABLE, PYTHON, TESTS_DIR, child_env

ROOT = TESTS_DIR.parent


def test_quick_benchmark_prints_a_table_and_json(tmp_path: Path) -> None:
    env = child_env()
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [PYTHON, "-m", "benchmarks", "--quick", "--only", "S1 2k,S3 2k,S4", "--json", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "vs raw C" in run.stdout
    results = json.loads(out.read_text())["results"]
    assert [r["scenario"]["key"] for r in results] == ["S1 2k", "S3 2k", "S4 head()"]
    for result in results:
        cells = {cell["system"]: cell for cell in result["cells"]}
        for system in ("raw-c", "agentlog-python", *(["agentlog-c"] if "c" in AVAILABLE else [])):
            assert cells[system]["rate"] > 0, (result["scenario"]["key"], system, cells[system])
            assert cells[system]["peak_rss_kb"] > 0


def test_the_micro_benchmarks_run_as_tests(tmp_path: Path) -> None:
    """benchmarks/test_hot_paths.py, once each with --benchmark-disable: every hot
    path it times still works (and its own asserts hold)."""
    env = child_env()
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [
            PYTHON,
            "-m",
            "pytest",
            str(ROOT / "benchmarks" / "test_hot_paths.py"),
            "--benchmark-disable",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(ROOT),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    engines = 2 if "c" in AVAILABLE else 1
    assert f"{7 * engines} passed" in run.stdout, run.stdout[-2000:]


def test_a_short_soak_verifies_everything_and_keeps_the_wal_bounded(tmp_path: Path) -> None:
    """benchmarks/soak.py for a few seconds: two log writers (appends, truncates,
    forks, deletes), the stores (a CAS counter, artifacts up to 2 MB) and a
    follower on one file. The soak itself checks every session against its
    writer's journal, the counter and every artifact's sha256 (and fails
    otherwise); here: it ran, and the WAL stayed within its bound plus the
    largest transaction and the commits between two looks."""
    env = child_env()
    env["PYTHONPATH"] = str(ROOT)
    limit = 1024 * 1024
    run = subprocess.run(
        [
            PYTHON,
            "-m",
            "benchmarks.soak",
            "--seconds",
            "5",
            "--wal-size-limit",
            str(limit),
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["appends"] > 0 and result["counter"] > 0 and result["followed"] > 0
    assert result["wal_peak_bytes"] < limit + 8 * 1024 * 1024, result["wal_peak_bytes"]
    assert all(sample["fds"] for sample in result["samples"])
