"""The append's arrays, dumped to PostgreSQL's binary format by agentlog itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..conftest import OnPostgres, postgres_conninfo, postgres_schema

pytest.importorskip("psycopg")


def _fresh_adapters() -> Any:
    """psycopg's default adapters, without agentlog's: a connection made
    before agentlog's PostgreSQL engine was imported has these."""
    from psycopg import postgres
    from psycopg.adapt import AdaptersMap

    adapters = AdaptersMap(types=postgres.types)
    postgres.register_default_adapters(adapters)
    return adapters


def _round_trip(statement: str, *params: Any) -> Any:
    import psycopg

    with psycopg.connect(postgres_conninfo(), autocommit=True) as conn:
        row = conn.execute(statement, params).fetchone()
    assert row is not None
    return row[0]


class TestArrays(OnPostgres):
    @pytest.mark.parametrize(
        "values",
        [[b"{}"], [b"", b"\x00\xff", b"x" * 70_000, b'{"a": 1}'], []],
        ids=["one", "odd bytes", "none"],
    )
    def test_bytea_arrays_arrive_as_psycopg_sends_them(self, values: list[bytes]) -> None:
        from agentlog.engine.postgres.arrays import ByteaArray

        ours = _round_trip("SELECT %b::bytea[]", ByteaArray(values))
        assert ours == _round_trip("SELECT %b::bytea[]", values) == values

    def test_text_and_bigint_arrays(self) -> None:
        from agentlog.engine.postgres.arrays import Int8Array, TextArray

        kinds = ["user", "tool_result", ""]
        numbers = [0, 1, 2**32 - 1, -(2**63), 2**63 - 1]
        assert _round_trip("SELECT %b::text[]", TextArray(kinds)) == kinds
        assert _round_trip("SELECT %b::bigint[]", Int8Array(numbers)) == numbers
        assert _round_trip("SELECT cardinality(%b::bigint[])", Int8Array([])) == 0

    def test_text_arrays_refuse_what_is_not_ascii(self) -> None:
        from agentlog.engine.postgres.arrays import TextArray

        with pytest.raises(UnicodeEncodeError):
            TextArray(["caf\u00e9"])

    def test_adapt_registers_them_on_adapters_made_before(self) -> None:
        import psycopg
        from psycopg.adapt import PyFormat

        from agentlog.engine.postgres.arrays import ByteaArray, Int8Array, TextArray, adapt

        adapters = _fresh_adapters()
        with pytest.raises(psycopg.ProgrammingError):
            adapters.get_dumper(ByteaArray, PyFormat.BINARY)
        adapt(adapters)
        adapt(adapters)  # again: nothing changes
        for cls in (ByteaArray, TextArray, Int8Array):
            assert adapters.get_dumper(cls, PyFormat.BINARY).oid

    def test_a_pool_of_connections_made_before_appends_and_reads(self, tmp_path: Path) -> None:
        from psycopg_pool import ConnectionPool

        from agentlog import PostgresCheckpointer

        # Every connection of this pool starts without agentlog's dumpers.
        pool = ConnectionPool(
            postgres_conninfo(),
            kwargs={"autocommit": True, "context": _fresh_adapters()},
            min_size=1,
            max_size=1,
            open=True,
        )
        try:
            with PostgresCheckpointer(pool, schema=postgres_schema(tmp_path)) as log:
                events = [{"type": "user", "content": f"hello {n}"} for n in range(3)]
                head = log.append("s", events[:1], expected_head=0)
                head = log.append("s", events[1:], expected_head=head)
                assert head == 3
                assert [stored.event for stored in log.read("s")] == events
        finally:
            pool.close()
