"""The on-disk SQLite schema: the contract between the engines.

Every engine (the pure one on the standard library's ``sqlite3`` and the C one)
reads and writes exactly these tables, so a file written by either is read by
the other.

Events live in one rowid table whose integer key packs the session and the
position: ``id = sid << 32 | seq``. A session's events are therefore one
contiguous range of the table's own B-tree, in seq order, with no second index
to maintain; measured against a ``WITHOUT ROWID`` table keyed on ``(sid, seq)``
this appends about 1.4x faster at the same size. The price is a bound of
2**32 - 1 events per session and 2**31 - 1 sessions per file.
"""

from __future__ import annotations

import re

#: ``PRAGMA application_id`` of an agentlog database ("AGLG").
APPLICATION_ID = 0x41474C47

#: ``PRAGMA user_version`` written by this version; a larger one is refused.
SCHEMA_VERSION = 13

#: The version from which events carry ``crc`` and ``digest`` and the file has
#: ``settings`` (a read-only open of an older file reads them as NULL and none).
INTEGRITY_VERSION = 9

#: The tenant the Checkpointer face of the log uses.
DEFAULT_TENANT = "default"

SEQ_BITS = 32
MAX_SEQ = (1 << SEQ_BITS) - 1
MAX_SID = (1 << 31) - 1

# The migration ledger's columns and key: what step 6 creates and step 7
# rebuilds a version-6 ledger into (one definition, so the two cannot drift).
_LEDGER_TABLE = """(
            source_id TEXT NOT NULL,
            source_key TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            tenant TEXT NOT NULL,
            session_id TEXT NOT NULL,
            migrated REAL NOT NULL,
            PRIMARY KEY (source_id, tenant, source_key)
        ) WITHOUT ROWID"""

