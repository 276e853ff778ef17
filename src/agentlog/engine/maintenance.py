"""An operator's operations, written once for both SQLite engines: integrity
(quick check, the log's shape, the deep check, the hash chain), backup,
stats, vacuum, idle-session deletion and the WAL checkpoint.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

from ..errors import (
    CorruptDatabaseError,
    SessionNotFoundError,
    StorageUnavailableError,
)
from ..files import DEFAULT_FILE_MODE, create_private_file, remove_created
from ..integrity import (
    ChainReport,
    DamagedEvent,
    Progress,
    session_damage,
    stored_bytes,
    walk_chain,
)
from . import schema as S
from . import sql as Q
from .connections import ConnectionT, refuse_undecodable
from .errors import read_only_refusal
from .interface import Connection
from .log_ops import CHECK_PAGE, LogOperations

__all__ = ["Maintenance"]

#: Pages one write transaction of vacuum() gives back (1 MiB of 4 KiB pages):
#: what another process's writer may wait for.
_VACUUM_STEP = 256
#: ``PRAGMA auto_vacuum``'s values.
_AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}


class Maintenance(LogOperations[ConnectionT]):
    """What an operator runs on an open database."""

    def checkpoint_wal(self) -> bool:
        """Checkpoint the WAL and truncate it now (waiting up to 100 ms for other
        transactions to end); True if done."""
        if self._memory or self.read_only:
            return True
        with self._write_lock, self._translating("checkpoint"):
            self._check_open()
            return self._truncate_wal()

    def check_integrity(self) -> tuple[bool, str]:
        """Run ``PRAGMA quick_check``; ``(True, "ok")`` for a sound file."""
        try:
            with self._write_lock, self._translating("integrity check"):
                self._check_open()
                self._end_leftover_transaction(self._writer)
                rows = self._writer.rows(Q.QUICK_CHECK)
        except (CorruptDatabaseError, StorageUnavailableError) as exc:
            return False, str(exc)
        detail = "\n".join(str(row[0]) for row in rows)
        if detail != "ok" or self.schema_version < S.SCHEMA_VERSION:
            return detail == "ok", detail
        try:
            problems = self.read("integrity check", _log_problems, snapshot=True)
        except (CorruptDatabaseError, StorageUnavailableError) as exc:
            return False, str(exc)
        return (True, "ok") if not problems else (False, "\n".join(problems))

    def _session_rows(self) -> list[tuple[int, str, str, int, int]]:
        """``(sid, tenant, name, head, seq the newest snapshot covers)`` of every session."""
        rows = self.read("check", lambda conn: conn.rows(Q.ALL_SESSIONS))
        return [(int(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4])) for r in rows]

    def _checked_events(self, sid: int) -> Iterator[tuple[int, bytes, int | None, bytes | None]]:
        """Every stored ``(seq, payload, crc, digest)`` of session ``sid``, a page
        (one read) at a time."""
        after, last = S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ)
        while True:
            rows = self.read(
                "check", functools.partial(_page_rows, Q.EVENTS_CHECKED, (after, last, CHECK_PAGE))
            )
            for row in rows:
                yield int(row[0]), stored_bytes(row[1]), row[2], row[3]
            if len(rows) < CHECK_PAGE:
                return
            after = S.event_key(sid, int(rows[-1][0]))

    def damaged_events(self, progress: Progress | None = None) -> list[DamagedEvent]:
        """Every stored event of every session whose payload fails its checksum or
        does not decode, and every gap in a session's seqs (a deep check)."""
        damaged: list[DamagedEvent] = []
        sessions = self._session_rows()
        for done, (sid, tenant, name, head, covered) in enumerate(sessions, 1):
            stored = ((seq, data, crc) for seq, data, crc, _ in self._checked_events(sid))
            damaged += session_damage(tenant, name, head, covered, stored)
            if progress is not None:
                progress(done, len(sessions))
        return damaged

    def verify_chain(self, tenant: str, name: str) -> ChainReport:
        """Recompute session ``name``'s hash chain and compare it with the stored links."""
        rows = self.read("verify", lambda conn: conn.rows(Q.SELECT_SESSION, (tenant, name)))
        if not rows:
            raise SessionNotFoundError(f"no session {name!r}")
        sid, head = int(rows[0][0]), int(rows[0][1])
        covered = self.read("verify", lambda conn: conn.rows(Q.SNAPSHOT_COVERS, (sid,)))[0][0]
        events = ((seq, data, digest) for seq, data, _, digest in self._checked_events(sid))
        return walk_chain(name, head, events, int(covered))

    def backup_to(self, path: str) -> None:
        """Write a consistent copy of the whole database to the new file ``path``.

        ``VACUUM INTO`` reads in one transaction, so the copy is a committed
        state even while other processes write. It runs on a connection of its
        own (a pooled reader is ``query_only``, which refuses it), so appends
        in this process go on meanwhile too.
        """
        # Created here, empty and the owner's only (VACUUM INTO fills an empty file).
        refuse_undecodable(path)
        if os.path.lexists(path):
            raise StorageUnavailableError(f"backup target {path!r} already exists")
        if not create_private_file(path, DEFAULT_FILE_MODE):
            parent = os.path.dirname(os.path.abspath(path))
            why = "no such directory" if not os.path.isdir(parent) else "cannot be created"
            raise StorageUnavailableError(f"backup target {path!r}: {why}")
        try:
            if self._memory:
                with self._write_lock, self._translating("backup"):
                    self._check_open()
                    self._writer.rows(Q.BACKUP_INTO, (path,))
            else:
                self._check_open()
                with self._translating("backup"):
                    # Without a read-only open's TEMP views: VACUUM INTO copies
                    # the file as it is, and refuses views that shadow its tables.
                    conn = self._connect(query_only=False, shims=False)
                    try:
                        # The copy keeps a page map (vacuum() works on it), whatever
                        # the source does: a copy is how an older file converts. (On
                        # a file that has one, the copy takes it as it is; setting
                        # it again would write, which a read-only open cannot.)
                        if int(conn.rows(Q.AUTO_VACUUM)[0][0]) != 2:
                            conn.rows(Q.AUTO_VACUUM_INCREMENTAL)
                        conn.rows(Q.BACKUP_INTO, (path,))
                    finally:
                        conn.close()
        except BaseException:
            remove_created(path)
            raise

    def stats(self) -> dict[str, Any]:
        """What an operator looks at first: sizes, counts and the largest sessions."""

        def work(conn: ConnectionT) -> dict[str, Any]:
            sessions, tenants, events = conn.rows(Q.SESSION_TOTALS)[0]
            page_size = int(conn.rows(Q.PAGE_SIZE)[0][0])
            largest = [
                {"tenant": tenant, "session": name, "events": head, "mtime": mtime}
                for tenant, name, head, mtime in conn.rows(Q.LARGEST_SESSIONS, (10,))
            ]
            return {
                "sessions": int(sessions),
                "tenants": int(tenants),
                "events": int(events),
                "page_size": page_size,
                "pages": int(conn.rows(Q.PAGE_COUNT)[0][0]),
                "free_pages": int(conn.rows(Q.FREELIST_COUNT)[0][0]),
                "auto_vacuum": _AUTO_VACUUM.get(int(conn.rows(Q.AUTO_VACUUM)[0][0]), "?"),
                "largest_sessions": largest,
            }

        figures = self.read("stats", work, snapshot=True)
        file_size = 0 if self._memory else os.stat(self.path).st_size
        figures.update(
            path=self.path,
            engine=self.name,
            schema_version=self.schema_version,
            file_bytes=file_size,
            wal_bytes=self._wal_size(),
            wal_size_limit=self.wal_size_limit,
            free_bytes=figures["free_pages"] * figures["page_size"],
        )
        return figures

    def vacuum(self, max_pages: int | None = None) -> dict[str, Any]:
        """Give free pages back to the file system: the file shrinks.

        Free pages (what deleted, truncated and pruned sessions left) are
        moved to the end of the file and cut off, ``_VACUUM_STEP`` pages per
        write transaction, so writers in other processes wait for one step at
        a time, never for the whole run; at most ``max_pages`` in all. Then
        the WAL is checkpointed, which is when the file itself is truncated.
        Only a file that keeps a page map (``auto_vacuum`` incremental: every
        file this version creates, and every :meth:`backup_to` copy) can;
        on another, nothing changes (the free pages are reused by later
        writes). Returns ``{"auto_vacuum", "pages_returned", "free_pages",
        "file_bytes_before", "file_bytes"}``.
        """
        self._check_open()
        if self.read_only:
            raise read_only_refusal("vacuum", self.path)
        mode = self.read("vacuum", lambda conn: int(conn.rows(Q.AUTO_VACUUM)[0][0]))
        before = self._file_size()
        returned = 0
        if mode == 2:
            while max_pages is None or returned < max_pages:
                left = _VACUUM_STEP if max_pages is None else max_pages - returned
                want = min(_VACUUM_STEP, left)
                step = self.write("vacuum", functools.partial(_vacuum_step, want))
                returned += step
                if step < want:
                    break
            if returned:
                self.checkpoint_wal()
        free = self.read("vacuum", lambda conn: int(conn.rows(Q.FREELIST_COUNT)[0][0]))
        return {
            "auto_vacuum": _AUTO_VACUUM.get(mode, "?"),
            "pages_returned": returned,
            "free_pages": free,
            "file_bytes_before": before,
            "file_bytes": self._file_size(),
        }

    def _file_size(self) -> int:
        return 0 if self._memory else os.stat(self.path).st_size

    def delete_idle(self, tenant: str, before: float, batch: int = 100) -> list[str]:
        """Delete ``tenant``'s sessions last changed before ``before`` (epoch
        seconds); return their names, oldest first.

        Safe while other processes write: each batch is one write transaction
        that looks at ``mtime`` inside it, so a session appended to meanwhile
        is kept. Space the sessions held is reused by later writes.
        """
        deleted: list[tuple[float, int, str]] = []

        def work(conn: ConnectionT, after: int) -> list[tuple[int, str, float]]:
            rows = conn.rows(Q.IDLE_SESSIONS, (tenant, before, after, batch))
            for sid, _, _ in rows:
                self.delete_session(conn, sid)
            return rows

        # In sid order, each batch after the last (there is no index on
        # activity to walk); the names come back oldest first.
        after = 0
        while True:
            rows = self.write("delete idle sessions", functools.partial(work, after=after))
            deleted.extend((mtime, sid, name) for sid, name, mtime in rows)
            if len(rows) < batch:
                return [name for _, _, name in sorted(deleted)]
            after = rows[-1][0]


