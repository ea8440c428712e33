/*
 * POST /api/omni/send (API.md §2, §6): validation against the tenant's settings, the pending
 * message row committed before any provider is called, the attempts run by the engine
 * (fallback chain or all at once) through the provider adapters, then attempts, final status,
 * the SMS record and the idempotent answer committed together, and only then the answer.
 * A client that disconnects cancels nothing: the request object lives until answered.
 */
#include <stdlib.h>
#include <string.h>

#include "omnigate/messaging/budget.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/api.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/messaging/engine.h"
#include "omnigate/messaging/send.h"
#include "omnigate/messaging/send_item.h"
#include "omnigate/app/ctx.h"
#include "omnigate/consent/consent.h"
#include "omnigate/costs/rates.h"
#include "omnigate/costs/usage.h"
#include "omnigate/messaging/idem.h"
#include "omnigate/messaging/nowa.h"
#include "omnigate/ids.h"
#include "omnigate/json.h"
#include "omnigate/jw.h"
#include "omnigate/phone.h"
#include "omnigate/providers/provider.h"
#include "omnigate/qr/sessions.h"
#include "omnigate/queue/pacing.h"
#include "omnigate/queue/queue.h"
#include "omnigate/queue/release.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/smsenc.h"
#include "omnigate/store.h"
#include "omnigate/templates/catalogue.h"
#include "omnigate/templates/render.h"
#include "omnigate/util.h"

#define SMS_MAX_SEGMENTS 10

OG_M_SCALAR(og_send_metrics_block, "omnigate_not_on_whatsapp_skips_total", OG_M_COUNTER,
            "Sends that skipped the WhatsApp channels because the number is remembered as not on WhatsApp.");

typedef struct send_ctx {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    og_consent_wait_t consent_wait;
    og_engine_t engine;
    /* The database work of each step in turn: auth lookup, nowa check, idem claim, pending insert,
     * then (another) completion. Not held while the providers are called: most of a send's life
     * at a slow provider, when it would be 1.5 KiB of every send in flight. */
    og_db_op_t *op;

    char reference[32];
    char to[20];
    char *text;
    bool all;
    const char *fallback_on; /* "delivered" or "read": a delivery-based fallback (API.md §11) */
    long long fallback_after;
    og_channel_t ch[OG_ENGINE_MAX];
    int nch;
    /* Channels asked for but not tried, in order, with why (API.md §2 "skipped"). */
    struct {
        og_channel_t ch;
        const char *reason; /* static: channel_disabled, not_on_whatsapp */
    } skip[OG_CH__COUNT];
    int nskip;
    char wa_from[20];
    char sender[20];
    og_sms_info_t sms;
    /* What the WhatsApp channels' providers need beyond the number (the tenant's settings
     * hold the strings); the attempt's parameters are made from these when it starts. */
    const char *qr_session;
    const char *meta_phone_number_id;
    const char *meta_access_token;
    const char *meta_waba_id; /* the Meta number's WABA, or NULL */

    /* A template send (API.md §18), or a free text that outsideWindow wraps in the tenant's
     * windowTemplate: what Meta gets instead of the text, and the template it names. */
    json_t *tpl_req;  /* the request's `template` object, until it is checked */
    bool wrap;        /* outsideWindow: template, for a free text on Meta */
    og_tpl_out_t tpl; /* tpl.meta: Meta's template object; tpl.rendered: its body */
    char *tpl_name;   /* the template sent on Meta (the request's or windowTemplate) */
    char tpl_language[16];
    og_rate_category_t tpl_category; /* its category, which its price may depend on (API.md §22) */
    /* Set (code not NULL) when the Meta attempt cannot be made (windowTemplate unusable): its
     * message is the attempt's not_configured reason. */
    og_err_t meta_err;
    char *tpl_change; /* the template's new status after Meta refused it for the template (tpl_set_status) */
    char *template_text;              /* messages.template (sql/016): what later steps and the logs read */
    bool token_sealed[OG_ENGINE_MAX]; /* the channel's access token did not open (settings.h) */
    /* Allocated as each attempt starts (most sends make one): NULL when never started, or
     * when out of memory (its result is then oom_result). */
    og_attempt_t *att[OG_ENGINE_MAX];
    uint64_t att_at_ms[OG_ENGINE_MAX];
    /* What each accepted attempt cost (API.md §22), priced once the attempts ended (priced). */
    og_cost_t cost[OG_ENGINE_MAX];
    og_cost_t sms_equiv[OG_ENGINE_MAX]; /* a WhatsApp one's text by SMS (savings) */
    int priced;
    char cost_s[OG_COST_PARAM]; /* the sms attempt's, as its SMS record's parameter */
    /* The message's day as usage counts it (its insert's answer), and what its completion adds
     * to the usage totals: a row per attempt (costs/usage.h). */
    char day[OG_USAGE_DAY_TEXT];
    og_db_tally_row_t usage[OG_ENGINE_MAX];

    og_idem_t idem;

    /* A queued send (API.md §19): answered 202 once its row and entries are committed, delivered
     * by the release (queue/release.h). */
    bool queued;
    bool scheduled;       /* sendAt in the future */
    bool send_at_given;   /* the answer shows sendAt */
    const char *priority; /* static: high, normal, low */
    int64_t due_ms, valid_until_ms;
    char due_s[24], valid_until_s[24], validity_s[12];
    char *queue_text; /* queue_insert's queue: status, senders, rates */

    /* SQL parameters that must outlive the op */
    char channels_lit[64];
    char *skipped_text;
    char *attempts_text;
    char *response_text;
    size_t response_len;
    int response_status;
    char response_status_s[4];
    char status_s[8];
    char segments_s[8];
    char fallback_after_s[24];
    bool nowa_in_insert; /* the pending insert checks the number (msg_insert_unless_nowa) */
    bool chain_goes_on;  /* a fallback step follows the completion write */
    int schedule_stmt;   /* its statement in the completion write */
    char *sms_error_text;
    const char *sms_status;
    const char *sms_provider_id;
} send_ctx_t;

/* The outcome of an attempt that could not be made for want of memory. */
static const og_attempt_result_t oom_result = {
    .error_code = OG_ERR_PROVIDER_ERROR,
    .error_message = "out of memory: the attempt was not made",
};

/* Attempt k's result (k < started). */
static const og_attempt_result_t *result_of(const send_ctx_t *c, int k)
{
    return c->att[k] != NULL ? &c->att[k]->result : &oom_result;
}

static void ctx_free(send_ctx_t *c)
{
    og_db_op_free(c->op);
    og_tenant_release(c->auth.tenant);
    free(c->text);
    free(c->skipped_text);
    free(c->attempts_text);
    for (int k = 0; k < OG_ENGINE_MAX; k++)
        free(c->att[k]);
    free(c->response_text);
    free(c->sms_error_text);
    json_decref(c->tpl_req);
    og_tpl_out_clear(&c->tpl);
    free(c->tpl_name);
    free(c->template_text);
    free(c->tpl_change);
    free(c->queue_text);
    og_idem_clear(&c->idem);
    free(c);
}

/* The fields of a send's body (API.md §2, §11, §18, §19). */
const char *const og_send_fields[] = {OG_SEND_FIELDS, NULL};

/* ---- validation ------------------------------------------------------------------------- */

/* fallbackOn and fallbackAfterSeconds (API.md §11): a fallback on what the recipient got, only
 * in fallback mode; the seconds only with it (else they would be silently ignored). */
