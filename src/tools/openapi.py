#!/usr/bin/env python3
"""Writes the OpenAPI 3.1 document of the gateway (API.md, every route of the router in
src/product/app/gateway.c) to src/product/static/openapi.json, which the build embeds and GET /openapi.json
serves.

usage: openapi.py [--check]   (--check: exit 1 when the committed JSON differs from this output)

The document is written from this script rather than by hand so that what every route shares
(the envelope, the errors of authentication, of a JSON body, of the database and of the HTTP
core) is written once and is the same on every route. Each operation lists every status its
handler can answer and, per status, the exact error codes (error.code is an enum per
response): read from the handlers (src/product/*/*.c, src/net/http_conn.c); each code's status is
the one its declaration gives it (errcodes.py reads them), and a code listed under another status
stops the script. test/e2e/test_openapi.py holds the document, the router and the wire together.
"""
import json
import os
import sys

import errcodes

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "product", "static", "openapi.json")


def ref(name):
    return {"$ref": "#/components/schemas/" + name}


def nullable(schema, description=None):
    """schema or null (JSON Schema 2020-12: no `nullable` in OpenAPI 3.1)."""
    o = {"anyOf": [schema, {"type": "null"}]}
    if description is not None:
        o["description"] = description
    return o


def obj(props, required=None, extra=False, **kw):
    o = {"type": "object", "properties": props, "required": sorted(required if required is not None else props),
         "additionalProperties": extra}
    o.update(kw)
    return o


# ---- shared schemas ------------------------------------------------------------------------

TIME = {"type": "string", "format": "date-time", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
        "description": "RFC 3339 UTC with milliseconds.", "examples": ["2026-11-22T14:05:25.123Z"]}
CHANNELS = ["whatsapp_qr", "whatsapp_meta", "sms"]
ATTEMPT_ERRORS = ["provider_timeout", "provider_unreachable", "provider_rejected", "provider_error",
                  "provider_rate_limited", "not_configured", "provider_unavailable"]
DELIVERY = ["sent", "delivered", "read", "failed", "undelivered"]
DELIVERY_ERRORS = ["not_on_whatsapp", "outside_window", "recipient_opted_out", "carrier_rejected",
                   "provider_error"]
SCOPES = ["send", "otp", "logs", "keys"]
WH_EVENTS = ["message.sent", "message.failed", "message.delivered", "message.read", "message.undelivered",
             "otp.verified", "otp.locked", "message.canceled", "message.expired", "batch.completed",
             "message.received", "recipient.opted_out", "recipient.opted_in"]
# What each event's body carries (API.md §12, §19-§21), for the webhook's descriptions.
WH_EVENTS_TEXT = ("Each event is POSTed as {\"type\", \"timestamp\", \"data\"}, signed (Standard Webhooks). "
                  "message.sent, message.failed, message.delivered, message.read, message.undelivered, "
                  "message.canceled, message.expired: data is the message's unified log item (OmniLogItem); "
                  "otp.verified, otp.locked: the OTP log item (OtpLogItem); batch.completed: the batch (Batch); "
                  "message.received: the inbound message (InboundItem, API.md §21); recipient.opted_out, "
                  "recipient.opted_in: the consent change (ConsentEvent), one event per kind of channel "
                  "changed.")
CONSENT_KINDS = ["sms", "whatsapp"]
CONSENT_SOURCES = ["keyword", "provider", "api"]
OMNI_STATUSES = ["pending", "sent", "failed", "unknown", "delivered", "read", "undelivered", "queued", "scheduled",
                 "canceled", "expired"]
SENDER_PATTERN = r"^(?=[A-Za-z0-9 ]*[A-Za-z])[A-Za-z0-9 ]{1,11}$|^[0-9]{1,15}$|^\+[1-9][0-9]{7,14}$"

