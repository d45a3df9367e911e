/*
 * libtern's attempt deadlines (attempt_timeout_ms): a leader that goes
 * silent (a paused process: its connection stays up, nothing comes back)
 * is abandoned for another server and the batch lands there once under
 * its producer id and sequence; the request deadline still ends a request
 * no server answers; a leader that is slow to answer a write but answers
 * the engine's STATUS probes is never abandoned.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

/* Hook: while fs->counter is non-zero the server is "paused": it reads
 * every request and answers none (STATUS probes included). */
static enum fake_action pausable_hook(struct fake_server *fs,
                                      int conn,
                                      const struct proto_header *h,
                                      const struct proto_request *r)
{
    (void)conn;
    (void)h;
    (void)r;
    return fs->counter != 0 ? FAKE_SILENT : FAKE_DEFAULT;
}

static void set_paused(struct fake_server *fs, int paused)
{
    (void)pthread_mutex_lock(&fs->mu);
    fs->counter = paused;
    (void)pthread_mutex_unlock(&fs->mu);
}

/* A client for servers with the given request and attempt timeouts. */
static struct tern_client *client_with(const char *servers,
                                       int request_timeout_ms,
                                       int attempt_timeout_ms)
{
    struct tern_client_options o;
    struct tern_client *c = NULL;
    tern_client_options_init(&o);
    o.request_timeout_ms = request_timeout_ms;
    o.attempt_timeout_ms = attempt_timeout_ms;
    o.retry_backoff_ms = 5;
    o.connect_timeout_ms = 500;
    cr_assert_eq(tern_client_new(servers, &o, &c), 0);
    return c;
}

/* Create queue q on the fake server at addr alone. */
static void create_on(const char *addr, const char *q)
{
    struct tern_client *c = client_for(addr, 2000, 8);
    create_queue(c, q);
    tern_client_free(c);
}

Test(client, silent_leader_is_abandoned_after_the_attempt_timeout)
{
    struct fake_server a, b;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    struct fake_record ra, rb;
    char servers[160];
    uint64_t base = 99;
    int64_t t0, took;
    cr_assert_eq(fake_start(&a, pausable_hook), 0);
    cr_assert_eq(fake_start(&b, NULL), 0);
    create_on(a.addr, "q");
    create_on(b.addr, "q");
    (void)snprintf(servers, sizeof servers, "%s,%s", a.addr, b.addr);

    /* A leads: the first batch lands there. */
    c = client_with(servers, 5000, 100);
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0);
    cr_assert_str_eq(tern_client_leader(c), a.addr);
    cr_expect_eq(fake_n_records(&a), 1);

    /* B holds A's log (replication): the producer's first batch. */
    (void)pthread_mutex_lock(&a.mu);
    (void)pthread_mutex_lock(&b.mu);
    b.dedup_producer = a.dedup_producer;
    b.dedup_last_seq = a.dedup_last_seq;
    b.dedup_base = a.dedup_base;
    b.dedup_count = a.dedup_count;
    (void)pthread_mutex_unlock(&b.mu);
    (void)pthread_mutex_unlock(&a.mu);

    /* A is paused: the next batch goes to B before the request deadline
     * (5 s: TERN_ETIMEDOUT otherwise), once. */
    set_paused(&a, 1);
    t0 = now_ms();
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), 0, "%s",
                 tern_client_errmsg(c));
    took = now_ms() - t0;
    cr_log_info("silent leader left after %lld ms", (long long)took);
    cr_expect_eq(base, 0); /* B's log had nothing yet */
    cr_assert_str_eq(tern_client_leader(c), b.addr);
    cr_assert_eq(fake_n_records(&a), 2);
    cr_assert_eq(fake_n_records(&b), 1);
    /* The resend is the same batch: same producer id and sequence, so a
     * cluster that had appended A's copy answers B's as a duplicate. */
    ra = fake_record_at(&a, 1);
    rb = fake_record_at(&b, 0);
    cr_expect_eq(ra.producer_id, rb.producer_id);
    cr_expect_eq(ra.seq, rb.seq);
    cr_expect_eq(fake_n_msgs(&b), 1);

    /* A wakes up and answers nothing of use (its answers were to
     * abandoned attempts); later batches stay on B, each appended once. */
    set_paused(&a, 0);
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), 0);
    cr_expect_eq(base, 1);
    cr_expect_eq(fake_n_records(&b), 2);
    cr_expect_eq(fake_n_msgs(&b), 2);
    cr_expect_eq(fake_n_records(&a), 2);
    tern_client_free(c);
    fake_stop(&a);
    fake_stop(&b);
}

