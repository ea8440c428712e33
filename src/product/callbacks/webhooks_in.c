/*
 * Provider webhooks in. See include/product/omnigate/callbacks/webhooks_in.h; the operator's side (what
 * to configure at Meta, WAHA and Twilio) is docs/providers.md.
 *
 * Every route checks, in this order: a secret is configured that could verify it (else 404, as
 * if the route did not exist), the signature over the raw body (else 401, nothing recorded), the
 * body (else 400, nothing recorded: a batch is accepted or refused whole), then records the
 * statuses in one write and answers 200 after COMMIT (503 when the database is unavailable, so
 * the provider retries). Twilio's and WAHA's may come from a tenant's own account (API.md §23):
 * the account the request names is found first, in this worker's cache or by one indexed read
 * ("whose account signed it" below), and only its secret verifies it. Meta's POST may also carry
 * template status changes (API.md §18): they go into the same write, one tpl_set_status for the
 * whole POST, and this worker's template cache forgets them once it committed.
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
#include "omnigate/phone.h"
#include "omnigate/providers/accounts.h"
#include "omnigate/providers/provider.h"
#include "omnigate/qr/sessions.h"
#include "omnigate/store.h"
#include "omnigate/templates/catalogue.h"
#include "omnigate/templates/render.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/token.h"
#include "omnigate/util.h"

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

/* What became of an inbound message (API.md §21), counted per message for the first four and
 * per request for the last two (Twilio's inbound route only: Meta's and WAHA's POSTs count as
 * status callbacks, which they may hold too). */
typedef enum in_outcome {
    IN_STORED,    /* a new message of a tenant */
    IN_DUPLICATE, /* a provider's repeat: stored before */
    IN_UNROUTED,  /* no tenant has its number or session: dropped */
    IN_IGNORED,   /* not a message from a phone number (a group's, our own echo): dropped */
    IN_BAD_SIGNATURE,
    IN_BAD_BODY,
    IN__COUNT
} in_outcome_t;

struct og_callbacks_metrics {
    uint64_t callbacks[OG_CH__COUNT][CB__COUNT]; /* by the provider of the channel */
    uint64_t inbound[OG_CH__COUNT][IN__COUNT];   /* by channel */
};

static const char *const cb_outcomes[CB__COUNT] = {
    [CB_APPLIED] = "applied",
    [CB_DUPLICATE] = "duplicate",
    [CB_UNKNOWN_MESSAGE] = "unknown_message",
    [CB_BAD_SIGNATURE] = "bad_signature",
    [CB_BAD_BODY] = "bad_body",
};

static const char *const in_outcomes[IN__COUNT] = {
    [IN_STORED] = "stored",   [IN_DUPLICATE] = "duplicate",         [IN_UNROUTED] = "unrouted",
    [IN_IGNORED] = "ignored", [IN_BAD_SIGNATURE] = "bad_signature", [IN_BAD_BODY] = "bad_body",
};

static bool provider_label(const void *ctx, int i, const char *v[2])
{
    v[0] = og_channel_provider((og_channel_t)i);
    return true;
}

static bool channel_label(const void *ctx, int i, const char *v[2])
{
    v[0] = og_channel_name((og_channel_t)i);
    return true;
}

static const og_m_dim_t providers = {OG_CH__COUNT, {"provider", NULL}, NULL, provider_label};
static const og_m_dim_t outcomes = {CB__COUNT, {"outcome", NULL}, cb_outcomes, NULL};
static const og_m_dim_t channels = {OG_CH__COUNT, {"channel", NULL}, NULL, channel_label};
static const og_m_dim_t in_outcome_dim = {IN__COUNT, {"outcome", NULL}, in_outcomes, NULL};

static const og_m_metric_t metrics[] = {
    {"omnigate_status_callbacks_total", OG_M_COUNTER, &providers, &outcomes,
     offsetof(struct og_callbacks_metrics, callbacks), OG_M_SUM, NULL, false,
     "Provider status callbacks (API.md §10): statuses applied, duplicate or for an unknown message id, and "
     "requests refused for a bad signature or body."},
    {"omnigate_inbound_messages_total", OG_M_COUNTER, &channels, &in_outcome_dim,
     offsetof(struct og_callbacks_metrics, inbound), OG_M_SUM, NULL, false,
     "Inbound messages (API.md §21) by channel: stored, duplicate (stored before), unrouted (no tenant "
     "has the number or session) or ignored (not from a phone number); and Twilio inbound requests "
     "refused for a bad signature or body."},
};

const og_m_block_t og_callbacks_metrics_block = OG_M_BLOCK(struct og_callbacks_metrics, metrics);

/* `n` status callbacks of channel ch's provider ended as `outcome`. */
static void count(og_gw_t *gw, og_channel_t ch, cb_outcome_t outcome, uint64_t n)
{
    struct og_callbacks_metrics *m = gw->callbacks_m;
    if (m != NULL && (unsigned)ch < OG_CH__COUNT && n > 0)
        og_metrics_add(&m->callbacks[ch][outcome], n);
}

