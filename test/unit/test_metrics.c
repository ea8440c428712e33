/*
 * Unit tests of the metrics machinery (src/base/metrics.c): two blocks declared here as their
 * owners would, registered, recorded into two slots of a real shared mapping, and rendered.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/metrics.h"

/* ---- block a: a counter by color, a gauge folded by max ------------------------------------ */

typedef struct block_a {
    uint64_t hits[2];
    uint64_t depth;
} block_a_t;

static const char *const colors[] = {"red", "blue"};
static const og_m_dim_t color = {2, {"color", NULL}, colors, NULL};

static const og_m_metric_t a_metrics[] = {
    {"t_hits_total", OG_M_COUNTER, &color, NULL, offsetof(block_a_t, hits), OG_M_SUM, NULL, false,
     "Hits by color."},
    {"t_depth", OG_M_GAUGE, NULL, NULL, offsetof(block_a_t, depth), OG_M_MAX, NULL, false,
     "The deepest queue of any worker."},
};
static const og_m_block_t block_a = OG_M_BLOCK(block_a_t, a_metrics);

/* ---- block b: a latency histogram, a sparse counter labelled from the block's context ------- */

typedef struct block_b {
    og_m_hist_t latency_us;
    uint64_t by_name[4];
} block_b_t;

typedef struct names {
    int n;
    const char *const *v;
} names_t;

/* Index i of the context's names; indexes past them are no series. */
static bool name_label(const void *ctx, int i, const char *v[2])
{
    const names_t *names = ctx;
    if (i >= names->n)
        return false;
    v[0] = "x";
    v[1] = names->v[i];
    return true;
}

static const og_m_dim_t name = {4, {"kind", "name"}, NULL, name_label};

static const og_m_metric_t b_metrics[] = {
    {"t_latency_seconds", OG_M_HISTOGRAM, NULL, NULL, offsetof(block_b_t, latency_us), OG_M_SUM,
     &og_m_latency_s, false, "Latency."},
    {"t_named_total", OG_M_COUNTER, &name, NULL, offsetof(block_b_t, by_name), OG_M_SUM, NULL, true,
     "Events by name, the zero ones left out."},
};
static const og_m_block_t block_b = OG_M_BLOCK(block_b_t, b_metrics);

static const char *const b_names[] = {"one", "two", "three"};
static const names_t b_ctx = {3, b_names};

static void registered(og_metrics_t *m)
{
    memset(m, 0, sizeof(*m));
    assert_true(og_metrics_register(m, (og_m_reg_t){&block_a, NULL}));
    assert_true(og_metrics_register(m, (og_m_reg_t){&block_b, &b_ctx}));
}

/* Both blocks recorded in two slots: the counter summed per label, the gauge the larger of the
 * two, the histogram's buckets cumulative over both, the sparse counter without its zero series,
 * each block in registration order. */
static void test_two_blocks_two_slots_render(void **state)
{
    (void)state;
    og_metrics_t m;
    registered(&m);
    assert_true(og_metrics_map(&m, 2));
    for (int w = 0; w < 2; w++)
        og_metrics_slot_start(&m, w, (uint64_t)(100 + w));
    block_a_t *a0 = og_metrics_block(&m, 0, &block_a), *a1 = og_metrics_block(&m, 1, &block_a);
    block_b_t *b0 = og_metrics_block(&m, 0, &block_b), *b1 = og_metrics_block(&m, 1, &block_b);
    assert_non_null(a0);
    assert_non_null(b1);
    assert_ptr_not_equal(a0, a1);
    og_metrics_add(&a0->hits[0], 2);
    og_metrics_add(&a1->hits[0], 3);
    og_metrics_add(&a1->hits[1], 1);
    og_metrics_gauge(&a0->depth, 7);
    og_metrics_gauge(&a1->depth, 4);
    og_metrics_observe(&b0->latency_us, &og_m_latency_s, 300);      /* le 0.0005 */
    og_metrics_observe(&b1->latency_us, &og_m_latency_s, 2000);     /* le 0.0025 */
    og_metrics_observe(&b1->latency_us, &og_m_latency_s, 20000000); /* +Inf */
    og_metrics_add(&b0->by_name[2], 5);
    og_metrics_add(&b1->by_name[3], 9); /* not a series: the context names three */

    size_t len = 0;
    char *text = og_metrics_render(&m, &len);
    assert_non_null(text);
    const char *want = "# HELP t_hits_total Hits by color.\n"
                       "# TYPE t_hits_total counter\n"
                       "t_hits_total{color=\"red\"} 5\n"
                       "t_hits_total{color=\"blue\"} 1\n"
                       "# HELP t_depth The deepest queue of any worker.\n"
                       "# TYPE t_depth gauge\n"
                       "t_depth 7\n"
                       "# HELP t_latency_seconds Latency.\n"
                       "# TYPE t_latency_seconds histogram\n"
                       "t_latency_seconds_bucket{le=\"0.0005\"} 1\n"
                       "t_latency_seconds_bucket{le=\"0.001\"} 1\n"
                       "t_latency_seconds_bucket{le=\"0.0025\"} 2\n"
                       "t_latency_seconds_bucket{le=\"0.005\"} 2\n"
                       "t_latency_seconds_bucket{le=\"0.01\"} 2\n"
                       "t_latency_seconds_bucket{le=\"0.025\"} 2\n"
                       "t_latency_seconds_bucket{le=\"0.05\"} 2\n"
                       "t_latency_seconds_bucket{le=\"0.1\"} 2\n"
                       "t_latency_seconds_bucket{le=\"0.25\"} 2\n"
                       "t_latency_seconds_bucket{le=\"0.5\"} 2\n"
                       "t_latency_seconds_bucket{le=\"1\"} 2\n"
                       "t_latency_seconds_bucket{le=\"2.5\"} 2\n"
                       "t_latency_seconds_bucket{le=\"5\"} 2\n"
                       "t_latency_seconds_bucket{le=\"10\"} 2\n"
                       "t_latency_seconds_bucket{le=\"+Inf\"} 3\n"
                       "t_latency_seconds_sum 20.002300\n"
                       "t_latency_seconds_count 3\n"
                       "# HELP t_named_total Events by name, the zero ones left out.\n"
                       "# TYPE t_named_total counter\n"
                       "t_named_total{kind=\"x\",name=\"three\"} 5\n";
    assert_string_equal(text, want);
    assert_int_equal(len, strlen(want));
    free(text);
    og_metrics_unmap(&m);
}

