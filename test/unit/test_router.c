/*
 * Unit tests of the router (src/net/router.c): matching, 404/405 with Allow, route parameters
 * and query-string decoding; dispatch through a connection core with a fake transport.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/router.h"

/* Every route's handler; only the dispatch tests call it, with their fake_t as ctx. */
static void h_any(og_http_req_t *req, const og_route_match_t *m, void *ctx);

static const og_route_t routes[] = {
    {"GET", "/", h_any},
    {"GET", "/healthz", h_any},
    {"POST", "/admin/tenants", h_any},
    {"GET", "/admin/tenants/{id}", h_any},
    {"PATCH", "/admin/tenants/{id}", h_any},
    {"GET", "/admin/tenants/{id}/tokens", h_any},
    {"POST", "/admin/tenants/{id}/tokens", h_any},
    {"DELETE", "/admin/tenants/{id}/tokens/{tokenId}", h_any},
    {"POST", "/api/omni/send", h_any},
    {"POST", "/x/literal", h_any},
    {"GET", "/x/{a}", h_any},
    {"GET", "/x/literal", h_any},
    {"DELETE", "/x/{b}", h_any},
};
static const og_router_t router = {routes, sizeof(routes) / sizeof(routes[0])};

static og_route_result_t match(const char *method, const char *path, og_route_match_t *m, char *allow,
                               size_t allow_len)
{
    return og_router_match(&router, method, path, strlen(path), m, allow, allow_len);
}

/* ---- matching ---------------------------------------------------------------------------- */

/* A literal path matches its route exactly, with no parameters. */
static void test_literal_match(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/healthz", &m, allow, sizeof(allow)), OG_ROUTE_FOUND);
    assert_ptr_equal(m.route, &routes[1]);
    assert_int_equal(m.nparams, 0);
}

/* The root pattern matches "/" only. */
static void test_root_match(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/", &m, allow, sizeof(allow)), OG_ROUTE_FOUND);
    assert_ptr_equal(m.route, &routes[0]);
}

/* "{name}" segments capture the path segments they stand for. */
static void test_params_captured(void **state)
{
    og_route_match_t m;
    char allow[64], id[32], tok[32];
    assert_int_equal(match("DELETE", "/admin/tenants/t-42/tokens/tok_9", &m, allow, sizeof(allow)),
                     OG_ROUTE_FOUND);
    assert_ptr_equal(m.route, &routes[7]);
    assert_int_equal(m.nparams, 2);
    assert_true(og_route_param(&m, "id", id, sizeof(id)));
    assert_true(og_route_param(&m, "tokenId", tok, sizeof(tok)));
    assert_string_equal(id, "t-42");
    assert_string_equal(tok, "tok_9");
}

/* Routes are tried in table order: the first matching route with the method wins. */
static void test_table_order_wins(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/x/literal", &m, allow, sizeof(allow)), OG_ROUTE_FOUND);
    assert_ptr_equal(m.route, &routes[10]);
}

/* An unknown path is 404. */
static void test_unknown_path_404(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/nope", &m, allow, sizeof(allow)), OG_ROUTE_NOT_FOUND);
    assert_null(m.route);
}

/* A path with more segments than any pattern is 404. */
static void test_extra_segment_404(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/healthz/more", &m, allow, sizeof(allow)), OG_ROUTE_NOT_FOUND);
}

/* A trailing slash makes a different path. */
static void test_trailing_slash_differs(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/healthz/", &m, allow, sizeof(allow)), OG_ROUTE_NOT_FOUND);
}

/* A parameter never matches an empty segment. */
static void test_param_not_empty(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/admin/tenants//tokens", &m, allow, sizeof(allow)), OG_ROUTE_NOT_FOUND);
    assert_int_equal(match("GET", "/admin/tenants/", &m, allow, sizeof(allow)), OG_ROUTE_NOT_FOUND);
}

/* Literal segments are case-sensitive. */
static void test_case_sensitive(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/HEALTHZ", &m, allow, sizeof(allow)), OG_ROUTE_NOT_FOUND);
}

