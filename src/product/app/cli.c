/*
 * Synchronous database commands. See include/product/omnigate/app/cli.h.
 */
#include "omnigate/app/cli.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/crypto.h>

#include "omnigate/channel.h"
#include "omnigate/messaging/budget.h"
#include "omnigate/tenants/admin.h"
#include "omnigate/app/answer.h"
#include "omnigate/ids.h"
#include "omnigate/log.h"
#include "omnigate/logs/logs_api.h"
#include "omnigate/logs/page.h"
#include "omnigate/migrate.h"
#include "omnigate/store.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/token.h"
#include "omnigate/tenant_webhooks/webhook_api.h"
#include "omnigate/tenant_webhooks/webhooks.h"

static bool need_db(const og_config_t *cfg, const char *what)
{
    if (cfg->database_url == NULL) {
        fprintf(stderr, "omnigate: OMNIGATE_DATABASE_URL: required by %s\n", what);
        return false;
    }
    return true;
}

static PGconn *connect_db(const og_config_t *cfg);
static PGresult *run(PGconn *pg, const og_db_call_t *stmt);

/* ---- secrets at rest -------------------------------------------------------------------- */

static bool exec_cmd(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "omnigate: %s", PQerrorMessage(pg));
    PQclear(r);
    return ok;
}

/* Seals, for each row of `r` (tenants_unsealed), the credentials still in clear and stores the
 * settings back. False after printing why. */
static bool seal_rows(PGconn *pg, PGresult *r, const og_seal_key_t *key)
{
    for (int i = 0; i < PQntuples(r); i++) {
        const char *id = PQgetvalue(r, i, OG_C_TENANTS_UNSEALED_ID);
        json_t *settings = json_loads(PQgetvalue(r, i, OG_C_TENANTS_UNSEALED_SETTINGS), 0, NULL);
        char *text = settings != NULL && og_settings_seal(settings, key, id) >= 0
                         ? json_dumps(settings, JSON_COMPACT)
                         : NULL;
        json_decref(settings);
        if (text == NULL) {
            fprintf(stderr, "omnigate: cannot seal the settings of tenant %s\n", id);
            return false;
        }
        og_db_call_t stmt;
        og_q_tenant_seal(&stmt, &(og_q_tenant_seal_t){.tenant_id = id, .settings = text});
        PGresult *u = run(pg, &stmt);
        free(text);
        if (u == NULL)
            return false;
        PQclear(u);
    }
    return true;
}

/* The migration step SQL cannot do (sql/008_sealed_secrets.sql): seals the provider credentials
 * stored in clear by a binary that did not seal them. One transaction, which locks the rows it
 * changes: instances starting together and admin writes wait for it, then see sealed values.
 * Returns the number of tenants whose settings it sealed, or -1 after printing why. */
static int seal_stored(const og_config_t *cfg)
{
    og_seal_key_t key;
    if (!og_settings_key(&key, cfg->secret)) {
        fprintf(stderr, "omnigate: cannot derive the key that seals provider credentials\n");
        return -1;
    }
    PGconn *pg = connect_db(cfg);
    int sealed = -1;
    PGresult *r = NULL;
    og_db_call_t stmt;
    if (pg == NULL || !exec_cmd(pg, "BEGIN"))
        goto out;
    if ((r = run(pg, og_q_tenants_unsealed(&stmt))) != NULL && seal_rows(pg, r, &key) &&
        exec_cmd(pg, "COMMIT"))
        sealed = PQntuples(r);
    else
        PQclear(PQexec(pg, "ROLLBACK"));
out:
    PQclear(r);
    PQfinish(pg);
    og_seal_key_clear(&key);
    if (sealed > 0)
        fprintf(stderr, "omnigate: sealed the provider credentials stored in clear of %d tenant%s\n", sealed,
                sealed == 1 ? "" : "s");
    return sealed;
}

/* `omnigate migrate` without OMNIGATE_SECRET cannot seal: says so when there is something to
 * seal. */
static void warn_unsealed(const og_config_t *cfg)
{
    PGconn *pg = connect_db(cfg);
    og_db_call_t stmt;
    PGresult *r = pg != NULL ? run(pg, og_q_tenants_unsealed(&stmt)) : NULL;
    if (r != NULL && PQntuples(r) > 0)
        fprintf(stderr,
                "omnigate: warning: OMNIGATE_SECRET is not set: the provider credentials of %d tenant%s "
                "stay in clear until `omnigate migrate` runs with it or `omnigate serve` starts\n",
                PQntuples(r), PQntuples(r) == 1 ? "" : "s");
    PQclear(r);
    PQfinish(pg);
}

