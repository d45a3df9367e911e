/* Shared groups through the batcher (node/batch.c): the leader's DELIVER
 * (node_batcher_add_deliver), DEAD_LETTER (node_batcher_add_dead_letter)
 * and SETTLE (node_batcher_add_settle), and a client's SETTLE
 * (node_batcher_add), applied to a real index. Checked: what lands in the
 * entry (decoded back with the index's entry codec), the bounds refused
 * before anything is queued, and the result routed back to the request
 * (the done bitmap, the DLQ offset). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#include "batch.h"
#include "batch_fixture.h"
#include "cmd.h"
#include "idx.h"

#define T0 BATCH_FIXTURE_T0

struct sh_answer
{
    void *owner;
    uint8_t op;
    int status;
    struct idx_result result;
    uint32_t n_items;
    struct idx_deliver_item items[4];
};

static struct
{
    struct batch_fixture f;
    struct sh_answer answers[32];
    unsigned n_answers;
} t;

static void sh_respond(struct node_wreq *w)
{
    struct sh_answer *a;
    cr_assert_lt(t.n_answers, TERN_ARRAY_SIZE(t.answers));
    a = &t.answers[t.n_answers++];
    memset(a, 0, sizeof(*a));
    a->owner = w->owner;
    a->op = w->op;
    a->status = w->status;
    a->result = w->result;
    a->n_items = w->n_items;
    if (w->items != NULL) {
        memcpy(a->items, w->items,
               TERN_MIN(w->n_items, 4u) * sizeof(a->items[0]));
    }
}

static void setup(void)
{
    memset(&t, 0, sizeof(t));
    batch_fixture_setup(&t.f, "shared", sh_respond);
}

static void teardown(void)
{
    batch_fixture_teardown(&t.f);
}

TestSuite(batch_shared, .init = setup, .fini = teardown);

static void run_entries(void)
{
    batch_fixture_run(&t.f);
}

/* The only command of proposal i, decoded (pointers into t.f.buf[i]). */
static struct idx__cmd only_cmd(unsigned i)
{
    struct idx__entry it;
    struct idx__cmd cmd;
    cr_assert_lt(i, t.f.n_props);
    cr_assert_eq(idx__entry_open(&it, t.f.buf[i],
                                 idx_cmd_entry_len(t.f.buf[i], t.f.len[i])),
                 0);
    cr_assert_eq(it.n, 1);
    cr_assert_eq(it.timestamp_ms, t.f.now);
    cr_assert_eq(idx__entry_next(&it, &cmd), 1);
    return cmd;
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

/* A PRODUCE of n messages "m0".."m{n-1}" (n <= 8) by producer 7, seq. */
static struct proto_request produce(const char *queue, unsigned n, uint64_t seq)
{
    static uint8_t blobs[8 * 8];
    size_t len = 0;
    struct proto_request r = req(PROTO_OP_PRODUCE, queue);
    cr_assert_leq(n, 8);
    for (unsigned i = 0; i < n; i++) {
        tern_put_u32(blobs + len, 2);
        blobs[len + 4] = 'm';
        blobs[len + 5] = (uint8_t)('0' + i);
        len += 6;
    }
    r.producer_id = 7ull << 32;
    r.seq = seq;
    r.n_msgs = n;
    r.msgs = blobs;
    r.msgs_len = len;
    return r;
}

static struct proto_request shared_config(const char *queue,
                                          const char *group,
                                          uint64_t ack_timeout_ms,
                                          uint32_t max_deliveries)
{
    struct proto_request r = req(PROTO_OP_SHARED_CONFIG, queue);
    r.group = group;
    r.group_len = (uint16_t)strlen(group);
    r.set_mask = PROTO_SHARED_SET_ACK_TIMEOUT | PROTO_SHARED_SET_MAX_DELIVERIES;
    r.shared.ack_timeout_ms = ack_timeout_ms;
    r.shared.max_deliveries = max_deliveries;
    return r;
}

/* Queue "wq" with n messages and shared group "g" (ack timeout 1 s,
 * max_deliveries md), all applied. */
static void prepare(unsigned n, uint32_t md)
{
    struct proto_request c = req(PROTO_OP_QUEUE_CREATE, "wq");
    struct proto_request p = produce("wq", n, 1);
    struct proto_request s = shared_config("wq", "g", 1000, md);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 1, &c), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 2, &p), 0);
    cr_assert_eq(node_batcher_add(&t.f.b, NULL, 3, &s), 0);
    run_entries();
    cr_assert_eq(t.n_answers, 3);
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(t.answers[i].status, 0, "request %u: %d", i,
                     t.answers[i].status);
    }
    t.n_answers = 0;
}

static int bit(const struct idx_result *r, unsigned i)
{
    return (int)((r->done[i / 64] >> (i % 64)) & 1u);
}

