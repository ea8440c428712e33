/*
 * Schema migrations: the numbered files of sql/, embedded into the binary at build time
 * (src/tools/embed_migrations.py), applied in order by `omnigate migrate`, each in its own transaction, under
 * a PostgreSQL advisory lock so any number of instances can run it at once. Synchronous
 * libpq: for the command line and for `serve` before any worker starts, never on a loop.
 */
#ifndef OMNIGATE_MIGRATE_H
#define OMNIGATE_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct og_migration {
    int version;
    const char *name;
    const char *sql;
} og_migration_t;

extern const og_migration_t og_migrations[];
extern const int og_migrations_count;

/* Applies pending migrations. Returns the number applied (0 when up to date), or -1 with
 * one line in `err`. Progress lines go to stderr when `verbose`. */
int og_migrate_run(const char *conninfo, bool verbose, char *err, size_t errlen);

/* Reads the applied schema version into `*version` (0 for an empty database). Returns false
 * with one line in `err` when the database cannot be reached or read. */
bool og_migrate_version(const char *conninfo, int *version, char *err, size_t errlen);

#endif
