/*
 * whatsapp_meta: the WhatsApp Business Cloud API (Graph API), API.md §8.
 *   POST {meta_base_url}/{meta_api_version}/{phone_number_id}/messages
 *   Authorization: Bearer {access_token}
 *   {"messaging_product":"whatsapp","recipient_type":"individual","to":"<digits>","type":"text",
 *    "text":{"preview_url":false,"body":"..."}}
 * or, for a template (API.md §18), "type":"template","template":{"name","language":{"policy",
 * "code"},"components":[...]} (Meta's TemplateMessage).
 * Success is a 2xx whose messages[0].id is a string; errors are
 * {"error":{"message","type","code","error_data":{"details"},"fbtrace_id"}}, classified by
 * `code` first and the HTTP status second (docs/providers.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "omnigate/jw.h"
#include "omnigate/providers/provider.h"

#define LABEL "Meta Cloud API"

static bool meta_build(const og_config_t *cfg, const og_send_params_t *p, og_hc_req_t *req, char *why,
                       size_t whylen)
{
    if (cfg->meta_base_url == NULL || cfg->meta_base_url[0] == '\0') {
        snprintf(why, whylen, "OMNIGATE_META_BASE_URL is not set");
        return false;
    }
    if (cfg->meta_api_version == NULL || cfg->meta_api_version[0] == '\0') {
        snprintf(why, whylen, "OMNIGATE_META_API_VERSION is not set");
        return false;
    }
    if (p->phone_number_id == NULL || p->phone_number_id[0] == '\0') {
        snprintf(why, whylen, "the tenant's whatsapp_meta number has no phoneNumberId");
        return false;
    }
    if (p->access_token == NULL || p->access_token[0] == '\0') {
        snprintf(why, whylen, "the tenant's whatsapp_meta number has no accessToken");
        return false;
    }
    if (!og_provider_header_safe(p->access_token)) {
        snprintf(why, whylen, "the tenant's whatsapp_meta accessToken has characters a token cannot have");
        return false;
    }
    if (p->to == NULL || (p->text == NULL && p->template_json == NULL)) {
        snprintf(why, whylen, "no recipient or text");
        return false;
    }
    const char *digits = p->to[0] == '+' ? p->to + 1 : p->to;

    char *ver = og_provider_pct_encode(cfg->meta_api_version, strlen(cfg->meta_api_version));
    char *pnid = og_provider_pct_encode(p->phone_number_id, strlen(p->phone_number_id));
    if (ver != NULL && pnid != NULL)
        req->url = og_provider_url(cfg->meta_base_url, "/%s/%s/messages", ver, pnid);
    free(ver);
    free(pnid);

    og_jw_t w;
    og_jw_init(&w, 160 + strlen(p->template_json != NULL ? p->template_json : p->text));
    og_jw_object(&w);
    og_jw_kstring(&w, "messaging_product", "whatsapp");
    og_jw_kstring(&w, "recipient_type", "individual");
    og_jw_kstring(&w, "to", digits);
    if (p->template_json != NULL) {
        /* Meta's TemplateMessage: the object templates/render.c made, as it is. */
        og_jw_kstring(&w, "type", "template");
        og_jw_key(&w, "template");
        og_jw_raw(&w, p->template_json, strlen(p->template_json));
    } else {
        og_jw_kstring(&w, "type", "text");
        og_jw_key(&w, "text");
        og_jw_object(&w);
        og_jw_key(&w, "preview_url");
        og_jw_bool(&w, false);
        og_jw_kstring(&w, "body", p->text);
        og_jw_object_end(&w);
    }
    og_jw_object_end(&w);
    if (w.replaced) {
        og_jw_free(&w);
        snprintf(why, whylen, "the text is not valid UTF-8");
        return false;
    }
    req->body = og_jw_finish_fit(&w, &req->body_len);
    req->method = "POST";
    bool ok = req->url != NULL && req->body != NULL &&
              og_hc_req_add_header(req, "Authorization: Bearer %s", p->access_token);
    if (!ok)
        snprintf(why, whylen, "out of memory");
    return ok;
}

static bool is_rate_limit_code(long long c)
{
    /* 4: app-level rate limit, 80007: WABA rate limit, 130429: throughput limit,
     * 131056: too many messages to one recipient, 613: call rate limit. */
    return c == 4 || c == 613 || c == 80007 || c == 130429 || c == 131056;
}

static bool is_credential_code(long long c)
{
    /* 190: access token invalid or expired, 10: permission denied, 200-299: permission
     * errors (the token lacks whatsapp_business_messaging, or the number is not the app's). */
    return c == 190 || c == 10 || (c >= 200 && c <= 299);
}

static void meta_classify(long status, const char *body, size_t len, og_attempt_result_t *out)
{
    out->http_status = (int)status;
    json_t *root = len > 0 ? json_loadb(body, len, 0, NULL) : NULL;
    if (status >= 200 && status < 300) {
        json_t *id = json_object_get(json_array_get(json_object_get(root, "messages"), 0), "id");
        if (!json_is_string(id) || !og_provider_sent(out, json_string_value(id)))
            og_provider_fail(out, OG_ERR_PROVIDER_ERROR, LABEL " answered %ld without a message id", status);
        json_decref(root);
        return;
    }

    json_t *err = json_object_get(root, "error");
    long long code = og_provider_code(out, json_object_get(err, "code"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    const char *details = json_string_value(json_object_get(json_object_get(err, "error_data"), "details"));
    char text[600];
    if (msg == NULL)
        snprintf(text, sizeof(text), "%s", root == NULL && len > 0 ? "unparseable error body" : "no details");
    else if (details != NULL && strcmp(details, msg) != 0)
        snprintf(text, sizeof(text), "%s: %s", msg, details);
    else
        snprintf(text, sizeof(text), "%s", msg);
    char codes[48];
    og_provider_code_suffix(out, codes);

    if (status == 429 || is_rate_limit_code(code)) {
        og_provider_fail(out, OG_ERR_PROVIDER_RATE_LIMITED, LABEL " is throttling (HTTP %ld%s): %s", status,
                         codes, text);
    } else if (is_credential_code(code) || status == 401) {
        out->bad_credential = true;
        og_provider_fail(out, OG_ERR_PROVIDER_REJECTED,
                         LABEL " refused the access token or its permissions (HTTP %ld%s): %s", status, codes,
                         text);
    } else {
        og_provider_fail_status(out, LABEL, status, text);
        /* 131026 "Message undeliverable": the number has no WhatsApp (API.md §13). */
        out->not_on_whatsapp = code == 131026;
    }
    json_decref(root);
}

static bool meta_fixed_headers(const og_config_t *cfg, og_hc_headers_t **h)
{
    return og_hc_headers_add(h, "Content-Type: application/json") &&
           og_hc_headers_add(h, "Accept: application/json");
}

const og_provider_t og_provider_meta = {
    .name = "meta",
    .label = LABEL,
    .channel = OG_CH_WHATSAPP_META,
    .build = meta_build,
    .fixed_headers = meta_fixed_headers,
    .classify = meta_classify,
};