int og_cli_migrate(const og_config_t *cfg)
{
    if (!need_db(cfg, "migrate"))
        return 2;
    char err[512];
    int n = og_migrate_run(cfg->database_url, true, err, sizeof(err));
    if (n < 0) {
        fprintf(stderr, "omnigate: %s\n", err);
        return 1;
    }
    fprintf(stderr, "omnigate: schema at version %d (%d migration%s applied)\n", og_migrations_count, n,
            n == 1 ? "" : "s");
    if (cfg->secret == NULL)
        warn_unsealed(cfg);
    else if (seal_stored(cfg) < 0)
        return 1;
    return 0;
}

/* Messages a crash left pending are marked 'unknown' rather than left pending forever. Only
 * those older than any send could still be running anywhere (the send budget on every channel,
 * as the pending sweep uses it; a late completion still records its truth, sql/015). */
static void mark_unknown(const og_config_t *cfg)
{
    PGconn *pg = PQconnectdb(cfg->database_url);
    if (PQstatus(pg) == CONNECTION_OK) {
        char older[32];
        snprintf(older, sizeof(older), "%u", og_send_budget_ms(cfg, OG_CH__COUNT));
        og_db_call_t stmt;
        og_q_msg_mark_unknown(&stmt, &(og_q_msg_mark_unknown_t){.older_ms = older});
        PGresult *r = run(pg, &stmt);
        if (r != NULL && atoi(PQcmdTuples(r)) > 0)
            fprintf(stderr, "omnigate: marked %s message(s) left pending by a crash as unknown\n",
                    PQcmdTuples(r));
        PQclear(r);
    }
    PQfinish(pg);
}

int og_cli_serve_check(const og_config_t *cfg)
{
    if (cfg->database_url == NULL) {
        fprintf(stderr,
                "omnigate: OMNIGATE_DATABASE_URL: required by serve (the PostgreSQL database, a libpq "
                "conninfo or URI)\n");
        return 2;
    }
    if (cfg->secret == NULL) {
        fprintf(stderr, "omnigate: OMNIGATE_SECRET: required when OMNIGATE_DATABASE_URL is set\n");
        return 2;
    }
    char err[512];
    if (cfg->auto_migrate) {
        if (og_migrate_run(cfg->database_url, true, err, sizeof(err)) < 0) {
            fprintf(stderr, "omnigate: OMNIGATE_AUTO_MIGRATE: %s\n", err);
            return 1;
        }
        mark_unknown(cfg);
        seal_stored(cfg); /* on failure it said why; the gateway reads clear credentials too */
        return 0;
    }
    int version = 0;
    if (!og_migrate_version(cfg->database_url, &version, err, sizeof(err))) {
        fprintf(stderr,
                "omnigate: warning: %s (starting anyway; /readyz answers 503 until it is reachable)\n", err);
        return 0;
    }
    if (version < og_migrations_count) {
        fprintf(stderr,
                "omnigate: OMNIGATE_DATABASE_URL: schema is at version %d, this binary needs %d: run "
                "`omnigate migrate` first (or set OMNIGATE_AUTO_MIGRATE=1)\n",
                version, og_migrations_count);
        return 2;
    }
    if (version > og_migrations_count) {
        fprintf(stderr,
                "omnigate: OMNIGATE_DATABASE_URL: schema is at version %d, newer than this binary (%d)\n",
                version, og_migrations_count);
        return 2;
    }
    mark_unknown(cfg);
    seal_stored(cfg);
    return 0;
}

/* ---- admin ------------------------------------------------------------------------------ */

/* A blocking connection for a one-shot command (not for the event loop); NULL after printing
 * why. */
static PGconn *connect_db(const og_config_t *cfg)
{
    PGconn *pg = PQconnectdb(cfg->database_url);
    if (PQstatus(pg) == CONNECTION_OK)
        return pg;
    fprintf(stderr, "omnigate: cannot connect to the database: %s", PQerrorMessage(pg));
    PQfinish(pg);
    return NULL;
}

/* Runs a statement of the store's table, bound (store.h); NULL (after printing why) on failure. */
static PGresult *run(PGconn *pg, const og_db_call_t *stmt)
{
    const og_db_stmt_t *s = &og_store_stmts[stmt->stmt];
    PGresult *r = PQexecParams(pg, s->sql, s->nparams, NULL, stmt->values, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        fprintf(stderr, "omnigate: %s", PQerrorMessage(pg));
        PQclear(r);
        return NULL;
    }
    return r;
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s != NULL)
        puts(s);
    free(s);
    json_decref(j);
}

