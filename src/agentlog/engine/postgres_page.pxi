# Part of agentlog.engine.cengine, textually included by cengine.pyx: compiled
# into the one C module agentlog builds, though it serves the PostgreSQL
# backend (reached through agentlog.engine.postgres.operations, which falls
# back to its pure stored_page without the C engine).
#
# A page of PostgreSQL rows as events: psycopg has made the rows already; what
# is left is checking each payload's crc, joining the payloads into one JSON
# array for one decode call, and building each StoredEvent from the row's own
# objects. In Python that was three times the cost of decoding.


def postgres_page(str name, list rows):
    """A page of ``(seq, ts, type, payload, crc)`` rows (``payload`` bytes, ``crc``
    an int or None) as a list of ``StoredEvent``, each payload checked against
    its crc: the first damaged event raises :class:`CorruptDatabaseError` naming
    it (the pure twin's words, ``first_damaged``). None when a row is not such a
    tuple, a seq not an int or a payload not bytes (then the pure twin decides)."""
    cdef Py_ssize_t count = len(rows), i, size = 2, offset
    cdef tuple row
    cdef object item, payload, crc, seq, parent
    cdef char *buffer
    cdef list result = []
    cdef int64_t value, previous = 0
    cdef int collecting
    cdef object events = None
    if count == 0:
        return result
    for i in range(count):
        item = rows[i]
        if type(item) is not tuple or len(<tuple>item) != 5:
            return None
        row = <tuple>item
        payload = row[3]
        if type(payload) is not bytes or type(row[0]) is not int:
            return None  # (an exact int: its conversion in the collector's window runs no Python)
        crc = row[4]
        if crc is not None and <int64_t>agentlog_crc32(
            0, PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload)
        ) != <int64_t>crc:
            raise first_damaged(name, rows)
        size += PyBytes_GET_SIZE(payload) + 1
    buffer = <char *>malloc(size)
    if buffer == NULL:
        raise MemoryError("read: out of memory")
    collecting = PyGC_Disable()  # the collector's window (scan.pxi)
    try:
        buffer[0] = b"["
        offset = 1
        for i in range(count):
            payload = (<tuple>rows[i])[3]
            if i:
                buffer[offset] = b","
                offset += 1
            memcpy(buffer + offset, PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload))
            offset += PyBytes_GET_SIZE(payload)
        buffer[offset] = b"]"
        events = _decode_page(buffer, offset + 1, count)
        free(buffer)
        buffer = NULL
        if events is not None:
            stored_type = StoredEvent
            parent = None
            for i in range(count):
                row = rows[i]
                seq = row[0]
                value = seq
                # The row's own objects; the parent is the previous row's seq when they follow.
                if parent is None or value != previous + 1:
                    parent = PyLong_FromLongLong(value - 1)
                result.append(agentlog_stored_event(stored_type, seq, parent, row[1], row[2],
                                                    events[i]))
                parent, previous = seq, value
    finally:
        free(buffer)
        if collecting:
            PyGC_Enable()
    if events is None:
        raise first_damaged(name, rows)
    return result
