"""Every SQL statement agentlog runs, beside the schema they run against.

The engines' hot paths, their cold paths, the four stores and the migration
all take their statements from here, so the tables of :mod:`.schema` are read
and written in one place. Event keys pack ``sid << 32 | seq``
(:func:`.schema.event_key`); ``& 4294967295`` and ``>> 32`` below unpack them.
"""

from __future__ import annotations

import enum

from .schema import MAX_SEQ, SEQ_BITS

assert (MAX_SEQ, SEQ_BITS) == (4294967295, 32), "the statements below unpack 32-bit seqs"

# -- transactions ------------------------------------------------------------------

BEGIN_WRITE = "BEGIN IMMEDIATE"
BEGIN_READ = "BEGIN"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"

# -- sessions ----------------------------------------------------------------------

SELECT_SESSION = "SELECT sid, head FROM sessions WHERE tenant = ? AND name = ?"
SELECT_HEAD = "SELECT head FROM sessions WHERE tenant = ? AND name = ?"
#: The number a new session takes: one past the largest (sids are never reused
#: while a larger one exists, and the bound is checked before the insert).
NEXT_SID = "SELECT coalesce(max(sid), 0) + 1 FROM sessions"
#: ``active`` is set here, so the insert trigger (schema step 13) finds
#: nothing to do on the hot path.
INSERT_SESSION = (
    "INSERT INTO sessions (sid, tenant, name, head, created, mtime, revision, metadata, active)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, CAST(?6 AS INTEGER))"
)
#: An append (or a truncation) moves the head; every write adds one revision.
UPDATE_SESSION = "UPDATE sessions SET head = ?, mtime = ?, revision = revision + 1 WHERE sid = ?"
TOUCH_SESSION = "UPDATE sessions SET revision = revision + 1, mtime = ? WHERE sid = ?"
DELETE_SESSION = "DELETE FROM sessions WHERE sid = ?"

# -- append keys (idempotent appends) ------------------------------------------------

SELECT_APPEND_KEY = "SELECT digest, head FROM append_keys WHERE sid = ? AND key = ?"
FIND_APPEND_KEY = (
    "SELECT k.digest, k.head FROM sessions s JOIN append_keys k ON k.sid = s.sid"
    " WHERE s.tenant = ? AND s.name = ? AND k.key = ?"
)
INSERT_APPEND_KEY = "INSERT INTO append_keys (sid, key, digest, head) VALUES (?, ?, ?, ?)"
#: ``(new sid, sid, at_seq)``: a fork carries the keys of the appends it copies whole.
COPY_APPEND_KEYS = (
    "INSERT INTO append_keys (sid, key, digest, head)"
    " SELECT ?, key, digest, head FROM append_keys WHERE sid = ? AND head <= ?"
)
#: ``(sid, seq)``: forget the keys of the appends a truncate to ``seq`` undoes
#: (``-1``: all of them, for a delete).
DELETE_APPEND_KEYS_AFTER = "DELETE FROM append_keys WHERE sid = ? AND head > ?"

# -- fork lineage --------------------------------------------------------------------

#: ``(sid, tenant, source name, seq)``: a fork's origin, in the fork's write.
# OR REPLACE: a row a process of an older version left behind when it
# deleted the fork (it knows no fork_origins) is the new fork's to take.
INSERT_FORK_ORIGIN = (
    "INSERT OR REPLACE INTO fork_origins (sid, tenant, source, seq) VALUES (?, ?, ?, ?)"
)
DELETE_FORK_ORIGIN = "DELETE FROM fork_origins WHERE sid = ?"
FORK_ORIGIN = (
    "SELECT f.source, f.seq FROM sessions s JOIN fork_origins f ON f.sid = s.sid"
    " WHERE s.tenant = ? AND s.name = ?"
)
#: ``(tenant, source name)``: that session's forks, ``(name, seq)``.
FORKS_OF = (
    "SELECT s.name, f.seq FROM fork_origins f JOIN sessions s ON s.sid = f.sid"
    " WHERE f.tenant = ? AND f.source = ?"
)

