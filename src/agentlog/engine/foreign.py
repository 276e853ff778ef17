"""Another application's SQLite file, read-only: the rows ``agentlog migrate``
reads from the frameworks' own stores.

The OpenAI Agents SDK's ``SQLiteSession`` (``agent_sessions`` and
``agent_messages``), LangGraph's ``SqliteSaver`` (``checkpoints`` and
``writes``) and Google ADK's ``DatabaseSessionService`` (``sessions``,
``events``, ``app_states`` and ``user_states``); and LangGraph's
``PostgresSaver`` (``checkpoints``, ``checkpoint_blobs`` and
``checkpoint_writes`` in a PostgreSQL schema), read in read-only
transactions, and copied into a SQLite file of the same tables for the
migration's backup. A file is opened through
the standard library's ``sqlite3`` with ``mode=ro`` (and ``immutable`` when
no process has it open, so nothing is created beside it): it is never
written, not even its journal mode. Every statement lives here, as every
other SQL statement of agentlog lives in :mod:`agentlog.engine`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ..errors import StorageDataError

__all__ = [
    "ForeignDatabase",
    "ForeignPostgres",
    "ForeignRows",
    "adk_app_states",
    "adk_events",
    "adk_session",
    "adk_session_keys",
    "adk_user_states",
    "langgraph_checkpoints",
    "langgraph_pg_blobs",
    "langgraph_pg_checkpoints",
    "langgraph_pg_threads",
    "langgraph_threads",
    "langgraph_writes",
    "openai_messages",
    "openai_session",
    "openai_session_ids",
]

T = TypeVar("T")
Row = tuple[Any, ...]

_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
_USER_VERSION = "PRAGMA user_version"


class ForeignRows:
    """The connection of one read transaction (a snapshot) of a foreign file."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
        """Every row ``sql`` gives."""
        return list(self._conn.execute(sql, params))


class _PostgresRows(ForeignRows):
    """A read transaction of a PostgreSQL source: the same statements, with
    psycopg's ``%s`` for SQLite's ``?`` (none of them holds a ``?`` of its own)."""

    def __init__(self, conn: Any) -> None:
        self._pg = conn

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
        return [tuple(row) for row in self._pg.execute(sql.replace("?", "%s"), params)]


class ForeignDatabase:
    """A SQLite file another application wrote, opened read-only.

    A file that is not a SQLite database raises :class:`StorageDataError`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._columns: dict[str, list[str]] = {}
        idle = not any(Path(f"{path}{end}").exists() for end in ("-wal", "-shm", "-journal"))
        uri = f"file:{quote(os.fspath(path.absolute()))}?mode=ro" + ("&immutable=1" if idle else "")
        try:
            self._conn = sqlite3.connect(uri, uri=True, isolation_level=None)
            self.tables = {row[0] for row in self._conn.execute(_TABLES)}
            self.user_version = int(self._conn.execute(_USER_VERSION).fetchone()[0])
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise StorageDataError(f"{path} is not a readable SQLite database ({exc})") from None

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def columns(self, table: str) -> list[str]:
        """The names of ``table``'s columns, in order (none for a missing table)."""
        if table not in self.tables:
            return []
        if table not in self._columns:  # read-only: its schema stays as opened
            self._columns[table] = [
                row[0]
                for row in self._conn.execute("SELECT name FROM pragma_table_info(?)", (table,))
            ]
        return self._columns[table]

    def read(self, work: Callable[[ForeignRows], T]) -> T:
        """``work`` in one read transaction: every row it reads is of one state."""
        try:
            self._conn.execute("BEGIN")
            try:
                return work(ForeignRows(self._conn))
            finally:
                self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise StorageDataError(f"{self.path}: cannot be read ({exc})") from None

    def backup_to(self, path: Path) -> None:
        """A consistent copy of the whole file at the new file ``path``."""
        if os.path.lexists(path):
            raise StorageDataError(f"backup target {path} already exists")
        copy = sqlite3.connect(os.fspath(path))
        try:
            self._conn.backup(copy)
        except sqlite3.DatabaseError as exc:
            raise StorageDataError(f"{self.path}: cannot be copied ({exc})") from None
        finally:
            copy.close()

    def close(self) -> None:
        """Let go of the file."""
        self._conn.close()


# -- the OpenAI Agents SDK's SQLiteSession ------------------------------------------------


def openai_session_ids(conn: ForeignRows) -> list[str]:
    """Every session id, with a session row or only messages, in order."""
    sql = (
        "SELECT session_id FROM agent_sessions UNION "
        "SELECT DISTINCT session_id FROM agent_messages ORDER BY 1"
    )
    return [row[0] for row in conn.rows(sql)]


