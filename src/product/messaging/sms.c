/*
 * POST /api/sms/send (API.md §3): one SMS, recorded in the SMS log with its segments and
 * encoding. The steps it shares with the OTP routes are in messaging/sms_req.c.
 */
#include "omnigate/consent/consent.h"
#include "omnigate/messaging/sms.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/errors.h"
#include "omnigate/ids.h"
#include "omnigate/json.h"
#include "omnigate/messaging/sms_req.h"
#include "omnigate/phone.h"
#include "omnigate/store.h"

static void sms_attempted(og_attempt_t *a)
{
    og_smsreq_t *c = a->arg;
    const og_attempt_result_t *r = &a->result;
    json_t *data =
        json_pack("{s:s,s:s,s:i,s:s}", "reference", c->reference, "status", r->sent ? "sent" : "failed",
                  "segments", (int)c->sms.segments, "encoding", og_sms_encoding_name(c->sms.encoding));
    og_err_t err = {0};
    og_smsreq_price(c, r->sent);
    json_object_set_new(data, "cost", og_cost_json(&c->cost));
    if (r->sent) {
        json_object_set_new(data, "providerMessageId", json_string(r->provider_message_id));
    } else {
        json_t *e = og_attempt_error_json(r);
        c->error_text = json_dumps(e, JSON_COMPACT);
        json_object_set_new(data, "error", e);
        og_err_fail(&err, OG_E_DELIVERY_FAILED, NULL, "the SMS provider did not accept the message");
    }
    if (!og_smsreq_build_answer(c, r->sent ? "SMS sent" : err.message, data, r->sent ? NULL : &err) ||
        !og_smsreq_new_op(c))
        return;
    og_q_sms_finish(&c->op->stmts[0],
                    &(og_q_sms_finish_t){.tenant_id = c->auth.tenant->id,
                                         .reference = c->reference,
                                         .status = r->sent ? "sent" : "failed",
                                         .provider_id = r->sent ? r->provider_message_id : NULL,
                                         .error = c->error_text,
                                         .cost_micros = og_smsreq_cost_micros(c),
                                         .currency = og_smsreq_cost_currency(c)});
    int n = 1 + og_idem_complete_stmt(&c->idem, c->op, 1, c->status_s, c->response_text);
    og_smsreq_submit(c, n, true, og_smsreq_committed);
}

static void sms_pending_done(og_db_op_t *op, og_db_status_t st)
{
    og_smsreq_t *c = og_smsreq_step(op, st);
    if (c == NULL)
        return;
    og_smsreq_start_sms(c, sms_attempted);
}

static void sms_claimed(og_smsreq_t *c)
{
    og_ids_reference_in(c->reference, og_ids_now_us(), &c->gw->ids);
    og_q_sms_pending(&c->op->stmts[0],
                     &(og_q_sms_pending_t){.tenant_id = c->auth.tenant->id,
                                           .reference = c->reference,
                                           .to = c->to,
                                           .sender = c->sender,
                                           .text = c->text,
                                           .segments = c->segments_s,
                                           .encoding = og_sms_encoding_name(c->sms.encoding)});
    og_smsreq_submit(c, 1 + og_idem_reference_stmt(&c->idem, c->op, 1, c->reference), true, sms_pending_done);
}

static bool sms_validate(og_smsreq_t *c, json_t *body, og_err_t *err)
{
    const char *to = NULL, *text = NULL, *sender = NULL;
    if (!og_json_get_string(body, "to", true, &to, err) ||
        !og_json_get_string(body, "text", true, &text, err) ||
        !og_json_get_string(body, "sender", false, &sender, err))
        return false;
    if (!og_phone_e164_valid(to))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "to",
                           "to must be an E.164 number: + then 8-15 digits, the first 1-9");
    snprintf(c->to, sizeof(c->to), "%s", to);
    unsigned out;
    if (!og_consent_opted_out(c->gw->consent, c->auth.tenant->id, c->to, &out, err))
        return false;
    if (out & OG_CONSENT_SMS)
        return og_err_fail(err, OG_E_RECIPIENT_OPTED_OUT, "to", "%s opted out of sms", to);
    if ((c->text = strdup(text)) == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    return og_smsreq_text_segments(c, "text", err) && og_smsreq_sender(c, sender, err);
}

static const char *const sms_fields[] = {"to", "text", "sender", NULL};
static const og_smsreq_kind_t sms_kind = {.route = "sms",
                                          .fields = sms_fields,
                                          .scope = OG_SCOPE_SEND,
                                          .calls_provider = true,
                                          .validate = sms_validate,
                                          .claimed = sms_claimed};

void og_sms_send(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_smsreq_start(req, ctx, &sms_kind);
}