static bool read_fallback(send_ctx_t *c, const char *on, long long after, og_err_t *err)
{
    if (strcmp(on, "accepted") != 0 && strcmp(on, "delivered") != 0 && strcmp(on, "read") != 0)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "fallbackOn",
                           "fallbackOn must be accepted, delivered or read");
    bool on_delivery = strcmp(on, "accepted") != 0;
    if (on_delivery && c->all)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "fallbackOn",
                           "fallbackOn %s needs deliveryMode fallback", on);
    if (after >= 0 && !on_delivery)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "fallbackAfterSeconds",
                           "fallbackAfterSeconds needs fallbackOn delivered or read");
    c->fallback_on = on_delivery ? (strcmp(on, "read") == 0 ? "read" : "delivered") : NULL;
    c->fallback_after = after >= 0 ? after : 60;
    og_int_str(c->fallback_after_s, c->fallback_after);
    return true;
}

/* queue, sendAt, validitySeconds and priority (API.md §19): a queued send's due time, validity
 * and order. sendAt implies queue; the other two need it (else they would be silently ignored). */
static bool read_queue(send_ctx_t *c, json_t *body, og_err_t *err)
{
    bool queue = false;
    const char *send_at = NULL, *priority = "normal";
    long long validity = -1;
    json_t *q = json_object_get(body, "queue");
    if (!og_json_get_bool(body, "queue", false, &queue, err) ||
        !og_json_get_string(body, "sendAt", false, &send_at, err) ||
        !og_json_get_int(body, "validitySeconds", false, OG_QUEUE_VALIDITY_MIN_S, OG_QUEUE_VALIDITY_MAX_S,
                         &validity, err) ||
        !og_json_get_string(body, "priority", false, &priority, err))
        return false;
    if (send_at != NULL && q != NULL && !queue)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "queue",
                           "sendAt needs queue true (or no queue field)");
    c->queued = queue || send_at != NULL;
    if (!c->queued) {
        if (validity >= 0)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, "validitySeconds",
                               "validitySeconds needs queue true or sendAt");
        if (json_object_get(body, "priority") != NULL)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, "priority",
                               "priority needs queue true or sendAt");
        return true;
    }
    if (strcmp(priority, "high") != 0 && strcmp(priority, "normal") != 0 && strcmp(priority, "low") != 0)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "priority", "priority must be high, normal or low");
    c->priority = priority[0] == 'h' ? "high" : priority[0] == 'n' ? "normal" : "low";
    int64_t now = (int64_t)og_ids_now_ms();
    c->due_ms = now;
    if (send_at != NULL) {
        if (!og_time_parse_rfc3339(send_at, &c->due_ms))
            return og_err_fail(err, OG_E_VALIDATION_FAILED, "sendAt", "sendAt must be an RFC 3339 time");
        if (c->due_ms < now - OG_QUEUE_SEND_AT_PAST_MS || c->due_ms > now + OG_QUEUE_SEND_AT_AHEAD_MS)
            return og_err_fail(err, OG_E_SEND_AT_OUT_OF_RANGE, "sendAt",
                               "sendAt must be at most 60 s in the past and at most 35 days ahead");
        c->send_at_given = true;
        c->scheduled = c->due_ms > now;
    }
    if (validity < 0)
        validity = c->gw->w->cfg->queue_validity_s;
    c->valid_until_ms = c->due_ms + validity * 1000;
    og_int_str(c->due_s, c->due_ms);
    og_int_str(c->valid_until_s, c->valid_until_ms);
    return true;
}

/* Reads the fields of the body and checks their form; keeps to and text in `c`, and hands back
 * the requested whatsappFrom and sender (borrowed from `body`, NULL when absent). */
static bool read_fields(send_ctx_t *c, json_t *body, const char **wa_from, const char **sender, og_err_t *err)
{
    const char *to = NULL, *text = NULL, *mode = "fallback", *fallback_on = "accepted";
    long long after = -1;
    json_t *tpl = json_object_get(body, "template");
    if (tpl != NULL && !og_tpl_request_valid(tpl, err))
        return false;
    if (!og_json_get_string(body, "to", true, &to, err) ||
        !og_json_get_string(body, "text", tpl == NULL, &text, err) ||
        !og_json_get_string(body, "deliveryMode", false, &mode, err) ||
        !og_json_get_string(body, "whatsappFrom", false, wa_from, err) ||
        !og_json_get_string(body, "sender", false, sender, err) ||
        !og_json_get_string(body, "fallbackOn", false, &fallback_on, err) ||
        !og_json_get_int(body, "fallbackAfterSeconds", false, 10, 86400, &after, err))
        return false;
    if (!og_phone_e164_valid(to))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "to",
                           "to must be an E.164 number: + then 8-15 digits, the first 1-9");
    size_t nchars = 0;
    if (text != NULL && !og_text_validate(text, strlen(text), &nchars))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "text",
                           "text must be 1-4096 characters of valid UTF-8, not only whitespace");
    if (strcmp(mode, "fallback") != 0 && strcmp(mode, "all") != 0)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "deliveryMode",
                           "deliveryMode must be fallback or all");
    if (*wa_from != NULL && !og_phone_wa_from_valid(*wa_from))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "whatsappFrom",
                           "whatsappFrom must be 8-15 digits, no +");
    if (*sender != NULL && !og_phone_sender_valid(*sender))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "sender",
                           "sender must be 1-11 letters, digits or spaces, or a number of up to 15 digits");
    c->all = strcmp(mode, "all") == 0;
    if (!read_fallback(c, fallback_on, after, err) || !read_queue(c, body, err))
        return false;
    snprintf(c->to, sizeof(c->to), "%s", to);
    c->tpl_req = json_incref(tpl);
    /* With a template and no text, the text is the template's body, known once it is found. */
    if (text != NULL && (c->text = strdup(text)) == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    return true;
}

static void skip(send_ctx_t *c, og_channel_t ch, const char *reason)
{
    c->skip[c->nskip].ch = ch;
    c->skip[c->nskip++].reason = reason;
}

/* The "skipped" array of the answer and the message row. */
static void write_skipped(const send_ctx_t *c, og_jw_t *w)
{
    og_jw_array(w);
    for (int i = 0; i < c->nskip; i++) {
        og_jw_object(w);
        og_jw_kstring(w, "channel", og_channel_name(c->skip[i].ch));
        og_jw_kstring(w, "reason", c->skip[i].reason);
        og_jw_object_end(w);
    }
    og_jw_array_end(w);
}

/* Chooses the channels to try: the requested ones (else the tenant's defaults) that the tenant
 * has enabled, in order, into c->ch; the others into c->skipped. */
static bool choose_channels(send_ctx_t *c, json_t *body, og_err_t *err)
{
    json_t *settings = c->auth.tenant->settings;
    json_t *channels = json_object_get(body, "channels");
    og_channel_t wanted[OG_CH__COUNT];
    int nwanted = 0;
    if (channels == NULL) {
        const char *defaults[OG_SETTINGS_CHANNELS];
        size_t n = og_settings_default_channels(settings, defaults);
        for (size_t i = 0; i < n; i++)
            if (og_channel_parse(defaults[i], &wanted[nwanted]))
                nwanted++;
    } else {
        if (!json_is_array(channels) || json_array_size(channels) == 0 ||
            json_array_size(channels) > OG_CH__COUNT)
            return og_err_fail(err, OG_E_VALIDATION_FAILED, "channels",
                               "channels must be a non-empty array of whatsapp_qr, whatsapp_meta, sms");
        size_t i;
        json_t *v;
        json_array_foreach(channels, i, v)
        {
            og_channel_t ch;
            if (!json_is_string(v) || !og_channel_parse(json_string_value(v), &ch))
                return og_err_fail(err, OG_E_VALIDATION_FAILED, "channels",
                                   "channels[%zu] must be one of whatsapp_qr, whatsapp_meta, sms", i);
            for (int k = 0; k < nwanted; k++)
                if (wanted[k] == ch)
                    return og_err_fail(err, OG_E_VALIDATION_FAILED, "channels", "channels must be distinct");
            wanted[nwanted++] = ch;
        }
    }
    for (int i = 0; i < nwanted; i++) {
        if (og_settings_channel_enabled(settings, og_channel_name(wanted[i])))
            c->ch[c->nch++] = wanted[i];
        else
            skip(c, wanted[i], "channel_disabled");
    }
    if (c->nch == 0)
        return og_err_fail(err, OG_E_NO_CHANNEL_AVAILABLE, "channels",
                           "none of the requested channels is enabled for this tenant");
    return true;
}

