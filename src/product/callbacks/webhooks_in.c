/*
 * Provider webhooks in. See include/product/omnigate/callbacks/webhooks_in.h; the operator's side (what
 * to configure at Meta, WAHA and Twilio) is docs/providers.md.
 *
 * Every route checks, in this order: its secret is configured (else 404, as if the route did
 * not exist), the signature over the raw body (else 401, nothing parsed), the body (else 400,
 * nothing recorded: a batch is accepted or refused whole), then records the statuses in one
 * write and answers 200 after COMMIT (503 when the database is unavailable, so the provider
 * retries). Meta's POST may also carry template status changes (API.md §18): they go into the
 * same write, one tpl_set_status for the whole POST, and this worker's template cache forgets
 * them once it committed.
 */
#include "omnigate/callbacks/webhooks_in.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/api.h"
#include "omnigate/app/ctx.h"
#include "omnigate/hmac.h"
#include "omnigate/messaging/nowa.h"
#include "omnigate/providers/provider.h"
#include "omnigate/store.h"
#include "omnigate/templates/catalogue.h"
#include "omnigate/templates/render.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/token.h"

#define PID_MAX     128 /* longest provider message id we record (attempts keep 127 bytes) */
#define CODE_MAX    32
#define MESSAGE_MAX 256

/* ---- metrics ------------------------------------------------------------------------------- */

/* What became of a provider's status callback (API.md §10), counted per status for the first
 * three and per request for the last two. */
typedef enum cb_outcome {
    CB_APPLIED,         /* a new status of one of our attempts or SMS records */
    CB_DUPLICATE,       /* a repeat: changed nothing */
    CB_UNKNOWN_MESSAGE, /* no attempt has that message id (yet): kept, waiting */
    CB_BAD_SIGNATURE,   /* a request refused with 401 */
    CB_BAD_BODY,        /* a request refused with 400 */
    CB__COUNT
} cb_outcome_t;

struct og_callbacks_metrics {
    uint64_t callbacks[OG_CH__COUNT][CB__COUNT]; /* by the provider of the channel */
};

static const char *const cb_outcomes[CB__COUNT] = {
    [CB_APPLIED] = "applied",
    [CB_DUPLICATE] = "duplicate",
    [CB_UNKNOWN_MESSAGE] = "unknown_message",
    [CB_BAD_SIGNATURE] = "bad_signature",
    [CB_BAD_BODY] = "bad_body",
};

static bool provider_label(const void *ctx, int i, const char *v[2])
{
    v[0] = og_channel_provider((og_channel_t)i);
    return true;
}

static const og_m_dim_t providers = {OG_CH__COUNT, {"provider", NULL}, NULL, provider_label};
static const og_m_dim_t outcomes = {CB__COUNT, {"outcome", NULL}, cb_outcomes, NULL};

static const og_m_metric_t metrics[] = {
    {"omnigate_status_callbacks_total", OG_M_COUNTER, &providers, &outcomes,
     offsetof(struct og_callbacks_metrics, callbacks), OG_M_SUM, NULL, false,
     "Provider status callbacks (API.md §10): statuses applied, duplicate or for an unknown message id, and "
     "requests refused for a bad signature or body."},
};

const og_m_block_t og_callbacks_metrics_block = OG_M_BLOCK(struct og_callbacks_metrics, metrics);

/* `n` status callbacks of channel ch's provider ended as `outcome`. */
static void count(og_gw_t *gw, og_channel_t ch, cb_outcome_t outcome, uint64_t n)
{
    struct og_callbacks_metrics *m = gw->callbacks_m;
    if (m != NULL && (unsigned)ch < OG_CH__COUNT && n > 0)
        og_metrics_add(&m->callbacks[ch][outcome], n);
}

/* ---- statuses ------------------------------------------------------------------------------ */

const char *og_webhook_delivery_error(const char *channel, const char *code)
{
    long n = code != NULL && code[0] != '\0' ? strtol(code, NULL, 10) : -1;
    if (strcmp(channel, "whatsapp_meta") == 0) {
        if (n == 131026)
            return "not_on_whatsapp";
        if (n == 131047)
            return "outside_window";
        if (n == 131050)
            return "recipient_opted_out";
    } else if (strcmp(channel, "sms") == 0) {
        if (n == 21610)
            return "recipient_opted_out";
        if (n >= 30003 && n <= 30008)
            return "carrier_rejected";
    }
    return "provider_error";
}

