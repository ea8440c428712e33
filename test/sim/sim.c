/*
 * omnigate-sim: state, behaviour engine, recording, control API and main. See sim.h and
 * README.md.
 *
 * Every provider request goes the same way: the endpoint (providers.c) parses just enough to
 * find the recipient, records the request, asks sim_plan what to do, prepares the provider's
 * answer and hands it to sim_finish, which answers now, after the plan's latency, or never
 * (hang, reset). Answers that wait sit on one list so that a draining worker can flush them
 * and exit at once instead of running into its drain timeout. An accepted message's answer may
 * carry status callbacks (callbacks.c), which begin when the answer goes out.
 */
#include "sim.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "og_build.h"
#include "omnigate/api.h"
#include "omnigate/config.h"
#include "omnigate/json.h"
#include "omnigate/log.h"
#include "omnigate/ops.h"
#include "omnigate/supervisor.h"
#include "omnigate/util.h"

/* Recorded requests kept: the newest this many. */
#define SIM_RECORDS_MAX 20000
/* Rules kept at most: matching walks them all, so they must stay few. */
#define SIM_RULES_MAX 1000
/* Largest latencyMs a rule may ask for. */
#define SIM_LATENCY_MAX_MS 600000
/* A hung request checks this often whether its client has given up... */
#define SIM_HANG_POLL_MS 100
/* ...and is dropped after this long in any case, so a client that never gives up cannot pin
 * a connection for ever. */
#define SIM_HANG_MAX_MS (10 * 60 * 1000)
/* Status logged (never sent) for a request dropped without an answer, as nginx does. */
#define SIM_STATUS_DROPPED 444

struct sim_record {
    char *data; /* path, NUL, then name NUL value NUL per header, then the body; NULL: empty slot */
    size_t path_len;
    size_t nheaders;
    size_t body_off, body_len;
    const char *method; /* llhttp's static name */
    int64_t received_ms;
    sim_channel_t channel;
    char to[24]; /* recipient digits, "" when none was found */
};

struct sim_rule {
    uint64_t id;
    int channel; /* a sim_channel_t, or -1 for every channel */
    char to[24]; /* digits; "" for every recipient */
    sim_behaviour_t behaviour;
    uint64_t latency_ms;
    int script; /* a sim_script_t, or -1: the recipient's fourth magic digit decides */
    uint64_t callback_delay_ms;
};

typedef enum { PEND_ANSWER, PEND_RESET, PEND_HANG } pend_kind_t;

/* One answer waiting on its timer. Freed in the timer's close callback. */
struct sim_pending {
    uv_timer_t timer;
    sim_t *s;
    og_http_req_t *req; /* NULL once acted on */
    sim_pending_t *prev, *next;
    pend_kind_t kind;
    uint64_t give_up_at; /* PEND_HANG: loop time after which the connection is closed anyway */
    sim_answer_t ans;
};

SIM_ERRCODES(OG_ERRCODE_DEFINE)

static const char *const channel_names[SIM_CH__COUNT] = {"whatsapp_qr", "whatsapp_meta", "sms"};

// clang-format off
/* The behaviours in sim_behaviour_t's order, then the SIM_STAT_* outcomes. */
static const char *const stat_names[SIM_STAT__COUNT] = {
    "ok", "reject", "error", "hang", "reset", "garbage", "throttle", "auth", "opted_out",
    "unauthorized", "invalid", "rate_limited", "not_working"
};
// clang-format on

const char *sim_channel_name(sim_channel_t ch)
{
    return (unsigned)ch < SIM_CH__COUNT ? channel_names[ch] : "?";
}

static bool channel_parse(const char *name, sim_channel_t *out)
{
    for (int i = 0; i < SIM_CH__COUNT; i++) {
        if (strcmp(name, channel_names[i]) == 0) {
            *out = (sim_channel_t)i;
            return true;
        }
    }
    return false;
}

static bool behaviour_parse(const char *name, sim_behaviour_t *out)
{
    for (int i = 0; i < SIM_BEHAVIOUR__COUNT; i++) {
        if (strcmp(name, stat_names[i]) == 0) {
            *out = (sim_behaviour_t)i;
            return true;
        }
    }
    return false;
}

bool sim_to_digits(const char *s, size_t len, char out[24])
{
    size_t i = 0, n = 0;
    if (i < len && (s[i] == '+' || s[i] == ' '))
        i++;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || n == 20)
            return false;
        out[n++] = s[i];
    }
    out[n] = '\0';
    return n > 0;
}

/* ---- randomness ------------------------------------------------------------------------- */

