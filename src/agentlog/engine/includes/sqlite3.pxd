# The SQLite C API the C twin uses (csrc/sqlite_embed.h: the pinned amalgamation
# compiled in, or the system header): one nogil extern block, 64-bit rowids and seqs.

cdef extern from "sqlite_embed.h" nogil:
    ctypedef struct sqlite3
    ctypedef struct sqlite3_stmt
    ctypedef long long sqlite3_int64
    ctypedef void (*sqlite3_destructor_type)(void*)

    enum:
        SQLITE_OK
        SQLITE_ERROR
        SQLITE_BUSY
        SQLITE_LOCKED
        SQLITE_NOMEM
        SQLITE_READONLY
        SQLITE_IOERR
        SQLITE_CORRUPT
        SQLITE_FULL
        SQLITE_CANTOPEN
        SQLITE_NOTADB
        SQLITE_ROW
        SQLITE_DONE
        SQLITE_OPEN_READONLY
        SQLITE_OPEN_READWRITE
        SQLITE_OPEN_CREATE
        SQLITE_OPEN_NOMUTEX
        SQLITE_OPEN_EXRESCODE
        SQLITE_OPEN_URI
        SQLITE_PREPARE_PERSISTENT
        SQLITE_INTEGER
        SQLITE_FLOAT
        SQLITE3_TEXT
        SQLITE_BLOB
        SQLITE_NULL

    sqlite3_destructor_type SQLITE_STATIC
    sqlite3_destructor_type SQLITE_TRANSIENT

    const char *sqlite3_libversion()
    const char *sqlite3_sourceid()
    const char *sqlite3_compileoption_get(int n)
    int sqlite3_threadsafe()

    int sqlite3_open_v2(const char *filename, sqlite3 **db, int flags, const char *vfs)
    int sqlite3_close_v2(sqlite3 *db)
    int sqlite3_busy_timeout(sqlite3 *db, int ms)
    int sqlite3_busy_handler(sqlite3 *db, int (*handler)(void *, int) noexcept nogil, void *arg)
    int sqlite3_exec(sqlite3 *db, const char *sql, void *callback, void *arg, char **errmsg)
    int sqlite3_get_autocommit(sqlite3 *db)
    sqlite3_int64 sqlite3_last_insert_rowid(sqlite3 *db)
    const char *sqlite3_errmsg(sqlite3 *db)
    int sqlite3_errcode(sqlite3 *db)
    const char *sqlite3_errstr(int rc)

    int sqlite3_prepare_v3(sqlite3 *db, const char *sql, int nbytes, unsigned int flags,
                           sqlite3_stmt **stmt, const char **tail)
    int sqlite3_step(sqlite3_stmt *stmt)
    int sqlite3_reset(sqlite3_stmt *stmt)
    int sqlite3_clear_bindings(sqlite3_stmt *stmt)
    int sqlite3_finalize(sqlite3_stmt *stmt)

    int sqlite3_bind_null(sqlite3_stmt *stmt, int i)
    int sqlite3_bind_int64(sqlite3_stmt *stmt, int i, sqlite3_int64 value)
    int sqlite3_bind_double(sqlite3_stmt *stmt, int i, double value)
    int sqlite3_bind_text(sqlite3_stmt *stmt, int i, const char *text, int n,
                          sqlite3_destructor_type destructor)
    int sqlite3_bind_blob(sqlite3_stmt *stmt, int i, const void *blob, int n,
                          sqlite3_destructor_type destructor)

    int sqlite3_column_count(sqlite3_stmt *stmt)
    int sqlite3_column_type(sqlite3_stmt *stmt, int i)
    sqlite3_int64 sqlite3_column_int64(sqlite3_stmt *stmt, int i)
    double sqlite3_column_double(sqlite3_stmt *stmt, int i)
    const unsigned char *sqlite3_column_text(sqlite3_stmt *stmt, int i)
    const void *sqlite3_column_blob(sqlite3_stmt *stmt, int i)
    int sqlite3_column_bytes(sqlite3_stmt *stmt, int i)