/* Appends one status to `out`; false (err set) when a field is out of bounds. */
static bool add_status(json_t *out, const char *channel, const char *pid, const char *status, double at,
                       const char *code, const char *message, og_err_t *err)
{
    if (pid == NULL || pid[0] == '\0' || strlen(pid) >= PID_MAX)
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL,
                           "a status has no message id, or one over %d bytes", PID_MAX - 1);
    if (code != NULL && strlen(code) >= CODE_MAX)
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL, "an error code is over %d bytes", CODE_MAX - 1);
    json_t *s = json_pack("{s:s,s:s,s:s,s:f}", "channel", channel, "pid", pid, "status", status, "at", at);
    if (s == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    bool failure = strcmp(status, "failed") == 0 || strcmp(status, "undelivered") == 0;
    if (failure) {
        char msg[MESSAGE_MAX];
        if (code != NULL && code[0] != '\0')
            json_object_set_new(s, "code", json_string(code));
        json_object_set_new(s, "error", json_string(og_webhook_delivery_error(channel, code)));
        if (message != NULL && message[0] != '\0')
            json_object_set_new(s, "message", json_string(og_provider_copy_utf8(msg, sizeof(msg), message)));
    }
    json_array_append_new(out, s);
    return true;
}

/* A JSON integer or a string of digits (Meta sends Unix seconds as a string) as seconds. */
static bool json_seconds(const json_t *v, double *out)
{
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
        return *out >= 0;
    }
    const char *s = json_string_value(v);
    if (s == NULL || s[0] == '\0' || strlen(s) > 12 || strspn(s, "0123456789") != strlen(s))
        return false;
    *out = strtod(s, NULL);
    return true;
}

/* A provider code as text: Meta's integers, Twilio's digits. */
static const char *code_text(const json_t *v, char buf[CODE_MAX])
{
    if (json_is_integer(v)) {
        snprintf(buf, CODE_MAX, "%lld", (long long)json_integer_value(v));
        return buf;
    }
    const char *s = json_string_value(v);
    if (s != NULL && strlen(s) < CODE_MAX)
        return s;
    return NULL;
}

static json_t *parse_json(const char *body, size_t len, og_err_t *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        og_err_fail(err, OG_E_INVALID_JSON, NULL, "body is not valid JSON: %s", jerr.text);
    else if (!json_is_object(root)) {
        og_err_fail(err, OG_E_INVALID_JSON, NULL, "body is not a JSON object");
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* One Meta status object of value.statuses[]. */
static bool meta_status(json_t *out, json_t *st, og_err_t *err)
{
    const char *id = json_string_value(json_object_get(st, "id"));
    const char *status = json_string_value(json_object_get(st, "status"));
    double at;
    if (!json_is_object(st) || id == NULL || status == NULL ||
        !json_seconds(json_object_get(st, "timestamp"), &at))
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL,
                           "a status needs string id and status and a timestamp of Unix seconds");
    const char *mapped = NULL;
    if (strcmp(status, "sent") == 0 || strcmp(status, "delivered") == 0 || strcmp(status, "failed") == 0)
        mapped = status;
    else if (strcmp(status, "read") == 0 || strcmp(status, "played") == 0)
        mapped = "read";
    if (mapped == NULL)
        return true; /* a status Meta may add one day ("deleted", "warning"): nothing to record */
    char codebuf[CODE_MAX];
    const char *code = NULL, *message = NULL;
    json_t *errors = json_object_get(st, "errors");
    if (errors != NULL && !json_is_array(errors))
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL, "errors is not an array");
    json_t *e0 = json_array_get(errors, 0);
    if (e0 != NULL) {
        code = code_text(json_object_get(e0, "code"), codebuf);
        message = json_string_value(json_object_get(e0, "title"));
        if (message == NULL)
            message = json_string_value(json_object_get(e0, "message"));
    }
    return add_status(out, "whatsapp_meta", id, mapped, at, code, message, err);
}

/* Meta's template events (value.event of a message_template_status_update) and the status
 * each gives the template in the catalogue; events not listed say nothing we record (the next
 * sync brings what Meta lists). docs/providers.md has the reasons. */