/* `n` inbound messages of channel ch ended as `outcome`. */
static void count_in(og_gw_t *gw, og_channel_t ch, in_outcome_t outcome, uint64_t n)
{
    struct og_callbacks_metrics *m = gw->callbacks_m;
    if (m != NULL && (unsigned)ch < OG_CH__COUNT && n > 0)
        og_metrics_add(&m->inbound[ch][outcome], n);
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

/* ---- inbound messages (API.md §21) --------------------------------------------------------- */

#define ROUTE_MAX 64 /* a route's key: a phone number id (32 digits), a session (64), a number */
#define TYPE_MAX  32

/* Appends one inbound message to `out`, as og_inbound_store (sql/021_inbound.sql) takes it:
 * {"channel", "pid", "from", "route", "number", "type", "text", "at", "phoneNumberId",
 * "session"}. `from` is E.164; `number` (may be NULL) the tenant's number it came to, digits for
 * WhatsApp; `text` may be NULL. */
static bool add_inbound(json_t *out, og_channel_t ch, const char *pid, const char *from, const char *route,
                        const char *number, const char *type, const char *text, double at, og_err_t *err)
{
    if (pid == NULL || pid[0] == '\0' || strlen(pid) >= PID_MAX)
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL,
                           "an inbound message has no message id, or one over %d bytes", PID_MAX - 1);
    if (!og_phone_e164_valid(from))
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL,
                           "an inbound message's sender is not a phone number");
    if (route == NULL || route[0] == '\0' || strlen(route) > ROUTE_MAX)
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL,
                           "an inbound message says no receiving number or session (or one over %d bytes)",
                           ROUTE_MAX);
    size_t tl = type != NULL ? strlen(type) : 0;
    if (tl == 0 || tl > TYPE_MAX || strspn(type, "abcdefghijklmnopqrstuvwxyz_") != tl)
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL, "an inbound message's type is not a word");
    json_t *m = json_pack("{s:s,s:s,s:s,s:s,s:s,s:f}", "channel", og_channel_name(ch), "pid", pid, "from",
                          from, "route", route, "type", type, "at", at);
    if (m == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    if (number != NULL)
        json_object_set_new(m, "number", json_string(number));
    if (text != NULL && text[0] != '\0')
        json_object_set_new(m, "text", json_string(text));
    if (ch == OG_CH_WHATSAPP_META)
        json_object_set_new(m, "phoneNumberId", json_string(route));
    else if (ch == OG_CH_WHATSAPP_QR)
        json_object_set_new(m, "session", json_string(route));
    json_array_append_new(out, m);
    return true;
}

/* The text of a Meta message: a text's body, a button's or a reply's title, a media caption. */
static const char *meta_text(const json_t *msg, const char *type)
{
    const json_t *part = json_object_get(msg, type);
    if (strcmp(type, "text") == 0)
        return json_string_value(json_object_get(part, "body"));
    if (strcmp(type, "button") == 0)
        return json_string_value(json_object_get(part, "text"));
    if (strcmp(type, "interactive") == 0) {
        const json_t *reply = json_object_get(part, "button_reply");
        if (reply == NULL)
            reply = json_object_get(part, "list_reply");
        return json_string_value(json_object_get(reply, "title"));
    }
    return json_string_value(json_object_get(part, "caption")); /* image, video, document */
}

/* One message of value.messages[] (a messages change of a Meta number). */
static bool meta_inbound(json_t *out, const json_t *value, const json_t *msg, og_err_t *err)
{
    const char *pnid =
        json_string_value(json_object_get(json_object_get(value, "metadata"), "phone_number_id"));
    const char *id = json_string_value(json_object_get(msg, "id"));
    const char *from = json_string_value(json_object_get(msg, "from"));
    const char *type = json_string_value(json_object_get(msg, "type"));
    double at;
    if (!json_is_object(msg) || id == NULL || from == NULL || type == NULL ||
        !json_seconds(json_object_get(msg, "timestamp"), &at))
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL,
                           "a message needs string id, from and type and a timestamp of Unix seconds");
    if (pnid == NULL || strspn(pnid, "0123456789") != strlen(pnid))
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL,
                           "a messages change with messages needs value.metadata.phone_number_id");
    char e164[24];
    snprintf(e164, sizeof(e164), "+%.20s", from);
    return add_inbound(out, OG_CH_WHATSAPP_META, id, e164, pnid, NULL, type, meta_text(msg, type), at, err);
}

/* WAHA's event `message` (a message someone sent the session): one inbound message, or
 * nothing when it is not from a phone number (a group's, a status broadcast, an id WAHA cannot
 * map to a number), counted in *ignored. */
static bool waha_inbound(json_t *out, const json_t *root, const json_t *payload, double now, int *ignored,
                         og_err_t *err)
{
    const char *session = json_string_value(json_object_get(root, "session"));
    const char *id = json_string_value(json_object_get(payload, "id"));
    json_t *from_me = json_object_get(payload, "fromMe");
    if (!json_is_object(payload) || id == NULL || session == NULL)
        return og_err_fail(err, OG_E_INVALID_PAYLOAD, "payload", "message needs session and payload.id");
    char from[OG_PHONE_SENDER_SIZE], me[OG_PHONE_SENDER_SIZE], e164[20];
    if (json_is_true(from_me) ||
        !og_phone_wa_user(json_string_value(json_object_get(payload, "from")), from)) {
        (*ignored)++;
        return true;
    }
    bool known_me =
        og_phone_wa_user(json_string_value(json_object_get(json_object_get(root, "me"), "id")), me) ||
        og_phone_wa_user(json_string_value(json_object_get(payload, "to")), me);
    json_t *ts = json_object_get(payload, "timestamp");
    double at = json_is_number(ts) && json_number_value(ts) > 0 ? json_number_value(ts) : now;
    snprintf(e164, sizeof(e164), "+%s", from);
    bool media = json_is_true(json_object_get(payload, "hasMedia"));
    return add_inbound(out, OG_CH_WHATSAPP_QR, id, e164, session, known_me ? me : NULL,
                       media ? "media" : "text", json_string_value(json_object_get(payload, "body")), at,
                       err);
}

