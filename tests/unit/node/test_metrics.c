/* node/metrics.c: the Prometheus text exposition writer (escaping, the
 * cumulative buckets of a histogram with _sum and _count, the answer's
 * bound), the fixed-bucket histogram, and the [metrics] configuration
 * keys. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <tern_common.h>

#include "config.h"
#include "metrics.h"

static struct node_expo e;

static void setup(void)
{
    node_expo_init(&e, 1u << 20);
}

static void teardown(void)
{
    node_expo_free(&e);
}

TestSuite(metrics_expo, .init = setup, .fini = teardown);

Test(metrics_expo, plain_sample_and_family)
{
    node_expo_family(&e, "tern_x_total", "counter", "Things counted.");
    node_expo_u64(&e, "tern_x_total", NULL, 0, 42);
    cr_assert_eq(e.err, 0);
    cr_expect_str_eq(e.buf,
                     "# HELP tern_x_total Things counted.\n"
                     "# TYPE tern_x_total counter\n"
                     "tern_x_total 42\n");
}

Test(metrics_expo, label_values_are_escaped)
{
    struct node_label l[2] = {{"queue", "a\\b\"c\nd"}, {"group", "g"}};
    node_expo_u64(&e, "tern_lag", l, 2, 7);
    cr_assert_eq(e.err, 0);
    cr_expect_str_eq(e.buf,
                     "tern_lag{queue=\"a\\\\b\\\"c\\nd\",group=\"g\"} 7\n");
}

Test(metrics_expo, help_escapes_backslash_and_newline_not_quotes)
{
    node_expo_family(&e, "tern_h", "gauge", "a \"b\" c\\d\ne");
    cr_assert_eq(e.err, 0);
    cr_expect_str_eq(e.buf,
                     "# HELP tern_h a \"b\" c\\\\d\\ne\n"
                     "# TYPE tern_h gauge\n");
}

Test(metrics_expo, floats_and_special_values)
{
    node_expo_f64(&e, "tern_f", NULL, 0, 0.25);
    node_expo_f64(&e, "tern_f", NULL, 0, 1.0 / 0.0);
    cr_assert_eq(e.err, 0);
    cr_expect_str_eq(e.buf, "tern_f 0.25\ntern_f +Inf\n");
}

Test(metrics_expo, histogram_buckets_are_cumulative)
{
    static const double bounds[3] = {0.001, 0.01, 0.1};
    const uint64_t counts[4] = {2, 0, 3, 1};
    struct node_label l = {"op", "produce"};

    node_expo_histogram(&e, "tern_lat_seconds", &l, 1, bounds, counts, 3, 0.5);
    cr_assert_eq(e.err, 0);
    cr_expect_str_eq(e.buf,
                     "tern_lat_seconds_bucket{op=\"produce\",le=\"0.001\"} 2\n"
                     "tern_lat_seconds_bucket{op=\"produce\",le=\"0.01\"} 2\n"
                     "tern_lat_seconds_bucket{op=\"produce\",le=\"0.1\"} 5\n"
                     "tern_lat_seconds_bucket{op=\"produce\",le=\"+Inf\"} 6\n"
                     "tern_lat_seconds_sum{op=\"produce\"} 0.5\n"
                     "tern_lat_seconds_count{op=\"produce\"} 6\n");
}

Test(metrics_expo, histogram_without_labels)
{
    static const double bounds[1] = {1};
    const uint64_t counts[2] = {0, 0};
    node_expo_histogram(&e, "tern_h", NULL, 0, bounds, counts, 1, 0);
    cr_assert_eq(e.err, 0);
    cr_expect_str_eq(e.buf,
                     "tern_h_bucket{le=\"1\"} 0\n"
                     "tern_h_bucket{le=\"+Inf\"} 0\n"
                     "tern_h_sum 0\n"
                     "tern_h_count 0\n");
}

Test(metrics_expo, bounded_answer_stops_with_elimit)
{
    struct node_expo small;
    node_expo_init(&small, 64);
    for (unsigned i = 0; i < 10; i++) {
        node_expo_u64(&small, "tern_long_metric_name", NULL, 0, i);
    }
    cr_expect_eq(small.err, TERN_ELIMIT);
    cr_expect_leq(small.len, 63u);
    node_expo_free(&small);
}

Test(metrics_expo, out_of_memory_is_reported)
{
    struct node_expo x;
    node_expo_init(&x, 1u << 20);
    tern_alloc_fail_after(0);
    node_expo_u64(&x, "tern_a", NULL, 0, 1);
    tern_alloc_fail_after(-1);
    cr_expect_eq(x.err, -ENOMEM);
    node_expo_u64(&x, "tern_a", NULL, 0, 1);
    cr_expect_eq(x.len, 0u, "nothing written after an error");
    node_expo_free(&x);
}

Test(metrics_histo, observe_picks_the_first_bound_at_or_above)
{
    static struct node_histo h; /* zeroed */
    uint64_t counts[NODE_METRICS_BUCKETS + 1];

    node_histo_observe(&h, 100000);         /* exactly 0.0001 s: first bucket */
    node_histo_observe(&h, 100001);         /* just above: second */
    node_histo_observe(&h, 3000000);        /* 3 ms: le 0.005 (index 5) */
    node_histo_observe(&h, 20000000000ull); /* 20 s: above the last */
    cr_assert_eq(node_histo_read(&h, counts), 4u);
    cr_expect_eq(counts[0], 1u);
    cr_expect_eq(counts[1], 1u);
    cr_expect_eq(counts[5], 1u);
    cr_expect_eq(counts[NODE_METRICS_BUCKETS], 1u);
    cr_expect_eq(atomic_load(&h.sum_ns),
                 100000u + 100001u + 3000000u + 20000000000ull);
    cr_expect_eq(node_metrics_bounds[5], 0.005);
}