struct lease_log
{
    struct idx_lease l[8];
    unsigned n;
};

static int lease_cb(void *arg, const struct idx_lease *l)
{
    struct lease_log *log = arg;
    cr_assert_lt(log->n, 8);
    log->l[log->n++] = *l;
    return 0;
}

static struct lease_log leases(void)
{
    struct lease_log log;
    memset(&log, 0, sizeof(log));
    cr_assert_eq(idx_shared_leases(t.f.e, "wq", "g", 0, 8, lease_cb, &log), 0);
    return log;
}

Test(batch_shared, deliver_lands_in_the_entry_and_routes_the_done_bits)
{
    struct idx_deliver_item items[3] = {{0, 0}, {1, 0}, {5, 0}};
    struct idx_deliver_item it;
    int owner = 0;
    prepare(3, 16);
    t.f.now = T0 + 100;
    cr_assert_eq(node_batcher_add_deliver(&t.f.b, &owner, 42, "wq", "g",
                                          9ull << 32, items, 3),
                 0);
    items[0].offset = 99; /* copied: the caller's array is free again */
    unsigned at = t.f.n_props;
    run_entries();

    struct idx__cmd cmd = only_cmd(at);
    cr_expect_eq(cmd.type, IDX_CMD_DELIVER);
    cr_expect_eq(cmd.queue_len, 2);
    cr_expect_eq(memcmp(cmd.queue, "wq", 2), 0);
    cr_expect_eq(cmd.group_len, 1);
    cr_expect_eq(cmd.group[0], 'g');
    cr_expect_eq(cmd.consumer_id, 9ull << 32);
    cr_assert_eq(cmd.n_items, 3);
    idx__cmd_deliver_item(&cmd, 0, &it);
    cr_expect_eq(it.offset, 0);
    cr_expect_eq(it.count, 0);
    idx__cmd_deliver_item(&cmd, 2, &it);
    cr_expect_eq(it.offset, 5);

    /* Offsets 0 and 1 are next in turn; 5 is not (next is 2): left out. */
    cr_assert_eq(t.n_answers, 1);
    cr_expect_eq(t.answers[0].owner, &owner);
    cr_expect_eq(t.answers[0].op, PROTO_OP_RECEIVE);
    cr_expect_eq(t.answers[0].status, 0);
    cr_expect_eq(t.answers[0].result.count, 2);
    cr_expect_eq(bit(&t.answers[0].result, 0), 1);
    cr_expect_eq(bit(&t.answers[0].result, 1), 1);
    cr_expect_eq(bit(&t.answers[0].result, 2), 0);
    cr_expect_eq(t.answers[0].n_items, 3);
    cr_expect_eq(t.answers[0].items[0].offset, 0, "the wreq kept a copy");
    cr_expect_eq(t.answers[0].items[2].offset, 5);

    struct lease_log log = leases();
    cr_assert_eq(log.n, 2);
    cr_expect_eq(log.l[0].offset, 0);
    cr_expect_eq(log.l[0].count, 1);
    cr_expect_eq(log.l[0].ready, 0);
    cr_expect_eq(log.l[0].consumer_id, 9ull << 32);
    cr_expect_eq(log.l[0].deadline_ms, T0 + 100 + 1000);
}

Test(batch_shared, deliver_and_settle_bounds_queue_nothing)
{
    struct idx_deliver_item d[1] = {{0, 0}};
    struct idx_settle_item s[1] = {{0, 1, IDX_SETTLE_ACK, 0}};
    struct idx_deliver_item *many =
        tern_calloc(IDX_SHARED_LIST_MAX + 1, sizeof(*many));
    struct idx_settle_item *smany =
        tern_calloc(IDX_SHARED_LIST_MAX + 1, sizeof(*smany));
    cr_assert_not_null(many);
    cr_assert_not_null(smany);
    cr_expect_eq(
        node_batcher_add_deliver(&t.f.b, NULL, 1, "wq", "g", 1ull << 32, d, 0),
        TERN_EINVAL);
    cr_expect_eq(
        node_batcher_add_deliver(&t.f.b, NULL, 1, "wq", "g", 1ull << 32, many,
                                 IDX_SHARED_LIST_MAX + 1),
        TERN_EINVAL);
    cr_expect_eq(
        node_batcher_add_deliver(&t.f.b, NULL, 1, "w q", "g", 1ull << 32, d, 1),
        TERN_EBADNAME);
    cr_expect_eq(
        node_batcher_add_deliver(&t.f.b, NULL, 1, "wq", "", 1ull << 32, d, 1),
        TERN_EBADNAME);
    cr_expect_eq(node_batcher_add_settle(&t.f.b, "wq", "g", s, 0), TERN_EINVAL);
    cr_expect_eq(node_batcher_add_settle(&t.f.b, "wq", "g", smany,
                                         IDX_SHARED_LIST_MAX + 1),
                 TERN_EINVAL);
    cr_expect_eq(node_batcher_add_settle(&t.f.b, "wq", "g/x", s, 1),
                 TERN_EBADNAME);
    cr_expect_eq(node_batcher_add_dead_letter(&t.f.b, t.f.e, "", "g", d, "r"),
                 TERN_EBADNAME);
    cr_expect_null(t.f.b.open, "nothing was queued");
    node_batcher_propose(&t.f.b);
    cr_expect_eq(t.f.n_props, 0);
    tern_free(many);
    tern_free(smany);
}