json_t *og_webhook_parse_meta(const char *body, size_t len, double now, og_err_t *err)
{
    return og_webhook_parse_meta_all(body, len, now, NULL, NULL, err);
}

json_t *og_webhook_parse_meta_all(const char *body, size_t len, double now, json_t **templates,
                                  json_t **inbound, og_err_t *err)
{
    if (templates != NULL)
        *templates = NULL;
    if (inbound != NULL)
        *inbound = NULL;
    json_t *root = parse_json(body, len, err);
    if (root == NULL)
        return NULL;
    json_t *out = json_array();
    json_t *changed = json_array();
    json_t *received = json_array();
    json_t *entries = json_object_get(root, "entry");
    bool ok = out != NULL && changed != NULL && received != NULL;
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
            json_t *messages = json_object_get(value, "messages");
            if (!json_is_object(value) || (statuses != NULL && !json_is_array(statuses)) ||
                (messages != NULL && !json_is_array(messages))) {
                ok = og_err_fail(err, OG_E_INVALID_PAYLOAD, "entry", "a messages change has no value object");
                break;
            }
            json_array_foreach(statuses, k, st)
            {
                if (!(ok = meta_status(out, st, err)))
                    break;
            }
            json_array_foreach(ok ? messages : NULL, k, st)
            {
                if (!(ok = meta_inbound(received, value, st, err)))
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
        json_decref(received);
        return NULL;
    }
    if (templates != NULL)
        *templates = changed;
    else
        json_decref(changed);
    if (inbound != NULL)
        *inbound = received;
    else
        json_decref(received);
    (void)now;
    return out;
}

json_t *og_webhook_parse_waha(const char *body, size_t len, double now, og_err_t *err)
{
    return og_webhook_parse_waha_all(body, len, now, NULL, NULL, NULL, err);
}

/* WAHA's session.status event ({"session", "timestamp" (ms), "me": {"id": "<digits>@c.us"} or
 * null, "payload": {"status"}}; devlikeapro/waha src/structures/webhooks.dto.ts) as
 * og_webhook_parse_waha_all returns it in *session. */
static bool waha_session_status(json_t **out, const json_t *root, const json_t *payload, double now,
                                og_err_t *err)
{
    const char *session = json_string_value(json_object_get(root, "session"));
    const char *status = json_string_value(json_object_get(payload, "status"));
    if (session == NULL || !og_qr_session_name_valid(session, strlen(session)) || status == NULL)
        return og_err_fail(
            err, OG_E_INVALID_PAYLOAD, "payload",
            "session.status needs a session (1-64 letters, digits, '_' or '-') and payload.status");
    json_t *me = json_object_get(root, "me");
    if (!json_is_object(me))
        me = json_object_get(payload, "me");
    char digits[OG_PHONE_SENDER_SIZE], number[OG_PHONE_SENDER_SIZE + 1] = "";
    if (og_phone_wa_user(json_string_value(json_object_get(me, "id")), digits))
        snprintf(number, sizeof(number), "+%s", digits);
    /* The envelope's timestamp is in milliseconds; without it, the time we got it. */
    json_t *ts = json_object_get(root, "timestamp");
    double at_ms = json_is_number(ts) && json_number_value(ts) > 0 ? json_number_value(ts) : now * 1000.0;
    *out = json_pack("{s:s,s:s,s:s?,s:f}", "session", session, "status", status, "number",
                     number[0] ? number : NULL, "atMs", at_ms);
    return *out != NULL || og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
}

