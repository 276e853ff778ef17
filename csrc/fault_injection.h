/* The C engine's fault-injection seam (agentlog.engine.cengine, includes/faults.pxd).
 *
 * Compiled in only when setup.py defines AGENTLOG_FAULT_INJECTION (the build
 * switch AGENTLOG_FAULTS=1, which the AddressSanitizer run of scripts/test
 * sets) and SQLite is the embedded amalgamation. In every other build (the
 * shipped wheels) this header adds nothing: agentlog_raw_malloc and
 * agentlog_realloc are PyMem_RawMalloc and realloc themselves, and
 * agentlog_faults_install puts nothing in the module.
 *
 * In the fault build, one fault at a time can be armed, process-wide:
 *
 *   alloc        an allocation fails: SQLite's (its malloc methods are
 *                wrapped with SQLITE_CONFIG_MALLOC before sqlite3_initialize)
 *                and the engine's own (a batch's arrays, a scan's buffers)
 *   ioerr-write  a write, truncate or sync of any file fails with
 *                SQLITE_IOERR_WRITE / _TRUNCATE / _FSYNC (a VFS registered
 *                as the default wraps the real one)
 *   full         the same operations fail with SQLITE_FULL
 *
 * Armed with ``after`` = N, the first N operations of its kind succeed and the
 * next one fails; then, ``persistent``, every later one fails too, or, once,
 * none does. The counters are atomic: readers run in other threads, without
 * the GIL. The module gets three functions (wrapped, typed, by
 * agentlog.engine.faults): fault_arm(kind, after, persistent),
 * fault_disarm() -> faults fired, fault_counts() -> (operations, fired).
 */
#ifndef AGENTLOG_FAULT_INJECTION_H
#define AGENTLOG_FAULT_INJECTION_H

#include <Python.h>
#include <stdlib.h>

#include "sqlite_embed.h"

#if defined(AGENTLOG_FAULT_INJECTION) && defined(AGENTLOG_EMBEDDED_SQLITE)

enum {
    AGENTLOG_FAULT_NONE = 0,
    AGENTLOG_FAULT_ALLOC = 1,
    AGENTLOG_FAULT_IOERR_WRITE = 2,
    AGENTLOG_FAULT_FULL = 3,
};

static int agentlog_fault_kind = AGENTLOG_FAULT_NONE;
static int agentlog_fault_persistent = 0;
static long long agentlog_fault_left = 0;   /* operations to let through, minus those seen */
static long long agentlog_fault_seen = 0;   /* operations of the armed kind since arming */
static long long agentlog_fault_fired = 0;  /* faults injected since arming */

/* Whether this operation (of the I/O kinds when io, else an allocation) fails now. */
static int
agentlog_fault_hit(int io)
{
    int kind = __atomic_load_n(&agentlog_fault_kind, __ATOMIC_ACQUIRE);
    long long left;
    if (kind == AGENTLOG_FAULT_NONE || (kind == AGENTLOG_FAULT_ALLOC) == io) {
        return 0;
    }
    __atomic_add_fetch(&agentlog_fault_seen, 1, __ATOMIC_RELAXED);
    left = __atomic_sub_fetch(&agentlog_fault_left, 1, __ATOMIC_ACQ_REL);
    if (left >= 0 || (left != -1 && !agentlog_fault_persistent)) {
        return 0;
    }
    __atomic_add_fetch(&agentlog_fault_fired, 1, __ATOMIC_RELAXED);
    return kind;
}

/* -- allocations ------------------------------------------------------------------ */

static void *
agentlog_raw_malloc(size_t size)
{
    return agentlog_fault_hit(0) ? NULL : PyMem_RawMalloc(size);
}

static void *
agentlog_realloc(void *block, size_t size)
{
    return agentlog_fault_hit(0) ? NULL : realloc(block, size);
}

static sqlite3_mem_methods agentlog_fault_real_mem;

static void *
agentlog_fault_sqlite_malloc(int size)
{
    return agentlog_fault_hit(0) ? NULL : agentlog_fault_real_mem.xMalloc(size);
}

static void *
agentlog_fault_sqlite_realloc(void *block, int size)
{
    return agentlog_fault_hit(0) ? NULL : agentlog_fault_real_mem.xRealloc(block, size);
}

/* -- files: a VFS over the default one -------------------------------------------- */

typedef struct {
    sqlite3_file base;
    sqlite3_file *real; /* the wrapped VFS's file, right after this struct */
} AgentlogFaultFile;

