/*
 * WAHA's session API in omnigate-sim (README.md: WAHA sessions), as devlikeapro/waha answers it (the
 * October 2024 snapshot, version 2024.10.8): src/api/sessions.controller.ts (create, get, update,
 * delete, start, stop, logout, restart, me), src/api/auth.controller.ts (the QR code, with
 * src/nestjs/BufferResponseInterceptor.ts choosing PNG or JSON), src/core/abc/manager.abc.ts (a
 * session's status awaited, and the 422 when it is not the one expected), src/core/manager.core.ts
 * (the 404 of a session that is not running), src/core/engines/webjs/session.webjs.core.ts (the
 * status moves of the WEBJS engine: STARTING, SCAN_QR_CODE on each new QR code, WORKING once
 * linked), src/core/webhooks.core.ts and src/structures/webhooks.dto.ts (the session.status event).
 * What WAHA Plus adds and the snapshot lacks (several sessions, an "id" and "timestamp" in each
 * event, the X-Webhook-Hmac signature with the webhook's hmac.key) is from WAHA's documentation.
 *
 * A session's status changes in one place, session_move, along the moves of `moves` below. Each
 * move POSTs a session.status event to every webhook of the session's config that asked for it
 * (callbacks.c: sim_cb_post, retried and recorded like the status callbacks), and wakes the
 * requests that wait for the session to leave STARTING. The simulated phone is the control API:
 * POST /__sim/waha/sessions/{name}/scan links a number, .../status fails, stops or unlinks it.
 *
 * A session's one timer ends STARTING (after startingMs: WORKING when a number is linked, else
 * SCAN_QR_CODE) and, while SCAN_QR_CODE, shows a new QR code every qrRefreshMs, each with its own
 * session.status event, as WEBJS does. Sessions are freed in their timer's close callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "sim.h"
#include "omnigate/api.h"
#include "omnigate/json.h"
#include "omnigate/log.h"
#include "omnigate/util.h"

#define CTYPE_UTF8 "application/json; charset=utf-8"

/* Sessions kept at most (a simulator's cap: WAHA Plus has none). Found by name in a walk. */
#define SESSIONS_MAX 256
/* sessions.dto.ts: MaxLength(MONGO_DB_NAME_LIMIT - 'waha_noweb'.length) = 64 - 10. */
#define NAME_MAX_LEN 54
/* Webhooks of one session's config at most (a simulator's cap), and a URL's length. */
#define WEBHOOKS_MAX 16
#define URL_MAX      2048
/* manager.abc.ts: WAIT_STATUS_TIMEOUT, how long WAHA waits for a session's expected status. */
#define WAIT_MS 5000
/* The defaults of PUT /__sim/waha/settings: STARTING lasts a moment; WhatsApp Web shows a new QR
 * code about every 20 s. */
#define STARTING_MS_DEFAULT   50
#define QR_REFRESH_MS_DEFAULT 20000
#define STARTING_MS_MAX       600000
#define QR_REFRESH_MS_MIN     100
#define QR_REFRESH_MS_MAX     3600000
/* How long start, stop, logout and restart answer after the session moved (default none): a WAHA
 * whose answer reaches the caller after the events of the move. */
#define ACTION_ANSWER_MS_MAX 600000
/* A QR code's value: "2@" and four comma-separated base64 pieces, as WhatsApp Web's. */
#define QR_VALUE_MAX      256
#define PUSH_NAME_MAX     64
#define PUSH_NAME_DEFAULT "Omnigate Sim"

#define B64 "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

/* enums.dto.ts: WAHASessionStatus. */
typedef enum sess_status {
    ST_STOPPED,
    ST_STARTING,
    ST_SCAN_QR_CODE,
    ST_WORKING,
    ST_FAILED,
    ST__COUNT
} sess_status_t;

static const char *const status_names[ST__COUNT] = {"STOPPED", "STARTING", "SCAN_QR_CODE", "WORKING",
                                                    "FAILED"};

/* The moves a session makes. STOPPED only starts; STARTING ends linked (WORKING), showing a QR code
 * or failed; a new QR code is SCAN_QR_CODE again; a scan links; the phone unlinking a WORKING
 * session shows a QR code again; FAILED is left by stopping or starting again; anything stops. */
static const bool moves[ST__COUNT][ST__COUNT] = {
    [ST_STOPPED] = {[ST_STARTING] = true},
    [ST_STARTING] = {[ST_STOPPED] = true, [ST_SCAN_QR_CODE] = true, [ST_WORKING] = true, [ST_FAILED] = true},
    [ST_SCAN_QR_CODE] =
        {[ST_STOPPED] = true, [ST_SCAN_QR_CODE] = true, [ST_WORKING] = true, [ST_FAILED] = true},
    [ST_WORKING] = {[ST_STOPPED] = true, [ST_SCAN_QR_CODE] = true, [ST_FAILED] = true},
    [ST_FAILED] = {[ST_STOPPED] = true, [ST_STARTING] = true},
};

/* One session. Freed in the close callback of `timer`. */
typedef struct session {
    uv_timer_t timer; /* ends STARTING; then, while SCAN_QR_CODE, the next QR code */
    sim_t *s;
    void (*closed)(sim_t *s); /* set when the app stops: called once the timer has closed */
    char name[NAME_MAX_LEN + 1];
    sess_status_t status;
    json_t *config;                    /* the config as created or updated (known fields only); NULL: none */
    char me[24];                       /* the linked number's digits; "" when none is linked */
    char push_name[PUSH_NAME_MAX + 1]; /* its profile name */
    char qr[QR_VALUE_MAX];             /* the QR code shown; "" unless SCAN_QR_CODE */
    uint64_t qr_count;                 /* QR codes shown since the session was created */
    unsigned char *png;                /* the current QR code's image, made on first request; NULL */
    size_t png_len;
    int64_t updated_at; /* ms since the epoch of the last move */
} session_t;

/* A request waiting for its session to leave STARTING. Freed in the close callback of `timer`. */
typedef struct waiter {
    uv_timer_t timer; /* WAIT_MS: then it is resumed anyway */
    sim_t *s;
    void (*closed)(sim_t *s);
    og_http_req_t *req; /* NULL once resumed or dropped */
    /* A send's endpoint, run again; NULL: a QR code request, answered again for `name`. */
    void (*resume)(sim_t *s, og_http_req_t *req);
    struct waiter *prev, *next;
    char name[NAME_MAX_LEN + 1];
} waiter_t;

