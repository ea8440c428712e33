/*
 * Configuration: one table of typed settings (env var, --flag, default, validator) from
 * which parsing, `omnigate --help` and the README table all come. Responsible for turning
 * the environment and argv into an og_config_t or one line naming the bad setting; not for
 * acting on any of it.
 */
#ifndef OMNIGATE_CONFIG_H
#define OMNIGATE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct og_config {
    /* Listening address, split from OMNIGATE_LISTEN ("host:port", "[v6]:port" or ":port"). */
    char *listen;
    char listen_host[64];
    int listen_port;
    int workers;               /* OMNIGATE_WORKERS, default: CPU count */
    char *database_url;        /* OMNIGATE_DATABASE_URL, NULL when unset */
    bool auto_migrate;         /* OMNIGATE_AUTO_MIGRATE: serve migrates first, default false */
    int db_pool;               /* OMNIGATE_DB_POOL, connections per worker, default 2 */
    bool db_prepared;          /* OMNIGATE_DB_PREPARED, prepared statements, default true */
    bool db_listen;            /* OMNIGATE_DB_LISTEN, a LISTEN connection per worker, default true */
    char *database_listen_url; /* OMNIGATE_DATABASE_LISTEN_URL, NULL: database_url */
    int db_timeout_ms;         /* OMNIGATE_DB_TIMEOUT_MS, deadline of a database operation, default 5000 */
    char *admin_token;         /* OMNIGATE_ADMIN_TOKEN, NULL when unset */
    char *secret;              /* OMNIGATE_SECRET, NULL when unset */
    int attempt_timeout_ms;    /* OMNIGATE_ATTEMPT_TIMEOUT_MS, default 10000 */
    size_t max_body_bytes;     /* OMNIGATE_MAX_BODY_BYTES, default 65536 */
    size_t max_header_bytes;   /* OMNIGATE_MAX_HEADER_BYTES, default 16384 */
    int header_timeout_ms;     /* OMNIGATE_HEADER_TIMEOUT_MS, default 10000 */
    int body_timeout_ms;       /* OMNIGATE_BODY_TIMEOUT_MS, default 30000 */
    int idle_timeout_ms;       /* OMNIGATE_IDLE_TIMEOUT_MS, default 60000 */
    int drain_timeout_ms;      /* OMNIGATE_DRAIN_TIMEOUT_MS, default 30000 */
    int drain_delay_ms;        /* OMNIGATE_DRAIN_DELAY_MS, default 1000 */
    int auth_ttl_ms;           /* OMNIGATE_AUTH_TTL_MS, default 1000 */
    bool access_log;           /* OMNIGATE_ACCESS_LOG, default true */
    bool circuit_breaker;      /* OMNIGATE_CIRCUIT_BREAKER, default true */
    int not_on_whatsapp_ttl_s; /* OMNIGATE_NOT_ON_WHATSAPP_TTL_S, default 86400 */
    int template_sync_s;       /* OMNIGATE_TEMPLATE_SYNC_S, default 3600 */
    char *log_level;           /* OMNIGATE_LOG_LEVEL: error|warn|info|debug, default info */
    /* Providers (API.md §8); used from the unified-send issue on. */
    char *meta_base_url;    /* OMNIGATE_META_BASE_URL, default https://graph.facebook.com */
    char *meta_api_version; /* OMNIGATE_META_API_VERSION, default v21.0 */
    char *qr_base_url;      /* OMNIGATE_QR_BASE_URL, NULL when unset */
    char *qr_api_key;       /* OMNIGATE_QR_API_KEY */
    char *sms_base_url;     /* OMNIGATE_SMS_BASE_URL, default https://api.twilio.com */
    char *sms_account_sid;  /* OMNIGATE_SMS_ACCOUNT_SID */
    char *sms_auth_token;   /* OMNIGATE_SMS_AUTH_TOKEN */
    /* Delivery statuses in (API.md §10, §14). */
    char *public_url;        /* OMNIGATE_PUBLIC_URL, NULL when unset */
    char *meta_app_secret;   /* OMNIGATE_META_APP_SECRET, NULL: POST /webhooks/meta is 404 */
    char *meta_verify_token; /* OMNIGATE_META_VERIFY_TOKEN, NULL: GET /webhooks/meta is 404 */
    char *qr_webhook_secret; /* OMNIGATE_QR_WEBHOOK_SECRET, NULL: POST /webhooks/waha is 404 */
    /* Log queries (API.md §16, docs/persistence.md). */
    char *database_read_url;  /* OMNIGATE_DATABASE_READ_URL, NULL: database_url */
    int db_read_pool;         /* OMNIGATE_DB_READ_POOL, read connections per worker, default 1 */
    int log_query_timeout_ms; /* OMNIGATE_LOG_QUERY_TIMEOUT_MS, their statement_timeout, default 5000 */
    /* Tenant webhooks out (API.md §12, §14). */
    bool webhook_allow_http;    /* OMNIGATE_WEBHOOK_ALLOW_HTTP, default false */
    bool webhook_allow_private; /* OMNIGATE_WEBHOOK_ALLOW_PRIVATE, default false */
    int webhook_timeout_ms;     /* OMNIGATE_WEBHOOK_TIMEOUT_MS, default 15000 */
    int webhook_retry_divisor;  /* OMNIGATE_WEBHOOK_RETRY_DIVISOR, tests only, default 1 */
    /* Queued and paced delivery (API.md §19, §24); og_pacing_rate (queue/pacing.h) applies the rates. */
    int queue_validity_s;      /* OMNIGATE_QUEUE_VALIDITY_S, default validitySeconds: 36000 */
    int batch_max;             /* OMNIGATE_BATCH_MAX, messages per batch: 1000 */
    int meta_default_mps;      /* OMNIGATE_META_DEFAULT_MPS, whatsapp_meta messages/s, default 80 */
    int sms_default_mps;       /* OMNIGATE_SMS_DEFAULT_MPS, SMS segments/s, default 10 */
    int qr_default_per_minute; /* OMNIGATE_QR_DEFAULT_PER_MINUTE, whatsapp_qr messages/min, default 20 */
} og_config_t;

/* Fills `cfg` with defaults, then the environment (`envp`, NULL-terminated "K=V" strings;
 * pass `environ`), then `--flag value` / `--flag=value` pairs from argv[0..argc). Unknown
 * flags and invalid values are errors. On error returns false and writes one line naming the
 * setting (e.g. "OMNIGATE_WORKERS: must be an integer between 1 and 256, got \"x\"") into
 * `err`. Non-flag arguments are left alone and reported through `rest`/`nrest` (the command
 * and its arguments), in order: `*nrest` is the capacity of `rest` on entry and the count on
 * return; more is an error. "--help", "-h" and "--version" count as non-flag arguments, and
 * so does everything after "--". `cfg` may be passed to og_config_free even after an error. */
bool og_config_load(og_config_t *cfg, char *const *envp, int argc, char **argv, char **rest, int *nrest,
                    char *err, size_t errlen);

/* Frees the strings og_config_load allocated. */
void og_config_free(og_config_t *cfg);

/* Writes the settings table (flag, env var, default, description) for --help. */
void og_config_usage(FILE *out);

/* Writes the settings table as a Markdown table (for the README and docs). */
void og_config_markdown(FILE *out);

#endif
