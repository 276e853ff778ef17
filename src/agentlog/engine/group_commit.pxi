# Part of agentlog.engine.cengine, textually included by cengine.pyx: one extension
# module, which with the embedded SQLite is one C translation unit. The names it
# uses come from cengine.pyx's imports and the parts included before it.
#
# Group commit: appends queued by many threads, written in one transaction. Each
# append is a Request, C views of its batch kept alive by its _Append. A caller
# that finds no other thread appending and the write lock free writes its own
# append at once. Otherwise it queues it for the file's writer thread
# (_GroupWriter): a C thread, without a Python thread state, that takes every
# queued request, writes them with _commit_group in one BEGIN IMMEDIATE under
# the engine's write lock, and wakes each caller, never needing the GIL;
# callers sleep on a lock of their own meanwhile. An event loop's appends are
# queued the same way (CEngine.queue_append), each with a finished flag instead
# of a lock, and each loop's are announced by one byte on its completion pipe
# (_Completions) per group, so the loop wakes once per group and the writer
# thread still never needs the GIL.

# append() outcomes beyond SQLite's own codes (negative: refused on its own)
cdef enum:
    APPEND_CONFLICT = -1
    APPEND_TOO_LONG = -2
    APPEND_TOO_MANY_SESSIONS = -3
    _CLOSED = -4
    GROUP_WOULD_WAIT = -5  # without waiting, the write lock was held: nothing begun
    APPEND_REPLAYED = -6  # its key was stored with the same digest: nothing written, head = its head
    APPEND_KEY_MISMATCH = -7  # its key was stored with another digest: nothing written

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
    const char *key  # the append key's name (NULL: an unkeyed append)
    int key_size
    const char *digest  # the key's digest of the batch (AppendKey.digest)
    int digest_size
    int status  # SQLITE_OK, an APPEND_* outcome, or the SQLite error that failed the group
    int64_t head  # the new head, or the actual head on a conflict
    # Queued for the writer thread (under its lock):
    Request *next
    bint taken  # in a group being written: no longer the caller's to take back
    PyThread_type_lock wake  # released by the writer thread once written (or refused)
    int wake_fd  # without a wake lock: the completion pipe poked once it is finished
    int finished  # set (atomically) once written or refused, for an event loop's append
    char error[256]  # the message of the SQLite error that failed its group
    # Set by the writer thread for the group it wrote this in (telemetry's):
    Py_ssize_t group_size  # 0 until then
    Py_ssize_t group_index
    int64_t commit_start  # ns since the epoch, around _commit_group
    int64_t commit_end


cdef class _Append:
    """One caller's append: C views of its batch, kept alive by the references here."""

    cdef Request request
    cdef object tenant, name, batch, key
    cdef bint done  # written (or refused); its status says which
    cdef str error

    def __cinit__(self):
        self.request.kinds = NULL
        self.request.kind_sizes = NULL
        self.request.payloads = NULL
        self.request.payload_sizes = NULL
        self.request.key = NULL
        self.request.key_size = 0
        self.request.digest = NULL
        self.request.digest_size = 0
        self.request.next = NULL
        self.request.taken = False
        self.request.wake = NULL
        self.request.wake_fd = -1
        self.request.finished = 0
        self.request.error[0] = 0
        self.request.group_size = 0

    @property
    def commit_group(self):
        """``(size, index in it, commit start, commit end)`` (ns since the epoch)
        of the group the writer thread wrote this append in; None otherwise."""
        cdef Request *r = &self.request
        if r.group_size == 0:
            return None
        return r.group_size, r.group_index, r.commit_start, r.commit_end

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

    cdef int prepare_key(self, object key) except -1:
        """Make it a keyed append under ``key`` (an ``AppendKey``: name, digest)."""
        cdef Py_ssize_t size
        cdef bytes digest = key.digest
        self.key = key  # keeps the name and the digest alive while C points at them
        self.request.key = PyUnicode_AsUTF8AndSize(key.name, &size)
        self.request.key_size = <int>size
        self.request.digest = PyBytes_AS_STRING(digest)
        self.request.digest_size = <int>PyBytes_GET_SIZE(digest)
        return 0

    def __dealloc__(self):
        if self.request.wake != NULL:
            PyThread_free_lock(self.request.wake)
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
    if exists and r.key != NULL:
        # A keyed append: its key stored before (by an earlier group, or one
        # earlier in this one) is a repeat, whatever its expected head.
        rc = _stored_key(db, st[ST_SELECT_APPEND_KEY], sid, r)
        if rc != SQLITE_DONE:
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
    if r.key != NULL:
        # The key's row, in the transaction of its events (log_ops.append_keyed's row).
        sqlite3_bind_int64(st[ST_INSERT_APPEND_KEY], 1, sid)
        sqlite3_bind_text(st[ST_INSERT_APPEND_KEY], 2, r.key, r.key_size, SQLITE_STATIC)
        sqlite3_bind_blob(st[ST_INSERT_APPEND_KEY], 3, r.digest, r.digest_size, SQLITE_STATIC)
        sqlite3_bind_int64(st[ST_INSERT_APPEND_KEY], 4, new_head)
        rc = sqlite3_step(st[ST_INSERT_APPEND_KEY])
        sqlite3_reset(st[ST_INSERT_APPEND_KEY])
        if rc != SQLITE_DONE:
            return rc
    r.head = new_head
    return SQLITE_OK