/* Resolves, for each channel to try, the number or sender id it sends from (the requested one,
 * else the tenant's default), and keeps what its provider needs from the tenant's settings. */
static bool resolve_senders(send_ctx_t *c, const char *wa_from, const char *sender, og_err_t *err)
{
    json_t *settings = c->auth.tenant->settings;
    for (int i = 0; i < c->nch; i++) {
        if (c->ch[i] == OG_CH_SMS) {
            if (!og_settings_sms_sender(settings, sender, c->sender, sizeof(c->sender), err))
                return false;
            continue;
        }
        if (c->wa_from[0] == '\0') {
            const char *def = wa_from ? wa_from : og_settings_default_whatsapp_from(settings);
            if (def == NULL)
                return og_err_fail(err, OG_E_VALIDATION_FAILED, "whatsappFrom",
                                   "whatsappFrom is required: the tenant has no default WhatsApp number");
            snprintf(c->wa_from, sizeof(c->wa_from), "%s", def);
        }
        og_settings_wa_number_t num;
        if (!og_settings_wa_number(settings, og_channel_name(c->ch[i]), c->wa_from, &num))
            return og_err_fail(err, OG_E_WHATSAPP_FROM_NOT_REGISTERED, "whatsappFrom",
                               "%s is not registered for %s", c->wa_from, og_channel_name(c->ch[i]));
        if (c->ch[i] == OG_CH_WHATSAPP_QR) {
            c->qr_session = num.session;
        } else {
            c->meta_phone_number_id = num.phone_number_id;
            c->meta_access_token = num.access_token;
            c->meta_waba_id = num.waba_id;
        }
        c->token_sealed[i] = num.access_token_sealed;
    }
    return true;
}

/* The index of channel ch among those to try, or -1. */
static int tried(const send_ctx_t *c, og_channel_t ch)
{
    return og_channel_index(c->ch, c->nch, ch);
}

/* The sender of channel k, as pacing knows it (API.md §19): Meta's phone number id, the QR
 * session, the SMS sender id. */
static const char *pacing_sender(const send_ctx_t *c, int k)
{
    return og_pacing_sender(c->ch[k], c->sender, c->qr_session, c->meta_phone_number_id);
}

/* Drops channel ch from the plan, reporting it skipped for `reason`. */
static void drop(send_ctx_t *c, og_channel_t ch, const char *reason)
{
    int i = tried(c, ch);
    if (i < 0)
        return;
    for (int k = i; k + 1 < c->nch; k++) {
        c->ch[k] = c->ch[k + 1];
        c->token_sealed[k] = c->token_sealed[k + 1];
    }
    c->nch--;
    skip(c, ch, reason);
}

/* The WABA whose catalogue a template send is checked against: that of the Meta number it
 * sends from. Without Meta among the channels tried, the whatsappFrom (or default) number's
 * Meta registration; NULL when there is none. */
static const char *template_waba(send_ctx_t *c, const char *wa_from)
{
    if (tried(c, OG_CH_WHATSAPP_META) >= 0)
        return c->meta_waba_id;
    json_t *settings = c->auth.tenant->settings;
    const char *from = c->wa_from[0] ? c->wa_from
                       : wa_from     ? wa_from
                                     : og_settings_default_whatsapp_from(settings);
    og_settings_wa_number_t num;
    if (from == NULL || !og_settings_wa_number(settings, "whatsapp_meta", from, &num))
        return NULL;
    return num.waba_id;
}

/* What Meta gets (API.md §18): a template send needs its catalogue entry (the other channels
 * get `text` or the template's body); a free text on Meta goes as it is while the recipient's
 * window with the number is open (§21: it wrote within 24 h), else follows outsideWindow. Sets
 * c->tpl_name and c->tpl_language when an entry must be looked up. */
static bool plan_meta(send_ctx_t *c, const char *wa_from, og_err_t *err)
{
    json_t *settings = c->auth.tenant->settings;
    const char *name, *language;
    if (c->tpl_req != NULL) {
        name = json_string_value(json_object_get(c->tpl_req, "name"));
        language = json_string_value(json_object_get(c->tpl_req, "language"));
        const char *waba = template_waba(c, wa_from);
        if (waba == NULL) {
            if (c->text != NULL && tried(c, OG_CH_WHATSAPP_META) < 0) {
                json_decref(c->tpl_req); /* nothing here sends it: the text goes */
                c->tpl_req = NULL;
                return true;
            }
            return og_err_fail(err, OG_E_TEMPLATE_NOT_FOUND, "template.name",
                               "the whatsapp_meta number %s has no wabaId: its WhatsApp Business Account's "
                               "templates are unknown",
                               c->wa_from[0] ? c->wa_from
                               : wa_from     ? wa_from
                                             : "(none)");
        }
        c->meta_waba_id = waba;
    } else {
        if (tried(c, OG_CH_WHATSAPP_META) < 0)
            return true;
        og_settings_outside_window_t ow = og_settings_outside_window(settings);
        if (ow == OG_OUTSIDE_WINDOW_SEND ||
            og_consent_window_open(c->gw->consent, c->meta_phone_number_id, c->to))
            return true;
        if (ow == OG_OUTSIDE_WINDOW_SKIP) {
            drop(c, OG_CH_WHATSAPP_META, "outside_window");
            if (c->nch == 0)
                return og_err_fail(err, OG_E_NO_CHANNEL_AVAILABLE, "channels",
                                   "whatsapp_meta was skipped (outside_window: the recipient's window is not "
                                   "known to be open) and no other channel was requested");
            return true;
        }
        if (!og_settings_window_template(settings, &name, &language))
            return true; /* settings validation requires it: not reached */
        if (c->meta_waba_id == NULL) {
            og_err_fail(&c->meta_err, OG_E_TEMPLATE_NOT_FOUND, "text",
                        "the whatsapp_meta number has no wabaId, so its windowTemplate is unknown");
            return true;
        }
        c->wrap = true;
    }
    c->tpl_name = strdup(name);
    snprintf(c->tpl_language, sizeof(c->tpl_language), "%s", language);
    return c->tpl_name != NULL || og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
}

/* Drops the channels of the kinds the recipient opted out of (API.md §21), each skipped with
 * reason recipient_opted_out; 422 recipient_opted_out when none is left. */
static bool check_consent(send_ctx_t *c, og_err_t *err)
{
    unsigned out;
    if (!og_consent_opted_out(c->gw->consent, c->auth.tenant->id, c->to, &out, err))
        return false;
    if (out == 0)
        return true;
    og_channel_t planned[OG_ENGINE_MAX];
    int n = c->nch;
    memcpy(planned, c->ch, sizeof(planned));
    for (int i = 0; i < n; i++)
        if (og_consent_kind_of(planned[i]) & out)
            drop(c, planned[i], OG_E_RECIPIENT_OPTED_OUT->name); /* the skip says what a 422 would */
    if (c->nch == 0)
        return og_err_fail(err, OG_E_RECIPIENT_OPTED_OUT, "to",
                           "%s opted out of every channel this send would use", c->to);
    return true;
}