def _vacuum_step(pages: int, conn: Connection) -> int:
    """Inside a write: give up to ``pages`` free pages back; how many it gave.

    The standard library's ``sqlite3`` steps a statement without result
    columns once, so there each ``incremental_vacuum`` gives one page back;
    the C engine's runs it to the end. Counting the free list serves both.
    """
    start = free = int(conn.rows(Q.FREELIST_COUNT)[0][0])
    target = max(0, free - pages)
    while free > target:
        conn.rows(Q.incremental_vacuum(free - target))
        now = int(conn.rows(Q.FREELIST_COUNT)[0][0])
        if now >= free:
            break
        free = now
    return start - free


def _log_problems(conn: Connection) -> list[str]:
    """What is wrong with the log's own shape, beyond SQLite's page checks: each
    session must hold its events with no gap from its first stored seq through
    its head, and a session whose events start past 1 (retention pruned them)
    must have a snapshot at or past the pruned ones, none past its head;
    every event must belong to a session. Each session's events are one range of the events table,
    so this reads every event once, in key order, with no sort."""
    problems = []
    counted = 0
    for sid, tenant, name, head, snapshot in conn.rows(Q.SESSION_EXTENTS):
        where = f"session {tenant!r}/{name!r}"
        bounds = (S.event_key(sid, 0), S.event_key(sid, S.MAX_SEQ))
        count, first, last = conn.rows(Q.EVENT_EXTENT, bounds)[0]
        counted += count
        if not count:
            first, last = head + 1, head
        if last != head:
            problems.append(f"{where}: its head is {head} but its last event is {last}")
        elif count != last - first + 1:
            problems.append(
                f"{where}: {last - first + 1 - count} event(s) missing between {first} and {last}"
            )
        elif first > 1 and (snapshot is None or snapshot < first - 1):
            problems.append(f"{where}: events 1..{first - 1} are gone and no snapshot covers them")
        elif snapshot is not None and snapshot > head:  # truncate drops such snapshots
            problems.append(f"{where}: its head is {head} but a snapshot covers up to {snapshot}")
    orphans = int(conn.rows(Q.EVENT_COUNT)[0][0]) - counted
    if orphans:
        problems.append(f"{orphans} event(s) belong to no session")
    return problems


def _page_rows(sql: str, params: tuple[Any, ...], conn: Connection) -> list[tuple[Any, ...]]:
    """The rows of one statement (a page of a deep check, bound with its params)."""
    return conn.rows(sql, params)
