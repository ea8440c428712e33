/*
 * Unit tests of the JSON envelope and error answers (src/net/api.c): the pure builders directly,
 * and the senders through a connection core with a fake transport that records the bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/api.h"
#include "omnigate/app/errors.h"
#include "omnigate/jw.h"

/* ---- the pure builders ------------------------------------------------------------------ */

/* og_err_fail records code, field and the formatted message, and returns false; the code
 * answers with its status. */
static void test_fail_fills_error(void **state)
{
    og_err_t err = {0};
    assert_false(og_err_fail(&err, OG_E_VALIDATION_FAILED, "to", "%s must have %d digits", "to", 8));
    assert_int_equal(og_api_status(err.code), 422);
    assert_ptr_equal(err.code, OG_E_VALIDATION_FAILED);
    assert_string_equal(err.field, "to");
    assert_string_equal(err.message, "to must have 8 digits");
}

/* A NULL field is recorded as "" and an over-long message is truncated, not overflowed. */
static void test_fail_null_field_and_truncation(void **state)
{
    og_err_t err;
    memset(&err, 'x', sizeof(err));
    char big[600];
    memset(big, 'm', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    og_err_fail(&err, OG_E_INVALID_JSON, NULL, "%s", big);
    assert_string_equal(err.field, "");
    assert_int_equal(strlen(err.message), sizeof(err.message) - 1);
}

/* Fails unless every code of the NULL-terminated `codes` answers with `status`. */
static void assert_status(int status, const og_errcode_t *const *codes)
{
    for (; *codes != NULL; codes++)
        if (og_api_status(*codes) != status)
            fail_msg("%s: %d, want %d", (*codes)->name, og_api_status(*codes), status);
}

/* Every error code of API.md §0, and those of §2-§6, answers with its status. */
static void test_status_of_codes(void **state)
{
    assert_status(400, (const og_errcode_t *const[]){OG_E_INVALID_JSON, OG_E_BAD_REQUEST, NULL});
    assert_status(401, (const og_errcode_t *const[]){OG_E_UNAUTHORIZED, NULL});
    assert_status(403, (const og_errcode_t *const[]){OG_E_UNIFIED_API_LOCKED, OG_E_INSUFFICIENT_SCOPE, NULL});
    assert_status(404, (const og_errcode_t *const[]){OG_E_NOT_FOUND, NULL});
    assert_status(405, (const og_errcode_t *const[]){OG_E_METHOD_NOT_ALLOWED, NULL});
    assert_status(
        409, (const og_errcode_t *const[]){OG_E_IDEMPOTENCY_IN_PROGRESS, OG_E_OTP_ALREADY_VERIFIED, NULL});
    assert_status(410, (const og_errcode_t *const[]){OG_E_OTP_EXPIRED, NULL});
    assert_status(413, (const og_errcode_t *const[]){OG_E_PAYLOAD_TOO_LARGE, NULL});
    assert_status(415, (const og_errcode_t *const[]){OG_E_UNSUPPORTED_MEDIA_TYPE, NULL});
    assert_status(422, (const og_errcode_t *const[]){
                           OG_E_VALIDATION_FAILED, OG_E_UNKNOWN_FIELD, OG_E_IDEMPOTENCY_KEY_REUSED,
                           OG_E_WHATSAPP_FROM_NOT_REGISTERED, OG_E_SENDER_NOT_APPROVED, OG_E_TEXT_TOO_LONG,
                           OG_E_NO_CHANNEL_AVAILABLE, OG_E_OTP_INVALID, NULL});
    assert_status(429,
                  (const og_errcode_t *const[]){OG_E_RATE_LIMITED, OG_E_OTP_COOLDOWN, OG_E_OTP_LOCKED, NULL});
    assert_status(431, (const og_errcode_t *const[]){OG_E_HEADERS_TOO_LARGE, NULL});
    assert_status(502, (const og_errcode_t *const[]){OG_E_DELIVERY_FAILED, NULL});
    assert_status(503, (const og_errcode_t *const[]){OG_E_UNAVAILABLE, OG_E_QUERY_TIMEOUT, NULL});
}

/* No code at all (an error never recorded) is a bug: 500 internal_error. (A code no list
 * declares does not compile.) */
static void test_status_of_unknown_code(void **state)
{
    assert_int_equal(og_api_status(NULL), 500);
    og_err_t err = {0};
    size_t len;
    char *s = og_api_envelope(og_api_status(err.code), "m", NULL, &err, NULL, &len);
    assert_non_null(strstr(s, "\"error\":{\"code\":\"internal_error\"}"));
    free(s);
}

/* A success envelope has success, message and data in that order; NULL data is null. */
static void test_envelope_success_null_data(void **state)
{
    size_t len = 0;
    char *s = og_api_envelope(200, "ok", NULL, NULL, NULL, &len);
    assert_string_equal(s, "{\"success\":true,\"message\":\"ok\",\"data\":null}");
    assert_int_equal(len, strlen(s));
    free(s);
}

/* Data is embedded as given, keeping its key order. */
static void test_envelope_success_with_data(void **state)
{
    size_t len = 0;
    json_t *data = json_pack("{s:s,s:i}", "zeta", "z", "alpha", 1);
    char *s = og_api_envelope(201, "created", data, NULL, NULL, &len);
    assert_string_equal(s,
                        "{\"success\":true,\"message\":\"created\",\"data\":{\"zeta\":\"z\",\"alpha\":1}}");
    free(s);
}

/* A 3xx status is still success; 400 and above is not. */
static void test_envelope_success_flag_boundary(void **state)
{
    size_t len;
    char *s = og_api_envelope(399, "m", NULL, NULL, NULL, &len);
    assert_non_null(strstr(s, "\"success\":true"));
    free(s);
    s = og_api_envelope(400, "m", NULL, NULL, NULL, &len);
    assert_non_null(strstr(s, "\"success\":false"));
    free(s);
}

/* An error envelope adds error.code and error.field after data. */
static void test_envelope_error_with_field(void **state)
{
    og_err_t err;
    size_t len;
    og_err_fail(&err, OG_E_UNKNOWN_FIELD, "deliverymode", "unknown field \"deliverymode\"");
    char *s = og_api_envelope(og_api_status(err.code), err.message, NULL, &err, NULL, &len);
    assert_string_equal(s,
                        "{\"success\":false,\"message\":\"unknown field \\\"deliverymode\\\"\",\"data\":null,"
                        "\"error\":{\"code\":\"unknown_field\",\"field\":\"deliverymode\"}}");
    free(s);
}

/* error.field is omitted when no field is at fault. */
static void test_envelope_error_without_field(void **state)
{
    og_err_t err;
    size_t len;
    og_err_fail(&err, OG_E_NOT_FOUND, NULL, "no such route");
    char *s = og_api_envelope(og_api_status(err.code), err.message, NULL, &err, NULL, &len);
    assert_string_equal(
        s,
        "{\"success\":false,\"message\":\"no such route\",\"data\":null,\"error\":{\"code\":\"not_found\"}}");
    free(s);
}

/* Details go under error.details and data stays at the top level (502 with attempts). */
static void test_envelope_error_details_and_data(void **state)
{
    og_err_t err;
    size_t len;
    og_err_fail(&err, OG_E_DELIVERY_FAILED, NULL, "all channels failed");
    json_t *data = json_pack("{s:s}", "reference", "kf_1");
    json_t *details = json_pack("{s:i}", "attempts", 2);
    char *s = og_api_envelope(og_api_status(err.code), err.message, data, &err, details, &len);
    assert_string_equal(
        s, "{\"success\":false,\"message\":\"all channels failed\",\"data\":{\"reference\":\"kf_1\"},"
           "\"error\":{\"code\":\"delivery_failed\",\"details\":{\"attempts\":2}}}");
    free(s);
}

/* Non-ASCII messages are sent as UTF-8, unescaped. */
static void test_envelope_message_utf8(void **state)
{
    size_t len;
    char *s = og_api_envelope(200, "caf\xc3\xa9", NULL, NULL, NULL, &len);
    assert_string_equal(s, "{\"success\":true,\"message\":\"caf\xc3\xa9\",\"data\":null}");
    free(s);
}

/* A message with invalid UTF-8 (quoted client input) still yields valid JSON, bytes replaced. */
static void test_envelope_message_invalid_utf8(void **state)
{
    size_t len;
    char *s = og_api_envelope(400, "near '\xff\xfe'", NULL, NULL, NULL, &len);
    assert_string_equal(s, "{\"success\":false,\"message\":\"near '?"
                           "?'\",\"data\":null}");
    free(s);
}

/* A 401 gets WWW-Authenticate: Bearer after the extra headers. */
static void test_headers_401(void **state)
{
    og_http_header_t extra[] = {{"X-A", 3, "1", 1}};
    og_http_header_t out[OG_API_MAX_HEADERS];
    size_t n = og_api_error_headers(401, extra, 1, out, OG_API_MAX_HEADERS);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].name, "X-A");
    assert_string_equal(out[1].name, "WWW-Authenticate");
    assert_int_equal(out[1].value_len, 6);
    assert_memory_equal(out[1].value, "Bearer", 6);
}