static json_t *tenant_row(const og_config_t *cfg, PGresult *r, int row)
{
    json_t *settings = json_loads(PQgetvalue(r, row, OG_TENANT_SETTINGS), 0, NULL);
    if (settings != NULL) { /* opened to be masked: "****" + the clear value's last characters */
        og_seal_key_t key;
        og_settings_key(&key, cfg->secret);
        if (og_settings_open(settings, &key, PQgetvalue(r, row, OG_TENANT_ID), NULL) > 0)
            fprintf(stderr, "omnigate: warning: a sealed credential of this tenant does not open with this "
                            "OMNIGATE_SECRET: set it again\n");
        og_seal_key_clear(&key);
    }
    json_t *masked = settings ? og_settings_mask(settings) : json_object();
    json_decref(settings);
    return json_pack("{s:s,s:s,s:b,s:o,s:s}", "id", PQgetvalue(r, row, OG_TENANT_ID), "name",
                     PQgetvalue(r, row, OG_TENANT_NAME), "unifiedApiEnabled",
                     PQgetvalue(r, row, OG_TENANT_UNIFIED)[0] == 't', "settings", masked, "createdAt",
                     PQgetvalue(r, row, OG_TENANT_CREATED));
}

/* Prints the tenant row of `r`, or "no such tenant" when it has none. */
static int tenant_result(const og_config_t *cfg, PGresult *r)
{
    if (r == NULL)
        return 1;
    int rc = 0;
    if (PQntuples(r) == 0) {
        fprintf(stderr, "omnigate: no such tenant\n");
        rc = 1;
    } else {
        print_json(tenant_row(cfg, r, 0));
    }
    PQclear(r);
    return rc;
}

static bool tenant_id_ok(const char *id)
{
    if (og_store_uuid_valid(id))
        return true;
    fprintf(stderr, "omnigate: not a tenant id: \"%.40s\"\n", id);
    return false;
}

/* A verb handler: argv[0] is the verb, argv[1..argc-1] its arguments (the count already
 * checked against the verb's table row). Returns the exit code. */
typedef int admin_fn(PGconn *pg, const og_config_t *cfg, int argc, char **argv);

static int admin_create_tenant(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    bool unified = argc == 3 && strcmp(argv[2], "unified") == 0;
    if (argc == 3 && !unified) {
        fprintf(stderr, "omnigate: create-tenant: the optional third word must be \"unified\"\n");
        return 2;
    }
    json_t *defaults = og_settings_defaults();
    char *settings = json_dumps(defaults, JSON_COMPACT);
    json_decref(defaults);
    /* No secret in the defaults: the database may choose the id. */
    og_db_call_t stmt;
    og_q_tenant_insert(&stmt, &(og_q_tenant_insert_t){.name = argv[1],
                                                      .unified = unified ? "true" : "false",
                                                      .settings = settings});
    int rc = tenant_result(cfg, run(pg, &stmt));
    free(settings);
    return rc;
}

static int admin_get_tenant(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    if (!tenant_id_ok(argv[1]))
        return 2;
    og_db_call_t stmt;
    og_q_tenant_get(&stmt, &(og_q_tenant_get_t){.tenant_id = argv[1]});
    return tenant_result(cfg, run(pg, &stmt));
}

/* Sets the tenant's plan lock: the update statement leaves the NULL columns as they are. */
static int set_unified(PGconn *pg, const og_config_t *cfg, const char *tenant_id, bool enabled)
{
    if (!tenant_id_ok(tenant_id))
        return 2;
    og_db_call_t stmt;
    og_q_tenant_update(
        &stmt, &(og_q_tenant_update_t){.tenant_id = tenant_id, .unified = enabled ? "true" : "false"});
    return tenant_result(cfg, run(pg, &stmt));
}

static int admin_enable_unified(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    return set_unified(pg, cfg, argv[1], true);
}

static int admin_lock_unified(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    return set_unified(pg, cfg, argv[1], false);
}

