/*
 * Metrics in shared memory, summed at scrape. See include/base/omnigate/metrics.h.
 *
 * A slot is a header (the pid of the worker using it) and then each registered block at the
 * offset the layout gave it. The exposition and the list in docs/operations.md are both walks
 * of the registered blocks' tables, so neither can name a metric the other does not.
 */
#include "omnigate/metrics.h"

#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SLOT_ALIGN 64 /* a slot starts on a cache line of its own: workers never share one */

const og_m_buckets_t og_m_latency_s = {
    {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, 1e6};

typedef struct slot_head {
    uint64_t pid;
} slot_head_t;

static size_t align_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

static bool registered_name(const og_metrics_t *m, const char *name)
{
    for (int b = 0; b < m->nblocks; b++)
        for (size_t i = 0; i < m->blocks[b].block->nmetrics; i++)
            if (strcmp(m->blocks[b].block->metrics[i].name, name) == 0)
                return true;
    return false;
}

bool og_metrics_register(og_metrics_t *m, og_m_reg_t r)
{
    if (m->area != NULL || m->nblocks == OG_M_MAX_BLOCKS || r.block == NULL)
        return false;
    for (int b = 0; b < m->nblocks; b++)
        if (m->blocks[b].block == r.block)
            return false;
    for (size_t i = 0; i < r.block->nmetrics; i++)
        if (registered_name(m, r.block->metrics[i].name))
            return false;
    size_t end = m->nblocks > 0 ? m->offset[m->nblocks - 1] + m->blocks[m->nblocks - 1].block->size
                                : sizeof(slot_head_t);
    m->offset[m->nblocks] = align_up(end, alignof(max_align_t));
    m->blocks[m->nblocks++] = r;
    m->slot_size = align_up(m->offset[m->nblocks - 1] + r.block->size, SLOT_ALIGN);
    return true;
}

bool og_metrics_map(og_metrics_t *m, int workers)
{
    m->area = NULL;
    m->nslots = 0;
    if (workers < 1 || workers > OG_M_MAX_WORKERS)
        return false;
    if (m->slot_size == 0)
        m->slot_size = align_up(sizeof(slot_head_t), SLOT_ALIGN);
    void *p =
        mmap(NULL, m->slot_size * (size_t)workers, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    m->area = p;
    m->nslots = workers;
    return true;
}

void og_metrics_unmap(og_metrics_t *m)
{
    if (m->area != NULL)
        munmap(m->area, m->slot_size * (size_t)m->nslots);
    m->area = NULL;
    m->nslots = 0;
}

static unsigned char *slot_at(const og_metrics_t *m, int slot)
{
    return m->area + m->slot_size * (size_t)slot;
}

void *og_metrics_block(const og_metrics_t *m, int slot, const og_m_block_t *b)
{
    if (m == NULL || m->area == NULL || slot < 0 || slot >= m->nslots)
        return NULL;
    for (int i = 0; i < m->nblocks; i++)
        if (m->blocks[i].block == b)
            return slot_at(m, slot) + m->offset[i];
    return NULL;
}

static int dim_n(const og_m_dim_t *d)
{
    return d != NULL ? d->n : 1;
}

void og_metrics_slot_start(const og_metrics_t *m, int slot, uint64_t pid)
{
    if (m == NULL || m->area == NULL || slot < 0 || slot >= m->nslots)
        return;
    og_metrics_gauge(&((slot_head_t *)slot_at(m, slot))->pid, pid);
    for (int b = 0; b < m->nblocks; b++) {
        const og_m_block_t *blk = m->blocks[b].block;
        unsigned char *base = slot_at(m, slot) + m->offset[b];
        for (size_t i = 0; i < blk->nmetrics; i++) {
            const og_m_metric_t *d = &blk->metrics[i];
            if (d->type != OG_M_GAUGE || d->fold == OG_M_SLOTS)
                continue;
            uint64_t *g = (uint64_t *)(base + d->offset);
            for (int k = 0; k < dim_n(d->rows) * dim_n(d->cols); k++)
                og_metrics_gauge(&g[k], 0);
        }
    }
}

static inline uint64_t get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

void og_metrics_observe(og_m_hist_t *h, const og_m_buckets_t *bk, uint64_t v)
{
    int b = 0;
    double x = (double)v / bk->divisor;
    while (b < OG_M_BUCKETS - 1 && x > bk->le[b])
        b++;
    og_metrics_add(&h->bucket[b], 1);
    og_metrics_add(&h->sum, v);
    og_metrics_add(&h->count, 1);
}

/* ---- rendering ----------------------------------------------------------------------------- */

static const char *const type_names[] = {
    [OG_M_COUNTER] = "counter", [OG_M_GAUGE] = "gauge", [OG_M_HISTOGRAM] = "histogram"};

typedef struct out {
    char *buf;
    size_t len, cap;
    bool oom;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    if (o->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n;
        char *b = realloc(o->buf, cap);
        if (b == NULL) {
            o->oom = true;
            return;
        }
        o->buf = b;
        o->cap = cap;
    }
}

/* The name of a sample line: `name_suffix{labels}`, without braces when there are no labels. */
static void sample_name(out_t *o, const char *name, const char *suffix, const char *labels)
{
    if (labels[0] != '\0')
        put(o, "%s%s{%s}", name, suffix, labels);
    else
        put(o, "%s%s", name, suffix);
}

/* One histogram series: cumulative buckets, _sum (scaled to the base unit), _count. */
static void hist(out_t *o, const char *name, const char *labels, const og_m_hist_t *h,
                 const og_m_buckets_t *bk)
{
    uint64_t cum = 0;
    char with_le[400];
    for (int b = 0; b < OG_M_BUCKETS; b++) {
        cum += h->bucket[b];
        const char *sep = labels[0] ? "," : "";
        if (b < OG_M_BUCKETS - 1)
            snprintf(with_le, sizeof(with_le), "%s%sle=\"%g\"", labels, sep, bk->le[b]);
        else
            snprintf(with_le, sizeof(with_le), "%s%sle=\"+Inf\"", labels, sep);
        sample_name(o, name, "_bucket", with_le);
        put(o, " %llu\n", (unsigned long long)cum);
    }
    sample_name(o, name, "_sum", labels);
    put(o, " %.6f\n", (double)h->sum / bk->divisor);
    sample_name(o, name, "_count", labels);
    put(o, " %llu\n", (unsigned long long)h->count);
}

/* The labels of index i of dimension d (empty for none), cut to fit buf; false when that index
 * is no series (a route the app does not have). */
static bool dim_labels(const og_m_dim_t *d, const void *ctx, int i, char *buf, size_t n)
{
    buf[0] = '\0';
    if (d == NULL)
        return true;
    const char *v[2] = {NULL, NULL};
    if (d->values != NULL)
        v[0] = d->values[i];
    else if (!d->value(ctx, i, v))
        return false;
    if (d->labels[1] != NULL)
        snprintf(buf, n, "%s=\"%s\",%s=\"%s\"", d->labels[0], v[0], d->labels[1], v[1]);
    else
        snprintf(buf, n, "%s=\"%s\"", d->labels[0], v[0]);
    return true;
}

/* The metric's field in slot w (block at `offset` in the slot). */
static const void *field(const og_metrics_t *m, int w, size_t offset, const og_m_metric_t *d)
{
    return slot_at(m, w) + offset + d->offset;
}

/* Series i (row * cols + col) of metric d, folded over the slots. */
static uint64_t fold(const og_m_metric_t *d, const og_metrics_t *m, size_t offset, int i)
{
    if (d->fold == OG_M_SLOTS)
        return (uint64_t)m->nslots;
    uint64_t v = 0;
    for (int w = 0; w < m->nslots; w++) {
        uint64_t x = get((const uint64_t *)field(m, w, offset, d) + i);
        v = d->fold == OG_M_MAX ? (x > v ? x : v) : v + x;
    }
    return d->fold == OG_M_ANY ? v > 0 : v;
}

static void fold_hist(const og_m_metric_t *d, const og_metrics_t *m, size_t offset, int i, og_m_hist_t *h)
{
    for (int w = 0; w < m->nslots; w++) {
        const og_m_hist_t *src = (const og_m_hist_t *)field(m, w, offset, d) + i;
        for (int b = 0; b < OG_M_BUCKETS; b++)
            h->bucket[b] += get(&src->bucket[b]);
        h->sum += get(&src->sum);
        h->count += get(&src->count);
    }
}

static void series(out_t *o, const og_m_metric_t *d, const og_metrics_t *m, size_t offset, int i,
                   const char *labels)
{
    if (d->type == OG_M_HISTOGRAM) {
        og_m_hist_t h = {0};
        fold_hist(d, m, offset, i, &h);
        if (!d->sparse || h.count > 0)
            hist(o, d->name, labels, &h, d->buckets);
        return;
    }
    uint64_t v = fold(d, m, offset, i);
    if (d->sparse && v == 0)
        return;
    sample_name(o, d->name, "", labels);
    if (d->buckets != NULL)
        put(o, " %.6f\n", (double)v / d->buckets->divisor);
    else
        put(o, " %llu\n", (unsigned long long)v);
}

static void render_metric(out_t *o, const og_m_metric_t *d, const og_metrics_t *m, size_t offset,
                          const void *ctx)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name, type_names[d->type]);
    int cols = dim_n(d->cols);
    /* The row's labels are cut at 255 bytes (a route pattern that long is no pattern). */
    char row[256], col[64], labels[sizeof(row) + sizeof(col) + 1];
    for (int r = 0; r < dim_n(d->rows); r++) {
        if (!dim_labels(d->rows, ctx, r, row, sizeof(row)))
            continue;
        for (int c = 0; c < cols; c++) {
            if (!dim_labels(d->cols, ctx, c, col, sizeof(col)))
                continue;
            snprintf(labels, sizeof(labels), "%s%s%s", row, row[0] && col[0] ? "," : "", col);
            series(o, d, m, offset, r * cols + c, labels);
        }
    }
}