# The statements that take a file from version N - 1 to N; a file is brought
# forward through every step it lacks in one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE sessions (
            sid INTEGER PRIMARY KEY,
            tenant TEXT NOT NULL,
            name TEXT NOT NULL,
            head INTEGER NOT NULL,
            created REAL NOT NULL,
            mtime REAL NOT NULL,
            UNIQUE (tenant, name)
        )""",
        # Step 1 as first released also created sessions_by_activity ON
        # sessions (tenant, mtime); step 10 drops it, step 12 creates it anew
        # with the session name (keyset paging).
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            ts REAL NOT NULL,
            type TEXT NOT NULL,
            data BLOB NOT NULL
        )""",
    ),
    2: (
        """CREATE TABLE memory (
            tenant TEXT NOT NULL,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB NOT NULL,
            revision INTEGER NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            PRIMARY KEY (tenant, namespace, key)
        ) WITHOUT ROWID""",
    ),
    3: (
        """CREATE TABLE checkpoints (
            tenant TEXT NOT NULL,
            run_id TEXT NOT NULL,
            session_id TEXT,
            parent_run_id TEXT,
            status TEXT NOT NULL,
            data BLOB NOT NULL,
            revision INTEGER NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            PRIMARY KEY (tenant, run_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX checkpoints_by_session ON checkpoints (tenant, session_id, run_id)",
        "CREATE INDEX checkpoints_by_status ON checkpoints (tenant, status, run_id)",
        "CREATE INDEX checkpoints_by_parent ON checkpoints (tenant, parent_run_id, run_id)",
    ),
    4: (
        # Artifact bytes are stored once per content (sha256), in chunks, and
        # counted by the artifacts that refer to them.
        """CREATE TABLE blobs (
            sha256 TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            refcount INTEGER NOT NULL
        ) WITHOUT ROWID""",
        # A rowid table: its rows are 1 MiB chunks, far too large to sit in
        # the B-tree of a WITHOUT ROWID table's key.
        """CREATE TABLE blob_chunks (
            sha256 TEXT NOT NULL,
            n INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (sha256, n)
        )""",
        """CREATE TABLE artifacts (
            tenant TEXT NOT NULL,
            artifact_id TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            size INTEGER NOT NULL,
            media_type TEXT NOT NULL,
            metadata BLOB NOT NULL,
            revision INTEGER NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            PRIMARY KEY (tenant, artifact_id)
        ) WITHOUT ROWID""",
    ),
    5: (
        # The SessionStore face of the log: a revision per session (every
        # write through either face adds one), metadata, item ids unique
        # within a session, and snapshots.
        "ALTER TABLE sessions ADD COLUMN revision INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN metadata BLOB",
        "UPDATE sessions SET revision = 1",
        "ALTER TABLE events ADD COLUMN item_id TEXT",
        "CREATE UNIQUE INDEX events_by_item ON events (id >> 32, item_id)"
        " WHERE item_id IS NOT NULL",
        """CREATE TABLE snapshots (
            sid INTEGER NOT NULL,
            through_seq INTEGER NOT NULL,
            state BLOB NOT NULL,
            created REAL NOT NULL,
            PRIMARY KEY (sid, through_seq)
        )""",
    ),
    6: (
        # One row per migrated source file and tenant: re-running an unchanged
        # source is a no-op, and a changed one is caught. (Version 6 as first
        # released keyed it by (source_id, source_key) alone; step 7 rebuilds
        # such a table. A file brought through this step gets this form at once.)
        "CREATE TABLE migration_ledger " + _LEDGER_TABLE,
    ),
    7: (
        # The ledger is kept per tenant: one source migrated into two tenants
        # is two migrations. A version-6 ledger is rebuilt with that key; its
        # rows are carried over as they are.
        "CREATE TABLE migration_ledger_7 " + _LEDGER_TABLE,
        "INSERT INTO migration_ledger_7 (source_id, source_key, sha256, tenant, session_id,"
        " migrated) SELECT source_id, source_key, sha256, tenant, session_id, migrated"
        " FROM migration_ledger",
        "DROP TABLE migration_ledger",
        "ALTER TABLE migration_ledger_7 RENAME TO migration_ledger",
    ),
    8: (
        # Provenance: the format each migrated source file had ("json-v1",
        # "agentlog-file"); NULL for the rows of earlier releases.
        "ALTER TABLE migration_ledger ADD COLUMN source_format TEXT",
    ),
    INTEGRITY_VERSION: (
        # Integrity: the CRC-32 of each event's payload (zlib.crc32 of the
        # stored bytes), verified on every read; NULL for an event written
        # before this step (it reads as before, unverified). ``digest`` is the
        # event's link in its session's hash chain, NULL unless the file
        # keeps one (the setting ``hash_chain``).
        "ALTER TABLE events ADD COLUMN crc INTEGER",
        "ALTER TABLE events ADD COLUMN digest BLOB",
        """CREATE TABLE settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        ) WITHOUT ROWID""",
    ),
    10: (
        # No index on activity: every append moved its session's entry in it,
        # a page more written to the WAL per commit (a quarter of a one-event
        # append, measured). list() sorts a tenant's sessions instead, and
        # delete_idle finds its candidates in one scan.
        "DROP INDEX IF EXISTS sessions_by_activity",
    ),
    11: (
        # Idempotent appends: one row per keyed append, its key, the digest
        # of its events (AppendKey) and the head it returned, written in the
        # append's transaction. A session's keys are one range of this
        # table's B-tree; a truncate drops those past its new head, a delete
        # all of them. Unkeyed appends never touch it.
        """CREATE TABLE append_keys (
            sid INTEGER NOT NULL,
            key TEXT NOT NULL,
            digest BLOB NOT NULL,
            head INTEGER NOT NULL,
            PRIMARY KEY (sid, key)
        ) WITHOUT ROWID""",
    ),
    12: (
        # Step 12 holds two changes made side by side in one release.
        # -- activity (list_page) --------------------------------------------
        # Sessions by activity again, for list_page: a page is a range of
        # this index, (mtime, name) descending from the cursor. Without it a
        # page sorts the tenant's every session: at 1,000,000 sessions the
        # first page took 816 ms over HTTP, with it 1.9 ms. The price is the
        # one step 10 removed: each append moves its session's entry, an
        # index page more to write per commit; one-event appends went from
        # 10,753/s to 7,611/s (-29%, medians of 7 alternating runs on a
        # shared 2-core machine; docs/performance.md, "Listing by
        # activity"). Considered instead: an index on a coarse activity
        # bucket, rewritten only when a session enters a new bucket; a page
        # must then sort a whole bucket, after a burst every session again.
        "CREATE INDEX sessions_by_activity ON sessions (tenant, mtime, name)",
        # -- end of activity ---------------------------------------------------
        # -- fork lineage (step 12) -------------------------------------------
        # Where a fork came from: one row per session a fork made, written in
        # the fork's transaction, removed with the session. The source is
        # named by its id, not its sid: the record outlives the source. A
        # file's earlier forks have no row (their lineage is absent). The
        # index finds a session's forks without a scan.
        """CREATE TABLE fork_origins (
            sid INTEGER PRIMARY KEY,
            tenant TEXT NOT NULL,
            source TEXT NOT NULL,
            seq INTEGER NOT NULL
        )""",
        "CREATE INDEX fork_origins_by_source ON fork_origins (tenant, source)",
        # -- end of fork lineage ----------------------------------------------
    ),
    13: (
        # Activity at one-second resolution, so that an append does not move
        # its session in the index: ``active`` is ``mtime`` truncated to whole
        # seconds, and only a write in a new second rewrites it (the trigger
        # below, whose WHEN is false for every other write). Step 12's index on
        # mtime cost a one-event append 15-20% (an index page more per commit);
        # this one costs it well under 3% (docs/performance.md, "Listing by
        # activity"). A page is then ordered by (active, name): sessions active
        # in the same second are listed by id, and a page still reads its own
        # rows only. Triggers rather than each statement setting the column,
        # so that every write of mtime (append, truncate, metadata, fork,
        # migration, both engines) keeps it without knowing of it.
        "ALTER TABLE sessions ADD COLUMN active INTEGER",
        "UPDATE sessions SET active = CAST(mtime AS INTEGER)",
        "DROP INDEX IF EXISTS sessions_by_activity",
        "CREATE INDEX sessions_by_active_second ON sessions (tenant, active, name)",
        """CREATE TRIGGER sessions_active_on_insert AFTER INSERT ON sessions
            WHEN new.active IS NOT CAST(new.mtime AS INTEGER)
            BEGIN
                UPDATE sessions SET active = CAST(new.mtime AS INTEGER) WHERE sid = new.sid;
            END""",
        """CREATE TRIGGER sessions_active_on_update AFTER UPDATE OF mtime ON sessions
            WHEN new.active IS NOT CAST(new.mtime AS INTEGER)
            BEGIN
                UPDATE sessions SET active = CAST(new.mtime AS INTEGER) WHERE sid = new.sid;
            END""",
    ),
}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))

#: Steps that only rebuild what an earlier step created in an older form:
#: ``{step: the step that creates it}``. A file brought through the creating
#: step in the same migration already has the new form and skips the rebuild
#: (no table created only to be dropped, no free page left behind).
REBUILDS: dict[int, int] = {7: 6}


def migration(from_version: int) -> list[str]:
    """Every statement from ``from_version`` to the current version, marks included."""
    steps = [
        sql
        for version in range(from_version + 1, SCHEMA_VERSION + 1)
        if REBUILDS.get(version, 0) <= from_version
        for sql in MIGRATIONS[version]
    ]
    return [
        *steps,
        f"PRAGMA application_id = {APPLICATION_ID}",
        f"PRAGMA user_version = {SCHEMA_VERSION}",
    ]


_CREATE_TABLE = re.compile(r"CREATE TABLE (\w+) ")
_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)")
_RENAME_TABLE = re.compile(r"ALTER TABLE (\w+) RENAME TO (\w+)")

#: What a column added by a step holds in the rows that were there before it:
#: NULL, unless the step set it (step 5 gave every session revision 1, step
#: 13 its activity second).
_ADDED_VALUES = {
    ("sessions", "revision"): "1",
    ("sessions", "active"): "CAST(mtime AS INTEGER)",
}


def read_only_shims(version: int) -> list[str]:
    """TEMP tables and views that let a read-only connection read a file of an
    older ``version`` with the current version's statements.

    A read-only open cannot migrate the file. These statements, run on each
    of its connections before anything else, give it the current schema in
    the connection's own TEMP database, which shadows the file's names: a
    table the file lacks is an empty TEMP table (no snapshots, no memory), and
    a table lacking columns is a view that adds them with the values the
    migration would have given (NULL: no metadata, no checksum). The file
    itself is never written.
    """
    statements: list[str] = []
    temporary: set[str] = set()
    missing: dict[str, list[str]] = {}
    lacking = migration(version)
    renamed = {m[1] for sql in lacking if (m := _RENAME_TABLE.match(sql))}
    for sql in lacking:
        if (m := _CREATE_TABLE.match(sql)) and m[1] not in renamed:
            statements.append(sql.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
            temporary.add(m[1])
        elif m := _ADD_COLUMN.match(sql):
            table, column = m[1], m[2]
            if table in temporary:
                statements.append(sql)  # the TEMP table's name comes first
            else:
                value = _ADDED_VALUES.get((table, column), "NULL")
                missing.setdefault(table, []).append(f"{value} AS {column}")
    for table, columns in missing.items():
        statements.append(
            f"CREATE TEMP VIEW {table} AS SELECT *, {', '.join(columns)} FROM main.{table}"
        )
    return statements


def event_key(sid: int, seq: int) -> int:
    """The ``events.id`` of event ``seq`` of session ``sid``."""
    return (sid << SEQ_BITS) | seq