/* A 503 gets Retry-After: 1. */
static void test_headers_503_adds_retry_after(void **state)
{
    og_http_header_t out[OG_API_MAX_HEADERS];
    size_t n = og_api_error_headers(503, NULL, 0, out, OG_API_MAX_HEADERS);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].name_len, 11);
    assert_memory_equal(out[0].name, "Retry-After", 11);
    assert_memory_equal(out[0].value, "1", 1);
}

/* A 503 whose extra headers already carry Retry-After (any case) gets no second one. */
static void test_headers_503_keeps_callers_retry_after(void **state)
{
    og_http_header_t extra[] = {{"retry-after", 11, "30", 2}};
    og_http_header_t out[OG_API_MAX_HEADERS];
    size_t n = og_api_error_headers(503, extra, 1, out, OG_API_MAX_HEADERS);
    assert_int_equal(n, 1);
    assert_memory_equal(out[0].value, "30", 2);
}

/* Other statuses get only the extra headers. */
static void test_headers_other_status(void **state)
{
    og_http_header_t extra[] = {{"Allow", 5, "GET, HEAD", 9}};
    og_http_header_t out[OG_API_MAX_HEADERS];
    assert_int_equal(og_api_error_headers(405, extra, 1, out, OG_API_MAX_HEADERS), 1);
    assert_int_equal(og_api_error_headers(429, NULL, 0, out, OG_API_MAX_HEADERS), 0);
}

