# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The C twin: the engine interface driving the SQLite C API directly.

It owns its ``sqlite3*`` handles (never the standard library's), keeps the
hot statements prepared per connection, appends a whole batch in one C loop
inside one ``BEGIN IMMEDIATE`` transaction with the GIL released, and scans a
page by copying the payloads straight from column memory into one buffer that
is decoded in one call, then builds each ``StoredEvent`` in place. Opening,
the schema guard, the reader pool, transactions, the error table and the cold
paths are the shared ``EngineBase`` (engine/base.py and the modules it joins).

Its parts are included files beside it, compiled into this one module (with
the embedded SQLite, one translation unit): ``connection.pxi`` (prepared
statements, ``CConnection``), ``group_commit.pxi`` (requests, ``_apply`` and
``_commit_group``, the write lock and the writer thread) and ``scan.pxi``
(page stepping and ``StoredEvent`` building); this file holds ``CEngine``.
``line_check.pxi`` is the file store's check of its lines' CRCs and
``postgres_page.pxi`` the PostgreSQL backend's page of events: compiled into
this module (the one C module agentlog builds), but no part of the SQLite
engine (reached through ``agentlog.engine.line_check`` and
``agentlog.engine.postgres.operations``).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromLongLong
from cpython.mem cimport PyMem_RawFree
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy, memset, strlen, strncpy
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec
from posix.unistd cimport close, getpid, read, usleep

from agentlog.engine.includes.python cimport (
    PyBUF_READ,
    PyGC_Disable,
    PyGC_Enable,
    PyObject_GC_UnTrack,
    PyMemoryView_FromMemory,
    PyUnicode_DATA,
    PyUnicode_IS_ASCII,
    PyUnicode_AsUTF8AndSize,
    PyUnicode_DecodeUTF8,
)
from agentlog.engine.includes.faults cimport (
    agentlog_faults_install,
    agentlog_raw_malloc,
    agentlog_realloc,
)
from agentlog.engine.includes.sqlite3 cimport *
from agentlog.engine.includes.threads cimport *
from agentlog.engine.includes.support cimport (
    agentlog_crc32,
    agentlog_crc32_init,
    agentlog_is_finished,
    agentlog_poke,
    agentlog_set_finished,
    agentlog_stored_event,
)

import os
import threading
from urllib.parse import quote as _quote

from agentlog.engine import schema as S
from agentlog.engine import sql as Q
from agentlog.engine.base import EngineBase
from agentlog.engine.errors import (
    CLOSED,
    driver_error,
    read_only_refusal,
    too_long,
    too_many_sessions,
)
from agentlog.errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    IdempotencyKeyError,
    StorageUnavailableError,
)
from agentlog.events import (
    EVENT_TYPES,
    MAX_SESSION_ID_LENGTH,
    RawEvent,
    StoredEvent,
    check_session_id,
    decode_json,
)
from agentlog.integrity import checked_raw_page, first_damaged

__all__ = ["CEngine", "observe_commit_groups"]

#: Called with each thread's append (its ``commit_group``) once the writer
#: thread has written it; None: nothing is (see observe_commit_groups).
cdef object _group_observer = None


def observe_commit_groups(observer):
    """Call ``observer(handle)`` (None: stop) in each thread whose append the
    writer thread wrote, once it has, ``handle.commit_group`` telling the
    group (agentlog.telemetry's; an event loop's appends are its channel's)."""
    global _group_observer
    _group_observer = observer

assert S.SEQ_BITS == 32, "the C engine packs event keys with 32 seq bits"

agentlog_crc32_init()


