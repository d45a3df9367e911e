/* Write batching and result routing (node/batch.c) against a fake
 * propose, plus one round trip through a real index (idx_apply). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#include "batch.h"
#include "idx.h"

struct proposal
{
    struct node_batch *batch;
    void *buf;
    size_t len;
    uint64_t index;
};

struct answer
{
    void *owner;
    uint64_t request_id;
    uint8_t op;
    int status;
    struct idx_result result;
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    uint32_t max_msgs;
    uint32_t wait_ms;
};

static struct
{
    struct node_batcher b;
    struct proposal props[64];
    unsigned n_props;
    struct answer answers[256];
    unsigned n_answers;
    uint64_t next_index;
    int propose_rv; /* make propose fail synchronously */
} t;

static int fake_propose(void *arg,
                        struct node_batch *batch,
                        void *buf,
                        size_t len,
                        uint64_t *index)
{
    (void)arg;
    if (t.propose_rv != 0) {
        return t.propose_rv;
    }
    cr_assert_lt(t.n_props, TERN_ARRAY_SIZE(t.props));
    cr_assert_eq(len % 8, 0, "raft_uv needs 8-byte multiples");
    cr_assert_eq(idx_cmd_validate(buf, idx_cmd_entry_len(buf, len)), 0,
                 "proposed a bad entry");
    *index = ++t.next_index;
    t.props[t.n_props++] = (struct proposal){batch, buf, len, *index};
    return 0;
}

static void fake_respond(struct node_wreq *w)
{
    cr_assert_lt(t.n_answers, TERN_ARRAY_SIZE(t.answers));
    struct answer *a = &t.answers[t.n_answers++];
    memset(a, 0, sizeof(*a));
    a->owner = w->owner;
    a->request_id = w->request_id;
    a->op = w->op;
    a->status = w->status;
    a->result = w->result;
    memcpy(a->queue, w->queue, sizeof(a->queue));
    memcpy(a->group, w->group, sizeof(a->group));
    a->max_msgs = w->max_msgs;
    a->wait_ms = w->wait_ms;
}

static uint64_t fake_time(void *arg)
{
    (void)arg;
    return 1700000000000ull;
}

static void setup(void)
{
    static const struct node_batcher_ops ops = {fake_propose, fake_respond,
                                                fake_time, NULL, NULL};
    memset(&t, 0, sizeof(t));
    t.next_index = 100;
    node_batcher_init(&t.b, &ops, NULL);
}

static void teardown(void)
{
    for (unsigned i = 0; i < t.n_props; i++) {
        tern_free(t.props[i].buf);
    }
}

TestSuite(batch, .init = setup, .fini = teardown);

static struct proto_request produce_req(const char *queue, const char *payload)
{
    static uint8_t blobs[8][256];
    static unsigned next;
    uint8_t *b = blobs[next++ % 8];
    size_t n = strlen(payload);
    struct proto_request r;
    memset(&r, 0, sizeof(r));
    r.op = PROTO_OP_PRODUCE;
    r.queue = queue;
    r.queue_len = (uint16_t)strlen(queue);
    tern_put_u32(b, (uint32_t)n);
    /* The payload is a message, not a string. */
    /* NOLINTNEXTLINE(bugprone-not-null-terminated-result) */
    memcpy(b + 4, payload, n);
    r.n_msgs = 1;
    r.msgs = b;
    r.msgs_len = 4 + n;
    return r;
}

/* A NUL-terminated text of cap - 1 copies of c. */
static void fill_text(char *buf, size_t cap, char c)
{
    memset(buf, c, cap - 1);
    buf[cap - 1] = '\0';
}

/* Add n produces of payload to "q" (ids 0..n-1), asserting each. */
static void add_produces(unsigned n, const char *payload)
{
    for (unsigned i = 0; i < n; i++) {
        struct proto_request r = produce_req("q", payload);
        cr_assert_eq(node_batcher_add(&t.b, NULL, i, &r), 0);
    }
}

static struct proto_request group_req(uint8_t op,
                                      const char *queue,
                                      const char *group);

static struct proto_request queue_req(uint8_t op, const char *queue)
{
    struct proto_request r;
    memset(&r, 0, sizeof(r));
    r.op = op;
    r.queue = queue;
    r.queue_len = (uint16_t)strlen(queue);
    return r;
}

