/*
 * Command-line operations that talk to PostgreSQL directly (synchronous libpq, never on an
 * event loop): `omnigate migrate`, the start-up schema check of `serve`, and
 * `omnigate admin ...` for bootstrap without the HTTP admin API. They run the same SQL as
 * the request path (store.c) and the same validation (settings.c, token.c).
 */
#ifndef OMNIGATE_APP_CLI_H
#define OMNIGATE_APP_CLI_H

#include "omnigate/config.h"

/* `omnigate migrate`. Returns the exit code. */
int og_cli_migrate(const og_config_t *cfg);

/* Before `serve` forks its workers: checks the settings the database needs, migrates when
 * OMNIGATE_AUTO_MIGRATE is set, refuses an older schema. Returns 0 to go on, else the
 * exit code (one line on stderr says why). A database that cannot be reached is not fatal:
 * the workers keep reconnecting and /readyz says 503 meanwhile. */
int og_cli_serve_check(const og_config_t *cfg);

/* `omnigate admin <verb> args...` (argv[0] is the verb). Returns the exit code. */
int og_cli_admin(const og_config_t *cfg, int argc, char **argv);

/* `omnigate prune --before DATE [--batch N]`: deletes log data older than DATE in short
 * batched transactions (sql/003_retention.sql), tenant by tenant, plus idempotency keys past
 * their 24 h. Prints one JSON line with the counts. Exit 0, 1 (database error), 2 (usage). */
int og_cli_prune(const og_config_t *cfg, int argc, char **argv);

/* Usage lines of the admin verbs. */
void og_cli_admin_usage(FILE *out);

#endif