/* Drops whatsapp_qr when its number's session is known not WORKING (API.md §23: the tenant's
 * sessions as its token's lookup read them, sql/027), skipped with reason session_not_connected;
 * 422 no_channel_available when none is left. */
static bool check_qr_session(send_ctx_t *c, og_err_t *err)
{
    if (tried(c, OG_CH_WHATSAPP_QR) < 0 || !og_tenant_qr_down(c->auth.tenant, c->qr_session))
        return true;
    drop(c, OG_CH_WHATSAPP_QR, OG_QR_SKIP_NOT_CONNECTED);
    return c->nch > 0 ||
           og_err_fail(err, OG_E_NO_CHANNEL_AVAILABLE, "channels",
                       "whatsapp_qr was skipped (session_not_connected: its WAHA session is not "
                       "WORKING) and no other channel was requested");
}

/* Checks the body against the tenant's settings and fills the plan of attempts. */
static bool validate(send_ctx_t *c, json_t *body, og_err_t *err)
{
    const char *wa_from = NULL, *sender = NULL;
    return read_fields(c, body, &wa_from, &sender, err) && choose_channels(c, body, err) &&
           resolve_senders(c, wa_from, sender, err) && check_qr_session(c, err) && check_consent(c, err) &&
           plan_meta(c, wa_from, err);
}

/* messages.template of a template send or a wrapped text (sql/016): the template's name,
 * language and category (sql/023), whether it wraps a free text, and Meta's template object as
 * it is sent. */
static bool template_record(send_ctx_t *c, og_err_t *err)
{
    if (c->tpl.meta == NULL)
        return true;
    og_jw_t w;
    og_jw_init(&w, strlen(c->tpl.meta) + strlen(c->tpl_name) + 64);
    og_jw_object(&w);
    og_jw_kstring(&w, "name", c->tpl_name);
    og_jw_kstring(&w, "language", c->tpl_language);
    if (c->tpl_category != OG_CAT_NONE) /* prices a later attempt (og_queue_claim, fallback_load) */
        og_jw_kstring(&w, "category", og_rate_category_name(c->tpl_category));
    og_jw_key(&w, "wrapped");
    og_jw_bool(&w, c->wrap);
    og_jw_key(&w, "meta");
    og_jw_raw(&w, c->tpl.meta, strlen(c->tpl.meta));
    og_jw_object_end(&w);
    c->template_text = og_jw_finish(&w, NULL);
    return c->template_text != NULL || og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
}

/* The checks that need the final text (a template's body when the send gave none): the text
 * rules of §2 and, with sms among the channels, its segments. */
static bool check_text(send_ctx_t *c, og_err_t *err)
{
    size_t nchars = 0;
    if (c->text == NULL || !og_text_validate(c->text, strlen(c->text), &nchars))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "text",
                           "the template's body with its parameters must be 1-4096 characters, not only "
                           "whitespace: give text for the other channels");
    if (tried(c, OG_CH_SMS) >= 0) {
        og_sms_encode_info(c->text, strlen(c->text), &c->sms);
        if (c->sms.segments > SMS_MAX_SEGMENTS)
            return og_err_fail(err, OG_E_TEXT_TOO_LONG, "text", "text needs %d SMS segments, more than %d",
                               (int)c->sms.segments, SMS_MAX_SEGMENTS);
    }
    return true;
}

/* ---- answers ---------------------------------------------------------------------------- */

/* One attempt as the answer lists it (API.md §2), or, `for_db`, as the completion write records it
 * (msg_complete in sql/queries/messages.sql reads these names). */
static void write_attempt(og_jw_t *w, const og_attempt_result_t *r, og_channel_t ch, bool for_db, int seq,
                          uint64_t at_ms, bool content_template, const og_cost_t *cost,
                          const og_cost_t *sms_equiv)
{
    og_jw_object(w);
    og_jw_kstring(w, "channel", og_channel_name(ch));
    og_jw_kstring(w, "status", r->sent ? "sent" : "failed");
    og_jw_kint(w, for_db ? "latency_ms" : "latencyMs", (long long)(r->latency_us / 1000));
    if (for_db) {
        if (content_template)
            og_jw_kstring(w, "content", "template");
        og_jw_kint(w, "seq", seq);
        og_jw_kint(w, "attempted_at_ms", (long long)at_ms);
        if (r->sent) {
            og_jw_kstring(w, "provider_message_id", r->provider_message_id);
            if (cost->currency[0]) {
                og_jw_kint(w, "cost_micros", (long long)cost->micros);
                og_jw_kstring(w, "currency", cost->currency);
            }
            if (sms_equiv->currency[0])
                og_jw_kint(w, "sms_equiv_micros", (long long)sms_equiv->micros);
        } else {
            og_jw_kstring(w, "error_code", r->error_code);
            og_jw_kstring(w, "error_message", r->error_message);
            if (r->provider_code[0])
                og_jw_kstring(w, "provider_code", r->provider_code);
            if (r->http_status)
                og_jw_kint(w, "http_status", r->http_status);
        }
    } else {
        if (r->sent) {
            og_jw_kstring(w, "providerMessageId", r->provider_message_id);
        } else {
            og_jw_key(w, "error");
            og_provider_write_error(w, r);
        }
        og_cost_write(w, "cost", r->sent ? cost : NULL);
    }
    og_jw_object_end(w);
}

/* Prices the accepted attempts of the first `started` (once each): by the tenant's card and the
 * global card as this worker has them now, the moment the providers' answers are recorded. */
static void price(send_ctx_t *c, int started)
{
    for (; c->priced < started; c->priced++) {
        int k = c->priced;
        const og_attempt_result_t *r = result_of(c, k);
        og_rate_category_t cat =
            c->ch[k] == OG_CH_WHATSAPP_META && c->tpl.meta != NULL ? c->tpl_category : OG_CAT_NONE;
        const og_rate_card_t *global = og_consent_rates(c->gw->consent);
        if (!r->sent)
            continue;
        og_cost_price(global, c->auth.tenant->settings, c->ch[k], c->to, cat, (int)c->sms.segments,
                      &c->cost[k]);
        if (c->ch[k] != OG_CH_SMS)
            og_cost_sms_equivalent(global, c->auth.tenant->settings, c->to, c->text, &c->sms_equiv[k]);
    }
}

/* The attempts started so far, in channel order (in `all` mode they ran at once). */
static void write_attempts(og_jw_t *w, send_ctx_t *c, int started, bool for_db)
{
    price(c, started);
    og_jw_array(w);
    for (int k = 0; k < started; k++)
        write_attempt(w, result_of(c, k), c->ch[k], for_db, k, c->att_at_ms[k],
                      c->ch[k] == OG_CH_WHATSAPP_META && c->tpl.meta != NULL, &c->cost[k], &c->sms_equiv[k]);
    og_jw_array_end(w);
}

