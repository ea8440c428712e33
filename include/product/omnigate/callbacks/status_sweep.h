/*
 * The status sweep (API.md §10), run by worker 0 of each instance: a provider status committed
 * while its attempt's insert was in flight stays unmatched (neither transaction saw the other);
 * every 250 ms the sweep adopts such statuses (a failed status adopted this way also moves a
 * delivery-based fallback on), prunes week-old unmatched ones and reports how many recent ones
 * still wait (sql/005_delivery_status.sql). Responsible for the timer and its one operation;
 * not for the statuses' rules (the statement). Not the pending sweep (steps/pending_sweep.h).
 */
#ifndef OMNIGATE_CALLBACKS_STATUS_SWEEP_H
#define OMNIGATE_CALLBACKS_STATUS_SWEEP_H

#include "omnigate/app/ctx.h"
#include "omnigate/metrics.h"

/* Its metric block (metrics.h): one gauge, of the statuses waiting for their attempt. The app
 * registers it (worker.h); the sweep's worker records it. */
extern const og_m_block_t og_status_sweep_metrics_block;

/* Starts the sweep of gw (which has a database); NULL when out of memory. */
struct og_status_sweep *og_status_sweep_start(og_gw_t *gw);

/* Stops it; closed(arg) runs once its timer is closed. An operation still in flight ends on the
 * pool, which is closed after this (app/gateway.c). */
void og_status_sweep_close(struct og_status_sweep *s, void (*closed)(void *arg), void *arg);

#endif