/* Apply proposal p with results {status i, base_offset 10*i}. */
static void apply_fake(const struct proposal *p, unsigned n)
{
    struct idx_result res[16];
    memset(res, 0, sizeof(res));
    for (unsigned i = 0; i < n; i++) {
        res[i].base_offset = 10ull * i;
        res[i].count = 1;
    }
    node_batcher_on_apply(&t.b, p->index, p->buf, p->len, res, n);
}

Test(batch, one_entry_per_iteration_answers_after_flush)
{
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "q");
    struct proto_request r2 = produce_req("q", "hello");
    struct proto_request r3 = produce_req("q", "world");
    int owner;

    cr_assert_eq(node_batcher_add(&t.b, &owner, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, &owner, 2, &r2), 0);
    cr_assert_eq(node_batcher_add(&t.b, &owner, 3, &r3), 0);
    cr_expect_eq(t.n_props, 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1, "three requests, one entry");
    cr_expect_eq(t.props[0].batch->n_cmds, 3);

    apply_fake(&t.props[0], 3);
    cr_expect_eq(t.n_answers, 0);
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);
    cr_expect_eq(t.n_answers, 0, "no answer before the flush");
    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 3);
    for (unsigned i = 0; i < 3; i++) {
        cr_expect_eq(t.answers[i].request_id, i + 1);
        cr_expect_eq(t.answers[i].status, 0);
        cr_expect_eq(t.answers[i].result.base_offset, 10ull * i);
        cr_expect_eq(t.answers[i].owner, &owner);
    }
    cr_expect(node_batcher_idle(&t.b));
}

/* Produces are answered before the index flush (their answer is the
 * apply's result), everything else of the same entry only after it: a
 * GROUP_FETCH reads the index, a queue definition or a group commit must
 * be visible once answered. Only applied and completed entries answer. */
Test(batch, produces_answer_before_the_flush_the_rest_after)
{
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "q");
    struct proto_request r2 = produce_req("q", "hello");
    struct proto_request r3 = group_req(PROTO_OP_GROUP_COMMIT, "q", "g");
    struct proto_request r4 = produce_req("q", "world");
    struct proto_request r5 = group_req(PROTO_OP_GROUP_FETCH, "q", "g");
    struct proto_request r6 = produce_req("q", "later");

    r3.offset = 1;
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 3, &r3), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 4, &r4), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 5, &r5), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 6, &r6), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 2);

    node_batcher_answer_produces(&t.b);
    cr_expect_eq(t.n_answers, 0, "nothing applied yet");
    apply_fake(&t.props[0], 5);
    node_batcher_answer_produces(&t.b);
    cr_expect_eq(t.n_answers, 0, "applied, but its proposal not completed");
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);

    node_batcher_answer_produces(&t.b);
    cr_assert_eq(t.n_answers, 2, "the first entry's two produces");
    cr_expect_eq(t.answers[0].request_id, 2);
    cr_expect_eq(t.answers[0].result.base_offset, 10);
    cr_expect_eq(t.answers[1].request_id, 4);
    cr_expect_eq(t.answers[1].result.base_offset, 30);
    node_batcher_answer_produces(&t.b);
    cr_expect_eq(t.n_answers, 2, "each answered once");

    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 5, "then the rest, after the flush");
    cr_expect_eq(t.answers[2].request_id, 1);
    cr_expect_eq(t.answers[3].request_id, 3);
    cr_expect_eq(t.answers[4].request_id, 5);
    cr_expect_eq(t.answers[4].op, PROTO_OP_GROUP_FETCH);
    cr_expect_not(node_batcher_idle(&t.b), "the second entry is in flight");

    apply_fake(&t.props[1], 2);
    node_batcher_proposed(t.props[1].batch, 0, t.props[1].index);
    node_batcher_answer_produces(&t.b);
    cr_assert_eq(t.n_answers, 6);
    cr_expect_eq(t.answers[5].request_id, 6);
    node_batcher_flushed(&t.b);
    cr_expect_eq(t.n_answers, 6);
    cr_expect(node_batcher_idle(&t.b));
}

/* The bytes of command QUEUE_CREATE queue with settings s as the index's
 * builder writes them, into out (cap bytes); returns their length. */