/* When extra headers fill the array, the header the status requires still fits. */
static void test_headers_required_header_wins_space(void **state)
{
    og_http_header_t extra[OG_API_MAX_HEADERS];
    for (size_t i = 0; i < OG_API_MAX_HEADERS; i++)
        extra[i] = (og_http_header_t){"X-E", 3, "v", 1};
    og_http_header_t out[OG_API_MAX_HEADERS];
    size_t n = og_api_error_headers(401, extra, OG_API_MAX_HEADERS, out, OG_API_MAX_HEADERS);
    assert_int_equal(n, OG_API_MAX_HEADERS);
    assert_string_equal(out[OG_API_MAX_HEADERS - 1].name, "WWW-Authenticate");
}

/* ---- the senders, through the connection core ------------------------------------------- */

typedef struct fake {
    og_http_conn_t c;
    og_http_shared_t shared;
    char out[4096];
    size_t out_len;
    void (*answer)(og_http_req_t *req);
} fake_t;

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
    ((fake_t *)ctx)->answer(req);
}

/* Runs one GET through a fresh connection whose handler is `answer`; returns the response bytes. */
static const char *exchange(fake_t *f, void (*answer)(og_http_req_t *req))
{
    static const char request[] = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
    memset(f, 0, sizeof(*f));
    f->answer = answer;
    f->shared.limits = (og_http_limits_t){16384, 65536, 10000, 30000, 60000, 1 << 20};
    f->shared.handler = f_handler;
    f->shared.ctx = f;
    f->shared.now_us = f_now;
    strcpy(f->shared.rid_prefix, "t-");
    og_http_conn_init(&f->c, &f->shared, &fake_io, 1);
    f->c.data = f;
    og_http_conn_start(&f->c);
    og_http_conn_feed(&f->c, request, sizeof(request) - 1);
    og_http_conn_close(&f->c);
    og_http_conn_io_closed(&f->c);
    return f->out;
}

static void answer_reply(og_http_req_t *req)
{
    og_http_header_t h = {"RateLimit-Limit", 15, "200", 3};
    og_api_reply(req, 200, "ok", json_pack("{s:b}", "up", 1), &h, 1);
}

