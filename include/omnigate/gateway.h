/*
 * The gateway app served by `omnigate serve`: its routes and per-worker state (database
 * pool, auth cache, outbound HTTP). Responsible for wiring; not for any one route.
 */
#ifndef OMNIGATE_GATEWAY_H
#define OMNIGATE_GATEWAY_H

#include "omnigate/worker.h"

extern const og_app_t og_gateway_app;

#endif
