/*
 * Unit tests of request-body decoding and the typed getters (src/net/json.c), on raw buffers so
 * that no connection is needed.
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
#include "omnigate/json.h"

static const char json_ct[] = "application/json";
static const char *const send_fields[] = {"to", "text", "channels", "deliveryMode", NULL};

/* Decodes `body` (a C string) with Content-Type application/json. */
static json_t *decode(const char *body, const char *const *allowed, og_err_t *err)
{
    return og_json_decode(json_ct, strlen(json_ct), body, strlen(body), allowed, err);
}

static json_t *decode_ct(const char *ctype, const char *body, og_err_t *err)
{
    return og_json_decode(ctype, ctype ? strlen(ctype) : 0, body, strlen(body), NULL, err);
}

static void assert_error(const og_err_t *err, int status, const char *code, const char *field)
{
    assert_non_null(err->code);
    assert_int_equal(og_api_status(err->code), status);
    assert_string_equal(err->code->name, code);
    assert_string_equal(err->field, field);
}

/* ---- Content-Type ------------------------------------------------------------------------ */

/* A valid object with all keys allowed decodes. */
static void test_decode_valid_object(void **state)
{
    og_err_t err = {0};
    json_t *v = decode("{\"to\":\"+6281234567890\",\"text\":\"hi\"}", send_fields, &err);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "to")), "+6281234567890");
    assert_null(err.code);
    json_decref(v);
}

/* A missing Content-Type is 415 unsupported_media_type. */
static void test_missing_content_type(void **state)
{
    og_err_t err = {0};
    assert_null(decode_ct(NULL, "{}", &err));
    assert_error(&err, 415, "unsupported_media_type", "");
    assert_string_equal(err.message, "Content-Type must be application/json");
}

/* Another media type is 415, even with a JSON body. */
static void test_wrong_content_type(void **state)
{
    og_err_t err = {0};
    assert_null(decode_ct("text/plain", "{}", &err));
    assert_error(&err, 415, "unsupported_media_type", "");
}

/* A media type that merely starts with application/json is not it. */
static void test_content_type_prefix_is_not_enough(void **state)
{
    og_err_t err = {0};
    assert_null(decode_ct("application/jsonx", "{}", &err));
    assert_error(&err, 415, "unsupported_media_type", "");
}

/* Parameters, surrounding blanks and any case of the media type are accepted. */
static void test_content_type_parameters_and_case(void **state)
{
    og_err_t err = {0};
    json_t *v = decode_ct(" Application/JSON ; charset=utf-8", "{}", &err);
    assert_non_null(v);
    json_decref(v);
}

/* The Content-Type value is taken by length, not up to a NUL. */
static void test_content_type_uses_length(void **state)
{
    og_err_t err = {0};
    const char ct[] = "application/json-patch";
    assert_null(og_json_decode(ct, sizeof(ct) - 1, "{}", 2, NULL, &err));
    assert_int_equal(og_api_status(err.code), 415);
    json_t *v = og_json_decode(ct, 16, "{}", 2, NULL, &err);
    assert_non_null(v);
    json_decref(v);
}

/* ---- syntax and shape -------------------------------------------------------------------- */

