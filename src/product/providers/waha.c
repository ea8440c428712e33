/*
 * whatsapp_qr: a QR-linked WhatsApp Web session behind the WAHA HTTP API, API.md §8.
 *   POST {qr_base_url}/api/sendText
 *   X-Api-Key: {qr_api_key}            (only when configured)
 *   {"session":"<session>","chatId":"<digits>@c.us","text":"..."}
 * A tenant's own server (API.md §23, channels.whatsapp_qr.server) replaces the base URL and the
 * key: its request carries that key as a line of its own, not the configured one.
 * Success is a 2xx whose body is the sent message. Where its id lives depends on WAHA's engine:
 * a string `id` (GOWS), an object whose `_serialized` is the full id (WEBJS), or `key.id`
 * (NOWEB); all are accepted. Errors are NestJS-style {"message","statusCode"[,"error"]}, or
 * {"error","session","status","expected"} when the session is not WORKING (docs/providers.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "omnigate/jw.h"
#include "omnigate/providers/provider.h"

#define LABEL "WAHA"

/* Whether an API key is configured (sent by waha_fixed_headers when it is header-safe); NULL
 * (a tenant's own server) has none. */
static bool has_key(const og_config_t *cfg)
{
    return cfg != NULL && cfg->qr_api_key != NULL && cfg->qr_api_key[0] != '\0';
}

static bool waha_build(const og_config_t *cfg, const og_send_params_t *p, og_hc_req_t *req, char *why,
                       size_t whylen)
{
    const og_provider_account_t *own = p->account.own ? &p->account : NULL;
    const char *base_url = own != NULL ? own->base_url : cfg->qr_base_url;
    if (own != NULL && own->sealed) {
        snprintf(
            why, whylen,
            "the tenant's whatsapp_qr server apiKey does not open with this OMNIGATE_SECRET (changed since "
            "it was stored?): set the API key again");
        return false;
    }
    if (base_url == NULL || base_url[0] == '\0') {
        snprintf(why, whylen,
                 own != NULL ? "the tenant's whatsapp_qr server has no baseUrl"
                             : "OMNIGATE_QR_BASE_URL is not set");
        return false;
    }
    if (own == NULL && has_key(cfg) && !og_provider_header_safe(cfg->qr_api_key)) {
        snprintf(why, whylen, "OMNIGATE_QR_API_KEY has characters a key cannot have");
        return false;
    }
    if (own != NULL && !og_provider_header_safe(own->secret)) {
        snprintf(why, whylen,
                 "the tenant's whatsapp_qr server apiKey is missing or has characters a key cannot have");
        return false;
    }
    if (p->to == NULL || p->text == NULL) {
        snprintf(why, whylen, "no recipient or text");
        return false;
    }
    const char *session = p->session != NULL && p->session[0] != '\0' ? p->session : OG_WAHA_DEFAULT_SESSION;
    char chat_id[40];
    snprintf(chat_id, sizeof(chat_id), "%s@c.us", p->to[0] == '+' ? p->to + 1 : p->to);

    req->url = og_provider_url(base_url, "/api/sendText");
    if (own != NULL && !og_hc_req_add_header(req, "X-Api-Key: %s", own->secret)) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    og_jw_t w;
    og_jw_init(&w, 96 + strlen(p->text) + strlen(session));
    og_jw_object(&w);
    og_jw_kstring(&w, "session", session);
    og_jw_kstring(&w, "chatId", chat_id);
    og_jw_kstring(&w, "text", p->text);
    og_jw_object_end(&w);
    if (w.replaced) {
        og_jw_free(&w);
        snprintf(why, whylen, "the text or session name is not valid UTF-8");
        return false;
    }
    req->body = og_jw_finish_fit(&w, &req->body_len);
    req->method = "POST";
    bool ok = req->url != NULL && req->body != NULL;
    if (!ok)
        snprintf(why, whylen, "out of memory");
    return ok;
}

