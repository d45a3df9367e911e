/* Unit tests of fetches delivered as runs (idx_fetch_opts.run_cb,
 * index/read.c): for every start offset and bound, the messages a run
 * fetch delivers (the runs' lists parsed back into messages, the others
 * one by one) are the messages, timestamps, properties and next offset of
 * the per-message fetch, on the env and through an idx_reader; runs span
 * whole PRODUCE lists and stop inside one at a bound; messages outside a
 * PRODUCE list (a delayed message fired by TIMER_FIRE) come one by one;
 * a tag filter turns runs off. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_runs, .init = th_dirs_init, .fini = th_dirs_fini);

#define RN_MAX 512

/* One delivered message, flattened. */
struct rn_msg
{
    uint64_t offset;
    uint64_t ts;
    char data[128];
    uint32_t props_len;
    uint8_t props[64];
};

struct rn_got
{
    struct rn_msg m[RN_MAX];
    size_t n;
    size_t runs;       /* run_cb calls */
    size_t run_msgs;   /* messages that came in runs */
    size_t singles;    /* cb calls */
    bool with_props;   /* keep properties (as the fetch asked) */
    uint32_t stop_at;  /* cb / run_cb return 1 once n reaches it (0: never) */
    bool parse_failed; /* a run's list did not parse into its count */
};

static void rn_add(struct rn_got *g,
                   uint64_t offset,
                   uint64_t ts,
                   const void *data,
                   uint32_t len,
                   const void *props,
                   uint32_t props_len)
{
    cr_assert_lt(g->n, RN_MAX);
    struct rn_msg *m = &g->m[g->n++];
    memset(m, 0, sizeof *m);
    m->offset = offset;
    m->ts = ts;
    cr_assert_lt(len, sizeof m->data);
    memcpy(m->data, data, len);
    if (g->with_props && props_len > 0) {
        cr_assert_leq(props_len, sizeof m->props);
        m->props_len = props_len;
        memcpy(m->props, props, props_len);
    }
}

static int rn_cb(void *arg, const struct idx_fetched *f)
{
    struct rn_got *g = arg;
    rn_add(g, f->offset, f->timestamp_ms, f->data, f->len, f->props,
           f->props_len);
    g->singles++;
    return g->stop_at != 0 && g->n >= g->stop_at;
}

static int rn_run_cb(void *arg, const struct idx_fetched_run *r)
{
    struct rn_got *g = arg;
    const uint8_t *p = r->list, *end = p + r->list_len;
    g->runs++;
    if (r->count == 0) {
        g->parse_failed = true;
    }
    for (uint32_t i = 0; i < r->count; i++) {
        uint32_t len, plen = 0;
        const uint8_t *props = NULL;
        if (end - p < 4 || (len = tern_get_u32(p)) > (size_t)(end - p - 4)) {
            g->parse_failed = true;
            return 1;
        }
        const uint8_t *data = p + 4;
        p += 4 + len;
        if (r->props) {
            if (end - p < 4 ||
                (plen = tern_get_u32(p)) > (size_t)(end - p - 4)) {
                g->parse_failed = true;
                return 1;
            }
            props = p + 4;
            p += 4 + plen;
        }
        rn_add(g, r->offset + i, r->timestamp_ms, data, len, props, plen);
        g->run_msgs++;
    }
    if (p != end) {
        g->parse_failed = true; /* bytes past the count */
    }
    return g->stop_at != 0 && g->n >= g->stop_at;
}

/* A properties block with key key and producer time pts (in pw). */
static void rn_props(struct tern_wbuf *pw, const char *key, uint64_t pts)
{
    struct idx_props p = {
        .producer_ts_ms = pts, .key = key, .key_len = (uint32_t)strlen(key)};
    tern_wbuf_init(pw);
    idx_props_encode(pw, &p);
    cr_assert_eq(pw->err, 0);
}

/* Queue q: offsets 0-9 two plain PRODUCE commands in one entry (6 + 4),
 * 10-14 a PRODUCE_PROPS (messages 11 and 13 without properties), 15-21
 * a plain produce of 7 in its own entry, then one delayed message fired
 * by TIMER_FIRE (22: not in a PRODUCE list), then 23-30 a produce of 8.
 * Returns how many messages. */