json_t *og_webhook_parse_waha_all(const char *body, size_t len, double now, json_t **inbound, int *ignored,
                                  json_t **session, og_err_t *err)
{
    if (session != NULL)
        *session = NULL;
    if (inbound != NULL)
        *inbound = NULL;
    if (ignored != NULL)
        *ignored = 0;
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
    json_t *state = NULL;
    if (ok && strcmp(event, "session.status") == 0 && session != NULL)
        ok = waha_session_status(&state, root, payload, now, err);
    json_t *received = NULL;
    int skipped = 0;
    if (ok && strcmp(event, "message") == 0 && inbound != NULL) {
        ok = (received = json_array()) != NULL || og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
        ok = ok && waha_inbound(received, root, payload, now, &skipped, err);
    }
    json_decref(root);
    if (!ok) {
        json_decref(state);
        json_decref(received);
        json_decref(out);
        return NULL;
    }
    if (session != NULL)
        *session = state;
    if (inbound != NULL)
        *inbound = received;
    if (ignored != NULL)
        *ignored = skipped;
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

/* form_parse for a webhook's body: false with invalid_payload. */
static bool form_read(const char *body, size_t len, form_t *form, og_err_t *err)
{
    return form_parse(body, len, form) ||
           og_err_fail(err, OG_E_INVALID_PAYLOAD, NULL, "body is not a valid form");
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
    if (!form_read(body, len, &form, err))
        goto done;
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

json_t *og_webhook_parse_twilio_inbound(const char *body, size_t len, double now, int *ignored, og_err_t *err)
{
    form_t form;
    json_t *out = NULL;
    *ignored = 0;
    if (!form_read(body, len, &form, err))
        goto done;
    const char *sid = form_get(&form, "MessageSid");
    if (sid == NULL)
        sid = form_get(&form, "SmsMessageSid");
    const char *from = form_get(&form, "From"), *to = form_get(&form, "To");
    const char *text = form_get(&form, "Body"), *media = form_get(&form, "NumMedia");
    if (sid == NULL || from == NULL || to == NULL) {
        og_err_fail(err, OG_E_INVALID_PAYLOAD, "MessageSid", "MessageSid, From and To are required");
        goto done;
    }
    if (!og_phone_e164_valid(to)) {
        og_err_fail(err, OG_E_INVALID_PAYLOAD, "To", "To is not a phone number");
        goto done;
    }
    out = json_array();
    if (out == NULL) {
        og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
        goto done;
    }
    /* A short code's or an alphanumeric sender's message: no number to answer or opt out. */
    if (!og_phone_e164_valid(from)) {
        (*ignored)++;
        goto done;
    }
    bool has_media = media != NULL && media[0] != '\0' && strcmp(media, "0") != 0;
    if (!add_inbound(out, OG_CH_SMS, sid, from, to, to, has_media ? "media" : "text", text, now, err)) {
        json_decref(out);
        out = NULL;
    }
done:
    free(form.buf);
    return out;
}

/* ---- the routes ---------------------------------------------------------------------------- */

/* What a verified POST holds, as the parsers return it. */
typedef struct wh_body {
    json_t *statuses;  /* never NULL */
    json_t *templates; /* Meta's template status changes, or NULL */
    json_t *inbound;   /* inbound messages (API.md §21), or NULL */
    int ignored;       /* inbound messages left out (not from a phone number) */
    bool twiml;        /* Twilio's inbound route: the answer is TwiML */
} wh_body_t;

typedef struct wh_op {
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    og_channel_t ch;
    char *json;
    int status_stmt;   /* index of status_apply in op, -1 when the POST had no status */
    int inbound_stmt;  /* index of inbound_store in op, -1 when the POST had no inbound message */
    int ignored;       /* inbound messages left out */
    bool twiml;        /* answer with TwiML (Twilio's inbound route) */
    json_t *templates; /* Meta's template status changes recorded with them, or NULL */
    char *tpl_json;    /* `templates` as tpl_set_status takes them */
    char *in_json;     /* the inbound messages as inbound_store takes them */
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

/* Twilio's inbound webhook wants TwiML back: an empty Response sends no reply to the sender. */
static const char twiml_empty[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response></Response>";

/* The answer of a POST recorded: the statuses' counts and, when it held inbound messages (or
 * left some out), theirs: {"stored", "duplicate", "unrouted", "ignored"}. */
static void answer_counts(og_http_req_t *req, long long applied, long long duplicate, long long unknown,
                          const long long *in)
{
    json_t *data = json_pack("{s:I,s:I,s:I}", "applied", (json_int_t)applied, "duplicate",
                             (json_int_t)duplicate, "unknown", (json_int_t)unknown);
    if (data != NULL && in != NULL)
        json_object_set_new(data, "inbound",
                            json_pack("{s:I,s:I,s:I,s:I}", "stored", (json_int_t)in[IN_STORED], "duplicate",
                                      (json_int_t)in[IN_DUPLICATE], "unrouted", (json_int_t)in[IN_UNROUTED],
                                      "ignored", (json_int_t)in[IN_IGNORED]));
    og_api_reply(req, 200, "ok", data, NULL, 0);
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
        long long in[IN__COUNT] = {0};
        const PGresult *ir = o->inbound_stmt >= 0 ? op->res[o->inbound_stmt] : NULL;
        in[IN_STORED] = cell(ir, OG_C_INBOUND_STORE_STORED);
        in[IN_DUPLICATE] = cell(ir, OG_C_INBOUND_STORE_DUPLICATE);
        in[IN_UNROUTED] = cell(ir, OG_C_INBOUND_STORE_UNROUTED);
        in[IN_IGNORED] = o->ignored;
        for (int k = IN_STORED; k <= IN_IGNORED; k++)
            count_in(o->gw, o->ch, (in_outcome_t)k, (uint64_t)in[k]);
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
        if (o->twiml)
            og_http_respond(o->req, 200, NULL, 0, "text/xml", twiml_empty, sizeof(twiml_empty) - 1);
        else
            answer_counts(o->req, applied, duplicate, unknown,
                          o->inbound_stmt >= 0 || o->ignored > 0 ? in : NULL);
    } else {
        og_answer_db_failure(o->req, &o->gw->w->log, op, st, "recording statuses failed",
                             "database unavailable: nothing was recorded");
    }
    og_db_op_clear(op);
    free(o->in_json);
    free(o->tpl_json);
    json_decref(o->templates);
    free(o->json);
    free(o);
}

static void body_clear(wh_body_t *b)
{
    json_decref(b->statuses);
    json_decref(b->templates);
    json_decref(b->inbound);
}

/* Records what a verified body holds in one write, answering after COMMIT: its statuses, Meta's
 * template status changes, its inbound messages (one statement each for the whole POST). Takes
 * the body's arrays. */
static void record(og_gw_t *gw, og_http_req_t *req, og_channel_t ch, wh_body_t *b)
{
    if (json_array_size(b->statuses) == 0 && json_array_size(b->templates) == 0 &&
        json_array_size(b->inbound) == 0) {
        long long in[IN__COUNT] = {[IN_IGNORED] = b->ignored};
        count_in(gw, ch, IN_IGNORED, (uint64_t)b->ignored);
        body_clear(b);
        if (b->twiml)
            og_http_respond(req, 200, NULL, 0, "text/xml", twiml_empty, sizeof(twiml_empty) - 1);
        else
            answer_counts(req, 0, 0, 0, b->ignored > 0 ? in : NULL);
        return;
    }
    wh_op_t *o = gw->db != NULL ? calloc(1, sizeof(*o)) : NULL;
    bool ok = o != NULL;
    if (ok && json_array_size(b->statuses) > 0)
        ok = (o->json = json_dumps(b->statuses, JSON_COMPACT)) != NULL;
    int n = 0;
    if (ok) {
        o->status_stmt = -1;
        o->inbound_stmt = -1;
        if (o->json != NULL) {
            o->status_stmt = n;
            og_q_status_apply(&o->op.stmts[n++], &(og_q_status_apply_t){.statuses = o->json});
            /* In the same transaction: what the statuses say about numbers without WhatsApp. */
            n += og_nowa_statuses_stmt(gw->nowa, &o->op, n, b->statuses, o->json);
        }
        if (json_array_size(b->templates) > 0) {
            ok = (o->tpl_json = json_dumps(b->templates, JSON_COMPACT)) != NULL;
            if (ok)
                og_q_tpl_set_status(&o->op.stmts[n++], &(og_q_tpl_set_status_t){.changes = o->tpl_json});
            o->templates = json_incref(b->templates);
        }
        if (ok && json_array_size(b->inbound) > 0) {
            ok = (o->in_json = json_dumps(b->inbound, JSON_COMPACT)) != NULL;
            if (ok) {
                o->inbound_stmt = n;
                og_q_inbound_store(&o->op.stmts[n++], &(og_q_inbound_store_t){.items = o->in_json});
            }
        }
    }
    body_clear(b);
    if (!ok) {
        if (o != NULL) {
            free(o->in_json);
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
    o->ignored = b->ignored;
    o->twiml = b->twiml;
    o->op.nstmts = n;
    o->op.write = true;
    o->op.done = recorded;
    og_db_submit(gw->db, &o->op);
}

/* Records a parsed body, or answers the parser's refusal (`err`) when it has no statuses. */
static void record_parsed(og_gw_t *gw, og_http_req_t *req, og_channel_t ch, wh_body_t *b, const og_err_t *err)
{
    if (b->statuses == NULL) {
        count(gw, ch, CB_BAD_BODY, 1);
        og_api_send_error(req, err, NULL, NULL, NULL, 0);
        return;
    }
    record(gw, req, ch, b);
}

/* Parses the verified body with `parse` and records what it holds. */
static void parse_and_record(og_gw_t *gw, og_http_req_t *req, og_channel_t ch,
                             json_t *(*parse)(const char *, size_t, double, og_err_t *))
{
    og_err_t err = {0};
    wh_body_t b = {.statuses = parse(req->body, req->body_len, now_s(), &err)};
    record_parsed(gw, req, ch, &b, &err);
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
    wh_body_t b = {0};
    b.statuses = og_webhook_parse_meta_all(req->body, req->body_len, now_s(), &b.templates, &b.inbound, &err);
    record_parsed(gw, req, OG_CH_WHATSAPP_META, &b, &err);
}

/* ---- whose account signed it (API.md §23) ------------------------------------------------
 *
 * Twilio and WAHA requests may come from the configured account or from a tenant's own one
 * (settings: channels.sms.account, channels.whatsapp_qr.server). The request names its account:
 * Twilio's form carries AccountSid, WAHA's event its session. The accounts that key names are
 * read once per OMNIGATE_AUTH_TTL_MS per worker (providers/accounts.h; a miss is one indexed
 * read, sql/queries/accounts.sql) and the request is verified with their secrets:
 *
 *  - Twilio: an AccountSid of tenants' accounts is verified with their auth tokens only, never
 *    the configured one; any other AccountSid (or none) with OMNIGATE_SMS_AUTH_TOKEN, unless
 *    OMNIGATE_SMS_ACCOUNT_SID is set and is another account (401, as a bad signature).
 *  - WAHA: session names are not unique across servers, so the configured secret is tried
 *    first (no lookup); then the webhookSecret of each tenant whose own server has a number on
 *    that session.
 *
 * A request nothing could verify is 401, or 404 when no secret at all could have (no configured
 * one, no tenant account for its key: the route does not exist for it, API.md §14). Inbound
 * messages that tenants' accounts signed carry those tenants' ids ("accounts"), so that they go
 * to those tenants only (sql/026_own_accounts.sql); statuses go by message id as before. */

/* Who signed a verified request: the configured account (n 0), or tenants' own accounts. */
typedef struct wh_signer {
    int n;
    char tenant[OG_ACCOUNTS_PER_KEY][37];
} wh_signer_t;

typedef struct wh_check wh_check_t;

struct wh_check {
    og_db_op_t op; /* the accounts' read on a cache miss */
    og_gw_t *gw;
    og_http_req_t *req;
    og_account_kind_t kind;
    og_channel_t ch;
    char key[OG_ACCOUNTS_KEY_MAX + 1]; /* the account's key as the request names it, "" if none */
    /* Twilio: the request names an account other than OMNIGATE_SMS_ACCOUNT_SID (any when that is
     * unset), so that a tenant's may be it. */
    bool other;
    char *url;          /* Twilio: the URL the signature covers */
    const char *header; /* the signature's header, for the 401 */
    void (*refused)(og_gw_t *gw);
    void (*verified)(og_gw_t *gw, og_http_req_t *req, const wh_signer_t *by);
};

static void check_free(wh_check_t *c)
{
    og_db_op_clear(&c->op);
    free(c->url);
    free(c);
}

/* 401 for a request no secret verified (counted by c->refused). */
static void refuse(wh_check_t *c)
{
    c->refused(c->gw);
    og_err_t err;
    og_err_fail(&err, OG_E_INVALID_SIGNATURE, c->header, "missing or wrong %s", c->header);
    og_http_header_t h = {"WWW-Authenticate", 16, "HMAC realm=\"webhooks\"", 21};
    og_api_send_error(c->req, &err, NULL, NULL, &h, 1);
}

/* Whether `secret` signed `req` by the algorithm of `kind`'s provider (Twilio's covers `url`). */
static bool signed_with(og_account_kind_t kind, og_http_req_t *req, const char *url, const char *secret)
{
    size_t n, an;
    if (secret == NULL || secret[0] == '\0')
        return false;
    if (kind == OG_ACCOUNT_TWILIO) {
        const char *sig = og_http_req_header(req, "x-twilio-signature", &n);
        return sig != NULL && og_webhook_twilio_signed(secret, url, req->body, req->body_len, sig, n);
    }
    const char *sig = og_http_req_header(req, "x-webhook-hmac", &n);
    const char *alg = og_http_req_header(req, "x-webhook-hmac-algorithm", &an);
    return sig != NULL && (alg == NULL || (an == 6 && strncasecmp(alg, "sha512", 6) == 0)) &&
           og_hmac_check_hex(OG_HMAC_SHA512, secret, req->body, req->body_len, sig, n);
}

/* Goes on with a verified request (`by` signed it), or answers 401/404; frees c. `e`: the
 * tenants' accounts the request's key names (NULL when it names none a tenant may have). */
static void decide(wh_check_t *c, const og_accounts_entry_t *e)
{
    const og_config_t *cfg = c->gw->w->cfg;
    wh_signer_t by = {0};
    for (int i = 0; e != NULL && i < e->n; i++)
        if (signed_with(c->kind, c->req, c->url, e->acct[i].secret))
            memcpy(by.tenant[by.n++], e->acct[i].tenant_id, sizeof(by.tenant[0]));
    bool tenants = e != NULL && e->n > 0;
    bool verified = by.n > 0;
    bool configured_key;
    if (c->kind == OG_ACCOUNT_TWILIO) {
        configured_key = configured(cfg->sms_auth_token);
        /* A tenant's AccountSid is never verified with the configured token; another account
         * than the configured one (when it is set) has no token here. */
        if (!verified && !tenants && configured_key && !(c->other && configured(cfg->sms_account_sid)))
            verified = signed_with(c->kind, c->req, c->url, cfg->sms_auth_token);
    } else {
        configured_key = configured(cfg->qr_webhook_secret); /* tried before the lookup */
    }
    if (verified)
        c->verified(c->gw, c->req, &by);
    else if (!configured_key && !tenants)
        not_configured(c->req);
    else
        refuse(c);
    check_free(c);
}

/* The accounts of c's key came back from the database: cached (secrets opened), then decided. */
static void looked_up(og_db_op_t *op, og_db_status_t st)
{
    wh_check_t *c = container_of(op, wh_check_t, op);
    og_gw_t *gw = c->gw;
    if (st != OG_DB_OK) {
        og_answer_db_failure(c->req, &gw->w->log, op, st, "provider account lookup failed",
                             "database unavailable: nothing was recorded");
        check_free(c);
        return;
    }
    const PGresult *r = op->res[0];
    og_seal_key_t key; /* the settings' key: the secrets are sealed in the settings (settings.h) */
    og_settings_key(&key, gw->w->cfg->secret);
    og_accounts_entry_t *e = og_accounts_put(gw->prov.accounts, c->kind, c->key, uv_now(&gw->w->loop));
    bool ok = e != NULL;
    /* account_waha's columns are account_twilio's: tenant_id, secret. */
    for (int i = 0; ok && r != NULL && i < PQntuples(r); i++) {
        const char *tenant = PQgetvalue(r, i, OG_C_ACCOUNT_TWILIO_TENANT_ID);
        const char *stored = PQgetisnull(r, i, OG_C_ACCOUNT_TWILIO_SECRET)
                                 ? NULL
                                 : PQgetvalue(r, i, OG_C_ACCOUNT_TWILIO_SECRET);
        if (!og_seal_is_sealed(stored)) {
            ok = og_accounts_add(e, tenant, stored); /* clear: stored before sealing (persistence.md) */
            continue;
        }
        char *plain = NULL;
        size_t len = 0;
        /* Sealed with the settings' key and the tenant's id, as every secret of the settings. */
        bool opened = og_seal_open(&key, tenant, stored, strlen(stored), &plain, &len) == OG_SEAL_OK &&
                      strlen(plain) == len;
        ok = og_accounts_add(e, tenant, opened ? plain : NULL);
        og_seal_free_plain(plain, len);
        if (!opened && og_log_enabled(&gw->w->log, OG_LOG_WARN))
            og_log(&gw->w->log, OG_LOG_WARN,
                   "a tenant's own provider account secret does not open with this OMNIGATE_SECRET: "
                   "its webhooks are refused until it is set again",
                   "\"tenantId\":\"%s\",\"provider\":\"%s\"", tenant, og_channel_provider(c->ch));
    }
    og_seal_key_clear(&key);
    og_db_op_clear(op);
    if (!ok) {
        og_accounts_forget(gw->prov.accounts, c->kind, c->key);
        og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        check_free(c);
        return;
    }
    decide(c, e);
}

/* Decides c with the accounts of its key: from this worker's cache, else read (looked_up). */
static void lookup(wh_check_t *c)
{
    og_gw_t *gw = c->gw;
    const og_accounts_entry_t *e = og_accounts_get(gw->prov.accounts, c->kind, c->key, uv_now(&gw->w->loop));
    if (e != NULL || gw->db == NULL) {
        decide(c, e); /* without a database no tenant has an account here */
        return;
    }
    og_db_op_t *op = &c->op;
    op->nstmts = 1;
    if (c->kind == OG_ACCOUNT_TWILIO)
        og_q_account_twilio(&op->stmts[0], &(og_q_account_twilio_t){.account_sid = c->key});
    else
        og_q_account_waha(&op->stmts[0], &(og_q_account_waha_t){.session = c->key});
    op->write = false;
    op->done = looked_up;
    og_db_submit(gw->db, op);
}

/* A new check of `req`, or NULL after answering 503. */
static wh_check_t *check_new(og_gw_t *gw, og_http_req_t *req, og_account_kind_t kind, const char *header,
                             void (*refused)(og_gw_t *gw),
                             void (*verified)(og_gw_t *gw, og_http_req_t *req, const wh_signer_t *by))
{
    wh_check_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    c->gw = gw;
    c->req = req;
    c->kind = kind;
    c->ch = kind == OG_ACCOUNT_TWILIO ? OG_CH_SMS : OG_CH_WHATSAPP_QR;
    c->header = header;
    c->refused = refused;
    c->verified = verified;
    return c;
}

/* Marks each inbound message of a request tenants' accounts signed with their ids, which
 * og_inbound_store routes it among (sql/026_own_accounts.sql). False when out of memory. */
static bool confine(json_t *inbound, const wh_signer_t *by)
{
    if (by->n == 0 || json_array_size(inbound) == 0)
        return true;
    size_t i;
    json_t *item;
    json_array_foreach(inbound, i, item)
    {
        json_t *ids = json_array();
        for (int k = 0; ids != NULL && k < by->n; k++)
            if (json_array_append_new(ids, json_string(by->tenant[k])) != 0) {
                json_decref(ids);
                ids = NULL;
            }
        if (ids == NULL || json_object_set_new(item, "accounts", ids) != 0)
            return false;
    }
    return true;
}

/* ---- WAHA ------------------------------------------------------------------------------------ */

static void waha_refused(og_gw_t *gw)
{
    count(gw, OG_CH_WHATSAPP_QR, CB_BAD_SIGNATURE, 1);
}

/* A session.status event (API.md §23, qr/sessions.h) recorded: {"applied": 1} when a tenant has
 * the session and the event is not older than the last one applied, else {"unknown": 1}. */
typedef struct qr_event {
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    char session[OG_QR_SESSION_NAME_MAX + 1];
    char status[16];
    char number[24];
    char at_ms[24];
    char accounts[OG_ACCOUNTS_PER_KEY * 38 + 3]; /* a uuid[] literal, "" for the configured server */
} qr_event_t;

static void qr_event_done(og_db_op_t *op, og_db_status_t st)
{
    qr_event_t *e = (qr_event_t *)op;
    if (st == OG_DB_OK) {
        bool applied = !PQgetisnull(op->res[0], 0, OG_C_QR_SESSION_EVENT_SESSION);
        count(e->gw, OG_CH_WHATSAPP_QR, applied ? CB_APPLIED : CB_UNKNOWN_MESSAGE, 1);
        answer_counts(e->req, applied ? 1 : 0, 0, applied ? 0 : 1, NULL);
    } else {
        og_answer_db_failure(e->req, &e->gw->w->log, op, st, "recording a session status failed",
                             "database unavailable: nothing was recorded");
    }
    og_db_op_clear(op);
    free(e);
}

/* A session.status event (og_webhook_parse_waha_all's *session, taken) recorded for the tenant
 * whose QR number uses the session, among the tenants `by` names (their own server's secret
 * verified it) or those on the configured server; a status this gateway does not know is kept
 * nowhere. */
static void record_session_status(og_gw_t *gw, og_http_req_t *req, const wh_signer_t *by, json_t *ev)
{
    const char *status = json_string_value(json_object_get(ev, "status"));
    qr_event_t *e = NULL;
    if (!og_qr_status_valid(status)) {
        count(gw, OG_CH_WHATSAPP_QR, CB_UNKNOWN_MESSAGE, 1);
        answer_counts(req, 0, 0, 1, NULL);
    } else if (gw->db == NULL || (e = calloc(1, sizeof(*e))) == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, gw->db == NULL ? "no database" : "out of memory");
    } else {
        const char *number = json_string_value(json_object_get(ev, "number"));
        snprintf(e->session, sizeof(e->session), "%s", json_string_value(json_object_get(ev, "session")));
        snprintf(e->status, sizeof(e->status), "%s", status);
        snprintf(e->number, sizeof(e->number), "%s", number != NULL ? number : "");
        snprintf(e->at_ms, sizeof(e->at_ms), "%.0f", json_number_value(json_object_get(ev, "atMs")));
        if (by->n > 0) {
            size_t len = 0;
            e->accounts[len++] = '{';
            for (int k = 0; k < by->n; k++)
                len += (size_t)snprintf(e->accounts + len, sizeof(e->accounts) - len, "%s%s", k ? "," : "",
                                        by->tenant[k]);
            snprintf(e->accounts + len, sizeof(e->accounts) - len, "}");
        }
        e->gw = gw;
        e->req = req;
        og_q_qr_session_event(&e->op.stmts[0],
                              &(og_q_qr_session_event_t){.session = e->session,
                                                         .status = e->status,
                                                         .number = e->number[0] ? e->number : NULL,
                                                         .at_ms = e->at_ms,
                                                         .accounts = e->accounts[0] ? e->accounts : NULL});
        e->op.nstmts = 1;
        e->op.write = true;
        e->op.done = qr_event_done;
        og_db_submit(gw->db, &e->op);
    }
    json_decref(ev);
}

static void waha_verified(og_gw_t *gw, og_http_req_t *req, const wh_signer_t *by)
{
    og_err_t err = {0};
    wh_body_t b = {0};
    json_t *session = NULL;
    b.statuses =
        og_webhook_parse_waha_all(req->body, req->body_len, now_s(), &b.inbound, &b.ignored, &session, &err);
    if (session != NULL) { /* one event a POST: a session.status holds nothing else */
        body_clear(&b);
        record_session_status(gw, req, by, session);
        return;
    }
    if (b.statuses != NULL && !confine(b.inbound, by)) {
        body_clear(&b);
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    record_parsed(gw, req, OG_CH_WHATSAPP_QR, &b, &err);
}

/* The event's session (the key of a tenant's own server), or false: not JSON, no session, or
 * one no settings can hold. */
static bool waha_session(const og_http_req_t *req, char out[OG_ACCOUNTS_KEY_MAX + 1])
{
    json_t *root = json_loadb(req->body, req->body_len, 0, NULL);
    const char *s = json_string_value(json_object_get(root, "session"));
    bool ok = s != NULL && s[0] != '\0' && strlen(s) <= OG_ACCOUNTS_KEY_MAX;
    if (ok)
        strcpy(out, s);
    json_decref(root);
    return ok;
}

void og_webhook_waha(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    /* The configured server first: most events are its own, and need no lookup. */
    if (signed_with(OG_ACCOUNT_WAHA, req, NULL, gw->w->cfg->qr_webhook_secret)) {
        static const wh_signer_t configured_account = {0};
        waha_verified(gw, req, &configured_account);
        return;
    }
    wh_check_t *c = check_new(gw, req, OG_ACCOUNT_WAHA, "X-Webhook-Hmac", waha_refused, waha_verified);
    if (c == NULL)
        return;
    if (!waha_session(req, c->key)) {
        decide(c, NULL);
        return;
    }
    lookup(c);
}

/* ---- Twilio ---------------------------------------------------------------------------------- */

static void twilio_status_refused(og_gw_t *gw)
{
    count(gw, OG_CH_SMS, CB_BAD_SIGNATURE, 1);
}

static void twilio_inbound_refused(og_gw_t *gw)
{
    count_in(gw, OG_CH_SMS, IN_BAD_SIGNATURE, 1);
}

static void twilio_status_verified(og_gw_t *gw, og_http_req_t *req, const wh_signer_t *by)
{
    (void)by; /* statuses go by message id, whoever signed them */
    parse_and_record(gw, req, OG_CH_SMS, og_webhook_parse_twilio);
}

static void twilio_inbound_verified(og_gw_t *gw, og_http_req_t *req, const wh_signer_t *by)
{
    og_err_t err = {0};
    wh_body_t b = {.twiml = true};
    b.inbound = og_webhook_parse_twilio_inbound(req->body, req->body_len, now_s(), &b.ignored, &err);
    if (b.inbound == NULL) {
        count_in(gw, OG_CH_SMS, IN_BAD_BODY, 1);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    if (!confine(b.inbound, by) || (b.statuses = json_array()) == NULL) {
        json_decref(b.inbound);
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    record(gw, req, OG_CH_SMS, &b);
}

/* A Twilio POST (§10: X-Twilio-Signature over OMNIGATE_PUBLIC_URL + the path and query it
 * called), checked with the account its AccountSid names and then handed to `verified`. */
static void twilio_check(og_gw_t *gw, og_http_req_t *req, void (*refused)(og_gw_t *gw),
                         void (*verified)(og_gw_t *gw, og_http_req_t *req, const wh_signer_t *by))
{
    const og_config_t *cfg = gw->w->cfg;
    /* The signature covers the URL Twilio called, which only OMNIGATE_PUBLIC_URL can tell. */
    if (!configured(cfg->public_url)) {
        not_configured(req);
        return;
    }
    wh_check_t *c = check_new(gw, req, OG_ACCOUNT_TWILIO, "X-Twilio-Signature", refused, verified);
    if (c == NULL)
        return;
    size_t base = strlen(cfg->public_url);
    while (base > 0 && cfg->public_url[base - 1] == '/')
        base--;
    if (asprintf(&c->url, "%.*s%.*s%s%.*s", (int)base, cfg->public_url, (int)req->path_len, req->path,
                 req->query != NULL ? "?" : "", (int)req->query_len,
                 req->query != NULL ? req->query : "") < 0) {
        c->url = NULL;
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        check_free(c);
        return;
    }
    form_t form;
    const char *sid = form_parse(req->body, req->body_len, &form) ? form_get(&form, "AccountSid") : NULL;
    c->other = sid != NULL && !(configured(cfg->sms_account_sid) && strcmp(sid, cfg->sms_account_sid) == 0);
    bool keyed = c->other && sid[0] != '\0' && strlen(sid) <= OG_ACCOUNTS_KEY_MAX;
    if (keyed)
        strcpy(c->key, sid);
    free(form.buf);
    if (keyed)
        lookup(c); /* an account a tenant may have */
    else
        decide(c, NULL);
}

void og_webhook_twilio(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    twilio_check(og_gw(ctx), req, twilio_status_refused, twilio_status_verified);
}

void og_webhook_twilio_inbound(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    twilio_check(og_gw(ctx), req, twilio_inbound_refused, twilio_inbound_verified);
}