static void complete_done(og_db_op_t *op, og_db_status_t st)
{
    send_ctx_t *c = op->arg;
    if (st != OG_DB_OK) {
        /* The providers were called but the outcome could not be recorded: the message stays
         * pending until the sweep marks it unknown, and a repeat with the key gets 409 and then
         * outcome_unknown (API.md §15). This answer says so now, with what the attempts gave;
         * never "nothing was sent". */
        og_log(&c->gw->w->log, OG_LOG_ERROR, "recording a send failed; its outcome is unknown",
               "\"requestId\":\"%s\",\"reference\":\"%s\",\"sqlstate\":\"%s\",\"error\":\"%s\"",
               c->req->request_id, c->reference, op->sqlstate, op->error);
        og_jw_t w;
        og_jw_init(&w, 0);
        write_attempts(&w, c, c->engine.started, false);
        char *text = og_jw_finish(&w, NULL);
        json_t *attempts = text != NULL ? json_loads(text, 0, NULL) : NULL;
        free(text);
        og_idem_answer_unknown(c->req, c->reference, attempts,
                               "the providers were called but the outcome could not be recorded; do not "
                               "send again before checking the logs for the reference");
    } else {
        /* The template's new status is committed: this worker reads it at its next use. */
        if (c->tpl_change != NULL && c->gw->tpl != NULL)
            og_tpl_cache_forget(c->gw->tpl, c->meta_waba_id, c->tpl_name, c->tpl_language);
        /* A status that beat this commit may have made the next step due at once: run it. */
        const PGresult *sched = c->chain_goes_on ? op->res[c->schedule_stmt] : NULL;
        if (sched != NULL && PQntuples(sched) == 1 &&
            PQgetvalue(sched, 0, OG_C_FALLBACK_SCHEDULE_DUE_NOW)[0] == 't')
            og_jobs_wake(c->gw->jobs);
        og_http_header_t h = {"X-Omnigate-Reference", 20, c->reference, strlen(c->reference)};
        og_http_respond(c->req, c->response_status, &h, 1, "application/json", c->response_text,
                        c->response_len);
    }
    ctx_free(c);
}

/* The winning channel's name, or NULL when no attempt succeeded. */
static const char *winner_name(const send_ctx_t *c, const og_engine_t *e)
{
    return e->winner >= 0 ? og_channel_name(c->ch[e->winner]) : NULL;
}

/* Builds the answer of API.md §2 into c->response_text and c->response_status: 200 when a
 * channel won, else delivery_failed with the same data. False when out of memory. */
static bool build_answer(send_ctx_t *c, const og_engine_t *e)
{
    const char *winner = winner_name(c, e);
    char message[64];
    og_err_t err = {0};
    if (winner != NULL)
        snprintf(message, sizeof(message), "Message sent via %s", winner);
    else
        og_err_fail(&err, OG_E_DELIVERY_FAILED, NULL, "every attempted channel failed");
    c->response_status = winner != NULL ? 200 : og_api_status(err.code);
    snprintf(c->response_status_s, sizeof(c->response_status_s), "%d", c->response_status);
    og_jw_t w;
    og_jw_init(&w, 384 + 256 * (size_t)e->started);
    og_api_envelope_open(&w, c->response_status, winner != NULL ? message : err.message);
    og_jw_object(&w);
    og_jw_kstring(&w, "reference", c->reference);
    og_jw_kstring(&w, "deliveryMode", c->all ? "all" : "fallback");
    og_jw_kstring(&w, "winningChannel", winner);
    og_jw_key(&w, "attempts");
    write_attempts(&w, c, e->started, false);
    og_jw_key(&w, "skipped");
    write_skipped(c, &w);
    og_jw_object_end(&w);
    og_api_envelope_close(&w, winner != NULL ? NULL : &err);
    c->response_text = og_jw_finish(&w, &c->response_len);
    return c->response_text != NULL;
}

/* Fills statement n of `op` with the SMS record of the sms attempt `r`, the k-th; returns 1. */
static int sms_record_stmt(send_ctx_t *c, og_db_op_t *op, int n, const og_attempt_result_t *r, int k)
{
    snprintf(c->segments_s, sizeof(c->segments_s), "%d", (int)c->sms.segments);
    c->sms_status = r->sent ? "sent" : "failed";
    c->sms_provider_id = r->sent ? r->provider_message_id : NULL;
    if (!r->sent) {
        og_jw_t w;
        og_jw_init(&w, 0);
        og_provider_write_error(&w, r);
        c->sms_error_text = og_jw_finish(&w, NULL);
    }
    og_q_sms_record(&op->stmts[n],
                    &(og_q_sms_record_t){.tenant_id = c->auth.tenant->id,
                                         .reference = c->reference,
                                         .source = "omni",
                                         .to = c->to,
                                         .sender = c->sender,
                                         .text = c->text,
                                         .segments = c->segments_s,
                                         .encoding = og_sms_encoding_name(c->sms.encoding),
                                         .status = c->sms_status,
                                         .provider_id = c->sms_provider_id,
                                         .error = c->sms_error_text,
                                         .cost_micros = og_cost_param_micros(&c->cost[k], r->sent, c->cost_s),
                                         .currency = og_cost_param_currency(&c->cost[k], r->sent)});
    return 1;
}

/* Builds the completion write into c->op: the message's final status and attempts, the SMS
 * record when the sms channel was attempted, and the answer stored for idempotent repeats.
 * False when out of memory. */
static bool build_completion(send_ctx_t *c, const og_engine_t *e)
{
    const char *winner = winner_name(c, e);
    int sms_idx = -1;
    for (int k = 0; k < e->started; k++)
        if (c->ch[k] == OG_CH_SMS)
            sms_idx = k;
    og_jw_t w;
    og_jw_init(&w, 256 * (size_t)e->started + 16);
    write_attempts(&w, c, e->started, true);
    c->attempts_text = og_jw_finish(&w, NULL);
    if (c->attempts_text == NULL)
        return false;
    snprintf(c->status_s, sizeof(c->status_s), "%s", winner != NULL ? "sent" : "failed");

    og_db_op_t *op = c->op = og_db_op_new(); /* the pending insert's went before the attempts */
    if (op == NULL)
        return false;
    int n = 0;
    /* A delivery-based fallback goes on while channels remain after the accepted one. */
    c->chain_goes_on = c->fallback_on != NULL && e->winner >= 0 && e->winner < c->nch - 1;
    og_q_msg_complete(&op->stmts[n++],
                      &(og_q_msg_complete_t){.tenant_id = c->auth.tenant->id,
                                             .reference = c->reference,
                                             .status = c->status_s,
                                             .winner = winner,
                                             .attempts = c->attempts_text,
                                             .goes_on = c->chain_goes_on ? "true" : "false"});
    /* Its attempts and its win in the write batch's usage (API.md §22): a fallback message of more
     * than one channel is won by its winner (messages.winning_channel, sql/024). */
    for (int k = 0; k < e->started; k++) {
        const og_attempt_result_t *r = result_of(c, k);
        og_usage_attempt_row(&c->usage[k], c->auth.tenant->id, c->day, c->ch[k], r->sent, &c->cost[k],
                             !c->all && c->nch > 1 && k == e->winner, &c->sms_equiv[k]);
    }
    op->tally = c->usage;
    op->ntally = e->started;
    if (c->chain_goes_on) {
        c->schedule_stmt = n;
        og_q_fallback_schedule(&op->stmts[n++], &(og_q_fallback_schedule_t){.tenant_id = c->auth.tenant->id,
                                                                            .reference = c->reference});
    }
    if (sms_idx >= 0)
        n += sms_record_stmt(c, op, n, result_of(c, sms_idx), sms_idx);
    /* Meta refused the template itself (132001, 132015, 132016): the catalogue says so until the
     * next sync or status event (API.md §18). */
    int meta = tried(c, OG_CH_WHATSAPP_META);
    const char *tpl_status = meta >= 0 && meta < e->started && c->tpl.meta != NULL
                                 ? og_tpl_status_of_meta_code(result_of(c, meta)->provider_code)
                                 : NULL;
    if (tpl_status != NULL && (c->tpl_change = og_tpl_change_json(c->meta_waba_id, c->tpl_name,
                                                                  c->tpl_language, tpl_status)) != NULL)
        og_q_tpl_set_status(&op->stmts[n++], &(og_q_tpl_set_status_t){.changes = c->tpl_change});
    /* A provider said the number has no WhatsApp: remember it for every tenant (API.md §13). */
    for (int k = 0; k < e->started; k++) {
        if (result_of(c, k)->not_on_whatsapp && c->gw->nowa != NULL) {
            n += og_nowa_mark_stmt(c->gw->nowa, op, n, c->to);
            break;
        }
    }
    n += og_idem_complete_stmt(&c->idem, op, n, c->response_status_s, c->response_text);
    op->nstmts = n;
    op->write = true;
    op->done = complete_done;
    op->arg = c;
    return true;
}

