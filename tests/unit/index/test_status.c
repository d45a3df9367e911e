/* Unit tests of group status in index/ (docs/WORKQUEUES.md, "Group
 * status"): a shared group's floor, next, lag, in-flight and ready rows by
 * the clock, the consumers holding leases (most first), the bound on the
 * rows walked, the DLQ's depth once a message is dead-lettered; a stream
 * group's committed offset and lag; the paged list of a queue's groups;
 * the delivery state of one message in each shared group; the refusals. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_status, .init = th_dirs_init, .fini = th_dirs_fini);

static void run(struct idx_env *e, uint64_t index, struct tern_wbuf *w)
{
    struct idx_result r[1];
    memset(r, 0, sizeof r);
    cr_assert_eq(th_apply(e, index, w, r, 1), 1);
    cr_assert_eq(r[0].status, 0, "index %llu: %d", (unsigned long long)index,
                 r[0].status);
    cr_assert_eq(idx_flush(e), 0);
    tern_wbuf_free(w);
}

static void deliver(struct idx_env *e,
                    uint64_t index,
                    uint64_t consumer,
                    uint64_t from,
                    uint32_t n)
{
    struct idx_deliver_item it[4];
    struct tern_wbuf w;
    for (uint32_t i = 0; i < n; i++) {
        it[i] = (struct idx_deliver_item){from + i, 0};
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_deliver(&w, "q", "g", consumer, it, n);
    run(e, index, &w);
}

static void settle(struct idx_env *e,
                   uint64_t index,
                   uint64_t offset,
                   uint32_t action)
{
    struct idx_settle_item it = {offset, 1, action, 0};
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_settle(&w, "q", "g", &it, 1);
    run(e, index, &w);
}

/* Queue "q" of 10 messages; shared group "g": offsets 0, 2, 4 delivered
 * to consumer 7, 3 to consumer 9 (at t 1000, ack timeout 30 s), 1 acked,
 * 2 nacked; stream group "s" committed at 4. Returns the next index. */
static uint64_t setup(struct idx_env *e)
{
    struct tern_wbuf w;
    th_create(e, 1, "q");
    (void)th_produce(e, 2, "q", 0, 0, 10);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_shared_config(&w, "q", "g", 0, NULL);
    run(e, 3, &w);
    deliver(e, 4, 7, 0, 3);
    deliver(e, 5, 9, 3, 1);
    deliver(e, 6, 7, 4, 1);
    settle(e, 7, 1, IDX_SETTLE_ACK);
    settle(e, 8, 2, IDX_SETTLE_NACK);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_group_commit(&w, "q", "s", 4);
    run(e, 9, &w);
    return 10;
}

Test(index_status, shared_group_by_the_clock)
{
    char *dir = th_tmpdir();
    struct idx_env *e = th_open(dir, 0);
    struct idx_group_status s;
    (void)setup(e);

    cr_assert_eq(idx_group_status(e, "q", "g", 2000, 1000, &s), 0, "%s",
                 idx_errmsg(e));
    cr_expect_str_eq(s.name, "g");
    cr_expect(s.shared);
    cr_expect_eq(s.start, 0);
    cr_expect_eq(s.end, 10);
    cr_expect_eq(s.committed, 0); /* the floor: offset 0 is leased */
    cr_expect_eq(s.next, 5);
    cr_expect_eq(s.lag, 10);
    cr_expect_eq(s.in_flight, 3);
    cr_expect_eq(s.ready, 1);
    cr_expect_eq(s.oldest_deadline_ms, 31000);
    cr_expect_eq(s.settings.ack_timeout_ms, IDX_SHARED_ACK_TIMEOUT_MS);
    cr_expect_eq(s.settings.max_deliveries, IDX_SHARED_MAX_DELIVERIES);
    cr_expect_str_eq(s.dlq, "q-dlq-g");
    cr_expect_eq(s.dlq_depth, 0); /* no DLQ yet */
    cr_expect_not(s.partial);
    cr_assert_eq(s.n_consumers, 2);
    cr_expect_eq(s.consumers_seen, 2);
    cr_expect_eq(s.consumers[0].id, 7);
    cr_expect_eq(s.consumers[0].held, 2);
    cr_expect_eq(s.consumers[1].id, 9);
    cr_expect_eq(s.consumers[1].held, 1);

    /* Every lease expired by then: all four rows are ready. */
    cr_assert_eq(idx_group_status(e, "q", "g", 40000, 1000, &s), 0);
    cr_expect_eq(s.in_flight, 0);
    cr_expect_eq(s.ready, 4);
    cr_expect_eq(s.n_consumers, 0);
    cr_expect_eq(s.oldest_deadline_ms, 0);

    /* The walk is bounded. */
    cr_assert_eq(idx_group_status(e, "q", "g", 2000, 2, &s), 0);
    cr_expect(s.partial);
    cr_expect_eq(s.in_flight + s.ready, 2);

    idx_close(e);
    th_rmdir(dir);
}

