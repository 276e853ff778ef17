# agentlog's own C helpers (csrc/engine_support.h).

cdef extern from "engine_support.h":
    object agentlog_stored_event(object type, object seq, object parent, object ts,
                                 object kind, object event)


cdef extern from "crc32.h":
    void agentlog_crc32_init() noexcept nogil
    unsigned int agentlog_crc32(unsigned int crc, const void *data, size_t size) noexcept nogil