/* Every attempt is over: build the answer and record it with the outcome; the answer is sent
 * once that write commits (complete_done). */
static void engine_done(og_engine_t *e)
{
    send_ctx_t *c = e->arg;
    /* Every provider call counts against its sender's rate, shared with queued sends (§19). */
    for (int k = 0; k < e->started; k++)
        og_queue_debit(c->gw->queue, c->auth.tenant->id, c->ch[k], pacing_sender(c, k), c->sms.segments,
                       result_of(c, k));
    if (!build_answer(c, e) || !build_completion(c, e)) {
        og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        ctx_free(c);
        return;
    }
    og_db_submit(c->gw->db, c->op);
}

static void attempt_done(og_attempt_t *a)
{
    send_ctx_t *c = a->arg;
    int i = 0;
    while (c->att[i] != a)
        i++;
    /* The adapter saw no token; the reason it had none is ours to give. */
    if (c->token_sealed[i] && a->result.error_code == OG_ERR_NOT_CONFIGURED)
        og_provider_fail(&a->result, OG_ERR_NOT_CONFIGURED, "%s", OG_SETTINGS_UNOPENED_MESSAGE);
    else if (c->ch[i] == OG_CH_WHATSAPP_META && c->meta_err.code != NULL)
        og_provider_fail(&a->result, OG_ERR_NOT_CONFIGURED, "%s", c->meta_err.message);
    og_engine_attempt_done(&c->engine, i, a->result.sent);
}

static void engine_start(og_engine_t *e, int i)
{
    send_ctx_t *c = e->arg;
    c->att_at_ms[i] = og_ids_now_ms();
    og_attempt_t *a = c->att[i] = calloc(1, sizeof(*a));
    if (a == NULL) {
        og_engine_attempt_done(e, i, false); /* result_of gives oom_result */
        return;
    }
    a->done = attempt_done;
    a->arg = c;
    og_channel_t ch = c->ch[i];
    og_send_params_t p = {.to = c->to, .text = c->text, .from = ch == OG_CH_SMS ? c->sender : c->wa_from};
    if (ch == OG_CH_WHATSAPP_QR) {
        p.session = c->qr_session;
    } else if (ch == OG_CH_WHATSAPP_META) {
        p.phone_number_id = c->meta_phone_number_id;
        p.access_token = c->meta_access_token;
        p.template_json = c->tpl.meta;
        if (c->meta_err.code != NULL) /* not made: the adapter finds no text and fails not_configured */
            p.text = p.template_json = NULL;
    }
    og_settings_provider_account(c->auth.tenant->settings, ch, &p.account); /* API.md §23 */
    og_attempt_start(&c->gw->prov, ch, &p, a);
}

static void nowa_checked(void *arg, bool remembered);

/* Keeps the day of the message just written from its insert's answer r (column col). Without one
 * (never expected: every insert returns it) the gateway's UTC day stands in, and the log says so. */
static void read_day(send_ctx_t *c, const PGresult *r, int col)
{
    if (r != NULL && PQntuples(r) == 1 && PQnfields(r) > col && !PQgetisnull(r, 0, col)) {
        snprintf(c->day, sizeof(c->day), "%s", PQgetvalue(r, 0, col));
        return;
    }
    char t[32];
    og_time_rfc3339_ms((int64_t)og_ids_now_ms(), t);
    snprintf(c->day, sizeof(c->day), "%.10s", t);
    og_log(&c->gw->w->log, OG_LOG_ERROR,
           "the insert returned no day: usage counts the message on the gateway's",
           "\"reference\":\"%s\",\"day\":\"%s\"", c->reference, c->day);
}

/* The pending row (and the idempotency key) is committed: call the providers, or replay. */
static void inserted(og_db_op_t *op, og_db_status_t st)
{
    send_ctx_t *c = op->arg;
    if (st != OG_DB_OK) {
        if (!og_idem_answer_lost(c->req, op, st))
            og_answer_db_failure(c->req, &c->gw->w->log, op, st, "inserting a message failed",
                                 "database unavailable: nothing was sent");
        ctx_free(c);
        return;
    }
    int day_col = c->nowa_in_insert ? OG_C_MSG_INSERT_UNLESS_NOWA_DAY : OG_C_MSG_INSERT_DAY;
    if (c->nowa_in_insert) {
        /* The insert looked the number up (authed): learn its answer; when it is remembered
         * nothing was written, and the send goes on without its WhatsApp channels. */
        const PGresult *r = op->res[0];
        bool written =
            r != NULL && PQntuples(r) == 1 && !PQgetisnull(r, 0, OG_C_MSG_INSERT_UNLESS_NOWA_REFERENCE);
        bool remembered =
            r != NULL && PQntuples(r) == 1 && !PQgetisnull(r, 0, OG_C_MSG_INSERT_UNLESS_NOWA_LEFT_MS);
        og_nowa_learn(c->gw->nowa, c->to, remembered,
                      remembered ? strtoull(PQgetvalue(r, 0, OG_C_MSG_INSERT_UNLESS_NOWA_LEFT_MS), NULL, 10)
                                 : OG_NOWA_CACHE_MS);
        c->nowa_in_insert = false;
        if (!written) {
            og_db_op_clear(op);
            free(c->skipped_text);
            c->skipped_text = NULL;
            nowa_checked(c, true);
            return;
        }
    }
    read_day(c, op->res[0], day_col);
    og_db_op_free(op); /* c->op: none is held while the providers are called */
    c->op = NULL;
    free(c->skipped_text); /* the insert's parameter; the answer writes its own */
    c->skipped_text = NULL;
    c->engine =
        (og_engine_t){.n = c->nch, .all = c->all, .start = engine_start, .done = engine_done, .arg = c};
    og_engine_run(&c->engine);
}

/* ---- a queued send (API.md §19) -------------------------------------------------------------- */

/* The message row's fields, the same in a sync send's pending insert (msg_insert) and a queued
 * send's (queue_insert), which adds its status, due time, validity and priority. */
#define MESSAGE_ROW(c)                                                                                       \
    .tenant_id = (c)->auth.tenant->id, .reference = (c)->reference, .to = (c)->to, .text = (c)->text,        \
    .mode = (c)->all ? "all" : "fallback", .channels = (c)->channels_lit, .skipped = (c)->skipped_text,      \
    .fallback_on = (c)->fallback_on,                                                                         \
    .fallback_after = (c)->fallback_on != NULL ? (c)->fallback_after_s : NULL,                               \
    .wa_from = (c)->wa_from[0] ? (c)->wa_from : NULL, .sms_sender = (c)->sender[0] ? (c)->sender : NULL,     \
    .template = (c)->template_text

/* The 202 answer of a queued send: reference, status, sendAt (when given), validUntil. */
static bool queue_answer(send_ctx_t *c)
{
    char t[32];
    c->response_status = 202;
    snprintf(c->response_status_s, sizeof(c->response_status_s), "%d", c->response_status);
    og_jw_t w;
    og_jw_init(&w, 256);
    og_api_envelope_open(&w, 202, c->scheduled ? "Message scheduled" : "Message queued");
    og_jw_object(&w);
    og_jw_kstring(&w, "reference", c->reference);
    og_jw_kstring(&w, "status", c->scheduled ? "scheduled" : "queued");
    if (c->send_at_given) {
        og_time_rfc3339_ms(c->due_ms, t);
        og_jw_kstring(&w, "sendAt", t);
    }
    og_time_rfc3339_ms(c->valid_until_ms, t);
    og_jw_kstring(&w, "validUntil", t);
    og_jw_object_end(&w);
    og_api_envelope_close(&w, NULL);
    c->response_text = og_jw_finish(&w, &c->response_len);
    return c->response_text != NULL;
}

