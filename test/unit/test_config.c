/*
 * Unit tests of the configuration table (src/base/config.c): defaults, environment, flags,
 * validation messages and the generated help.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "omnigate/config.h"

typedef struct loaded {
    og_config_t cfg;
    bool ok;
    char err[512];
    char *rest[8];
    int nrest;
} loaded_t;

/* Loads with `env` (NULL-terminated) and `args` (NULL-terminated). */
static void load(loaded_t *l, char *const *env, char **args)
{
    int argc = 0;
    while (args != NULL && args[argc] != NULL)
        argc++;
    l->nrest = 8;
    l->ok = og_config_load(&l->cfg, env, argc, args, l->rest, &l->nrest, l->err, sizeof(l->err));
}

static const char *no_env[] = {NULL};

#define ENV(...)  ((char *const[]){__VA_ARGS__, NULL})
#define ARGS(...) ((char *[]){__VA_ARGS__, NULL})

static int expected_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

/* With no environment and no flags every setting has its documented default. */
static void test_defaults(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, NULL);
    assert_true(l.ok);
    assert_string_equal(l.cfg.listen, "127.0.0.1:8080");
    assert_string_equal(l.cfg.listen_host, "127.0.0.1");
    assert_int_equal(l.cfg.listen_port, 8080);
    assert_int_equal(l.cfg.workers, expected_workers());
    assert_null(l.cfg.database_url);
    assert_int_equal(l.cfg.db_pool, 2);
    assert_null(l.cfg.admin_token);
    assert_null(l.cfg.secret);
    assert_int_equal(l.cfg.attempt_timeout_ms, 10000);
    assert_int_equal(l.cfg.max_body_bytes, 65536);
    assert_int_equal(l.cfg.max_header_bytes, 16384);
    assert_int_equal(l.cfg.header_timeout_ms, 10000);
    assert_int_equal(l.cfg.body_timeout_ms, 30000);
    assert_int_equal(l.cfg.idle_timeout_ms, 60000);
    assert_int_equal(l.cfg.drain_timeout_ms, 30000);
    assert_true(l.cfg.access_log);
    assert_string_equal(l.cfg.log_level, "info");
    assert_string_equal(l.cfg.meta_base_url, "https://graph.facebook.com");
    assert_string_equal(l.cfg.meta_api_version, "v21.0");
    assert_null(l.cfg.qr_base_url);
    assert_null(l.cfg.qr_api_key);
    assert_string_equal(l.cfg.sms_base_url, "https://api.twilio.com");
    assert_null(l.cfg.sms_account_sid);
    assert_null(l.cfg.sms_auth_token);
    assert_int_equal(l.cfg.queue_validity_s, 36000);
    assert_int_equal(l.cfg.meta_default_mps, 80);
    assert_int_equal(l.cfg.sms_default_mps, 10);
    assert_int_equal(l.cfg.qr_default_per_minute, 20);
    assert_int_equal(l.nrest, 0);
    og_config_free(&l.cfg);
}

/* OMNIGATE_* variables override the defaults. */
static void test_env_overrides_default(void **state)
{
    loaded_t l;
    load(&l,
         ENV("OMNIGATE_WORKERS=4", "OMNIGATE_LISTEN=10.1.2.3:9000", "OMNIGATE_DATABASE_URL=postgres://db/og",
             "OMNIGATE_MAX_BODY_BYTES=1048576", "OMNIGATE_ACCESS_LOG=off", "OMNIGATE_LOG_LEVEL=debug"),
         NULL);
    assert_true(l.ok);
    assert_int_equal(l.cfg.workers, 4);
    assert_string_equal(l.cfg.listen, "10.1.2.3:9000");
    assert_string_equal(l.cfg.listen_host, "10.1.2.3");
    assert_int_equal(l.cfg.listen_port, 9000);
    assert_string_equal(l.cfg.database_url, "postgres://db/og");
    assert_int_equal(l.cfg.max_body_bytes, 1048576);
    assert_false(l.cfg.access_log);
    assert_string_equal(l.cfg.log_level, "debug");
    og_config_free(&l.cfg);
}

/* A flag wins over the environment variable of the same setting. */
static void test_flag_beats_env(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_WORKERS=4"), ARGS("--workers", "8"));
    assert_true(l.ok);
    assert_int_equal(l.cfg.workers, 8);
    og_config_free(&l.cfg);
}

