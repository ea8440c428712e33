/*
 * The gateway app served by `omnigate serve`: its route table and the wiring of every feature
 * into a worker (start and stop of the app context, app/ctx.h). Responsible for wiring; not for
 * any one route. Only main.c and the command line include it: it is the one module that knows
 * every feature.
 */
#ifndef OMNIGATE_APP_GATEWAY_H
#define OMNIGATE_APP_GATEWAY_H

#include "omnigate/worker.h"

extern const og_app_t og_gateway_app;

#endif