/* An empty body is 400 invalid_json. */
static void test_empty_body(void **state)
{
    og_err_t err = {0};
    assert_null(decode("", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
}

/* A syntax error is 400 invalid_json with jansson's text and the position. */
static void test_syntax_error_message(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"to\": }", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
    assert_string_equal(err.message, "invalid JSON: unexpected token near '}' (line 1, column 8, byte 8)");
}

/* Bytes after the object are a syntax error. */
static void test_trailing_garbage(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{} x", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
    assert_non_null(strstr(err.message, "end of file expected"));
}

/* Invalid UTF-8 in a string is 400 invalid_json. */
static void test_invalid_utf8(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"text\":\"caf\xc3\"}", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
}

/* An overlong UTF-8 encoding ("/" as C0 AF) is 400 invalid_json. */
static void test_overlong_utf8(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"text\":\"\xc0\xaf\"}", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
}

/* An escaped NUL (\u0000) in a string is 400 invalid_json. */
static void test_escaped_nul(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"text\":\"a\\u0000b\"}", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
    assert_non_null(strstr(err.message, "\\u0000 is not allowed"));
}

/* A raw NUL byte inside the body is 400 invalid_json. */
static void test_raw_nul_byte(void **state)
{
    og_err_t err = {0};
    static const char body[] = "{\"text\":\"a\0b\"}";
    assert_null(og_json_decode(json_ct, strlen(json_ct), body, sizeof(body) - 1, NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
}

/* A lone surrogate escape is 400 invalid_json. */
static void test_lone_surrogate_escape(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"text\":\"\\ud800\"}", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
}

/* A duplicate key is 400 invalid_json. */
static void test_duplicate_key(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"to\":\"a\",\"to\":\"b\"}", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
    assert_non_null(strstr(err.message, "duplicate object key"));
}

/* A top-level array is 400 invalid_json "body must be a JSON object". */
static void test_top_level_array(void **state)
{
    og_err_t err = {0};
    assert_null(decode("[1,2]", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
    assert_string_equal(err.message, "body must be a JSON object");
}

/* A top-level scalar is 400 invalid_json "body must be a JSON object". */
static void test_top_level_scalar(void **state)
{
    og_err_t err = {0};
    assert_null(decode("\"hello\"", NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
    assert_string_equal(err.message, "body must be a JSON object");
}

/* Builds an object nested `depth` levels deep: {"a":{"a":...{}}}. */
static char *nested(int depth)
{
    char *s = malloc((size_t)depth * 6 + 1);
    char *p = s;
    for (int i = 1; i < depth; i++)
        p += sprintf(p, "{\"a\":");
    p += sprintf(p, "{}");
    for (int i = 1; i < depth; i++)
        *p++ = '}';
    *p = '\0';
    return s;
}

/* Nesting of exactly 16 levels is accepted. */
static void test_depth_16_accepted(void **state)
{
    og_err_t err = {0};
    char *body = nested(16);
    json_t *v = decode(body, NULL, &err);
    assert_non_null(v);
    assert_int_equal(og_json_depth(v), 16);
    json_decref(v);
    free(body);
}

/* Nesting of 17 levels is 400 invalid_json. */
static void test_depth_17_rejected(void **state)
{
    og_err_t err = {0};
    char *body = nested(17);
    assert_null(decode(body, NULL, &err));
    assert_error(&err, 400, "invalid_json", "");
    assert_string_equal(err.message, "JSON nesting is deeper than 16 levels");
    free(body);
}

/* Depth counts containers: scalars 0, empty containers 1, and the deepest branch wins. */
static void test_depth_values(void **state)
{
    json_t *v = json_loads("[1,{\"a\":[[]]},[]]", 0, NULL);
    assert_int_equal(og_json_depth(v), 4);
    json_decref(v);
    json_t *s = json_integer(1);
    assert_int_equal(og_json_depth(s), 0);
    json_decref(s);
}

/* ---- allowed keys ------------------------------------------------------------------------ */

/* An unknown key is 422 unknown_field naming it. */
static void test_unknown_field(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"to\":\"+1\",\"deliverymode\":\"all\"}", send_fields, &err));
    assert_error(&err, 422, "unknown_field", "deliverymode");
    assert_string_equal(err.message, "unknown field \"deliverymode\"");
}

/* With several unknown keys, the first in body order is reported. */
static void test_unknown_field_first_in_body_order(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"zzz\":1,\"to\":\"+1\",\"aaa\":2,\"mmm\":3}", send_fields, &err));
    assert_error(&err, 422, "unknown_field", "zzz");
}

/* Allowed keys are checked at the top level only. */
static void test_allowed_top_level_only(void **state)
{
    og_err_t err = {0};
    json_t *v = decode("{\"channels\":[\"sms\"],\"to\":{\"nested\":1}}", send_fields, &err);
    assert_non_null(v);
    json_decref(v);
}

/* Syntax errors are reported before unknown keys. */
static void test_invalid_json_beats_unknown_field(void **state)
{
    og_err_t err = {0};
    assert_null(decode("{\"bogus\":1,}", send_fields, &err));
    assert_error(&err, 400, "invalid_json", "");
}

/* ---- typed getters ----------------------------------------------------------------------- */

/* A present string is returned. */
static void test_get_string_present(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:s}", "to", "+15551234567");
    const char *s = NULL;
    assert_true(og_json_get_string(o, "to", true, &s, &err));
    assert_string_equal(s, "+15551234567");
    json_decref(o);
}

/* A missing required string is 422 validation_failed naming the field. */
static void test_get_string_missing_required(void **state)
{
    og_err_t err = {0};
    json_t *o = json_object();
    const char *s = NULL;
    assert_false(og_json_get_string(o, "to", true, &s, &err));
    assert_error(&err, 422, "validation_failed", "to");
    assert_string_equal(err.message, "to is required");
    json_decref(o);
}

/* A missing optional string leaves the output untouched. */
static void test_get_string_missing_optional(void **state)
{
    og_err_t err = {0};
    json_t *o = json_object();
    const char *s = "default";
    assert_true(og_json_get_string(o, "sender", false, &s, &err));
    assert_string_equal(s, "default");
    assert_null(err.code);
    json_decref(o);
}

/* A number where a string is expected is 422 "<name> must be a string". */
static void test_get_string_wrong_type(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:i}", "to", 5);
    const char *s = NULL;
    assert_false(og_json_get_string(o, "to", true, &s, &err));
    assert_error(&err, 422, "validation_failed", "to");
    assert_string_equal(err.message, "to must be a string");
    json_decref(o);
}

/* null is a wrong type, not an absent field. */
static void test_get_string_null_is_wrong_type(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:n}", "sender");
    const char *s = NULL;
    assert_false(og_json_get_string(o, "sender", false, &s, &err));
    assert_error(&err, 422, "validation_failed", "sender");
    json_decref(o);
}

/* An integer within the range is returned, bounds included. */
static void test_get_int_bounds(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:i,s:i}", "lo", 4, "hi", 10);
    long long lo = 0, hi = 0;
    assert_true(og_json_get_int(o, "lo", true, 4, 10, &lo, &err));
    assert_true(og_json_get_int(o, "hi", true, 4, 10, &hi, &err));
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 10);
    json_decref(o);
}