/* A flag fixes a bad environment value: only the final value is validated. */
static void test_flag_repairs_bad_env(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_WORKERS=abc"), ARGS("--workers", "2"));
    assert_true(l.ok);
    assert_int_equal(l.cfg.workers, 2);
    og_config_free(&l.cfg);
}

/* `--flag=value` is the same as `--flag value`. */
static void test_flag_equals_form(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("--listen=127.0.0.1:9001", "--db-pool=7"));
    assert_true(l.ok);
    assert_string_equal(l.cfg.listen_host, "127.0.0.1");
    assert_int_equal(l.cfg.listen_port, 9001);
    assert_int_equal(l.cfg.db_pool, 7);
    og_config_free(&l.cfg);
}

/* An invalid integer in the environment gives one line naming the variable and the value. */
static void test_invalid_int_names_variable(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_WORKERS=abc"), NULL);
    assert_false(l.ok);
    assert_string_equal(l.err, "OMNIGATE_WORKERS: must be an integer between 1 and 256, got \"abc\"");
    og_config_free(&l.cfg);
}

/* An invalid integer given as a flag names the variable and the flag. */
static void test_invalid_int_flag_names_flag(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("--db-pool", "65"));
    assert_false(l.ok);
    assert_string_equal(l.err,
                        "OMNIGATE_DB_POOL (--db-pool): must be an integer between 1 and 64, got \"65\"");
    og_config_free(&l.cfg);
}

/* Integers are plain decimal: no spaces, no sign, no suffix, nothing out of range. */
static void test_int_rejects_junk_and_range(void **state)
{
    static const char *bad[] = {"OMNIGATE_WORKERS=0",  "OMNIGATE_WORKERS=257",
                                "OMNIGATE_WORKERS= 4", "OMNIGATE_WORKERS=+4",
                                "OMNIGATE_WORKERS=4k", "OMNIGATE_WORKERS=",
                                "OMNIGATE_WORKERS=-1", "OMNIGATE_WORKERS=99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        loaded_t l;
        char *env[] = {(char *)bad[i], NULL};
        load(&l, env, NULL);
        assert_false(l.ok);
        assert_non_null(strstr(l.err, "OMNIGATE_WORKERS: must be an integer between 1 and 256"));
        og_config_free(&l.cfg);
    }
}

/* Size settings accept their bounds. */
static void test_size_bounds_accepted(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_MAX_BODY_BYTES=67108864", "OMNIGATE_MAX_HEADER_BYTES=1024"), NULL);
    assert_true(l.ok);
    assert_int_equal(l.cfg.max_body_bytes, 67108864);
    assert_int_equal(l.cfg.max_header_bytes, 1024);
    og_config_free(&l.cfg);
}

/* A size one past its maximum is rejected naming the variable and the range. */
static void test_size_over_max(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_MAX_BODY_BYTES=67108865"), NULL);
    assert_false(l.ok);
    assert_string_equal(l.err, "OMNIGATE_MAX_BODY_BYTES: must be an integer between 1024 and 67108864, got "
                               "\"67108865\"");
    og_config_free(&l.cfg);
}

/* An unknown --flag is an error naming it. */
static void test_unknown_flag(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("serve", "--wrokers", "4"));
    assert_false(l.ok);
    assert_string_equal(l.err, "unknown flag --wrokers (see omnigate --help)");
    og_config_free(&l.cfg);
}

/* The unknown flag is named without its value in the --flag=value form. */
static void test_unknown_flag_equals_form(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("--token=supersecretvalue"));
    assert_false(l.ok);
    assert_string_equal(l.err, "unknown flag --token (see omnigate --help)");
    og_config_free(&l.cfg);
}

/* A flag at the end of argv without its value is an error naming the flag. */
static void test_flag_missing_value(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("serve", "--listen"));
    assert_false(l.ok);
    assert_string_equal(l.err, "--listen: missing value");
    og_config_free(&l.cfg);
}

/* The queue and pacing settings of API.md §24 take their bounds (10..172800 s, 1..100000 per
 * second, 1..6000000 per minute) and refuse one past them, naming the variable. */