static const char *const template_events[][2] = {
    {OG_TPL_APPROVED, OG_TPL_APPROVED},
    {"REINSTATED", OG_TPL_APPROVED}, /* a paused or flagged template is approved again */
    {"REJECTED", "REJECTED"},
    {"PENDING", "PENDING"},
    {"PAUSED", "PAUSED"},
    {"DISABLED", "DISABLED"},
    {"FLAGGED", "FLAGGED"}, /* kept as Meta says it: not APPROVED, so not sent (docs/providers.md) */
    {"IN_APPEAL", "IN_APPEAL"},
    {"PENDING_DELETION", "PENDING_DELETION"},
    {"DELETED", "DELETED"},
    {"LIMIT_EXCEEDED", "LIMIT_EXCEEDED"},
    {"ARCHIVED", "ARCHIVED"},
    {"LOCKED", "LOCKED"},
};

/* One message_template_status_update of WABA `waba`: appended to `out` as {waba, name,
 * language, status}, replacing an earlier change of the same template in the batch (the later
 * event wins, in the order Meta wrote them). Changes that are incomplete, of an event not
 * listed above, or of a name, language or WABA id the catalogue cannot hold (settings.h) are
 * left out: no template of ours has them. */
static bool meta_template_change(json_t *out, const char *waba, const json_t *value)
{
    const char *event = json_string_value(json_object_get(value, "event"));
    const char *name = json_string_value(json_object_get(value, "message_template_name"));
    const char *language = json_string_value(json_object_get(value, "message_template_language"));
    size_t wl = waba != NULL ? strlen(waba) : 0;
    if (event == NULL || !og_settings_template_name_valid(name) ||
        !og_settings_template_language_valid(language) || wl == 0 || wl > OG_SETTINGS_PHONE_ID_MAX ||
        strspn(waba, "0123456789") != wl)
        return true;
    const char *status = NULL;
    for (size_t i = 0; i < sizeof(template_events) / sizeof(template_events[0]) && status == NULL; i++)
        if (strcmp(event, template_events[i][0]) == 0)
            status = template_events[i][1];
    if (status == NULL)
        return true;
    size_t i;
    json_t *c;
    json_array_foreach(out, i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "waba")), waba) == 0 &&
            strcmp(json_string_value(json_object_get(c, "name")), name) == 0 &&
            strcmp(json_string_value(json_object_get(c, "language")), language) == 0) {
            json_array_remove(out, i);
            break;
        }
    }
    return json_array_append_new(out, json_pack("{s:s,s:s,s:s,s:s}", "waba", waba, "name", name, "language",
                                                language, "status", status)) == 0;
}

json_t *og_webhook_parse_meta(const char *body, size_t len, double now, og_err_t *err)
{
    return og_webhook_parse_meta_all(body, len, now, NULL, err);
}

json_t *og_webhook_parse_meta_all(const char *body, size_t len, double now, json_t **templates, og_err_t *err)
{
    if (templates != NULL)
        *templates = NULL;
    json_t *root = parse_json(body, len, err);
    if (root == NULL)
        return NULL;
    json_t *out = json_array();
    json_t *changed = json_array();
    json_t *entries = json_object_get(root, "entry");
    bool ok = out != NULL && changed != NULL;
    if (!ok)
        og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    if (ok && !json_is_array(entries))
        ok = og_err_fail(err, OG_E_INVALID_PAYLOAD, "entry", "entry is not an array");
    size_t i, j, k;
    json_t *entry, *change, *st;
    json_array_foreach(ok ? entries : NULL, i, entry)
    {
        json_t *changes = json_object_get(entry, "changes");
        if (!json_is_object(entry) || !json_is_array(changes)) {
            ok = og_err_fail(err, OG_E_INVALID_PAYLOAD, "entry", "an entry has no changes array");
            break;
        }
        json_array_foreach(changes, j, change)
        {
            json_t *value = json_object_get(change, "value");
            const char *field = json_string_value(json_object_get(change, "field"));
            if (!json_is_object(change) || field == NULL) {
                ok = og_err_fail(err, OG_E_INVALID_PAYLOAD, "entry", "a change has no field");
                break;
            }
            if (strcmp(field, "message_template_status_update") == 0) {
                /* entry[].id is the WABA */
                if (!meta_template_change(changed, json_string_value(json_object_get(entry, "id")), value)) {
                    ok = og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
                    break;
                }
                continue;
            }
            if (strcmp(field, "messages") != 0)
                continue; /* account updates, quality, ...: not ours to record */
            json_t *statuses = json_object_get(value, "statuses");
            if (!json_is_object(value) || (statuses != NULL && !json_is_array(statuses))) {
                ok = og_err_fail(err, OG_E_INVALID_PAYLOAD, "entry", "a messages change has no value object");
                break;
            }
            json_array_foreach(statuses, k, st)
            {
                if (!(ok = meta_status(out, st, err)))
                    break;
            }
            if (!ok)
                break;
        }
        if (!ok)
            break;
    }
    json_decref(root);
    if (!ok) {
        json_decref(out);
        json_decref(changed);
        return NULL;
    }
    if (templates != NULL)
        *templates = changed;
    else
        json_decref(changed);
    (void)now;
    return out;
}

