/*
 * Unit tests of the conninfo helpers (src/data/db/conninfo.c): host and port lists, how each
 * host is reached, the plan parsed from a conninfo (key=value and URI forms, several hosts and
 * ports), an attempt's host entries and its PQconnectStartParams arrays. No network: only
 * numeric hosts and socket directories reach the entries (names need lookups).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_int.h"

/* The environment libpq (and db_plan_init) reads defaults from: none, unless a test sets one. */
static const char *const pg_env[] = {"PGHOST", "PGHOSTADDR", "PGPORT", "PGSERVICE", "PGTARGETSESSIONATTRS"};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(pg_env) / sizeof(pg_env[0]); i++)
        unsetenv(pg_env[i]);
    return 0;
}

/* The plan of conninfo, asserting db_plan_init took it (false is only for out of memory). */
static plan_t plan_of(const char *conninfo, int timeout_ms)
{
    plan_t p = {0};
    assert_true(db_plan_init(&p, conninfo, timeout_ms));
    return p;
}

static void assert_list(const char *s, int want_n, const char *const *want)
{
    int n = -1;
    char **l = db_split_list(s, &n);
    assert_non_null(l);
    assert_int_equal(n, want_n);
    for (int i = 0; i < n; i++)
        assert_string_equal(l[i], want[i]);
    assert_ptr_equal(l[0], (char *)(l + n)); /* one allocation: the text follows the pointers */
    free(l);
}

/* Cut at every comma, empty items kept (libpq's syntax: no quoting, no trimming). */
static void test_split_list(void **state)
{
    (void)state;
    assert_list("db1", 1, (const char *[]){"db1"});
    assert_list("db1,db2,10.0.0.3", 3, (const char *[]){"db1", "db2", "10.0.0.3"});
    assert_list("a,,b", 3, (const char *[]){"a", "", "b"});
    assert_list("", 1, (const char *[]){""});
    assert_list(",", 2, (const char *[]){"", ""});
    assert_list("5433,", 2, (const char *[]){"5433", ""});
    assert_list(" a , b", 2, (const char *[]){" a ", " b"});
}

/* Only names need a lookup: "" (the default socket directory), a path and an abstract socket
 * are sockets; IPv4 and IPv6 literals are numeric; anything else is a name. */
static void test_host_kind(void **state)
{
    (void)state;
    assert_int_equal(db_host_kind(""), H_SOCKET);
    assert_int_equal(db_host_kind("/var/run/postgresql"), H_SOCKET);
    assert_int_equal(db_host_kind("@pgsock"), H_SOCKET);
    assert_int_equal(db_host_kind("127.0.0.1"), H_NUMERIC);
    assert_int_equal(db_host_kind("::1"), H_NUMERIC);
    assert_int_equal(db_host_kind("2001:db8::5"), H_NUMERIC);
    assert_int_equal(db_host_kind("localhost"), H_NAME);
    assert_int_equal(db_host_kind("db.example.com"), H_NAME);
    assert_int_equal(db_host_kind("10.0.0"), H_NAME);
    assert_int_equal(db_host_kind("256.1.1.1"), H_NAME);
}

/* p's host list and each host's kind (n), its port list (np), and what an attempt does with
 * them: `iterate` (one host at a time), `resolve` (some need a lookup), prefer-standby. */
static void assert_plan(const plan_t *p, int n, const char *const *hosts, const hkind_t *kinds, int np,
                        const char *const *ports, bool iterate, bool resolve, bool prefer_standby)
{
    assert_non_null(p->opts);
    assert_null(p->error);
    assert_int_equal(p->nhosts, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(p->hosts[i], hosts[i]);
        assert_int_equal(p->kinds[i], kinds[i]);
    }
    assert_int_equal(p->nports, np);
    for (int i = 0; i < np; i++)
        assert_string_equal(p->ports[i], ports[i]);
    assert_int_equal(p->iterate, iterate);
    assert_int_equal(p->resolve, resolve);
    assert_int_equal(p->prefer_standby, prefer_standby);
    assert_int_equal(p->good_host, -1);
}

