/*
 * Provider adapters (API.md §8): one small vtable per channel that builds the provider's HTTP
 * request and classifies its answer into an attempt result, plus og_attempt, which runs one
 * attempt (build, send on the worker's HTTP client, classify). Responsible for speaking each
 * provider's API and mapping its answers to API.md §2 error codes (docs/providers.md); not
 * for choosing channels or recording attempts (send.c, otp.c, engine.c).
 */
#ifndef OMNIGATE_PROVIDERS_PROVIDER_H
#define OMNIGATE_PROVIDERS_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "omnigate/providers/breaker.h"
#include "omnigate/channel.h"
#include "omnigate/config.h"
#include "omnigate/http_client.h"
#include "omnigate/metrics.h"

/* The WAHA session of a whatsapp_qr number registered without one. */
#define OG_WAHA_DEFAULT_SESSION "default"

/* A tenant's own account at a provider (API.md §23: channels.sms.account,
 * channels.whatsapp_qr.server), which replaces the configured one (OMNIGATE_SMS_*, OMNIGATE_QR_*)
 * for that tenant's attempts on the channel. All zero: the configured account. Borrowed strings
 * (tenants/settings.h og_settings_provider_account fills it). */
typedef struct og_provider_account {
    bool own;             /* the tenant has one: everything below replaces the configuration */
    bool sealed;          /* its secret is stored sealed and did not open: not_configured */
    const char *base_url; /* sms: NULL for OMNIGATE_SMS_BASE_URL; whatsapp_qr: the server */
    const char *id;       /* sms: the account sid (the Basic user and the path); whatsapp_qr: NULL */
    const char *secret;   /* sms: the auth token; whatsapp_qr: the X-Api-Key; NULL when sealed */
    /* whatsapp_qr: the key of the HMAC the server signs its webhooks with (clear, or NULL when
     * sealed); sms: NULL (Twilio signs with the auth token). */
    const char *hook_secret;
} og_provider_account_t;

/* What one attempt sends. Borrowed: og_attempt_start copies what it needs. */
typedef struct og_send_params {
    const char *to;              /* E.164 with '+' */
    const char *text;            /* UTF-8 */
    const char *from;            /* WhatsApp sender digits, or the SMS sender id */
    const char *session;         /* whatsapp_qr: WAHA session name; NULL: OG_WAHA_DEFAULT_SESSION */
    const char *phone_number_id; /* whatsapp_meta, from the tenant's settings */
    const char *access_token;    /* whatsapp_meta, from the tenant's settings */
    /* whatsapp_meta: Meta's `template` object (JSON text, templates/render.h) to send instead of
     * `text`, or NULL for a free text. */
    const char *template_json;
    /* sms, whatsapp_qr: the tenant's own account, or all zero for the configured one. An attempt
     * on an own account neither counts in the channel's circuit breaker nor is stopped by it: the
     * breaker measures the configured provider (docs/providers.md, "Own provider accounts"). */
    og_provider_account_t account;
} og_send_params_t;

typedef struct og_attempt_result {
    bool sent;
    char provider_message_id[128]; /* when sent */
    const char *error_code;        /* when not sent: one of OG_ERR_* */
    char error_message[256];       /* when not sent: for humans, valid UTF-8, never a credential */
    char provider_code[32];        /* the provider's own error code, "" when none */
    int http_status;               /* 0 when no status arrived */
    uint64_t latency_us;
    uint32_t retry_after_s; /* the answer's Retry-After (http_client.h), 0 without one */
    /* The provider refused our credentials or the linked session (expired token, wrong key,
     * logged-out WhatsApp session): every attempt on this channel will fail until an operator
     * fixes it. Worth an alert; og_attempt also logs a warning. */
    bool bad_credential;
    /* The provider says the recipient has no WhatsApp (Meta 131026, WAHA "not registered on
     * WhatsApp"): remembered for every tenant (nowa.h). */
    bool not_on_whatsapp;
} og_attempt_result_t;

typedef struct og_provider {
    const char *name;  /* "meta", "waha", "twilio" */
    const char *label; /* for error messages: "Meta Cloud API", "WAHA", "Twilio API" */
    og_channel_t channel;
    /* Fills req (method, url, headers, body, auth) from the configuration and the params (the
     * tenant's own account, p->account, replacing the configured one when it has one). False
     * when something needed is missing: `why` says what (never a secret), and the attempt fails
     * with not_configured. On false, req may hold partial allocations that the caller frees with
     * og_hc_req_clear. */
    bool (*build)(const og_config_t *cfg, const og_send_params_t *p, og_hc_req_t *req, char *why,
                  size_t whylen);
    /* Classifies an HTTP answer (status and body, which need not be NUL-terminated and may be
     * NULL when len is 0) into out: sent + provider_message_id, or the error fields. Sets
     * out->http_status. */
    void (*classify)(long http_status, const char *body, size_t len, og_attempt_result_t *out);
    /* Appends to *h the header lines every request of this provider carries, whatever the
     * tenant and the message (content type, the configured key): made once per worker by
     * og_providers_init and named by each request (og_hc_req.shared_headers) instead of copied
     * into it; build adds only the lines of its own request. `cfg` NULL: the lines of a request
     * on a tenant's own account, which carry no configured credential. False when out of
     * memory. */
    bool (*fixed_headers)(const og_config_t *cfg, og_hc_headers_t **h);
} og_provider_t;

/* The adapter of a channel; NULL for an unknown channel. */
const og_provider_t *og_provider_get(og_channel_t ch);