uint64_t sim_rand(sim_t *s)
{
    /* splitmix64: fast and good enough for ids that only need to look random and differ. */
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sim_rand_chars(sim_t *s, char *out, size_t n, const char *alphabet)
{
    size_t k = strlen(alphabet);
    uint64_t r = 0;
    int left = 0;
    for (size_t i = 0; i < n; i++) {
        if (left == 0) {
            r = sim_rand(s);
            left = 8;
        }
        out[i] = alphabet[(r & 0xff) % k];
        r >>= 8;
        left--;
    }
    out[n] = '\0';
}

/* ---- answers ---------------------------------------------------------------------------- */

void sim_answer_set(sim_answer_t *a, int status, const char *ctype, char *body, size_t len)
{
    free(a->body);
    a->status = status;
    a->ctype = ctype;
    a->body = body;
    a->body_len = body != NULL ? len : 0;
}

void sim_answer_header(sim_answer_t *a, const char *name, const char *value)
{
    if (a->nheaders < SIM_ANSWER_MAX_HEADERS)
        a->headers[a->nheaders++] = (og_http_header_t){name, strlen(name), value, strlen(value)};
}

void sim_answer_send(og_http_req_t *req, sim_answer_t *a)
{
    /* Retry-After is formatted here, not kept as a header: an answer is copied when it waits on
     * a timer, and a header value pointing into it would not follow. */
    og_http_header_t headers[SIM_ANSWER_MAX_HEADERS + 1];
    char retry[24];
    size_t n = a->nheaders;
    memcpy(headers, a->headers, n * sizeof(*headers));
    if (a->retry_after_s > 0) {
        int len = snprintf(retry, sizeof(retry), "%llu", (unsigned long long)a->retry_after_s);
        headers[n++] = (og_http_header_t){"Retry-After", sizeof("Retry-After") - 1, retry, (size_t)len};
    }
    og_http_respond(req, a->status, headers, n, a->ctype, a->body, a->body_len);
    free(a->body);
    a->body = NULL;
}

/* ---- dropping connections ----------------------------------------------------------------- */

typedef struct find_tcp {
    void *owner;
    uv_tcp_t *found;
} find_tcp_t;

static void find_tcp_cb(uv_handle_t *h, void *arg)
{
    find_tcp_t *f = arg;
    if (h->type == UV_TCP && h->data == f->owner && !uv_is_closing(h))
        f->found = (uv_tcp_t *)h;
}

/* Makes the kernel answer the peer with a TCP reset now, as a crashed provider or a middlebox
 * would. The HTTP core has no "abort" verb and its transport is private to http_server.c, so
 * the connection's uv_tcp_t is found by its `data`, which the transport sets to the same
 * owner as the core's connection `data`. Walking the loop's handles costs O(connections),
 * which is fine for a failure being injected; if the handle is not found the connection
 * still closes, with a FIN instead of a reset. connect(AF_UNSPEC) dissolves the association:
 * Linux sends the RST at once and libuv's later shutdown() fails with ENOTCONN, after which
 * the transport closes the handle as for any other failed shutdown. */
static void reset_socket(sim_t *s, og_http_conn_t *c)
{
    find_tcp_t f = {c->data, NULL};
    uv_walk(&s->w->loop, find_tcp_cb, &f);
    uv_os_fd_t fd;
    if (f.found == NULL || uv_fileno((uv_handle_t *)f.found, &fd) != 0)
        return;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    struct sockaddr sa = {.sa_family = AF_UNSPEC};
    (void)connect(fd, &sa, sizeof(sa));
}

/* Finishes `req` without an answer: the connection is closed (reset when asked) and the
 * request, which keeps the connection alive while it is in flight, is released into it. */
static void drop_request(sim_t *s, og_http_req_t *req, bool reset)
{
    og_http_conn_t *c = req->conn;
    if (reset && !c->io_closed && c->state < OG_CONN_CLOSING)
        reset_socket(s, c);
    og_http_conn_close(c);
    og_http_respond(req, SIM_STATUS_DROPPED, NULL, 0, NULL, NULL, 0);
}

/* While a request is with its handler the HTTP core stops reading, so a client that gives
 * up goes unnoticed. A hung request reads on: the core stashes whatever arrives (and then
 * stops reading again) and notes EOF in peer_eof, which the hang timer polls. Must not run
 * while the core is feeding the connection: it pauses reading when the feed ends. */
static void watch_peer(og_http_conn_t *c)
{
    if (!c->reading && !c->feeding && !c->io_closed && c->state == OG_CONN_HANDLING && !c->peer_eof &&
        c->stash == NULL) {
        c->reading = true;
        c->io->read(c, true);
    }
}

/* ---- pending answers ---------------------------------------------------------------------- */

static void pending_closed(uv_handle_t *h)
{
    sim_pending_t *p = container_of((uv_timer_t *)h, sim_pending_t, timer);
    free(p->ans.body);
    sim_cb_discard(p->ans.cb);
    free(p);
}

static void pending_unlink(sim_pending_t *p)
{
    sim_t *s = p->s;
    if (p->prev)
        p->prev->next = p->next;
    else
        s->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    s->npending--;
    p->prev = p->next = NULL;
    uv_close((uv_handle_t *)&p->timer, pending_closed);
}

/* Acts on an answer now: sends it, resets, or (a hang) drops the connection. */
static void act_now(sim_t *s, og_http_req_t *req, pend_kind_t kind, sim_answer_t *ans)
{
    switch (kind) {
    case PEND_ANSWER:
        if (ans->cb != NULL)
            sim_cb_begin(s, req, ans);
        else
            sim_answer_send(req, ans);
        break;
    case PEND_RESET:
        drop_request(s, req, true);
        break;
    case PEND_HANG:
        drop_request(s, req, false);
        break;
    }
}

/* Acts on a pending answer now and lets it go (it is freed when its timer has closed). */
static void pending_fire(sim_pending_t *p)
{
    og_http_req_t *req = p->req;
    p->req = NULL;
    pending_unlink(p);
    if (req != NULL)
        act_now(p->s, req, p->kind, &p->ans);
}

static void on_pending_timer(uv_timer_t *t)
{
    sim_pending_t *p = container_of(t, sim_pending_t, timer);
    if (p->kind == PEND_HANG) {
        og_http_conn_t *c = p->req->conn;
        bool gone = c->peer_eof || c->io_closed || c->state >= OG_CONN_CLOSING;
        if (!gone && uv_now(t->loop) < p->give_up_at) {
            watch_peer(c);
            return;
        }
    }
    pending_fire(p);
}

bool sim_behaviour_is_transport(sim_behaviour_t b)
{
    return b == SIM_HANG || b == SIM_RESET || b == SIM_GARBAGE;
}

void sim_finish(sim_t *s, sim_channel_t ch, og_http_req_t *req, const sim_plan_t *plan, int stat,
                sim_answer_t *ans)
{
    if (ch < SIM_CH__COUNT)
        s->stats[ch][stat]++;
    pend_kind_t kind = stat == SIM_HANG ? PEND_HANG : stat == SIM_RESET ? PEND_RESET : PEND_ANSWER;
    if (kind != PEND_ANSWER) {
        free(ans->body);
        ans->body = NULL;
        sim_cb_discard(ans->cb);
        ans->cb = NULL;
    }
    /* A draining worker must be able to exit: nothing waits once it drains. */
    bool wait = kind == PEND_HANG || plan->latency_ms > 0;
    sim_pending_t *p = wait && !s->w->draining ? calloc(1, sizeof(*p)) : NULL;
    if (p == NULL) {
        act_now(s, req, kind, ans);
        return;
    }
    p->s = s;
    p->req = req;
    p->kind = kind;
    p->ans = *ans;
    ans->body = NULL;
    ans->cb = NULL;
    uv_timer_init(&s->w->loop, &p->timer);
    p->next = s->pending;
    if (s->pending)
        s->pending->prev = p;
    s->pending = p;
    s->npending++;
    /* The loop's clock was read before this turn's I/O: refresh it so a delay never ends
     * early relative to when the request really arrived. */
    uv_update_time(&s->w->loop);
    if (kind == PEND_HANG) {
        /* The first tick comes on the next loop turn: only then has the core, which is still
         * feeding this request's bytes, paused reading, and watch_peer can resume it. */
        p->give_up_at = uv_now(&s->w->loop) + SIM_HANG_MAX_MS;
        uv_timer_start(&p->timer, on_pending_timer, 0, SIM_HANG_POLL_MS);
    } else {
        /* + 1: the loop clock is in whole milliseconds (truncated), so a timer of N ms can
         * fire up to 1 ms before N ms of real time have passed. */
        uv_timer_start(&p->timer, on_pending_timer, plan->latency_ms + 1, 0);
    }
}

/* ---- behaviour ---------------------------------------------------------------------------- */

/* README.md: 1999, then one digit per channel (qr, meta, sms), then the callback script
 * digit, then anything. */
static sim_plan_t magic_plan(sim_channel_t ch, const char *to)
{
    sim_plan_t plan = {SIM_OK, 0, SIM_SCRIPT_NONE, SIM_CALLBACK_DELAY_MS};
    if (strncmp(to, "1999", 4) != 0 || strlen(to) < 7)
        return plan;
    if (to[7] != '\0')
        plan.script = (sim_script_t)(to[7] - '0');
    switch (to[4 + ch]) {
    case '1':
        plan.behaviour = SIM_REJECT;
        break;
    case '2':
        plan.behaviour = SIM_ERROR;
        break;
    case '3':
        plan.behaviour = SIM_HANG;
        break;
    case '4':
        plan.behaviour = SIM_RESET;
        break;
    case '5':
        plan.behaviour = SIM_GARBAGE;
        break;
    case '6':
        plan.behaviour = SIM_THROTTLE;
        break;
    case '7':
        plan.latency_ms = 700;
        break;
    case '8':
        plan.latency_ms = 200;
        break;
    case '9':
        plan.behaviour = SIM_AUTH;
        break;
    default:
        break;
    }
    return plan;
}

sim_plan_t sim_plan(const sim_t *s, sim_channel_t ch, const char *to)
{
    sim_plan_t magic = magic_plan(ch, to);
    for (size_t i = s->nrules; i-- > 0;) {
        const sim_rule_t *r = &s->rules[i];
        if ((r->channel < 0 || r->channel == (int)ch) && (r->to[0] == '\0' || strcmp(r->to, to) == 0))
            return (sim_plan_t){r->behaviour, r->latency_ms,
                                r->script >= 0 ? (sim_script_t)r->script : magic.script,
                                r->callback_delay_ms};
    }
    return magic;
}

/* ---- recording ---------------------------------------------------------------------------- */

int64_t sim_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void record_clear(sim_record_t *r)
{
    free(r->data);
    memset(r, 0, sizeof(*r));
}

void sim_record(sim_t *s, sim_channel_t ch, const og_http_req_t *req, const char *to_digits)
{
    sim_record_t *r = &s->ring[s->head];
    record_clear(r);
    size_t size = req->path_len + 1 + req->body_len + 1;
    for (size_t i = 0; i < req->nheaders; i++)
        size += req->headers[i].name_len + req->headers[i].value_len + 2;
    char *d = malloc(size);
    if (d == NULL)
        return; /* the request goes unrecorded; the slot stays empty and is skipped */
    char *p = d;
    memcpy(p, req->path, req->path_len);
    p += req->path_len;
    *p++ = '\0';
    for (size_t i = 0; i < req->nheaders; i++) {
        const og_http_header_t *h = &req->headers[i];
        for (size_t k = 0; k < h->name_len; k++) {
            char c = h->name[k];
            *p++ = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        }
        *p++ = '\0';
        memcpy(p, h->value, h->value_len);
        p += h->value_len;
        *p++ = '\0';
    }
    r->body_off = (size_t)(p - d);
    if (req->body_len > 0)
        memcpy(p, req->body, req->body_len);
    p[req->body_len] = '\0';
    r->data = d;
    r->path_len = req->path_len;
    r->nheaders = req->nheaders;
    r->body_len = req->body_len;
    r->method = req->method_str;
    r->received_ms = sim_now_ms();
    r->channel = ch;
    snprintf(r->to, sizeof(r->to), "%s", to_digits);
    s->head = (s->head + 1) % SIM_RECORDS_MAX;
    if (s->count < SIM_RECORDS_MAX)
        s->count++;
}

static void records_clear(sim_t *s)
{
    for (size_t i = 0; i < SIM_RECORDS_MAX; i++)
        record_clear(&s->ring[i]);
    s->head = s->count = 0;
}

json_t *sim_json_text(const char *s, size_t len)
{
    json_t *v = json_stringn(s, len);
    if (v != NULL)
        return v;
    char *buf = malloc(len * 3 + 1);
    if (buf == NULL)
        return json_null();
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            buf[o++] = (char)c;
        } else {
            /* Keep a well-formed sequence, replace a stray byte. */
            size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
            json_t *probe = n > 0 && i + n <= len ? json_stringn(s + i, n) : NULL;
            if (probe != NULL) {
                json_decref(probe);
                memcpy(buf + o, s + i, n);
                o += n;
                i += n - 1;
            } else {
                memcpy(buf + o, "\xef\xbf\xbd", 3);
                o += 3;
            }
        }
    }
    v = json_stringn(buf, o);
    free(buf);
    return v != NULL ? v : json_null();
}