/* An integer outside the range is 422 naming the field and the range. */
static void test_get_int_out_of_range(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:i}", "length", 11);
    long long v = 6;
    assert_false(og_json_get_int(o, "length", false, 4, 10, &v, &err));
    assert_error(&err, 422, "validation_failed", "length");
    assert_string_equal(err.message, "length must be an integer between 4 and 10");
    assert_int_equal(v, 6);
    json_decref(o);
}

/* A real number, even 6.0, is not an integer. */
static void test_get_int_rejects_real(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:f}", "length", 6.0);
    long long v = 0;
    assert_false(og_json_get_int(o, "length", true, 4, 10, &v, &err));
    assert_error(&err, 422, "validation_failed", "length");
    json_decref(o);
}

/* A numeric string is not an integer. */
static void test_get_int_rejects_string(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:s}", "length", "6");
    long long v = 0;
    assert_false(og_json_get_int(o, "length", true, 4, 10, &v, &err));
    assert_error(&err, 422, "validation_failed", "length");
    json_decref(o);
}

/* A boolean is returned. */
static void test_get_bool_present(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:b}", "unifiedApiEnabled", 1);
    bool b = false;
    assert_true(og_json_get_bool(o, "unifiedApiEnabled", true, &b, &err));
    assert_true(b);
    json_decref(o);
}

/* 0/1 and "true" are not booleans. */
static void test_get_bool_wrong_type(void **state)
{
    og_err_t err = {0};
    json_t *o = json_pack("{s:i}", "unifiedApiEnabled", 1);
    bool b = false;
    assert_false(og_json_get_bool(o, "unifiedApiEnabled", true, &b, &err));
    assert_error(&err, 422, "validation_failed", "unifiedApiEnabled");
    assert_string_equal(err.message, "unifiedApiEnabled must be true or false");
    json_decref(o);
}

/* A missing required boolean is 422 naming it. */
static void test_get_bool_missing_required(void **state)
{
    og_err_t err = {0};
    json_t *o = json_object();
    bool b = false;
    assert_false(og_json_get_bool(o, "enabled", true, &b, &err));
    assert_error(&err, 422, "validation_failed", "enabled");
    json_decref(o);
}

/* ---- og_json_decode_body, through the connection core ---------------------------------- */

