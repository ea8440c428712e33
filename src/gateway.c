/*
 * The gateway app: the route table of `omnigate serve` and the per-worker state behind it.
 * Responsible for wiring modules into a worker; not for what any route does.
 */
#include "omnigate/gateway.h"

static const og_route_t routes[] = {
    OG_OPS_ROUTES,
};

const og_app_t og_gateway_app = {
    .routes = routes,
    .nroutes = sizeof(routes) / sizeof(routes[0]),
};