static size_t create_cmd_bytes(const char *queue,
                               const struct idx_queue_settings *s,
                               uint8_t *out,
                               size_t cap)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 0);
    size_t from = w.len;
    idx_cmd_queue_create_opts(&w, queue, s);
    cr_assert_eq(w.err, 0);
    size_t n = w.len - from;
    cr_assert_leq(n, cap);
    memcpy(out, w.base + from, n);
    tern_wbuf_free(&w);
    return n;
}

/* A QUEUE_CREATE always carries the settings tail: the client's, or the
 * built-in defaults (without the tail the index applies no limits, the
 * meaning kept for queues of the earlier release). */
Test(batch, queue_create_always_writes_settings)
{
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "q");
    struct proto_request r2 = queue_req(PROTO_OP_QUEUE_CREATE, "r");
    r2.has_settings = 1;
    r2.settings.max_messages = 7;
    r2.settings.overflow = IDX_OVERFLOW_REJECT;
    struct idx_queue_settings def;
    struct idx_queue_settings given = {.max_messages = 7,
                                       .overflow = IDX_OVERFLOW_REJECT};
    uint8_t want_q[64];
    uint8_t want_r[64];
    uint8_t bare[64];
    idx_queue_settings_default(&def);
    cr_assert_neq(def.max_age_ms, 0);
    size_t nq = create_cmd_bytes("q", &def, want_q, sizeof want_q);
    size_t nr = create_cmd_bytes("r", &given, want_r, sizeof want_r);
    size_t nb = create_cmd_bytes("q", NULL, bare, sizeof bare);
    cr_assert_gt(nq, nb, "the tail makes the command longer");

    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    const uint8_t *buf = t.props[0].buf;
    size_t len = t.props[0].len;
    cr_assert_eq(idx_cmd_validate(buf, idx_cmd_entry_len(buf, len)), 0);
    cr_expect_not_null(memmem(buf, len, want_q, nq),
                       "defaults written for a create without settings");
    cr_expect_not_null(memmem(buf, len, want_r, nr),
                       "the client's settings written as given");
}

Test(batch, non_write_rejected)
{
    struct proto_request r = queue_req(PROTO_OP_FETCH, "q");
    cr_expect_eq(node_batcher_add(&t.b, NULL, 1, &r), TERN_EINVAL);
    node_batcher_propose(&t.b);
    cr_expect_eq(t.n_props, 0);
}

Test(batch, entry_size_bound_splits)
{
    char big[200];
    fill_text(big, sizeof big, 'x');
    t.b.max_entry_bytes = 600;
    add_produces(6, big);
    node_batcher_propose(&t.b);
    cr_assert_gt(t.n_props, 1);
    unsigned total = 0;
    for (unsigned i = 0; i < t.n_props; i++) {
        cr_expect_leq(t.props[i].len, 600 + 300);
        total += t.props[i].batch->n_cmds;
    }
    cr_expect_eq(total, 6);
}

Test(batch, inflight_bound_queues_and_congests)
{
    t.b.max_inflight = 1;
    t.b.max_queued = 2;
    t.b.max_cmds = 1;
    for (unsigned i = 0; i < 3; i++) {
        struct proto_request r = queue_req(PROTO_OP_QUEUE_CREATE, "q");
        cr_assert_eq(node_batcher_add(&t.b, NULL, i, &r), 0);
    }
    /* max_cmds 1: the first two adds sealed entries already. */
    cr_expect(node_batcher_congested(&t.b));
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    cr_expect(node_batcher_congested(&t.b), "two still queued");
    apply_fake(&t.props[0], 1);
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 2);
    cr_expect_not(node_batcher_congested(&t.b));
}

Test(batch, sync_propose_failure_answers_all)
{
    struct proto_request r1 = produce_req("q", "a");
    struct proto_request r2 = produce_req("q", "b");
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    t.propose_rv = TERN_ENOTLEADER;
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_answers, 2);
    cr_expect_eq(t.answers[0].status, TERN_ENOTLEADER);
    cr_expect_eq(t.answers[1].status, TERN_ENOTLEADER);
    cr_expect(node_batcher_idle(&t.b));
}

