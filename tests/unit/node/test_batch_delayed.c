/* Delayed messages through the batcher (node/batch.c): PRODUCE_DELAYED's
 * due time made absolute by the entry's timestamp, and the leader's
 * TIMER_FIRE (node_batcher_add_timer_fire) planned by idx_timer_plan,
 * applied to a real index: nothing fires before the due time, the message
 * is in its queue after, an empty plan proposes nothing and a failed plan
 * queues nothing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#include "batch.h"
#include "batch_fixture.h"
#include "idx.h"

#define T0 BATCH_FIXTURE_T0

struct dl_answer
{
    void *owner;
    uint8_t op;
    int status;
    struct idx_result result;
    uint64_t due_ms;
};

static struct
{
    struct batch_fixture f;
    struct dl_answer answers[64];
    unsigned n_answers;
    int plan_rv; /* plan_cb: fail with this instead of planning */
} t;

static void dl_respond(struct node_wreq *w)
{
    cr_assert_lt(t.n_answers, TERN_ARRAY_SIZE(t.answers));
    t.answers[t.n_answers++] =
        (struct dl_answer){w->owner, w->op, w->status, w->result, w->due_ms};
}

static void setup(void)
{
    memset(&t, 0, sizeof(t));
    batch_fixture_setup(&t.f, "delayed", dl_respond);
}

static void teardown(void)
{
    batch_fixture_teardown(&t.f);
}

TestSuite(batch_delayed, .init = setup, .fini = teardown);

static void run_entries(void)
{
    batch_fixture_run(&t.f);
}

static struct proto_request req(uint8_t op, const char *queue)
{
    struct proto_request r;
    memset(&r, 0, sizeof(r));
    r.op = op;
    r.queue = queue;
    r.queue_len = (uint16_t)strlen(queue);
    return r;
}

/* A PRODUCE_DELAYED of one message (payload, a blob in a static buffer)
 * with its when field. */
static struct proto_request delayed(const char *queue,
                                    const char *payload,
                                    uint64_t when)
{
    static uint8_t blobs[4][64];
    static unsigned next;
    uint8_t *b = blobs[next++ % 4];
    size_t n = strlen(payload);
    struct proto_request r = req(PROTO_OP_PRODUCE_DELAYED, queue);
    cr_assert_lt(n + 4, sizeof(blobs[0]));
    tern_put_u32(b, (uint32_t)n);
    /* NOLINTNEXTLINE(bugprone-not-null-terminated-result) */
    memcpy(b + 4, payload, n);
    r.n_msgs = 1;
    r.msgs = b;
    r.msgs_len = 4 + n;
    r.time_ms = when;
    return r;
}

static int plan_cb(void *arg, struct tern_wbuf *w, uint64_t now, uint32_t *keys)
{
    struct idx_timer_plan p;
    int rv;
    (void)arg;
    if (t.plan_rv != 0) {
        return t.plan_rv;
    }
    rv = idx_timer_plan(t.f.e, now, 256, IDX_TIMER_FIRE_BYTES_MAX, w, &p);
    *keys = p.keys;
    return rv;
}

static int count_cb(void *arg, const struct idx_fetched *m)
{
    (void)m;
    (*(unsigned *)arg)++;
    return 0;
}

static unsigned queue_len(const char *queue)
{
    unsigned n = 0;
    uint64_t next = 0;
    cr_assert_eq(idx_fetch(t.f.e, queue, 0, 100, 1u << 20, count_cb, &n, &next),
                 0);
    return n;
}

Test(batch_delayed, due_time_is_absolute_by_the_entry_clock)
{
    struct proto_request c = req(PROTO_OP_QUEUE_CREATE, "dq");
    struct proto_request d1 = delayed("dq", "in five", 5000);
    struct proto_request d2 = delayed("dq", "past", PROTO_DELAY_AT | (T0 - 10));
    struct proto_request d3 =
        delayed("dq", "at", PROTO_DELAY_AT | (T0 + 60000));
    struct proto_request d4 = delayed("nosuch", "x", 1);
    uint64_t pending = 0, oldest = 0;
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 1, &c), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 2, &d1), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 3, &d2), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 4, &d3), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 5, &d4), 0);
    run_entries();
    cr_assert_eq(t.n_answers, 5);
    cr_expect_eq(t.answers[1].status, 0);
    cr_expect_eq(t.answers[1].result.count, 1);
    cr_expect_eq(t.answers[1].due_ms, T0 + 5000);
    cr_expect_eq(t.answers[2].due_ms, T0, "a past due time is now");
    cr_expect_eq(t.answers[3].due_ms, T0 + 60000);
    cr_expect_eq(t.answers[4].status, TERN_ENOQUEUE);
    cr_assert_eq(idx_timer_stats(t.f.e, &pending, &oldest), 0);
    cr_expect_eq(pending, 3);
    cr_expect_eq(oldest, T0);
    cr_expect_eq(queue_len("dq"), 0, "nothing is in the queue yet");
}

