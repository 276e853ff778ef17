/* The raw-C baseline: agentlog's SQL, issued straight through the SQLite C
 * API with prepared statements, against the same SQLite the C engine embeds
 * (compiled in through the same header, with the same options). No
 * validation, no JSON, no Python objects: the floor agentlog is measured
 * against.
 *
 *   baseline DB PAYLOADS append SESSIONS BATCH SYNC   S1/S2: append every payload,
 *                                                       BATCH per call, round-robin
 *                                                       over SESSIONS sessions
 *   baseline DB PAYLOADS groups SESSIONS SYNC           S5/S7: each transaction one payload
 *                                                       for each of SESSIONS sessions
 *   baseline DB PAYLOADS scan                           S3: read session "s0" forward
 *   baseline DB PAYLOADS heads                          S4: head() of every session, then list
 *   baseline DB PAYLOADS min-append SESSIONS BATCH SYNC the same appends on the minimal schema
 *   baseline DB PAYLOADS min-scan                       the same scan on the minimal schema
 *
 * PAYLOADS is a file of records: u32 type length, type, u32 data length, data.
 * DB must already hold agentlog's schema, except for the min- modes: they write
 * (and create when missing) the minimal schema, one WITHOUT ROWID events table
 * keyed by (session, seq) and nothing else, in WAL mode. That is the second
 * floor: what storing an event costs with no sessions table, no head, no
 * checksum, so a ratio cannot hide a cost agentlog's schema adds. Prints one
 * JSON object.
 */
#define _GNU_SOURCE 1 /* as in the extension, where Python.h sets it first */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sqlite_embed.h"

typedef struct {
    char *type;
    int type_len;
    char *data;
    int data_len;
} payload;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(sqlite3 *db, const char *what) {
    fprintf(stderr, "baseline: %s: %s\n", what, db ? sqlite3_errmsg(db) : "?");
    exit(1);
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        die(db, sql);
    }
    return st;
}

static void run(sqlite3 *db, sqlite3_stmt *st) {
    if (sqlite3_step(st) != SQLITE_DONE) die(db, sqlite3_sql(st));
    sqlite3_reset(st);
}

static payload *load_payloads(const char *path, long *count) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    long cap = 1024, n = 0;
    payload *items = malloc(cap * sizeof(payload));
    uint32_t len;
    while (fread(&len, 4, 1, f) == 1) {
        if (n == cap) { cap *= 2; items = realloc(items, cap * sizeof(payload)); }
        items[n].type = malloc(len);
        items[n].type_len = (int)len;
        if (fread(items[n].type, 1, len, f) != len) exit(1);
        if (fread(&len, 4, 1, f) != 1) exit(1);
        items[n].data = malloc(len);
        items[n].data_len = (int)len;
        if (fread(items[n].data, 1, len, f) != len) exit(1);
        n++;
    }
    fclose(f);
    *count = n;
    return items;
}

#define SELECT_SESSION "SELECT sid, head FROM sessions WHERE tenant = ? AND name = ?"
#define INSERT_SESSION "INSERT INTO sessions (tenant, name, head, created, mtime, revision) VALUES (?, ?, ?, ?, ?, 1)"
#define UPDATE_SESSION "UPDATE sessions SET head = ?, mtime = ?, revision = revision + 1 WHERE sid = ?"
#define INSERT_EVENT "INSERT INTO events (id, ts, type, data) VALUES (?, ?, ?, ?)"
#define SCAN_EVENTS "SELECT e.id & 4294967295, e.ts, e.type, e.data FROM sessions s JOIN events e" \
    " ON e.id > (s.sid << 32) + ?3 AND e.id <= (s.sid << 32) + 4294967295" \
    " WHERE s.tenant = ?1 AND s.name = ?2 ORDER BY e.id LIMIT ?4"
#define SELECT_HEAD "SELECT head FROM sessions WHERE tenant = ? AND name = ?"
#define LIST_SESSIONS "SELECT name, mtime, head FROM sessions WHERE tenant = ? ORDER BY mtime DESC, sid DESC"