Test(batch, callback_failure_answers_now)
{
    struct proto_request r = produce_req("q", "a");
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    node_batcher_proposed(t.props[0].batch, TERN_ELEADERSHIPLOST, 0);
    cr_assert_eq(t.n_answers, 1);
    cr_expect_eq(t.answers[0].status, TERN_ELEADERSHIPLOST);
}

Test(batch, enospc_maps_to_efull)
{
    struct proto_request r = produce_req("q", "a");
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r), 0);
    node_batcher_propose(&t.b);
    node_batcher_proposed(t.props[0].batch, -ENOSPC, 0);
    cr_assert_eq(t.n_answers, 1);
    cr_expect_eq(t.answers[0].status, TERN_EFULL);
}

Test(batch, other_leaders_entry_at_our_index_is_not_routed)
{
    struct proto_request r = produce_req("q", "ours");
    struct idx_result res = {.base_offset = 77, .count = 1};
    struct tern_wbuf other;
    struct idx_msg m = {"theirs", 6};

    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r), 0);
    node_batcher_propose(&t.b);
    tern_wbuf_init(&other);
    idx_cmd_begin(&other, 1);
    idx_cmd_produce(&other, "q", 0, 0, &m, 1);
    cr_assert_eq(idx_cmd_end(&other), 0);
    node_batcher_on_apply(&t.b, t.props[0].index, other.base, other.len, &res,
                          1);
    tern_wbuf_free(&other);
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);
    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 1);
    cr_expect_neq(t.answers[0].status, 0, "must not claim success");
}

Test(batch, results_with_logical_errors)
{
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "q");
    struct proto_request r2 = queue_req(PROTO_OP_QUEUE_CREATE, "q");
    struct idx_result res[2] = {{.status = 0}, {.status = TERN_EQUEUEEXISTS}};
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    node_batcher_propose(&t.b);
    node_batcher_on_apply(&t.b, t.props[0].index, t.props[0].buf,
                          t.props[0].len, res, 2);
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);
    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 2);
    cr_expect_eq(t.answers[0].status, 0);
    cr_expect_eq(t.answers[1].status, TERN_EQUEUEEXISTS);
}

Test(batch, fail_pending_on_shutdown)
{
    struct proto_request r = produce_req("q", "a");
    t.b.max_cmds = 1;
    t.b.max_inflight = 0;
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r), 0);
    node_batcher_propose(&t.b);
    cr_expect_eq(t.n_props, 0);
    node_batcher_fail_pending(&t.b, TERN_ESHUTDOWN);
    cr_assert_eq(t.n_answers, 2);
    cr_expect_eq(t.answers[0].status, TERN_ESHUTDOWN);
    cr_expect(node_batcher_idle(&t.b));
}

Test(batch, oom_answers_instead_of_leaking)
{
    struct proto_request r = produce_req("q", "a");
    int rv;
    tern_alloc_fail_after(0);
    rv = node_batcher_add(&t.b, NULL, 1, &r);
    tern_alloc_fail_after(-1);
    cr_expect_eq(rv, -ENOMEM);
    node_batcher_propose(&t.b);
    cr_expect_eq(t.n_props, 0);
    cr_expect(node_batcher_idle(&t.b));
}

/* The open entry's buffer cannot grow for a request: the requests it
 * held are answered with the error, and the call that hit it fails
 * without an answer (its caller answers from the code; before, it was
 * answered inside the call that returned 0, ahead of the caller's own
 * bookkeeping). */
Test(batch, unusable_entry_fails_the_call_and_answers_the_others)
{
    struct proto_request r = produce_req("q", "a");
    static struct idx_settle_item items[IDX_SHARED_LIST_MAX];
    for (uint32_t i = 0; i < IDX_SHARED_LIST_MAX; i++) {
        items[i].offset = i;
        items[i].count = 1;
        items[i].action = IDX_SETTLE_ACK;
    }
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r), 0);
    cr_assert_eq(t.n_answers, 0);
    /* The settle's request is allocated, the entry's growth fails. */
    tern_alloc_fail_after(1);
    int rv =
        node_batcher_add_settle(&t.b, "q", "g", items, IDX_SHARED_LIST_MAX);
    tern_alloc_fail_after(-1);
    cr_expect_eq(rv, -ENOMEM);
    cr_assert_eq(t.n_answers, 1, "only the request the entry held");
    cr_expect_eq(t.answers[0].request_id, 1);
    cr_expect_eq(t.answers[0].status, -ENOMEM);
    node_batcher_propose(&t.b);
    cr_expect_eq(t.n_props, 0);
    cr_expect(node_batcher_idle(&t.b));
    /* The next request opens a new entry. */
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r), 0);
    node_batcher_propose(&t.b);
    cr_expect_eq(t.n_props, 1);
}