SCHEMAS = {
    "Timestamp": TIME,
    "BatchId": {"type": "string", "pattern": "^kb_[0-9A-HJKMNP-TV-Z]{26}$",
                "description": "kb_ + 26 characters of Crockford base32, made like a Reference (API.md §20).",
                "examples": ["kb_01JD2W7T9S0QKX3M6F8N2B4C5E"]},
    "Reference": {"type": "string", "pattern": "^kf_[0-9A-HJKMNP-TV-Z]{26}$",
                  "description": "kf_ + 26 characters of Crockford base32 (48-bit millisecond time, then 80 "
                                 "bits: the microsecond within that millisecond in 10, random in 70): "
                                 "references sort by creation time.",
                  "examples": ["kf_01JD2W7T9S0QKX3M6F8N2B4C5D"]},
    "E164": {"type": "string", "pattern": r"^\+[1-9][0-9]{7,14}$",
             "description": "E.164: +, then 8-15 digits, the first 1-9.", "examples": ["+6281234567890"]},
    "WhatsappNumber": {"type": "string", "pattern": "^[1-9][0-9]{7,14}$",
                       "description": "8-15 digits, the first 1-9, no +.", "examples": ["6281234567890"]},
    "Sender": {"type": "string", "pattern": SENDER_PATTERN,
               "description": "SMS sender id: 1-11 letters, digits or spaces with at least one letter, a "
                              "number of up to 15 digits, or an E.164 number.", "examples": ["ACME"]},
    "Channel": {"type": "string", "enum": CHANNELS},
    "PacingRate": {"type": "number", "minimum": 0.01, "maximum": 100000,
                   "description": "A sender's pacing rate (API.md §19): queued messages are released so that "
                                  "its provider calls stay within it."},
    "Uuid": {"type": "string", "format": "uuid",
             "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    "Error": obj({
        "code": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$",
                 "description": "snake_case code; each response lists the codes it can carry."},
        "field": {"type": "string", "description": "The field (body member, query parameter or header) at "
                                                   "fault, when one is."},
        "details": {"type": "object"},
    }, required=["code"]),
    "AttemptError": obj({
        "code": {"type": "string", "enum": ATTEMPT_ERRORS},
        "message": {"type": "string"},
        "providerCode": {"type": "string"},
        "httpStatus": {"type": "integer"},
    }, required=["code", "message"]),
    "LogAttemptError": obj({
        "code": {"type": "string", "enum": ATTEMPT_ERRORS + ["outcome_unknown", "recipient_opted_out"],
                 "description": "recipient_opted_out: a queued message's or a delivery-based fallback's later "
                                "attempt whose recipient opted out of the channel's kind after the message was "
                                "accepted; the provider was not called (API.md §21)."},
        "message": {"type": "string"},
        "providerCode": {"type": "string"},
        "httpStatus": {"type": "integer"},
    }, required=["code"], description="An attempt's error as the log keeps it (members without a value are "
                                       "left out)."),
    "Cost": obj({
        "amount": {"type": "string", "pattern": "^[0-9]+\\.[0-9]{4,6}$",
                   "description": "A decimal string of 4 to 6 places, exact (never a float)."},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    }, description="What an accepted attempt cost when its provider accepted it, by the rate cards then "
                   "(API.md §22); later changes of a card never rewrite it."),
    "SendAttempt": {
        "type": "object",
        "oneOf": [
            obj({"channel": ref("Channel"), "status": {"const": "sent"}, "latencyMs": {"type": "integer", "minimum": 0},
                 "providerMessageId": {"type": "string"},
                 "cost": nullable(ref("Cost"), "null when no rate applies (API.md §22).")}),
            obj({"channel": ref("Channel"), "status": {"const": "failed"}, "latencyMs": {"type": "integer", "minimum": 0},
                 "error": ref("AttemptError"), "cost": {"type": "null"}}),
        ],
    },
    "Skipped": obj({"channel": ref("Channel"), "reason": {"type": "string", "enum": ["channel_disabled",
                                                                                      "not_on_whatsapp",
                                                                                      "outside_window",
                                                                                      "recipient_opted_out",
                                                                                      "session_not_connected"],
                                                          "description": "recipient_opted_out: the recipient "
                                                                         "opted out of the channel's kind "
                                                                         "(sms, whatsapp; API.md §21). "
                                                                         "session_not_connected: the "
                                                                         "whatsapp_qr number's WAHA session is "
                                                                         "known not WORKING (API.md §23)."}}),
    "SendResult": obj({
        "reference": ref("Reference"),
        "deliveryMode": {"type": "string", "enum": ["fallback", "all"]},
        "winningChannel": nullable(ref("Channel")),
        "attempts": {"type": "array", "items": ref("SendAttempt")},
        "skipped": {"type": "array", "items": ref("Skipped")},
    }),
    "OutcomeUnknown": obj({
        "reference": ref("Reference"),
        "status": {"const": "unknown"},
        "attempts": {"type": "array", "items": {"type": "object", "properties": {
            "channel": ref("Channel"), "status": {"type": "string", "enum": ["sent", "failed"]}},
            "required": ["channel", "status"]}},
    }),
    "SmsResult": obj({
        "reference": ref("Reference"),
        "status": {"type": "string", "enum": ["sent", "failed"]},
        "providerMessageId": {"type": "string"},
        "segments": {"type": "integer", "minimum": 1, "maximum": 10},
        "encoding": {"type": "string", "enum": ["gsm7", "ucs2"]},
        "error": ref("AttemptError"),
        "cost": nullable(ref("Cost"), "null when it failed or no rate applies (API.md §22)."),
    }, required=["reference", "status", "segments", "encoding", "cost"]),
    "OtpSendResult": obj({
        "reference": ref("Reference"),
        "to": ref("E164"),
        "expiresAt": ref("Timestamp"),
        "length": {"type": "integer", "minimum": 4, "maximum": 10},
        "status": {"type": "string", "enum": ["sent", "failed"]},
        "channel": nullable({"type": "string", "enum": ["whatsapp_meta", "sms"],
                             "description": "The channel that delivered the code; null when none did."}),
    }, required=["reference", "to", "expiresAt", "length", "status"]),
    "OtpVerifyResult": obj({"reference": ref("Reference"), "verified": {"const": True}}),
    "OtpInvalid": obj({"reference": ref("Reference"), "attemptsRemaining": {"type": "integer", "minimum": 0,
                                                                            "maximum": 4}}),
    # ---- logs
    "StatusHistoryEntry": obj({"status": {"type": "string", "enum": DELIVERY}, "at": ref("Timestamp"),
                               "providerCode": {"type": "string"}}, required=["status", "at"]),
    "DeliveryError": obj({"code": {"type": "string", "enum": DELIVERY_ERRORS}, "providerCode": {"type": "string"},
                          "message": {"type": "string"}}, required=["code"]),
    "LogAttempt": {
        "type": "object",
        "description": "An attempt as the unified log shows it: an accepted one has its provider's id and its "
                       "delivery (API.md §10), a failed one its error and null delivery fields.",
        "oneOf": [
            obj({"channel": ref("Channel"), "status": {"const": "sent"},
                 "latencyMs": {"type": "integer", "minimum": 0}, "content": ref("AttemptContent"),
                 "throttles": ref("Throttles"),
                 "providerMessageId": nullable({"type": "string"}),
                 "fallbackReason": nullable({"type": "string", "enum": ["status_failed", "status_undelivered",
                                                                        "no_status_in_time"]}),
                 "cost": nullable(ref("Cost"), "null when no rate applied (API.md §22)."),
                 "attemptedAt": ref("Timestamp"),
                 "deliveryStatus": nullable({"type": "string", "enum": DELIVERY}),
                 "deliveredAt": nullable(ref("Timestamp")), "readAt": nullable(ref("Timestamp")),
                 "deliveryError": nullable(ref("DeliveryError")),
                 "statusHistory": {"type": "array", "items": ref("StatusHistoryEntry")}}),
            obj({"channel": ref("Channel"), "status": {"type": "string", "enum": ["failed", "pending", "unknown"],
                                                       "description": "pending: a later attempt of a delivery-"
                                                                      "based fallback, or a queued message's, in "
                                                                      "flight; unknown: its instance stopped "
                                                                      "before recording the outcome (error "
                                                                      "outcome_unknown)."},
                 "latencyMs": {"type": "integer", "minimum": 0}, "content": ref("AttemptContent"),
                 "throttles": ref("Throttles"),
                 "fallbackReason": nullable({"type": "string", "enum": ["status_failed", "status_undelivered",
                                                                        "no_status_in_time"]}),
                 "error": nullable(ref("LogAttemptError")), "cost": {"type": "null"},
                 "attemptedAt": ref("Timestamp"),
                 "deliveryStatus": {"type": "null"}, "deliveredAt": {"type": "null"}, "readAt": {"type": "null"},
                 "deliveryError": {"type": "null"}, "statusHistory": {"type": "array", "maxItems": 0}}),
        ],
    },
    "Throttles": {"type": "integer", "minimum": 0,
                  "description": "The provider_rate_limited answers (429) this attempt's channel gave a queued "
                                 "message before this outcome: a throttled attempt is retried on its channel in "
                                 "the same attempt (API.md §19); 0 for a sync send."},
    "Priority": {"type": "string", "enum": ["high", "normal", "low"]},
    "AttemptContent": {"type": "string", "enum": ["text", "template"],
                       "description": "What the attempt sent: a free text, or Meta's template message (a "
                                      "template send, or a free text wrapped by outsideWindow: template)."},
    "TemplateRef": obj({"name": {"type": "string", "pattern": "^[a-z0-9_]{1,512}$"},
                        "language": {"type": "string", "pattern": "^[A-Za-z_]{2,15}$"}}),
    "OmniLogItem": obj({
        "reference": ref("Reference"), "to": ref("E164"),
        "text": {"type": "string", "description": "The text the text channels got: the request's text, or the "
                                                  "template's body with its parameters filled in."},
        "template": nullable(ref("TemplateRef")),
        "deliveryMode": {"type": "string", "enum": ["fallback", "all"]},
        "channels": {"type": "array", "items": ref("Channel"),
                     "description": "The channels the message was to be tried on, in order (those skipped "
                                    "included: see skipped)."},
        "status": {"type": "string", "enum": OMNI_STATUSES,
                   "description": "queued (due), scheduled (due later), canceled and expired are a queued send's "
                                  "(API.md §19); a queued message stays queued while its attempt is in flight (the attempt is "
                                  "pending)."},
        "winningChannel": nullable(ref("Channel")),
        "priority": nullable(ref("Priority")),
        "dueAt": nullable(ref("Timestamp")),
        "validUntil": nullable(ref("Timestamp")),
        "fallbackOn": nullable({"type": "string", "enum": ["delivered", "read"]}),
        "fallbackAfterSeconds": nullable({"type": "integer", "minimum": 10, "maximum": 86400}),
        "attempts": {"type": "array", "items": ref("LogAttempt")},
        "skipped": {"type": "array", "items": ref("Skipped")},
        "createdAt": ref("Timestamp"), "completedAt": nullable(ref("Timestamp")),
    }),
    "SmsLogItem": obj({
        "reference": ref("Reference"),
        "source": {"type": "string", "enum": ["sms", "omni", "otp"]},
        "to": ref("E164"), "sender": nullable({"type": "string"}),
        "text": {"type": "string", "description": "As sent; OTP codes masked with *."},
        "segments": {"type": "integer", "minimum": 1}, "encoding": {"type": "string", "enum": ["gsm7", "ucs2"]},
        "status": {"type": "string", "enum": ["pending", "sent", "failed", "unknown"]},
        "providerMessageId": nullable({"type": "string"}),
        "error": nullable(ref("LogAttemptError")),
        "cost": nullable(ref("Cost"), "null unless sent with a rate (API.md §22)."),
        "deliveryStatus": nullable({"type": "string", "enum": DELIVERY}),
        "deliveredAt": nullable(ref("Timestamp")),
        "createdAt": ref("Timestamp"),
    }),
    "OtpLogItem": obj({
        "reference": ref("Reference"), "to": ref("E164"),
        "status": {"type": "string", "enum": ["pending", "verified", "expired", "locked", "failed", "superseded"]},
        "length": {"type": "integer", "minimum": 4, "maximum": 10},
        "expiresAt": ref("Timestamp"), "createdAt": ref("Timestamp"), "verifiedAt": nullable(ref("Timestamp")),
        "failedAttempts": {"type": "integer", "minimum": 0},
        "channel": nullable({"type": "string", "enum": ["whatsapp_meta", "sms"],
                             "description": "The channel that delivered the code (API.md §18); null until one "
                                            "did, and for a failed OTP."}),
        "history": {"type": "array", "items": obj({
            "event": {"type": "string", "enum": ["sent", "send_failed", "verify_success", "verify_failed", "locked",
                                                 "expired"]},
            "channel": nullable({"type": "string", "enum": ["whatsapp_meta", "sms"],
                                 "description": "The channel of a sent or send_failed event (one per attempt, "
                                                "in fallback order); null for the others."}),
            "error": nullable({**ref("LogAttemptError"),
                               "description": "Why a send_failed attempt failed (the code masked if the "
                                              "provider quoted it); null for the other events."}),
            "at": ref("Timestamp")})},
    }),
    # ---- tenants and tokens
    "OwnBaseUrl": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2048,
                   "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[!-~]+$",
                   "description": "An absolute http:// or https:// URL with a host, without user, password, query "
                                  "or fragment: the provider's paths are appended to it."},
    "TwilioAccount": obj({
        "accountSid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
                       "description": "The account's SID (Twilio's: AC and 32 hex digits): the path's "
                                      "{AccountSid} and the Basic user of its sends, and the AccountSid its "
                                      "webhooks name.", "examples": ["AC0123456789abcdef0123456789abcdef"]},
        "authToken": {"type": "string", "minLength": 1, "maxLength": 1024,
                      "description": "Write-only: answers show it masked (**** and its last 4 characters when it "
                                     "has 12 or more); sealed at rest. The Basic password of its sends and the key "
                                     "of its webhooks' X-Twilio-Signature."},
        "baseUrl": {**ref("OwnBaseUrl"),
                    "description": "Default: OMNIGATE_SMS_BASE_URL (Twilio's https://api.twilio.com unless the "
                                   "operator set another)."},
    }, required=["accountSid", "authToken"],
        description="The tenant's own Twilio account (API.md §23): replaces OMNIGATE_SMS_ACCOUNT_SID, "
                    "OMNIGATE_SMS_AUTH_TOKEN (and OMNIGATE_SMS_BASE_URL when baseUrl is given) for its SMS; its "
                    "status and inbound webhooks are verified with its authToken, found by their AccountSid."),
    "WahaServer": obj({
        "baseUrl": ref("OwnBaseUrl"),
        "apiKey": {"type": "string", "minLength": 1, "maxLength": 1024,
                   "description": "Write-only (masked in answers, sealed at rest): the X-Api-Key of its requests."},
        "webhookSecret": {"type": "string", "minLength": 1, "maxLength": 1024,
                          "description": "Write-only (masked in answers, sealed at rest): the HMAC key of the "
                                         "server's X-Webhook-Hmac (SHA-512)."},
    }, required=["baseUrl", "apiKey", "webhookSecret"],
        description="The tenant's own WAHA server (API.md §23): replaces OMNIGATE_QR_BASE_URL and "
                    "OMNIGATE_QR_API_KEY for its QR sends; events of the sessions of its numbers are verified with "
                    "its webhookSecret (or OMNIGATE_QR_WEBHOOK_SECRET, the configured server's)."),
    "WhatsappQrChannel": obj({
        "enabled": {"type": "boolean"},
        "server": ref("WahaServer"),
        "numbers": {"type": "object", "propertyNames": ref("WhatsappNumber"),
                    "additionalProperties": obj({
                        "session": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                        "messagesPerMinute": {**ref("PacingRate"),
                                              "description": "The session's pacing rate in messages per minute "
                                                             "(API.md §19); default "
                                                             "OMNIGATE_QR_DEFAULT_PER_MINUTE (20)."}},
                        required=["session"])},
    }, required=[]),
    "WhatsappMetaChannel": obj({
        "enabled": {"type": "boolean"},
        "numbers": {"type": "object", "propertyNames": ref("WhatsappNumber"),
                    "additionalProperties": obj({
                        "phoneNumberId": {"type": "string", "pattern": "^[0-9]{1,32}$"},
                        "accessToken": {"type": "string", "minLength": 1, "maxLength": 1024,
                                        "description": "Write-only: answers show it masked (**** and its last 4 "
                                                       "characters when it has 12 or more)."},
                        "wabaId": {"type": "string", "pattern": "^[0-9]{1,32}$",
                                   "description": "The WhatsApp Business Account that owns the number: its "
                                                  "template catalogue is synced from Meta when the number is "
                                                  "saved, then every OMNIGATE_TEMPLATE_SYNC_S (API.md §18)."},
                        "messagesPerSecond": {**ref("PacingRate"),
                                              "description": "The phone number id's pacing rate in messages per "
                                                             "second (API.md §19); default "
                                                             "OMNIGATE_META_DEFAULT_MPS (80)."}},
                        required=["phoneNumberId", "accessToken"])},
        "outsideWindow": {"type": "string", "enum": ["send", "skip", "template"], "default": "send",
                          "description": "A free text to a recipient whose 24 h window is not known to be open: "
                                         "send it (Meta decides: 131047), skip the channel (reason "
                                         "outside_window, no provider call) or wrap it in windowTemplate."},
        "windowTemplate": {**ref("TemplateRef"),
                           "description": "A template whose body takes exactly one parameter: the text. "
                                          "Required with outsideWindow template."},
    }, required=[]),
    "SmsChannel": obj({
        "enabled": {"type": "boolean"},
        "account": ref("TwilioAccount"),
        "senders": {"type": "array", "uniqueItems": True, "items": ref("Sender")},
        "defaultSender": {"type": "string", "description": "One of senders."},
        "messagesPerSecond": {"type": "object", "propertyNames": ref("Sender"),
                              "additionalProperties": ref("PacingRate"),
                              "description": "Pacing rate per sender id in segments per second (API.md §19); a "
                                             "sender not listed has OMNIGATE_SMS_DEFAULT_MPS (10).",
                              "examples": [{"ACME": 10}]},
        "inboundNumbers": {"type": "array", "maxItems": 100, "uniqueItems": True, "items": ref("E164"),
                           "description": "The tenant's numbers whose inbound SMS are its own (API.md §21): POST "
                                          "/webhooks/twilio/inbound routes a message by its To. At most 100 "
                                          "distinct E.164 numbers.",
                           "examples": [["+15550001111"]]},
    }, required=[]),
    "Price": {"type": "string", "pattern": r"^(0|[1-9][0-9]{0,5})(\.[0-9]{1,6})?$",
              "description": "A decimal string of up to 6 places, from 0 and below 1000000 (summed exactly, never "
                             "as a float).", "examples": ["0.0450"]},
    "Rate": obj({
        "channel": ref("Channel"),
        "prefix": {"type": "string", "pattern": r"^(\+[0-9]{1,15})?$",
                   "description": "The numbers it applies to: \"\" (all) or + and 1-15 digits; the longest "
                                  "matching prefix wins."},
        "price": ref("Price"),
        "category": {"type": "string", "pattern": "^(?i:marketing|utility|authentication|service)$",
                     "description": "whatsapp_meta only: applies to templates of this category and beats an "
                                    "entry without one."},
    }, required=["channel", "prefix", "price"]),
    "RateCardIn": obj({
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "rates": {"type": "array", "maxItems": 10000, "items": ref("Rate"),
                  "description": "No two entries of one channel, prefix and category."},
    }, required=["currency", "rates"]),
    "Money": obj({
        "amount": {"type": "string", "pattern": "^-?[0-9]+\\.[0-9]{4,6}$",
                   "description": "A decimal string of 4 to 6 places, exact; negative when fallback cost more."},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    }),
    "UsageRow": obj({
        "day": {"type": "string", "format": "date", "description": "The UTC day (groupBy day or day,channel)."},
        "channel": ref("Channel"),
        "messages": {"type": "integer", "minimum": 0,
                     "description": "By day: messages created that day (unified messages, SMS sends and OTPs' "
                                    "SMS); by channel: messages with an attempt on it."},
        "attempts": {"type": "integer", "minimum": 0},
        "accepted": {"type": "integer", "minimum": 0},
        "delivered": {"type": "integer", "minimum": 0,
                      "description": "Accepted attempts whose delivery status reached delivered (or read)."},
        "read": {"type": "integer", "minimum": 0},
        "failed": {"type": "integer", "minimum": 0, "description": "Attempts failed (or unknown)."},
        "segments": {"type": "integer", "minimum": 0, "description": "The segments of accepted SMS."},
        "cost": nullable(ref("Cost"), "null while no rate card has a currency."),
    }, required=["messages", "attempts", "accepted", "delivered", "read", "failed", "segments", "cost"]),
    "Usage": obj({
        "currency": nullable({"type": "string", "pattern": "^[A-Z]{3}$"},
                             "The tenant's card's currency, else the global card's; null without a card."),
        "rows": {"type": "array", "items": ref("UsageRow")},
        "fallback": obj({
            "messages": {"type": "integer", "minimum": 0,
                         "description": "fallback messages that had more than one channel to try and were "
                                        "accepted on one."},
            "wonBy": obj({c: {"type": "integer", "minimum": 0} for c in ("whatsapp_qr", "whatsapp_meta", "sms")}),
            "savings": nullable(ref("Money"), "What the ones a WhatsApp channel won would have cost by SMS "
                                               "(the SMS rate for their recipient and text) minus what they cost; "
                                               "null without a currency."),
        }),
    }),
    "RateCard": obj({
        "currency": nullable({"type": "string", "pattern": "^[A-Z]{3}$"}),
        "rates": {"type": "array", "items": ref("Rate")},
        "updatedAt": nullable(ref("Timestamp")),
    }),
    "Settings": obj({
        "defaultChannels": {"type": "array", "minItems": 1, "maxItems": 3, "uniqueItems": True,
                            "items": ref("Channel")},
        "defaultWhatsappFrom": ref("WhatsappNumber"),
        "rateLimitPerSecond": {"type": "integer", "minimum": 1, "maximum": 1000000},
        "channels": obj({"whatsapp_qr": ref("WhatsappQrChannel"), "whatsapp_meta": ref("WhatsappMetaChannel"),
                         "sms": ref("SmsChannel")}, required=[]),
        "otp": obj({"whatsappTemplate": {**ref("TemplateRef"),
                                         "description": "The authentication template of OTPs over WhatsApp: the "
                                                        "code is its body parameter and the parameter of its "
                                                        "copy-code button (API.md §18)."}}, required=[]),
        "rates": {**ref("RateCardIn"),
                  "description": "The tenant's rate card (API.md §22): for a channel it lists, only its entries "
                                 "price the tenant's attempts; for the others, the global card's (GET /admin/rates). "
                                 "In the global card's currency, else 422 validation_failed (field "
                                 "settings.rates.currency)."},
    }, required=[], examples=[{
        "defaultChannels": ["whatsapp_qr", "whatsapp_meta", "sms"],
        "defaultWhatsappFrom": "6281234567890",
        "rateLimitPerSecond": 200,
        "channels": {
            "whatsapp_qr": {"enabled": True, "numbers": {"6281234567890": {"session": "default"}}},
            "whatsapp_meta": {"enabled": True, "numbers": {"6281234567890": {"phoneNumberId": "109876543210",
                                                                             "accessToken": "EAAG..."}}},
            "sms": {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME",
                    "inboundNumbers": ["+15550001111"]}}}]),
    "Tenant": obj({
        "id": ref("Uuid"), "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "unifiedApiEnabled": {"type": "boolean"}, "settings": ref("Settings"),
        "createdAt": ref("Timestamp"), "updatedAt": ref("Timestamp"),
    }),
    "TokenCreated": obj({
        "id": ref("Uuid"), "name": {"type": "string", "maxLength": 100},
        "token": {"type": "string", "pattern": "^kft_[0-9A-Za-z]{40}$",
                  "description": "Shown only in this answer; stored only as a hash."},
        "prefix": {"type": "string"}, "scopes": ref("Scopes"), "createdAt": ref("Timestamp"),
    }),
    "Token": obj({
        "id": ref("Uuid"), "name": {"type": "string", "maxLength": 100}, "prefix": {"type": "string"},
        "scopes": ref("Scopes"), "createdAt": ref("Timestamp"),
        "lastUsedAt": nullable(ref("Timestamp")), "revokedAt": nullable(ref("Timestamp")),
    }),
    "Scopes": {"type": "array", "minItems": 1, "maxItems": len(SCOPES), "uniqueItems": True,
               "items": {"type": "string", "enum": SCOPES},
               "description": "In this order: send, otp, logs, keys. keys (the tenant's own tokens and webhook, "
                              "API.md §23) is opt-in: a token created without scopes has send, otp and logs."},
    # ---- webhooks out (API.md §12)
    "Webhook": obj({
        "url": {"type": "string", "format": "uri", "maxLength": 2048},
        "events": {"type": "array", "uniqueItems": True, "items": {"type": "string", "enum": WH_EVENTS},
                   "description": WH_EVENTS_TEXT},
        "secret": {"type": "string", "description": "whsec_ + base64 of 32 bytes when created or rotated; "
                                                    "masked otherwise."},
        "enabled": {"type": "boolean"},
        "disabledAt": nullable(ref("Timestamp")),
        "disabledReason": nullable({"type": "string"}),
        "createdAt": ref("Timestamp"), "updatedAt": ref("Timestamp"),
    }),
    "WebhookDelivery": obj({
        "id": {"type": "string", "pattern": "^msg_[0-9a-f]{32}$", "description": "The webhook-id header."},
        "type": {"type": "string", "enum": WH_EVENTS},
        "reference": {"type": "string", "description": "The event's subject: the message's or the OTP's "
                                                       "reference; the batchId for batch.completed; the inbound "
                                                       "message's id (in_<digits>) for message.received; the "
                                                       "number (E.164) for recipient.opted_out and "
                                                       "recipient.opted_in."},
        "status": {"type": "string", "enum": ["pending", "failed", "delivered", "exhausted"]},
        "createdAt": ref("Timestamp"), "deliveredAt": nullable(ref("Timestamp")),
        "nextTryAt": nullable(ref("Timestamp")), "lastError": nullable({"type": "string"}),
        "tries": {"type": "array", "items": obj({
            "at": ref("Timestamp"), "httpStatus": nullable({"type": "integer"}),
            "latencyMs": nullable({"type": "integer"}),
            "error": nullable(obj({"code": {"type": "string", "enum": ["http_error", "timeout", "unreachable",
                                                                        "blocked_address", "error"]},
                                   "message": {"type": "string"}}, required=["code"]))})},
    }),
    # ---- WhatsApp templates (API.md §18)
    "Template": obj({
        "wabaId": {"type": "string", "pattern": "^[0-9]{1,32}$"},
        "name": {"type": "string", "pattern": "^[a-z0-9_]{1,512}$"},
        "language": {"type": "string", "pattern": "^[A-Za-z_]{2,15}$", "examples": ["en_US"]},
        "status": {"type": "string", "description": "As Meta says it: APPROVED, PENDING, REJECTED, PAUSED, "
                                                    "DISABLED, FLAGGED, ...; only APPROVED templates are sent."},
        "category": nullable({"type": "string", "examples": ["utility", "marketing", "authentication"]}),
        "parameterFormat": {"type": "string", "enum": ["positional", "named"]},
        "parameters": {"type": "array", "items": {"type": "string"},
                       "description": "The body's placeholders in order: \"1\", \"2\", ... or the names."},
        "body": {"type": "string", "description": "The body text with its {{placeholders}}."},
        "buttons": {"type": "array", "items": obj({
            "index": {"type": "integer", "minimum": 0},
            "type": nullable({"type": "string", "examples": ["URL", "QUICK_REPLY", "OTP"]}),
            "text": nullable({"type": "string"}),
            "url": {"type": "string"},
            "parameter": {"type": "boolean", "description": "The button takes a parameter on a send."},
        }, required=["index", "type", "text", "parameter"])},
        "updatedAt": ref("Timestamp"),
    }),
    "TemplateSync": obj({"synced": {"type": "integer", "minimum": 0,
                                    "description": "Templates the tenant's WABAs' catalogues hold now."}}),
    "StatusCounts": obj({"applied": {"type": "integer", "minimum": 0}, "duplicate": {"type": "integer", "minimum": 0},
                         "unknown": {"type": "integer", "minimum": 0}}),
    # ---- inbound messages and consent (API.md §21)
    "InboundCounts": obj({
        "stored": {"type": "integer", "minimum": 0, "description": "New messages, stored for their tenant."},
        "duplicate": {"type": "integer", "minimum": 0, "description": "A provider's repeat: stored before."},
        "unrouted": {"type": "integer", "minimum": 0,
                     "description": "No tenant has the receiving number or session: counted in /metrics and "
                                    "dropped."},
        "ignored": {"type": "integer", "minimum": 0,
                    "description": "Not a message from a phone number (WAHA: fromMe, a group's, a broadcast): "
                                   "dropped."},
    }, description="What became of the inbound messages of the POST (API.md §21)."),
    "WebhookCounts": obj({
        "applied": {"type": "integer", "minimum": 0}, "duplicate": {"type": "integer", "minimum": 0},
        "unknown": {"type": "integer", "minimum": 0},
        "inbound": {**ref("InboundCounts"),
                    "description": "Only when the POST held inbound messages (Meta: value.messages[]; WAHA: the "
                                   "event message, counted even when ignored)."},
    }, required=["applied", "duplicate", "unknown"],
        description="The statuses' counts (applied, repeats, not matched yet) and, when the POST held inbound "
                    "messages, theirs."),
    "ConsentKind": {"type": "string", "enum": CONSENT_KINDS,
                    "description": "A kind of channel for consent: sms, or whatsapp for both WhatsApp channels "
                                   "(whatsapp_qr and whatsapp_meta)."},
    "ConsentSource": {"type": "string", "enum": CONSENT_SOURCES,
                      "description": "What changed the consent: an opt-out or opt-in keyword the number sent, a "
                                     "provider's answer that it opted out (Twilio 21610, Meta 131050), or the API."},
    "InboundItem": obj({
        "id": {"type": "string", "pattern": "^in_[0-9]{1,19}$", "examples": ["in_1024"]},
        "channel": ref("Channel"),
        "from": ref("E164"),
        "to": {**ref("E164"), "description": "The tenant's number it came to."},
        "type": {"type": "string", "pattern": "^[a-z_]{1,32}$",
                 "description": "text, or what the provider says it is: Meta's type (button, interactive, image, "
                                "...), media for a WAHA or Twilio message with media.",
                 "examples": ["text", "button", "interactive", "image", "media"]},
        "text": nullable({"type": "string", "description": "Its text: a text's body, a button's or a reply's "
                                                          "title, a media caption."}),
        "providerMessageId": {"type": "string", "minLength": 1},
        "phoneNumberId": nullable({"type": "string", "pattern": "^[0-9]{1,32}$",
                                   "description": "The Meta phone number id it came to (whatsapp_meta)."}),
        "session": nullable({"type": "string", "minLength": 1, "description": "The WAHA session (whatsapp_qr)."}),
        "receivedAt": {**ref("Timestamp"), "description": "The provider's time."},
    }, description="An inbound message (API.md §21), stored once per provider message id; the data of the "
                   "event message.received."),
    "Suppression": obj({
        "to": ref("E164"), "channel": ref("ConsentKind"), "source": ref("ConsentSource"),
        "reason": nullable({"type": "string", "description": "The API's reason, the keyword (STOP, ...) or the "
                                                            "provider's code (21610, 131050)."}),
        "createdAt": {**ref("Timestamp"), "description": "When it came into force."},
    }, description="A suppression in force: sends to the number skip every channel of its kind."),
    "SuppressionChange": obj({
        "to": ref("E164"),
        "suppressed": {"type": "array", "maxItems": 2, "uniqueItems": True, "items": ref("ConsentKind"),
                       "description": "The kinds the number is opted out of after the change, sorted."},
        "changed": {"type": "array", "maxItems": 2, "uniqueItems": True, "items": ref("ConsentKind"),
                    "description": "The kinds this request changed (each with its event), sorted; empty when "
                                   "nothing changed."},
    }),
    "SuppressionPutRequest": obj({
        "channels": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": True,
                     "items": ref("ConsentKind"), "description": "The kinds to opt the number out of."},
        "reason": {"type": "string", "minLength": 1, "maxLength": 200,
                   "description": "1-200 characters, not only whitespace; kept with the suppression."},
    }, required=["channels"]),
    "Recipient": obj({
        "to": ref("E164"),
        "suppressed": {"type": "array", "maxItems": 2, "uniqueItems": True, "items": ref("ConsentKind"),
                       "description": "The kinds the number is opted out of, sorted."},
        "suppressions": {"type": "array", "maxItems": 2, "items": ref("Suppression")},
        "notOnWhatsappUntil": nullable({**ref("Timestamp"),
                                        "description": "Until when the number is known not to have WhatsApp "
                                                       "(WhatsApp channels are skipped, not_on_whatsapp)."}),
        "whatsappWindows": {"type": "array", "items": obj({
            "phoneNumberId": {"type": "string", "pattern": "^[0-9]{1,32}$"},
            "openUntil": ref("Timestamp")}),
            "description": "The open customer service windows with the tenant's Meta numbers: the last inbound "
                           "message + 24 h (API.md §18 outsideWindow)."},
        "lastInboundAt": nullable({**ref("Timestamp"), "description": "Its newest inbound message's receivedAt."}),
    }, description="What the tenant knows of a number (API.md §21)."),
    "ConsentEvent": obj({
        "to": ref("E164"), "channel": ref("ConsentKind"), "source": ref("ConsentSource"),
        "reason": nullable({"type": "string"}),
    }, description="The data of the events recipient.opted_out and recipient.opted_in (one per kind changed)."),
}


