/*
 * One-time passwords (API.md §3, §18): POST /api/sms/otp/send and /api/sms/otp/verify, on the
 * steps they share with POST /api/sms/send (messaging/sms_req.h). Abuse limits (30 s cooldown, 5
 * sends an hour per tenant and number) live in PostgreSQL (sql/002_otp.sql) so they hold across
 * instances; verification is a conditional UPDATE so two right codes at once verify exactly once.
 *
 * A send tries its `channels` in fallback order (default sms; whatsapp_meta sends the code with
 * the tenant's authentication template, otp.whatsappTemplate, as its body parameter and the
 * parameter of its copy-code button): one code per OTP, whichever channel delivers it. The
 * template is looked up in the catalogue and checked before the key is claimed, so a template
 * that cannot carry the code is a 422 with nothing written.
 *
 * The code itself exists only in this process's memory between generation and the provider
 * calls: stored as an HMAC, masked in the SMS record, masked in any provider error message that
 * echoes it, never logged or returned. Meta's request body, which carries it, is not stored.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/api.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/messaging/otp.h"
#include "omnigate/messaging/sms_req.h"
#include "omnigate/app/ctx.h"
#include "omnigate/consent/consent.h"
#include "omnigate/messaging/idem.h"
#include "omnigate/messaging/nowa.h"
#include "omnigate/ids.h"
#include "omnigate/json.h"
#include "omnigate/jw.h"
#include "omnigate/phone.h"
#include "omnigate/providers/provider.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/smsenc.h"
#include "omnigate/store.h"
#include "omnigate/templates/catalogue.h"
#include "omnigate/templates/render.h"
#include "omnigate/token.h"

#define OTP_MAX_FAILURES 5
#define OTP_DEFAULT_TPL  "Your verification code is {code}"
#define OTP_TEMPLATE_MAX 480

/* ---- OTP over WhatsApp (API.md §18) ----------------------------------------------------------- */

/* What the whatsapp_meta attempt of an OTP needs, found while the request is checked. The
 * borrowed strings are the tenant's settings', which c->auth.tenant holds until c is freed. */
struct og_otp_wa {
    const char *from;            /* the tenant's defaultWhatsappFrom */
    og_settings_wa_number_t num; /* its whatsapp_meta registration, with a wabaId */
    const char *name;            /* otp.whatsappTemplate */
    const char *language;
    json_t *item;         /* its catalogue entry (our reference), once looked up and checked */
    og_tpl_out_t tpl;     /* Meta's template object and its body: both hold the code */
    bool not_on_whatsapp; /* Meta said the number has no WhatsApp (API.md §13) */
    /* Meta refused the template itself: its new status, as tpl_set_status takes it */
    char *tpl_change;
};

static void wipe(char *s)
{
    if (s != NULL)
        OPENSSL_cleanse(s, strlen(s));
}

/* The code is no longer needed in Meta's template object. */
static void wa_forget_code(struct og_otp_wa *wa)
{
    wipe(wa->tpl.meta);
    wipe(wa->tpl.rendered);
    og_tpl_out_clear(&wa->tpl);
}

static void otp_release(og_smsreq_t *c)
{
    if (c->wa == NULL)
        return;
    wa_forget_code(c->wa);
    json_decref(c->wa->item);
    free(c->wa->tpl_change);
    free(c->wa);
    c->wa = NULL;
}

/* True when channel ch is among those the OTP tries. */
static bool tries(const og_smsreq_t *c, og_channel_t ch)
{
    return og_channel_index(c->ch, c->nch, ch) >= 0;
}

/* Drops whatsapp_meta from the channels to try (and what it needed). */
static void drop_whatsapp(og_smsreq_t *c)
{
    int kept = 0;
    for (int i = 0; i < c->nch; i++)
        if (c->ch[i] != OG_CH_WHATSAPP_META)
            c->ch[kept++] = c->ch[i];
    c->nch = kept;
    c->attempts = kept;
    otp_release(c);
}

/* The Meta number and template of an OTP over WhatsApp: the tenant's defaultWhatsappFrom as
 * registered for whatsapp_meta, whose wabaId names the catalogue that must hold
 * otp.whatsappTemplate. A missing piece is refused with field `channels`, the request's field
 * that asked for whatsapp_meta (the message names the setting). */