struct sim_waha {
    session_t *sessions[SESSIONS_MAX]; /* [0, n) in creation order */
    size_t n;
    waiter_t *waiters;
    uint64_t starting_ms, qr_refresh_ms, action_answer_ms;
    bool draining;
};

sim_waha_t *sim_waha_new(void)
{
    sim_waha_t *w = calloc(1, sizeof(*w));
    if (w != NULL) {
        w->starting_ms = STARTING_MS_DEFAULT;
        w->qr_refresh_ms = QR_REFRESH_MS_DEFAULT;
    }
    return w;
}

json_t *sim_waha_environment(void)
{
    return json_pack("{s:s, s:s, s:s, s:s}", "version", SIM_WAHA_VERSION, "engine", SIM_WAHA_ENGINE, "tier",
                     "CORE", "browser", SIM_WAHA_BROWSER);
}

bool sim_waha_key_ok(const sim_t *s, const og_http_req_t *req)
{
    const char *keys = s->w->cfg->qr_api_key;
    if (keys == NULL || keys[0] == '\0')
        return true;
    size_t len;
    const char *got = og_http_req_header(req, "x-api-key", &len);
    if (got == NULL)
        return false;
    for (const char *k = keys; *k != '\0';) {
        size_t n = strcspn(k, ",");
        if (n > 0 && n == len && memcmp(k, got, len) == 0)
            return true;
        k += n + (k[n] == ',');
    }
    return false;
}

/* ---- answers -------------------------------------------------------------------------------- */

static void send_json(og_http_req_t *req, int status, json_t *v)
{
    char *body = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    og_http_respond(req, status, NULL, 0, body != NULL ? CTYPE_UTF8 : NULL, body,
                    body != NULL ? strlen(body) : 0);
    free(body);
}

/* NestJS's HttpException body: {"statusCode","message","error"}. */
static json_t *nest_error(int status, json_t *message, const char *error)
{
    return json_pack("{s:i, s:o, s:s}", "statusCode", status, "message", message, "error", error);
}

static void send_nest_error(og_http_req_t *req, int status, const char *message, const char *error)
{
    send_json(req, status, nest_error(status, json_string(message), error));
}

static void send_unauthorized(og_http_req_t *req)
{
    send_json(req, 401, json_pack("{s:s, s:i}", "message", "Unauthorized", "statusCode", 401));
}

/* manager.core.ts getSession: the 404 of a session that is not running (STOPPED or unknown). */
static json_t *not_running_body(const char *name)
{
    char msg[256];
    snprintf(msg, sizeof(msg),
             "We didn't find a session with name '%s'.\nPlease start it first by using POST "
             "/api/sessions/%s/start request",
             name, name);
    return nest_error(404, json_string(msg), "Not Found");
}

/* manager.abc.ts waitUntilStatus: an UnprocessableEntityException of an object, whose body is that
 * object as it is. */
static json_t *not_expected_body(const char *name, sess_status_t status, const char *expected)
{
    return json_pack("{s:s, s:s, s:s, s:[s]}", "error",
                     "Session status is not as expected. Try again later or restart the session", "session",
                     name, "status", status_names[status], "expected", expected);
}

/* ---- sessions ------------------------------------------------------------------------------- */

static session_t *session_find(const sim_waha_t *w, const char *name)
{
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->sessions[i]->name, name) == 0)
            return w->sessions[i];
    return NULL;
}

/* The {session} (or {name}) of a route; false when absent, malformed or too long for a name. */
static bool name_param(const og_route_match_t *m, const char *param, char name[NAME_MAX_LEN + 1])
{
    return og_route_param(m, param, name, NAME_MAX_LEN + 1);
}

static json_t *me_json(const session_t *x)
{
    char id[32];
    if (x->me[0] == '\0')
        return json_null();
    snprintf(id, sizeof(id), "%s@c.us", x->me);
    return json_pack("{s:s, s:s}", "id", id, "pushName", x->push_name);
}

/* sessions.dto.ts SessionInfo: {"name","status","config"?,"me"}; `engine` adds SessionDetailedInfo's
 * engine (manager.core.ts fetchEngineInfo: nothing for a stopped session; WEBJS's version and state
 * once WORKING). config is absent when none was given, as JSON.stringify drops undefined. */
static json_t *session_json(const session_t *x, bool engine)
{
    json_t *v = json_pack("{s:s, s:s}", "name", x->name, "status", status_names[x->status]);
    if (v == NULL)
        return NULL;
    if (x->config != NULL)
        json_object_set(v, "config", x->config);
    json_object_set_new(v, "me", me_json(x));
    if (engine) {
        json_t *e = x->status == ST_STOPPED ? json_object()
                    : x->status == ST_WORKING
                        ? json_pack("{s:s, s:s, s:s}", "engine", SIM_WAHA_ENGINE, "WWebVersion",
                                    "2.3000.1017054665", "state", "CONNECTED")
                        : json_pack("{s:s}", "engine", SIM_WAHA_ENGINE);
        json_object_set_new(v, "engine", e);
    }
    return v;
}

/* A new QR code, as WhatsApp Web's: "2@" and a reference, then the base64 of the noise key, the
 * identity key and the ADV secret (WEBJS passes it to QR_RECEIVED as is). */
static void qr_new(sim_t *s, session_t *x)
{
    char ref[65], k1[44], k2[44], k3[44];
    sim_rand_chars(s, ref, 64, B64);
    sim_rand_chars(s, k1, 43, B64);
    sim_rand_chars(s, k2, 43, B64);
    sim_rand_chars(s, k3, 43, B64);
    snprintf(x->qr, sizeof(x->qr), "2@%s,%s=,%s=,%s=", ref, k1, k2, k3);
    x->qr_count++;
}

/* True when webhook `hook` of a config asked for `event`. */
static bool hook_wants(const json_t *hook, const char *event)
{
    json_t *events = json_object_get(hook, "events");
    for (size_t k = 0; k < json_array_size(events); k++)
        if (strcmp(json_string_value(json_array_get(events, k)), event) == 0)
            return true;
    return false;
}

