/*
 * sms: a Twilio-compatible Messages API, API.md §8.
 *   POST {sms_base_url}/2010-04-01/Accounts/{sms_account_sid}/Messages.json
 *   HTTP Basic auth: account sid, auth token
 *   To=<+E164>&From=<sender>&Body=<text>   (application/x-www-form-urlencoded, RFC 3986 %XX)
 *   [&StatusCallback={public_url}/webhooks/twilio when OMNIGATE_PUBLIC_URL is set]
 * A tenant's own account (API.md §23, channels.sms.account) replaces the sid and the token, and
 * the base URL when it gives one (else OMNIGATE_SMS_BASE_URL: where Twilio is for this
 * deployment); its status callbacks come to the same URL, signed with its own token.
 * A long-code sender goes in E.164 (og_phone_sender_wire), as Twilio requires of a number.
 * Success is a 2xx with a string `sid`; errors are {"code","message","more_info","status"},
 * classified by `code` first and the HTTP status second (docs/providers.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "omnigate/phone.h"
#include "omnigate/providers/provider.h"

#define LABEL "Twilio API"

static bool set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

static bool twilio_build(const og_config_t *cfg, const og_send_params_t *p, og_hc_req_t *req, char *why,
                         size_t whylen)
{
    const og_provider_account_t *own = p->account.own ? &p->account : NULL;
    const char *base_url = own != NULL && set(own->base_url) ? own->base_url : cfg->sms_base_url;
    const char *account_sid = own != NULL ? own->id : cfg->sms_account_sid;
    const char *auth_token = own != NULL ? own->secret : cfg->sms_auth_token;
    if (own != NULL && own->sealed) {
        snprintf(
            why, whylen,
            "the tenant's sms account authToken does not open with this OMNIGATE_SECRET (changed since it "
            "was stored?): set the auth token again");
        return false;
    }
    if (!set(base_url)) {
        snprintf(why, whylen, "OMNIGATE_SMS_BASE_URL is not set");
        return false;
    }
    if (!set(account_sid)) {
        snprintf(why, whylen,
                 own != NULL ? "the tenant's sms account has no accountSid"
                             : "OMNIGATE_SMS_ACCOUNT_SID is not set");
        return false;
    }
    if (!set(auth_token)) {
        snprintf(why, whylen,
                 own != NULL ? "the tenant's sms account has no authToken"
                             : "OMNIGATE_SMS_AUTH_TOKEN is not set");
        return false;
    }
    if (p->from == NULL || p->from[0] == '\0') {
        snprintf(why, whylen, "no SMS sender");
        return false;
    }
    if (p->to == NULL || p->text == NULL) {
        snprintf(why, whylen, "no recipient or text");
        return false;
    }
    char *sid = og_provider_pct_encode(account_sid, strlen(account_sid));
    char *to = og_provider_pct_encode(p->to, strlen(p->to));
    char wire_from[OG_PHONE_SENDER_SIZE];
    og_phone_sender_wire(p->from, wire_from);
    char *from = og_provider_pct_encode(wire_from, strlen(wire_from));
    char *text = og_provider_pct_encode(p->text, strlen(p->text));
    if (sid != NULL)
        req->url = og_provider_url(base_url, "/2010-04-01/Accounts/%s/Messages.json", sid);
    /* With a public URL, Twilio reports delivery to us (API.md §10). */
    char *callback = NULL;
    bool callback_ok = true;
    if (cfg->public_url != NULL && cfg->public_url[0] != '\0') {
        char *url = og_provider_url(cfg->public_url, "/webhooks/twilio");
        callback = url != NULL ? og_provider_pct_encode(url, strlen(url)) : NULL;
        free(url);
        callback_ok = callback != NULL;
    }
    if (callback_ok && to != NULL && from != NULL && text != NULL) {
        int n = asprintf(&req->body, "To=%s&From=%s&Body=%s%s%s", to, from, text,
                         callback != NULL ? "&StatusCallback=" : "", callback != NULL ? callback : "");
        if (n < 0)
            req->body = NULL;
        else
            req->body_len = (size_t)n;
    }
    free(sid);
    free(to);
    free(from);
    free(callback);
    if (text != NULL) { /* OTP codes travel in the text */
        explicit_bzero(text, strlen(text));
        free(text);
    }
    req->method = "POST";
    req->user = strdup(account_sid);
    req->password = strdup(auth_token);
    bool ok = req->url != NULL && req->body != NULL && req->user != NULL && req->password != NULL;
    if (!ok)
        snprintf(why, whylen, "out of memory");
    return ok;
}

static void twilio_classify(long status, const char *body, size_t len, og_attempt_result_t *out)
{
    out->http_status = (int)status;
    json_t *root = len > 0 ? json_loadb(body, len, 0, NULL) : NULL;
    if (status >= 200 && status < 300) {
        json_t *sid = json_object_get(root, "sid");
        if (!json_is_string(sid) || !og_provider_sent(out, json_string_value(sid)))
            og_provider_fail(out, OG_ERR_PROVIDER_ERROR, LABEL " answered %ld without a message sid", status);
        json_decref(root);
        return;
    }

    long long code = og_provider_code(out, json_object_get(root, "code"));
    const char *msg = json_string_value(json_object_get(root, "message"));
    if (msg == NULL)
        msg = root == NULL && len > 0 ? "unparseable error body" : "no details";
    char codes[48];
    og_provider_code_suffix(out, codes);

    if (status == 429 || code == 20429 || code == 14107) {
        og_provider_fail(out, OG_ERR_PROVIDER_RATE_LIMITED, LABEL " is throttling (HTTP %ld%s): %s", status,
                         codes, msg);
    } else if (status == 401 || code == 20003) {
        out->bad_credential = true;
        og_provider_fail(out, OG_ERR_PROVIDER_REJECTED,
                         LABEL " refused the account credentials (HTTP %ld%s): %s", status, codes, msg);
    } else {
        og_provider_fail_status(out, LABEL, status, msg);
    }
    json_decref(root);
}

static bool twilio_fixed_headers(const og_config_t *cfg, og_hc_headers_t **h)
{
    return og_hc_headers_add(h, "Content-Type: application/x-www-form-urlencoded") &&
           og_hc_headers_add(h, "Accept: application/json");
}

const og_provider_t og_provider_twilio = {
    .name = "twilio",
    .label = LABEL,
    .channel = OG_CH_SMS,
    .build = twilio_build,
    .fixed_headers = twilio_fixed_headers,
    .classify = twilio_classify,
};
