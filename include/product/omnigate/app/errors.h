/*
 * The product's error codes (API.md §0-§16): every code the gateway's routes answer beyond the
 * HTTP core's own (OG_API_ERRCODES in api.h: invalid_json, validation_failed, not_found,
 * unavailable, ...). Responsible for declaring each code once with its status; not for when a
 * route answers it (the features) or for the envelope (api.h).
 */
#ifndef OMNIGATE_APP_ERRORS_H
#define OMNIGATE_APP_ERRORS_H

#include "omnigate/api.h"

/* X(symbol, name, status), read by src/tools/errcodes.py too; see struct og_errcode. */
#define OG_APP_ERRCODES(X)                                                                                   \
    /* a provider webhook body of the wrong shape */                                                         \
    X(OG_E_INVALID_PAYLOAD, "invalid_payload", 400)                                                          \
    X(OG_E_UNAUTHORIZED, "unauthorized", 401)                                                                \
    /* a provider webhook's signature */                                                                     \
    X(OG_E_INVALID_SIGNATURE, "invalid_signature", 401)                                                      \
    /* Meta's subscription handshake with a wrong verify token */                                            \
    X(OG_E_FORBIDDEN, "forbidden", 403)                                                                      \
    X(OG_E_UNIFIED_API_LOCKED, "unified_api_locked", 403)                                                    \
    X(OG_E_INSUFFICIENT_SCOPE, "insufficient_scope", 403)                                                    \
    X(OG_E_IDEMPOTENCY_IN_PROGRESS, "idempotency_in_progress", 409)                                          \
    X(OG_E_OTP_ALREADY_VERIFIED, "otp_already_verified", 409)                                                \
    X(OG_E_CONFLICT, "conflict", 409)                                                                        \
    /* a delivery retried while the tenant has no enabled webhook */                                         \
    X(OG_E_WEBHOOK_DISABLED, "webhook_disabled", 409)                                                        \
    /* a queued message a provider is already working on, or that has ended (API.md §19) */                 \
    X(OG_E_NOT_CANCELABLE, "not_cancelable", 409)                                                            \
    /* a QR session's code asked for while the session is not waiting for a scan (API.md §23) */            \
    X(OG_E_SESSION_NOT_SCANNING, "session_not_scanning", 409)                                                \
    X(OG_E_OTP_EXPIRED, "otp_expired", 410)                                                                  \
    /* a batch of more messages than OMNIGATE_BATCH_MAX (API.md §20) */                                     \
    X(OG_E_BATCH_TOO_LARGE, "batch_too_large", 413)                                                          \
    X(OG_E_IDEMPOTENCY_KEY_REUSED, "idempotency_key_reused", 422)                                            \
    X(OG_E_WHATSAPP_FROM_NOT_REGISTERED, "whatsapp_from_not_registered", 422)                                \
    X(OG_E_SENDER_NOT_APPROVED, "sender_not_approved", 422)                                                  \
    X(OG_E_TEXT_TOO_LONG, "text_too_long", 422)                                                              \
    X(OG_E_NO_CHANNEL_AVAILABLE, "no_channel_available", 422)                                                \
    /* WhatsApp templates (API.md §18) */                                                                   \
    X(OG_E_TEMPLATE_NOT_FOUND, "template_not_found", 422)                                                    \
    X(OG_E_TEMPLATE_NOT_APPROVED, "template_not_approved", 422)                                              \
    X(OG_E_TEMPLATE_PARAMETERS_MISMATCH, "template_parameters_mismatch", 422)                                \
    /* queued sends (API.md §19) */                                                                         \
    X(OG_E_SEND_AT_OUT_OF_RANGE, "send_at_out_of_range", 422)                                                \
    /* a batch message's {{key}} without a value in its variables (API.md §20) */                           \
    X(OG_E_MISSING_VARIABLE, "missing_variable", 422)                                                        \
    /* every channel left is one the recipient opted out of (API.md §21) */                                 \
    X(OG_E_RECIPIENT_OPTED_OUT, "recipient_opted_out", 422)                                                  \
    X(OG_E_OTP_INVALID, "otp_invalid", 422)                                                                  \
    X(OG_E_RATE_LIMITED, "rate_limited", 429)                                                                \
    X(OG_E_OTP_COOLDOWN, "otp_cooldown", 429)                                                                \
    X(OG_E_OTP_LOCKED, "otp_locked", 429)                                                                    \
    X(OG_E_DELIVERY_FAILED, "delivery_failed", 502)                                                          \
    /* a provider call the gateway makes for itself failed (a template sync, API.md §18) */                 \
    X(OG_E_PROVIDER_ERROR, "provider_error", 502)                                                            \
    /* a repeat of a request whose instance died mid-send (API.md §15) */                                   \
    X(OG_E_OUTCOME_UNKNOWN, "outcome_unknown", 502)                                                          \
    /* a log query cancelled at OMNIGATE_LOG_QUERY_TIMEOUT_MS (API.md §16) */                               \
    X(OG_E_QUERY_TIMEOUT, "query_timeout", 503)
OG_APP_ERRCODES(OG_ERRCODE_EXTERN)

#endif
