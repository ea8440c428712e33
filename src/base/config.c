/*
 * Configuration. See include/base/omnigate/config.h.
 *
 * Every setting is one row of `settings`: parsing, validation, --help and the README table
 * are all driven by it. Loading first collects the raw text of each setting (default, then
 * environment, then flags: the last source wins) and only then converts and validates the
 * final values, so a flag can repair a bad environment variable and every error names the
 * variable whatever the source.
 */
#include "omnigate/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef enum { CFG_STRING, CFG_INT, CFG_SIZE, CFG_BOOL, CFG_ENUM } cfg_type_t;

enum {
    CFG_SECRET = 1 << 0,      /* never echoed in errors or help */
    CFG_URL = 1 << 1,         /* must start with http:// or https:// */
    CFG_LISTEN = 1 << 2,      /* host:port, split into listen_host / listen_port */
    CFG_CPU_DEFAULT = 1 << 3, /* default is the number of online CPUs */
};

typedef struct cfg_entry {
    const char *name; /* short name, for readers of this table */
    const char *env;
    const char *flag;
    cfg_type_t type;
    const char *def;            /* default as text; NULL: unset (strings) or computed (CFG_CPU_DEFAULT) */
    long long min, max;         /* CFG_INT/CFG_SIZE: range; CFG_STRING: min = minimum length when set */
    const char *const *choices; /* CFG_ENUM: NULL-terminated */
    unsigned flags;
    size_t offset; /* into og_config_t */
    const char *desc;
} cfg_entry_t;

static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};

#define OFF(field) offsetof(og_config_t, field)

