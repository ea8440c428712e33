/*
 * The database pools' metric block (metrics.h): write batches and their commit time, retries,
 * merged operations, missed deadlines, and each pool's queue and ready connections (the write
 * pool's and the read pool's gauges apart). The app registers it (worker.h) and hands it to its
 * pools (og_db_set_metrics); src/data/db/ records. Responsible for the block's fields and table.
 */
#ifndef OMNIGATE_DB_METRICS_H
#define OMNIGATE_DB_METRICS_H

#include <stdint.h>

#include "omnigate/metrics.h"

typedef struct og_db_metrics {
    og_m_hist_t db_batch_ops;
    og_m_hist_t db_commit_us;
    uint64_t db_timeouts; /* OMNIGATE_DB_TIMEOUT_MS: connections dropped and queued ops failed */
    uint64_t db_retries;
    uint64_t db_merged; /* ops whose first statement ran in its batch's set form (src/data/db/) */
    /* gauges */
    uint64_t db_queue;
    uint64_t db_connected;
    uint64_t db_read_queue; /* the read pool's (log queries): db.h og_db_new_reader */
    uint64_t db_read_connected;
} og_db_metrics_t;

extern const og_m_block_t og_db_metrics_block;

/* A write batch of `ops` operations committed commit_us after it was sent (m may be NULL). */
void og_metrics_db_batch(og_db_metrics_t *m, uint64_t ops, uint64_t commit_us);

#endif
