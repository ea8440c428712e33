/*
 * POST /api/sms/send (API.md §3): one SMS to one number, on the sms channel only, recorded in the
 * SMS log. Responsible for that route; not for the SMS text rules (smsenc.h), nor for what it
 * shares with the OTP routes (messaging/sms_req.h).
 */
#ifndef OMNIGATE_MESSAGING_SMS_H
#define OMNIGATE_MESSAGING_SMS_H

#include "omnigate/http.h"
#include "omnigate/router.h"

/* Route handler; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h). */
void og_sms_send(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
