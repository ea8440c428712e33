/*
 * SMS and one-time passwords (API.md §3): POST /api/sms/send, /api/sms/otp/send and
 * /api/sms/otp/verify. Abuse limits (30 s cooldown, 5 sends an hour per tenant and number)
 * live in PostgreSQL (sql/002_otp.sql) so they hold across instances; verification is a
 * conditional UPDATE so two right codes at once verify exactly once. The code itself exists
 * only in this process's memory between generation and the provider call: stored as an HMAC,
 * masked in the SMS record, never logged or returned.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "omnigate/answer.h"
#include "omnigate/api.h"
#include "omnigate/auth.h"
#include "omnigate/otp.h"
#include "omnigate/gateway.h"
#include "omnigate/idem.h"
#include "omnigate/ids.h"
#include "omnigate/json.h"
#include "omnigate/phone.h"
#include "omnigate/provider.h"
#include "omnigate/settings.h"
#include "omnigate/smsenc.h"
#include "omnigate/store.h"
#include "omnigate/token.h"

#define SMS_MAX_SEGMENTS 10
#define OTP_MAX_FAILURES 5
#define OTP_DEFAULT_TPL  "Your verification code is {code}"
#define OTP_TEMPLATE_MAX 480

typedef enum { K_SMS, K_OTP_SEND, K_OTP_VERIFY } kind_t;

typedef struct sms_ctx {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    kind_t kind;
    og_idem_t idem;
    og_db_op_t *op; /* the current database step's; none while the SMS provider is called */
    og_attempt_t att;
    og_send_params_t params;
    og_sms_info_t sms;

    char reference[32];
    char to[20];
    char sender[20];
    char *text;        /* what the provider gets (holds the OTP code) */
    char *logged_text; /* what the SMS record keeps (code masked) */
    char segments_s[8];
    char *error_text;

    /* OTP */
    int length;
    int ttl;
    char length_s[4], ttl_s[8];
    char code[16];
    char code_hash[65];
    char expires_at[40];
    bool retried;         /* verify: a lost race is re-read once */
    bool provider_called; /* the SMS went out: a failed write now leaves the outcome unknown */
    char retry_after[8];  /* Retry-After of the answer, "" for none */

    char *response_text;
    size_t response_len;
    int status;
    char status_s[4];
} sms_ctx_t;

static void ctx_free(sms_ctx_t *c)
{
    og_db_op_free(c->op);
    og_tenant_release(c->auth.tenant);
    if (c->text != NULL)
        OPENSSL_cleanse(c->text, strlen(c->text));
    free(c->text);
    free(c->logged_text);
    free(c->error_text);
    free(c->response_text);
    OPENSSL_cleanse(c->code, sizeof(c->code));
    og_idem_clear(&c->idem);
    free(c);
}

/* The SMS went to the provider but its outcome could not be recorded (API.md §15): 502
 * outcome_unknown now, as a repeat with the key would get once the claim's lease is over. */
static void outcome_unknown(sms_ctx_t *c, og_db_status_t st)
{
    og_log(&c->gw->w->log, OG_LOG_ERROR, "recording an SMS failed; its outcome is unknown",
           "\"requestId\":\"%s\",\"reference\":\"%s\",\"status\":%d,\"sqlstate\":\"%s\",\"error\":\"%s\"",
           c->req->request_id, c->reference, (int)st, c->op->sqlstate, c->op->error);
    const og_attempt_result_t *r = &c->att.result;
    json_t *a = json_pack("{s:s,s:s}", "channel", "sms", "status", r->sent ? "sent" : "failed");
    if (r->sent)
        json_object_set_new(a, "providerMessageId", json_string(r->provider_message_id));
    else
        json_object_set_new(a, "error", og_attempt_error_json(r));
    og_idem_answer_unknown(c->req, c->reference, json_pack("[o]", a),
                           "the SMS provider was called but the outcome could not be recorded; do not send "
                           "again before checking the logs for the reference");
    ctx_free(c);
}