typedef struct {
    sqlite3_stmt *begin, *commit, *select, *insert_session, *update, *insert;
} statements;

static statements prepare_all(sqlite3 *db) {
    statements st = {
        prepare(db, "BEGIN IMMEDIATE"), prepare(db, "COMMIT"), prepare(db, SELECT_SESSION),
        prepare(db, INSERT_SESSION), prepare(db, UPDATE_SESSION), prepare(db, INSERT_EVENT),
    };
    return st;
}

/* One append inside the open transaction: n payloads after session NAME's head. */
static void append_one(sqlite3 *db, statements *st, const char *name, int name_len,
                       payload *items, int n, double ts) {
    sqlite3_bind_text(st->select, 1, "default", 7, SQLITE_STATIC);
    sqlite3_bind_text(st->select, 2, name, name_len, SQLITE_STATIC);
    sqlite3_int64 sid = 0, head = 0;
    int rc = sqlite3_step(st->select);
    if (rc == SQLITE_ROW) {
        sid = sqlite3_column_int64(st->select, 0);
        head = sqlite3_column_int64(st->select, 1);
    }
    sqlite3_reset(st->select);
    if (rc == SQLITE_ROW) {
        sqlite3_bind_int64(st->update, 1, head + n);
        sqlite3_bind_double(st->update, 2, ts);
        sqlite3_bind_int64(st->update, 3, sid);
        run(db, st->update);
    } else {
        sqlite3_bind_text(st->insert_session, 1, "default", 7, SQLITE_STATIC);
        sqlite3_bind_text(st->insert_session, 2, name, name_len, SQLITE_STATIC);
        sqlite3_bind_int64(st->insert_session, 3, head + n);
        sqlite3_bind_double(st->insert_session, 4, ts);
        sqlite3_bind_double(st->insert_session, 5, ts);
        run(db, st->insert_session);
        sid = sqlite3_last_insert_rowid(db);
    }
    sqlite3_bind_double(st->insert, 2, ts);
    for (int j = 0; j < n; j++) {
        payload *p = &items[j];
        sqlite3_bind_int64(st->insert, 1, (sid << 32) + head + j + 1);
        sqlite3_bind_text(st->insert, 3, p->type, p->type_len, SQLITE_STATIC);
        sqlite3_bind_blob(st->insert, 4, p->data, p->data_len, SQLITE_STATIC);
        run(db, st->insert);
    }
}

static double append(sqlite3 *db, payload *items, long count, int sessions, int batch) {
    statements st = prepare_all(db);
    char name[32];
    long call = 0;
    double start = now();
    for (long i = 0; i < count; i += batch, call++) {
        int n = (int)(count - i < batch ? count - i : batch);
        int name_len = snprintf(name, sizeof name, "s%ld", call % sessions);
        run(db, st.begin);
        append_one(db, &st, name, name_len, &items[i], n, (double)time(NULL));
        run(db, st.commit);
    }
    return now() - start;
}

/* The floor under group commit: each transaction appends one payload to each
 * of SESSIONS sessions, as a writer does for that many concurrent callers. */
static double groups(sqlite3 *db, payload *items, long count, int sessions) {
    statements st = prepare_all(db);
    char name[32];
    double start = now();
    for (long i = 0; i < count; i += sessions) {
        double ts = (double)time(NULL);
        run(db, st.begin);
        for (long j = i; j < count && j < i + sessions; j++) {
            int name_len = snprintf(name, sizeof name, "s%ld", j - i);
            append_one(db, &st, name, name_len, &items[j], 1, ts);
        }
        run(db, st.commit);
    }
    return now() - start;
}