static const cfg_entry_t settings[] = {
    {"listen", "OMNIGATE_LISTEN", "--listen", CFG_STRING, "127.0.0.1:8080", 0, 0, NULL, CFG_LISTEN,
     OFF(listen), "address to listen on: host:port, [ipv6]:port or :port (all IPv4 interfaces)"},
    {"workers", "OMNIGATE_WORKERS", "--workers", CFG_INT, NULL, 1, 256, NULL, CFG_CPU_DEFAULT, OFF(workers),
     "number of worker processes"},
    {"database_url", "OMNIGATE_DATABASE_URL", "--database-url", CFG_STRING, NULL, 0, 0, NULL, CFG_SECRET,
     OFF(database_url), "PostgreSQL connection string (libpq conninfo or URI)"},
    {"auto_migrate", "OMNIGATE_AUTO_MIGRATE", "--auto-migrate", CFG_BOOL, "false", 0, 0, NULL, 0,
     OFF(auto_migrate),
     "serve: apply pending schema migrations before starting (else refuse an older schema)"},
    {"db_pool", "OMNIGATE_DB_POOL", "--db-pool", CFG_INT, "2", 1, 64, NULL, 0, OFF(db_pool),
     "database connections per worker"},
    {"db_prepared", "OMNIGATE_DB_PREPARED", "--db-prepared", CFG_BOOL, "true", 0, 0, NULL, 0,
     OFF(db_prepared),
     "prepare the statements once per connection; false sends each with its text (unnamed statements), "
     "for a transaction pooler that does not keep prepared statements (PgBouncer before 1.21)"},
    {"db_listen", "OMNIGATE_DB_LISTEN", "--db-listen", CFG_BOOL, "true", 0, 0, NULL, 0, OFF(db_listen),
     "keep one LISTEN connection per worker for wake-ups of due steps; false: a timer finds them within "
     "1 s"},
    {"database_listen_url", "OMNIGATE_DATABASE_LISTEN_URL", "--database-listen-url", CFG_STRING, NULL, 0, 0,
     NULL, CFG_SECRET, OFF(database_listen_url),
     "PostgreSQL connection string of the LISTEN connection (unset: OMNIGATE_DATABASE_URL); set it to the "
     "server itself when OMNIGATE_DATABASE_URL goes through a transaction pooler"},
    {"db_timeout_ms", "OMNIGATE_DB_TIMEOUT_MS", "--db-timeout-ms", CFG_INT, "5000", 100, 600000, NULL, 0,
     OFF(db_timeout_ms),
     "deadline of a database operation and of a connection attempt, in milliseconds: past it the request "
     "answers 503 and the connection is rebuilt"},
    {"database_read_url", "OMNIGATE_DATABASE_READ_URL", "--database-read-url", CFG_STRING, NULL, 0, 0, NULL,
     CFG_SECRET, OFF(database_read_url),
     "PostgreSQL connection string for log queries only, e.g. a streaming replica (unset: "
     "OMNIGATE_DATABASE_URL); see docs/persistence.md for the lag a reader may see"},
    {"db_read_pool", "OMNIGATE_DB_READ_POOL", "--db-read-pool", CFG_INT, "1", 1, 64, NULL, 0,
     OFF(db_read_pool),
     "database connections per worker for log queries, apart from the write path's; each runs one query at a "
     "time"},
    {"log_query_timeout_ms", "OMNIGATE_LOG_QUERY_TIMEOUT_MS", "--log-query-timeout-ms", CFG_INT, "5000", 100,
     600000, NULL, 0, OFF(log_query_timeout_ms),
     "statement_timeout of log queries, in milliseconds: the server cancels a longer one and the request "
     "answers 503 query_timeout"},
    {"admin_token", "OMNIGATE_ADMIN_TOKEN", "--admin-token", CFG_STRING, NULL, 16, 0, NULL, CFG_SECRET,
     OFF(admin_token), "bearer token of the admin API (at least 16 characters)"},
    {"secret", "OMNIGATE_SECRET", "--secret", CFG_STRING, NULL, 16, 0, NULL, CFG_SECRET, OFF(secret),
     "HMAC key for token and OTP hashes (at least 16 characters)"},
    {"attempt_timeout_ms", "OMNIGATE_ATTEMPT_TIMEOUT_MS", "--attempt-timeout-ms", CFG_INT, "10000", 100,
     600000, NULL, 0, OFF(attempt_timeout_ms), "timeout of one provider attempt, in milliseconds"},
    {"max_body_bytes", "OMNIGATE_MAX_BODY_BYTES", "--max-body-bytes", CFG_SIZE, "65536", 1024, 67108864, NULL,
     0, OFF(max_body_bytes), "largest accepted request body, in bytes (413 above)"},
    {"max_header_bytes", "OMNIGATE_MAX_HEADER_BYTES", "--max-header-bytes", CFG_SIZE, "16384", 1024, 1048576,
     NULL, 0, OFF(max_header_bytes), "largest accepted request line plus headers, in bytes (431 above)"},
    {"header_timeout_ms", "OMNIGATE_HEADER_TIMEOUT_MS", "--header-timeout-ms", CFG_INT, "10000", 100, 3600000,
     NULL, 0, OFF(header_timeout_ms),
     "time allowed to receive the request line and headers, in milliseconds"},
    {"body_timeout_ms", "OMNIGATE_BODY_TIMEOUT_MS", "--body-timeout-ms", CFG_INT, "30000", 100, 3600000, NULL,
     0, OFF(body_timeout_ms), "time allowed to receive the request body, in milliseconds"},
    {"idle_timeout_ms", "OMNIGATE_IDLE_TIMEOUT_MS", "--idle-timeout-ms", CFG_INT, "60000", 100, 3600000, NULL,
     0, OFF(idle_timeout_ms), "keep-alive connection idle time before closing, in milliseconds"},
    {"drain_timeout_ms", "OMNIGATE_DRAIN_TIMEOUT_MS", "--drain-timeout-ms", CFG_INT, "30000", 100, 3600000,
     NULL, 0, OFF(drain_timeout_ms), "time allowed to finish in-flight work on SIGTERM, in milliseconds"},
    {"drain_delay_ms", "OMNIGATE_DRAIN_DELAY_MS", "--drain-delay-ms", CFG_INT, "1000", 0, 60000, NULL, 0,
     OFF(drain_delay_ms),
     "on SIGTERM, keep accepting (answering /readyz 503) this long so load balancers route away first"},
    {"auth_ttl_ms", "OMNIGATE_AUTH_TTL_MS", "--auth-ttl-ms", CFG_INT, "1000", 10, 1000, NULL, 0,
     OFF(auth_ttl_ms),
     "how long a worker trusts a cached token and tenant, in milliseconds (a revocation or plan change "
     "takes effect within it; tests shorten it)"},
    {"not_on_whatsapp_ttl_s", "OMNIGATE_NOT_ON_WHATSAPP_TTL_S", "--not-on-whatsapp-ttl-s", CFG_INT, "86400",
     1, 31536000, NULL, 0, OFF(not_on_whatsapp_ttl_s),
     "how long a number a provider said has no WhatsApp is skipped on the WhatsApp channels, in seconds "
     "(API.md §13)"},
    {"template_sync_s", "OMNIGATE_TEMPLATE_SYNC_S", "--template-sync-s", CFG_INT, "3600", 10, 604800, NULL, 0,
     OFF(template_sync_s),
     "how often each WABA's WhatsApp template catalogue is read again from Meta, in seconds (API.md §18)"},
    {"queue_validity_s", "OMNIGATE_QUEUE_VALIDITY_S", "--queue-validity-s", CFG_INT, "36000", 10, 172800,
     NULL, 0, OFF(queue_validity_s),
     "default validitySeconds of a queued send: how long after its due time it may still be handed to a "
     "provider, in seconds (API.md §19)"},
    {"batch_max", "OMNIGATE_BATCH_MAX", "--batch-max", CFG_INT, "1000", 1, 10000, NULL, 0, OFF(batch_max),
     "the most messages one POST /api/omni/batches may hold (API.md §20); more: 413 batch_too_large"},
    {"meta_default_mps", "OMNIGATE_META_DEFAULT_MPS", "--meta-default-mps", CFG_INT, "80", 1, 100000, NULL, 0,
     OFF(meta_default_mps),
     "pacing rate of a whatsapp_meta number without numbers.{n}.messagesPerSecond, in messages per second "
     "(API.md §19)"},
    {"sms_default_mps", "OMNIGATE_SMS_DEFAULT_MPS", "--sms-default-mps", CFG_INT, "10", 1, 100000, NULL, 0,
     OFF(sms_default_mps),
     "pacing rate of an SMS sender id without channels.sms.messagesPerSecond, in segments per second "
     "(API.md §19)"},
    {"qr_default_per_minute", "OMNIGATE_QR_DEFAULT_PER_MINUTE", "--qr-default-per-minute", CFG_INT, "20", 1,
     6000000, NULL, 0, OFF(qr_default_per_minute),
     "pacing rate of a whatsapp_qr session without numbers.{n}.messagesPerMinute, in messages per minute "
     "(API.md §19)"},
    {"circuit_breaker", "OMNIGATE_CIRCUIT_BREAKER", "--circuit-breaker", CFG_BOOL, "true", 0, 0, NULL, 0,
     OFF(circuit_breaker),
     "stop calling a provider channel that keeps failing, per worker (API.md §13; false only to measure "
     "without it)"},
    {"access_log", "OMNIGATE_ACCESS_LOG", "--access-log", CFG_BOOL, "true", 0, 0, NULL, 0, OFF(access_log),
     "write one log line per request (true/false, yes/no, on/off, 1/0)"},
    {"log_level", "OMNIGATE_LOG_LEVEL", "--log-level", CFG_ENUM, "info", 0, 0, log_levels, 0, OFF(log_level),
     "log level: error, warn, info or debug"},
    {"meta_base_url", "OMNIGATE_META_BASE_URL", "--meta-base-url", CFG_STRING, "https://graph.facebook.com",
     0, 0, NULL, CFG_URL, OFF(meta_base_url), "base URL of the WhatsApp Business Cloud API (whatsapp_meta)"},
    {"meta_api_version", "OMNIGATE_META_API_VERSION", "--meta-api-version", CFG_STRING, "v21.0", 0, 0, NULL,
     0, OFF(meta_api_version), "Graph API version used in whatsapp_meta URLs"},
    {"qr_base_url", "OMNIGATE_QR_BASE_URL", "--qr-base-url", CFG_STRING, NULL, 0, 0, NULL, CFG_URL,
     OFF(qr_base_url), "base URL of the WAHA session bridge (whatsapp_qr)"},
    {"qr_api_key", "OMNIGATE_QR_API_KEY", "--qr-api-key", CFG_STRING, NULL, 0, 0, NULL, CFG_SECRET,
     OFF(qr_api_key), "X-Api-Key of the WAHA session bridge"},
    {"sms_base_url", "OMNIGATE_SMS_BASE_URL", "--sms-base-url", CFG_STRING, "https://api.twilio.com", 0, 0,
     NULL, CFG_URL, OFF(sms_base_url), "base URL of the Twilio-compatible Messages API (sms)"},
    {"sms_account_sid", "OMNIGATE_SMS_ACCOUNT_SID", "--sms-account-sid", CFG_STRING, NULL, 0, 0, NULL, 0,
     OFF(sms_account_sid), "account SID of the SMS provider"},
    {"sms_auth_token", "OMNIGATE_SMS_AUTH_TOKEN", "--sms-auth-token", CFG_STRING, NULL, 0, 0, NULL,
     CFG_SECRET, OFF(sms_auth_token), "auth token of the SMS provider"},
    {"public_url", "OMNIGATE_PUBLIC_URL", "--public-url", CFG_STRING, NULL, 0, 0, NULL, CFG_URL,
     OFF(public_url),
     "externally visible base URL of this gateway, for provider callback URLs and Twilio's signature"},
    {"meta_app_secret", "OMNIGATE_META_APP_SECRET", "--meta-app-secret", CFG_STRING, NULL, 0, 0, NULL,
     CFG_SECRET, OFF(meta_app_secret),
     "Meta app secret: checks X-Hub-Signature-256 of POST /webhooks/meta (unset: the route is 404)"},
    {"meta_verify_token", "OMNIGATE_META_VERIFY_TOKEN", "--meta-verify-token", CFG_STRING, NULL, 0, 0, NULL,
     CFG_SECRET, OFF(meta_verify_token),
     "verify token of Meta's webhook subscription (GET /webhooks/meta; unset: the route is 404)"},
    {"qr_webhook_secret", "OMNIGATE_QR_WEBHOOK_SECRET", "--qr-webhook-secret", CFG_STRING, NULL, 0, 0, NULL,
     CFG_SECRET, OFF(qr_webhook_secret),
     "HMAC key of WAHA's webhook (X-Webhook-Hmac of POST /webhooks/waha; unset: the route is 404)"},
    {"webhook_allow_http", "OMNIGATE_WEBHOOK_ALLOW_HTTP", "--webhook-allow-http", CFG_BOOL, "false", 0, 0,
     NULL, 0, OFF(webhook_allow_http), "tenant webhooks may use http:// URLs (else https:// only)"},
    {"webhook_allow_private", "OMNIGATE_WEBHOOK_ALLOW_PRIVATE", "--webhook-allow-private", CFG_BOOL, "false",
     0, 0, NULL, 0, OFF(webhook_allow_private),
     "tenant webhooks may call loopback, private, link-local, CGNAT and other non-public addresses (else "
     "such a delivery fails blocked_address)"},
    {"webhook_timeout_ms", "OMNIGATE_WEBHOOK_TIMEOUT_MS", "--webhook-timeout-ms", CFG_INT, "15000", 100,
     60000, NULL, 0, OFF(webhook_timeout_ms),
     "time a tenant webhook has to answer 2xx, in milliseconds (API.md section 12 says 15 s; tests shorten "
     "it)"},
    {"webhook_retry_divisor", "OMNIGATE_WEBHOOK_RETRY_DIVISOR", "--webhook-retry-divisor", CFG_INT, "1", 1,
     10000000, NULL, 0, OFF(webhook_retry_divisor),
     "tests only: divides every delay of the webhook retry schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 "
     "h); "
     "leave 1 in production"},
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

/* Longest user value echoed back in an error line. */
#define ECHO_MAX 64

static bool fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* Names the setting for an error line: the variable, plus the flag when the value came from it. */
static const char *setting_label(const cfg_entry_t *e, bool from_flag, char *buf, size_t buflen)
{
    if (from_flag)
        snprintf(buf, buflen, "%s (%s)", e->env, e->flag);
    else
        snprintf(buf, buflen, "%s", e->env);
    return buf;
}

static int cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > 256 ? 256 : (int)n;
}

