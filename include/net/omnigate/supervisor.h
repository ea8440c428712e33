/*
 * The parent process of `omnigate serve`: forks the workers, restarts one that dies (with
 * backoff when it keeps dying), forwards SIGTERM/SIGINT for a graceful drain (a second signal
 * stops the workers at once) and exits when they are all gone. It never touches a client
 * socket and runs no event loop: it waits for signals with sigtimedwait.
 */
#ifndef OMNIGATE_SUPERVISOR_H
#define OMNIGATE_SUPERVISOR_H

#include "omnigate/config.h"
#include "omnigate/worker.h"

/* Runs `app` in cfg->workers supervised worker processes. Returns the process exit code:
 * 0 after a clean drain. */
int og_supervisor_run(const og_config_t *cfg, const og_app_t *app);

#endif