/* A path without the leading slash matches nothing. */
static void test_no_leading_slash(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "healthz", &m, allow, sizeof(allow)), OG_ROUTE_NOT_FOUND);
}

/* Only path_len bytes are the path: bytes after it are ignored. */
static void test_path_len_respected(void **state)
{
    og_route_match_t m;
    char allow[64];
    const char *p = "/healthzXYZ";
    assert_int_equal(og_router_match(&router, "GET", p, 8, &m, allow, sizeof(allow)), OG_ROUTE_FOUND);
}

/* A known path with another method is 405; Allow lists the methods in table order with HEAD after GET. */
static void test_405_allow_order(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("DELETE", "/admin/tenants/t1", &m, allow, sizeof(allow)), OG_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "GET, HEAD, PATCH");
}

/* Allow merges every matching route, without duplicates. */
static void test_405_allow_dedup(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("PUT", "/x/literal", &m, allow, sizeof(allow)), OG_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "POST, GET, HEAD, DELETE");
}

/* A POST-only path answers GET with 405 Allow: POST (no HEAD without GET). */
static void test_405_post_only(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("GET", "/api/omni/send", &m, allow, sizeof(allow)), OG_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "POST");
}

/* Method names are case-sensitive: "get" is not GET. */
static void test_method_case_sensitive(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("get", "/healthz", &m, allow, sizeof(allow)), OG_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "GET, HEAD");
}

/* An Allow value that does not fit is cut between methods, never inside one. */
static void test_405_allow_truncated(void **state)
{
    og_route_match_t m;
    char allow[12];
    assert_int_equal(match("PUT", "/x/literal", &m, allow, sizeof(allow)), OG_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "POST, GET");
}

/* HEAD is served by the GET route. */
static void test_head_matches_get(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("HEAD", "/admin/tenants/t1/tokens", &m, allow, sizeof(allow)), OG_ROUTE_FOUND);
    assert_ptr_equal(m.route, &routes[5]);
}

/* HEAD on a path without GET is 405. */
static void test_head_without_get_405(void **state)
{
    og_route_match_t m;
    char allow[64];
    assert_int_equal(match("HEAD", "/api/omni/send", &m, allow, sizeof(allow)), OG_ROUTE_BAD_METHOD);
    assert_string_equal(allow, "POST");
}

/* ---- route parameters -------------------------------------------------------------------- */

/* An absent parameter name is false. */
static void test_route_param_absent(void **state)
{
    og_route_match_t m;
    char allow[64], buf[16];
    match("GET", "/admin/tenants/t1", &m, allow, sizeof(allow));
    assert_false(og_route_param(&m, "tokenId", buf, sizeof(buf)));
    assert_false(og_route_param(&m, "i", buf, sizeof(buf)));
}

/* A parameter that does not fit the buffer is false. */
static void test_route_param_too_long(void **state)
{
    og_route_match_t m;
    char allow[64], buf[4];
    match("GET", "/admin/tenants/abcd", &m, allow, sizeof(allow));
    assert_false(og_route_param(&m, "id", buf, sizeof(buf)));
}

/* Parameters are percent-decoded; '+' stays a plus in a path. */
static void test_route_param_decoded(void **state)
{
    og_route_match_t m;
    char allow[64], buf[16];
    match("GET", "/admin/tenants/a%20b+c", &m, allow, sizeof(allow));
    assert_true(og_route_param(&m, "id", buf, sizeof(buf)));
    assert_string_equal(buf, "a b+c");
}

/* A malformed escape in a parameter is false. */
static void test_route_param_bad_escape(void **state)
{
    og_route_match_t m;
    char allow[64], buf[16];
    assert_int_equal(match("GET", "/admin/tenants/a%2", &m, allow, sizeof(allow)), OG_ROUTE_FOUND);
    assert_false(og_route_param(&m, "id", buf, sizeof(buf)));
}

/* ---- query parameters -------------------------------------------------------------------- */

static int q(const char *query, const char *name, char *buf, size_t buflen)
{
    return og_query_param(query, query ? strlen(query) : 0, name, buf, buflen);
}