def openai_session(conn: ForeignRows, session_id: str) -> Row | None:
    """``(created_at, updated_at)`` of a session's row, or None."""
    sql = "SELECT created_at, updated_at FROM agent_sessions WHERE session_id = ?"
    found = conn.rows(sql, (session_id,))
    return found[0] if found else None


def openai_messages(conn: ForeignRows, session_id: str) -> list[Row]:
    """``(id, message_data, created_at)`` of a session's messages, in the order
    ``get_items`` returns them."""
    sql = "SELECT id, message_data, created_at FROM agent_messages WHERE session_id = ? ORDER BY id"
    return conn.rows(sql, (session_id,))


# -- LangGraph's SqliteSaver --------------------------------------------------------------


def langgraph_threads(conn: ForeignRows) -> list[Row]:
    """Every ``(thread_id, checkpoint_ns)`` with a checkpoint or a write, in order."""
    sql = (
        "SELECT thread_id, checkpoint_ns FROM checkpoints UNION "
        "SELECT thread_id, checkpoint_ns FROM writes ORDER BY 1, 2"
    )
    return conn.rows(sql)


def langgraph_checkpoints(conn: ForeignRows, thread_id: str, ns: str) -> list[Row]:
    """``(checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)`` of
    a thread's namespace, oldest first."""
    sql = (
        "SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
        "FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id"
    )
    return conn.rows(sql, (thread_id, ns))


def langgraph_writes(
    conn: ForeignRows, thread_id: str, ns: str, task_paths: bool = True, postgres: bool = False
) -> list[Row]:
    """``(checkpoint_id, task_id, idx, channel, type, value, task_path)`` of a
    thread's namespace, by checkpoint, task and index: a SqliteSaver's
    ``writes`` or (``postgres``) a PostgresSaver's ``checkpoint_writes``. A
    store of a saver release before ``task_path`` was stored (``task_paths``
    false) gives ``''``, the path LangGraph passes for a write that names none."""
    task_path = "task_path" if task_paths else "''"
    table, value = ("checkpoint_writes", "blob") if postgres else ("writes", "value")
    sql = (
        f"SELECT checkpoint_id, task_id, idx, channel, type, {value}, {task_path} "
        f"FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? "
        "ORDER BY checkpoint_id, task_id, idx"
    )
    return conn.rows(sql, (thread_id, ns))


# -- Google ADK's DatabaseSessionService --------------------------------------------------


def adk_session_keys(conn: ForeignRows) -> list[Row]:
    """Every session's ``(app_name, user_id, id)``, in order."""
    return conn.rows("SELECT app_name, user_id, id FROM sessions ORDER BY 1, 2, 3")


def adk_session(conn: ForeignRows, app_name: str, user_id: str, session_id: str) -> Row | None:
    """``(state, create_time, update_time)`` of a session's row, or None."""
    sql = (
        "SELECT state, create_time, update_time FROM sessions "
        "WHERE app_name = ? AND user_id = ? AND id = ?"
    )
    found = conn.rows(sql, (app_name, user_id, session_id))
    return found[0] if found else None


def adk_events(conn: ForeignRows, app_name: str, user_id: str, session_id: str) -> list[Row]:
    """``(id, invocation_id, timestamp, event_data)`` of a session's events, in
    the order ``get_session`` returns them (by time, then id)."""
    sql = (
        "SELECT id, invocation_id, timestamp, event_data FROM events "
        "WHERE app_name = ? AND user_id = ? AND session_id = ? ORDER BY timestamp, id"
    )
    return conn.rows(sql, (app_name, user_id, session_id))


def adk_app_states(conn: ForeignRows) -> list[Row]:
    """Every ``(app_name, state, update_time)`` of the ``app:`` state, in order."""
    return conn.rows("SELECT app_name, state, update_time FROM app_states ORDER BY 1")


def adk_user_states(conn: ForeignRows) -> list[Row]:
    """Every ``(app_name, user_id, state, update_time)`` of the ``user:`` state, in order."""
    sql = "SELECT app_name, user_id, state, update_time FROM user_states ORDER BY 1, 2"
    return conn.rows(sql)


# -- LangGraph's PostgresSaver, and the SQLite copy of its tables --------------------------

