/*
 * libtern's async produce: pipelined batches answered out of order, the
 * window (a queued batch's deadline starts when it enters it),
 * cancellation by tern_client_free, and calls that fail never firing their
 * callback.
 */
#include <time.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

/* ---- Async pipelining ---- */

static enum fake_action reorder_hook(struct fake_server *fs,
                                     int conn,
                                     const struct proto_header *h,
                                     const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_PRODUCE) {
        return FAKE_DEFAULT;
    }
    tern_wbuf_init(&w);
    fake_model_answer(fs, h, r, &w);
    fake_defer(fs, conn, &w);
    tern_wbuf_free(&w);
    if (fs->n_deferred == 4) {
        fake_flush_deferred(fs, 1);
    }
    return FAKE_HANDLED;
}

Test(client, async_pipelined_out_of_order_answers)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[8];
    char payload[8][8];
    cr_assert_eq(fake_start(&fs, reorder_hook), 0);
    c = client_for(fs.addr, 5000, 4);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 8; i++) {
        struct tern_msg m[2];
        (void)snprintf(payload[i], sizeof payload[i], "b%d", i);
        m[0].data = payload[i];
        m[0].len = strlen(payload[i]);
        m[1] = m[0];
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", m, 2, on_done, &ctx[i]), 0);
    }
    memset(payload, 0, sizeof payload); /* messages were copied */
    cr_expect_eq(tern_client_pending(c), 8);
    drain(c);
    cr_assert_eq(log.n, 8);
    for (int i = 0; i < 8; i++) {
        cr_expect_eq(log.status[i], 0);
        cr_expect_eq(log.base[i], (uint64_t)i * 2, "batch %d", i);
        cr_expect_eq(log.count[i], 2);
    }
    /* Answers came back newest first within each window of 4. */
    cr_expect_eq(log.order[0], 3);
    cr_expect_eq(log.order[3], 0);
    for (uint64_t k = 0; k < 16; k++) {
        char want[8];
        char *got = fake_msg(&fs, k);
        (void)snprintf(want, sizeof want, "b%d", (int)(k / 2));
        cr_expect_str_eq(got, want);
        free(got);
    }
    for (int i = 0; i < fake_n_records(&fs); i++) {
        cr_expect_eq(fake_record_at(&fs, i).seq, (uint64_t)i + 1);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- The deadline of a queued async batch starts in the window ---- */

static enum fake_action slow_hook(struct fake_server *fs,
                                  int conn,
                                  const struct proto_header *h,
                                  const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE) {
        /* Simulated service time of a slow leader. */
        struct timespec ts = {0, 20L * 1000 * 1000};
        (void)nanosleep(&ts, NULL);
    }
    return FAKE_DEFAULT;
}

Test(client, queued_batches_do_not_time_out_behind_the_window)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[30];
    struct tern_msg m = {"w", 1};
    int64_t t0;
    cr_assert_eq(fake_start(&fs, slow_hook), 0);
    c = client_for(fs.addr, 300, 1);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    t0 = now_ms();
    for (int i = 0; i < 30; i++) {
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_expect_gt(now_ms() - t0, 300, "the run outlasts one request timeout");
    cr_assert_eq(log.n, 30);
    for (int i = 0; i < 30; i++) {
        cr_expect_eq(log.status[i], 0, "batch %d: %s", i,
                     tern_strerror(log.status[i]));
        cr_expect_eq(log.base[i], (uint64_t)i);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, free_cancels_pending_async)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx = {&log, 0};
    struct tern_msg m = {"x", 1};
    cr_assert_eq(fake_start(&fs, silent_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx), 0);
    cr_expect_eq(tern_client_poll(c, 50), 0);
    tern_client_free(c);
    cr_expect_eq(log.n, 1);
    cr_expect_eq(log.status[0], TERN_ECANCELED);
    fake_stop(&fs);
}

Test(client, async_errors_never_fire_callbacks)
{
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx = {&log, 0};
    struct tern_msg m = {"x", 1};
    memset(&log, 0, sizeof log);
    cr_assert_eq(tern_client_new("127.0.0.1:1", NULL, &c), 0);
    cr_expect_eq(tern_produce_async(c, "bad/name", &m, 1, on_done, &ctx),
                 TERN_EBADNAME);
    cr_expect_eq(tern_produce_async(c, "q", &m, 0, on_done, &ctx), TERN_EINVAL);
    cr_expect_eq(tern_client_pending(c), 0);
    tern_client_free(c);
    cr_expect_eq(log.n, 0);
}