static int admin_set_settings(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    if (!tenant_id_ok(argv[1]))
        return 2;
    json_error_t jerr;
    json_t *settings = json_loads(argv[2], JSON_REJECT_DUPLICATES, &jerr);
    og_err_t err = {0};
    if (settings == NULL) {
        fprintf(stderr, "omnigate: set-settings: invalid JSON: %s\n", jerr.text);
        return 2;
    }
    if (!og_settings_validate(settings, &err)) {
        fprintf(stderr, "omnigate: set-settings: %s%s%s\n", err.field[0] ? err.field : "",
                err.field[0] ? ": " : "", err.message);
        json_decref(settings);
        return 2;
    }
    /* Sealed with the id as PostgreSQL prints it (lower case), which is what opens it. */
    char id[37];
    for (size_t i = 0; i < sizeof(id); i++)
        id[i] = (char)tolower((unsigned char)argv[1][i]);
    og_seal_key_t key;
    char *text = og_settings_key(&key, cfg->secret) && og_settings_seal(settings, &key, id) >= 0
                     ? json_dumps(settings, JSON_COMPACT)
                     : NULL;
    og_seal_key_clear(&key);
    json_decref(settings);
    if (text == NULL) {
        fprintf(stderr, "omnigate: set-settings: cannot seal the credentials\n");
        return 1;
    }
    og_db_call_t stmt;
    og_q_tenant_update(&stmt, &(og_q_tenant_update_t){.tenant_id = id, .settings = text});
    int rc = tenant_result(cfg, run(pg, &stmt));
    free(text);
    return rc;
}

/* No row from the token insert: the tenant is missing, or its plan locks the unified API. */
static void token_refused(PGconn *pg, const char *tenant_id)
{
    og_db_call_t stmt;
    og_q_tenant_unified(&stmt, &(og_q_tenant_unified_t){.tenant_id = tenant_id});
    PGresult *t = run(pg, &stmt);
    if (t != NULL && PQntuples(t) == 1)
        fprintf(stderr,
                "omnigate: unified_api_locked: the tenant's plan locks the unified API (run "
                "`omnigate admin enable-unified %s` first)\n",
                tenant_id);
    else
        fprintf(stderr, "omnigate: no such tenant\n");
    PQclear(t);
}

static int admin_create_token(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    if (!tenant_id_ok(argv[1]))
        return 2;
    char token[64], prefix[16], hash[65];
    og_token_generate(token);
    og_token_prefix(token, prefix);
    og_token_hash(cfg->secret, token, strlen(token), hash);
    og_db_call_t stmt;
    og_q_token_insert(&stmt, &(og_q_token_insert_t){.tenant_id = argv[1],
                                                    .name = argc == 3 ? argv[2] : "",
                                                    .prefix = prefix,
                                                    .hash = hash,
                                                    .scopes = "send,otp,logs"});
    PGresult *r = run(pg, &stmt);
    if (r == NULL)
        return 1;
    int rc = 0;
    if (PQntuples(r) == 0) {
        token_refused(pg, argv[1]);
        rc = 1;
    } else {
        print_json(json_pack("{s:s,s:s,s:s,s:s}", "id", PQgetvalue(r, 0, OG_TOKEN_ID), "token", token,
                             "prefix", PQgetvalue(r, 0, OG_TOKEN_PREFIX), "createdAt",
                             PQgetvalue(r, 0, OG_TOKEN_CREATED)));
    }
    PQclear(r);
    return rc;
}

static int admin_revoke_token(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    if (!tenant_id_ok(argv[1]) || !og_store_uuid_valid(argv[2]))
        return 2;
    og_db_call_t stmt;
    og_q_token_revoke(&stmt, &(og_q_token_revoke_t){.tenant_id = argv[1], .token_id = argv[2]});
    PGresult *r = run(pg, &stmt);
    if (r == NULL)
        return 1;
    int rc = PQntuples(r) == 1 ? 0 : 1;
    if (rc == 0)
        printf("revoked %s at %s\n", PQgetvalue(r, 0, OG_TOKEN_ID), PQgetvalue(r, 0, OG_TOKEN_REVOKED));
    else
        fprintf(stderr, "omnigate: no such token\n");
    PQclear(r);
    return rc;
}

/* Joins NAME=VALUE words into a query string, each part percent-encoded, so the pages of the
 * command line are read by the very parsers of the HTTP routes. False (after saying why) when a
 * word has no '=' or the result does not fit. */
