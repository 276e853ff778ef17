# POSIX threads for the group-commit writer thread (Linux and macOS), and the
# CPython lock calls usable without the GIL (the writer thread has no Python
# thread state). Opaque types: only pointers to them are passed around.

cdef extern from "<signal.h>" nogil:
    ctypedef struct sigset_t:
        pass
    int sigfillset(sigset_t *set)
    int sigdelset(sigset_t *set, int signal)
    enum:
        SIG_BLOCK
        SIGSEGV
        SIGBUS
        SIGFPE
        SIGILL
        SIGABRT

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t *thread, const void *attr,
                       void *(*start)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t thread, void **result)
    int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
    int pthread_mutex_init(pthread_mutex_t *mutex, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mutex)
    int pthread_mutex_lock(pthread_mutex_t *mutex)
    int pthread_mutex_unlock(pthread_mutex_t *mutex)
    int pthread_cond_init(pthread_cond_t *cond, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *cond)
    int pthread_cond_wait(pthread_cond_t *cond, pthread_mutex_t *mutex)
    int pthread_cond_signal(pthread_cond_t *cond)

cdef extern from "Python.h":
    ctypedef void *PyThread_type_lock
    ctypedef enum PyLockStatus:
        PY_LOCK_FAILURE
        PY_LOCK_ACQUIRED
        PY_LOCK_INTR
    enum:
        WAIT_LOCK
        NOWAIT_LOCK
    PyThread_type_lock PyThread_allocate_lock() nogil
    void PyThread_free_lock(PyThread_type_lock lock) nogil
    int PyThread_acquire_lock(PyThread_type_lock lock, int wait) nogil
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds,
                                             int intr_flag) nogil
    void PyThread_release_lock(PyThread_type_lock lock) nogil
    int PyErr_CheckSignals() except -1