/* Decimal integer: optional '-', then 1-18 digits and nothing else (no spaces, no '+'). */
static bool parse_ll(const char *s, long long *out)
{
    const char *p = s;
    if (*p == '-')
        p++;
    size_t n = strspn(p, "0123456789");
    if (n == 0 || n > 18 || p[n] != '\0')
        return false;
    errno = 0;
    *out = strtoll(s, NULL, 10);
    return errno == 0;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool parse_port(const char *s, int *out)
{
    long long v;
    if (*s == '-' || !parse_ll(s, &v) || v < 1 || v > 65535)
        return false;
    *out = (int)v;
    return true;
}

/* "host:port", "[v6]:port" or ":port". The host must be a numeric address: the listener
 * does not resolve names, and a name that cannot be bound should stop us here, not later. */
static bool parse_listen(const char *s, og_config_t *cfg)
{
    char host[sizeof(cfg->listen_host)];
    const char *port;
    unsigned char addr[16];
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return false;
        size_t hlen = (size_t)(close - s - 1);
        if (hlen == 0 || hlen >= sizeof(host))
            return false;
        memcpy(host, s + 1, hlen);
        host[hlen] = '\0';
        if (inet_pton(AF_INET6, host, addr) != 1)
            return false;
        port = close + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon == NULL)
            return false;
        size_t hlen = (size_t)(colon - s);
        if (hlen >= sizeof(host))
            return false;
        memcpy(host, s, hlen);
        host[hlen] = '\0';
        if (hlen == 0)
            strcpy(host, "0.0.0.0");
        else if (inet_pton(AF_INET, host, addr) != 1)
            return false;
        port = colon + 1;
    }
    if (!parse_port(port, &cfg->listen_port))
        return false;
    memcpy(cfg->listen_host, host, sizeof(host));
    return true;
}

