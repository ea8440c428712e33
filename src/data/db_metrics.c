/*
 * The database pools' metric block. See include/data/omnigate/db_metrics.h.
 */
#include "omnigate/db_metrics.h"

#include <stddef.h>

static const og_m_buckets_t batch_ops = {{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}, 1};

void og_metrics_db_batch(og_db_metrics_t *m, uint64_t ops, uint64_t commit_us)
{
    if (m == NULL)
        return;
    og_metrics_observe(&m->db_batch_ops, &batch_ops, ops);
    og_metrics_observe(&m->db_commit_us, &og_m_latency_s, commit_us);
}

#define F(field) offsetof(og_db_metrics_t, field)

static const og_m_metric_t metrics[] = {
    {"omnigate_db_batch_operations", OG_M_HISTOGRAM, NULL, NULL, F(db_batch_ops), OG_M_SUM, &batch_ops, false,
     "Operations per group-committed write transaction."},
    {"omnigate_db_commit_duration_seconds", OG_M_HISTOGRAM, NULL, NULL, F(db_commit_us), OG_M_SUM,
     &og_m_latency_s, false, "Write batch latency: sent to PostgreSQL until its COMMIT answered."},
    OG_M_SUMMED(
        "omnigate_db_timeouts_total", OG_M_COUNTER, F(db_timeouts),
        "Database deadlines missed (OMNIGATE_DB_TIMEOUT_MS): a connection with no answer dropped, or an "
        "operation that waited too long for a connection failed."),
    OG_M_SUMMED("omnigate_db_batch_retries_total", OG_M_COUNTER, F(db_retries),
                "Write batches that failed and were retried op by op."),
    OG_M_SUMMED("omnigate_db_merged_operations_total", OG_M_COUNTER, F(db_merged),
                "Write operations whose first statement ran in one statement with others of its batch "
                "(a set form: one insert for all the batch's pending messages, one completion)."),
    OG_M_SUMMED("omnigate_db_queue_depth", OG_M_GAUGE, F(db_queue),
                "Database operations waiting for a connection."),
    OG_M_SUMMED(
        "omnigate_db_connections_ready", OG_M_GAUGE, F(db_connected),
        "Database connections ready, all workers (the write path's pool: sends, OTPs, statuses, admin)."),
    OG_M_SUMMED("omnigate_db_read_queue_depth", OG_M_GAUGE, F(db_read_queue),
                "Log queries waiting for a free read connection (OMNIGATE_DB_READ_POOL per worker)."),
    OG_M_SUMMED("omnigate_db_read_connections_ready", OG_M_GAUGE, F(db_read_connected),
                "Read connections ready (log queries; on OMNIGATE_DATABASE_READ_URL when set), all workers."),
};

const og_m_block_t og_db_metrics_block = OG_M_BLOCK(og_db_metrics_t, metrics);
