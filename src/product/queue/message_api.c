/*
 * The message resource, cancel and the queue's view. See
 * include/product/omnigate/queue/message_api.h; the SQL is sql/queries/queue.sql.
 */
#include "omnigate/queue/message_api.h"

#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/ctx.h"
#include "omnigate/app/errors.h"
#include "omnigate/jw.h"
#include "omnigate/store.h"
#include "omnigate/tenants/auth.h"

typedef enum { ROUTE_GET, ROUTE_CANCEL, ROUTE_QUEUE } route_t;

typedef struct msg_req {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    og_db_op_t op;
    route_t route;
    char reference[40];
} msg_req_t;

static void req_free(msg_req_t *r)
{
    og_db_op_clear(&r->op);
    og_tenant_release(r->auth.tenant);
    free(r);
}

static void item_read(og_db_op_t *op, og_db_status_t st)
{
    msg_req_t *r = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(r->req, &r->gw->w->log, op, st, "reading a message failed",
                             "database unavailable");
        req_free(r);
        return;
    }
    /* Cancel: statement 0 says what happened, statement 1 reads the item after it. */
    const PGresult *item = op->res[op->nstmts - 1];
    if (PQntuples(item) != 1) {
        og_api_error(r->req, OG_E_NOT_FOUND, "reference", "no message with this reference");
        req_free(r);
        return;
    }
    const char *text = PQgetvalue(item, 0, OG_C_QUEUE_MESSAGE_ITEM);
    if (r->route == ROUTE_CANCEL &&
        strcmp(PQgetvalue(op->res[0], 0, OG_C_QUEUE_CANCEL_STATUS), "canceled") != 0) {
        og_err_t err = {0};
        og_err_fail(&err, OG_E_NOT_CANCELABLE, NULL,
                    "a provider has been called for this message, or it has ended: it cannot be canceled");
        og_answer_raw(r->req, og_api_status(err.code), err.message, text, &err);
    } else {
        og_answer_raw(r->req, 200, r->route == ROUTE_CANCEL ? "canceled" : "message", text, NULL);
    }
    req_free(r);
}

static void list_read(og_db_op_t *op, og_db_status_t st)
{
    msg_req_t *r = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(r->req, &r->gw->w->log, op, st, "reading the queue failed",
                             "database unavailable");
        req_free(r);
        return;
    }
    const PGresult *res = op->res[0];
    og_jw_t w;
    og_jw_init(&w, 256 + 256 * (size_t)PQntuples(res));
    og_jw_object(&w);
    og_jw_key(&w, "items");
    og_jw_array(&w);
    for (int i = 0; i < PQntuples(res); i++) {
        const char *item = PQgetvalue(res, i, OG_C_QUEUE_LIST_ITEM);
        if (i > 0)
            og_jw_raw(&w, ",", 1);
        og_jw_raw(&w, item, strlen(item));
    }
    og_jw_array_end(&w);
    og_jw_object_end(&w);
    char *data = og_jw_finish(&w, NULL);
    if (data == NULL)
        og_api_error(r->req, OG_E_UNAVAILABLE, NULL, "out of memory");
    else
        og_answer_raw(r->req, 200, "queue", data, NULL);
    free(data);
    req_free(r);
}

static void authed(og_auth_req_t *a)
{
    msg_req_t *r = (msg_req_t *)a;
    if (a->tenant == NULL) {
        req_free(r);
        return;
    }
    og_db_op_t *op = &r->op;
    og_db_op_clear(op);
    const char *tenant = a->tenant->id;
    int n = 0;
    if (r->route == ROUTE_QUEUE) {
        og_q_queue_list(&op->stmts[n++], &(og_q_queue_list_t){.tenant_id = tenant});
        op->done = list_read;
    } else {
        if (r->route == ROUTE_CANCEL)
            og_q_queue_cancel(&op->stmts[n++],
                              &(og_q_queue_cancel_t){.tenant_id = tenant, .reference = r->reference});
        og_q_queue_message(&op->stmts[n++],
                           &(og_q_queue_message_t){.tenant_id = tenant, .reference = r->reference});
        op->done = item_read;
    }
    op->nstmts = n;
    op->write = r->route == ROUTE_CANCEL;
    op->arg = r;
    og_db_submit(r->gw->db, op);
}

static void serve(og_http_req_t *req, const og_route_match_t *m, void *ctx, route_t route)
{
    og_gw_t *gw = og_gw(ctx);
    msg_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    r->gw = gw;
    r->req = req;
    r->route = route;
    /* References are "kf_" and 26 characters; anything else names no message. */
    if (route != ROUTE_QUEUE && !og_route_param(m, "reference", r->reference, sizeof(r->reference))) {
        free(r);
        og_api_error(req, OG_E_NOT_FOUND, "reference", "no message with this reference");
        return;
    }
    r->auth.req = req;
    r->auth.scope = route == ROUTE_CANCEL ? OG_SCOPE_SEND : OG_SCOPE_LOGS;
    r->auth.unified = true;
    r->auth.done = authed;
    r->auth.op = &r->op;
    og_auth_tenant(gw->auth, &r->auth);
}

void og_queue_message_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_GET);
}

void og_queue_message_cancel(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_CANCEL);
}

void og_queue_list(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_QUEUE);
}
