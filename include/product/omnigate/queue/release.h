/*
 * The release of queued messages (API.md §19), one per worker: claims due messages with their
 * senders' tokens (queue_claim: og_queue_claim in sql/018_queue.sql, which leases each message
 * to this worker in the claim's transaction, the lease standing for its attempt), calls each one's
 * provider, and records the outcome with what follows it (queue_done: the next channel, a
 * retry after a throttle, the final status) under the lease. Responsible for moving queued
 * messages to providers at their senders' rates; not for accepting them (messaging/send.c) or
 * for the rates themselves (pacing.h).
 *
 * When: a jittered timer (OG_QUEUE_TICK_MS, +-25%; sooner after a claim that took something, at
 * the pace it found, so that a paced sender is released in small steps); at once after a claim
 * that filled its batch; at once after this worker commits a message due now (og_queue_due);
 * at the sendAt of the scheduled messages it committed (the next OG_QUEUE_DUE_SLOTS of them).
 * Other instances find them at their next tick, well within the second API.md §19 allows.
 */
#ifndef OMNIGATE_QUEUE_RELEASE_H
#define OMNIGATE_QUEUE_RELEASE_H

#include "omnigate/app/ctx.h"
#include "omnigate/metrics.h"
#include "omnigate/providers/provider.h"

#define OG_QUEUE_TICK_MS        200 /* a worker's claims with nothing woken: every 150-250 ms */
#define OG_QUEUE_PACED_MIN_MS   20  /* ... after a claim that took some: sooner, as its pace says */
#define OG_QUEUE_IN_FLIGHT      256 /* released messages one worker holds (at providers, or outcomes to write) */
#define OG_QUEUE_CLAIM_MAX      128  /* messages one claim takes, at most */
#define OG_QUEUE_CLAIM_SENDERS  32   /* senders one claim serves, at most */
#define OG_QUEUE_DONE_GATHER    128  /* outcomes a worker writes together (one write batch), at most ... */
#define OG_QUEUE_DONE_LINGER_MS 25   /* ... waiting this long after the first for the others */
#define OG_QUEUE_SAMPLE_MS      2000 /* the depth gauges: sampled this often by worker 0 */
#define OG_QUEUE_ABANDON_MS     1000 /* a worker's claims end dead holders' leases this often */
/* ... and complete this many finished batches at most (API.md §20), as a parameter */
#define OG_BATCH_COMPLETE_MAX_S "100"
#define OG_QUEUE_DEBITS         128 /* senders a worker gathers sync sends' calls for between ticks */
#define OG_QUEUE_DUE_SLOTS      8   /* scheduled due times a worker claims at, the earliest kept */
#define OG_QUEUE_DUE_MARGIN_MS  2   /* ... that long after each (the loop's clock may run behind) */

/* The queue's metric block (metrics.h): depth by priority (sampled), lag (claim time minus due
 * time), throttles and releases by channel. The app registers it (worker.h). */
extern const og_m_block_t og_queue_metrics_block;

typedef struct og_queue og_queue_t;

/* Starts the release of worker gw (which has a database and its jobs, whose lease owner names
 * this worker's claims). `sampler`: this worker samples the depth gauges. NULL on OOM. */
og_queue_t *og_queue_start(og_gw_t *gw, bool sampler);

/* Claims now (or right after the claim in flight): a message may be due now. */
void og_queue_wake(og_queue_t *q);

/* This worker committed a queued message due at `due_ms` (ms since the epoch): claims now when
 * it is due, else at that time (when it is among the next OG_QUEUE_DUE_SLOTS due times this
 * worker knows of; else at a tick, as any other instance). NULL-safe. */
void og_queue_due(og_queue_t *q, int64_t due_ms);

/* A sync send's provider call on a sender has ended with `r` (API.md §19: sync sends count
 * against the rate and are never held). A call its provider answered (r->http_status) takes
 * og_pacing_cost(ch, segments) tokens from the sender's bucket with this worker's next tick,
 * together with the others gathered meanwhile; one that never reached it takes none. Every
 * sync path calls this when an attempt ends (the one rule). NULL-safe. */
void og_queue_debit(og_queue_t *q, const char *tenant_id, og_channel_t ch, const char *sender,
                    size_t segments, const og_attempt_result_t *r);

/* Stops claiming; messages at providers finish and record their outcome; `closed` is called
 * once nothing is in flight. Before the pool and the HTTP client close. */
void og_queue_close(og_queue_t *q, void (*closed)(void *arg), void *arg);

#endif