/* Converts and stores the final text of one setting. `raw` is NULL for an unset string. */
static bool apply(const cfg_entry_t *e, const char *raw, bool from_flag, og_config_t *cfg, char *err,
                  size_t errlen)
{
    char *base = (char *)cfg;
    char label[96];
    setting_label(e, from_flag, label, sizeof(label));
    switch (e->type) {
    case CFG_INT:
    case CFG_SIZE: {
        long long v;
        if (e->flags & CFG_CPU_DEFAULT && raw == NULL) {
            v = cpu_count();
        } else if (!parse_ll(raw, &v) || v < e->min || v > e->max) {
            return fail(err, errlen, "%s: must be an integer between %lld and %lld, got \"%.*s\"", label,
                        e->min, e->max, ECHO_MAX, raw);
        }
        if (e->type == CFG_INT)
            *(int *)(base + e->offset) = (int)v;
        else
            *(size_t *)(base + e->offset) = (size_t)v;
        return true;
    }
    case CFG_BOOL:
        if (!parse_bool(raw, (bool *)(base + e->offset)))
            return fail(err, errlen, "%s: must be one of true, false, yes, no, on, off, 1, 0, got \"%.*s\"",
                        label, ECHO_MAX, raw);
        return true;
    case CFG_ENUM:
        for (const char *const *c = e->choices; *c != NULL; c++) {
            if (strcasecmp(raw, *c) == 0) {
                char *copy = strdup(*c);
                if (copy == NULL)
                    return fail(err, errlen, "%s: out of memory", label);
                *(char **)(base + e->offset) = copy;
                return true;
            }
        }
        {
            char list[128] = "";
            size_t len = 0;
            for (const char *const *c = e->choices; *c != NULL && len < sizeof(list); c++)
                len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", len ? ", " : "", *c);
            return fail(err, errlen, "%s: must be one of %s, got \"%.*s\"", label, list, ECHO_MAX, raw);
        }
    case CFG_STRING:
        break;
    }

    /* Strings. An empty value of a setting without default means unset, so that
     * `OMNIGATE_QR_API_KEY=` in a compose file behaves like leaving it out. */
    if (raw != NULL && raw[0] == '\0' && e->def == NULL)
        raw = NULL;
    if (raw == NULL)
        return true;
    if (e->flags & CFG_SECRET) {
        if (e->min > 0 && strlen(raw) < (size_t)e->min)
            return fail(err, errlen, "%s: must be at least %lld characters long (value not shown)", label,
                        e->min);
    } else if (e->flags & CFG_URL) {
        if (strncmp(raw, "http://", 7) != 0 && strncmp(raw, "https://", 8) != 0)
            return fail(err, errlen, "%s: must be a URL starting with http:// or https://, got \"%.*s\"",
                        label, ECHO_MAX, raw);
    } else if (e->flags & CFG_LISTEN) {
        if (!parse_listen(raw, cfg))
            return fail(err, errlen,
                        "%s: must be host:port, [ipv6]:port or :port with a numeric address and a port "
                        "between 1 and 65535, got \"%.*s\"",
                        label, ECHO_MAX, raw);
    } else if (raw[0] == '\0') {
        return fail(err, errlen, "%s: must not be empty", label);
    }
    char *copy = strdup(raw);
    if (copy == NULL)
        return fail(err, errlen, "%s: out of memory", label);
    *(char **)(base + e->offset) = copy;
    return true;
}

