/*
 * The status webhooks of omnigate-sim. After a provider endpoint has accepted a message whose
 * plan scripts callbacks (README.md: the fourth magic digit, a rule's "callback"), the
 * simulated provider calls the gateway back as the real one does (API.md §10): Meta's
 * whatsapp_business_account "statuses" JSON signed with X-Hub-Signature-256, WAHA's message.ack
 * event signed with X-Webhook-Hmac (SHA-512), Twilio's form-encoded status callback signed with
 * X-Twilio-Signature.
 *
 * One run per accepted message sends its script's callbacks in order, one at a time, on the
 * gateway's own outbound client: a pause, a POST, its answer, the next pause. A try that fails
 * is tried again after 1 s, 2 s, 4 s ... up to CB_TRIES_MAX tries in all, as providers do, so a
 * gateway restarted within a few seconds still gets it. Every try is recorded (GET
 * /__sim/callbacks) and counted (GET /__sim/stats). A draining worker drops whatever has not
 * been delivered yet.
 *
 * A run may also carry one ready-made body instead of a script, posted once, at once, to a URL and
 * signed with a key of its own, with the same retries and records: Meta's template status webhook
 * (message_template_status_update), which is about a template, not a message, and WAHA's
 * session.status events (sessions.c), which go to the webhooks of the session's config, each signed
 * with its own hmac key. Those are ordered: a session's events to one URL go out one at a time, in
 * the order they happened, each once the one before was delivered or given up (a run of such a queue
 * takes the events that come while it is under way).
 *
 * The outbound client exists whether or not there is a callback URL (session webhooks need no
 * callback URL); without one, no status callback is scripted and no template webhook is sent.
 *
 * The signing, the request set-up and the records are shared with inbound.c (sim.h), whose
 * inbound messages are one POST each on this same client, counted and recorded as tries here.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "sim.h"
#include "omnigate/api.h"
#include "omnigate/http_client.h"
#include "omnigate/log.h"
#include "omnigate/util.h"

/* Tries of one callback, the first included. */
#define CB_TRIES_MAX 8
/* The pause before the second try; each further one doubles it. */
#define CB_RETRY_FIRST_MS 1000
/* A try without a complete answer by then has failed. */
#define CB_TIMEOUT_MS 5000
/* The gateway's answer is read but not used: a small cap is plenty. */
#define CB_MAX_RESPONSE (64 * 1024)
/* Recorded tries kept: the newest this many. */
#define CB_RECORDS_MAX 10000

/* The business account and number Meta's callbacks name (from Meta's own examples). */
#define META_WABA_ID "102290129340398"

typedef enum cb_status { CB_SENT, CB_DELIVERED, CB_READ, CB_FAILED } cb_status_t;

/* How each provider words the failure a failing script reports. */
typedef struct cb_failure {
    int meta_code;
    const char *meta_title;
    const char *meta_details;
    const char *twilio_status;
    const char *twilio_code;
} cb_failure_t;

static const cb_failure_t fail_not_on_whatsapp = {131026, "Message undeliverable", "Message Undeliverable.",
                                                  "failed", "30003"};
static const cb_failure_t fail_outside_window = {
    131047, "Re-engagement message",
    "Message failed to send because more than 24 hours have passed since the customer last replied to this "
    "number.",
    "failed", "30007"};
static const cb_failure_t fail_undelivered = {131000, "Something went wrong",
                                              "Message failed to send because of an unknown error.",
                                              "undelivered", "30005"};

/* The callbacks of each script, in the order they go out. */
static const struct cb_script {
    const char *name;
    unsigned n;
    cb_status_t steps[3];
    const cb_failure_t *failure; /* what CB_FAILED says */
} scripts[SIM_SCRIPT__COUNT] = {
    [SIM_SCRIPT_NONE] = {"none", 0, {CB_SENT}, NULL},
    [SIM_SCRIPT_DELIVERED_READ] = {"delivered_read", 3, {CB_SENT, CB_DELIVERED, CB_READ}, NULL},
    [SIM_SCRIPT_NOT_ON_WHATSAPP] = {"not_on_whatsapp", 1, {CB_FAILED}, &fail_not_on_whatsapp},
    [SIM_SCRIPT_OUTSIDE_WINDOW] = {"outside_window", 1, {CB_FAILED}, &fail_outside_window},
    [SIM_SCRIPT_UNDELIVERED] = {"undelivered", 1, {CB_FAILED}, &fail_undelivered},
    [SIM_SCRIPT_BEFORE_ANSWER] = {"before_answer", 2, {CB_SENT, CB_DELIVERED}, NULL},
    [SIM_SCRIPT_DUPLICATE] = {"duplicate", 3, {CB_SENT, CB_DELIVERED, CB_DELIVERED}, NULL},
    [SIM_SCRIPT_READ_FIRST] = {"read_first", 3, {CB_SENT, CB_READ, CB_DELIVERED}, NULL},
    [SIM_SCRIPT_SENT_ONLY] = {"sent_only", 1, {CB_SENT}, NULL},
    [SIM_SCRIPT_DELIVERED_ONLY] = {"delivered_only", 1, {CB_DELIVERED}, NULL},
};

/* Per channel: the provider's name in records, which is also its webhook's last segment. */
static const char *const providers[SIM_CH__COUNT] = {
    [SIM_CH_QR] = "waha",
    [SIM_CH_META] = "meta",
    [SIM_CH_SMS] = "twilio",
};
/* What the providers call themselves, so that the gateway's logs do not show its own name. */
static const char *const user_agents[SIM_CH__COUNT] = {
    [SIM_CH_QR] = "WAHA/2024.11 (omnigate-sim)",
    [SIM_CH_META] = "facebookexternalua",
    [SIM_CH_SMS] = "TwilioProxy/1.1",
};