json_t *og_webhook_parse_waha(const char *body, size_t len, double now, og_err_t *err)
{
    json_t *root = parse_json(body, len, err);
    if (root == NULL)
        return NULL;
    json_t *out = json_array();
    const char *event = json_string_value(json_object_get(root, "event"));
    json_t *payload = json_object_get(root, "payload");
    bool ok = out != NULL;
    if (ok && event == NULL)
        ok = og_err_fail(err, OG_E_INVALID_PAYLOAD, "event", "event is not a string");
    if (ok && strcmp(event, "message.ack") == 0) {
        const char *id = json_string_value(json_object_get(payload, "id"));
        json_t *ack = json_object_get(payload, "ack");
        if (!json_is_object(payload) || id == NULL || !json_is_integer(ack)) {
            ok = og_err_fail(err, OG_E_INVALID_PAYLOAD, "payload",
                             "message.ack needs payload.id and an integer payload.ack");
        } else {
            /* The envelope's timestamp is in milliseconds; without it, the time we got it. */
            json_t *ts = json_object_get(root, "timestamp");
            double at =
                json_is_number(ts) && json_number_value(ts) > 0 ? json_number_value(ts) / 1000.0 : now;
            static const char *const by_ack[] = {"failed", NULL, "sent", "delivered", "read", "read"};
            json_int_t a = json_integer_value(ack);
            const char *status = a >= -1 && a <= 4 ? by_ack[a + 1] : NULL;
            if (status != NULL)
                ok = add_status(out, "whatsapp_qr", id, status, at, a == -1 ? "ERROR" : NULL,
                                json_string_value(json_object_get(payload, "ackName")), err);
        }
    }
    json_decref(root);
    if (!ok) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* ---- forms (Twilio) ------------------------------------------------------------------------ */

#define FORM_MAX_FIELDS 128

typedef struct form {
    struct {
        const char *name, *value;
    } f[FORM_MAX_FIELDS];
    size_t n;
    char *buf; /* every decoded name and value, NUL-terminated */
} form_t;

/* Decodes every field of body into form; false on a malformed one or too many. */
static bool form_parse(const char *body, size_t len, form_t *form)
{
    form->n = 0;
    form->buf = malloc(len + 2 * FORM_MAX_FIELDS + 1);
    if (form->buf == NULL)
        return false;
    char *o = form->buf;
    size_t pos = 0;
    og_form_pair_t p;
    while (og_form_next(body, len, &pos, &p)) {
        if (form->n == FORM_MAX_FIELDS)
            return false;
        int kn = og_form_decode(p.key, p.key_len, o, p.key_len + 1);
        if (kn < 0)
            return false;
        form->f[form->n].name = o;
        o += kn + 1;
        int vn = og_form_decode(p.value != NULL ? p.value : "", p.value_len, o, p.value_len + 1);
        if (vn < 0)
            return false;
        form->f[form->n++].value = o;
        o += vn + 1;
    }
    return true;
}

static const char *form_get(const form_t *form, const char *name)
{
    for (size_t i = 0; i < form->n; i++)
        if (strcmp(form->f[i].name, name) == 0)
            return form->f[i].value;
    return NULL;
}

static int field_cmp(const void *a, const void *b)
{
    const char *const *x = a, *const *y = b;
    int c = strcmp(x[0], y[0]);
    return c != 0 ? c : strcmp(x[1], y[1]);
}

bool og_webhook_twilio_signed(const char *token, const char *url, const char *body, size_t len,
                              const char *sig, size_t siglen)
{
    form_t form;
    bool ok = form_parse(body, len, &form);
    if (ok) {
        qsort(form.f, form.n, sizeof(form.f[0]), field_cmp);
        const void *parts[1 + 2 * FORM_MAX_FIELDS];
        size_t lens[1 + 2 * FORM_MAX_FIELDS];
        parts[0] = url;
        lens[0] = strlen(url);
        for (size_t i = 0; i < form.n; i++) {
            parts[1 + 2 * i] = form.f[i].name;
            lens[1 + 2 * i] = strlen(form.f[i].name);
            parts[2 + 2 * i] = form.f[i].value;
            lens[2 + 2 * i] = strlen(form.f[i].value);
        }
        ok = og_hmac_check_b64(OG_HMAC_SHA1, token, parts, lens, 1 + 2 * form.n, sig, siglen);
    }
    free(form.buf);
    return ok;
}

json_t *og_webhook_parse_twilio(const char *body, size_t len, double now, og_err_t *err)
{
    form_t form;
    json_t *out = NULL;
    if (!form_parse(body, len, &form)) {
        og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL, "body is not a valid form");
        goto done;
    }
    const char *sid = form_get(&form, "MessageSid");
    const char *status = form_get(&form, "MessageStatus");
    if (sid == NULL)
        sid = form_get(&form, "SmsSid");
    if (status == NULL)
        status = form_get(&form, "SmsStatus");
    if (sid == NULL || status == NULL) {
        og_err_fail(err, OG_E_INVALID_PAYLOAD, "MessageSid", "MessageSid and MessageStatus are required");
        goto done;
    }
    static const char *const kept[] = {"sent", "delivered", "undelivered", "failed", "read"};
    const char *mapped = NULL;
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        if (strcmp(status, kept[i]) == 0)
            mapped = kept[i];
    out = json_array();
    /* queued, sending, accepted, scheduled, canceled ...: nothing the recipient got. */
    if (out != NULL && mapped != NULL) {
        const char *code = form_get(&form, "ErrorCode");
        if (!add_status(out, "sms", sid, mapped, now, code != NULL && code[0] ? code : NULL,
                        form_get(&form, "ErrorMessage"), err)) {
            json_decref(out);
            out = NULL;
        }
    }
done:
    free(form.buf);
    return out;
}