/* A webhook's hmac.key, NULL when none (or empty: WAHA signs only with a key). */
static const char *hook_key(const json_t *hook)
{
    const char *key = json_string_value(json_object_get(json_object_get(hook, "hmac"), "key"));
    return key != NULL && key[0] != '\0' ? key : NULL;
}

/* The session.status event of `x` to every webhook of its config that asked for it: WebhookConductor's
 * envelope (webhooks.core.ts callWebhook; WAHA Plus adds the id and timestamp), payload
 * WASessionStatusBody {"name","status"}, signed with the webhook's hmac.key (none: unsigned). */
static void emit_status(sim_t *s, const session_t *x)
{
    json_t *hooks = x->config != NULL ? json_object_get(x->config, "webhooks") : NULL;
    for (size_t i = 0; i < json_array_size(hooks); i++) {
        json_t *hook = json_array_get(hooks, i);
        if (!hook_wants(hook, "session.status"))
            continue;
        char evt[SIM_WAHA_EVENT_ID_SIZE];
        sim_waha_event_id(s, evt);
        json_t *v = json_pack("{s:s, s:I, s:s, s:s}", "id", evt, "timestamp", (json_int_t)sim_now_ms(),
                              "event", "session.status", "session", x->name);
        if (v == NULL)
            continue;
        json_t *metadata = json_object_get(x->config, "metadata");
        if (metadata != NULL)
            json_object_set(v, "metadata", metadata);
        json_object_set_new(v, "me", me_json(x));
        json_object_set_new(v, "payload",
                            json_pack("{s:s, s:s}", "name", x->name, "status", status_names[x->status]));
        json_object_set_new(v, "engine", json_string(SIM_WAHA_ENGINE));
        json_object_set_new(v, "environment", sim_waha_environment());
        sim_cb_post(s, SIM_CH_QR, json_string_value(json_object_get(hook, "url")), hook_key(hook), x->name,
                    v);
    }
}

bool sim_waha_webhook(const sim_t *s, const char *session, const char *event, const char **url,
                      const char **key)
{
    const session_t *x = s->waha->n > 0 ? session_find(s->waha, session) : NULL;
    json_t *hooks = x != NULL && x->config != NULL ? json_object_get(x->config, "webhooks") : NULL;
    for (size_t i = 0; i < json_array_size(hooks); i++) {
        json_t *hook = json_array_get(hooks, i);
        if (hook_wants(hook, event)) {
            *url = json_string_value(json_object_get(hook, "url"));
            *key = hook_key(hook);
            return true;
        }
    }
    return false;
}

bool sim_waha_linked(const sim_t *s, const char *session, char digits[24])
{
    const session_t *x = s->waha->n > 0 ? session_find(s->waha, session) : NULL;
    if (x == NULL || x->me[0] == '\0')
        return false;
    memcpy(digits, x->me, sizeof(x->me));
    return true;
}

static void wake(sim_t *s, const char *name);
static void on_session_timer(uv_timer_t *t);
static void qr_answer(sim_t *s, og_http_req_t *req, const char *name, bool resumed);

/* Sets the session's timer for its new status: the end of STARTING, the next QR code, or none. */
static void session_arm(sim_t *s, session_t *x)
{
    sim_waha_t *w = s->waha;
    uv_timer_stop(&x->timer);
    if (w->draining)
        return;
    uv_update_time(&s->w->loop);
    if (x->status == ST_STARTING)
        uv_timer_start(&x->timer, on_session_timer, w->starting_ms, 0);
    else if (x->status == ST_SCAN_QR_CODE)
        uv_timer_start(&x->timer, on_session_timer, w->qr_refresh_ms, 0);
}

/* The one place a session's status changes. False, changing nothing, for a move not in `moves`. */
static bool session_move(sim_t *s, session_t *x, sess_status_t to)
{
    if (!moves[x->status][to])
        return false;
    x->status = to;
    x->updated_at = sim_now_ms();
    free(x->png);
    x->png = NULL;
    x->qr[0] = '\0';
    if (to == ST_SCAN_QR_CODE) {
        /* A QR code is shown only to a session no number is linked to. */
        x->me[0] = '\0';
        qr_new(s, x);
    }
    session_arm(s, x);
    emit_status(s, x);
    if (to != ST_STARTING)
        wake(s, x->name);
    return true;
}

static void on_session_timer(uv_timer_t *t)
{
    session_t *x = container_of(t, session_t, timer);
    if (x->status == ST_STARTING)
        session_move(x->s, x, x->me[0] != '\0' ? ST_WORKING : ST_SCAN_QR_CODE);
    else if (x->status == ST_SCAN_QR_CODE)
        session_move(x->s, x, ST_SCAN_QR_CODE);
}

static void session_closed(uv_handle_t *h)
{
    session_t *x = container_of((uv_timer_t *)h, session_t, timer);
    void (*closed)(sim_t *) = x->closed;
    sim_t *s = x->s;
    json_decref(x->config);
    free(x->png);
    free(x);
    if (closed != NULL)
        closed(s);
}

static session_t *session_new(sim_t *s, const char *name, json_t *config)
{
    sim_waha_t *w = s->waha;
    session_t *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    x->s = s;
    snprintf(x->name, sizeof(x->name), "%s", name);
    snprintf(x->push_name, sizeof(x->push_name), "%s", PUSH_NAME_DEFAULT);
    x->status = ST_STOPPED;
    x->config = json_incref(config);
    x->updated_at = sim_now_ms();
    uv_timer_init(&s->w->loop, &x->timer);
    w->sessions[w->n++] = x;
    return x;
}

/* Forgets x at once (no event); its memory goes once its timer has closed. Requests waiting for it
 * are resumed: it is no session of the API any more. */
static void session_remove(sim_t *s, session_t *x)
{
    sim_waha_t *w = s->waha;
    for (size_t i = 0; i < w->n; i++) {
        if (w->sessions[i] == x) {
            memmove(&w->sessions[i], &w->sessions[i + 1], (w->n - i - 1) * sizeof(w->sessions[0]));
            w->n--;
            break;
        }
    }
    char name[NAME_MAX_LEN + 1];
    snprintf(name, sizeof(name), "%s", x->name);
    uv_close((uv_handle_t *)&x->timer, session_closed);
    wake(s, name);
}