def crc32(data, unsigned int value=0):
    """The C engine's CRC-32 of ``data`` (bytes-like): equal to ``zlib.crc32``."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return value
    return agentlog_crc32(value, &view[0], view.shape[0])

# Only in a build with the fault-injection seam (AGENTLOG_FAULTS=1): wrap
# SQLite's allocator and default VFS, before any connection is opened, and add
# the seam's control functions here (agentlog.engine.faults). Otherwise nothing.
agentlog_faults_install(globals())

# -- result codes to exceptions: the one table in agentlog.engine.errors -------------

cdef object _error(int rc, const char *message, str context):
    text = message.decode("utf-8", "replace") if message != NULL else ""
    return driver_error(rc, text, context)


include "line_check.pxi"
include "connection.pxi"
include "group_commit.pxi"
include "scan.pxi"
include "postgres_page.pxi"


def _sqlite_info():
    """Version, source id and compile options of the SQLite compiled in."""
    options = []
    cdef int i = 0
    cdef const char *option
    while True:
        option = sqlite3_compileoption_get(i)
        if option == NULL:
            break
        options.append(option.decode())
        i += 1
    return {
        "sqlite_version": sqlite3_libversion().decode(),
        "sqlite_source_id": sqlite3_sourceid().decode(),
        "compile_options": options,
    }


cdef Py_ssize_t _MAX_ID = MAX_SESSION_ID_LENGTH


cdef inline bint _plain_id(object name):
    """Whether ``name`` is a session id ``check_session_id`` takes as it is, by
    its common case: printable ASCII, no slash or backslash, not ``.``/``..``.
    False sends it to ``check_session_id`` (which decides, or refuses)."""
    cdef Py_ssize_t size, i
    cdef const char *text
    cdef char c
    if type(name) is not str or not PyUnicode_IS_ASCII(name):
        return False
    size = len(<str>name)
    if size == 0 or size > _MAX_ID:
        return False
    text = PyUnicode_DATA(name)
    for i in range(size):
        c = text[i]
        if c < 0x20 or c > 0x7E or c == 0x2F or c == 0x5C:
            return False
    return not (text[0] == 0x2E and (size == 1 or (size == 2 and text[1] == 0x2E)))


cdef int64_t _pooled_head(object readers, str tenant, str name) except -1:
    """A session's head, on a reader borrowed from the engine's ``ReaderPool``."""
    cdef CConnection conn = <CConnection>readers.borrow()
    try:
        return _head(conn, tenant, name)
    finally:
        readers.give_back(conn)


cdef object _pooled_scan(object readers, str tenant, str name, int64_t since_seq,
                         int64_t limit, bint raw):
    """A page of a session (``raw``: its stored JSON, ``scan_json``'s), on a
    reader borrowed from the engine's ``ReaderPool``."""
    cdef CConnection conn = <CConnection>readers.borrow()
    try:
        if raw:
            return _scan_json_page(conn, tenant, name, since_seq, limit)
        return _scan_page(conn, tenant, name, since_seq, limit)
    finally:
        readers.give_back(conn)


cdef object _outcome(_Append item):
    """What one written (or refused) append comes to: its head, or the error."""
    cdef int status = item.request.status
    name = item.name
    if status > 0 and item.error is None:
        # Failed in the writer thread's group: its message is the request's.
        item.error = item.request.error.decode("utf-8", "replace")
    if status == SQLITE_OK:
        return item.request.head
    if status == APPEND_REPLAYED or status == APPEND_KEY_MISMATCH:
        # Its key was stored: the key's own replay (its head, or its error;
        # the stored digest was compared in C, so a mismatch hands it none).
        key = item.key
        digest = key.digest if status == APPEND_REPLAYED else b""
        try:
            return key.replay(name, digest, item.request.head)
        except IdempotencyKeyError as exc:
            return exc
    if status == APPEND_CONFLICT:
        return CheckpointConflictError(name, item.request.expected, item.request.head)
    if status == APPEND_TOO_LONG:
        return too_long(name)
    if status == APPEND_TOO_MANY_SESSIONS:
        return too_many_sessions()
    if status == _CLOSED:
        return CheckpointerClosedError(CLOSED)
    return _error(status, item.error.encode(), "append")


class CEngine(EngineBase):
    """The engine interface on the SQLite C API (see the module docstring)."""

    name = "c"
    sqlite_info = staticmethod(_sqlite_info)

    def __init__(self, path, **options):
        self._commits_direct = 0  # appends' transactions outside the writer thread
        self._commits_counted = 0  # the writer thread's, counted towards the WAL's looks
        self._group_writer = _GroupWriter()
        self._closing = threading.Lock()
        self._completions = set()  # each until closed (see append_completions)
        super().__init__(path, **options)

    @property
    def commits(self):
        """Write transactions that appends used (for tests and tuning)."""
        return self._commits_direct + self._group_writer.commits

    def _new_write_lock(self):
        return _WriteLock()

    def _stop_before_shut_down(self):
        # Collected without close(): the writer thread writes what is queued
        # (an event loop's appends keep no engine alive) and ends first, not
        # interruptibly (it uses what the collector frees next).
        writer = self._group_writer
        return lambda: writer.stop(False)

    def close(self):
        # What callers queued is written first; the thread then ends. One
        # close at a time: a second must not close the connection under a
        # thread the first is still waiting for.
        with self._closing:
            self._group_writer.stop()
            super().close()
            # Every queued append has finished: the channels whose loops have
            # gone are closed; the others, their loops close.
            self._close_abandoned()
            self._completions.clear()

    def _close_abandoned(self):
        """Close the channels whose loops have gone, once what they queued is done."""
        for completions in list(self._completions):
            if completions.abandoned:
                completions.close()

    def abandon_after_fork(self):
        super().abandon_after_fork()
        self._closing = threading.Lock()  # a parent thread may have held it at the fork

    def _connect(self, query_only, shims=True):
        conn = CConnection()
        uri = None
        if self._immutable:
            uri = f"file:{_quote(self.path)}?mode=ro&immutable=1"
        conn.open(self.path, not self.read_only, query_only, self._busy_timeout_ms, uri,
                  self._read_only_shims if shims else ())
        return conn

    def _append_batch(self, str tenant, str name, expected_head, double ts, list batch):
        """Append a non-empty batch atomically; return the new head.

        Group commit: when no other thread is appending and the write lock is
        free, the caller writes its own at once. Otherwise it queues it for
        the writer thread, which writes everything queued in one transaction
        and wakes each caller after the commit that holds its events; a
        conflict refuses that append alone. A caller interrupted while it
        waits (Ctrl-C, any exception a signal handler raises) takes its append
        back if no group has taken it yet: then it is never written. Once
        taken, it is written or refused as a whole, and the caller raises
        after that commit.
        """
        if self.read_only:
            raise read_only_refusal("append", self.path)
        if self.hash_chain:
            # Each link needs the one before it: the shared path, in Python.
            return self.write(
                "append", lambda conn: self._append_in(conn, tenant, name, expected_head, ts, batch)
            )
        return self._submit(tenant, name, expected_head, ts, batch, None)

    def append_keyed(self, str tenant, str name, expected_head, double ts, list batch, key):
        """Append a non-empty batch under ``key`` (an ``AppendKey``), or replay
        the append the session holds under it (``LogOperations.append_keyed``).

        The key's look-up, the events and the key's row are one request of the
        group commit, like an unkeyed append's (it may share a group): one
        transaction, in C. A hash-chained file takes the shared path."""
        self._check_open()
        if self.read_only:
            raise read_only_refusal("append", self.path)
        if self.hash_chain:
            return super().append_keyed(tenant, name, expected_head, ts, batch, key)
        return self._submit(tenant, name, expected_head, ts, batch, key)

    def _submit(self, str tenant, str name, expected_head, double ts, list batch, key):
        """Write one append through the group commit (see
        ``_append_batch``); ``key``: an ``AppendKey``, or None."""
        cdef int64_t expected = -1 if expected_head is None else expected_head
        cdef _Append mine = _Append()
        cdef _GroupWriter writer = <_GroupWriter>self._group_writer
        mine.prepare(tenant, name, expected, ts, batch)
        if key is not None:
            mine.prepare_key(key)
        writer.w.callers += 1
        try:
            if writer.w.callers == 1 and (<_WriteLock>self._write_lock).acquire(False):
                # Nobody else appending and nobody writing: written now, with
                # no hand-off. (Between two groups the lock is free for a
                # moment; a caller among others queues, for a larger group.)
                try:
                    self._commit_items([mine], True)
                finally:
                    self._write_lock.release()
            else:
                self._queue_and_wait(writer, mine)
        finally:
            writer.w.callers -= 1
        outcome = _outcome(mine)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _queue_and_wait(self, _GroupWriter writer, _Append mine):
        """Queue ``mine`` for the writer thread and sleep until it is written."""
        cdef Request *r = &mine.request
        cdef PyLockStatus status
        r.wake = PyThread_allocate_lock()
        if r.wake == NULL:
            raise MemoryError("append: out of memory")
        PyThread_acquire_lock(r.wake, WAIT_LOCK)
        writer.start(<CConnection>self._writer, <_WriteLock>self._write_lock)
        if not writer.queue(r):
            r.status = _CLOSED
            return
        while True:
            with nogil:
                status = PyThread_acquire_lock_timed(r.wake, -1, 1)
            if status == PY_LOCK_ACQUIRED:
                break
            try:
                PyErr_CheckSignals()  # interrupted: the handler may raise (Ctrl-C)
            except BaseException:
                if not writer.take_back(r):
                    # Taken into a group: written or refused as a whole; its
                    # buffers live until that commit has used them.
                    with nogil:
                        PyThread_acquire_lock(r.wake, WAIT_LOCK)
                raise
        if _group_observer is not None:
            _group_observer(mine)
        self._count_writer_commits(True)

    def _count_writer_commits(self, bint wait):
        """Count the writer thread's commits towards the WAL's bound (see
        ``EngineBase._note_commit``); without ``wait`` (on an event loop), the
        look is left to a later count if the write lock is held."""
        done = (<_GroupWriter>self._group_writer).w.commits
        due = self._count_commits(done - self._commits_counted)
        self._commits_counted = done
        if not due:
            return
        if not self._write_lock.acquire(wait):
            return
        try:
            if not self._closed:  # a loop may hear of its appends after the close
                self._bound_wal()
        finally:
            self._write_lock.release()

    def append_completions(self):
        """A channel for an event loop's appends to the writer thread (see
        :meth:`queue_append`); None where appends cannot be queued to it (a
        read-only or hash-chained file). Kept until its ``close()``."""
        self._check_open()
        if self.read_only or self.hash_chain:
            return None
        self._close_abandoned()
        completions = _Completions(self._count_writer_commits, self._completions,
                                   self._group_writer)
        self._completions.add(completions)
        return completions

    def queue_append(self, str tenant, str name, expected_head, double ts, list batch,
                     _Completions completions):
        """Queue a non-empty batch for the writer thread, as a thread's append
        would be, and return its handle at once. ``completions.finished()``
        hands back ``(handle, outcome)`` once it is written or refused; until
        the writer thread takes it into a group, ``completions.withdraw()``
        takes it back."""
        cdef _Append mine = _Append()
        cdef _GroupWriter writer = <_GroupWriter>self._group_writer
        self._check_open()
        if completions.write_fd < 0:
            raise CheckpointerClosedError("append: this event loop's channel is closed")
        mine.prepare(tenant, name, -1 if expected_head is None else expected_head, ts, batch)
        mine.request.wake_fd = completions.write_fd
        writer.start(<CConnection>self._writer, <_WriteLock>self._write_lock)
        if not writer.queue(&mine.request):
            raise CheckpointerClosedError(self._closed_message)
        completions.queued[mine] = None
        return mine

    def _append_group(self, str tenant, requests, double ts, *, bint wait):
        """``EngineBase._append_group`` through the group-commit loop: non-empty
        batches in one transaction, each refused (or not) on its own; None only
        without ``wait``, when the write could not begin at once."""
        cdef _Append item
        cdef list items = []
        if self.read_only:
            raise read_only_refusal("append", self.path)
        if not requests:
            return []
        if self.hash_chain:
            return super()._append_group(tenant, requests, ts, wait=wait)
        for name, expected_head, batch in requests:
            item = _Append()
            item.prepare(tenant, name, -1 if expected_head is None else expected_head, ts, batch)
            items.append(item)
        if wait:
            with self._write_lock:
                self._commit_items(items, True)
        else:
            if not self._write_lock.acquire(False):
                return None
            try:
                if not self._commit_items(items, False):
                    return None
            finally:
                self._write_lock.release()
        results = []
        for item in items:
            outcome = _outcome(item)
            if isinstance(outcome, BaseException) and not isinstance(
                outcome, (CheckpointConflictError, ValueError)
            ):
                raise outcome  # the whole group failed
            results.append(outcome)
        return results

    def _commit_items(self, list pending, bint wait):
        """Under the write lock: write ``pending`` (``_Append`` objects) in one
        transaction. False only without ``wait``, when another connection held
        the write lock: then nothing was written and ``pending`` is untouched."""
        cdef char errbuf[256]
        cdef sqlite3_stmt *statements[N_STATEMENTS]
        cdef Request **group
        cdef Py_ssize_t size, i
        cdef CConnection conn
        cdef _Append item
        cdef int rc
        errbuf[0] = 0
        size = len(pending)
        if self._closed:
            for item in pending:
                item.request.status = _CLOSED
                item.done = True
            return True
        conn = <CConnection>self._writer
        group = <Request **>agentlog_raw_malloc(size * sizeof(Request *))
        try:
            if group == NULL:
                raise MemoryError("append: out of memory")
            for i in range(ST_SCAN):
                statements[i] = conn.statement(i)
            for i in range(size):
                item = <_Append>pending[i]
                item.request.status = SQLITE_OK
                group[i] = &item.request
            with nogil:
                rc = _commit_group(conn.db, statements, group, size, errbuf, wait, &conn.busy)
            if rc == GROUP_WOULD_WAIT:
                return False
            self._commits_direct += 1
            message = errbuf.decode("utf-8", "replace")
            for item in pending:
                if item.request.status > 0:
                    item.error = message
                item.done = True
            # Only now Python code, where a signal handler may raise (Ctrl-C):
            # the outcomes are settled and stay what they are.
            if rc == SQLITE_OK:
                self._note_commit()
            return True
        except BaseException as exc:
            for item in pending:
                if not item.done:
                    item.request.status = SQLITE_ERROR
                    item.error = f"{type(exc).__name__}: {exc}"
                    item.done = True
            raise
        finally:
            PyMem_RawFree(group)

    def scan(self, str tenant, str name, int64_t since_seq, int64_t limit):
        """One page of events after ``since_seq``, at most ``limit`` of them."""
        if self._memory:
            with self._write_lock:
                self._check_open()
                return _scan_page(<CConnection>self._writer, tenant, name, since_seq, limit)
        return _pooled_scan(self._readers, tenant, name, since_seq, limit, False)

    def scan_json(self, str tenant, str name, int64_t since_seq, int64_t limit):
        """:meth:`scan`, each event's JSON as stored (checked against its crc,
        not decoded): stepped and built in C, like a page of ``scan``."""
        if self._memory:
            with self._write_lock:
                self._check_open()
                return _scan_json_page(<CConnection>self._writer, tenant, name, since_seq,
                                       limit)
        return _pooled_scan(self._readers, tenant, name, since_seq, limit, True)

    def head_checked(self, str tenant, name):
        """``head(tenant, check_session_id(name))``, the id checked here (the
        common case without a Python call): a checkpointer's ``head()``."""
        if not _plain_id(name):
            name = check_session_id(name)
        if self._memory:
            return self._head_on_writer(tenant, name)
        return _pooled_head(self._readers, tenant, name)

    def head(self, str tenant, str name):
        """The session's head; 0 when it is empty or unknown."""
        if self._memory:
            return self._head_on_writer(tenant, name)
        return _pooled_head(self._readers, tenant, name)

    def _head_on_writer(self, str tenant, str name):
        """``:memory:``'s head, on its only connection."""
        with self._write_lock:
            self._check_open()
            return _head(<CConnection>self._writer, tenant, name)
