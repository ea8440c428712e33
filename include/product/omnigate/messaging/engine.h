/*
 * The delivery engine of API.md §2: runs the attempts of one send by `fallback` (one at a
 * time, in order, stopping at the first success) or `all` (every attempt at once, waiting for
 * each). It knows nothing of providers, HTTP or the database: the caller starts attempt i
 * when asked (start) and reports its outcome (og_engine_attempt_done); the engine decides
 * what runs next and which attempt won. Unit-testable with a fake starter.
 */
#ifndef OMNIGATE_MESSAGING_ENGINE_H
#define OMNIGATE_MESSAGING_ENGINE_H

#include <stdbool.h>

#define OG_ENGINE_MAX 3

typedef struct og_engine og_engine_t;

struct og_engine {
    /* in */
    int n;    /* attempts to run, 1..OG_ENGINE_MAX, in order */
    bool all; /* false: fallback */
    /* Starts attempt i; it must complete later with og_engine_attempt_done (it may do so
     * from inside this call). */
    void (*start)(og_engine_t *e, int i);
    /* Called once when the run is over: every started attempt has completed. */
    void (*done)(og_engine_t *e);
    void *arg;
    /* out */
    int started;              /* attempts started (fallback: up to and including the winner) */
    int completed;            /* attempts completed */
    int winner;               /* index of the winning attempt, -1 when none succeeded */
    bool ok[OG_ENGINE_MAX];   /* outcome per attempt */
    int order[OG_ENGINE_MAX]; /* attempt indexes in completion order */
};

/* Starts the run; e->done is called once, possibly before this returns. */
void og_engine_run(og_engine_t *e);

/* Attempt i finished, successfully or not. */
void og_engine_attempt_done(og_engine_t *e, int i, bool ok);

#endif