struct sim_cbs {
    sim_t *s;
    og_hc_t *hc; /* NULL once og_hc_close has been called */
    char *url;   /* the callback URL, without trailing slashes; NULL without --callback-url */
    bool draining;
    bool hc_closed;
    void (*closed)(sim_t *s); /* set by sim_cb_stop: called once hc has closed */

    /* Runs begun and not finished, for drain: each run knows its slot, so that one leaves by
     * taking the last one's place. */
    sim_cb_run_t **runs;
    size_t nruns, runs_cap;
    uint64_t pending; /* callbacks of those runs not yet delivered nor given up */
    struct {
        uint64_t sent, ok, failed, retried, abandoned;
    } counts;

    /* Recorded tries as ready JSON objects: oldest at ring[(head - count) mod max]. */
    json_t **ring;
    size_t head, count;
};

/* A ready body waiting behind the one a run is sending (run_ready: ordered). */
typedef struct ready_item {
    struct ready_item *next;
    char *body, *key;
} ready_item_t;

/* The callbacks of one accepted message, or one ready-made webhook (`ready`). Freed in the close
 * callback of `timer` (once begun) or by run_free (never begun); never while `hreq` is in flight. */
struct sim_cb_run {
    uv_timer_t timer; /* the pause before the next try */
    og_hc_req_t hreq; /* the current callback: built at its first try, reused for retries */
    sim_cbs_t *cbs;
    size_t slot; /* in cbs->runs, once begun */
    sim_channel_t ch;
    sim_script_t script;
    uint64_t delay_ms;
    unsigned step;  /* index in the script of the callback being sent */
    unsigned tries; /* tries of that callback so far */
    bool inflight;  /* hreq is with the HTTP client */
    bool dropped;   /* out of cbs->runs; freed once hreq is back */
    int64_t sent_at;
    og_http_req_t *held; /* before_answer: the send whose answer waits */
    sim_answer_t held_ans;
    char *url;    /* where every callback of this run goes (malloc'd) */
    char *ready;  /* NULL, or the run's only callback body, built when the run was made (malloc'd) */
    char *key;    /* with own_key, the signing key (malloc'd; NULL: sent unsigned) */
    bool own_key; /* signed with `key`, not with the provider's secret of the configuration */
    char *queue;  /* an ordered ready run: its queue's name (malloc'd), else NULL */
    ready_item_t *qhead, *qtail; /* the bodies waiting behind `ready`, oldest first */
    unsigned nqueued;
    char conversation[33];
    const char *id, *to, *from, *account, *service; /* in `strings`; "" when absent */
    char strings[];
};

const char *sim_script_name(sim_script_t sc)
{
    return (unsigned)sc < SIM_SCRIPT__COUNT ? scripts[sc].name : "?";
}

bool sim_script_parse(const char *name, sim_script_t *out)
{
    for (int i = 0; i < SIM_SCRIPT__COUNT; i++) {
        if (strcmp(name, scripts[i].name) == 0) {
            *out = (sim_script_t)i;
            return true;
        }
    }
    return false;
}

/* ---- the flag ----------------------------------------------------------------------------- */

static bool url_ok(const char *u)
{
    size_t skip = strncasecmp(u, "http://", 7) == 0 ? 7 : strncasecmp(u, "https://", 8) == 0 ? 8 : 0;
    if (skip == 0 || u[skip] == '\0' || u[skip] == '/')
        return false;
    for (const char *p = u; *p != '\0'; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
    return true;
}

bool sim_cb_take_flag(int *argc, char **argv, char *err, size_t errlen)
{
    static const char flag[] = "--callback-url";
    const size_t flen = sizeof(flag) - 1;
    int kept = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i], *value;
        if (strcmp(a, "--") == 0) {
            /* Everything after "--" is an argument, never a flag (as og_config_load reads it). */
            while (i < *argc)
                argv[kept++] = argv[i++];
            break;
        }
        if (strncmp(a, flag, flen) == 0 && a[flen] == '=') {
            value = a + flen + 1;
        } else if (strcmp(a, flag) == 0) {
            if (i + 1 == *argc) {
                snprintf(err, errlen, "%s needs a value (an http:// or https:// URL)", flag);
                return false;
            }
            value = argv[++i];
        } else {
            argv[kept++] = argv[i];
            continue;
        }
        /* The flag wins over the environment, as for og_config_load's settings. */
        if (setenv(SIM_CALLBACK_URL_ENV, value, 1) != 0) {
            snprintf(err, errlen, "%s: out of memory", flag);
            return false;
        }
    }
    *argc = kept;
    const char *url = getenv(SIM_CALLBACK_URL_ENV);
    if (url != NULL && url[0] != '\0' && !url_ok(url)) {
        snprintf(err, errlen, "%s: must be an http:// or https:// URL, got \"%.200s\"", SIM_CALLBACK_URL_ENV,
                 url);
        return false;
    }
    return true;
}

/* ---- set-up and shut-down ----------------------------------------------------------------- */

const char *sim_cb_secret(const sim_t *s, sim_channel_t ch)
{
    const og_config_t *cfg = s->w->cfg;
    const char *k = ch == SIM_CH_META ? cfg->meta_app_secret
                    : ch == SIM_CH_QR ? cfg->qr_webhook_secret
                                      : cfg->sms_auth_token;
    return k != NULL && k[0] != '\0' ? k : NULL;
}