/* ---- requests waiting for a session to start ------------------------------------------------ */

static void waiter_closed(uv_handle_t *h)
{
    waiter_t *q = container_of((uv_timer_t *)h, waiter_t, timer);
    void (*closed)(sim_t *) = q->closed;
    sim_t *s = q->s;
    free(q);
    if (closed != NULL)
        closed(s);
}

static void waiter_unlink(waiter_t *q)
{
    sim_waha_t *w = q->s->waha;
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        w->waiters = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    q->prev = q->next = NULL;
    uv_close((uv_handle_t *)&q->timer, waiter_closed);
}

/* Lets the waiter go and runs its request again. Resuming may answer, and answering may run a
 * pipelined request at once; that one is never held for a session that is not STARTING. */
static void waiter_fire(waiter_t *q)
{
    og_http_req_t *req = q->req;
    char name[NAME_MAX_LEN + 1];
    snprintf(name, sizeof(name), "%s", q->name);
    void (*resume)(sim_t *, og_http_req_t *) = q->resume;
    sim_t *s = q->s;
    q->req = NULL;
    waiter_unlink(q);
    if (req != NULL && resume != NULL)
        resume(s, req);
    else if (req != NULL)
        qr_answer(s, req, name, true);
}

static void on_waiter_timer(uv_timer_t *t)
{
    waiter_fire(container_of(t, waiter_t, timer));
}

/* Resumes every request waiting for session `name`. */
static void wake(sim_t *s, const char *name)
{
    for (;;) {
        waiter_t *q = s->waha->waiters;
        while (q != NULL && strcmp(q->name, name) != 0)
            q = q->next;
        if (q == NULL)
            return;
        waiter_fire(q);
    }
}

/* Holds req until session `name` leaves STARTING or WAIT_MS pass, then runs `resume` (NULL: the QR
 * code request again). False when it cannot wait (the worker draining, out of memory): the caller
 * answers now. */
static bool hold(sim_t *s, og_http_req_t *req, const char *name, void (*resume)(sim_t *s, og_http_req_t *req))
{
    sim_waha_t *w = s->waha;
    waiter_t *q = w->draining || s->w->draining ? NULL : calloc(1, sizeof(*q));
    if (q == NULL)
        return false;
    q->s = s;
    q->req = req;
    q->resume = resume;
    snprintf(q->name, sizeof(q->name), "%s", name);
    q->next = w->waiters;
    if (w->waiters != NULL)
        w->waiters->prev = q;
    w->waiters = q;
    uv_timer_init(&s->w->loop, &q->timer);
    uv_update_time(&s->w->loop);
    uv_timer_start(&q->timer, on_waiter_timer, WAIT_MS, 0);
    return true;
}

/* ---- the send's check (providers.c) --------------------------------------------------------- */

static void answer_json(sim_answer_t *a, int status, json_t *v)
{
    char *body = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    sim_answer_set(a, status, CTYPE_UTF8, body, body != NULL ? strlen(body) : 0);
}

sim_waha_gate_t sim_waha_gate(sim_t *s, og_http_req_t *req, const char *session, bool resumed,
                              sim_answer_t *a, char from[40], void (*resume)(sim_t *s, og_http_req_t *req))
{
    session_t *x = s->waha->n > 0 ? session_find(s->waha, session) : NULL;
    if (x == NULL)
        return SIM_WAHA_GO;
    switch (x->status) {
    case ST_WORKING:
        snprintf(from, 40, "%s@c.us", x->me);
        return SIM_WAHA_GO;
    case ST_STOPPED:
        answer_json(a, 404, not_running_body(x->name));
        return SIM_WAHA_REFUSED;
    case ST_STARTING:
        if (!resumed && hold(s, req, x->name, resume))
            return SIM_WAHA_HELD;
        break;
    default:
        break;
    }
    answer_json(a, 422, not_expected_body(x->name, x->status, "WORKING"));
    return SIM_WAHA_REFUSED;
}

/* ---- WAHA's session API ----------------------------------------------------------------------- */

/* The events a webhook may ask for (enums.dto.ts WAHAEvents), in that order, for the 400's words. */
static const char *const waha_events[] = {
    "session.status",     "message",
    "message.reaction",   "message.any",
    "message.ack",        "message.waiting",
    "message.revoked",    "state.change",
    "group.join",         "group.leave",
    "presence.update",    "poll.vote",
    "poll.vote.failed",   "chat.archive",
    "call.received",      "call.accepted",
    "call.rejected",      "label.upsert",
    "label.deleted",      "label.chat.added",
    "label.chat.deleted", NULL,
};

static bool waha_event_known(const char *e)
{
    for (size_t i = 0; waha_events[i] != NULL; i++)
        if (strcmp(e, waha_events[i]) == 0)
            return true;
    return false;
}

/* class-validator's IsUrl({require_protocol: true, require_tld: false}), for the schemes the
 * simulator can POST to. */