static bool wa_plan(og_smsreq_t *c, og_err_t *err)
{
    json_t *settings = c->auth.tenant->settings;
    const char *name, *language;
    if (!og_settings_otp_whatsapp_template(settings, &name, &language))
        return og_err_fail(err, OG_E_TEMPLATE_NOT_FOUND, "channels",
                           "whatsapp_meta sends the code with the tenant's authentication template: "
                           "settings.otp.whatsappTemplate is not set");
    const char *from = og_settings_default_whatsapp_from(settings);
    og_settings_wa_number_t num;
    if (from == NULL)
        return og_err_fail(
            err, OG_E_WHATSAPP_FROM_NOT_REGISTERED, "channels",
            "whatsapp_meta sends the code from the tenant's defaultWhatsappFrom, which is not set");
    if (!og_settings_wa_number(settings, "whatsapp_meta", from, &num))
        return og_err_fail(err, OG_E_WHATSAPP_FROM_NOT_REGISTERED, "channels",
                           "the tenant's defaultWhatsappFrom %s is not registered for whatsapp_meta", from);
    if (num.waba_id == NULL)
        return og_err_fail(
            err, OG_E_TEMPLATE_NOT_FOUND, "channels",
            "the whatsapp_meta number %s has no wabaId: its WhatsApp Business Account's catalogue, "
            "where settings.otp.whatsappTemplate must be, is unknown",
            from);
    if ((c->wa = calloc(1, sizeof(*c->wa))) == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    c->wa->from = from;
    c->wa->num = num;
    c->wa->name = name;
    c->wa->language = language;
    return true;
}

/* Meta's template message of the OTP with `code` into wa->tpl: otp.whatsappTemplate (its entry
 * wa->item) with the code as its one body parameter and as the parameter of its copy-code
 * button (og_tpl_wrap: in the catalogue, APPROVED, one parameter), the errors naming `channels`
 * and the setting. */
static bool wa_template(og_smsreq_t *c, const char *code, og_err_t *err)
{
    struct og_otp_wa *wa = c->wa;
    if (og_tpl_wrap(wa->item, wa->name, wa->language, code, true, &wa->tpl, err))
        return true;
    if (err->code != OG_E_UNAVAILABLE) {
        char message[sizeof(err->message)];
        snprintf(message, sizeof(message), "%s", err->message);
        og_err_fail(err, err->code, "channels", "settings.otp.whatsappTemplate: %s", message);
    }
    return false;
}

/* ---- POST /api/sms/otp/send ---------------------------------------------------------------- */

/* The error message of a send none of whose channels delivered the code. */
static const char *failed_message(const og_smsreq_t *c)
{
    return c->nch == 1 && c->ch[0] == OG_CH_SMS ? "the SMS with the code could not be sent"
                                                : "no channel could deliver the code";
}

/* The history events of the attempts made, in order (otp_sent's `events`). NULL when out of
 * memory. */
static char *events_json(const og_smsreq_t *c, const og_engine_t *e)
{
    og_jw_t w;
    og_jw_init(&w, 96 * (size_t)e->started);
    og_jw_array(&w);
    for (int k = 0; k < e->started; k++) {
        og_jw_object(&w);
        og_jw_kstring(&w, "event", k == e->winner ? "sent" : "send_failed");
        og_jw_kstring(&w, "channel", og_channel_name(c->ch[k]));
        og_jw_key(&w, "error");
        if (c->att_error[k] != NULL)
            og_jw_raw(&w, c->att_error[k], strlen(c->att_error[k]));
        else
            og_jw_null(&w);
        og_jw_object_end(&w);
    }
    og_jw_array_end(&w);
    return og_jw_finish(&w, NULL);
}

/* The OTP's outcome is committed: a template status it changed is read again here at its next
 * use, then the answer goes out. */
static void otp_recorded(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = og_smsreq_step(op, st);
    if (c == NULL)
        return;
    if (c->wa != NULL && c->wa->tpl_change != NULL && c->gw->tpl != NULL)
        og_tpl_cache_forget(c->gw->tpl, c->wa->num.waba_id, c->wa->name, c->wa->language);
    og_smsreq_answer(c);
}

/* Every channel was tried or one delivered the code: record the OTP's outcome with its events,
 * the SMS record when the sms channel was tried, what Meta told of the template and the number,
 * and the answer for idempotent repeats, then answer (otp_recorded). */
static void otp_finished(og_engine_t *e)
{
    og_smsreq_t *c = e->arg;
    wipe(c->text);
    if (c->wa != NULL)
        wa_forget_code(c->wa);
    bool sent = e->winner >= 0;
    const char *channel = sent ? og_channel_name(c->ch[e->winner]) : NULL;
    json_t *data =
        json_pack("{s:s,s:s,s:s,s:i,s:s,s:s?}", "reference", c->reference, "to", c->to, "expiresAt",
                  c->expires_at, "length", c->length, "status", sent ? "sent" : "failed", "channel", channel);
    og_err_t err = {0};
    if (!sent)
        og_err_fail(&err, OG_E_DELIVERY_FAILED, NULL, "%s", failed_message(c));
    if (!og_smsreq_build_answer(c, sent ? "OTP sent" : err.message, data, sent ? NULL : &err) ||
        !og_smsreq_new_op(c))
        return;
    if ((c->events_text = events_json(c, e)) == NULL) {
        og_smsreq_db_failed(c, OG_DB_ERROR);
        return;
    }
    og_db_op_t *op = c->op;
    int n = 0;
    og_q_otp_sent(&op->stmts[n++], &(og_q_otp_sent_t){.tenant_id = c->auth.tenant->id,
                                                      .reference = c->reference,
                                                      .channel = channel,
                                                      .events = c->events_text});
    for (int k = 0; k < e->started; k++) {
        if (c->ch[k] != OG_CH_SMS)
            continue;
        /* A sent attempt is the last one: its result is still the attempt's. */
        bool sms_sent = k == e->winner;
        og_smsreq_price(c, sms_sent);
        og_q_sms_record(
            &op->stmts[n++],
            &(og_q_sms_record_t){.tenant_id = c->auth.tenant->id,
                                 .reference = c->reference,
                                 .source = "otp",
                                 .source_reference = c->reference,
                                 .to = c->to,
                                 .sender = c->sender,
                                 .text = c->logged_text,
                                 .segments = c->segments_s,
                                 .encoding = og_sms_encoding_name(c->sms.encoding),
                                 .status = sms_sent ? "sent" : "failed",
                                 .provider_id = sms_sent ? c->att.result.provider_message_id : NULL,
                                 .error = c->att_error[k],
                                 .cost_micros = og_smsreq_cost_micros(c),
                                 .currency = og_smsreq_cost_currency(c)});
    }
    if (c->wa != NULL && c->wa->tpl_change != NULL)
        og_q_tpl_set_status(&op->stmts[n++], &(og_q_tpl_set_status_t){.changes = c->wa->tpl_change});
    if (c->wa != NULL && c->wa->not_on_whatsapp && c->gw->nowa != NULL)
        n += og_nowa_mark_stmt(c->gw->nowa, op, n, c->to);
    n += og_idem_complete_stmt(&c->idem, op, n, c->status_s, c->response_text);
    og_smsreq_submit(c, n, true, otp_recorded);
}

/* Attempt `engine.started - 1` is over (attempts run one at a time): keep what the record needs
 * of it before the next one reuses c->att. */
static void otp_attempted(og_attempt_t *a)
{
    og_smsreq_t *c = a->arg;
    og_attempt_result_t *r = &a->result;
    int k = c->engine.started - 1;
    if (c->ch[k] == OG_CH_WHATSAPP_META) {
        struct og_otp_wa *wa = c->wa;
        /* The adapter saw no token; the reason it had none is ours to give. */
        if (wa->num.access_token_sealed && r->error_code == OG_ERR_NOT_CONFIGURED)
            og_provider_fail(r, OG_ERR_NOT_CONFIGURED, "%s", OG_SETTINGS_UNOPENED_MESSAGE);
        /* Meta refused the template itself (132001, 132015, 132016): the catalogue says so until
         * the next sync or status event, as after a template send. */
        const char *status = r->sent ? NULL : og_tpl_status_of_meta_code(r->provider_code);
        if (status != NULL)
            wa->tpl_change = og_tpl_change_json(wa->num.waba_id, wa->name, wa->language, status);
        wa->not_on_whatsapp = r->not_on_whatsapp;
        wa_forget_code(wa);
    }
    if (!r->sent) {
        /* A provider's error message may quote what it was sent. */
        og_otp_mask(r->error_message, sizeof(r->error_message), c->code);
        json_t *err = og_attempt_error_json(r);
        c->att_error[k] = err != NULL ? json_dumps(err, JSON_COMPACT) : NULL;
        json_decref(err);
    }
    og_engine_attempt_done(&c->engine, k, r->sent);
}

/* Starts attempt i of the OTP's channels; it ends in otp_attempted. */
static void otp_start(og_engine_t *e, int i)
{
    og_smsreq_t *c = e->arg;
    if (c->ch[i] == OG_CH_SMS) {
        og_smsreq_start_sms(c, otp_attempted);
        return;
    }
    struct og_otp_wa *wa = c->wa;
    c->params = (og_send_params_t){.to = c->to,
                                   .from = wa->from,
                                   .phone_number_id = wa->num.phone_number_id,
                                   .access_token = wa->num.access_token,
                                   .template_json = wa->tpl.meta};
    og_smsreq_start_attempt(c, OG_CH_WHATSAPP_META, otp_attempted);
}

static void otp_begun(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = og_smsreq_step(op, st);
    if (c == NULL)
        return;
    PGresult *r = op->res[0];
    const char *outcome = PQgetvalue(r, 0, OG_C_OTP_BEGIN_OUTCOME);
    if (strcmp(outcome, "ok") != 0) {
        const char *retry = PQgetvalue(r, 0, OG_C_OTP_BEGIN_RETRY_AFTER);
        og_http_header_t h = {"Retry-After", 11, retry, strlen(retry)};
        og_err_t err = {0};
        if (strcmp(outcome, "cooldown") == 0)
            og_err_fail(&err, OG_E_OTP_COOLDOWN, NULL, "one OTP per number every 30 seconds: retry in %s s",
                        retry);
        else
            og_err_fail(&err, OG_E_RATE_LIMITED, NULL, "at most 5 OTPs per number an hour: retry in %s s",
                        retry);
        /* Not stored for idempotency: a limit is not an outcome, a retry later may succeed. */
        og_api_send_error(c->req, &err, NULL, NULL, &h, 1);
        og_smsreq_free(c);
        return;
    }
    snprintf(c->expires_at, sizeof(c->expires_at), "%s", PQgetvalue(r, 0, OG_C_OTP_BEGIN_EXPIRES_AT));
    /* One channel at a time, in order, until one delivers the code (the first attempt frees op). */
    c->engine = (og_engine_t){.n = c->nch, .all = false, .start = otp_start, .done = otp_finished, .arg = c};
    og_engine_run(&c->engine);
}

static void otp_claimed(og_smsreq_t *c)
{
    og_ids_reference_in(c->reference, og_ids_now_us(), &c->gw->ids);
    og_err_t err = {0};
    if (!og_otp_generate(c->code, c->length) ||
        !og_otp_hash(c->gw->w->cfg->secret, c->auth.tenant->id, c->reference, c->code, c->code_hash)) {
        og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "cannot generate a code");
        og_smsreq_free(c);
        return;
    }
    /* The provider's text carries the code; the SMS record carries it masked. */
    const char *tpl = c->logged_text;
    const char *at = strstr(tpl, "{code}");
    size_t pre = (size_t)(at - tpl), len = strlen(tpl) - 6 + (size_t)c->length;
    c->text = malloc(len + 1);
    char *masked = malloc(len + 1);
    if (c->text == NULL || masked == NULL) {
        free(masked);
        og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        og_smsreq_free(c);
        return;
    }
    snprintf(c->text, len + 1, "%.*s%s%s", (int)pre, tpl, c->code, at + 6);
    snprintf(masked, len + 1, "%.*s%.*s%s", (int)pre, tpl, c->length, "**********", at + 6);
    free(c->logged_text);
    c->logged_text = masked;
    /* Meta's template message with the code: its entry was checked already (otp_tpl_found),
     * so only memory can fail here. */
    if (c->wa != NULL && !wa_template(c, c->code, &err)) {
        og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
        og_smsreq_free(c);
        return;
    }
    og_q_otp_begin(&c->op->stmts[0], &(og_q_otp_begin_t){.tenant_id = c->auth.tenant->id,
                                                         .to = c->to,
                                                         .reference = c->reference,
                                                         .code_hash = c->code_hash,
                                                         .length = c->length_s,
                                                         .ttl_s = c->ttl_s});
    og_smsreq_submit(c, 1 + og_idem_reference_stmt(&c->idem, c->op, 1, c->reference), true, otp_begun);
}

