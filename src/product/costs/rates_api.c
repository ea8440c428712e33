/*
 * GET and PUT /admin/rates. See include/product/omnigate/costs/rates_api.h.
 */
#include "omnigate/costs/rates_api.h"

#include <stdlib.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/ctx.h"
#include "omnigate/costs/rates.h"
#include "omnigate/json.h"
#include "omnigate/store.h"
#include "omnigate/tenants/admin.h"

typedef struct rates_req {
    og_db_op_t op;
    og_gw_t *gw;
    og_http_req_t *req;
    char *card; /* PUT: the card as stored */
} rates_req_t;

static void done(og_db_op_t *op, og_db_status_t st)
{
    rates_req_t *r = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(r->req, &r->gw->w->log, op, st, "rate card: the statement failed",
                             "database unavailable");
    } else if (PQntuples(op->res[0]) == 0) {
        /* None was ever put: an empty card without a currency. */
        og_answer_raw(r->req, 200, "rates", "{\"currency\":null,\"rates\":[],\"updatedAt\":null}", NULL);
    } else {
        og_answer_raw(r->req, 200, "rates", PQgetvalue(op->res[0], 0, OG_C_RATES_GET_CARD), NULL);
    }
    og_db_op_clear(op);
    free(r->card);
    free(r);
}

static rates_req_t *req_new(og_http_req_t *req, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    if (!og_admin_db(req, gw))
        return NULL;
    rates_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    r->gw = gw;
    r->req = req;
    r->op.nstmts = 1;
    r->op.done = done;
    r->op.arg = r;
    return r;
}

void og_rates_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    rates_req_t *r = req_new(req, ctx);
    if (r == NULL)
        return;
    og_q_rates_get(&r->op.stmts[0]);
    og_db_submit(r->gw->db, &r->op);
}

void og_rates_admin_put(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    static const char *const fields[] = {"currency", "rates", NULL};
    og_err_t err = {0};
    json_t *body = og_json_decode_body(req, fields, &err);
    og_rate_card_t card;
    if (body == NULL || !og_rate_card_parse(body, "", &card, &err)) {
        json_decref(body);
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    og_rate_card_clear(&card);
    rates_req_t *r = req_new(req, ctx);
    if (r != NULL && (r->card = json_dumps(body, JSON_COMPACT)) == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        free(r);
        r = NULL;
    }
    json_decref(body);
    if (r == NULL)
        return;
    og_q_rates_put(&r->op.stmts[0], &(og_q_rates_put_t){.card = r->card});
    r->op.write = true;
    og_db_submit(r->gw->db, &r->op);
}