#: The tables of a ``PostgresSaver`` schema, as its copy holds them: ``jsonb``
#: as its text, ``bytea`` as a blob, every row as it was.
_PG_TABLES = {
    "checkpoints": (
        "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata",
        "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
        "CAST(checkpoint AS TEXT), CAST(metadata AS TEXT)",
    ),
    "checkpoint_blobs": (
        "thread_id, checkpoint_ns, channel, version, type, blob",
        "thread_id, checkpoint_ns, channel, version, type, blob",
    ),
    "checkpoint_writes": (
        "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path",
        "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, {task_path}",
    ),
}
_PG_SCHEMA = "SELECT current_schema()"
_PG_COLUMNS = (
    "SELECT table_name, column_name FROM information_schema.columns "
    "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
)
_COPY_BATCH = 1000


class ForeignPostgres:
    """A PostgreSQL schema another application wrote (the URL's own: the
    first of its ``search_path``, as the application's unqualified
    statements found it), read in ``REPEATABLE READ READ ONLY``
    transactions only: the server itself refuses any write. Needs psycopg.

    A server that cannot be reached raises agentlog's typed errors."""

    def __init__(self, url: str, shown: str) -> None:
        import psycopg

        from .postgres import connect_options, translate_errors

        self._translate = translate_errors
        self.path = shown
        with self._translate(f"read {shown}"):
            self._conn = psycopg.connect(url, **connect_options(10.0))
            self._conn.read_only = True
            self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            try:
                self.schema = str(self._conn.execute(_PG_SCHEMA).fetchone()[0])  # type: ignore[index]
                self._columns: dict[str, list[str]] = {}
                for table, column in self._conn.execute(_PG_COLUMNS):
                    self._columns.setdefault(str(table), []).append(str(column))
            except BaseException:
                self._conn.close()
                raise
        self.tables = set(self._columns)

    def columns(self, table: str) -> list[str]:
        """The names of ``table``'s columns, in order (none for a missing table)."""
        return self._columns.get(table, [])

    def read(self, work: Callable[[ForeignRows], T]) -> T:
        """``work`` in one read-only snapshot transaction."""
        with self._translate(f"read {self.path}"), self._conn.transaction():
            return work(_PostgresRows(self._conn))

    def backup_to(self, path: Path) -> None:
        """Every row of the saver's tables, from one snapshot, into the new
        SQLite file ``path`` (tables of the same names and columns)."""
        if os.path.lexists(path):
            raise StorageDataError(f"backup target {path} already exists")
        copy = sqlite3.connect(os.fspath(path))
        task_path = "task_path" if "task_path" in self.columns("checkpoint_writes") else "''"
        try:
            with self._translate(f"copy {self.path}"), self._conn.transaction(), copy:
                for table, (columns, selected) in _PG_TABLES.items():
                    copy.execute(f"CREATE TABLE {table} ({columns})")
                    marks = ", ".join("?" * len(columns.split(", ")))
                    insert = f"INSERT INTO {table} VALUES ({marks})"
                    select = f"SELECT {selected.format(task_path=task_path)} FROM {table}"
                    with self._conn.cursor(name=f"agentlog_copy_{table}") as cursor:
                        cursor.execute(select)
                        while batch := cursor.fetchmany(_COPY_BATCH):
                            copy.executemany(insert, batch)
                    # Built once the rows are in: each thread is read from the copy by it.
                    copy.execute(f"CREATE INDEX {table}_of ON {table} (thread_id, checkpoint_ns)")
        finally:
            copy.close()

    def close(self) -> None:
        """Let go of the connection."""
        self._conn.close()


def langgraph_pg_threads(conn: ForeignRows) -> list[Row]:
    """Every ``(thread_id, checkpoint_ns)`` of a ``PostgresSaver`` schema (or
    its copy) with a checkpoint or a write, in order."""
    sql = (
        "SELECT thread_id, checkpoint_ns FROM checkpoints UNION "
        "SELECT thread_id, checkpoint_ns FROM checkpoint_writes ORDER BY 1, 2"
    )
    return conn.rows(sql)


def langgraph_pg_checkpoints(conn: ForeignRows, thread_id: str, ns: str) -> list[Row]:
    """``(checkpoint_id, parent_checkpoint_id, checkpoint, metadata)`` of a
    thread's namespace, oldest first, the two ``jsonb`` columns as text."""
    sql = (
        "SELECT checkpoint_id, parent_checkpoint_id, CAST(checkpoint AS TEXT), "
        "CAST(metadata AS TEXT) FROM checkpoints "
        "WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id"
    )
    return conn.rows(sql, (thread_id, ns))


def langgraph_pg_blobs(conn: ForeignRows, thread_id: str, ns: str) -> list[Row]:
    """``(channel, version, type, blob)`` of a thread's namespace, in order."""
    sql = (
        "SELECT channel, version, type, blob FROM checkpoint_blobs "
        "WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY channel, version"
    )
    return conn.rows(sql, (thread_id, ns))