/* The real index applies the entry we built and the results come back in
 * request order. */
Test(batch, round_trip_through_index)
{
    char dir[] = "/tmp/ternd-batch-XXXXXX";
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct idx_options o;
    struct idx_env *e;
    struct idx_result res[8];
    unsigned nr = 0;
    char cmd[128];
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "rt");
    struct proto_request r2 = produce_req("rt", "one");
    struct proto_request r3 = produce_req("missing", "two");
    struct proto_request r4 = produce_req("rt", "three");

    cr_assert_not_null(mkdtemp(dir));
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    cr_assert_eq(idx_open(&o, &e, errmsg), 0, "%s", errmsg);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 3, &r3), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 4, &r4), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    cr_assert_eq(idx_apply(e, t.props[0].index, t.props[0].buf,
                           idx_cmd_entry_len(t.props[0].buf, t.props[0].len),
                           res, 8, &nr),
                 0, "%s", idx_errmsg(e));
    cr_assert_eq(nr, 4);
    node_batcher_on_apply(&t.b, t.props[0].index, t.props[0].buf,
                          t.props[0].len, res, nr);
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);
    cr_assert_eq(idx_flush(e), 0);
    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 4);
    cr_expect_eq(t.answers[0].status, 0);
    cr_expect_eq(t.answers[1].status, 0);
    cr_expect_eq(t.answers[1].result.count, 1);
    cr_expect_eq(t.answers[2].status, TERN_ENOQUEUE);
    cr_expect_eq(t.answers[3].status, 0);
    cr_expect_eq(t.answers[3].result.base_offset,
                 t.answers[1].result.base_offset + 1);
    idx_close(e);
    cr_assert_lt((size_t)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir),
                 sizeof(cmd));
    cr_expect_eq(system(cmd), 0);
}

static struct proto_request group_req(uint8_t op,
                                      const char *queue,
                                      const char *group)
{
    struct proto_request r = queue_req(op, queue);
    r.group = group;
    r.group_len = (uint16_t)strlen(group);
    return r;
}

/* A GROUP_FETCH rides the entry as a READ_BARRIER: answered (with what
 * the server needs to serve it) only after the entry is applied and
 * flushed, in order with the writes before it; the group commit before it
 * is visible in the index by then. */
Test(batch, group_fetch_waits_for_its_barrier)
{
    char dir[] = "/tmp/ternd-batch-XXXXXX";
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct idx_options o;
    struct idx_env *e;
    struct idx_result res[8];
    unsigned nr = 0;
    uint64_t off = 0;
    char cmd[128];
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "gq");
    struct proto_request r2 = produce_req("gq", "one");
    struct proto_request r3 = group_req(PROTO_OP_GROUP_COMMIT, "gq", "g");
    struct proto_request r4 = group_req(PROTO_OP_GROUP_FETCH, "gq", "g");
    struct proto_request bad = group_req(PROTO_OP_GROUP_FETCH, "gq", "");

    r3.offset = 1;
    r4.max_msgs = 7;
    r4.wait_ms = 250;
    cr_assert_not_null(mkdtemp(dir));
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    cr_assert_eq(idx_open(&o, &e, errmsg), 0, "%s", errmsg);
    cr_expect_eq(node_batcher_add(&t.b, NULL, 9, &bad), TERN_EBADNAME);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 3, &r3), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 4, &r4), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    cr_expect_eq(t.props[0].batch->n_cmds, 4, "the fetch added a command");
    cr_assert_eq(idx_apply(e, t.props[0].index, t.props[0].buf,
                           idx_cmd_entry_len(t.props[0].buf, t.props[0].len),
                           res, 8, &nr),
                 0, "%s", idx_errmsg(e));
    cr_assert_eq(nr, 4);
    node_batcher_on_apply(&t.b, t.props[0].index, t.props[0].buf,
                          t.props[0].len, res, nr);
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);
    cr_expect_eq(t.n_answers, 0, "no answer before the flush");
    cr_assert_eq(idx_flush(e), 0);
    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 4);
    cr_expect_eq(t.answers[2].status, 0);
    cr_expect_eq(t.answers[3].op, PROTO_OP_GROUP_FETCH);
    cr_expect_eq(t.answers[3].status, 0);
    cr_expect_str_eq(t.answers[3].queue, "gq");
    cr_expect_str_eq(t.answers[3].group, "g");
    cr_expect_eq(t.answers[3].max_msgs, 7);
    cr_expect_eq(t.answers[3].wait_ms, 250);
    cr_assert_eq(idx_group_offset(e, "gq", "g", &off), 0);
    cr_expect_eq(off, 1, "the commit before the barrier is visible");
    idx_close(e);
    cr_assert_lt((size_t)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir),
                 sizeof(cmd));
    cr_expect_eq(system(cmd), 0);
}