/* ---- the routes ---------------------------------------------------------------------------- */

typedef struct wh_op {
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    og_channel_t ch;
    char *json;
    int status_stmt;   /* index of status_apply in op, -1 when the POST had no status */
    json_t *templates; /* Meta's template status changes recorded with them, or NULL */
    char *tpl_json;    /* `templates` as tpl_set_status takes them */
} wh_op_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void not_configured(og_http_req_t *req)
{
    og_api_error(req, OG_E_NOT_FOUND, NULL, "no such route");
}

static void bad_signature(og_gw_t *gw, og_http_req_t *req, og_channel_t ch, const char *header)
{
    count(gw, ch, CB_BAD_SIGNATURE, 1);
    og_err_t err;
    og_err_fail(&err, OG_E_INVALID_SIGNATURE, header, "missing or wrong %s", header);
    og_http_header_t h = {"WWW-Authenticate", 16, "HMAC realm=\"webhooks\"", 21};
    og_api_send_error(req, &err, NULL, NULL, &h, 1);
}

static void answer_counts(og_http_req_t *req, long long applied, long long duplicate, long long unknown)
{
    og_api_reply(req, 200, "ok",
                 json_pack("{s:I,s:I,s:I}", "applied", (json_int_t)applied, "duplicate",
                           (json_int_t)duplicate, "unknown", (json_int_t)unknown),
                 NULL, 0);
}

static long long cell(const PGresult *res, int col)
{
    return res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, col)
               ? strtoll(PQgetvalue(res, 0, col), NULL, 10)
               : 0;
}