static bool words_query(int argc, char **argv, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        if (strchr(argv[i], '=') == NULL) {
            fprintf(stderr, "omnigate: expected NAME=VALUE, got \"%.40s\"\n", argv[i]);
            return false;
        }
        if (i > 0 && n < cap)
            out[n++] = '&';
        for (const unsigned char *p = (const unsigned char *)argv[i]; *p; p++) {
            bool plain = isalnum(*p) || strchr("-._~", *p) != NULL ||
                         (*p == '=' && strchr(argv[i], '=') == (const char *)p);
            if (n + 3 >= cap) {
                fprintf(stderr, "omnigate: the filters are too long\n");
                return false;
            }
            if (plain) {
                out[n++] = (char)*p;
            } else {
                out[n++] = '%';
                out[n++] = hex[*p >> 4];
                out[n++] = hex[*p & 15];
            }
        }
    }
    if (n >= cap)
        return false;
    out[n] = '\0';
    return true;
}

/* Prints a refused parameter the way the API's 422 names it. */
static int bad_param(const char *verb, const og_err_t *err)
{
    fprintf(stderr, "omnigate: %s: %s%s%s\n", verb, err->field[0] ? err->field : "",
            err->field[0] ? ": " : "", err->message);
    return 2;
}

static int admin_list_tenants(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    char query[2048];
    og_admin_list_t list;
    og_err_t err = {0};
    if (!words_query(argc - 1, argv + 1, query, sizeof(query)))
        return 2;
    if (!og_admin_list_query(query, strlen(query), &list, &err))
        return bad_param(argv[0], &err);
    og_db_call_t stmt;
    og_q_tenants_list(&stmt, &(og_q_tenants_list_t){.cursor = list.cursor[0] ? list.cursor : NULL,
                                                    .name = list.name[0] ? list.name : NULL,
                                                    .limit = list.limit_s});
    PGresult *r = run(pg, &stmt);
    if (r == NULL)
        return 1;
    int rows = PQntuples(r), shown = rows > list.limit ? list.limit : rows;
    json_t *items = json_array();
    for (int i = 0; i < shown; i++)
        json_array_append_new(items, tenant_row(cfg, r, i));
    json_t *next = rows > list.limit ? json_string(PQgetvalue(r, shown - 1, OG_TENANT_ID)) : json_null();
    PQclear(r);
    print_json(json_pack("{s:o,s:o}", "items", items, "nextCursor", next));
    return 0;
}

/* `admin logs TENANT_ID omni|sms|otp [FILTER=VALUE...]`: one page, as GET
 * /admin/tenants/{id}/{omni,sms,otp}/logs answers it (its data). */
static int admin_logs(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    static const char *const kinds[] = {"omni", "sms", "otp"};
    int kind = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(argv[2], kinds[i]) == 0)
            kind = i;
    if (!tenant_id_ok(argv[1]))
        return 2;
    if (kind < 0) {
        fprintf(stderr, "omnigate: logs: the log is omni, sms or otp, not \"%.20s\"\n", argv[2]);
        return 2;
    }
    char query[2048];
    og_logs_query_t q;
    og_err_t err = {0};
    if (!words_query(argc - 3, argv + 3, query, sizeof(query)))
        return 2;
    if (!og_logs_query_parse(&q, (og_logs_kind_t)kind, query, strlen(query), &err))
        return bad_param(argv[0], &err);
    og_db_call_t stmt;
    og_q_logs_tenant(&stmt, &(og_q_logs_tenant_t){.tenant_id = argv[1]});
    PGresult *r = run(pg, &stmt);
    if (r == NULL)
        return 1;
    bool known = PQntuples(r) == 1;
    PQclear(r);
    if (!known) {
        fprintf(stderr, "omnigate: no such tenant\n");
        return 1;
    }
    og_logs_query_stmt(&q, argv[1], &stmt);
    if ((r = run(pg, &stmt)) == NULL)
        return 1;
    size_t len = 0;
    char *body = og_page_body(r, q.limit, "logs", &len);
    PQclear(r);
    json_t *page = body != NULL ? json_loadb(body, len, 0, NULL) : NULL;
    free(body);
    if (page == NULL) {
        fprintf(stderr, "omnigate: logs: out of memory\n");
        return 1;
    }
    print_json(json_incref(json_object_get(page, "data")));
    json_decref(page);
    return 0;
}

/* ---- tenant webhooks (API.md section 12), the twins of the admin routes (webhook_api.c) ---- */

/* The tenant id of argv[1] in lower case (the seal's associated data), or false after saying why. */
static bool webhook_tenant(const char *arg, char id[37])
{
    if (!tenant_id_ok(arg))
        return false;
    for (size_t i = 0; i < 37; i++)
        id[i] = (char)tolower((unsigned char)arg[i]);
    return true;
}