/* A barrier whose entry fails (leadership lost) fails the read: the client
 * retries it; nothing is served from a state that was not confirmed. */
Test(batch, group_fetch_fails_with_its_entry)
{
    struct proto_request r = group_req(PROTO_OP_GROUP_FETCH, "q", "g");
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    node_batcher_proposed(t.props[0].batch, TERN_ELEADERSHIPLOST,
                          t.props[0].index);
    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 1);
    cr_expect_eq(t.answers[0].status, TERN_ELEADERSHIPLOST);
}

Test(batch, entry_len_strips_only_padding)
{
    struct tern_wbuf e;
    struct idx_msg m = {"abc", 3};
    size_t real;
    tern_wbuf_init(&e);
    idx_cmd_begin(&e, 5);
    idx_cmd_produce(&e, "q", 0, 0, &m, 1);
    cr_assert_eq(idx_cmd_end(&e), 0);
    real = e.len;
    cr_expect_eq(idx_cmd_entry_len(e.base, e.len), real);
    while (e.len % 8 != 0) {
        tern_wbuf_u8(&e, 0);
    }
    if (real % 8 != 0) {
        cr_expect_eq(idx_cmd_entry_len(e.base, e.len), real);
        e.base[e.len - 1] = 1; /* not padding: leave it to the validator */
        cr_expect_eq(idx_cmd_entry_len(e.base, e.len), e.len);
    }
    cr_expect_eq(idx_cmd_entry_len(e.base, 10), 10);
    tern_wbuf_free(&e);
}

Test(batch, inflight_bytes_bound_keeps_one_going)
{
    char big[200];
    fill_text(big, sizeof big, 'y');
    t.b.max_cmds = 1;
    t.b.max_inflight_bytes = 100; /* smaller than one entry */
    add_produces(3, big);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1, "only one entry above the byte bound");
    node_batcher_proposed(t.props[0].batch, TERN_ELEADERSHIPLOST, 0);
    node_batcher_propose(&t.b);
    cr_expect_eq(t.n_props, 2);
}

Test(batch, oversized_request_gets_its_own_entry)
{
    char big[300];
    fill_text(big, sizeof big, 'z');
    t.b.max_entry_bytes = 100;
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "q");
    struct proto_request r2 = produce_req("q", big);
    struct proto_request r3 = queue_req(PROTO_OP_QUEUE_CREATE, "q2");
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 3, &r3), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 3);
    cr_expect_eq(t.props[1].batch->n_cmds, 1);
    cr_expect_gt(t.props[1].len, 300);
}

Test(batch, invalid_write_does_not_poison_the_entry)
{
    struct proto_request ok = queue_req(PROTO_OP_QUEUE_CREATE, "q");
    struct proto_request bad = produce_req("q", "x");
    struct proto_request empty = produce_req("q", "x");
    bad.producer_id = 5;
    bad.seq = 0;
    empty.n_msgs = 0;
    empty.msgs_len = 0;
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &ok), 0);
    cr_expect_eq(node_batcher_add(&t.b, NULL, 2, &bad), TERN_EINVAL);
    cr_expect_eq(node_batcher_add(&t.b, NULL, 3, &empty), TERN_EINVAL);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    cr_expect_eq(t.props[0].batch->n_cmds, 1);
    cr_expect_eq(t.n_answers, 0);
}