static const cfg_entry_t *find_env(const char *kv, size_t name_len)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strlen(settings[i].env) == name_len && memcmp(settings[i].env, kv, name_len) == 0)
            return &settings[i];
    return NULL;
}

static const cfg_entry_t *find_flag(const char *arg, size_t len)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strlen(settings[i].flag) == len && memcmp(settings[i].flag, arg, len) == 0)
            return &settings[i];
    return NULL;
}

/* Arguments that look like flags but are commands for main.c. */
/* Words that belong to a command rather than to the settings: passed on as positionals.
 * (`omnigate prune --before DATE --batch N`.) */
static bool is_command_word(const char *arg)
{
    static const char *const words[] = {"--help", "-h", "--version", "--before", "--batch", NULL};
    for (const char *const *w = words; *w; w++)
        if (strcmp(arg, *w) == 0 || (strncmp(arg, *w, strlen(*w)) == 0 && arg[strlen(*w)] == '='))
            return true;
    return false;
}

bool og_config_load(og_config_t *cfg, char *const *envp, int argc, char **argv, char **rest, int *nrest,
                    char *err, size_t errlen)
{
    const char *raw[NSETTINGS];
    bool from_flag[NSETTINGS];
    int cap = (rest != NULL && nrest != NULL) ? *nrest : 0;
    int count = 0;

    memset(cfg, 0, sizeof(*cfg));
    if (nrest != NULL)
        *nrest = 0;
    if (err != NULL && errlen > 0)
        err[0] = '\0';

    for (size_t i = 0; i < NSETTINGS; i++) {
        raw[i] = settings[i].def;
        from_flag[i] = false;
    }

    /* The environment: only our own variables; unknown OMNIGATE_* ones are ignored so that
     * an older binary runs with a newer deployment's environment. The first occurrence
     * wins, as with getenv(3). */
    bool seen[NSETTINGS] = {false};
    for (char *const *ep = envp; ep != NULL && *ep != NULL; ep++) {
        const char *kv = *ep;
        const char *eq = strchr(kv, '=');
        if (strncmp(kv, "OMNIGATE_", 9) != 0 || eq == NULL)
            continue;
        const cfg_entry_t *e = find_env(kv, (size_t)(eq - kv));
        if (e == NULL)
            continue;
        size_t i = (size_t)(e - settings);
        if (!seen[i]) {
            seen[i] = true;
            raw[i] = eq + 1;
        }
    }

    bool only_positionals = false;
    for (int a = 0; a < argc; a++) {
        const char *arg = argv[a];
        if (!only_positionals && strcmp(arg, "--") == 0) {
            only_positionals = true;
            continue;
        }
        if (only_positionals || strncmp(arg, "--", 2) != 0 || is_command_word(arg)) {
            if (count >= cap)
                return fail(err, errlen, "too many arguments (at \"%.*s\")", ECHO_MAX, arg);
            rest[count++] = argv[a];
            *nrest = count;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t flen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        const cfg_entry_t *e = find_flag(arg, flen);
        if (e == NULL)
            return fail(err, errlen, "unknown flag %.*s (see omnigate --help)",
                        (int)(flen > ECHO_MAX ? ECHO_MAX : flen), arg);
        size_t i = (size_t)(e - settings);
        if (eq != NULL) {
            raw[i] = eq + 1;
        } else {
            if (a + 1 >= argc)
                return fail(err, errlen, "%s: missing value", e->flag);
            raw[i] = argv[++a];
        }
        from_flag[i] = true;
    }

    for (size_t i = 0; i < NSETTINGS; i++)
        if (!apply(&settings[i], raw[i], from_flag[i], cfg, err, errlen))
            return false;
    return true;
}

void og_config_free(og_config_t *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < NSETTINGS; i++) {
        const cfg_entry_t *e = &settings[i];
        if (e->type == CFG_STRING || e->type == CFG_ENUM) {
            char **p = (char **)((char *)cfg + e->offset);
            free(*p);
            *p = NULL;
        }
    }
}

