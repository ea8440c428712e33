/*
 * The routes of inbound messages and consent (API.md §21): GET /api/inbound and its admin
 * mirror, the suppressions (GET /api/suppressions and its admin mirror, PUT and DELETE
 * /api/suppressions/{to}) and GET /api/recipients/{to} with its admin mirror. Responsible for
 * reading the requests and answering; the statements are sql/queries/inbound.sql, the rules of
 * a change og_consent_change (sql/021_inbound.sql). Not locked by the plan: like the templates,
 * these are no route of the unified API (API.md §1), and a tenant whose plan locks it must
 * still honour an opt-out.
 */
#ifndef OMNIGATE_CONSENT_CONSENT_API_H
#define OMNIGATE_CONSENT_CONSENT_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

void og_inbound_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_inbound_admin_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_suppression_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_suppression_admin_list(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_suppression_put(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_suppression_delete(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_recipient_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_recipient_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