static uint64_t fake_term(void *arg)
{
    (void)arg;
    return 9;
}

static bool fake_xxh3_on;
static bool fake_xxh3(void *arg)
{
    (void)arg;
    return fake_xxh3_on;
}

/* With an xxh3 op an entry carries the XXH3 flag when it says so at the
 * entry's start; without one, never. The flagged entry validates and
 * applies into a record of version 2 (through a real index). */
Test(batch, xxh3_flag_follows_the_op)
{
    static const struct node_batcher_ops ops = {fake_propose, fake_respond,
                                                fake_time, NULL, fake_xxh3};
    char dir[] = "/tmp/ternd-batch-XXXXXX";
    char errmsg[TERN_ERRMSG_SIZE] = "";
    char cmd[128];
    struct idx_options o;
    struct idx_env *e;
    struct idx_result res[4];
    unsigned nr = 0;
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "xq");

    node_batcher_init(&t.b, &ops, NULL);
    fake_xxh3_on = false;
    add_produces(1, "a");
    node_batcher_propose(&t.b);
    fake_xxh3_on = true;
    cr_assert_eq(node_batcher_add(&t.b, NULL, 7, &r1), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 2);
    cr_expect_eq(tern_get_u16((const uint8_t *)t.props[0].buf + 2), 0,
                 "off: no flag");
    cr_expect_eq(tern_get_u16((const uint8_t *)t.props[1].buf + 2), 1,
                 "on: the XXH3 flag");
    size_t len = idx_cmd_entry_len(t.props[1].buf, t.props[1].len);
    cr_expect_eq(idx_cmd_validate(t.props[1].buf, len), 0);
    cr_assert_not_null(mkdtemp(dir));
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    cr_assert_eq(idx_open(&o, &e, errmsg), 0, "%s", errmsg);
    cr_assert_eq(idx_apply(e, 1, t.props[1].buf, len, res, 4, &nr), 0, "%s",
                 idx_errmsg(e));
    cr_expect_eq(res[0].status, 0, "the flagged entry applies");
    cr_expect(idx_xxh3_in_use(e));
    idx_close(e);
    cr_assert_lt((size_t)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir),
                 sizeof(cmd));
    cr_assert_eq(system(cmd), 0);
    node_batcher_proposed(t.props[0].batch, TERN_ESHUTDOWN, t.props[0].index);
    node_batcher_proposed(t.props[1].batch, TERN_ESHUTDOWN, t.props[1].index);
}

/* With a term op every entry starts with a TERM command of that term (13
 * bytes, counted in n_cmds), whose result answers nobody: the requests
 * get the results after it, through a real index too. */
