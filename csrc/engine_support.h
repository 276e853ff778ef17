/* Small C helpers for the C engine (agentlog.engine.cengine, includes/support.pxd). */
#ifndef AGENTLOG_ENGINE_SUPPORT_H
#define AGENTLOG_ENGINE_SUPPORT_H

#include <Python.h>
#include <unistd.h>

/* Build a StoredEvent (a tuple subclass) straight from its five fields:
 * allocate the instance once and fill its slots, instead of building a
 * tuple and copying it into a new subclass instance as tuple.__new__ does. */
static inline PyObject *
agentlog_stored_event(PyObject *type, PyObject *seq, PyObject *parent, PyObject *ts,
                      PyObject *kind, PyObject *event)
{
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *obj = tp->tp_alloc(tp, 5);
    if (obj == NULL) {
        return NULL;
    }
    Py_INCREF(seq);
    PyTuple_SET_ITEM(obj, 0, seq);
    Py_INCREF(parent);
    PyTuple_SET_ITEM(obj, 1, parent);
    Py_INCREF(ts);
    PyTuple_SET_ITEM(obj, 2, ts);
    Py_INCREF(kind);
    PyTuple_SET_ITEM(obj, 3, kind);
    Py_INCREF(event);
    PyTuple_SET_ITEM(obj, 4, event);
    return obj;
}

/* A queued append's "finished" flag: set by the writer thread once the append
 * is written or refused, read by the event loop's thread without a lock. */
static inline void
agentlog_set_finished(int *flag)
{
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
}

static inline int
agentlog_is_finished(const int *flag)
{
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

/* Make a completion pipe readable: one byte, never blocking (a full pipe is
 * readable already). */
static inline void
agentlog_poke(int fd)
{
    ssize_t written = write(fd, "", 1);
    (void)written;
}

#endif
