/*
 * The status sweep. See include/product/omnigate/callbacks/status_sweep.h.
 */
#include "omnigate/callbacks/status_sweep.h"

#include <stdlib.h>

#include "omnigate/store.h"
#include "omnigate/util.h"

#define SWEEP_MS 250

OG_M_SCALAR(
    og_status_sweep_metrics_block, "omnigate_statuses_waiting", OG_M_GAUGE,
    "Statuses received in the last 10 minutes still waiting for their attempt (sampled every second).");

typedef struct og_status_sweep {
    og_gw_t *gw;
    uint64_t *waiting; /* the gauge in the worker's slot, or NULL */
    uv_timer_t timer;
    bool sweeping; /* op in flight */
    bool closing;  /* the timer is closed: the op's end frees s */
    og_db_op_t op;
    void (*closed)(void *arg);
    void *closed_arg;
} og_status_sweep_t;

static void sweep_free(og_status_sweep_t *s)
{
    void (*closed)(void *) = s->closed;
    void *arg = s->closed_arg;
    free(s);
    closed(arg);
}

static void swept(og_db_op_t *op, og_db_status_t st)
{
    og_status_sweep_t *s = container_of(op, og_status_sweep_t, op);
    if (st == OG_DB_OK && op->res[0] != NULL && PQntuples(op->res[0]) == 1 && s->waiting != NULL)
        og_metrics_gauge(s->waiting,
                         strtoull(PQgetvalue(op->res[0], 0, OG_C_STATUS_SWEEP_WAITING), NULL, 10));
    og_db_op_clear(op);
    s->sweeping = false;
    if (s->closing)
        sweep_free(s);
}

static void on_sweep(uv_timer_t *t)
{
    og_status_sweep_t *s = container_of(t, og_status_sweep_t, timer);
    if (s->sweeping || !og_db_ready(s->gw->db))
        return;
    s->sweeping = true;
    s->op = (og_db_op_t){.nstmts = 1, .write = true, .done = swept};
    og_q_status_sweep(&s->op.stmts[0]);
    og_db_submit(s->gw->db, &s->op);
}

og_status_sweep_t *og_status_sweep_start(og_gw_t *gw)
{
    og_status_sweep_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->gw = gw;
    s->waiting = og_worker_metrics(gw->w, &og_status_sweep_metrics_block);
    uv_timer_init(&gw->w->loop, &s->timer);
    uv_timer_start(&s->timer, on_sweep, SWEEP_MS, SWEEP_MS);
    uv_unref((uv_handle_t *)&s->timer);
    return s;
}

static void timer_closed(uv_handle_t *h)
{
    og_status_sweep_t *s = container_of((uv_timer_t *)h, og_status_sweep_t, timer);
    if (s->sweeping) {
        s->closing = true; /* the pool closes later and ends the op: swept frees s */
        return;
    }
    sweep_free(s);
}

void og_status_sweep_close(og_status_sweep_t *s, void (*closed)(void *arg), void *arg)
{
    s->closed = closed;
    s->closed_arg = arg;
    uv_close((uv_handle_t *)&s->timer, timer_closed);
}
