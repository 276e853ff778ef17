"""What ``/api/config`` tells a page about the store (finding 11 of issue 40):
a PostgreSQL location's ``password`` and ``sslpassword`` are never in it."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentlog.cli.serve import viewer_source

from ..conftest import postgres_conninfo, postgres_schema
from .conftest import guarded_client


def test_the_config_hides_the_password_and_sslpassword(
    postgres_server: str, tmp_path: Path
) -> None:
    from agentlog import PostgresCheckpointer

    schema = postgres_schema(tmp_path)
    location = f"{postgres_conninfo()} sslpassword=hush-ssl-secret"
    PostgresCheckpointer(postgres_conninfo(), schema=schema).close()  # creates it
    args = argparse.Namespace(store=location, tenant="default", schema=schema, allow_writes=False)
    source = viewer_source(args)
    try:
        with guarded_client(source) as client:
            config = client.get("/api/config")
            assert config.status_code == 200
            assert "hush-ssl-secret" not in config.text
            assert "sslpassword=***" in config.json()["store"]
    finally:
        source.close()
        import psycopg

        with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