static const char *default_text(const cfg_entry_t *e)
{
    if (e->flags & CFG_CPU_DEFAULT)
        return "CPU count";
    return e->def != NULL ? e->def : "(unset)";
}

void og_config_usage(FILE *out)
{
    int wflag = (int)strlen("FLAG"), wenv = (int)strlen("VARIABLE"), wdef = (int)strlen("DEFAULT");
    for (size_t i = 0; i < NSETTINGS; i++) {
        const cfg_entry_t *e = &settings[i];
        int n = (int)strlen(e->flag);
        wflag = n > wflag ? n : wflag;
        n = (int)strlen(e->env);
        wenv = n > wenv ? n : wenv;
        n = (int)strlen(default_text(e));
        wdef = n > wdef ? n : wdef;
    }
    fprintf(out, "  %-*s  %-*s  %-*s  %s\n", wflag, "FLAG", wenv, "VARIABLE", wdef, "DEFAULT", "DESCRIPTION");
    for (size_t i = 0; i < NSETTINGS; i++) {
        const cfg_entry_t *e = &settings[i];
        fprintf(out, "  %-*s  %-*s  %-*s  %s\n", wflag, e->flag, wenv, e->env, wdef, default_text(e),
                e->desc);
    }
}

void og_config_markdown(FILE *out)
{
    fprintf(out, "| Variable | Flag | Default | Meaning |\n");
    fprintf(out, "|---|---|---|---|\n");
    for (size_t i = 0; i < NSETTINGS; i++) {
        const cfg_entry_t *e = &settings[i];
        if (e->def != NULL)
            fprintf(out, "| `%s` | `%s` | `%s` | %s |\n", e->env, e->flag, e->def, e->desc);
        else
            fprintf(out, "| `%s` | `%s` | %s | %s |\n", e->env, e->flag, default_text(e), e->desc);
    }
}
