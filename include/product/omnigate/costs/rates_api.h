/*
 * The global rate card's routes (API.md §22): GET and PUT /admin/rates (admin token). PUT
 * checks the card (costs/rates.h) and replaces it whole; both answer it as stored with its
 * updatedAt. Responsible for those two routes; the statements are sql/queries/costs.sql.
 */
#ifndef OMNIGATE_COSTS_RATES_API_H
#define OMNIGATE_COSTS_RATES_API_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* The body limit of PUT /admin/rates: 10,000 entries of about 100 bytes. */
#define OG_RATES_MAX_BODY (2u * 1024 * 1024)

void og_rates_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_rates_admin_put(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