/* A worker that starts again in its slot zeroes the slot's gauges and keeps its counters. */
static void test_slot_start_zeroes_gauges_only(void **state)
{
    (void)state;
    og_metrics_t m;
    registered(&m);
    assert_true(og_metrics_map(&m, 1));
    block_a_t *a = og_metrics_block(&m, 0, &block_a);
    og_metrics_add(&a->hits[1], 3);
    og_metrics_gauge(&a->depth, 7);
    og_metrics_slot_start(&m, 0, 42);
    assert_int_equal(a->hits[1], 3);
    assert_int_equal(a->depth, 0);
    og_metrics_unmap(&m);
}

/* Registration refuses a block twice, a metric name another block has, and any block once the
 * area is mapped; a block not registered has no place in a slot. */
static void test_register_refuses_clashes(void **state)
{
    (void)state;
    og_metrics_t m;
    registered(&m);
    assert_false(og_metrics_register(&m, (og_m_reg_t){&block_a, NULL}));
    static const og_m_metric_t again[] = {
        {"t_depth", OG_M_GAUGE, NULL, NULL, 0, OG_M_SUM, NULL, false, "The same name."}};
    static const og_m_block_t clash = OG_M_BLOCK(uint64_t, again);
    assert_false(og_metrics_register(&m, (og_m_reg_t){&clash, NULL}));
    assert_null(og_metrics_block(&m, 0, &block_a)); /* not mapped yet */
    assert_true(og_metrics_map(&m, 1));
    static const og_m_metric_t other[] = {
        {"t_other", OG_M_GAUGE, NULL, NULL, 0, OG_M_SUM, NULL, false, "Other."}};
    static const og_m_block_t late = OG_M_BLOCK(uint64_t, other);
    assert_false(og_metrics_register(&m, (og_m_reg_t){&late, NULL}));
    assert_null(og_metrics_block(&m, 0, &late));
    assert_null(og_metrics_block(&m, 1, &block_a)); /* one slot */
    og_metrics_unmap(&m);
}

/* The list of metrics: one row each, in exposition order, with every label name of both
 * dimensions; the area need not be mapped. */
static void test_markdown_lists_every_metric(void **state)
{
    (void)state;
    og_metrics_t m;
    registered(&m);
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    assert_non_null(f);
    og_metrics_markdown(&m, f);
    fclose(f);
    assert_string_equal(
        buf, "| Metric | Type | Labels | Meaning |\n"
             "|---|---|---|---|\n"
             "| `t_hits_total` | counter | `color` | Hits by color. |\n"
             "| `t_depth` | gauge | (none) | The deepest queue of any worker. |\n"
             "| `t_latency_seconds` | histogram | (none) | Latency. |\n"
             "| `t_named_total` | counter | `kind`, `name` | Events by name, the zero ones left out. |\n");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_blocks_two_slots_render),
        cmocka_unit_test(test_slot_start_zeroes_gauges_only),
        cmocka_unit_test(test_register_refuses_clashes),
        cmocka_unit_test(test_markdown_lists_every_metric),
    };
    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