/* The keepalive parameters a plan derives from the timeout: idle is the timeout in seconds,
 * rounded up; the interval a third of it, rounded up; tcp_user_timeout the timeout itself. */
static void assert_keepalives(const char *conninfo, int timeout_ms, const char *idle, const char *interval,
                              const char *user_timeout)
{
    plan_t p = plan_of(conninfo, timeout_ms);
    assert_string_equal(p.ka_idle, idle);
    assert_string_equal(p.ka_interval, interval);
    assert_string_equal(p.user_timeout, user_timeout);
    db_plan_free(&p);
}

/* Several hosts, each with its port: iterated one at a time, names resolved by us. */
static void test_plan_several_hosts_and_ports(void **state)
{
    (void)state;
    plan_t p =
        plan_of("host=db1,/tmp,10.0.0.3 port=5432,5433,5434 dbname=og target_session_attrs=read-write", 5000);
    assert_plan(&p, 3, (const char *[]){"db1", "/tmp", "10.0.0.3"}, (hkind_t[]){H_NAME, H_SOCKET, H_NUMERIC},
                3, (const char *[]){"5432", "5433", "5434"}, true, true, false);
    db_plan_free(&p);

    p = plan_of("host=10.0.0.1 port=6432", 5000);
    assert_plan(&p, 1, (const char *[]){"10.0.0.1"}, (hkind_t[]){H_NUMERIC}, 1, (const char *[]){"6432"},
                true, false, false);
    db_plan_free(&p);
}

/* The keepalive parameters come from the timeout alone, whatever the conninfo (even one that
 * does not parse). */
static void test_plan_keepalives(void **state)
{
    (void)state;
    assert_keepalives("host=10.0.0.1", 5000, "5", "2", "5000");
    assert_keepalives("host=10.0.0.1", 2500, "3", "1", "2500");
    assert_keepalives("this is not a conninfo", 9001, "10", "4", "9001");
}

/* The URI form: its host list and its port list (empty for a host without one), and
 * prefer-standby. */
static void test_plan_uri(void **state)
{
    (void)state;
    plan_t p =
        plan_of("postgresql://u@[::1]:5433,db.example.com/og?target_session_attrs=prefer-standby", 5000);
    assert_plan(&p, 2, (const char *[]){"::1", "db.example.com"}, (hkind_t[]){H_NUMERIC, H_NAME}, 2,
                (const char *[]){"5433", ""}, true, true, true);
    db_plan_free(&p);
}

/* Where libpq keeps its own walk over the hosts: a conninfo with hostaddr, one without a host
 * (nor PGHOST), and one whose port list does not match its hosts (libpq refuses it). */
static void test_plan_left_to_libpq(void **state)
{
    (void)state;
    plan_t p = plan_of("host=db1,db2 hostaddr=10.0.0.1,10.0.0.2", 5000);
    assert_plan(&p, 0, NULL, NULL, 0, NULL, false, false, false);
    assert_null(p.hosts);
    db_plan_free(&p);

    p = plan_of("dbname=og", 5000);
    assert_plan(&p, 0, NULL, NULL, 0, NULL, false, false, false);
    assert_null(p.hosts);
    db_plan_free(&p);

    /* Cut (libpq says why it refuses), but not iterated nor looked up. */
    p = plan_of("host=db1,db2,db3 port=1,2", 5000);
    assert_int_equal(p.nhosts, 3);
    assert_int_equal(p.nports, 2);
    assert_false(p.iterate);
    assert_false(p.resolve);
    db_plan_free(&p);
}

/* Without a host in the conninfo, PGHOST and PGPORT give the lists (as libpq's defaults). */
static void test_plan_hosts_from_environment(void **state)
{
    (void)state;
    setenv("PGHOST", "10.0.0.7,db2", 1);
    setenv("PGPORT", "7000", 1);
    plan_t p = plan_of("dbname=og", 5000);
    assert_plan(&p, 2, (const char *[]){"10.0.0.7", "db2"}, (hkind_t[]){H_NUMERIC, H_NAME}, 1,
                (const char *[]){"7000"}, true, true, false);
    db_plan_free(&p);
    clear_env(NULL);
}