Test(batch_delayed, zero_messages_refused)
{
    struct proto_request d = delayed("dq", "x", 1);
    d.n_msgs = 0;
    cr_expect_eq(node_batcher_add(&t.f.b, NULL, 1, &d), TERN_EINVAL);
    cr_expect_null(t.f.b.open);
}

Test(batch_delayed, fire_only_when_due_then_exactly_once)
{
    struct proto_request c = req(PROTO_OP_QUEUE_CREATE, "dq");
    struct proto_request d = delayed("dq", "later", 1000);
    int owner = 0;
    uint32_t keys = 99;
    uint64_t pending = 0, oldest = 0;
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 1, &c), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 2, &d), 0);
    run_entries();
    cr_assert_eq(t.f.n_props, 1);

    /* Not due: no entry at all. */
    t.f.now = T0 + 999;
    cr_assert_eq(
        node_batcher_add_timer_fire(&t.f.b, plan_cb, NULL, &owner, &keys), 0);
    cr_expect_eq(keys, 0);
    cr_expect_null(t.f.b.open, "an empty plan leaves no entry");
    node_batcher_propose(&t.f.b);
    cr_expect_eq(t.f.n_props, 1);

    /* Due: one TIMER_FIRE, answered to its owner after the flush. */
    t.f.now = T0 + 1000;
    cr_assert_eq(
        node_batcher_add_timer_fire(&t.f.b, plan_cb, NULL, &owner, &keys), 0);
    cr_expect_eq(keys, 1);
    run_entries();
    cr_assert_eq(t.f.n_props, 2);
    cr_assert_eq(t.n_answers, 3);
    cr_expect_eq(t.answers[2].op, NODE_WREQ_TIMER_FIRE);
    cr_expect_eq(t.answers[2].owner, &owner);
    cr_expect_eq(t.answers[2].status, 0);
    cr_expect_eq(t.answers[2].result.count, 1);
    cr_expect_eq(t.answers[2].result.base_offset, 0, "nothing dropped");
    cr_expect_eq(queue_len("dq"), 1);
    cr_assert_eq(idx_timer_stats(t.f.e, &pending, &oldest), 0);
    cr_expect_eq(pending, 0);

    /* Nothing left: the next pass proposes nothing. */
    t.f.now += 5000;
    cr_assert_eq(
        node_batcher_add_timer_fire(&t.f.b, plan_cb, NULL, &owner, &keys), 0);
    cr_expect_eq(keys, 0);
    node_batcher_propose(&t.f.b);
    cr_expect_eq(t.f.n_props, 2);
    cr_expect_eq(queue_len("dq"), 1);
}

Test(batch_delayed, deleted_queue_is_dropped_at_fire)
{
    struct proto_request c = req(PROTO_OP_QUEUE_CREATE, "dq");
    struct proto_request d = delayed("dq", "gone", 10);
    struct proto_request del = req(PROTO_OP_QUEUE_DELETE, "dq");
    int owner = 0;
    uint32_t keys = 0;
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 1, &c), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 2, &d), 0);
    run_entries();
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 3, &del), 0);
    run_entries();
    t.f.now = T0 + 10;
    cr_assert_eq(
        node_batcher_add_timer_fire(&t.f.b, plan_cb, NULL, &owner, &keys), 0);
    cr_assert_eq(keys, 1);
    run_entries();
    cr_assert_eq(t.n_answers, 4);
    cr_expect_eq(t.answers[3].status, 0);
    cr_expect_eq(t.answers[3].result.count, 0);
    cr_expect_eq(t.answers[3].result.base_offset, 1, "dropped and counted");
}

Test(batch_delayed, fire_gets_an_entry_of_its_own_and_plan_errors_queue_nothing)
{
    struct proto_request c = req(PROTO_OP_QUEUE_CREATE, "dq");
    struct proto_request d = delayed("dq", "m", 0);
    int owner = 0;
    uint32_t keys = 7;
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 1, &c), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 2, &d), 0);
    run_entries();
    /* A request waits in the open entry; the failed plan leaves it be. */
    struct proto_request c2 = req(PROTO_OP_QUEUE_CREATE, "other");
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 3, &c2), 0);
    t.plan_rv = TERN_ECORRUPT;
    cr_expect_eq(
        node_batcher_add_timer_fire(&t.f.b, plan_cb, NULL, &owner, &keys),
        TERN_ECORRUPT);
    cr_expect_eq(keys, 0);
    t.plan_rv = 0;
    cr_assert_eq(
        node_batcher_add_timer_fire(&t.f.b, plan_cb, NULL, &owner, &keys), 0);
    cr_expect_eq(keys, 1);
    run_entries();
    cr_expect_eq(t.f.n_props, 3, "the create and the fire: two entries");
    cr_assert_eq(t.n_answers, 4);
    cr_expect_eq(t.answers[2].op, PROTO_OP_QUEUE_CREATE);
    cr_expect_eq(t.answers[2].status, 0);
    cr_expect_eq(t.answers[3].op, NODE_WREQ_TIMER_FIRE);
    cr_expect_eq(t.answers[3].result.count, 1);
    cr_expect_eq(queue_len("dq"), 1);
}
