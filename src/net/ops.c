/*
 * Operational endpoints: /healthz, /readyz, /metrics and (compiled in only with -Dtest_routes=true)
 * the /__test/... routes the end-to-end tests drive. Responsible for answering them; apps
 * put them into their route tables with OG_OPS_ROUTES (worker.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "og_build.h"
#include "omnigate/api.h"
#include "omnigate/json.h"
#include "omnigate/ops.h"
#include "omnigate/worker.h"

void og_ops_healthz(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_api_reply(req, 200, "ok", json_pack("{s:s}", "status", "ok"), NULL, 0);
}

/* Prometheus text format, the sum of every worker of this instance (metrics.h). */
void og_ops_metrics(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_worker_t *w = ctx;
    size_t len = 0;
    char *text = og_metrics_render(w->metrics, &len);
    if (text == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "metrics are not available");
        return;
    }
    og_http_respond(req, 200, NULL, 0, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

void og_ops_readyz(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_worker_t *w = ctx;
    if (w->draining) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "instance is draining");
        return;
    }
    const char *why = w->app->not_ready ? w->app->not_ready(w) : NULL;
    if (why != NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, why);
        return;
    }
    og_api_reply(req, 200, "ready", json_pack("{s:s}", "status", "ready"), NULL, 0);
}

#if OG_TEST_ROUTES
typedef struct sleep_op {
    uv_timer_t timer;
    og_http_req_t *req;
} sleep_op_t;

static void sleep_closed(uv_handle_t *h)
{
    free(h->data);
}

static void sleep_fired(uv_timer_t *t)
{
    sleep_op_t *op = t->data;
    og_api_reply(op->req, 200, "slept", NULL, NULL, 0);
    uv_close((uv_handle_t *)&op->timer, sleep_closed);
}

/* The query parameter ms, an integer from 0 to max; otherwise answers 422 and returns -1. */
static long ms_param(og_http_req_t *req, long max)
{
    char buf[16];
    int n = og_query_param(req->query, req->query_len, "ms", buf, sizeof(buf));
    char *end = NULL;
    long ms = n > 0 ? strtol(buf, &end, 10) : -1;
    if (n <= 0 || *end != '\0' || ms < 0 || ms > max) {
        char why[64];
        snprintf(why, sizeof(why), "ms must be an integer between 0 and %ld", max);
        og_api_error(req, OG_E_VALIDATION_FAILED, "ms", why);
        return -1;
    }
    return ms;
}

/* GET /__test/sleep?ms=N: answers after N ms without blocking the loop. */
void og_ops_test_sleep(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_worker_t *w = ctx;
    long ms = ms_param(req, 60000);
    if (ms < 0)
        return;
    sleep_op_t *op = malloc(sizeof(*op));
    if (op == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return;
    }
    op->req = req;
    /* Tests wait for this line to know the request is in flight (not a sleep of their own). */
    og_log(&w->log, OG_LOG_INFO, "test sleep started", "\"requestId\":\"%s\",\"ms\":%ld", req->request_id,
           ms);
    uv_timer_init(&w->loop, &op->timer);
    op->timer.data = op;
    uv_timer_start(&op->timer, sleep_fired, (uint64_t)ms, 0);
}

/* GET /__test/block?ms=N: holds the loop for N ms (a callback that blocks), then answers. */
void og_ops_test_block(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    long ms = ms_param(req, 10000);
    if (ms < 0)
        return;
    struct timespec left = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
    og_api_reply(req, 200, "blocked", NULL, NULL, 0);
}

/* GET /__test/routes: the app's route table as the router sees it, {"routes": [{"method",
 * "pattern"}]}, in table order (test_openapi.py holds it against the OpenAPI document). */
void og_ops_test_routes(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_worker_t *w = ctx;
    json_t *list = json_array();
    for (size_t i = 0; i < w->app->nroutes; i++)
        json_array_append_new(list, json_pack("{s:s,s:s}", "method", w->app->routes[i].method, "pattern",
                                              w->app->routes[i].pattern));
    og_api_reply(req, 200, "routes", json_pack("{s:o}", "routes", list), NULL, 0);
}

/* POST /__test/echo: decodes the JSON body and returns it with its size. */
void og_ops_test_echo(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_err_t err = {0};
    json_t *body = og_json_decode_body(req, NULL, &err);
    if (body == NULL) {
        og_api_send_error(req, &err, NULL, NULL, NULL, 0);
        return;
    }
    og_api_reply(req, 200, "echo", json_pack("{s:I,s:o}", "bytes", (json_int_t)req->body_len, "body", body),
                 NULL, 0);
}
#endif
