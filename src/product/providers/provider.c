/*
 * Channels, the adapter table, one attempt end to end, and the helpers the adapters share.
 * See include/product/omnigate/providers/provider.h; the answer-to-error-code table is docs/providers.md.
 */
#include "omnigate/providers/provider.h"
#include "omnigate/jw.h"
#include "omnigate/metrics.h"
#include "omnigate/providers/accounts.h"
#include "omnigate/util.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const og_provider_t *og_provider_get(og_channel_t ch)
{
    switch (ch) {
    case OG_CH_WHATSAPP_QR:
        return &og_provider_waha;
    case OG_CH_WHATSAPP_META:
        return &og_provider_meta;
    case OG_CH_SMS:
        return &og_provider_twilio;
    case OG_CH__COUNT:
        break;
    }
    return NULL;
}

/* ---- helpers for the adapters -------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* no overlongs */
        else if (c == 0xed)
            hi = 0x9f; /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

char *og_provider_copy_utf8(char *dst, size_t dstlen, const char *s)
{
    if (dstlen == 0)
        return dst;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t o = 0;
    while (*p != '\0') {
        size_t n = utf8_seq(p);
        if (n == 0) {
            if (o + 1 >= dstlen)
                break;
            dst[o++] = '?';
            p++;
            continue;
        }
        if (o + n >= dstlen)
            break;
        memcpy(dst + o, p, n);
        o += n;
        p += n;
    }
    dst[o] = '\0';
    return dst;
}

json_t *og_attempt_error_json(const og_attempt_result_t *r)
{
    if (r->sent)
        return NULL;
    json_t *e = json_pack("{s:s,s:s}", "code", r->error_code ? r->error_code : OG_ERR_PROVIDER_ERROR,
                          "message", r->error_message);
    if (e != NULL && r->provider_code[0])
        json_object_set_new(e, "providerCode", json_string(r->provider_code));
    if (e != NULL && r->http_status)
        json_object_set_new(e, "httpStatus", json_integer(r->http_status));
    return e;
}

void og_provider_write_error(og_jw_t *w, const og_attempt_result_t *r)
{
    og_jw_object(w);
    og_jw_kstring(w, "code", r->error_code ? r->error_code : OG_ERR_PROVIDER_ERROR);
    og_jw_kstring(w, "message", r->error_message);
    if (r->provider_code[0])
        og_jw_kstring(w, "providerCode", r->provider_code);
    if (r->http_status)
        og_jw_kint(w, "httpStatus", r->http_status);
    og_jw_object_end(w);
}

const char *og_provider_code_suffix(const og_attempt_result_t *out, char buf[48])
{
    buf[0] = '\0';
    if (out->provider_code[0])
        snprintf(buf, 48, ", code %s", out->provider_code);
    return buf;
}

void og_provider_fail_status(og_attempt_result_t *out, const char *label, long status, const char *text)
{
    char codes[48];
    og_provider_code_suffix(out, codes);
    if (status >= 400 && status < 500)
        og_provider_fail(out, OG_ERR_PROVIDER_REJECTED, "%s refused the message (HTTP %ld%s): %s", label,
                         status, codes, text);
    else if (status >= 500 && status < 600)
        og_provider_fail(out, OG_ERR_PROVIDER_ERROR, "%s failed (HTTP %ld%s): %s", label, status, codes,
                         text);
    else
        og_provider_fail(out, OG_ERR_PROVIDER_ERROR, "%s answered an unexpected HTTP %ld", label, status);
}

void og_provider_fail(og_attempt_result_t *out, const char *code, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    out->sent = false;
    out->provider_message_id[0] = '\0';
    out->error_code = code;
    og_provider_copy_utf8(out->error_message, sizeof(out->error_message), buf);
}

bool og_provider_sent(og_attempt_result_t *out, const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n >= sizeof(out->provider_message_id))
        return false;
    for (size_t i = 0; i < n; i++) /* ids are ASCII tokens; anything else is not an id */
        if ((unsigned char)id[i] < 0x21 || (unsigned char)id[i] > 0x7e)
            return false;
    memcpy(out->provider_message_id, id, n + 1);
    out->sent = true;
    out->error_code = NULL;
    out->error_message[0] = '\0';
    out->provider_code[0] = '\0';
    out->bad_credential = false;
    return true;
}

