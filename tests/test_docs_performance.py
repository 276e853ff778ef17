"""docs/performance.md holds exactly the rendering of docs/benchmarks.json."""

from __future__ import annotations

import copy
import importlib.util
import json
from types import ModuleType
from typing import Any

import pytest

from .conftest import TESTS_DIR

ROOT = TESTS_DIR.parent
SCRIPT = ROOT / "scripts" / "docs_performance.py"
DATA: dict[str, Any] = json.loads((ROOT / "docs" / "benchmarks.json").read_text())
PAGE = (ROOT / "docs" / "performance.md").read_text()


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_performance", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_s_tables_are_the_rendering_of_the_committed_run(script: ModuleType) -> None:
    assert script.between_markers(PAGE) == script.render(DATA), (
        "docs/performance.md is stale: run python scripts/docs_performance.py"
    )


def test_the_run_says_what_it_ran_on(script: ModuleType) -> None:
    machine = DATA["machine"]
    assert machine["cpu"] and machine["os"] and machine["python"]
    assert machine["cores"] >= 1
    assert machine["sqlite"], "no engine's SQLite version"
    shown = script.between_markers(PAGE)
    for value in (machine["cpu"], machine["os"], machine["python"], *machine["sqlite"].values()):
        assert str(value) in shown
    # The page says which kind of run it is, and the run is what the page says.
    assert ("--quick" in shown) == DATA["quick"]
    assert ("**This is a `--quick` run.**" in PAGE) == DATA["quick"]


def test_every_measured_figure_is_on_the_page(script: ModuleType) -> None:
    shown = script.between_markers(PAGE)
    for result in DATA["results"]:
        assert result["scenario"]["title"] in shown
        for cell in result["cells"]:
            if cell["rates"] and result["scenario"]["kind"] != "sessionstore":
                assert script.rate(cell["rate"]) in shown, (result["scenario"]["key"], cell)


def test_a_changed_figure_changes_the_rendering(script: ModuleType) -> None:
    """The comparison can fail: the rendering follows the data."""
    changed = copy.deepcopy(DATA)
    cell = changed["results"][0]["cells"][0]
    cell["rate"] = cell["rate"] * 2 + 1
    assert script.render(changed) != script.render(DATA)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(47_512, "47.5k"), (318_400, "318k"), (3_890_000, "3.89M"), (999_700, "1.00M"), (405, "405")],
)
def test_rates_read_as_three_significant_digits(
    script: ModuleType, value: float, shown: str
) -> None:
    assert script.rate(value) == shown


def test_check_mode_finds_a_stale_page(script: ModuleType, tmp_path: Any) -> None:
    page = tmp_path / "performance.md"
    page.write_text(script.updated(PAGE, "an old table"))
    data = tmp_path / "benchmarks.json"
    data.write_text(json.dumps(DATA))
    assert script.main(["--json", str(data), "--page", str(page), "--check"]) == 1
    assert script.main(["--json", str(data), "--page", str(page)]) == 0
    assert script.main(["--json", str(data), "--page", str(page), "--check"]) == 0
    assert page.read_text() == PAGE