static uint64_t rn_fill(struct idx_env *e)
{
    struct tern_wbuf w, pw[5];
    struct idx_result r[4];
    struct idx_msg a[6], b[4];
    struct idx_pmsg pm[5];
    char ta[6][16], tb[4][16], tp[5][16];
    th_create(e, 1, "q");
    for (int i = 0; i < 6; i++) {
        (void)snprintf(ta[i], sizeof ta[i], "a%d", i);
        a[i] = (struct idx_msg){ta[i], (uint32_t)strlen(ta[i])};
    }
    for (int i = 0; i < 4; i++) {
        (void)snprintf(tb[i], sizeof tb[i], "bb%d", i);
        b[i] = (struct idx_msg){tb[i], (uint32_t)strlen(tb[i])};
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 2000);
    idx_cmd_produce(&w, "q", 0, 0, a, 6);
    idx_cmd_produce(&w, "q", 0, 0, b, 4);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(th_apply(e, 2, &w, r, 4), 2);
    for (int i = 0; i < 5; i++) {
        (void)snprintf(tp[i], sizeof tp[i], "p%d", i);
        pm[i] = (struct idx_pmsg){tp[i], (uint32_t)strlen(tp[i]), NULL, 0};
        if (i % 2 == 0) {
            rn_props(&pw[i], tp[i], 100 + (uint64_t)i);
            pm[i].props = pw[i].base;
            pm[i].props_len = (uint32_t)pw[i].len;
        }
    }
    idx_cmd_begin(&w, 3000);
    idx_cmd_produce_props(&w, "q", 0, 0, pm, 5);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(th_apply(e, 3, &w, r, 4), 1);
    for (int i = 0; i < 5; i += 2) {
        tern_wbuf_free(&pw[i]);
    }
    th_produce(e, 4, "q", 0, 1, 7);
    /* A delayed message, then its TIMER_FIRE. */
    struct idx_pmsg d = {"late", 4, NULL, 0};
    idx_cmd_begin(&w, 4000);
    idx_cmd_produce_delayed(&w, "q", 4500, 0, 0, &d, 1);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(th_apply(e, 5, &w, r, 4), 1);
    struct idx_timer_plan plan;
    cr_assert_eq(idx_flush(e), 0);
    idx_cmd_begin(&w, 5000);
    cr_assert_eq(idx_timer_plan(e, 5000, 16, 1 << 20, &w, &plan), 0, "%s",
                 idx_errmsg(e));
    cr_assert_eq(plan.keys, 1);
    cr_assert_eq(th_apply(e, 6, &w, r, 4), 1);
    tern_wbuf_free(&w);
    th_produce(e, 7, "q", 0, 2, 8);
    cr_assert_eq(idx_flush(e), 0);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_assert_eq(qi.next_offset, 31);
    return qi.next_offset;
}

static void rn_expect_same(const struct rn_got *a,
                           const struct rn_got *b,
                           const char *what)
{
    cr_assert_eq(a->n, b->n, "%s: %zu against %zu messages", what, a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const struct rn_msg *x = &a->m[i], *y = &b->m[i];
        cr_assert_eq(x->offset, y->offset, "%s: message %zu", what, i);
        cr_assert_eq(x->ts, y->ts, "%s: offset %llu", what,
                     (unsigned long long)x->offset);
        cr_assert_str_eq(x->data, y->data, "%s", what);
        cr_assert_eq(x->props_len, y->props_len, "%s: offset %llu", what,
                     (unsigned long long)x->offset);
        cr_assert_eq(memcmp(x->props, y->props, x->props_len), 0, "%s", what);
    }
}

Test(index_runs, every_start_and_bound_delivers_what_the_per_message_fetch_does)
{
    struct idx_env *e = th_open(th_dir_a, 1 << 20);
    uint64_t n = rn_fill(e);
    static const uint32_t maxm[] = {1, 2, 3, 5, 7, 12, 100};
    static const uint32_t maxb[] = {1, 9, 20, 64, 1 << 20};
    static struct rn_got ref, got;
    size_t total_runs = 0, total_singles = 0;
    for (uint64_t s = 0; s <= n; s++) {
        for (size_t i = 0; i < sizeof maxm / sizeof maxm[0]; i++) {
            for (size_t j = 0; j < sizeof maxb / sizeof maxb[0]; j++) {
                for (int props = 0; props < 2; props++) {
                    struct idx_fetch_opts o = {.max_msgs = maxm[i],
                                               .max_bytes = maxb[j],
                                               .with_props = props};
                    uint64_t nref = 0, ngot = 0;
                    char what[96];
                    memset(&ref, 0, sizeof ref);
                    memset(&got, 0, sizeof got);
                    ref.with_props = got.with_props = props;
                    cr_assert_eq(
                        idx_fetch_filtered(e, "q", s, &o, rn_cb, &ref, &nref),
                        0);
                    o.run_cb = rn_run_cb;
                    cr_assert_eq(
                        idx_fetch_filtered(e, "q", s, &o, rn_cb, &got, &ngot),
                        0);
                    (void)snprintf(what, sizeof what,
                                   "from %llu, max_msgs %u, max_bytes %u%s",
                                   (unsigned long long)s, maxm[i], maxb[j],
                                   props ? ", props" : "");
                    cr_assert(!got.parse_failed, "%s", what);
                    rn_expect_same(&ref, &got, what);
                    cr_assert_eq(ngot, nref, "%s", what);
                    cr_assert_eq(ref.runs, 0);
                    total_runs += got.runs;
                    total_singles += got.singles;
                }
            }
        }
    }
    cr_assert_gt(total_runs, 0);
    cr_assert_gt(total_singles, 0); /* offset 22 at least */
    idx_close(e);
}

