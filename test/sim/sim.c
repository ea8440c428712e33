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

static const char *const stat_names[SIM_STAT__COUNT] = {
    "ok", "reject", "error", "hang", "reset", "garbage", "throttle", "auth", "unauthorized", "invalid",
};

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
    og_http_respond(req, a->status, a->headers, a->nheaders, a->ctype, a->body, a->body_len);
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

/* A JSON string of s[0..len); bytes that are not UTF-8 become U+FFFD so that any body can be
 * shown. */
static json_t *json_text(const char *s, size_t len)
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
        json_t *v = json_text(value, strlen(value));
        json_t *prev = json_object_get(headers, name);
        if (prev != NULL && json_is_string(prev) && json_is_string(v)) {
            /* A repeated header reads as one comma-separated list (RFC 9110 §5.3). */
            size_t n = json_string_length(prev) + 2 + json_string_length(v);
            char *joined = malloc(n + 1);
            if (joined != NULL) {
                snprintf(joined, n + 1, "%s, %s", json_string_value(prev), json_string_value(v));
                json_decref(v);
                v = json_text(joined, n);
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
                     r->method, "path", json_text(r->data, r->path_len), "headers", headers, "body",
                     json_text(r->data + r->body_off, r->body_len), "to",
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
                    "behaviour must be ok, reject, error, hang, reset, garbage, throttle or auth");
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
    {"POST", "/__sim/hooks/{mode}", hooks_post},
    {"POST", "/api/sendText", sim_waha_send},
    {"POST", "/2010-04-01/Accounts/{AccountSid}/Messages.json", sim_twilio_send},
    /* Last: three parameter segments would match nothing above anyway, but keep literals first. */
    {"POST", "/{version}/{phoneNumberId}/messages", sim_meta_send},
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
    if (s->ring == NULL) {
        free(s);
        return -1;
    }
    s->w = w;
    if (getrandom(&s->rng, sizeof(s->rng), 0) != (ssize_t)sizeof(s->rng))
        s->rng = uv_hrtime() ^ ((uint64_t)getpid() << 32);
    /* main put --callback-url there: an og_app_t carries no argument of its own. */
    if (sim_cb_start(s, getenv(SIM_CALLBACK_URL_ENV)) != 0) {
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
    s->closing = 2;
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
                 "  POST /api/sendText                                            WAHA (X-Api-Key)\n"
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
                 "      OMNIGATE_SMS_AUTH_TOKEN. Unset: no callbacks.\n"
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