static void db_failed(sms_ctx_t *c, og_db_status_t st)
{
    if (c->provider_called) {
        outcome_unknown(c, st);
        return;
    }
    og_answer_db_failure(c->req, &c->gw->w->log, c->op, st, "sms/otp query failed", "database unavailable");
    ctx_free(c);
}

static void submit(sms_ctx_t *c, int nstmts, bool write, og_db_done_fn done)
{
    c->op->nstmts = nstmts;
    c->op->write = write;
    c->op->done = done;
    c->op->arg = c;
    og_db_submit(c->gw->db, c->op);
}

/* Sends the answer built in c->response_text (after its rows are committed). */
static void answer(sms_ctx_t *c)
{
    og_http_header_t h = {"Retry-After", 11, c->retry_after, strlen(c->retry_after)};
    og_http_respond(c->req, c->status, &h, c->retry_after[0] ? 1 : 0, "application/json", c->response_text,
                    c->response_len);
    ctx_free(c);
}

/* The route's rows (and the stored answer) are committed: send the answer. */
static void committed(og_db_op_t *op, og_db_status_t st)
{
    sms_ctx_t *c = op->arg;
    if (st != OG_DB_OK) {
        db_failed(c, st);
        return;
    }
    answer(c);
}

/* Builds the answer into c->response_text: 200 without `err`, else the status of its code. On
 * failure (out of memory) answers 503, frees c and returns false. */
static bool build_answer(sms_ctx_t *c, const char *message, json_t *data, const og_err_t *err)
{
    c->status = err != NULL ? og_api_status(err->code) : 200;
    snprintf(c->status_s, sizeof(c->status_s), "%d", c->status);
    c->response_text = og_api_envelope(c->status, message, data, err, NULL, &c->response_len);
    if (c->response_text != NULL)
        return true;
    og_api_error(c->req, "unavailable", NULL, "out of memory");
    ctx_free(c);
    return false;
}

/* The op of the write after the provider's answer (start_sms let the last one go). On failure
 * (out of memory) answers 503 like build_answer, frees c and returns false. */
static bool new_op(sms_ctx_t *c)
{
    if ((c->op = og_db_op_new()) != NULL)
        return true;
    og_api_error(c->req, "unavailable", NULL, "out of memory");
    ctx_free(c);
    return false;
}

/* ---- shared validation --------------------------------------------------------------------- */

/* The sms channel must be enabled; the sender must be approved (or the default exists). */
static bool sms_sender(sms_ctx_t *c, const char *sender, og_err_t *err)
{
    json_t *settings = c->auth.tenant->settings;
    if (!og_settings_channel_enabled(settings, "sms"))
        return og_err_fail(err, "no_channel_available", NULL,
                           "the sms channel is not enabled for this tenant");
    return og_settings_sms_sender(settings, sender, c->sender, sizeof(c->sender), err);
}

static bool text_segments(sms_ctx_t *c, const char *field, og_err_t *err)
{
    size_t nchars;
    if (!og_text_validate(c->text, strlen(c->text), &nchars))
        return og_err_fail(err, "validation_failed", field,
                           "%s must be 1-4096 characters of valid UTF-8, not only whitespace", field);
    og_sms_encode_info(c->text, strlen(c->text), &c->sms);
    if (c->sms.segments > SMS_MAX_SEGMENTS)
        return og_err_fail(err, "text_too_long", field, "the text needs %zu SMS segments, more than %d",
                           c->sms.segments, SMS_MAX_SEGMENTS);
    snprintf(c->segments_s, sizeof(c->segments_s), "%zu", c->sms.segments);
    return true;
}

static void start_sms(sms_ctx_t *c, void (*done)(og_attempt_t *))
{
    c->params = (og_send_params_t){.to = c->to, .text = c->text, .from = c->sender};
    c->att.done = done;
    c->att.arg = c;
    c->provider_called = true;
    og_db_op_free(c->op); /* its step is over; the attempt's ending takes a new one */
    c->op = NULL;
    og_attempt_start(&c->gw->prov, OG_CH_SMS, &c->params, &c->att);
}