int sim_cb_start(sim_t *s, const char *url)
{
    sim_cbs_t *cbs = calloc(1, sizeof(*cbs));
    if (cbs == NULL)
        return -1;
    cbs->s = s;
    size_t len = url != NULL ? strlen(url) : 0;
    while (len > 0 && url[len - 1] == '/')
        len--;
    cbs->url = len > 0 ? strndup(url, len) : NULL;
    cbs->ring = calloc(CB_RECORDS_MAX, sizeof(*cbs->ring));
    bool ok = (len == 0 || cbs->url != NULL) && cbs->ring != NULL;
    cbs->hc = ok ? og_hc_new(&s->w->loop, &s->w->log) : NULL;
    if (cbs->hc == NULL) {
        free(cbs->ring);
        free(cbs->url);
        free(cbs);
        return -1;
    }
    s->cbs = cbs;
    if (cbs->url == NULL)
        return 0;
    char esc[512];
    og_log(&s->w->log, OG_LOG_INFO, "callbacks on",
           "\"url\":\"%s\",\"metaSigned\":%s,\"wahaSigned\":%s,\"twilioSigned\":%s",
           og_log_escape(esc, sizeof(esc), cbs->url, len), sim_cb_secret(s, SIM_CH_META) ? "true" : "false",
           sim_cb_secret(s, SIM_CH_QR) ? "true" : "false", sim_cb_secret(s, SIM_CH_SMS) ? "true" : "false");
    return 0;
}

static void run_free(sim_cb_run_t *run)
{
    og_hc_req_clear(&run->hreq);
    free(run->held_ans.body);
    free(run->url);
    free(run->ready);
    free(run->key);
    free(run->queue);
    while (run->qhead != NULL) {
        ready_item_t *q = run->qhead;
        run->qhead = q->next;
        free(q->body);
        free(q->key);
        free(q);
    }
    free(run);
}

/* How many callbacks the run sends in all: its script's, or its ready body and those queued behind it
 * (a ready run's step stays 0: each body it takes from its queue becomes its one step again). */
static unsigned run_steps(const sim_cb_run_t *run)
{
    return run->ready != NULL ? 1 + run->nqueued : scripts[run->script].n;
}

static void run_closed(uv_handle_t *h)
{
    run_free(container_of((uv_timer_t *)h, sim_cb_run_t, timer));
}

void sim_cb_discard(sim_cb_run_t *run)
{
    if (run != NULL)
        run_free(run);
}

static bool run_track(sim_cbs_t *cbs, sim_cb_run_t *run)
{
    if (cbs->nruns == cbs->runs_cap) {
        size_t cap = cbs->runs_cap ? cbs->runs_cap * 2 : 64;
        sim_cb_run_t **grown = realloc(cbs->runs, cap * sizeof(*grown));
        if (grown == NULL)
            return false;
        cbs->runs = grown;
        cbs->runs_cap = cap;
    }
    run->slot = cbs->nruns;
    cbs->runs[cbs->nruns++] = run;
    return true;
}

static void run_untrack(sim_cb_run_t *run)
{
    sim_cbs_t *cbs = run->cbs;
    sim_cb_run_t *last = cbs->runs[--cbs->nruns];
    cbs->runs[run->slot] = last;
    last->slot = run->slot;
}

/* before_answer: the send is answered now. Answering may run a pipelined request at once. */
static void release_held(sim_cb_run_t *run)
{
    og_http_req_t *req = run->held;
    run->held = NULL;
    sim_answer_send(req, &run->held_ans);
}

/* Takes the run off the list and lets it go: now when no try is in flight, else once the
 * client hands the try back (cancelled, since the client closes right after). */
static void run_drop(sim_cb_run_t *run, bool answer_held)
{
    sim_cbs_t *cbs = run->cbs;
    run_untrack(run);
    cbs->pending -= run_steps(run) - run->step;
    run->dropped = true;
    if (run->held != NULL) {
        if (answer_held)
            release_held(run);
        else
            run->held = NULL; /* the app stops: its connection is gone already */
    }
    if (!run->inflight)
        uv_close((uv_handle_t *)&run->timer, run_closed);
}

static void cbs_free(sim_cbs_t *cbs)
{
    sim_t *s = cbs->s;
    void (*closed)(sim_t *) = cbs->closed;
    for (size_t i = 0; i < CB_RECORDS_MAX; i++)
        json_decref(cbs->ring[i]);
    free(cbs->ring);
    free(cbs->runs);
    free(cbs->url);
    free(cbs);
    s->cbs = NULL;
    closed(s);
}

static void hc_closed(void *arg)
{
    sim_cbs_t *cbs = arg;
    cbs->hc_closed = true;
    if (cbs->closed != NULL)
        cbs_free(cbs);
}

/* Drops every run and closes the client, whose closed callback comes later from the loop. */
static void shut(sim_cbs_t *cbs, bool answer_held)
{
    cbs->draining = true;
    /* Answering a held send may run a pipelined request at once; while draining it scripts
     * nothing, so the list only shrinks. */
    while (cbs->nruns > 0)
        run_drop(cbs->runs[cbs->nruns - 1], answer_held);
    if (cbs->hc != NULL) {
        og_hc_t *hc = cbs->hc;
        cbs->hc = NULL;
        og_hc_close(hc, hc_closed, cbs);
    }
}

