"""docs/compatibility.md states what the code and pyproject.toml do.

The schema numbers on the page are the code's constants and steps, the file
formats are what the backends write, the JSON v1 rule is the migration's,
and the Python versions and extras are pyproject's and CI's.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from agentlog import FileCheckpointer, SqliteCheckpointer
from agentlog.engine import schema
from agentlog.migrate import MigrationError, migrate

from .conftest import TESTS_DIR
from .engine.test_schema import make_old_file

ROOT = TESTS_DIR.parent
PAGE = (ROOT / "docs" / "compatibility.md").read_text()
PYPROJECT = ROOT / "pyproject.toml"
#: The page writes ranges with an en dash ("1\u201310").
DASH = "\u2013"


def section(heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading."""
    found = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#|\Z)", PAGE, re.M | re.S)
    assert found, f"no {heading!r} on docs/compatibility.md"
    return found[1]


def rows(text: str) -> list[list[str]]:
    """The body rows of the Markdown tables in ``text``, as stripped cells."""
    found = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(-*\|)+", line):
            found.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return [row for row in found if row[0] not in ("format", "version", "extra", "package", "")]


def glance(name: str) -> dict[str, str]:
    header = ["format", "kept in", "writes", "write", "read-only", "refuses"]
    table = {row[0]: dict(zip(header, row, strict=True)) for row in rows(section("## At a glance"))}
    return table[name]


def steps(heading: str) -> list[int]:
    return [int(row[0]) for row in rows(section(heading))]


def test_the_sqlite_numbers_are_the_code_s() -> None:
    v = schema.SCHEMA_VERSION
    row = glance("SQLite database")
    assert row["writes"] == str(v)
    assert row["write"] == f"{v}; 1{DASH}{v - 1} upgraded in place first"
    assert row["read-only"] == f"1{DASH}{v}, never changed"
    assert row["refuses"].startswith(f"{v + 1} and above")
    assert f"`{schema.APPLICATION_ID:#X}`".replace("0X", "0x") in PAGE
    assert f"a `user_version` above {v}" in PAGE


def test_the_sqlite_steps_are_the_code_s() -> None:
    assert steps("### SQLite schema versions") == sorted(schema.MIGRATIONS)
    integrity = rows(section("### SQLite schema versions"))[schema.INTEGRITY_VERSION - 1]
    assert "`crc`" in integrity[1]


