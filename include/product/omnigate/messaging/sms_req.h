/*
 * What the SMS routes share (API.md §3): POST /api/sms/send (messaging/sms.c) and the OTP routes
 * (messaging/otp.c) are one kind of request each, run by the same steps: authenticate, read
 * the body, claim the Idempotency-Key, then the kind's own statements and at most one SMS
 * attempt, and an answer sent after its rows are committed. Responsible for those shared steps
 * and the request's state; not for any route's statements or answer. Private to messaging/.
 */
#ifndef OMNIGATE_MESSAGING_SMS_REQ_H
#define OMNIGATE_MESSAGING_SMS_REQ_H

#include <stdbool.h>

#include <jansson.h>

#include "omnigate/app/ctx.h"
#include "omnigate/error.h"
#include "omnigate/messaging/idem.h"
#include "omnigate/providers/provider.h"
#include "omnigate/router.h"
#include "omnigate/smsenc.h"
#include "omnigate/tenants/auth.h"

#define OG_SMS_MAX_SEGMENTS 10

typedef struct og_smsreq og_smsreq_t;

/* One route: its body's fields, scope and steps. */
typedef struct og_smsreq_kind {
    const char *route;         /* the Idempotency-Key's route name */
    const char *const *fields; /* the body's known fields, NULL-terminated */
    unsigned scope;            /* OG_SCOPE_* */
    bool calls_provider;       /* the claim's lease covers one SMS attempt */
    /* Reads the body into c; false with `err` on the first bad field. */
    bool (*validate)(og_smsreq_t *c, json_t *body, og_err_t *err);
    /* The key is claimed (or there is none): the route's first statement. */
    void (*claimed)(og_smsreq_t *c);
} og_smsreq_kind_t;

typedef struct og_smsreq {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    const og_smsreq_kind_t *kind;
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
} og_smsreq_t;

/* Runs a request of `kind` on route handler ctx `ctx`. */
void og_smsreq_start(og_http_req_t *req, void *ctx, const og_smsreq_kind_t *kind);

/* Frees c and everything it holds (the code wiped). */
void og_smsreq_free(og_smsreq_t *c);

/* Answers a failed database step (502 outcome_unknown once the provider was called) and frees c. */
void og_smsreq_db_failed(og_smsreq_t *c, og_db_status_t st);

/* The request of an op that ended with `st`: c when the step succeeded, else NULL once the
 * failure is answered and c freed (og_smsreq_db_failed). */
og_smsreq_t *og_smsreq_step(og_db_op_t *op, og_db_status_t st);

/* Submits c->op with its first `nstmts` statements; done(op) gets c as op->arg. */
void og_smsreq_submit(og_smsreq_t *c, int nstmts, bool write, og_db_done_fn done);

/* Sends the answer built in c->response_text (after its rows are committed) and frees c. */
void og_smsreq_answer(og_smsreq_t *c);

/* An op's done: the route's rows (and the stored answer) are committed, send the answer. */
void og_smsreq_committed(og_db_op_t *op, og_db_status_t st);

/* Builds the answer into c->response_text: 200 without `err`, else the status of its code. On
 * failure (out of memory) answers 503, frees c and returns false. */
bool og_smsreq_build_answer(og_smsreq_t *c, const char *message, json_t *data, const og_err_t *err);

/* The op of the write after the provider's answer (og_smsreq_start_sms let the last one go). On
 * failure (out of memory) answers 503, frees c and returns false. */
bool og_smsreq_new_op(og_smsreq_t *c);

/* The sms channel must be enabled; the sender must be approved (or the default exists). */
bool og_smsreq_sender(og_smsreq_t *c, const char *sender, og_err_t *err);

/* c->text must be a valid text of at most OG_SMS_MAX_SEGMENTS segments (`field` names it). */
bool og_smsreq_text_segments(og_smsreq_t *c, const char *field, og_err_t *err);

/* Calls the SMS provider with c's to, text and sender; done(attempt) gets c as its arg. */
void og_smsreq_start_sms(og_smsreq_t *c, void (*done)(og_attempt_t *));

#endif