/* messages' queue parameter (queue_insert): the status, and each channel's sender (its pacing
 * key), rate and tokens per attempt (SMS: segments), in the message's channel order. */
static bool queue_json(send_ctx_t *c)
{
    og_jw_t w;
    og_jw_init(&w, 64 + 96 * (size_t)c->nch);
    og_jw_object(&w);
    og_jw_kstring(&w, "status", c->scheduled ? "scheduled" : "queued");
    og_jw_key(&w, "senders");
    og_jw_array(&w);
    for (int k = 0; k < c->nch; k++) {
        double rate = og_pacing_rate(c->gw->w->cfg, c->auth.tenant->settings, c->ch[k],
                                     c->ch[k] == OG_CH_SMS ? c->sender : c->wa_from);
        og_jw_object(&w);
        og_jw_kstring(&w, "c", og_channel_name(c->ch[k]));
        og_jw_kstring(&w, "s", pacing_sender(c, k));
        og_jw_key(&w, "r");
        og_jw_number6(&w, rate);
        og_jw_kint(&w, "n", og_pacing_cost(c->ch[k], c->sms.segments));
        og_jw_object_end(&w);
    }
    og_jw_array_end(&w);
    og_jw_object_end(&w);
    c->queue_text = og_jw_finish(&w, NULL);
    return c->queue_text != NULL;
}

static void queued_done(og_db_op_t *op, og_db_status_t st)
{
    send_ctx_t *c = op->arg;
    if (st != OG_DB_OK) {
        if (!og_idem_answer_lost(c->req, op, st))
            og_answer_db_failure(c->req, &c->gw->w->log, op, st, "queueing a message failed",
                                 "database unavailable: nothing was queued");
        ctx_free(c);
        return;
    }
    /* Due now: this worker claims it at once; scheduled: at its sendAt (the others at a tick). */
    og_queue_due(c->gw->queue, c->due_ms);
    og_http_header_t h = {"X-Omnigate-Reference", 20, c->reference, strlen(c->reference)};
    og_http_respond(c->req, c->response_status, &h, 1, "application/json", c->response_text, c->response_len);
    ctx_free(c);
}

/* The key (if any) is ours: commit the queued message, its entries and the 202 answer (stored
 * for repeats) in one transaction; the answer goes once it commits, and nothing is sent before. */
static void enqueue(send_ctx_t *c)
{
    if (!queue_json(c) || !queue_answer(c)) {
        og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        ctx_free(c);
        return;
    }
    og_db_op_t *op = c->op;
    /* First: the statement a write batch's queued sends share (its set form, queue_insert_many). */
    og_q_queue_insert(&op->stmts[0], &(og_q_queue_insert_t){MESSAGE_ROW(c), .due_ms = c->due_s,
                                                            .valid_until_ms = c->valid_until_s,
                                                            .priority = c->priority, .queue = c->queue_text});
    int n = 1;
    n += og_idem_reference_stmt(&c->idem, op, n, c->reference);
    n += og_idem_complete_stmt(&c->idem, op, n, c->response_status_s, c->response_text);
    op->nstmts = n;
    op->write = true;
    op->done = queued_done;
    op->arg = c;
    og_db_submit(c->gw->db, op);
}

/* The message row's reference, channels and skipped channels. False when out of memory. */
static bool row_texts(send_ctx_t *c)
{
    og_ids_reference_in(c->reference, og_ids_now_us(), &c->gw->ids);
    char *p = c->channels_lit;
    *p++ = '{';
    for (int k = 0; k < c->nch; k++)
        p += sprintf(p, "%s%s", k ? "," : "", og_channel_name(c->ch[k]));
    strcpy(p, "}");
    og_jw_t w;
    og_jw_init(&w, 0);
    write_skipped(c, &w);
    c->skipped_text = og_jw_finish(&w, NULL);
    return c->skipped_text != NULL;
}

/* The key (if any) is ours: commit the pending message row. */
static void claimed(og_idem_t *i)
{
    send_ctx_t *c = i->arg;
    if (i->answered) {
        ctx_free(c);
        return;
    }
    if (!row_texts(c)) {
        og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        ctx_free(c);
        return;
    }
    if (c->queued) {
        enqueue(c);
        return;
    }
    og_db_op_t *op = c->op;
    /* The two inserts take the same parameters (og_q_msg_insert_unless_nowa_t is this type). */
    const og_q_msg_insert_t row = {MESSAGE_ROW(c)};
    (c->nowa_in_insert ? og_q_msg_insert_unless_nowa : og_q_msg_insert)(&op->stmts[0], &row);
    op->nstmts = 1 + og_idem_reference_stmt(&c->idem, op, 1, c->reference);
    op->write = true;
    op->done = inserted;
    op->arg = c;
    og_db_submit(c->gw->db, op);
}

/* Claims the key (if any), then inserts the pending message (claimed). */
static void claim(send_ctx_t *c)
{
    /* The longest the send can take (API.md §15): its channels' attempts and its writes. */
    og_idem_claim(&c->idem, c->gw->db, c->op, &c->gw->w->log, c->auth.tenant->id, "omni",
                  og_send_budget_ms(c->gw->w->cfg, c->nch), claimed, c);
}

/* The number is remembered as having no WhatsApp (API.md §13): its WhatsApp channels are
 * skipped (reason not_on_whatsapp) and the plan starts with the next channel. False with
 * no_channel_available in `err` when no channel is left. */
static bool skip_whatsapp(send_ctx_t *c, og_err_t *err)
{
    int kept = 0;
    for (int i = 0; i < c->nch; i++) {
        if (c->ch[i] == OG_CH_SMS) {
            c->ch[kept] = c->ch[i];
            c->token_sealed[kept++] = c->token_sealed[i];
        } else {
            skip(c, c->ch[i], "not_on_whatsapp");
        }
    }
    c->nch = kept;
    if (c->gw->nowa_skips != NULL)
        og_metrics_add(c->gw->nowa_skips, 1);
    return c->nch > 0 ||
           og_err_fail(err, OG_E_NO_CHANNEL_AVAILABLE, "channels",
                       "the number has no WhatsApp (a provider said so) and no other channel was requested");
}

/* The number is remembered as having no WhatsApp (nowa.h): skip_whatsapp, then on. */
static void nowa_checked(void *arg, bool remembered)
{
    send_ctx_t *c = arg;
    if (!remembered) {
        claim(c);
        return;
    }
    og_err_t err = {0};
    if (!skip_whatsapp(c, &err)) {
        og_jw_t w;
        og_jw_init(&w, 0);
        write_skipped(c, &w);
        char *text = og_jw_finish(&w, NULL);
        json_t *skipped = text != NULL ? json_loads(text, 0, NULL) : NULL;
        free(text);
        og_api_send_error(c->req, &err, json_pack("{s:o*}", "skipped", skipped), NULL, NULL, 0);
        ctx_free(c);
        return;
    }
    claim(c);
}

/* The send is checked (its text final): on to the not-on-WhatsApp check, the claim and the
 * pending insert. */
