/*
 * omnigate-sim: a stand-in for the three providers of API.md §8 (Meta's WhatsApp Cloud API, a
 * WAHA session bridge, a Twilio-compatible Messages API) that the end-to-end tests and the
 * benchmarks point the gateway at. It is an og_app_t on the gateway's own HTTP stack, run in a
 * single worker so that the control state (rules, recorded requests, counters) lives in one
 * process. Responsible for speaking the providers' wire formats and for failing on purpose
 * (README.md: magic numbers and the /__sim control API); not for being a faithful copy of any
 * provider beyond what the gateway's adapters rely on.
 *
 * sim.c holds the state, the behaviour engine (rules, magic numbers, delayed and dropped
 * answers), the recording and the control API; providers.c the three provider endpoints;
 * callbacks.c the status webhooks the providers send back after accepting a message; inbound.c
 * the inbound messages a test makes the providers post to the gateway (POST /__sim/inbound);
 * limits.c the rate limits per sender and their control routes; sessions.c WAHA's session API
 * (create, start, stop, logout, the QR code) and its session.status webhooks, with qrpng.c
 * drawing the QR code.
 */
#ifndef OMNIGATE_SIM_H
#define OMNIGATE_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "omnigate/api.h"
#include "omnigate/http.h"
#include "omnigate/http_client.h"
#include "omnigate/router.h"
#include "omnigate/worker.h"

/* The simulator's own error codes, beside the HTTP core's it answers too (api.h); X(symbol,
 * name, status) as in OG_API_ERRCODES. */
#define SIM_ERRCODES(X)                                                                                      \
    X(SIM_E_TOO_MANY_RULES, "too_many_rules", 422)   /* the rule table is full */                            \
    X(SIM_E_TOO_MANY_WABAS, "too_many_wabas", 422)   /* every template catalogue slot is taken */            \
    X(SIM_E_TOO_MANY_LIMITS, "too_many_limits", 422) /* the rate limit table is full */                      \
    X(SIM_E_NO_CALLBACK_URL, "no_callback_url", 409) /* POST /__sim/inbound without --callback-url */        \
    X(SIM_E_WRONG_SESSION_STATUS, "wrong_session_status", 409) /* a WAHA session control move not allowed */
SIM_ERRCODES(OG_ERRCODE_EXTERN)

typedef enum sim_channel { SIM_CH_QR, SIM_CH_META, SIM_CH_SMS, SIM_CH__COUNT } sim_channel_t;

/* What the simulator does with a request. The order is the digit of the magic numbers for
 * the first seven; 7 and 8 are SIM_OK with latency, 9 is SIM_AUTH (sim.c: magic_plan). The
 * ones after SIM_AUTH have no digit: only a rule asks for them. */
typedef enum sim_behaviour {
    SIM_OK,        /* the provider's success answer */
    SIM_REJECT,    /* a 4xx rejection of this message */
    SIM_ERROR,     /* a 5xx */
    SIM_HANG,      /* no answer until the client gives up */
    SIM_RESET,     /* the connection is reset without an answer */
    SIM_GARBAGE,   /* 200 with a body that is not JSON */
    SIM_THROTTLE,  /* 429 */
    SIM_AUTH,      /* 401, as for a bad credential */
    SIM_OPTED_OUT, /* the provider's 4xx saying the recipient opted out (WAHA has none: as reject) */
    SIM_BEHAVIOUR__COUNT
} sim_behaviour_t;

/* What a provider reports about a message it accepted, by status webhook (callbacks.c). The
 * value is the fourth digit after 1999 of a magic number (README.md). */
