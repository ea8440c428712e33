/*
 * What the SMS routes share (API.md §3): POST /api/sms/send (messaging/sms.c) and the OTP routes
 * (messaging/otp.c) are one kind of request each, run by the same steps: authenticate, read
 * the body, an optional check of the kind's own (the OTP's WhatsApp template), claim the
 * Idempotency-Key, then the kind's own statements and provider attempts (one SMS; an OTP's
 * channels one after another), and an answer sent after its rows are committed. Responsible
 * for those shared steps and the request's state; not for any route's statements or answer.
 * Private to messaging/.
 */
#ifndef OMNIGATE_MESSAGING_SMS_REQ_H
#define OMNIGATE_MESSAGING_SMS_REQ_H

#include <stdbool.h>

#include <jansson.h>

#include "omnigate/app/ctx.h"
#include "omnigate/consent/consent.h"
#include "omnigate/costs/rates.h"
#include "omnigate/error.h"
#include "omnigate/messaging/engine.h"
#include "omnigate/messaging/idem.h"
#include "omnigate/providers/provider.h"
#include "omnigate/router.h"
#include "omnigate/smsenc.h"
#include "omnigate/tenants/auth.h"

#define OG_SMS_MAX_SEGMENTS 10
#define OG_OTP_CHANNELS     2 /* the channels an OTP may be sent on: whatsapp_meta, sms */

typedef struct og_smsreq og_smsreq_t;

/* One route: its body's fields, scope and steps. */
typedef struct og_smsreq_kind {
    const char *route;         /* the Idempotency-Key's route name */
    const char *const *fields; /* the body's known fields, NULL-terminated */
    unsigned scope;            /* OG_SCOPE_* */
    bool calls_provider;       /* the claim's lease covers one attempt (validate may raise c->attempts) */
    /* Reads the body into c; false with `err` on the first bad field. */
    bool (*validate)(og_smsreq_t *c, json_t *body, og_err_t *err);
    /* Optional (NULL: none): the body is valid and the key read; a check that needs the
     * database, before the key is claimed. It goes on with og_smsreq_claim(c), or answers and
     * frees c. It may use c->op, which is free. */
    void (*checked)(og_smsreq_t *c);
    /* The key is claimed (or there is none): the route's first statement. */
    void (*claimed)(og_smsreq_t *c);
    /* Optional: frees what the kind's steps keep in c beyond these fields (c->wa). */
    void (*release)(og_smsreq_t *c);
} og_smsreq_kind_t;

/* OTP over WhatsApp (API.md §18): the Meta number and template of an OTP whose channels include
 * whatsapp_meta. otp.c's own; NULL for every other request. */
struct og_otp_wa;

typedef struct og_smsreq {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    og_consent_wait_t consent_wait;
    const og_smsreq_kind_t *kind;
    og_idem_t idem;
    og_db_op_t *op; /* the current database step's; none while a provider is called */
    og_attempt_t att;
    og_channel_t att_ch;              /* the channel of att's attempt (the last one started) */
    void (*att_done)(og_attempt_t *); /* what goes on once it ends (og_smsreq_start_attempt) */
    og_send_params_t params;
    og_sms_info_t sms;
    int attempts; /* provider attempts the request may make: the claim's lease covers them */

    char reference[32];
    char to[20];
    char sender[20];
    char *text;        /* what the provider gets (holds the OTP code) */
    char *logged_text; /* what the SMS record keeps (code masked) */
    char segments_s[8];
    char *error_text;
    og_cost_t cost;             /* what the SMS cost, once sent (og_smsreq_price) */
    char cost_s[OG_COST_PARAM]; /* cost.micros, for its record */

    /* OTP */
    int length;
    int ttl;
    char length_s[4], ttl_s[8];
    char code[16];
    char code_hash[65];
    char expires_at[40];
    bool retried;         /* verify: a lost race is re-read once */
    bool provider_called; /* a provider was called: a failed write now leaves the outcome unknown */
    char retry_after[8];  /* Retry-After of the answer, "" for none */
    /* OTP send: the channels to try, in fallback order, run by the engine one after another
     * (API.md §18: exactly one code, whichever delivers it); what each attempt gave. */
    og_channel_t ch[OG_OTP_CHANNELS];
    int nch;
    og_engine_t engine;
    /* A failed attempt's error object (JSON, the code masked). A sent attempt is the last one:
     * its provider message id is still in att.result when the engine is done. */
    char *att_error[OG_OTP_CHANNELS];
    char *events_text; /* the history events of the attempts (otp_sent) */
    struct og_otp_wa *wa;

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

/* Prices c's SMS (API.md §22) when `sent`: c->cost and c->cost_s; the record's parameters are
 * then og_smsreq_cost_micros(c) and og_smsreq_cost_currency(c) (NULL without a cost). */
void og_smsreq_price(og_smsreq_t *c, bool sent);
const char *og_smsreq_cost_micros(og_smsreq_t *c);
const char *og_smsreq_cost_currency(const og_smsreq_t *c);

/* Claims the Idempotency-Key (if any) for the longest c's attempts can take, then runs the kind's
 * claimed step: what a kind's `checked` step calls when it is content. */
void og_smsreq_claim(og_smsreq_t *c);

/* Calls channel ch's provider with c->params, which the caller has filled (they must stay valid
 * until done); done(attempt) gets c as its arg. The step's op is let go (og_smsreq_new_op makes
 * the next). */
void og_smsreq_start_attempt(og_smsreq_t *c, og_channel_t ch, void (*done)(og_attempt_t *));

/* Calls the SMS provider with c's to, text and sender; done(attempt) gets c as its arg. */
void og_smsreq_start_sms(og_smsreq_t *c, void (*done)(og_attempt_t *));

#endif
