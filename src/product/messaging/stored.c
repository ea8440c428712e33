/*
 * One attempt of a stored message. See include/product/omnigate/messaging/stored.h.
 */
#include "omnigate/messaging/stored.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/store.h"
#include "omnigate/tenants/settings.h"

/* What the attempt costs if accepted (API.md §22): its template's category on Meta. */
static void price(og_stored_attempt_t *a)
{
    og_rate_category_t cat =
        a->ch == OG_CH_WHATSAPP_META && a->template_json != NULL ? a->category : OG_CAT_NONE;
    og_cost_price(a->rates, a->settings, a->ch, a->to, cat, (int)a->sms.segments, &a->cost);
    a->sms_equiv = (og_cost_t){0};
    if (a->ch != OG_CH_SMS)
        og_cost_sms_equivalent(a->rates, a->settings, a->to, a->text, &a->sms_equiv);
}

const char *og_stored_sms_equiv_micros(og_stored_attempt_t *a, bool sent)
{
    return og_cost_param_micros(&a->sms_equiv, sent, a->sms_equiv_s);
}

const char *og_stored_cost_micros(og_stored_attempt_t *a, bool sent)
{
    return og_cost_param_micros(&a->cost, sent, a->cost_s);
}

const char *og_stored_cost_currency(const og_stored_attempt_t *a, bool sent)
{
    return og_cost_param_currency(&a->cost, sent);
}

void og_stored_params(og_stored_attempt_t *a)
{
    a->params = (og_send_params_t){.to = a->to, .text = a->text};
    og_settings_provider_account(a->settings, a->ch, &a->params.account); /* API.md §23 */
    a->token_sealed = false;
    a->sms = (og_sms_info_t){0};
    if (a->ch == OG_CH_SMS) {
        a->params.from = a->sender[0] ? a->sender : NULL;
        og_sms_encode_info(a->text, strlen(a->text), &a->sms);
        price(a);
        return;
    }
    price(a);
    og_settings_wa_number_t num;
    if (a->wa_from[0] && og_settings_wa_number(a->settings, og_channel_name(a->ch), a->wa_from, &num)) {
        a->params.from = a->wa_from;
        a->params.session = num.session;
        a->params.phone_number_id = num.phone_number_id;
        a->params.access_token = num.access_token;
        a->params.template_json = a->template_json;
        a->token_sealed = num.access_token_sealed;
    }
}

void og_stored_result_fix(const og_stored_attempt_t *a, og_attempt_result_t *r)
{
    if (a->token_sealed && r->error_code == OG_ERR_NOT_CONFIGURED)
        og_provider_fail(r, OG_ERR_NOT_CONFIGURED, "%s", OG_SETTINGS_UNOPENED_MESSAGE);
}

const char *og_stored_content(const og_stored_attempt_t *a)
{
    return a->ch == OG_CH_WHATSAPP_META && a->template_json != NULL ? "template" : NULL;
}

int og_stored_end_stmts(og_stored_attempt_t *a, const og_attempt_result_t *r, og_db_op_t *op, int n)
{
    snprintf(a->seq_s, sizeof(a->seq_s), "%d", a->seq);
    snprintf(a->latency_s, sizeof(a->latency_s), "%llu", (unsigned long long)(r->latency_us / 1000));
    snprintf(a->http_s, sizeof(a->http_s), "%d", r->http_status);
    int k = n;
    og_q_fallback_end(
        &op->stmts[k++],
        &(og_q_fallback_end_t){.tenant_id = a->tenant_id,
                               .reference = a->reference,
                               .seq = a->seq_s,
                               .status = r->sent ? "sent" : "failed",
                               .provider_id = r->sent ? r->provider_message_id : NULL,
                               .error_code = r->sent ? NULL : r->error_code,
                               .error_message = r->sent ? NULL : r->error_message,
                               .provider_code = !r->sent && r->provider_code[0] ? r->provider_code : NULL,
                               .http_status = r->http_status ? a->http_s : NULL,
                               .latency_ms = a->latency_s,
                               .cost_micros = og_stored_cost_micros(a, r->sent),
                               .currency = og_stored_cost_currency(a, r->sent),
                               .sms_equiv_micros = og_stored_sms_equiv_micros(a, r->sent)});
    return k - n + og_stored_sms_stmt(a, r, op, k);
}

int og_stored_sms_stmt(og_stored_attempt_t *a, const og_attempt_result_t *r, og_db_op_t *op, int n)
{
    if (a->ch != OG_CH_SMS)
        return 0;
    int k = n;
    free(a->sms_error_text);
    a->sms_error_text = NULL;
    if (!r->sent) {
        json_t *e = og_attempt_error_json(r);
        a->sms_error_text = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
    }
    snprintf(a->segments_s, sizeof(a->segments_s), "%d", (int)a->sms.segments);
    og_q_sms_record(&op->stmts[k++],
                    &(og_q_sms_record_t){.tenant_id = a->tenant_id,
                                         .reference = a->reference,
                                         .source = "omni",
                                         .to = a->to,
                                         .sender = a->sender,
                                         .text = a->text,
                                         .segments = a->segments_s,
                                         .encoding = og_sms_encoding_name(a->sms.encoding),
                                         .status = r->sent ? "sent" : "failed",
                                         .provider_id = r->sent ? r->provider_message_id : NULL,
                                         .error = a->sms_error_text,
                                         .cost_micros = og_stored_cost_micros(a, r->sent),
                                         .currency = og_stored_cost_currency(a, r->sent)});
    return k - n;
}

void og_stored_clear(og_stored_attempt_t *a)
{
    free(a->sms_error_text);
    a->sms_error_text = NULL;
}

void og_stored_start(const og_consent_t *consent, og_providers_t *prov, og_stored_attempt_t *a,
                     og_attempt_t *att)
{
    unsigned kind = og_consent_kind_of(a->ch);
    if (og_consent_suppressed(consent, a->tenant_id, a->to) & kind) {
        og_provider_fail(&att->result, OG_ERR_RECIPIENT_OPTED_OUT,
                         "%s opted out of %s after the message was accepted", a->to,
                         og_consent_kind_name(kind));
        att->done(att);
        return;
    }
    og_attempt_start(prov, a->ch, &a->params, att);
}