LIST_SESSIONS = (
    "SELECT name, mtime, head FROM sessions WHERE tenant = ? ORDER BY mtime DESC, sid DESC"
)
#: The Checkpointer face's metadata: the same column the SessionStore reads.
SELECT_METADATA = "SELECT metadata, revision FROM sessions WHERE tenant = ? AND name = ?"
SELECT_REVISION = "SELECT sid, revision FROM sessions WHERE tenant = ? AND name = ?"
#: Setting metadata is a write like any other: one revision, and activity.
SET_METADATA = "UPDATE sessions SET metadata = ?, revision = revision + 1, mtime = ? WHERE sid = ?"
LIST_SESSIONS_METADATA = (
    "SELECT name, mtime, head, metadata, revision FROM sessions WHERE tenant = ?"
    " ORDER BY mtime DESC, sid DESC"
)
#: A page of a tenant's sessions by activity, ``(active second, name)``
#: descending (keyset paging: the row value comparison is a range of
#: ``sessions_by_active_second``, so a page reads its own rows only). The
#: cursor is a row's exact mtime; it is truncated to its second here.
LIST_SESSIONS_PAGE = (
    "SELECT name, mtime, head, metadata, revision FROM sessions WHERE tenant = ?"
    " ORDER BY active DESC, name DESC LIMIT ?"
)
LIST_SESSIONS_PAGE_AFTER = (
    "SELECT name, mtime, head, metadata, revision FROM sessions WHERE tenant = ?"
    " AND (active, name) < (CAST(? AS INTEGER), ?) ORDER BY active DESC, name DESC LIMIT ?"
)
#: Every session of every tenant, most recently active first.
LIST_ALL_SESSIONS = "SELECT tenant, name, mtime, head FROM sessions ORDER BY mtime DESC, sid DESC"
_SESSION_RECORD = (
    "s.head, s.revision, s.metadata, s.created, s.mtime,"
    " (SELECT max(through_seq) FROM snapshots WHERE sid = s.sid)"
)
SESSION_RECORD = (
    f"SELECT s.sid, {_SESSION_RECORD} FROM sessions s WHERE s.tenant = ? AND s.name = ?"
)
SESSION_RECORDS = (
    f"SELECT s.name, {_SESSION_RECORD} FROM sessions s"
    " WHERE s.tenant = ? AND s.name > ? ORDER BY s.name LIMIT ?"
)
SESSION_NAMES = "SELECT name FROM sessions WHERE tenant = ?"

# -- events ------------------------------------------------------------------------