typedef enum sim_script {
    SIM_SCRIPT_NONE,            /* no callback */
    SIM_SCRIPT_DELIVERED_READ,  /* sent, delivered, read */
    SIM_SCRIPT_NOT_ON_WHATSAPP, /* failed: the number has no WhatsApp */
    SIM_SCRIPT_OUTSIDE_WINDOW,  /* failed: outside the 24 h window */
    SIM_SCRIPT_UNDELIVERED,     /* undelivered (Twilio), failed (WhatsApp) */
    SIM_SCRIPT_BEFORE_ANSWER,   /* sent, delivered, both before the send is answered */
    SIM_SCRIPT_DUPLICATE,       /* sent, delivered, delivered */
    SIM_SCRIPT_READ_FIRST,      /* sent, read, delivered */
    SIM_SCRIPT_SENT_ONLY,       /* sent */
    SIM_SCRIPT_DELIVERED_ONLY,  /* delivered */
    SIM_SCRIPT__COUNT
} sim_script_t;

/* The pause before each callback, after the previous answer; a rule may change it. */
#define SIM_CALLBACK_DELAY_MS     20
#define SIM_CALLBACK_DELAY_MAX_MS 600000
/* Where the callbacks go; main takes --callback-url into it (callbacks.c). */
#define SIM_CALLBACK_URL_ENV "OMNIGATE_SIM_CALLBACK_URL"

/* The behaviour chosen for one request, how long to wait before acting on it, and the
 * callbacks that follow when it is accepted. */
typedef struct sim_plan {
    sim_behaviour_t behaviour;
    uint64_t latency_ms;
    sim_script_t script;
    uint64_t callback_delay_ms;
} sim_plan_t;

typedef struct sim_cbs sim_cbs_t;
typedef struct sim_cb_run sim_cb_run_t;

/* An HTTP answer being prepared by a provider endpoint. `body` is malloc'd and owned by the
 * answer until sim_finish takes it; header values are static strings. `cb`, when not NULL, are
 * the callbacks that begin when this answer goes out (owned by the answer likewise). */
#define SIM_ANSWER_MAX_HEADERS 2
typedef struct sim_answer {
    int status;
    const char *ctype;
    char *body;
    size_t body_len;
    og_http_header_t headers[SIM_ANSWER_MAX_HEADERS];
    size_t nheaders;
    uint64_t retry_after_s; /* > 0: sim_answer_send adds Retry-After with these seconds */
    sim_cb_run_t *cb;
} sim_answer_t;

/* Outcomes counted by GET /__sim/stats besides the behaviours: refused credentials, a refused
 * body, a sender over its rate limit (limits.c; not the throttle behaviour), and a WAHA send for a
 * session created through the session API that is not WORKING (sessions.c). */
enum {
    SIM_STAT_UNAUTHORIZED = SIM_BEHAVIOUR__COUNT,
    SIM_STAT_INVALID,
    SIM_STAT_RATE_LIMITED,
    SIM_STAT_NOT_WORKING,
    SIM_STAT__COUNT
};

typedef struct sim_record sim_record_t;
typedef struct sim_rule sim_rule_t;
typedef struct sim_pending sim_pending_t;
typedef struct sim_limits sim_limits_t;
typedef struct sim_waha sim_waha_t;

/* ---- WhatsApp message templates -------------------------------------------------------------
 * sim.c keeps one catalogue per WhatsApp Business Account (WABA), set whole by PUT
 * /__sim/meta/wabas/{wabaId}/templates; providers.c lists it (Meta's GET message_templates) and
 * checks template sends against it; callbacks.c sends the template status webhook. */

/* Catalogues kept at most, and templates in one (given and generated together). */
#define SIM_WABAS_MAX       64
#define SIM_TEMPLATES_MAX   20000
#define SIM_WABA_PHONES_MAX 100
/* Buttons of one template at most (Meta's limit), so a send's button index is 0 to 9. */
#define SIM_TEMPLATE_BUTTONS_MAX 10
/* Largest body PUT .../templates accepts: 10,000 templates of Meta's shape fit well. */
#define SIM_TEMPLATES_BODY_MAX (32u * 1024 * 1024)

/* What Meta's template listing does for one WABA: PUT's "listBehaviour". */
typedef enum sim_list_behaviour { SIM_LIST_OK, SIM_LIST_ERROR, SIM_LIST_AUTH } sim_list_behaviour_t;