/* A conninfo that does not parse is no error of db_plan_init: the plan keeps libpq's reason
 * for every attempt. */
static void test_plan_unparsable(void **state)
{
    (void)state;
    plan_t p = plan_of("this is not a conninfo", 5000);
    assert_null(p.opts);
    assert_non_null(p.error);
    assert_non_null(strstr(p.error, "missing \"=\" after \"this\""));
    assert_false(p.iterate);
    db_plan_free(&p);
}

/* Whether the keyword/value pairs of want (n) are each in pa exactly once. */
static void assert_pairs(const params_t *pa, const char *const want[][2], int n)
{
    for (int w = 0; w < n; w++) {
        int seen = 0;
        for (int i = 0; i < pa->n; i++) {
            if (strcmp(pa->kw[i], want[w][0]) == 0) {
                assert_string_equal(pa->val[i], want[w][1]);
                seen++;
            }
        }
        assert_int_equal(seen, 1);
    }
}

/* The PQconnectStartParams arrays for entry e (NULL: none) of plan p hold exactly the pairs of
 * `same` (nsame) and of `own` (nown), in any order. */
static void assert_params(const plan_t *p, const entry_t *e, const char *app, const char *const same[][2],
                          int nsame, const char *const own[][2], int nown)
{
    params_t pa;
    assert_true(db_params_build(p, e, app, &pa));
    assert_int_equal(pa.n, nsame + nown);
    assert_pairs(&pa, same, nsame);
    assert_pairs(&pa, own, nown);
    free(pa.kw);
}

/* An entry's host, address and port replace the conninfo's lists; the conninfo's own
 * keepalive setting wins over ours; the others get our defaults and the application name. */
static void test_params_for_an_entry(void **state)
{
    (void)state;
    plan_t p = plan_of("host=db1,10.0.0.2 port=5432,6543 dbname=og keepalives_idle=7 "
                       "target_session_attrs=read-write",
                       5000);
    /* Whatever the entry. */
    static const char *const same[][2] = {
        {"dbname", "og"},          {"keepalives_idle", "7"},
        {"keepalives", "1"},       {"keepalives_interval", "2"},
        {"keepalives_count", "3"}, {"tcp_user_timeout", "5000"},
    };
    static const char *const numeric[][2] = {
        {"host", "10.0.0.2"},
        {"hostaddr", "10.0.0.2"},
        {"port", "6543"},
        {"target_session_attrs", "read-write"},
        {"fallback_application_name", "omnigate"},
    };
    assert_params(&p, &(entry_t){.host = 1, .addr = "10.0.0.2"}, "omnigate", same, 6, numeric, 5);

    /* A name's address, and prefer-standby's first pass: the entry's target_session_attrs
     * replaces the conninfo's. */
    static const char *const standby[][2] = {
        {"host", "db1"},
        {"hostaddr", "10.9.9.9"},
        {"port", "5432"},
        {"target_session_attrs", "standby"},
        {"fallback_application_name", "omnigate-read"},
    };
    assert_params(&p, &(entry_t){.host = 0, .addr = "10.9.9.9", .tsa = "standby"}, "omnigate-read", same, 6,
                  standby, 5);

    /* Without an entry (libpq walks the list): the conninfo's lists as they are, no address. */
    static const char *const lists[][2] = {
        {"host", "db1,10.0.0.2"},
        {"port", "5432,6543"},
        {"target_session_attrs", "read-write"},
        {"fallback_application_name", "omnigate-listen"},
    };
    assert_params(&p, NULL, "omnigate-listen", same, 6, lists, 4);
    db_plan_free(&p);
}