extern const og_provider_t og_provider_meta;
extern const og_provider_t og_provider_waha;
extern const og_provider_t og_provider_twilio;

/* The providers' metric block (metrics.h): attempts by channel and outcome, their latency, and
 * each channel's circuit breaker. The app registers it (worker.h). */
struct og_providers_metrics;
extern const og_m_block_t og_providers_metrics_block;

/* What attempts need of their worker: its HTTP client and configuration, and one circuit
 * breaker per channel (breaker.h). One per worker, in the gateway's state. */
typedef struct og_providers {
    og_hc_t *hc;
    const og_config_t *cfg;
    og_breaker_t breaker[OG_CH__COUNT];
    uint64_t transitions_reported[OG_CH__COUNT]; /* of breaker[i].transitions, in the metrics */
    og_hc_headers_t *headers[OG_CH__COUNT];      /* each channel's fixed header lines */
    og_hc_headers_t *own_headers[OG_CH__COUNT];  /* the same for a tenant's own account (no key) */
    /* The tenants' own accounts as the webhooks in look them up (providers/accounts.h). */
    struct og_accounts *accounts;
    /* The block in the worker's slot, or NULL: no metrics. Set by the app after
     * og_providers_init. */
    struct og_providers_metrics *m;
} og_providers_t;

/* False when out of memory (the fixed header lines, the accounts cache); og_providers_free
 * frees what was made. */
bool og_providers_init(og_providers_t *pv, og_hc_t *hc, const og_config_t *cfg);

/* Frees the fixed header lines and the accounts cache; no attempt may be in flight any more. */
void og_providers_free(og_providers_t *pv);

/* One attempt: build, send on the worker's HTTP client, classify, call done. */
typedef struct og_attempt og_attempt_t;
struct og_attempt {
    /* The result is set when done is called and not before; until then the same bytes are the
     * HTTP request (private). An attempt at a slow provider is most of a send's life, and it
     * needs only one of the two at a time (issue 20: 456 bytes of every send in flight). */
    union {
        og_attempt_result_t result;
        og_hc_req_t req;
    };
    void (*done)(og_attempt_t *a);
    void *arg;
    /* private */
    og_providers_t *pv; /* NULL once done */
    const og_provider_t *prov;
    long timeout_ms;
    const char *fail_code; /* an attempt not sent: why (OG_ERR_*); req.errbuf holds the message */
    bool configured;
    bool gated; /* went out through the channel's breaker: its ending is recorded there */
    bool probe; /* the half-open breaker's probe */
    bool own;   /* on the tenant's own account (og_send_params.account) */
};

/* Starts attempt a over channel ch; set a->done and a->arg first. a->done is called exactly
 * once, later from the loop (a not_configured failure too, and provider_unavailable when the
 * channel's circuit is open: then nothing is sent), except when the HTTP client has finished
 * closing: then it fails (provider_error, nothing sent) before this returns, so call it last.
 * a must stay valid until done, p need not. When done runs, a holds no allocations: it may be
 * freed or reused. */
void og_attempt_start(og_providers_t *pv, og_channel_t ch, const og_send_params_t *p, og_attempt_t *a);

/* The `error` object of a failed attempt as API.md §2 shows it: code, message, and
 * providerCode / httpStatus when the provider gave them. NULL for a sent attempt. */
json_t *og_attempt_error_json(const og_attempt_result_t *r);

/* The same object written into `w` (jw.h), for the answers built without a tree. */
struct og_jw;
void og_provider_write_error(struct og_jw *w, const og_attempt_result_t *r);

/* ---- for the adapters (src/product/providers/) -------------------------------------------------- */

/* Marks out as failed with `code` and a printf-style message, truncated on a UTF-8 boundary. */
void og_provider_fail(og_attempt_result_t *out, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ", code N" for the provider code recorded in out (og_provider_code), or "" without one: the
 * suffix of "HTTP 400, code 131026" in messages. */
const char *og_provider_code_suffix(const og_attempt_result_t *out, char buf[48]);

/* The classification every adapter ends with, once its own cases (throttling, credentials,
 * sessions) are handled: 4xx provider_rejected, 5xx provider_error, anything else an
 * unexpected answer (provider_error). `text` is the provider's explanation. */
void og_provider_fail_status(og_attempt_result_t *out, const char *label, long status, const char *text);

/* Marks out as sent with message id `id`; false (out untouched) when id is empty or longer than
 * provider_message_id holds. */
bool og_provider_sent(og_attempt_result_t *out, const char *id);

/* RFC 3986 percent-encoding of s[0..len): everything but ALPHA / DIGIT / "-" / "." / "_" / "~"
 * becomes %XX, so the result is safe in a path segment and in a form value. malloc'd; NULL
 * when out of memory. */
char *og_provider_pct_encode(const char *s, size_t len);

/* base without trailing slashes, then the printf-style rest. malloc'd; NULL on failure. */
char *og_provider_url(const char *base, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets out->provider_code from a JSON integer or string (NULL or another type: leaves it "");
 * returns the numeric value, or -1 when there is none. */
long long og_provider_code(og_attempt_result_t *out, const json_t *code);

/* True when s is non-empty printable ASCII without spaces (safe in a header value). */
bool og_provider_header_safe(const char *s);

/* Copies s (which may be NULL: "") into dst as valid UTF-8, cut at a character boundary so it
 * fits; invalid bytes become '?'. Returns dst. */
char *og_provider_copy_utf8(char *dst, size_t dstlen, const char *s);

#endif
