"""The PostgreSQL backend: the conformance suite (two-process races and reopen
included), the schema guard, typed errors for a server that is gone or slow,
a backend killed mid-append, and exact payloads."""

from __future__ import annotations

from pathlib import Path

from agentlog import Checkpointer
from agentlog.testing import CheckpointerConformance

from ..conftest import OnPostgres, postgres_conninfo, postgres_schema


def open_postgres(location: Path, **options: object) -> Checkpointer:
    from agentlog import PostgresCheckpointer

    return PostgresCheckpointer(
        postgres_conninfo(), schema=postgres_schema(location), pool_max_size=4, **options
    )


class TestPostgresCheckpointer(OnPostgres, CheckpointerConformance):
    multiprocess = True

    def open_checkpointer(self, location: Path) -> Checkpointer:
        return open_postgres(location)
