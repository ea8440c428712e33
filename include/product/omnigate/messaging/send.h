/*
 * POST /api/omni/send (API.md §2, §6): validation against the tenant's settings, the pending
 * message row committed before any provider call, the attempts run by the engine, then the
 * attempts, final status, SMS record and idempotent answer committed together, and only then
 * the answer. Responsible for the unified send route; not for how one attempt talks to a
 * provider (provider.h), for the order of attempts (engine.h) or for the SQL (store.h).
 */
#ifndef OMNIGATE_MESSAGING_SEND_H
#define OMNIGATE_MESSAGING_SEND_H

#include "omnigate/http.h"
#include "omnigate/metrics.h"
#include "omnigate/router.h"

/* The send route's metric block (metrics.h): one counter, of sends that skipped WhatsApp for a
 * number remembered as not on it (nowa.h). The app registers it and keeps it in its context
 * (app/ctx.h). */
extern const og_m_block_t og_send_metrics_block;

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h); its app context
 * is og_gw(ctx) (app/ctx.h). */
void og_send_omni(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