/* ---- POST /api/sms/send -------------------------------------------------------------------- */

static void sms_attempted(og_attempt_t *a)
{
    sms_ctx_t *c = a->arg;
    const og_attempt_result_t *r = &a->result;
    json_t *data =
        json_pack("{s:s,s:s,s:i,s:s}", "reference", c->reference, "status", r->sent ? "sent" : "failed",
                  "segments", (int)c->sms.segments, "encoding", og_sms_encoding_name(c->sms.encoding));
    og_err_t err = {0};
    if (r->sent) {
        json_object_set_new(data, "providerMessageId", json_string(r->provider_message_id));
    } else {
        json_t *e = og_attempt_error_json(r);
        c->error_text = json_dumps(e, JSON_COMPACT);
        json_object_set_new(data, "error", e);
        og_err_fail(&err, "delivery_failed", NULL, "the SMS provider did not accept the message");
    }
    if (!build_answer(c, r->sent ? "SMS sent" : err.message, data, r->sent ? NULL : &err) || !new_op(c))
        return;
    const char **v = c->op->stmts[0].values;
    c->op->stmts[0].stmt = OG_Q_SMS_FINISH;
    v[0] = c->auth.tenant->id;
    v[1] = c->reference;
    v[2] = r->sent ? "sent" : "failed";
    v[3] = r->sent ? r->provider_message_id : NULL;
    v[4] = c->error_text;
    int n = 1 + og_idem_complete_stmt(&c->idem, c->op, 1, c->status_s, c->response_text);
    submit(c, n, true, committed);
}

static void sms_pending_done(og_db_op_t *op, og_db_status_t st)
{
    sms_ctx_t *c = op->arg;
    if (st != OG_DB_OK) {
        db_failed(c, st);
        return;
    }
    start_sms(c, sms_attempted);
}

static void sms_claimed(sms_ctx_t *c)
{
    og_ids_reference(c->reference, og_ids_now_us());
    const char **v = c->op->stmts[0].values;
    c->op->stmts[0].stmt = OG_Q_SMS_PENDING;
    v[0] = c->auth.tenant->id;
    v[1] = c->reference;
    v[2] = c->to;
    v[3] = c->sender;
    v[4] = c->text;
    v[5] = c->segments_s;
    v[6] = og_sms_encoding_name(c->sms.encoding);
    submit(c, 1 + og_idem_reference_stmt(&c->idem, c->op, 1, c->reference), true, sms_pending_done);
}

static bool sms_validate(sms_ctx_t *c, json_t *body, og_err_t *err)
{
    const char *to = NULL, *text = NULL, *sender = NULL;
    if (!og_json_get_string(body, "to", true, &to, err) ||
        !og_json_get_string(body, "text", true, &text, err) ||
        !og_json_get_string(body, "sender", false, &sender, err))
        return false;
    if (!og_phone_e164_valid(to))
        return og_err_fail(err, "validation_failed", "to",
                           "to must be an E.164 number: + then 8-15 digits, the first 1-9");
    snprintf(c->to, sizeof(c->to), "%s", to);
    if ((c->text = strdup(text)) == NULL)
        return og_err_fail(err, "unavailable", NULL, "out of memory");
    return text_segments(c, "text", err) && sms_sender(c, sender, err);
}

/* ---- POST /api/sms/otp/send ---------------------------------------------------------------- */