long long og_provider_code(og_attempt_result_t *out, const json_t *code)
{
    long long v = -1;
    if (json_is_integer(code)) {
        v = json_integer_value(code);
        snprintf(out->provider_code, sizeof(out->provider_code), "%lld", v);
    } else if (json_is_string(code) && json_string_length(code) > 0) {
        const char *s = json_string_value(code);
        og_provider_copy_utf8(out->provider_code, sizeof(out->provider_code), s);
        char *end;
        long long n = strtoll(s, &end, 10);
        if (*end == '\0' && n >= 0)
            v = n;
    }
    return v;
}

bool og_provider_header_safe(const char *s)
{
    if (s == NULL || *s == '\0')
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

char *og_provider_pct_encode(const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(len * 3 + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
            c == '.' || c == '_' || c == '~') {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}

char *og_provider_url(const char *base, const char *fmt, ...)
{
    size_t blen = strlen(base);
    while (blen > 0 && base[blen - 1] == '/')
        blen--;
    va_list ap;
    va_start(ap, fmt);
    char *rest = NULL;
    int n = vasprintf(&rest, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *url = NULL;
    if (asprintf(&url, "%.*s%s", (int)blen, base, rest) < 0)
        url = NULL;
    free(rest);
    return url;
}

/* ---- metrics ------------------------------------------------------------------------------- */

struct og_providers_metrics {
    uint64_t attempts[OG_CH__COUNT][OG_ATTEMPT_OUTCOMES];
    og_m_hist_t attempt_us[OG_CH__COUNT];
    uint64_t circuit_transitions[OG_CH__COUNT]; /* breaker state changes (breaker.h) */
    uint64_t circuit_refused[OG_CH__COUNT];     /* attempts failed at once by an open circuit */
    uint64_t circuit_state[OG_CH__COUNT];       /* gauge: 0 closed, 1 half-open, 2 open (breaker.h) */
};

static bool channel_label(const void *ctx, int i, const char *v[2])
{
    v[0] = og_channel_name((og_channel_t)i);
    return true;
}

static const og_m_dim_t channels = {OG_CH__COUNT, {"channel", NULL}, NULL, channel_label};
static const og_m_dim_t outcomes = {OG_ATTEMPT_OUTCOMES, {"outcome", NULL}, og_attempt_outcomes, NULL};

#define F(field) offsetof(struct og_providers_metrics, field)

static const og_m_metric_t metrics[] = {
    {"omnigate_provider_attempts_total", OG_M_COUNTER, &channels, &outcomes, F(attempts), OG_M_SUM, NULL,
     false, "Provider attempts by channel and outcome (sent or the attempt error code)."},
    {"omnigate_provider_attempt_duration_seconds", OG_M_HISTOGRAM, &channels, NULL, F(attempt_us), OG_M_SUM,
     &og_m_latency_s, false, "Provider attempt latency (request sent to answer classified), by channel."},
    {"omnigate_circuit_state", OG_M_GAUGE, &channels, NULL, F(circuit_state), OG_M_MAX, NULL, false,
     "Circuit breaker of each channel (API.md §13), the worst of the workers': 0 closed, 1 half-open, 2 "
     "open."},
    {"omnigate_circuit_transitions_total", OG_M_COUNTER, &channels, NULL, F(circuit_transitions), OG_M_SUM,
     NULL, false, "Circuit breaker state changes, by channel, all workers."},
    {"omnigate_circuit_refused_total", OG_M_COUNTER, &channels, NULL, F(circuit_refused), OG_M_SUM, NULL,
     false, "Attempts failed at once (provider_unavailable) because the channel's circuit was open."},
};

const og_m_block_t og_providers_metrics_block = OG_M_BLOCK(struct og_providers_metrics, metrics);

/* An attempt on channel ch ended as `outcome` ("sent" or an attempt error code). */
static void attempt_metrics(struct og_providers_metrics *m, og_channel_t ch, const char *outcome,
                            uint64_t latency_us)
{
    if (m == NULL || (unsigned)ch >= OG_CH__COUNT)
        return;
    int o = OG_ATTEMPT_OUTCOMES - 1;
    for (int i = 0; i < OG_ATTEMPT_OUTCOMES; i++)
        if (outcome != NULL && strcmp(og_attempt_outcomes[i], outcome) == 0) {
            o = i;
            break;
        }
    og_metrics_add(&m->attempts[ch][o], 1);
    og_metrics_observe(&m->attempt_us[ch], &og_m_latency_s, latency_us);
}

/* ---- one attempt --------------------------------------------------------------------------- */

/* The breaker's view of how an attempt that went out ended (breaker.h). */
static og_breaker_outcome_t breaker_outcome(const og_attempt_result_t *res)
{
    bool healthy = res->sent || res->error_code == OG_ERR_PROVIDER_REJECTED ||
                   res->error_code == OG_ERR_PROVIDER_RATE_LIMITED;
    return healthy ? OG_BREAKER_HEALTHY : OG_BREAKER_FAILED;
}

/* Mirrors channel ch's breaker in the worker's metrics. */
static void breaker_metrics(og_providers_t *pv, og_channel_t ch)
{
    struct og_providers_metrics *m = pv->m;
    if (m == NULL)
        return;
    const og_breaker_t *b = &pv->breaker[ch];
    og_metrics_gauge(&m->circuit_state[ch], (uint64_t)b->state);
    og_metrics_add(&m->circuit_transitions[ch], b->transitions - pv->transitions_reported[ch]);
    pv->transitions_reported[ch] = b->transitions;
}

static void attempt_req_done(og_hc_req_t *req)
{
    og_attempt_t *a = container_of(req, og_attempt_t, req);
    /* Classified here and copied into a->result once the request is cleared: the two share
     * their bytes (provider.h). */
    og_attempt_result_t r = {0}, *res = &r;
    const char *label = a->prov ? a->prov->label : "the provider";
    if (a->configured) {
        switch (req->result) {
        case OG_HC_OK:
            a->prov->classify(req->http_status, req->resp, req->resp_len, res);
            break;
        case OG_HC_TIMEOUT:
            og_provider_fail(res, OG_ERR_PROVIDER_TIMEOUT, "no answer in %ld ms", a->timeout_ms);
            break;
        case OG_HC_UNREACHABLE:
        case OG_HC_BLOCKED: /* providers are called without public_only: never */
            og_provider_fail(res, OG_ERR_PROVIDER_UNREACHABLE, "cannot reach %s: %s", label, req->errbuf);
            break;
        case OG_HC_TOO_LARGE:
            og_provider_fail(res, OG_ERR_PROVIDER_ERROR, "%s answered with a body over %d KiB", label,
                             OG_HC_MAX_RESPONSE / 1024);
            break;
        case OG_HC_CANCELLED:
            og_provider_fail(res, OG_ERR_PROVIDER_ERROR, "attempt cancelled: the worker is shutting down");
            break;
        case OG_HC_ERROR:
            og_provider_fail(res, OG_ERR_PROVIDER_ERROR, "%s: %s", label, req->errbuf);
            break;
        }
        res->http_status = (int)req->http_status;
        res->latency_us = req->latency_us;
        res->retry_after_s = (uint32_t)req->retry_after_s;
    } else {
        og_provider_fail(res, a->fail_code, "%s", req->errbuf);
    }
    og_providers_t *pv = a->pv;
    og_hc_t *hc = pv != NULL ? pv->hc : NULL;
    if (a->gated && req->result != OG_HC_CANCELLED) {
        og_channel_t ch = a->prov->channel;
        og_breaker_record(&pv->breaker[ch], uv_now(og_hc_loop(hc)), a->probe, breaker_outcome(res));
        breaker_metrics(pv, ch);
    }
    og_log_t *log = hc ? og_hc_log(hc) : NULL;
    if (pv != NULL && a->prov != NULL)
        attempt_metrics(pv->m, a->prov->channel, res->sent ? "sent" : res->error_code, res->latency_us);
    if (res->bad_credential && log != NULL && og_log_enabled(log, OG_LOG_WARN)) {
        char code[80];
        og_log(log, OG_LOG_WARN, "provider refused the credentials or session; fix the configuration",
               "\"channel\":\"%s\",\"provider\":\"%s\",\"account\":\"%s\",\"httpStatus\":%d,"
               "\"providerCode\":\"%s\"",
               og_channel_name(a->prov->channel), a->prov->name, a->own ? "tenant" : "configured",
               res->http_status,
               og_log_escape(code, sizeof(code), res->provider_code, strlen(res->provider_code)));
    }
    og_hc_req_clear(req);
    a->result = r;
    a->pv = NULL;
    a->done(a);
}

bool og_providers_init(og_providers_t *pv, og_hc_t *hc, const og_config_t *cfg)
{
    memset(pv, 0, sizeof(*pv));
    pv->hc = hc;
    pv->cfg = cfg;
    bool ok = (pv->accounts = og_accounts_new(cfg->auth_ttl_ms)) != NULL;
    for (int i = 0; i < OG_CH__COUNT; i++) {
        og_breaker_init(&pv->breaker[i]);
        const og_provider_t *prov = og_provider_get((og_channel_t)i);
        if (prov != NULL && prov->fixed_headers != NULL)
            ok = ok && prov->fixed_headers(cfg, &pv->headers[i]) &&
                 prov->fixed_headers(NULL, &pv->own_headers[i]);
    }
    return ok;
}

void og_providers_free(og_providers_t *pv)
{
    for (int i = 0; i < OG_CH__COUNT; i++) {
        og_hc_headers_free(pv->headers[i]);
        og_hc_headers_free(pv->own_headers[i]);
        pv->headers[i] = pv->own_headers[i] = NULL;
    }
    og_accounts_free(pv->accounts);
    pv->accounts = NULL;
}

void og_attempt_start(og_providers_t *pv, og_channel_t ch, const og_send_params_t *p, og_attempt_t *a)
{
    const og_config_t *cfg = pv->cfg;
    og_hc_t *hc = pv->hc;
    memset(&a->req, 0, sizeof(a->req));
    a->pv = pv;
    a->prov = og_provider_get(ch);
    a->gated = a->probe = false;
    a->own = p->account.own;
    a->fail_code = NULL;
    a->timeout_ms = cfg->attempt_timeout_ms > 0 ? cfg->attempt_timeout_ms : OG_HC_DEFAULT_TIMEOUT;
    char why[OG_HC_ERRBUF] = "";
    a->configured = a->prov != NULL && a->prov->build(cfg, p, &a->req, why, sizeof(why));
    int rc;
    /* The breaker measures the configured provider: a tenant's own account (API.md §23) is
     * another server, whose failures must not open the channel for every tenant, and which the
     * configured provider's outage must not stop. */
    if (a->configured && cfg->circuit_breaker && !p->account.own) {
        og_breaker_t *b = &pv->breaker[ch];
        a->gated = og_breaker_allow(b, uv_now(og_hc_loop(hc)), &a->probe);
        breaker_metrics(pv, ch);
        if (!a->gated) {
            a->configured = false;
            a->fail_code = OG_ERR_PROVIDER_UNAVAILABLE;
            snprintf(why, sizeof(why), "%s failed repeatedly; not called while its circuit is open",
                     a->prov->label);
            if (pv->m != NULL)
                og_metrics_add(&pv->m->circuit_refused[ch], 1);
        }
    }
    if (!a->configured) {
        if (a->fail_code == NULL) {
            a->fail_code = OG_ERR_NOT_CONFIGURED;
            if (why[0] == '\0')
                snprintf(why, sizeof(why), "the channel is not configured");
        }
        og_hc_req_clear(&a->req); /* what build left, before the request carries the failure */
        a->req.done = attempt_req_done;
        rc = og_hc_complete_later(hc, &a->req, OG_HC_ERROR, why);
    } else {
        a->req.timeout_ms = a->timeout_ms;
        a->req.shared_headers = p->account.own ? pv->own_headers[ch] : pv->headers[ch];
        a->req.done = attempt_req_done;
        rc = og_hc_start(hc, &a->req);
    }
    if (rc != 0) {
        /* The client refused it (it has finished closing) and will never call back: the
         * attempt fails here, nothing was sent. */
        if (a->gated)
            og_breaker_cancel(&pv->breaker[ch], a->probe);
        a->configured = a->gated = false;
        a->pv = NULL;
        a->fail_code = OG_ERR_PROVIDER_ERROR;
        snprintf(a->req.errbuf, sizeof(a->req.errbuf), "attempt not started: the HTTP client is closed");
        attempt_req_done(&a->req);
    }
}
