/*
 * SMS and one-time passwords (API.md §3): POST /api/sms/otp/send and
 * /api/sms/otp/verify, with the abuse limits held in PostgreSQL so they hold across
 * instances. Responsible for those routes and for keeping OTP codes out of every log and
 * answer; not for the SMS text rules (smsenc.h) or the code hashing (token.h).
 */
#ifndef OMNIGATE_MESSAGING_OTP_H
#define OMNIGATE_MESSAGING_OTP_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h); its app context
 * is og_gw(ctx) (app/ctx.h). */

void og_otp_send(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_otp_verify(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
