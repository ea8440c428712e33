/*
 * QR sessions (API.md §23): a tenant links its whatsapp_qr numbers' WAHA sessions through the
 * gateway. GET /api/whatsapp/sessions/{name} (what the gateway knows: the status WAHA's
 * session.status events said, sql/027), GET .../qr (the QR code's PNG from WAHA, while the
 * session waits for a scan), POST .../start (creates the session on the tenant's WAHA, or
 * updates and starts it, with the webhooks pointed back at the gateway and signed with the
 * server's webhook secret), POST .../stop and .../logout; scope keys, and admin mirrors under
 * /admin/tenants/{id}/whatsapp/sessions/. A session is the tenant's when one of its whatsapp_qr
 * numbers uses it (settings); the server is the tenant's own (channels.whatsapp_qr.server) or
 * the configured one (OMNIGATE_QR_*). Responsible for these routes; the session.status events
 * are stored by the webhook in (callbacks/webhooks_in.c, og_qr_session_event), and a send skips
 * a number whose session is known not WORKING (messaging/send.c).
 */
#ifndef OMNIGATE_QR_SESSIONS_H
#define OMNIGATE_QR_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "omnigate/http.h"
#include "omnigate/router.h"

#define OG_QR_SESSION_NAME_MAX 64     /* a session's name: letters, digits, '_' and '-' */
#define OG_QR_PNG_MAX          524288 /* the largest QR image taken from WAHA, bytes */
#define OG_QR_CALL_TIMEOUT_MS  10000  /* one call to WAHA's session API */

/* The statuses of a WAHA session (sql/027_qr_sessions.sql's check). */
#define OG_QR_WORKING      "WORKING"
#define OG_QR_SCAN_QR_CODE "SCAN_QR_CODE"
#define OG_QR_STOPPED      "STOPPED"

/* The skip reason of a whatsapp_qr number whose session is known not WORKING. */
#define OG_QR_SKIP_NOT_CONNECTED "session_not_connected"

/* Whether `name` is a session name the routes accept. */
bool og_qr_session_name_valid(const char *name, size_t len);

/* Whether the WAHA status `s` is one sql/027 stores. */
bool og_qr_status_valid(const char *s);

void og_qr_session_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_qr(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_start(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_stop(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_logout(og_http_req_t *req, const og_route_match_t *m, void *ctx);

void og_qr_session_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_admin_qr(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_admin_start(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_admin_stop(og_http_req_t *req, const og_route_match_t *m, void *ctx);
void og_qr_session_admin_logout(og_http_req_t *req, const og_route_match_t *m, void *ctx);

#endif