/* One WABA's catalogue. The JSON values are owned here and replaced whole by each PUT; only a
 * status change (POST .../templates/status) edits a template in place. */
typedef struct sim_waba {
    char id[24];       /* digits */
    json_t *phone_ids; /* array of digit strings: the phone number ids bound to this WABA */
    json_t *templates; /* array of template objects in Meta's shape, in listing order */
    json_t *index;     /* "<language>:<name>" -> position in `templates` (neither has ':') */
    sim_list_behaviour_t list;
} sim_waba_t;

/* Everything the simulator knows, in w->app_data. Freed in the close callback of `check`. */
typedef struct sim {
    og_worker_t *w;
    uv_check_t check; /* notices the worker starting to drain */
    bool drain_seen;

    uint64_t rng; /* splitmix64 state for ids; not a secret */

    /* Rules of POST /__sim/rules, oldest first; matched newest first. */
    sim_rule_t *rules;
    size_t nrules, rules_cap;
    uint64_t next_rule_id;

    /* Recorded requests: a ring of SIM_RECORDS_MAX, oldest at ring[(head - count) mod max]. */
    sim_record_t *ring;
    size_t head, count;

    /* Answers waiting on a timer (latency, hang): a doubly linked list, for drain and stop. */
    sim_pending_t *pending;
    size_t npending;

    uint64_t stats[SIM_CH__COUNT][SIM_STAT__COUNT];
    uint64_t hooks[2]; /* POST /__sim/hooks/{ok,hang}: tenant webhook requests received */

    /* Template catalogues, in the order they were first PUT; wabas[0..nwabas) are in use. */
    sim_waba_t wabas[SIM_WABAS_MAX];
    size_t nwabas;
    uint64_t next_template_id; /* the id given to the next template PUT without one */

    sim_limits_t *limits; /* rate limits per sender (limits.c) */
    sim_waha_t *waha;     /* WAHA's sessions (sessions.c) */

    sim_cbs_t *cbs; /* callbacks.c; NULL without --callback-url */
    int closing;    /* pieces still closing in sim_stop (the check, the callbacks) */
} sim_t;

static inline sim_t *sim_of(void *ctx)
{
    return ((og_worker_t *)ctx)->app_data;
}

/* "whatsapp_qr", "whatsapp_meta", "sms". */
const char *sim_channel_name(sim_channel_t ch);

/* Appends a request to the ring: `to` is the recipient's digits ("" when the body had none). */
void sim_record(sim_t *s, sim_channel_t ch, const og_http_req_t *req, const char *to_digits);

/* The behaviour for a request to `to_digits` ("" when unknown) on `ch`: the newest matching
 * rule, else the magic digits of README.md, else ok. */
sim_plan_t sim_plan(const sim_t *s, sim_channel_t ch, const char *to_digits);

/* True for the behaviours that happen before the provider looks at the request: hang, reset
 * and garbage come from the network or a broken proxy, so neither credentials nor the body
 * matter. */
bool sim_behaviour_is_transport(sim_behaviour_t b);

/* Acts on `plan` for `req`: now, or after plan->latency_ms. For SIM_HANG and SIM_RESET the
 * answer is ignored (and may be empty); otherwise it is sent. Counts the outcome `stat`
 * (a sim_behaviour_t or SIM_STAT_*) on `ch` (SIM_CH__COUNT: on none). Takes the answer's body. */
void sim_finish(sim_t *s, sim_channel_t ch, og_http_req_t *req, const sim_plan_t *plan, int stat,
                sim_answer_t *ans);

/* Sends the answer now and frees its body; a->cb must be NULL (see sim_cb_begin). */
void sim_answer_send(og_http_req_t *req, sim_answer_t *a);
/* Sets the answer (taking `body`, which may be NULL when len is 0). */
void sim_answer_set(sim_answer_t *a, int status, const char *ctype, char *body, size_t len);
/* Adds a header with static name and value. */
void sim_answer_header(sim_answer_t *a, const char *name, const char *value);

