# The fault-injection seam (csrc/fault_injection.h): in the normal build the
# allocators are PyMem_RawMalloc and realloc themselves and the install adds nothing.

cdef extern from "fault_injection.h":
    void *agentlog_raw_malloc(size_t size) nogil
    void *agentlog_realloc(void *block, size_t size) nogil
    int agentlog_faults_install(object namespace) except -1
