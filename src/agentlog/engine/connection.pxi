# Part of agentlog.engine.cengine, textually included by cengine.pyx: one extension
# module, which with the embedded SQLite is one C translation unit. The names it
# uses come from cengine.pyx's imports and the parts included before it.
#
# A connection: one sqlite3* handle, its hot statements prepared once (indexed by
# the ST_* numbers the group commit and the scan use) and the cold paths'
# statements cached by their SQL text.

cdef enum:
    ST_BEGIN = 0
    ST_COMMIT
    ST_ROLLBACK
    ST_SELECT_SESSION
    ST_INSERT_SESSION
    ST_UPDATE_SESSION
    ST_INSERT_EVENT
    ST_NEXT_SID
    ST_SELECT_APPEND_KEY
    ST_INSERT_APPEND_KEY
    ST_SCAN  # the writer's statements are those before this one
    ST_HEAD
    N_STATEMENTS

# The table is engine/sql.py's, in the order of its Hot enum, which this enum mirrors.
cdef list _SQL = [statement.encode() for statement in Q.HOT_STATEMENTS]
assert len(_SQL) == N_STATEMENTS, "engine/sql.py's hot statements and ST_* differ"


def statement_numbers():
    """The ``ST_*`` number of each hot statement, by its name in ``engine.sql.Hot``
    (for the test that the two agree)."""
    return {
        "BEGIN_WRITE": ST_BEGIN,
        "COMMIT": ST_COMMIT,
        "ROLLBACK": ST_ROLLBACK,
        "SELECT_SESSION": ST_SELECT_SESSION,
        "INSERT_SESSION": ST_INSERT_SESSION,
        "UPDATE_SESSION": ST_UPDATE_SESSION,
        "INSERT_EVENT": ST_INSERT_EVENT,
        "NEXT_SID": ST_NEXT_SID,
        "SELECT_APPEND_KEY": ST_SELECT_APPEND_KEY,
        "INSERT_APPEND_KEY": ST_INSERT_APPEND_KEY,
        "SCAN_EVENTS": ST_SCAN,
        "SELECT_HEAD": ST_HEAD,
    }


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


cdef inline bint _is_busy(int rc) noexcept nogil:
    return (rc & 0xFF) == SQLITE_BUSY or (rc & 0xFF) == SQLITE_LOCKED


cdef struct BusyWait:
    int timeout_ms  # how long a statement may wait for a lock in all
    double start  # when the current wait began (monotonic seconds)
    unsigned int seed  # the jitter's state


cdef inline double _monotonic() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec + now.tv_nsec * 1e-9


cdef int _busy_wait(void *arg, int count) noexcept nogil:
    """The busy handler: wait for a lock in short, jittered sleeps.

    SQLite's own (``sqlite3_busy_timeout``) sleeps 1, 2, 5, 10 … up to 100 ms
    at a time, so under contention a waiter can sleep long after the lock is
    free and the latency tail sits at those steps. Here a sleep grows from
    ~50 µs by 50 µs per retry to at most ~1 ms, with up to half of it random so
    that waiters do not retry in step; the total is bounded by the timeout.
    """
    cdef BusyWait *busy = <BusyWait *>arg
    cdef double now = _monotonic(), left
    cdef unsigned int step
    if count == 0:
        busy.start = now
    left = busy.timeout_ms * 1e-3 - (now - busy.start)
    if left <= 0:
        return 0
    step = 50 * (1 + (count if count < 19 else 19))  # µs
    busy.seed = busy.seed * 1103515245 + 12345
    step = step // 2 + (busy.seed >> 16) % (step // 2 + 1)
    if step * 1e-6 > left:
        step = <unsigned int>(left * 1e6) + 1
    usleep(step)
    return 1


cdef inline void _wait_for_locks(sqlite3 *db, BusyWait *busy, bint wait) noexcept nogil:
    """Install the busy handler (or, without ``wait``, none: a lock held is SQLITE_BUSY now)."""
    if wait and busy.timeout_ms > 0:
        sqlite3_busy_handler(db, _busy_wait, busy)
    else:
        sqlite3_busy_handler(db, NULL, NULL)


