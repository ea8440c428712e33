/*
 * Delivery-based fallback (API.md §11): the runner of the durable `fallback` steps that carry a
 * send's chain on after its answer, when the accepted channel reports failed/undelivered or
 * stays silent past fallbackAfterSeconds. Responsible for deciding and making the chain's
 * next attempt and recording it; not for validating the request or the first attempts
 * (send.c), for scheduling and leases (jobs.h), or for applying statuses (webhooks_in.h and
 * sql/005-006).
 */
#ifndef OMNIGATE_STEPS_FALLBACK_H
#define OMNIGATE_STEPS_FALLBACK_H

/* The step kind of the delivery-based fallback (og_jobs_register; the steps metrics' label). */
#define OG_FALLBACK_STEP_KIND "fallback"

#include "omnigate/app/ctx.h"

/* Registers the `fallback` step kind on gw->jobs. 0, or -1 when it cannot. */
int og_fallback_register(og_gw_t *gw);

#endif
