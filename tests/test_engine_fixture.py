"""The engine rule of tests/conftest.py: an engine that is not built here is
skipped with the reason it is missing, and under AGENTLOG_REQUIRE_EXTENSIONS=1
fails instead (in setup) — for the ``engine`` fixture and for classes bound to one engine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentlog import engine as engines

from .conftest import PYTHON, TESTS_DIR, OnEngine, child_env, require_engine

REASON = "ImportError: no C engine in this build"


@pytest.fixture
def without_the_c_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as if the C engine had failed to build."""
    monkeypatch.delitem(engines.AVAILABLE_ENGINES, "c", raising=False)
    monkeypatch.setattr(engines, "DEFAULT_ENGINE", "python")
    monkeypatch.setattr(engines, "_extension_error", REASON)


def test_the_fixture_gives_only_built_engines(engine: str) -> None:
    assert engine in engines.AVAILABLE_ENGINES


@pytest.mark.parametrize("engine", ["c"], indirect=True)
class TestOnEngineC(OnEngine):
    def test_runs_only_where_the_engine_is_built(self) -> None:
        assert "c" in engines.AVAILABLE_ENGINES


@pytest.mark.usefixtures("without_the_c_engine")
def test_a_missing_engine_is_skipped_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    for unset in (None, "", "0"):
        if unset is None:
            monkeypatch.delenv("AGENTLOG_REQUIRE_EXTENSIONS", raising=False)
        else:
            monkeypatch.setenv("AGENTLOG_REQUIRE_EXTENSIONS", unset)
        with pytest.raises(pytest.skip.Exception, match="the c engine is not available") as info:
            require_engine("c")
        assert REASON in str(info.value)
        require_engine("python")  # a built engine goes on


@pytest.mark.usefixtures("without_the_c_engine")
def test_a_missing_engine_fails_when_extensions_are_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTLOG_REQUIRE_EXTENSIONS", "1")
    with pytest.raises(pytest.fail.Exception, match="AGENTLOG_REQUIRE_EXTENSIONS") as info:
        require_engine("c")
    assert REASON in str(info.value)
    require_engine("python")


def run_without_extensions(require: bool) -> subprocess.CompletedProcess[str]:
    """The two engine-bound tests above, in a pytest whose agentlog has no C engine."""
    env = child_env()
    env["AGENTLOG_NO_EXTENSIONS"] = "1"
    env.pop("AGENTLOG_REQUIRE_EXTENSIONS", None)
    if require:
        env["AGENTLOG_REQUIRE_EXTENSIONS"] = "1"
    here = Path(__file__).resolve()
    return subprocess.run(
        [
            PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rsE",
            "--rootdir", str(TESTS_DIR.parent),
            f"{here}::test_the_fixture_gives_only_built_engines",
            f"{here}::TestOnEngineC",
        ],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_without_the_c_engine_its_cases_skip_and_say_why() -> None:
    run = run_without_extensions(require=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 2 skipped" in run.stdout, run.stdout
    skipped = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 2, run.stdout
    assert all("disabled by AGENTLOG_NO_EXTENSIONS" in line for line in skipped), run.stdout


def test_without_the_c_engine_its_cases_fail_when_extensions_are_required() -> None:
    run = run_without_extensions(require=True)
    # The rule fails them in setup, before any store is opened: pytest's "error".
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 passed, 2 errors" in run.stdout, run.stdout
    errors = [line for line in run.stdout.splitlines() if line.startswith("ERROR ")]
    # (Whether pytest adds " - reason" to the line depends on the terminal's width.)
    assert [line.split(" - ")[0].split("::")[-1] for line in errors] == [
        "test_the_fixture_gives_only_built_engines[c]",
        "test_runs_only_where_the_engine_is_built[c]",
    ], run.stdout
    why = "the c engine is not available: disabled by AGENTLOG_NO_EXTENSIONS"
    # Each error's own report starts with the reason, once per test.
    assert [line for line in run.stdout.splitlines() if line.startswith(why)] == [
        f"{why} (AGENTLOG_REQUIRE_EXTENSIONS is set)"
    ] * 2, run.stdout
