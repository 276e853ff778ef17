"""The rows ``agentlog migrate`` reads from a SQLite source and writes to a
SQLite target, typed (the sessions and events themselves go through the
engine's ``create_session`` and ``insert_events``, as every writer's do).

Each operation runs inside the transaction the engine runs the migration's
work in (``conn``); the statements are :mod:`.sql`'s, and event keys are
packed here, never in :mod:`agentlog.migrate`.
"""

from __future__ import annotations

from . import schema as S
from . import sql as Q
from .interface import Connection
from .store_rows import Row

__all__ = [
    "insert_fork_origin",
    "insert_snapshot",
    "ledger",
    "record_migration",
    "session_exists",
    "session_names",
    "source_events",
    "source_names",
    "source_origin",
    "source_session",
    "source_snapshots",
]


# -- a SQLite source ---------------------------------------------------------------------


def source_names(conn: Connection, tenant: str) -> list[str]:
    """The names of a tenant's sessions, in order."""
    return [row[1] for row in conn.rows(Q.MIGRATE_SESSIONS, (tenant,))]


def source_session(conn: Connection, tenant: str, name: str) -> Row | None:
    """``(sid, name, head, revision, created, mtime, metadata)`` of a session, or None."""
    rows = conn.rows(Q.MIGRATE_SESSION, (tenant, name))
    return rows[0] if rows else None


def source_events(conn: Connection, sid: int) -> list[Row]:
    """Every stored event of session ``sid``, in order:
    ``(seq, ts, type, data, item_id, crc)``."""
    return conn.rows(Q.MIGRATE_EVENTS, (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)))


def source_snapshots(conn: Connection, sid: int) -> list[Row]:
    """Every snapshot of session ``sid``, in order: ``(through_seq, state, created)``."""
    return conn.rows(Q.MIGRATE_SNAPSHOTS, (sid,))


def source_origin(conn: Connection, tenant: str, name: str) -> tuple[str, int] | None:
    """``(source name, seq)`` a session was forked from, or None (no record)."""
    rows = conn.rows(Q.FORK_ORIGIN, (tenant, name))
    return (str(rows[0][0]), int(rows[0][1])) if rows else None


# -- a SQLite target ---------------------------------------------------------------------


def session_names(conn: Connection, tenant: str) -> set[str]:
    """The names of a tenant's sessions."""
    return {row[0] for row in conn.rows(Q.SESSION_NAMES, (tenant,))}


def ledger(conn: Connection, source_id: str, tenant: str) -> dict[str, str]:
    """What the migration ledger holds of a source: ``{source_key: sha256}``."""
    return dict(conn.rows(Q.LEDGER_SELECT, (source_id, tenant)))


def session_exists(conn: Connection, tenant: str, name: str) -> bool:
    """Whether the tenant has a session called ``name``."""
    return bool(conn.rows(Q.SELECT_SESSION, (tenant, name)))


def insert_snapshot(conn: Connection, sid: int, through: int, state: bytes, taken: float) -> None:
    """Save a snapshot of session ``sid`` as it was taken (no revision of its own)."""
    conn.rows(Q.INSERT_SNAPSHOT, (sid, through, state, taken))


def insert_fork_origin(conn: Connection, sid: int, tenant: str, origin: tuple[str, int]) -> None:
    """Record that session ``sid`` was forked from ``origin`` (``(source name, seq)``)."""
    conn.rows(Q.INSERT_FORK_ORIGIN, (sid, tenant, *origin))


def record_migration(conn: Connection, row: tuple[object, ...]) -> None:
    """Add a ledger row: ``(source_id, source_key, sha256, tenant, session_id,
    migrated, source_format)``."""
    conn.rows(Q.LEDGER_INSERT, row)