static sqlite3_vfs *agentlog_fault_real_vfs;
static sqlite3_vfs agentlog_fault_vfs;

#define AGENTLOG_REAL(file) (((AgentlogFaultFile *)(file))->real)

static int
agentlog_fault_io(int ioerr)
{
    int kind = agentlog_fault_hit(1);
    if (kind == AGENTLOG_FAULT_IOERR_WRITE) {
        return ioerr;
    }
    return kind == AGENTLOG_FAULT_FULL ? SQLITE_FULL : SQLITE_OK;
}

static int
agentlog_fault_close(sqlite3_file *f)
{
    return AGENTLOG_REAL(f)->pMethods->xClose(AGENTLOG_REAL(f));
}

static int
agentlog_fault_read(sqlite3_file *f, void *buf, int amount, sqlite3_int64 offset)
{
    return AGENTLOG_REAL(f)->pMethods->xRead(AGENTLOG_REAL(f), buf, amount, offset);
}

/* The three calls a full or failing disk can fail: the fault, where one
 * fires, else the real call. One definition, so the three cannot drift. */
#define AGENTLOG_FAULTY(name, ioerr, method, params, args)                    \
    static int agentlog_fault_##name params                                  \
    {                                                                        \
        int rc = agentlog_fault_io(ioerr);                                   \
        return rc != SQLITE_OK ? rc : AGENTLOG_REAL(f)->pMethods->method args; \
    }

AGENTLOG_FAULTY(write, SQLITE_IOERR_WRITE, xWrite,
                (sqlite3_file *f, const void *buf, int amount, sqlite3_int64 offset),
                (AGENTLOG_REAL(f), buf, amount, offset))
AGENTLOG_FAULTY(truncate, SQLITE_IOERR_TRUNCATE, xTruncate, (sqlite3_file *f, sqlite3_int64 size),
                (AGENTLOG_REAL(f), size))
AGENTLOG_FAULTY(sync, SQLITE_IOERR_FSYNC, xSync, (sqlite3_file *f, int flags),
                (AGENTLOG_REAL(f), flags))

static int
agentlog_fault_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return AGENTLOG_REAL(f)->pMethods->xFileSize(AGENTLOG_REAL(f), size);
}

static int
agentlog_fault_lock(sqlite3_file *f, int level)
{
    return AGENTLOG_REAL(f)->pMethods->xLock(AGENTLOG_REAL(f), level);
}

static int
agentlog_fault_unlock(sqlite3_file *f, int level)
{
    return AGENTLOG_REAL(f)->pMethods->xUnlock(AGENTLOG_REAL(f), level);
}

static int
agentlog_fault_check_lock(sqlite3_file *f, int *out)
{
    return AGENTLOG_REAL(f)->pMethods->xCheckReservedLock(AGENTLOG_REAL(f), out);
}

static int
agentlog_fault_file_control(sqlite3_file *f, int op, void *arg)
{
    return AGENTLOG_REAL(f)->pMethods->xFileControl(AGENTLOG_REAL(f), op, arg);
}

static int
agentlog_fault_sector_size(sqlite3_file *f)
{
    return AGENTLOG_REAL(f)->pMethods->xSectorSize(AGENTLOG_REAL(f));
}

static int
agentlog_fault_device(sqlite3_file *f)
{
    return AGENTLOG_REAL(f)->pMethods->xDeviceCharacteristics(AGENTLOG_REAL(f));
}

static int
agentlog_fault_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **out)
{
    return AGENTLOG_REAL(f)->pMethods->xShmMap(AGENTLOG_REAL(f), page, size, extend, out);
}

static int
agentlog_fault_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    return AGENTLOG_REAL(f)->pMethods->xShmLock(AGENTLOG_REAL(f), offset, n, flags);
}

static void
agentlog_fault_shm_barrier(sqlite3_file *f)
{
    AGENTLOG_REAL(f)->pMethods->xShmBarrier(AGENTLOG_REAL(f));
}

static int
agentlog_fault_shm_unmap(sqlite3_file *f, int delete_flag)
{
    return AGENTLOG_REAL(f)->pMethods->xShmUnmap(AGENTLOG_REAL(f), delete_flag);
}

static int
agentlog_fault_fetch(sqlite3_file *f, sqlite3_int64 offset, int amount, void **out)
{
    return AGENTLOG_REAL(f)->pMethods->xFetch(AGENTLOG_REAL(f), offset, amount, out);
}