static void recorded(og_db_op_t *op, og_db_status_t st)
{
    wh_op_t *o = (wh_op_t *)op;
    if (st == OG_DB_OK) {
        const PGresult *res = o->status_stmt >= 0 ? op->res[o->status_stmt] : NULL;
        long long applied = cell(res, OG_C_STATUS_APPLY_APPLIED),
                  duplicate = cell(res, OG_C_STATUS_APPLY_DUPLICATE),
                  unknown = cell(res, OG_C_STATUS_APPLY_UNKNOWN);
        count(o->gw, o->ch, CB_APPLIED, (uint64_t)applied);
        count(o->gw, o->ch, CB_DUPLICATE, (uint64_t)duplicate);
        count(o->gw, o->ch, CB_UNKNOWN_MESSAGE, (uint64_t)unknown);
        /* Committed: this worker's cache reads the changed templates again at their next use
         * (the other workers' entries end within OG_TPL_CACHE_MS). */
        size_t i;
        json_t *t;
        json_array_foreach(o->templates, i, t)
        {
            og_tpl_cache_forget(o->gw->tpl, json_string_value(json_object_get(t, "waba")),
                                json_string_value(json_object_get(t, "name")),
                                json_string_value(json_object_get(t, "language")));
        }
        answer_counts(o->req, applied, duplicate, unknown);
    } else {
        og_answer_db_failure(o->req, &o->gw->w->log, op, st, "recording statuses failed",
                             "database unavailable: nothing was recorded");
    }
    og_db_op_clear(op);
    free(o->tpl_json);
    json_decref(o->templates);
    free(o->json);
    free(o);
}

/* Records the statuses (and Meta's template status changes, `templates`, may be NULL) of a
 * verified body in one write, answering after COMMIT. Takes both arrays. */
static void record(og_gw_t *gw, og_http_req_t *req, og_channel_t ch, json_t *statuses, json_t *templates)
{
    if (json_array_size(statuses) == 0 && json_array_size(templates) == 0) {
        json_decref(statuses);
        json_decref(templates);
        answer_counts(req, 0, 0, 0);
        return;
    }
    wh_op_t *o = gw->db != NULL ? calloc(1, sizeof(*o)) : NULL;
    bool ok = o != NULL;
    if (ok && json_array_size(statuses) > 0)
        ok = (o->json = json_dumps(statuses, JSON_COMPACT)) != NULL;
    int n = 0;
    if (ok) {
        o->status_stmt = -1;
        if (o->json != NULL) {
            o->status_stmt = n;
            og_q_status_apply(&o->op.stmts[n++], &(og_q_status_apply_t){.statuses = o->json});
            /* In the same transaction: what the statuses say about numbers without WhatsApp. */
            n += og_nowa_statuses_stmt(gw->nowa, &o->op, n, statuses, o->json);
        }
        /* And the templates' statuses: one statement for the whole POST. */
        if (json_array_size(templates) > 0) {
            ok = (o->tpl_json = json_dumps(templates, JSON_COMPACT)) != NULL;
            if (ok)
                og_q_tpl_set_status(&o->op.stmts[n++], &(og_q_tpl_set_status_t){.changes = o->tpl_json});
            o->templates = json_incref(templates);
        }
    }
    json_decref(statuses);
    json_decref(templates);
    if (!ok) {
        if (o != NULL) {
            free(o->tpl_json);
            json_decref(o->templates);
            free(o->json);
        }
        free(o);
        og_api_error(req, OG_E_UNAVAILABLE, NULL, gw->db == NULL ? "no database" : "out of memory");
        return;
    }
    o->gw = gw;
    o->req = req;
    o->ch = ch;
    o->op.nstmts = n;
    o->op.write = true;
    o->op.done = recorded;
    og_db_submit(gw->db, &o->op);
}