Test(client, silent_cluster_still_times_out_at_the_request_deadline)
{
    struct fake_server a, b;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    char servers[160];
    int64_t t0, took;
    cr_assert_eq(fake_start(&a, pausable_hook), 0);
    cr_assert_eq(fake_start(&b, pausable_hook), 0);
    create_on(a.addr, "q");
    create_on(b.addr, "q");
    (void)snprintf(servers, sizeof servers, "%s,%s", a.addr, b.addr);
    c = client_with(servers, 1200, 100);
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    set_paused(&a, 1);
    set_paused(&b, 1);
    t0 = now_ms();
    cr_expect_eq(tern_produce(c, "q", &m, 1, NULL), TERN_ETIMEDOUT);
    took = now_ms() - t0;
    cr_expect_geq(took, 1100);
    cr_expect_neq(tern_client_errmsg(c)[0], '\0');
    /* The attempt timeout doubles per abandon (100, 200, 400, 800 ms):
     * within 1.2 s the batch was sent a handful of times, not in a loop. */
    cr_expect_leq(fake_n_records(&a) + fake_n_records(&b), 1 + 5);
    cr_expect_geq(fake_n_records(&b), 1);
    cr_log_info("sends while the cluster was silent: %d",
                fake_n_records(&a) + fake_n_records(&b) - 1);
    tern_client_free(c);
    fake_stop(&a);
    fake_stop(&b);
}

/* Hook: a leader slow to commit: PRODUCE answers are held back until the
 * fourth STATUS request after it (the engine's probes), which the model
 * answers at once. */
static enum fake_action slow_hook(struct fake_server *fs,
                                  int conn,
                                  const struct proto_header *h,
                                  const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op == PROTO_OP_PRODUCE) {
        tern_wbuf_init(&w);
        fake_model_answer(fs, h, r, &w);
        fake_defer(fs, conn, &w);
        tern_wbuf_free(&w);
        fs->counter = 0;
        return FAKE_HANDLED;
    }
    if (r->op == PROTO_OP_STATUS && fs->n_deferred > 0 && ++fs->counter >= 4) {
        fake_flush_deferred(fs, 0);
    }
    return FAKE_DEFAULT;
}

Test(client, slow_but_answering_leader_is_not_abandoned)
{
    struct fake_server a, b;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    char servers[160];
    uint64_t base = 99;
    int64_t t0, took;
    cr_assert_eq(fake_start(&a, NULL), 0);
    cr_assert_eq(fake_start(&b, NULL), 0);
    create_on(a.addr, "q");
    create_on(b.addr, "q");
    (void)pthread_mutex_lock(&b.mu);
    b.status_follower = 1; /* the leader watch hears A leads */
    (void)snprintf(b.peer_addr, sizeof b.peer_addr, "%s", a.addr);
    (void)pthread_mutex_unlock(&b.mu);
    (void)snprintf(servers, sizeof servers, "%s,%s", a.addr, b.addr);
    c = client_with(servers, 5000, 100);
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), 0);
    cr_assert_str_eq(tern_client_leader(c), a.addr);

    (void)pthread_mutex_lock(&a.mu);
    a.hook = slow_hook;
    (void)pthread_mutex_unlock(&a.mu);
    t0 = now_ms();
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), 0, "%s",
                 tern_client_errmsg(c));
    took = now_ms() - t0;
    cr_log_info("slow answer after %lld ms", (long long)took);
    /* Answered after four probes, i.e. past the attempt timeout (each
     * probe goes out after half of it without a byte)... */
    cr_expect_geq(took, 100);
    /* ...by A, with the batch sent once, and B never asked. */
    cr_expect_eq(base, 1);
    cr_expect_eq(fake_n_records(&a), 2);
    cr_expect_eq(fake_n_records(&b), 0);
    cr_expect_eq(fake_n_msgs(&a), 2);
    cr_expect_str_eq(tern_client_leader(c), a.addr);
    tern_client_free(c);
    fake_stop(&a);
    fake_stop(&b);
}

/* Three servers for the tests below: A (pausable_hook) leading, B and C
 * with the given hooks, queue "q" created on each; B's leader hints name
 * A (follows 'a') or C ('c'), and with 'a' its STATUS answers say it
 * follows A (else the fake's default, a writable leader). The servers
 * list "A,B,C" is written to servers[size]. */
static void start_three(struct fake_server *a,
                        struct fake_server *b,
                        struct fake_server *cc,
                        fake_hook_cb b_hook,
                        fake_hook_cb c_hook,
                        char follows,
                        char *servers,
                        size_t size)
{
    cr_assert_eq(fake_start(a, pausable_hook), 0);
    cr_assert_eq(fake_start(b, b_hook), 0);
    cr_assert_eq(fake_start(cc, c_hook), 0);
    create_on(a->addr, "q");
    create_on(b->addr, "q");
    create_on(cc->addr, "q");
    (void)pthread_mutex_lock(&b->mu);
    b->status_follower = follows == 'a';
    (void)snprintf(b->peer_addr, sizeof b->peer_addr, "%s",
                   follows == 'a' ? a->addr : cc->addr);
    (void)pthread_mutex_unlock(&b->mu);
    (void)snprintf(servers, size, "%s,%s,%s", a->addr, b->addr, cc->addr);
}

/* An election after the leader went silent, as ternd answers it: until
 * elect_at (ms; 0: not set yet, set by the first write asked) B and C
 * know no leader, answer writes TERN_ENOTLEADER without a hint (a held
 * write whose hold ran out, server.c) and STATUS as followers; then C
 * leads (STATUS: the writable leader) and B names it. */