char *og_metrics_render(const og_metrics_t *m, size_t *len)
{
    if (m == NULL || m->area == NULL)
        return NULL;
    out_t o = {.cap = 16384};
    o.buf = malloc(o.cap);
    if (o.buf == NULL)
        return NULL;
    o.buf[0] = '\0';
    for (int b = 0; b < m->nblocks; b++)
        for (size_t i = 0; i < m->blocks[b].block->nmetrics; i++)
            render_metric(&o, &m->blocks[b].block->metrics[i], m, m->offset[b], m->blocks[b].ctx);
    if (o.oom) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}

void og_metrics_markdown(const og_metrics_t *m, FILE *out)
{
    fprintf(out, "| Metric | Type | Labels | Meaning |\n");
    fprintf(out, "|---|---|---|---|\n");
    for (int b = 0; b < m->nblocks; b++) {
        for (size_t i = 0; i < m->blocks[b].block->nmetrics; i++) {
            const og_m_metric_t *d = &m->blocks[b].block->metrics[i];
            fprintf(out, "| `%s` | %s | ", d->name, type_names[d->type]);
            const char *sep = "";
            const og_m_dim_t *both[2] = {d->rows, d->cols};
            for (int k = 0; k < 2; k++)
                for (int l = 0; both[k] != NULL && l < 2 && both[k]->labels[l] != NULL; l++) {
                    fprintf(out, "%s`%s`", sep, both[k]->labels[l]);
                    sep = ", ";
                }
            fprintf(out, "%s | %s |\n", sep[0] ? "" : "(none)", d->help);
        }
    }
}
