/*
 * Schema migrations. See include/data/omnigate/migrate.h.
 */
#include "omnigate/migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

/* pg_advisory_xact_lock key shared by every instance: "omni" in ASCII. */
#define MIGRATE_LOCK_KEY "1869442409"

static void set_err(char *err, size_t errlen, const char *what, const char *detail)
{
    size_t n = snprintf(err, errlen, "%s: %s", what, detail ? detail : "");
    /* libpq messages end in a newline; the caller wants one line. */
    while (n > 0 && n < errlen && (err[n - 1] == '\n' || err[n - 1] == ' '))
        err[--n] = '\0';
    for (char *p = err; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

static PGconn *connect_db(const char *conninfo, char *err, size_t errlen)
{
    PGconn *pg = PQconnectdb(conninfo);
    if (pg == NULL || PQstatus(pg) != CONNECTION_OK) {
        set_err(err, errlen, "cannot connect to the database", pg ? PQerrorMessage(pg) : "out of memory");
        PQfinish(pg);
        return NULL;
    }
    return pg;
}

static bool exec_ok(PGconn *pg, const char *sql, char *err, size_t errlen, const char *what)
{
    PGresult *r = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok)
        set_err(err, errlen, what, PQerrorMessage(pg));
    PQclear(r);
    return ok;
}

/* Reads MAX(version) from schema_migrations; 0 when the table does not exist yet. */
static bool read_version(PGconn *pg, int *version, char *err, size_t errlen)
{
    /* Two queries: a table name is resolved when a query is planned, CASE or not. */
    PGresult *r = PQexec(pg, "SELECT to_regclass('schema_migrations') IS NOT NULL");
    bool exists = PQresultStatus(r) == PGRES_TUPLES_OK && PQgetvalue(r, 0, 0)[0] == 't';
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    *version = 0;
    if (ok && exists) {
        r = PQexec(pg, "SELECT coalesce(max(version), 0) FROM schema_migrations");
        ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        if (ok)
            *version = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
    }
    if (!ok)
        set_err(err, errlen, "cannot read the schema version", PQerrorMessage(pg));
    return ok;
}

bool og_migrate_version(const char *conninfo, int *version, char *err, size_t errlen)
{
    PGconn *pg = connect_db(conninfo, err, errlen);
    if (pg == NULL)
        return false;
    bool ok = read_version(pg, version, err, errlen);
    PQfinish(pg);
    return ok;
}

/* One transaction: the lock, the version, and the next migration if there is one. *version is
 * what the database was at; true with *version == og_migrations_count when nothing was left. */
static bool step(PGconn *pg, int *version, char *err, size_t errlen)
{
    if (!exec_ok(pg, "BEGIN", err, errlen, "cannot begin"))
        return false;
    /* SET LOCAL and a transaction-level lock: nothing outlives the transaction, see below. */
    if (!exec_ok(pg, "SET LOCAL client_min_messages = warning", err, errlen, "cannot set the session") ||
        !exec_ok(pg, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK_KEY ")", err, errlen,
                 "cannot take the migration lock") ||
        !exec_ok(
            pg,
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())",
            err, errlen, "cannot create schema_migrations") ||
        !read_version(pg, version, err, errlen))
        goto rollback;
    if (*version > og_migrations_count) {
        char detail[128];
        snprintf(detail, sizeof(detail), "database is at version %d, this binary knows %d", *version,
                 og_migrations_count);
        set_err(err, errlen, "schema is newer than this binary", detail);
        goto rollback;
    }
    if (*version == og_migrations_count)
        return exec_ok(pg, "COMMIT", err, errlen, "cannot commit");
    const og_migration_t *m = &og_migrations[*version];
    char what[128];
    snprintf(what, sizeof(what), "migration %03d_%s failed", m->version, m->name);
    if (!exec_ok(pg, m->sql, err, errlen, what))
        goto rollback;
    char v[16];
    snprintf(v, sizeof(v), "%d", m->version);
    const char *params[2] = {v, m->name};
    PGresult *r = PQexecParams(pg, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", 2, NULL,
                               params, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        set_err(err, errlen, what, PQerrorMessage(pg));
    PQclear(r);
    if (ok)
        return exec_ok(pg, "COMMIT", err, errlen, what);

rollback:
    PQclear(PQexec(pg, "ROLLBACK"));
    return false;
}

/* Each migration is its own transaction under a transaction-level advisory lock: a second
 * migrator waits at the lock, then reads the version the first one committed and finds less or
 * nothing to do. Nothing is held between two transactions (no session lock, no SET), so this
 * works through a transaction pooler too, where each transaction may get another server
 * connection and a session-level lock would stay behind on one of them. */
int og_migrate_run(const char *conninfo, bool verbose, char *err, size_t errlen)
{
    PGconn *pg = connect_db(conninfo, err, errlen);
    if (pg == NULL)
        return -1;
    int applied = 0, version = 0;
    for (;;) {
        if (!step(pg, &version, err, errlen)) {
            applied = -1;
            break;
        }
        if (version == og_migrations_count)
            break;
        applied++;
        if (verbose)
            fprintf(stderr, "omnigate: applied migration %03d_%s\n", og_migrations[version].version,
                    og_migrations[version].name);
    }
    PQfinish(pg);
    return applied;
}