/* ---- Calls behind a full window join the waiting batch ---- */

/* Calls per test below: 2 that fill a window of 2, then 10 with 1, 2 or
 * 3 messages each ("c<call>.<k>"). */
#define MERGE_FIRST 2
#define MERGE_CALLS 12

static size_t merge_n(int i)
{
    return i < MERGE_FIRST ? 1 : (size_t)(i % 3) + 1;
}

struct merge_ctx
{
    struct done_ctx d; /* first: on_done's argument */
    struct tern_client *c;
    char errmsg[TERN_ERRMSG_SIZE];
};

static void on_merge_done(void *arg, int status, uint64_t base, size_t count)
{
    struct merge_ctx *m = arg;
    on_done(&m->d, status, base, count);
    if (status != 0) {
        (void)snprintf(m->errmsg, sizeof m->errmsg, "%s",
                       tern_client_errmsg(m->c));
    }
}

/* The messages of call i (payload buffers in bufs[i]). */
static void merge_msgs(int i, char bufs[][3][32], struct tern_msg *m)
{
    for (size_t k = 0; k < merge_n(i); k++) {
        (void)snprintf(bufs[i][k], sizeof bufs[i][k], "c%d.%d", i, (int)k);
        m[k].data = bufs[i][k];
        m[k].len = strlen(bufs[i][k]);
    }
}

/* Two calls fill the window (sent: the slow hook keeps their answers 20
 * ms away), then ten more while it is full. */
static void merge_calls(struct tern_client *c,
                        struct done_log *log,
                        struct merge_ctx *ctx,
                        char bufs[][3][32])
{
    memset(log, 0, sizeof *log);
    for (int i = 0; i < MERGE_CALLS; i++) {
        struct tern_msg m[3];
        merge_msgs(i, bufs, m);
        ctx[i].d.log = log;
        ctx[i].d.idx = i;
        ctx[i].c = c;
        ctx[i].errmsg[0] = '\0';
        cr_assert_eq(
            tern_produce_async(c, "q", m, merge_n(i), on_merge_done, &ctx[i]),
            0);
        if (i + 1 == MERGE_FIRST) {
            cr_assert_geq(tern_client_poll(c, 0), 0); /* both on the wire */
        }
    }
    cr_expect_eq(tern_client_pending(c), MERGE_CALLS, "pending counts calls");
}

/* A fake server with hook, a client with a window of MERGE_FIRST and
 * request timeout timeout_ms (returned), queue "q", and merge_calls. */
static struct tern_client *merge_start(struct fake_server *fs,
                                       fake_hook_cb hook,
                                       int timeout_ms,
                                       struct done_log *log,
                                       struct merge_ctx *ctx,
                                       char bufs[][3][32])
{
    struct tern_client *c;
    cr_assert_eq(fake_start(fs, hook), 0);
    c = client_for(fs->addr, timeout_ms, MERGE_FIRST);
    create_queue(c, "q");
    merge_calls(c, log, ctx, bufs);
    return c;
}

Test(client, async_calls_behind_a_full_window_merge)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct merge_ctx ctx[MERGE_CALLS];
    char bufs[MERGE_CALLS][3][32];
    uint64_t off = 0;
    c = merge_start(&fs, slow_hook, 5000, &log, ctx, bufs);
    memset(bufs, 0, sizeof bufs); /* merged messages were copied too */
    drain(c);
    cr_assert_eq(log.n, MERGE_CALLS);
    for (int i = 0; i < MERGE_CALLS; i++) {
        cr_expect_eq(log.status[i], 0, "call %d: %s", i,
                     tern_strerror(log.status[i]));
        cr_expect_eq(log.base[i], off, "call %d: its own first offset", i);
        cr_expect_eq(log.count[i], merge_n(i), "call %d: its own count", i);
        cr_expect_eq(log.order[i], i, "callbacks in call order");
        off += merge_n(i);
    }
    cr_assert_eq(fake_n_records(&fs), MERGE_FIRST + 1,
                 "two batches, then the ten calls as one");
    for (int i = 0; i < fake_n_records(&fs); i++) {
        cr_expect_eq(fake_record_at(&fs, i).seq, (uint64_t)i + 1);
    }
    cr_expect_eq(fake_record_at(&fs, MERGE_FIRST).n_msgs, off - MERGE_FIRST);
    off = 0;
    for (int i = 0; i < MERGE_CALLS; i++) {
        for (size_t k = 0; k < merge_n(i); k++, off++) {
            char want[32];
            char *got = fake_msg(&fs, off);
            (void)snprintf(want, sizeof want, "c%d.%d", i, (int)k);
            cr_expect_str_eq(got, want, "message %llu",
                             (unsigned long long)off);
            free(got);
        }
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* produce_merge_bytes: a cap on the merged messages' bytes (4 per message
 * plus payload); negative turns merging off. */
