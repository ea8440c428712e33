/*
 * Worker supervisor. See include/net/omnigate/supervisor.h.
 */
#include "omnigate/supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "og_build.h"
#include "omnigate/log.h"
#include "omnigate/worker.h"

#define RESTART_BACKOFF_MIN_MS 100
#define RESTART_BACKOFF_MAX_MS 5000
#define STABLE_AFTER_MS        5000
#define LOG_RETRY_MS           50   /* how soon lines the log output refused are tried again */
#define LOG_EXIT_WAIT_MS       1000 /* how long the last lines may wait for the output at exit */

typedef struct slot {
    pid_t pid; /* 0 when not running */
    uint64_t started_ms;
    uint64_t restart_at_ms; /* when to start it again; 0 = not scheduled */
    uint64_t backoff_ms;
} slot_t;

typedef struct supervisor {
    const og_config_t *cfg;
    const og_app_t *app;
    og_log_t log;
    slot_t *slots;
    int nslots;
    int signals;  /* SIGTERM/SIGINT received */
    int failures; /* workers that exited non-zero during drain */
    sigset_t mask;
    og_router_t routes;   /* the app's route table: the route labels of the metrics */
    og_metrics_t metrics; /* shared with the workers; unmapped at exit */
} supervisor_t;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void spawn(supervisor_t *s, int i)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        og_log(&s->log, OG_LOG_ERROR, "fork failed", "\"worker\":%d,\"error\":\"%s\"", i, strerror(errno));
        s->slots[i].restart_at_ms = mono_ms() + RESTART_BACKOFF_MAX_MS;
        return;
    }
    if (pid == 0) {
        /* The worker dies with its supervisor rather than serving on unsupervised. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        /* The supervisor died before the death signal was armed: our parent changed. (Not
         * "parent is pid 1": in a container the supervisor may be pid 1 itself.) */
        if (getppid() != parent)
            _exit(1);
        og_log_forget(&s->log); /* the supervisor's lines are the supervisor's to write */
        /* Signals stay blocked until og_worker_run has its handlers in place: a SIGTERM that
         * arrives while the worker starts is then a drain, not a death by default action. */
        _exit(og_worker_run(s->cfg, s->app, i, s->metrics.area ? &s->metrics : NULL));
    }
    s->slots[i].pid = pid;
    s->slots[i].started_ms = mono_ms();
    s->slots[i].restart_at_ms = 0;
}

static int running(const supervisor_t *s)
{
    int n = 0;
    for (int i = 0; i < s->nslots; i++)
        n += s->slots[i].pid != 0;
    return n;
}

static void signal_all(supervisor_t *s, int sig)
{
    for (int i = 0; i < s->nslots; i++)
        if (s->slots[i].pid != 0)
            kill(s->slots[i].pid, sig);
}

static void reap(supervisor_t *s)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int i;
        for (i = 0; i < s->nslots && s->slots[i].pid != pid; i++)
            ;
        if (i == s->nslots)
            continue;
        slot_t *sl = &s->slots[i];
        sl->pid = 0;
        bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (WIFSIGNALED(status))
            og_log(&s->log, s->signals ? OG_LOG_INFO : OG_LOG_WARN, "worker killed",
                   "\"worker\":%d,\"workerPid\":%d,\"signal\":%d", i, (int)pid, WTERMSIG(status));
        else
            og_log(&s->log, clean ? OG_LOG_INFO : OG_LOG_WARN, "worker exited",
                   "\"worker\":%d,\"workerPid\":%d,\"code\":%d", i, (int)pid, WEXITSTATUS(status));
        if (s->signals) {
            if (!clean)
                s->failures++;
            continue;
        }
        /* Restart; back off while it keeps dying young so a broken worker cannot spin. */
        uint64_t now = mono_ms();
        if (now - sl->started_ms > STABLE_AFTER_MS)
            sl->backoff_ms = 0;
        sl->restart_at_ms = now + sl->backoff_ms;
        sl->backoff_ms = sl->backoff_ms ? sl->backoff_ms * 2 : RESTART_BACKOFF_MIN_MS;
        if (sl->backoff_ms > RESTART_BACKOFF_MAX_MS)
            sl->backoff_ms = RESTART_BACKOFF_MAX_MS;
    }
}

