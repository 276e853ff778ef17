# Part of agentlog.engine.cengine, textually included by cengine.pyx: one extension
# module, which with the embedded SQLite is one C translation unit. The names it
# uses come from cengine.pyx's imports and the parts included before it.
#
# Scanning: a page is stepped without the GIL into flat buffers (the payloads
# joined into one JSON array, the seqs, stamps, kinds and where each payload
# ends), decoded in one call, then each StoredEvent is built in place; or, for
# read_json, each RawEvent built in place on its payload's bytes (no decode).
# And a session's head.
#
# The collector's window. Every event leaves three objects the cyclic collector
# tracks (its StoredEvent, its dict, the content list in it), so a 1000-event
# page starts a young collection every 700 of them, and the older generations'
# collections, which those lead to, walk everything kept so far: replaying 100k
# events with the collector on ran at a third of the rate with it off. So a
# page's objects are made with the collector off (PyGC_Disable) and it is
# switched back on right after (only if it was on: the caller's state comes back
# exactly, on every path out, by try/finally): its collections fall at the
# page's end, as if the page were one allocation. Nothing else sees the switch:
# the window holds the GIL throughout and runs no Python code. In it are the
# decode call (orjson.loads, which takes no hooks, calls no Python and never
# releases the GIL: its module imports no PyEval_SaveThread), C-API object
# constructors (a RawEvent's bytes among them), list appends, and the release of
# a memoryview over our own buffer; the only objects freed in it are ints,
# floats and that view, whose deallocators run no Python. Raising
# CorruptDatabaseError (which runs Python) happens after the window. Objects
# stay tracked, so a cycle a caller makes of them later is still collected
# (all but a RawEvent, which can be in none: see _build_page).

cdef tuple _KIND_OBJECTS = tuple(sorted(EVENT_TYPES))
cdef tuple _KIND_BYTES = tuple(kind.encode() for kind in _KIND_OBJECTS)
cdef enum:
    N_KINDS = 9
cdef const char *_KIND_TEXT[N_KINDS]
cdef int _KIND_SIZE[N_KINDS]
assert len(_KIND_BYTES) == N_KINDS
assert RawEvent.__dictoffset__ == 0 and RawEvent.__slots__ == ()  # see _build_page
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
    Py_ssize_t damaged  # the index of the first event whose checksum fails, or -1
    size_t *ends  # where each payload ends in ``payloads`` (read_json's bytes)
    Py_ssize_t unchecked  # events stored without a checksum (before checksums)


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
    cdef void *grown = agentlog_realloc(buffer[0], size)
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
                    or _resize(<void **>&page.kinds, wanted * sizeof(int)) < 0
                    or _resize(<void **>&page.ends, wanted * sizeof(size_t)) < 0):
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
        if sqlite3_column_type(st, 4) == SQLITE_NULL:
            page.unchecked += 1
        elif <int64_t>agentlog_crc32(0, blob, blob_size) != sqlite3_column_int64(st, 4):
            # Verified here, in the loop: the page ends before a damaged event.
            page.damaged = page.count
            return SQLITE_DONE
        if _grow(&page.payloads, &page.capacity, page.size + <size_t>blob_size + 2) < 0:
            return SQLITE_NOMEM
        if page.count:
            page.payloads[page.size] = b","
            page.size += 1
        memcpy(page.payloads + page.size, blob, blob_size)
        page.size += blob_size
        page.ends[page.count] = page.size
        page.count += 1


cdef object _decode_page(char *payloads, Py_ssize_t size, Py_ssize_t count):
    """The JSON array in ``payloads[:size]`` decoded in one call, straight from
    the buffer, no copy: a list of ``count`` items, or None when it does not
    decode to that (damaged). Called inside the collector's window (above)."""
    view = PyMemoryView_FromMemory(payloads, size, PyBUF_READ)
    try:
        events = decode_json(view)
    except ValueError:
        return None
    finally:
        view.release()
    if type(events) is not list or len(<list>events) != count:
        return None
    return events