static void otp_attempted(og_attempt_t *a)
{
    sms_ctx_t *c = a->arg;
    const og_attempt_result_t *r = &a->result;
    OPENSSL_cleanse(c->text, strlen(c->text));
    json_t *data = json_pack("{s:s,s:s,s:s,s:i,s:s}", "reference", c->reference, "to", c->to, "expiresAt",
                             c->expires_at, "length", c->length, "status", r->sent ? "sent" : "failed");
    og_err_t err = {0};
    if (!r->sent) {
        json_t *e = og_attempt_error_json(r);
        c->error_text = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        og_err_fail(&err, "delivery_failed", NULL, "the SMS with the code could not be sent");
    }
    if (!build_answer(c, r->sent ? "OTP sent" : err.message, data, r->sent ? NULL : &err) || !new_op(c))
        return;
    og_db_op_t *op = c->op;
    const char **v = op->stmts[0].values;
    op->stmts[0].stmt = OG_Q_OTP_SENT;
    v[0] = c->auth.tenant->id;
    v[1] = c->reference;
    v[2] = r->sent ? "true" : "false";
    v = op->stmts[1].values;
    op->stmts[1].stmt = OG_Q_SMS_RECORD;
    v[0] = c->auth.tenant->id;
    v[1] = c->reference;
    v[2] = "otp";
    v[3] = c->reference;
    v[4] = c->to;
    v[5] = c->sender;
    v[6] = c->logged_text;
    v[7] = c->segments_s;
    v[8] = og_sms_encoding_name(c->sms.encoding);
    v[9] = r->sent ? "sent" : "failed";
    v[10] = r->sent ? r->provider_message_id : NULL;
    v[11] = c->error_text;
    int n = 2 + og_idem_complete_stmt(&c->idem, op, 2, c->status_s, c->response_text);
    submit(c, n, true, committed);
}

static void otp_begun(og_db_op_t *op, og_db_status_t st)
{
    sms_ctx_t *c = op->arg;
    if (st != OG_DB_OK) {
        db_failed(c, st);
        return;
    }
    PGresult *r = op->res[0];
    const char *outcome = PQgetvalue(r, 0, 0);
    if (strcmp(outcome, "ok") != 0) {
        const char *retry = PQgetvalue(r, 0, 1);
        og_http_header_t h = {"Retry-After", 11, retry, strlen(retry)};
        og_err_t err = {0};
        if (strcmp(outcome, "cooldown") == 0)
            og_err_fail(&err, "otp_cooldown", NULL, "one OTP per number every 30 seconds: retry in %s s",
                        retry);
        else
            og_err_fail(&err, "rate_limited", NULL, "at most 5 OTPs per number an hour: retry in %s s",
                        retry);
        /* Not stored for idempotency: a limit is not an outcome, a retry later may succeed. */
        og_api_send_error(c->req, &err, NULL, NULL, &h, 1);
        ctx_free(c);
        return;
    }
    snprintf(c->expires_at, sizeof(c->expires_at), "%s", PQgetvalue(r, 0, 2));
    start_sms(c, otp_attempted); /* frees op */
}

static void otp_claimed(sms_ctx_t *c)
{
    og_ids_reference(c->reference, og_ids_now_us());
    if (!og_otp_generate(c->code, c->length) ||
        !og_otp_hash(c->gw->w->cfg->secret, c->auth.tenant->id, c->reference, c->code, c->code_hash)) {
        og_api_error(c->req, "unavailable", NULL, "cannot generate a code");
        ctx_free(c);
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
        og_api_error(c->req, "unavailable", NULL, "out of memory");
        ctx_free(c);
        return;
    }
    snprintf(c->text, len + 1, "%.*s%s%s", (int)pre, tpl, c->code, at + 6);
    snprintf(masked, len + 1, "%.*s%.*s%s", (int)pre, tpl, c->length, "**********", at + 6);
    free(c->logged_text);
    c->logged_text = masked;
    const char **v = c->op->stmts[0].values;
    c->op->stmts[0].stmt = OG_Q_OTP_BEGIN;
    v[0] = c->auth.tenant->id;
    v[1] = c->to;
    v[2] = c->reference;
    v[3] = c->code_hash;
    v[4] = c->length_s;
    v[5] = c->ttl_s;
    submit(c, 1 + og_idem_reference_stmt(&c->idem, c->op, 1, c->reference), true, otp_begun);
}