static json_t *record_json(const sim_record_t *r)
{
    json_t *headers = json_object();
    const char *p = r->data + r->path_len + 1;
    for (size_t i = 0; i < r->nheaders; i++) {
        const char *name = p;
        const char *value = name + strlen(name) + 1;
        p = value + strlen(value) + 1;
        json_t *v = sim_json_text(value, strlen(value));
        json_t *prev = json_object_get(headers, name);
        if (prev != NULL && json_is_string(prev) && json_is_string(v)) {
            /* A repeated header reads as one comma-separated list (RFC 9110 §5.3). */
            size_t n = json_string_length(prev) + 2 + json_string_length(v);
            char *joined = malloc(n + 1);
            if (joined != NULL) {
                snprintf(joined, n + 1, "%s, %s", json_string_value(prev), json_string_value(v));
                json_decref(v);
                v = sim_json_text(joined, n);
                free(joined);
            }
        }
        /* Names are RFC 9110 tokens (the HTTP core refuses anything else): valid keys. */
        json_object_set_new(headers, name, v);
    }
    char to[26] = "";
    if (r->to[0] != '\0')
        snprintf(to, sizeof(to), "+%s", r->to);
    return json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:I}", "channel", sim_channel_name(r->channel), "method",
                     r->method, "path", sim_json_text(r->data, r->path_len), "headers", headers, "body",
                     sim_json_text(r->data + r->body_off, r->body_len), "to",
                     to[0] ? json_string(to) : json_null(), "receivedAt", (json_int_t)r->received_ms);
}

/* ---- control API -------------------------------------------------------------------------- */

static json_t *rule_json(const sim_rule_t *r)
{
    char to[26] = "";
    if (r->to[0] != '\0')
        snprintf(to, sizeof(to), "+%s", r->to);
    return json_pack("{s:I, s:o, s:o, s:s, s:I, s:o, s:I}", "id", (json_int_t)r->id, "channel",
                     r->channel < 0 ? json_null() : json_string(channel_names[r->channel]), "to",
                     to[0] ? json_string(to) : json_null(), "behaviour", stat_names[r->behaviour],
                     "latencyMs", (json_int_t)r->latency_ms, "callback",
                     r->script < 0 ? json_null() : json_string(sim_script_name((sim_script_t)r->script)),
                     "callbackDelayMs", (json_int_t)r->callback_delay_ms);
}

/* POST /__sim/rules {"channel"?, "to"?, "behaviour", "latencyMs"?, "callback"?, "callbackDelayMs"?} */
static void rules_add(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {
        "channel", "to", "behaviour", "latencyMs", "callback", "callbackDelayMs", NULL,
    };
    sim_t *s = sim_of(ctx);
    og_err_t err = {0};
    json_t *body = og_json_decode_body(req, allowed, &err);
    const char *channel = NULL, *to = NULL, *behaviour = NULL, *callback = NULL;
    long long latency = 0, callback_delay = SIM_CALLBACK_DELAY_MS;
    sim_rule_t rule = {.channel = -1, .script = -1};
    if (body == NULL)
        goto failed;
    if (!og_json_get_string(body, "channel", false, &channel, &err) ||
        !og_json_get_string(body, "to", false, &to, &err) ||
        !og_json_get_string(body, "behaviour", true, &behaviour, &err) ||
        !og_json_get_int(body, "latencyMs", false, 0, SIM_LATENCY_MAX_MS, &latency, &err) ||
        !og_json_get_string(body, "callback", false, &callback, &err) ||
        !og_json_get_int(body, "callbackDelayMs", false, 0, SIM_CALLBACK_DELAY_MAX_MS, &callback_delay, &err))
        goto failed;
    sim_channel_t ch;
    if (channel != NULL) {
        if (!channel_parse(channel, &ch)) {
            og_err_fail(&err, OG_E_VALIDATION_FAILED, "channel",
                        "channel must be whatsapp_qr, whatsapp_meta or sms");
            goto failed;
        }
        rule.channel = (int)ch;
    }
    if (to != NULL && !sim_to_digits(to, strlen(to), rule.to)) {
        og_err_fail(&err, OG_E_VALIDATION_FAILED, "to", "to must be +digits (at most 20)");
        goto failed;
    }
    if (!behaviour_parse(behaviour, &rule.behaviour)) {
        og_err_fail(&err, OG_E_VALIDATION_FAILED, "behaviour",
                    "behaviour must be ok, reject, error, hang, reset, garbage, throttle, auth or opted_out");
        goto failed;
    }
    sim_script_t script;
    if (callback != NULL) {
        if (!sim_script_parse(callback, &script)) {
            og_err_fail(
                &err, OG_E_VALIDATION_FAILED, "callback",
                "callback must be none, delivered_read, not_on_whatsapp, outside_window, undelivered, "
                "before_answer, duplicate, read_first, sent_only or delivered_only");
            goto failed;
        }
        rule.script = (int)script;
    }
    if (s->nrules == SIM_RULES_MAX) {
        og_err_fail(&err, SIM_E_TOO_MANY_RULES, NULL, "at most %d rules; DELETE /__sim/rules first",
                    SIM_RULES_MAX);
        goto failed;
    }
    if (s->nrules == s->rules_cap) {
        size_t cap = s->rules_cap ? s->rules_cap * 2 : 16;
        sim_rule_t *n = realloc(s->rules, cap * sizeof(*n));
        if (n == NULL) {
            og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
            goto failed;
        }
        s->rules = n;
        s->rules_cap = cap;
    }
    rule.id = ++s->next_rule_id;
    rule.latency_ms = (uint64_t)latency;
    rule.callback_delay_ms = (uint64_t)callback_delay;
    s->rules[s->nrules++] = rule;
    json_decref(body);
    og_api_reply(req, 201, "rule added", rule_json(&rule), NULL, 0);
    return;

failed:
    json_decref(body);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* GET /__sim/rules: newest last, as they were added. */
static void rules_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    json_t *items = json_array();
    for (size_t i = 0; i < s->nrules; i++)
        json_array_append_new(items, rule_json(&s->rules[i]));
    og_api_reply(req, 200, "rules", json_pack("{s:o}", "items", items), NULL, 0);
}

