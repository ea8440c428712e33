/*
 * Operational endpoints every app serves: /healthz, /readyz, /metrics and, compiled in only
 * with -Dtest_routes=true, the /__test routes the end-to-end tests drive. Responsible for
 * answering them from the worker's state (handlers take the og_worker_t as ctx); apps put
 * them into their route tables with OG_OPS_ROUTES. Not for deciding readiness (the app's
 * not_ready hook does).
 */
#ifndef OMNIGATE_OPS_H
#define OMNIGATE_OPS_H

#include "og_build.h"
#include "omnigate/http.h"
#include "omnigate/router.h"

void og_ops_healthz(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_readyz(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_metrics(og_http_req_t *req, const og_route_match_t *m, void *ctx);

// clang-format off
#if OG_TEST_ROUTES
void og_ops_test_sleep(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_test_echo(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_test_block(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_ops_test_routes(og_http_req_t *req, const og_route_match_t *m, void *ctx);
#define OG_OPS_ROUTES                              \
    {"GET", "/healthz", og_ops_healthz},           \
    {"GET", "/readyz", og_ops_readyz},             \
    {"GET", "/metrics", og_ops_metrics},           \
    {"GET", "/__test/sleep", og_ops_test_sleep},   \
    {"GET", "/__test/block", og_ops_test_block},   \
    {"GET", "/__test/routes", og_ops_test_routes}, \
    {"POST", "/__test/echo", og_ops_test_echo}
#else
#define OG_OPS_ROUTES                              \
    {"GET", "/healthz", og_ops_healthz},           \
    {"GET", "/readyz", og_ops_readyz},             \
    {"GET", "/metrics", og_ops_metrics}
#endif
// clang-format on

#endif