Test(metrics_histo, add_range_counts_by_the_range_top)
{
    uint64_t counts[NODE_METRICS_BUCKETS + 1] = {0};
    node_histo_add_range(counts, 99999, 3);
    node_histo_add_range(counts, 250000, 2);
    node_histo_add_range(counts, UINT64_MAX, 1);
    cr_expect_eq(counts[0], 3u);
    cr_expect_eq(counts[1], 2u);
    cr_expect_eq(counts[NODE_METRICS_BUCKETS], 1u);
}

Test(metrics_hooks, null_endpoint_counts_nothing)
{
    /* No [metrics] listen: the server's hooks get NULL and do nothing. */
    node_metrics_request(NULL, 1);
    node_metrics_error(NULL, 1, TERN_EINVAL);
    node_metrics_produced(NULL, 1, 1);
    node_metrics_produce_latency(NULL, 1);
    node_metrics_conn(NULL, true);
    node_metrics_close(NULL);
}

Test(metrics_config, keys_defaults_and_bounds)
{
    struct node_config c;
    char errmsg[TERN_ERRMSG_SIZE];

    node_config_init(&c);
    cr_expect_null(c.metrics_listen, "off by default");
    cr_expect_eq(c.metrics_max_queues, NODE_DEFAULT_METRICS_MAX_QUEUES);
    cr_expect_eq(c.metrics_max_connections, NODE_DEFAULT_METRICS_MAX_CONNS);
    cr_assert_eq(node_config_load_string(&c,
                                         "[metrics]\n"
                                         "listen = 127.0.0.1:9401\n"
                                         "token_file = /etc/tern/m.token\n"
                                         "max_queues = 10\n"
                                         "max_groups = 20\n"
                                         "max_connections = 4\n"
                                         "connection_timeout_s = 5\n"
                                         "ready_max_lag = 50\n",
                                         "t", errmsg),
                 0, "%s", errmsg);
    cr_expect_str_eq(c.metrics_listen, "127.0.0.1:9401");
    cr_expect_str_eq(c.metrics_token_file, "/etc/tern/m.token");
    cr_expect_eq(c.metrics_max_queues, 10u);
    cr_expect_eq(c.metrics_max_groups, 20u);
    cr_expect_eq(c.metrics_max_connections, 4u);
    cr_expect_eq(c.metrics_timeout_s, 5u);
    cr_expect_eq(c.metrics_ready_max_lag, 50u);
    cr_expect_eq(
        node_config_load_string(&c, "[metrics]\nlisten = :9401\n", "t", errmsg),
        TERN_EINVAL);
    cr_expect_eq(node_config_load_string(
                     &c, "[metrics]\nmax_connections = 5000\n", "t", errmsg),
                 TERN_EINVAL);
    cr_expect_neq(strstr(node_config_usage(), "[metrics]"), NULL);
    node_config_free(&c);
}