typedef struct fake {
    og_http_conn_t c;
    og_http_shared_t shared;
    og_err_t err;
    char seen[128];
} fake_t;

static void f_write(og_http_conn_t *c, char *data, size_t len)
{
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

/* Decodes the body with og_json_decode_body and records the outcome. */
static void f_handler(og_http_req_t *req, void *ctx)
{
    fake_t *f = ctx;
    json_t *v = og_json_decode_body(req, send_fields, &f->err);
    if (v != NULL) {
        char *dump = json_dumps(v, JSON_COMPACT);
        snprintf(f->seen, sizeof(f->seen), "%s", dump);
        free(dump);
        json_decref(v);
    }
    og_http_respond(req, 204, NULL, 0, NULL, NULL, 0);
}

static void exchange(fake_t *f, const char *request)
{
    memset(f, 0, sizeof(*f));
    f->shared.limits = (og_http_limits_t){16384, 65536, 10000, 30000, 60000, 1 << 20};
    f->shared.handler = f_handler;
    f->shared.ctx = f;
    f->shared.now_us = f_now;
    og_http_conn_init(&f->c, &f->shared, &fake_io, 1);
    f->c.data = f;
    og_http_conn_start(&f->c);
    og_http_conn_feed(&f->c, request, strlen(request));
    og_http_conn_close(&f->c);
    og_http_conn_io_closed(&f->c);
}

/* The body and Content-Type of a request are decoded; the header name is matched in any case. */
static void test_decode_body_from_request(void **state)
{
    fake_t f;
    exchange(&f, "POST /s HTTP/1.1\r\nHost: a\r\ncontent-TYPE: application/json; charset=utf-8\r\n"
                 "Content-Length: 11\r\n\r\n{\"to\":\"+1\"}");
    assert_null(f.err.code);
    assert_string_equal(f.seen, "{\"to\":\"+1\"}");
}

/* A request without Content-Type is 415. */
static void test_decode_body_without_content_type(void **state)
{
    fake_t f;
    exchange(&f, "POST /s HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}");
    assert_int_equal(og_api_status(f.err.code), 415);
    assert_ptr_equal(f.err.code, OG_E_UNSUPPORTED_MEDIA_TYPE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_valid_object),
        cmocka_unit_test(test_missing_content_type),
        cmocka_unit_test(test_wrong_content_type),
        cmocka_unit_test(test_content_type_prefix_is_not_enough),
        cmocka_unit_test(test_content_type_parameters_and_case),
        cmocka_unit_test(test_content_type_uses_length),
        cmocka_unit_test(test_empty_body),
        cmocka_unit_test(test_syntax_error_message),
        cmocka_unit_test(test_trailing_garbage),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_overlong_utf8),
        cmocka_unit_test(test_escaped_nul),
        cmocka_unit_test(test_raw_nul_byte),
        cmocka_unit_test(test_lone_surrogate_escape),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_top_level_array),
        cmocka_unit_test(test_top_level_scalar),
        cmocka_unit_test(test_depth_16_accepted),
        cmocka_unit_test(test_depth_17_rejected),
        cmocka_unit_test(test_depth_values),
        cmocka_unit_test(test_unknown_field),
        cmocka_unit_test(test_unknown_field_first_in_body_order),
        cmocka_unit_test(test_allowed_top_level_only),
        cmocka_unit_test(test_invalid_json_beats_unknown_field),
        cmocka_unit_test(test_get_string_present),
        cmocka_unit_test(test_get_string_missing_required),
        cmocka_unit_test(test_get_string_missing_optional),
        cmocka_unit_test(test_get_string_wrong_type),
        cmocka_unit_test(test_get_string_null_is_wrong_type),
        cmocka_unit_test(test_get_int_bounds),
        cmocka_unit_test(test_get_int_out_of_range),
        cmocka_unit_test(test_get_int_rejects_real),
        cmocka_unit_test(test_get_int_rejects_string),
        cmocka_unit_test(test_get_bool_present),
        cmocka_unit_test(test_get_bool_wrong_type),
        cmocka_unit_test(test_get_bool_missing_required),
        cmocka_unit_test(test_decode_body_from_request),
        cmocka_unit_test(test_decode_body_without_content_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