/* og_api_reply sends the envelope as application/json with the extra headers. */
static void test_reply_sends_envelope(void **state)
{
    fake_t f;
    const char *out = exchange(&f, answer_reply);
    static const char body[] = "{\"success\":true,\"message\":\"ok\",\"data\":{\"up\":true}}";
    assert_non_null(strstr(out, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(out, "Content-Type: application/json\r\n"));
    assert_non_null(strstr(out, "RateLimit-Limit: 200\r\n"));
    char cl[64];
    snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", sizeof(body) - 1);
    assert_non_null(strstr(out, cl));
    assert_string_equal(strstr(out, "\r\n\r\n") + 4, body);
}

static void answer_401(og_http_req_t *req)
{
    og_api_error(req, OG_E_UNAUTHORIZED, NULL, "missing bearer token");
}

/* og_api_error with unauthorized (401) sends the error envelope and WWW-Authenticate: Bearer. */
static void test_error_401_sends_www_authenticate(void **state)
{
    fake_t f;
    const char *out = exchange(&f, answer_401);
    assert_non_null(strstr(out, "HTTP/1.1 401 Unauthorized\r\n"));
    assert_non_null(strstr(out, "WWW-Authenticate: Bearer\r\n"));
    assert_string_equal(strstr(out, "\r\n\r\n") + 4,
                        "{\"success\":false,\"message\":\"missing bearer token\","
                        "\"data\":null,\"error\":{\"code\":\"unauthorized\"}}");
}

static void answer_503(og_http_req_t *req)
{
    og_err_t err;
    og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "database unreachable");
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* og_api_send_error with 503 adds Retry-After: 1. */
static void test_send_error_503_retry_after(void **state)
{
    fake_t f;
    const char *out = exchange(&f, answer_503);
    assert_non_null(strstr(out, "HTTP/1.1 503 "));
    assert_non_null(strstr(out, "Retry-After: 1\r\n"));
    assert_non_null(strstr(out, "\"error\":{\"code\":\"unavailable\"}"));
}

static void answer_503_own_retry(og_http_req_t *req)
{
    og_err_t err;
    og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "draining");
    og_http_header_t h = {"Retry-After", 11, "5", 1};
    og_api_send_error(req, &err, NULL, NULL, &h, 1);
}

/* A caller's Retry-After is sent once and not joined by the default one. */
static void test_send_error_503_caller_retry_after(void **state)
{
    fake_t f;
    const char *out = exchange(&f, answer_503_own_retry);
    assert_non_null(strstr(out, "Retry-After: 5\r\n"));
    assert_null(strstr(out, "Retry-After: 1\r\n"));
}

/* The envelope written with og_api_envelope_open/close around a data object is the text
 * og_api_envelope gives for the same answer: success, and failure with and without a field. */
static void test_envelope_writer_matches(void **state)
{
    og_err_t with_field = {0}, without = {0};
    og_err_fail(&with_field, OG_E_VALIDATION_FAILED, "to", "to must be E.164");
    og_err_fail(&without, OG_E_DELIVERY_FAILED, NULL, "every attempted channel failed");
    const og_err_t *errs[] = {NULL, &with_field, &without};
    for (int i = 0; i < 3; i++) {
        const og_err_t *err = errs[i];
        int status = err != NULL ? og_api_status(err->code) : 200;
        const char *message = err != NULL ? err->message : "Message sent via \"sms\"";
        size_t len;
        char *want = og_api_envelope(
            status, message, json_pack("{s:s,s:[]}", "reference", "msg_1", "skipped"), err, NULL, &len);
        og_jw_t w;
        og_jw_init(&w, 0);
        og_api_envelope_open(&w, status, message);
        og_jw_object(&w);
        og_jw_kstring(&w, "reference", "msg_1");
        og_jw_key(&w, "skipped");
        og_jw_array(&w);
        og_jw_array_end(&w);
        og_jw_object_end(&w);
        og_api_envelope_close(&w, err);
        size_t got_len;
        char *got = og_jw_finish(&w, &got_len);
        assert_string_equal(got, want);
        assert_int_equal(got_len, len);
        free(got);
        free(want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_fills_error),
        cmocka_unit_test(test_fail_null_field_and_truncation),
        cmocka_unit_test(test_status_of_codes),
        cmocka_unit_test(test_status_of_unknown_code),
        cmocka_unit_test(test_envelope_success_null_data),
        cmocka_unit_test(test_envelope_success_with_data),
        cmocka_unit_test(test_envelope_success_flag_boundary),
        cmocka_unit_test(test_envelope_error_with_field),
        cmocka_unit_test(test_envelope_error_without_field),
        cmocka_unit_test(test_envelope_error_details_and_data),
        cmocka_unit_test(test_envelope_writer_matches),
        cmocka_unit_test(test_envelope_message_utf8),
        cmocka_unit_test(test_envelope_message_invalid_utf8),
        cmocka_unit_test(test_headers_401),
        cmocka_unit_test(test_headers_503_adds_retry_after),
        cmocka_unit_test(test_headers_503_keeps_callers_retry_after),
        cmocka_unit_test(test_headers_other_status),
        cmocka_unit_test(test_headers_required_header_wins_space),
        cmocka_unit_test(test_reply_sends_envelope),
        cmocka_unit_test(test_error_401_sends_www_authenticate),
        cmocka_unit_test(test_send_error_503_retry_after),
        cmocka_unit_test(test_send_error_503_caller_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