/* Parses the verified body with `parse` and records what it holds. */
static void parse_and_record(og_gw_t *gw, og_http_req_t *req, og_channel_t ch,
                             json_t *(*parse)(const char *, size_t, double, og_err_t *))
{
    og_err_t err = {0};
    json_t *statuses = parse(req->body, req->body_len, now_s(), &err);
    if (statuses == NULL) {
        count(gw, ch, CB_BAD_BODY, 1);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    record(gw, req, ch, statuses, NULL);
}

static bool configured(const char *s)
{
    return s != NULL && s[0] != '\0';
}

void og_webhook_meta_verify(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    const og_config_t *cfg = og_gw(ctx)->w->cfg;
    if (!configured(cfg->meta_verify_token)) {
        not_configured(req);
        return;
    }
    char mode[32], token[256], challenge[256];
    bool ok = og_query_param(req->query, req->query_len, "hub.mode", mode, sizeof(mode)) >= 0 &&
              strcmp(mode, "subscribe") == 0;
    int tn = og_query_param(req->query, req->query_len, "hub.verify_token", token, sizeof(token));
    int cn = og_query_param(req->query, req->query_len, "hub.challenge", challenge, sizeof(challenge));
    ok = ok && tn >= 0 && (size_t)tn == strlen(cfg->meta_verify_token) &&
         og_ct_equal(token, cfg->meta_verify_token, (size_t)tn) && cn >= 0;
    if (!ok) {
        og_api_error(req, OG_E_FORBIDDEN, NULL, "verification refused");
        return;
    }
    og_http_respond(req, 200, NULL, 0, "text/plain", challenge, (size_t)cn);
}

void og_webhook_meta(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    const char *secret = gw->w->cfg->meta_app_secret;
    if (!configured(secret)) {
        not_configured(req);
        return;
    }
    size_t n;
    const char *sig = og_http_req_header(req, "x-hub-signature-256", &n);
    if (sig == NULL || n < 7 || memcmp(sig, "sha256=", 7) != 0 ||
        !og_hmac_check_hex(OG_HMAC_SHA256, secret, req->body, req->body_len, sig + 7, n - 7)) {
        bad_signature(gw, req, OG_CH_WHATSAPP_META, "X-Hub-Signature-256");
        return;
    }
    og_err_t err = {0};
    json_t *templates = NULL;
    json_t *statuses = og_webhook_parse_meta_all(req->body, req->body_len, now_s(), &templates, &err);
    if (statuses == NULL) {
        count(gw, OG_CH_WHATSAPP_META, CB_BAD_BODY, 1);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    record(gw, req, OG_CH_WHATSAPP_META, statuses, templates);
}

void og_webhook_waha(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    const char *secret = gw->w->cfg->qr_webhook_secret;
    if (!configured(secret)) {
        not_configured(req);
        return;
    }
    size_t n, an;
    const char *sig = og_http_req_header(req, "x-webhook-hmac", &n);
    const char *alg = og_http_req_header(req, "x-webhook-hmac-algorithm", &an);
    if (sig == NULL || (alg != NULL && !(an == 6 && strncasecmp(alg, "sha512", 6) == 0)) ||
        !og_hmac_check_hex(OG_HMAC_SHA512, secret, req->body, req->body_len, sig, n)) {
        bad_signature(gw, req, OG_CH_WHATSAPP_QR, "X-Webhook-Hmac");
        return;
    }
    parse_and_record(gw, req, OG_CH_WHATSAPP_QR, og_webhook_parse_waha);
}

void og_webhook_twilio(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    const og_config_t *cfg = gw->w->cfg;
    /* The signature covers the URL Twilio called, which only OMNIGATE_PUBLIC_URL can tell. */
    if (!configured(cfg->sms_auth_token) || !configured(cfg->public_url)) {
        not_configured(req);
        return;
    }
    size_t n;
    const char *sig = og_http_req_header(req, "x-twilio-signature", &n);
    size_t base = strlen(cfg->public_url);
    while (base > 0 && cfg->public_url[base - 1] == '/')
        base--;
    char *url = NULL;
    int un =
        asprintf(&url, "%.*s%.*s%s%.*s", (int)base, cfg->public_url, (int)req->path_len, req->path,
                 req->query != NULL ? "?" : "", (int)req->query_len, req->query != NULL ? req->query : "");
    if (un < 0) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    bool ok =
        sig != NULL && og_webhook_twilio_signed(cfg->sms_auth_token, url, req->body, req->body_len, sig, n);
    free(url);
    if (!ok) {
        bad_signature(gw, req, OG_CH_SMS, "X-Twilio-Signature");
        return;
    }
    parse_and_record(gw, req, OG_CH_SMS, og_webhook_parse_twilio);
}