Test(index_status, dlq_depth_after_a_dead_letter)
{
    char *dir = th_tmpdir();
    struct idx_env *e = th_open(dir, 0);
    struct idx_group_status s;
    struct tern_wbuf w;
    uint64_t i = setup(e);
    struct idx_deliver_item d = {2, 1}; /* nacked: ready, count 1, due */

    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 2000);
    cr_assert_eq(idx_dead_letter_plan(e, "q", "g", &d, "test", &w), 0, "%s",
                 idx_errmsg(e));
    run(e, i, &w);
    cr_assert_eq(idx_group_status(e, "q", "g", 2000, 1000, &s), 0);
    cr_expect_eq(s.dlq_depth, 1);
    cr_expect_eq(s.ready, 0);
    cr_expect_eq(s.in_flight, 3);
    idx_close(e);
    th_rmdir(dir);
}

Test(index_status, stream_group_and_errors)
{
    char *dir = th_tmpdir();
    struct idx_env *e = th_open(dir, 0);
    struct idx_group_status s;
    (void)setup(e);

    cr_assert_eq(idx_group_status(e, "q", "s", 2000, 1000, &s), 0);
    cr_expect_not(s.shared);
    cr_expect_eq(s.committed, 4);
    cr_expect_eq(s.next, 4);
    cr_expect_eq(s.lag, 6);
    cr_expect_eq(s.commit_ms, 1002); /* append times never go back */
    cr_expect_eq(s.in_flight, 0);
    cr_expect_str_eq(s.dlq, "");
    cr_expect_eq(s.claim_holder, 0, "no single active consumer");

    /* A claim of consumer 5 until 3000 + 2000: shown while live. */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 3000);
    idx_cmd_claim(&w, "q", "s", 5, IDX_CLAIM_ACQUIRE, 2000);
    run(e, 10, &w);
    cr_assert_eq(idx_group_status(e, "q", "s", 4999, 1000, &s), 0);
    cr_expect_eq(s.claim_holder, 5);
    cr_expect_eq(s.claim_until_ms, 5000);
    cr_assert_eq(idx_group_status(e, "q", "s", 5000, 1000, &s), 0);
    cr_expect_eq(s.claim_holder, 0, "lapsed");
    cr_expect_eq(s.claim_until_ms, 0);

    cr_expect_eq(idx_group_status(e, "q", "nope", 0, 10, &s), TERN_ENOTFOUND);
    cr_expect_eq(idx_group_status(e, "nope", "g", 0, 10, &s), TERN_ENOQUEUE);
    cr_expect_eq(idx_group_status(e, "q", "", 0, 10, &s), TERN_EBADNAME);
    idx_close(e);
    th_rmdir(dir);
}

struct names
{
    char name[4][TERN_NAME_MAX + 1];
    uint32_t n;
};

