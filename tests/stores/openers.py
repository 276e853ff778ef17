"""How the store suites open each implementation: in memory, SQLite on each engine,
or PostgreSQL (a schema of the test server's per test); and the test classes that
run one suite on each of them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentlog.stores import InMemoryStorage, SqliteStorage

from ..conftest import PYTHON, OnEngine, OnPostgres, postgres_conninfo, postgres_schema


class InMemoryStorageOpener:
    durable = False

    def open_storage(self, location: Path) -> Any:
        return InMemoryStorage()

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        chunks = storage.artifacts._blobs[sha256][0]
        chunks[0] = b"X" + chunks[0][1:]
        return True


class SqliteStorageOpener(OnEngine):
    multiprocess = True

    def open_storage(self, location: Path) -> Any:
        return SqliteStorage.open(location / "agentlog.db", engine=self.engine)

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        # From another process: this one has the file open with an engine
        # whose SQLite may not be the standard library's.
        script = (
            "import sqlite3, sys\n"
            "conn = sqlite3.connect(sys.argv[1])\n"
            "conn.execute(\"UPDATE blob_chunks SET data = CAST(X'00' || substr(data, 2) AS BLOB)"
            ' WHERE sha256 = ? AND n = 0", (sys.argv[2],))\n'
            "conn.commit()\n"
        )
        subprocess.run([PYTHON, "-c", script, str(location / "agentlog.db"), sha256], check=True)
        return True


class PostgresStorageOpener(OnPostgres):
    multiprocess = True

    def open_storage(self, location: Path) -> Any:
        from agentlog.stores import PostgresStorage

        return PostgresStorage.open(
            postgres_conninfo(), schema=postgres_schema(location), pool_max_size=4
        )

    def tamper(self, storage: Any, location: Path, sha256: str) -> bool:
        import psycopg

        schema = postgres_schema(location)
        with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
            conn.execute(
                f"UPDATE {schema}.blob_chunks SET data = '\\x00'::bytea || substring(data from 2)"
                " WHERE sha256 = %s AND n = 0",
                (sha256,),
            )
        return True


#: Where a suite runs: the backend's part of the test class's name and the
#: opener class (a SQLite one runs on each engine: it is an OnEngine).
Backend = tuple[str, type]

STORAGES: tuple[Backend, ...] = (
    ("InMemory", InMemoryStorageOpener),
    ("Sqlite", SqliteStorageOpener),
    ("Postgres", PostgresStorageOpener),
)


def suite_on_each(
    suite: type, stem: str, module: str, backends: Iterable[Backend] = STORAGES
) -> dict[str, type]:
    """One test class per backend running ``suite``, named
    ``Test{backend}{stem}`` and belonging to ``module``: the test module
    puts them at its top level, where pytest collects them and spawned racers
    import them by name."""
    classes: dict[str, type] = {}
    for backend, opener in backends:
        name = f"Test{backend}{stem}"
        body: dict[str, Any] = {"__module__": module, "__qualname__": name}
        classes[name] = type(name, (opener, suite), body)
    return classes