static bool webhook_url_ok(const char *u)
{
    size_t skip = strncasecmp(u, "http://", 7) == 0 ? 7 : strncasecmp(u, "https://", 8) == 0 ? 8 : 0;
    if (skip == 0 || u[skip] == '\0' || u[skip] == '/' || strlen(u) > URL_MAX)
        return false;
    for (const char *p = u; *p != '\0'; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
    return true;
}

/* Appends "<prefix><what>" to the 400's list of failed constraints, as NestJS's ValidationPipe
 * words a nested property's ("config.webhooks.0.url must be a URL address"). */
static void problem(json_t *problems, const char *prefix, const char *what)
{
    char msg[600];
    snprintf(msg, sizeof(msg), "%.64s%.500s", prefix, what);
    json_array_append_new(problems, json_string(msg));
}

/* The members of `v` named in `keep` (NULL-terminated), as the pipe's whitelist keeps them. */
static json_t *whitelisted(json_t *v, const char *const *keep)
{
    json_t *out = json_object();
    for (size_t i = 0; out != NULL && keep[i] != NULL; i++) {
        json_t *m = json_object_get(v, keep[i]);
        if (m != NULL)
            json_object_set(out, keep[i], m);
    }
    return out;
}

/* One webhook of a config (webhooks.config.dto.ts WebhookConfig): its known members, or NULL with
 * the problems appended. */
static json_t *webhook_take(json_t *hook, size_t i, json_t *problems)
{
    static const char *const keep[] = {"url", "events", "hmac", "retries", "customHeaders", NULL};
    char prefix[48];
    size_t before = json_array_size(problems);
    snprintf(prefix, sizeof(prefix), "config.webhooks.%zu.", i);
    if (!json_is_object(hook)) {
        problem(problems, prefix, "nested property webhooks must be either object or array");
        return NULL;
    }
    const char *url = json_string_value(json_object_get(hook, "url"));
    if (url == NULL || !webhook_url_ok(url))
        problem(problems, prefix, "url must be a URL address");
    json_t *events = json_object_get(hook, "events");
    if (!json_is_array(events)) {
        problem(problems, prefix, "events must be an array");
    } else {
        for (size_t k = 0; k < json_array_size(events); k++) {
            const char *e = json_string_value(json_array_get(events, k));
            if (e == NULL || !waha_event_known(e)) {
                char what[512];
                size_t o = (size_t)snprintf(what, sizeof(what),
                                            "each value in events must be one of the following values: ");
                for (size_t n = 0; waha_events[n] != NULL && o < sizeof(what); n++)
                    o += (size_t)snprintf(what + o, sizeof(what) - o, "%s%s", n > 0 ? ", " : "",
                                          waha_events[n]);
                problem(problems, prefix, what);
                break;
            }
        }
    }
    json_t *hmac = json_object_get(hook, "hmac");
    if (hmac != NULL && !json_is_null(hmac)) {
        json_t *key = json_object_get(hmac, "key");
        if (!json_is_object(hmac))
            problem(problems, prefix, "nested property hmac must be either object or array");
        else if (key != NULL && !json_is_null(key) && !json_is_string(key))
            problem(problems, prefix, "hmac.key must be a string");
    }
    if (json_array_size(problems) > before)
        return NULL;
    json_t *out = whitelisted(hook, keep);
    if (out != NULL && json_is_object(hmac)) {
        static const char *const hmac_keep[] = {"key", NULL};
        json_object_set_new(out, "hmac", whitelisted(hmac, hmac_keep));
    }
    return out;
}

/* A create's or update's config (sessions.dto.ts SessionConfig): its known members, *out NULL when
 * none was given; false with the problems appended. */
static bool config_take(json_t *cfg, json_t *problems, json_t **out)
{
    static const char *const keep[] = {"webhooks", "metadata", "proxy", "debug", "noweb", NULL};
    *out = NULL;
    if (cfg == NULL || json_is_null(cfg))
        return true;
    if (!json_is_object(cfg)) {
        problem(problems, "", "nested property config must be either object or array");
        return false;
    }
    size_t before = json_array_size(problems);
    json_t *hooks = json_object_get(cfg, "webhooks"), *taken = NULL;
    if (hooks != NULL && !json_is_null(hooks)) {
        if (!json_is_array(hooks)) {
            problem(problems, "", "config.webhooks must be an array");
        } else if (json_array_size(hooks) > WEBHOOKS_MAX) {
            problem(problems, "", "config.webhooks must contain no more than 16 elements");
        } else {
            taken = json_array();
            for (size_t i = 0; i < json_array_size(hooks); i++) {
                json_t *h = webhook_take(json_array_get(hooks, i), i, problems);
                if (h != NULL)
                    json_array_append_new(taken, h);
            }
        }
    }
    json_t *debug = json_object_get(cfg, "debug"), *metadata = json_object_get(cfg, "metadata");
    if (debug != NULL && !json_is_null(debug) && !json_is_boolean(debug))
        problem(problems, "", "config.debug must be a boolean value");
    if (metadata != NULL && !json_is_null(metadata) && !json_is_object(metadata))
        problem(problems, "", "config.metadata must be an object");
    if (json_array_size(problems) > before) {
        json_decref(taken);
        return false;
    }
    *out = whitelisted(cfg, keep);
    if (*out != NULL && taken != NULL)
        json_object_set(*out, "webhooks", taken);
    json_decref(taken);
    return true;
}

/* The JSON body of a session API request: {} when empty (Express's body parser gives {} for no body);
 * NULL after answering 400 for anything but a JSON object. */
static json_t *body_object(og_http_req_t *req)
{
    if (req->body_len == 0)
        return json_object();
    json_error_t jerr;
    json_t *root = json_loadb(req->body, req->body_len, 0, &jerr);
    if (root == NULL) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Unexpected token in JSON at position %d", jerr.position);
        send_nest_error(req, 400, msg, "Bad Request");
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        send_json(req, 400, nest_error(400, json_pack("[s]", "body must be an object"), "Bad Request"));
        return NULL;
    }
    return root;
}

/* What every session API request does first: it is recorded like a send (no recipient), and its
 * X-Api-Key is checked. False after answering 401. */
static bool api_enter(sim_t *s, og_http_req_t *req)
{
    sim_record(s, SIM_CH_QR, req, "");
    if (sim_waha_key_ok(s, req))
        return true;
    send_unauthorized(req);
    return false;
}

/* The route's {session} that the API knows, or NULL after answering 404 "Session not found". */
static session_t *known_session(sim_t *s, og_http_req_t *req, const og_route_match_t *m)
{
    char name[NAME_MAX_LEN + 1];
    session_t *x = name_param(m, "session", name) ? session_find(s->waha, name) : NULL;
    if (x == NULL)
        send_nest_error(req, 404, "Session not found", "Not Found");
    return x;
}