static int
agentlog_fault_unfetch(sqlite3_file *f, sqlite3_int64 offset, void *page)
{
    return AGENTLOG_REAL(f)->pMethods->xUnfetch(AGENTLOG_REAL(f), offset, page);
}

/* The version-1 methods, the same in both tables below. */
#define AGENTLOG_FAULT_IO_V1_METHODS \
    agentlog_fault_close,            \
    agentlog_fault_read,             \
    agentlog_fault_write,            \
    agentlog_fault_truncate,         \
    agentlog_fault_sync,             \
    agentlog_fault_file_size,        \
    agentlog_fault_lock,             \
    agentlog_fault_unlock,           \
    agentlog_fault_check_lock,       \
    agentlog_fault_file_control,     \
    agentlog_fault_sector_size,      \
    agentlog_fault_device

/* Version 1 (no shared memory, no mmap) for a file whose real methods lack them. */
static const sqlite3_io_methods agentlog_fault_io_v1 = {
    1,
    AGENTLOG_FAULT_IO_V1_METHODS,
    NULL, NULL, NULL, NULL, NULL, NULL,
};

static const sqlite3_io_methods agentlog_fault_io_v3 = {
    3,
    AGENTLOG_FAULT_IO_V1_METHODS,
    agentlog_fault_shm_map,
    agentlog_fault_shm_lock,
    agentlog_fault_shm_barrier,
    agentlog_fault_shm_unmap,
    agentlog_fault_fetch,
    agentlog_fault_unfetch,
};

static int
agentlog_fault_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                    int *out_flags)
{
    AgentlogFaultFile *wrapper = (AgentlogFaultFile *)file;
    sqlite3_vfs *real = agentlog_fault_real_vfs;
    int rc;
    (void)vfs;
    wrapper->real = (sqlite3_file *)(wrapper + 1);
    rc = real->xOpen(real, name, wrapper->real, flags, out_flags);
    if (wrapper->real->pMethods == NULL) {
        file->pMethods = NULL;
    } else if (wrapper->real->pMethods->iVersion >= 3) {
        file->pMethods = &agentlog_fault_io_v3;
    } else {
        file->pMethods = &agentlog_fault_io_v1;
    }
    return rc;
}

static int
agentlog_fault_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xDelete(agentlog_fault_real_vfs, name, sync_dir);
}

static int
agentlog_fault_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xAccess(agentlog_fault_real_vfs, name, flags, out);
}

static int
agentlog_fault_full_pathname(sqlite3_vfs *vfs, const char *name, int size, char *out)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xFullPathname(agentlog_fault_real_vfs, name, size, out);
}

static int
agentlog_fault_randomness(sqlite3_vfs *vfs, int size, char *out)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xRandomness(agentlog_fault_real_vfs, size, out);
}

static int
agentlog_fault_sleep(sqlite3_vfs *vfs, int microseconds)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xSleep(agentlog_fault_real_vfs, microseconds);
}

static int
agentlog_fault_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xCurrentTime(agentlog_fault_real_vfs, out);
}

static int
agentlog_fault_last_error(sqlite3_vfs *vfs, int size, char *out)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xGetLastError(agentlog_fault_real_vfs, size, out);
}

static int
agentlog_fault_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    return agentlog_fault_real_vfs->xCurrentTimeInt64(agentlog_fault_real_vfs, out);
}

/* -- the control functions ---------------------------------------------------------- */

