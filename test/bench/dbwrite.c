/*
 * Write benchmark of the asynchronous database layer (src/data/db/): `concurrency` writers, each
 * submitting one operation (a message row and one attempt row, the unified send's shape) and,
 * when it is committed, the next, for `seconds`. Prints rows/s, commits/s and the mean batch
 * size as one JSON line. The comparison (pgbench, single-row transactions, same concurrency,
 * same cluster) is run by test/bench/dbwrite.sh.
 *
 * usage: og-bench-dbwrite CONNINFO TENANT_ID CONCURRENCY SECONDS [POOL]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnigate/db.h"

static const og_db_stmt_t stmts[] = {
    {"bench_msg",
     "INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels, status, "
     "winning_channel, completed_at) VALUES ($1, $2, '+6281234567890', 'bench', 'fallback', '{sms}', 'sent', "
     "'sms', now())",
     2},
    {"bench_att",
     "INSERT INTO attempts (tenant_id, reference, seq, channel, status, provider_message_id, latency_ms, "
     "attempted_at) VALUES ($1, $2, 0, 'sms', 'sent', 'SMbench', 12, now())",
     2},
};

typedef struct bench bench_t;

typedef struct writer {
    og_db_op_t op;
    bench_t *b;
    char ref[40];
} writer_t;

struct bench {
    uv_loop_t loop;
    og_db_t *db;
    const char *tenant;
    uint64_t seq, done_ops, failed;
    uint64_t start_ms, end_ms;
    bool stopping;
    int active;
    uv_timer_t stop_timer, start_timer;
    char run_id[16];
};

static void submit(writer_t *w);

static void done(og_db_op_t *op, og_db_status_t st)
{
    writer_t *w = op->arg;
    bench_t *b = w->b;
    og_db_op_clear(op);
    if (st == OG_DB_OK)
        b->done_ops++;
    else
        b->failed++;
    if (b->stopping) {
        b->active--;
        return;
    }
    submit(w);
}

static void submit(writer_t *w)
{
    bench_t *b = w->b;
    snprintf(w->ref, sizeof(w->ref), "kf_B%s%016llu", b->run_id, (unsigned long long)++b->seq);
    memset(&w->op, 0, sizeof(w->op));
    w->op.nstmts = 2;
    w->op.stmts[0].stmt = 0;
    w->op.stmts[0].values[0] = b->tenant;
    w->op.stmts[0].values[1] = w->ref;
    w->op.stmts[1].stmt = 1;
    w->op.stmts[1].values[0] = b->tenant;
    w->op.stmts[1].values[1] = w->ref;
    w->op.write = true;
    w->op.done = done;
    w->op.arg = w;
    og_db_submit(b->db, &w->op);
}

static void closed(void *arg) {}

static void on_stop(uv_timer_t *t)
{
    bench_t *b = t->data;
    b->stopping = true;
    b->end_ms = uv_now(&b->loop);
    og_db_stats_t st;
    og_db_stats(b->db, &st);
    double secs = (double)(b->end_ms - b->start_ms) / 1000.0;
    printf("{\"ops\":%llu,\"rows\":%llu,\"seconds\":%.2f,\"rowsPerSec\":%.0f,\"opsPerSec\":%.0f,"
           "\"commitsPerSec\":%.0f,\"meanBatch\":%.1f,\"failed\":%llu}\n",
           (unsigned long long)b->done_ops, (unsigned long long)b->done_ops * 2, secs, b->done_ops * 2 / secs,
           b->done_ops / secs, st.batches / secs,
           st.batches ? (double)st.batch_ops / (double)st.batches : 0.0, (unsigned long long)b->failed);
    fflush(stdout);
    uv_close((uv_handle_t *)&b->stop_timer, NULL);
}

static void on_start(uv_timer_t *t)
{
    writer_t *ws = t->data;
    bench_t *b = ws[0].b;
    if (!og_db_ready(b->db))
        return; /* try again at the next tick */
    uv_close((uv_handle_t *)&b->start_timer, NULL);
    b->start_ms = uv_now(&b->loop);
    for (int i = 0; i < b->active; i++)
        submit(&ws[i]);
    uv_timer_start(&b->stop_timer, on_stop, (uint64_t)b->end_ms, 0);
}

static void on_idle_check(uv_timer_t *t)
{
    bench_t *b = t->data;
    if (b->stopping && b->active == 0) {
        uv_close((uv_handle_t *)t, NULL);
        og_db_close(b->db, closed, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s CONNINFO TENANT_ID CONCURRENCY SECONDS [POOL]\n", argv[0]);
        return 2;
    }
    static bench_t b;
    int conc = atoi(argv[3]);
    int secs = atoi(argv[4]);
    int pool = argc > 5 ? atoi(argv[5]) : 2;
    if (conc < 1 || secs < 1 || pool < 1)
        return 2;
    uv_loop_init(&b.loop);
    og_log_t *log = calloc(1, sizeof(*log));
    og_log_init(log, OG_LOG_WARN, false);
    b.tenant = argv[2];
    b.active = conc;
    b.end_ms = (uint64_t)secs * 1000; /* duration until on_start turns it into a time */
    snprintf(b.run_id, sizeof(b.run_id), "%08x", (unsigned)uv_hrtime());
    b.db = og_db_new(&b.loop, log, argv[1], pool, OG_DB_TIMEOUT_DEFAULT_MS, stmts, 2);
    writer_t *ws = calloc((size_t)conc, sizeof(*ws));
    for (int i = 0; i < conc; i++)
        ws[i].b = &b;
    uv_timer_init(&b.loop, &b.start_timer);
    b.start_timer.data = ws;
    uv_timer_start(&b.start_timer, on_start, 10, 10);
    uv_timer_init(&b.loop, &b.stop_timer);
    b.stop_timer.data = &b;
    uv_timer_t idle;
    uv_timer_init(&b.loop, &idle);
    idle.data = &b;
    uv_timer_start(&idle, on_idle_check, 50, 50);
    uv_run(&b.loop, UV_RUN_DEFAULT);
    uv_loop_close(&b.loop);
    free(ws);
    free(log);
    return b.failed ? 1 : 0;
}