static double scan(sqlite3 *db, long *rows) {
    sqlite3_stmt *st = prepare(db, SCAN_EVENTS);
    sqlite3_int64 since = 0, touched = 0;
    long n = 0;
    double start = now();
    for (;;) {
        sqlite3_bind_text(st, 1, "default", 7, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, "s0", 2, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, since);
        sqlite3_bind_int64(st, 4, 1000);
        long page = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            since = sqlite3_column_int64(st, 0);
            touched += (sqlite3_int64)sqlite3_column_double(st, 1);
            touched += sqlite3_column_bytes(st, 2);
            const char *data = sqlite3_column_blob(st, 3);
            touched += sqlite3_column_bytes(st, 3) + (data ? data[0] : 0);
            page++;
        }
        sqlite3_reset(st);
        n += page;
        if (page < 1000) break;
    }
    double elapsed = now() - start;
    if (touched == 42) fprintf(stderr, "!");  /* keep the reads */
    *rows = n;
    return elapsed;
}

/* -- the minimal schema: one WITHOUT ROWID table, the caller keeps its heads -- */

#define MIN_SCHEMA "CREATE TABLE IF NOT EXISTS events (session TEXT NOT NULL," \
    " seq INTEGER NOT NULL, ts REAL NOT NULL, type TEXT NOT NULL, data BLOB NOT NULL," \
    " PRIMARY KEY (session, seq)) WITHOUT ROWID"
#define MIN_INSERT "INSERT INTO events (session, seq, ts, type, data) VALUES (?, ?, ?, ?, ?)"
#define MIN_SCAN "SELECT seq, ts, type, data FROM events WHERE session = ? AND seq > ?" \
    " ORDER BY seq LIMIT ?"

static void min_schema(sqlite3 *db) {
    if (sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) != SQLITE_OK
        || sqlite3_exec(db, MIN_SCHEMA, NULL, NULL, NULL) != SQLITE_OK) {
        die(db, "minimal schema");
    }
}

static double min_append(sqlite3 *db, payload *items, long count, int sessions, int batch) {
    min_schema(db);
    sqlite3_stmt *begin = prepare(db, "BEGIN IMMEDIATE"), *commit = prepare(db, "COMMIT");
    sqlite3_stmt *insert = prepare(db, MIN_INSERT);
    sqlite3_int64 *heads = calloc((size_t)sessions, sizeof(sqlite3_int64));
    char name[32];
    long call = 0;
    double start = now();
    for (long i = 0; i < count; i += batch, call++) {
        int n = (int)(count - i < batch ? count - i : batch);
        int slot = (int)(call % sessions);
        int name_len = snprintf(name, sizeof name, "s%d", slot);
        double ts = (double)time(NULL);
        run(db, begin);
        for (int j = 0; j < n; j++) {
            payload *p = &items[i + j];
            sqlite3_bind_text(insert, 1, name, name_len, SQLITE_STATIC);
            sqlite3_bind_int64(insert, 2, ++heads[slot]);
            sqlite3_bind_double(insert, 3, ts);
            sqlite3_bind_text(insert, 4, p->type, p->type_len, SQLITE_STATIC);
            sqlite3_bind_blob(insert, 5, p->data, p->data_len, SQLITE_STATIC);
            run(db, insert);
        }
        run(db, commit);
    }
    double elapsed = now() - start;
    free(heads);
    return elapsed;
}

static double min_scan(sqlite3 *db, long *rows) {
    sqlite3_stmt *st = prepare(db, MIN_SCAN);
    sqlite3_int64 since = 0, touched = 0;
    long n = 0;
    double start = now();
    for (;;) {
        sqlite3_bind_text(st, 1, "s0", 2, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, since);
        sqlite3_bind_int64(st, 3, 1000);
        long page = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            since = sqlite3_column_int64(st, 0);
            touched += (sqlite3_int64)sqlite3_column_double(st, 1);
            touched += sqlite3_column_bytes(st, 2);
            const char *data = sqlite3_column_blob(st, 3);
            touched += sqlite3_column_bytes(st, 3) + (data ? data[0] : 0);
            page++;
        }
        sqlite3_reset(st);
        n += page;
        if (page < 1000) break;
    }
    double elapsed = now() - start;
    if (touched == 42) fprintf(stderr, "!");  /* keep the reads */
    *rows = n;
    return elapsed;
}

static double list_seconds = 0;