def page_of(item):
    return obj({"items": {"type": "array", "items": item}, "nextCursor": nullable({"type": "string"})})


SCHEMAS["OmniLogPage"] = page_of(ref("OmniLogItem"))
SCHEMAS["SmsLogPage"] = page_of(ref("SmsLogItem"))
SCHEMAS["OtpLogPage"] = page_of(ref("OtpLogItem"))
SCHEMAS["TenantPage"] = page_of(ref("Tenant"))
SCHEMAS["WebhookDeliveryPage"] = page_of(ref("WebhookDelivery"))
SCHEMAS["TemplatePage"] = page_of(ref("Template"))
SCHEMAS["InboundPage"] = page_of(ref("InboundItem"))
SCHEMAS["SuppressionPage"] = page_of(ref("Suppression"))

# ---- responses ----------------------------------------------------------------------------

HEADERS = {
    "X-Request-Id": {"description": "The inbound X-Request-Id when it is 1-64 characters of [A-Za-z0-9._-], "
                                    "else a new one; the same id is in the access log line.",
                     "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}},
    "Retry-After": {"description": "Seconds to wait before retrying.", "required": True,
                    "schema": {"type": "string", "pattern": "^[0-9]+$"}},
    "WWW-Authenticate": {"description": "Bearer (tenant and admin routes) or HMAC realm=\"webhooks\" "
                                        "(provider webhooks).", "required": True, "schema": {"type": "string"}},
    "Allow": {"description": "The methods the path has.", "required": True, "schema": {"type": "string"}},
    "RateLimit-Limit": {"description": "The tenant's rate limit per second (when it has one).",
                        "schema": {"type": "string"}},
    "RateLimit-Remaining": {"description": "Requests left in the tenant's bucket.", "schema": {"type": "string"}},
    "RateLimit-Reset": {"description": "Seconds until the bucket is full again.", "schema": {"type": "string"}},
    "Idempotency-Replayed": {"description": "true when this is the stored answer of an earlier request with the "
                                            "same Idempotency-Key (API.md §6).",
                             "schema": {"type": "string", "const": "true"}},
    "X-Omnigate-Reference": {"description": "The message's reference.", "schema": ref("Reference")},
    "ETag": {"description": "A hash of the file's bytes.", "required": True, "schema": {"type": "string"}},
    "Content-Security-Policy": {"description": "Everything from this origin only; nothing inline.",
                                "required": True, "schema": {"type": "string"}},
}


def hdr(name):
    return {"$ref": "#/components/headers/" + name}


def success_env(data_schema):
    return obj({"success": {"const": True}, "message": {"type": "string"}, "data": data_schema})


def error_env(codes, data_schema=None):
    """The failure envelope whose error.code is one of `codes`."""
    return {
        "type": "object",
        "required": ["success", "message", "data", "error"],
        "additionalProperties": False,
        "properties": {
            "success": {"const": False},
            "message": {"type": "string", "minLength": 1},
            "data": data_schema if data_schema is not None else {"type": "null"},
            "error": {"allOf": [ref("Error")],
                      "properties": {"code": {"enum": sorted(codes)} if len(codes) > 1 else {"const": codes[0]}}},
        },
    }


STATUS_TEXT = {200: "OK", 201: "Created", 304: "Not Modified", 400: "Bad Request", 401: "Unauthorized",
               403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
               409: "Conflict", 410: "Gone", 413: "Content Too Large", 415: "Unsupported Media Type",
               422: "Unprocessable Content", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
               500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}

# What each error code means, for the response descriptions.
CODE_TEXT = {
    "bad_request": "malformed HTTP (the connection is then closed)",
    "invalid_json": "the body is not valid JSON, not an object, or nested deeper than 16",
    "invalid_payload": "the provider's body does not have the provider's shape",
    "request_timeout": "the request line, headers or body did not arrive in time (the connection is then "
                       "closed)",
    "payload_too_large": "the body is over the route's limit (64 KiB by default, 4 MiB for the provider "
                         "webhooks and POST /api/omni/batches), refused without reading it",
    "headers_too_large": "request line and headers over 16 KiB",
    "unsupported_media_type": "a body without Content-Type: application/json",
    "unauthorized": "no, malformed, unknown or revoked bearer token",
    "invalid_signature": "the provider's signature header is missing or wrong; nothing is recorded",
    "forbidden": "hub.mode is not subscribe or hub.verify_token is wrong",
    "unified_api_locked": "the tenant's plan locks the unified API",
    "insufficient_scope": "the token lacks the route's scope",
    "not_found": "no such resource (another tenant's is not found either)",
    "conflict": "the tenant kept changing during the update; try again",
    "idempotency_in_progress": "the first request with this Idempotency-Key is still in flight (Retry-After: 1)",
    "otp_already_verified": "the OTP was verified already",
    "webhook_disabled": "the tenant has no enabled webhook",
    "otp_expired": "the OTP expired, or was superseded by a newer one",
    "batch_too_large": "the batch has more messages than OMNIGATE_BATCH_MAX (default 1000); nothing was "
                       "checked or queued",
    "validation_failed": "a field, query parameter or header is missing or invalid (error.field names it)",
    "unknown_field": "a body member the route does not know (error.field names it)",
    "idempotency_key_reused": "the Idempotency-Key was used with another body",
    "whatsapp_from_not_registered": "whatsappFrom is not registered for a WhatsApp channel to try",
    "sender_not_approved": "sender is not on the tenant's approved list",
    "missing_variable": "a batch message's {{key}} has no value in its variables (error.field "
                        "variables.<key>)",
    "text_too_long": "the text needs more than 10 SMS segments",
    "no_channel_available": "none of the channels to try is enabled (or left after not-on-WhatsApp skips, "
                            "then error.details.skipped lists them)",
    "recipient_opted_out": "the recipient opted out (API.md §21) of every channel the request would use (SMS: "
                           "of sms); nothing is sent or written (a send that keeps a channel skips the others "
                           "with reason recipient_opted_out)",
    "otp_invalid": "wrong code; data.attemptsRemaining says how many tries are left",
    "rate_limited": "the tenant's rate limit, or 5 OTPs per number an hour (Retry-After)",
    "otp_cooldown": "one OTP per number every 30 s (Retry-After)",
    "otp_locked": "5 wrong codes: the OTP is locked (Retry-After)",
    "internal_error": "the database refused a statement (a bug or a broken schema; not worth retrying)",
    "delivery_failed": "every attempted channel failed; data holds the reference and the attempts",
    "outcome_unknown": "a repeat of a request whose outcome could not be recorded (its instance died, or "
                       "the final write failed): it is never sent again",
    "unavailable": "the database is unreachable, the instance is draining, or out of memory (Retry-After)",
    "query_timeout": "the log query ran past OMNIGATE_LOG_QUERY_TIMEOUT_MS and was cancelled (Retry-After)",
    "provider_error": "Meta failed a call the gateway made for itself (reading a WABA's templates): the "
                      "message names the WABA and Meta's error, error.details has wabaId, httpStatus and "
                      "providerCode; nothing was changed",
}

# The message of each error example (what the gateway says, near enough).
ERROR_MESSAGES = {
    "validation_failed": "to must be an E.164 number: + then 8-15 digits, the first 1-9",
    "unknown_field": "unknown field \"deliverymode\"",
    "unauthorized": "missing bearer token",
    "not_found": "no such tenant",
    "method_not_allowed": "method DELETE is not allowed here; allowed: GET, HEAD",
    "rate_limited": "the tenant's rate limit is exhausted: retry later",
    "unavailable": "database unavailable",
}

# Every error code and its HTTP status, as the C code declares them.
STATUSES = errcodes.statuses()

# Every operation can get these from the HTTP core before any handler runs (src/net/http_conn.c).
CORE = {400: ["bad_request"], 408: ["request_timeout"], 413: ["payload_too_large"], 431: ["headers_too_large"]}
DB = {500: ["internal_error"], 503: ["unavailable"]}
JSON_BODY = {400: ["invalid_json"], 415: ["unsupported_media_type"], 422: ["validation_failed", "unknown_field"]}
TENANT = {401: ["unauthorized"], 403: ["insufficient_scope"], 429: ["rate_limited"]}
ADMIN = {401: ["unauthorized"]}
IDEM = {409: ["idempotency_in_progress"], 422: ["idempotency_key_reused"], 502: ["outcome_unknown"]}


def merge(*maps):
    out = {}
    for m in maps:
        for k, v in m.items():
            out.setdefault(k, [])
            for c in v:
                if c not in out[k]:
                    out[k].append(c)
    return out


def error_response(status, codes, data=None, headers=()):
    """One failure response; `data` maps a code to the schema of its data (default null)."""
    for c in codes:
        if STATUSES.get(c) != status:
            sys.exit("openapi.py: %s is listed under %d but answers %s" % (c, status, STATUSES.get(c)))
    data = data or {}
    if any(c in data for c in codes) and len(codes) > 1:
        schema = {"oneOf": [error_env([c], data.get(c)) for c in sorted(codes)]}
    else:
        schema = error_env(codes, data.get(codes[0]) if len(codes) == 1 else None)
    hs = {"X-Request-Id": hdr("X-Request-Id")}
    if status == 401:
        hs["WWW-Authenticate"] = hdr("WWW-Authenticate")
    if status in (429, 503) or "idempotency_in_progress" in codes:
        if status != 409 or codes == ["idempotency_in_progress"]:
            hs["Retry-After"] = hdr("Retry-After")
    for h in headers:
        hs[h] = hdr(h)
    desc = "; ".join("`%s`: %s" % (c, CODE_TEXT.get(c, c)) for c in sorted(codes))
    media = {"schema": schema}
    plain = [c for c in sorted(codes) if c not in data]
    if plain:
        c = plain[0]
        error = {"code": c}
        if c in ("validation_failed", "unknown_field"):
            error["field"] = "to" if c == "validation_failed" else "deliverymode"
        media["example"] = {"success": False, "message": ERROR_MESSAGES.get(c, CODE_TEXT.get(c, c)), "data": None,
                            "error": error}
    return {"description": desc, "headers": hs, "content": {"application/json": media}}


# Failure responses shared by operations, by name: components.responses.
SHARED = {}


def shared_response(status, codes, data, headers):
    """A $ref to the failure response of these codes (with their data schemas and headers),
    registered once in components.responses under a name made of the status and the codes."""
    data = {c: data[c] for c in codes if data and c in data}
    r = error_response(status, codes, data, headers)
    name = "E%d_%s" % (status, "_".join("".join(w.capitalize() for w in c.split("_")) for c in sorted(codes)))
    if headers:
        name += "_" + "".join(h.replace("-", "") for h in headers if h != "RateLimit-Remaining" and
                              h != "RateLimit-Reset").replace("RateLimitLimit", "RL")
    for c in sorted(data):
        name += "_" + data[c]["$ref"].rsplit("/", 1)[1]
    base, n = name, 2
    while name in SHARED and SHARED[name] != r:
        name, n = "%s_%d" % (base, n), n + 1
    SHARED[name] = r
    return {"$ref": "#/components/responses/" + name}


def ok_response(status, data_schema, description, example=None, headers=()):
    hs = {"X-Request-Id": hdr("X-Request-Id")}
    for h in headers:
        hs[h] = hdr(h)
    media = {"schema": success_env(data_schema)}
    if example is not None:
        media["example"] = example
    return {"description": description, "headers": hs, "content": {"application/json": media}}


def op(summary, tags, ok, errors, security=None, params=(), body=None, description=None, data=None,
       error_headers=(), op_id=None):
    """An operation: `ok` is {status: response}, `errors` {status: [codes]} (the HTTP core's are added)."""
    responses = {str(k): v for k, v in ok.items()}
    for status, codes in sorted(merge(CORE, errors).items()):
        # The HTTP core's answers (CORE) carry none of the route's own headers.
        extra = tuple(h for h in error_headers if status != 401 and codes != CORE.get(status))
        responses[str(status)] = shared_response(status, codes, data, extra)
    o = {"operationId": op_id, "summary": summary, "tags": tags, "responses": dict(sorted(responses.items()))}
    if description:
        o["description"] = description
    if params:
        o["parameters"] = list(params)
    if body is not None:
        o["requestBody"] = body
    o["security"] = security if security is not None else []
    return o


def json_body(schema_name, examples, required=True):
    return {"required": required, "content": {"application/json": {
        "schema": ref(schema_name), "examples": {k: {"value": v} for k, v in examples.items()}}}}


def qparam(name, schema, description):
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


USAGE_EX = {"currency": "USD", "rows": [
    {"day": "2026-11-27", "messages": 1200, "attempts": 1310, "accepted": 1190, "delivered": 1150,
     "read": 900, "failed": 120, "segments": 260, "cost": {"amount": "14.2300", "currency": "USD"}}],
    "fallback": {"messages": 1100, "wonBy": {"whatsapp_qr": 700, "whatsapp_meta": 300, "sms": 100},
                 "savings": {"amount": "38.5000", "currency": "USD"}}}


USAGE_PARAMS = [
    qparam("since", ref("Timestamp"), "The first day: the UTC day of this time (default: 30 days before until)."),
    qparam("until", ref("Timestamp"), "The last day, included: the UTC day of this time (default: now). At most "
                                      "400 days after since."),
    qparam("groupBy", {"type": "string", "enum": ["day", "channel", "day,channel"], "default": "day"},
           "Rows by day, by channel, or by both."),
]


def pparam(name, schema, description):
    return {"name": name, "in": "path", "required": True, "schema": schema, "description": description}


IDEM_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"},
            "description": "For 24 h the same tenant + key + body answers the first response again "
                          "(Idempotency-Replayed: true) without sending again (API.md §6)."}