static void rules_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    size_t n = s->nrules;
    s->nrules = 0;
    og_api_reply(req, 200, "rules cleared", json_pack("{s:I}", "cleared", (json_int_t)n), NULL, 0);
}

/* GET /__sim/requests?channel=&to=: recorded requests, oldest first. */
static void requests_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    char buf[64], to[24] = "";
    int want_ch = -1;
    int n = og_query_param(req->query, req->query_len, "channel", buf, sizeof(buf));
    if (n > 0) {
        sim_channel_t ch;
        if (!channel_parse(buf, &ch)) {
            og_api_error(req, OG_E_VALIDATION_FAILED, "channel",
                         "channel must be whatsapp_qr, whatsapp_meta or sms");
            return;
        }
        want_ch = (int)ch;
    } else if (n == -2) {
        og_api_error(req, OG_E_VALIDATION_FAILED, "channel", "channel is malformed");
        return;
    }
    n = og_query_param(req->query, req->query_len, "to", buf, sizeof(buf));
    if ((n > 0 && !sim_to_digits(buf, (size_t)n, to)) || n == -2) {
        og_api_error(req, OG_E_VALIDATION_FAILED, "to", "to must be +digits (encode '+' as %2B)");
        return;
    }
    json_t *items = json_array();
    size_t start = (s->head + SIM_RECORDS_MAX - s->count) % SIM_RECORDS_MAX;
    for (size_t i = 0; i < s->count; i++) {
        const sim_record_t *r = &s->ring[(start + i) % SIM_RECORDS_MAX];
        if (r->data == NULL || (want_ch >= 0 && (int)r->channel != want_ch) ||
            (to[0] != '\0' && strcmp(r->to, to) != 0))
            continue;
        json_array_append_new(items, record_json(r));
    }
    og_api_reply(req, 200, "requests", json_pack("{s:o}", "items", items), NULL, 0);
}

static void requests_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    size_t n = s->count;
    records_clear(s);
    og_api_reply(req, 200, "requests cleared", json_pack("{s:I}", "cleared", (json_int_t)n), NULL, 0);
}

/* GET /__sim/stats: per channel, requests and what became of them. */
static void stats_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    json_t *channels = json_object();
    for (int ch = 0; ch < SIM_CH__COUNT; ch++) {
        json_t *o = json_object();
        uint64_t total = 0;
        for (int k = 0; k < SIM_STAT__COUNT; k++)
            total += s->stats[ch][k];
        json_object_set_new(o, "requests", json_integer((json_int_t)total));
        for (int k = 0; k < SIM_STAT__COUNT; k++)
            json_object_set_new(o, stat_names[k], json_integer((json_int_t)s->stats[ch][k]));
        json_object_set_new(channels, channel_names[ch], o);
    }
    og_api_reply(req, 200, "stats",
                 json_pack("{s:o, s:I, s:I, s:I, s:o, s:{s:I,s:I}}", "channels", channels, "recorded",
                           (json_int_t)s->count, "pending", (json_int_t)s->npending, "rules",
                           (json_int_t)s->nrules, "callbacks", sim_cb_stats(s), "hooks", "ok",
                           (json_int_t)s->hooks[0], "hang", (json_int_t)s->hooks[1]),
                 NULL, 0);
}

static void stats_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    memset(s->stats, 0, sizeof(s->stats));
    memset(s->hooks, 0, sizeof(s->hooks));
    sim_cb_stats_clear(s);
    og_api_reply(req, 200, "stats cleared", NULL, NULL, 0);
}

/* POST /__sim/hooks/{mode}: a tenant webhook receiver for the benchmark (API.md §12): `ok`
 * answers 200 at once, `hang` never answers (like the hang behaviour: dropped once the client
 * gives up). Requests are counted, not recorded. */
static void hooks_post(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    char mode[8];
    bool hang = og_route_param(m, "mode", mode, sizeof(mode)) && strcmp(mode, "hang") == 0;
    if (!hang && strcmp(mode, "ok") != 0) {
        og_api_error(req, OG_E_NOT_FOUND, NULL, "hooks are /__sim/hooks/ok and /__sim/hooks/hang");
        return;
    }
    s->hooks[hang]++;
    if (!hang) {
        og_http_respond(req, 200, NULL, 0, "text/plain", "ok", 2);
        return;
    }
    sim_plan_t plan = {SIM_HANG, 0, SIM_SCRIPT_NONE, 0};
    sim_answer_t ans = {0};
    sim_finish(s, SIM_CH__COUNT, req, &plan, SIM_HANG, &ans);
}

/* ---- template catalogues ------------------------------------------------------------------ */

/* The first id given to a template PUT without one: Meta's template ids are 15 or 16 digits. */
#define TEMPLATE_ID_FIRST 1000000000000001ULL
/* Meta's limits on a template's name and language code; a key is "<language>:<name>". */
#define TEMPLATE_NAME_MAX     512
#define TEMPLATE_LANGUAGE_MAX 15
#define TEMPLATE_KEY_MAX      (TEMPLATE_LANGUAGE_MAX + 1 + TEMPLATE_NAME_MAX + 1)
/* What generate: N adds: templates gen_00001 ... of this body. */
#define GENERATED_BODY "Hello {{1}}, your order {{2}} is ready"

static const char *const list_behaviour_names[] = {"ok", "error", "auth"};

static bool list_behaviour_parse(const char *name, sim_list_behaviour_t *out)
{
    for (int i = 0; i < (int)(sizeof(list_behaviour_names) / sizeof(list_behaviour_names[0])); i++) {
        if (strcmp(name, list_behaviour_names[i]) == 0) {
            *out = (sim_list_behaviour_t)i;
            return true;
        }
    }
    return false;
}

static void waba_free(sim_waba_t *w)
{
    json_decref(w->phone_ids);
    json_decref(w->templates);
    json_decref(w->index);
    memset(w, 0, sizeof(*w));
}

static void wabas_free(sim_t *s)
{
    for (size_t i = 0; i < s->nwabas; i++)
        waba_free(&s->wabas[i]);
    s->nwabas = 0;
}

static sim_waba_t *waba_slot(sim_t *s, const char *id)
{
    for (size_t i = 0; i < s->nwabas; i++)
        if (strcmp(s->wabas[i].id, id) == 0)
            return &s->wabas[i];
    return NULL;
}

const sim_waba_t *sim_waba_find(const sim_t *s, const char *id)
{
    return waba_slot((sim_t *)s, id);
}

const sim_waba_t *sim_waba_of_phone(const sim_t *s, const char *phone_id)
{
    for (size_t i = 0; i < s->nwabas; i++) {
        const json_t *phones = s->wabas[i].phone_ids;
        for (size_t k = 0; k < json_array_size(phones); k++)
            if (strcmp(json_string_value(json_array_get(phones, k)), phone_id) == 0)
                return &s->wabas[i];
    }
    return NULL;
}

/* "<language>:<name>" into key (TEMPLATE_KEY_MAX bytes); false when either is too long or has a
 * NUL in it (no such template can be in a catalogue). */