cdef int _stored_key(sqlite3 *db, sqlite3_stmt *select, int64_t sid, Request *r) noexcept nogil:
    """Look ``r``'s key up in session ``sid``: SQLITE_DONE when it is not
    stored; else APPEND_REPLAYED (the same digest: ``r.head`` is the head
    its append returned) or APPEND_KEY_MISMATCH; or SQLite's error."""
    cdef int rc, size
    cdef const void *stored
    sqlite3_bind_int64(select, 1, sid)
    sqlite3_bind_text(select, 2, r.key, r.key_size, SQLITE_STATIC)
    rc = sqlite3_step(select)
    if rc == SQLITE_ROW:
        stored = sqlite3_column_blob(select, 0)
        size = sqlite3_column_bytes(select, 0)
        if stored == NULL and sqlite3_errcode(db) == SQLITE_NOMEM:
            rc = SQLITE_NOMEM  # the digest could not be read into memory
        elif size == r.digest_size and (size == 0 or memcmp(stored, r.digest, size) == 0):
            r.head = sqlite3_column_int64(select, 1)
            rc = APPEND_REPLAYED
        else:
            rc = APPEND_KEY_MISMATCH
    sqlite3_reset(select)
    return rc


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


# -- the write lock and the writer thread ------------------------------------------


cdef class _WriteLock:
    """The engine's write lock, ``threading.Lock``'s face on a lock that the
    writer thread takes and gives back without the GIL."""

    cdef PyThread_type_lock lock

    def __cinit__(self):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError("cannot allocate a lock")

    def __dealloc__(self):
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    def acquire(self, bint blocking=True, double timeout=-1):
        """Take the lock; as ``threading.Lock.acquire`` (a signal's handler may raise)."""
        cdef PyLockStatus status
        cdef long long microseconds = -1 if timeout < 0 else <long long>(timeout * 1e6)
        if PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            return True
        if not blocking:
            return False
        while True:
            with nogil:
                status = PyThread_acquire_lock_timed(self.lock, microseconds, 1)
            if status == PY_LOCK_ACQUIRED:
                return True
            if status == PY_LOCK_FAILURE:
                return False
            PyErr_CheckSignals()  # interrupted: the handler may raise (Ctrl-C)

    def release(self):
        if PyThread_acquire_lock(self.lock, NOWAIT_LOCK):  # it was not held
            PyThread_release_lock(self.lock)
            raise RuntimeError("release unlocked lock")
        PyThread_release_lock(self.lock)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


cdef struct WriterState:
    pthread_mutex_t lock  # guards the queue and the flags
    pthread_cond_t work  # signalled when a request is queued, or on stopping
    Request *first
    Request *last
    bint started
    bint stopping
    bint joined
    PyThread_type_lock exited  # held from the start; released by the thread as it ends
    pthread_t thread
    long owner  # the process that started the thread (a fork child has none)
    sqlite3 *db  # the writer connection's, with its hot statements
    sqlite3_stmt *statements[N_STATEMENTS]
    BusyWait *busy
    PyThread_type_lock write_lock  # the engine's: every other write takes it too
    Request **group
    Py_ssize_t capacity
    uint64_t commits
    Py_ssize_t callers  # threads inside CEngine._append_batch (changed under the GIL)
    char errbuf[256]


