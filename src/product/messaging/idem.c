/*
 * Idempotency keys. See include/product/omnigate/messaging/idem.h.
 */
#include "omnigate/messaging/idem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "omnigate/app/answer.h"
#include "omnigate/app/errors.h"
#include "omnigate/ids.h"
#include "omnigate/store.h"

#define OG_IDEM_TOKEN_HEX 32 /* a claim's token: 16 random bytes in hex */

bool og_idem_read(og_idem_t *i, og_http_req_t *req, og_err_t *err)
{
    i->req = req;
    size_t len;
    const char *v = og_http_req_header(i->req, "idempotency-key", &len);
    i->has_key = false;
    if (v == NULL)
        return true;
    bool ok = len >= 1 && len <= 255;
    for (size_t k = 0; ok && k < len; k++)
        ok = v[k] >= 0x20 && v[k] <= 0x7e;
    if (!ok)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "Idempotency-Key",
                           "Idempotency-Key must be 1-255 printable ASCII characters");
    i->key = malloc(len + 1 + 2 * SHA256_DIGEST_LENGTH + 1 + OG_IDEM_TOKEN_HEX + 1);
    if (i->key == NULL)
        return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    memcpy(i->key, v, len);
    i->key[len] = '\0';
    i->hash = i->key + len + 1;
    i->token = i->hash + 2 * SHA256_DIGEST_LENGTH + 1;
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)i->req->body, i->req->body_len, md);
    for (int k = 0; k < SHA256_DIGEST_LENGTH; k++)
        snprintf(i->hash + 2 * k, 3, "%02x", md[k]);
    unsigned char tok[OG_IDEM_TOKEN_HEX / 2];
    og_ids_random(tok, sizeof(tok));
    for (size_t k = 0; k < sizeof(tok); k++)
        snprintf(i->token + 2 * k, 3, "%02x", tok[k]);
    i->has_key = true;
    return true;
}

void og_idem_clear(og_idem_t *i)
{
    free(i->key);
    i->key = i->hash = i->token = NULL;
    i->has_key = false;
}

char *og_idem_unknown_body(const char *reference, json_t *attempts, const char *message, size_t *len)
{
    json_t *data = json_pack("{s:s,s:s,s:o}", "reference", reference, "status", "unknown", "attempts",
                             attempts != NULL ? attempts : json_array());
    og_err_t err = {0};
    og_err_fail(&err, OG_E_OUTCOME_UNKNOWN, NULL, "%s", message);
    return og_api_envelope(og_api_status(err.code), err.message, data, &err, NULL, len);
}

void og_idem_answer_unknown(og_http_req_t *req, const char *reference, json_t *attempts, const char *message)
{
    size_t len;
    char *body = og_idem_unknown_body(reference, attempts, message, &len);
    if (body == NULL) {
        og_api_error(req, OG_E_INTERNAL_ERROR, NULL, "out of memory");
        return;
    }
    og_http_header_t h = {"X-Omnigate-Reference", 20, reference, strlen(reference)};
    og_http_respond(req, 502, &h, 1, "application/json", body, len);
    free(body);
}

static void answer_in_progress(og_http_req_t *req, const char *message)
{
    og_http_header_t h = {"Retry-After", 11, "1", 1};
    og_err_t err = {0};
    og_err_fail(&err, OG_E_IDEMPOTENCY_IN_PROGRESS, NULL, "%s", message);
    og_api_send_error(req, &err, NULL, NULL, &h, 1);
}

static void in_progress(og_idem_t *i)
{
    answer_in_progress(i->req, "the first request with this Idempotency-Key is still in flight");
}

bool og_idem_answer_lost(og_http_req_t *req, const og_db_op_t *op, og_db_status_t st)
{
    if (st != OG_DB_ERROR || strcmp(op->sqlstate, OG_IDEM_LOST_SQLSTATE) != 0)
        return false;
    answer_in_progress(req, "a repeat of this request took its Idempotency-Key over after its lease; this "
                            "request sent nothing");
    return true;
}

static void finish(og_idem_t *i)
{
    og_db_op_clear(i->op);
    free(i->stale_body);
    i->stale_body = NULL;
    i->done(i);
}

/* The 502 outcome_unknown answer is stored for every later repeat: now answer this one. */
static void stale_stored(og_db_op_t *op, og_db_status_t st)
{
    og_idem_t *i = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(i->req, i->log, op, st, "storing an outcome_unknown answer failed",
                             "database unavailable: nothing was sent");
    } else {
        og_http_header_t h = {"Idempotency-Replayed", 20, "true", 4};
        og_http_respond(i->req, 502, &h, 1, "application/json", i->stale_body, strlen(i->stale_body));
    }
    finish(i);
}

