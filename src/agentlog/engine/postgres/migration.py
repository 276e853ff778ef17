"""``agentlog migrate`` into PostgreSQL: the target's operations, without I/O.

A migration reads what the target holds (without creating anything), then
writes every pending session and its ledger row in one transaction, the
events through the journal's writer in bulk (``COPY``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import SchemaVersionError
from .journal import Entry, write_entries
from .protocol import Operation, execute, fetch_all, fetch_one
from .schema import SCHEMA_VERSION, schema_version
from .statements import Statements

__all__ = ["import_session", "target_state"]


def target_state(
    q: Statements, tenant: str, source_id: str
) -> Operation[tuple[set[str], dict[str, str]]]:
    """(the tenant's session ids, ``{source key: sha256}`` from the ledger for
    ``source_id``); nothing is created, not even the schema."""
    schema = q.schema_name
    version = yield from schema_version(schema)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"schema {schema!r} was written by a newer agentlog (version {version})"
        )
    if version == 0:
        return set(), {}
    sessions = {row[0] for row in (yield from fetch_all(q.session_names, (tenant,)))}
    ledger: dict[str, str] = {}
    if version >= 3:
        ledger = {key: sha for key, sha in (yield from fetch_all(q.ledger, (source_id, tenant)))}
    return sessions, ledger


def import_session(
    q: Statements,
    tenant: str,
    name: str,
    session: Sequence[Any],
    first_seq: int,
    events: Sequence[Entry],
    snapshots: Sequence[tuple[int, bytes, float]],
    ledger_row: Sequence[Any],
    origin: tuple[str, int] | None = None,
) -> Operation[bool]:
    """One migrated session (in the migration's transaction): its row
    (``session``: head, revision, created, mtime, metadata), its events from
    ``first_seq``, its snapshots, its fork origin (``(source, seq)``, if it
    records one) and its ledger row. False, writing nothing, when the target
    already has a session of that name."""
    if (yield from fetch_one(q.import_session, (tenant, name, *session))) is None:
        return False
    yield from write_entries(q, tenant, name, first_seq - 1, events, bulk=True)
    for snapshot in snapshots:
        yield from execute(q.add_snapshot, (tenant, name, *snapshot))
    if origin is not None:
        yield from execute(q.insert_fork_origin, (tenant, name, *origin))
    yield from execute(q.ledger_insert, ledger_row)
    return True
