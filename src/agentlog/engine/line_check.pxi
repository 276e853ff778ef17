# Part of agentlog.engine.cengine, textually included by cengine.pyx (the C engine
# is one extension module), though it is no part of the SQLite engine: the file
# store's check of its lines' CRCs, kept in C for speed. Python code reaches it
# through agentlog.engine.line_check, which falls back to None without the C
# engine (then the file store checks in Python).

def first_bad_line(bytes data):
    """The index of the first event line of ``data`` (lines as the file store
    writes them, each ending in a newline) whose ``"crc"`` is not the CRC-32 of
    its event bytes, or -1. A line without a crc is passed over (the file
    store's Python check, in one C loop)."""
    cdef const char *p = PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data), index
    with nogil:
        index = _first_bad_line(p, size)
    return index


cdef Py_ssize_t _find_event(const char *p, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """Where ``"event":`` first starts in ``p[start:end]``, or -1."""
    cdef Py_ssize_t i = start
    while i + 8 <= end:
        if p[i] == b'"' and memcmp(p + i, b'"event":', 8) == 0:
            return i
        i += 1
    return -1


cdef Py_ssize_t _first_bad_line(const char *p, Py_ssize_t size) noexcept nogil:
    cdef Py_ssize_t start = 0, end, ev, k, index = 0, digits
    cdef unsigned long long value, scale
    cdef const char *newline
    while start < size:
        newline = <const char *>memchr(p + start, b'\n', size - start)
        end = size if newline == NULL else newline - p
        ev = _find_event(p, start + 20, end)
        k = ev - 1
        if ev >= 0 and p[k] == b',':
            # ...,"crc":<digits>,"event":<payload>}
            value, scale, digits = 0, 1, 0
            k -= 1
            while k > start and b'0' <= p[k] <= b'9' and digits < 11:
                value += (p[k] - 48) * scale
                scale *= 10
                k -= 1
                digits += 1
            if digits and k - 5 >= start and memcmp(p + k - 5, b'"crc":', 6) == 0:
                if end - 1 < ev + 8 or agentlog_crc32(0, p + ev + 8, end - 1 - ev - 8) != value:
                    return index
        start = end + 1
        index += 1
    return -1