Test(index_runs, whole_lists_are_one_run_each_and_the_fired_message_alone)
{
    struct idx_env *e = th_open(th_dir_a, 1 << 20);
    uint64_t n = rn_fill(e);
    static struct rn_got got;
    struct idx_fetch_opts o = {
        .max_msgs = 1000, .max_bytes = 1 << 20, .run_cb = rn_run_cb};
    uint64_t next = 0;
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, rn_cb, &got, &next), 0);
    cr_assert_eq(next, n);
    cr_assert_eq(got.n, n);
    /* 6 + 4 | 5 | 7 | (22 alone) | 8 */
    cr_assert_eq(got.runs, 5);
    cr_assert_eq(got.singles, 1);
    cr_assert_eq(got.run_msgs, n - 1);
    cr_assert_str_eq(got.m[22].data, "late");
    cr_assert_eq(got.m[10].ts, 3000);
    /* From inside a list: the run starts there. */
    memset(&got, 0, sizeof got);
    cr_assert_eq(idx_fetch_filtered(e, "q", 3, &o, rn_cb, &got, &next), 0);
    cr_assert_eq(got.runs, 5);
    cr_assert_str_eq(got.m[0].data, "a3");
    idx_close(e);
}

Test(index_runs, a_callback_stop_and_the_scan_bound_hold_inside_a_run)
{
    struct idx_env *e = th_open(th_dir_a, 1 << 20);
    (void)rn_fill(e);
    static struct rn_got ref, got;
    struct idx_fetch_opts o = {.max_msgs = 1000, .max_bytes = 1 << 20};
    uint64_t nref = 0, ngot = 0;
    /* A stop after the run that reaches 3 messages: the run's messages
     * all count (next offset past them). */
    got.stop_at = 3;
    o.run_cb = rn_run_cb;
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, rn_cb, &got, &ngot), 0);
    cr_assert_eq(got.runs, 1);
    cr_assert_eq(ngot, 6);
    /* max_scan: at most that many messages examined, runs or not. */
    for (uint32_t scan = 1; scan < 12; scan++) {
        memset(&ref, 0, sizeof ref);
        memset(&got, 0, sizeof got);
        o.max_scan = scan;
        o.run_cb = NULL;
        cr_assert_eq(idx_fetch_filtered(e, "q", 1, &o, rn_cb, &ref, &nref), 0);
        o.run_cb = rn_run_cb;
        cr_assert_eq(idx_fetch_filtered(e, "q", 1, &o, rn_cb, &got, &ngot), 0);
        rn_expect_same(&ref, &got, "max_scan");
        cr_assert_eq(ngot, nref, "max_scan %u", scan);
        cr_assert_eq(got.n, scan);
    }
    idx_close(e);
}

Test(index_runs, a_tag_filter_delivers_one_by_one)
{
    struct idx_env *e = th_open(th_dir_a, 1 << 20);
    (void)rn_fill(e);
    static struct rn_got got;
    struct idx_tag t = {"x", 1};
    struct idx_fetch_opts o = {.max_msgs = 1000,
                               .max_bytes = 1 << 20,
                               .tags = &t,
                               .n_tags = 1,
                               .run_cb = rn_run_cb};
    uint64_t next = 0;
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, rn_cb, &got, &next), 0);
    cr_assert_eq(got.runs, 0);
    cr_assert_eq(got.n, 0); /* no message has tag x */
    cr_assert_eq(next, 31);
    idx_close(e);
}

Test(index_runs, a_reader_on_a_snapshot_delivers_the_same_runs)
{
    struct idx_env *e = th_open(th_dir_a, 512); /* records span segments */
    uint64_t n = rn_fill(e);
    static struct rn_got ref, got;
    for (uint64_t s = 0; s < n; s += 3) {
        struct idx_fetch_opts o = {.max_msgs = 9,
                                   .max_bytes = 1 << 20,
                                   .with_props = true,
                                   .run_cb = rn_run_cb};
        struct idx_reader *r;
        uint64_t nref = 0, ngot = 0;
        memset(&ref, 0, sizeof ref);
        memset(&got, 0, sizeof got);
        ref.with_props = got.with_props = true;
        cr_assert_eq(idx_fetch_filtered(e, "q", s, &o, rn_cb, &ref, &nref), 0);
        cr_assert_eq(idx_reader_start(e, "q", s, &r), 0);
        cr_assert_eq(idx_reader_fetch(r, &o, rn_cb, &got, &ngot), 0);
        cr_assert_eq(idx_reader_end(r), 0);
        rn_expect_same(&ref, &got, "reader");
        cr_assert_eq(ngot, nref);
    }
    idx_close(e);
}