/* Wall-clock milliseconds since the epoch. */
int64_t sim_now_ms(void);

/* Random helpers for provider ids. */
uint64_t sim_rand(sim_t *s);
/* `n` random characters from `alphabet` into out (NUL-terminated; out has room for n + 1). */
void sim_rand_chars(sim_t *s, char *out, size_t n, const char *alphabet);

/* A Meta message id for a message to (`incoming` false) or from (true) the number `digits` (at
 * most 20): "wamid." and base64 of what Meta's ids carry (the number and a random hex id), so
 * that it looks and decodes like the real ones. */
void sim_meta_wamid(sim_t *s, const char *digits, bool incoming, char out[128]);

/* A JSON string of s[0..len); bytes that are not UTF-8 become U+FFFD so that any body can be
 * shown. Never NULL (null when out of memory). */
json_t *sim_json_text(const char *s, size_t len);

/* 1 to `max` bytes, each in `set`. */
bool sim_chars_in(const char *v, size_t max, const char *set);

/* validation_failed on `field`, saying "<field> <what>"; false, so that a check can return it. */
bool sim_field_fail(og_err_t *err, const char *field, const char *what);

/* Provider endpoints (providers.c). */
void sim_meta_send(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_meta_templates(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_send(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_twilio_send(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* Keeps only the digits of a recipient: "+1 999-110" -> "1999110" in out (NUL-terminated).
 * False when s has something else than digits after an optional '+' (spaces allowed in
 * between for query strings, where '+' decodes to a space), is empty, or is longer than 20. */
bool sim_to_digits(const char *s, size_t len, char out[24]);

/* ---- template catalogues (sim.c) ----------------------------------------------------------- */

/* The catalogue of WABA `id`, or NULL. */
const sim_waba_t *sim_waba_find(const sim_t *s, const char *id);

/* The catalogue `phone_id` is bound to, or NULL when it is bound to none. */
const sim_waba_t *sim_waba_of_phone(const sim_t *s, const char *phone_id);

/* The template of `w` (NULL: none) called `name` in `language`, or NULL. Borrowed. The lengths
 * are the JSON strings' own, so that a name with a NUL in it matches nothing. */
json_t *sim_template_find(const sim_waba_t *w, const char *name, size_t name_len, const char *language,
                          size_t language_len);

/* The distinct placeholders of a template text, in order of first appearance and without their
 * braces ("Hi {{1}}, {{2}} {{1}}" gives ["1", "2"]; "{{first_name}}" gives ["first_name"]): a new
 * array, or NULL when out of memory. A placeholder is "{{" 1 to 64 letters, digits or '_' "}}". */
json_t *sim_template_placeholders(const char *text);

/* ---- rate limits per sender (limits.c) ------------------------------------------------------ */

/* A sender is Meta's phone number id, WAHA's session, Twilio's From (or MessagingServiceSid):
 * at most this many bytes. A longer one is never limited (no limit can name it). */
#define SIM_SENDER_MAX 64

/* The limits and their buckets, empty; NULL when out of memory. sim_limits_free(NULL) is fine. */
sim_limits_t *sim_limits_new(void);
void sim_limits_free(sim_limits_t *l);

/* Takes `cost` tokens (1 a message; an SMS's segments) from the bucket of `sender` on `ch`. True
 * when the request may go on: no limit covers the sender, or its bucket had the tokens. False,
 * with the seconds until it will have them in *retry_after_s, when the provider must answer its
 * 429; such a request takes nothing. O(1): one hash lookup, and a new bucket on a sender's first
 * request under a channel-wide limit. */
bool sim_limit_take(sim_t *s, sim_channel_t ch, const char *sender, size_t sender_len, unsigned cost,
                    uint64_t *retry_after_s);

/* PUT, GET and DELETE /__sim/limits (README.md). */
void sim_limits_put(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_limits_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_limits_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* ---- status callbacks (callbacks.c) --------------------------------------------------------- */

/* What the callbacks about an accepted message say; sim_cb_prepare copies it. */
typedef struct sim_msg {
    const char *id;              /* the message id the send answered with */
    const char *to;              /* Meta: digits; WAHA: the chatId; Twilio: +digits */
    const char *from;            /* WAHA: the session's own chat id; Twilio: From; else NULL */
    const char *account;         /* Meta: phone number id; WAHA: session; Twilio: AccountSid */
    const char *service;         /* Twilio: MessagingServiceSid, or NULL */
    const char *status_callback; /* Twilio: the send's StatusCallback, or NULL */
    /* Where the callbacks go instead of the callback URL's webhook, signed with `key` (NULL:
     * unsigned) instead of the provider's secret: a WAHA session's message.ack webhook. NULL: the
     * callback URL's. */
    const char *url, *key;
} sim_msg_t;

/* "none", "delivered_read", ... (README.md), and back; false for an unknown name. */
const char *sim_script_name(sim_script_t sc);
bool sim_script_parse(const char *name, sim_script_t *out);

/* Takes --callback-url URL (or --callback-url=URL) out of argv[0..*argc) into the environment
 * variable SIM_CALLBACK_URL_ENV, where sim_start finds it, and checks that variable. False,
 * with one line in err, for a flag without a value or a URL that is not http(s). */
bool sim_cb_take_flag(int *argc, char **argv, char *err, size_t errlen);

/* Sets s->cbs up: the outbound client, and the callback URL `url` (NULL or "": none, so no status
 * callback, template webhook nor inbound message). -1 when out of memory. */
int sim_cb_start(sim_t *s, const char *url);

/* The callbacks `plan` scripts after `ch` accepted `msg`, to be put in the answer's `cb`, or
 * NULL: none scripted, no callback URL, or the worker is draining. */
sim_cb_run_t *sim_cb_prepare(sim_t *s, sim_channel_t ch, const sim_plan_t *plan, const sim_msg_t *msg);

/* Sends `ans` and begins ans->cb, which it takes with the body: the callbacks go out one after
 * the other once the answer has gone out, or, for before_answer, the answer is held until the
 * last callback's POST has been answered or a try has failed. */
void sim_cb_begin(sim_t *s, og_http_req_t *req, sim_answer_t *ans);

/* Frees callbacks that never began (their answer was dropped). NULL is fine. */
void sim_cb_discard(sim_cb_run_t *run);

/* The worker drains: held answers go out now, callbacks not yet delivered are dropped, and
 * no more are scripted. */
void sim_cb_drain(sim_t *s);

/* The app stops: drops what is left (held answers too: their connections are gone), closes
 * the HTTP client and calls closed(s) once its handles are closed, perhaps at once. */
void sim_cb_stop(sim_t *s, void (*closed)(sim_t *s));

/* What Meta's message_template_status_update webhook says; sim_cb_template_status copies it. */
typedef struct sim_template_event {
    const char *waba_id;
    const char *template_id; /* digits, at most 18: sent as a JSON number */
    const char *name;
    const char *language;
    const char *event;  /* the template's new status */
    const char *reason; /* "NONE" when there is none */
} sim_template_event_t;

/* POSTs Meta's template status webhook for `ev` to URL/webhooks/meta at once: signed, retried and
 * recorded like the status callbacks (messageId: the template id). False when nothing is sent: no
 * callback URL, the worker draining, or out of memory. */
bool sim_cb_template_status(sim_t *s, const sim_template_event_t *ev);

/* POSTs `body` (taking the reference) as compact JSON to `url`, signed as `ch`'s provider signs its
 * webhooks, keyed with `key` (NULL: unsigned); retried and recorded like the status callbacks, under
 * `record_id` as the record's messageId. In order: at once, or after the POSTs of the same record_id
 * to the same url still under way. Needs no callback URL. False when nothing is sent: the worker
 * draining, or out of memory. */
bool sim_cb_post(sim_t *s, sim_channel_t ch, const char *url, const char *key, const char *record_id,
                 json_t *body);

/* The number Meta's webhooks show as the business's display_phone_number (Meta's own example). */
#define SIM_META_DISPLAY_NUMBER "15550783881"

/* ---- what callbacks.c shares with inbound.c -------------------------------------------------- */

/* The key that signs a provider's webhooks: OMNIGATE_META_APP_SECRET, OMNIGATE_QR_WEBHOOK_SECRET,
 * OMNIGATE_SMS_AUTH_TOKEN; NULL when unset (the webhooks go unsigned). */
const char *sim_cb_secret(const sim_t *s, sim_channel_t ch);

/* "meta", "waha", "twilio": the provider of a channel, as records and webhook paths name it. */
const char *sim_cb_provider_name(sim_channel_t ch);

/* Clears r and sets it up as a webhook POST of `ch`'s provider to `url` (copied): the callbacks'
 * timeout and response cap, the provider's User-Agent, `done`. False when out of memory. */
bool sim_cb_request_init(og_hc_req_t *r, sim_channel_t ch, const char *url, void (*done)(og_hc_req_t *r));

/* Sets r's body to v (taking the reference) as compact JSON, with its Content-Type. */
bool sim_json_body(og_hc_req_t *r, json_t *v);

/* Sign r's body as Meta (X-Hub-Signature-256: sha256=<hex HMAC-SHA256>) and WAHA (X-Webhook-Hmac:
 * <hex HMAC-SHA512>, X-Webhook-Hmac-Algorithm: sha512) do, keyed with `secret`; nothing when it is
 * NULL. False when out of memory. */
bool sim_sign_meta(og_hc_req_t *r, const char *secret);
bool sim_sign_waha(og_hc_req_t *r, const char *secret);

/* One field of a form body; the value may be "". */
typedef struct sim_field {
    const char *name, *value;
} sim_field_t;
#define SIM_FORM_FIELDS_MAX 32

/* Sets r's body to the fields (at most SIM_FORM_FIELDS_MAX), form-encoded in the order given,
 * with its Content-Type, and, when `secret` is set, X-Twilio-Signature: base64(HMAC-SHA1(secret,
 * url + each field sorted by name as name then value)), url being exactly the one posted to. */
bool sim_form_twilio(og_hc_req_t *r, const char *url, const sim_field_t *fields, size_t n,
                     const char *secret);

/* A WAHA event id: "evt_" and 26 random lowercase base32 characters. */
#define SIM_WAHA_EVENT_ID_SIZE 31
void sim_waha_event_id(sim_t *s, char out[SIM_WAHA_EVENT_ID_SIZE]);

/* The callbacks' outbound client, or NULL without a callback URL or once the worker drains. */
og_hc_t *sim_cb_client(const sim_t *s);
/* The callback URL without trailing slashes, or NULL without one. */
const char *sim_cb_base_url(const sim_t *s);

/* A POST made outside the callback runs (an inbound message, one try) has started, and has ended
 * (its done callback): counted in GET /__sim/stats' callbacks (sent, ok or failed, pending
 * meanwhile) and recorded in GET /__sim/callbacks under `message_id`, like a callback's try. A
 * try cancelled by a drain is neither recorded nor counted as failed. */
void sim_cb_try_started(sim_t *s);
void sim_cb_try_ended(sim_t *s, sim_channel_t ch, const char *message_id, const og_hc_req_t *r,
                      int64_t sent_at);

/* What WAHA's webhooks say about the server that sends them (devlikeapro/waha src/version.ts, the
 * WEBJS engine): the envelope's "engine" and "environment". */
#define SIM_WAHA_VERSION "2024.10.8"
#define SIM_WAHA_ENGINE  "WEBJS"
#define SIM_WAHA_BROWSER "/usr/bin/chromium"
/* A new {"version","engine","tier","browser"} object (NULL when out of memory). */
json_t *sim_waha_environment(void);

/* ---- WAHA sessions (sessions.c) -------------------------------------------------------------- */

/* The number a WAHA send names as its sender when its session is not one of the session API's. */
#define SIM_WAHA_DEFAULT_NUMBER "15550100000"

/* The sessions, empty; NULL when out of memory. */
sim_waha_t *sim_waha_new(void);

/* True when the request's X-Api-Key is one of OMNIGATE_QR_API_KEY's comma-separated keys, or when
 * that setting is unset. */
bool sim_waha_key_ok(const sim_t *s, const og_http_req_t *req);

/* What a send may do about its session (sim_waha_gate). */
typedef enum sim_waha_gate {
    SIM_WAHA_GO,      /* the session is not the session API's, or it is WORKING: send */
    SIM_WAHA_REFUSED, /* the answer is WAHA's 404 or 422 (set in `a`) */
    SIM_WAHA_HELD,    /* the session is STARTING: the request is held, resume(s, req) follows */
} sim_waha_gate_t;

/* The check WAHA makes of a send's session (its getWorkingSession) once the body is valid. For a
 * session created through the session API: WORKING goes on, with its own chat id ("<digits>@c.us")
 * in `from` (else `from` is left as it is); STOPPED is 404; SCAN_QR_CODE and FAILED are 422
 * "Session status is not as expected"; STARTING holds the request until the session leaves it (or
 * WAHA's 5 s pass), then calls resume, which runs the endpoint again with `resumed` true: that
 * call is never held again. A session never created through the API goes on as before. */
sim_waha_gate_t sim_waha_gate(sim_t *s, og_http_req_t *req, const char *session, bool resumed,
                              sim_answer_t *a, char from[40], void (*resume)(sim_t *s, og_http_req_t *req));

/* The first webhook of the config of `session`, a session created through the session API, that
 * asked for `event` ("message", "message.ack"): its URL and its hmac key (NULL: none) in *url and
 * *key, borrowed until the session changes. False for another session or when none asked. */
bool sim_waha_webhook(const sim_t *s, const char *session, const char *event, const char **url,
                      const char **key);

/* The number linked to `session`, a session created through the session API, in `digits`; false
 * when it is another session or none is linked. */
bool sim_waha_linked(const sim_t *s, const char *session, char digits[24]);

/* The worker drains: held requests are resumed now, timers stop, no webhook is sent any more. */
void sim_waha_drain(sim_t *s);
/* The app stops: drops held requests (their connections are gone), frees the sessions and closes
 * their timers; closed(s) is called once per timer closed. Returns how many that will be. */
int sim_waha_stop(sim_t *s, void (*closed)(sim_t *s));

/* WAHA's session API and QR code (README.md: WAHA sessions). */
void sim_waha_sessions_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_sessions_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_session_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_session_update(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_session_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_session_me(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_session_action(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_qr(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* Their control routes under /__sim/waha (README.md). */
void sim_waha_ctl_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_ctl_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_ctl_scan(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_ctl_status(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_ctl_settings_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_waha_ctl_settings_put(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* ---- QR codes (qrpng.c) ---------------------------------------------------------------------- */

/* A PNG of the QR code of `text` (8-bit data, error correction level M, as WAHA's QRCode.toDataURL
 * draws it: 4 pixels a module, a quiet zone of 4 modules, black on white): malloc'd, its length in
 * *len; NULL when the text does not fit a QR code or out of memory. */
unsigned char *sim_qr_png(const char *text, size_t *len);

/* ---- inbound messages (inbound.c) ------------------------------------------------------------ */

/* POST /__sim/inbound (README.md: Inbound messages): posts one provider's inbound-message webhook
 * to the callback URL and answers once the gateway has. */
void sim_inbound_post(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* The "callbacks" object of GET /__sim/stats, and DELETE /__sim/stats for it. */
json_t *sim_cb_stats(const sim_t *s);
void sim_cb_stats_clear(sim_t *s);

/* GET /__sim/callbacks (every try, oldest first) and DELETE /__sim/callbacks. */
void sim_cb_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void sim_cb_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
