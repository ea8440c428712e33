/*
 * The SQL of the request path: one table of prepared statements (prepared on every pooled
 * connection by db.h's pool, also run by the synchronous CLI) and the row shapes they return. The
 * statements themselves are plain SQL in sql/queries/, embedded into the binary at build time.
 * Responsible for what is asked of PostgreSQL; not for getting it there (db.h) or for
 * HTTP (handlers). Every value travels as a parameter, never spliced into SQL text.
 */
#ifndef OMNIGATE_STORE_H
#define OMNIGATE_STORE_H

#include "omnigate/db.h"

/* One value per statement; each is the statement of the same name (OG_Q_TENANT_GET is
 * `-- name: tenant_get`) in the file named above it, where its parameters and the columns it
 * returns are documented by name. The build fails unless every value has exactly one statement. */
enum og_store_stmt {
    /* sql/queries/tokens.sql */
    OG_Q_AUTH_LOOKUP,
    OG_Q_TOKENS_TOUCH,
    OG_Q_TOKEN_INSERT,
    OG_Q_TOKEN_LIST,
    OG_Q_TOKEN_REVOKE,
    /* sql/queries/tenants.sql */
    OG_Q_TENANT_INSERT,
    OG_Q_TENANT_GET,
    OG_Q_TENANT_UPDATE,
    OG_Q_TENANT_UNIFIED,
    OG_Q_TENANTS_UNSEALED,
    OG_Q_TENANT_SEAL,
    OG_Q_TENANTS_LIST,
    /* sql/queries/logs.sql */
    OG_Q_LOGS_OMNI,
    OG_Q_LOGS_OMNI_REFERENCE,
    OG_Q_LOGS_OMNI_TO,
    OG_Q_LOGS_OMNI_STATUS,
    OG_Q_LOGS_OMNI_STATUS_CHANNEL,
    OG_Q_LOGS_OMNI_CHANNEL,
    OG_Q_LOGS_OMNI_BATCH,
    OG_Q_LOGS_SMS,
    OG_Q_LOGS_SMS_REFERENCE,
    OG_Q_LOGS_SMS_TO,
    OG_Q_LOGS_SMS_STATUS,
    OG_Q_LOGS_SMS_SOURCE,
    OG_Q_LOGS_OTP,
    OG_Q_LOGS_OTP_REFERENCE,
    OG_Q_LOGS_OTP_TO,
    OG_Q_LOGS_OTP_STATUS,
    OG_Q_LOGS_TENANT,
    /* sql/queries/messages.sql */
    OG_Q_MSG_INSERT,
    OG_Q_MSG_INSERT_MANY,
    OG_Q_MSG_INSERT_UNLESS_NOWA,
    OG_Q_MSG_INSERT_UNLESS_NOWA_MANY,
    OG_Q_MSG_COMPLETE,
    OG_Q_MSG_COMPLETE_MANY,
    OG_Q_MSG_MARK_UNKNOWN,