Test(batch, term_first_in_every_entry)
{
    static const struct node_batcher_ops ops = {fake_propose, fake_respond,
                                                fake_time, fake_term, NULL};
    char dir[] = "/tmp/ternd-batch-XXXXXX";
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct idx_options o;
    struct idx_env *e;
    struct idx_result res[8];
    unsigned nr = 0;
    char cmd[128];
    struct proto_request r1 = queue_req(PROTO_OP_QUEUE_CREATE, "tq");
    struct proto_request r2 = produce_req("tq", "one");
    struct proto_request r3 = produce_req("missing", "two");
    const uint8_t *b;

    node_batcher_init(&t.b, &ops, NULL);
    cr_assert_not_null(mkdtemp(dir));
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    cr_assert_eq(idx_open(&o, &e, errmsg), 0, "%s", errmsg);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r1), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 2, &r2), 0);
    cr_assert_eq(node_batcher_add(&t.b, NULL, 3, &r3), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    cr_expect_eq(t.props[0].batch->n_cmds, 4, "TERM and three requests");
    b = t.props[0].buf;
    cr_expect_eq(tern_get_u32(b + 4), 4);
    cr_expect_eq(b[24], IDX_CMD_TERM, "TERM comes first");
    cr_expect_eq(tern_get_u32(b + 25), 8);
    cr_expect_eq(tern_get_u64(b + 29), 9);
    cr_assert_eq(idx_apply(e, t.props[0].index, t.props[0].buf,
                           idx_cmd_entry_len(t.props[0].buf, t.props[0].len),
                           res, 8, &nr),
                 0, "%s", idx_errmsg(e));
    cr_assert_eq(nr, 4);
    node_batcher_on_apply(&t.b, t.props[0].index, t.props[0].buf,
                          t.props[0].len, res, nr);
    node_batcher_proposed(t.props[0].batch, 0, t.props[0].index);
    cr_assert_eq(idx_flush(e), 0);
    node_batcher_flushed(&t.b);
    cr_assert_eq(t.n_answers, 3, "nobody is answered for the TERM");
    cr_expect_eq(t.answers[0].request_id, 1);
    cr_expect_eq(t.answers[0].status, 0);
    cr_expect_eq(t.answers[1].status, 0);
    cr_expect_eq(t.answers[1].result.count, 1);
    cr_expect_eq(t.answers[2].status, TERN_ENOQUEUE);

    struct idx_trace tr;
    cr_assert_eq(idx_message_trace(e, "tq", 0, &tr, NULL, NULL), 0, "%s",
                 idx_errmsg(e));
    cr_expect_eq(tr.term, 9);
    cr_expect_eq(tr.raft_index, t.props[0].index);

    /* A second entry gets its own TERM. */
    add_produces(1, "again");
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 2);
    cr_expect_eq(((const uint8_t *)t.props[1].buf)[24], IDX_CMD_TERM);
    cr_expect_eq(t.props[1].batch->n_cmds, 2);
    node_batcher_proposed(t.props[1].batch, TERN_ESHUTDOWN, t.props[1].index);
    cr_expect_eq(t.n_answers, 4);
    cr_expect_eq(t.answers[3].status, TERN_ESHUTDOWN);
    idx_close(e);
    cr_assert_lt((size_t)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir),
                 sizeof(cmd));
    cr_expect_eq(system(cmd), 0);
}

/* The backoff levels of a SETTLE retry, by delivery count. */
Test(batch, retry_delay_levels)
{
    cr_expect_eq(node_retry_delay_ms(0), 1000);
    cr_expect_eq(node_retry_delay_ms(1), 1000);
    cr_expect_eq(node_retry_delay_ms(2), 5000);
    cr_expect_eq(node_retry_delay_ms(4), 30000);
    cr_expect_eq(node_retry_delay_ms(5), 60000);
    cr_expect_eq(node_retry_delay_ms(16), 1800000);
    cr_expect_eq(node_retry_delay_ms(18), 7200000);
    cr_expect_eq(node_retry_delay_ms(UINT32_MAX), 7200000);
}

/* A SETTLE retry reaches the log as a nack with the level's delay: the
 * leader decides the delay, apply only reads it. */
Test(batch, settle_retry_becomes_nack_with_level_delay)
{
    struct proto_settle_item in[2] = {
        {.offset = 4, .count = 3, .action = PROTO_SETTLE_RETRY},
        {.offset = 9, .count = 1, .action = PROTO_SETTLE_ACK}};
    struct idx_settle_item want[2] = {
        {.offset = 4, .count = 3, .action = IDX_SETTLE_NACK, .delay_ms = 10000},
        {.offset = 9, .count = 1, .action = IDX_SETTLE_ACK}};
    struct tern_wbuf fw, cw;
    struct proto_header h;
    struct proto_request r;
    const void *body = NULL;
    tern_wbuf_init(&fw);
    cr_assert_eq(proto_encode_settle(&fw, 1, "q", "g", in, 2), 0);
    cr_assert_eq(
        proto_frame_parse(fw.base, fw.len, PROTO_DEFAULT_MAX_BODY, &h, &body),
        0);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    tern_wbuf_init(&cw);
    idx_cmd_begin(&cw, 0);
    size_t from = cw.len;
    idx_cmd_settle(&cw, "q", "g", want, 2);
    cr_assert_eq(cw.err, 0);

    cr_assert_eq(node_batcher_add(&t.b, NULL, 1, &r), 0);
    node_batcher_propose(&t.b);
    cr_assert_eq(t.n_props, 1);
    cr_expect_not_null(
        memmem(t.props[0].buf, t.props[0].len, cw.base + from, cw.len - from),
        "the retry is a nack of 10 s (third delivery)");
    tern_wbuf_free(&cw);
    tern_wbuf_free(&fw);
}
