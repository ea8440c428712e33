/*
 * One-time passwords (API.md §3): POST /api/sms/otp/send and /api/sms/otp/verify, on the steps
 * they share with POST /api/sms/send (messaging/sms_req.h). Abuse limits (30 s cooldown, 5 sends an hour per
 * tenant and number) live in PostgreSQL (sql/002_otp.sql) so they hold across instances; verification is a
 * conditional UPDATE so two right codes at once verify exactly once. The code itself exists
 * only in this process's memory between generation and the provider call: stored as an HMAC,
 * masked in the SMS record, never logged or returned.
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
#include "omnigate/messaging/idem.h"
#include "omnigate/ids.h"
#include "omnigate/json.h"
#include "omnigate/phone.h"
#include "omnigate/providers/provider.h"
#include "omnigate/tenants/settings.h"
#include "omnigate/smsenc.h"
#include "omnigate/store.h"
#include "omnigate/token.h"

#define OTP_MAX_FAILURES 5
#define OTP_DEFAULT_TPL  "Your verification code is {code}"
#define OTP_TEMPLATE_MAX 480

/* ---- POST /api/sms/otp/send ---------------------------------------------------------------- */

static void otp_attempted(og_attempt_t *a)
{
    og_smsreq_t *c = a->arg;
    const og_attempt_result_t *r = &a->result;
    OPENSSL_cleanse(c->text, strlen(c->text));
    json_t *data = json_pack("{s:s,s:s,s:s,s:i,s:s}", "reference", c->reference, "to", c->to, "expiresAt",
                             c->expires_at, "length", c->length, "status", r->sent ? "sent" : "failed");
    og_err_t err = {0};
    if (!r->sent) {
        json_t *e = og_attempt_error_json(r);
        c->error_text = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        og_err_fail(&err, OG_E_DELIVERY_FAILED, NULL, "the SMS with the code could not be sent");
    }
    if (!og_smsreq_build_answer(c, r->sent ? "OTP sent" : err.message, data, r->sent ? NULL : &err) ||
        !og_smsreq_new_op(c))
        return;
    og_db_op_t *op = c->op;
    og_q_otp_sent(&op->stmts[0], &(og_q_otp_sent_t){.tenant_id = c->auth.tenant->id,
                                                    .reference = c->reference,
                                                    .sent = r->sent ? "true" : "false"});
    og_q_sms_record(&op->stmts[1],
                    &(og_q_sms_record_t){.tenant_id = c->auth.tenant->id,
                                         .reference = c->reference,
                                         .source = "otp",
                                         .source_reference = c->reference,
                                         .to = c->to,
                                         .sender = c->sender,
                                         .text = c->logged_text,
                                         .segments = c->segments_s,
                                         .encoding = og_sms_encoding_name(c->sms.encoding),
                                         .status = r->sent ? "sent" : "failed",
                                         .provider_id = r->sent ? r->provider_message_id : NULL,
                                         .error = c->error_text});
    int n = 2 + og_idem_complete_stmt(&c->idem, op, 2, c->status_s, c->response_text);
    og_smsreq_submit(c, n, true, og_smsreq_committed);
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
    og_smsreq_start_sms(c, otp_attempted); /* frees op */
}

static void otp_claimed(og_smsreq_t *c)
{
    og_ids_reference(c->reference, og_ids_now_us());
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
    og_q_otp_begin(&c->op->stmts[0], &(og_q_otp_begin_t){.tenant_id = c->auth.tenant->id,
                                                         .to = c->to,
                                                         .reference = c->reference,
                                                         .code_hash = c->code_hash,
                                                         .length = c->length_s,
                                                         .ttl_s = c->ttl_s});
    og_smsreq_submit(c, 1 + og_idem_reference_stmt(&c->idem, c->op, 1, c->reference), true, otp_begun);
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
    snprintf(c->to, sizeof(c->to), "%s", to);
    c->length = (int)length;
    c->ttl = (int)ttl;
    snprintf(c->length_s, sizeof(c->length_s), "%d", c->length);
    snprintf(c->ttl_s, sizeof(c->ttl_s), "%d", c->ttl);
    if ((c->logged_text = strdup(tpl)) == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
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

static const char *const otp_fields[] = {"to", "length", "ttlSeconds", "template", "sender", NULL};
static const char *const verify_fields[] = {"reference", "to", "code", NULL};
static const og_smsreq_kind_t otp_kind = {.route = "otp_send",
                                          .fields = otp_fields,
                                          .scope = OG_SCOPE_OTP,
                                          .calls_provider = true,
                                          .validate = otp_validate,
                                          .claimed = otp_claimed};
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