static int merge_records(int merge_bytes)
{
    struct fake_server fs;
    struct tern_client_options o;
    struct tern_client *c;
    struct done_log log;
    struct merge_ctx ctx[MERGE_CALLS];
    char bufs[MERGE_CALLS][3][32];
    int n;
    cr_assert_eq(fake_start(&fs, slow_hook), 0);
    tern_client_options_init(&o);
    o.retry_backoff_ms = 5;
    o.max_in_flight = MERGE_FIRST;
    o.produce_merge_bytes = merge_bytes;
    cr_assert_eq(tern_client_new(fs.addr, &o, &c), 0);
    create_queue(c, "q");
    merge_calls(c, &log, ctx, bufs);
    drain(c);
    cr_assert_eq(log.n, MERGE_CALLS);
    for (int i = 0; i < MERGE_CALLS; i++) {
        cr_expect_eq(log.status[i], 0);
        cr_expect_eq(log.count[i], merge_n(i));
    }
    n = fake_n_records(&fs);
    tern_client_free(c);
    fake_stop(&fs);
    return n;
}

Test(client, async_merge_bytes_bound_the_batch)
{
    /* Each message "cI.K" is 4 or 5 bytes, 8-9 with its length: a cap of
     * 40 holds at most 4 messages, so the ten calls (20 messages, no call
     * above 3) need at least 5 batches, at most 10. */
    int n = merge_records(40);
    cr_expect_geq(n, MERGE_FIRST + 5, "%d batches", n);
    cr_expect_lt(n, MERGE_FIRST + 10, "%d batches: some merged", n);
    cr_expect_eq(merge_records(-1), MERGE_CALLS, "off: a batch per call");
}

/* The merged batch (the third PRODUCE) fails for good. */
static enum fake_action fail_third_produce_hook(struct fake_server *fs,
                                                int conn,
                                                const struct proto_header *h,
                                                const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE && fs->counter++ == MERGE_FIRST) {
        fake_send_error(fs, conn, h, TERN_EQUOTA, NULL);
        return FAKE_HANDLED;
    }
    return slow_hook(fs, conn, h, r);
}

Test(client, merged_batch_failure_fails_every_call)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct merge_ctx ctx[MERGE_CALLS];
    char bufs[MERGE_CALLS][3][32];
    c = merge_start(&fs, fail_third_produce_hook, 5000, &log, ctx, bufs);
    drain(c);
    cr_assert_eq(log.n, MERGE_CALLS);
    for (int i = 0; i < MERGE_CALLS; i++) {
        cr_expect_eq(log.status[i], i < MERGE_FIRST ? 0 : TERN_EQUOTA,
                     "call %d", i);
        if (i >= MERGE_FIRST) {
            char want[64];
            (void)snprintf(want, sizeof want, "this is call %d)",
                           i - MERGE_FIRST + 1);
            cr_expect(
                strstr(ctx[i].errmsg, "a batch of 10 merged calls") != NULL &&
                    strstr(ctx[i].errmsg, want) != NULL,
                "call %d: \"%s\"", i, ctx[i].errmsg);
        }
    }
    cr_expect_eq(tern_client_pending(c), 0);
    tern_client_free(c);
    fake_stop(&fs);
}

/* The merged batch is never answered until the test says so. */
static int answer_merged;