void sim_cb_drain(sim_t *s)
{
    if (s->cbs != NULL && !s->cbs->draining)
        shut(s->cbs, true);
}

void sim_cb_stop(sim_t *s, void (*closed)(sim_t *s))
{
    sim_cbs_t *cbs = s->cbs;
    if (cbs == NULL) {
        closed(s);
        return;
    }
    shut(cbs, false);
    cbs->closed = closed;
    if (cbs->hc_closed)
        cbs_free(cbs);
}

/* ---- the three formats -------------------------------------------------------------------- */

/* Lowercase hex of the HMAC of data keyed with key into out (2 * EVP_MAX_MD_SIZE + 1 bytes). */
static bool hmac_hex(const EVP_MD *md, const char *key, const char *data, size_t len, char *out)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (HMAC(md, key, (int)strlen(key), (const unsigned char *)data, len, mac, &n) == NULL)
        return false;
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 15];
    }
    out[2 * n] = '\0';
    return true;
}

bool sim_json_body(og_hc_req_t *r, json_t *v)
{
    r->body = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (r->body == NULL)
        return false;
    r->body_len = strlen(r->body);
    return og_hc_req_add_header(r, "Content-Type: application/json");
}

static json_t *meta_status(const sim_cb_run_t *run, cb_status_t st)
{
    static const char *const names[] = {"sent", "delivered", "read", "failed"};
    const cb_failure_t *f = scripts[run->script].failure;
    time_t now = time(NULL);
    char ts[24], expires[24];
    snprintf(ts, sizeof(ts), "%lld", (long long)now);
    json_t *status = json_pack("{s:s, s:s, s:s, s:s}", "id", run->id, "status", names[st], "timestamp", ts,
                               "recipient_id", run->to);
    if (status == NULL)
        return NULL;
    if (st == CB_FAILED)
        json_object_set_new(status, "errors",
                            json_pack("[{s:i, s:s, s:s, s:{s:s}}]", "code", f->meta_code, "title",
                                      f->meta_title, "message", f->meta_title, "error_data", "details",
                                      f->meta_details));
    if (st == CB_SENT || st == CB_DELIVERED) {
        /* Like Meta: the conversation's expiry on the first status of a conversation only. */
        json_t *conv = json_pack("{s:s}", "id", run->conversation);
        snprintf(expires, sizeof(expires), "%lld", (long long)now + 24 * 3600);
        if (conv != NULL && st == CB_SENT)
            json_object_set_new(conv, "expiration_timestamp", json_string(expires));
        if (conv != NULL)
            json_object_set_new(conv, "origin", json_pack("{s:s}", "type", "service"));
        json_object_set_new(status, "conversation", conv);
        json_object_set_new(
            status, "pricing",
            json_pack("{s:b, s:s, s:s}", "billable", 1, "pricing_model", "CBP", "category", "service"));
    }
    return status;
}

bool sim_sign_meta(og_hc_req_t *r, const char *secret)
{
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    return secret == NULL || (hmac_hex(EVP_sha256(), secret, r->body, r->body_len, hex) &&
                              og_hc_req_add_header(r, "X-Hub-Signature-256: sha256=%s", hex));
}

static bool meta_request(og_hc_req_t *r, const sim_cb_run_t *run, cb_status_t st, const char *secret)
{
    json_t *v =
        json_pack("{s:s, s:[{s:s, s:[{s:s, s:{s:s, s:{s:s, s:s}, s:[o]}}]}]}", "object",
                  "whatsapp_business_account", "entry", "id", META_WABA_ID, "changes", "field", "messages",
                  "value", "messaging_product", "whatsapp", "metadata", "display_phone_number",
                  SIM_META_DISPLAY_NUMBER, "phone_number_id", run->account, "statuses", meta_status(run, st));
    return sim_json_body(r, v) && sim_sign_meta(r, secret);
}

static bool sim_sign_for(sim_channel_t ch, og_hc_req_t *r, const char *key);

/* A run's ready body (Meta's template webhook, WAHA's session events), the same bytes on every try,
 * signed as its provider signs with the run's own key. */
static bool ready_request(og_hc_req_t *r, const sim_cb_run_t *run)
{
    r->body = strdup(run->ready);
    if (r->body == NULL)
        return false;
    r->body_len = strlen(r->body);
    return og_hc_req_add_header(r, "Content-Type: application/json") && sim_sign_for(run->ch, r, run->key);
}

bool sim_sign_waha(og_hc_req_t *r, const char *secret)
{
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    return secret == NULL || (hmac_hex(EVP_sha512(), secret, r->body, r->body_len, hex) &&
                              og_hc_req_add_header(r, "X-Webhook-Hmac: %s", hex) &&
                              og_hc_req_add_header(r, "X-Webhook-Hmac-Algorithm: sha512"));
}

/* A ready body is signed as its provider signs: WAHA's way or Meta's (Twilio sends none). */
static bool sim_sign_for(sim_channel_t ch, og_hc_req_t *r, const char *key)
{
    return ch == SIM_CH_QR ? sim_sign_waha(r, key) : sim_sign_meta(r, key);
}

void sim_waha_event_id(sim_t *s, char out[SIM_WAHA_EVENT_ID_SIZE])
{
    memcpy(out, "evt_", 4);
    sim_rand_chars(s, out + 4, SIM_WAHA_EVENT_ID_SIZE - 5, "0123456789abcdefghjkmnpqrstvwxyz");
}

