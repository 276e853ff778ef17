"""The benchmark runs end to end in its quick mode (a smoke test: no timings asserted)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from .benchmark_run import ROOT, run_benchmark
from .conftest import AVAILABLE


def test_quick_benchmark_prints_a_table_and_json(tmp_path: Path) -> None:
    """``python -m benchmarks --quick`` on four scenarios, end to end. Slow
    (about 35 s): each measurement runs in a fresh process, as in a real
    run, which is what this checks."""
    out = tmp_path / "bench.json"
    only = "S1 2k,S3 2k,S4,S5 4t"
    run = run_benchmark(tmp_path, "-m", "benchmarks", "--quick", "--only", only, "--json", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "vs raw C" in run.stdout and "vs min" in run.stdout
    results = json.loads(out.read_text())["results"]
    assert [r["scenario"]["key"] for r in results] == ["S1 2k", "S3 2k", "S4 head()", "S5 4t 10k"]
    for result in results:
        cells = {cell["system"]: cell for cell in result["cells"]}
        for system in ("raw-c", "agentlog-python", *(["agentlog-c"] if "c" in AVAILABLE else [])):
            assert cells[system]["rate"] > 0, (result["scenario"]["key"], system, cells[system])
            assert cells[system]["peak_rss_kb"] > 0
    by_key = {r["scenario"]["key"]: {c["system"]: c for c in r["cells"]} for r in results}
    # The second floor, on the minimal schema, beside appends and replays; the
    # replay's bar of payloads fetched as bytes with no JSON at all.
    for key in ("S1 2k", "S3 2k"):
        assert by_key[key]["raw-c-min"]["rate"] > 0, by_key[key]["raw-c-min"]
    assert by_key["S3 2k"]["sqlite3-bytes"]["rate"] > 0, by_key["S3 2k"]["sqlite3-bytes"]


def test_the_micro_benchmarks_run_as_tests(tmp_path: Path) -> None:
    """benchmarks/test_hot_paths.py, once each with --benchmark-disable: every hot
    path it times still works (and its own asserts hold)."""
    hot_paths = str(ROOT / "benchmarks" / "test_hot_paths.py")
    run = run_benchmark(
        tmp_path, "-m", "pytest", hot_paths, "--benchmark-disable", "-q",
        "-p", "no:cacheprovider", "--rootdir", str(ROOT),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    engines = 2 if "c" in AVAILABLE else 1
    # ... and layout.py's and growth.py's smoke tests, once each (growth's is
    # skipped without matplotlib).
    growth = "1 passed" if importlib.util.find_spec("matplotlib") else "1 skipped"
    passed = 8 * engines + 1 + (growth == "1 passed")
    assert f"{passed} passed" in run.stdout, run.stdout[-2000:]
    if growth == "1 skipped":
        assert "1 skipped" in run.stdout, run.stdout[-2000:]


def test_a_short_soak_verifies_everything_and_keeps_the_wal_bounded(tmp_path: Path) -> None:
    """benchmarks/soak.py for a few seconds: two log writers (appends, truncates,
    forks, deletes), the stores (a CAS counter, artifacts up to 2 MB) and a
    follower on one file. The soak itself checks every session against its
    writer's journal, the counter and every artifact's sha256 (and fails
    otherwise); here: it ran, and the WAL stayed within its bound plus the
    largest transaction and the commits between two looks."""
    limit = 1024 * 1024
    soak = ["-m", "benchmarks.soak", "--seconds", "5", "--wal-size-limit", str(limit), "--json"]
    run = run_benchmark(tmp_path, *soak)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["appends"] > 0 and result["counter"] > 0 and result["followed"] > 0
    assert result["wal_peak_bytes"] < limit + 8 * 1024 * 1024, result["wal_peak_bytes"]
    assert all(sample["fds"] for sample in result["samples"])


# -- PostgreSQL ------------------------------------------------------------------------------

PEERS = ("LangGraph PostgresSaver", "eventsourcing (PostgreSQL)")


def _postgres_bench(
    tmp_path: Path, conninfo: str, only: str, prelude: str = ""
) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    out = tmp_path / "pg.json"
    script = prelude + "import sys\nfrom benchmarks.postgres import main\nmain(sys.argv[1:])\n"
    argv = ["--conninfo", conninfo, "--quick", "--only", only, "--json", str(out)]
    run = run_benchmark(tmp_path, "-c", script, *argv)
    assert run.returncode == 0, run.stderr[-2000:]
    return run, json.loads(out.read_text())


def test_postgres_benchmark_processes_and_peers(tmp_path: Path, postgres_server: str) -> None:
    """S5 across 1 and 8 processes, and the peers' rows: a rate where a peer is
    installed, "not installed" where it is not. About 12 s: eight writer
    processes start against the server, as the benchmark runs them."""
    from benchmarks.systems import installed

    _, results = _postgres_bench(tmp_path, postgres_server, "S2,S5P")
    for label in ("S5 1 process(es)", "S5 8 process(es)", "S2 agentlog", "S2 raw psycopg"):
        assert isinstance(results[label], float) and results[label] > 0, label
    modules = ("langgraph.checkpoint.postgres", "eventsourcing.postgres")
    for peer, module in zip(PEERS, modules, strict=True):
        figure = results[f"S2 {peer}"]
        if installed(module):
            assert isinstance(figure, float) and figure > 0, peer
        else:
            assert figure == "not installed", peer


def test_postgres_benchmark_says_which_peers_are_not_installed(
    tmp_path: Path, postgres_server: str
) -> None:
    blocked = (
        "import sys\n"
        "for name in ('langgraph.checkpoint.postgres', 'eventsourcing'):\n"
        "    sys.modules[name] = None  # an import of it fails, as if it were not installed\n"
    )
    run, results = _postgres_bench(tmp_path, postgres_server, "S2", blocked)
    for peer in PEERS:
        assert results[f"S2 {peer}"] == "not installed"
        assert f"S2 {peer}" in run.stdout
    assert run.stdout.count("not installed") == 2
    assert isinstance(results["S2 agentlog"], float)
    # Each round's rate beside the median (one round under --quick): a ratio
    # between two rows is read per round.
    line = next(line for line in run.stdout.splitlines() if "S2 agentlog" in line)
    median = f"{results['S2 agentlog']:,.0f}"
    assert line.endswith(f"events/s  [{median}]"), line


def test_postgres_benchmark_reports_a_failing_peer_and_goes_on(
    tmp_path: Path, postgres_server: str
) -> None:
    from benchmarks.systems import installed

    if not installed("eventsourcing.postgres"):
        pytest.skip("eventsourcing is not installed (pip install -e '.[bench,postgres]')")
    broken = (
        "import eventsourcing.application\n"
        "def refuse(*args, **kwargs):\n"
        "    raise RuntimeError('the recorder refused')\n"
        "eventsourcing.application.Application.__init__ = refuse\n"
    )
    run, results = _postgres_bench(tmp_path, postgres_server, "S2", broken)
    label = "S2 eventsourcing (PostgreSQL)"
    assert results[label] == "failed: RuntimeError: the recorder refused"
    assert f"{label:<36} failed: RuntimeError: the recorder refused" in run.stdout
    assert isinstance(results["S2 agentlog"], float)