static bool otp_validate(sms_ctx_t *c, json_t *body, og_err_t *err)
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
        return og_err_fail(err, "validation_failed", "to",
                           "to must be an E.164 number: + then 8-15 digits, the first 1-9");
    const char *at = strstr(tpl, "{code}");
    if (at == NULL || strstr(at + 6, "{code}") != NULL || strlen(tpl) > OTP_TEMPLATE_MAX)
        return og_err_fail(err, "validation_failed", "template",
                           "template must contain {code} exactly once and be at most %d bytes",
                           OTP_TEMPLATE_MAX);
    snprintf(c->to, sizeof(c->to), "%s", to);
    c->length = (int)length;
    c->ttl = (int)ttl;
    snprintf(c->length_s, sizeof(c->length_s), "%d", c->length);
    snprintf(c->ttl_s, sizeof(c->ttl_s), "%d", c->ttl);
    if ((c->logged_text = strdup(tpl)) == NULL)
        return og_err_fail(err, "unavailable", NULL, "out of memory");
    /* Validate and count segments on the text as sent: digits stand in for the code. */
    size_t len = strlen(tpl) - 6 + (size_t)c->length;
    if ((c->text = malloc(len + 1)) == NULL)
        return og_err_fail(err, "unavailable", NULL, "out of memory");
    snprintf(c->text, len + 1, "%.*s%.*s%s", (int)(at - tpl), tpl, c->length, "0000000000", at + 6);
    bool ok = text_segments(c, "template", err) && sms_sender(c, sender, err);
    free(c->text);
    c->text = NULL;
    return ok;
}

/* ---- POST /api/sms/otp/verify -------------------------------------------------------------- */

static void verify_find(sms_ctx_t *c);

static void verify_answer_error(sms_ctx_t *c, const char *code, const char *message, json_t *data)
{
    og_err_t err = {0};
    og_err_fail(&err, code, NULL, "%s", message);
    if (!build_answer(c, message, data, &err))
        return;
    if (!c->idem.claimed) {
        answer(c);
        return;
    }
    /* The answer is stored for idempotent repeats, then sent. */
    og_db_op_clear(c->op);
    submit(c, og_idem_complete_stmt(&c->idem, c->op, 0, c->status_s, c->response_text), true, committed);
}

/* Records the try as `event` (with the stored answer, if any) and answers what is built. */
static void verify_record(sms_ctx_t *c, const char *event)
{
    og_db_op_clear(c->op);
    const char **v = c->op->stmts[0].values;
    c->op->stmts[0].stmt = event ? OG_Q_OTP_EVENT : OG_Q_OTP_EXPIRE;
    v[0] = c->auth.tenant->id;
    v[1] = c->reference;
    v[2] = event;
    int n = 1 + og_idem_complete_stmt(&c->idem, c->op, 1, c->status_s, c->response_text);
    submit(c, n, true, committed);
}

static void verify_refused(sms_ctx_t *c, const char *code, const char *message, const char *event)
{
    og_err_t err = {0};
    og_err_fail(&err, code, NULL, "%s", message);
    if (!build_answer(c, message, NULL, &err))
        return;
    verify_record(c, event);
}

/* The conditional update of a verify has committed. True when it changed the OTP's row;
 * otherwise the request is dealt with: a database error answered, or (another verify, a lock
 * or the clock got there first) the row judged again once, then refused with `code`. */