static bool waha_request(og_hc_req_t *r, sim_t *s, const sim_cb_run_t *run, cb_status_t st,
                         const char *secret)
{
    static const int acks[] = {1, 2, 3, -1};
    static const char *const ack_names[] = {"SERVER", "DEVICE", "READ", "ERROR"};
    char evt[SIM_WAHA_EVENT_ID_SIZE];
    sim_waha_event_id(s, evt);
    json_t *v =
        json_pack("{s:s, s:I, s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:b, s:i, s:s}}", "id", evt,
                  "timestamp", (json_int_t)sim_now_ms(), "event", "message.ack", "session", run->account,
                  "me", "id", run->from, "pushName", "Omnigate Sim", "payload", "id", run->id, "from",
                  run->from, "to", run->to, "fromMe", 1, "ack", acks[st], "ackName", ack_names[st]);
    return sim_json_body(r, v) && sim_sign_waha(r, secret);
}

static int field_cmp(const void *a, const void *b)
{
    return strcmp(((const sim_field_t *)a)->name, ((const sim_field_t *)b)->name);
}

/* application/x-www-form-urlencoded: all but the RFC 3986 unreserved characters as %XX. */
static void form_put(FILE *f, const char *v)
{
    for (; *v != '\0'; v++) {
        unsigned char c = (unsigned char)*v;
        if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~')
            fputc(c, f);
        else
            fprintf(f, "%%%02X", c);
    }
}

bool sim_form_twilio(og_hc_req_t *r, const char *url, const sim_field_t *fields, size_t n, const char *secret)
{
    sim_field_t sorted[SIM_FORM_FIELDS_MAX];
    if (n > SIM_FORM_FIELDS_MAX)
        return false;
    memcpy(sorted, fields, n * sizeof(*fields));
    qsort(sorted, n, sizeof(*sorted), field_cmp);

    char *text = NULL;
    size_t text_len = 0;
    FILE *body = open_memstream(&r->body, &r->body_len);
    FILE *signed_text = open_memstream(&text, &text_len);
    bool ok = body != NULL && signed_text != NULL;
    if (ok) {
        fputs(url, signed_text);
        for (size_t i = 0; i < n; i++) {
            if (i > 0)
                fputc('&', body);
            form_put(body, fields[i].name);
            fputc('=', body);
            form_put(body, fields[i].value);
            fputs(sorted[i].name, signed_text);
            fputs(sorted[i].value, signed_text);
        }
    }
    ok &= body == NULL || fclose(body) == 0;
    ok &= signed_text == NULL || fclose(signed_text) == 0;
    ok &= og_hc_req_add_header(r, "Content-Type: application/x-www-form-urlencoded");
    if (ok && secret != NULL) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        char sig[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
        ok = HMAC(EVP_sha1(), secret, (int)strlen(secret), (const unsigned char *)text, text_len, mac,
                  &len) != NULL;
        if (ok) {
            EVP_EncodeBlock((unsigned char *)sig, mac, (int)len);
            ok = og_hc_req_add_header(r, "X-Twilio-Signature: %s", sig);
        }
    }
    free(text);
    return ok && r->body != NULL;
}

/* Twilio's status callback: its fields sorted by name, in the body as in the signature. */
static bool twilio_request(og_hc_req_t *r, const sim_cb_run_t *run, cb_status_t st, const char *secret)
{
    static const char *const names[] = {"sent", "delivered", "read", NULL};
    const cb_failure_t *f = scripts[run->script].failure;
    const char *status = st == CB_FAILED ? f->twilio_status : names[st];
    sim_field_t fields[10];
    size_t n = 0;
    fields[n++] = (sim_field_t){"MessageSid", run->id};
    fields[n++] = (sim_field_t){"SmsSid", run->id};
    fields[n++] = (sim_field_t){"AccountSid", run->account};
    fields[n++] = (sim_field_t){"MessageStatus", status};
    fields[n++] = (sim_field_t){"SmsStatus", status};
    if (st == CB_FAILED)
        fields[n++] = (sim_field_t){"ErrorCode", f->twilio_code};
    fields[n++] = (sim_field_t){"To", run->to};
    if (run->from[0] != '\0')
        fields[n++] = (sim_field_t){"From", run->from};
    if (run->service[0] != '\0')
        fields[n++] = (sim_field_t){"MessagingServiceSid", run->service};
    fields[n++] = (sim_field_t){"ApiVersion", "2010-04-01"};
    qsort(fields, n, sizeof(*fields), field_cmp);
    return sim_form_twilio(r, run->url, fields, n, secret);
}

static void on_try_done(og_hc_req_t *r);

bool sim_cb_request_init(og_hc_req_t *r, sim_channel_t ch, const char *url, void (*done)(og_hc_req_t *r))
{
    og_hc_req_clear(r);
    r->method = "POST";
    r->url = strdup(url);
    r->timeout_ms = CB_TIMEOUT_MS;
    r->max_response = CB_MAX_RESPONSE;
    r->done = done;
    return r->url != NULL && og_hc_req_add_header(r, "User-Agent: %s", user_agents[ch]);
}

/* Builds the run's current callback into hreq, for its first try and every retry. */
static bool build_request(sim_cb_run_t *run)
{
    sim_cbs_t *cbs = run->cbs;
    og_hc_req_t *r = &run->hreq;
    if (!sim_cb_request_init(r, run->ch, run->url, on_try_done))
        return false;
    if (run->ready != NULL)
        return ready_request(r, run);
    const char *secret = run->own_key ? run->key : sim_cb_secret(cbs->s, run->ch);
    cb_status_t st = scripts[run->script].steps[run->step];
    switch (run->ch) {
    case SIM_CH_META:
        return meta_request(r, run, st, secret);
    case SIM_CH_QR:
        return waha_request(r, cbs->s, run, st, secret);
    default:
        return twilio_request(r, run, st, secret);
    }
}

