/*
 * tern_fetch's read-ahead (tern_client_options.fetch_read_ahead) against
 * the fake server: the next fetch is asked while the caller works and
 * served from that answer; an answer that reached the queue's end is
 * never served (an acknowledged produce is seen); a different fetch, a
 * failed read-ahead and a client freed with one in flight all end clean;
 * off, one request per call; by default on for READ_ANY and READ_FIRST,
 * off for READ_LEADER.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <tern/tern.h>

#include "client_fixture.h"
#include "fake_server.h"

#define RA_MAX 256

/* What the hook saw and does (fs->hook_arg; fs->mu held). */
struct ra_log
{
    int n;
    uint64_t offset[RA_MAX]; /* FETCH offsets in arrival order */
    int fail_at;             /* >= 0: the first FETCH from this offset
                                is answered TERN_ENOQUEUE (final) */
    int silent_at;           /* >= 0: FETCH from here is never answered */
};

static enum fake_action ra_hook(struct fake_server *fs,
                                int conn,
                                const struct proto_header *h,
                                const struct proto_request *r)
{
    struct ra_log *l = fs->hook_arg;
    if (l == NULL || r->op != PROTO_OP_FETCH) {
        return FAKE_DEFAULT;
    }
    if (l->n < RA_MAX) {
        l->offset[l->n++] = r->offset;
    }
    if (l->silent_at >= 0 && r->offset == (uint64_t)l->silent_at) {
        return FAKE_SILENT;
    }
    if (l->fail_at >= 0 && r->offset == (uint64_t)l->fail_at) {
        l->fail_at = -1;
        fake_send_error(fs, conn, h, TERN_ENOQUEUE, NULL);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}

/* How many FETCH requests from offset the server saw so far. */
static int fetches_at(struct fake_server *fs, struct ra_log *l, uint64_t off)
{
    int n = 0;
    pthread_mutex_lock(&fs->mu);
    for (int i = 0; i < l->n; i++) {
        n += l->offset[i] == off;
    }
    pthread_mutex_unlock(&fs->mu);
    return n;
}

static int fetches(struct fake_server *fs, struct ra_log *l)
{
    int n;
    pthread_mutex_lock(&fs->mu);
    n = l->n;
    pthread_mutex_unlock(&fs->mu);
    return n;
}

/* Wait (bounded) until the server saw n FETCH requests. */
static void wait_fetches(struct fake_server *fs, struct ra_log *l, int n)
{
    int64_t end = now_ms() + 5000;
    while (fetches(fs, l) < n && now_ms() < end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_geq(fetches(fs, l), n, "the server saw %d fetches, not %d",
                  fetches(fs, l), n);
}

static void start(struct fake_server *fs, struct ra_log *l)
{
    memset(l, 0, sizeof *l);
    l->fail_at = -1;
    l->silent_at = -1;
    cr_assert_eq(fake_start(fs, ra_hook), 0);
    pthread_mutex_lock(&fs->mu);
    fs->hook_arg = l;
    pthread_mutex_unlock(&fs->mu);
}

/* A client with fetch_read_ahead read_ahead reading from read_from. */
static struct tern_client *client_from(const char *addr,
                                       int read_ahead,
                                       int read_from)
{
    struct tern_client_options o;
    struct tern_client *c = NULL;
    tern_client_options_init(&o);
    cr_expect_eq(o.fetch_read_ahead, 0, "the default is 0");
    o.request_timeout_ms = 2000;
    o.retry_backoff_ms = 5;
    o.fetch_read_ahead = read_ahead;
    o.read_from = read_from;
    cr_assert_eq(tern_client_new(addr, &o, &c), 0);
    return c;
}

/* Produce n messages "m<i>" to q, from number first. */
static void produce_n(struct tern_client *c, int first, int n)
{
    char text[32][8];
    struct tern_msg m[32];
    cr_assert_leq(n, 32);
    for (int i = 0; i < n; i++) {
        int len = snprintf(text[i], sizeof text[i], "m%d", first + i);
        m[i].data = text[i];
        m[i].len = (size_t)len;
    }
    cr_assert_eq(tern_produce(c, "q", m, (size_t)n, NULL), 0);
}

/* Fetch up to max from off and check it holds "m<off>".. in order;
 * returns the count. */
static size_t fetch_check(struct tern_client *c, uint64_t off, uint32_t max)
{
    struct tern_fetch_result *r = NULL;
    size_t n;
    cr_assert_eq(tern_fetch(c, "q", off, max, 0, 0, &r), 0, "%s",
                 tern_client_errmsg(c));
    n = tern_fetch_result_count(r);
    for (size_t i = 0; i < n; i++) {
        const void *data;
        size_t len;
        uint64_t o;
        char want[32];
        cr_assert_eq(tern_fetch_result_get(r, i, &o, NULL, &data, &len), 0);
        int wl =
            snprintf(want, sizeof want, "m%llu", (unsigned long long)(off + i));
        cr_expect_eq(o, off + i);
        cr_expect(len == (size_t)wl && memcmp(data, want, len) == 0,
                  "message %zu of the fetch from %llu", i,
                  (unsigned long long)off);
    }
    cr_expect_eq(tern_fetch_result_next_offset(r), off + n);
    tern_fetch_result_free(r);
    return n;
}

/* One case: the fake server with the hook's settings, a client, queue q
 * holding m0..m<n-1>. */
struct ra_case
{
    struct fake_server fs;
    struct ra_log l;
    struct tern_client *c;
};

static void ra_begin(struct ra_case *t,
                     int n,
                     int fail_at,
                     int silent_at,
                     int read_ahead,
                     int read_from)
{
    start(&t->fs, &t->l);
    pthread_mutex_lock(&t->fs.mu);
    t->l.fail_at = fail_at;
    t->l.silent_at = silent_at;
    pthread_mutex_unlock(&t->fs.mu);
    t->c = client_from(t->fs.addr, read_ahead, read_from);
    create_queue(t->c, "q");
    for (int i = 0; i < n; i += 30) {
        produce_n(t->c, i, n - i < 30 ? n - i : 30);
    }
}

static void ra_end(struct ra_case *t)
{
    tern_client_free(t->c);
    fake_stop(&t->fs);
}

/* ra_begin with read-ahead on from the leader, then fetch 0..9 and wait
 * for the read-ahead from 10 to reach the server. */
static void ra_begin_ahead(struct ra_case *t, int n, int fail_at, int silent_at)
{
    ra_begin(t, n, fail_at, silent_at, 1, TERN_READ_LEADER);
    cr_expect_eq(fetch_check(t->c, 0, 10), 10);
    wait_fetches(&t->fs, &t->l, 2);
    cr_expect_eq(fetches_at(&t->fs, &t->l, 10), 1);
}

Test(client_read_ahead, the_next_fetch_is_served_from_the_read_ahead)
{
    struct ra_case t;
    ra_begin_ahead(&t, 30, -1, -1);
    cr_expect_eq(fetch_check(t.c, 10, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 10), 1, "10 was asked again");
    cr_expect_eq(fetch_check(t.c, 20, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 20), 2,
                 "20's read-ahead reached the end: asked again");
    /* 20's answer reached the end (30): no read-ahead from 30. */
    cr_expect_eq(fetches_at(&t.fs, &t.l, 30), 0);
    ra_end(&t);
}

Test(client_read_ahead, an_answer_that_reached_the_end_is_never_served)
{
    struct ra_case t;
    /* The read-ahead from 10 is answered 10..14: the queue's end. */
    ra_begin_ahead(&t, 15, -1, -1);
    produce_n(t.c, 15, 5);
    /* The acknowledged 15..19 are seen: 10 is asked again. */
    cr_expect_eq(fetch_check(t.c, 10, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 10), 2);
    ra_end(&t);
}

Test(client_read_ahead, a_different_fetch_leaves_it_unused)
{
    struct ra_case t;
    ra_begin_ahead(&t, 30, -1, -1);
    /* Another offset, then another limit: each asked fresh. */
    cr_expect_eq(fetch_check(t.c, 25, 10), 5);
    cr_expect_eq(fetch_check(t.c, 0, 5), 5);
    wait_fetches(&t.fs, &t.l, 5); /* 0, 10, 25, 0, and 5 read ahead */
    cr_expect_eq(fetches_at(&t.fs, &t.l, 5), 1);
    cr_expect_eq(fetch_check(t.c, 5, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 5), 2, "a limit of 10 is not 5's");
    cr_expect_eq(fetches_at(&t.fs, &t.l, 10), 1);
    ra_end(&t);
}

Test(client_read_ahead, a_failed_read_ahead_is_asked_again)
{
    struct ra_case t;
    ra_begin_ahead(&t, 30, 10, -1);
    cr_expect_eq(fetch_check(t.c, 10, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 10), 2);
    cr_expect_str_eq(tern_client_errmsg(t.c), "");
    ra_end(&t);
}

Test(client_read_ahead, a_client_freed_with_one_in_flight_frees_it)
{
    struct ra_case t;
    ra_begin_ahead(&t, 30, -1, 10);
    /* Other calls run while it is unanswered (the sanitizers see a
     * leak or a use after free of it). */
    cr_expect_eq(fetch_check(t.c, 20, 5), 5);
    ra_end(&t);
}

/* Fetch 0..9 and 10..19 of 30 with read-ahead setting ra from read_from;
 * returns how many FETCH requests the server saw, after waiting up to
 * 300 ms for a third (on: 0, 10 and 20 read ahead; off: 0 and 10). */
static int fetches_for(int ra, int read_from)
{
    struct ra_case t;
    int n;
    ra_begin(&t, 30, -1, -1, ra, read_from);
    cr_expect_eq(fetch_check(t.c, 0, 10), 10);
    cr_expect_eq(fetch_check(t.c, 10, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 10), 1);
    int64_t end = now_ms() + 300;
    while (fetches(&t.fs, &t.l) < 3 && now_ms() < end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    n = fetches(&t.fs, &t.l);
    ra_end(&t);
    return n;
}

Test(client_read_ahead, default_on_for_any_and_first_off_for_leader)
{
    cr_expect_eq(fetches_for(0, TERN_READ_ANY), 3);
    cr_expect_eq(fetches_for(0, TERN_READ_FIRST), 3);
    cr_expect_eq(fetches_for(1, TERN_READ_LEADER), 3);
    cr_expect_eq(fetches_for(0, TERN_READ_LEADER), 2);
    cr_expect_eq(fetches_for(-1, TERN_READ_ANY), 2);
}

/* A new identity drops the read-ahead asked as the old one (the
 * connections close under it): the next fetch asks afresh, at once. */
Test(client_read_ahead, a_new_identity_asks_afresh)
{
    struct ra_case t;
    ra_begin_ahead(&t, 30, -1, -1);
    cr_assert_eq(tern_client_set_auth(t.c, NULL), 0);
    cr_expect_eq(fetch_check(t.c, 10, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 10), 2);
    ra_end(&t);
}

/* A caller that works longer than the attempt timeout between fetches
 * (the read-ahead's answer waits unread in the socket) and runs the
 * engine meanwhile does not make the leader look silent: nothing goes to
 * the other server. */
Test(client_read_ahead, an_unread_answer_is_not_a_silent_leader)
{
    struct ra_case t;
    struct fake_server other;
    struct ra_log lo;
    struct tern_client_options o;
    char servers[160];
    ra_begin(&t, 30, -1, -1, 1, TERN_READ_LEADER);
    start(&other, &lo);
    (void)snprintf(servers, sizeof servers, "%s,%s", t.fs.addr, other.addr);
    tern_client_options_init(&o);
    o.request_timeout_ms = 2000;
    o.retry_backoff_ms = 5;
    o.attempt_timeout_ms = 40;
    o.fetch_read_ahead = 1;
    struct tern_client *c = NULL;
    cr_assert_eq(tern_client_new(servers, &o, &c), 0);
    cr_expect_eq(fetch_check(c, 0, 10), 10);
    wait_fetches(&t.fs, &t.l, 2);
    struct timespec ts = {0, 200 * 1000000};
    nanosleep(&ts, NULL); /* five attempt timeouts of work */
    /* The engine runs meanwhile (the caller polls for async produces),
     * before the unread answer is read. */
    cr_expect_geq(tern_client_poll(c, 0), 0);
    cr_expect_eq(fetch_check(c, 10, 10), 10);
    cr_expect_eq(fetches_at(&t.fs, &t.l, 10), 1, "served from the read-ahead");
    cr_expect_eq(fetches(&other, &lo), 0, "the other server was asked");
    tern_client_free(c);
    fake_stop(&other);
    ra_end(&t);
}