/* POST /api/sessions {"name"?, "start"?, "config"?}: 201 the session (sessions.controller.ts create). */
void sim_waha_sessions_create(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    sim_waha_t *w = s->waha;
    json_t *body = NULL, *config = NULL, *problems = NULL;
    if (!api_enter(s, req) || (body = body_object(req)) == NULL)
        return;
    problems = json_array();
    json_t *jname = json_object_get(body, "name"), *jstart = json_object_get(body, "start");
    if (jname != NULL && !json_is_null(jname)) {
        if (!json_is_string(jname))
            problem(problems, "", "name must be a string");
        else if (json_string_length(jname) > NAME_MAX_LEN)
            problem(problems, "", "name must be shorter than or equal to 54 characters");
    }
    if (jstart != NULL && !json_is_null(jstart) && !json_is_boolean(jstart))
        problem(problems, "", "start must be a boolean value");
    config_take(json_object_get(body, "config"), problems, &config);
    if (json_array_size(problems) > 0) {
        send_json(req, 400, nest_error(400, problems, "Bad Request"));
        problems = NULL;
        goto out;
    }
    /* `request.name || generatePrefixedId('session')`: "" too is given a name. */
    char name[NAME_MAX_LEN + 1];
    const char *given = json_string_value(jname);
    if (given != NULL && given[0] != '\0' && strlen(given) == json_string_length(jname)) {
        snprintf(name, sizeof(name), "%s", given);
    } else {
        char hex[33];
        sim_rand_chars(s, hex, 32, "0123456789abcdef");
        snprintf(name, sizeof(name), "session_%s", hex);
    }
    char msg[160];
    if (session_find(w, name) != NULL) {
        snprintf(msg, sizeof(msg), "Session '%s' already exists. Use PUT to update it.", name);
        send_nest_error(req, 422, msg, "Unprocessable Entity");
        goto out;
    }
    if (w->n == SESSIONS_MAX) {
        snprintf(msg, sizeof(msg), "omnigate-sim keeps at most %d sessions: DELETE some first", SESSIONS_MAX);
        send_nest_error(req, 422, msg, "Unprocessable Entity");
        goto out;
    }
    session_t *x = session_new(s, name, config);
    if (x == NULL) {
        send_nest_error(req, 500, "Internal server error", "Internal Server Error");
        goto out;
    }
    if (json_is_true(jstart))
        session_move(s, x, ST_STARTING);
    send_json(req, 201, session_json(x, true));
out:
    json_decref(problems);
    json_decref(config);
    json_decref(body);
}

/* GET /api/sessions?all=: the running sessions, or with all=true every one (manager getSessions). */
void sim_waha_sessions_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    if (!api_enter(s, req))
        return;
    char all[8] = "";
    int n = og_query_param(req->query, req->query_len, "all", all, sizeof(all));
    bool every = n > 0 && (strcmp(all, "true") == 0 || strcmp(all, "1") == 0);
    if (n == -2 || (n > 0 && !every && strcmp(all, "false") != 0 && strcmp(all, "0") != 0)) {
        send_json(req, 400, nest_error(400, json_pack("[s]", "all must be a boolean value"), "Bad Request"));
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < s->waha->n; i++) {
        const session_t *x = s->waha->sessions[i];
        if (every || x->status != ST_STOPPED)
            json_array_append_new(items, session_json(x, false));
    }
    send_json(req, 200, items);
}

/* GET /api/sessions/{session}: the session with its engine, 404 "Session not found". */
void sim_waha_session_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    session_t *x;
    if (api_enter(s, req) && (x = known_session(s, req, m)) != NULL)
        send_json(req, 200, session_json(x, true));
}

/* PUT /api/sessions/{session} {"config"?}: the config replaced; a running session is stopped and
 * started again, so its STOPPED event goes to the old webhooks and the rest to the new ones. */
void sim_waha_session_update(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    session_t *x;
    json_t *body, *config = NULL, *problems;
    if (!api_enter(s, req) || (x = known_session(s, req, m)) == NULL || (body = body_object(req)) == NULL)
        return;
    problems = json_array();
    if (!config_take(json_object_get(body, "config"), problems, &config)) {
        send_json(req, 400, nest_error(400, problems, "Bad Request"));
        json_decref(body);
        return;
    }
    json_decref(problems);
    json_decref(body);
    bool running = x->status != ST_STOPPED;
    if (running)
        session_move(s, x, ST_STOPPED);
    json_decref(x->config);
    x->config = config;
    if (running)
        session_move(s, x, ST_STARTING);
    send_json(req, 200, session_json(x, true));
}

/* DELETE /api/sessions/{session}: stopped (its STOPPED event), logged out and forgotten; 200 with
 * no body, for an unknown session too. */
void sim_waha_session_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    char name[NAME_MAX_LEN + 1];
    if (!api_enter(s, req))
        return;
    session_t *x = name_param(m, "session", name) ? session_find(s->waha, name) : NULL;
    if (x != NULL) {
        if (x->status != ST_STOPPED)
            session_move(s, x, ST_STOPPED);
        session_remove(s, x);
    }
    og_http_respond(req, 200, NULL, 0, NULL, NULL, 0);
}

/* GET /api/sessions/{session}/me: the linked account, an empty 200 when none, 404 unless running. */
void sim_waha_session_me(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    char name[NAME_MAX_LEN + 1] = "";
    if (!api_enter(s, req))
        return;
    bool named = name_param(m, "session", name);
    session_t *x = named ? session_find(s->waha, name) : NULL;
    if (x == NULL || x->status == ST_STOPPED) {
        send_json(req, 404, not_running_body(name));
        return;
    }
    if (x->me[0] == '\0')
        og_http_respond(req, 200, NULL, 0, NULL, NULL, 0);
    else
        send_json(req, 200, me_json(x));
}

/* POST /api/sessions/{session}/start|stop|logout|restart: 201 the session. start is idempotent;
 * stop of an unknown session is 201 with no body (the controller returns getSessionInfo's null);
 * logout forgets the linked number and, when the session was running, starts it again (so it shows
 * a QR code); restart stops and starts. */