/* ---- running the scripts ------------------------------------------------------------------ */

/* Keeps one ended try for GET /__sim/callbacks: the request as sent and what came back. */
static void record_try(sim_cbs_t *cbs, sim_channel_t ch, const char *message_id, const og_hc_req_t *r,
                       unsigned tries, int64_t sent_at)
{
    json_t *headers = json_object();
    for (int i = 0; i < r->nheaders; i++) {
        const char *h = og_hc_req_header(r, i), *colon = strchr(h, ':');
        char name[64];
        size_t n = colon != NULL ? (size_t)(colon - h) : sizeof(name);
        if (n >= sizeof(name))
            continue;
        for (size_t k = 0; k < n; k++)
            name[k] = (char)tolower((unsigned char)h[k]);
        name[n] = '\0';
        json_object_set_new(headers, name, json_string(colon + 1 + strspn(colon + 1, " ")));
    }
    json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s%, s:o, s:s, s:i, s:I}", "provider", providers[ch],
                            "channel", sim_channel_name(ch), "messageId", message_id, "url", r->url,
                            "headers", headers, "body", r->body, r->body_len, "status",
                            r->http_status > 0 ? json_integer(r->http_status) : json_null(), "result",
                            og_hc_result_name(r->result), "tries", (int)tries, "sentAt", (json_int_t)sent_at);
    if (rec == NULL)
        return;
    json_decref(cbs->ring[cbs->head]);
    cbs->ring[cbs->head] = rec;
    cbs->head = (cbs->head + 1) % CB_RECORDS_MAX;
    if (cbs->count < CB_RECORDS_MAX)
        cbs->count++;
}

/* The run has nothing more to send. */
static void run_end(sim_cb_run_t *run)
{
    run_untrack(run);
    if (run->held != NULL)
        release_held(run);
    uv_close((uv_handle_t *)&run->timer, run_closed);
}

static void try_send(sim_cb_run_t *run)
{
    sim_cbs_t *cbs = run->cbs;
    if (run->tries == 0 && !build_request(run))
        goto failed;
    run->tries++;
    cbs->counts.sent++;
    if (run->tries > 1)
        cbs->counts.retried++;
    run->sent_at = sim_now_ms();
    /* og_hc_start refuses only a closed client or a req in flight; neither should happen while
     * the run is on the list (shut drops every run before it closes the client). */
    if (og_hc_start(cbs->hc, &run->hreq) != 0)
        goto failed;
    run->inflight = true;
    return;

failed:
    og_log(&cbs->s->w->log, OG_LOG_ERROR, "callbacks dropped: cannot build or start the request",
           "\"provider\":\"%s\"", providers[run->ch]);
    cbs->pending -= run_steps(run) - run->step;
    run_end(run);
}

static void on_timer(uv_timer_t *t)
{
    try_send(container_of(t, sim_cb_run_t, timer));
}

static void on_try_done(og_hc_req_t *r)
{
    sim_cb_run_t *run = container_of(r, sim_cb_run_t, hreq);
    run->inflight = false;
    if (run->dropped) {
        uv_close((uv_handle_t *)&run->timer, run_closed);
        return;
    }
    sim_cbs_t *cbs = run->cbs;
    og_log_t *log = &cbs->s->w->log;
    unsigned steps = run_steps(run);
    bool ok = r->result == OG_HC_OK && r->http_status >= 200 && r->http_status < 300;
    record_try(cbs, run->ch, run->id, r, run->tries, run->sent_at);
    if (ok)
        cbs->counts.ok++;
    else
        cbs->counts.failed++;
    if (run->held != NULL && (!ok || run->step + 1 == steps))
        release_held(run);
    if (!ok) {
        bool again = run->tries < CB_TRIES_MAX;
        og_log(log, again ? OG_LOG_INFO : OG_LOG_WARN,
               again ? "callback failed: will retry" : "callback given up",
               "\"provider\":\"%s\",\"messageId\":\"%s\",\"try\":%u,\"result\":\"%s\",\"status\":%ld",
               providers[run->ch], run->id, run->tries, og_hc_result_name(r->result), r->http_status);
        if (again) {
            uv_timer_start(&run->timer, on_timer, (uint64_t)CB_RETRY_FIRST_MS << (run->tries - 1), 0);
            return;
        }
        cbs->counts.abandoned++;
    }
    cbs->pending--;
    og_hc_req_clear(r);
    run->tries = 0;
    if (run->qhead != NULL) {
        /* The next body of an ordered queue: sent now, as the run's one step. */
        ready_item_t *q = run->qhead;
        run->qhead = q->next;
        if (run->qhead == NULL)
            run->qtail = NULL;
        run->nqueued--;
        free(run->ready);
        free(run->key);
        run->ready = q->body;
        run->key = q->key;
        free(q);
        uv_timer_start(&run->timer, on_timer, 0, 0);
        return;
    }
    if (++run->step == steps) {
        run_end(run);
        return;
    }
    uv_timer_start(&run->timer, on_timer, run->delay_ms, 0);
}

/* Copies s ("" for NULL) to *p and moves *p past it. */
static const char *put(char **p, const char *s)
{
    const char *start = *p;
    size_t n = s != NULL ? strlen(s) : 0;
    memcpy(*p, s != NULL ? s : "", n);
    (*p)[n] = '\0';
    *p += n + 1;
    return start;
}

