/*
 * The steps the SMS routes share. See include/product/omnigate/messaging/sms_req.h.
 */
#include "omnigate/messaging/sms_req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/json.h"
#include "omnigate/messaging/budget.h"
#include "omnigate/queue/pacing.h"
#include "omnigate/queue/release.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/util.h"

void og_smsreq_free(og_smsreq_t *c)
{
    if (c->kind != NULL && c->kind->release != NULL)
        c->kind->release(c);
    og_db_op_free(c->op);
    og_tenant_release(c->auth.tenant);
    if (c->text != NULL)
        OPENSSL_cleanse(c->text, strlen(c->text));
    free(c->text);
    free(c->logged_text);
    free(c->error_text);
    for (int i = 0; i < OG_OTP_CHANNELS; i++)
        free(c->att_error[i]);
    free(c->events_text);
    free(c->response_text);
    OPENSSL_cleanse(c->code, sizeof(c->code));
    og_idem_clear(&c->idem);
    free(c);
}

/* The message went to a provider but its outcome could not be recorded (API.md §15): 502
 * outcome_unknown now, as a repeat with the key would get once the claim's lease is over. The
 * attempts are an OTP's earlier ones (each failed, or it would have been the last) and the last. */
static void outcome_unknown(og_smsreq_t *c, og_db_status_t st)
{
    og_log(&c->gw->w->log, OG_LOG_ERROR, "recording an SMS failed; its outcome is unknown",
           "\"requestId\":\"%s\",\"reference\":\"%s\",\"status\":%d,\"sqlstate\":\"%s\",\"error\":\"%s\"",
           c->req->request_id, c->reference, (int)st, c->op->sqlstate, c->op->error);
    json_t *attempts = json_array();
    for (int i = 0; i + 1 < c->engine.started; i++)
        json_array_append_new(
            attempts, json_pack("{s:s,s:s,s:o*}", "channel", og_channel_name(c->ch[i]), "status", "failed",
                                "error", c->att_error[i] ? json_loads(c->att_error[i], 0, NULL) : NULL));
    const og_attempt_result_t *r = &c->att.result;
    json_t *a =
        json_pack("{s:s,s:s}", "channel", og_channel_name(c->att_ch), "status", r->sent ? "sent" : "failed");
    if (r->sent)
        json_object_set_new(a, "providerMessageId", json_string(r->provider_message_id));
    else
        json_object_set_new(a, "error", og_attempt_error_json(r));
    json_array_append_new(attempts, a);
    og_idem_answer_unknown(c->req, c->reference, attempts,
                           "the provider was called but the outcome could not be recorded; do not send "
                           "again before checking the logs for the reference");
    og_smsreq_free(c);
}

void og_smsreq_db_failed(og_smsreq_t *c, og_db_status_t st)
{
    if (c->provider_called) {
        outcome_unknown(c, st);
        return;
    }
    if (!og_idem_answer_lost(c->req, c->op, st))
        og_answer_db_failure(c->req, &c->gw->w->log, c->op, st, "sms/otp query failed",
                             "database unavailable");
    og_smsreq_free(c);
}

og_smsreq_t *og_smsreq_step(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = op->arg;
    if (st == OG_DB_OK)
        return c;
    og_smsreq_db_failed(c, st);
    return NULL;
}

void og_smsreq_submit(og_smsreq_t *c, int nstmts, bool write, og_db_done_fn done)
{
    c->op->nstmts = nstmts;
    c->op->write = write;
    c->op->done = done;
    c->op->arg = c;
    og_db_submit(c->gw->db, c->op);
}

/* Sends the answer built in c->response_text (after its rows are committed). */
void og_smsreq_answer(og_smsreq_t *c)
{
    og_http_header_t h = {"Retry-After", 11, c->retry_after, strlen(c->retry_after)};
    og_http_respond(c->req, c->status, &h, c->retry_after[0] ? 1 : 0, "application/json", c->response_text,
                    c->response_len);
    og_smsreq_free(c);
}

/* The route's rows (and the stored answer) are committed: send the answer. */
void og_smsreq_committed(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = og_smsreq_step(op, st);
    if (c == NULL)
        return;
    og_smsreq_answer(c);
}

/* Builds the answer into c->response_text: 200 without `err`, else the status of its code. On
 * failure (out of memory) answers 503, frees c and returns false. */
bool og_smsreq_build_answer(og_smsreq_t *c, const char *message, json_t *data, const og_err_t *err)
{
    c->status = err != NULL ? og_api_status(err->code) : 200;
    snprintf(c->status_s, sizeof(c->status_s), "%d", c->status);
    c->response_text = og_api_envelope(c->status, message, data, err, NULL, &c->response_len);
    if (c->response_text != NULL)
        return true;
    og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "out of memory");
    og_smsreq_free(c);
    return false;
}

/* The op of the write after the provider's answer (og_smsreq_start_sms let the last one go). On
 * failure (out of memory) answers 503 like og_smsreq_build_answer, frees c and returns false. */
bool og_smsreq_new_op(og_smsreq_t *c)
{
    if ((c->op = og_db_op_new()) != NULL)
        return true;
    og_api_error(c->req, OG_E_UNAVAILABLE, NULL, "out of memory");
    og_smsreq_free(c);
    return false;
}

/* ---- shared validation --------------------------------------------------------------------- */

