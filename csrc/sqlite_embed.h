/* The SQLite that the C engine (agentlog.engine.cengine) drives.
 *
 * With AGENTLOG_EMBEDDED_SQLITE (the normal build) the pinned amalgamation is
 * compiled into this one translation unit. SQLITE_API is defined static, so
 * none of its symbols leave the extension: it can never collide with the
 * SQLite that the standard library's sqlite3 module loads. Without it (no
 * verified amalgamation could be had) the system library is linked instead.
 */
#ifndef AGENTLOG_SQLITE_EMBED_H
#define AGENTLOG_SQLITE_EMBED_H

#ifdef AGENTLOG_EMBEDDED_SQLITE

#define SQLITE_API static
#define SQLITE_PRIVATE static
#define SQLITE_EXTERN static

/* The options SQLite recommends for an application that embeds it. */
#define SQLITE_DQS 0
#define SQLITE_DEFAULT_MEMSTATUS 0
#define SQLITE_DEFAULT_WAL_SYNCHRONOUS 1
#define SQLITE_LIKE_DOESNT_MATCH_BLOBS 1
#define SQLITE_MAX_EXPR_DEPTH 0
#define SQLITE_OMIT_DEPRECATED 1
#define SQLITE_OMIT_SHARED_CACHE 1
#define SQLITE_OMIT_LOAD_EXTENSION 1
#define SQLITE_OMIT_PROGRESS_CALLBACK 1
#define SQLITE_USE_ALLOCA 1
/* Multi-thread mode: SQLite's own per-connection mutexes are compiled out.
 * The engine never lets two threads use one connection at once (one lock
 * guards the writer, and a read connection is borrowed by one thread at a
 * time from a pool), so serialized mode would only add locking to every call. */
#define SQLITE_THREADSAFE 2
#define SQLITE_DEFAULT_FOREIGN_KEYS 0

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#endif
#include "sqlite3.c"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#else
#include <sqlite3.h>
#endif

#endif