    /* sql/queries/nowa.sql */
    OG_Q_NOWA_GET,
    OG_Q_NOWA_MARK,
    OG_Q_NOWA_STATUSES,
    OG_Q_NOWA_PRUNE,
    /* sql/queries/sms.sql */
    OG_Q_SMS_PENDING,
    OG_Q_SMS_FINISH,
    OG_Q_SMS_RECORD,
    /* sql/queries/fallback.sql */
    OG_Q_FALLBACK_SCHEDULE,
    OG_Q_FALLBACK_LOAD,
    OG_Q_FALLBACK_BEGIN,
    OG_Q_FALLBACK_END,
    OG_Q_FALLBACK_ABANDON,
    OG_Q_FALLBACK_SETTLE,
    /* sql/queries/steps.sql */
    OG_Q_STEP_CLAIM,
    OG_Q_STEP_CLOSE,
    OG_Q_STEPS_DUE,
    /* sql/queries/statuses.sql */
    OG_Q_STATUS_APPLY,
    OG_Q_STATUS_SWEEP,
    /* sql/queries/idempotency.sql */
    OG_Q_IDEM_CLAIM,
    OG_Q_IDEM_GET,
    OG_Q_IDEM_COMPLETE,
    OG_Q_IDEM_REFERENCE,
    OG_Q_IDEM_STALE,
    OG_Q_SWEEP_PENDING,
    OG_Q_SWEEP_NEXT,
    /* sql/queries/otp.sql */
    OG_Q_OTP_BEGIN,
    OG_Q_OTP_SENT,
    OG_Q_OTP_FIND,
    OG_Q_OTP_FIND_TO,
    OG_Q_OTP_VERIFY_OK,
    OG_Q_OTP_VERIFY_BAD,
    OG_Q_OTP_EXPIRE,
    OG_Q_OTP_EVENT,
    /* sql/queries/retention.sql */
    OG_Q_PRUNE_CHECK,
    OG_Q_PRUNE_TENANTS,
    OG_Q_PRUNE_BATCH,
    OG_Q_PRUNE_IDEM,
    OG_Q_PRUNE_WEBHOOKS,
    OG_Q_PRUNE_INBOUND,
    /* sql/queries/webhooks.sql */
    OG_Q_WH_PUT,
    OG_Q_WH_GET,
    OG_Q_WH_DELETE,
    OG_Q_WH_ROTATE,
    OG_Q_WH_DUE,
    OG_Q_WH_RECORD,
    OG_Q_WH_RELEASE,
    OG_Q_WH_SAMPLE,
    OG_Q_WH_DELIVERIES,
    OG_Q_WH_RETRY,
    OG_Q_WH_SCHEDULE,
    /* templates.sql: the WhatsApp template catalogue (API.md §18) */
    OG_Q_TPL_GET,
    OG_Q_TPL_REPLACE,
    OG_Q_TPL_SET_STATUS,
    OG_Q_TPL_LIST,
    OG_Q_TPL_SYNC_SCHEDULE,
    /* queue.sql: queued, scheduled and paced delivery (API.md §19) */
    OG_Q_QUEUE_INSERT,
    OG_Q_QUEUE_INSERT_MANY,
    OG_Q_QUEUE_CLAIM,
    OG_Q_QUEUE_DONE,
    OG_Q_QUEUE_DONE_MANY,
    OG_Q_QUEUE_CANCEL,
    OG_Q_QUEUE_MESSAGE,
    OG_Q_QUEUE_LIST,
    OG_Q_QUEUE_DEPTH,
    OG_Q_QUEUE_DEBIT,
    /* batches.sql: batches (API.md §20) */
    OG_Q_BATCH_INSERT,
    OG_Q_BATCH_GET,
    OG_Q_BATCH_CANCEL,
    OG_Q_BATCH_COMPLETE,
    /* inbound.sql */
    OG_Q_INBOUND_STORE,
    OG_Q_INBOUND_LIST,
    OG_Q_CONSENT_LOAD,
    OG_Q_CONSENT_CHANGES,
    OG_Q_CONSENT_PRUNE,
    OG_Q_CONSENT_SAMPLE,
    OG_Q_SUPPRESSION_LIST,
    OG_Q_SUPPRESSION_CHANGE,
    OG_Q_SUPPRESSION_KINDS,
    OG_Q_RECIPIENT_GET,
    /* costs.sql: rate cards (API.md §22) */
    OG_Q_RATES_GET,
    OG_Q_RATES_PUT,
    OG_Q_RATES_CURRENT,
    /* usage.sql: usage totals (API.md §22) */
    OG_Q_USAGE_ROWS,
    OG_Q_USAGE_CURRENCY,
    OG_Q_USAGE_COMPACT,
    OG_Q_USAGE_ADD,
    /* accounts.sql: the tenants' own provider accounts, for the webhooks in (API.md §23) */
    OG_Q_ACCOUNT_TWILIO,
    OG_Q_ACCOUNT_WAHA,
    /* qr_sessions.sql: QR sessions (API.md §23) */
    OG_Q_QR_SESSION_GET,
    OG_Q_QR_SESSION_PUT,
    OG_Q_QR_SESSION_EVENT,
    OG_Q__COUNT
};

/* Generated from those same lines (src/tools/embed_queries.py), so that nothing is filled or
 * read by position: for each statement X, og_q_X_t names its parameters and og_q_X binds them
 * into one statement of an op, setting its stmt and its values in order,
 *
 *     og_q_tenant_get(&op->stmts[0], &(og_q_tenant_get_t){.tenant_id = id});
 *
 * (statements that take the same parameters share one struct), and OG_C_X_<COLUMN> are the
 * indexes of its columns, or OG_<ROW>_<COLUMN> those of a row several statements return
 * (OG_TENANT_ID of a tenant row). A set form X_many has neither: callers bind X (db.h). */
#include "og_store_names.h"

/* Generated from the files of sql/queries/ at build time (src/tools/embed_queries.py). */
extern const og_db_stmt_t og_store_stmts[OG_Q__COUNT];

/* True when `s` is a canonical lowercase or uppercase UUID (36 characters): ids from URLs are
 * checked before they reach a uuid parameter, so a malformed one is a 404, not an error. */
bool og_store_uuid_valid(const char *s);

#endif