cdef inline bint _in_fork_child(WriterState *w) noexcept:
    """Whether this process is a fork child of the one that started the
    thread: then the thread and its locks are the parent's, left alone."""
    return w.started and w.owner != getpid()


cdef inline int64_t _epoch_ns() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_REALTIME, &now)
    return <int64_t>now.tv_sec * 1000000000 + now.tv_nsec


cdef void _write_group(WriterState *w, Request *taken) noexcept nogil:
    """On the writer thread: write the requests from ``taken`` on in one
    transaction, then wake each caller (who may free its request at once)."""
    cdef Request *r = taken
    cdef Request *following
    cdef Request **grown
    cdef Py_ssize_t size = 0, i, pokes = 0
    cdef int rc, fd
    cdef int poked[16]
    cdef int64_t started, ended
    while r != NULL:
        size += 1
        r = r.next
    if size > w.capacity:
        grown = <Request **>realloc(w.group, size * sizeof(Request *))
        if grown != NULL:
            w.group, w.capacity = grown, size
    if size > w.capacity:
        r = taken
        while r != NULL:
            r.status = SQLITE_NOMEM
            r = r.next
    else:
        r = taken
        for i in range(size):
            r.status = SQLITE_OK
            w.group[i] = r
            r = r.next
        w.errbuf[0] = 0
        PyThread_acquire_lock(w.write_lock, WAIT_LOCK)
        started = _epoch_ns()
        rc = _commit_group(w.db, w.statements, w.group, size, w.errbuf, True, w.busy)
        ended = _epoch_ns()
        w.commits += 1
        PyThread_release_lock(w.write_lock)
        for i in range(size):
            w.group[i].group_size, w.group[i].group_index = size, i
            w.group[i].commit_start, w.group[i].commit_end = started, ended
        if rc != SQLITE_OK:
            for i in range(size):
                if w.group[i].status > 0:
                    strncpy(w.group[i].error, w.errbuf, 255)
                    w.group[i].error[255] = 0
    # Wake each caller: a thread by its lock; an event loop's append by its
    # flag, and its loop once per group by a byte on the loop's pipe. Under the
    # queue's lock, so that no pipe is closed between the two (see
    # _Completions.close).
    pthread_mutex_lock(&w.lock)
    r = taken
    while r != NULL:
        following = r.next
        if r.wake != NULL:
            PyThread_release_lock(r.wake)
        else:
            fd = r.wake_fd
            agentlog_set_finished(&r.finished)
            for i in range(pokes):
                if poked[i] == fd:
                    break
            else:
                if pokes < 16:
                    poked[pokes] = fd
                    pokes += 1
                else:
                    agentlog_poke(fd)
        r = following
    for i in range(pokes):
        agentlog_poke(poked[i])
    pthread_mutex_unlock(&w.lock)


cdef void *_writer_main(void *arg) noexcept nogil:
    """The writer thread: each time requests are queued, write them all as one group."""
    cdef WriterState *w = <WriterState *>arg
    cdef Request *taken
    cdef Request *r
    cdef sigset_t every
    # Signals go to the Python threads, whose handlers run there (Ctrl-C);
    # a fault of this thread's own stays its own (faulthandler reports it).
    sigfillset(&every)
    sigdelset(&every, SIGSEGV)
    sigdelset(&every, SIGBUS)
    sigdelset(&every, SIGFPE)
    sigdelset(&every, SIGILL)
    sigdelset(&every, SIGABRT)
    pthread_sigmask(SIG_BLOCK, &every, NULL)
    pthread_mutex_lock(&w.lock)
    while True:
        while w.first == NULL and not w.stopping:
            pthread_cond_wait(&w.work, &w.lock)
        if w.first == NULL:
            break  # stopping, and nothing left queued

        taken, w.first, w.last = w.first, NULL, NULL
        r = taken
        while r != NULL:
            r.taken = True
            r = r.next
        pthread_mutex_unlock(&w.lock)
        _write_group(w, taken)
        pthread_mutex_lock(&w.lock)
    pthread_mutex_unlock(&w.lock)
    PyThread_release_lock(w.exited)
    return NULL


