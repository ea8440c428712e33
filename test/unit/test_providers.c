/*
 * Unit tests of the provider adapters (src/product/providers/): the exact request each one builds
 * (URL, headers, auth, every body field, UTF-8 and form-encoding edge cases), the
 * classification of realistic provider answers (one case per row of docs/providers.md,
 * plus garbage and empty bodies), and og_attempt end to end against a loopback server
 * (sent, timeout, unreachable, not_configured).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "omnigate/providers/provider.h"

/* A UTF-8 text with JSON-special, form-special and multi-byte characters. */
static const char tricky_text[] =
    "Kode: 123 & \"quote\" = 50%+tax\nBaris 2 \xc3\xa9\xe2\x82\xac \xf0\x9f\x98\x80 a/b?c#d";

static og_config_t base_cfg(void)
{
    og_config_t c;
    memset(&c, 0, sizeof(c));
    c.attempt_timeout_ms = 10000;
    c.meta_base_url = "https://graph.example.com/";
    c.meta_api_version = "v21.0";
    c.qr_base_url = "http://waha.internal:3000";
    c.qr_api_key = "waha-key-123";
    c.sms_base_url = "https://api.sms.example.com";
    c.sms_account_sid = "AC0123456789abcdef0123456789abcdef";
    c.sms_auth_token = "tok_secret_4567";
    return c;
}

static og_send_params_t base_params(void)
{
    return (og_send_params_t){.to = "+6281234567890",
                              .text = tricky_text,
                              .from = "6281111111111",
                              .session = "tenant-a",
                              .phone_number_id = "109876543210",
                              .access_token = "EAAGsecretTOKEN42"};
}

