# agentlog's own C helpers (csrc/engine_support.h).

cdef extern from "engine_support.h":
    object agentlog_stored_event(object type, object seq, object parent, object ts,
                                 object kind, object event)
