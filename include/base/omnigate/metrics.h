/*
 * Metrics: per-worker counters, gauges and histograms in one shared memory area the
 * supervisor maps before forking (MAP_SHARED | MAP_ANONYMOUS). Each worker writes only its own
 * slot (single writer: plain relaxed loads and stores, no locks, no atomic read-modify-write);
 * whichever worker answers GET /metrics sums every slot, so a scrape sees the whole instance.
 *
 * The metrics themselves belong to the modules that record them. Each declares a block: a
 * struct of its fields and a const descriptor (og_m_block_t), its metric table: name, type,
 * help, label dimensions, the field's offset, how the slots fold, buckets. The blocks of a
 * process are registered before the area is mapped, which lays one slot out (each block at its
 * offset); a module finds its block in its worker's slot once at start and records through that
 * typed pointer. Labels are bounded: a dimension is a fixed number of indexes, each named by a
 * list of label values or by a callback (the route patterns of the app's table). No per-tenant,
 * per-token or per-recipient label exists.
 *
 * Responsible for the area, the recording primitives, the Prometheus text format and the list
 * of metrics, all walks of the registered tables; names no metric and knows no layer above.
 */
#ifndef OMNIGATE_METRICS_H
#define OMNIGATE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define OG_M_BUCKETS     15 /* histogram buckets, +Inf included */
#define OG_M_MAX_WORKERS 256
#define OG_M_MAX_BLOCKS  16

typedef struct og_m_hist {
    uint64_t bucket[OG_M_BUCKETS]; /* non-cumulative counts; rendered cumulative */
    uint64_t sum;                  /* in the histogram's unit (µs, or operations) */
    uint64_t count;
} og_m_hist_t;

/* A histogram's buckets: upper bounds in the base unit (seconds, operations) but the last
 * (+Inf), and what a recorded value is divided by to be in that unit. */
typedef struct og_m_buckets {
    double le[OG_M_BUCKETS - 1];
    double divisor;
} og_m_buckets_t;

/* Latencies: recorded in µs, exposed in seconds (0.5 ms to 10 s). */
extern const og_m_buckets_t og_m_latency_s;

typedef enum og_m_type { OG_M_COUNTER, OG_M_GAUGE, OG_M_HISTOGRAM } og_m_type_t;

/* How the slots' values of a series make the instance's value. */
typedef enum og_m_fold {
    OG_M_SUM,   /* the sum */
    OG_M_ANY,   /* 1 if any slot is non-zero, else 0 */
    OG_M_MAX,   /* the largest */
    OG_M_SLOTS, /* the number of slots; reads no field */
} og_m_fold_t;

/* A label dimension: one index of a field's array, and the labels that name each index. */
typedef struct og_m_dim {
    int n;                 /* indexes */
    const char *labels[2]; /* label names; the second NULL for a dimension of one label */
    /* The value of the (one) label of each index; or NULL, and then value(ctx, i, v) sets the
     * values of index i (v[0], and v[1] for a second label) from the context its block was
     * registered with, and returns false when index i is no series. */
    const char *const *values;
    bool (*value)(const void *ctx, int i, const char *v[2]);
} og_m_dim_t;

/* One metric of a block. Its field is an array [rows][cols] of uint64_t, or of og_m_hist_t
 * for a histogram (a NULL dimension: no such index); each index present is one series. */
typedef struct og_m_metric {
    const char *name;
    og_m_type_t type;
    const og_m_dim_t *rows, *cols;
    size_t offset; /* of the field in its block's struct */
    og_m_fold_t fold;
    const og_m_buckets_t *buckets; /* a histogram's bounds and unit; a counter or gauge: its unit, or NULL */
    bool sparse;                   /* omit zero series (count zero for a histogram): there would be many */
    const char *help;
} og_m_metric_t;