static enum fake_action hold_third_produce_hook(struct fake_server *fs,
                                                int conn,
                                                const struct proto_header *h,
                                                const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE && r->seq > MERGE_FIRST &&
        !__atomic_load_n(&answer_merged, __ATOMIC_ACQUIRE)) {
        return FAKE_HANDLED; /* no answer */
    }
    return slow_hook(fs, conn, h, r);
}

Test(client, merged_batch_timeout_resends_whole)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct merge_ctx ctx[MERGE_CALLS];
    char bufs[MERGE_CALLS][3][32];
    struct tern_msg all[3 * MERGE_CALLS], one[3];
    size_t n_all = 0;
    uint64_t base = 0;
    __atomic_store_n(&answer_merged, 0, __ATOMIC_RELEASE);
    c = merge_start(&fs, hold_third_produce_hook, 400, &log, ctx, bufs);
    drain(c);
    cr_assert_eq(log.n, MERGE_CALLS);
    for (int i = MERGE_FIRST; i < MERGE_CALLS; i++) {
        cr_expect_eq(log.status[i], TERN_ETIMEDOUT, "call %d", i);
        merge_msgs(i, bufs, all + n_all);
        n_all += merge_n(i);
    }
    merge_msgs(MERGE_FIRST, bufs, one);
    cr_expect_eq(tern_produce_resend(c, "q", one, merge_n(MERGE_FIRST), &base),
                 TERN_EINVAL, "one call's messages are not the batch");
    __atomic_store_n(&answer_merged, 1, __ATOMIC_RELEASE);
    cr_assert_eq(tern_produce_resend(c, "q", all, n_all, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, MERGE_FIRST, "appended after the two first batches");
    cr_expect_eq(fake_n_msgs(&fs), MERGE_FIRST + n_all);
    tern_client_free(c);
    fake_stop(&fs);
}

/* tern_client_free with a merged batch on the wire: every call is
 * cancelled once, in call order. */
Test(client, merged_free_cancels_each_call_once)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct merge_ctx ctx[MERGE_CALLS];
    char bufs[MERGE_CALLS][3][32];
    c = merge_start(&fs, silent_hook, 5000, &log, ctx, bufs);
    cr_expect_eq(tern_client_poll(c, 30), 0);
    tern_client_free(c);
    cr_expect_eq(log.n, MERGE_CALLS);
    for (int i = 0; i < MERGE_CALLS; i++) {
        cr_expect_eq(log.status[i], TERN_ECANCELED, "call %d", i);
        cr_expect_eq(log.order[i], i);
    }
    fake_stop(&fs);
}

/* The first PRODUCE fails for good (TERN_ETOOBIG), 20 ms after it came
 * like every PRODUCE (slow_hook), so no answer beats merge_calls. */
static enum fake_action fail_first_slow_hook(struct fake_server *fs,
                                             int conn,
                                             const struct proto_header *h,
                                             const struct proto_request *r)
{
    (void)slow_hook(fs, conn, h, r);
    return fail_first_produce_hook(fs, conn, h, r);
}

/* The first batch fails for good: the second gets TERN_ESEQUENCE and
 * the queue is renumbered, the merged batch with it. */
Test(client, merged_batch_renumbered_after_a_failed_batch)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct merge_ctx ctx[MERGE_CALLS];
    char bufs[MERGE_CALLS][3][32];
    uint64_t off = 0;
    c = merge_start(&fs, fail_first_slow_hook, 5000, &log, ctx, bufs);
    drain(c);
    cr_assert_eq(log.n, MERGE_CALLS);
    cr_expect_eq(log.status[0], TERN_ETOOBIG);
    for (int i = 1; i < MERGE_CALLS; i++) {
        cr_expect_eq(log.status[i], 0, "call %d: %s", i,
                     tern_strerror(log.status[i]));
        cr_expect_eq(log.base[i], off, "call %d", i);
        cr_expect_eq(log.count[i], merge_n(i), "call %d", i);
        off += merge_n(i);
    }
    for (uint64_t k = 0; k < off; k++) {
        free(fake_msg(&fs, k));
    }
    cr_expect_eq(fake_n_msgs(&fs), off);
    tern_client_free(c);
    fake_stop(&fs);
}