def test_a_new_sqlite_file_is_written_at_the_stated_version(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    SqliteCheckpointer(db).close()
    with sqlite3.connect(db) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    assert str(version) == glance("SQLite database")["writes"]


@pytest.mark.parametrize("version", range(1, schema.SCHEMA_VERSION))
def test_an_older_file_backs_up_read_only_as_it_is(tmp_path: Path, version: int) -> None:
    """The page: a read-only backup of an older file works, and copies that
    version (a writable open of the copy upgrades it, as it would the file)."""
    assert "`agentlog backup` of an older file copies it as it is" in PAGE
    db = tmp_path / f"v{version}.db"
    make_old_file(db, version)
    with SqliteCheckpointer(db, read_only=True) as log:
        assert log.backup(tmp_path / "copy.db")["events"] == 1
    with sqlite3.connect(tmp_path / "copy.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
    conn.close()
    with SqliteCheckpointer(tmp_path / "copy.db", read_only=True) as copy:
        assert copy.head(copy.list()[0].id) == 1


def test_the_postgres_numbers_are_the_code_s() -> None:
    pytest.importorskip("psycopg")
    from agentlog.engine.postgres import schema as postgres

    v = postgres.SCHEMA_VERSION
    row = glance("PostgreSQL schema")
    assert row["writes"] == str(v)
    assert row["write"] == f"{v}; 1{DASH}{v - 1} upgraded in place first"
    assert row["refuses"].startswith(f"{v + 1} and above")
    assert steps("## PostgreSQL schemas") == sorted(postgres.MIGRATIONS)
    checksums = rows(section("## PostgreSQL schemas"))[postgres.CHECKSUM_VERSION - 1]
    assert "`crc`" in checksums[1]
    assert f"creates the schema at version {v}" in PAGE
    assert f"older one (1{DASH}{v - 1})" in PAGE


def test_the_file_store_writes_the_stated_format(tmp_path: Path) -> None:
    stated = int(glance("file store session file")["writes"])
    with FileCheckpointer(tmp_path) as log:
        log.append("chat-1", [{"type": "user", "content": "hi"}])
        log.set_metadata("chat-1", {"k": 1}, log.metadata("chat-1").revision)
    log_file = next(tmp_path.glob("*.jsonl"))
    meta_file = next(tmp_path.glob("*.jsonl.meta"))
    header = json.loads(log_file.read_text().splitlines()[0])
    line = json.loads(log_file.read_text().splitlines()[1])
    meta = json.loads(meta_file.read_text().splitlines()[0])
    assert header["agentlog"] == meta["agentlog"] == stated
    assert sorted(header) == ["agentlog", "created", "session"]
    assert sorted(meta) == ["agentlog", "base", "session"]
    assert sorted(line) == sorted(["seq", "end", "ts", "crc", "event"])
    assert f'`{{"agentlog": {stated}, "session": "<id>", "created": <ts>}}`' in PAGE


@pytest.mark.parametrize("version", [1, 2, 0])
def test_json_v1_is_the_one_version_migrated(tmp_path: Path, version: int) -> None:
    stated = glance("JSON v1 session file")["read-only"]
    assert stated.startswith("1, ")
    (tmp_path / "src" / "sessions").mkdir(parents=True)
    document = {"version": version, "id": "chat-1", "messages": [], "runs": []}
    (tmp_path / "src" / "sessions" / "chat-1.json").write_text(json.dumps(document))
    target = tmp_path / "target.db"
    if version == 1:
        report = migrate(tmp_path / "src", target, dry_run=True)
        assert [s.session_id for s in report.sessions] == ["chat-1"]
    else:
        with pytest.raises(
            MigrationError, match=r"not a JSON v1 session file \(version must be 1\)"
        ):
            migrate(tmp_path / "src", target, dry_run=True)
    assert not target.exists()


def project() -> tuple[str, list[str], dict[str, list[str]]]:
    """``(requires-python, dependencies, optional dependencies)`` of pyproject.toml
    (Python 3.10 has no tomllib: there, of the installed package's metadata,
    which a build writes from the same file)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        from .test_constraints import extras_script

        base, extras = extras_script.installed_requirements()
        return str(importlib.metadata.metadata("agentlog")["Requires-Python"]), base, extras
    if not PYPROJECT.exists():
        pytest.skip("pyproject.toml is not beside the tests")
    data: dict[str, Any] = tomllib.loads(PYPROJECT.read_text())["project"]
    return data["requires-python"], data["dependencies"], data["optional-dependencies"]


def normal(requirement: str) -> tuple[str, tuple[str, ...], str]:
    parsed = Requirement(requirement)
    return canonicalize_name(parsed.name), tuple(sorted(parsed.extras)), str(parsed.specifier)


def test_the_extras_are_pyproject_s() -> None:
    _, base, extras = project()
    stated = {
        row[0].strip("`"): sorted(normal(r) for r in re.findall(r"`([^`]+)`", row[1]))
        for row in rows(section("## Dependencies and extras"))
    }
    assert stated.pop("(none)") == sorted(normal(r) for r in base)
    assert stated == {name: sorted(normal(r) for r in reqs) for name, reqs in extras.items()}


def test_the_ends_tested_are_the_constraints_files() -> None:
    """The page's table of tested releases is the constraints files' pins of
    each framework extra's requirements, oldest and newest (each newest pin,
    where markers split it by Python)."""
    from .test_constraints import end, frameworks, pinned_version, pins_of

    stated = {row[0].strip("`"): row[1:] for row in rows(section("### Both ends tested"))}
    wanted = {r.name: r for reqs in frameworks().values() for r in reqs}
    assert sorted(stated) == sorted(wanted)
    for name, requirement in wanted.items():
        oldest, newest = stated[name]
        (pin,) = pins_of(end("oldest.txt"), requirement)
        assert oldest == str(pinned_version(pin))
        # Releases are three-part; a two-part number is a Python a marker names.
        found = re.findall(r"\d+(?:\.\d+){2,}", newest)
        assert found == [str(pinned_version(p)) for p in pins_of(end("newest.txt"), requirement)]


def python_row(label: str) -> str:
    table = {row[0]: row[1] for row in rows(section("## Python"))}
    return next(value for key, value in table.items() if key.startswith(label))


def test_the_python_versions_are_pyproject_s_and_ci_s() -> None:
    requires_python, _, _ = project()
    assert python_row("`requires-python`") == f"`{requires_python}`"
    ci = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    matrix = re.search(r"^\s*python: \[(.*)\]", ci, re.M)
    assert matrix
    tested = re.findall(r'"([\d.]+)"', matrix[1])
    assert python_row("tested in CI") == ", ".join(tested)
    if PYPROJECT.exists():  # the wheels' interpreters, from [tool.cibuildwheel]
        build = re.search(r'^build = "(.*)"', PYPROJECT.read_text(), re.M)
        assert build
        wheels = [f"{m[0]}.{m[1]}" for m in re.findall(r"cp(\d)(\d+)-", build[1])]
        assert python_row("wheels") == "CPython " + ", ".join(wheels)


def test_the_changelog_lists_every_schema_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sqlite_part, postgres_part = changelog.split("PostgreSQL (the `agentlog_version` table", 1)
    listed = [int(n) for n in re.findall(r"^\| (\d+) \|", sqlite_part, re.M)]
    assert listed == sorted(schema.MIGRATIONS)
    pytest.importorskip("psycopg")
    from agentlog.engine.postgres import schema as postgres

    listed = [int(n) for n in re.findall(r"^\| (\d+) \|", postgres_part, re.M)]
    assert listed == sorted(postgres.MIGRATIONS)
