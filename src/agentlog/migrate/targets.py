"""Where a migration writes: an agentlog SQLite file or a PostgreSQL store.

Each target reads its sessions and ledger for the plan without creating
anything, backs itself up where it can, and writes every pending session and
its ledger row in one transaction.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..engine import Connection, open_engine
from ..engine import migration_rows as M
from ..errors import SchemaVersionError
from ..files import remove_created
from ..integrity import Progress
from ..locations import is_postgres
from .common import Converted, MigrationError, PlannedSession, open_read_only

__all__ = ["MigrationRun", "PostgresTarget", "SqliteTarget", "Target", "ledger_row", "open_target"]

#: Reads one planned unit from the (backed-up) source, for the write.
Load = Callable[[PlannedSession], Converted]


@dataclass(frozen=True, slots=True)
class MigrationRun:
    """What every session of one migration shares: the tenant it lands in, the
    source's name and format in the ledger, and where the write shows its progress."""

    tenant: str
    source_id: str
    source_format: str
    progress: Progress | None = None


# The targets below spell these signatures again: a Protocol and its implementations.
class Target(Protocol):
    """A migration's target."""

    def read(self, run: MigrationRun) -> tuple[set[str], dict[str, str]]:
        """(the run's tenant's session ids, ``{source key: sha256}`` from its
        ledger for the run's source), read-only: nothing is created, not even a schema."""
        ...

    def backup(self, into: Path) -> None:
        """Copy the target as it is into the directory ``into``, where it can."""
        ...

    def write(self, pending: Sequence[PlannedSession], load: Load, run: MigrationRun) -> None:
        """Every pending unit and a ledger row each, in one transaction."""
        ...


def ledger_row(
    planned: PlannedSession, run: MigrationRun
) -> tuple[str, str, str, str, str, float, str]:
    """A migrated unit's ledger row, in both targets' column order: (source_id,
    source_key, sha256, tenant, session_id, migrated, source_format)."""
    key, sha, session = planned.source_key, planned.sha256, planned.session_id
    return (run.source_id, key, sha, run.tenant, session, time.time(), run.source_format)


class SqliteTarget:
    """An agentlog SQLite file (created by the apply if it does not exist)."""

    def __init__(self, path: Path, engine: str | None) -> None:
        self.path, self.engine = path, engine

    def read(self, run: MigrationRun) -> tuple[set[str], dict[str, str]]:
        if not self.path.exists():
            return set(), {}
        db = open_read_only(self.path, self.engine, SchemaVersionError)
        try:
            version = db.schema_version
            if version == 0:
                return set(), {}

            def work(conn: Connection) -> tuple[set[str], dict[str, str]]:
                sessions = M.session_names(conn, run.tenant)
                ledger = {}
                if version >= 6:
                    ledger = M.ledger(conn, run.source_id, run.tenant)
                return sessions, ledger

            return db.read("read target", work, snapshot=True)
        finally:
            db.close()

    def backup(self, into: Path) -> None:
        if self.path.exists():
            # A consistent copy even with the WAL in use, through the engine
            # that may already hold the file in this process.
            live = open_engine(self.path, engine=self.engine, read_only=True)
            try:
                live.backup_to(str(into / "target-before.db"))
            finally:
                live.close()

    def write(self, pending: Sequence[PlannedSession], load: Load, run: MigrationRun) -> None:
        created = not os.path.lexists(self.path)
        db = open_engine(self.path, engine=self.engine)

        def work(conn: Connection) -> None:
            for done, planned in enumerate(pending, 1):
                unit = load(planned)
                if M.session_exists(conn, run.tenant, planned.session_id):
                    raise MigrationError(f"session {planned.session_id!r} appeared in the target")
                sid = db.create_session(
                    conn,
                    run.tenant,
                    planned.session_id,
                    head=unit.first_seq - 1 + len(unit.events),
                    ts=unit.created,
                    mtime=unit.active,
                    revision=unit.revision,
                    metadata=unit.metadata,
                )
                db.insert_events(conn, sid, unit.first_seq - 1, unit.events)
                for through, state, taken in unit.snapshots:
                    M.insert_snapshot(conn, sid, through, state, taken)
                if unit.origin is not None:
                    M.insert_fork_origin(conn, sid, run.tenant, unit.origin)
                M.record_migration(conn, ledger_row(planned, run))
                if run.progress:
                    run.progress(done, len(pending))

        try:
            db.write("migrate", work)
        except BaseException:
            db.close()
            if created:
                remove_created(self.path)  # it holds nothing: the batch rolled back
            raise
        finally:
            db.close()


class PostgresTarget:
    """An agentlog store in a PostgreSQL schema (created by the apply, in its
    transaction, if it does not exist). Needs the ``postgres`` extra."""

    def __init__(self, url: str, schema: str | None) -> None:
        try:
            from ..engine import postgres
        except ImportError:
            raise MigrationError(
                "a PostgreSQL target needs psycopg: pip install 'agentlog[postgres]'"
            ) from None
        self._pg = postgres
        self.url = url
        self.schema = postgres.check_schema_name(schema or postgres.DEFAULT_SCHEMA)

    def read(self, run: MigrationRun) -> tuple[set[str], dict[str, str]]:
        pg = self._pg
        with pg.one_transaction(self.url, self.schema, "read the migration target") as rows:
            state: tuple[set[str], dict[str, str]] = rows.run(
                pg.migration.target_state, run.tenant, run.source_id
            )
            return state

    def backup(self, into: Path) -> None:
        """Nothing: a PostgreSQL database is backed up with ``pg_dump`` (see the README)."""

    def write(self, pending: Sequence[PlannedSession], load: Load, run: MigrationRun) -> None:
        pg = self._pg
        with pg.one_transaction(self.url, self.schema, "migrate into PostgreSQL") as rows:
            # The schema is created (or brought forward) in this transaction:
            # a failed migration leaves no empty store behind.
            rows.perform(pg.migrate(self.schema))
            for done, planned in enumerate(pending, 1):
                unit = load(planned)
                session = (
                    unit.first_seq - 1 + len(unit.events),
                    unit.revision,
                    unit.created,
                    unit.active,
                    unit.metadata,
                )
                imported = rows.run(
                    pg.migration.import_session,
                    run.tenant,
                    planned.session_id,
                    session,
                    unit.first_seq,
                    unit.events,
                    unit.snapshots,
                    ledger_row(planned, run),
                    unit.origin,
                )
                if not imported:
                    raise MigrationError(f"session {planned.session_id!r} appeared in the target")
                if run.progress:
                    run.progress(done, len(pending))


def open_target(target: str | os.PathLike[str], engine: str | None, schema: str | None) -> Target:
    """The target ``target`` names: a PostgreSQL URL or a SQLite file's path."""
    if isinstance(target, str) and is_postgres(target):
        return PostgresTarget(target, schema)
    if schema is not None:
        raise MigrationError("schema applies to a PostgreSQL target only")
    return SqliteTarget(Path(target), engine)
