"""What every part of a migration shares: its errors, its plan and report, and
a source unit converted exactly as the apply writes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..engine import Engine, open_engine
from ..errors import CorruptDatabaseError, StorageDataError, StorageUnavailableError

__all__ = [
    "SOURCE_FORMATS",
    "Converted",
    "Event",
    "MigrationError",
    "MigrationReport",
    "PlannedSession",
    "open_read_only",
]

#: The provenance recorded for each kind of source (the ledger's
#: ``source_format``; for JSON v1 and file stores also the session's
#: ``metadata["source"]["format"]``).
SOURCE_FORMATS = {
    "json-v1": "json-v1",
    "file": "agentlog-file",
    "sqlite": "agentlog-sqlite",
    "openai-sqlite": "openai-agents-sqlite-session",
    "langgraph-sqlite": "langgraph-sqlite-saver",
    "langgraph-postgres": "langgraph-postgres-saver",
    "adk-database": "google-adk-database-session-service",
}

#: ``(ts, type, payload, item id)``: one event as the apply writes it.
Event = tuple[float, str, bytes, "str | None"]


class MigrationError(StorageDataError):
    """The migration cannot go ahead (conflicts, changed sources, bad files).

    Nothing was written."""


@dataclass(frozen=True, slots=True)
class PlannedSession:
    """What the plan says about one source unit (a file, or a SQLite session)."""

    source_key: str
    """The file's path relative to the source (``sessions/X.json``), or the
    session id for a SQLite source."""
    session_id: str
    """The id the session has in the target."""
    sha256: str
    action: str
    """``migrate``, ``skip``, ``changed`` or ``exists``."""
    original_id: str | None = None
    """The file's own id when agentlog cannot take it as it is (see
    :func:`agentlog.events.to_session_id`)."""
    notes: tuple[str, ...] = ()
    """What the conversion had to do to keep the file exactly (ids, exact JSON text)."""


@dataclass
class MigrationReport:
    """The outcome of :func:`agentlog.migrate.migrate` (or its plan, for a dry run)."""

    source_kind: str
    source_id: str
    dry_run: bool
    sessions: list[PlannedSession] = field(default_factory=list)
    backup: Path | None = None
    migrated: int = 0
    skipped: int = 0

    @property
    def conflicts(self) -> list[PlannedSession]:
        """Sessions that stop the migration: changed sources and existing targets."""
        return [s for s in self.sessions if s.action in ("changed", "exists")]


@dataclass(frozen=True, slots=True)
class Converted:
    """A source unit converted exactly as the apply writes it."""

    session_id: str
    original_id: str | None
    """The source's own id, when agentlog stores the session under another."""
    events: list[Event]
    metadata: bytes | None
    created: float
    active: float
    revision: int
    notes: tuple[str, ...] = ()
    first_seq: int = 1
    """The seq of ``events[0]``."""
    snapshots: tuple[tuple[int, bytes, float], ...] = ()
    """``(through seq, state, created)`` of a SQLite source's snapshots."""


def open_read_only(path: Path, engine: str | None, error: type[Exception]) -> Engine:
    """The SQLite file at ``path``, read-only; one no process has open is read
    without creating its ``-wal`` and ``-shm`` beside it. A file that is not
    a readable SQLite database raises ``error``."""
    idle = not any(Path(f"{path}{end}").exists() for end in ("-wal", "-shm", "-journal"))
    try:
        return open_engine(path, engine=engine, read_only=True, immutable=idle)
    except (CorruptDatabaseError, StorageUnavailableError) as exc:
        raise error(f"{path} is not a readable SQLite database ({exc})") from None
