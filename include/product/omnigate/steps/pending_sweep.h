/*
 * The sweep (API.md §15): a durable step that reschedules itself every 15 s and marks
 * 'unknown' the messages left 'pending' past any send's lease by an instance that died, so
 * such a message gets a final status while any instance lives, not only when one starts.
 * Responsible for that step's run; not for scheduling (jobs.h) or for resolving a repeated
 * Idempotency-Key (idem.h).
 */
#ifndef OMNIGATE_STEPS_PENDING_SWEEP_H
#define OMNIGATE_STEPS_PENDING_SWEEP_H

/* The step kind of the pending sweep (og_jobs_register; the steps metrics' label). */
#define OG_PENDING_SWEEP_STEP_KIND "sweep"

#include "omnigate/app/ctx.h"

/* Registers the `sweep` step kind on gw->jobs. 0, or -1 when it cannot. */
int og_sweep_register(og_gw_t *gw);

#endif