static void test_queue_and_pacing_bounds(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_QUEUE_VALIDITY_S=10", "OMNIGATE_META_DEFAULT_MPS=100000"),
         ARGS("--sms-default-mps", "1", "--qr-default-per-minute=6000000"));
    assert_true(l.ok);
    assert_int_equal(l.cfg.queue_validity_s, 10);
    assert_int_equal(l.cfg.meta_default_mps, 100000);
    assert_int_equal(l.cfg.sms_default_mps, 1);
    assert_int_equal(l.cfg.qr_default_per_minute, 6000000);
    og_config_free(&l.cfg);
    static const struct {
        const char *env, *err;
    } bad[] = {
        {"OMNIGATE_QUEUE_VALIDITY_S=9",
         "OMNIGATE_QUEUE_VALIDITY_S: must be an integer between 10 and 172800, "
         "got \"9\""},
        {"OMNIGATE_QUEUE_VALIDITY_S=172801", "OMNIGATE_QUEUE_VALIDITY_S: must be an integer between 10 and "
                                             "172800, got \"172801\""},
        {"OMNIGATE_META_DEFAULT_MPS=0", "OMNIGATE_META_DEFAULT_MPS: must be an integer between 1 and 100000, "
                                        "got \"0\""},
        {"OMNIGATE_SMS_DEFAULT_MPS=100001",
         "OMNIGATE_SMS_DEFAULT_MPS: must be an integer between 1 and 100000, "
         "got \"100001\""},
        {"OMNIGATE_SMS_DEFAULT_MPS=2.5", "OMNIGATE_SMS_DEFAULT_MPS: must be an integer between 1 and 100000, "
                                         "got \"2.5\""},
        {"OMNIGATE_QR_DEFAULT_PER_MINUTE=6000001",
         "OMNIGATE_QR_DEFAULT_PER_MINUTE: must be an integer between "
         "1 and 6000000, got \"6000001\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *env[] = {(char *)bad[i].env, NULL};
        load(&l, env, NULL);
        assert_false(l.ok);
        assert_string_equal(l.err, bad[i].err);
        og_config_free(&l.cfg);
    }
}

/* Unknown OMNIGATE_* variables and foreign variables are ignored. */
static void test_unknown_env_ignored(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_FUTURE_SETTING=1", "OMNIGATE_WORKERSX=abc", "PATH=/bin", "OMNIGATE_DB_POOL=3"),
         NULL);
    assert_true(l.ok);
    assert_int_equal(l.cfg.db_pool, 3);
    og_config_free(&l.cfg);
}

/* A bracketed IPv6 address is split into host and port. */
static void test_listen_ipv6(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_LISTEN=[::1]:8080"), NULL);
    assert_true(l.ok);
    assert_string_equal(l.cfg.listen, "[::1]:8080");
    assert_string_equal(l.cfg.listen_host, "::1");
    assert_int_equal(l.cfg.listen_port, 8080);
    og_config_free(&l.cfg);
}

/* ":port" listens on every IPv4 interface. */
static void test_listen_port_only(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("--listen", ":8080"));
    assert_true(l.ok);
    assert_string_equal(l.cfg.listen_host, "0.0.0.0");
    assert_int_equal(l.cfg.listen_port, 8080);
    og_config_free(&l.cfg);
}

/* Ports outside 1-65535, missing ports, names and unbracketed IPv6 are rejected, naming the variable. */
static void test_listen_bad(void **state)
{
    static const char *bad[] = {"OMNIGATE_LISTEN=127.0.0.1:0",    "OMNIGATE_LISTEN=:65536",
                                "OMNIGATE_LISTEN=127.0.0.1:http", "OMNIGATE_LISTEN=8080",
                                "OMNIGATE_LISTEN=127.0.0.1:",     "OMNIGATE_LISTEN=::1:8080",
                                "OMNIGATE_LISTEN=[::1]8080",      "OMNIGATE_LISTEN=[]:8080",
                                "OMNIGATE_LISTEN=localhost:8080", "OMNIGATE_LISTEN=[1.2.3.4]:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        loaded_t l;
        char *env[] = {(char *)bad[i], NULL};
        load(&l, env, NULL);
        assert_false(l.ok);
        char want[128];
        snprintf(want, sizeof(want), "got \"%s\"", bad[i] + strlen("OMNIGATE_LISTEN="));
        assert_non_null(strstr(l.err, want));
        assert_int_equal(strncmp(l.err, "OMNIGATE_LISTEN: must be host:port", 34), 0);
        og_config_free(&l.cfg);
    }
}

/* The highest port is accepted. */
static void test_listen_max_port(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_LISTEN=0.0.0.0:65535"), NULL);
    assert_true(l.ok);
    assert_int_equal(l.cfg.listen_port, 65535);
    og_config_free(&l.cfg);
}