static PyObject *
agentlog_fault_arm_py(PyObject *self, PyObject *args)
{
    int kind, persistent;
    long long after;
    (void)self;
    if (!PyArg_ParseTuple(args, "iLp:fault_arm", &kind, &after, &persistent)) {
        return NULL;
    }
    if (kind < AGENTLOG_FAULT_ALLOC || kind > AGENTLOG_FAULT_FULL || after < 0) {
        PyErr_SetString(PyExc_ValueError, "fault_arm: bad kind or count");
        return NULL;
    }
    __atomic_store_n(&agentlog_fault_kind, AGENTLOG_FAULT_NONE, __ATOMIC_RELEASE);
    agentlog_fault_persistent = persistent;
    __atomic_store_n(&agentlog_fault_left, after, __ATOMIC_RELAXED);
    __atomic_store_n(&agentlog_fault_seen, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&agentlog_fault_fired, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&agentlog_fault_kind, kind, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyObject *
agentlog_fault_counts_py(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("(LL)", __atomic_load_n(&agentlog_fault_seen, __ATOMIC_ACQUIRE),
                         __atomic_load_n(&agentlog_fault_fired, __ATOMIC_ACQUIRE));
}

static PyObject *
agentlog_fault_disarm_py(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    __atomic_store_n(&agentlog_fault_kind, AGENTLOG_FAULT_NONE, __ATOMIC_RELEASE);
    return PyLong_FromLongLong(__atomic_load_n(&agentlog_fault_fired, __ATOMIC_ACQUIRE));
}

static PyMethodDef agentlog_fault_functions[] = {
    {"fault_arm", agentlog_fault_arm_py, METH_VARARGS,
     "fault_arm(kind, after, persistent): arm one fault (see agentlog.engine.faults)."},
    {"fault_disarm", agentlog_fault_disarm_py, METH_NOARGS,
     "fault_disarm() -> faults fired since arming; no fault is armed after it."},
    {"fault_counts", agentlog_fault_counts_py, METH_NOARGS,
     "fault_counts() -> (operations of the armed kind seen, faults fired) since arming."},
    {NULL, NULL, 0, NULL},
};

/* At import, before any connection is opened: wrap SQLite's allocator (only
 * possible before sqlite3_initialize), put the fault VFS over the default
 * one, and add the control functions to ``namespace`` (the module's dict). */
static int
agentlog_faults_install(PyObject *namespace)
{
    sqlite3_mem_methods wrapped;
    PyMethodDef *def;
    PyObject *function;
    int rc = sqlite3_config(SQLITE_CONFIG_GETMALLOC, &agentlog_fault_real_mem);
    if (rc == SQLITE_OK) {
        wrapped = agentlog_fault_real_mem;
        wrapped.xMalloc = agentlog_fault_sqlite_malloc;
        wrapped.xRealloc = agentlog_fault_sqlite_realloc;
        rc = sqlite3_config(SQLITE_CONFIG_MALLOC, &wrapped);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_initialize();
    }
    if (rc == SQLITE_OK) {
        agentlog_fault_real_vfs = sqlite3_vfs_find(NULL);
        rc = agentlog_fault_real_vfs == NULL ? SQLITE_ERROR : SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        PyErr_Format(PyExc_ImportError, "the fault-injection seam could not be set up (%s)",
                     sqlite3_errstr(rc));
        return -1;
    }
    memset(&agentlog_fault_vfs, 0, sizeof(agentlog_fault_vfs));
    agentlog_fault_vfs.iVersion = 2;
    agentlog_fault_vfs.szOsFile = (int)sizeof(AgentlogFaultFile) + agentlog_fault_real_vfs->szOsFile;
    agentlog_fault_vfs.mxPathname = agentlog_fault_real_vfs->mxPathname;
    agentlog_fault_vfs.zName = "agentlog-faults";
    agentlog_fault_vfs.xOpen = agentlog_fault_open;
    agentlog_fault_vfs.xDelete = agentlog_fault_delete;
    agentlog_fault_vfs.xAccess = agentlog_fault_access;
    agentlog_fault_vfs.xFullPathname = agentlog_fault_full_pathname;
    agentlog_fault_vfs.xRandomness = agentlog_fault_randomness;
    agentlog_fault_vfs.xSleep = agentlog_fault_sleep;
    agentlog_fault_vfs.xCurrentTime = agentlog_fault_current_time;
    agentlog_fault_vfs.xGetLastError = agentlog_fault_last_error;
    agentlog_fault_vfs.xCurrentTimeInt64 = agentlog_fault_current_time64;
    rc = sqlite3_vfs_register(&agentlog_fault_vfs, 1);
    if (rc != SQLITE_OK) {
        PyErr_Format(PyExc_ImportError, "the fault VFS could not be registered (%s)",
                     sqlite3_errstr(rc));
        return -1;
    }
    for (def = agentlog_fault_functions; def->ml_name != NULL; def++) {
        function = PyCFunction_New(def, NULL);
        if (function == NULL) {
            return -1;
        }
        rc = PyDict_SetItemString(namespace, def->ml_name, function);
        Py_DECREF(function);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

#else /* no seam: the plain allocators, and nothing to install */

#define agentlog_raw_malloc(size) PyMem_RawMalloc(size)
#define agentlog_realloc(block, size) realloc((block), (size))
#define agentlog_faults_install(namespace) 0

#endif

#endif