cdef class _GroupWriter:
    """The file's writer thread and its queue (one per engine, started on
    first use, stopped by ``stop()`` or when the engine is collected)."""

    cdef WriterState *w

    def __cinit__(self):
        self.w = <WriterState *>calloc(1, sizeof(WriterState))
        if self.w == NULL:
            raise MemoryError("cannot allocate the writer's state")
        self.w.exited = PyThread_allocate_lock()
        if self.w.exited == NULL:
            free(self.w)
            self.w = NULL
            raise MemoryError("cannot allocate the writer's state")
        pthread_mutex_init(&self.w.lock, NULL)
        pthread_cond_init(&self.w.work, NULL)

    def __dealloc__(self):
        if self.w == NULL:
            return
        if _in_fork_child(self.w):
            return
        self.stop(False)  # what it writes lives in objects the collector is freeing
        pthread_cond_destroy(&self.w.work)
        pthread_mutex_destroy(&self.w.lock)
        PyThread_free_lock(self.w.exited)
        free(self.w.group)
        free(self.w)
        self.w = NULL

    @property
    def commits(self):
        return self.w.commits

    @property
    def started(self):
        """Whether the thread was started (it may have ended since)."""
        return self.w.started

    @property
    def waiting(self):
        """How many queued requests no group has taken yet (for tests)."""
        cdef Py_ssize_t count = 0
        cdef Request *r
        pthread_mutex_lock(&self.w.lock)
        r = self.w.first
        while r != NULL:
            count += 1
            r = r.next
        pthread_mutex_unlock(&self.w.lock)
        return count

    cdef int start(self, CConnection conn, _WriteLock write_lock) except -1:
        """Start the thread on ``conn`` (the writer connection) if not started,
        and not once stopping (then :meth:`queue` refuses the request)."""
        cdef int i, rc
        if self.w.started:
            return 0
        for i in range(ST_SCAN):
            self.w.statements[i] = conn.statement(i)
        self.w.db = conn.db
        self.w.busy = &conn.busy
        self.w.write_lock = write_lock.lock
        # Under the queue's lock: a stop() either sees the thread started (and
        # joins it) or has already marked the writer stopping (none starts).
        pthread_mutex_lock(&self.w.lock)
        if self.w.stopping:
            pthread_mutex_unlock(&self.w.lock)
            return 0
        PyThread_acquire_lock(self.w.exited, WAIT_LOCK)
        rc = pthread_create(&self.w.thread, NULL, _writer_main, self.w)
        if rc == 0:
            self.w.started = True
            self.w.owner = getpid()
        else:
            PyThread_release_lock(self.w.exited)
        pthread_mutex_unlock(&self.w.lock)
        if rc != 0:
            raise StorageUnavailableError("append: cannot start the writer thread")
        return 0

    # The queue's lock is taken with the GIL held: the writer thread holds it
    # only for a few pointer moves and never wants the GIL, and giving the GIL
    # up here would cost every append a hand-off to another thread and back.

    cdef bint queue(self, Request *r) noexcept:
        """Queue ``r`` for the thread; False once it is stopping (then not queued)."""
        cdef bint queued
        pthread_mutex_lock(&self.w.lock)
        queued = not self.w.stopping
        if queued:
            r.next = NULL
            r.taken = False
            if self.w.last == NULL:
                self.w.first = r
            else:
                self.w.last.next = r
            self.w.last = r
            pthread_cond_signal(&self.w.work)
        pthread_mutex_unlock(&self.w.lock)
        return queued

    cdef bint take_back(self, Request *r) noexcept:
        """Unqueue ``r`` if no group has taken it yet; whether it did."""
        cdef Request *previous = NULL
        cdef Request *each
        cdef bint found = False
        pthread_mutex_lock(&self.w.lock)
        each = self.w.first
        while each != NULL and not found:
            if each == r:
                found = True
                if previous == NULL:
                    self.w.first = r.next
                else:
                    previous.next = r.next
                if self.w.last == r:
                    self.w.last = previous
            else:
                previous, each = each, each.next
        pthread_mutex_unlock(&self.w.lock)
        return found

    def stop(self, bint interruptible=True):
        """Stop the thread once what is queued is written (new requests are
        refused) and wait for it to end. If ``interruptible``, a signal's
        handler may interrupt the wait (Ctrl-C), and a later stop() waits
        again; not when the engine is being collected, since the thread still
        uses what the collector would free. Callers serialise it."""
        cdef bint started
        cdef PyLockStatus status
        if _in_fork_child(self.w):
            return
        pthread_mutex_lock(&self.w.lock)
        self.w.stopping = True
        started = self.w.started
        pthread_cond_signal(&self.w.work)
        pthread_mutex_unlock(&self.w.lock)
        if not started or self.w.joined:
            return
        while True:
            with nogil:
                status = PyThread_acquire_lock_timed(self.w.exited, -1, interruptible)
            if status == PY_LOCK_ACQUIRED:
                break
            PyErr_CheckSignals()
        with nogil:
            pthread_join(self.w.thread, NULL)
        self.w.joined = True


