/* Small C helpers for the C engine (agentlog.engine.cengine, includes/support.pxd). */
#ifndef AGENTLOG_ENGINE_SUPPORT_H
#define AGENTLOG_ENGINE_SUPPORT_H

#include <Python.h>

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

#endif