/* A module's block: the size of its struct and its metric table, in exposition order. */
typedef struct og_m_block {
    size_t size;
    const og_m_metric_t *metrics;
    size_t nmetrics;
} og_m_block_t;

// clang-format off
#define OG_M_BLOCK(type, table) {sizeof(type), table, sizeof(table) / sizeof((table)[0])}
/* An unlabelled counter or gauge, the sum of the slots' field at `offset`. */
#define OG_M_SUMMED(name, type, offset, help) {name, type, NULL, NULL, offset, OG_M_SUM, NULL, false, help}
/* The block of one OG_M_SUMMED metric at offset 0: its struct is a single uint64_t, which its
 * owner records through a uint64_t *. */
#define OG_M_SCALAR_BLOCK(metric) {sizeof(uint64_t), metric, 1}
/* Defines `block`, the block of one summed counter or gauge `name`, with its metric. */
#define OG_M_SCALAR(block, name, type, help)                                    \
    static const og_m_metric_t block##_metric = OG_M_SUMMED(name, type, 0, help); \
    const og_m_block_t block = OG_M_SCALAR_BLOCK(&block##_metric)
// clang-format on

/* A block as a process uses it: the descriptor, and the context its dimensions' value
 * callbacks get (NULL when they need none). */
typedef struct og_m_reg {
    const og_m_block_t *block;
    const void *ctx;
} og_m_reg_t;

/* The area: its layout (made once, before mapping) and the shared mapping. Start it zeroed. */
typedef struct og_metrics {
    og_m_reg_t blocks[OG_M_MAX_BLOCKS]; /* in exposition order */
    size_t offset[OG_M_MAX_BLOCKS];     /* of each block in a slot */
    int nblocks;
    size_t slot_size;
    unsigned char *area; /* shared mapping of nslots slots; NULL until mapped */
    int nslots;
} og_metrics_t;

/* Adds block r.block (with its context) to the layout, after those already there. False when
 * the area is mapped, OG_M_MAX_BLOCKS are there, or the block or one of its metric names
 * already is. */
bool og_metrics_register(og_metrics_t *m, og_m_reg_t r);

/* Maps the shared area for `workers` slots of the registered blocks (supervisor, before
 * forking). False on failure; the gateway then runs without metrics (/metrics answers 503). */
bool og_metrics_map(og_metrics_t *m, int workers);
void og_metrics_unmap(og_metrics_t *m);

/* Marks slot `slot` as used by the calling process and zeroes its gauges (a replaced worker
 * continues its slot's counters). */
void og_metrics_slot_start(const og_metrics_t *m, int slot, uint64_t pid);

/* Block b in slot `slot`: the struct its owner records into, or NULL when m is NULL or not
 * mapped, or b is not registered. Look it up once; record through the pointer. */
void *og_metrics_block(const og_metrics_t *m, int slot, const og_m_block_t *b);

/* Recording into a field of the caller's own slot: single writer, so a plain relaxed load and
 * store. */
static inline void og_metrics_gauge(uint64_t *g, uint64_t v)
{
    __atomic_store_n(g, v, __ATOMIC_RELAXED);
}
static inline void og_metrics_add(uint64_t *c, uint64_t v)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}
/* One value v (in the recorded unit) into histogram h of buckets bk. */
void og_metrics_observe(og_m_hist_t *h, const og_m_buckets_t *bk, uint64_t v);

/* The Prometheus text exposition (version 0.0.4) of the sum of all slots, block by block in
 * registration order. Returns a malloc'd NUL-terminated string (caller frees) and its length,
 * or NULL on OOM or when the area is not mapped. */
char *og_metrics_render(const og_metrics_t *m, size_t *len);

/* The registered metrics as a Markdown table (name, type, labels, help), from the same tables
 * the exposition is rendered from (the area need not be mapped): `omnigate metrics-markdown`,
 * spliced into docs/operations.md. */
void og_metrics_markdown(const og_metrics_t *m, FILE *out);

#endif
