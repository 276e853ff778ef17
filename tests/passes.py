"""Which pass of ``scripts/test`` runs which test modules.

``scripts/test`` runs the suite in four passes against one installed wheel:

- **main**: every test module, on the C engine (the default).
- **pure**: the modules listed in :data:`PURE` once more with
  ``AGENTLOG_NO_EXTENSIONS=1``, so that each test on "every engine" (or on
  the default one) runs on the stdlib ``sqlite3`` twin. These are the
  modules whose outcome can depend on the SQLite engine: the engine itself,
  the log and the stores on SQLite, the async twins over them, the shipped
  conformance suites, the CLI on SQLite and the schema steps.
- **oldest**: the modules in :data:`OLDEST`, with each framework at the
  oldest release of its extra's range (``constraints/oldest.txt``).
- **asan**: the modules in :data:`ASAN` (with :data:`ASAN_SELECT` as ``-k``)
  on a C engine built with AddressSanitizer and the fault-injection seam.

The modules in :data:`ONCE` never reach the SQLite engine through anything
the pure pass would change (PostgreSQL, the file and memory stores, the
viewer, the docs, packaging, the importers, the adapters over the log's
contract), or test the C engine alone: the main pass covers them.

Every test module is in exactly one of :data:`PURE` and :data:`ONCE`
(``tests/test_passes.py`` fails on a new module that is in neither, so
whoever adds one decides). ``python tests/passes.py NAME`` prints a pass's
paths, one a line, then the pytest options it adds (:data:`OPTIONS`), for
``scripts/test``.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The test tree (paths below are relative to the checkout, under it).
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: Modules (or whole directories) the pure-engine pass runs again.
PURE = (
    "tests/aio/test_checkpointer.py",
    "tests/aio/test_checkpointer_lifecycle.py",
    "tests/aio/test_follow.py",
    "tests/aio/test_stores.py",
    "tests/cli/test_check.py",
    "tests/cli/test_escapes.py",
    "tests/cli/test_sessions.py",
    "tests/engine/test_cross_engine.py",
    "tests/engine/test_fork.py",
    "tests/engine/test_group_commit.py",
    "tests/engine/test_interface.py",
    "tests/engine/test_leaks.py",
    "tests/engine/test_schema.py",
    "tests/engine/test_selection.py",
    "tests/engine/test_shared.py",
    "tests/log/test_crash.py",
    "tests/log/test_follow.py",
    "tests/log/test_handle.py",
    "tests/log/test_integrity.py",
    "tests/log/test_interrupts.py",
    "tests/log/test_lineage.py",
    "tests/log/test_operations.py",
    "tests/log/test_page_release.py",
    "tests/log/test_read_json.py",
    "tests/log/test_read_only_open.py",
    "tests/log/test_sqlite.py",
    "tests/stores/test_approval.py",
    "tests/stores/test_artifacts.py",
    "tests/stores/test_artifacts_large.py",
    "tests/stores/test_checkpoints.py",
    "tests/stores/test_memories.py",
    "tests/stores/test_sessions.py",
    "tests/stores/test_storage.py",
    "tests/telemetry",
    "tests/test_engine_fixture.py",
    "tests/test_migrate.py",
    "tests/test_private_files.py",
    "tests/testing/test_log.py",
    "tests/testing/test_races.py",
)

#: Modules (or whole directories) the main pass alone runs.
ONCE = (
    "tests/aio/test_postgres.py",
    "tests/cli/test_help.py",
    "tests/engine/test_crc32.py",
    "tests/engine/test_faults.py",
    "tests/engine/test_postgres_operations.py",
    "tests/engine/test_scan_json.py",
    "tests/engine/test_scan_window.py",
    "tests/integrations",
    "tests/log/test_file.py",
    "tests/log/test_file_lifecycle.py",
    "tests/log/test_file_safety.py",
    "tests/log/test_legacy.py",
    "tests/log/test_memory.py",
    "tests/log/test_postgres.py",
    "tests/log/test_postgres_arrays.py",
    "tests/log/test_postgres_crash.py",
    "tests/log/test_postgres_faults.py",
    "tests/log/test_postgres_ops.py",
    "tests/log/test_postgres_read_ahead.py",
    "tests/serve",
    "tests/stores/test_postgres_storage.py",
    "tests/test_append_key.py",
    "tests/test_architecture.py",
    "tests/test_bench.py",
    "tests/test_build.py",
    "tests/test_check_commits.py",
    "tests/test_cli_postgres.py",
    "tests/test_compatibility_doc.py",
    "tests/test_constraints.py",
    "tests/test_docs.py",
    "tests/test_docs_cli.py",
    "tests/test_docs_performance.py",
    "tests/test_errors.py",
    "tests/test_events.py",
    "tests/test_fold.py",
    "tests/test_memory_use.py",
    "tests/test_migrate_fidelity.py",
    "tests/test_migrate_lineage.py",
    "tests/test_migrate_postgres.py",
    "tests/test_packaging.py",
    "tests/test_passes.py",
    "tests/test_quality.py",
    "tests/test_readme.py",
    "tests/test_terminal.py",
    "tests/testing/test_package.py",
)

#: The adapters' tests and every PostgreSQL module, for the oldest releases.
OLDEST = (
    "tests/integrations",
    *sorted(
        str(path.relative_to(ROOT)) for path in TESTS.rglob("test*postgres*.py") if path.is_file()
    ),
    "tests/telemetry",
    "tests/test_constraints.py",
)

#: What the AddressSanitizer pass runs, narrowed by :data:`ASAN_SELECT`.
ASAN = ("tests/engine", "tests/log/test_sqlite.py", "tests/stores", "tests/aio")
ASAN_SELECT = "engine or sqlite or Sqlite"

PASSES = {"pure": PURE, "once": ONCE, "oldest": OLDEST, "asan": ASAN}

#: pytest's arguments beyond the paths, for a pass that narrows them.
OPTIONS = {"asan": ("-k", ASAN_SELECT)}


def modules() -> list[str]:
    """Every test module of the tree, as a path relative to the checkout."""
    return sorted(str(path.relative_to(ROOT)) for path in TESTS.rglob("test_*.py"))


def covers(entries: tuple[str, ...], module: str) -> bool:
    """Whether ``module`` is one of ``entries`` or lies in a directory among them."""
    return any(module == entry or module.startswith(entry + "/") for entry in entries)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PASSES:
        sys.exit(f"usage: python tests/passes.py {{{','.join(PASSES)}}}")
    name = sys.argv[1]
    print("\n".join([*(str(ROOT / entry) for entry in PASSES[name]), *OPTIONS.get(name, ())]))