Test(batch_shared, leader_settle_releases_and_client_settle_answers_done)
{
    struct idx_deliver_item d[3] = {{0, 0}, {1, 0}, {2, 0}};
    struct idx_settle_item rel[2] = {{0, 1, IDX_SETTLE_RELEASE, 0},
                                     {2, 5, IDX_SETTLE_RELEASE, 0}};
    struct idx_settle_item it;
    prepare(3, 16);
    cr_assert_eq(
        node_batcher_add_deliver(&t.f.b, NULL, 1, "wq", "g", 9ull << 32, d, 3),
        0);
    run_entries();
    cr_assert_eq(t.answers[0].result.count, 3);
    t.n_answers = 0;

    /* The leader's release of a gone consumer: nobody waits, the result
     * is still routed (done for offset 0, stale for the wrong count). */
    t.f.now = T0 + 50;
    cr_assert_eq(node_batcher_add_settle(&t.f.b, "wq", "g", rel, 2), 0);
    unsigned at = t.f.n_props;
    run_entries();
    struct idx__cmd cmd = only_cmd(at);
    cr_expect_eq(cmd.type, IDX_CMD_SETTLE);
    cr_assert_eq(cmd.n_items, 2);
    idx__cmd_settle_item(&cmd, 1, &it);
    cr_expect_eq(it.offset, 2);
    cr_expect_eq(it.count, 5);
    cr_expect_eq(it.action, IDX_SETTLE_RELEASE);
    cr_expect_eq(it.delay_ms, 0);
    cr_assert_eq(t.n_answers, 1);
    cr_expect_null(t.answers[0].owner);
    cr_expect_eq(t.answers[0].status, 0);
    cr_expect_eq(t.answers[0].result.count, 1);
    cr_expect_eq(bit(&t.answers[0].result, 0), 1);
    cr_expect_eq(bit(&t.answers[0].result, 1), 0);
    struct lease_log log = leases();
    cr_assert_eq(log.n, 3);
    cr_expect_eq(log.l[0].ready, 1, "released: ready");
    cr_expect_eq(log.l[0].deadline_ms, T0 + 50);
    cr_expect_eq(log.l[2].ready, 0, "a stale receipt changes nothing");
    t.n_answers = 0;

    /* A client's SETTLE (wire items): ack 1, nack 2 with a delay. */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    struct proto_settle_item pi[2] = {{1, 1, PROTO_SETTLE_ACK, 0},
                                      {2, 1, PROTO_SETTLE_NACK, 700}};
    cr_assert_eq(proto_encode_settle(&w, 5, "wq", "g", pi, 2), 0);
    struct proto_request r;
    cr_assert_eq(
        proto_decode_request(PROTO_OP_SETTLE, w.base + PROTO_HEADER_SIZE,
                             w.len - PROTO_HEADER_SIZE, &r),
        0);
    int owner = 0;
    cr_assert_eq(node_batcher_add(&t.f.b, &owner, 5, &r), 0);
    run_entries();
    tern_wbuf_free(&w);
    cr_assert_eq(t.n_answers, 1);
    cr_expect_eq(t.answers[0].owner, &owner);
    cr_expect_eq(t.answers[0].op, PROTO_OP_SETTLE);
    cr_expect_eq(t.answers[0].n_items, 2, "one done byte per item");
    cr_expect_eq(t.answers[0].result.count, 2);
    cr_expect_eq(bit(&t.answers[0].result, 0), 1);
    cr_expect_eq(bit(&t.answers[0].result, 1), 1);
    log = leases();
    cr_assert_eq(log.n, 2, "the acked row is gone");
    cr_expect_eq(log.l[0].offset, 0);
    cr_expect_eq(log.l[1].offset, 2);
    cr_expect_eq(log.l[1].ready, 1);
    cr_expect_eq(log.l[1].deadline_ms, T0 + 50 + 700);
}

struct got
{
    char data[16];
    struct idx_props p;
    char reason[32];
    char offset[32];
    unsigned n_headers;
};