/* Prints the webhook row of `r` (the secret in full when `reveal`), or says there is none. */
static int webhook_result(const og_config_t *cfg, PGresult *r, const char *id, bool reveal, const char *none)
{
    if (r == NULL)
        return 1;
    int rc = 0;
    if (PQntuples(r) == 0) {
        fprintf(stderr, "omnigate: %s\n", none);
        rc = 1;
    } else {
        og_seal_key_t key;
        og_wh_seal_key(&key, cfg->secret);
        bool created = reveal || PQgetvalue(r, 0, OG_WH_INSERTED)[0] == 't';
        print_json(og_wh_row_json(r, 0, &key, id, created));
        og_seal_key_clear(&key);
    }
    PQclear(r);
    return rc;
}

/* A new secret sealed for tenant `id`; NULL after saying why. */
static char *webhook_new_secret(const og_config_t *cfg, const char *id)
{
    char secret[OG_WH_SECRET_LEN + 1];
    og_seal_key_t key;
    og_wh_secret_new(secret);
    char *sealed = og_wh_seal_key(&key, cfg->secret) ? og_seal(&key, id, secret, strlen(secret)) : NULL;
    og_seal_key_clear(&key);
    OPENSSL_cleanse(secret, sizeof(secret));
    if (sealed == NULL)
        fprintf(stderr, "omnigate: cannot seal the webhook secret\n");
    return sealed;
}

static int admin_set_webhook(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    char id[37], events[OG_WH_EVENTS_LIT];
    if (!webhook_tenant(argv[1], id))
        return 2;
    og_err_t err = {0};
    json_t *list = NULL;
    if (argc == 4) { /* a comma-separated list */
        list = json_array();
        for (const char *p = argv[3]; *p;) {
            size_t n = strcspn(p, ",");
            json_array_append_new(list, json_stringn(p, n));
            p += n + (p[n] == ',');
        }
    }
    bool ok = og_wh_url_check(argv[2], cfg->webhook_allow_http, cfg->webhook_allow_private, &err) &&
              og_wh_events_parse(list, events, &err);
    json_decref(list);
    if (!ok) {
        fprintf(stderr, "omnigate: set-webhook: %s: %s\n", err.field, err.message);
        return 2;
    }
    char *sealed = webhook_new_secret(cfg, id);
    if (sealed == NULL)
        return 1;
    og_db_call_t stmt;
    og_q_wh_put(&stmt, &(og_q_wh_put_t){.tenant_id = id, .url = argv[2], .events = events, .secret = sealed});
    int rc = webhook_result(cfg, run(pg, &stmt), id, false, "no such tenant");
    free(sealed);
    return rc;
}

/* get-webhook and delete-webhook: one statement on the tenant's id, og_q_wh_get or og_q_wh_delete
 * (one parameter type). */
static int webhook_by_tenant(PGconn *pg, const og_config_t *cfg, const char *arg,
                             og_db_call_t *(*bind)(og_db_call_t *, const og_q_wh_get_t *))
{
    char id[37];
    if (!webhook_tenant(arg, id))
        return 2;
    og_db_call_t stmt;
    bind(&stmt, &(og_q_wh_get_t){.tenant_id = id});
    return webhook_result(cfg, run(pg, &stmt), id, false, "the tenant has no webhook");
}

static int admin_get_webhook(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    return webhook_by_tenant(pg, cfg, argv[1], og_q_wh_get);
}

static int admin_delete_webhook(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    return webhook_by_tenant(pg, cfg, argv[1], og_q_wh_delete);
}

static int admin_rotate_webhook(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    char id[37];
    if (!webhook_tenant(argv[1], id))
        return 2;
    char *sealed = webhook_new_secret(cfg, id);
    if (sealed == NULL)
        return 1;
    og_db_call_t stmt;
    og_q_wh_rotate(&stmt, &(og_q_wh_rotate_t){.tenant_id = id, .secret = sealed});
    int rc = webhook_result(cfg, run(pg, &stmt), id, true, "the tenant has no webhook");
    free(sealed);
    return rc;
}

/* The admin verbs: dispatch and the usage lines both walk this table, so the usage cannot
 * promise what dispatch refuses. */
typedef struct admin_verb {
    const char *name;
    int min_args, max_args; /* words after the verb */
    const char *synopsis;   /* the arguments, as the usage shows them */
    const char *desc;       /* one line; NULL: the synopsis says enough */
    admin_fn *fn;
} admin_verb_t;