/* The number is remembered as having no WhatsApp (API.md §13): whatsapp_meta is skipped and
 * the next channel delivers the code. */
static void otp_nowa_checked(void *arg, bool remembered)
{
    og_smsreq_t *c = arg;
    if (remembered) {
        drop_whatsapp(c);
        if (c->gw->nowa_skips != NULL)
            og_metrics_add(c->gw->nowa_skips, 1);
        if (c->nch == 0) {
            og_err_t err = {0};
            og_err_fail(&err, OG_E_NO_CHANNEL_AVAILABLE, "channels",
                        "the number has no WhatsApp (a provider said so) and no other channel was requested");
            og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
            og_smsreq_free(c);
            return;
        }
    }
    og_smsreq_claim(c);
}

/* otp.whatsappTemplate's catalogue entry (templates/catalogue.h). It is checked now, with a
 * stand-in code of the same length, so a template that cannot carry the code is refused before
 * anything is claimed or written; Meta's message with the real code is made once there is one
 * (otp_claimed), from the entry kept here. */
static void otp_tpl_found(void *arg, og_db_status_t st, const json_t *item)
{
    og_smsreq_t *c = arg;
    if (st != OG_DB_OK) {
        og_smsreq_db_failed(c, st); /* c->op holds the failure */
        return;
    }
    og_db_op_clear(c->op); /* the lookup leaves it to us; the claim takes it next */
    og_err_t err = {0};
    char stand_in[OG_OTP_MAX_LEN + 1];
    snprintf(stand_in, sizeof(stand_in), "%.*s", c->length, "0000000000");
    c->wa->item = json_incref((json_t *)item);
    if (!wa_template(c, stand_in, &err)) {
        og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
        og_smsreq_free(c);
        return;
    }
    og_tpl_out_clear(&c->wa->tpl);
    if (c->gw->nowa != NULL)
        og_nowa_check(c->gw->nowa, c->op, c->to, otp_nowa_checked, c);
    else
        og_smsreq_claim(c);
}

