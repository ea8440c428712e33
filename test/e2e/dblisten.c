/*
 * og-dblisten: drives og_db_listen for test_db_listen.py. Opens a pool of one connection with
 * an empty statement table on CONNINFO, listens on CHANNEL (default og_steps) and prints one
 * line per callback to stdout, flushed at once: "connected" for the NULL payload after each
 * (re)connect, "notify <payload>" for a notification. It stops on a line "quit" on stdin, on
 * the end of stdin or on SIGTERM, prints "closed" once og_db_close has called back and the
 * loop has ended, and exits 0 only if uv_loop_close then succeeds (no handle left behind).
 *
 * Before listening it checks og_db_listen's refusals (an invalid channel name, a second
 * listener) and exits 3 if one is accepted.
 *
 * usage: og-dblisten CONNINFO [CHANNEL]
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "omnigate/db.h"

typedef struct app {
    uv_loop_t loop;
    og_log_t log;
    og_db_t *db;
    uv_pipe_t in; /* stdin, when it is a pipe */
    bool in_open;
    uv_signal_t term;
    char line[256];
    size_t len;
    bool stopping;
    bool closed; /* og_db_close called back */
} app_t;

static void on_notify(void *arg, const char *channel, const char *payload)
{
    if (payload == NULL)
        printf("connected\n");
    else
        printf("notify %s\n", payload);
    fflush(stdout);
}

static void on_closed(void *arg)
{
    app_t *a = arg;
    a->closed = true;
}

static void stop(app_t *a)
{
    if (a->stopping)
        return;
    a->stopping = true;
    if (a->in_open)
        uv_close((uv_handle_t *)&a->in, NULL);
    uv_close((uv_handle_t *)&a->term, NULL);
    og_db_close(a->db, on_closed, a);
}

static void on_term(uv_signal_t *s, int signum)
{
    stop(s->data);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    app_t *a = h->data;
    buf->base = a->line + a->len;
    buf->len = sizeof(a->line) - 1 - a->len;
}

/* Looks for a line "quit" in the `n` bytes stdin just brought; longer lines are dropped. */
static void take_input(app_t *a, size_t n)
{
    a->len += n;
    a->line[a->len] = '\0';
    char *nl;
    while (!a->stopping && (nl = strchr(a->line, '\n')) != NULL) {
        *nl = '\0';
        if (strcmp(a->line, "quit") == 0)
            stop(a);
        size_t rest = a->len - (size_t)(nl + 1 - a->line);
        memmove(a->line, nl + 1, rest + 1);
        a->len = rest;
    }
    if (a->len == sizeof(a->line) - 1)
        a->len = 0;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    if (n < 0) /* the end of stdin (or an error) stops it like "quit" */
        stop(s->data);
    else
        take_input(s->data, (size_t)n);
}

static void ignore_notify(void *arg, const char *channel, const char *payload) {}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s CONNINFO [CHANNEL]\n", argv[0]);
        return 2;
    }
    const char *channel = argc > 2 ? argv[2] : "og_steps";
    static app_t a;
    uv_loop_init(&a.loop);
    og_log_init(&a.log, OG_LOG_INFO, false);
    a.db = og_db_new(&a.loop, &a.log, argv[1], 1, OG_DB_TIMEOUT_DEFAULT_MS, NULL, 0);
    if (a.db == NULL)
        return 1;
    int rc = 0;
    if (og_db_listen(a.db, "og-steps; select 1", ignore_notify, NULL) ||
        og_db_listen(a.db, "", ignore_notify, NULL)) {
        fprintf(stderr, "og_db_listen accepted an invalid channel name\n");
        rc = 3;
    } else if (!og_db_listen(a.db, channel, on_notify, &a)) {
        fprintf(stderr, "og_db_listen refused %s\n", channel);
        rc = 2;
    } else if (og_db_listen(a.db, "og_other", ignore_notify, NULL)) {
        fprintf(stderr, "og_db_listen accepted a second listener\n");
        rc = 3;
    }

    uv_signal_init(&a.loop, &a.term);
    a.term.data = &a;
    uv_signal_start(&a.term, on_term, SIGTERM);
    if (uv_guess_handle(0) == UV_NAMED_PIPE && uv_pipe_init(&a.loop, &a.in, 0) == 0) {
        a.in.data = &a;
        a.in_open = true;
        if (uv_pipe_open(&a.in, 0) != 0 || uv_read_start((uv_stream_t *)&a.in, on_alloc, on_read) != 0)
            stop(&a);
    }
    if (rc != 0)
        stop(&a);
    uv_run(&a.loop, UV_RUN_DEFAULT);
    if (a.closed)
        printf("closed\n");
    if (uv_loop_close(&a.loop) != 0) {
        fprintf(stderr, "handles left open after og_db_close\n");
        return 1;
    }
    return rc;
}
