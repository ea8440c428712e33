/*
 * Batches (API.md §20): POST /api/omni/batches queues up to OMNIGATE_BATCH_MAX messages in one
 * request and one transaction, each checked as a send is (messaging/send_item.h) after its
 * `variables` fill the `{{key}}` placeholders of its text and template parameters; GET
 * /api/omni/batches/{batchId} reads its counts (kept by PostgreSQL as its messages change
 * status: sql/020_batches.sql), and POST .../cancel cancels what no provider has been called for.
 * Responsible for the batch routes; not for the delivery of its messages, which are queued
 * sends like any other (queue/release.h).
 */
#ifndef OMNIGATE_QUEUE_BATCH_API_H
#define OMNIGATE_QUEUE_BATCH_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* The body limit of POST /api/omni/batches: 1,000 messages of up to 4,096 characters. */
#define OG_BATCH_MAX_BODY (4u * 1024 * 1024)

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h). */
void og_batch_create(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_batch_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_batch_cancel(og_http_req_t *req, const og_route_match_t *m, void *ctx);
/* GET /admin/tenants/{id}/batches/{batchId}: the admin mirror of og_batch_get (the console). */
void og_batch_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
