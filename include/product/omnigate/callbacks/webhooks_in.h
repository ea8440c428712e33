/*
 * Provider webhooks in (API.md §10): GET /webhooks/meta (the subscription handshake),
 * POST /webhooks/meta, /webhooks/twilio and /webhooks/waha. Each POST is authenticated by the
 * provider's own signature over the raw bytes received, with the secret of the account it
 * names (the configured one, or a tenant's own Twilio account or WAHA server, API.md §23; an
 * inbound message a tenant's account signed goes to that tenant only), parsed into delivery
 * statuses (channel, provider message id, status, time, error) and recorded in one write through the
 * group-commit path; the answer (200) goes out only after COMMIT, so a provider retries what
 * was not stored. Responsible for authenticating, parsing and mapping the providers' wire
 * formats; not for the rules of applying a status (sql/005_delivery_status.sql) or for
 * reading them back (logs_api.h). Meta's template status changes are recorded with the
 * statuses of their POST (templates/catalogue.h).
 */
#ifndef OMNIGATE_CALLBACKS_WEBHOOKS_IN_H
#define OMNIGATE_CALLBACKS_WEBHOOKS_IN_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "omnigate/error.h"
#include "omnigate/http.h"
#include "omnigate/metrics.h"
#include "omnigate/router.h"

/* The body limit of the webhook routes: Meta batches up to 1,000 statuses, up to 3 MB. */
#define OG_WEBHOOK_MAX_BODY (4u * 1024 * 1024)

/* The status callbacks' metric block (metrics.h): what became of each, by provider. The app
 * registers it and keeps it in its context (app/ctx.h). */
struct og_callbacks_metrics;
extern const og_m_block_t og_callbacks_metrics_block;

/* Route handlers; ctx is the og_worker_t of a worker serving og_gateway_app (app/gateway.h); its app context
 * is og_gw(ctx) (app/ctx.h). */
void og_webhook_meta_verify(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_webhook_meta(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_webhook_twilio(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_webhook_waha(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_webhook_twilio_inbound(og_http_req_t *req, const og_route_match_t *m, void *ctx);

/* ---- the parsers, for the handlers and the unit tests -------------------------------------
 * Each turns a body into a JSON array of statuses, the parameter of status_apply
 * (sql/queries/statuses.sql): {"channel", "pid", "status", "at" (Unix seconds, a number),
 * "code"?, "error"?, "message"?}, with status one of sent, delivered, read, failed,
 * undelivered. Events and statuses that report nothing (Twilio queued, WAHA PENDING, Meta's
 * messages and other fields) are left out, so the array may be empty. A body that does not
 * parse, or a status with a missing or mistyped field, is refused whole: NULL, with `err` set
 * (invalid_json or invalid_payload) and nothing recorded. `now` stands for the time of a
 * status whose provider gives none. */
json_t *og_webhook_parse_meta(const char *body, size_t len, double now, og_err_t *err);

/* Meta's body with its template status changes too (field message_template_status_update,
 * API.md §18): the statuses as og_webhook_parse_meta returns them, and in *templates (when the
 * statuses are returned) a JSON array of {"waba" (entry[].id), "name", "language", "status"},
 * one per template, its last change in the body winning. value.event gives the status
 * (REINSTATED: APPROVED; docs/providers.md lists the events); changes that are incomplete, of
 * another event, or of a name, language or WABA id no catalogue entry can have are left out. */
json_t *og_webhook_parse_meta_all(const char *body, size_t len, double now, json_t **templates,
                                  json_t **inbound, og_err_t *err);
json_t *og_webhook_parse_waha(const char *body, size_t len, double now, og_err_t *err);
json_t *og_webhook_parse_twilio(const char *body, size_t len, double now, og_err_t *err);

/* Inbound messages (API.md §21), when `inbound` is not NULL: in *inbound (when the statuses are
 * returned) a JSON array of the messages of the body as og_inbound_store
 * (sql/021_inbound.sql) takes them: {"channel", "pid" (the provider's message id), "from"
 * (E.164), "route" (Meta: value.metadata.phone_number_id; WAHA: session; Twilio: To),
 * "number"? (the tenant's number it came to, when the body says: WAHA's me.id digits),
 * "type" (Meta's type; WAHA's "text" or "media"; Twilio's "text" or "media"), "text"?, "at"
 * (Unix seconds), "phoneNumberId"? (Meta), "session"? (WAHA)}. A message missing its id, sender
 * or (Meta) timestamp refuses the body whole, as a bad status does. og_webhook_parse_meta_all
 * reads value.messages[]; og_webhook_parse_waha_all the event `message`, where a message not
 * from a phone number (fromMe, a group, a broadcast, an id that is not <digits>@c.us) is left
 * out and counted in *ignored; og_webhook_parse_twilio_inbound Twilio's incoming message
 * (MessageSid, From, To, Body, NumMedia; `now` its time), one from a short code or an
 * alphanumeric sender (no E.164 From) counted in *ignored.
 * WAHA's session.status event (API.md §23), when `session` is not NULL: in *session (when the
 * statuses are returned) {"session", "status" (as WAHA wrote it), "number"? (E.164 of me.id),
 * "atMs" (the event's timestamp, else `now`)}; NULL for other events. A session.status without
 * a valid session name or a payload.status refuses the body. */
json_t *og_webhook_parse_waha_all(const char *body, size_t len, double now, json_t **inbound, int *ignored,
                                  json_t **session, og_err_t *err);
json_t *og_webhook_parse_twilio_inbound(const char *body, size_t len, double now, int *ignored,
                                        og_err_t *err);

/* Twilio's signature: base64 of HMAC-SHA1(token, url + every form field of `body` sorted by
 * name, each as name then value, decoded, no separators). `url` is the full URL Twilio called
 * (OMNIGATE_PUBLIC_URL + path + query). Constant-time; false on a malformed form. */
bool og_webhook_twilio_signed(const char *token, const char *url, const char *body, size_t len,
                              const char *sig, size_t siglen);

/* The deliveryError code of API.md §10 for a failure with the provider's code `code` (may be
 * NULL) on channel `channel` ("whatsapp_meta", "whatsapp_qr" or "sms"). */
const char *og_webhook_delivery_error(const char *channel, const char *code);

#endif