static const admin_verb_t admin_verbs[] = {
    {"list-tenants", 0, 3, "[limit=N] [cursor=ID] [name=TEXT]",
     "a page of tenants, newest first (name: part of it, any case)", admin_list_tenants},
    {"create-tenant", 1, 2, "NAME [unified]", "create a tenant (locked unless \"unified\")",
     admin_create_tenant},
    {"get-tenant", 1, 1, "TENANT_ID", NULL, admin_get_tenant},
    {"enable-unified", 1, 1, "TENANT_ID", "unlock the unified API for the tenant", admin_enable_unified},
    {"lock-unified", 1, 1, "TENANT_ID", NULL, admin_lock_unified},
    {"set-settings", 2, 2, "TENANT_ID JSON", "replace the tenant's settings (API.md section 5)",
     admin_set_settings},
    {"create-token", 1, 2, "TENANT_ID [NAME]", "create a token with scopes send, otp, logs; printed once",
     admin_create_token},
    {"revoke-token", 2, 2, "TENANT_ID TOKEN_ID", NULL, admin_revoke_token},
    {"logs", 2, 11, "TENANT_ID omni|sms|otp [FILTER=VALUE...]",
     "a page of a log; filters as the API's (to, status, ...)", admin_logs},
    {"set-webhook", 2, 3, "TENANT_ID URL [EVENTS]",
     "create or change the tenant's webhook (EVENTS: comma-separated, default all); a new secret is printed "
     "once",
     admin_set_webhook},
    {"get-webhook", 1, 1, "TENANT_ID", "the tenant's webhook, its secret masked", admin_get_webhook},
    {"delete-webhook", 1, 1, "TENANT_ID", NULL, admin_delete_webhook},
    {"rotate-webhook-secret", 1, 1, "TENANT_ID", "a new signing secret, printed once", admin_rotate_webhook},
};

#define NVERBS (sizeof(admin_verbs) / sizeof(admin_verbs[0]))

static int admin_verb(PGconn *pg, const og_config_t *cfg, int argc, char **argv)
{
    for (size_t i = 0; i < NVERBS; i++) {
        const admin_verb_t *v = &admin_verbs[i];
        if (strcmp(argv[0], v->name) == 0 && argc - 1 >= v->min_args && argc - 1 <= v->max_args)
            return v->fn(pg, cfg, argc, argv);
    }
    fprintf(stderr, "omnigate: admin: unknown verb or wrong arguments: %s (try omnigate --help)\n", argv[0]);
    return 2;
}

void og_cli_admin_usage(FILE *out)
{
    char words[64];
    for (size_t i = 0; i < NVERBS; i++) {
        const admin_verb_t *v = &admin_verbs[i];
        snprintf(words, sizeof(words), "%s %s", v->name, v->synopsis);
        if (v->desc != NULL && strlen(words) >= 32) /* a long synopsis: the description below it */
            fprintf(out, "  admin %s\n  %-38s%s\n", words, "", v->desc);
        else if (v->desc != NULL)
            fprintf(out, "  admin %-32s%s\n", words, v->desc);
        else
            fprintf(out, "  admin %s\n", words);
    }
}

int og_cli_admin(const og_config_t *cfg, int argc, char **argv)
{
    if (argc < 1) {
        og_cli_admin_usage(stderr);
        return 2;
    }
    if (!need_db(cfg, "admin"))
        return 2;
    if (cfg->secret == NULL) {
        fprintf(stderr, "omnigate: OMNIGATE_SECRET: required by admin (tokens are stored as its HMAC)\n");
        return 2;
    }
    PGconn *pg = connect_db(cfg);
    if (pg == NULL)
        return 1;
    int rc = admin_verb(pg, cfg, argc, argv);
    PQfinish(pg);
    return rc;
}

/* ---- prune -------------------------------------------------------------------------------- */

