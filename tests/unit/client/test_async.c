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