/* The body is valid: an OTP over WhatsApp needs its template's catalogue entry before the claim. */
static void otp_checked(og_smsreq_t *c)
{
    if (c->wa == NULL) {
        og_smsreq_claim(c);
        return;
    }
    if (c->gw->tpl == NULL) {
        og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "database unavailable: nothing was sent");
        og_smsreq_free(c);
        return;
    }
    og_tpl_lookup(c->gw->tpl, c->op, c->wa->num.waba_id, c->wa->name, c->wa->language, otp_tpl_found, c);
}

/* channels (API.md §18): default ["sms"]; distinct values of whatsapp_meta and sms, in fallback
 * order. Those the tenant has not enabled are skipped; none left: no_channel_available. */
static bool read_channels(og_smsreq_t *c, json_t *body, og_err_t *err)
{
    json_t *settings = c->auth.tenant->settings;
    json_t *channels = json_object_get(body, "channels");
    og_channel_t wanted[OG_OTP_CHANNELS] = {OG_CH_SMS};
    size_t n = 1;
    if (channels != NULL) {
        n = json_array_size(channels);
        if (!json_is_array(channels) || n == 0 || n > OG_OTP_CHANNELS)
            return og_err_fail(
                err, OG_E_VALIDATION_FAILED, "channels",
                "channels must be a non-empty array of distinct values of whatsapp_meta and sms, "
                "in fallback order");
        for (size_t i = 0; i < n; i++) {
            const char *name = json_string_value(json_array_get(channels, i));
            if (name == NULL || !og_channel_parse(name, &wanted[i]) || wanted[i] == OG_CH_WHATSAPP_QR)
                return og_err_fail(err, OG_E_VALIDATION_FAILED, "channels",
                                   "channels[%zu] must be whatsapp_meta or sms", i);
            if (i > 0 && wanted[i] == wanted[0])
                return og_err_fail(err, OG_E_VALIDATION_FAILED, "channels", "channels must be distinct");
        }
    }
    for (size_t i = 0; i < n; i++)
        if (og_settings_channel_enabled(settings, og_channel_name(wanted[i])))
            c->ch[c->nch++] = wanted[i];
    if (c->nch == 0 && channels == NULL)
        return og_err_fail(err, OG_E_NO_CHANNEL_AVAILABLE, NULL,
                           "the sms channel is not enabled for this tenant");
    if (c->nch == 0)
        return og_err_fail(err, OG_E_NO_CHANNEL_AVAILABLE, "channels",
                           "none of the requested channels is enabled for this tenant");
    c->attempts = c->nch; /* the claim's lease covers each of them */
    return true;
}