INSERT_EVENT = "INSERT INTO events (id, ts, type, data, crc) VALUES (?, ?, ?, ?, ?)"
#: ``(id, ts, type, data, crc, digest, item_id)``: the cold path's insert.
INSERT_ITEM = (
    "INSERT INTO events (id, ts, type, data, crc, digest, item_id) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
#: One page of a forward scan: ``(tenant, name, since_seq, limit)``. The session
#: lookup and the range are one statement so a page is one consistent snapshot.
#: (Plain ``?`` placeholders only: Python 3.12+ treats ``?NNN`` as named.)
SCAN_EVENTS = (
    "SELECT e.id & 4294967295, e.ts, e.type, e.data, e.crc"
    " FROM sessions s JOIN events e"
    " ON s.tenant = ? AND s.name = ?"
    " AND e.id > (s.sid << 32) + ? AND e.id <= (s.sid << 32) + 4294967295"
    " ORDER BY e.id LIMIT ?"
)
#: What a deep check and ``verify`` look at, a page of keys in (?, ?]:
#: ``(seq, data, crc, digest)``.
EVENTS_CHECKED = (
    "SELECT id & 4294967295, data, crc, digest FROM events"
    " WHERE id > ? AND id <= ? ORDER BY id LIMIT ?"
)
#: The chain link of one event (``NULL`` when it has none), by key.
EVENT_DIGEST = "SELECT digest FROM events WHERE id = ?"
#: Every session of the file: ``(sid, tenant, name, head)``.
#: Every session with the seq its newest snapshot covers (0 without one): a
#: deep check's list, where events up to that seq may have been pruned.
ALL_SESSIONS = (
    "SELECT sid, tenant, name, head,"
    " coalesce((SELECT max(through_seq) FROM snapshots p WHERE p.sid = s.sid), 0)"
    " FROM sessions s ORDER BY tenant, name"
)
#: The SessionStore's items with keys in (?, ?]: ``(seq, ts, type, data, crc)``.
ITEMS_BETWEEN = (
    "SELECT id & 4294967295, ts, type, data, crc FROM events WHERE id > ? AND id <= ? ORDER BY id"
)
ITEM_TAKEN = "SELECT 1 FROM events WHERE (id >> 32) = ? AND item_id = ?"
#: The seq of the first event stored in key range (?, ?] (one seek): a session's
#: events start there once retention has pruned the ones before it.
FIRST_EVENT = "SELECT id & 4294967295 FROM events WHERE id > ? AND id <= ? ORDER BY id LIMIT 1"
_FIRST_STORED = (
    "(SELECT e.id & 4294967295 FROM events e WHERE e.id > (s.sid << 32)"
    " AND e.id <= (s.sid << 32) + 4294967295 ORDER BY e.id LIMIT 1)"
)
#: ``(head, first stored seq or NULL)`` of a session: ``(tenant, name)``.
RETAINED = f"SELECT s.head, {_FIRST_STORED} FROM sessions s WHERE s.tenant = ? AND s.name = ?"
#: Per session, what an integrity check compares: ``(sid, tenant, name, head,
#: newest snapshot's through_seq or NULL)``; and the events in key range
#: (?, ?]: ``(count, first seq, last seq)``.
SESSION_EXTENTS = (
    "SELECT s.sid, s.tenant, s.name, s.head,"
    " (SELECT max(through_seq) FROM snapshots WHERE sid = s.sid) FROM sessions s ORDER BY s.sid"
)
EVENT_EXTENT = (
    "SELECT count(*), min(id & 4294967295), max(id & 4294967295) FROM events"
    " WHERE id > ? AND id <= ?"
)
EVENT_COUNT = "SELECT count(*) FROM events"
DELETE_EVENTS_BETWEEN = "DELETE FROM events WHERE id > ? AND id <= ?"
#: ``(source key base, target key base, source key base, last source key)``.
COPY_EVENTS = (
    "INSERT INTO events (id, ts, type, data, item_id, crc, digest)"
    " SELECT id - ? + ?, ts, type, data, item_id, crc, digest FROM events"
    " WHERE id > ? AND id <= ?"
)

# -- snapshots ---------------------------------------------------------------------

INSERT_SNAPSHOT = "INSERT INTO snapshots (sid, through_seq, state, created) VALUES (?, ?, ?, ?)"
SELECT_SNAPSHOT = (
    "SELECT through_seq, state, created FROM snapshots WHERE sid = ? AND through_seq = ?"
)
#: The seq a session's newest snapshot covers (0 without one).
SNAPSHOT_COVERS = "SELECT coalesce(max(through_seq), 0) FROM snapshots WHERE sid = ?"
DELETE_SNAPSHOTS_AFTER = "DELETE FROM snapshots WHERE sid = ? AND through_seq > ?"
#: Retention: the snapshots older than the retained start serve nothing.
DELETE_SNAPSHOTS_BEFORE = "DELETE FROM snapshots WHERE sid = ? AND through_seq < ?"
OLDEST_SNAPSHOT = "SELECT min(through_seq) FROM snapshots WHERE sid = ?"
#: ``(target sid, source sid, through_seq bound)``.
COPY_SNAPSHOTS = (
    "INSERT INTO snapshots (sid, through_seq, state, created)"
    " SELECT ?, through_seq, state, created FROM snapshots WHERE sid = ? AND through_seq <= ?"
)

# -- memory ------------------------------------------------------------------------

MEMORY_GET = (
    "SELECT value, revision, created, updated FROM memory"
    " WHERE tenant = ? AND namespace = ? AND key = ?"
)
MEMORY_PUT = (
    "INSERT OR REPLACE INTO memory (tenant, namespace, key, value, revision, created, updated)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
MEMORY_DELETE = "DELETE FROM memory WHERE tenant = ? AND namespace = ? AND key = ?"
MEMORY_LIST = (
    "SELECT key, value, revision, created, updated FROM memory"
    " WHERE tenant = ? AND namespace = ? AND key > ? ORDER BY key LIMIT ?"
)

# -- checkpoints -------------------------------------------------------------------

CHECKPOINT_COLUMNS = (
    "tenant, run_id, session_id, parent_run_id, status, data, revision, created, updated"
)
CHECKPOINT_GET = f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE tenant = ? AND run_id = ?"
CHECKPOINT_PUT = (
    f"INSERT OR REPLACE INTO checkpoints ({CHECKPOINT_COLUMNS}) VALUES ({', '.join('?' * 9)})"
)
CHECKPOINT_DELETE = "DELETE FROM checkpoints WHERE tenant = ? AND run_id = ?"
#: Columns a checkpoint listing may filter on (each served by an index).
CHECKPOINT_FILTERS = ("run_id", "session_id", "parent_run_id", "status")


def checkpoint_list(filters: tuple[str, ...]) -> str:
    """Checkpoints of a tenant matching ``column = ?`` for each filter, after a run id."""
    if not set(filters) <= set(CHECKPOINT_FILTERS):
        raise ValueError(f"cannot filter checkpoints on {filters!r}")
    where = "".join(f" AND {column} = ?" for column in filters)
    return (
        f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE tenant = ?{where} AND run_id > ?"
        " ORDER BY run_id LIMIT ?"
    )


# -- artifacts ---------------------------------------------------------------------

ARTIFACT_COLUMNS = "sha256, size, media_type, metadata, revision, created, updated"
ARTIFACT_GET = f"SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE tenant = ? AND artifact_id = ?"
ARTIFACT_PUT = (
    "INSERT OR REPLACE INTO artifacts (tenant, artifact_id, sha256, size, media_type,"
    " metadata, revision, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ARTIFACT_DELETE = "DELETE FROM artifacts WHERE tenant = ? AND artifact_id = ?"
ARTIFACT_LIST = (
    f"SELECT artifact_id, {ARTIFACT_COLUMNS} FROM artifacts"
    " WHERE tenant = ? AND artifact_id > ? ORDER BY artifact_id LIMIT ?"
)
BLOB_EXISTS = "SELECT 1 FROM blobs WHERE sha256 = ?"
BLOB_INSERT = "INSERT INTO blobs (sha256, size, refcount) VALUES (?, ?, 1)"
BLOB_ACQUIRE = "UPDATE blobs SET refcount = refcount + 1 WHERE sha256 = ?"
BLOB_RELEASE = "UPDATE blobs SET refcount = refcount - 1 WHERE sha256 = ?"
BLOB_REFCOUNT = "SELECT refcount FROM blobs WHERE sha256 = ?"
BLOB_DELETE = "DELETE FROM blobs WHERE sha256 = ?"
CHUNK_INSERT = "INSERT INTO blob_chunks (sha256, n, data) VALUES (?, ?, ?)"
CHUNK_GET = "SELECT data FROM blob_chunks WHERE sha256 = ? AND n = ?"
CHUNKS_RENAME = "UPDATE blob_chunks SET sha256 = ? WHERE sha256 = ?"
CHUNKS_DELETE = "DELETE FROM blob_chunks WHERE sha256 = ?"

# -- migration ledger --------------------------------------------------------------

LEDGER_SELECT = "SELECT source_key, sha256 FROM migration_ledger WHERE source_id = ? AND tenant = ?"
#: A tenant's sessions as ``agentlog migrate`` reads a SQLite source.
MIGRATE_SESSIONS = (
    "SELECT sid, name, head, revision, created, mtime, metadata FROM sessions"
    " WHERE tenant = ? ORDER BY name"
)
MIGRATE_SESSION = (
    "SELECT sid, name, head, revision, created, mtime, metadata FROM sessions"
    " WHERE tenant = ? AND name = ?"
)
#: ``(first key, last key)``: a session's events with their seqs.
MIGRATE_EVENTS = (
    "SELECT id & 4294967295, ts, type, data, item_id, crc FROM events"
    " WHERE id BETWEEN ? AND ? ORDER BY id"
)
MIGRATE_SNAPSHOTS = (
    "SELECT through_seq, state, created FROM snapshots WHERE sid = ? ORDER BY through_seq"
)
LEDGER_INSERT = (
    "INSERT INTO migration_ledger"
    " (source_id, source_key, sha256, tenant, session_id, migrated, source_format)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)

# -- settings of the file ----------------------------------------------------------

SETTING_GET = "SELECT value FROM settings WHERE key = ?"
SETTING_PUT = "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)"

# -- the file ----------------------------------------------------------------------

APPLICATION_ID = "PRAGMA application_id"
USER_VERSION = "PRAGMA user_version"
ANY_TABLE = "SELECT count(*) FROM sqlite_master"
JOURNAL_WAL = "PRAGMA journal_mode = WAL"
QUICK_CHECK = "PRAGMA quick_check"
#: Per connection: changes whenever another connection has committed since
#: the last time this connection asked (a follower's cheap "anything new?").
DATA_VERSION = "PRAGMA data_version"
QUERY_ONLY = "PRAGMA query_only = 1"
BACKUP_INTO = "VACUUM INTO ?"
#: Copy the WAL into the database and truncate it to nothing, if no reader or
#: writer is in the way (then a row ``(0, …)``; ``(1, …)`` when busy).
WAL_CHECKPOINT_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"
PAGE_SIZE = "PRAGMA page_size"
PAGE_COUNT = "PRAGMA page_count"
FREELIST_COUNT = "PRAGMA freelist_count"
#: Sessions and stored events: a session holds its events from the first one
#: retention kept (one seek each) through its head, with no gaps.
SESSION_TOTALS = (
    "SELECT count(*), count(DISTINCT tenant),"
    f" coalesce(sum(s.head + 1 - coalesce({_FIRST_STORED}, s.head + 1)), 0) FROM sessions s"
)
LARGEST_SESSIONS = "SELECT tenant, name, head, mtime FROM sessions ORDER BY head DESC LIMIT ?"
#: ``(tenant, before, after_sid, limit)``: a batch of a tenant's sessions idle
#: since before a time, in sid order after a sid (one pass over the table in all).
IDLE_SESSIONS = (
    "SELECT sid, name, mtime FROM sessions WHERE tenant = ? AND mtime < ? AND sid > ?"
    " ORDER BY sid LIMIT ?"
)
#: ``0`` none, ``1`` full, ``2`` incremental: set on a new file before its first table.
AUTO_VACUUM = "PRAGMA auto_vacuum"
AUTO_VACUUM_INCREMENTAL = "PRAGMA auto_vacuum = INCREMENTAL"


def incremental_vacuum(pages: int) -> str:
    """``PRAGMA incremental_vacuum``: give up to ``pages`` free pages back to the file system."""
    return f"PRAGMA incremental_vacuum({int(pages)})"


SOURCE_ID = "SELECT sqlite_source_id()"
COMPILE_OPTIONS = "PRAGMA compile_options"


def synchronous(level: str) -> str:
    """``PRAGMA synchronous`` for ``"normal"`` or ``"full"``."""
    return f"PRAGMA synchronous = {_SYNCHRONOUS[level]}"


def journal_size_limit(size: int) -> str:
    """``PRAGMA journal_size_limit``: the size a WAL is cut back to when it restarts."""
    return f"PRAGMA journal_size_limit = {int(size)}"


def busy_timeout(ms: int) -> str:
    """``PRAGMA busy_timeout`` (``ms`` already clamped to an int >= 0)."""
    return f"PRAGMA busy_timeout = {int(ms)}"


_SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}


# -- the C engine's prepared statements ----------------------------------------------


class Hot(enum.IntEnum):
    """The hot statements the C engine keeps prepared on each connection, by
    number: its ``ST_*`` enum (connection.pxi), which must agree (tested)."""

    BEGIN_WRITE = 0
    COMMIT = 1
    ROLLBACK = 2
    SELECT_SESSION = 3
    INSERT_SESSION = 4
    UPDATE_SESSION = 5
    INSERT_EVENT = 6
    NEXT_SID = 7
    SELECT_APPEND_KEY = 8
    INSERT_APPEND_KEY = 9
    SCAN_EVENTS = 10
    SELECT_HEAD = 11


#: Each hot statement's SQL, indexed by :class:`Hot` (each member names its statement here).
HOT_STATEMENTS: tuple[str, ...] = tuple(globals()[member.name] for member in Hot)