/* A run about `msg` on `ch`, with no script yet, not begun: freed by run_free until it is. Its
 * callbacks go to `url`, or when NULL to the callback URL's webhook of the provider (Twilio: the
 * send's StatusCallback first). */
static sim_cb_run_t *run_new(sim_t *s, sim_channel_t ch, const sim_msg_t *msg, const char *url)
{
    sim_cbs_t *cbs = s->cbs;
    const char *parts[] = {msg->id, msg->to, msg->from, msg->account, msg->service};
    size_t size = sizeof(sim_cb_run_t);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        size += (parts[i] != NULL ? strlen(parts[i]) : 0) + 1;
    sim_cb_run_t *run = calloc(1, size);
    if (run == NULL)
        return NULL;
    run->cbs = cbs;
    run->ch = ch;
    char *p = run->strings;
    run->id = put(&p, msg->id);
    run->to = put(&p, msg->to);
    run->from = put(&p, msg->from);
    run->account = put(&p, msg->account);
    run->service = put(&p, msg->service);
    sim_rand_chars(s, run->conversation, 32, "0123456789abcdef");
    if (url == NULL)
        url = msg->url;
    if (url != NULL) {
        run->url = strdup(url);
    } else if (ch == SIM_CH_SMS && msg->status_callback != NULL && msg->status_callback[0] != '\0') {
        run->url = strdup(msg->status_callback);
    } else {
        size_t n = strlen(cbs->url) + sizeof("/webhooks/") + strlen(providers[ch]);
        run->url = malloc(n);
        if (run->url != NULL)
            snprintf(run->url, n, "%s/webhooks/%s", cbs->url, providers[ch]);
    }
    if (msg->url != NULL) {
        run->own_key = true;
        run->key = msg->key != NULL ? strdup(msg->key) : NULL;
    }
    if (run->url == NULL || (msg->key != NULL && run->key == NULL)) {
        free(run->url);
        free(run->key);
        free(run);
        return NULL;
    }
    return run;
}

sim_cb_run_t *sim_cb_prepare(sim_t *s, sim_channel_t ch, const sim_plan_t *plan, const sim_msg_t *msg)
{
    sim_cbs_t *cbs = s->cbs;
    if (cbs == NULL || (cbs->url == NULL && msg->url == NULL) || cbs->draining ||
        plan->script == SIM_SCRIPT_NONE || (unsigned)plan->script >= SIM_SCRIPT__COUNT)
        return NULL;
    sim_cb_run_t *run = run_new(s, ch, msg, NULL);
    if (run != NULL) {
        run->script = plan->script;
        run->delay_ms = plan->callback_delay_ms;
    }
    return run;
}

void sim_cb_begin(sim_t *s, og_http_req_t *req, sim_answer_t *ans)
{
    sim_cb_run_t *run = ans->cb;
    sim_cbs_t *cbs = s->cbs;
    ans->cb = NULL;
    if (cbs == NULL || cbs->draining || !run_track(cbs, run)) {
        sim_answer_send(req, ans);
        sim_cb_discard(run);
        return;
    }
    uv_timer_init(&s->w->loop, &run->timer);
    cbs->pending += run_steps(run);
    if (run->script == SIM_SCRIPT_BEFORE_ANSWER) {
        run->held = req;
        run->held_ans = *ans;
        ans->body = NULL;
    } else {
        sim_answer_send(req, ans);
    }
    uv_update_time(&s->w->loop);
    uv_timer_start(&run->timer, on_timer, run->delay_ms, 0);
}

/* Meta's body: {"object","entry":[{"id":<WABA>,"time","changes":[{"field":
 * "message_template_status_update","value":{"event","message_template_id","message_template_name",
 * "message_template_language","reason"}}]}]}, compact, malloc'd; NULL when out of memory. */
static char *template_status_body(const sim_template_event_t *ev)
{
    json_t *v = json_pack("{s:s, s:[{s:s, s:I, s:[{s:s, s:{s:s, s:I, s:s, s:s, s:s}}]}]}", "object",
                          "whatsapp_business_account", "entry", "id", ev->waba_id, "time",
                          (json_int_t)time(NULL), "changes", "field", "message_template_status_update",
                          "value", "event", ev->event, "message_template_id",
                          (json_int_t)strtoll(ev->template_id, NULL, 10), "message_template_name", ev->name,
                          "message_template_language", ev->language, "reason", ev->reason);
    char *body = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return body;
}

/* Queues `body` behind the ordered run named `queue` when one is under way. */
static bool run_enqueue(sim_cbs_t *cbs, const char *queue, const char *key, char *body)
{
    sim_cb_run_t *run = NULL;
    for (size_t i = 0; i < cbs->nruns && run == NULL; i++)
        if (cbs->runs[i]->queue != NULL && strcmp(cbs->runs[i]->queue, queue) == 0)
            run = cbs->runs[i];
    ready_item_t *q = run != NULL ? calloc(1, sizeof(*q)) : NULL;
    if (q == NULL)
        return false;
    q->key = key != NULL ? strdup(key) : NULL;
    if (key != NULL && q->key == NULL) {
        free(q);
        return false;
    }
    q->body = body;
    if (run->qtail != NULL)
        run->qtail->next = q;
    else
        run->qhead = q;
    run->qtail = q;
    run->nqueued++;
    cbs->pending++;
    return true;
}

