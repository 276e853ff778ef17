"""Every PostgreSQL statement of agentlog: the log's, the stores' and the migration's.

One :class:`Statements` per schema, with the schema's quoted name in each
statement; nothing outside this package writes SQL for PostgreSQL.
"""

from __future__ import annotations

from psycopg import sql

from .schema import ACTIVITY_VERSION, LINEAGE_VERSION, quoted

__all__ = ["JOURNAL_COLUMNS", "Statements"]

#: The journal's columns, in the order every writer of it gives them.
JOURNAL_COLUMNS = "tenant, session, seq, ts, type, payload, item_id, crc"


def _upsert(table: str, keys: tuple[str, ...], values: tuple[str, ...]) -> str:
    """Write one record of ``table`` whole: insert it, or replace every column
    but its key ``keys`` (the stores' ``put``, after their compare-and-set)."""
    placeholders = ", ".join(["%s"] * (len(keys) + len(values)))
    replace = ", ".join(f"{column} = EXCLUDED.{column}" for column in values)
    return (
        f"INSERT INTO {table} ({', '.join(keys + values)}) VALUES ({placeholders})"
        f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {replace}"
    )


class Statements:
    """Every statement of one store, with the schema's name quoted into it."""

    # Statements alike in shape (``... WHERE tenant = %s AND session = %s``) are
    # each table's own rows, spelled out: a table of SQL to read, not logic twice.
    def __init__(self, schema: str) -> None:
        s = quoted(schema)
        #: The schema's name, quoted.
        self.schema = s
        self._log(s, schema)
        self._stores(s)
        self._operations(s, schema)

    def _log(self, s: str, schema: str) -> None:
        events = f"""INSERT INTO {s}.events (tenant, session, seq, ts, type, payload, crc)
            SELECT %(t)s, %(name)s, h.head - %(n)s + e.ord, %(ts)s, e.type, e.payload, e.crc
            FROM h, unnest(%(types)b::text[], %(payloads)b::bytea[], %(crcs)b::bigint[])
                WITH ORDINALITY AS e(type, payload, crc, ord)"""
        notify = "pg_notify(%(channel)s, h.head::text || ' ' || %(key)s)"
        # A session that may be new (expected head None or 0).
        upsert = f"""INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime)
            VALUES (%(t)s, %(name)s, %(n)s, 1, %(ts)s, %(ts)s)
            ON CONFLICT (tenant, name) DO UPDATE
                SET head = sessions.head + EXCLUDED.head, mtime = EXCLUDED.mtime,
                    revision = sessions.revision + 1
                WHERE %(exp)s::bigint IS NULL OR sessions.head = %(exp)s::bigint
            RETURNING head"""
        # A session that must exist (expected head > 0).
        update = f"""UPDATE {s}.sessions
            SET head = head + %(n)s, mtime = %(ts)s, revision = revision + 1
            WHERE tenant = %(t)s AND name = %(name)s AND head = %(exp)s::bigint
            RETURNING head"""
        self.append: dict[tuple[bool, bool], str] = {}
        for new in (True, False):
            for notifying in (True, False):
                final = f"SELECT h.head, {notify} FROM h" if notifying else "SELECT h.head FROM h"
                self.append[new, notifying] = (
                    f"WITH h AS ({upsert if new else update}), ins AS ({events}) {final}"
                )
        self.head = f"SELECT head FROM {s}.sessions WHERE tenant = %s AND name = %s"
        self.head_for_update = self.head + " FOR UPDATE"
        self.head_mtime = f"SELECT head, mtime FROM {s}.sessions WHERE tenant = %s AND name = %s"
        # Retention: where a session's stored events start (its primary key's first entry).
        self.first_seq = (
            f"SELECT seq FROM {s}.events WHERE tenant = %s AND session = %s ORDER BY seq LIMIT 1"
        )
        self.retained = (
            f"SELECT s.head, (SELECT e.seq FROM {s}.events e WHERE e.tenant = s.tenant"
            " AND e.session = s.name ORDER BY e.seq LIMIT 1)"
            f" FROM {s}.sessions s WHERE s.tenant = %s AND s.name = %s"
        )
        self.oldest_snapshot = (
            f"SELECT min(through_seq) FROM {s}.snapshots WHERE tenant = %s AND session = %s"
        )
        self.scan = (
            f"SELECT seq, ts, type, payload, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq > %s ORDER BY seq LIMIT %s"
        )
        #: Every session of every tenant, for a deep check.
        # With the seq each newest snapshot covers: retention may have pruned up to it.
        self.all_sessions = (
            "SELECT tenant, name, head, coalesce((SELECT max(through_seq)"
            f" FROM {s}.snapshots p WHERE p.tenant = s.tenant AND p.session = s.name), 0)"
            f" FROM {s}.sessions s ORDER BY tenant, name"
        )
        self.checked = (
            f"SELECT seq, payload, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq > %s ORDER BY seq LIMIT %s"
        )
        self.list = (
            f"SELECT name, mtime, head FROM {s}.sessions WHERE tenant = %s"
            " ORDER BY mtime DESC, name"
        )
        self.list_all = (
            f"SELECT tenant, name, mtime, head FROM {s}.sessions ORDER BY mtime DESC, tenant, name"
        )
        self.delete_session = (
            f"DELETE FROM {s}.sessions WHERE tenant = %s AND name = %s RETURNING head"
        )
        self.delete_events = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s"
        self.delete_snapshots = f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s"
        self.cut_events = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s AND seq > %s"
        self.cut_snapshots = (
            f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s AND through_seq > %s"
        )
        self.set_head = (
            f"UPDATE {s}.sessions SET head = %s, mtime = %s, revision = revision + 1"
            " WHERE tenant = %s AND name = %s"
        )
        self.create_session = (
            f"INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime)"
            " VALUES (%s, %s, %s, 1, %s, %s) ON CONFLICT DO NOTHING RETURNING head"
        )
        self.copy_events = (
            f"INSERT INTO {s}.events (tenant, session, seq, ts, type, payload, item_id, crc)"
            f" SELECT tenant, %s, seq, ts, type, payload, item_id, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq <= %s"
        )
        self.copy_snapshots = (
            f"INSERT INTO {s}.snapshots (tenant, session, through_seq, state, created)"
            f" SELECT tenant, %s, through_seq, state, created FROM {s}.snapshots"
            " WHERE tenant = %s AND session = %s AND through_seq <= %s"
        )
        self._append_keys(s)
        self._lineage(s)
        self.notify = "SELECT pg_notify(%s, %s)"
        #: The NOTIFY channel of this store (one per schema).
        self.channel = f"agentlog.{schema}"
        self.copy_journal = f"COPY {s}.events ({JOURNAL_COLUMNS}) FROM STDIN"
        self.fork_head = self.head + " FOR SHARE"
        self.listen = sql.SQL("LISTEN {}")

    def _operations(self, s: str, schema: str) -> None:
        """agentlog stats / gc / check, snapshots, the migration's target."""
        self.snapshot_transaction = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"
        self.relation_sizes = (
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname"
        )
        self.schema_name = schema
        self.server_version = "SELECT current_setting('server_version_num')::int"
        self.totals = (
            f"SELECT count(*), count(DISTINCT tenant), coalesce(sum(head), 0) FROM {s}.sessions"
        )
        self.largest = (
            f"SELECT tenant, name, head, mtime FROM {s}.sessions"
            " ORDER BY head DESC, tenant, name LIMIT %s"
        )
        # FOR UPDATE re-reads a row another transaction changed meanwhile and
        # checks mtime again on its new version: a session appended to after
        # the cut-off is not picked.
        # The candidates are a range of sessions_by_active_second, oldest
        # second first (%(before)s bounds the range and then the exact mtime).
        self.idle = (
            f"SELECT name FROM {s}.sessions WHERE tenant = %(tenant)s"
            " AND active <= trunc(%(before)s::double precision)::bigint AND mtime < %(before)s"
            " ORDER BY active, name LIMIT %(batch)s FOR UPDATE"
        )
        self.delete_sessions = f"DELETE FROM {s}.sessions WHERE tenant = %s AND name = ANY(%s)"
        self.delete_events_of = f"DELETE FROM {s}.events WHERE tenant = %s AND session = ANY(%s)"
        self.delete_snapshots_of = (
            f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = ANY(%s)"
        )
        # Every session whose events are not a gapless run ending at its head
        # and starting at 1 or after what a snapshot covers (retention), and
        # events that belong to no session.
        covered = (
            f"EXISTS (SELECT 1 FROM {s}.snapshots p WHERE p.tenant = s.tenant"
            " AND p.session = s.name AND p.through_seq >= {seq})"
        )
        self.damaged = (
            "SELECT s.tenant, s.name, s.head, coalesce(e.n, 0), coalesce(e.lo, 0),"
            f" coalesce(e.hi, 0) FROM {s}.sessions s LEFT JOIN (SELECT tenant, session,"
            f" count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM {s}.events"
            " GROUP BY tenant, session) e ON e.tenant = s.tenant AND e.session = s.name"
            " WHERE NOT (CASE WHEN e.n IS NULL THEN s.head = 0 OR "
            + covered.format(seq="s.head")
            + " ELSE e.hi = s.head AND e.n = e.hi - e.lo + 1 AND (e.lo = 1 OR "
            + covered.format(seq="e.lo - 1")
            + ") END) ORDER BY s.tenant, s.name LIMIT %s"
        )
        self.orphans = (
            f"SELECT e.tenant, e.session, count(*) FROM {s}.events e WHERE NOT EXISTS"
            f" (SELECT 1 FROM {s}.sessions s WHERE s.tenant = e.tenant AND s.name = e.session)"
            " GROUP BY e.tenant, e.session ORDER BY e.tenant, e.session LIMIT %s"
        )
        # Metadata: the column the SessionStore face reads; CAS on the revision.
        self.metadata = (
            f"SELECT metadata, revision FROM {s}.sessions WHERE tenant = %s AND name = %s"
        )
        self.revision_for_update = (
            f"SELECT revision FROM {s}.sessions WHERE tenant = %s AND name = %s FOR UPDATE"
        )
        self.create_with_metadata = (
            f"INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime, metadata)"
            " VALUES (%s, %s, 0, 1, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING revision"
        )
        self.set_metadata = (
            f"UPDATE {s}.sessions SET metadata = %s, revision = revision + 1, mtime = %s"
            " WHERE tenant = %s AND name = %s AND revision = %s RETURNING revision"
        )
        self.list_metadata = (
            f"SELECT name, mtime, head, metadata, revision FROM {s}.sessions WHERE tenant = %s"
            " ORDER BY mtime DESC, name"
        )

        # A page by activity, keyset on (active second, name) descending: a
        # range of the sessions_by_active_second index from the cursor, whose
        # exact mtime is truncated to its second here (the redundant
        # "active <=" makes that the range's bound).
        self._pages(s, "active")
        # The migration's target: a session as its source had it, and its ledger.
        self.session_names = f"SELECT name FROM {s}.sessions WHERE tenant = %s"
        self.ledger = (
            f"SELECT source_key, sha256 FROM {s}.migration_ledger"
            " WHERE source_id = %s AND tenant = %s"
        )
        self.ledger_insert = (
            f"INSERT INTO {s}.migration_ledger (source_id, source_key, sha256,"
            " tenant, session_id, migrated, source_format)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
        )
        self.import_session = (
            f"INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime, metadata)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1"
        )

    def _append_keys(self, s: str) -> None:
        """The statements of idempotent appends (schema version 5), apart from
        the append's own: an unkeyed append runs none of them."""
        keys = f"{s}.append_keys"
        #: ``(tenant, session, key, digest)``: claim the key (head 0 until the
        #: append is written); no row when it is taken. A racer's uncommitted
        #: claim makes this wait on the unique index until that one ends.
        self.claim_append_key = (
            f"INSERT INTO {keys} (tenant, session, key, digest, head) VALUES (%s, %s, %s, %s, 0)"
            " ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.set_append_key = (
            f"UPDATE {keys} SET head = %s WHERE tenant = %s AND session = %s AND key = %s"
        )
        self.append_key = (
            f"SELECT digest, head FROM {keys} WHERE tenant = %s AND session = %s AND key = %s"
        )
        self.cut_append_keys = (
            f"DELETE FROM {keys} WHERE tenant = %s AND session = %s AND head > %s"
        )
        self.delete_append_keys = f"DELETE FROM {keys} WHERE tenant = %s AND session = %s"
        self.delete_append_keys_of = f"DELETE FROM {keys} WHERE tenant = %s AND session = ANY(%s)"
        #: ``(new session, tenant, session, at_seq)``: a fork carries the keys
        #: of the appends it copies whole.
        self.copy_append_keys = (
            f"INSERT INTO {keys} (tenant, session, key, digest, head)"
            f" SELECT tenant, %s, key, digest, head FROM {keys}"
            " WHERE tenant = %s AND session = %s AND head <= %s"
        )

    def _lineage(self, s: str) -> None:
        """Fork lineage (schema version 6): a fork's origin, its source's forks."""
        origins = f"{s}.fork_origins"
        one, tenant = "WHERE tenant = %s AND session = %s", "WHERE tenant = %s AND"
        #: ``(tenant, fork, source, seq)``, in the fork's transaction; a row a
        #: process of an older version left behind at a delete is replaced.
        self.insert_fork_origin = (
            f"INSERT INTO {origins} (tenant, session, source, seq) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (tenant, session) DO UPDATE"
            " SET source = EXCLUDED.source, seq = EXCLUDED.seq"
        )
        #: False for a store opened read-only before version 6 (see opened_at).
        self.records_lineage = True
        self.fork_origin = f"SELECT source, seq FROM {origins} {one}"
        #: ``(tenant, source)``: its forks, ``(session, seq)``, from the index on source.
        self.forks_of = f"SELECT session, seq FROM {origins} {tenant} source = %s"
        self.delete_fork_origin = f"DELETE FROM {origins} {one}"
        self.delete_fork_origins_of = f"DELETE FROM {origins} {tenant} session = ANY(%s)"

    def _pages(self, s: str, active: str) -> None:
        """``list_page``'s two statements, the activity second read as ``active``."""
        page = f"SELECT name, mtime, head, metadata, revision FROM {s}.sessions WHERE tenant = %s"
        order = f" ORDER BY {active} DESC, name DESC LIMIT %s"
        second = "trunc(%s::double precision)::bigint"
        self.list_page = page + order
        self.list_page_after = (
            page + f" AND {active} <= {second} AND ({active}, name) < ({second}, %s)" + order
        )

    def opened_at(self, version: int) -> None:
        """Read a store opened read-only at an older ``version`` as it is: one
        before 6 has no lineage table, so no lineage (reads find none rather
        than fail), and one before 7 no activity column, so a page of
        sessions sorts them by the same key computed from mtime."""
        self.records_lineage = version >= LINEAGE_VERSION
        if version < ACTIVITY_VERSION:
            self._pages(quoted(self.schema_name), "trunc(mtime)::bigint")

    def _stores(self, s: str) -> None:
        """The SessionStore's, the MemoryStore's, the CheckpointStore's, the ArtifactStore's."""
        record = (
            "SELECT s.head, s.revision, s.metadata, s.created, s.mtime,"
            f" (SELECT max(through_seq) FROM {s}.snapshots n"
            "  WHERE n.tenant = s.tenant AND n.session = s.name)"
            f" FROM {s}.sessions s"
        )
        self.session = record + " WHERE s.tenant = %s AND s.name = %s"
        self.session_locked = self.session + " FOR UPDATE OF s"
        self.session_claim = (
            f"INSERT INTO {s}.sessions (tenant, name, head, revision, created, mtime)"
            " VALUES (%s, %s, 0, -1, 0, 0) ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.session_create = (
            f"UPDATE {s}.sessions SET head = 0, revision = 0, created = %s, mtime = %s,"
            " metadata = %s WHERE tenant = %s AND name = %s"
        )
        self.sessions_after = (
            f"SELECT s.name, {record.removeprefix('SELECT ')}"
            " WHERE s.tenant = %s AND s.name > %s ORDER BY s.name LIMIT %s"
        )
        self.item_taken = (
            f"SELECT 1 FROM {s}.events WHERE tenant = %s AND session = %s AND item_id = %s"
        )
        self.add_items = (
            f"INSERT INTO {s}.events ({JOURNAL_COLUMNS})"
            " SELECT %s, %s, %s + e.ord, e.ts, e.type, e.payload, e.item_id, e.crc"
            " FROM unnest(%b::float8[], %b::text[], %b::bytea[], %b::text[], %b::bigint[])"
            " WITH ORDINALITY AS e(ts, type, payload, item_id, crc, ord)"
        )
        self.move_head = (
            f"UPDATE {s}.sessions SET head = %s, mtime = %s, revision = revision + 1"
            " WHERE tenant = %s AND name = %s"
        )
        self.touch = (
            f"UPDATE {s}.sessions SET mtime = %s, revision = revision + 1"
            " WHERE tenant = %s AND name = %s"
        )
        self.add_snapshot = (
            f"INSERT INTO {s}.snapshots (tenant, session, through_seq, state, created)"
            " VALUES (%s, %s, %s, %s, %s)"
        )
        self.snapshot = (
            f"SELECT through_seq, state, created FROM {s}.snapshots"
            " WHERE tenant = %s AND session = %s AND through_seq = %s"
        )
        self.items = (
            f"SELECT seq, ts, type, payload, crc FROM {s}.events"
            " WHERE tenant = %s AND session = %s AND seq > %s AND seq <= %s ORDER BY seq"
        )
        self.first_item = (
            f"SELECT seq FROM {s}.events WHERE tenant = %s AND session = %s ORDER BY seq LIMIT 1"
        )
        self.drop_items = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s AND seq <= %s"
        self.drop_snapshots = (
            f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s AND through_seq < %s"
        )
        self.remove_events = f"DELETE FROM {s}.events WHERE tenant = %s AND session = %s"
        self.remove_snapshots = f"DELETE FROM {s}.snapshots WHERE tenant = %s AND session = %s"
        self.remove_session = f"DELETE FROM {s}.sessions WHERE tenant = %s AND name = %s"
        # memory
        memory = f"SELECT value, revision, created, updated FROM {s}.memory"
        self.memory = memory + " WHERE tenant = %s AND namespace = %s AND key = %s"
        self.memory_locked = self.memory + " FOR UPDATE"
        self.memory_claim = (
            f"INSERT INTO {s}.memory VALUES (%s, %s, %s, '', -1, 0, 0)"
            " ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.memory_put = _upsert(
            f"{s}.memory",
            ("tenant", "namespace", "key"),
            ("value", "revision", "created", "updated"),
        )
        self.memory_delete = (
            f"DELETE FROM {s}.memory WHERE tenant = %s AND namespace = %s AND key = %s"
        )
        self.memory_list = (
            f"SELECT key, value, revision, created, updated FROM {s}.memory"
            " WHERE tenant = %s AND namespace = %s AND key > %s ORDER BY key LIMIT %s"
        )
        # checkpoints
        columns = (
            "tenant, run_id, session_id, parent_run_id, status, data, revision, created, updated"
        )
        self.checkpoint_columns = columns
        self.checkpoint = f"SELECT {columns} FROM {s}.checkpoints WHERE tenant = %s AND run_id = %s"
        self.checkpoint_locked = self.checkpoint + " FOR UPDATE"
        self.checkpoint_claim = (
            f"INSERT INTO {s}.checkpoints VALUES (%s, %s, NULL, NULL, '', '', -1, 0, 0)"
            " ON CONFLICT DO NOTHING RETURNING 1"
        )
        keys, values = ("tenant", "run_id"), tuple(columns.split(", ")[2:])
        self.checkpoint_put = _upsert(f"{s}.checkpoints", keys, values)
        self.checkpoint_delete = f"DELETE FROM {s}.checkpoints WHERE tenant = %s AND run_id = %s"
        self.checkpoints_from = f"SELECT {columns} FROM {s}.checkpoints WHERE tenant = %s"
        # artifacts
        artifact = "sha256, size, media_type, metadata, revision, created, updated"
        self.artifact = (
            f"SELECT {artifact} FROM {s}.artifacts WHERE tenant = %s AND artifact_id = %s"
        )
        self.artifact_locked = self.artifact + " FOR UPDATE"
        self.artifact_claim = (
            f"INSERT INTO {s}.artifacts VALUES (%s, %s, '', 0, '', '', -1, 0, 0)"
            " ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.artifact_put = _upsert(
            f"{s}.artifacts", ("tenant", "artifact_id"), tuple(artifact.split(", "))
        )
        self.artifact_delete = f"DELETE FROM {s}.artifacts WHERE tenant = %s AND artifact_id = %s"
        self.artifacts_after = (
            f"SELECT artifact_id, {artifact} FROM {s}.artifacts"
            " WHERE tenant = %s AND artifact_id > %s ORDER BY artifact_id LIMIT %s"
        )
        self.chunk_insert = f"INSERT INTO {s}.blob_chunks (sha256, n, data) VALUES (%s, %s, %b)"
        self.chunk = f"SELECT data FROM {s}.blob_chunks WHERE sha256 = %s AND n = %s"
        self.chunks_rename = f"UPDATE {s}.blob_chunks SET sha256 = %s WHERE sha256 = %s"
        self.chunks_delete = f"DELETE FROM {s}.blob_chunks WHERE sha256 = %s"
        # One more reference, or a new blob: "inserted" tells which.
        self.blob_acquire = (
            f"INSERT INTO {s}.blobs (sha256, size, refcount) VALUES (%s, %s, 1)"
            " ON CONFLICT (sha256) DO UPDATE SET refcount = blobs.refcount + 1"
            " RETURNING (xmax = 0) AS inserted"
        )
        self.blob_release = (
            f"UPDATE {s}.blobs SET refcount = refcount - 1 WHERE sha256 = %s RETURNING refcount"
        )
        self.blob_delete = f"DELETE FROM {s}.blobs WHERE sha256 = %s"