/* A plain parameter is found among others and its length returned. */
static void test_query_plain(void **state)
{
    char buf[32];
    assert_int_equal(q("a=1&limit=50&b=x", "limit", buf, sizeof(buf)), 2);
    assert_string_equal(buf, "50");
}

/* '+' and %20 both decode to a space. */
static void test_query_plus_and_percent(void **state)
{
    char buf[32];
    assert_int_equal(q("to=%2B62+81%20x", "to", buf, sizeof(buf)), 8);
    assert_string_equal(buf, "+62 81 x");
}

/* Hex digits of an escape may be upper or lower case. */
static void test_query_hex_case(void **state)
{
    char buf[32];
    assert_int_equal(q("s=%c3%A9", "s", buf, sizeof(buf)), 2);
    assert_string_equal(buf, "\xc3\xa9");
}

/* A key without '=' has an empty value. */
static void test_query_key_without_value(void **state)
{
    char buf[32];
    assert_int_equal(q("a=1&flag&b=2", "flag", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
}

/* A key with '=' and nothing after it has an empty value. */
static void test_query_empty_value(void **state)
{
    char buf[32];
    assert_int_equal(q("cursor=&b=2", "cursor", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
}

/* A parameter whose name only starts like the one asked for is absent: -1. */
static void test_query_absent(void **state)
{
    char buf[32];
    assert_int_equal(q("limits=5&x=1", "limit", buf, sizeof(buf)), -1);
}

/* A request without a query (NULL or empty) has no parameters: -1. */
static void test_query_no_query(void **state)
{
    char buf[32];
    assert_int_equal(q(NULL, "limit", buf, sizeof(buf)), -1);
    assert_int_equal(q("", "limit", buf, sizeof(buf)), -1);
}

/* The first of repeated parameters wins. */
static void test_query_first_wins(void **state)
{
    char buf[32];
    assert_int_equal(q("status=sent&status=failed", "status", buf, sizeof(buf)), 4);
    assert_string_equal(buf, "sent");
}

/* Keys are percent-decoded before comparison; empty pairs are skipped. */
static void test_query_encoded_key(void **state)
{
    char buf[32];
    assert_int_equal(q("&&li%6Dit=7&", "limit", buf, sizeof(buf)), 1);
    assert_string_equal(buf, "7");
}

/* Only query_len bytes are the query. */
static void test_query_len_respected(void **state)
{
    char buf[32];
    assert_int_equal(og_query_param("a=12345", 4, "a", buf, sizeof(buf)), 2);
    assert_string_equal(buf, "12");
}

/* A bad escape (non-hex digits) is -2. */
static void test_query_bad_hex(void **state)
{
    char buf[32];
    assert_int_equal(q("to=%zz", "to", buf, sizeof(buf)), -2);
}

/* A truncated escape at the end is -2. */
static void test_query_truncated_escape(void **state)
{
    char buf[32];
    assert_int_equal(q("to=ab%4", "to", buf, sizeof(buf)), -2);
    assert_int_equal(q("to=ab%", "to", buf, sizeof(buf)), -2);
}

/* A truncated escape before the next pair does not borrow from it. */
static void test_query_escape_stops_at_pair(void **state)
{
    char buf[32];
    assert_int_equal(q("to=%4&1=x", "to", buf, sizeof(buf)), -2);
}

/* A value decoding to NUL is -2. */
static void test_query_decoded_nul(void **state)
{
    char buf[32];
    assert_int_equal(q("to=a%00b", "to", buf, sizeof(buf)), -2);
}

/* A lone continuation or invalid lead byte is -2. */
static void test_query_invalid_utf8_byte(void **state)
{
    char buf[32];
    assert_int_equal(q("t=%FF", "t", buf, sizeof(buf)), -2);
    assert_int_equal(q("t=%80", "t", buf, sizeof(buf)), -2);
}

/* A truncated multi-byte sequence is -2. */
static void test_query_truncated_utf8(void **state)
{
    char buf[32];
    assert_int_equal(q("t=%E2%82", "t", buf, sizeof(buf)), -2);
}

/* Overlong encodings are -2 ("/" as C0 AF, and as E0 80 AF). */
static void test_query_overlong_utf8(void **state)
{
    char buf[32];
    assert_int_equal(q("t=%C0%AF", "t", buf, sizeof(buf)), -2);
    assert_int_equal(q("t=%E0%80%AF", "t", buf, sizeof(buf)), -2);
    assert_int_equal(q("t=%F0%80%80%AF", "t", buf, sizeof(buf)), -2);
}

/* UTF-16 surrogates encoded in UTF-8 are -2. */
static void test_query_surrogate(void **state)
{
    char buf[32];
    assert_int_equal(q("t=%ED%A0%80", "t", buf, sizeof(buf)), -2);
}

/* Code points above U+10FFFF are -2. */
static void test_query_above_max_code_point(void **state)
{
    char buf[32];
    assert_int_equal(q("t=%F4%90%80%80", "t", buf, sizeof(buf)), -2);
}

/* Valid 2-, 3- and 4-byte sequences, up to U+10FFFF, are accepted. */
static void test_query_valid_utf8(void **state)
{
    char buf[32];
    assert_int_equal(q("t=%C2%A9%E2%82%AC%F0%9F%98%80%F4%8F%BF%BF", "t", buf, sizeof(buf)), 13);
    assert_string_equal(buf, "\xc2\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
}

/* A value that exactly fits buflen - 1 is returned; one byte more is -2. */
static void test_query_length_limit(void **state)
{
    char buf[4];
    assert_int_equal(q("a=xyz", "a", buf, sizeof(buf)), 3);
    assert_string_equal(buf, "xyz");
    assert_int_equal(q("a=wxyz", "a", buf, sizeof(buf)), -2);
}

/* ---- dispatch, through the connection core ----------------------------------------------- */

typedef struct fake {
    og_http_conn_t c;
    og_http_shared_t shared;
    og_router_t router;
    char out[4096];
    size_t out_len;
    char route[64];
    int calls;   /* handler runs */
    char id[64]; /* the "id" route parameter the handler saw */
} fake_t;

static void h_any(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    fake_t *f = ctx;
    f->calls++;
    if (!og_route_param(m, "id", f->id, sizeof(f->id)))
        strcpy(f->id, "(none)");
    og_http_respond(req, 204, NULL, 0, NULL, NULL, 0);
}

static void f_write(og_http_conn_t *c, char *data, size_t len)
{
    fake_t *f = c->data;
    if (f->out_len + len < sizeof(f->out)) {
        memcpy(f->out + f->out_len, data, len);
        f->out_len += len;
        f->out[f->out_len] = '\0';
    }
    free(data);
}
static void f_read(og_http_conn_t *c, bool on) {}
static void f_timer(og_http_conn_t *c, uint64_t ms) {}
static size_t f_backlog(og_http_conn_t *c)
{
    return 0;
}
static void f_close(og_http_conn_t *c, bool linger) {}
static void f_release(og_http_conn_t *c) {}
static const og_http_io_t fake_io = {f_write, f_read, f_timer, f_backlog, f_close, f_release};

static uint64_t f_now(void *ctx)
{
    return 0;
}

static void f_handler(og_http_req_t *req, void *ctx)
{
    fake_t *f = ctx;
    og_router_dispatch(&f->router, req, f);
}

static void f_done(const og_http_req_t *req, void *ctx)
{
    fake_t *f = ctx;
    snprintf(f->route, sizeof(f->route), "%s", req->route);
}

/* Feeds one request through a fresh connection that dispatches with `router`. */
static fake_t *exchange(const char *request)
{
    fake_t *f = calloc(1, sizeof(*f));
    f->router = router;
    f->shared.limits = (og_http_limits_t){16384, 65536, 10000, 30000, 60000, 1 << 20};
    f->shared.handler = f_handler;
    f->shared.done = f_done;
    f->shared.ctx = f;
    f->shared.now_us = f_now;
    strcpy(f->shared.rid_prefix, "t-");
    og_http_conn_init(&f->c, &f->shared, &fake_io, 1);
    f->c.data = f;
    og_http_conn_start(&f->c);
    og_http_conn_feed(&f->c, request, strlen(request));
    og_http_conn_close(&f->c);
    og_http_conn_io_closed(&f->c);
    return f;
}

/* A matched route's handler runs with the dispatch context and parameters; req->route is the pattern. */
static void test_dispatch_found(void **state)
{
    fake_t *f = exchange("GET /admin/tenants/acme HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(f->calls, 1);
    assert_string_equal(f->id, "acme");
    assert_non_null(strstr(f->out, "HTTP/1.1 204 "));
    assert_string_equal(f->route, "/admin/tenants/{id}");
    free(f);
}

/* An unknown path is answered 404 not_found in the envelope, with route "-". */
static void test_dispatch_404(void **state)
{
    fake_t *f = exchange("GET /missing?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(f->calls, 0);
    assert_non_null(strstr(f->out, "HTTP/1.1 404 Not Found\r\n"));
    assert_string_equal(strstr(f->out, "\r\n\r\n") + 4,
                        "{\"success\":false,\"message\":\"no such route\",\"data\":"
                        "null,\"error\":{\"code\":\"not_found\"}}");
    assert_string_equal(f->route, "-");
    free(f);
}

/* A wrong method is answered 405 method_not_allowed with the Allow header. */
static void test_dispatch_405(void **state)
{
    fake_t *f = exchange("PUT /admin/tenants/acme HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(f->calls, 0);
    assert_non_null(strstr(f->out, "HTTP/1.1 405 Method Not Allowed\r\n"));
    assert_non_null(strstr(f->out, "\r\nAllow: GET, HEAD, PATCH\r\n"));
    assert_non_null(strstr(f->out, "\"error\":{\"code\":\"method_not_allowed\"}"));
    assert_string_equal(f->route, "-");
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_match),
        cmocka_unit_test(test_root_match),
        cmocka_unit_test(test_params_captured),
        cmocka_unit_test(test_table_order_wins),
        cmocka_unit_test(test_unknown_path_404),
        cmocka_unit_test(test_extra_segment_404),
        cmocka_unit_test(test_trailing_slash_differs),
        cmocka_unit_test(test_param_not_empty),
        cmocka_unit_test(test_case_sensitive),
        cmocka_unit_test(test_no_leading_slash),
        cmocka_unit_test(test_path_len_respected),
        cmocka_unit_test(test_405_allow_order),
        cmocka_unit_test(test_405_allow_dedup),
        cmocka_unit_test(test_405_post_only),
        cmocka_unit_test(test_method_case_sensitive),
        cmocka_unit_test(test_405_allow_truncated),
        cmocka_unit_test(test_head_matches_get),
        cmocka_unit_test(test_head_without_get_405),
        cmocka_unit_test(test_route_param_absent),
        cmocka_unit_test(test_route_param_too_long),
        cmocka_unit_test(test_route_param_decoded),
        cmocka_unit_test(test_route_param_bad_escape),
        cmocka_unit_test(test_query_plain),
        cmocka_unit_test(test_query_plus_and_percent),
        cmocka_unit_test(test_query_hex_case),
        cmocka_unit_test(test_query_key_without_value),
        cmocka_unit_test(test_query_empty_value),
        cmocka_unit_test(test_query_absent),
        cmocka_unit_test(test_query_no_query),
        cmocka_unit_test(test_query_first_wins),
        cmocka_unit_test(test_query_encoded_key),
        cmocka_unit_test(test_query_len_respected),
        cmocka_unit_test(test_query_bad_hex),
        cmocka_unit_test(test_query_truncated_escape),
        cmocka_unit_test(test_query_escape_stops_at_pair),
        cmocka_unit_test(test_query_decoded_nul),
        cmocka_unit_test(test_query_invalid_utf8_byte),
        cmocka_unit_test(test_query_truncated_utf8),
        cmocka_unit_test(test_query_overlong_utf8),
        cmocka_unit_test(test_query_surrogate),
        cmocka_unit_test(test_query_above_max_code_point),
        cmocka_unit_test(test_query_valid_utf8),
        cmocka_unit_test(test_query_length_limit),
        cmocka_unit_test(test_dispatch_found),
        cmocka_unit_test(test_dispatch_404),
        cmocka_unit_test(test_dispatch_405),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
