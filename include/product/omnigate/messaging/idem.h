/*
 * Idempotency-Key (API.md §6) for the POST send and OTP routes. A request with a key first
 * claims it: one committed row in idempotency_keys, whose primary key (tenant, key) is the
 * guarantee across instances. A repeat finds the row: the same body gets the first answer
 * again (Idempotency-Replayed: true), a different body 422 idempotency_key_reused, and a
 * repeat while the first is in flight 409 idempotency_in_progress. The route stores its answer
 * in the same transaction as its final rows (og_idem_complete_stmt). Keys expire after 24 h.
 *
 * A claim has a token, and every later write of it names the token (sql/015): a request whose
 * claim a repeat took over past its lease commits no pending row (og_idem_reference_stmt fails
 * its transaction with OG_IDEM_LOST_SQLSTATE, og_idem_answer_lost answers it) and so calls no
 * provider, and one that lost its claim after sending stores no answer over the new holder's.
 */
#ifndef OMNIGATE_MESSAGING_IDEM_H
#define OMNIGATE_MESSAGING_IDEM_H

#include <stdbool.h>
#include <stdint.h>

#include "omnigate/api.h"
#include "omnigate/db.h"
#include "omnigate/http.h"

typedef struct og_idem og_idem_t;

struct og_idem {
    /* in */
    og_http_req_t *req;
    og_db_t *db;
    og_log_t *log;
    const char *tenant_id;
    const char *route; /* "omni", "sms", "otp_send", "otp_verify" */
    void (*done)(og_idem_t *i);
    void *arg;
    /* out: after og_idem_read, has_key; after done, exactly one of claimed / answered (or
     * neither when there is no key) */
    bool has_key;
    bool claimed;  /* the route goes on and must store its answer */
    bool answered; /* the request was answered (replay, 409, 422, 503): the route stops */
    /* With a key: the key, the body's SHA-256 in hex and the claim's token (16 random bytes in
     * hex), in one allocation (og_idem_clear). Most sends have none, and these would be 354
     * bytes of every one in flight. */
    char *key;
    char *hash;
    char *token;
    /* private */
    og_db_op_t *op; /* the caller's (og_idem_claim) */
    char lease_s[16];
    char *stale_body; /* the 502 outcome_unknown answer being stored */
};

/* Reads the Idempotency-Key header of `req` (1-255 printable ASCII) and hashes the body.
 * False with 422 validation_failed in `err` when the header is malformed, or 503 unavailable
 * when out of memory. Call og_idem_clear when done with i, whatever this returned. */
bool og_idem_read(og_idem_t *i, og_http_req_t *req, og_err_t *err);

/* Frees what og_idem_read allocated; i may be zeroed and never read. */
void og_idem_clear(og_idem_t *i);

/* Claims the key read by og_idem_read for `tenant_id` on `route` for `lease_ms`, the longest
 * the request can take; done(i) is called once, possibly before this returns (with `arg` in
 * i->arg). Without a key it completes at once with neither claimed nor answered. A claim
 * found unfinished past its lease (its instance died) is resolved per API.md §15: taken over
 * when nothing was recorded under it (claimed), else answered 502 outcome_unknown. The claim
 * runs on the caller's `op`, which is free (cleared) again when done runs. */
void og_idem_claim(og_idem_t *i, og_db_t *db, og_db_op_t *op, og_log_t *log, const char *tenant_id,
                   const char *route, uint32_t lease_ms, void (*done)(og_idem_t *i), void *arg);

/* The SQLSTATE of a write whose og_idem_reference_stmt found the claim taken over (sql/015). */
#define OG_IDEM_LOST_SQLSTATE "OG001"

/* Adds to `op` the statement that records `reference` as the record the claimed key is about;
 * it must ride in the write that commits the record's pending row, before any provider call,
 * and fails that write (OG_IDEM_LOST_SQLSTATE) when the claim was taken over meanwhile.
 * Returns the number of statements added (0 or 1). `reference` must outlive the op. */
int og_idem_reference_stmt(og_idem_t *i, og_db_op_t *op, int slot, const char *reference);

/* For a write that carried og_idem_reference_stmt and ended with `st`: when it failed because
 * a repeat took the claim over, answers 409 idempotency_in_progress (the repeat sends; this
 * request sent nothing) and returns true; else false, leaving the answer to the caller. */
bool og_idem_answer_lost(og_http_req_t *req, const og_db_op_t *op, og_db_status_t st);

/* Adds to `op` the statement that stores the answer (when a key was claimed), which stores
 * nothing once the claim was lost; returns the number of statements added (0 or 1). `status`
 * and `body` must outlive the op. */
int og_idem_complete_stmt(og_idem_t *i, og_db_op_t *op, int slot, const char *status, const char *body);

/* The 502 outcome_unknown envelope (API.md §15): data {reference, "status": "unknown",
 * attempts}, for a request that may have sent but whose outcome is not recorded. Steals
 * `attempts` (NULL: []). NULL when out of memory; else free() it. */
char *og_idem_unknown_body(const char *reference, json_t *attempts, const char *message, size_t *len);

/* Answers `req` with that envelope (502, X-Omnigate-Reference), for a request whose providers
 * were called but whose outcome could not be recorded. Steals `attempts`. */
void og_idem_answer_unknown(og_http_req_t *req, const char *reference, json_t *attempts, const char *message);

#endif