static bool verify_updated(sms_ctx_t *c, og_db_op_t *op, og_db_status_t st, const char *code)
{
    if (st != OG_DB_OK) {
        db_failed(c, st);
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
    sms_ctx_t *c = op->arg;
    if (verify_updated(c, op, st, "otp_already_verified"))
        answer(c);
}

static void verify_bad_done(og_db_op_t *op, og_db_status_t st)
{
    sms_ctx_t *c = op->arg;
    if (!verify_updated(c, op, st, "otp_expired"))
        return;
    int failed = atoi(PQgetvalue(op->res[0], 0, 0));
    int remaining = failed >= OTP_MAX_FAILURES ? 0 : OTP_MAX_FAILURES - failed;
    og_db_op_clear(op);
    json_t *data = json_pack("{s:s,s:i}", "reference", c->reference, "attemptsRemaining", remaining);
    verify_answer_error(c, "otp_invalid", "wrong code", data);
}

static void verify_found(og_db_op_t *op, og_db_status_t st)
{
    sms_ctx_t *c = op->arg;
    if (st != OG_DB_OK) {
        db_failed(c, st);
        return;
    }
    PGresult *r = op->res[0];
    if (r == NULL || PQntuples(r) == 0) {
        og_db_op_clear(op);
        verify_answer_error(c, "not_found", "no such OTP", NULL);
        return;
    }
    snprintf(c->reference, sizeof(c->reference), "%s", PQgetvalue(r, 0, 0));
    char stored[65];
    snprintf(stored, sizeof(stored), "%s", PQgetvalue(r, 0, 1));
    char status[16];
    snprintf(status, sizeof(status), "%s", PQgetvalue(r, 0, 2));
    bool expired = PQgetvalue(r, 0, 3)[0] == 't';
    og_db_op_clear(op);

    if (strcmp(status, "verified") == 0) {
        verify_refused(c, "otp_already_verified", "this OTP was already verified", "verify_failed");
    } else if (strcmp(status, "locked") == 0) {
        /* A new OTP can be asked for once the send cooldown has passed. */
        snprintf(c->retry_after, sizeof(c->retry_after), "30");
        verify_refused(c, "otp_locked", "too many wrong codes: request a new OTP", "verify_failed");
    } else if (strcmp(status, "pending") == 0 && expired) {
        verify_refused(c, "otp_expired", "this OTP has expired", NULL);
    } else if (strcmp(status, "pending") != 0) {
        verify_refused(c, "otp_expired",
                       strcmp(status, "superseded") == 0 ? "this OTP was superseded by a newer one"
                                                         : "this OTP is no longer valid",
                       "verify_failed");
    } else {
        char hash[65];
        og_otp_hash(c->gw->w->cfg->secret, c->auth.tenant->id, c->reference, c->code, hash);
        bool right = og_ct_equal(hash, stored, 64);
        const char **v = c->op->stmts[0].values;
        c->op->stmts[0].stmt = right ? OG_Q_OTP_VERIFY_OK : OG_Q_OTP_VERIFY_BAD;
        v[0] = c->auth.tenant->id;
        v[1] = c->reference;
        if (right) {
            json_t *data = json_pack("{s:s,s:b}", "reference", c->reference, "verified", 1);
            if (!build_answer(c, "OTP verified", data, NULL))
                return;
            int n = 1 + og_idem_complete_stmt(&c->idem, c->op, 1, c->status_s, c->response_text);
            submit(c, n, true, verify_ok_done);
        } else {
            submit(c, 1, true, verify_bad_done);
        }
    }
}

static void verify_find(sms_ctx_t *c)
{
    const char **v = c->op->stmts[0].values;
    c->op->stmts[0].stmt = c->reference[0] ? OG_Q_OTP_FIND : OG_Q_OTP_FIND_TO;
    v[0] = c->auth.tenant->id;
    v[1] = c->reference[0] ? c->reference : c->to;
    submit(c, 1, false, verify_found);
}

static bool verify_validate(sms_ctx_t *c, json_t *body, og_err_t *err)
{
    const char *ref = NULL, *to = NULL, *code = NULL;
    if (!og_json_get_string(body, "reference", false, &ref, err) ||
        !og_json_get_string(body, "to", false, &to, err) ||
        !og_json_get_string(body, "code", true, &code, err))
        return false;
    if ((ref == NULL) == (to == NULL))
        return og_err_fail(err, "validation_failed", ref ? "to" : "reference",
                           "give either reference or to, not both");
    if (ref != NULL && !og_ids_reference_valid(ref))
        return og_err_fail(err, "validation_failed", "reference", "reference must look like kf_...");
    if (to != NULL && !og_phone_e164_valid(to))
        return og_err_fail(err, "validation_failed", "to", "to must be an E.164 number");
    size_t n = strlen(code);
    if (n < OG_OTP_MIN_LEN || n > OG_OTP_MAX_LEN || strspn(code, "0123456789") != n)
        return og_err_fail(err, "validation_failed", "code", "code must be 4-10 digits");
    snprintf(c->reference, sizeof(c->reference), "%s", ref ? ref : "");
    snprintf(c->to, sizeof(c->to), "%s", to ? to : "");
    snprintf(c->code, sizeof(c->code), "%s", code);
    return true;
}

/* ---- entry points ---------------------------------------------------------------------------- */

static void claimed(og_idem_t *i)
{
    sms_ctx_t *c = i->arg;
    if (i->answered) {
        ctx_free(c);
        return;
    }
    if (c->kind == K_SMS)
        sms_claimed(c);
    else if (c->kind == K_OTP_SEND)
        otp_claimed(c);
    else
        verify_find(c);
}

static void authed(og_auth_req_t *a)
{
    static const char *const sms_fields[] = {"to", "text", "sender", NULL};
    static const char *const otp_fields[] = {"to", "length", "ttlSeconds", "template", "sender", NULL};
    static const char *const verify_fields[] = {"reference", "to", "code", NULL};
    static const char *const routes[] = {"sms", "otp_send", "otp_verify"};
    sms_ctx_t *c = (sms_ctx_t *)a;
    if (a->tenant == NULL) {
        ctx_free(c);
        return;
    }
    og_err_t err = {0};
    const char *const *fields = c->kind == K_SMS        ? sms_fields
                                : c->kind == K_OTP_SEND ? otp_fields
                                                        : verify_fields;
    json_t *body = og_json_decode_body(c->req, fields, &err);
    bool ok = body != NULL;
    if (ok)
        ok = c->kind == K_SMS        ? sms_validate(c, body, &err)
             : c->kind == K_OTP_SEND ? otp_validate(c, body, &err)
                                     : verify_validate(c, body, &err);
    ok = ok && og_idem_read(&c->idem, c->req, &err);
    json_decref(body);
    if (!ok) {
        og_api_send_error(c->req, &err, NULL, NULL, NULL, 0);
        ctx_free(c);
        return;
    }
    og_http_req_drop_input(c->req); /* all read: not kept through the provider's wait */
    /* The longest the request can take: one provider attempt (none for a verify) and its writes. */
    uint32_t lease_ms = (uint32_t)(c->kind == K_OTP_VERIFY ? 0 : c->gw->w->cfg->attempt_timeout_ms) + 5000u;
    og_idem_claim(&c->idem, c->gw->db, c->op, &c->gw->w->log, a->tenant->id, routes[c->kind], lease_ms,
                  claimed, c);
}

static void start(og_http_req_t *req, void *ctx, kind_t kind)
{
    sms_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->op = og_db_op_new()) == NULL) {
        free(c);
        og_api_error(req, "unavailable", NULL, "out of memory");
        return;
    }
    c->gw = og_gw(ctx);
    c->req = req;
    c->kind = kind;
    c->auth.req = req;
    c->auth.scope = kind == K_SMS ? OG_SCOPE_SEND : OG_SCOPE_OTP;
    c->auth.unified = false;
    c->auth.done = authed;
    c->auth.op = c->op;
    og_auth_tenant(c->gw->auth, &c->auth);
}

void og_sms_send(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    start(req, ctx, K_SMS);
}

void og_otp_send(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    start(req, ctx, K_OTP_SEND);
}

void og_otp_verify(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    start(req, ctx, K_OTP_VERIFY);
}
