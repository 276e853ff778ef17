# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The C twin: the engine interface driving the SQLite C API directly.

It owns its ``sqlite3*`` handles (never the standard library's), keeps the
hot statements prepared per connection, appends a whole batch in one C loop
inside one ``BEGIN IMMEDIATE`` transaction with the GIL released, and scans a
page by copying the payloads straight from column memory into one buffer that
is decoded in one call, then builds each ``StoredEvent`` in place. Opening,
the schema guard, the reader pool, transactions, the error table and the cold
paths are the shared ``EngineBase``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_FromLongLong
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc
from libc.stdint cimport int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy, memset, strlen, strncpy

from agentlog.engine.includes.python cimport (
    PyBUF_READ,
    PyMemoryView_FromMemory,
    PyUnicode_AsUTF8AndSize,
    PyUnicode_DecodeUTF8,
)
from agentlog.engine.includes.sqlite3 cimport *
from agentlog.engine.includes.support cimport agentlog_stored_event

import threading

from agentlog.engine import schema as S
from agentlog.engine import sql as Q
from agentlog.engine.base import EngineBase, driver_error
from agentlog.errors import (
    CheckpointConflictError,
    CheckpointerClosedError,
    CorruptDatabaseError,
    StorageUnavailableError,
)
from agentlog.events import EVENT_TYPES, StoredEvent, decode_json

__all__ = ["CEngine"]

assert S.SEQ_BITS == 32, "the C engine packs event keys with 32 seq bits"

# -- result codes to exceptions: the one table in agentlog.engine.base ---------------

cdef object _error(int rc, const char *message, str context):
    text = message.decode("utf-8", "replace") if message != NULL else ""
    return driver_error(rc, text, context)


# -- prepared statements ---------------------------------------------------------

cdef enum:
    ST_BEGIN = 0
    ST_COMMIT
    ST_ROLLBACK
    ST_SELECT_SESSION
    ST_INSERT_SESSION
    ST_UPDATE_SESSION
    ST_INSERT_EVENT
    ST_NEXT_SID
    ST_SCAN
    ST_HEAD
    N_STATEMENTS

cdef list _SQL = [
    Q.BEGIN_WRITE.encode(),
    Q.COMMIT.encode(),
    Q.ROLLBACK.encode(),
    Q.SELECT_SESSION.encode(),
    Q.INSERT_SESSION.encode(),
    Q.UPDATE_SESSION.encode(),
    Q.INSERT_EVENT.encode(),
    Q.NEXT_SID.encode(),
    Q.SCAN_EVENTS.encode(),
    Q.SELECT_HEAD.encode(),
]

# append() outcomes beyond SQLite's own codes (negative: refused on its own)
cdef enum:
    APPEND_CONFLICT = -1
    APPEND_TOO_LONG = -2
    APPEND_TOO_MANY_SESSIONS = -3
    _CLOSED = -4

cdef enum:
    S_SEQ_BITS = 32  # _schema.SEQ_BITS, checked at import below

cdef int64_t MAX_SEQ = S.MAX_SEQ
cdef int64_t MAX_SID = S.MAX_SID


cdef int _bind(sqlite3_stmt *st, int index, object value) except -1:
    cdef Py_ssize_t size
    cdef const char *text
    if value is None:
        return sqlite3_bind_null(st, index)
    if isinstance(value, int):
        return sqlite3_bind_int64(st, index, value)
    if isinstance(value, float):
        return sqlite3_bind_double(st, index, value)
    if isinstance(value, str):
        text = PyUnicode_AsUTF8AndSize(value, &size)
        return sqlite3_bind_text(st, index, text, <int>size, SQLITE_TRANSIENT)
    if isinstance(value, bytes):
        return sqlite3_bind_blob(st, index, PyBytes_AS_STRING(value),
                                 <int>PyBytes_GET_SIZE(value), SQLITE_TRANSIENT)
    raise TypeError(f"cannot bind {type(value).__name__}")


cdef object _column(sqlite3_stmt *st, int index):
    cdef int kind = sqlite3_column_type(st, index)
    if kind == SQLITE_INTEGER:
        return sqlite3_column_int64(st, index)
    if kind == SQLITE_FLOAT:
        return sqlite3_column_double(st, index)
    if kind == SQLITE3_TEXT:
        return PyUnicode_DecodeUTF8(<const char *>sqlite3_column_text(st, index),
                                    sqlite3_column_bytes(st, index), NULL)
    if kind == SQLITE_BLOB:
        return PyBytes_FromStringAndSize(<const char *>sqlite3_column_blob(st, index),
                                         sqlite3_column_bytes(st, index))
    return None


cdef class _Statement:
    """A prepared statement owned by a connection's cache (finalized by it)."""

    cdef sqlite3_stmt *st


cdef class CConnection:
    """One ``sqlite3*`` handle with its hot statements prepared once."""

    cdef sqlite3 *db
    cdef sqlite3_stmt *statements[N_STATEMENTS]
    cdef dict cache  # sql -> _Statement, for the cold paths' statements

    def __cinit__(self):
        cdef int i
        self.db = NULL
        self.cache = {}
        for i in range(N_STATEMENTS):
            self.statements[i] = NULL

    cdef int open(self, str path, bint create, bint query_only, int busy_timeout_ms) except -1:
        cdef bytes encoded = path.encode("utf-8")
        cdef const char *filename = encoded
        cdef int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        cdef int rc
        flags |= (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) if create else SQLITE_OPEN_READONLY
        with nogil:
            rc = sqlite3_open_v2(filename, &self.db, flags, NULL)
        if rc != SQLITE_OK:
            error = _error(rc, sqlite3_errmsg(self.db) if self.db != NULL else sqlite3_errstr(rc),
                           f"cannot open {path!r}")
            self.close()
            raise error
        sqlite3_busy_timeout(self.db, busy_timeout_ms)
        if query_only:
            self.rows(Q.QUERY_ONLY, ())
        return 0

    cdef sqlite3_stmt *statement(self, int index) except NULL:
        cdef sqlite3_stmt *st = self.statements[index]
        cdef bytes sql
        cdef int rc
        if st == NULL:
            if self.db == NULL:
                raise CheckpointerClosedError("the database is closed")
            sql = <bytes>_SQL[index]
            rc = sqlite3_prepare_v3(self.db, sql, <int>len(sql), SQLITE_PREPARE_PERSISTENT,
                                    &st, NULL)
            if rc != SQLITE_OK:
                raise _error(rc, sqlite3_errmsg(self.db), "prepare")
            self.statements[index] = st
        return st

    def rows(self, str sql, params=()):
        """Run one statement (prepared once per connection); return its rows as tuples."""
        cdef sqlite3_stmt *st = NULL
        cdef bytes encoded
        cdef int rc, i, columns
        cdef _Statement cached
        if self.db == NULL:
            raise CheckpointerClosedError("the database is closed")
        cached = self.cache.get(sql)
        if cached is None:
            encoded = sql.encode("utf-8")
            rc = sqlite3_prepare_v3(self.db, encoded, <int>len(encoded), SQLITE_PREPARE_PERSISTENT,
                                    &st, NULL)
            if rc != SQLITE_OK:
                raise _error(rc, sqlite3_errmsg(self.db), sql)
            if len(self.cache) >= 128:
                self._clear_cache()
            cached = _Statement()
            cached.st = st
            self.cache[sql] = cached
        st = cached.st
        result = []
        try:
            for i, value in enumerate(params, 1):
                _bind(st, i, value)
            columns = sqlite3_column_count(st)
            while True:
                # Without the GIL: BEGIN IMMEDIATE may wait for the busy timeout.
                with nogil:
                    rc = sqlite3_step(st)
                if rc == SQLITE_DONE:
                    break
                if rc != SQLITE_ROW:
                    raise _error(rc, sqlite3_errmsg(self.db), sql.split(" ", 2)[0])
                result.append(tuple([_column(st, i) for i in range(columns)]))
        finally:
            sqlite3_reset(st)
            sqlite3_clear_bindings(st)
        return result

    def in_transaction(self):
        """Whether a transaction is open."""
        return self.db != NULL and not sqlite3_get_autocommit(self.db)

    cdef void _clear_cache(self) noexcept:
        cdef _Statement cached
        for cached in self.cache.values():
            if cached.st != NULL:
                sqlite3_finalize(cached.st)
                cached.st = NULL
        self.cache.clear()

    cpdef void close(self) noexcept:
        """Finalize the statements and close the handle; idempotent."""
        cdef int i
        if self.cache is not None:
            self._clear_cache()
        for i in range(N_STATEMENTS):
            if self.statements[i] != NULL:
                sqlite3_finalize(self.statements[i])
                self.statements[i] = NULL
        if self.db != NULL:
            sqlite3_close_v2(self.db)
            self.db = NULL

    def __dealloc__(self):
        self.close()


# -- group commit: appends queued by many threads, written in one transaction ------

cdef struct Request:
    const char *tenant
    int tenant_size
    const char *name
    int name_size
    int64_t expected  # -1: no expectation
    double ts
    Py_ssize_t count
    const char **kinds
    int *kind_sizes
    const char **payloads
    int *payload_sizes
    int status  # SQLITE_OK, an APPEND_* outcome, or the SQLite error that failed the group
    int64_t head  # the new head, or the actual head on a conflict


cdef class _Append:
    """One caller's append: C views of its batch, kept alive by the references here."""

    cdef Request request
    cdef object tenant, name, batch
    cdef bint done  # written (or refused); its status says which
    cdef str error

    def __cinit__(self):
        self.request.kinds = NULL
        self.request.kind_sizes = NULL
        self.request.payloads = NULL
        self.request.payload_sizes = NULL

    cdef int prepare(self, str tenant, str name, int64_t expected, double ts, list batch) except -1:
        cdef Py_ssize_t count = len(batch), i, size
        cdef Request *r = &self.request
        self.tenant, self.name, self.batch = tenant, name, batch
        r.tenant = PyUnicode_AsUTF8AndSize(tenant, &size)
        r.tenant_size = <int>size
        r.name = PyUnicode_AsUTF8AndSize(name, &size)
        r.name_size = <int>size
        r.expected = expected
        r.ts = ts
        r.count = count
        r.kinds = <const char **>PyMem_RawMalloc(count * sizeof(char *))
        r.payloads = <const char **>PyMem_RawMalloc(count * sizeof(char *))
        r.kind_sizes = <int *>PyMem_RawMalloc(count * sizeof(int))
        r.payload_sizes = <int *>PyMem_RawMalloc(count * sizeof(int))
        if r.kinds == NULL or r.payloads == NULL or r.kind_sizes == NULL or r.payload_sizes == NULL:
            raise MemoryError()
        for i in range(count):
            kind, payload = <tuple>batch[i]
            r.kinds[i] = PyUnicode_AsUTF8AndSize(kind, &size)
            r.kind_sizes[i] = <int>size
            size = PyBytes_GET_SIZE(payload)
            if size > 0x7FFFFFFF:
                raise ValueError(f"event {i} is larger than 2 GiB")
            r.payloads[i] = PyBytes_AS_STRING(payload)
            r.payload_sizes[i] = <int>size
        return 0

    def __dealloc__(self):
        PyMem_RawFree(self.request.kinds)
        PyMem_RawFree(self.request.payloads)
        PyMem_RawFree(self.request.kind_sizes)
        PyMem_RawFree(self.request.payload_sizes)


cdef int _apply(sqlite3 *db, sqlite3_stmt **st, Request *r) noexcept nogil:
    """One append inside the open transaction. A conflict (or a bound) is found
    before anything of this append is written, so it never touches the others."""
    cdef int rc
    cdef int64_t sid = 0, head = 0, new_head, base
    cdef bint exists
    cdef Py_ssize_t i
    cdef sqlite3_stmt *select = st[ST_SELECT_SESSION]
    cdef sqlite3_stmt *insert = st[ST_INSERT_EVENT]
    sqlite3_bind_text(select, 1, r.tenant, r.tenant_size, SQLITE_STATIC)
    sqlite3_bind_text(select, 2, r.name, r.name_size, SQLITE_STATIC)
    rc = sqlite3_step(select)
    exists = rc == SQLITE_ROW
    if exists:
        sid = sqlite3_column_int64(select, 0)
        head = sqlite3_column_int64(select, 1)
    sqlite3_reset(select)
    if rc != SQLITE_ROW and rc != SQLITE_DONE:
        return rc
    r.head = head
    if r.expected >= 0 and r.expected != head:
        return APPEND_CONFLICT
    new_head = head + r.count
    if new_head > MAX_SEQ:
        return APPEND_TOO_LONG
    if exists:
        sqlite3_bind_int64(st[ST_UPDATE_SESSION], 1, new_head)
        sqlite3_bind_double(st[ST_UPDATE_SESSION], 2, r.ts)
        sqlite3_bind_int64(st[ST_UPDATE_SESSION], 3, sid)
        rc = sqlite3_step(st[ST_UPDATE_SESSION])
        sqlite3_reset(st[ST_UPDATE_SESSION])
    else:
        # EngineBase.create_session in C: the next number, refused before
        # writing when none is left; created (revision 0) and appended to (1).
        rc = sqlite3_step(st[ST_NEXT_SID])
        sid = sqlite3_column_int64(st[ST_NEXT_SID], 0) if rc == SQLITE_ROW else 1
        sqlite3_reset(st[ST_NEXT_SID])
        if rc != SQLITE_ROW:
            return rc
        if sid > MAX_SID:
            return APPEND_TOO_MANY_SESSIONS
        sqlite3_bind_int64(st[ST_INSERT_SESSION], 1, sid)
        sqlite3_bind_text(st[ST_INSERT_SESSION], 2, r.tenant, r.tenant_size, SQLITE_STATIC)
        sqlite3_bind_text(st[ST_INSERT_SESSION], 3, r.name, r.name_size, SQLITE_STATIC)
        sqlite3_bind_int64(st[ST_INSERT_SESSION], 4, new_head)
        sqlite3_bind_double(st[ST_INSERT_SESSION], 5, r.ts)
        sqlite3_bind_double(st[ST_INSERT_SESSION], 6, r.ts)
        sqlite3_bind_int64(st[ST_INSERT_SESSION], 7, 1)
        sqlite3_bind_null(st[ST_INSERT_SESSION], 8)
        rc = sqlite3_step(st[ST_INSERT_SESSION])
        sqlite3_reset(st[ST_INSERT_SESSION])
    if rc != SQLITE_DONE:
        return rc
    base = (sid << S_SEQ_BITS) + head
    sqlite3_bind_double(insert, 2, r.ts)
    for i in range(r.count):
        sqlite3_bind_int64(insert, 1, base + i + 1)
        sqlite3_bind_text(insert, 3, r.kinds[i], r.kind_sizes[i], SQLITE_STATIC)
        sqlite3_bind_blob(insert, 4, r.payloads[i], r.payload_sizes[i], SQLITE_STATIC)
        rc = sqlite3_step(insert)
        sqlite3_reset(insert)
        if rc != SQLITE_DONE:
            return rc
    r.head = new_head
    return SQLITE_OK


cdef int _commit_group(sqlite3 *db, sqlite3_stmt **st, Request **group, Py_ssize_t size,
                       char *errbuf) noexcept nogil:
    """Apply every request of ``group`` in one BEGIN IMMEDIATE transaction.

    Returns SQLITE_OK, or the SQLite error that rolled the whole group back
    (then every request that had not already been refused fails with it)."""
    cdef int rc
    cdef Py_ssize_t i
    rc = sqlite3_step(st[ST_BEGIN])
    sqlite3_reset(st[ST_BEGIN])
    if rc == SQLITE_DONE:
        for i in range(size):
            rc = _apply(db, st, group[i])
            group[i].status = rc
            if rc == SQLITE_OK or rc < 0:
                rc = SQLITE_OK  # refused alone, or applied: the group goes on
                continue
            break
        if rc == SQLITE_OK:
            rc = sqlite3_step(st[ST_COMMIT])
            sqlite3_reset(st[ST_COMMIT])
            if rc == SQLITE_DONE:
                return SQLITE_OK
    strncpy(errbuf, sqlite3_errmsg(db), 255)
    errbuf[255] = 0
    if not sqlite3_get_autocommit(db):
        sqlite3_step(st[ST_ROLLBACK])
        sqlite3_reset(st[ST_ROLLBACK])
    for i in range(size):
        if group[i].status >= 0:  # not already refused on its own
            group[i].status = rc
    return rc


# -- scanning: a page is stepped without the GIL into flat buffers, then built ------

cdef tuple _KIND_OBJECTS = tuple(sorted(EVENT_TYPES))
cdef tuple _KIND_BYTES = tuple(kind.encode() for kind in _KIND_OBJECTS)
cdef enum:
    N_KINDS = 9
cdef const char *_KIND_TEXT[N_KINDS]
cdef int _KIND_SIZE[N_KINDS]
assert len(_KIND_BYTES) == N_KINDS
for _i, _known in enumerate(_KIND_BYTES):
    _KIND_TEXT[_i] = PyBytes_AS_STRING(_known)  # kept alive by _KIND_BYTES
    _KIND_SIZE[_i] = <int>PyBytes_GET_SIZE(_known)


cdef struct Page:
    char *payloads  # "[" p1 "," p2 ... : one JSON array once closed with "]"
    size_t size
    size_t capacity
    int64_t *seqs
    double *stamps
    int *kinds  # index into the canonical kinds, or -1 - offset into `others`
    Py_ssize_t count
    Py_ssize_t allocated
    char *others  # [int size][bytes] for any kind outside the canonical nine
    size_t others_size
    size_t others_capacity


cdef int _grow(char **buffer, size_t *capacity, size_t needed) noexcept nogil:
    cdef size_t wanted
    if needed <= capacity[0]:
        return 0
    wanted = needed * 2 if needed > 65536 else 131072
    if _resize(<void **>buffer, wanted) < 0:
        return -1
    capacity[0] = wanted
    return 0


cdef int _resize(void **buffer, size_t size) noexcept nogil:
    """realloc that keeps ``buffer`` (still owned by the caller) when it fails."""
    cdef void *grown = realloc(buffer[0], size)
    if grown == NULL:
        return -1
    buffer[0] = grown
    return 0


cdef int _step_page(sqlite3_stmt *st, Page *page) noexcept nogil:
    """Step every row of the page into ``page``; SQLITE_DONE or an error code."""
    cdef int rc, k, kind_size, blob_size
    cdef const char *kind_text
    cdef const void *blob
    cdef Py_ssize_t wanted
    while True:
        rc = sqlite3_step(st)
        if rc == SQLITE_DONE:
            return rc
        if rc != SQLITE_ROW:
            return rc
        if page.count == page.allocated:
            wanted = page.allocated * 2 if page.allocated else 256
            if (_resize(<void **>&page.seqs, wanted * sizeof(int64_t)) < 0
                    or _resize(<void **>&page.stamps, wanted * sizeof(double)) < 0
                    or _resize(<void **>&page.kinds, wanted * sizeof(int)) < 0):
                return SQLITE_NOMEM
            page.allocated = wanted
        page.seqs[page.count] = sqlite3_column_int64(st, 0)
        page.stamps[page.count] = sqlite3_column_double(st, 1)
        kind_text = <const char *>sqlite3_column_text(st, 2)
        kind_size = sqlite3_column_bytes(st, 2)
        page.kinds[page.count] = -1
        for k in range(N_KINDS):
            if _KIND_SIZE[k] == kind_size and memcmp(_KIND_TEXT[k], kind_text, kind_size) == 0:
                page.kinds[page.count] = k
                break
        if page.kinds[page.count] < 0:
            if _grow(&page.others, &page.others_capacity,
                     page.others_size + sizeof(int) + kind_size) < 0:
                return SQLITE_NOMEM
            page.kinds[page.count] = -1 - <int>page.others_size
            memcpy(page.others + page.others_size, &kind_size, sizeof(int))
            memcpy(page.others + page.others_size + sizeof(int), kind_text, kind_size)
            page.others_size += sizeof(int) + kind_size
        blob = sqlite3_column_blob(st, 3)
        blob_size = sqlite3_column_bytes(st, 3)
        if _grow(&page.payloads, &page.capacity, page.size + <size_t>blob_size + 2) < 0:
            return SQLITE_NOMEM
        if page.count:
            page.payloads[page.size] = b","
            page.size += 1
        memcpy(page.payloads + page.size, blob, blob_size)
        page.size += blob_size
        page.count += 1


cdef list _scan_page(CConnection conn, str tenant, str name, int64_t since_seq, int64_t limit):
    cdef sqlite3_stmt *st = conn.statement(ST_SCAN)
    cdef Py_ssize_t tenant_size, name_size, i
    cdef const char *tenant_text = PyUnicode_AsUTF8AndSize(tenant, &tenant_size)
    cdef const char *name_text = PyUnicode_AsUTF8AndSize(name, &name_size)
    cdef Page page
    cdef int rc, k, other_size
    cdef list result = []
    memset(&page, 0, sizeof(Page))
    page.size = 1  # room for the opening bracket
    sqlite3_bind_text(st, 1, tenant_text, <int>tenant_size, SQLITE_STATIC)
    sqlite3_bind_text(st, 2, name_text, <int>name_size, SQLITE_STATIC)
    sqlite3_bind_int64(st, 3, since_seq)
    sqlite3_bind_int64(st, 4, limit)
    try:
        with nogil:
            rc = _step_page(st, &page)
            sqlite3_reset(st)  # ends the read transaction before any Python work
        if rc == SQLITE_NOMEM:
            raise MemoryError()
        if rc != SQLITE_DONE:
            raise _error(rc, sqlite3_errmsg(conn.db), "read")
        if page.count == 0:
            return result
        page.payloads[0] = b"["
        page.payloads[page.size] = b"]"
        page.size += 1
        # One decode call for the page, straight from the buffer, no copy.
        view = PyMemoryView_FromMemory(page.payloads, page.size, PyBUF_READ)
        try:
            events = decode_json(view)
        finally:
            view.release()
        if len(events) != page.count:
            raise CorruptDatabaseError("stored event payloads do not decode one to one")
        stored_type = StoredEvent
        seqs, stamps = page.seqs, page.stamps
        previous_seq = PyLong_FromLongLong(seqs[0] - 1)
        previous_ts = None
        for i in range(page.count):
            seq = PyLong_FromLongLong(seqs[i])
            if i and seqs[i - 1] != seqs[i] - 1:
                previous_seq = PyLong_FromLongLong(seqs[i] - 1)
            if previous_ts is None or stamps[i] != stamps[i - 1]:
                previous_ts = PyFloat_FromDouble(stamps[i])
            k = page.kinds[i]
            if k >= 0:
                kind = _KIND_OBJECTS[k]
            else:
                memcpy(&other_size, page.others + (-1 - k), sizeof(int))
                kind = PyUnicode_DecodeUTF8(page.others + (-1 - k) + sizeof(int), other_size, NULL)
            result.append(agentlog_stored_event(stored_type, seq, previous_seq, previous_ts,
                                                kind, events[i]))
            previous_seq = seq
        return result
    finally:
        free(page.payloads)
        free(page.seqs)
        free(page.stamps)
        free(page.kinds)
        free(page.others)


cdef int64_t _head(CConnection conn, str tenant, str name) except -1:
    cdef sqlite3_stmt *st = conn.statement(ST_HEAD)
    cdef Py_ssize_t tenant_size, name_size
    cdef const char *tenant_text = PyUnicode_AsUTF8AndSize(tenant, &tenant_size)
    cdef const char *name_text = PyUnicode_AsUTF8AndSize(name, &name_size)
    cdef int rc
    cdef int64_t head = 0
    sqlite3_bind_text(st, 1, tenant_text, <int>tenant_size, SQLITE_STATIC)
    sqlite3_bind_text(st, 2, name_text, <int>name_size, SQLITE_STATIC)
    with nogil:
        rc = sqlite3_step(st)
        if rc == SQLITE_ROW:
            head = sqlite3_column_int64(st, 0)
        sqlite3_reset(st)
    if rc != SQLITE_ROW and rc != SQLITE_DONE:
        raise _error(rc, sqlite3_errmsg(conn.db), "head")
    return head


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


class CEngine(EngineBase):
    """The engine interface on the SQLite C API (see the module docstring)."""

    name = "c"
    sqlite_info = staticmethod(_sqlite_info)

    def __init__(self, path, **options):
        self.commits = 0  # write transactions that appends used, for tests and tuning
        self._pending = []  # queued appends, oldest first
        self._pending_lock = threading.Lock()
        self._committed = threading.Condition(self._pending_lock)
        self._leading = False  # whether some caller is writing (or about to)
        self._waiting = 0  # callers asleep on _committed
        super().__init__(path, **options)

    def _connect(self, query_only):
        conn = CConnection()
        conn.open(self.path, not self.read_only, query_only, self._busy_timeout_ms)
        return conn

    def _append_batch(self, str tenant, str name, expected_head, double ts, list batch):
        """Append a non-empty batch atomically; return the new head.

        Group commit: the caller queues its append. When no one is writing it
        leads: it takes the write lock and writes every queued append in one
        transaction. Appends that arrive meanwhile wait for that commit; then
        one of those still queued leads the next group. A caller returns only
        after the commit that holds its events; a conflict refuses that
        append alone.
        """
        cdef int64_t expected = -1 if expected_head is None else expected_head
        cdef _Append mine = _Append()
        if self.read_only:
            raise StorageUnavailableError(f"append: {self.path!r} is open read-only")
        mine.prepare(tenant, name, expected, ts, batch)
        with self._pending_lock:
            self._pending.append(mine)
            if self._leading:
                # Wait for the leader's commit. Followers sleep on a condition,
                # not on the write lock, so one commit wakes them all; the
                # uncontended path never touches the (pure-Python) condition.
                self._waiting += 1
                while not mine.done and self._leading:
                    self._committed.wait()
                self._waiting -= 1
            lead = not mine.done
            if lead:
                self._leading = True
        if lead:
            try:
                with self._write_lock:
                    self._commit_pending()
            finally:
                with self._pending_lock:
                    self._leading = False
                    if self._waiting:
                        self._committed.notify_all()
        status = mine.request.status
        if status == SQLITE_OK:
            return mine.request.head
        if status == APPEND_CONFLICT:
            raise CheckpointConflictError(name, expected, mine.request.head)
        if status == APPEND_TOO_LONG:
            raise ValueError(f"session {name!r} would exceed {MAX_SEQ} events")
        if status == APPEND_TOO_MANY_SESSIONS:
            raise StorageUnavailableError("the database holds too many sessions")
        if status == _CLOSED:
            raise CheckpointerClosedError("the database is closed")
        raise _error(status, mine.error.encode(), "append")

    def _commit_pending(self):
        """Under the write lock: write every queued append in one transaction."""
        cdef char errbuf[256]
        cdef sqlite3_stmt *statements[N_STATEMENTS]
        cdef Request **group
        cdef Py_ssize_t size, i
        cdef CConnection conn
        cdef _Append item
        errbuf[0] = 0
        with self._pending_lock:
            pending, self._pending = self._pending, []
        size = len(pending)
        if self._closed:
            for item in pending:
                item.request.status = _CLOSED
                item.done = True
            return
        conn = <CConnection>self._writer
        self.commits += 1
        group = <Request **>PyMem_RawMalloc(size * sizeof(Request *))
        try:
            if group == NULL:
                raise MemoryError()
            for i in range(ST_SCAN):
                statements[i] = conn.statement(i)
            for i in range(size):
                item = <_Append>pending[i]
                item.request.status = SQLITE_OK
                group[i] = &item.request
            with nogil:
                _commit_group(conn.db, statements, group, size, errbuf)
            message = errbuf.decode("utf-8", "replace")
            for item in pending:
                if item.request.status > 0:
                    item.error = message
        except BaseException as exc:
            for item in pending:
                item.request.status = SQLITE_ERROR
                item.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            PyMem_RawFree(group)
            for item in pending:
                item.done = True

    def scan(self, str tenant, str name, int64_t since_seq, int64_t limit):
        """One page of events after ``since_seq``, at most ``limit`` of them."""
        if self._memory:
            with self._write_lock:
                self._check_open()
                return _scan_page(<CConnection>self._writer, tenant, name, since_seq, limit)
        conn = self._borrow_reader()
        try:
            return _scan_page(<CConnection>conn, tenant, name, since_seq, limit)
        finally:
            self._return_reader(conn)

    def head(self, str tenant, str name):
        """The session's head; 0 when it is empty or unknown."""
        if self._memory:
            with self._write_lock:
                self._check_open()
                return _head(<CConnection>self._writer, tenant, name)
        conn = self._borrow_reader()
        try:
            return _head(<CConnection>conn, tenant, name)
        finally:
            self._return_reader(conn)
