/*
 * Test-only fault routes. See include/product/omnigate/app/testhooks.h.
 *
 * POST /__test/fault {"point": "db", "statement": name|null, "status": "error"|"unavailable"|"lost",
 *                     "count": n}
 *   the next n database operations of this worker that contain the statement fail
 *   (og_db_test_fault); a statement runs on one pool only (log pages on the read pool, the
 *   rest on the write pool), so the fault is armed on both; null (any statement): the write
 *   pool only;
 * POST /__test/fault {"point": "hc_start", "count": n}
 *   the next n outbound HTTP requests of this worker are refused by the client;
 * GET /__test/fault  how many of each are still armed;
 * GET /__test/trace  the statements submitted since the previous call, by name, with counts
 *   (the first call starts tracing).
 */
#include "omnigate/app/testhooks.h"

#if OG_TEST_ROUTES

#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/ctx.h"
#include "omnigate/http_client.h"
#include "omnigate/json.h"
#include "omnigate/store.h"

static int stmt_by_name(const char *name)
{
    for (int i = 0; i < OG_Q__COUNT; i++)
        if (strcmp(og_store_stmts[i].name, name) == 0)
            return i;
    return -1;
}

void og_test_fault_set(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    (void)m;
    og_gw_t *gw = og_gw(ctx);
    static const char *const allowed[] = {"point", "statement", "status", "count", NULL};
    og_err_t err = {0};
    json_t *body = og_json_decode_body(req, allowed, &err);
    if (body == NULL) {
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    const char *point = json_string_value(json_object_get(body, "point"));
    const char *stmt = json_string_value(json_object_get(body, "statement"));
    const char *status = json_string_value(json_object_get(body, "status"));
    json_t *count = json_object_get(body, "count");
    int n = json_is_integer(count) ? (int)json_integer_value(count) : 1;
    int idx = stmt != NULL ? stmt_by_name(stmt) : -1;
    if (point != NULL && strcmp(point, "hc_start") == 0) {
        og_hc_test_fail_start(gw->hc, n);
    } else if (point == NULL || strcmp(point, "db") != 0) {
        og_api_error(req, OG_E_VALIDATION_FAILED, "point", "point must be db or hc_start");
        goto out;
    } else if (gw->db == NULL) {
        og_api_error(req, OG_E_VALIDATION_FAILED, "point", "no database configured");
        goto out;
    } else if (stmt != NULL && idx < 0) {
        og_api_error(req, OG_E_VALIDATION_FAILED, "statement", "no such statement");
        goto out;
    } else if (status == NULL || (strcmp(status, "error") != 0 && strcmp(status, "unavailable") != 0 &&
                                  strcmp(status, "lost") != 0)) {
        og_api_error(req, OG_E_VALIDATION_FAILED, "status", "status must be error, unavailable or lost");
        goto out;
    } else {
        og_db_status_t st = strcmp(status, "error") == 0 ? OG_DB_ERROR : OG_DB_UNAVAILABLE;
        og_db_test_fault(gw->db, idx, st, strcmp(status, "lost") == 0, n);
        if (gw->rdb != NULL)
            og_db_test_fault(gw->rdb, idx, st, strcmp(status, "lost") == 0, stmt != NULL ? n : 0);
    }
    og_api_reply(req, 200, "armed", NULL, NULL, 0);
out:
    json_decref(body);
}

void og_test_fault_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    (void)m;
    og_gw_t *gw = og_gw(ctx);
    /* Armed on both pools, hit on one: what is left is the smaller. */
    int left = gw->db != NULL ? og_db_test_fault_left(gw->db) : 0;
    if (gw->rdb != NULL && og_db_test_fault_left(gw->rdb) < left)
        left = og_db_test_fault_left(gw->rdb);
    og_api_reply(req, 200, "faults",
                 json_pack("{s:i,s:i}", "db", left, "hcStart", og_hc_test_fail_left(gw->hc)), NULL, 0);
}

void og_test_trace(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    (void)m;
    og_gw_t *gw = og_gw(ctx);
    uint32_t counts[OG_Q__COUNT] = {0};
    json_t *out = json_object();
    if (gw->db != NULL)
        og_db_test_trace(gw->db, counts);
    if (gw->rdb != NULL)
        og_db_test_trace(gw->rdb, counts);
    for (int i = 0; i < OG_Q__COUNT; i++)
        if (counts[i] > 0)
            json_object_set_new(out, og_store_stmts[i].name, json_integer(counts[i]));
    og_api_reply(req, 200, "trace", json_pack("{s:o}", "statements", out), NULL, 0);
}

#endif
