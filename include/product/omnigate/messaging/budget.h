/*
 * The time budget of a send: the one rule for how long a send may still be running, from its
 * claim to the commit of its completion. Every deadline that waits for sends to end is this
 * budget: the Idempotency-Key claim's lease (messaging/send.c, messaging/sms_req.c), the
 * pending sweep and the start-up check that mark older pending sends 'unknown'
 * (steps/pending_sweep.c, app/cli.c) and the lease of a fallback step (steps/fallback.c).
 * Responsible for that arithmetic only.
 */
#ifndef OMNIGATE_MESSAGING_BUDGET_H
#define OMNIGATE_MESSAGING_BUDGET_H

#include <stdint.h>

#include "omnigate/config.h"

/* Database writes a send makes around its attempts: the claim, the pending row, the completion. */
#define OG_SEND_BUDGET_WRITES 3
/* Added for the loop, scheduling and the clocks of the instances sharing the database. */
#define OG_SEND_BUDGET_SLACK_MS 5000

/* The longest a send on `channels` channels (one attempt each, one after another) may take:
 * each write up to twice OMNIGATE_DB_TIMEOUT_MS (whatever the server does, db.h), each attempt
 * up to OMNIGATE_ATTEMPT_TIMEOUT_MS, plus OG_SEND_BUDGET_SLACK_MS. `channels` 0: a request that
 * calls no provider (an OTP verify). */
uint32_t og_send_budget_ms(const og_config_t *cfg, int channels);

#endif
