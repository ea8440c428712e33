/*
 * Durable steps: work that must happen later, kept in PostgreSQL (sql/006_steps.sql), run by
 * whichever worker of whichever instance is free. Responsible for finding due steps, claiming
 * them (FOR UPDATE SKIP LOCKED, a lease that expires if the holder dies), handing each to the
 * runner registered for its kind on the worker's loop, and giving the runner the statement that
 * closes the step in the same transaction as its result; not for what any kind of step does
 * (product modules register runners) or for HTTP.
 *
 * Wake-ups without busy polling: a LISTEN connection (og_db_listen, channel og_steps) hears
 * `NOTIFY og_steps` from any transaction that makes a step due now; a jittered timer (0.5 to
 * 1 s) per worker finds the rest (due timers, expired leases); og_jobs_wake claims at once,
 * for a worker that has just committed a step due now. With nothing due, the cost is one
 * indexed claim query per worker per timer tick.
 *
 * A step is done at most once: the claim is a conditional UPDATE only one worker wins, and
 * og_jobs_close_stmt deletes the step only while the caller still holds its lease, failing
 * the caller's transaction otherwise (so a holder whose lease was taken over records
 * nothing). What "once" means for side effects outside PostgreSQL (a provider call) is the
 * runner's business: `claims` > 1 tells it an earlier holder died or gave up mid-step.
 */
#ifndef OMNIGATE_JOBS_H
#define OMNIGATE_JOBS_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "omnigate/db.h"
#include "omnigate/log.h"
#include "omnigate/metrics.h"

#define OG_JOBS_MAX_RUNNING 64
#define OG_JOBS_MAX_KINDS   8

typedef struct og_jobs og_jobs_t;
typedef struct og_step og_step_t;

/* The kinds of steps an app registers (og_jobs_register), in a fixed order: the `kind` label of
 * the steps metrics. The app's list, given both to og_jobs_new and as the context of
 * og_jobs_metrics_block when the app registers it (worker.h). */
typedef struct og_jobs_kinds {
    int n;
    const char *const *names;
} og_jobs_kinds_t;

/* The steps' metric block (metrics.h): steps done and failed by kind (up to OG_JOBS_MAX_KINDS
 * of the app's list), claim lag, steps running and due. */
typedef struct og_jobs_metrics {
    uint64_t steps_done[OG_JOBS_MAX_KINDS];
    uint64_t steps_failed[OG_JOBS_MAX_KINDS];
    og_m_hist_t step_lag; /* claim time - due time, in µs like the other latencies */
    /* gauges */
    uint64_t steps_running;
    uint64_t steps_due; /* set by the worker that samples it */
} og_jobs_metrics_t;

extern const og_m_block_t og_jobs_metrics_block;

/* One claimed step, owned by the jobs module; valid until og_jobs_finish. Strings are
 * NUL-terminated; tenant_id and reference may be "" for steps without a subject. */
struct og_step {
    og_jobs_t *jobs;
    char id[24];
    int kind;        /* index given at og_jobs_register */
    char *tenant_id; /* malloc'd copies */
    char *reference;
    char *payload;   /* JSON text */
    int claims;      /* including this one */
    uint64_t lag_ms; /* how late the claim was: now - due_at */
    void *data;      /* for the runner */
    og_step_t *next; /* private */
};

/* Runs a claimed step; it must end, now or later, with exactly one og_jobs_finish. */
typedef void (*og_step_run_fn)(og_step_t *step, void *arg);

/* Creates the scheduler of one worker; nothing runs until og_jobs_start. It records in `m` (its
 * block in the worker's slot, or NULL) by the app's `kinds` (which must outlive it). `owner`
 * names this worker in leases (e.g. "host:pid:random"); copied. `sampler`: this worker also
 * counts the steps due (the omnigate_steps_due gauge; one worker per instance is enough). NULL
 * on OOM. */
og_jobs_t *og_jobs_new(uv_loop_t *loop, og_db_t *db, og_log_t *log, og_jobs_metrics_t *m,
                       const og_jobs_kinds_t *kinds, const char *owner, bool sampler);

/* Registers the runner of steps of kind `name` (one of the `kinds` given to og_jobs_new, which
 * metrics label by; another name runs uncounted): its steps are leased for lease_ms, which must
 * cover the longest run. Returns the kind index for og_step_t.kind, or -1. At most
 * OG_JOBS_MAX_RUNNING steps of all kinds run at once on a worker; the rest wait in PostgreSQL
 * for the next claim. */
int og_jobs_register(og_jobs_t *j, const char *name, uint32_t lease_ms, og_step_run_fn fn, void *arg);

/* At most `max` steps of kind `kind` (an index from og_jobs_register) run at once on this
 * worker (default: no limit but OG_JOBS_MAX_RUNNING), so that long steps of one kind always
 * leave slots to the others. */
void og_jobs_limit(og_jobs_t *j, int kind, int max);

/* The lease owner of this worker's claims, as steps.lease_owner holds it: for a runner whose
 * closing statement is its own (a function that calls og_step_close). */
const char *og_jobs_owner(const og_jobs_t *j);

/* True once og_jobs_close was called: a long runner ends what it has started and takes on no
 * more. */
bool og_jobs_closing(const og_jobs_t *j);

/* Also calls fn(arg, payload) for every notification on og_steps (payload NULL after a
 * reconnect of the listener, as og_db_listen says), after claiming: for a runner whose steps are
 * made by someone listening (webhooks_out.c). fn NULL removes it. */
void og_jobs_on_notify(og_jobs_t *j, void (*fn)(void *arg, const char *payload), void *arg);

/* Starts the timer and the LISTEN connection. */
void og_jobs_start(og_jobs_t *j);

/* Claims due steps now (call after committing a step due now). */
void og_jobs_wake(og_jobs_t *j);

/* Adds the statement that closes (deletes) `s` at op->stmts[n], to be submitted with the
 * step's result in one write: the op fails (and records nothing) if the lease was lost.
 * Returns the number of statements added (1). The values point into `s`: keep it until done. */
int og_jobs_close_stmt(og_step_t *s, og_db_op_t *op, int n);

/* The runner is done with `s`: ok when its closing write committed; false counts a failure
 * and leaves the step to be claimed again when its lease expires. Frees `s`. */
void og_jobs_finish(og_step_t *s, bool ok);

/* Steps running on this worker now. */
int og_jobs_running(const og_jobs_t *j);

/* Stops claiming and closes the timer; steps still running finish (their runners end them).
 * `closed` is called once the timer is closed and no step runs. The struct stays allocated
 * for the pool's LISTEN callback: free it with og_jobs_free once the pool is closed. */
void og_jobs_close(og_jobs_t *j, void (*closed)(void *arg), void *arg);
void og_jobs_free(og_jobs_t *j);

#endif
