/*
 * Test-only routes of the gateway (compiled in with -Dtest_routes=true only: meson_options.txt;
 * deploy/test.sh builds with them): they arm the fault hooks of the database pool (og_db_test_fault) and of
 * the HTTP client (og_hc_test_fail_start) of the worker that serves them, and read the pool's statement
 * trace, so the end-to-end tests can force every failure a route's callers must answer.
 */
#ifndef OMNIGATE_APP_TESTHOOKS_H
#define OMNIGATE_APP_TESTHOOKS_H

#include "og_build.h"
#include "omnigate/http.h"
#include "omnigate/router.h"

// clang-format off
#if OG_TEST_ROUTES
void og_test_fault_set(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_test_fault_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_test_trace(og_http_req_t *req, const og_route_match_t *m, void *ctx);
#define OG_TESTHOOK_ROUTES                            \
    {"POST", "/__test/fault", og_test_fault_set},     \
    {"GET", "/__test/fault", og_test_fault_get},      \
    {"GET", "/__test/trace", og_test_trace},
#else
#define OG_TESTHOOK_ROUTES
#endif
// clang-format on

#endif