static int get_cb(void *arg, const struct idx_fetched *m)
{
    struct got *g = arg;
    cr_assert_lt(m->len, sizeof(g->data));
    memcpy(g->data, m->data, m->len);
    cr_assert_eq(idx_props_decode(m->props, m->props_len, &g->p), 0);
    g->n_headers = g->p.n_headers;
    for (uint32_t i = 0; i < g->p.n_headers; i++) {
        struct idx_header h;
        cr_assert_eq(idx_props_header(m->props, m->props_len, i, &h), 0);
        char *dst = NULL;
        if (h.name_len == 15 && memcmp(h.name, "tern-dlq-reason", 15) == 0) {
            dst = g->reason;
        } else if (h.name_len == 15 &&
                   memcmp(h.name, "tern-dlq-offset", 15) == 0) {
            dst = g->offset;
        }
        if (dst != NULL) {
            cr_assert_lt(h.value_len, 32);
            memcpy(dst, h.value, h.value_len);
        }
    }
    return 0;
}

Test(batch_shared, dead_letter_moves_the_message_and_routes_its_offset)
{
    struct idx_deliver_item d[2] = {{0, 0}, {1, 0}};
    struct idx_deliver_item plan[4], dead[4];
    uint32_t n = 9, n_dead = 9;
    prepare(2, 1);
    cr_assert_eq(
        node_batcher_add_deliver(&t.f.b, NULL, 1, "wq", "g", 9ull << 32, d, 2),
        0);
    run_entries();
    t.n_answers = 0;

    /* The lease of offset 1 expires; with max_deliveries 1 the plan makes
     * it a dead-letter candidate instead of a redelivery. */
    t.f.now = T0 + 1000;
    cr_assert_eq(idx_deliver_plan(t.f.e, "wq", "g", 9ull << 32, 4, 0, 0, 256,
                                  t.f.now, plan, &n, dead, 4, &n_dead),
                 0);
    cr_expect_eq(n, 0);
    cr_assert_eq(n_dead, 2);
    cr_expect_eq(dead[1].offset, 1);
    cr_expect_eq(dead[1].count, 1);

    cr_assert_eq(node_batcher_add_dead_letter(&t.f.b, t.f.e, "wq", "g",
                                              &dead[1], "max-deliveries"),
                 0);
    unsigned at = t.f.n_props;
    run_entries();
    struct idx__cmd cmd = only_cmd(at);
    cr_expect_eq(cmd.type, IDX_CMD_DEAD_LETTER);
    cr_expect_eq(cmd.dl.offset, 1);
    cr_expect_eq(cmd.dl.count, 1);
    cr_assert_eq(cmd.reason_len, 14);
    cr_expect_eq(memcmp(cmd.reason, "max-deliveries", 14), 0);
    cr_assert_eq(cmd.n_msgs, 1);
    struct idx__msg_iter mi;
    const uint8_t *data;
    uint32_t len;
    idx__msg_iter_init(&mi, &cmd);
    cr_assert_eq(idx__msg_iter_next(&mi, &data, &len), 1);
    cr_assert_eq(len, 2);
    cr_expect_eq(memcmp(data, "m1", 2), 0, "the leader put the bytes in");

    cr_assert_eq(t.n_answers, 1);
    cr_expect_null(t.answers[0].owner, "nobody waits for a dead letter");
    cr_expect_eq(t.answers[0].status, 0);
    cr_expect_eq(t.answers[0].result.count, 1);
    cr_expect_eq(t.answers[0].result.base_offset, 0, "the DLQ's offset");

    struct got g;
    memset(&g, 0, sizeof(g));
    cr_assert_eq(idx_message_get(t.f.e, "wq-dlq-g", 0, 0, get_cb, &g), 0);
    cr_expect_str_eq(g.data, "m1");
    cr_expect_eq(g.n_headers, 4);
    cr_expect_str_eq(g.reason, "max-deliveries");
    cr_expect_str_eq(g.offset, "1");
    struct lease_log log = leases();
    cr_assert_eq(log.n, 1, "the dead-lettered row is gone");
    cr_expect_eq(log.l[0].offset, 0);

    /* The same candidate again: its row moved on, count 0, nothing
     * appended. */
    t.n_answers = 0;
    cr_assert_eq(node_batcher_add_dead_letter(&t.f.b, t.f.e, "wq", "g",
                                              &dead[1], "max-deliveries"),
                 0);
    run_entries();
    cr_assert_eq(t.n_answers, 1);
    cr_expect_eq(t.answers[0].status, 0);
    cr_expect_eq(t.answers[0].result.count, 0);
    cr_expect_eq(idx_message_get(t.f.e, "wq-dlq-g", 0, 1, get_cb, &g),
                 TERN_ENOTFOUND);
}