/* A too-short secret is rejected without echoing its value. */
static void test_secret_too_short_not_echoed(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_ADMIN_TOKEN=hunter2-short"), NULL);
    assert_false(l.ok);
    assert_string_equal(l.err, "OMNIGATE_ADMIN_TOKEN: must be at least 16 characters long (value not shown)");
    assert_null(strstr(l.err, "hunter2"));
    og_config_free(&l.cfg);
}

/* The same holds for OMNIGATE_SECRET given as a flag. */
static void test_secret_flag_too_short_not_echoed(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("--secret=abc123"));
    assert_false(l.ok);
    assert_string_equal(l.err,
                        "OMNIGATE_SECRET (--secret): must be at least 16 characters long (value not shown)");
    og_config_free(&l.cfg);
}

/* Secrets of 16 characters or more are kept as given. */
static void test_secret_accepted(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_ADMIN_TOKEN=0123456789abcdef", "OMNIGATE_SECRET=an-hmac-key-of-some-length"),
         NULL);
    assert_true(l.ok);
    assert_string_equal(l.cfg.admin_token, "0123456789abcdef");
    assert_string_equal(l.cfg.secret, "an-hmac-key-of-some-length");
    og_config_free(&l.cfg);
}

/* An empty value of a setting without default means unset. */
static void test_empty_optional_is_unset(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_QR_API_KEY=", "OMNIGATE_ADMIN_TOKEN="), NULL);
    assert_true(l.ok);
    assert_null(l.cfg.qr_api_key);
    assert_null(l.cfg.admin_token);
    og_config_free(&l.cfg);
}

/* Provider base URLs with http:// or https:// are kept as given. */
static void test_url_http_and_https(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_QR_BASE_URL=http://127.0.0.1:3000", "OMNIGATE_SMS_BASE_URL=https://sms.example"),
         NULL);
    assert_true(l.ok);
    assert_string_equal(l.cfg.qr_base_url, "http://127.0.0.1:3000");
    assert_string_equal(l.cfg.sms_base_url, "https://sms.example");
    og_config_free(&l.cfg);
}

/* A provider base URL with another scheme is rejected naming the variable. */
static void test_url_other_scheme(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_META_BASE_URL=ftp://graph"), NULL);
    assert_false(l.ok);
    assert_string_equal(l.err, "OMNIGATE_META_BASE_URL: must be a URL starting with http:// or https://, got "
                               "\"ftp://graph\"");
    og_config_free(&l.cfg);
}

/* Every documented boolean spelling is accepted, in any case. */
static void test_bool_spellings(void **state)
{
    static const char *const t[] = {"1", "true", "YES", "On"};
    static const char *const f[] = {"0", "False", "no", "OFF"};
    for (size_t i = 0; i < 4; i++) {
        loaded_t l;
        char *on[] = {"--access-log", (char *)t[i], NULL};
        char *off[] = {"--access-log", (char *)f[i], NULL};
        load(&l, (char *const *)no_env, off);
        assert_true(l.ok);
        assert_false(l.cfg.access_log);
        og_config_free(&l.cfg);
        load(&l, ENV("OMNIGATE_ACCESS_LOG=0"), on);
        assert_true(l.ok);
        assert_true(l.cfg.access_log);
        og_config_free(&l.cfg);
    }
}

/* Any other boolean value is rejected listing the accepted ones. */
static void test_bool_invalid(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_ACCESS_LOG=maybe"), NULL);
    assert_false(l.ok);
    assert_string_equal(
        l.err, "OMNIGATE_ACCESS_LOG: must be one of true, false, yes, no, on, off, 1, 0, got \"maybe\"");
    og_config_free(&l.cfg);
}

/* The log level is matched in any case and stored in lower case. */
static void test_log_level_case(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_LOG_LEVEL=WARN"), NULL);
    assert_true(l.ok);
    assert_string_equal(l.cfg.log_level, "warn");
    og_config_free(&l.cfg);
}

/* A log level outside the four names is rejected listing them. */
static void test_log_level_invalid(void **state)
{
    loaded_t l;
    load(&l, ENV("OMNIGATE_LOG_LEVEL=verbose"), NULL);
    assert_false(l.ok);
    assert_string_equal(l.err,
                        "OMNIGATE_LOG_LEVEL: must be one of error, warn, info, debug, got \"verbose\"");
    og_config_free(&l.cfg);
}

/* Positional arguments, --help and -h go to rest in order; flags between them are consumed. */
static void test_positionals_collected(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("admin", "--workers", "3", "create-tenant", "--help", "-h", "acme"));
    assert_true(l.ok);
    assert_int_equal(l.cfg.workers, 3);
    assert_int_equal(l.nrest, 5);
    assert_string_equal(l.rest[0], "admin");
    assert_string_equal(l.rest[1], "create-tenant");
    assert_string_equal(l.rest[2], "--help");
    assert_string_equal(l.rest[3], "-h");
    assert_string_equal(l.rest[4], "acme");
    og_config_free(&l.cfg);
}