TENANT_ID = pparam("id", ref("Uuid"), "The tenant's id (anything else is 404).")

TENANT_SEC = [{"tenantToken": []}]
ADMIN_SEC = [{"adminToken": []}]
RL = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")

# ---- request bodies ------------------------------------------------------------------------

SCHEMAS["TemplateSend"] = obj({
    "name": {"type": "string", "pattern": "^[a-z0-9_]{1,512}$"},
    "language": {"type": "string", "pattern": "^[A-Za-z_]{2,15}$", "examples": ["en_US"]},
    "parameters": {"oneOf": [{"type": "array", "maxItems": 100, "items": {"type": "string", "minLength": 1,
                                                                          "maxLength": 1024}},
                             {"type": "object", "additionalProperties": {"type": "string", "minLength": 1,
                                                                         "maxLength": 1024}}],
                   "description": "The body's parameters: an array in order for a positional template "
                                  "({{1}}, {{2}}), an object by name for a named one. Exactly the template's."},
    "buttons": {"type": "array", "maxItems": 10, "items": obj({
        "index": {"type": "integer", "minimum": 0, "maximum": 9},
        "subType": {"type": "string", "enum": ["url", "quick_reply"]},
        "parameter": {"type": "string", "minLength": 1, "maxLength": 1024}}),
        "description": "One per button that takes a parameter (a URL with a placeholder, a copy-code button "
                       "as url) or a quick reply's payload."},
}, required=["name", "language"], description="A WhatsApp template of the catalogue of the whatsappFrom number's "
   "WABA (API.md §18): checked before anything is written (template_not_found, template_not_approved, "
   "template_parameters_mismatch). whatsapp_meta gets Meta's template message; the other channels get text, "
   "or the template's body with its parameters.")
SCHEMAS["SendRequest"] = obj({
    "to": ref("E164"),
    "text": {"type": "string", "minLength": 1, "maxLength": 4096,
             "description": "1-4096 Unicode characters, not only whitespace. Optional with template."},
    "template": ref("TemplateSend"),
    "channels": {"type": "array", "minItems": 1, "maxItems": 3, "uniqueItems": True, "items": ref("Channel"),
                 "description": "The fallback order; default: the tenant's defaultChannels."},
    "deliveryMode": {"type": "string", "enum": ["fallback", "all"], "default": "fallback"},
    "whatsappFrom": ref("WhatsappNumber"),
    "sender": ref("Sender"),
    "fallbackOn": {"type": "string", "enum": ["accepted", "delivered", "read"], "default": "accepted",
                   "description": "delivered/read only with deliveryMode fallback (API.md §11)."},
    "fallbackAfterSeconds": {"type": "integer", "minimum": 10, "maximum": 86400, "default": 60,
                             "description": "Only with fallbackOn delivered or read."},
    "queue": {"type": "boolean", "default": False,
              "description": "true: answer 202 once the message is committed and deliver it in the background, "
                             "at its senders' rates (API.md §19)."},
    "sendAt": {"type": "string", "format": "date-time",
               "description": "RFC 3339; implies queue; at most 60 s in the past and 35 days ahead "
                              "(send_at_out_of_range)."},
    "validitySeconds": {"type": "integer", "minimum": 10, "maximum": 172800,
                        "description": "Only queued: how long after its due time it may still be handed to a "
                                       "provider; default OMNIGATE_QUEUE_VALIDITY_S (36000)."},
    "priority": {"allOf": [ref("Priority")], "default": "normal",
                 "description": "Only queued: per sender, high before normal before low, oldest due first."},
}, required=["to"], description="text, template or both are required.")
SCHEMAS["QueuedResult"] = obj({
    "reference": ref("Reference"), "status": {"type": "string", "enum": ["queued", "scheduled"]},
    "sendAt": ref("Timestamp"), "validUntil": ref("Timestamp")},
    required=["reference", "status", "validUntil"],
    description="scheduled when sendAt is in the future, else queued; validUntil = the due time + "
                "validitySeconds.")
SCHEMAS["QueueSender"] = obj({
    "channel": ref("Channel"),
    "sender": {"type": "string", "description": "Meta: the phone number id; QR: the session; SMS: the sender id."},
    "queued": {"type": "integer", "minimum": 0, "description": "Due, not yet handed over."},
    "scheduled": {"type": "integer", "minimum": 0, "description": "Due later."},
    "oldestDueAt": nullable(ref("Timestamp")),
    "messagesPerSecond": {"type": "number", "description": "The configured rate (QR: per minute / 60)."},
    "throttledUntil": nullable(ref("Timestamp"))})
SCHEMAS["QueueList"] = obj({"items": {"type": "array", "items": ref("QueueSender")}})

# The 422 codes a send's body can get besides the JSON body's (the send's checks, messaging/send.c):
# POST /api/omni/send answers them, and a batch lists them per rejected message (API.md §20).
SEND_422 = ["whatsapp_from_not_registered", "sender_not_approved", "text_too_long", "no_channel_available",
            "template_not_found", "template_not_approved", "template_parameters_mismatch", "send_at_out_of_range",
            "recipient_opted_out"]
# The codes of a batch's rejected message (queue/batch_api.c): a send's, a {{key}} without a value,
# and a field that is not a send's.
BATCH_REJECTIONS = sorted(["validation_failed", "unknown_field", "missing_variable"] + SEND_422)

# ---- batches (API.md §20)
SCHEMAS["BatchVariables"] = {
    "type": "object", "additionalProperties": {"type": "string"},
    "description": "Values of the {{key}} placeholders (key: 1-64 letters, digits, _, - or .) of text and of "
                   "the template's parameter values: a placeholder without a value rejects the message "
                   "(missing_variable, field variables.<key>); braces around anything else are kept as they "
                   "are. A message's variables are merged over the defaults' ones.",
    "examples": [{"name": "Ana", "order": "A-17"}]}
SCHEMAS["BatchMessage"] = obj(dict(
    SCHEMAS["SendRequest"]["properties"],
    queue={"const": True, "default": True,
           "description": "A batch's messages are always queued: true or absent (false rejects the message, "
                          "validation_failed, field queue)."},
    variables=ref("BatchVariables")), required=[],
    description="A send's fields (SendRequest), each over the same field of defaults, plus variables. The "
                "merged message is checked as a send is (to is required, text or template); a field that is "
                "not a send's rejects this message (unknown_field), not the batch.")
SCHEMAS["BatchRequest"] = obj({
    "defaults": {**ref("BatchMessage"),
                 "description": "Fields every message gets unless it gives its own (and default variables). "
                                "A member that is not a send's field (or variables) refuses the whole request: "
                                "422 unknown_field, field defaults.<key>."},
    "messages": {"type": "array", "minItems": 1, "items": ref("BatchMessage"),
                 "description": "1 to OMNIGATE_BATCH_MAX (default 1000) messages; more: 413 batch_too_large "
                                "before any is checked."},
}, required=["messages"])
SCHEMAS["BatchRejection"] = obj({
    "index": {"type": "integer", "minimum": 0, "description": "The message's place in messages, from 0."},
    "error": obj({
        "code": {"type": "string", "enum": BATCH_REJECTIONS,
                 "description": "What a send of this message would be answered 422 with, or missing_variable, "
                                "or unknown_field (a field that is not a send's)."},
        "field": nullable({"type": "string", "description": "The field inside the message (to, text, "
                                                            "variables.<key>, ...)."}),
        "message": {"type": "string"}}),
})
SCHEMAS["BatchResult"] = obj({
    "batchId": ref("BatchId"),
    "accepted": {"type": "integer", "minimum": 1, "description": "The messages queued."},
    "references": {"type": "array", "minItems": 1, "items": nullable(ref("Reference")),
                   "description": "One per message, in request order: its reference, or null when rejected."},
    "rejected": {"type": "array", "items": ref("BatchRejection"), "description": "By index."},
}, description="The accepted messages are queued (API.md §19), all in one transaction with the batch.")
SCHEMAS["BatchRejectedData"] = {
    "anyOf": [obj({
        "batchId": {"type": "null"},
        "accepted": {"const": 0},
        "references": {"type": "array", "minItems": 1, "items": {"type": "null"}},
        "rejected": {"type": "array", "minItems": 1, "items": ref("BatchRejection")},
    }), {"type": "null"}],
    "description": "The data of a batch's 422 validation_failed: when every message was rejected (error.field "
                   "messages), the batch answer with batchId null and accepted 0, and nothing is queued; null "
                   "when the request itself is refused (messages missing, empty or not an array, defaults not "
                   "an object, a malformed Idempotency-Key)."}
SCHEMAS["BatchCounts"] = obj({s: {"type": "integer", "minimum": 0} for s in (
    "queued", "scheduled", "sent", "delivered", "read", "failed", "undelivered", "expired", "canceled")},
    description="Each message once, under its current status: one whose provider has not answered yet is "
                "queued, one whose outcome is unknown failed. Kept as messages change status.")
SCHEMAS["Batch"] = obj({
    "batchId": ref("BatchId"), "createdAt": ref("Timestamp"),
    "total": {"type": "integer", "minimum": 1, "description": "The messages the batch accepted."},
    "counts": ref("BatchCounts"),
    "completedAt": nullable({**ref("Timestamp"),
                             "description": "When no message of the batch was queued, scheduled or waiting for "
                                            "its provider any more (the event batch.completed, once, with this "
                                            "object as its data); delivery statuses later still move the "
                                            "counts."}),
})
SCHEMAS["BatchCanceled"] = obj({"canceled": {"type": "integer", "minimum": 0,
                                             "description": "The messages canceled now (0 when none was left "
                                                            "to cancel)."}})
SCHEMAS["SmsSendRequest"] = obj({"to": ref("E164"), "text": {"type": "string", "minLength": 1, "maxLength": 4096},
                                 "sender": ref("Sender")}, required=["to", "text"])
SCHEMAS["OtpSendRequest"] = obj({
    "to": ref("E164"),
    "length": {"type": "integer", "minimum": 4, "maximum": 10, "default": 6},
    "ttlSeconds": {"type": "integer", "minimum": 60, "maximum": 1800, "default": 300},
    "template": {"type": "string", "maxLength": 480, "pattern": r"\{code\}",
                 "default": "Your verification code is {code}",
                 "description": "The SMS text: must contain {code} exactly once; at most 480 bytes."},
    "sender": ref("Sender"),
    "channels": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": True,
                 "items": {"type": "string", "enum": ["whatsapp_meta", "sms"]}, "default": ["sms"],
                 "description": "The channels to try, in fallback order, until one delivers the code (one code per "
                                "OTP). whatsapp_meta sends the tenant's authentication template "
                                "(settings.otp.whatsappTemplate) from its defaultWhatsappFrom: the code is the body "
                                "parameter and the parameter of the copy-code button (API.md §18). Channels the "
                                "tenant has not enabled are skipped."},
}, required=["to"])
SCHEMAS["OtpVerifyRequest"] = {
    "type": "object",
    "properties": {"reference": ref("Reference"), "to": ref("E164"),
                   "code": {"type": "string", "pattern": "^[0-9]{4,10}$"}},
    "required": ["code"],
    "additionalProperties": False,
    "oneOf": [{"required": ["reference"]}, {"required": ["to"]}],
    "description": "Either reference or to (the newest pending OTP of that number), not both.",
}
SCHEMAS["TenantCreateRequest"] = obj({
    "name": {"type": "string", "minLength": 1, "maxLength": 200},
    "unifiedApiEnabled": {"type": "boolean", "default": False},
    "settings": nullable(ref("Settings")),
}, required=["name"])
SCHEMAS["TenantPatchRequest"] = obj({
    "name": {"type": "string", "minLength": 1, "maxLength": 200},
    "unifiedApiEnabled": {"type": "boolean"},
    "settings": {"type": "object", "description": "A JSON merge patch (RFC 7396) of the settings: null removes "
                                                  "a member. The merged settings must be valid Settings; a "
                                                  "masked secret sent back keeps the stored one."},
}, required=[])
SCHEMAS["TokenCreateRequest"] = obj({"name": {"type": "string", "maxLength": 100}, "scopes": ref("Scopes")},
                                    required=[])
SCHEMAS["WebhookPutRequest"] = obj({
    "url": {"type": "string", "minLength": 1, "maxLength": 2048, "format": "uri",
            "description": "https:// (http:// with OMNIGATE_WEBHOOK_ALLOW_HTTP=true); not a loopback, private, "
                           "link-local or multicast address unless OMNIGATE_WEBHOOK_ALLOW_PRIVATE=true."},
    "events": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string", "enum": WH_EVENTS},
               "description": "Default: all. " + WH_EVENTS_TEXT},
}, required=["url"])
# ---- the tenant's own keys (API.md §23)
SCHEMAS["TenantSelf"] = obj({
    "id": ref("Uuid"), "name": {"type": "string", "minLength": 1, "maxLength": 200},
    "unifiedApiEnabled": {"type": "boolean", "description": "false: the plan locks the unified API (no token "
                                                            "can be created, API.md §1)."},
    "scopes": {**ref("Scopes"), "description": "The calling token's scopes."},
}, description="The tenant of the calling token, and that token's scopes.")

# ---- QR sessions (API.md §23)
QR_STATUSES = ["STOPPED", "STARTING", "SCAN_QR_CODE", "WORKING", "FAILED"]
SCHEMAS["QrSession"] = obj({
    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
    "status": {"type": "string", "enum": QR_STATUSES,
               "description": "As WAHA's last session.status event said (or its answer to the last start, stop "
                              "or logout through the gateway)."},
    "number": nullable(ref("E164"), "The WhatsApp account linked to the session, while known."),
    "updatedAt": ref("Timestamp"),
}, description="A WAHA session of the tenant's whatsapp_qr numbers, as the gateway knows it.")

# ---- examples ------------------------------------------------------------------------------

REF_EX = "kf_01JD2W7T9S0QKX3M6F8N2B4C5D"
SEND_EX = {"success": True, "message": "Message sent via whatsapp_meta", "data": {
    "reference": REF_EX, "deliveryMode": "fallback", "winningChannel": "whatsapp_meta",
    "attempts": [
        {"channel": "whatsapp_qr", "status": "failed", "latencyMs": 10001,
         "error": {"code": "provider_timeout", "message": "no answer in 10000 ms"}, "cost": None},
        {"channel": "whatsapp_meta", "status": "sent", "latencyMs": 183,
         "providerMessageId": "wamid.HBgNNjI4MTIzNDU2Nzg5MBUCABEYEjQ2",
         "cost": {"amount": "0.0140", "currency": "USD"}}],
    "skipped": []}}
TENANT_EX = {"id": "3f0c6b9e-2a4d-4e8b-9c1f-5d7a8b6c4e21", "name": "acme", "unifiedApiEnabled": True,
             "settings": {"defaultChannels": ["whatsapp_qr", "whatsapp_meta", "sms"],
                          "channels": {"sms": {"enabled": True, "senders": ["ACME"], "defaultSender": "ACME"}}},
             "createdAt": "2026-11-22T14:05:25.123Z", "updatedAt": "2026-11-22T14:05:25.123Z"}
TOKEN_EX = {"id": "8a1d2c3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "name": "backend",
            "token": "kft_Qm3x9ZbV1cT7yLw2Nf8Hk4Rj6Pd0Sa5Ge1Uo3XiT", "prefix": "kft_Qm3x9ZbV",
            "scopes": ["send", "otp", "logs"], "createdAt": "2026-11-22T14:05:25.123Z"}
TOKEN_ITEM_EX = {"id": "8a1d2c3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "name": "backend", "prefix": "kft_Qm3x9ZbV",
                 "scopes": ["send", "otp", "logs"], "createdAt": "2026-11-22T14:05:25.123Z",
                 "lastUsedAt": "2026-11-22T15:00:01.002Z", "revokedAt": None}
WEBHOOK_EX = {"url": "https://example.com/omnigate", "events": WH_EVENTS,
              "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw0nqGk/TKm3A=", "enabled": True, "disabledAt": None,
              "disabledReason": None, "createdAt": "2026-11-22T14:05:25.123Z",
              "updatedAt": "2026-11-22T14:05:25.123Z"}