/* A socket directory has no address, and a host without a port in the list gets none; with a
 * conninfo that sets nothing else, every keepalive parameter is ours. */
static void test_params_for_a_socket(void **state)
{
    (void)state;
    plan_t p = plan_of("host=/run/pg,10.0.0.1", 5000);
    static const char *const ours[][2] = {
        {"keepalives", "1"},       {"keepalives_idle", "5"},     {"keepalives_interval", "2"},
        {"keepalives_count", "3"}, {"tcp_user_timeout", "5000"}, {"fallback_application_name", "omnigate"},
    };
    static const char *const socket[][2] = {{"host", "/run/pg"}};
    assert_params(&p, &(entry_t){.host = 0}, "omnigate", ours, 6, socket, 1);
    db_plan_free(&p);
}

/* Builds c's entries from plan p (no lookups), asserting there are n. */
static void entries_of(dbconn_t *c, plan_t *p, int n)
{
    char why[128] = "";
    *c = (dbconn_t){.plan = p};
    assert_true(db_entries_build(c, NULL, why, sizeof(why)));
    assert_int_equal(c->nentries, n);
    assert_int_equal(c->entry, 0);
}

/* An attempt's entries: one per host in the conninfo's order, starting from the one that last
 * got a connection ready; prefer-standby is two passes, as standby then as any. */
static void test_entries_rotate_and_prefer_standby(void **state)
{
    (void)state;
    plan_t p = plan_of("host=/tmp,10.0.0.1,10.0.0.2 port=1,2,3", 5000);
    dbconn_t c;
    entries_of(&c, &p, 3);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(c.entries[k].host, k);
        assert_null(c.entries[k].tsa);
    }
    assert_string_equal(c.entries[0].addr, "");
    assert_string_equal(c.entries[2].addr, "10.0.0.2");

    p.good_host = 2;
    snprintf(p.good_addr, sizeof(p.good_addr), "10.0.0.2");
    db_entries_free(&c);
    entries_of(&c, &p, 3);
    assert_int_equal(c.entries[0].host, 2);
    assert_int_equal(c.entries[1].host, 0);
    assert_int_equal(c.entries[2].host, 1);
    db_entries_free(&c);
    assert_null(c.entries);
    assert_int_equal(c.nentries, 0);
    db_plan_free(&p);

    p = plan_of("host=10.0.0.1,10.0.0.2 target_session_attrs=prefer-standby", 5000);
    entries_of(&c, &p, 4);
    const int hosts[4] = {0, 1, 0, 1};
    const char *const tsa[4] = {"standby", "standby", "any", "any"};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(c.entries[k].host, hosts[k]);
        assert_string_equal(c.entries[k].tsa, tsa[k]);
    }
    db_entries_free(&c);
    db_plan_free(&p);
}

/* Names without addresses (no lookup made) leave no entry: the attempt fails, saying which. */
static void test_entries_none_left(void **state)
{
    (void)state;
    plan_t p = plan_of("host=db.invalid,db2.invalid", 5000);
    dbconn_t c = {.plan = &p};
    char why[128] = "";
    assert_false(db_entries_build(&c, NULL, why, sizeof(why)));
    assert_string_equal(why, "could not look up host \"db.invalid\": no address");
    assert_null(c.entries);
    db_plan_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_list),
        cmocka_unit_test(test_host_kind),
        cmocka_unit_test(test_plan_several_hosts_and_ports),
        cmocka_unit_test(test_plan_keepalives),
        cmocka_unit_test(test_plan_uri),
        cmocka_unit_test(test_plan_left_to_libpq),
        cmocka_unit_test(test_plan_hosts_from_environment),
        cmocka_unit_test(test_plan_unparsable),
        cmocka_unit_test(test_params_for_an_entry),
        cmocka_unit_test(test_params_for_a_socket),
        cmocka_unit_test(test_entries_rotate_and_prefer_standby),
        cmocka_unit_test(test_entries_none_left),
    };
    return cmocka_run_group_tests(tests, clear_env, NULL);
}