/* Drops the channels of the kinds c->to opted out of (API.md §21); none left: 422
 * recipient_opted_out. */
static bool otp_consent(og_smsreq_t *c, og_err_t *err)
{
    unsigned out;
    if (!og_consent_opted_out(c->gw->consent, c->auth.tenant->id, c->to, &out, err))
        return false;
    int kept = 0;
    for (int i = 0; i < c->nch; i++)
        if (!(og_consent_kind_of(c->ch[i]) & out))
            c->ch[kept++] = c->ch[i];
    c->nch = kept;
    c->attempts = kept;
    if (kept == 0)
        return og_err_fail(err, OG_E_RECIPIENT_OPTED_OUT, "to",
                           "%s opted out of every channel this OTP would use", c->to);
    return true;
}

static bool otp_validate(og_smsreq_t *c, json_t *body, og_err_t *err)
{
    const char *to = NULL, *tpl = OTP_DEFAULT_TPL, *sender = NULL;
    long long length = 6, ttl = 300;
    if (!og_json_get_string(body, "to", true, &to, err) ||
        !og_json_get_int(body, "length", false, OG_OTP_MIN_LEN, OG_OTP_MAX_LEN, &length, err) ||
        !og_json_get_int(body, "ttlSeconds", false, 60, 1800, &ttl, err) ||
        !og_json_get_string(body, "template", false, &tpl, err) ||
        !og_json_get_string(body, "sender", false, &sender, err))
        return false;
    if (!og_phone_e164_valid(to))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "to",
                           "to must be an E.164 number: + then 8-15 digits, the first 1-9");
    const char *at = strstr(tpl, "{code}");
    if (at == NULL || strstr(at + 6, "{code}") != NULL || strlen(tpl) > OTP_TEMPLATE_MAX)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "template",
                           "template must contain {code} exactly once and be at most %d bytes",
                           OTP_TEMPLATE_MAX);
    if (!read_channels(c, body, err))
        return false;
    snprintf(c->to, sizeof(c->to), "%s", to);
    if (!otp_consent(c, err))
        return false;
    c->length = (int)length;
    c->ttl = (int)ttl;
    snprintf(c->length_s, sizeof(c->length_s), "%d", c->length);
    snprintf(c->ttl_s, sizeof(c->ttl_s), "%d", c->ttl);
    if ((c->logged_text = strdup(tpl)) == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    if (tries(c, OG_CH_WHATSAPP_META) && !wa_plan(c, err))
        return false;
    if (!tries(c, OG_CH_SMS)) {
        /* The SMS text rules do not apply; a sender is still checked for its form. */
        if (sender != NULL && !og_phone_sender_valid(sender))
            return og_err_fail(
                err, OG_E_VALIDATION_FAILED, "sender",
                "sender must be 1-11 letters, digits or spaces, or a number of up to 15 digits");
        return true;
    }
    /* Validate and count segments on the text as sent: digits stand in for the code. */
    size_t len = strlen(tpl) - 6 + (size_t)c->length;
    if ((c->text = malloc(len + 1)) == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    snprintf(c->text, len + 1, "%.*s%.*s%s", (int)(at - tpl), tpl, c->length, "0000000000", at + 6);
    bool ok = og_smsreq_text_segments(c, "template", err) && og_smsreq_sender(c, sender, err);
    free(c->text);
    c->text = NULL;
    return ok;
}

/* ---- POST /api/sms/otp/verify -------------------------------------------------------------- */

static void verify_find(og_smsreq_t *c);

static void verify_answer_error(og_smsreq_t *c, const og_errcode_t *code, const char *message, json_t *data)
{
    og_err_t err = {0};
    og_err_fail(&err, code, NULL, "%s", message);
    if (!og_smsreq_build_answer(c, message, data, &err))
        return;
    if (!c->idem.claimed) {
        og_smsreq_answer(c);
        return;
    }
    /* The answer is stored for idempotent repeats, then sent. */
    og_db_op_clear(c->op);
    og_smsreq_submit(c, og_idem_complete_stmt(&c->idem, c->op, 0, c->status_s, c->response_text), true,
                     og_smsreq_committed);
}

/* Records the try as `event` (with the stored answer, if any) and answers what is built. */
static void verify_record(og_smsreq_t *c, const char *event)
{
    og_db_op_clear(c->op);
    if (event != NULL)
        og_q_otp_event(
            &c->op->stmts[0],
            &(og_q_otp_event_t){.tenant_id = c->auth.tenant->id, .reference = c->reference, .event = event});
    else
        og_q_otp_expire(&c->op->stmts[0],
                        &(og_q_otp_expire_t){.tenant_id = c->auth.tenant->id, .reference = c->reference});
    int n = 1 + og_idem_complete_stmt(&c->idem, c->op, 1, c->status_s, c->response_text);
    og_smsreq_submit(c, n, true, og_smsreq_committed);
}

static void verify_refused(og_smsreq_t *c, const og_errcode_t *code, const char *message, const char *event)
{
    og_err_t err = {0};
    og_err_fail(&err, code, NULL, "%s", message);
    if (!og_smsreq_build_answer(c, message, NULL, &err))
        return;
    verify_record(c, event);
}

/* The conditional update of a verify has committed. True when it changed the OTP's row;
 * otherwise the request is dealt with: a database error answered, or (another verify, a lock
 * or the clock got there first) the row judged again once, then refused with `code`. */
static bool verify_updated(og_smsreq_t *c, og_db_op_t *op, og_db_status_t st, const og_errcode_t *code)
{
    if (st != OG_DB_OK) {
        og_smsreq_db_failed(c, st);
        return false;
    }
    if (op->res[0] != NULL && PQntuples(op->res[0]) > 0)
        return true;
    if (!c->retried) {
        c->retried = true;
        og_db_op_clear(op);
        verify_find(c);
    } else {
        verify_refused(c, code, "this OTP can no longer be verified", "verify_failed");
    }
    return false;
}

static void verify_ok_done(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = op->arg;
    if (verify_updated(c, op, st, OG_E_OTP_ALREADY_VERIFIED))
        og_smsreq_answer(c);
}

static void verify_bad_done(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = op->arg;
    if (!verify_updated(c, op, st, OG_E_OTP_EXPIRED))
        return;
    int failed = atoi(PQgetvalue(op->res[0], 0, OG_C_OTP_VERIFY_BAD_FAILED_ATTEMPTS));
    int remaining = failed >= OTP_MAX_FAILURES ? 0 : OTP_MAX_FAILURES - failed;
    og_db_op_clear(op);
    json_t *data = json_pack("{s:s,s:i}", "reference", c->reference, "attemptsRemaining", remaining);
    verify_answer_error(c, OG_E_OTP_INVALID, "wrong code", data);
}

static void verify_found(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = og_smsreq_step(op, st);
    if (c == NULL)
        return;
    PGresult *r = op->res[0];
    if (r == NULL || PQntuples(r) == 0) {
        og_db_op_clear(op);
        verify_answer_error(c, OG_E_NOT_FOUND, "no such OTP", NULL);
        return;
    }
    snprintf(c->reference, sizeof(c->reference), "%s", PQgetvalue(r, 0, OG_OTP_REFERENCE));
    char stored[65];
    snprintf(stored, sizeof(stored), "%s", PQgetvalue(r, 0, OG_OTP_CODE_HASH));
    char status[16];
    snprintf(status, sizeof(status), "%s", PQgetvalue(r, 0, OG_OTP_STATUS));
    bool expired = PQgetvalue(r, 0, OG_OTP_EXPIRED)[0] == 't';
    og_db_op_clear(op);

    if (strcmp(status, "verified") == 0) {
        verify_refused(c, OG_E_OTP_ALREADY_VERIFIED, "this OTP was already verified", "verify_failed");
    } else if (strcmp(status, "locked") == 0) {
        /* A new OTP can be asked for once the send cooldown has passed. */
        snprintf(c->retry_after, sizeof(c->retry_after), "30");
        verify_refused(c, OG_E_OTP_LOCKED, "too many wrong codes: request a new OTP", "verify_failed");
    } else if (strcmp(status, "pending") == 0 && expired) {
        verify_refused(c, OG_E_OTP_EXPIRED, "this OTP has expired", NULL);
    } else if (strcmp(status, "pending") != 0) {
        verify_refused(c, OG_E_OTP_EXPIRED,
                       strcmp(status, "superseded") == 0 ? "this OTP was superseded by a newer one"
                                                         : "this OTP is no longer valid",
                       "verify_failed");
    } else {
        char hash[65];
        og_otp_hash(c->gw->w->cfg->secret, c->auth.tenant->id, c->reference, c->code, hash);
        bool right = og_ct_equal(hash, stored, 64);
        /* og_q_otp_verify_bad_t is the same type: the two updates take the same parameters. */
        const og_q_otp_verify_ok_t otp = {.tenant_id = c->auth.tenant->id, .reference = c->reference};
        if (right) {
            og_q_otp_verify_ok(&c->op->stmts[0], &otp);
            json_t *data = json_pack("{s:s,s:b}", "reference", c->reference, "verified", 1);
            if (!og_smsreq_build_answer(c, "OTP verified", data, NULL))
                return;
            int n = 1 + og_idem_complete_stmt(&c->idem, c->op, 1, c->status_s, c->response_text);
            og_smsreq_submit(c, n, true, verify_ok_done);
        } else {
            og_q_otp_verify_bad(&c->op->stmts[0], &otp);
            og_smsreq_submit(c, 1, true, verify_bad_done);
        }
    }
}

static void verify_find(og_smsreq_t *c)
{
    if (c->reference[0])
        og_q_otp_find(&c->op->stmts[0],
                      &(og_q_otp_find_t){.tenant_id = c->auth.tenant->id, .reference = c->reference});
    else
        og_q_otp_find_to(&c->op->stmts[0],
                         &(og_q_otp_find_to_t){.tenant_id = c->auth.tenant->id, .to = c->to});
    og_smsreq_submit(c, 1, false, verify_found);
}

static bool verify_validate(og_smsreq_t *c, json_t *body, og_err_t *err)
{
    const char *ref = NULL, *to = NULL, *code = NULL;
    if (!og_json_get_string(body, "reference", false, &ref, err) ||
        !og_json_get_string(body, "to", false, &to, err) ||
        !og_json_get_string(body, "code", true, &code, err))
        return false;
    if ((ref == NULL) == (to == NULL))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, ref ? "to" : "reference",
                           "give either reference or to, not both");
    if (ref != NULL && !og_ids_reference_valid(ref))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "reference", "reference must look like kf_...");
    if (to != NULL && !og_phone_e164_valid(to))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "to", "to must be an E.164 number");
    size_t n = strlen(code);
    if (n < OG_OTP_MIN_LEN || n > OG_OTP_MAX_LEN || strspn(code, "0123456789") != n)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "code", "code must be 4-10 digits");
    snprintf(c->reference, sizeof(c->reference), "%s", ref ? ref : "");
    snprintf(c->to, sizeof(c->to), "%s", to ? to : "");
    snprintf(c->code, sizeof(c->code), "%s", code);
    return true;
}

/* ---- the routes ---------------------------------------------------------------------------- */

static const char *const otp_fields[] = {"to",     "length",   "ttlSeconds", "template",
                                         "sender", "channels", NULL};
static const char *const verify_fields[] = {"reference", "to", "code", NULL};
static const og_smsreq_kind_t otp_kind = {.route = "otp_send",
                                          .fields = otp_fields,
                                          .scope = OG_SCOPE_OTP,
                                          .calls_provider = true,
                                          .validate = otp_validate,
                                          .checked = otp_checked,
                                          .claimed = otp_claimed,
                                          .release = otp_release};
static const og_smsreq_kind_t verify_kind = {.route = "otp_verify",
                                             .fields = verify_fields,
                                             .scope = OG_SCOPE_OTP,
                                             .validate = verify_validate,
                                             .claimed = verify_find};

void og_otp_send(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_smsreq_start(req, ctx, &otp_kind);
}

void og_otp_verify(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_smsreq_start(req, ctx, &verify_kind);
}