static void prepared(send_ctx_t *c)
{
    og_err_t err = {0};
    if (!check_text(c, &err) || !template_record(c, &err)) {
        og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
        ctx_free(c);
        return;
    }
    bool whatsapp = false;
    for (int i = 0; i < c->nch; i++)
        whatsapp = whatsapp || c->ch[i] != OG_CH_SMS;
    if (whatsapp && c->gw->nowa != NULL) {
        bool remembered;
        if (og_nowa_cached(c->gw->nowa, c->to, &remembered)) {
            nowa_checked(c, remembered);
        } else if (!c->idem.has_key && !c->queued) {
            /* The lookup rides on the pending insert (inserted). With a key it cannot: the
             * claim comes first, and a send refused for want of a channel must not hold it;
             * nor on a queued send's, whose insert is another statement. */
            c->nowa_in_insert = true;
            claim(c);
        } else {
            og_nowa_check(c->gw->nowa, c->op, c->to, nowa_checked, c);
        }
        return;
    }
    claim(c);
}

/* The catalogue's entry (NULL: not in it) for the template Meta is to get: a template send's
 * Meta body and, without text, the other channels' text; a wrapped free text's body. */
static bool apply_entry(send_ctx_t *c, const json_t *item, og_err_t *err)
{
    if (!og_rate_category_parse(json_string_value(json_object_get(item, "category")), &c->tpl_category))
        c->tpl_category = OG_CAT_NONE;
    if (c->tpl_req != NULL)
        return og_tpl_apply(c->tpl_req, item, c->meta_waba_id, &c->tpl, err) &&
               (c->text != NULL || (c->text = strdup(c->tpl.rendered)) != NULL ||
                og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory"));
    og_err_t werr = {0};
    if (!og_tpl_wrap(item, c->tpl_name, c->tpl_language, c->text, false, &c->tpl, &werr))
        /* The tenant's windowTemplate cannot carry the text: the Meta attempt fails
         * not_configured (no provider call) and the other channels go on. */
        og_err_fail(&c->meta_err, werr.code, "text", "windowTemplate: %s", werr.message);
    return true;
}

/* The catalogue's entry for the template Meta is to get (templates/catalogue.h). */
static void tpl_found(void *arg, og_db_status_t st, const json_t *item)
{
    send_ctx_t *c = arg;
    og_err_t err = {0};
    if (st != OG_DB_OK) {
        og_answer_db_failure(c->req, &c->gw->w->log, c->op, st, "reading a template failed",
                             "database unavailable: nothing was sent");
        ctx_free(c);
        return;
    }
    og_db_op_clear(c->op);
    if (!apply_entry(c, item, &err)) {
        og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
        ctx_free(c);
        return;
    }
    prepared(c);
}

static void authed(og_auth_req_t *a)
{
    send_ctx_t *c = (send_ctx_t *)a;
    if (a->tenant == NULL) {
        ctx_free(c);
        return;
    }
    const char *const *allowed = og_send_fields;
    og_err_t err = {0};
    json_t *body = og_json_decode_body(c->req, allowed, &err);
    bool ok = body != NULL && validate(c, body, &err) && og_idem_read(&c->idem, c->req, &err);
    json_decref(body);
    if (!ok) {
        og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
        ctx_free(c);
        return;
    }
    og_http_req_drop_input(c->req); /* all read: not kept through the providers' wait */
    if (c->tpl_name != NULL && c->gw->tpl != NULL) {
        og_tpl_lookup(c->gw->tpl, c->op, c->meta_waba_id, c->tpl_name, c->tpl_language, tpl_found, c);
        return;
    }
    prepared(c);
}

static void consent_loaded(og_consent_wait_t *w)
{
    send_ctx_t *c = container_of(w, send_ctx_t, consent_wait);
    og_auth_tenant(c->gw->auth, &c->auth);
}

void og_send_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    send_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->op = og_db_op_new()) == NULL) {
        free(c);
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    c->gw = gw;
    c->req = req;
    c->auth.req = req;
    c->auth.scope = OG_SCOPE_SEND;
    c->auth.unified = true;
    c->auth.done = authed;
    c->auth.op = c->op;
    c->consent_wait.done = consent_loaded;
    og_consent_wait(gw->consent, &c->consent_wait);
}

/* ---- a batch's message (API.md §20; send_item.h) ---------------------------------------------- */

og_send_item_t *og_send_item_new(og_gw_t *gw, og_tenant_t *tenant)
{
    send_ctx_t *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->gw = gw;
        c->auth.tenant = tenant; /* borrowed: og_send_item_free lets it go before ctx_free */
    }
    return c;
}

void og_send_item_free(og_send_item_t *c)
{
    if (c != NULL) {
        c->auth.tenant = NULL;
        ctx_free(c);
    }
}

bool og_send_item_read(og_send_item_t *c, json_t *body, og_err_t *err)
{
    json_t *q = json_object_get(body, "queue");
    if (q != NULL && !json_is_true(q))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "queue",
                           "a batch's messages are always queued: queue must be true or absent");
    if (json_object_set_new(body, "queue", json_true()) != 0)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    return validate(c, body, err);
}

bool og_send_item_template(const og_send_item_t *c, const char **waba_id, const char **name,
                           const char **language)
{
    if (c->tpl_name == NULL || c->gw->tpl == NULL)
        return false;
    *waba_id = c->meta_waba_id;
    *name = c->tpl_name;
    *language = c->tpl_language;
    return true;
}

bool og_send_item_apply(og_send_item_t *c, const json_t *entry, og_err_t *err)
{
    return apply_entry(c, entry, err);
}

bool og_send_item_finish(og_send_item_t *c, og_jw_t *w, og_err_t *err)
{
    if (!check_text(c, err) || !template_record(c, err))
        return false;
    bool whatsapp = false, remembered = false;
    for (int i = 0; i < c->nch; i++)
        whatsapp = whatsapp || c->ch[i] != OG_CH_SMS;
    /* The numbers this worker knows about only: a batch does not wait on a lookup per number. */
    if (whatsapp && c->gw->nowa != NULL && og_nowa_cached(c->gw->nowa, c->to, &remembered) && remembered &&
        !skip_whatsapp(c, err))
        return false;
    if (!row_texts(c) || !queue_json(c))
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    /* queue_insert's parameters by name (og_batch_insert, sql/020_batches.sql). */
    og_jw_object(w);
    og_jw_kstring(w, "r", c->reference);
    og_jw_kstring(w, "to", c->to);
    og_jw_kstring(w, "text", c->text);
    og_jw_kstring(w, "mode", c->all ? "all" : "fallback");
    og_jw_kstring(w, "channels", c->channels_lit);
    og_jw_key(w, "skipped");
    og_jw_raw(w, c->skipped_text, strlen(c->skipped_text));
    if (c->fallback_on != NULL) {
        og_jw_kstring(w, "fallbackOn", c->fallback_on);
        og_jw_kint(w, "fallbackAfter", c->fallback_after);
    }
    if (c->wa_from[0])
        og_jw_kstring(w, "waFrom", c->wa_from);
    if (c->sender[0])
        og_jw_kstring(w, "smsSender", c->sender);
    if (c->template_text != NULL) {
        og_jw_key(w, "template");
        og_jw_raw(w, c->template_text, strlen(c->template_text));
    }
    og_jw_kint(w, "due", c->due_ms);
    og_jw_kint(w, "valid", c->valid_until_ms);
    og_jw_kstring(w, "priority", c->priority);
    og_jw_key(w, "queue");
    og_jw_raw(w, c->queue_text, strlen(c->queue_text));
    og_jw_object_end(w);
    return true;
}

const char *og_send_item_reference(const og_send_item_t *c)
{
    return c->reference;
}

int64_t og_send_item_due_ms(const og_send_item_t *c)
{
    return c->due_ms;
}

bool og_send_item_scheduled(const og_send_item_t *c)
{
    return c->scheduled;
}