/* Process-wide set-up every server needs, done once before forking: a peer that closes
 * early must not kill a worker with SIGPIPE, and sockets scale with connections, so take the
 * hard limit on open files. */
static void server_process_setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int og_supervisor_run(const og_config_t *cfg, const og_app_t *app)
{
    server_process_setup();
    supervisor_t s = {.cfg = cfg, .app = app, .nslots = cfg->workers, .routes = {app->routes, app->nroutes}};
    og_log_level_t level = OG_LOG_INFO;
    og_log_level_parse(cfg->log_level, &level);
    /* Buffered like a worker's: a stalled log reader must not stop the supervisor from
     * reaping and restarting workers or from passing signals on (the loop below flushes). */
    og_log_init(&s.log, level, true);
    s.slots = calloc((size_t)s.nslots, sizeof(*s.slots));
    if (s.slots == NULL)
        return 1;
    if (!og_worker_register_metrics(&s.metrics, app, &s.routes))
        og_log(&s.log, OG_LOG_ERROR, "metric blocks clash (metrics.h): /metrics answers 503", NULL);
    else if (!og_metrics_map(&s.metrics, s.nslots))
        og_log(&s.log, OG_LOG_WARN, "no shared memory for metrics: /metrics answers 503", NULL);

    sigemptyset(&s.mask);
    sigaddset(&s.mask, SIGCHLD);
    sigaddset(&s.mask, SIGTERM);
    sigaddset(&s.mask, SIGINT);
    sigaddset(&s.mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &s.mask, NULL);

    og_log(&s.log, OG_LOG_INFO, "supervisor started", "\"workers\":%d,\"listen\":\"%s\",\"version\":\"%s\"",
           s.nslots, cfg->listen, OG_VERSION);
    for (int i = 0; i < s.nslots; i++)
        spawn(&s, i);

    for (;;) {
        reap(&s);
        if (s.signals && running(&s) == 0)
            break;
        uint64_t now = mono_ms(), next = now + 1000;
        if (!s.signals) {
            for (int i = 0; i < s.nslots; i++) {
                slot_t *sl = &s.slots[i];
                if (sl->pid == 0 && sl->restart_at_ms != 0) {
                    if (sl->restart_at_ms <= now) {
                        spawn(&s, i);
                        og_log(&s.log, OG_LOG_INFO, "worker restarted", "\"worker\":%d,\"workerPid\":%d", i,
                               (int)sl->pid);
                    } else if (sl->restart_at_ms < next) {
                        next = sl->restart_at_ms;
                    }
                }
            }
        }
        uint64_t wait_ms = next > now ? next - now : 0;
        /* Lines the output had no room for: try again soon (a signal still wakes us at once). */
        if (!og_log_flush(&s.log) && wait_ms > LOG_RETRY_MS)
            wait_ms = LOG_RETRY_MS;
        struct timespec ts = {(time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000};
        siginfo_t info;
        int sig = sigtimedwait(&s.mask, &info, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            s.signals++;
            og_log(&s.log, OG_LOG_INFO, s.signals == 1 ? "draining" : "second signal: stopping now",
                   "\"signal\":%d", sig);
            signal_all(&s, s.signals == 1 ? sig : SIGKILL);
            if (s.signals > 1)
                s.failures++;
        }
    }
    og_log(&s.log, OG_LOG_INFO, "supervisor exiting", "\"failures\":%d", s.failures);
    og_log_close(&s.log, LOG_EXIT_WAIT_MS);
    free(s.slots);
    og_metrics_unmap(&s.metrics);
    return s.failures ? 1 : 0;
}
