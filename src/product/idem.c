/*
 * Idempotency keys. See include/product/omnigate/idem.h.
 */
#include "omnigate/idem.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "omnigate/store.h"

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
        return og_err_fail(err, "validation_failed", "Idempotency-Key",
                           "Idempotency-Key must be 1-255 printable ASCII characters");
    memcpy(i->key, v, len);
    i->key[len] = '\0';
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)i->req->body, i->req->body_len, md);
    for (int k = 0; k < SHA256_DIGEST_LENGTH; k++)
        snprintf(i->hash + 2 * k, 3, "%02x", md[k]);
    i->has_key = true;
    return true;
}

static void claimed(og_db_op_t *op, og_db_status_t st)
{
    og_idem_t *i = op->arg;
    if (st != OG_DB_OK) {
        og_api_error(i->req, "unavailable", NULL, "database unavailable: nothing was sent");
        i->answered = true;
    } else if (op->res[0] != NULL && PQntuples(op->res[0]) == 1) {
        i->claimed = true;
    } else {
        PGresult *k = op->res[1];
        i->answered = true;
        if (k == NULL || PQntuples(k) == 0) {
            /* The row vanished between the two statements (expired and pruned): rare; let
             * the client retry. */
            og_http_header_t h = {"Retry-After", 11, "1", 1};
            og_err_t err = {0};
            og_err_fail(&err, "idempotency_in_progress", NULL, "retry this request");
            og_api_send_error(i->req, &err, NULL, NULL, &h, 1);
        } else if (strcmp(PQgetvalue(k, 0, 0), i->route) != 0 || strcmp(PQgetvalue(k, 0, 1), i->hash) != 0) {
            og_api_error(i->req, "idempotency_key_reused", "Idempotency-Key",
                         "this Idempotency-Key was used with a different request");
        } else if (PQgetisnull(k, 0, 2)) {
            og_http_header_t h = {"Retry-After", 11, "1", 1};
            og_err_t err = {0};
            og_err_fail(&err, "idempotency_in_progress", NULL,
                        "the first request with this Idempotency-Key is still in flight");
            og_api_send_error(i->req, &err, NULL, NULL, &h, 1);
        } else {
            const char *body = PQgetvalue(k, 0, 3);
            og_http_header_t h = {"Idempotency-Replayed", 20, "true", 4};
            og_http_respond(i->req, atoi(PQgetvalue(k, 0, 2)), &h, 1, "application/json", body, strlen(body));
        }
    }
    og_db_op_clear(op);
    i->done(i);
}

void og_idem_claim(og_idem_t *i, og_db_t *db, const char *tenant_id, const char *route,
                   void (*done)(og_idem_t *i), void *arg)
{
    i->db = db;
    i->tenant_id = tenant_id;
    i->route = route;
    i->done = done;
    i->arg = arg;
    i->claimed = i->answered = false;
    if (!i->has_key) {
        i->done(i);
        return;
    }
    og_db_op_t *op = &i->op;
    memset(op, 0, sizeof(*op));
    op->nstmts = 2;
    op->stmts[0].stmt = OG_Q_IDEM_CLAIM;
    op->stmts[0].values[0] = i->tenant_id;
    op->stmts[0].values[1] = i->key;
    op->stmts[0].values[2] = i->route;
    op->stmts[0].values[3] = i->hash;
    op->stmts[1].stmt = OG_Q_IDEM_GET;
    op->stmts[1].values[0] = i->tenant_id;
    op->stmts[1].values[1] = i->key;
    op->write = true;
    op->done = claimed;
    op->arg = i;
    og_db_submit(i->db, op);
}

int og_idem_complete_stmt(og_idem_t *i, og_db_op_t *op, int slot, const char *status, const char *body)
{
    if (!i->claimed)
        return 0;
    op->stmts[slot].stmt = OG_Q_IDEM_COMPLETE;
    op->stmts[slot].values[0] = i->tenant_id;
    op->stmts[slot].values[1] = i->key;
    op->stmts[slot].values[2] = status;
    op->stmts[slot].values[3] = body;
    return 1;
}