cdef int _read_page(CConnection conn, str tenant, str name, int64_t since_seq,
                    int64_t limit, Page *page) except -1:
    """Step a page of the session into ``page`` (left empty by the caller), the
    GIL released; raises on SQLite's errors (a damaged event is ``page.damaged``)."""
    cdef sqlite3_stmt *st = conn.statement(ST_SCAN)
    cdef Py_ssize_t tenant_size, name_size
    cdef const char *tenant_text = PyUnicode_AsUTF8AndSize(tenant, &tenant_size)
    cdef const char *name_text = PyUnicode_AsUTF8AndSize(name, &name_size)
    cdef int rc
    page.damaged = -1
    page.size = 1  # room for the opening bracket
    sqlite3_bind_text(st, 1, tenant_text, <int>tenant_size, SQLITE_STATIC)
    sqlite3_bind_text(st, 2, name_text, <int>name_size, SQLITE_STATIC)
    sqlite3_bind_int64(st, 3, since_seq)
    sqlite3_bind_int64(st, 4, limit)
    with nogil:
        rc = _step_page(st, page)
        sqlite3_reset(st)  # ends the read transaction before any Python work
    if rc == SQLITE_NOMEM:
        raise MemoryError("read: out of memory")
    if rc != SQLITE_DONE:
        raise _error(rc, sqlite3_errmsg(conn.db), "read")
    return 0


cdef void _free_page(Page *page) noexcept:
    free(page.payloads)
    free(page.seqs)
    free(page.stamps)
    free(page.kinds)
    free(page.ends)
    free(page.others)


cdef list _build_page(Page *page, object tuple_type, object events):
    """The page's events as ``tuple_type`` (StoredEvent, RawEvent): each built in
    place, its last field ``events[i]`` (decoded) or, when ``events`` is None,
    the payload's stored bytes. Called inside the collector's window (above)."""
    cdef list result = []
    cdef Py_ssize_t i
    cdef size_t start
    cdef int k, other_size
    cdef int64_t *seqs = page.seqs
    cdef double *stamps = page.stamps
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
            kind = PyUnicode_DecodeUTF8(page.others + (-1 - k) + sizeof(int),
                                        other_size, NULL)
        if events is None:
            start = page.ends[i - 1] + 1 if i else 1  # after the comma, or the bracket
            payload = PyBytes_FromStringAndSize(page.payloads + start, page.ends[i] - start)
        else:
            payload = (<list>events)[i]
        built = agentlog_stored_event(tuple_type, seq, previous_seq, previous_ts, kind,
                                      payload)
        if events is None:
            # A RawEvent holds an int, an int, a float, a str and bytes, and no
            # __dict__ (asserted below): it can be in no cycle, so the collector
            # need never walk it (CPython untracks such plain tuples itself).
            PyObject_GC_UnTrack(<void *>built)
        result.append(built)
        previous_seq = seq
    return result


cdef list _scan_page(CConnection conn, str tenant, str name, int64_t since_seq, int64_t limit):
    cdef Page page
    cdef int collecting
    cdef list result = None
    cdef object events = None
    memset(&page, 0, sizeof(Page))
    try:
        _read_page(conn, tenant, name, since_seq, limit, &page)
        if page.damaged >= 0:
            # The same words as the pure twin's: the page read again, in Python.
            raise first_damaged(name, conn.rows(Q.SCAN_EVENTS, (tenant, name, since_seq, limit)))
        if page.count == 0:
            return []
        page.payloads[0] = b"["
        page.payloads[page.size] = b"]"
        page.size += 1
        collecting = PyGC_Disable()  # the collector's window (above)
        try:
            events = _decode_page(page.payloads, page.size, page.count)
            if events is not None:
                result = _build_page(&page, StoredEvent, events)
        finally:
            if collecting:
                PyGC_Enable()
        if events is None:
            # Written unchecked (before checksums) and damaged since: name it.
            raise first_damaged(name, conn.rows(Q.SCAN_EVENTS, (tenant, name, since_seq, limit)))
        return result
    finally:
        _free_page(&page)


cdef list _scan_json_page(CConnection conn, str tenant, str name, int64_t since_seq,
                          int64_t limit):
    """``scan_json``'s page: each event's stored bytes, checked against its crc
    while stepping, as a RawEvent built in place (no decode)."""
    cdef Page page
    cdef int collecting
    memset(&page, 0, sizeof(Page))
    try:
        _read_page(conn, tenant, name, since_seq, limit, &page)
        if page.damaged >= 0 or page.unchecked:
            # A damaged event (the same words as the pure twin's), or events
            # stored before checksums (each decoded once to check it): the
            # shared path, on the page read again.
            return checked_raw_page(
                name, conn.rows(Q.SCAN_EVENTS, (tenant, name, since_seq, limit))
            )
        if page.count == 0:
            return []
        collecting = PyGC_Disable()  # the collector's window (above)
        try:
            return _build_page(&page, RawEvent, None)
        finally:
            if collecting:
                PyGC_Enable()
    finally:
        _free_page(&page)


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