/* An unfinished claim past its lease was resolved (sql/007 og_idem_stale). */
static void stale_resolved(og_db_op_t *op, og_db_status_t st)
{
    og_idem_t *i = op->arg;
    const PGresult *r = op->res[0];
    if (st != OG_DB_OK || r == NULL || PQntuples(r) != 1) {
        og_answer_db_failure(i->req, i->log, op, st != OG_DB_OK ? st : OG_DB_ERROR,
                             "resolving a stale claim failed", "database unavailable: nothing was sent");
        i->answered = true;
        finish(i);
        return;
    }
    const char *action = PQgetvalue(r, 0, OG_C_IDEM_STALE_ACTION);
    if (strcmp(action, "takeover") == 0) {
        i->claimed = true;
        finish(i);
        return;
    }
    i->answered = true;
    if (strcmp(action, "unknown") != 0) {
        in_progress(i);
        finish(i);
        return;
    }
    size_t len;
    i->stale_body = og_idem_unknown_body(
        PQgetvalue(r, 0, OG_C_IDEM_STALE_REFERENCE),
        json_loads(PQgetvalue(r, 0, OG_C_IDEM_STALE_ATTEMPTS), 0, NULL),
        "the instance serving the first request with this Idempotency-Key stopped before recording its "
        "outcome; it is never sent again",
        &len);
    if (i->stale_body == NULL) {
        og_api_error(i->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        finish(i);
        return;
    }
    og_db_op_clear(op);
    op->nstmts = 1;
    og_q_idem_complete(&op->stmts[0], &(og_q_idem_complete_t){.tenant_id = i->tenant_id,
                                                              .key = i->key,
                                                              .status = "502",
                                                              .body = i->stale_body,
                                                              .token = i->token});
    op->write = true;
    op->done = stale_stored;
    op->arg = i;
    og_db_submit(i->db, op);
}

static void resolve_stale(og_idem_t *i)
{
    og_db_op_t *op = i->op;
    og_db_op_clear(op);
    op->nstmts = 1;
    og_q_idem_stale(&op->stmts[0],
                    &(og_q_idem_stale_t){
                        .tenant_id = i->tenant_id, .key = i->key, .lease_ms = i->lease_s, .token = i->token});
    op->write = true;
    op->done = stale_resolved;
    op->arg = i;
    og_db_submit(i->db, op);
}

static void claimed(og_db_op_t *op, og_db_status_t st)
{
    og_idem_t *i = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(i->req, i->log, op, st, "claiming an idempotency key failed",
                             "database unavailable: nothing was sent");
        i->answered = true;
    } else if (op->res[0] != NULL && PQntuples(op->res[0]) == 1) {
        i->claimed = true;
    } else {
        PGresult *k = op->res[1];
        i->answered = true;
        if (k == NULL || PQntuples(k) == 0) {
            /* The row vanished between the two statements (expired and pruned): rare; let
             * the client retry. */
            in_progress(i);
        } else if (strcmp(PQgetvalue(k, 0, OG_C_IDEM_GET_ROUTE), i->route) != 0 ||
                   strcmp(PQgetvalue(k, 0, OG_C_IDEM_GET_REQUEST_HASH), i->hash) != 0) {
            og_api_error(i->req, OG_E_IDEMPOTENCY_KEY_REUSED, "Idempotency-Key",
                         "this Idempotency-Key was used with a different request");
        } else if (PQgetisnull(k, 0, OG_C_IDEM_GET_RESPONSE_STATUS) &&
                   PQgetvalue(k, 0, OG_C_IDEM_GET_LEASE_OVER)[0] == 't') {
            /* Unfinished past its lease: its instance died (API.md §15). */
            i->answered = false;
            resolve_stale(i);
            return;
        } else if (PQgetisnull(k, 0, OG_C_IDEM_GET_RESPONSE_STATUS)) {
            in_progress(i);
        } else {
            const char *body = PQgetvalue(k, 0, OG_C_IDEM_GET_RESPONSE_BODY);
            og_http_header_t h = {"Idempotency-Replayed", 20, "true", 4};
            og_http_respond(i->req, atoi(PQgetvalue(k, 0, OG_C_IDEM_GET_RESPONSE_STATUS)), &h, 1,
                            "application/json", body, strlen(body));
        }
    }
    finish(i);
}

void og_idem_claim(og_idem_t *i, og_db_t *db, og_db_op_t *op, og_log_t *log, const char *tenant_id,
                   const char *route, uint32_t lease_ms, void (*done)(og_idem_t *i), void *arg)
{
    i->op = op;
    snprintf(i->lease_s, sizeof(i->lease_s), "%u", lease_ms);
    i->db = db;
    i->log = log;
    i->tenant_id = tenant_id;
    i->route = route;
    i->done = done;
    i->arg = arg;
    i->claimed = i->answered = false;
    if (!i->has_key) {
        i->done(i);
        return;
    }
    og_db_op_clear(op);
    op->nstmts = 2;
    og_q_idem_claim(&op->stmts[0], &(og_q_idem_claim_t){.tenant_id = i->tenant_id,
                                                        .key = i->key,
                                                        .route = i->route,
                                                        .hash = i->hash,
                                                        .lease_ms = i->lease_s,
                                                        .token = i->token});
    og_q_idem_get(&op->stmts[1], &(og_q_idem_get_t){.tenant_id = i->tenant_id, .key = i->key});
    op->write = true;
    op->done = claimed;
    op->arg = i;
    og_db_submit(i->db, op);
}

int og_idem_complete_stmt(og_idem_t *i, og_db_op_t *op, int slot, const char *status, const char *body)
{
    if (!i->claimed)
        return 0;
    og_q_idem_complete(
        &op->stmts[slot],
        &(og_q_idem_complete_t){
            .tenant_id = i->tenant_id, .key = i->key, .status = status, .body = body, .token = i->token});
    return 1;
}

int og_idem_reference_stmt(og_idem_t *i, og_db_op_t *op, int slot, const char *reference)
{
    if (!i->claimed)
        return 0;
    og_q_idem_reference(&op->stmts[slot], &(og_q_idem_reference_t){.tenant_id = i->tenant_id,
                                                                   .key = i->key,
                                                                   .reference = reference,
                                                                   .token = i->token});
    return 1;
}