/* Deletes what was created before `before` in batches of `batch`; prints the counts. */
static int prune_run(PGconn *pg, const char *before, long batch)
{
    og_db_call_t stmt;
    og_q_prune_check(&stmt, &(og_q_prune_check_t){.before = before});
    PGresult *r = run(pg, &stmt);
    if (r == NULL) {
        fprintf(stderr, "omnigate: prune: --before must be a date (YYYY-MM-DD) or an RFC 3339 time\n");
        return 2;
    }
    char when[40];
    snprintf(when, sizeof(when), "%s", PQgetvalue(r, 0, OG_C_PRUNE_CHECK_BEFORE));
    bool old_enough = PQgetvalue(r, 0, OG_C_PRUNE_CHECK_OLD_ENOUGH)[0] == 't';
    PQclear(r);
    if (!old_enough) {
        fprintf(stderr,
                "omnigate: prune: --before %s is less than 24 hours ago; sends may still be in flight "
                "and idempotency keys live 24 h\n",
                when);
        return 2;
    }
    /* Records go by their reference's time, the time the gateway made them (sql/009). */
    int64_t before_ms = 0;
    char before_ref[OG_IDS_REFERENCE_SIZE];
    if (!og_time_parse_rfc3339(when, &before_ms)) {
        fprintf(stderr, "omnigate: prune: cannot read back --before as %s\n", when);
        return 2;
    }
    og_ids_reference_floor(before_ref, before_ms < 0 ? 0 : (uint64_t)before_ms);
    PGresult *tenants = run(pg, og_q_prune_tenants(&stmt));
    if (tenants == NULL)
        return 1;
    char limit[16];
    snprintf(limit, sizeof(limit), "%ld", batch);
    long long deleted = 0, batches = 0, idem = 0;
    int rc = 0;
    for (int t = 0; t < PQntuples(tenants) && rc == 0; t++) {
        /* One short transaction per batch: writers never wait on us. The log data first (by
         * reference), then the webhook deliveries that are done with, and their tries (by time). */
        const char *tenant_id = PQgetvalue(tenants, t, OG_C_PRUNE_TENANTS_ID);
        og_db_call_t pieces[3];
        og_q_prune_batch(&pieces[0],
                         &(og_q_prune_batch_t){.tenant_id = tenant_id, .before = before_ref, .batch = limit});
        og_q_prune_webhooks(&pieces[1],
                            &(og_q_prune_webhooks_t){.tenant_id = tenant_id, .before = when, .batch = limit});
        og_q_prune_inbound(&pieces[2],
                           &(og_q_prune_inbound_t){.tenant_id = tenant_id, .before = when, .batch = limit});
        static const int deleted_col[3] = {OG_C_PRUNE_BATCH_DELETED, OG_C_PRUNE_WEBHOOKS_DELETED,
                                           OG_C_PRUNE_INBOUND_DELETED};
        for (int k = 0; k < 3 && rc == 0; k++) {
            long n = batch;
            while (n > 0) {
                PGresult *b = run(pg, &pieces[k]);
                if (b == NULL) {
                    rc = 1;
                    break;
                }
                n = atol(PQgetvalue(b, 0, deleted_col[k]));
                PQclear(b);
                batches++;
                deleted += n;
            }
        }
    }
    PQclear(tenants);
    while (rc == 0) {
        og_q_prune_idem(&stmt, &(og_q_prune_idem_t){.batch = limit});
        PGresult *b = run(pg, &stmt);
        if (b == NULL) {
            rc = 1;
            break;
        }
        long n = atol(PQcmdTuples(b));
        PQclear(b);
        idem += n;
        if (n < batch)
            break;
    }
    printf("{\"before\":\"%s\",\"rowsDeleted\":%lld,\"batches\":%lld,\"idempotencyKeysDeleted\":%lld,"
           "\"ok\":%s}\n",
           when, deleted, batches, idem, rc == 0 ? "true" : "false");
    return rc;
}

int og_cli_prune(const og_config_t *cfg, int argc, char **argv)
{
    const char *before = NULL, *batch_s = "1000";
    for (int i = 0; i < argc; i++) {
        const char **dst = strncmp(argv[i], "--before", 8) == 0  ? &before
                           : strncmp(argv[i], "--batch", 7) == 0 ? &batch_s
                                                                 : NULL;
        const char *eq = strchr(argv[i], '=');
        if (dst == NULL || (eq == NULL && i + 1 >= argc)) {
            fprintf(stderr, "omnigate: usage: omnigate prune --before DATE [--batch N]\n");
            return 2;
        }
        *dst = eq != NULL ? eq + 1 : argv[++i];
    }
    char *end = NULL;
    long batch = strtol(batch_s, &end, 10);
    if (before == NULL || *end != '\0' || batch < 1 || batch > 100000) {
        fprintf(stderr, "omnigate: usage: omnigate prune --before DATE [--batch N] (N from 1 to 100000)\n");
        return 2;
    }
    if (!need_db(cfg, "prune"))
        return 2;
    PGconn *pg = connect_db(cfg);
    if (pg == NULL)
        return 1;
    int rc = prune_run(pg, before, batch);
    PQfinish(pg);
    return rc;
}
