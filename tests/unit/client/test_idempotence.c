/*
 * libtern's idempotent producer: a retried batch keeps its producer id and
 * sequence, so it is appended once; in-flight batches are resent in
 * sequence order after TERN_ESEQUENCE or a dropped connection, and renumbered
 * under a fresh producer id after a batch failed for good.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "client_int.h"
#include "fake_server.h"

/* ---- Retry after a dropped connection ---- */

static enum fake_action drop_first_produce_hook(struct fake_server *fs,
                                                int conn,
                                                const struct proto_header *h,
                                                const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE && fs->counter++ == 0) {
        /* Append, then lose the answer with the connection. */
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        fake_model_answer(fs, h, r, &w);
        tern_wbuf_free(&w);
        return FAKE_DROP;
    }
    return FAKE_DEFAULT;
}

Test(client, retry_after_drop_reuses_producer_and_sequence)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m[2] = {{"p-0", 3}, {"p-1", 3}};
    uint64_t base = 77;
    cr_assert_eq(fake_start(&fs, drop_first_produce_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", m, 2, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0, "retry must return the original offsets");
    cr_assert_eq(fake_n_records(&fs), 2);
    struct fake_record a = fake_record_at(&fs, 0);
    struct fake_record b = fake_record_at(&fs, 1);
    cr_expect_eq(a.producer_id, tern_client_producer_id(c));
    cr_expect_eq(b.producer_id, a.producer_id);
    cr_expect_eq(a.seq, 1);
    cr_expect_eq(b.seq, 1);
    (void)pthread_mutex_lock(&fs.mu);
    cr_expect_eq(fs.n_accepts, 2, "the retry uses a new connection");
    (void)pthread_mutex_unlock(&fs.mu);
    cr_expect_eq(fake_n_msgs(&fs), 2, "appended exactly once");
    /* The next batch gets the next sequence. */
    cr_expect_eq(tern_produce(c, "q", m, 1, &base), 0);
    cr_expect_eq(base, 2);
    cr_expect_eq(fake_record_at(&fs, 2).seq, 2);
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- ESEQUENCE: resend in order after a lost first batch ---- */

static enum fake_action sequence_hook(struct fake_server *fs,
                                      int conn,
                                      const struct proto_header *h,
                                      const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_PRODUCE || fs->counter >= 3) {
        return FAKE_DEFAULT;
    }
    /* Round 1 (a leader change): batch 1 is lost (answered late with
     * "leadership lost"), 2 and 3 see the gap. */
    fs->counter++;
    tern_wbuf_init(&w);
    if (r->seq == 1) {
        proto_encode_error(&w, h->op, h->request_id, TERN_ELEADERSHIPLOST,
                           "leadership lost", 0, NULL);
        fake_defer(fs, conn, &w);
    } else {
        fake_model_answer(fs, h, r, &w); /* ESEQUENCE: 1 is missing */
        fake_send(fs, conn, &w);
    }
    if (fs->counter == 3) {
        fake_flush_deferred(fs, 0);
    }
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(client, esequence_resends_in_flight_batches_in_order)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[3];
    const char *p[3] = {"one", "two", "three"};
    cr_assert_eq(fake_start(&fs, sequence_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 3; i++) {
        struct tern_msg m = {p[i], strlen(p[i])};
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_assert_eq(log.n, 3);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(log.status[i], 0, "batch %d: %s", i,
                     tern_strerror(log.status[i]));
        cr_expect_eq(log.base[i], (uint64_t)i);
    }
    cr_assert_eq(fake_n_msgs(&fs), 3);
    for (uint64_t k = 0; k < 3; k++) {
        char *got = fake_msg(&fs, k);
        cr_expect_str_eq(got, p[k]);
        free(got);
    }
    /* Every resend kept its producer id and sequence. */
    int n = fake_n_records(&fs);
    cr_expect_geq(n, 6);
    for (int i = 0; i < n; i++) {
        struct fake_record rec = fake_record_at(&fs, i);
        cr_expect_eq(rec.producer_id, tern_client_producer_id(c));
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- ESEQUENCE after a batch failed for good: renumber ---- */

Test(client, esequence_after_failed_batch_renumbers)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[2];
    struct tern_msg m = {"z", 1};
    cr_assert_eq(fake_start(&fs, fail_first_produce_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 2; i++) {
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_expect_eq(log.status[0], TERN_ETOOBIG);
    cr_expect_eq(log.status[1], 0);
    cr_expect_eq(fake_n_msgs(&fs), 1);
    int n = fake_n_records(&fs);
    cr_assert_geq(n, 3);
    struct fake_record last = fake_record_at(&fs, n - 1);
    cr_expect_neq(last.producer_id, tern_client_producer_id(c));
    cr_expect_eq(last.seq, 1);
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- A dropped connection with several batches in flight ---- */

static enum fake_action drop_after_four_hook(struct fake_server *fs,
                                             int conn,
                                             const struct proto_header *h,
                                             const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_PRODUCE || fs->counter >= 4) {
        return FAKE_DEFAULT;
    }
    /* Append the first four batches but lose every answer. */
    fs->counter++;
    tern_wbuf_init(&w);
    fake_model_answer(fs, h, r, &w);
    tern_wbuf_free(&w);
    return fs->counter == 4 ? FAKE_DROP : FAKE_SILENT;
}

Test(client, drop_with_batches_in_flight_resends_in_order_once)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[5];
    char payload[5][4];
    cr_assert_eq(fake_start(&fs, drop_after_four_hook), 0);
    c = client_for(fs.addr, 5000, 4);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 5; i++) {
        struct tern_msg m;
        (void)snprintf(payload[i], sizeof payload[i], "d%d", i);
        m.data = payload[i];
        m.len = strlen(payload[i]);
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_assert_eq(log.n, 5);
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(log.status[i], 0, "batch %d: %s", i,
                     tern_strerror(log.status[i]));
    }
    /* 1..3 were acknowledged as forgotten duplicates, 4 as a remembered
     * one, 5 appended fresh. */
    cr_expect_eq(log.count[0], 0);
    cr_expect_eq(log.count[3], 1);
    cr_expect_eq(log.base[3], 3);
    cr_expect_eq(log.base[4], 4);
    cr_assert_eq(fake_n_msgs(&fs), 5, "each batch appended exactly once");
    for (uint64_t k = 0; k < 5; k++) {
        char want[4];
        char *got = fake_msg(&fs, k);
        (void)snprintf(want, sizeof want, "d%d", (int)k);
        cr_expect_str_eq(got, want);
        free(got);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- A producer of many queues ---- */

/* Appends a PRODUCE to whatever queue it names (the model knows one). */
static enum fake_action any_queue_hook(struct fake_server *fs,
                                       int conn,
                                       const struct proto_header *h,
                                       const struct proto_request *r)
{
    if (r->op != PROTO_OP_PRODUCE) {
        return FAKE_DEFAULT;
    }
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    (void)proto_encode_produce_resp(&w, h->request_id, (uint64_t)fs->counter,
                                    r->n_msgs, 0);
    fs->counter += (int)r->n_msgs;
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

#define MANY_QUEUES 120

Test(client, many_queues_each_keep_their_own_sequence)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    char q[16];
    cr_assert_eq(fake_start(&fs, any_queue_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    /* Round 1 in name order, round 2 in reverse: more queues than the
     * producer's first lookup table has buckets. */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < MANY_QUEUES; i++) {
            int k = round == 0 ? i : MANY_QUEUES - 1 - i;
            (void)snprintf(q, sizeof q, "mq%03d", k);
            cr_assert_eq(tern_produce(c, q, &m, 1, NULL), 0, "%s: %s", q,
                         tern_client_errmsg(c));
        }
    }
    cr_assert_eq(fake_n_records(&fs), 2 * MANY_QUEUES);
    for (int i = 0; i < 2 * MANY_QUEUES; i++) {
        struct fake_record r = fake_record_at(&fs, i);
        cr_expect_eq(r.producer_id, tern_client_producer_id(c),
                     "record %d: one producer id for every queue", i);
        cr_expect_eq(r.seq, (uint64_t)(i < MANY_QUEUES ? 1 : 2),
                     "record %d: the queue's own next sequence", i);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- The bound of per-queue states (producer.c, "Bound") ---- */

/* Record i must carry producer id pid and sequence seq. */
static void expect_record(struct fake_server *fs,
                          int i,
                          uint64_t pid,
                          uint64_t seq)
{
    struct fake_record r = fake_record_at(fs, i);
    cr_expect_eq(r.producer_id, pid, "record %d: producer id %llx, want %llx",
                 i, (unsigned long long)r.producer_id, (unsigned long long)pid);
    cr_expect_eq(r.seq, seq, "record %d: seq %llu, want %llu", i,
                 (unsigned long long)r.seq, (unsigned long long)seq);
}

static void produce_to(struct tern_client *c, const char *q)
{
    struct tern_msg m = {"x", 1};
    cr_assert_eq(tern_produce(c, q, &m, 1, NULL), 0, "%s: %s", q,
                 tern_client_errmsg(c));
}

/* Past the bound the least recently used state goes; the queue's next
 * produce starts under a fresh producer id. Reusing the old id at
 * sequence 1 would be taken by the server for a duplicate of the old
 * first batch: acknowledged, never appended. */
Test(client, queue_states_are_bounded_and_a_dropped_queue_starts_fresh)
{
    struct fake_server fs;
    struct tern_client *c;
    uint64_t base, q4_pid, q1_pid;
    cr_assert_eq(fake_start(&fs, any_queue_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    c->pq_max = 4;
    produce_to(c, "q0");
    base = tern_client_producer_id(c);
    produce_to(c, "q1");
    produce_to(c, "q2");
    produce_to(c, "q3");
    produce_to(c, "q0"); /* used: q1 is now the least recently used */
    produce_to(c, "q4"); /* drops q1 */
    produce_to(c, "q1"); /* drops q2; q1 starts again */
    produce_to(c, "q0"); /* kept all along */
    cr_assert_eq(fake_n_records(&fs), 8);
    for (int i = 0; i < 4; i++) {
        expect_record(&fs, i, base, 1);
    }
    expect_record(&fs, 4, base, 2);
    q4_pid = fake_record_at(&fs, 5).producer_id;
    q1_pid = fake_record_at(&fs, 6).producer_id;
    cr_expect_neq(q4_pid, base, "a state made after a drop: fresh id");
    expect_record(&fs, 5, q4_pid, 1);
    cr_expect_neq(q1_pid, base, "q1 came back under its old id");
    cr_expect_neq(q1_pid, q4_pid);
    expect_record(&fs, 6, q1_pid, 1);
    expect_record(&fs, 7, base, 3);
    cr_expect_eq(c->n_pqs, 4);
    cr_expect_eq(c->pq_dropped, 2);
    tern_client_free(c);
    fake_stop(&fs);
}

/* The first PRODUCE of queue "held" is kept unanswered until released. */
static enum fake_action hold_first_hook(struct fake_server *fs,
                                        int conn,
                                        const struct proto_header *h,
                                        const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE && r->queue_len == 4 &&
        memcmp(r->queue, "held", 4) == 0 && fs->n_deferred == 0 &&
        fs->peer_addr[0] == '\0') {
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        (void)proto_encode_produce_resp(&w, h->request_id, 0, r->n_msgs, 0);
        fake_defer(fs, conn, &w);
        tern_wbuf_free(&w);
        fs->peer_addr[0] = 'x'; /* deferred once */
        return FAKE_HANDLED;
    }
    return any_queue_hook(fs, conn, h, r);
}

static void flush_deferred(struct fake_server *fs)
{
    pthread_mutex_lock(&fs->mu);
    fake_flush_deferred(fs, 0);
    pthread_mutex_unlock(&fs->mu);
}

/* A state a request holds is never dropped, even as the least recently
 * used: its batch's answer and the queue's next sequence need it. */
Test(client, a_held_queue_state_is_not_dropped)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log = {0};
    struct done_ctx ctx = {&log, 0};
    struct tern_msg m = {"x", 1};
    uint64_t base;
    int held_rec = -1;
    cr_assert_eq(fake_start(&fs, hold_first_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    c->pq_max = 2;
    produce_to(c, "a");
    base = tern_client_producer_id(c);
    cr_assert_eq(tern_produce_async(c, "held", &m, 1, on_done, &ctx), 0);
    for (int i = 0; i < 200 && fake_n_records(&fs) < 2; i++) {
        (void)tern_client_poll(c, 10);
    }
    cr_assert_eq(fake_n_records(&fs), 2, "the held batch never arrived");
    produce_to(c, "b"); /* "a", the least recently used, goes */
    produce_to(c, "c"); /* "held" is older than "b" but held: "b" goes */
    flush_deferred(&fs);
    drain(c);
    cr_expect_eq(log.n, 1);
    cr_expect_eq(log.status[0], 0);
    produce_to(c, "held");
    for (int i = 0; i < fake_n_records(&fs); i++) {
        if (fake_record_at(&fs, i).seq == 2) {
            held_rec = i;
        }
    }
    cr_expect_eq(held_rec, fake_n_records(&fs) - 1,
                 "\"held\" went on with its own sequence");
    expect_record(&fs, fake_n_records(&fs) - 1, base, 2);
    cr_expect_eq(c->pq_dropped, 2);
    tern_client_free(c);
    fake_stop(&fs);
}

/* A resend to a queue without a state fails without making one (and so
 * without dropping the state of another queue at the bound). */
Test(client, resend_without_a_state_makes_none)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    cr_assert_eq(fake_start(&fs, any_queue_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    c->pq_max = 2;
    produce_to(c, "a");
    produce_to(c, "b");
    cr_expect_eq(tern_produce_resend(c, "never", &m, 1, NULL), TERN_EINVAL);
    cr_expect_eq(c->n_pqs, 2);
    cr_expect_eq(c->pq_dropped, 0);
    cr_expect_null(tern__pq_find(c, "never"));
    tern_client_free(c);
    fake_stop(&fs);
}
