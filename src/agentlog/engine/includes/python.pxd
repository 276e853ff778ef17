# The few CPython C-API functions the C twin uses that Cython does not declare.

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    object PyUnicode_DecodeUTF8(const char *data, Py_ssize_t size, const char *errors)
    object PyMemoryView_FromMemory(char *memory, Py_ssize_t size, int flags)
    int PyBUF_READ
    bint PyUnicode_IS_ASCII(object text)
    const char *PyUnicode_DATA(object text)
    # The cyclic collector's switch (3.10+): the previous state, 1 when it was on.
    int PyGC_Disable()
    int PyGC_Enable()
    # Take a container off the collector's list (one that can be in no cycle).
    void PyObject_GC_UnTrack(void *op)