WEBHOOK_MASKED_EX = dict(WEBHOOK_EX, secret="whsec_****m3A=")
DELIVERY_EX = {"id": "msg_0000000000000001a3f09c1d2e4b5f67", "type": "message.delivered", "reference": REF_EX,
               "status": "failed", "createdAt": "2026-11-22T14:05:27.010Z", "deliveredAt": None,
               "nextTryAt": "2026-11-22T14:10:32.400Z", "lastError": "http_error",
               "tries": [{"at": "2026-11-22T14:05:27.050Z", "httpStatus": 503, "latencyMs": 41,
                          "error": {"code": "http_error", "message": "HTTP 503"}},
                         {"at": "2026-11-22T14:05:32.400Z", "httpStatus": None, "latencyMs": 15000,
                          "error": {"code": "timeout", "message": "no answer in 15 s"}}]}


def ok_ex(message, data):
    return {"success": True, "message": message, "data": data}


TEMPLATE_EX = {"wabaId": "102290129340398", "name": "order_update", "language": "en_US", "status": "APPROVED",
               "category": "utility", "parameterFormat": "positional", "parameters": ["1", "2"],
               "body": "Hello {{1}}, your order {{2}} has shipped.",
               "buttons": [{"index": 0, "type": "URL", "text": "Track", "url": "https://example.com/t/{{1}}",
                            "parameter": True}],
               "updatedAt": "2026-11-22T14:05:25.123Z"}
TEMPLATE_CURSOR_EX = "order_update/en_US/102290129340398"

# ---- inbound messages and consent (API.md §21)
INBOUND_EX = {"id": "in_1024", "channel": "whatsapp_meta", "from": "+4915112345601", "to": "+6281234567890",
              "type": "text", "text": "Hello there",
              "providerMessageId": "wamid.HBgNNDkxNTExMjM0NTYwMRUCABIYFjNFQjBDNzY3RDI2QTFENUIA",
              "phoneNumberId": "109876543210", "session": None, "receivedAt": "2026-11-22T14:05:25.000Z"}
SUPPRESSION_EX = {"to": "+4915112345601", "channel": "sms", "source": "keyword", "reason": "STOP",
                  "createdAt": "2026-11-22T14:05:25.123Z"}
TWIML_EMPTY = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
NUMBER_PARAM = pparam("to", ref("E164"), "The number, E.164 (clients encode + as %2B; a raw + is taken too); "
                                         "anything else is 422 validation_failed (field to).")