static double heads(sqlite3 *db, long *calls) {
    sqlite3_stmt *names = prepare(db, "SELECT name FROM sessions");
    sqlite3_stmt *st = prepare(db, SELECT_HEAD);
    char **all = NULL;
    long n = 0, cap = 0;
    while (sqlite3_step(names) == SQLITE_ROW) {
        if (n == cap) { cap = cap ? cap * 2 : 1024; all = realloc(all, cap * sizeof(char *)); }
        all[n++] = strdup((const char *)sqlite3_column_text(names, 0));
    }
    sqlite3_int64 total = 0;
    double start = now();
    for (long i = 0; i < n; i++) {
        sqlite3_bind_text(st, 1, "default", 7, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, all[i], -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) total += sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    double elapsed = now() - start;
    /* Then list(): every session, most recently active first. */
    sqlite3_stmt *list = prepare(db, LIST_SESSIONS);
    start = now();
    sqlite3_bind_text(list, 1, "default", 7, SQLITE_STATIC);
    while (sqlite3_step(list) == SQLITE_ROW) {
        total += sqlite3_column_bytes(list, 0) + sqlite3_column_int64(list, 2);
        total += (sqlite3_int64)sqlite3_column_double(list, 1);
    }
    sqlite3_reset(list);
    list_seconds = now() - start;
    if (total == -1) fprintf(stderr, "!");
    *calls = n;
    return elapsed;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: baseline DB PAYLOADS"
                " append|groups|scan|heads|min-append|min-scan [SESSIONS [BATCH] SYNC]\n");
        return 2;
    }
    sqlite3 *db;
    int flags = SQLITE_OPEN_READWRITE | (strcmp(argv[3], "min-append") == 0 ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(argv[1], &db, flags, NULL) != SQLITE_OK) die(db, "open");
    sqlite3_busy_timeout(db, 5000);
    long count = 0, done = 0;
    double seconds;
    if (strcmp(argv[3], "append") == 0 && argc == 7) {
        payload *items = load_payloads(argv[2], &count);
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA synchronous = %s", argv[6]);
        if (sqlite3_exec(db, pragma, NULL, NULL, NULL) != SQLITE_OK) die(db, pragma);
        seconds = append(db, items, count, atoi(argv[4]), atoi(argv[5]));
        done = count;
    } else if (strcmp(argv[3], "groups") == 0 && argc == 6) {
        payload *items = load_payloads(argv[2], &count);
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA synchronous = %s", argv[5]);
        if (sqlite3_exec(db, pragma, NULL, NULL, NULL) != SQLITE_OK) die(db, pragma);
        seconds = groups(db, items, count, atoi(argv[4]));
        done = count;
    } else if (strcmp(argv[3], "min-append") == 0 && argc == 7) {
        payload *items = load_payloads(argv[2], &count);
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA synchronous = %s", argv[6]);
        if (sqlite3_exec(db, pragma, NULL, NULL, NULL) != SQLITE_OK) die(db, pragma);
        seconds = min_append(db, items, count, atoi(argv[4]), atoi(argv[5]));
        done = count;
    } else if (strcmp(argv[3], "min-scan") == 0) {
        seconds = min_scan(db, &done);
    } else if (strcmp(argv[3], "scan") == 0) {
        seconds = scan(db, &done);
    } else if (strcmp(argv[3], "heads") == 0) {
        seconds = heads(db, &done);
    } else {
        fprintf(stderr, "baseline: unknown mode %s\n", argv[3]);
        return 2;
    }
    printf("{\"seconds\": %.9f, \"count\": %ld, \"list_seconds\": %.9f, \"sqlite\": \"%s\"}\n",
           seconds, done, list_seconds, sqlite3_libversion());
    /* Finalize everything so closing checkpoints the WAL, as agentlog's close does. */
    sqlite3_stmt *st;
    while ((st = sqlite3_next_stmt(db, NULL)) != NULL) sqlite3_finalize(st);
    if (sqlite3_close(db) != SQLITE_OK) die(db, "close");
    return 0;
}
