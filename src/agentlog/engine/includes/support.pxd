# agentlog's own C helpers (csrc/engine_support.h).

cdef extern from "engine_support.h":
    object agentlog_stored_event(object type, object seq, object parent, object ts,
                                 object kind, object event)
    void agentlog_set_finished(int *flag) noexcept nogil
    int agentlog_is_finished(const int *flag) noexcept nogil
    void agentlog_poke(int fd) noexcept nogil


cdef extern from "crc32.h":
    void agentlog_crc32_init() noexcept nogil
    unsigned int agentlog_crc32(unsigned int crc, const void *data, size_t size) noexcept nogil
