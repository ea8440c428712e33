/*
 * The message resource and the queue of API.md §19: GET /api/omni/messages/{reference} (scope
 * logs: any message as its unified log item), POST /api/omni/messages/{reference}/cancel (scope
 * send: a queued or scheduled message no provider works on becomes canceled; 409
 * not_cancelable otherwise) and GET /api/omni/queue (scope logs: the tenant's senders with
 * anything queued). Responsible for those routes; not for queueing (messaging/send.c) or
 * releasing (release.h).
 */
#ifndef OMNIGATE_QUEUE_MESSAGE_API_H
#define OMNIGATE_QUEUE_MESSAGE_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h). */
void og_queue_message_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_queue_message_cancel(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_queue_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