def inbound_params():
    return [qparam("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "Page size."),
            qparam("cursor", {"type": "string", "pattern": "^[0-9]{1,19}$"},
                   "nextCursor of the previous page (the last message's id, digits)."),
            qparam("from", ref("E164"), "Only messages from this number (encode + as %2B)."),
            qparam("channel", ref("Channel"), "Only messages of this channel."),
            qparam("since", {"type": "string", "format": "date-time"}, "Received at or after (RFC 3339)."),
            qparam("until", {"type": "string", "format": "date-time"}, "Received before (RFC 3339).")]


def suppression_params():
    return [qparam("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "Page size."),
            qparam("cursor", {"type": "string", "pattern": r"^\+[1-9][0-9]{7,14}/(sms|whatsapp)$"},
                   "nextCursor of the previous page (the last item's number/kind; encode + as %2B)."),
            qparam("to", ref("E164"), "Only this number's suppressions (encode + as %2B)."),
            qparam("channel", ref("ConsentKind"), "Only suppressions of this kind.")]


def template_params():
    return [qparam("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "Page size."),
            qparam("cursor", {"type": "string", "pattern": "^[a-z0-9_]{1,512}/[A-Za-z_]{2,15}/[0-9]{1,32}$"},
                   "nextCursor of the previous page (name/language/wabaId)."),
            qparam("name", {"type": "string", "pattern": "^[a-z0-9_]{1,512}$"}, "Only templates of this name."),
            qparam("status", {"type": "string", "pattern": "^[A-Z_]{1,32}$"},
                   "Only templates in this status (as Meta spells it: APPROVED, PAUSED, ...)."),
            qparam("language", {"type": "string", "pattern": "^[A-Za-z_]{2,15}$"},
                   "Only templates in this language (en, en_US, ...).")]


OMNI_ITEM_EX = {"reference": REF_EX, "to": "+6281234567890", "text": "Hi Ana, your order A-17 ships today",
                "template": {"name": "order_update", "language": "en_US"}, "deliveryMode": "fallback",
                "channels": ["whatsapp_meta", "sms"],
                "status": "delivered", "winningChannel": "whatsapp_meta", "fallbackOn": None,
                "fallbackAfterSeconds": None, "priority": None, "dueAt": None, "validUntil": None, "attempts": [
                    {"channel": "whatsapp_meta", "status": "sent", "latencyMs": 183, "content": "template",
                     "throttles": 0,
                     "providerMessageId": "wamid.HBgNNjI4MTIzNDU2Nzg5MBUCABEYEjQ2", "fallbackReason": None,
                     "cost": {"amount": "0.0140", "currency": "USD"},
                     "attemptedAt": "2026-11-22T14:05:25.130Z", "deliveryStatus": "delivered",
                     "deliveredAt": "2026-11-22T14:05:27.001Z", "readAt": None, "deliveryError": None,
                     "statusHistory": [{"status": "sent", "at": "2026-11-22T14:05:26.000Z"},
                                       {"status": "delivered", "at": "2026-11-22T14:05:27.001Z"}]}],
                "skipped": [], "createdAt": "2026-11-22T14:05:25.123Z", "completedAt": "2026-11-22T14:05:25.320Z"}


def logs_params(fourth, statuses):
    ps = [qparam("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "Page size."),
          qparam("cursor", {"type": "string"}, "nextCursor of the previous page (opaque)."),
          qparam("to", ref("E164"), "Only records to this number."),
          qparam("status", {"type": "string", "enum": statuses}, "Only records in this status."),
          qparam("reference", ref("Reference"), "Only this record."),
          qparam("since", ref("Timestamp"), "Created at or after (RFC 3339)."),
          qparam("until", ref("Timestamp"), "Created before (RFC 3339).")]
    if fourth == "channel":
        ps.append(qparam("channel", ref("Channel"), "Only messages with an attempt on this channel."))
        ps.append(qparam("batchId", ref("BatchId"), "Only the messages of this batch (API.md §20); anything but "
                                                    "kb_ and 26 characters is 422 validation_failed."))
    elif fourth == "source":
        ps.append(qparam("source", {"type": "string", "enum": ["sms", "omni", "otp"]},
                         "Only SMS of this source."))
    return ps


LOGS = {
    "omni": ("OmniLogPage", "channel", OMNI_STATUSES,
             "Unified log", {"items": [OMNI_ITEM_EX], "nextCursor": None}),
    "sms": ("SmsLogPage", "source", ["sent", "failed", "delivered", "read", "undelivered"], "SMS log",
            {"items": [{"reference": REF_EX, "source": "otp", "to": "+6281234567890", "sender": "ACME",
                        "text": "Your verification code is ******", "segments": 1, "encoding": "gsm7",
                        "status": "sent", "providerMessageId": "SM0123456789abcdef0123456789abcdef",
                        "error": None, "cost": {"amount": "0.0450", "currency": "USD"},
                        "deliveryStatus": "delivered", "deliveredAt": "2026-11-22T14:05:27.001Z",
                        "createdAt": "2026-11-22T14:05:25.123Z"}], "nextCursor": None}),
    "otp": ("OtpLogPage", None, ["pending", "verified", "expired", "locked", "failed", "superseded"], "OTP log",
            {"items": [{"reference": REF_EX, "to": "+6281234567890", "status": "verified", "length": 6,
                        "expiresAt": "2026-11-22T14:10:25.123Z", "createdAt": "2026-11-22T14:05:25.123Z",
                        "verifiedAt": "2026-11-22T14:06:01.500Z", "failedAttempts": 0, "channel": "sms",
                        "history": [{"event": "send_failed", "channel": "whatsapp_meta",
                                     "error": {"code": "provider_rejected", "providerCode": "131026",
                                               "httpStatus": 400, "message": "Meta Cloud API refused the message "
                                               "(HTTP 400, code 131026): (#131026) Message undeliverable"},
                                     "at": "2026-11-22T14:05:25.310Z"},
                                    {"event": "sent", "channel": "sms", "error": None,
                                     "at": "2026-11-22T14:05:25.400Z"},
                                    {"event": "verify_success", "channel": None, "error": None,
                                     "at": "2026-11-22T14:06:01.500Z"}]}],
             "nextCursor": None}),
}


def build():
    paths = {}

    def add(path, method, operation):
        paths.setdefault(path, {})[method] = operation

    # ---- tenant API
    add("/api/omni/send", "post", op(
        "Send a message over WhatsApp and/or SMS", ["messages"],
        {200: ok_response(200, ref("SendResult"), "At least one channel accepted the message.", SEND_EX,
                          headers=RL + ("Idempotency-Replayed", "X-Omnigate-Reference")),
         202: ok_response(202, ref("QueuedResult"), "A queued send (queue or sendAt) is committed; nothing is "
                          "sent before this answer.",
                          ok_ex("Message queued", {"reference": REF_EX, "status": "queued",
                                                   "validUntil": "2026-11-23T00:05:25.123Z"}),
                          headers=RL + ("Idempotency-Replayed", "X-Omnigate-Reference"))},
        merge(JSON_BODY, TENANT, DB, IDEM, {
            403: ["unified_api_locked"],
            422: SEND_422,
            502: ["delivery_failed"]}),
        TENANT_SEC, [IDEM_KEY],
        json_body("SendRequest", {"queued": {"to": "+6281234567890", "text": "Your order has shipped",
                                             "channels": ["whatsapp_meta", "sms"], "queue": True,
                                             "priority": "low", "validitySeconds": 3600},
                                  "scheduled": {"to": "+6281234567890", "text": "Your appointment is at 10:00",
                                                "sendAt": "2026-11-23T08:00:00Z"},"fallback": {"to": "+6281234567890", "text": "Your order has shipped",
                                               "channels": ["whatsapp_qr", "whatsapp_meta", "sms"]},
                                  "template": {"to": "+6281234567890", "channels": ["whatsapp_meta", "sms"],
                                               "template": {"name": "order_update", "language": "en_US",
                                                            "parameters": ["Ana", "A-17"],
                                                            "buttons": [{"index": 0, "subType": "url",
                                                                         "parameter": "A17"}]}},
                                  "deliveryBased": {"to": "+6281234567890", "text": "Hello",
                                                    "fallbackOn": "delivered", "fallbackAfterSeconds": 120}}),
        "The message row is committed (pending) before any provider is called; the answer is sent once the "
        "attempts are committed (API.md §2). 200 when a channel accepted it, 502 delivery_failed with the "
        "same data when none did. A channel whose kind (sms, whatsapp) the recipient opted out of is skipped "
        "with reason recipient_opted_out; when none is left, 422 recipient_opted_out and nothing is written "
        "(API.md §21).",
        data={"delivery_failed": ref("SendResult"), "outcome_unknown": ref("OutcomeUnknown")},
        error_headers=RL + ("Idempotency-Replayed",), op_id="omniSend"))
    add("/api/sms/send", "post", op(
        "Send an SMS", ["messages"],
        {200: ok_response(200, ref("SmsResult"), "The SMS provider accepted the message.",
                          {"success": True, "message": "SMS sent", "data": {
                              "reference": REF_EX, "status": "sent",
                              "providerMessageId": "SM0123456789abcdef0123456789abcdef", "segments": 1,
                              "encoding": "gsm7", "cost": {"amount": "0.0450", "currency": "USD"}}}, headers=RL + ("Idempotency-Replayed",))},
        merge(JSON_BODY, TENANT, DB, IDEM, {
            422: ["sender_not_approved", "text_too_long", "no_channel_available", "recipient_opted_out"],
            502: ["delivery_failed"]}),
        TENANT_SEC, [IDEM_KEY],
        json_body("SmsSendRequest", {"sms": {"to": "+6281234567890", "text": "Your order has shipped",
                                             "sender": "ACME"}}),
        "422 recipient_opted_out, nothing written, when the recipient opted out of sms (API.md §21).",
        data={"delivery_failed": ref("SmsResult"), "outcome_unknown": ref("OutcomeUnknown")},
        error_headers=RL + ("Idempotency-Replayed",), op_id="smsSend"))
    add("/api/sms/otp/send", "post", op(
        "Send a one-time password by SMS or WhatsApp", ["otp"],
        {200: ok_response(200, ref("OtpSendResult"), "The code was sent (it is never returned).",
                          {"success": True, "message": "OTP sent", "data": {
                              "reference": REF_EX, "to": "+6281234567890", "expiresAt": "2026-11-22T14:10:25.123Z",
                              "length": 6, "status": "sent", "channel": "whatsapp_meta"}},
                          headers=RL + ("Idempotency-Replayed",))},
        merge(JSON_BODY, TENANT, DB, IDEM, {
            422: ["sender_not_approved", "text_too_long", "no_channel_available", "whatsapp_from_not_registered",
                  "template_not_found", "template_not_approved", "template_parameters_mismatch",
                  "recipient_opted_out"],
            429: ["otp_cooldown"], 502: ["delivery_failed"]}),
        TENANT_SEC, [IDEM_KEY],
        json_body("OtpSendRequest", {"default": {"to": "+6281234567890"},
                                     "custom": {"to": "+6281234567890", "length": 8, "ttlSeconds": 600,
                                                "template": "ACME code: {code}", "sender": "ACME"},
                                     "whatsapp": {"to": "+6281234567890", "channels": ["whatsapp_meta", "sms"]}}),
        "A new OTP for the number supersedes the pending one. At most one send per number every 30 s "
        "(otp_cooldown) and 5 an hour (rate_limited). With whatsapp_meta among the channels, the tenant's "
        "authentication template is checked before anything is written, each error with field channels: "
        "settings.otp.whatsappTemplate unset, or not in the catalogue of the defaultWhatsappFrom number's WABA (or "
        "that number has no wabaId): template_not_found; not APPROVED: template_not_approved; a body of other "
        "than one parameter: template_parameters_mismatch; defaultWhatsappFrom unset or not registered for "
        "whatsapp_meta: whatsapp_from_not_registered. Channels whose kind (sms, whatsapp) the number opted out "
        "of are not tried; when none is left, 422 recipient_opted_out and nothing is written (API.md §21).",
        data={"delivery_failed": ref("OtpSendResult"), "outcome_unknown": ref("OutcomeUnknown")},
        error_headers=RL + ("Idempotency-Replayed",), op_id="otpSend"))
    add("/api/sms/otp/verify", "post", op(
        "Verify a one-time password", ["otp"],
        {200: ok_response(200, ref("OtpVerifyResult"), "The right code: the OTP is consumed.",
                          {"success": True, "message": "OTP verified", "data": {"reference": REF_EX,
                                                                                 "verified": True}},
                          headers=RL + ("Idempotency-Replayed",))},
        merge(JSON_BODY, TENANT, DB, IDEM, {
            404: ["not_found"], 409: ["otp_already_verified"], 410: ["otp_expired"], 422: ["otp_invalid"],
            429: ["otp_locked"]}),
        TENANT_SEC, [IDEM_KEY],
        json_body("OtpVerifyRequest", {"byReference": {"reference": REF_EX, "code": "123456"},
                                       "byNumber": {"to": "+6281234567890", "code": "123456"}}),
        "After 5 wrong codes the OTP is locked (429 otp_locked, also for the right code from then on).",
        data={"otp_invalid": ref("OtpInvalid"), "outcome_unknown": ref("OutcomeUnknown")},
        error_headers=RL + ("Idempotency-Replayed",), op_id="otpVerify"))
    for kind, path in (("omni", "/api/omni/logs"), ("sms", "/api/sms/logs"), ("otp", "/api/sms/otp/logs")):
        page, fourth, statuses, title, example = LOGS[kind]
        errs = merge(TENANT, DB, {422: ["validation_failed"], 503: ["query_timeout"]})
        if kind == "omni":
            errs = merge(errs, {403: ["unified_api_locked"]})
        add(path, "get", op(
            title + ", newest first", ["logs"],
            {200: ok_response(200, ref(page), "One page.", {"success": True, "message": "logs", "data": example},
                              headers=RL)},
            errs, TENANT_SEC, logs_params(fourth, statuses),
            description="Unknown query parameters are refused (422 validation_failed names them).",
            error_headers=RL, op_id=kind + "Logs"))
    omni_item_ex = OMNI_ITEM_EX
    ref_param = pparam("reference", {"type": "string"}, "The message's reference.")
    add("/api/omni/messages/{reference}", "get", op(
        "One message as its unified log item, queued or not", ["messages"],
        {200: ok_response(200, ref("OmniLogItem"), "The message.", ok_ex("message", omni_item_ex), headers=RL)},
        merge(TENANT, DB, {403: ["unified_api_locked"], 404: ["not_found"]}), TENANT_SEC, [ref_param],
        description="Scope logs. 404 for another tenant's reference (API.md §19).", error_headers=RL, op_id="omniMessage"))
    add("/api/omni/messages/{reference}/cancel", "post", op(
        "Cancel a queued or scheduled message", ["messages"],
        {200: ok_response(200, ref("OmniLogItem"), "Canceled (also when it already was): the message, status "
                          "canceled.", ok_ex("canceled", dict(omni_item_ex, status="canceled")), headers=RL)},
        merge(TENANT, DB, {403: ["unified_api_locked"], 404: ["not_found"], 409: ["not_cancelable"]}),
        TENANT_SEC, [ref_param],
        description="Scope send. A message is canceled or handed to a provider, never both: 409 not_cancelable (the message "
        "in data, with its status) once a provider is working on it, accepted it, or it ended.",
        data={"not_cancelable": ref("OmniLogItem")}, error_headers=RL, op_id="omniCancel"))
    add("/api/omni/queue", "get", op(
        "What the tenant has queued, per sender", ["messages"],
        {200: ok_response(200, ref("QueueList"), "One item per sender with anything queued or scheduled.",
                          ok_ex("queue", {"items": [{"channel": "whatsapp_meta", "sender": "109876543210",
                                                     "queued": 1200, "scheduled": 40,
                                                     "oldestDueAt": "2026-11-22T14:05:25.123Z",
                                                     "messagesPerSecond": 80, "throttledUntil": None}]}),
                          headers=RL)},
        merge(TENANT, DB, {403: ["unified_api_locked"]}), TENANT_SEC, [],
        description="Scope logs. Not paged (API.md §19).", error_headers=RL, op_id="omniQueue"))
    batch_ex = {"batchId": "kb_01JD2W7T9S0QKX3M6F8N2B4C5E", "createdAt": "2026-11-22T14:05:25.123Z", "total": 2,
                "counts": {"queued": 0, "scheduled": 0, "sent": 0, "delivered": 1, "read": 0, "failed": 0,
                           "undelivered": 0, "expired": 0, "canceled": 1},
                "completedAt": "2026-11-22T14:05:27.456Z"}
    add("/api/omni/batches", "post", op(
        "Queue up to OMNIGATE_BATCH_MAX messages in one request", ["messages"],
        {202: ok_response(202, ref("BatchResult"), "The valid messages are queued (committed, with the batch, "
                          "in one transaction); the others are listed in rejected.",
                          ok_ex("Batch queued", {
                              "batchId": "kb_01JD2W7T9S0QKX3M6F8N2B4C5E", "accepted": 2,
                              "references": ["kf_01JD2W7T9S0QKX3M6F8N2B4C5F", None, "kf_01JD2W7T9S0QKX3M6F8N2B4C5G"],
                              "rejected": [{"index": 1, "error": {
                                  "code": "missing_variable", "field": "variables.order",
                                  "message": "{{order}} has no value in variables"}}]}),
                          headers=RL + ("Idempotency-Replayed",))},
        merge(JSON_BODY, TENANT, DB, {
            403: ["unified_api_locked"], 409: ["idempotency_in_progress"], 413: ["batch_too_large"],
            422: ["idempotency_key_reused"]}),
        TENANT_SEC, [IDEM_KEY],
        json_body("BatchRequest", {
            "variables": {"defaults": {"channels": ["whatsapp_meta", "sms"],
                                       "text": "Hi {{name}}, your order {{order}} ships today",
                                       "priority": "low", "sendAt": "2026-12-01T09:00:00Z"},
                          "messages": [{"to": "+6281234567001", "variables": {"name": "Ana", "order": "A-17"}},
                                       {"to": "+6281234567002", "variables": {"name": "Budi", "order": "A-18"},
                                        "channels": ["sms"]}]},
            "template": {"defaults": {"channels": ["whatsapp_meta", "sms"],
                                      "template": {"name": "order_update", "language": "en_US",
                                                   "parameters": ["{{name}}", "{{order}}"]}},
                         "messages": [{"to": "+6281234567001", "variables": {"name": "Ana", "order": "A-17"}}]}}),
        "Scope send (API.md §20). Bodies up to 4 MiB on this route (413 payload_too_large beyond); one request "
        "for the tenant's rate limit. More than OMNIGATE_BATCH_MAX (default 1000) messages: 413 "
        "batch_too_large before anything is checked. Each message is defaults with its own fields over them, "
        "its variables filled in, then checked like a send (POST /api/omni/send, queued): the valid ones are "
        "queued, the others listed with the error a send would get (202). When every message is rejected: "
        "422 validation_failed with the same data (batchId null, accepted 0) and nothing queued. An unknown "
        "top-level field, or one in defaults, is 422 unknown_field for the whole request. The Idempotency-Key "
        "is honoured as for sends (API.md §6).",
        data={"validation_failed": ref("BatchRejectedData")},
        error_headers=RL + ("Idempotency-Replayed",), op_id="batchCreate"))
    batch_param = pparam("batchId", {"type": "string"}, "The batch's id (kb_ + 26 characters; anything else "
                                                        "is 404).")
    add("/api/omni/batches/{batchId}", "get", op(
        "A batch: its messages counted by status", ["messages"],
        {200: ok_response(200, ref("Batch"), "The batch.", ok_ex("batch", batch_ex), headers=RL)},
        merge(TENANT, DB, {403: ["unified_api_locked"], 404: ["not_found"]}), TENANT_SEC, [batch_param],
        description="Scope logs. The counts are kept as messages change status: reading them never scans the "
                    "batch. 404 for another tenant's batch (API.md §20). GET /api/omni/logs?batchId= lists its "
                    "messages.", error_headers=RL, op_id="batchGet"))
    add("/api/omni/batches/{batchId}/cancel", "post", op(
        "Cancel every message of a batch not yet handed to a provider", ["messages"],
        {200: ok_response(200, ref("BatchCanceled"), "How many messages were canceled now.",
                          ok_ex("canceled", {"canceled": 998}), headers=RL)},
        merge(TENANT, DB, {403: ["unified_api_locked"], 404: ["not_found"]}), TENANT_SEC, [batch_param],
        description="Scope send. Each queued or scheduled message of the batch is canceled as POST "
                    "/api/omni/messages/{reference}/cancel would (never one a provider is working on); 0 when "
                    "none is left. 404 for another tenant's batch (API.md §20).",
        error_headers=RL, op_id="batchCancel"))
    add("/api/webhooks/deliveries", "get", op(
        "The tenant's webhook deliveries, newest first", ["webhooks"],
        {200: ok_response(200, ref("WebhookDeliveryPage"), "One page.",
                          ok_ex("webhook deliveries", {"items": [DELIVERY_EX], "nextCursor": None}), headers=RL)},
        merge(TENANT, DB, {422: ["validation_failed"]}), TENANT_SEC,
        [qparam("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "Page size."),
         qparam("cursor", {"type": "string", "pattern": "^[1-9][0-9]{0,17}$"}, "nextCursor of the previous page."),
         qparam("status", {"type": "string", "enum": ["pending", "failed", "delivered", "exhausted"]},
                "Only deliveries in this status.")],
        error_headers=RL, op_id="webhookDeliveries"))
    add("/api/webhooks/deliveries/{id}/retry", "post", op(
        "Queue one more try of a webhook delivery now", ["webhooks"],
        {200: ok_response(200, ref("WebhookDelivery"), "Queued; the delivery as it is now.",
                          ok_ex("one more try is queued", DELIVERY_EX), headers=RL)},
        merge(TENANT, DB, {404: ["not_found"], 409: ["webhook_disabled"]}), TENANT_SEC,
        [pparam("id", {"type": "string"}, "The delivery's id (its webhook-id, msg_ + 32 hex digits).")],
        error_headers=RL, op_id="webhookRetry"))

    add("/api/whatsapp/templates", "get", op(
        "The WhatsApp templates the tenant may send", ["templates"],
        {200: ok_response(200, ref("TemplatePage"), "One page, by name, language and WABA.",
                          ok_ex("templates", {"items": [TEMPLATE_EX], "nextCursor": TEMPLATE_CURSOR_EX}),
                          headers=RL)},
        merge(TENANT, DB, {422: ["validation_failed"]}), TENANT_SEC, template_params(),
        description="The catalogues of the WABAs of the tenant's whatsapp_meta numbers (API.md §18), as the "
                    "last sync from Meta and Meta's status webhooks left them. Needs scope send; not locked "
                    "by the plan. Unknown query parameters are refused (422 validation_failed names them).",
        error_headers=RL, op_id="templateList"))

    # ---- inbound messages and consent (API.md §21)
    not_locked = " Not locked by the plan (no route of the unified API)."
    add("/api/inbound", "get", op(
        "The tenant's inbound messages, newest first", ["inbound"],
        {200: ok_response(200, ref("InboundPage"), "One page.",
                          ok_ex("inbound messages", {"items": [INBOUND_EX], "nextCursor": "1024"}), headers=RL)},
        merge(TENANT, DB, {422: ["validation_failed"]}), TENANT_SEC, inbound_params(),
        description="Messages the tenant's numbers received (API.md §21): Meta's value.messages[] (routed by "
                    "phone number id), WAHA's event message (by session and the session's number) and Twilio's "
                    "inbound SMS (by To, one of channels.sms.inboundNumbers), each stored once per provider "
                    "message id. Needs scope logs." + not_locked + " Unknown query parameters are refused (422 "
                    "validation_failed names them).",
        error_headers=RL, op_id="inboundList"))
    add("/api/suppressions", "get", op(
        "The tenant's suppressions in force, by number and kind", ["consent"],
        {200: ok_response(200, ref("SuppressionPage"), "One page.",
                          ok_ex("suppressions", {"items": [SUPPRESSION_EX], "nextCursor": None}), headers=RL)},
        merge(TENANT, DB, {422: ["validation_failed"]}), TENANT_SEC, suppression_params(),
        description="The numbers opted out (API.md §21), by a keyword they sent, a provider's answer or the "
                    "API: sends to them skip every channel of the kind. Needs scope send." + not_locked +
                    " Unknown query parameters are refused (422 validation_failed names them).",
        error_headers=RL, op_id="suppressionList"))
    add("/api/suppressions/{to}", "put", op(
        "Opt a number out of kinds of channel", ["consent"],
        {200: ok_response(200, ref("SuppressionChange"), "In force: the kinds suppressed now and those this "
                          "request changed.",
                          ok_ex("suppressed", {"to": "+4915112345601", "suppressed": ["sms", "whatsapp"],
                                               "changed": ["whatsapp"]}), headers=RL)},
        merge(JSON_BODY, TENANT, DB), TENANT_SEC, [NUMBER_PARAM],
        json_body("SuppressionPutRequest", {"sms": {"channels": ["sms"]},
                                            "both": {"channels": ["sms", "whatsapp"],
                                                     "reason": "asked by phone"}}),
        "Suppresses each kind given (source api, the reason kept); a kind already suppressed is left as it is "
        "and not in changed. Each kind changed is an event recipient.opted_out. Sends on every instance honour "
        "it within 2 s. Needs scope send." + not_locked,
        error_headers=RL, op_id="suppressionPut"))
    add("/api/suppressions/{to}", "delete", op(
        "Opt a number back into a kind of channel, or every kind", ["consent"],
        {200: ok_response(200, ref("SuppressionChange"), "The kinds suppressed now and those this request "
                          "changed.",
                          ok_ex("unsuppressed", {"to": "+4915112345601", "suppressed": ["sms"],
                                                 "changed": ["whatsapp"]}), headers=RL)},
        merge(TENANT, DB, {422: ["validation_failed"]}), TENANT_SEC,
        [NUMBER_PARAM, qparam("channel", ref("ConsentKind"), "The kind to opt back into; without it, every kind.")],
        description="Lifts the suppression of each kind (source api); a kind not suppressed is not in changed. "
                    "Each kind changed is an event recipient.opted_in. Needs scope send." + not_locked +
                    " Unknown query parameters are refused (422 validation_failed names them).",
        error_headers=RL, op_id="suppressionDelete"))
    recipient_ex = {"to": "+4915112345601", "suppressed": ["sms"], "suppressions": [SUPPRESSION_EX],
                    "notOnWhatsappUntil": None,
                    "whatsappWindows": [{"phoneNumberId": "109876543210", "openUntil": "2026-11-23T14:05:25.000Z"}],
                    "lastInboundAt": "2026-11-22T14:05:25.000Z"}
    add("/api/recipients/{to}", "get", op(
        "What the tenant knows of a number", ["consent"],
        {200: ok_response(200, ref("Recipient"), "The number: its suppressions, WhatsApp state and last inbound "
                          "message.", ok_ex("recipient", recipient_ex), headers=RL)},
        merge(TENANT, DB, {422: ["validation_failed"]}), TENANT_SEC, [NUMBER_PARAM],
        description="Its suppressions in force, until when it is known not to have WhatsApp, its open customer "
                    "service windows with the tenant's Meta numbers and its newest inbound message's time "
                    "(API.md §21); a number the tenant knows nothing of has empty lists and nulls. Needs scope "
                    "logs." + not_locked,
        error_headers=RL, op_id="recipientGet"))

    add("/api/usage", "get", op(
        "Usage and cost by day and channel, and what fallback saved", ["logs"],
        {200: ok_response(200, ref("Usage"), "The totals.", ok_ex("usage", USAGE_EX), headers=RL)},
        merge(TENANT, DB, {422: ["validation_failed"]}), TENANT_SEC, USAGE_PARAMS,
        description="API.md §22: answered from totals kept as messages and attempts are written (never by "
                    "reading the logs), equal to a count over the logs. Whole UTC days from since's to "
                    "until's; not paged. Needs scope logs. Unknown query parameters are refused (422 "
                    "validation_failed names them).",
        error_headers=RL, op_id="usageGet"))

    # ---- admin API
    not_found = {404: ["not_found"]}
    add("/admin/tenants", "post", op(
        "Create a tenant", ["admin"],
        {201: ok_response(201, ref("Tenant"), "The tenant (settings secrets masked).",
                          {"success": True, "message": "tenant created", "data": TENANT_EX})},
        merge(ADMIN, JSON_BODY, DB), ADMIN_SEC, (),
        json_body("TenantCreateRequest", {"locked": {"name": "acme"},
                                          "unified": {"name": "acme", "unifiedApiEnabled": True,
                                                      "settings": SCHEMAS["Settings"]["examples"][0]}}),
        "A new tenant starts locked (unifiedApiEnabled false) unless the request says otherwise; without "
        "settings it gets defaultChannels of all three and no channel enabled.", op_id="tenantCreate"))
    add("/admin/tenants", "get", op(
        "List tenants", ["admin"],
        {200: ok_response(200, ref("TenantPage"), "One page.",
                          ok_ex("tenants", {"items": [TENANT_EX], "nextCursor": None}))},
        merge(ADMIN, DB, {422: ["validation_failed"]}), ADMIN_SEC,
        [qparam("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "Page size."),
         qparam("cursor", {"type": "string"}, "nextCursor of the previous page (opaque)."),
         qparam("name", {"type": "string", "minLength": 1, "maxLength": 200}, "Only tenants whose name contains "
                                                                               "this (case-insensitive).")],
        op_id="tenantList"))
    add("/admin/tenants/{id}", "get", op(
        "Get a tenant", ["admin"], {200: ok_response(200, ref("Tenant"), "The tenant.", ok_ex("tenant", TENANT_EX))},
        merge(ADMIN, not_found, DB), ADMIN_SEC, [TENANT_ID], op_id="tenantGet"))
    add("/admin/tenants/{id}", "patch", op(
        "Change a tenant", ["admin"],
        {200: ok_response(200, ref("Tenant"), "The tenant as it is now.", ok_ex("tenant updated", TENANT_EX))},
        merge(ADMIN, JSON_BODY, not_found, DB, {409: ["conflict"]}), ADMIN_SEC, [TENANT_ID],
        json_body("TenantPatchRequest", {"unlock": {"unifiedApiEnabled": True},
                                         "disableSms": {"settings": {"channels": {"sms": {"enabled": False}}}}}),
        op_id="tenantPatch"))
    add("/admin/tenants/{id}/tokens", "post", op(
        "Create a tenant token", ["admin"],
        {201: ok_response(201, ref("TokenCreated"), "The token, shown only this once.",
                          {"success": True, "message": "token created: it is shown only this once",
                           "data": TOKEN_EX})},
        merge(ADMIN, JSON_BODY, not_found, DB, {403: ["unified_api_locked"]}), ADMIN_SEC, [TENANT_ID],
        json_body("TokenCreateRequest", {"all": {}, "logsOnly": {"name": "dashboard", "scopes": ["logs"]}},
                  required=False),
        "The body may be empty (all scopes, no name). 403 unified_api_locked while the plan locks the unified "
        "API.", op_id="tokenCreate"))
    add("/admin/tenants/{id}/tokens", "get", op(
        "List a tenant's tokens", ["admin"],
        {200: ok_response(200, obj({"items": {"type": "array", "items": ref("Token")}}), "Without secrets.",
                          ok_ex("tokens", {"items": [TOKEN_ITEM_EX]}))},
        merge(ADMIN, not_found, DB), ADMIN_SEC, [TENANT_ID], op_id="tokenList"))
    add("/admin/tenants/{id}/tokens/{tokenId}", "delete", op(
        "Revoke a token", ["admin"],
        {200: ok_response(200, ref("Token"), "Revoked (within 2 s on every instance).",
                          ok_ex("token revoked", dict(TOKEN_ITEM_EX, revokedAt="2026-11-22T16:00:00.000Z")))},
        merge(ADMIN, not_found, DB), ADMIN_SEC, [TENANT_ID, pparam("tokenId", ref("Uuid"), "The token's id.")],
        op_id="tokenRevoke"))
    add("/admin/tenants/{id}/webhook", "put", op(
        "Set a tenant's webhook", ["admin", "webhooks"],
        {200: ok_response(200, ref("Webhook"), "The webhook; its secret in clear when it was created now.",
                          ok_ex("the webhook's secret is shown only this once", WEBHOOK_EX))},
        merge(ADMIN, JSON_BODY, not_found, DB), ADMIN_SEC, [TENANT_ID],
        json_body("WebhookPutRequest", {"all": {"url": "https://example.com/omnigate"},
                                        "some": {"url": "https://example.com/omnigate",
                                                 "events": ["message.delivered", "message.undelivered"]}}),
        "Creates the webhook (with a new secret, shown once) or changes its url and events (the secret "
        "stays). Standard Webhooks signing (API.md §12).", op_id="webhookPut"))
    add("/admin/tenants/{id}/webhook", "get", op(
        "Get a tenant's webhook", ["admin", "webhooks"],
        {200: ok_response(200, ref("Webhook"), "The webhook.", ok_ex("webhook", WEBHOOK_MASKED_EX))}, merge(ADMIN, not_found, DB), ADMIN_SEC,
        [TENANT_ID], description="The secret is masked.", op_id="webhookGet"))
    add("/admin/tenants/{id}/webhook", "delete", op(
        "Delete a tenant's webhook", ["admin", "webhooks"],
        {200: ok_response(200, ref("Webhook"), "The webhook that was deleted.",
                          ok_ex("webhook deleted", WEBHOOK_MASKED_EX))}, merge(ADMIN, not_found, DB), ADMIN_SEC,
        [TENANT_ID], op_id="webhookDelete"))
    add("/admin/tenants/{id}/webhook/rotate-secret", "post", op(
        "Rotate a webhook's secret", ["admin", "webhooks"],
        {200: ok_response(200, ref("Webhook"), "The webhook with its new secret, shown only this once.",
                          ok_ex("the webhook's secret is shown only this once", WEBHOOK_EX))},
        merge(ADMIN, not_found, DB, {422: ["validation_failed"]}), ADMIN_SEC, [TENANT_ID],
        description="Takes no body (a body is 422 validation_failed).", op_id="webhookRotate"))
    for kind in ("omni", "sms", "otp"):
        page, fourth, statuses, title, example = LOGS[kind]
        add("/admin/tenants/{id}/%s/logs" % kind, "get", op(
            title + " of any tenant", ["admin", "logs"],
            {200: ok_response(200, ref(page), "One page.", {"success": True, "message": "logs", "data": example})},
            merge(ADMIN, not_found, DB, {422: ["validation_failed"], 503: ["query_timeout"]}), ADMIN_SEC,
            [TENANT_ID] + logs_params(fourth, statuses),
            description="The admin mirror of the tenant route: same filters, same items.", op_id="admin%sLogs" %
                                                                                   kind.capitalize()))
    add("/admin/tenants/{id}/webhook/deliveries", "get", op(
        "A tenant's webhook deliveries", ["admin", "webhooks"],
        {200: ok_response(200, ref("WebhookDeliveryPage"), "One page.",
                          ok_ex("webhook deliveries", {"items": [DELIVERY_EX], "nextCursor": None}))},
        merge(ADMIN, not_found, DB, {422: ["validation_failed"]}), ADMIN_SEC,
        [TENANT_ID,
         qparam("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "Page size."),
         qparam("cursor", {"type": "string"}, "nextCursor of the previous page."),
         qparam("status", {"type": "string", "enum": ["pending", "failed", "delivered", "exhausted"]},
                "Only deliveries in this status.")],
        description="The admin mirror of GET /api/webhooks/deliveries.", op_id="adminWebhookDeliveries"))
    add("/admin/tenants/{id}/templates", "get", op(
        "A tenant's WhatsApp templates", ["admin", "templates"],
        {200: ok_response(200, ref("TemplatePage"), "One page, by name, language and WABA.",
                          ok_ex("templates", {"items": [TEMPLATE_EX], "nextCursor": None}))},
        merge(ADMIN, not_found, DB, {422: ["validation_failed"]}), ADMIN_SEC, [TENANT_ID] + template_params(),
        description="The admin mirror of GET /api/whatsapp/templates.", op_id="adminTemplateList"))
    add("/admin/tenants/{id}/batches/{batchId}", "get", op(
        "A tenant's batch: its messages counted by status", ["admin", "messages"],
        {200: ok_response(200, ref("Batch"), "The batch.", ok_ex("batch", batch_ex))},
        merge(ADMIN, not_found, DB), ADMIN_SEC, [TENANT_ID, batch_param],
        description="The admin mirror of GET /api/omni/batches/{batchId} (the console's batch view). 404 when "
                    "the tenant has no such batch.", op_id="adminBatchGet"))
    add("/admin/tenants/{id}/templates/sync", "post", op(
        "Read a tenant's WhatsApp templates from Meta now", ["admin", "templates"],
        {200: ok_response(200, ref("TemplateSync"), "Every WABA was read and its catalogue replaced.",
                          ok_ex("templates synced", {"synced": 42}))},
        merge(ADMIN, not_found, DB, JSON_BODY, {422: ["validation_failed"], 502: ["provider_error"]}), ADMIN_SEC,
        [TENANT_ID],
        description="Reads GET {OMNIGATE_META_BASE_URL}/{version}/{wabaId}/message_templates, every page, for "
                    "each distinct wabaId of the tenant's whatsapp_meta numbers (with that number's access "
                    "token), then replaces all of their catalogues in one write. Takes no body (or {}). 422 "
                    "validation_failed (field settings.channels.whatsapp_meta.numbers) when no number has a "
                    "wabaId; 502 provider_error when Meta fails for any WABA: then no catalogue is changed.",
        op_id="adminTemplateSync"))
    RATES_EX = {"currency": "USD", "rates": [{"channel": "sms", "prefix": "", "price": "0.0500"},
                                             {"channel": "sms", "prefix": "+62", "price": "0.0300"},
                                             {"channel": "whatsapp_meta", "prefix": "+62", "price": "0.0360",
                                              "category": "marketing"}]}
    add("/admin/rates", "get", op(
        "The global rate card", ["admin"],
        {200: ok_response(200, ref("RateCard"), "The card as last put (currency null and no rates before the "
                          "first PUT).", ok_ex("rates", dict(RATES_EX, updatedAt="2026-11-28T10:00:00.000Z")))},
        merge(ADMIN, DB), ADMIN_SEC,
        description="API.md §22. The card every tenant's attempts are priced with, but on the channels the "
                    "tenant's own card (settings.rates) lists.",
        op_id="adminRatesGet"))
    add("/admin/rates", "put", op(
        "Replace the global rate card", ["admin"],
        {200: ok_response(200, ref("RateCard"), "The card as stored.",
                          ok_ex("rates", dict(RATES_EX, updatedAt="2026-11-28T10:00:00.000Z")))},
        merge(ADMIN, DB, JSON_BODY, {409: ["conflict"]}), ADMIN_SEC, body=json_body("RateCardIn", {"card": RATES_EX}),
        description="API.md §22: checked whole (422 validation_failed naming the field, e.g. rates[3].price, or "
                    "unknown_field) and replaced whole. Bodies up to 2 MiB. 409 conflict (field currency) when "
                    "tenants' own cards (settings.rates) are in another currency: one currency for every card.",
        op_id="adminRatesPut"))
    add("/admin/tenants/{id}/usage", "get", op(
        "A tenant's usage by day and channel", ["admin", "logs"],
        {200: ok_response(200, ref("Usage"), "The totals.", ok_ex("usage", USAGE_EX))},
        merge(ADMIN, not_found, DB, {422: ["validation_failed"]}), ADMIN_SEC, [TENANT_ID] + USAGE_PARAMS,
        description="The admin mirror of GET /api/usage.", op_id="adminUsageTenant"))
    add("/admin/usage", "get", op(
        "Every tenant's usage by day and channel", ["admin", "logs"],
        {200: ok_response(200, ref("Usage"), "The totals of every tenant (currency: the global card's).",
                          ok_ex("usage", USAGE_EX))},
        merge(ADMIN, DB, {422: ["validation_failed"]}), ADMIN_SEC, USAGE_PARAMS,
        description="GET /api/usage summed over every tenant.", op_id="adminUsageAll"))
    add("/admin/tenants/{id}/inbound", "get", op(
        "A tenant's inbound messages, newest first", ["admin", "inbound"],
        {200: ok_response(200, ref("InboundPage"), "One page.",
                          ok_ex("inbound messages", {"items": [INBOUND_EX], "nextCursor": None}))},
        merge(ADMIN, not_found, DB, {422: ["validation_failed"]}), ADMIN_SEC, [TENANT_ID] + inbound_params(),
        description="The admin mirror of GET /api/inbound.", op_id="adminInboundList"))
    add("/admin/tenants/{id}/suppressions", "get", op(
        "A tenant's suppressions in force", ["admin", "consent"],
        {200: ok_response(200, ref("SuppressionPage"), "One page, by number and kind.",
                          ok_ex("suppressions", {"items": [SUPPRESSION_EX], "nextCursor": None}))},
        merge(ADMIN, not_found, DB, {422: ["validation_failed"]}), ADMIN_SEC, [TENANT_ID] + suppression_params(),
        description="The admin mirror of GET /api/suppressions.", op_id="adminSuppressionList"))
    add("/admin/tenants/{id}/recipients/{to}", "get", op(
        "What a tenant knows of a number", ["admin", "consent"],
        {200: ok_response(200, ref("Recipient"), "The number.", ok_ex("recipient", recipient_ex))},
        merge(ADMIN, not_found, DB, {422: ["validation_failed"]}), ADMIN_SEC, [TENANT_ID, NUMBER_PARAM],
        description="The admin mirror of GET /api/recipients/{to}.", op_id="adminRecipientGet"))
    add("/admin/tenants/{id}/webhook/deliveries/{deliveryId}/retry", "post", op(
        "Queue one more try of a tenant's webhook delivery", ["admin", "webhooks"],
        {200: ok_response(200, ref("WebhookDelivery"), "Queued; the delivery as it is now.",
                          ok_ex("one more try is queued", DELIVERY_EX))},
        merge(ADMIN, not_found, DB, {409: ["webhook_disabled"]}), ADMIN_SEC,
        [TENANT_ID, pparam("deliveryId", {"type": "string"}, "The delivery's id (msg_ + 32 hex digits).")],
        op_id="adminWebhookRetry"))

    # ---- the tenant's own tokens and webhook (API.md §23, scope keys): the admin routes' bodies
    # and answers for the tenant of the calling token, so each is made from its admin twin.
    def keys_twin(path, method, admin_path, summary, errors, params, description, op_id):
        twin = paths[admin_path][method]
        ok = {int(s): dict(r, headers=dict(r["headers"], **{h: hdr(h) for h in RL}))
              for s, r in twin["responses"].items() if int(s) < 300}
        add(path, method, op(summary, ["keys"] + twin["tags"][1:], ok, merge(TENANT, DB, errors), TENANT_SEC,
                             params, twin.get("requestBody"), "Needs scope keys. " + description,
                             error_headers=RL, op_id=op_id))

    keys_twin("/api/tokens", "get", "/admin/tenants/{id}/tokens", "List the tenant's tokens", {}, (),
              "GET /admin/tenants/{id}/tokens for the tenant of the token: every token, revoked ones included, "
              "without secrets. Not locked by the plan.", "keysTokenList")
    keys_twin("/api/tokens", "post", "/admin/tenants/{id}/tokens", "Create a token for the tenant",
              merge(JSON_BODY, {403: ["unified_api_locked"]}), (),
              "POST /admin/tenants/{id}/tokens for the tenant of the token: the same body and answer. A token "
              "grants at most its own scopes: asking for one the calling token lacks is 403 insufficient_scope "
              "(error.field scopes), and so is a body without scopes (send, otp and logs) from a token lacking "
              "one of those. 403 unified_api_locked while the plan locks the unified API.", "keysTokenCreate")
    keys_twin("/api/tokens/{id}", "delete", "/admin/tenants/{id}/tokens/{tokenId}", "Revoke one of the tenant's "
              "tokens", {404: ["not_found"]},
              [pparam("id", ref("Uuid"), "The token's id; another tenant's token, or anything but a UUID, is 404.")],
              "The calling token may revoke itself: it is refused from then on (within 2 s on every instance), "
              "as any revoked token.", "keysTokenRevoke")
    for method, summary, errors, op_id in (
            ("put", "Set the tenant's webhook", JSON_BODY, "keysWebhookPut"),
            ("get", "Get the tenant's webhook", not_found, "keysWebhookGet"),
            ("delete", "Delete the tenant's webhook", not_found, "keysWebhookDelete")):
        keys_twin("/api/webhook", method, "/admin/tenants/{id}/webhook", summary, errors, (),
                  "%s /admin/tenants/{id}/webhook for the tenant of the token: the same body and answer (the "
                  "secret in clear only when created)." % method.upper(), op_id)
    keys_twin("/api/webhook/rotate-secret", "post", "/admin/tenants/{id}/webhook/rotate-secret",
              "Rotate the tenant's webhook secret", merge(not_found, {422: ["validation_failed"]}), (),
              "POST /admin/tenants/{id}/webhook/rotate-secret for the tenant of the token: takes no body; the new "
              "secret is shown only this once.", "keysWebhookRotate")
    add("/api/tenant", "get", op(
        "Who is calling: the token's tenant and scopes", ["keys"],
        {200: ok_response(200, ref("TenantSelf"), "The tenant of the token.",
                          ok_ex("tenant", {"id": TENANT_EX["id"], "name": "acme", "unifiedApiEnabled": False,
                                           "scopes": ["send", "otp", "logs", "keys"]}), headers=RL)},
        merge({401: ["unauthorized"], 429: ["rate_limited"]}, DB), TENANT_SEC,
        description="Any valid tenant token, whatever its scopes; not locked by the plan (API.md §23: the "
                    "tenant console reads who signed in and whether the unified API is locked).",
        error_headers=RL, op_id="tenantSelf"))

    # ---- QR sessions (API.md §23)
    qr_ex = {"name": "shop-1", "status": "SCAN_QR_CODE", "number": None, "updatedAt": "2026-11-28T10:15:30.123Z"}
    session_param = pparam("name", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                           "The session: one of the tenant's whatsapp_qr numbers uses it (settings, numbers.{n}"
                           ".session, default \"default\"); any other is 404.")
    png_ok = {"description": "The QR code to scan with the phone, as WAHA drew it.",
              "headers": {"X-Request-Id": hdr("X-Request-Id"), "Cache-Control": {"schema": {"type": "string"}}},
              "content": {"image/png": {}}}
    waha_errors = {404: ["not_found"], 409: ["conflict"], 502: ["provider_error"]}
    qr_routes = (
        ("", "get", "A QR session of the tenant", "QrSessionGet", {404: ["not_found"]},
         "What the gateway knows of the session: the status of WAHA's last session.status event (404 while it "
         "knows nothing: never started through the gateway and no event yet)."),
        ("/qr", "get", "The QR code of a session waiting for a scan", "QrSessionQr",
         {404: ["not_found"], 409: ["session_not_scanning"], 502: ["provider_error"]},
         "The PNG WAHA draws (GET /api/{session}/auth/qr), while the session's status is SCAN_QR_CODE (else 409 "
         "session_not_scanning). WAHA changes the code every 20 s or so: fetch it again until the status is "
         "WORKING."),
        ("/start", "post", "Start a QR session", "QrSessionStart", waha_errors,
         "Creates and starts the session on the tenant's WAHA server (its own, channels.whatsapp_qr.server, else "
         "OMNIGATE_QR_BASE_URL) with its webhook at {OMNIGATE_PUBLIC_URL}/webhooks/waha for message, "
         "message.ack and session.status, signed with the server's webhook secret; a session that exists is "
         "updated with that webhook and started. Answers what WAHA said (STARTING, or WORKING for a linked "
         "session); its events follow. 409 conflict when no server, public URL or webhook secret is "
         "configured, 502 provider_error when WAHA fails."),
        ("/stop", "post", "Stop a QR session", "QrSessionStop", waha_errors,
         "Stops the session on WAHA (the phone stays linked: a start needs no new scan). Its number is skipped "
         "(session_not_connected) until it is WORKING again."),
        ("/logout", "post", "Log a QR session out", "QrSessionLogout", waha_errors,
         "Logs the session out on WAHA (the phone is unlinked; WAHA starts it again, waiting for a new scan)."),
    )
    for suffix, method, summary, op_id, errors, description in qr_routes:
        ok = {200: png_ok} if suffix == "/qr" else {
            200: ok_response(200, ref("QrSession"), "The session.", ok_ex("session", qr_ex), headers=RL)}
        add("/api/whatsapp/sessions/{name}" + suffix, method, op(
            summary, ["keys"], ok, merge(TENANT, DB, errors), TENANT_SEC, [session_param],
            description="Needs scope keys (API.md §23). " + description, error_headers=RL,
            op_id="keys" + op_id))
        ok = {200: png_ok} if suffix == "/qr" else {
            200: ok_response(200, ref("QrSession"), "The session.", ok_ex("session", qr_ex))}
        add("/admin/tenants/{id}/whatsapp/sessions/{name}" + suffix, method, op(
            summary.replace("of the tenant", "of a tenant"), ["admin", "keys"], ok, merge(ADMIN, DB, errors),
            ADMIN_SEC, [TENANT_ID, session_param],
            description="The admin mirror of %s /api/whatsapp/sessions/{name}%s." % (method.upper(), suffix),
            op_id="admin" + op_id))

    # ---- provider webhooks (API.md §10)
    counts_ok = {200: ok_response(200, ref("StatusCounts"), "The statuses are committed: applied, repeats "
                                                            "(duplicate) and not matched yet (unknown, kept).",
                                  {"success": True, "message": "ok",
                                   "data": {"applied": 1, "duplicate": 0, "unknown": 0}})}
    counts_in_ok = {200: ok_response(200, ref("WebhookCounts"), "Committed: the statuses (applied, repeats "
                                                                "(duplicate) and not matched yet (unknown, kept)) "
                                                                "and, when the POST held inbound messages, "
                                                                "theirs (inbound).",
                                     ok_ex("ok", {"applied": 0, "duplicate": 0, "unknown": 0,
                                                  "inbound": {"stored": 1, "duplicate": 0, "unrouted": 0,
                                                              "ignored": 0}}))}
    wh_errors = merge(DB, {401: ["invalid_signature"], 404: ["not_found"], 400: ["invalid_payload"]})
    in_note = (" Inbound messages (API.md §21) are routed to the tenant that has the receiving number (or "
               "session), stored once per provider message id, apply their opt-out or opt-in keyword (a text "
               "that is exactly STOP, STOPALL, START, ...) and are the event message.received; an unrouted one "
               "is counted in /metrics and dropped (still 200).")
    wh_note = " Answers 404 not_found while its secret is not configured (API.md §14)."
    add("/webhooks/meta", "get", {
        **op("Meta's subscription handshake", ["provider webhooks"],
             {200: {"description": "The hub.challenge value, exactly.",
                    "headers": {"X-Request-Id": hdr("X-Request-Id")},
                    "content": {"text/plain": {"schema": {"type": "string"}, "example": "1158201444"}}}},
             {403: ["forbidden"], 404: ["not_found"]}, [],
             [{"name": "hub.mode", "in": "query", "required": True, "schema": {"const": "subscribe"}},
              {"name": "hub.verify_token", "in": "query", "required": True, "schema": {"type": "string"},
               "description": "OMNIGATE_META_VERIFY_TOKEN."},
              {"name": "hub.challenge", "in": "query", "required": True, "schema": {"type": "string"}}],
             description="Answers 404 not_found while OMNIGATE_META_VERIFY_TOKEN is not set.",
             op_id="metaVerify")})
    add("/webhooks/meta", "post", op(
        "Delivery statuses and inbound messages from Meta's WhatsApp Cloud API", ["provider webhooks"],
        counts_in_ok, merge(wh_errors, {400: ["invalid_json"]}), [{"metaSignature": []}], (),
        {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "description": "Meta's webhook body; value.statuses and value.messages[] of "
                                             "messages changes (the messages routed by "
                                             "value.metadata.phone_number_id, API.md §21) and "
                                             "message_template_status_update changes (entry[].id the WABA, "
                                             "value.event the template's new status, API.md §18) are read, "
                                             "other objects are ignored. Up to 4 MiB.",
            "properties": {"object": {"type": "string"}, "entry": {"type": "array"}}},
            "examples": {
                "status": {"value": {"object": "whatsapp_business_account", "entry": [{
                    "id": "102290129340398", "changes": [
                        {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {
                            "display_phone_number": "6281234567890", "phone_number_id": "109876543210"},
                            "statuses": [{"id": "wamid.HBgNNjI4MTIzNDU2Nzg5MBUCABEYEjQ2", "status": "delivered",
                                          "timestamp": "1763820327", "recipient_id": "6281234567890"}]}}]}]}},
                "inbound": {"value": {"object": "whatsapp_business_account", "entry": [{
                    "id": "102290129340398", "changes": [
                        {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {
                            "display_phone_number": "6281234567890", "phone_number_id": "109876543210"},
                            "contacts": [{"profile": {"name": "Ana"}, "wa_id": "4915112345601"}],
                            "messages": [{"from": "4915112345601",
                                          "id": "wamid.HBgNNDkxNTExMjM0NTYwMRUCABIYFjNFQjBDNzY3RDI2QTFENUIA",
                                          "timestamp": "1763820325", "type": "text",
                                          "text": {"body": "Hello there"}}]}}]}]}}}}}},
        "X-Hub-Signature-256: sha256=<lowercase hex HMAC-SHA256 of the raw body keyed with "
        "OMNIGATE_META_APP_SECRET>." + wh_note + in_note + " A Meta message also opens the sender's 24 h "
        "window with that phone number id. A message without a string id, from and type and a timestamp "
        "refuses the whole body (400 invalid_payload), as a bad status does. data.inbound is there when the "
        "POST held value.messages[].", op_id="metaStatuses"))
    add("/webhooks/twilio", "post", op(
        "Delivery statuses from the SMS provider (Twilio)", ["provider webhooks"], counts_ok, wh_errors,
        [{"twilioSignature": []}], (),
        {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": {
            "type": "object", "required": ["MessageSid", "MessageStatus"],
            "properties": {"MessageSid": {"type": "string"}, "MessageStatus": {"type": "string"},
                           "ErrorCode": {"type": "string"}},
            "description": "Other fields are ignored."},
            "example": {"MessageSid": "SM0123456789abcdef0123456789abcdef", "MessageStatus": "delivered"}}}},
        "X-Twilio-Signature: base64 HMAC-SHA1 (OMNIGATE_SMS_AUTH_TOKEN) of OMNIGATE_PUBLIC_URL + path + query, "
        "then each POST field sorted by name, name then value." + wh_note + " OMNIGATE_PUBLIC_URL must be set "
        "too.", op_id="twilioStatuses"))
    add("/webhooks/twilio/inbound", "post", op(
        "Inbound SMS from the SMS provider (Twilio's incoming message webhook)", ["provider webhooks"],
        {200: {"description": "Committed (stored, a repeat, or unrouted: counted and dropped): empty TwiML, so "
                              "the provider sends no reply.",
               "headers": {"X-Request-Id": hdr("X-Request-Id")},
               "content": {"text/xml": {"schema": {"type": "string", "const": TWIML_EMPTY},
                                        "example": TWIML_EMPTY}}}},
        wh_errors, [{"twilioSignature": []}], (),
        {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": {
            "type": "object", "required": ["MessageSid", "From", "To"],
            "properties": {"MessageSid": {"type": "string", "description": "SmsMessageSid is taken without it."},
                           "From": ref("E164"),
                           "To": {**ref("E164"), "description": "The tenant's number: one of "
                                                                "channels.sms.inboundNumbers."},
                           "Body": {"type": "string"},
                           "NumMedia": {"type": "string", "description": "Above 0: the message's type is "
                                                                        "media."}},
            "description": "Other fields are ignored."},
            "example": {"MessageSid": "SM0123456789abcdef0123456789abcdef", "From": "+4915112345601",
                        "To": "+15550001111", "Body": "STOP", "NumMedia": "0"}}}},
        "Configure it as the number's incoming message webhook. X-Twilio-Signature as on /webhooks/twilio, over "
        "OMNIGATE_PUBLIC_URL + /webhooks/twilio/inbound + query and the POST fields." + wh_note +
        " OMNIGATE_PUBLIC_URL must be set too. The message is routed by To to the tenant whose "
        "channels.sms.inboundNumbers has it, stored once per MessageSid, applies its opt-out or opt-in keyword "
        "(API.md §21: STOP opts out of sms, STOPALL of every kind, START opts back in) and is the event "
        "message.received. Errors are JSON, as on the other routes.", op_id="twilioInbound"))
    add("/webhooks/waha", "post", op(
        "Delivery statuses (message.ack) and inbound messages (message) from the WAHA session bridge",
        ["provider webhooks"], counts_in_ok,
        merge(wh_errors, {400: ["invalid_json"]}), [{"wahaSignature": []}], (),
        {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["event"],
            "properties": {"id": {"type": "string"}, "timestamp": {"type": "number"}, "event": {"type": "string"},
                           "session": {"type": "string"}, "payload": {"type": "object"}},
            "description": "message.ack (a status), message (an inbound message, API.md §21: routed by "
                           "session and the session's number, me.id; one not from a phone number, fromMe or "
                           "not <digits>@c.us, is ignored) and session.status (payload.status, me.id: the "
                           "tenant's QR session, API.md §23; applied 1, or unknown 1 when no tenant has the "
                           "session or a later event was applied) events are recorded; others are answered 200 "
                           "and ignored."},
            "examples": {
                "status": {"value": {"id": "evt_01", "timestamp": 1763820327000, "event": "message.ack",
                                     "session": "default",
                                     "payload": {"id": "true_6281234567890@c.us_3EB0C767D26A1D5B", "ack": 2,
                                                 "ackName": "DEVICE"}}},
                "inbound": {"value": {"id": "evt_02", "timestamp": 1763820325000, "event": "message",
                                      "session": "default", "me": {"id": "6281234567890@c.us"},
                                      "payload": {"id": "false_4915112345601@c.us_3EB0C767D26A1D5C",
                                                  "timestamp": 1763820325, "from": "4915112345601@c.us",
                                                  "fromMe": False, "body": "Hello there",
                                                  "hasMedia": False}}}}}}},
        "X-Webhook-Hmac: lowercase hex HMAC-SHA512 of the raw body keyed with OMNIGATE_QR_WEBHOOK_SECRET "
        "(X-Webhook-Hmac-Algorithm: sha512, when sent)." + wh_note + in_note + " A message event without "
        "session or payload.id is 400 invalid_payload. data.inbound is there when the event was message.",
        op_id="wahaStatuses"))

    # ---- operations
    add("/healthz", "get", op("Liveness: 200 while the event loop runs", ["operations"],
                              {200: ok_response(200, obj({"status": {"const": "ok"}}), "Alive.",
                                                {"success": True, "message": "ok", "data": {"status": "ok"}})},
                              {}, op_id="healthz"))
    add("/readyz", "get", op("Readiness: the database is reachable and the instance is not draining",
                             ["operations"],
                             {200: ok_response(200, obj({"status": {"const": "ready"}}), "Ready.",
                                               ok_ex("ready", {"status": "ready"}))},
                             {503: ["unavailable"]}, op_id="readyz"))
    add("/metrics", "get", op("Prometheus metrics of this instance", ["operations"],
                              {200: {"description": "Prometheus text format 0.0.4.",
                                     "headers": {"X-Request-Id": hdr("X-Request-Id")},
                                     "content": {"text/plain": {"schema": {"type": "string"}, "example": (
                                         "# HELP omnigate_http_requests_total HTTP requests answered, by route and "
                                         "status.\n# TYPE omnigate_http_requests_total counter\n"
                                         "omnigate_http_requests_total{method=\"POST\",route=\"/api/omni/send\","
                                         "status=\"200\"} 1027\n")}}}},
                              {503: ["unavailable"]}, op_id="metrics"))

    # ---- embedded files
    def page(path, ctype, summary, op_id):
        add(path, "get", op(summary, ["pages"], {
            200: {"description": "The file, served from the binary.",
                  "headers": {"X-Request-Id": hdr("X-Request-Id"), "ETag": hdr("ETag"),
                              "Content-Security-Policy": hdr("Content-Security-Policy")},
                  "content": {ctype: {"schema": {"type": "string"} if ctype != "application/json"
                                      else {"type": "object"}}}},
            304: {"description": "If-None-Match matched the ETag.",
                  "headers": {"X-Request-Id": hdr("X-Request-Id"), "ETag": hdr("ETag")}}},
            {}, params=[{"name": "If-None-Match", "in": "header", "required": False, "schema": {"type": "string"}}],
            op_id=op_id))

    page("/openapi.json", "application/json", "This document (OpenAPI 3.1)", "openapi")
    page("/console", "text/html", "The admin console's page", "console")
    page("/console/app.js", "text/javascript", "The admin console's script", "consoleScript")
    page("/console/app.css", "text/css", "The admin console's style sheet", "consoleStyle")

    def not_routed(status, codes, extra=()):
        r = error_response(status, codes, headers=extra)
        return r

    doc = {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "Omnigate",
            "version": "1.1.0",
            "summary": "Multi-tenant messaging gateway: WhatsApp (QR session, Meta Cloud API) and SMS, "
                       "with fallback, OTP, logs, delivery statuses, inbound messages and consent.",
            "description": (
                "The machine-readable twin of the HTTP contract (API.md). Every JSON response has the "
                "envelope {success, message, data}; failures add error {code, field?, details?} and each "
                "response below lists the error codes it can carry. Every response carries X-Request-Id. "
                "A request with a JSON body must send Content-Type: application/json (415 otherwise) and "
                "unknown members are refused (422 unknown_field). Times are RFC 3339 UTC with "
                "milliseconds. HEAD is answered by every GET route without a body. A path the router does "
                "not know answers 404 not_found (components.responses.NoSuchRoute); a known path with "
                "another method 405 method_not_allowed with Allow (components.responses.MethodNotAllowed). "
                "400, 408, 413 and 431 come from the HTTP core on any route, before its handler."),
        },
        "servers": [{"url": "/", "description": "The gateway itself (OMNIGATE_LISTEN)."}],
        "tags": [{"name": n} for n in ("messages", "otp", "logs", "webhooks", "templates", "inbound", "consent",
                                       "keys", "admin", "provider webhooks", "operations", "pages")],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(SCHEMAS.items())),
            "headers": HEADERS,
            "responses": dict(sorted(dict(SHARED, NoSuchRoute=not_routed(404, ["not_found"]),
                                          MethodNotAllowed=not_routed(405, ["method_not_allowed"],
                                                                      ("Allow",))).items())),
            "securitySchemes": {
                "tenantToken": {"type": "http", "scheme": "bearer", "bearerFormat": "kft_ + 40 base62",
                                "description": "A tenant token (POST /admin/tenants/{id}/tokens) with the "
                                               "route's scope: send (POST sends, batches and cancels, the "
                                               "template list, suppressions), otp (OTP send/verify), logs "
                                               "(logs, messages, batches, the queue, webhook deliveries, "
                                               "inbound messages, recipients), keys (the tenant's own tokens "
                                               "and webhook, API.md §23; opt-in, never in the default set)."},
                "adminToken": {"type": "http", "scheme": "bearer",
                               "description": "OMNIGATE_ADMIN_TOKEN, from configuration only."},
                "metaSignature": {"type": "apiKey", "in": "header", "name": "X-Hub-Signature-256",
                                  "description": "sha256=<hex HMAC-SHA256 of the raw body, key "
                                                 "OMNIGATE_META_APP_SECRET>."},
                "twilioSignature": {"type": "apiKey", "in": "header", "name": "X-Twilio-Signature",
                                    "description": "base64 HMAC-SHA1 of the full URL and the sorted POST fields, "
                                                   "key OMNIGATE_SMS_AUTH_TOKEN, or the authToken of the "
                                                   "tenant's own account the AccountSid names (API.md §23)."},
                "wahaSignature": {"type": "apiKey", "in": "header", "name": "X-Webhook-Hmac",
                                  "description": "hex HMAC-SHA512 of the raw body, key "
                                                 "OMNIGATE_QR_WEBHOOK_SECRET, or the webhookSecret of the own "
                                                 "server of a tenant with a number on the event's session "
                                                 "(API.md §23)."},
            },
        },
    }
    return doc


def render():
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def main():
    text = render()
    if sys.argv[1:] == ["--check"]:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit("openapi.py: src/product/static/openapi.json is not what openapi.py writes; run it")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