static int64_t elect_at;

static enum fake_action electing_hook(struct fake_server *fs,
                                      int conn,
                                      const struct proto_header *h,
                                      const struct proto_request *r)
{
    int64_t now = now_ms();
    int64_t at = __atomic_load_n(&elect_at, __ATOMIC_SEQ_CST);
    int elected = at != 0 && now >= at;
    if (r->op == PROTO_OP_STATUS) {
        fs->status_follower = !elected || fs->counter != 0;
        return FAKE_DEFAULT;
    }
    if (r->op != PROTO_OP_PRODUCE) {
        return FAKE_DEFAULT;
    }
    if (at == 0) {
        __atomic_store_n(&elect_at, now + 250, __ATOMIC_SEQ_CST);
    }
    if (!elected) {
        fake_send_error(fs, conn, h, TERN_ENOTLEADER, NULL);
        return FAKE_HANDLED;
    }
    if (fs->counter != 0) { /* B: a follower of C */
        fake_send_error(fs, conn, h, TERN_ENOTLEADER, fs->peer_addr);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}

/* A silent, B and C answer "not the leader" without a hint for a while
 * (A's successor is being elected): the engine goes round B and C, never
 * back to A while A is silent (it would wait there a doubled attempt
 * timeout), and the batch lands on C once. */
Test(client, no_leader_answers_skip_the_silent_server)
{
    struct fake_server a, b, cc;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    char servers[240];
    int64_t t0, took;
    start_three(&a, &b, &cc, electing_hook, electing_hook, 'c', servers,
                sizeof servers);
    (void)pthread_mutex_lock(&b.mu);
    b.counter = 1; /* B follows C once elected (electing_hook) */
    (void)pthread_mutex_unlock(&b.mu);
    c = client_with(servers, 5000, 100);
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    cr_assert_str_eq(tern_client_leader(c), a.addr);
    set_paused(&a, 1);
    t0 = now_ms();
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0, "%s",
                 tern_client_errmsg(c));
    took = now_ms() - t0;
    cr_log_info("landed %lld ms after the leader went silent", (long long)took);
    cr_expect_str_eq(tern_client_leader(c), cc.addr);
    /* A saw the first batch and the abandoned attempt of the second,
     * nothing after: A is silent for 4 attempt timeouts (400 ms) after the
     * abandon, longer than the election (250 ms after B's first answer). */
    cr_expect_eq(fake_n_records(&a), 2);
    cr_expect_geq(fake_n_records(&b) + fake_n_records(&cc), 2,
                  "went round B and C");
    cr_expect_eq(fake_n_msgs(&cc), 1);
    tern_client_free(c);
    fake_stop(&a);
    fake_stop(&b);
    fake_stop(&cc);
}

/* The leader watch: A goes silent; B follows A (its status says so), C
 * has been elected. Half an attempt timeout into the silence the engine
 * asks B and C for their status and moves the batch to C at once: the
 * request deadline (900 ms) is shorter than the attempt timeout (1000
 * ms), so without the watch the request would end in TERN_ETIMEDOUT. */
Test(client, leader_watch_moves_to_the_new_leader)
{
    struct fake_server a, b, cc;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    char servers[240];
    start_three(&a, &b, &cc, NULL, NULL, 'a', servers, sizeof servers);
    c = client_with(servers, 900, 1000);
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    cr_assert_str_eq(tern_client_leader(c), a.addr);
    set_paused(&a, 1);
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_str_eq(tern_client_leader(c), cc.addr);
    cr_expect_eq(fake_n_records(&a), 2);
    cr_expect_eq(fake_n_records(&b), 0, "B follows A: never asked to write");
    cr_expect_eq(fake_n_msgs(&cc), 1);
    tern_client_free(c);
    fake_stop(&a);
    fake_stop(&b);
    fake_stop(&cc);
}

/* The control: the others all follow the silent A (no election yet), so
 * the watch moves nothing and the request waits out its deadline. */
Test(client, leader_watch_never_moves_to_a_follower)
{
    struct fake_server a, b;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    char servers[160];
    cr_assert_eq(fake_start(&a, pausable_hook), 0);
    cr_assert_eq(fake_start(&b, NULL), 0);
    create_on(a.addr, "q");
    create_on(b.addr, "q");
    (void)pthread_mutex_lock(&b.mu);
    b.status_follower = 1;
    (void)snprintf(b.peer_addr, sizeof b.peer_addr, "%s", a.addr);
    (void)pthread_mutex_unlock(&b.mu);
    (void)snprintf(servers, sizeof servers, "%s,%s", a.addr, b.addr);
    c = client_with(servers, 900, 1000);
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    set_paused(&a, 1);
    cr_expect_eq(tern_produce(c, "q", &m, 1, NULL), TERN_ETIMEDOUT);
    cr_expect_eq(fake_n_records(&b), 0);
    cr_expect_geq(fake_n_requests(&b), 1 + 1, "B was watched");
    tern_client_free(c);
    fake_stop(&a);
    fake_stop(&b);
}
