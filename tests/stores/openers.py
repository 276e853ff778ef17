"""How the store suites open each implementation: in memory, or SQLite on one engine."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from agentlog.stores import InMemoryStorage, SqliteStorage

from ..conftest import PYTHON, OnEngine


class InMemoryStorageOpener:
    durable = False

    def open_storage(self, location: Path) -> Any:
        return InMemoryStorage()


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