/* After "--" every argument is positional, even one that looks like a flag. */
static void test_double_dash_ends_flags(void **state)
{
    loaded_t l;
    load(&l, (char *const *)no_env, ARGS("admin", "--", "--workers"));
    assert_true(l.ok);
    assert_int_equal(l.nrest, 2);
    assert_string_equal(l.rest[0], "admin");
    assert_string_equal(l.rest[1], "--workers");
    og_config_free(&l.cfg);
}

/* More positionals than `rest` can hold is an error, not an overflow. */
static void test_too_many_positionals(void **state)
{
    og_config_t cfg;
    char err[256];
    char *rest[2];
    int nrest = 2;
    char *args[] = {"a", "b", "c"};
    assert_false(og_config_load(&cfg, (char *const *)no_env, 3, args, rest, &nrest, err, sizeof(err)));
    assert_string_equal(err, "too many arguments (at \"c\")");
    og_config_free(&cfg);
}

/* --help lists every flag with its variable and default, and never a secret's value. */
static void test_usage_lists_settings(void **state)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    og_config_usage(f);
    fclose(f);
    assert_non_null(strstr(buf, "--listen"));
    assert_non_null(strstr(buf, "OMNIGATE_LISTEN"));
    assert_non_null(strstr(buf, "127.0.0.1:8080"));
    assert_non_null(strstr(buf, "--sms-auth-token"));
    assert_non_null(strstr(buf, "OMNIGATE_DRAIN_TIMEOUT_MS"));
    assert_non_null(strstr(buf, "CPU count"));
    free(buf);
}

/* The Markdown table has the documented header and one row per setting. */
static void test_markdown_table(void **state)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    og_config_markdown(f);
    fclose(f);
    assert_int_equal(strncmp(buf, "| Variable | Flag | Default | Meaning |\n|---|---|---|---|\n", 57), 0);
    assert_non_null(
        strstr(buf, "| `OMNIGATE_WORKERS` | `--workers` | CPU count | number of worker processes |\n"));
    assert_non_null(strstr(buf, "| `OMNIGATE_DB_POOL` | `--db-pool` | `2` |"));
    int rows = 0;
    for (const char *p = buf; (p = strchr(p, '\n')) != NULL; p++)
        rows++;
    assert_int_equal(rows, 2 + 48);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_env_overrides_default),
        cmocka_unit_test(test_flag_beats_env),
        cmocka_unit_test(test_flag_repairs_bad_env),
        cmocka_unit_test(test_flag_equals_form),
        cmocka_unit_test(test_invalid_int_names_variable),
        cmocka_unit_test(test_invalid_int_flag_names_flag),
        cmocka_unit_test(test_int_rejects_junk_and_range),
        cmocka_unit_test(test_size_bounds_accepted),
        cmocka_unit_test(test_size_over_max),
        cmocka_unit_test(test_unknown_flag),
        cmocka_unit_test(test_unknown_flag_equals_form),
        cmocka_unit_test(test_flag_missing_value),
        cmocka_unit_test(test_queue_and_pacing_bounds),
        cmocka_unit_test(test_unknown_env_ignored),
        cmocka_unit_test(test_listen_ipv6),
        cmocka_unit_test(test_listen_port_only),
        cmocka_unit_test(test_listen_bad),
        cmocka_unit_test(test_listen_max_port),
        cmocka_unit_test(test_secret_too_short_not_echoed),
        cmocka_unit_test(test_secret_flag_too_short_not_echoed),
        cmocka_unit_test(test_secret_accepted),
        cmocka_unit_test(test_empty_optional_is_unset),
        cmocka_unit_test(test_url_http_and_https),
        cmocka_unit_test(test_url_other_scheme),
        cmocka_unit_test(test_bool_spellings),
        cmocka_unit_test(test_bool_invalid),
        cmocka_unit_test(test_log_level_case),
        cmocka_unit_test(test_log_level_invalid),
        cmocka_unit_test(test_positionals_collected),
        cmocka_unit_test(test_double_dash_ends_flags),
        cmocka_unit_test(test_too_many_positionals),
        cmocka_unit_test(test_usage_lists_settings),
        cmocka_unit_test(test_markdown_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
