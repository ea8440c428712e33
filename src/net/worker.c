/*
 * Worker process lifetime. See include/net/omnigate/worker.h.
 */
#include "omnigate/worker.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "omnigate/api.h"

static uint64_t now_us(void *ctx)
{
    return uv_hrtime() / 1000;
}

static const char *http_date(void *ctx)
{
    og_worker_t *w = ctx;
    time_t now = time(NULL);
    if (now != w->date_sec) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(w->date, sizeof(w->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        w->date_sec = now;
    }
    return w->date;
}

/* The route's own body limit, if it has one (provider webhooks carry up to 4 MiB). */
static size_t body_limit(const og_http_req_t *req, void *ctx)
{
    og_worker_t *w = ctx;
    og_route_match_t m;
    char allow[64];
    if (og_router_match(&w->router, req->method_str, req->path, req->path_len, &m, allow, sizeof(allow)) ==
            OG_ROUTE_FOUND &&
        m.route->max_body > 0)
        return m.route->max_body;
    return w->http.limits.max_body_bytes;
}

static void handle_request(og_http_req_t *req, void *ctx)
{
    og_worker_t *w = ctx;
    og_router_dispatch(&w->router, req, w);
}

static void request_done(const og_http_req_t *req, void *ctx)
{
    og_worker_t *w = ctx;
    og_http_metrics_request(w->m, req->route_index, req->status, req->duration_us);
    if (!w->cfg->access_log || !og_log_enabled(&w->log, OG_LOG_INFO))
        return;
    og_log_bulk(&w->log, OG_LOG_INFO, "access",
                "\"requestId\":\"%s\",\"conn\":%llu,\"method\":\"%s\",\"route\":\"%s\",\"status\":%d,"
                "\"durationUs\":%llu,\"bytesIn\":%zu,\"bytesOut\":%zu",
                req->request_id, (unsigned long long)req->conn->id, req->method_str, req->route, req->status,
                (unsigned long long)req->duration_us, req->bytes_in, req->bytes_out);
}

static void on_log_writable(uv_poll_t *h, int status, int events);
static void on_lag_tick(uv_timer_t *t);

/* Flushes the log; if lines are left behind, waits for room in the output. */
static void flush_log(og_worker_t *w)
{
    bool empty = og_log_flush(&w->log);
    if (empty && w->log_waiting) {
        uv_poll_stop(&w->log_poll);
        w->log_waiting = false;
    } else if (!empty && !w->log_waiting && w->log_poll_ready) {
        w->log_waiting = uv_poll_start(&w->log_poll, UV_READABLE, on_log_writable) == 0;
    }
}

static void on_log_writable(uv_poll_t *h, int status, int events)
{
    flush_log(h->data);
}

static void on_flush_check(uv_check_t *h)
{
    og_worker_t *w = h->data;
    /* When og_log_due says so (a line other than the access log's, or 32 KiB of those);
     * on_lag_tick flushes the access log's lines every 100 ms.
     * While the output is full, the poll flushes when it has room; writing here too would
     * only be refused once per turn. */
    if (!w->log_waiting && og_log_due(&w->log))
        flush_log(w);
    if (w->m != NULL && w->log.dropped != w->log_dropped_seen) {
        og_metrics_add(&w->m->log_dropped, w->log.dropped - w->log_dropped_seen);
        w->log_dropped_seen = w->log.dropped;
    }
}

/* The window of per-second maxima: entries of seconds that have passed are cleared. */
static uint64_t lag_window(og_worker_t *w, uint64_t now_ms, uint64_t lag_us)
{
    uint64_t sec = now_ms / 1000;
    for (uint64_t s = w->lag_sec + 1; s <= sec && s <= w->lag_sec + OG_LAG_WINDOW_S; s++)
        w->lag_max_us[s % OG_LAG_WINDOW_S] = 0;
    w->lag_sec = sec;
    uint64_t *cur = &w->lag_max_us[sec % OG_LAG_WINDOW_S];
    if (lag_us > *cur)
        *cur = lag_us;
    uint64_t max = 0;
    for (int i = 0; i < OG_LAG_WINDOW_S; i++)
        if (w->lag_max_us[i] > max)
            max = w->lag_max_us[i];
    return max;
}

static void start_lag_timer(og_worker_t *w)
{
    /* libuv counts a timeout from the loop's cached time, so that is when it is due. */
    w->lag_due_ms = uv_now(&w->loop) + OG_LAG_TICK_MS;
    uv_timer_start(&w->lag_timer, on_lag_tick, OG_LAG_TICK_MS, 0);
}

/* How late this timer runs is how long the loop was busy past its due time: a callback that
 * blocked, or a turn with too much work. Read from the clock in µs: the loop's cached time
 * counts whole milliseconds. */
static void on_lag_tick(uv_timer_t *t)
{
    og_worker_t *w = t->data;
    uint64_t now_us = uv_hrtime() / 1000, due_us = w->lag_due_ms * 1000;
    uint64_t lag_us = now_us > due_us ? now_us - due_us : 0;
    og_http_metrics_loop_lag(w->m, lag_us, lag_window(w, now_us / 1000, lag_us));
    if (!w->log_waiting) /* the log's flush by time (log.h), nginx's `flush=` */
        flush_log(w);
    start_lag_timer(w);
}

static void stop_loop_handles(og_worker_t *w)
{
    og_server_stop_listening(&w->server);
    if (w->app->stop != NULL && !w->app_stopped) {
        w->app_stopped = true;
        w->app->stop(w);
    }
    uv_close((uv_handle_t *)&w->sig_term, NULL);
    uv_close((uv_handle_t *)&w->sig_int, NULL);
    uv_close((uv_handle_t *)&w->drain_timer, NULL);
    uv_close((uv_handle_t *)&w->delay_timer, NULL);
    uv_close((uv_handle_t *)&w->flush_check, NULL);
    uv_close((uv_handle_t *)&w->sample_timer, NULL);
    uv_close((uv_handle_t *)&w->lag_timer, NULL);
    if (w->log_poll_ready)
        uv_close((uv_handle_t *)&w->log_poll, NULL);
    w->log_waiting = false;
    /* Nothing flushes by time any more: what the drain logged is out now, not at exit (the
     * app's close may wait on the database for up to OMNIGATE_DB_TIMEOUT_MS). */
    og_log_flush(&w->log);
}

/* The transport released a connection: a draining worker stops when the last one is gone. */
static void conn_gone(og_server_t *s, void *arg)
{
    og_worker_t *w = arg;
    if (w->draining && !s->listening && s->nconns == 0 && !uv_is_closing((uv_handle_t *)&w->drain_timer)) {
        og_log(&w->log, OG_LOG_INFO, "drained", NULL);
        stop_loop_handles(w);
    }
}

static void on_drain_timeout(uv_timer_t *t)
{
    og_worker_t *w = t->data;
    og_log(&w->log, OG_LOG_WARN, "drain timeout: closing remaining connections", "\"connections\":%zu",
           w->server.nconns);
    og_log_flush(&w->log);
    _exit(1);
}

/* The second half of a drain: no new connections; idle ones closed; the rest finish. */
static void stop_accepting(og_worker_t *w)
{
    og_server_stop_listening(&w->server);
    og_server_close_idle(&w->server);
    conn_gone(&w->server, w);
}

static void on_drain_delay(uv_timer_t *t)
{
    stop_accepting(t->data);
}

void og_worker_drain(og_worker_t *w)
{
    if (w->draining)
        return;
    w->draining = true;
    w->http.draining = true;
    if (w->m != NULL)
        og_metrics_gauge(&w->m->draining, 1);
    og_log(&w->log, OG_LOG_INFO, "draining", "\"connections\":%zu,\"delayMs\":%d", w->server.nconns,
           w->cfg->drain_delay_ms);
    uv_timer_start(&w->drain_timer, on_drain_timeout,
                   (uint64_t)w->cfg->drain_timeout_ms + (uint64_t)w->cfg->drain_delay_ms, 0);
    if (w->cfg->drain_delay_ms > 0)
        uv_timer_start(&w->delay_timer, on_drain_delay, (uint64_t)w->cfg->drain_delay_ms, 0);
    else
        stop_accepting(w);
}

static void on_signal(uv_signal_t *s, int signum)
{
    og_worker_t *w = s->data;
    if (w->draining) {
        /* A second signal: stop at once. */
        og_log(&w->log, OG_LOG_WARN, "second signal: exiting now", "\"signal\":%d", signum);
        og_log_flush(&w->log);
        _exit(1);
    }
    og_worker_drain(w);
}

static void make_rid_prefix(og_worker_t *w)
{
    unsigned char r[6];
    if (RAND_bytes(r, sizeof(r)) != 1)
        memset(r, 0, sizeof(r));
    snprintf(w->http.rid_prefix, sizeof(w->http.rid_prefix), "%02x%02x%02x%02x%02x%02x-", r[0], r[1], r[2],
             r[3], r[4], r[5]);
}

static void on_sample(uv_timer_t *t)
{
    og_worker_t *w = t->data;
    /* conns_open is kept exact by the transport; idle needs a walk over the connections. */
    if (w->m != NULL)
        og_metrics_gauge(&w->m->conns_idle, og_server_count_idle(&w->server));
}

bool og_worker_register_metrics(og_metrics_t *m, const og_app_t *app, const og_router_t *routes)
{
    if (!og_metrics_register(m, (og_m_reg_t){&og_http_metrics_block, routes}))
        return false;
    for (size_t i = 0; i < app->nmetrics; i++)
        if (!og_metrics_register(m, app->metrics[i]))
            return false;
    return true;
}

void *og_worker_metrics(const og_worker_t *w, const og_m_block_t *b)
{
    return og_metrics_block(w->metrics, w->index, b);
}

int og_worker_run(const og_config_t *cfg, const og_app_t *app, int index, const og_metrics_t *metrics)
{
    og_worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return 1;
    if (metrics != NULL && index >= 0 && index < metrics->nslots) {
        w->metrics = metrics;
        og_metrics_slot_start(metrics, index, (uint64_t)getpid());
    }
    w->cfg = cfg;
    w->app = app;
    w->index = index;
    w->m = og_worker_metrics(w, &og_http_metrics_block);
    og_log_level_t level = OG_LOG_INFO;
    og_log_level_parse(cfg->log_level, &level);
    if (!og_log_init(&w->log, level, true))
        og_log(&w->log, OG_LOG_WARN, "no memory for the log buffer: writing lines at once", NULL);
    w->exit_code = 0;

    w->http.limits = (og_http_limits_t){
        .max_header_bytes = cfg->max_header_bytes,
        .max_body_bytes = cfg->max_body_bytes,
        .header_timeout_ms = (uint64_t)cfg->header_timeout_ms,
        .body_timeout_ms = (uint64_t)cfg->body_timeout_ms,
        .idle_timeout_ms = (uint64_t)cfg->idle_timeout_ms,
        .max_write_backlog = 256 * 1024,
    };
    w->http.handler = handle_request;
    w->http.body_limit = body_limit;
    w->http.done = request_done;
    w->http.ctx = w;
    w->http.now_us = now_us;
    w->http.date = http_date;
    make_rid_prefix(w);
    w->router = (og_router_t){app->routes, app->nroutes};

    int rc = uv_loop_init(&w->loop);
    if (rc != 0) {
        og_log(&w->log, OG_LOG_ERROR, "loop init failed", "\"error\":\"%s\"", uv_strerror(rc));
        og_log_close(&w->log, 500);
        free(w);
        return 1;
    }
    og_server_init(&w->server, &w->loop, &w->http, &w->log, w->m, conn_gone, w);
    uv_signal_init(&w->loop, &w->sig_term);
    uv_signal_init(&w->loop, &w->sig_int);
    w->sig_term.data = w->sig_int.data = w;
    uv_signal_start(&w->sig_term, on_signal, SIGTERM);
    uv_signal_start(&w->sig_int, on_signal, SIGINT);
    /* The supervisor forks us with these blocked; a signal that is already pending is
     * delivered to the handlers just installed. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_UNBLOCK, &mask, NULL);
    uv_timer_init(&w->loop, &w->drain_timer);
    w->drain_timer.data = w;
    uv_timer_init(&w->loop, &w->delay_timer);
    w->delay_timer.data = w;
    uv_check_init(&w->loop, &w->flush_check);
    w->flush_check.data = w;
    uv_check_start(&w->flush_check, on_flush_check);
    uv_unref((uv_handle_t *)&w->flush_check);
    uv_timer_init(&w->loop, &w->sample_timer);
    w->sample_timer.data = w;
    uv_timer_start(&w->sample_timer, on_sample, 1000, 1000);
    uv_unref((uv_handle_t *)&w->sample_timer);
    if (og_log_wait_fd(&w->log) >= 0 && uv_poll_init(&w->loop, &w->log_poll, og_log_wait_fd(&w->log)) == 0) {
        w->log_poll.data = w;
        w->log_poll_ready = true;
        uv_unref((uv_handle_t *)&w->log_poll);
    }
    uv_timer_init(&w->loop, &w->lag_timer);
    w->lag_timer.data = w;
    uv_unref((uv_handle_t *)&w->lag_timer);

    if (app->start != NULL && app->start(w) != 0) {
        og_log(&w->log, OG_LOG_ERROR, "app start failed", "\"worker\":%d", index);
        w->exit_code = 1;
        stop_loop_handles(w);
    } else if ((rc = og_server_listen(&w->server, cfg->listen_host, cfg->listen_port)) != 0) {
        og_log(&w->log, OG_LOG_ERROR, "listen failed", "\"listen\":\"%s\",\"error\":\"%s\"", cfg->listen,
               uv_strerror(rc));
        w->exit_code = 3;
        stop_loop_handles(w);
    } else {
        og_log(&w->log, OG_LOG_INFO, "worker started", "\"worker\":%d,\"listen\":\"%s\"", index, cfg->listen);
        /* From now: the app's start-up is no lag of the loop. */
        uv_update_time(&w->loop);
        w->lag_sec = uv_now(&w->loop) / 1000;
        start_lag_timer(w);
    }
    og_log_flush(&w->log);

    uv_run(&w->loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&w->loop);
    if (rc != 0)
        og_log(&w->log, OG_LOG_WARN, "loop closed with open handles", NULL);
    /* The loop is over: what is left may wait a little for a slow log reader. */
    og_log_close(&w->log, 500);
    int code = w->exit_code;
    free(w);
    return code;
}