/* The sms channel must be enabled; the sender must be approved (or the default exists). */
bool og_smsreq_sender(og_smsreq_t *c, const char *sender, og_err_t *err)
{
    json_t *settings = c->auth.tenant->settings;
    if (!og_settings_channel_enabled(settings, "sms"))
        return og_err_fail(err, OG_E_NO_CHANNEL_AVAILABLE, NULL,
                           "the sms channel is not enabled for this tenant");
    return og_settings_sms_sender(settings, sender, c->sender, sizeof(c->sender), err);
}

bool og_smsreq_text_segments(og_smsreq_t *c, const char *field, og_err_t *err)
{
    size_t nchars;
    if (!og_text_validate(c->text, strlen(c->text), &nchars))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, field,
                           "%s must be 1-4096 characters of valid UTF-8, not only whitespace", field);
    og_sms_encode_info(c->text, strlen(c->text), &c->sms);
    if (c->sms.segments > OG_SMS_MAX_SEGMENTS)
        return og_err_fail(err, OG_E_TEXT_TOO_LONG, field, "the text needs %zu SMS segments, more than %d",
                           c->sms.segments, OG_SMS_MAX_SEGMENTS);
    snprintf(c->segments_s, sizeof(c->segments_s), "%zu", c->sms.segments);
    return true;
}

/* An attempt has ended: its provider call counts against its sender's rate, shared with queued
 * sends (§19), then the request goes on. */
static void attempt_ended(og_attempt_t *a)
{
    og_smsreq_t *c = a->arg;
    og_queue_debit(c->gw->queue, c->auth.tenant->id, c->att_ch,
                   og_pacing_sender(c->att_ch, c->sender, c->params.session, c->params.phone_number_id),
                   c->sms.segments, &a->result);
    c->att_done(a);
}

void og_smsreq_start_attempt(og_smsreq_t *c, og_channel_t ch, void (*done)(og_attempt_t *))
{
    c->att.done = attempt_ended;
    c->att.arg = c;
    c->att_done = done;
    c->att_ch = ch;
    c->provider_called = true;
    og_db_op_free(c->op); /* its step is over; the attempt's ending takes a new one */
    c->op = NULL;
    og_settings_provider_account(c->auth.tenant->settings, ch, &c->params.account); /* API.md §23 */
    og_attempt_start(&c->gw->prov, ch, &c->params, &c->att);
}

void og_smsreq_start_sms(og_smsreq_t *c, void (*done)(og_attempt_t *))
{
    c->params = (og_send_params_t){.to = c->to, .text = c->text, .from = c->sender};
    og_smsreq_start_attempt(c, OG_CH_SMS, done);
}

void og_smsreq_price(og_smsreq_t *c, bool sent)
{
    c->cost = (og_cost_t){0};
    if (sent)
        og_cost_price(og_consent_rates(c->gw->consent), c->auth.tenant->settings, OG_CH_SMS, c->to,
                      OG_CAT_NONE, (int)c->sms.segments, &c->cost);
}

const char *og_smsreq_cost_micros(og_smsreq_t *c)
{
    return og_cost_param_micros(&c->cost, true, c->cost_s);
}

const char *og_smsreq_cost_currency(const og_smsreq_t *c)
{
    return og_cost_param_currency(&c->cost, true);
}

/* ---- the steps every kind runs ------------------------------------------------------------- */

static void claimed(og_idem_t *i)
{
    og_smsreq_t *c = i->arg;
    if (i->answered) {
        og_smsreq_free(c);
        return;
    }
    c->kind->claimed(c);
}

void og_smsreq_claim(og_smsreq_t *c)
{
    /* The longest the request can take: its provider attempts (none for a verify) and its writes. */
    og_idem_claim(&c->idem, c->gw->db, c->op, &c->gw->w->log, c->auth.tenant->id, c->kind->route,
                  og_send_budget_ms(c->gw->w->cfg, c->attempts), claimed, c);
}

static void authed(og_auth_req_t *a)
{
    og_smsreq_t *c = (og_smsreq_t *)a;
    if (a->tenant == NULL) {
        og_smsreq_free(c);
        return;
    }
    og_err_t err = {0};
    json_t *body = og_json_decode_body(c->req, c->kind->fields, &err);
    bool ok = body != NULL && c->kind->validate(c, body, &err);
    ok = ok && og_idem_read(&c->idem, c->req, &err);
    json_decref(body);
    if (!ok) {
        og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
        og_smsreq_free(c);
        return;
    }
    og_http_req_drop_input(c->req); /* all read: not kept through the provider's wait */
    if (c->kind->checked != NULL)
        c->kind->checked(c);
    else
        og_smsreq_claim(c);
}

static void consent_loaded(og_consent_wait_t *w)
{
    og_smsreq_t *c = container_of(w, og_smsreq_t, consent_wait);
    og_auth_tenant(c->gw->auth, &c->auth);
}

void og_smsreq_start(og_http_req_t *req, void *ctx, const og_smsreq_kind_t *kind)
{
    og_smsreq_t *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->op = og_db_op_new()) == NULL) {
        free(c);
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    c->gw = og_gw(ctx);
    c->req = req;
    c->kind = kind;
    c->attempts = kind->calls_provider ? 1 : 0;
    c->auth.req = req;
    c->auth.scope = kind->scope;
    c->auth.unified = false;
    c->auth.done = authed;
    c->auth.op = c->op;
    c->consent_wait.done = consent_loaded;
    og_consent_wait(c->gw->consent, &c->consent_wait);
}
