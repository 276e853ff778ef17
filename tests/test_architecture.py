"""The house's arrows, checked: what each layer may reach of the one below.

SQL for SQLite lives in ``engine/`` only; the stores and migrate ask the
engine for rows, and the stores never import the log beside them; the C
engine's Cython sources reach no other object's underscore names; and the C
engine's table of prepared statements agrees with the enum that numbers them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agentlog.engine import sql as Q

from .conftest import require_engine

SRC = Path(__file__).resolve().parent.parent / "src" / "agentlog"

#: SQL as a statement starts (upper case: how agentlog writes its statements).
_SQL = re.compile(
    r"\b(SELECT\b.*\bFROM|INSERT (OR \w+ )?INTO|UPDATE \w+ SET|DELETE FROM|PRAGMA \w+"
    r"|CREATE (TABLE|INDEX)|BEGIN IMMEDIATE|VACUUM INTO)\b"
)


def _modules(under: str = "") -> list[Path]:
    return sorted((SRC / under).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (prose, which may name SQL)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _sql_literals(path: Path) -> list[str]:
    """The string literals of ``path`` (docstrings aside) that hold SQL."""
    tree = ast.parse(path.read_text(), str(path))
    prose = _docstrings(tree)
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in prose
        and _SQL.search(node.value)
    ]


def test_the_sql_check_finds_sql() -> None:
    assert _SQL.search(Q.SESSION_RECORD)
    assert _SQL.search(Q.MEMORY_PUT)
    assert _SQL.search(Q.DATA_VERSION)
    assert not _SQL.search("select a session, then delete it")


def test_no_sqlite_sql_outside_the_engine() -> None:
    found = {
        _name(path): literals
        for path in _modules()
        if not _name(path).startswith("engine/")
        for literals in [_sql_literals(path)]
        if literals
    }
    assert found == {}


def test_nothing_above_the_engine_runs_statements_of_its_own() -> None:
    """The stores and migrate ask ``engine/store_rows`` and
    ``engine/migration_rows`` for rows; nothing above the engine runs a
    statement on a connection (``.rows``) itself."""
    found = [
        f"{_name(path)}:{node.lineno}"
        for path in _modules()
        if not _name(path).startswith("engine/")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "rows"
    ]
    assert found == []


def _imported(path: Path) -> list[str]:
    """Every module ``path`` imports, as an absolute dotted name."""
    package = ("agentlog." + _name(path).removesuffix(".py").replace("/", ".")).split(".")[:-1]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names += [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return names


def test_the_stores_do_not_import_the_log() -> None:
    # The compositions of both (InMemoryStorage, SqliteStorage and
    # PostgresStorage, which hand out the log's face beside the four stores)
    # live above both, in agentlog/storage/.
    found = {
        _name(path): [name for name in _imported(path) if name.startswith("agentlog.log")]
        for path in _modules("stores")
    }
    assert {name: modules for name, modules in found.items() if modules} == {}


def test_the_import_check_resolves_relative_imports() -> None:
    assert "agentlog.engine.store_rows" in _imported(SRC / "stores" / "sessions.py")
    assert "agentlog.log.sqlite" in _imported(SRC / "storage" / "sqlite.py")


#: ``name._attr`` where ``name`` is not ``self``, or ``(...)._attr`` and
#: ``[...]._attr`` (a cast, a call, an item) but for ``super()`` and a cast of
#: ``self``: another object's underscore name.
_FOREIGN_UNDERSCORE = re.compile(
    r"(?:\b(?!self\b)[A-Za-z_]\w*|(?<!\bsuper\()(?<!\bself)\)|\])\._[A-Za-z]\w*"
)


def _cython_code(path: Path) -> list[tuple[int, str]]:
    """The lines of a Cython source, comments and string literals blanked."""
    text = re.sub(r'"""(?:.|\n)*?"""', lambda m: "\n" * m.group().count("\n"), path.read_text())
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"#.*", "", re.sub(r'"[^"]*"|\'[^\']*\'', '""', line))
        lines.append((number, line))
    return lines


def test_the_cython_sources_reach_no_other_objects_underscores() -> None:
    sources = sorted((SRC / "engine").glob("*.pyx")) + sorted((SRC / "engine").glob("*.pxi"))
    assert sources
    found = [
        f"{_name(path)}:{number}: {line.strip()}"
        for path in sources
        for number, line in _cython_code(path)
        if _FOREIGN_UNDERSCORE.search(line)
    ]
    assert found == []


def test_the_underscore_check_finds_a_reach() -> None:
    assert _FOREIGN_UNDERSCORE.search("return engine._idle_readers.pop()")
    assert _FOREIGN_UNDERSCORE.search("conn = <CConnection>other._writer")
    assert not _FOREIGN_UNDERSCORE.search("return <CConnection>self._writer")
    assert not _FOREIGN_UNDERSCORE.search("writer.w.callers += 1")
    assert _FOREIGN_UNDERSCORE.search("return (<Engine>other)._idle_readers")
    assert _FOREIGN_UNDERSCORE.search("first = pages[0]._rows")
    assert _FOREIGN_UNDERSCORE.search("open_writer(path)._queue")
    assert not _FOREIGN_UNDERSCORE.search("return super()._append_group(groups)")
    assert not _FOREIGN_UNDERSCORE.search("(<Engine>self)._writer")


def test_the_hot_statements_are_the_tables() -> None:
    assert len(Q.HOT_STATEMENTS) == len(Q.Hot)
    for member in Q.Hot:
        assert Q.HOT_STATEMENTS[member] == getattr(Q, member.name)


def test_the_c_engines_statement_numbers_are_the_enums() -> None:
    require_engine("c")
    from agentlog.engine import cengine

    assert cengine.statement_numbers() == {member.name: int(member) for member in Q.Hot}
