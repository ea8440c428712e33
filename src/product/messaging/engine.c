/*
 * The delivery engine. See include/product/omnigate/messaging/engine.h.
 */
#include "omnigate/messaging/engine.h"

void og_engine_run(og_engine_t *e)
{
    e->started = 0;
    e->completed = 0;
    e->winner = -1;
    for (int i = 0; i < OG_ENGINE_MAX; i++)
        e->ok[i] = false;
    if (e->n <= 0) {
        e->done(e);
        return;
    }
    if (!e->all) {
        e->started = 1;
        e->start(e, 0);
        return;
    }
    /* Count them all as started first: an attempt that completes synchronously must not
     * see the run as finished while its siblings have yet to start. */
    e->started = e->n;
    for (int i = 0; i < e->n; i++)
        e->start(e, i);
}

void og_engine_attempt_done(og_engine_t *e, int i, bool ok)
{
    e->ok[i] = ok;
    e->order[e->completed++] = i;
    if (ok && e->winner < 0)
        e->winner = i; /* all: the first to succeed in time; fallback: the only success */
    if (e->all) {
        if (e->completed == e->n)
            e->done(e);
        return;
    }
    if (ok || e->started == e->n) {
        e->done(e);
        return;
    }
    e->start(e, e->started++);
}