static int collect(void *arg, const struct idx_group_status *g)
{
    struct names *x = arg;
    cr_assert_lt(x->n, 4);
    (void)snprintf(x->name[x->n++], TERN_NAME_MAX + 1, "%s", g->name);
    return 0;
}

Test(index_status, group_list_pages)
{
    char *dir = th_tmpdir();
    struct idx_env *e = th_open(dir, 0);
    struct names x;
    bool more = false;
    (void)setup(e);

    memset(&x, 0, sizeof x);
    cr_assert_eq(idx_group_status_list(e, "q", "", 10, 2000, 1000, 100000,
                                       collect, &x, &more),
                 0);
    cr_assert_eq(x.n, 2);
    cr_expect_str_eq(x.name[0], "g");
    cr_expect_str_eq(x.name[1], "s");
    cr_expect_not(more);

    memset(&x, 0, sizeof x);
    cr_assert_eq(idx_group_status_list(e, "q", NULL, 1, 2000, 1000, 100000,
                                       collect, &x, &more),
                 0);
    cr_assert_eq(x.n, 1);
    cr_expect_str_eq(x.name[0], "g");
    cr_expect(more);

    memset(&x, 0, sizeof x);
    cr_assert_eq(idx_group_status_list(e, "q", "g", 1, 2000, 1000, 100000,
                                       collect, &x, &more),
                 0);
    cr_assert_eq(x.n, 1);
    cr_expect_str_eq(x.name[0], "s");
    cr_expect_not(more);

    /* The page's row budget: "g" uses it up, "s" waits for the next page. */
    memset(&x, 0, sizeof x);
    cr_assert_eq(idx_group_status_list(e, "q", "", 10, 2000, 1000, 4, collect,
                                       &x, &more),
                 0);
    cr_expect_eq(x.n, 1);
    cr_expect(more);
    idx_close(e);
    th_rmdir(dir);
}

struct states
{
    struct idx_delivery d[2];
    char group[2][TERN_NAME_MAX + 1];
    uint32_t n;
};

static int grab(void *arg, const struct idx_delivery *d)
{
    struct states *x = arg;
    cr_assert_lt(x->n, 2);
    x->d[x->n] = *d;
    (void)snprintf(x->group[x->n], TERN_NAME_MAX + 1, "%s", d->group);
    x->n++;
    return 0;
}

static struct idx_delivery state_at(struct idx_env *e, uint64_t offset)
{
    struct states x;
    memset(&x, 0, sizeof x);
    cr_assert_eq(idx_message_deliveries(e, "q", offset, grab, &x), 0);
    cr_assert_eq(x.n, 1, "only the shared group");
    cr_expect_str_eq(x.group[0], "g");
    return x.d[0];
}

Test(index_status, delivery_states)
{
    char *dir = th_tmpdir();
    struct idx_env *e = th_open(dir, 0);
    struct idx_delivery d;
    (void)setup(e);

    d = state_at(e, 0);
    cr_expect_eq(d.state, IDX_DELIVERY_LEASED);
    cr_expect_eq(d.consumer_id, 7);
    cr_expect_eq(d.count, 1);
    cr_expect_eq(d.deadline_ms, 31000);
    d = state_at(e, 1);
    cr_expect_eq(d.state, IDX_DELIVERY_SETTLED);
    d = state_at(e, 2);
    cr_expect_eq(d.state, IDX_DELIVERY_READY);
    cr_expect_eq(d.count, 1);
    cr_expect_eq(d.deadline_ms, 1000);
    d = state_at(e, 3);
    cr_expect_eq(d.state, IDX_DELIVERY_LEASED);
    cr_expect_eq(d.consumer_id, 9);
    d = state_at(e, 7);
    cr_expect_eq(d.state, IDX_DELIVERY_NEW);
    cr_expect_eq(idx_message_deliveries(e, "nope", 0, grab, &d), TERN_ENOQUEUE);
    idx_close(e);
    th_rmdir(dir);
}