cdef class _Completions:
    """One event loop's channel for the appends it queues for the writer thread
    (``CEngine.queue_append``): a pipe the writer thread makes readable once
    per group, and the appends not yet handed back. Made by
    ``CEngine.append_completions``, which keeps it (and so every append queued
    through it) alive until :meth:`close`: the writer thread may still be
    writing an append whose loop has gone. It holds nothing of a loop's."""

    cdef int read_fd, write_fd
    cdef _GroupWriter writer
    cdef object count_commits  # the engine's count of the writer thread's commits
    cdef object registry  # the engine's set of open channels, which holds this one
    cdef dict queued  # the _Append objects not yet released (as keys, in order)
    cdef readonly bint abandoned  # closed while some were unfinished: the engine closes it

    def __cinit__(self, count_commits, set registry, _GroupWriter writer):
        self.read_fd = self.write_fd = -1
        self.count_commits, self.registry = count_commits, registry
        self.writer, self.queued = writer, {}
        self.abandoned = False
        try:
            read_fd, write_fd = os.pipe()
        except OSError as exc:  # out of descriptors
            raise StorageUnavailableError(f"append: cannot make a completion pipe: {exc}") from exc
        self.read_fd, self.write_fd = read_fd, write_fd
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)

    def __dealloc__(self):
        # Only once closed, or once its engine has closed (the writer thread
        # has ended): nothing can poke the pipe any more.
        self._close_pipe()

    cdef void _close_pipe(self) noexcept:
        if self.read_fd >= 0:
            close(self.read_fd)
            close(self.write_fd)
            self.read_fd = self.write_fd = -1

    def fileno(self):
        """The pipe's read end: readable when queued appends have finished."""
        return self.read_fd

    @property
    def pending(self):
        """How many queued appends it has not handed back yet."""
        return len(self.queued)

    def drain(self):
        """Consume the pipe's readiness (and give the WAL its look, counting the
        writer thread's commits): before :meth:`finished`, once per wake-up."""
        cdef char buffer[256]
        if self.read_fd < 0:
            return
        self.count_commits(False)
        with nogil:
            while read(self.read_fd, buffer, sizeof(buffer)) > 0:
                pass

    def finished(self):
        """``(handle, outcome)`` of every queued append written or refused and
        not yet released: its new head, or the exception that refused it (a
        conflict, a bound) or failed its whole group. Each stays until
        :meth:`release`, so an interrupted caller loses none."""
        cdef _Append item
        cdef list done = []
        for item in self.queued:
            if agentlog_is_finished(&item.request.finished):
                done.append((item, _outcome(item)))
        return done

    def release(self, _Append item):
        """Forget a finished append (its outcome handed on)."""
        self.queued.pop(item, None)

    def withdraw(self, _Append item):
        """Take a queued append back if no group has taken it yet: then it is
        never written, and True. False once a group has it (written or
        refused as a whole), or once handed back."""
        if item not in self.queued or not self.writer.take_back(&item.request):
            return False
        del self.queued[item]
        return True

    def close(self):
        """Close the pipe and let the engine go, once every queued append has
        finished; whether it did. Otherwise it is marked abandoned, and the
        engine closes it once its writer thread has ended."""
        cdef _Append item
        cdef WriterState *w = self.writer.w
        if self.read_fd < 0:
            return True
        for item in self.queued:
            if not agentlog_is_finished(&item.request.finished):
                self.abandoned = True
                return False
        if _in_fork_child(w):
            self._close_pipe()
        else:
            pthread_mutex_lock(&w.lock)
            self._close_pipe()
            pthread_mutex_unlock(&w.lock)
        self.registry.discard(self)
        self.count_commits, self.registry, self.queued = None, None, {}
        return True