void sim_waha_session_action(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    char action[16] = "", name[NAME_MAX_LEN + 1] = "";
    if (!api_enter(s, req))
        return;
    bool named = name_param(m, "session", name);
    if (!og_route_param(m, "action", action, sizeof(action)) ||
        (strcmp(action, "start") != 0 && strcmp(action, "stop") != 0 && strcmp(action, "logout") != 0 &&
         strcmp(action, "restart") != 0)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Cannot POST %.*s", (int)(req->path_len > 120 ? 120 : req->path_len),
                 req->path);
        send_nest_error(req, 404, msg, "Not Found");
        return;
    }
    session_t *x = named ? session_find(s->waha, name) : NULL;
    if (x == NULL) {
        if (strcmp(action, "stop") == 0)
            og_http_respond(req, 201, NULL, 0, NULL, NULL, 0);
        else
            send_nest_error(req, 404, "Session not found", "Not Found");
        return;
    }
    bool running = x->status != ST_STOPPED;
    if (strcmp(action, "start") == 0) {
        if (!running)
            session_move(s, x, ST_STARTING);
    } else if (strcmp(action, "stop") == 0) {
        if (running)
            session_move(s, x, ST_STOPPED);
    } else {
        if (running)
            session_move(s, x, ST_STOPPED);
        if (strcmp(action, "logout") == 0)
            x->me[0] = '\0';
        if (running || strcmp(action, "restart") == 0)
            session_move(s, x, ST_STARTING);
    }
    /* The session as it moved, answered after actionAnswerMs (its events go out at once). */
    sim_answer_t ans = {0};
    answer_json(&ans, 201, session_json(x, true));
    sim_plan_t plan = {.behaviour = SIM_OK, .latency_ms = s->waha->action_answer_ms};
    sim_finish(s, SIM_CH__COUNT, req, &plan, SIM_OK, &ans);
}

static void base64(const unsigned char *in, size_t len, char **out)
{
    *out = malloc(4 * ((len + 2) / 3) + 1);
    if (*out != NULL)
        EVP_EncodeBlock((unsigned char *)*out, in, (int)len);
}

/* GET /api/{session}/auth/qr?format=image|raw, first or again once the session left STARTING. */
static void qr_answer(sim_t *s, og_http_req_t *req, const char *name, bool resumed)
{
    session_t *x = session_find(s->waha, name);
    if (x == NULL || x->status == ST_STOPPED) {
        send_json(req, 404, not_running_body(name));
        return;
    }
    if (x->status == ST_STARTING && !resumed && hold(s, req, x->name, NULL))
        return;
    if (x->status != ST_SCAN_QR_CODE) {
        send_json(req, 422, not_expected_body(x->name, x->status, "SCAN_QR_CODE"));
        return;
    }
    char format[16] = "";
    if (og_query_param(req->query, req->query_len, "format", format, sizeof(format)) > 0 &&
        strcmp(format, "raw") == 0) {
        send_json(req, 200, json_pack("{s:s}", "value", x->qr));
        return;
    }
    if (x->png == NULL)
        x->png = sim_qr_png(x->qr, &x->png_len);
    if (x->png == NULL) {
        send_nest_error(req, 500, "Internal server error", "Internal Server Error");
        return;
    }
    /* BufferResponseInterceptor: JSON only for exactly "application/json". */
    size_t alen;
    const char *accept = og_http_req_header(req, "accept", &alen);
    if (accept != NULL && alen == strlen("application/json") &&
        memcmp(accept, "application/json", alen) == 0) {
        char *data;
        base64(x->png, x->png_len, &data);
        send_json(req, 200,
                  json_pack("{s:s, s:s}", "mimetype", "image/png", "data", data != NULL ? data : ""));
        free(data);
        return;
    }
    og_http_respond(req, 200, NULL, 0, "image/png", (const char *)x->png, x->png_len);
}

void sim_waha_qr(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    char name[NAME_MAX_LEN + 1] = "";
    if (!api_enter(s, req))
        return;
    if (!name_param(m, "session", name)) {
        send_json(req, 404, not_running_body(""));
        return;
    }
    qr_answer(s, req, name, false);
}

/* ---- drain and stop ------------------------------------------------------------------------- */

void sim_waha_drain(sim_t *s)
{
    sim_waha_t *w = s->waha;
    w->draining = true;
    for (size_t i = 0; i < w->n; i++)
        uv_timer_stop(&w->sessions[i]->timer);
    while (w->waiters != NULL)
        waiter_fire(w->waiters);
}

int sim_waha_stop(sim_t *s, void (*closed)(sim_t *s))
{
    sim_waha_t *w = s->waha;
    int n = 0;
    while (w->waiters != NULL) {
        waiter_t *q = w->waiters;
        q->req = NULL; /* its connection is gone already */
        q->closed = closed;
        waiter_unlink(q);
        n++;
    }
    for (size_t i = 0; i < w->n; i++) {
        session_t *x = w->sessions[i];
        x->closed = closed;
        uv_close((uv_handle_t *)&x->timer, session_closed);
        n++;
    }
    free(w);
    s->waha = NULL;
    return n;
}

/* ---- control API ---------------------------------------------------------------------------- */

/* A session as GET /__sim/waha/sessions shows it: WAHA's view and the simulator's. */
static json_t *ctl_json(const session_t *x)
{
    json_t *v = session_json(x, false);
    if (v == NULL)
        return NULL;
    json_object_set_new(v, "qr", x->qr[0] != '\0' ? json_string(x->qr) : json_null());
    json_object_set_new(v, "qrCount", json_integer((json_int_t)x->qr_count));
    json_object_set_new(v, "updatedAt", json_integer((json_int_t)x->updated_at));
    return v;
}

static json_t *settings_json(const sim_waha_t *w)
{
    return json_pack("{s:I, s:I, s:I}", "startingMs", (json_int_t)w->starting_ms, "qrRefreshMs",
                     (json_int_t)w->qr_refresh_ms, "actionAnswerMs", (json_int_t)w->action_answer_ms);
}

/* GET /__sim/waha/sessions */
void sim_waha_ctl_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    json_t *items = json_array();
    for (size_t i = 0; i < s->waha->n; i++)
        json_array_append_new(items, ctl_json(s->waha->sessions[i]));
    og_api_reply(req, 200, "sessions",
                 json_pack("{s:o, s:o}", "items", items, "settings", settings_json(s->waha)), NULL, 0);
}

/* DELETE /__sim/waha/sessions: every session forgotten at once, without events. */
void sim_waha_ctl_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    size_t n = s->waha->n;
    while (s->waha->n > 0)
        session_remove(s, s->waha->sessions[s->waha->n - 1]);
    og_api_reply(req, 200, "sessions cleared", json_pack("{s:I}", "cleared", (json_int_t)n), NULL, 0);
}