/* Begins a run of one ready body (taking `body`, malloc'd) signed with `key` (NULL: unsigned): its
 * POST goes out at once, or, `ordered`, after those of the same URL and record id still under way.
 * False, having freed it, when it cannot be begun. */
static bool run_ready(sim_t *s, sim_channel_t ch, const char *url, const char *key, const char *record_id,
                      char *body, bool ordered)
{
    sim_cbs_t *cbs = s->cbs;
    char *queue = NULL;
    if (body == NULL || cbs == NULL || cbs->draining) {
        free(body);
        return false;
    }
    if (ordered) {
        /* A queue is one record id (a session) to one URL: "<id> <url>", unambiguous as a URL has no
         * space. */
        size_t n = strlen(record_id) + 1 + strlen(url ? url : "") + 1;
        queue = malloc(n);
        if (queue == NULL) {
            free(body);
            return false;
        }
        snprintf(queue, n, "%s %s", record_id, url ? url : "");
        if (run_enqueue(cbs, queue, key, body)) {
            free(queue);
            return true;
        }
    }
    sim_cb_run_t *run = run_new(s, ch, &(sim_msg_t){.id = record_id}, url);
    if (run == NULL) {
        free(queue);
        free(body);
        return false;
    }
    run->script = SIM_SCRIPT_NONE;
    run->ready = body;
    run->queue = queue;
    run->own_key = true;
    run->key = key != NULL ? strdup(key) : NULL;
    if ((key != NULL && run->key == NULL) || !run_track(cbs, run)) {
        run_free(run);
        return false;
    }
    uv_timer_init(&s->w->loop, &run->timer);
    cbs->pending += run_steps(run);
    uv_timer_start(&run->timer, on_timer, 0, 0);
    return true;
}

bool sim_cb_template_status(sim_t *s, const sim_template_event_t *ev)
{
    if (s->cbs == NULL || s->cbs->url == NULL || s->cbs->draining)
        return false;
    return run_ready(s, SIM_CH_META, NULL, sim_cb_secret(s, SIM_CH_META), ev->template_id,
                     template_status_body(ev), false);
}

bool sim_cb_post(sim_t *s, sim_channel_t ch, const char *url, const char *key, const char *record_id,
                 json_t *body)
{
    char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return run_ready(s, ch, url, key, record_id, text, true);
}

/* ---- one-off POSTs (inbound.c) ------------------------------------------------------------ */

const char *sim_cb_provider_name(sim_channel_t ch)
{
    return (unsigned)ch < SIM_CH__COUNT ? providers[ch] : "?";
}

og_hc_t *sim_cb_client(const sim_t *s)
{
    return s->cbs != NULL && !s->cbs->draining ? s->cbs->hc : NULL;
}

const char *sim_cb_base_url(const sim_t *s)
{
    return s->cbs != NULL ? s->cbs->url : NULL;
}

void sim_cb_try_started(sim_t *s)
{
    s->cbs->counts.sent++;
    s->cbs->pending++;
}

void sim_cb_try_ended(sim_t *s, sim_channel_t ch, const char *message_id, const og_hc_req_t *r,
                      int64_t sent_at)
{
    sim_cbs_t *cbs = s->cbs;
    cbs->pending--;
    /* Like a run's try dropped by a drain: neither recorded nor counted as failed. */
    if (r->result == OG_HC_CANCELLED)
        return;
    record_try(cbs, ch, message_id, r, 1, sent_at);
    if (r->result == OG_HC_OK && r->http_status >= 200 && r->http_status < 300)
        cbs->counts.ok++;
    else
        cbs->counts.failed++;
}

/* ---- control API -------------------------------------------------------------------------- */

json_t *sim_cb_stats(const sim_t *s)
{
    const sim_cbs_t *c = s->cbs;
    if (c == NULL)
        return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "sent", 0, "ok", 0, "failed", 0, "retried", 0,
                         "abandoned", 0, "pending", 0);
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "sent", (json_int_t)c->counts.sent, "ok",
                     (json_int_t)c->counts.ok, "failed", (json_int_t)c->counts.failed, "retried",
                     (json_int_t)c->counts.retried, "abandoned", (json_int_t)c->counts.abandoned, "pending",
                     (json_int_t)c->pending);
}

void sim_cb_stats_clear(sim_t *s)
{
    if (s->cbs != NULL)
        memset(&s->cbs->counts, 0, sizeof(s->cbs->counts));
}

/* GET /__sim/callbacks: every try, oldest first. */
void sim_cb_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    const sim_cbs_t *cbs = sim_of(ctx)->cbs;
    json_t *items = json_array();
    if (cbs != NULL) {
        size_t start = (cbs->head + CB_RECORDS_MAX - cbs->count) % CB_RECORDS_MAX;
        for (size_t i = 0; i < cbs->count; i++)
            json_array_append(items, cbs->ring[(start + i) % CB_RECORDS_MAX]);
    }
    og_api_reply(req, 200, "callbacks", json_pack("{s:o}", "items", items), NULL, 0);
}

void sim_cb_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_cbs_t *cbs = sim_of(ctx)->cbs;
    size_t n = 0;
    if (cbs != NULL) {
        n = cbs->count;
        for (size_t i = 0; i < CB_RECORDS_MAX; i++) {
            json_decref(cbs->ring[i]);
            cbs->ring[i] = NULL;
        }
        cbs->head = cbs->count = 0;
    }
    og_api_reply(req, 200, "callbacks cleared", json_pack("{s:I}", "cleared", (json_int_t)n), NULL, 0);
}