static json_t *parse_body(const og_hc_req_t *r)
{
    json_error_t err;
    json_t *j = json_loadb(r->body, r->body_len, 0, &err);
    if (j == NULL)
        fail_msg("body is not JSON: %s: %.*s", err.text, (int)r->body_len, r->body);
    return j;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The header lines a request of `prov` goes out with: its own (build's), then the provider's
 * fixed ones (og_providers_init makes them once per worker; make_easy sends them after). */
static void assert_headers(const og_provider_t *prov, const og_config_t *cfg, const og_hc_req_t *r,
                           const char *const *want, int n)
{
    og_hc_headers_t *fixed = NULL;
    assert_true(prov->fixed_headers(cfg, &fixed));
    int k = 0;
    for (int i = 0; og_hc_req_header(r, i) != NULL; i++, k++) {
        assert_true(k < n);
        assert_string_equal(og_hc_req_header(r, i), want[k]);
    }
    assert_int_equal(k, r->nheaders);
    for (int i = 0; og_hc_headers_line(fixed, i) != NULL; i++, k++) {
        assert_true(k < n);
        assert_string_equal(og_hc_headers_line(fixed, i), want[k]);
    }
    assert_int_equal(k, n);
    og_hc_headers_free(fixed);
}

/* ---- channels ----------------------------------------------------------------------------- */

/* Channel names round-trip, and anything else is refused. */
static void channel_names(void **state)
{
    og_channel_t ch;
    for (int i = 0; i < OG_CH__COUNT; i++) {
        assert_true(og_channel_parse(og_channel_name((og_channel_t)i), &ch));
        assert_int_equal(ch, i);
        assert_int_equal(og_provider_get((og_channel_t)i)->channel, i);
    }
    assert_string_equal(og_channel_name(OG_CH_WHATSAPP_QR), "whatsapp_qr");
    assert_string_equal(og_channel_name(OG_CH_WHATSAPP_META), "whatsapp_meta");
    assert_string_equal(og_channel_name(OG_CH_SMS), "sms");
    assert_false(og_channel_parse("SMS", &ch));
    assert_false(og_channel_parse("whatsapp", &ch));
    assert_false(og_channel_parse("", &ch));
    assert_false(og_channel_parse(NULL, &ch));
    assert_null(og_provider_get(OG_CH__COUNT));
    assert_ptr_equal(og_provider_get(OG_CH_WHATSAPP_META), &og_provider_meta);
    assert_ptr_equal(og_provider_get(OG_CH_WHATSAPP_QR), &og_provider_waha);
    assert_ptr_equal(og_provider_get(OG_CH_SMS), &og_provider_twilio);
}

/* ---- request building --------------------------------------------------------------------- */

/* whatsapp_meta: URL with the version and phone number id (base's trailing slash dropped),
 * bearer token, JSON body with exactly the Cloud API fields, digits without '+'. */
static void meta_request(void **state)
{
    og_config_t cfg = base_cfg();
    og_send_params_t p = base_params();
    og_hc_req_t r = {0};
    char why[200] = "";
    assert_true(og_provider_meta.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(r.method, "POST");
    assert_string_equal(r.url, "https://graph.example.com/v21.0/109876543210/messages");
    const char *h[] = {"Authorization: Bearer EAAGsecretTOKEN42", "Content-Type: application/json",
                       "Accept: application/json"};
    assert_headers(&og_provider_meta, &cfg, &r, h, 3);
    assert_null(r.user);
    assert_null(r.password);
    assert_int_equal(r.body_len, strlen(r.body));

    json_t *j = parse_body(&r);
    assert_int_equal(json_object_size(j), 5);
    assert_string_equal(json_string_value(json_object_get(j, "messaging_product")), "whatsapp");
    assert_string_equal(json_string_value(json_object_get(j, "recipient_type")), "individual");
    assert_string_equal(json_string_value(json_object_get(j, "to")), "6281234567890");
    assert_string_equal(json_string_value(json_object_get(j, "type")), "text");
    json_t *text = json_object_get(j, "text");
    assert_int_equal(json_object_size(text), 2);
    assert_true(json_is_false(json_object_get(text, "preview_url")));
    assert_string_equal(json_string_value(json_object_get(text, "body")), tricky_text);
    json_decref(j);
    og_hc_req_clear(&r);

    /* The exact bytes for a plain text, so field order and spacing are pinned too. */
    p.text = "Hello";
    assert_true(og_provider_meta.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(r.body, "{\"messaging_product\":\"whatsapp\",\"recipient_type\":\"individual\","
                                "\"to\":\"6281234567890\",\"type\":\"text\",\"text\":{\"preview_url\":false,"
                                "\"body\":\"Hello\"}}");
    og_hc_req_clear(&r);
}

/* whatsapp_meta without a phone number id, a token, or with a token that would break the
 * header: not configured, and the reason never contains the token. */
static void meta_not_configured(void **state)
{
    og_config_t cfg = base_cfg();
    og_send_params_t p = base_params();
    og_hc_req_t r = {0};
    char why[200];

    p.phone_number_id = NULL;
    assert_false(og_provider_meta.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(why, "the tenant's whatsapp_meta number has no phoneNumberId");
    og_hc_req_clear(&r);

    p = base_params();
    p.access_token = "";
    assert_false(og_provider_meta.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(why, "the tenant's whatsapp_meta number has no accessToken");
    og_hc_req_clear(&r);

    p = base_params();
    p.access_token = "EAAG\r\nX-Injected: 1";
    assert_false(og_provider_meta.build(&cfg, &p, &r, why, sizeof(why)));
    assert_null(strstr(why, "EAAG"));
    og_hc_req_clear(&r);

    p = base_params();
    cfg.meta_base_url = NULL;
    assert_false(og_provider_meta.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(why, "OMNIGATE_META_BASE_URL is not set");
    og_hc_req_clear(&r);
}

/* whatsapp_qr: /api/sendText, X-Api-Key, JSON with session, chatId digits@c.us and the text. */
static void waha_request(void **state)
{
    og_config_t cfg = base_cfg();
    og_send_params_t p = base_params();
    og_hc_req_t r = {0};
    char why[200] = "";
    assert_true(og_provider_waha.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(r.method, "POST");
    assert_string_equal(r.url, "http://waha.internal:3000/api/sendText");
    const char *h[] = {"Content-Type: application/json", "Accept: application/json",
                       "X-Api-Key: waha-key-123"};
    assert_headers(&og_provider_waha, &cfg, &r, h, 3);
    assert_null(r.user);
    json_t *j = parse_body(&r);
    assert_int_equal(json_object_size(j), 3);
    assert_string_equal(json_string_value(json_object_get(j, "session")), "tenant-a");
    assert_string_equal(json_string_value(json_object_get(j, "chatId")), "6281234567890@c.us");
    assert_string_equal(json_string_value(json_object_get(j, "text")), tricky_text);
    json_decref(j);
    og_hc_req_clear(&r);

    /* No key configured: no X-Api-Key header at all; no session: WAHA's "default". */
    cfg.qr_api_key = NULL;
    p.session = NULL;
    assert_true(og_provider_waha.build(&cfg, &p, &r, why, sizeof(why)));
    const char *h2[] = {"Content-Type: application/json", "Accept: application/json"};
    assert_headers(&og_provider_waha, &cfg, &r, h2, 2);
    j = parse_body(&r);
    assert_string_equal(json_string_value(json_object_get(j, "session")), "default");
    json_decref(j);
    og_hc_req_clear(&r);
}

/* whatsapp_qr without OMNIGATE_QR_BASE_URL: not configured. */
static void waha_not_configured(void **state)
{
    og_config_t cfg = base_cfg();
    og_send_params_t p = base_params();
    og_hc_req_t r = {0};
    char why[200];
    cfg.qr_base_url = NULL;
    assert_false(og_provider_waha.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(why, "OMNIGATE_QR_BASE_URL is not set");
    og_hc_req_clear(&r);
    cfg = base_cfg();
    cfg.qr_api_key = "bad key";
    assert_false(og_provider_waha.build(&cfg, &p, &r, why, sizeof(why)));
    assert_null(strstr(why, "bad key"));
    og_hc_req_clear(&r);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes an application/x-www-form-urlencoded value ('+' is a space). */
static char *form_decode(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            out[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else if (s[i] == '+') {
            out[o++] = ' ';
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return out;
}

/* Splits a form body into exactly n name=value pairs in order and checks each. */
static void assert_form(const char *body, const char *const *names, const char *const *values, int n)
{
    const char *p = body;
    for (int i = 0; i < n; i++) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        assert_non_null(eq);
        char *name = form_decode(p, (size_t)(eq - p));
        char *value = form_decode(eq + 1, len - (size_t)(eq + 1 - p));
        assert_string_equal(name, names[i]);
        assert_string_equal(value, values[i]);
        free(name);
        free(value);
        if (i < n - 1)
            assert_non_null(amp);
        else
            assert_null(amp);
        p = amp ? amp + 1 : p + len;
    }
}

/* sms: the Messages.json URL, Basic auth with sid and token, a form body whose To, From and
 * Body survive '&', '=', '+', '%', newlines and UTF-8 exactly. */
static void twilio_request(void **state)
{
    og_config_t cfg = base_cfg();
    og_send_params_t p = base_params();
    p.from = "ACME Co";
    og_hc_req_t r = {0};
    char why[200] = "";
    assert_true(og_provider_twilio.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(r.method, "POST");
    assert_string_equal(r.url,
                        "https://api.sms.example.com/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/"
                        "Messages.json");
    assert_string_equal(r.user, "AC0123456789abcdef0123456789abcdef");
    assert_string_equal(r.password, "tok_secret_4567");
    const char *h[] = {"Content-Type: application/x-www-form-urlencoded", "Accept: application/json"};
    assert_headers(&og_provider_twilio, &cfg, &r, h, 2);
    assert_int_equal(r.body_len, strlen(r.body));
    const char *names[] = {"To", "From", "Body"};
    const char *values[] = {"+6281234567890", "ACME Co", tricky_text};
    assert_form(r.body, names, values, 3);
    /* Only the two separators and three '=' are literal; nothing else needs guessing. */
    int amps = 0, eqs = 0;
    for (const char *c = r.body; *c; c++) {
        amps += *c == '&';
        eqs += *c == '=';
        assert_true(*c > 0x20 && *c < 0x7f);
    }
    assert_int_equal(amps, 2);
    assert_int_equal(eqs, 3);
    assert_true(starts_with(
        r.body, "To=%2B6281234567890&From=ACME%20Co&Body=Kode%3A%20123%20%26%20%22quote%22%20"
                "%3D%2050%25%2Btax%0ABaris%202%20%C3%A9%E2%82%AC%20%F0%9F%98%80%20a%2Fb%3Fc%23d"));
    assert_int_equal(
        strlen(r.body),
        strlen("To=%2B6281234567890&From=ACME%20Co&Body=Kode%3A%20123%20%26%20%22quote%22%20"
               "%3D%2050%25%2Btax%0ABaris%202%20%C3%A9%E2%82%AC%20%F0%9F%98%80%20a%2Fb%3Fc%23d"));
    og_hc_req_clear(&r);
}

/* sms without sid, token or sender: not configured, and the token is never in the reason. */
static void twilio_not_configured(void **state)
{
    og_config_t cfg = base_cfg();
    og_send_params_t p = base_params();
    og_hc_req_t r = {0};
    char why[200];
    cfg.sms_account_sid = NULL;
    assert_false(og_provider_twilio.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(why, "OMNIGATE_SMS_ACCOUNT_SID is not set");
    og_hc_req_clear(&r);
    cfg = base_cfg();
    cfg.sms_auth_token = "";
    assert_false(og_provider_twilio.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(why, "OMNIGATE_SMS_AUTH_TOKEN is not set");
    og_hc_req_clear(&r);
    cfg = base_cfg();
    p.from = NULL;
    assert_false(og_provider_twilio.build(&cfg, &p, &r, why, sizeof(why)));
    assert_string_equal(why, "no SMS sender");
    og_hc_req_clear(&r);
}

/* ---- classification ----------------------------------------------------------------------- */

typedef struct row {
    long status;
    const char *body;
    const char *code;  /* NULL: sent */
    const char *id;    /* when sent */
    const char *pcode; /* provider_code */
    bool bad_credential;
} row_t;

static void check_rows(const og_provider_t *prov, const row_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const row_t *w = &rows[i];
        og_attempt_result_t out;
        memset(&out, 0, sizeof(out));
        prov->classify(w->status, w->body, strlen(w->body), &out);
        if (out.http_status != (int)w->status)
            fail_msg("%s row %zu: http_status %d", prov->name, i, out.http_status);
        if (w->code == NULL) {
            if (!out.sent || strcmp(out.provider_message_id, w->id) != 0)
                fail_msg("%s row %zu: want sent %s, got sent=%d id=%s code=%s (%s)", prov->name, i, w->id,
                         out.sent, out.provider_message_id, out.error_code ? out.error_code : "-",
                         out.error_message);
            if (out.error_code != NULL || out.provider_code[0] || out.bad_credential)
                fail_msg("%s row %zu: sent but error fields set", prov->name, i);
            continue;
        }
        if (out.sent || out.error_code == NULL || strcmp(out.error_code, w->code) != 0)
            fail_msg("%s row %zu: want %s, got sent=%d code=%s (%s)", prov->name, i, w->code, out.sent,
                     out.error_code ? out.error_code : "-", out.error_message);
        if (strcmp(out.provider_code, w->pcode) != 0)
            fail_msg("%s row %zu: provider_code '%s', want '%s'", prov->name, i, out.provider_code, w->pcode);
        if (out.bad_credential != w->bad_credential)
            fail_msg("%s row %zu: bad_credential %d", prov->name, i, out.bad_credential);
        if (out.error_message[0] == '\0' || out.provider_message_id[0] != '\0')
            fail_msg("%s row %zu: message '%s' id '%s'", prov->name, i, out.error_message,
                     out.provider_message_id);
        json_t *js = json_string(out.error_message);
        if (js == NULL)
            fail_msg("%s row %zu: error_message is not valid UTF-8", prov->name, i);
        json_decref(js);
    }
}

#define META_ERR(code, msg)                                                                                  \
    "{\"error\":{\"message\":\"" msg "\",\"type\":\"OAuthException\",\"code\":" #code                        \
    ",\"error_data\":{\"messaging_product\":\"whatsapp\",\"details\":\"" msg                                 \
    "\"},\"fbtrace_id\":\"AbCdEfGh12\"}}"

static const char meta_ok[] = "{\"messaging_product\":\"whatsapp\",\"contacts\":[{\"input\":"
                              "\"6281234567890\",\"wa_id\":\"6281234567890\"}],"
                              "\"messages\":[{\"id\":\"wamid.HBgNNjI4MTIzNDU2Nzg5MBUCABEYEjQ2\"}]}";

/* Every row of the whatsapp_meta table in docs/providers.md. */
static void meta_classify_rows(void **state)
{
    char long_id[300];
    snprintf(long_id, sizeof(long_id), "{\"messages\":[{\"id\":\"wamid.%0200d\"}]}", 7);
    const row_t rows[] = {
        {200, meta_ok, NULL, "wamid.HBgNNjI4MTIzNDU2Nzg5MBUCABEYEjQ2", "", false},
        {201, "{\"messages\":[{\"id\":\"wamid.X\"}]}", NULL, "wamid.X", "", false},
        {200, "{\"messaging_product\":\"whatsapp\",\"messages\":[]}", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {200, "{\"messages\":[{\"id\":12345}]}", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {200, long_id, OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {200, "<html>ok</html>", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {200, "", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {400, META_ERR(131026, "(#131026) Message undeliverable"), OG_ERR_PROVIDER_REJECTED, NULL, "131026",
         false},
        {400, META_ERR(131047, "Re-engagement message"), OG_ERR_PROVIDER_REJECTED, NULL, "131047", false},
        {400, META_ERR(100, "(#100) Invalid parameter"), OG_ERR_PROVIDER_REJECTED, NULL, "100", false},
        {400, META_ERR(131030, "Recipient phone number not in allowed list"), OG_ERR_PROVIDER_REJECTED, NULL,
         "131030", false},
        {400, META_ERR(130429, "Rate limit hit"), OG_ERR_PROVIDER_RATE_LIMITED, NULL, "130429", false},
        {400, META_ERR(131056, "(Business Account, Consumer Account) pair rate limit hit"),
         OG_ERR_PROVIDER_RATE_LIMITED, NULL, "131056", false},
        {400, META_ERR(4, "(#4) Application request limit reached"), OG_ERR_PROVIDER_RATE_LIMITED, NULL, "4",
         false},
        {400, META_ERR(80007, "Rate limit issues"), OG_ERR_PROVIDER_RATE_LIMITED, NULL, "80007", false},
        {429, "{}", OG_ERR_PROVIDER_RATE_LIMITED, NULL, "", false},
        {401, META_ERR(190, "Error validating access token: Session has expired"), OG_ERR_PROVIDER_REJECTED,
         NULL, "190", true},
        {403, META_ERR(10, "(#10) Application does not have permission for this action"),
         OG_ERR_PROVIDER_REJECTED, NULL, "10", true},
        {403, META_ERR(200, "(#200) Permissions error"), OG_ERR_PROVIDER_REJECTED, NULL, "200", true},
        {401, "", OG_ERR_PROVIDER_REJECTED, NULL, "", true},
        {404, "Not Found", OG_ERR_PROVIDER_REJECTED, NULL, "", false},
        {500, META_ERR(131000, "Something went wrong"), OG_ERR_PROVIDER_ERROR, NULL, "131000", false},
        {503, META_ERR(2, "Service temporarily unavailable"), OG_ERR_PROVIDER_ERROR, NULL, "2", false},
        {502, "<html><body>Bad Gateway</body></html>", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {500, "", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {302, "", OG_ERR_PROVIDER_ERROR, NULL, "", false},
    };
    check_rows(&og_provider_meta, rows, sizeof(rows) / sizeof(rows[0]));
}

/* The human message of a Meta error names the status, the code, the message and the details. */
static void meta_error_message(void **state)
{
    const char body[] =
        "{\"error\":{\"message\":\"(#131026) Message undeliverable\",\"type\":\"OAuthException\","
        "\"code\":131026,\"error_data\":{\"messaging_product\":\"whatsapp\",\"details\":"
        "\"Message Undeliverable.\"},\"fbtrace_id\":\"AbCd\"}}";
    og_attempt_result_t out = {0};
    og_provider_meta.classify(400, body, strlen(body), &out);
    assert_string_equal(out.error_message,
                        "Meta Cloud API refused the message (HTTP 400, code 131026): (#131026) "
                        "Message undeliverable: Message Undeliverable.");
    assert_ptr_equal(out.error_code, OG_ERR_PROVIDER_REJECTED);
}

static const char waha_webjs_ok[] =
    "{\"_data\":{\"body\":\"hi\"},\"id\":{\"fromMe\":true,\"remote\":\"6281234567890@c.us\",\"id\":"
    "\"3EB0C767D26A1D0A4F2B\",\"_serialized\":\"true_6281234567890@c.us_3EB0C767D26A1D0A4F2B\"},"
    "\"ack\":1,\"hasMedia\":false,\"body\":\"hi\",\"type\":\"chat\",\"timestamp\":1700000000}";
static const char waha_noweb_ok[] =
    "{\"key\":{\"remoteJid\":\"6281234567890@s.whatsapp.net\",\"fromMe\":true,\"id\":\"BAE5F2B1D0C4A3E7\"},"
    "\"message\":{\"extendedTextMessage\":{\"text\":\"hi\"}},\"messageTimestamp\":\"1700000000\",\"status\":"
    "\"PENDING\"}";

/* Every row of the whatsapp_qr table in docs/providers.md. */
static void waha_classify_rows(void **state)
{
    const row_t rows[] = {
        {201, waha_webjs_ok, NULL, "true_6281234567890@c.us_3EB0C767D26A1D0A4F2B", "", false},
        {201, waha_noweb_ok, NULL, "BAE5F2B1D0C4A3E7", "", false},
        {200, "{\"id\":\"true_6281234567890@c.us_AAAA\",\"timestamp\":1700000000}", NULL,
         "true_6281234567890@c.us_AAAA", "", false},
        {201, "{\"id\":{\"fromMe\":true,\"id\":\"3EB0ONLY\"}}", NULL, "3EB0ONLY", "", false},
        {201, "{\"id\":{}}", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {201, "{\"ok\":true}", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {201, "[\"id\"]", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {201, "sent!", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {200, "", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {401, "{\"message\":\"Unauthorized\",\"statusCode\":401}", OG_ERR_PROVIDER_REJECTED, NULL, "", true},
        {403, "{\"message\":\"Forbidden resource\",\"error\":\"Forbidden\",\"statusCode\":403}",
         OG_ERR_PROVIDER_REJECTED, NULL, "", true},
        {422,
         "{\"error\":\"Session status is not as expected. Try again later or restart the "
         "session\",\"session\":"
         "\"default\",\"status\":\"SCAN_QR_CODE\",\"expected\":[\"WORKING\"]}",
         OG_ERR_PROVIDER_REJECTED, NULL, "", true},
        {422,
         "{\"error\":\"Session status is not as expected. Try again later or restart the "
         "session\",\"session\":"
         "\"default\",\"status\":\"STARTING\",\"expected\":[\"WORKING\"]}",
         OG_ERR_PROVIDER_REJECTED, NULL, "", false},
        {404,
         "{\"message\":\"Session \\\"tenant-a\\\" does not exist\",\"error\":\"Not "
         "Found\",\"statusCode\":404}",
         OG_ERR_PROVIDER_REJECTED, NULL, "", true},
        {400, "{\"message\":[\"chatId must be a string\"],\"error\":\"Bad Request\",\"statusCode\":400}",
         OG_ERR_PROVIDER_REJECTED, NULL, "", false},
        {429, "{\"message\":\"ThrottlerException: Too Many Requests\",\"statusCode\":429}",
         OG_ERR_PROVIDER_RATE_LIMITED, NULL, "", false},
        {500, "{\"statusCode\":500,\"message\":\"Internal server error\"}", OG_ERR_PROVIDER_ERROR, NULL, "",
         false},
        {502, "<html>Bad Gateway</html>", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {503, "", OG_ERR_PROVIDER_ERROR, NULL, "", false},
    };
    check_rows(&og_provider_waha, rows, sizeof(rows) / sizeof(rows[0]));

    og_attempt_result_t out = {0};
    const char *b =
        "{\"message\":[\"chatId must be a string\"],\"error\":\"Bad Request\",\"statusCode\":400}";
    og_provider_waha.classify(400, b, strlen(b), &out);
    assert_string_equal(out.error_message, "WAHA refused the message (HTTP 400): chatId must be a string");
    memset(&out, 0, sizeof(out));
    b = "{\"error\":\"Session status is not as expected. Try again later or restart the "
        "session\",\"session\":"
        "\"default\",\"status\":\"SCAN_QR_CODE\",\"expected\":[\"WORKING\"]}";
    og_provider_waha.classify(422, b, strlen(b), &out);
    assert_string_equal(out.error_message,
                        "WAHA session cannot send (HTTP 422): Session status is not as expected. "
                        "Try again later or restart the session (session status SCAN_QR_CODE)");
}

#define TW_ERR(code, msg, status)                                                                            \
    "{\"code\":" #code ",\"message\":\"" msg "\",\"more_info\":\"https://www.twilio.com/docs/errors/" #code  \
    "\",\"status\":" #status "}"

static const char twilio_ok[] =
    "{\"account_sid\":\"AC0123456789abcdef0123456789abcdef\",\"api_version\":\"2010-04-01\",\"body\":\"hi\","
    "\"date_created\":\"Thu, 24 Aug 2023 05:01:45 +0000\",\"direction\":\"outbound-api\",\"error_code\":null,"
    "\"error_message\":null,\"from\":\"ACME\",\"num_media\":\"0\",\"num_segments\":\"1\",\"price\":null,"
    "\"sid\":\"SM1f0e8ae6ade43cb3c0ce4525424e404f\",\"status\":\"queued\",\"to\":\"+6281234567890\","
    "\"uri\":\"/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages/"
    "SM1f0e8ae6ade43cb3c0ce4525424e404f.json\"}";

/* Every row of the sms table in docs/providers.md. */
static void twilio_classify_rows(void **state)
{
    const row_t rows[] = {
        {201, twilio_ok, NULL, "SM1f0e8ae6ade43cb3c0ce4525424e404f", "", false},
        {200, "{\"sid\":\"SMabc\",\"status\":\"accepted\"}", NULL, "SMabc", "", false},
        {201, "{\"status\":\"queued\"}", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {201, "{\"sid\":null}", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {201, "", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {201, "queued", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {400, TW_ERR(21211, "The 'To' number +15551234567 is not a valid phone number.", 400),
         OG_ERR_PROVIDER_REJECTED, NULL, "21211", false},
        {400, TW_ERR(21610, "Attempt to send to unsubscribed recipient", 400), OG_ERR_PROVIDER_REJECTED, NULL,
         "21610", false},
        {400, TW_ERR(21614, "'To' number is not a valid mobile number", 400), OG_ERR_PROVIDER_REJECTED, NULL,
         "21614", false},
        {400, TW_ERR(21408, "Permission to send an SMS has not been enabled for the region", 400),
         OG_ERR_PROVIDER_REJECTED, NULL, "21408", false},
        {400,
         TW_ERR(21606, "The 'From' phone number provided is not a valid message-capable phone number", 400),
         OG_ERR_PROVIDER_REJECTED, NULL, "21606", false},
        {429, TW_ERR(20429, "Too Many Requests", 429), OG_ERR_PROVIDER_RATE_LIMITED, NULL, "20429", false},
        {400, TW_ERR(14107, "Message rate limit exceeded", 400), OG_ERR_PROVIDER_RATE_LIMITED, NULL, "14107",
         false},
        {429, "", OG_ERR_PROVIDER_RATE_LIMITED, NULL, "", false},
        {401, TW_ERR(20003, "Authenticate", 401), OG_ERR_PROVIDER_REJECTED, NULL, "20003", true},
        {401, "Unauthorized", OG_ERR_PROVIDER_REJECTED, NULL, "", true},
        {404, TW_ERR(20404, "The requested resource was not found", 404), OG_ERR_PROVIDER_REJECTED, NULL,
         "20404", false},
        {500, TW_ERR(20500, "Internal Server Error", 500), OG_ERR_PROVIDER_ERROR, NULL, "20500", false},
        {503, "<html>Service Unavailable</html>", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {500, "", OG_ERR_PROVIDER_ERROR, NULL, "", false},
        {400, "{\"code\":\"21211\",\"message\":\"string code\"}", OG_ERR_PROVIDER_REJECTED, NULL, "21211",
         false},
    };
    check_rows(&og_provider_twilio, rows, sizeof(rows) / sizeof(rows[0]));

    og_attempt_result_t out = {0};
    const char *b = TW_ERR(21211, "The 'To' number +15551234567 is not a valid phone number.", 400);
    og_provider_twilio.classify(400, b, strlen(b), &out);
    assert_string_equal(out.error_message,
                        "Twilio API refused the message (HTTP 400, code 21211): The 'To' number "
                        "+15551234567 is not a valid phone number.");
}

/* Error messages are cut on a UTF-8 character boundary and stay valid UTF-8; invalid bytes
 * become '?'. */
static void utf8_safe_messages(void **state)
{
    char big[2048];
    size_t o = 0;
    o += (size_t)snprintf(big, sizeof(big), "{\"error\":{\"code\":100,\"message\":\"");
    for (int i = 0; i < 200; i++) {
        memcpy(big + o, "\xe2\x82\xac", 3); /* euro sign, 3 bytes */
        o += 3;
    }
    o += (size_t)snprintf(big + o, sizeof(big) - o, "\"}}");
    og_attempt_result_t out = {0};
    og_provider_meta.classify(400, big, o, &out);
    size_t n = strlen(out.error_message);
    assert_true(n > 200 && n < sizeof(out.error_message));
    json_t *s = json_string(out.error_message);
    assert_non_null(s);
    json_decref(s);
    const char *tail = out.error_message + n - 3;
    assert_memory_equal(tail, "\xe2\x82\xac", 3);

    char dst[8];
    og_provider_copy_utf8(dst, sizeof(dst), "ab\xff\xc3(\xe2\x82\xac");
    assert_string_equal(dst, "ab?"
                             "?("); /* the euro sign does not fit in the remaining 2 bytes */
    og_provider_copy_utf8(dst, sizeof(dst), "\xed\xa0\x80x"); /* a surrogate is not UTF-8 */
    assert_string_equal(dst, "???x");
    og_provider_copy_utf8(dst, sizeof(dst), NULL);
    assert_string_equal(dst, "");
}

/* Percent-encoding keeps only RFC 3986 unreserved characters. */
static void pct_encoding(void **state)
{
    char *s = og_provider_pct_encode("aZ09-._~ +&=%/\xc3\xa9", 16);
    assert_string_equal(s, "aZ09-._~%20%2B%26%3D%25%2F%C3%A9");
    free(s);
    s = og_provider_pct_encode("", 0);
    assert_string_equal(s, "");
    free(s);
    char *u = og_provider_url("http://h:1///", "/x/%s", "y");
    assert_string_equal(u, "http://h:1/x/y");
    free(u);
}

/* ---- attempts end to end ------------------------------------------------------------------ */

typedef struct mini {
    uv_tcp_t listener;
    int port;
    const char *response; /* NULL: never answer */
    int requests;
    char last[4096];
    uv_tcp_t *conns[8];
    int nconns;
} mini_t;

typedef struct mconn {
    uv_tcp_t tcp;
    mini_t *m;
    char buf[65536];
    size_t len;
} mconn_t;

static void m_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    mconn_t *c = h->data;
    *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len - 1));
}

static void m_written(uv_write_t *w, int status)
{
    free(w);
}

static void m_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    mconn_t *c = s->data;
    if (n <= 0)
        return;
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    char *end = strstr(c->buf, "\r\n\r\n");
    char *cl = strcasestr(c->buf, "\r\nContent-Length: ");
    if (end == NULL || cl == NULL || c->len < (size_t)(end + 4 - c->buf) + strtoul(cl + 18, NULL, 10))
        return;
    c->m->requests++;
    size_t keep = c->len < sizeof(c->m->last) - 1 ? c->len : sizeof(c->m->last) - 1;
    memcpy(c->m->last, c->buf, keep);
    c->m->last[keep] = '\0';
    c->len = 0;
    if (c->m->response != NULL) {
        uv_write_t *w = malloc(sizeof(*w));
        uv_buf_t out = uv_buf_init((char *)c->m->response, (unsigned)strlen(c->m->response));
        uv_write(w, s, &out, 1, m_written);
    }
}

static void m_accept(uv_stream_t *l, int status)
{
    mini_t *m = l->data;
    mconn_t *c = calloc(1, sizeof(*c));
    c->m = m;
    uv_tcp_init(l->loop, &c->tcp);
    c->tcp.data = c;
    uv_accept(l, (uv_stream_t *)&c->tcp);
    assert_true(m->nconns < 8);
    m->conns[m->nconns++] = &c->tcp;
    uv_read_start((uv_stream_t *)&c->tcp, m_alloc, m_read);
}

static void m_conn_closed(uv_handle_t *h)
{
    free(h->data);
}

static void mini_start(mini_t *m, uv_loop_t *loop, const char *response)
{
    memset(m, 0, sizeof(*m));
    m->response = response;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_init(loop, &m->listener);
    m->listener.data = m;
    assert_int_equal(uv_tcp_bind(&m->listener, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&m->listener, 16, m_accept), 0);
    int len = sizeof(a);
    uv_tcp_getsockname(&m->listener, (struct sockaddr *)&a, &len);
    m->port = ntohs(a.sin_port);
}

static void mini_stop(mini_t *m)
{
    for (int i = 0; i < m->nconns; i++)
        uv_close((uv_handle_t *)m->conns[i], m_conn_closed);
    uv_close((uv_handle_t *)&m->listener, NULL);
}

typedef struct actx {
    og_attempt_t a;
    int done_calls;
} actx_t;

static void attempt_done(og_attempt_t *a)
{
    actx_t *x = a->arg;
    x->done_calls++;
}

static void tick_cb(uv_timer_t *t) {}

static void hc_closed(void *arg)
{
    (*(int *)arg)++;
}

/* Runs one attempt on a fresh loop against a mini server answering `response` (NULL: silent),
 * or against `url` when the server should not be used. Returns the attempt's result. */
static og_attempt_result_t run_attempt(og_channel_t ch, og_config_t *cfg, const char *response,
                                       bool use_server, char *last_request, size_t last_len)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    og_log_t log;
    og_log_init(&log, OG_LOG_ERROR, false);
    mini_t m;
    mini_start(&m, &loop, response);
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", m.port);
    if (use_server) {
        cfg->meta_base_url = cfg->qr_base_url = cfg->sms_base_url = base;
    }
    og_hc_t *hc = og_hc_new(&loop, &log);
    og_send_params_t p = base_params();
    actx_t x = {0};
    x.a.done = attempt_done;
    x.a.arg = &x;
    uv_timer_t tick; /* keeps uv_run(ONCE) returning while the server idles */
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, tick_cb, 20, 20);
    og_providers_t pv;
    assert_true(og_providers_init(&pv, hc, cfg));
    og_attempt_start(&pv, ch, &p, &x.a);
    assert_int_equal(x.done_calls, 0); /* never synchronous, not even not_configured */
    uv_update_time(&loop);
    uint64_t deadline = uv_now(&loop) + 5000;
    while (x.done_calls == 0 && uv_now(&loop) < deadline)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(x.done_calls, 1);
    if (last_request != NULL)
        snprintf(last_request, last_len, "%s", m.last);
    int closed = 0;
    og_hc_close(hc, hc_closed, &closed);
    mini_stop(&m);
    uv_close((uv_handle_t *)&tick, NULL);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(closed, 1);
    assert_int_equal(x.done_calls, 1);
    assert_int_equal(uv_loop_close(&loop), 0);
    og_providers_free(&pv);
    /* After done the attempt is detached from the client and holds nothing: a request not
     * cleared would be a leak, which the test suite's sanitized build reports. */
    assert_null(x.a.pv);
    return x.a.result;
}

/* An SMS attempt against a Twilio-like server: the request arrives with Basic auth and the
 * form body; a 201 with a sid is a sent attempt with that id, its status and a latency. */
static void attempt_sent(void **state)
{
    og_config_t cfg = base_cfg();
    char last[4096];
    const char *body = "{\"sid\":\"SM0123456789\",\"status\":\"queued\"}";
    char resp[256];
    snprintf(resp, sizeof(resp),
             "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    og_attempt_result_t r = run_attempt(OG_CH_SMS, &cfg, resp, true, last, sizeof(last));
    assert_true(r.sent);
    assert_string_equal(r.provider_message_id, "SM0123456789");
    assert_null(r.error_code);
    assert_int_equal(r.http_status, 201);
    assert_true(r.latency_us > 0 && r.latency_us < 2000000);
    assert_true(starts_with(last,
                            "POST /2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages.json "
                            "HTTP/1.1\r\n"));
    /* base64("AC0123456789abcdef0123456789abcdef:tok_secret_4567") */
    assert_non_null(strstr(last, "\r\nAuthorization: Basic "
                                 "QUMwMTIzNDU2Nzg5YWJjZGVmMDEyMzQ1Njc4OWFiY2RlZjp0b2tfc2VjcmV0XzQ1Njc=\r\n"));
    assert_non_null(strstr(last, "\r\n\r\nTo=%2B6281234567890&From=%2B6281111111111&Body=Kode%3A"));
    /* The channel's fixed lines (shared by the worker's requests) go out with it; "Expect:"
     * among them only takes curl's own Expect away. */
    assert_non_null(strstr(last, "\r\nContent-Type: application/x-www-form-urlencoded\r\n"));
    assert_non_null(strstr(last, "\r\nAccept: application/json\r\n"));
    assert_null(strstr(last, "Expect"));
}

/* A Meta 401 with code 190 is provider_rejected with providerCode 190, httpStatus 401 and
 * the credential flag; the message never contains the token. */
static void attempt_rejected_credential(void **state)
{
    og_config_t cfg = base_cfg();
    char last[4096];
    char resp[512];
    const char *body = META_ERR(190, "Error validating access token: Session has expired");
    snprintf(resp, sizeof(resp), "HTTP/1.1 401 Unauthorized\r\nContent-Length: %zu\r\n\r\n%s", strlen(body),
             body);
    og_attempt_result_t r = run_attempt(OG_CH_WHATSAPP_META, &cfg, resp, true, last, sizeof(last));
    assert_false(r.sent);
    assert_string_equal(r.error_code, "provider_rejected");
    assert_string_equal(r.provider_code, "190");
    assert_int_equal(r.http_status, 401);
    assert_true(r.bad_credential);
    assert_null(strstr(r.error_message, "EAAGsecretTOKEN42"));
    assert_non_null(strstr(last, "\r\nAuthorization: Bearer EAAGsecretTOKEN42\r\n"));
    assert_non_null(strstr(last, "\r\nContent-Type: application/json\r\n"));
    assert_non_null(strstr(last, "\r\nAccept: application/json\r\n"));
    assert_null(strstr(last, "Expect"));
    assert_true(starts_with(last, "POST /v21.0/109876543210/messages HTTP/1.1\r\n"));
}

/* A provider that never answers: provider_timeout "no answer in N ms" after the configured
 * attempt timeout. */
static void attempt_timeout(void **state)
{
    og_config_t cfg = base_cfg();
    cfg.attempt_timeout_ms = 250;
    og_attempt_result_t r = run_attempt(OG_CH_WHATSAPP_QR, &cfg, NULL, true, NULL, 0);
    assert_false(r.sent);
    assert_string_equal(r.error_code, "provider_timeout");
    assert_string_equal(r.error_message, "no answer in 250 ms");
    assert_int_equal(r.http_status, 0);
    assert_string_equal(r.provider_code, "");
    assert_true(r.latency_us >= 250000 && r.latency_us < 1000000);
}

/* A port with nothing listening: provider_unreachable. */
static void attempt_unreachable(void **state)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", ntohs(a.sin_port));
    og_config_t cfg = base_cfg();
    cfg.qr_base_url = base;
    og_attempt_result_t r = run_attempt(OG_CH_WHATSAPP_QR, &cfg, NULL, false, NULL, 0);
    close(fd);
    assert_false(r.sent);
    assert_string_equal(r.error_code, "provider_unreachable");
    assert_non_null(strstr(r.error_message, "cannot reach WAHA: "));
    assert_int_equal(r.http_status, 0);
}

/* A channel that is not configured fails with not_configured, asynchronously, without any
 * request reaching the network. */
static void attempt_not_configured(void **state)
{
    og_config_t cfg = base_cfg();
    cfg.sms_account_sid = NULL;
    og_attempt_result_t r =
        run_attempt(OG_CH_SMS, &cfg, "HTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n", false, NULL, 0);
    assert_false(r.sent);
    assert_string_equal(r.error_code, "not_configured");
    assert_string_equal(r.error_message, "OMNIGATE_SMS_ACCOUNT_SID is not set");
    assert_int_equal(r.http_status, 0);
    assert_int_equal(r.latency_us, 0);
}

/* A body over the cap is provider_error with the status kept. */
static void attempt_too_large(void **state)
{
    size_t n = OG_HC_MAX_RESPONSE + 10;
    char *resp = malloc(n + 100);
    int h = snprintf(resp, 100, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", n);
    memset(resp + h, 'x', n);
    resp[(size_t)h + n] = '\0';
    og_config_t cfg = base_cfg();
    og_attempt_result_t r = run_attempt(OG_CH_WHATSAPP_META, &cfg, resp, true, NULL, 0);
    free(resp);
    assert_false(r.sent);
    assert_string_equal(r.error_code, "provider_error");
    assert_string_equal(r.error_message, "Meta Cloud API answered with a body over 256 KiB");
    assert_int_equal(r.http_status, 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(channel_names),
        cmocka_unit_test(meta_request),
        cmocka_unit_test(meta_not_configured),
        cmocka_unit_test(waha_request),
        cmocka_unit_test(waha_not_configured),
        cmocka_unit_test(twilio_request),
        cmocka_unit_test(twilio_not_configured),
        cmocka_unit_test(meta_classify_rows),
        cmocka_unit_test(meta_error_message),
        cmocka_unit_test(waha_classify_rows),
        cmocka_unit_test(twilio_classify_rows),
        cmocka_unit_test(utf8_safe_messages),
        cmocka_unit_test(pct_encoding),
        cmocka_unit_test(attempt_sent),
        cmocka_unit_test(attempt_rejected_credential),
        cmocka_unit_test(attempt_timeout),
        cmocka_unit_test(attempt_unreachable),
        cmocka_unit_test(attempt_not_configured),
        cmocka_unit_test(attempt_too_large),
    };
    return cmocka_run_group_tests_name("providers", tests, NULL, NULL);
}
