/*
 * Schema migrations. See include/data/omnigate/migrate.h.
 */
#include "omnigate/migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

/* pg_advisory_lock key shared by every instance: "omni" in ASCII. */
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
    PGresult *r = PQexec(pg, "SET client_min_messages = warning");
    PQclear(r);
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

static bool apply_one(PGconn *pg, const og_migration_t *m, char *err, size_t errlen)
{
    char what[128];
    snprintf(what, sizeof(what), "migration %03d_%s failed", m->version, m->name);
    if (!exec_ok(pg, "BEGIN", err, errlen, what))
        return false;
    if (!exec_ok(pg, m->sql, err, errlen, what))
        goto rollback;
    char version[16];
    snprintf(version, sizeof(version), "%d", m->version);
    const char *params[2] = {version, m->name};
    PGresult *r = PQexecParams(pg, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", 2, NULL,
                               params, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        set_err(err, errlen, what, PQerrorMessage(pg));
    PQclear(r);
    if (!ok)
        goto rollback;
    return exec_ok(pg, "COMMIT", err, errlen, what);

rollback:
    PQclear(PQexec(pg, "ROLLBACK"));
    return false;
}

int og_migrate_run(const char *conninfo, bool verbose, char *err, size_t errlen)
{
    PGconn *pg = connect_db(conninfo, err, errlen);
    if (pg == NULL)
        return -1;
    int applied = -1, version = 0;
    /* Session-level lock: a second migrator waits here until the first has finished, then
     * finds nothing left to do. */
    if (!exec_ok(pg, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", err, errlen,
                 "cannot take the migration lock"))
        goto out;
    if (!exec_ok(
            pg,
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())",
            err, errlen, "cannot create schema_migrations"))
        goto unlock;
    if (!read_version(pg, &version, err, errlen))
        goto unlock;
    if (version > og_migrations_count) {
        char detail[128];
        snprintf(detail, sizeof(detail), "database is at version %d, this binary knows %d", version,
                 og_migrations_count);
        set_err(err, errlen, "schema is newer than this binary", detail);
        goto unlock;
    }
    applied = 0;
    for (int i = version; i < og_migrations_count; i++) {
        const og_migration_t *m = &og_migrations[i];
        if (!apply_one(pg, m, err, errlen)) {
            applied = -1;
            break;
        }
        applied++;
        if (verbose)
            fprintf(stderr, "omnigate: applied migration %03d_%s\n", m->version, m->name);
    }
unlock:
    PQclear(PQexec(pg, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")"));
out:
    PQfinish(pg);
    return applied;
}