static bool template_key(const char *name, size_t name_len, const char *language, size_t language_len,
                         char key[TEMPLATE_KEY_MAX])
{
    if (name_len > TEMPLATE_NAME_MAX || language_len > TEMPLATE_LANGUAGE_MAX ||
        memchr(name, '\0', name_len) != NULL || memchr(language, '\0', language_len) != NULL)
        return false;
    memcpy(key, language, language_len);
    key[language_len] = ':';
    memcpy(key + language_len + 1, name, name_len);
    key[language_len + 1 + name_len] = '\0';
    return true;
}

json_t *sim_template_find(const sim_waba_t *w, const char *name, size_t name_len, const char *language,
                          size_t language_len)
{
    char key[TEMPLATE_KEY_MAX];
    if (w == NULL || !template_key(name, name_len, language, language_len, key))
        return NULL;
    json_t *pos = json_object_get(w->index, key);
    return pos != NULL ? json_array_get(w->templates, (size_t)json_integer_value(pos)) : NULL;
}

json_t *sim_template_placeholders(const char *text)
{
    static const char word[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_";
    json_t *out = json_array();
    if (out == NULL)
        return NULL;
    for (const char *p = strstr(text, "{{"); p != NULL; p = strstr(p, "{{")) {
        size_t n = strspn(p + 2, word);
        if (n == 0 || n > 64 || strncmp(p + 2 + n, "}}", 2) != 0) {
            p++; /* "{{{1}}}" holds {{1}}: look again one brace further */
            continue;
        }
        bool seen = false;
        for (size_t k = 0; k < json_array_size(out); k++) {
            json_t *v = json_array_get(out, k);
            seen |= json_string_length(v) == n && memcmp(json_string_value(v), p + 2, n) == 0;
        }
        if (!seen && json_array_append_new(out, json_stringn(p + 2, n)) != 0) {
            json_decref(out);
            return NULL;
        }
        p += 2 + n + 2;
    }
    return out;
}

bool sim_chars_in(const char *v, size_t max, const char *set)
{
    size_t n = strlen(v);
    return n > 0 && n <= max && strspn(v, set) == n;
}

#define DIGITS "0123456789"
#define UPPER  "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define LOWER  "abcdefghijklmnopqrstuvwxyz"

/* A word of Meta's enumerations (APPROVED, UTILITY, QUICK_REPLY, ...). */
static bool upper_word(const char *v)
{
    return v != NULL && sim_chars_in(v, 32, UPPER "_");
}

/* The string member `name` of `obj`, or NULL when absent or not a string. */
static const char *member_string(const json_t *obj, const char *name)
{
    return json_string_value(json_object_get(obj, name));
}

bool sim_field_fail(og_err_t *err, const char *field, const char *what)
{
    return og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s %s", field, what);
}

/* field_fail on a field whose name is printf'd from fmt ("templates[%zu].name"). */
static bool field_failf(og_err_t *err, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool field_failf(og_err_t *err, const char *what, const char *fmt, ...)
{
    char field[sizeof(err->field)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(field, sizeof(field), fmt, ap);
    va_end(ap);
    return sim_field_fail(err, field, what);
}

/* A placeholder of a POSITIONAL template is a number; of a NAMED one, a lowercase name. */
static bool placeholder_ok(const char *p, bool named)
{
    if (!named)
        return sim_chars_in(p, 64, DIGITS);
    return strchr(LOWER "_", p[0]) != NULL && sim_chars_in(p, 64, LOWER DIGITS "_");
}

/* Component j of template i, a BODY: its text, whose placeholders must suit the template's
 * parameter_format. */
static bool body_check(json_t *c, size_t i, size_t j, bool named, og_err_t *err)
{
    const char *text = member_string(c, "text");
    if (text == NULL || text[0] == '\0')
        return field_failf(err, "must be the body text", "templates[%zu].components[%zu].text", i, j);
    json_t *ph = sim_template_placeholders(text);
    if (ph == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    bool ok = true;
    for (size_t k = 0; ok && k < json_array_size(ph); k++) {
        const char *p = json_string_value(json_array_get(ph, k));
        char what[160];
        if (placeholder_ok(p, named))
            continue;
        snprintf(what, sizeof(what), "has {{%s}}: a %s template's placeholders are %s", p,
                 named ? "NAMED" : "POSITIONAL",
                 named ? "lowercase names ({{first_name}})" : "numbers ({{1}}, {{2}}, ...)");
        ok = field_failf(err, what, "templates[%zu].components[%zu].text", i, j);
    }
    json_decref(ph);
    return ok;
}

/* Component j of template i, a BUTTONS: 1 to 10 buttons, each with a type; URL buttons have a
 * url, OTP buttons an otp_type. */
static bool buttons_check(json_t *c, size_t i, size_t j, og_err_t *err)
{
    json_t *buttons = json_object_get(c, "buttons");
    size_t n = json_array_size(buttons);
    if (!json_is_array(buttons) || n == 0 || n > SIM_TEMPLATE_BUTTONS_MAX)
        return field_failf(err, "must be an array of 1 to 10 buttons",
                           "templates[%zu].components[%zu].buttons", i, j);
    for (size_t k = 0; k < n; k++) {
        json_t *b = json_array_get(buttons, k);
        const char *type = member_string(b, "type");
        if (!upper_word(type))
            return field_failf(err, "must be a button type such as QUICK_REPLY, URL, PHONE_NUMBER or OTP",
                               "templates[%zu].components[%zu].buttons[%zu].type", i, j, k);
        if (strcmp(type, "URL") == 0 && member_string(b, "url") == NULL)
            return field_failf(err, "must be the button's URL",
                               "templates[%zu].components[%zu].buttons[%zu].url", i, j, k);
        if (strcmp(type, "OTP") == 0 && !upper_word(member_string(b, "otp_type")))
            return field_failf(err, "must be COPY_CODE, ONE_TAP or ZERO_TAP",
                               "templates[%zu].components[%zu].buttons[%zu].otp_type", i, j, k);
    }
    return true;
}

/* The components of template i: at most one of each type, a BODY among them. */
static bool components_check(json_t *t, size_t i, bool named, og_err_t *err)
{
    static const char *const types[] = {"HEADER", "BODY", "FOOTER", "BUTTONS"};
    enum { HEADER, BODY, FOOTER, BUTTONS, NTYPES };
    json_t *comps = json_object_get(t, "components");
    if (!json_is_array(comps))
        return field_failf(err, "must be an array with a BODY component", "templates[%zu].components", i);
    bool seen[NTYPES] = {false};
    for (size_t j = 0; j < json_array_size(comps); j++) {
        json_t *c = json_array_get(comps, j);
        const char *type = member_string(c, "type");
        int kind = 0;
        while (type != NULL && kind < NTYPES && strcmp(type, types[kind]) != 0)
            kind++;
        if (type == NULL || kind == NTYPES)
            return field_failf(err, "must be a HEADER, BODY, FOOTER or BUTTONS component",
                               "templates[%zu].components[%zu]", i, j);
        if (seen[kind])
            return field_failf(err, "repeats a component type (one of each at most)",
                               "templates[%zu].components[%zu]", i, j);
        seen[kind] = true;
        json_t *text = json_object_get(c, "text");
        if (text != NULL && !json_is_string(text))
            return field_failf(err, "must be a string", "templates[%zu].components[%zu].text", i, j);
        if ((kind == BODY && !body_check(c, i, j, named, err)) ||
            (kind == BUTTONS && !buttons_check(c, i, j, err)))
            return false;
    }
    return seen[BODY] || field_failf(err, "must have a BODY component", "templates[%zu].components", i);
}

/* Sets `name` of t to `value` when it is absent. */
static bool default_string(json_t *t, const char *name, const char *value)
{
    return json_object_get(t, name) != NULL || json_object_set_new(t, name, json_string(value)) == 0;
}

/* Template i of a PUT, in Meta's shape; what it leaves out is filled in: a fresh id, APPROVED,
 * UTILITY, POSITIONAL. */
static bool template_check(sim_t *s, json_t *t, size_t i, og_err_t *err)
{
    const char *name = member_string(t, "name"), *language = member_string(t, "language");
    if (!json_is_object(t))
        return field_failf(err, "must be a template object", "templates[%zu]", i);
    if (name == NULL || !sim_chars_in(name, TEMPLATE_NAME_MAX, LOWER DIGITS "_"))
        return field_failf(err, "must be 1 to 512 lowercase letters, digits or '_'", "templates[%zu].name",
                           i);
    if (language == NULL || !sim_chars_in(language, TEMPLATE_LANGUAGE_MAX, LOWER UPPER "_"))
        return field_failf(err, "must be a language code such as en_US", "templates[%zu].language", i);
    json_t *given = json_object_get(t, "id");
    /* At most 18 digits: the status webhook sends the id as a JSON number. */
    if (given != NULL && (!json_is_string(given) || !sim_chars_in(json_string_value(given), 18, DIGITS)))
        return field_failf(err, "must be a string of 1 to 18 digits", "templates[%zu].id", i);
    json_t *status = json_object_get(t, "status"), *category = json_object_get(t, "category");
    if (status != NULL && !upper_word(json_string_value(status)))
        return field_failf(err, "must be a status such as APPROVED, PENDING or PAUSED",
                           "templates[%zu].status", i);
    if (category != NULL && !upper_word(json_string_value(category)))
        return field_failf(err, "must be a category such as UTILITY or MARKETING", "templates[%zu].category",
                           i);
    const char *format = member_string(t, "parameter_format");
    if (json_object_get(t, "parameter_format") != NULL &&
        (format == NULL || (strcmp(format, "POSITIONAL") != 0 && strcmp(format, "NAMED") != 0)))
        return field_failf(err, "must be POSITIONAL or NAMED", "templates[%zu].parameter_format", i);
    if (!components_check(t, i, format != NULL && strcmp(format, "NAMED") == 0, err))
        return false;
    if (given == NULL) {
        char id[24];
        snprintf(id, sizeof(id), "%llu", (unsigned long long)s->next_template_id++);
        if (json_object_set_new(t, "id", json_string(id)) != 0)
            return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    }
    if (!default_string(t, "status", "APPROVED") || !default_string(t, "category", "UTILITY") ||
        !default_string(t, "parameter_format", "POSITIONAL"))
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    return true;
}

/* Appends t (taking it) to w's templates and its index; `field` names the culprit of a template
 * already there under the same name and language. */
static bool template_add(sim_waba_t *w, json_t *t, const char *field, og_err_t *err)
{
    char key[TEMPLATE_KEY_MAX];
    const char *name = member_string(t, "name"), *language = member_string(t, "language");
    size_t pos = json_array_size(w->templates);
    /* Both were checked: they fit, with no NUL. */
    template_key(name, strlen(name), language, strlen(language), key);
    if (json_object_get(w->index, key) != NULL) {
        og_err_fail(err, OG_E_VALIDATION_FAILED, field, "%s: %s in %s is in the catalogue twice", field, name,
                    language);
        json_decref(t); /* name and language are t's: only now */
        return false;
    }
    if (json_object_set_new(w->index, key, json_integer((json_int_t)pos)) != 0 ||
        json_array_append_new(w->templates, t) != 0)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    return true;
}

/* gen_00001 ... gen_<n>: APPROVED UTILITY POSITIONAL en_US templates with GENERATED_BODY. */
static bool templates_generate(sim_t *s, sim_waba_t *w, size_t n, og_err_t *err)
{
    for (size_t g = 1; g <= n; g++) {
        char name[16], id[24];
        snprintf(name, sizeof(name), "gen_%05zu", g);
        snprintf(id, sizeof(id), "%llu", (unsigned long long)s->next_template_id++);
        json_t *t =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:[{s:s, s:s}]}", "id", id, "name", name, "language",
                      "en_US", "status", "APPROVED", "category", "UTILITY", "parameter_format", "POSITIONAL",
                      "components", "type", "BODY", "text", GENERATED_BODY);
        if (t == NULL)
            return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
        if (!template_add(w, t, "generate", err))
            return false;
    }
    return true;
}

/* The catalogue of a PUT into w: its templates, checked and completed, then `generate` more. */
static bool templates_take(sim_t *s, json_t *given, size_t generate, sim_waba_t *w, og_err_t *err)
{
    if (given != NULL && !json_is_array(given))
        return sim_field_fail(err, "templates", "must be an array of templates");
    if (json_array_size(given) + generate > SIM_TEMPLATES_MAX)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, given != NULL ? "templates" : "generate",
                           "at most %d templates per WABA, given and generated together", SIM_TEMPLATES_MAX);
    w->templates = json_array();
    w->index = json_object();
    if (w->templates == NULL || w->index == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    for (size_t i = 0; i < json_array_size(given); i++) {
        char f[48];
        json_t *t = json_array_get(given, i);
        snprintf(f, sizeof(f), "templates[%zu]", i);
        if (!template_check(s, t, i, err) || !template_add(w, json_incref(t), f, err))
            return false;
    }
    return templates_generate(s, w, generate, err);
}

/* The phone number ids of a PUT for WABA `id` into w: digits, each once, none bound to another
 * WABA (a number belongs to one account). */
static bool phones_take(const sim_t *s, const char *id, json_t *given, sim_waba_t *w, og_err_t *err)
{
    if (given != NULL && (!json_is_array(given) || json_array_size(given) > SIM_WABA_PHONES_MAX))
        return sim_field_fail(err, "phoneNumberIds", "must be an array of at most 100 phone number ids");
    w->phone_ids = json_array();
    if (w->phone_ids == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    for (size_t i = 0; i < json_array_size(given); i++) {
        char f[48];
        const char *phone = json_string_value(json_array_get(given, i));
        snprintf(f, sizeof(f), "phoneNumberIds[%zu]", i);
        if (phone == NULL || !sim_chars_in(phone, 20, DIGITS))
            return sim_field_fail(err, f, "must be a phone number id: 1 to 20 digits");
        for (size_t k = 0; k < i; k++)
            if (strcmp(phone, json_string_value(json_array_get(given, k))) == 0)
                return sim_field_fail(err, f, "is listed twice");
        const sim_waba_t *owner = sim_waba_of_phone(s, phone);
        if (owner != NULL && strcmp(owner->id, id) != 0)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, f,
                               "%s is bound to WABA %s already: PUT that WABA without it first", f,
                               owner->id);
        if (json_array_append_new(w->phone_ids, json_string(phone)) != 0)
            return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    }
    return true;
}

/* The {wabaId} of a control route: digits, as Meta's ids are. */
static bool waba_id_param(const og_route_match_t *m, char id[24])
{
    return og_route_param(m, "wabaId", id, 24) && sim_chars_in(id, 20, DIGITS);
}

/* PUT /__sim/meta/wabas/{wabaId}/templates {"phoneNumberIds"?, "templates"?, "generate"?,
 * "listBehaviour"?}: replaces that WABA's catalogue; nothing changes when any of it is invalid. */
static void wabas_put(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"phoneNumberIds", "templates", "generate", "listBehaviour", NULL};
    sim_t *s = sim_of(ctx);
    og_err_t err = {0};
    sim_waba_t next = {0};
    json_t *body = NULL;
    const char *list = NULL;
    long long generate = 0;
    if (!waba_id_param(m, next.id)) {
        sim_field_fail(&err, "wabaId", "must be a WABA id: 1 to 20 digits");
        goto failed;
    }
    body = og_json_decode_body(req, allowed, &err);
    if (body == NULL || !og_json_get_string(body, "listBehaviour", false, &list, &err) ||
        !og_json_get_int(body, "generate", false, 0, SIM_TEMPLATES_MAX, &generate, &err))
        goto failed;
    if (list != NULL && !list_behaviour_parse(list, &next.list)) {
        sim_field_fail(&err, "listBehaviour", "must be ok, error or auth");
        goto failed;
    }
    sim_waba_t *slot = waba_slot(s, next.id);
    if (slot == NULL && s->nwabas == SIM_WABAS_MAX) {
        og_err_fail(&err, SIM_E_TOO_MANY_WABAS, "wabaId", "at most %d WABAs; DELETE /__sim/meta/wabas first",
                    SIM_WABAS_MAX);
        goto failed;
    }
    if (!phones_take(s, next.id, json_object_get(body, "phoneNumberIds"), &next, &err) ||
        !templates_take(s, json_object_get(body, "templates"), (size_t)generate, &next, &err))
        goto failed;
    if (slot == NULL)
        slot = &s->wabas[s->nwabas++];
    else
        waba_free(slot);
    *slot = next;
    json_decref(body);
    og_api_reply(req, 200, "templates replaced",
                 json_pack("{s:s, s:I}", "wabaId", slot->id, "templates",
                           (json_int_t)json_array_size(slot->templates)),
                 NULL, 0);
    return;

failed:
    waba_free(&next);
    json_decref(body);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* The catalogue of the route's {wabaId}, or NULL after answering 404. */
static sim_waba_t *waba_or_404(sim_t *s, og_http_req_t *req, const og_route_match_t *m)
{
    char id[24];
    sim_waba_t *w = waba_id_param(m, id) ? waba_slot(s, id) : NULL;
    if (w == NULL)
        og_api_error(req, OG_E_NOT_FOUND, NULL,
                     "no catalogue for this WABA: PUT /__sim/meta/wabas/{wabaId}/templates first");
    return w;
}

/* GET /__sim/meta/wabas/{wabaId}/templates */
static void wabas_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    const sim_waba_t *w = waba_or_404(sim_of(ctx), req, m);
    if (w != NULL)
        og_api_reply(req, 200, "templates",
                     json_pack("{s:s, s:O, s:O, s:s}", "wabaId", w->id, "phoneNumberIds", w->phone_ids,
                               "templates", w->templates, "listBehaviour", list_behaviour_names[w->list]),
                     NULL, 0);
}

/* POST /__sim/meta/wabas/{wabaId}/templates/status {"name", "language", "event", "reason"?,
 * "notify"?}: the template's status becomes `event`, and Meta's webhook says so unless notify is
 * false. */
static void templates_status(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const allowed[] = {"name", "language", "event", "reason", "notify", NULL};
    sim_t *s = sim_of(ctx);
    og_err_t err = {0};
    const char *name = NULL, *language = NULL, *event = NULL, *reason = "NONE";
    bool notify = true;
    sim_waba_t *w = waba_or_404(s, req, m);
    if (w == NULL)
        return;
    json_t *body = og_json_decode_body(req, allowed, &err);
    if (body == NULL || !og_json_get_string(body, "name", true, &name, &err) ||
        !og_json_get_string(body, "language", true, &language, &err) ||
        !og_json_get_string(body, "event", true, &event, &err) ||
        !og_json_get_string(body, "reason", false, &reason, &err) ||
        !og_json_get_bool(body, "notify", false, &notify, &err))
        goto failed;
    if (!upper_word(event)) {
        sim_field_fail(&err, "event", "must be a status such as APPROVED, REJECTED, PAUSED or DISABLED");
        goto failed;
    }
    json_t *t = sim_template_find(w, name, json_string_length(json_object_get(body, "name")), language,
                                  json_string_length(json_object_get(body, "language")));
    if (t == NULL) {
        og_err_fail(&err, OG_E_NOT_FOUND, NULL, "no template %.200s in %.20s in WABA %s", name, language,
                    w->id);
        goto failed;
    }
    if (json_object_set_new(t, "status", json_string(event)) != 0) {
        og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
        goto failed;
    }
    if (notify)
        sim_cb_template_status(s, &(sim_template_event_t){.waba_id = w->id,
                                                          .template_id = member_string(t, "id"),
                                                          .name = name,
                                                          .language = language,
                                                          .event = event,
                                                          .reason = reason});
    json_decref(body);
    og_api_reply(req, 200, "template status set", json_incref(t), NULL, 0);
    return;

failed:
    json_decref(body);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}

/* DELETE /__sim/meta/wabas: every catalogue is forgotten. */
static void wabas_clear(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    sim_t *s = sim_of(ctx);
    size_t n = s->nwabas;
    wabas_free(s);
    og_api_reply(req, 200, "catalogues cleared", json_pack("{s:I}", "cleared", (json_int_t)n), NULL, 0);
}

/* ---- the app ------------------------------------------------------------------------------ */

static const og_route_t sim_routes[] = {
    OG_OPS_ROUTES,
    {"POST", "/__sim/rules", rules_add},
    {"GET", "/__sim/rules", rules_list},
    {"DELETE", "/__sim/rules", rules_clear},
    {"GET", "/__sim/requests", requests_list},
    {"DELETE", "/__sim/requests", requests_clear},
    {"GET", "/__sim/stats", stats_get},
    {"DELETE", "/__sim/stats", stats_clear},
    {"GET", "/__sim/callbacks", sim_cb_list},
    {"DELETE", "/__sim/callbacks", sim_cb_clear},
    {"POST", "/__sim/inbound", sim_inbound_post},
    {"POST", "/__sim/hooks/{mode}", hooks_post},
    {"PUT", "/__sim/limits", sim_limits_put},
    {"GET", "/__sim/limits", sim_limits_get},
    {"DELETE", "/__sim/limits", sim_limits_clear},
    {"PUT", "/__sim/meta/wabas/{wabaId}/templates", wabas_put, SIM_TEMPLATES_BODY_MAX},
    {"GET", "/__sim/meta/wabas/{wabaId}/templates", wabas_get},
    {"POST", "/__sim/meta/wabas/{wabaId}/templates/status", templates_status},
    {"DELETE", "/__sim/meta/wabas", wabas_clear},
    {"GET", "/__sim/waha/sessions", sim_waha_ctl_list},
    {"DELETE", "/__sim/waha/sessions", sim_waha_ctl_clear},
    {"POST", "/__sim/waha/sessions/{name}/scan", sim_waha_ctl_scan},
    {"POST", "/__sim/waha/sessions/{name}/status", sim_waha_ctl_status},
    {"GET", "/__sim/waha/settings", sim_waha_ctl_settings_get},
    {"PUT", "/__sim/waha/settings", sim_waha_ctl_settings_put},
    {"POST", "/api/sendText", sim_waha_send},
    {"GET", "/api/sessions", sim_waha_sessions_list},
    {"POST", "/api/sessions", sim_waha_sessions_create},
    {"GET", "/api/sessions/{session}", sim_waha_session_get},
    {"PUT", "/api/sessions/{session}", sim_waha_session_update},
    {"DELETE", "/api/sessions/{session}", sim_waha_session_delete},
    {"GET", "/api/sessions/{session}/me", sim_waha_session_me},
    {"POST", "/api/sessions/{session}/{action}", sim_waha_session_action},
    {"GET", "/api/{session}/auth/qr", sim_waha_qr},
    {"POST", "/2010-04-01/Accounts/{AccountSid}/Messages.json", sim_twilio_send},
    /* Last: three parameter segments would match nothing above anyway, but keep literals first. */
    {"POST", "/{version}/{phoneNumberId}/messages", sim_meta_send},
    {"GET", "/{version}/{wabaId}/message_templates", sim_meta_templates},
};

/* Once per loop turn: the worker has no drain hook for apps, so look for the flag. When it is
 * set, answer everything that waits (hung requests are dropped) so connections can close. */
static void on_check(uv_check_t *h)
{
    sim_t *s = container_of(h, sim_t, check);
    if (!s->w->draining || s->drain_seen)
        return;
    s->drain_seen = true;
    uv_check_stop(h);
    sim_waha_drain(s);
    sim_cb_drain(s);
    /* pending_fire unlinks; answering can run a pipelined request, which acts at once while
     * draining, so the list only shrinks. */
    while (s->pending != NULL)
        pending_fire(s->pending);
}

static int sim_start(og_worker_t *w)
{
    sim_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    s->ring = calloc(SIM_RECORDS_MAX, sizeof(*s->ring));
    s->limits = sim_limits_new();
    s->waha = sim_waha_new();
    if (s->ring == NULL || s->limits == NULL || s->waha == NULL) {
        free(s->waha);
        sim_limits_free(s->limits);
        free(s->ring);
        free(s);
        return -1;
    }
    s->w = w;
    s->next_template_id = TEMPLATE_ID_FIRST;
    if (getrandom(&s->rng, sizeof(s->rng), 0) != (ssize_t)sizeof(s->rng))
        s->rng = uv_hrtime() ^ ((uint64_t)getpid() << 32);
    /* main put --callback-url there: an og_app_t carries no argument of its own. */
    if (sim_cb_start(s, getenv(SIM_CALLBACK_URL_ENV)) != 0) {
        free(s->waha);
        sim_limits_free(s->limits);
        free(s->ring);
        free(s);
        return -1;
    }
    uv_check_init(&w->loop, &s->check);
    uv_check_start(&s->check, on_check);
    uv_unref((uv_handle_t *)&s->check);
    w->app_data = s;

    const og_config_t *cfg = w->cfg;
    char version[64];
    og_log(&w->log, OG_LOG_INFO, "simulator ready",
           "\"metaApiVersion\":\"%s\",\"qrApiKey\":%s,\"smsAccountSid\":%s,\"smsAuthToken\":%s",
           og_log_escape(version, sizeof(version), cfg->meta_api_version, strlen(cfg->meta_api_version)),
           cfg->qr_api_key && cfg->qr_api_key[0] ? "\"set\"" : "\"unset: any key\"",
           cfg->sms_account_sid && cfg->sms_account_sid[0] ? "\"set\"" : "\"unset: any sid\"",
           cfg->sms_auth_token && cfg->sms_auth_token[0] ? "\"set\"" : "\"unset: any token\"");
    return 0;
}

static void sim_piece_closed(sim_t *s)
{
    if (--s->closing == 0)
        free(s);
}

static void sim_closed(uv_handle_t *h)
{
    sim_piece_closed(container_of((uv_check_t *)h, sim_t, check));
}

static void sim_stop(og_worker_t *w)
{
    sim_t *s = w->app_data;
    if (s == NULL)
        return;
    w->app_data = NULL;
    /* Nothing should wait here: each pending answer holds a request, which holds its
     * connection, and the worker stops only once every connection is gone. */
    while (s->pending != NULL) {
        sim_pending_t *p = s->pending;
        p->req = NULL;
        pending_unlink(p);
    }
    records_clear(s);
    free(s->ring);
    free(s->rules);
    sim_limits_free(s->limits);
    s->limits = NULL;
    wabas_free(s);
    /* Set before anything can close: sim_cb_stop may call sim_piece_closed at once. */
    s->closing = 2;
    s->closing += sim_waha_stop(s, sim_piece_closed);
    sim_cb_stop(s, sim_piece_closed);
    uv_close((uv_handle_t *)&s->check, sim_closed);
}

static const og_app_t sim_app = {
    .routes = sim_routes,
    .nroutes = sizeof(sim_routes) / sizeof(sim_routes[0]),
    .start = sim_start,
    .stop = sim_stop,
    .not_ready = NULL,
};

/* ---- main --------------------------------------------------------------------------------- */

extern char **environ;

static void usage(FILE *out)
{
    fprintf(out, "Usage: omnigate-sim [serve] [--flag value ...]\n"
                 "\n"
                 "Simulates the providers of API.md section 8 on one address:\n"
                 "  POST /{OMNIGATE_META_API_VERSION}/{phoneNumberId}/messages     Meta WhatsApp Cloud API\n"
                 "  GET  /{OMNIGATE_META_API_VERSION}/{wabaId}/message_templates   Meta template listing\n"
                 "  POST /api/sendText                                            WAHA (X-Api-Key)\n"
                 "  /api/sessions/..., GET /api/{session}/auth/qr                  WAHA sessions, QR\n"
                 "  POST /2010-04-01/Accounts/{AccountSid}/Messages.json          Twilio Messages API\n"
                 "and the control API under /__sim (test/sim/README.md).\n"
                 "\n"
                 "It reads the settings of omnigate (below); those it uses are OMNIGATE_LISTEN,\n"
                 "OMNIGATE_META_API_VERSION, OMNIGATE_QR_API_KEY, OMNIGATE_SMS_ACCOUNT_SID,\n"
                 "OMNIGATE_SMS_AUTH_TOKEN, OMNIGATE_ACCESS_LOG (default false here), OMNIGATE_LOG_LEVEL\n"
                 "and the HTTP limits.\n"
                 "OMNIGATE_WORKERS is ignored: the simulator runs one worker, so its state is in one place.\n"
                 "\n"
                 "  --callback-url URL  (env " SIM_CALLBACK_URL_ENV ", default: none)\n"
                 "      After accepting a message, POST the provider's status webhooks to\n"
                 "      URL/webhooks/{meta,waha,twilio} (Twilio: the send's StatusCallback first),\n"
                 "      signed with OMNIGATE_META_APP_SECRET, OMNIGATE_QR_WEBHOOK_SECRET and\n"
                 "      OMNIGATE_SMS_AUTH_TOKEN. Unset: no callbacks. POST /__sim/inbound posts an\n"
                 "      inbound message there too (URL/webhooks/{meta,waha,twilio/inbound}).\n"
                 "\n");
    og_config_usage(out);
}

int main(int argc, char **argv)
{
    og_config_t cfg;
    char err[512];
    char *rest[4];
    int nrest = 4;
    int rc = 0;
    /* One log line per request would make the simulator the bottleneck of a benchmark: the
     * access log is off unless OMNIGATE_ACCESS_LOG or --access-log asks for it. */
    setenv("OMNIGATE_ACCESS_LOG", "false", 0);
    int nargs = argc - 1;
    memset(&cfg, 0, sizeof(cfg));
    if (!sim_cb_take_flag(&nargs, argv + 1, err, sizeof(err))) {
        fprintf(stderr, "omnigate-sim: %s\n", err);
        rc = 2;
        goto out;
    }
    if (!og_config_load(&cfg, environ, nargs, argv + 1, rest, &nrest, err, sizeof(err))) {
        fprintf(stderr, "omnigate-sim: %s\n", err);
        rc = 2;
        goto out;
    }
    const char *cmd = nrest > 0 ? rest[0] : "serve";
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
    } else if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("omnigate-sim %s\n", OG_VERSION);
    } else if (strcmp(cmd, "serve") != 0 || nrest > 1) {
        fprintf(stderr, "omnigate-sim: unexpected argument \"%s\" (try omnigate-sim --help)\n",
                nrest > 1 ? rest[1] : cmd);
        rc = 2;
    } else {
        cfg.workers = 1;
        rc = og_supervisor_run(&cfg, &sim_app);
    }
out:
    og_config_free(&cfg);
    return rc;
}
