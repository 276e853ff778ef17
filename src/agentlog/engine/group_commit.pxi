# Part of agentlog.engine.cengine, textually included by cengine.pyx: one extension
# module, which with the embedded SQLite is one C translation unit. The names it
# uses come from cengine.pyx's imports and the parts included before it.
#
# Group commit: appends queued by many threads, written in one transaction. Each
# append is a Request, C views of its batch kept alive by its _Append;
# CEngine._append_batch queues them, and the caller that leads writes every
# queued one with _commit_group in one BEGIN IMMEDIATE, without the GIL.

# append() outcomes beyond SQLite's own codes (negative: refused on its own)
cdef enum:
    APPEND_CONFLICT = -1
    APPEND_TOO_LONG = -2
    APPEND_TOO_MANY_SESSIONS = -3
    _CLOSED = -4
    GROUP_WOULD_WAIT = -5  # without waiting, the write lock was held: nothing begun

cdef enum:
    S_SEQ_BITS = 32  # schema.SEQ_BITS, asserted at import in cengine.pyx

cdef int64_t MAX_SEQ = S.MAX_SEQ
cdef int64_t MAX_SID = S.MAX_SID


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
    cdef object wake  # the lock its caller sleeps on while it waits (None: it never waited)
    cdef bint woken  # ``wake`` released and not yet taken up: never released twice
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
        r.kinds = <const char **>agentlog_raw_malloc(count * sizeof(char *))
        r.payloads = <const char **>agentlog_raw_malloc(count * sizeof(char *))
        r.kind_sizes = <int *>agentlog_raw_malloc(count * sizeof(int))
        r.payload_sizes = <int *>agentlog_raw_malloc(count * sizeof(int))
        if r.kinds == NULL or r.payloads == NULL or r.kind_sizes == NULL or r.payload_sizes == NULL:
            raise MemoryError("append: out of memory")
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
        sqlite3_bind_int64(insert, 5, agentlog_crc32(0, r.payloads[i], r.payload_sizes[i]))
        rc = sqlite3_step(insert)
        sqlite3_reset(insert)
        if rc != SQLITE_DONE:
            return rc
    r.head = new_head
    return SQLITE_OK


cdef int _commit_group(sqlite3 *db, sqlite3_stmt **st, Request **group, Py_ssize_t size,
                       char *errbuf, bint wait, BusyWait *busy) noexcept nogil:
    """Apply every request of ``group`` in one BEGIN IMMEDIATE transaction.

    Returns SQLITE_OK, or the SQLite error that rolled the whole group back
    (then every request that had not already been refused fails with it).
    Without ``wait``, GROUP_WOULD_WAIT when another connection holds the
    write lock: then nothing was begun and no request was touched."""
    cdef int rc
    cdef Py_ssize_t i
    if not sqlite3_get_autocommit(db):
        # A failed write whose rollback failed too (out of memory, an I/O
        # error) left its transaction open: roll it back before beginning.
        sqlite3_step(st[ST_ROLLBACK])
        sqlite3_reset(st[ST_ROLLBACK])
    rc = _begin(db, st[ST_BEGIN], wait, busy)
    if not wait and _is_busy(rc):
        return GROUP_WOULD_WAIT
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