/* The route's {name} session of a control request, or NULL after answering 404. */
static session_t *ctl_session(sim_t *s, og_http_req_t *req, const og_route_match_t *m)
{
    char name[NAME_MAX_LEN + 1];
    session_t *x = name_param(m, "name", name) ? session_find(s->waha, name) : NULL;
    if (x == NULL)
        og_api_error(req, OG_E_NOT_FOUND, NULL, "no such WAHA session: create it with POST /api/sessions");
    return x;
}

static void wrong_status(og_http_req_t *req, const session_t *x, const char *what)
{
    og_err_t err = {0};
    og_err_fail(&err, SIM_E_WRONG_SESSION_STATUS, NULL, "session %s is %s: %s", x->name,
                status_names[x->status], what);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* POST /__sim/waha/sessions/{name}/scan {"number"?, "pushName"?}: the phone scans the QR code. */
void sim_waha_ctl_scan(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"number", "pushName", NULL};
    sim_t *s = sim_of(ctx);
    og_err_t err = {0};
    const char *number = "+" SIM_WAHA_DEFAULT_NUMBER, *push = PUSH_NAME_DEFAULT;
    session_t *x = ctl_session(s, req, m);
    if (x == NULL)
        return;
    json_t *body = req->body_len > 0 ? og_json_decode_body(req, allowed, &err) : json_object();
    char digits[24];
    if (body == NULL || !og_json_get_string(body, "number", false, &number, &err) ||
        !og_json_get_string(body, "pushName", false, &push, &err))
        goto failed;
    size_t nd = strlen(number) - (number[0] == '+');
    if (number[0] != '+' || nd < 8 || nd > 15 || strspn(number + 1, "0123456789") != nd) {
        sim_field_fail(&err, "number", "must be + and 8 to 15 digits");
        goto failed;
    }
    if (push[0] == '\0' || strlen(push) > PUSH_NAME_MAX) {
        sim_field_fail(&err, "pushName", "must be 1 to 64 bytes");
        goto failed;
    }
    if (x->status != ST_SCAN_QR_CODE) {
        json_decref(body);
        wrong_status(req, x, "only a session showing a QR code (SCAN_QR_CODE) can be scanned");
        return;
    }
    snprintf(digits, sizeof(digits), "%s", number + 1);
    snprintf(x->me, sizeof(x->me), "%s", digits);
    snprintf(x->push_name, sizeof(x->push_name), "%s", push);
    json_decref(body);
    session_move(s, x, ST_WORKING);
    og_api_reply(req, 200, "scanned", ctl_json(x), NULL, 0);
    return;

failed:
    json_decref(body);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* POST /__sim/waha/sessions/{name}/status {"status", "logout"?}: the session moves as the phone or
 * the engine would move it: FAILED (the browser died, the phone is offline), STOPPED, SCAN_QR_CODE
 * (the phone unlinked the device: a QR code again, the number forgotten; from SCAN_QR_CODE, a new
 * QR code now) or STARTING (WAHA restarting a FAILED session). logout forgets the number first. */
void sim_waha_ctl_status(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"status", "logout", NULL};
    sim_t *s = sim_of(ctx);
    og_err_t err = {0};
    const char *status = NULL;
    bool logout = false;
    session_t *x = ctl_session(s, req, m);
    if (x == NULL)
        return;
    json_t *body = og_json_decode_body(req, allowed, &err);
    if (body == NULL || !og_json_get_string(body, "status", true, &status, &err) ||
        !og_json_get_bool(body, "logout", false, &logout, &err))
        goto failed;
    int to = -1;
    for (int i = 0; i < ST__COUNT; i++)
        if (i != ST_WORKING && strcmp(status, status_names[i]) == 0)
            to = i;
    if (to < 0) {
        sim_field_fail(
            &err, "status",
            "must be STOPPED, STARTING, SCAN_QR_CODE or FAILED (WORKING: POST .../scan, or STARTING "
            "with a number linked)");
        goto failed;
    }
    json_decref(body);
    if (!moves[x->status][to]) {
        char what[96];
        snprintf(what, sizeof(what), "it cannot move to %s", status_names[to]);
        wrong_status(req, x, what);
        return;
    }
    if (logout)
        x->me[0] = '\0';
    session_move(s, x, (sess_status_t)to);
    og_api_reply(req, 200, "status set", ctl_json(x), NULL, 0);
    return;

failed:
    json_decref(body);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* GET /__sim/waha/settings */
void sim_waha_ctl_settings_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_api_reply(req, 200, "settings", settings_json(sim_of(ctx)->waha), NULL, 0);
}

/* PUT /__sim/waha/settings {"startingMs"?, "qrRefreshMs"?, "actionAnswerMs"?}: from the next move
 * on; sessions showing a QR code count their next one from now. */
void sim_waha_ctl_settings_put(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"startingMs", "qrRefreshMs", "actionAnswerMs", NULL};
    sim_t *s = sim_of(ctx);
    sim_waha_t *w = s->waha;
    og_err_t err = {0};
    long long starting = (long long)w->starting_ms, refresh = (long long)w->qr_refresh_ms,
              action = (long long)w->action_answer_ms;
    json_t *body = og_json_decode_body(req, allowed, &err);
    if (body == NULL || !og_json_get_int(body, "startingMs", false, 0, STARTING_MS_MAX, &starting, &err) ||
        !og_json_get_int(body, "qrRefreshMs", false, QR_REFRESH_MS_MIN, QR_REFRESH_MS_MAX, &refresh, &err) ||
        !og_json_get_int(body, "actionAnswerMs", false, 0, ACTION_ANSWER_MS_MAX, &action, &err)) {
        json_decref(body);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    json_decref(body);
    w->starting_ms = (uint64_t)starting;
    w->qr_refresh_ms = (uint64_t)refresh;
    w->action_answer_ms = (uint64_t)action;
    for (size_t i = 0; i < w->n; i++)
        if (w->sessions[i]->status == ST_SCAN_QR_CODE)
            session_arm(s, w->sessions[i]);
    og_api_reply(req, 200, "settings", settings_json(w), NULL, 0);
}