/* The provider message id in a sent-message body, or NULL. */
static const char *message_id(json_t *root)
{
    json_t *id = json_object_get(root, "id");
    if (json_is_string(id))
        return json_string_value(id);
    if (json_is_object(id)) {
        json_t *s = json_object_get(id, "_serialized");
        if (json_is_string(s))
            return json_string_value(s);
        s = json_object_get(id, "id");
        if (json_is_string(s))
            return json_string_value(s);
    }
    id = json_object_get(json_object_get(root, "key"), "id");
    return json_is_string(id) ? json_string_value(id) : NULL;
}

static void waha_classify(long status, const char *body, size_t len, og_attempt_result_t *out)
{
    out->http_status = (int)status;
    json_t *root = len > 0 ? json_loadb(body, len, 0, NULL) : NULL;
    if (status >= 200 && status < 300) {
        const char *id = message_id(root);
        if (id == NULL || !og_provider_sent(out, id))
            og_provider_fail(out, OG_ERR_PROVIDER_ERROR, LABEL " answered %ld without a message id", status);
        json_decref(root);
        return;
    }

    /* "message" is a string, or an array of strings for validation errors. */
    json_t *m = json_object_get(root, "message");
    if (json_is_array(m))
        m = json_array_get(m, 0);
    const char *msg = json_string_value(m);
    if (msg == NULL)
        msg = json_string_value(json_object_get(root, "error"));
    if (msg == NULL)
        msg = root == NULL && len > 0 ? "unparseable error body" : "no details";
    const char *session_status = json_string_value(json_object_get(root, "status"));
    char text[400];
    if (session_status != NULL)
        snprintf(text, sizeof(text), "%s (session status %s)", msg, session_status);
    else
        snprintf(text, sizeof(text), "%s", msg);

    if (status == 429) {
        og_provider_fail(out, OG_ERR_PROVIDER_RATE_LIMITED, LABEL " is throttling (HTTP 429): %s", text);
    } else if (status == 401 || status == 403) {
        out->bad_credential = true;
        og_provider_fail(out, OG_ERR_PROVIDER_REJECTED, LABEL " refused the API key (HTTP %ld): %s", status,
                         text);
    } else if (status == 404 || status == 422) {
        /* No such session, or it is not WORKING (logged out, needs a QR scan, failed, stopped):
         * nothing goes through until an operator fixes the session. STARTING passes by itself. */
        out->bad_credential = session_status == NULL || strcmp(session_status, "STARTING") != 0;
        og_provider_fail(out, OG_ERR_PROVIDER_REJECTED, LABEL " session cannot send (HTTP %ld): %s", status,
                         text);
    } else {
        og_provider_fail_status(out, LABEL, status, text);
        /* WAHA: 400 "The number ... is not registered on WhatsApp" (API.md §13). */
        out->not_on_whatsapp = status == 400 && strstr(msg, "not registered on WhatsApp") != NULL;
    }
    json_decref(root);
}

/* The key is the worker's configuration: the same line for every request. A key that
 * waha_build refuses is left out (no request goes out with it), and so is any key from the lines
 * of a tenant's own server (cfg NULL): its request adds its own. */
static bool waha_fixed_headers(const og_config_t *cfg, og_hc_headers_t **h)
{
    bool with_key = has_key(cfg) && og_provider_header_safe(cfg->qr_api_key);
    return og_hc_headers_add(h, "Content-Type: application/json") &&
           og_hc_headers_add(h, "Accept: application/json") &&
           (!with_key || og_hc_headers_add(h, "X-Api-Key: %s", cfg->qr_api_key));
}

const og_provider_t og_provider_waha = {
    .name = "waha",
    .label = LABEL,
    .channel = OG_CH_WHATSAPP_QR,
    .build = waha_build,
    .fixed_headers = waha_fixed_headers,
    .classify = waha_classify,
};