cdef int _begin(sqlite3 *db, sqlite3_stmt *begin, bint wait, BusyWait *busy) noexcept nogil:
    """Step ``begin`` (BEGIN IMMEDIATE); without ``wait``, not waiting for the lock."""
    cdef int rc
    if not wait:
        _wait_for_locks(db, busy, False)
    rc = sqlite3_step(begin)
    sqlite3_reset(begin)
    if not wait:
        _wait_for_locks(db, busy, True)
    return rc


cdef class _Statement:
    """A prepared statement owned by a connection's cache (finalized by it)."""

    cdef sqlite3_stmt *st


cdef class CConnection:
    """One ``sqlite3*`` handle with its hot statements prepared once."""

    cdef sqlite3 *db
    cdef sqlite3_stmt *statements[N_STATEMENTS]
    cdef dict cache  # sql -> _Statement, for the cold paths' statements
    cdef BusyWait busy

    def __cinit__(self):
        cdef int i
        self.db = NULL
        self.cache = {}
        for i in range(N_STATEMENTS):
            self.statements[i] = NULL

    cdef int open(self, str path, bint create, bint query_only, int busy_timeout_ms,
                  str uri=None, tuple setup=()) except -1:
        """Open ``path``; run ``setup`` (a read-only open's shims) before ``query_only``."""
        cdef bytes encoded = (path if uri is None else uri).encode("utf-8")
        cdef const char *filename = encoded
        cdef int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        cdef int rc
        flags |= (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) if create else SQLITE_OPEN_READONLY
        if uri is not None:
            flags |= SQLITE_OPEN_URI
        with nogil:
            rc = sqlite3_open_v2(filename, &self.db, flags, NULL)
        if rc != SQLITE_OK:
            error = _error(rc, sqlite3_errmsg(self.db) if self.db != NULL else sqlite3_errstr(rc),
                           f"cannot open {path!r}")
            self.close()
            raise error
        self.busy.timeout_ms = busy_timeout_ms
        self.busy.seed = <unsigned int>(<size_t>self.db >> 4) ^ <unsigned int>(_monotonic() * 1e6)
        _wait_for_locks(self.db, &self.busy, True)
        for statement in setup:
            self.rows(statement, ())
        if query_only:
            self.rows(Q.QUERY_ONLY, ())
        return 0

    cdef sqlite3_stmt *statement(self, int index) except NULL:
        cdef sqlite3_stmt *st = self.statements[index]
        cdef bytes sql
        cdef int rc
        if st == NULL:
            if self.db == NULL:
                raise CheckpointerClosedError(CLOSED)
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
            raise CheckpointerClosedError(CLOSED)
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
                # A text or blob is copied (SQLITE_TRANSIENT): out of memory,
                # the parameter would stay NULL and the statement run with it.
                rc = _bind(st, i, value)
                if rc != SQLITE_OK:
                    raise _error(rc, sqlite3_errmsg(self.db), sql.split(" ", 2)[0])
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

    def begin_write(self, bint wait):
        """``BEGIN IMMEDIATE``; without ``wait``, False instead of waiting for the lock."""
        cdef int rc
        cdef sqlite3_stmt *st = self.statement(ST_BEGIN)
        with nogil:
            rc = _begin(self.db, st, wait, &self.busy)
        if rc == SQLITE_DONE:
            return True
        if not wait and _is_busy(rc):
            return False
        raise _error(rc, sqlite3_errmsg(self.db), "BEGIN")

    def checkpoint_truncate(self, int wait_ms):
        """Checkpoint and truncate the WAL, waiting at most ``wait_ms`` for readers
        and writers to get out of the way; True if done."""
        cdef BusyWait brief = self.busy
        if self.db == NULL:
            raise CheckpointerClosedError(CLOSED)
        brief.timeout_ms = wait_ms
        _wait_for_locks(self.db, &brief, True)
        try:
            return self.rows(Q.WAL_CHECKPOINT_TRUNCATE)[0][0] == 0
        finally:
            self.busy.seed = brief.seed
            _wait_for_locks(self.db, &self.busy, True)

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
