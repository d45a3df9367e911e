/* Unit tests of delayed messages (index/timer.c, the PRODUCE_DELAYED and
 * TIMER_FIRE commands of index/cmd.c): the codec and its refusals, never
 * appended before the due time, fired once, a queue deleted and
 * re-created meanwhile, a rebuild from a checkpoint between the produce
 * and the fire, two envs ending byte-identical, bounded plans over
 * 100,000 pending timers, the log start held by a pending timer, and
 * producer dedup of a resent delayed batch. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_timer, .init = th_dirs_init, .fini = th_dirs_fini);

#define SEG 4096

static struct idx_env *open_env(const char *dir, uint64_t seg, uint64_t ck)
{
    struct idx_options o = {
        .dir = dir, .segment_bytes = seg, .checkpoint_bytes = ck};
    return th_open_opts(&o);
}

/* A properties block with key key (borrowed by the block's bytes). */
static void props_with_key(struct tern_wbuf *pw, const char *key)
{
    struct idx_props p = {
        .producer_ts_ms = 77, .key = key, .key_len = (uint32_t)strlen(key)};
    tern_wbuf_init(pw);
    idx_props_encode(pw, &p);
    cr_assert_eq(pw->err, 0);
}

/* Apply a PRODUCE_DELAYED of n messages "d<i>" (message 0 with key "k0")
 * due at due, entry time ts, by producer (pid, seq) (0, 0: no dedup);
 * returns the result. */
static struct idx_result delayed_as(struct idx_env *e,
                                    uint64_t index,
                                    uint64_t ts,
                                    const char *q,
                                    uint64_t due,
                                    uint32_t n,
                                    uint64_t pid,
                                    uint64_t seq)
{
    struct tern_wbuf w, pw;
    struct idx_result r[1];
    struct idx_pmsg *m = calloc(n, sizeof *m);
    char(*text)[16] = calloc(n, sizeof *text);
    props_with_key(&pw, "k0");
    for (uint32_t i = 0; i < n; i++) {
        (void)snprintf(text[i], sizeof text[i], "d%u", i);
        m[i].data = text[i];
        m[i].len = (uint32_t)strlen(text[i]);
        if (i == 0) {
            m[i].props = pw.base;
            m[i].props_len = (uint32_t)pw.len;
        }
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, ts);
    idx_cmd_produce_delayed(&w, q, due, pid, seq, m, n);
    cr_assert_eq(th_apply(e, index, &w, r, 1), 1);
    tern_wbuf_free(&w);
    tern_wbuf_free(&pw);
    free(m);
    free(text);
    return r[0];
}

static struct idx_result delayed(struct idx_env *e,
                                 uint64_t index,
                                 uint64_t ts,
                                 const char *q,
                                 uint64_t due,
                                 uint32_t n)
{
    return delayed_as(e, index, ts, q, due, n, 0, 0);
}

/* Plan at t (flushed state) into a TIMER_FIRE entry stamped t and apply
 * it at index; returns the plan, *res the result (status -1: nothing was
 * due, nothing applied). */
static struct idx_timer_plan fire_planned(struct idx_env *e,
                                          uint64_t index,
                                          uint64_t t,
                                          uint32_t max_keys,
                                          uint32_t max_bytes,
                                          struct idx_result *res,
                                          struct tern_wbuf *copy)
{
    struct tern_wbuf w;
    struct idx_timer_plan p;
    cr_assert_eq(idx_flush(e), 0);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, t);
    cr_assert_eq(idx_timer_plan(e, t, max_keys, max_bytes, &w, &p), 0, "%s",
                 idx_errmsg(e));
    res->status = -1;
    if (p.keys > 0) {
        cr_assert_eq(th_apply(e, index, &w, res, 1), 1);
        if (copy != NULL) {
            tern_wbuf_init(copy);
            tern_wbuf_put(copy, w.base, w.len);
        }
    }
    tern_wbuf_free(&w);
    return p;
}

/* Apply a hand-built TIMER_FIRE of key k (message "d<msg_no>") at t. */
static struct idx_result fire_key(struct idx_env *e,
                                  uint64_t index,
                                  uint64_t t,
                                  const char *q,
                                  struct idx_timer_key k)
{
    struct tern_wbuf w;
    struct idx_result r[1];
    char text[16];
    (void)snprintf(text, sizeof text, "d%u", k.msg_no);
    struct idx_pmsg m = {text, (uint32_t)strlen(text), NULL, 0};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, t);
    size_t at = idx_cmd_timer_fire_begin(&w);
    idx_cmd_timer_fire_add(&w, at, &k, q, &m);
    idx_cmd_timer_fire_end(&w, at);
    cr_assert_eq(th_apply(e, index, &w, r, 1), 1);
    tern_wbuf_free(&w);
    return r[0];
}

static uint64_t queue_len(struct idx_env *e, const char *q)
{
    struct th_msgs ms = {0};
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(th_fetch_all(e, q, 100, 1 << 20, &ms), 0);
    uint64_t n = ms.n;
    th_msgs_free(&ms);
    return n;
}

static uint64_t pending(struct idx_env *e)
{
    uint64_t n = 0, due = 0;
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(idx_timer_stats(e, &n, &due), 0);
    return n;
}

/* An entry of one command (type, body[0..n)), sealed; malloc'd. */
static uint8_t *one_command(const uint8_t *hdr24,
                            uint8_t type,
                            const uint8_t *body,
                            uint32_t n,
                            size_t *len)
{
    uint8_t *b = malloc(24 + 5 + (size_t)n + 1);
    memcpy(b, hdr24, 24);
    tern_put_u32(b + 4, 1);
    b[24] = type;
    tern_put_u32(b + 25, n);
    memcpy(b + 29, body, n);
    *len = 29 + (size_t)n;
    th_entry_reseal(b, *len);
    return b;
}

Test(index_timer, codec_round_trip_and_truncation_refusals)
{
    struct tern_wbuf w, pw;
    struct idx__entry it;
    struct idx__cmd c;
    props_with_key(&pw, "key-1");
    struct idx_pmsg m[2] = {{"one", 3, pw.base, (uint32_t)pw.len},
                            {"two!", 4, NULL, 0}};
    struct idx_timer_key k = {5000, 9, 1};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1234);
    idx_cmd_produce_delayed(&w, "ns%q", 5000, 0, 0, m, 2);
    size_t at = idx_cmd_timer_fire_begin(&w);
    idx_cmd_timer_fire_add(&w, at, &k, "ns%q", &m[0]);
    idx_cmd_timer_fire_add(&w, at, &k, "q2", &m[1]);
    idx_cmd_timer_fire_end(&w, at);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);

    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_PRODUCE_DELAYED);
    cr_expect_eq(c.due_ms, 5000);
    cr_expect_eq(c.n_msgs, 2);
    cr_expect(c.queue_len == 4 && memcmp(c.queue, "ns%q", 4) == 0);
    struct idx__msg_iter mi;
    const uint8_t *d;
    uint32_t len;
    idx__msg_iter_init(&mi, &c);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect(len == 3 && memcmp(d, "one", 3) == 0);
    cr_expect_eq(mi.props_len, pw.len);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect(len == 4 && memcmp(d, "two!", 4) == 0 && mi.props_len == 0);
    cr_expect_eq(idx__msg_iter_next(&mi, &d, &len), 0);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_TIMER_FIRE);
    cr_expect_eq(c.n_msgs, 2);
    struct idx__fire_iter fi;
    struct idx__fire_key fk;
    idx__fire_iter_init(&fi, &c);
    cr_assert_eq(idx__fire_iter_next(&fi, &fk), 1);
    cr_expect(fk.key.due_ms == 5000 && fk.key.index == 9 && fk.key.msg_no == 1);
    cr_expect(fk.queue_len == 4 && memcmp(fk.queue, "ns%q", 4) == 0);
    idx__msg_iter_init_fire(&mi, &fk);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect(len == 3 && memcmp(d, "one", 3) == 0);
    cr_expect_eq(mi.props_len, pw.len);
    cr_assert_eq(idx__fire_iter_next(&fi, &fk), 1);
    cr_expect(fk.queue_len == 2 && memcmp(fk.queue, "q2", 2) == 0);
    cr_expect_eq(idx__fire_iter_next(&fi, &fk), 0);
    cr_expect_eq(idx__entry_next(&it, &c), 0);

    /* Every truncation of either command's body is refused. */
    struct tern_wbuf one;
    tern_wbuf_init(&one);
    for (int type = 0; type < 2; type++) {
        idx_cmd_begin(&one, 1234);
        if (type == 0) {
            idx_cmd_produce_delayed(&one, "ns%q", 5000, 0, 0, m, 2);
        } else {
            at = idx_cmd_timer_fire_begin(&one);
            idx_cmd_timer_fire_add(&one, at, &k, "ns%q", &m[0]);
            idx_cmd_timer_fire_end(&one, at);
        }
        cr_assert_eq(idx_cmd_end(&one), 0);
        uint32_t body_len = tern_get_u32(one.base + 25);
        for (uint32_t cut = 0; cut < body_len; cut++) {
            size_t n;
            uint8_t *b =
                one_command(one.base, one.base[24], one.base + 29, cut, &n);
            cr_expect_eq(idx_cmd_validate(b, n), TERN_EMALFORMED,
                         "type %u cut to %u of %u bytes", one.base[24], cut,
                         body_len);
            free(b);
        }
    }

    /* Refusals of the validator: a delayed produce with a producer id, a
     * fire without keys or with raft index 0. */
    uint8_t body[64] = {0}, *b;
    size_t n;
    idx_cmd_begin(&one, 1);
    idx_cmd_produce_delayed(&one, "q", 10, 0, 0, &m[1], 1);
    cr_assert_eq(idx_cmd_end(&one), 0);
    b = one_command(one.base, IDX_CMD_PRODUCE_DELAYED, one.base + 29,
                    tern_get_u32(one.base + 25), &n);
    cr_expect_eq(idx_cmd_validate(b, n), 0);
    tern_put_u64(b + 29 + 8 + 2, 5); /* producer_id after due, "q" */
    th_entry_reseal(b, n);
    cr_expect_eq(idx_cmd_validate(b, n), TERN_EMALFORMED);
    free(b);
    b = one_command(one.base, IDX_CMD_TIMER_FIRE, body, 4, &n);
    cr_expect_eq(idx_cmd_validate(b, n), TERN_EMALFORMED, "no keys");
    free(b);
    idx_cmd_begin(&one, 1);
    at = idx_cmd_timer_fire_begin(&one);
    idx_cmd_timer_fire_add(&one, at, &k, "q", &m[1]);
    idx_cmd_timer_fire_end(&one, at);
    cr_assert_eq(idx_cmd_end(&one), 0);
    tern_put_u64(one.base + 29 + 4 + 8, 0); /* raft index */
    th_entry_reseal(one.base, one.len);
    cr_expect_eq(idx_cmd_validate(one.base, one.len), TERN_EMALFORMED);

    /* Builder bounds: 1025 keys, no keys, raft index 0. */
    idx_cmd_begin(&one, 1);
    at = idx_cmd_timer_fire_begin(&one);
    for (uint32_t i = 0; i <= IDX_TIMER_FIRE_KEYS_MAX; i++) {
        idx_cmd_timer_fire_add(&one, at, &k, "q", &m[1]);
    }
    idx_cmd_timer_fire_end(&one, at);
    cr_expect_eq(idx_cmd_end(&one), TERN_ETOOBIG);
    tern_wbuf_free(&one); /* errors are sticky in a wbuf */
    tern_wbuf_init(&one);
    idx_cmd_begin(&one, 1);
    at = idx_cmd_timer_fire_begin(&one);
    idx_cmd_timer_fire_end(&one, at);
    cr_expect_eq(idx_cmd_end(&one), TERN_EINVAL);
    tern_wbuf_free(&one);
    tern_wbuf_init(&one);
    struct idx_timer_key k0 = {1, 0, 0};
    idx_cmd_begin(&one, 1);
    at = idx_cmd_timer_fire_begin(&one);
    idx_cmd_timer_fire_add(&one, at, &k0, "q", &m[1]);
    cr_expect_eq(idx_cmd_end(&one), TERN_EINVAL);
    tern_wbuf_free(&one);
    tern_wbuf_free(&w);
    tern_wbuf_free(&pw);
}

Test(index_timer, never_appended_before_due_and_fires_once)
{
    struct idx_env *e = open_env(th_dir_a, 0, 0);
    struct idx_result r;
    th_create(e, 1, "q");
    r = delayed(e, 2, 1000, "q", 5000, 3);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.count, 3);
    cr_expect_eq(queue_len(e, "q"), 0, "nothing in the queue yet");
    cr_expect_eq(pending(e), 3);
    uint64_t n, due;
    cr_assert_eq(idx_timer_stats(e, &n, &due), 0);
    cr_expect_eq(due, 5000);

    /* A fire with t < due skips the key. */
    r = fire_key(e, 3, 4999, "q", (struct idx_timer_key){5000, 2, 0});
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.count, 0);
    cr_expect_eq(r.base_offset, 0);
    cr_expect_eq(queue_len(e, "q"), 0);
    cr_expect_eq(pending(e), 3);
    /* The leader's plan before the due time has nothing. */
    struct idx_timer_plan p = fire_planned(e, 4, 4999, 16, 1 << 20, &r, NULL);
    cr_expect_eq(p.keys, 0);
    cr_expect_eq(p.rows_read, 1, "only the first row, not due, was read");

    /* Due: the key fires once. */
    r = fire_key(e, 4, 5000, "q", (struct idx_timer_key){5000, 2, 1});
    cr_expect_eq(r.count, 1);
    r = fire_key(e, 5, 5001, "q", (struct idx_timer_key){5000, 2, 1});
    cr_expect_eq(r.count, 0, "already fired");
    cr_expect_eq(r.base_offset, 0);
    cr_expect_eq(queue_len(e, "q"), 1);
    cr_expect_eq(pending(e), 2);

    /* The plan fires the other two with their bytes; a second plan finds
     * nothing. */
    p = fire_planned(e, 6, 6000, 16, 1 << 20, &r, NULL);
    cr_expect_eq(p.keys, 2);
    cr_expect_eq(r.count, 2);
    p = fire_planned(e, 7, 6000, 16, 1 << 20, &r, NULL);
    cr_expect_eq(p.keys, 0);
    cr_expect_eq(pending(e), 0);
    struct th_msgs ms = {0};
    cr_assert_eq(th_fetch_all(e, "q", 10, 1 << 20, &ms), 0);
    cr_assert_eq(ms.n, 3);
    const char *want[3] = {"d1", "d0", "d2"};
    for (int i = 0; i < 3; i++) {
        cr_expect(ms.v[i].len == 2 && memcmp(ms.v[i].data, want[i], 2) == 0,
                  "message %d", i);
        cr_expect_eq(ms.v[i].offset, (uint64_t)i);
    }
    cr_expect_eq(ms.v[0].timestamp_ms, 5000, "append time of the fire");
    cr_expect_eq(ms.v[1].timestamp_ms, 6000);
    th_msgs_free(&ms);
    /* The planned message 0 kept its properties: get by key finds it. */
    uint32_t got = 0;
    unsigned seen = 0;
    cr_expect_eq(
        idx_message_get_key(e, "q", "k0", 2, 4, th_count_fetched, &seen, &got),
        0);
    cr_expect_eq(got, 1);
    cr_expect_eq(seen, 1);
    idx_close(e);
}

Test(index_timer, producer_dedup_schedules_a_resend_once)
{
    struct idx_env *e = open_env(th_dir_a, 0, 0);
    struct idx_result r;
    uint64_t pid = (5ull << 32) | 1;
    th_create(e, 1, "q");
    r = delayed_as(e, 2, 1000, "q", 5000, 2, pid, 1);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.count, 2);
    cr_expect_eq(r.duplicate, 0);
    cr_expect_eq(pending(e), 2);
    /* The resend after a leader change is stamped later (another due
     * time): it answers the first batch's count and due time. */
    r = delayed_as(e, 3, 1700, "q", 5700, 2, pid, 1);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.duplicate, 1);
    cr_expect_eq(r.count, 2);
    cr_expect_eq(r.base_offset, 5000, "the first due time");
    cr_expect_eq(pending(e), 2, "nothing scheduled twice");
    /* A gap is refused; the next in order schedules. */
    r = delayed_as(e, 4, 1800, "q", 5800, 1, pid, 3);
    cr_expect_eq(r.status, TERN_ESEQUENCE);
    cr_expect_eq(pending(e), 2);
    r = delayed_as(e, 5, 1900, "q", 5900, 1, pid, 2);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.duplicate, 0);
    cr_expect_eq(pending(e), 3);
    /* A refused batch (no queue) leaves the producer where it was. */
    r = delayed_as(e, 6, 2000, "nope", 6000, 1, pid, 3);
    cr_expect_eq(r.status, TERN_ENOQUEUE);
    r = delayed_as(e, 7, 2100, "q", 6100, 1, pid, 3);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.duplicate, 0);
    cr_expect_eq(pending(e), 4);
    /* The same pair on another queue is another producer row. */
    th_create(e, 8, "q2");
    r = delayed_as(e, 9, 2200, "q2", 6200, 1, pid, 1);
    cr_expect_eq(r.duplicate, 0);
    cr_expect_eq(pending(e), 5);
    /* Everything fires once. */
    struct idx_timer_plan p = fire_planned(e, 10, 7000, 64, 1 << 20, &r, NULL);
    cr_expect_eq(p.keys, 5);
    cr_expect_eq(queue_len(e, "q"), 4);
    cr_expect_eq(queue_len(e, "q2"), 1);
    idx_close(e);
}

Test(index_timer, queue_missing_deleted_or_recreated)
{
    struct idx_env *e = open_env(th_dir_a, 0, 0);
    struct idx_result r = delayed(e, 1, 1000, "nope", 2000, 1);
    cr_expect_eq(r.status, TERN_ENOQUEUE);
    cr_expect_eq(pending(e), 0);
    th_create(e, 2, "q");
    r = delayed(e, 3, 1000, "q", 2000, 2);
    cr_assert_eq(r.status, 0);
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1500);
    idx_cmd_queue_delete(&w, "q");
    idx_cmd_queue_create(&w, "q");
    struct idx_result rr[2];
    cr_assert_eq(th_apply(e, 4, &w, rr, 2), 2);
    tern_wbuf_free(&w);
    struct idx_timer_plan p = fire_planned(e, 5, 2000, 16, 1 << 20, &r, NULL);
    cr_expect_eq(p.keys, 2);
    cr_expect_eq(r.count, 0);
    cr_expect_eq(r.base_offset, 2, "the queue is another incarnation");
    cr_expect_eq(queue_len(e, "q"), 0);
    cr_expect_eq(pending(e), 0);
    idx_close(e);
}

/* The shared workload of the determinism tests: entries 1..; the fire
 * entries the leader env planned are applied as they are to follower (may
 * be NULL). Returns the last index. */
static uint64_t workload(struct idx_env *leader, struct idx_env *follower)
{
    struct idx_env *both[2] = {leader, follower};
    uint64_t i = 1;
    for (int k = 0; k < 2 && both[k] != NULL; k++) {
        i = 1;
        th_create(both[k], i++, "q");
        th_create(both[k], i++, "fill");
        (void)delayed(both[k], i++, 1000, "q", 9000, 5);
        for (int f = 0; f < 120; f++, i++) {
            (void)th_produce(both[k], i, "fill", 0, 0, 4);
        }
        (void)delayed(both[k], i++, 2000, "q", 8000, 2);
    }
    struct idx_result r;
    struct tern_wbuf copy;
    /* Batches of at most 3 keys: 8000 (2 due), then 9000 (5 due). */
    for (uint64_t t = 8000; t <= 9000; t += 1000) {
        for (int b = 0; b < 10; b++) {
            struct idx_timer_plan p =
                fire_planned(leader, i, t, 3, 1 << 20, &r, &copy);
            if (p.keys == 0) {
                break;
            }
            if (follower != NULL) {
                struct idx_result fr[1];
                cr_assert_eq(th_apply(follower, i, &copy, fr, 1), 1);
                cr_expect_eq(fr[0].count, r.count);
            }
            tern_wbuf_free(&copy);
            i++;
        }
    }
    return i - 1;
}

static void expect_same_queue(struct idx_env *a, struct idx_env *b)
{
    struct th_msgs ma = {0}, mb = {0};
    cr_assert_eq(idx_flush(a), 0);
    cr_assert_eq(idx_flush(b), 0);
    cr_assert_eq(th_fetch_all(a, "q", 4, 4096, &ma), 0);
    cr_assert_eq(th_fetch_all(b, "q", 4, 4096, &mb), 0);
    cr_expect_eq(ma.n, 7);
    th_msgs_expect_eq(&ma, &mb);
    th_msgs_free(&ma);
    th_msgs_free(&mb);
}

Test(index_timer, two_envs_end_byte_identical)
{
    /* Different segment sizes, the same checkpoint interval; the follower
     * applies the leader's planned fires. */
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *b = open_env(th_dir_b, 3000, SEG);
    (void)workload(a, b);
    expect_same_queue(a, b);
    cr_expect_eq(pending(a), 0);
    cr_expect_eq(pending(b), 0);
    uint64_t la, lb;
    uint8_t *ba = th_log_bytes(a, &la), *bb = th_log_bytes(b, &lb);
    cr_expect(la == lb && memcmp(ba, bb, la) == 0, "logs differ");
    free(ba);
    free(bb);
    char *na = th_log_files(th_dir_a, ".ckpt"),
         *nb = th_log_files(th_dir_b, ".ckpt");
    cr_expect_str_eq(na, nb);
    cr_expect_gt(strlen(na), 0, "checkpoints were written");
    for (char *line = strtok(na, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        char pa[4096], pb[4096];
        size_t sa, sb;
        (void)snprintf(pa, sizeof pa, "%s/log/%s", th_dir_a, line);
        (void)snprintf(pb, sizeof pb, "%s/log/%s", th_dir_b, line);
        uint8_t *ca = th_read_file(pa, &sa), *cb = th_read_file(pb, &sb);
        cr_expect(sa == sb && memcmp(ca, cb, sa) == 0, "%s differs", line);
        free(ca);
        free(cb);
    }
    free(na);
    free(nb);
    idx_close(a);
    idx_close(b);
}

Test(index_timer, rebuild_from_a_checkpoint_between_produce_and_fire)
{
    /* The reference applies everything; the other env is cut to start at
     * a checkpoint after both PRODUCE_DELAYED records (its timers come
     * from the checkpoint, the fires carry the bytes) and must end the
     * same. */
    struct idx_env *ref = open_env(th_dir_b, SEG, SEG);
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct tern_wbuf fires[2];
    struct idx_result r;
    uint64_t i = 1, pos_delayed2;
    struct idx_env *both[2] = {ref, a};
    for (int k = 0; k < 2; k++) {
        i = 1;
        th_create(both[k], i++, "q");
        th_create(both[k], i++, "fill");
        (void)delayed(both[k], i++, 1000, "q", 9000, 5);
        for (int f = 0; f < 60; f++, i++) {
            (void)th_produce(both[k], i, "fill", 0, 0, 4);
        }
        pos_delayed2 = idx_log_end(both[k]);
        (void)delayed(both[k], i++, 2000, "q", 8000, 2);
        for (int f = 0; f < 60; f++, i++) {
            (void)th_produce(both[k], i, "fill", 0, 0, 4);
        }
    }
    uint64_t before_fire = i;
    for (int f = 0; f < 2; f++) {
        struct idx_timer_plan p = fire_planned(
            ref, i++, 8000 + 1000 * (uint64_t)f, 16, 1 << 20, &r, &fires[f]);
        cr_assert_gt(p.keys, 0);
    }
    cr_assert_eq(idx_sync(a), 0);
    idx_close(a);

    /* Cut a's log: delete every segment and checkpoint before the first
     * checkpoint past the second PRODUCE_DELAYED record. */
    char *ck = th_log_files(th_dir_a, ".ckpt");
    uint64_t cut = 0;
    for (char *line = strtok(ck, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        uint64_t p = strtoull(line, NULL, 10);
        if (p > pos_delayed2 && cut == 0) {
            cut = p;
        }
    }
    free(ck);
    cr_assert_gt(cut, 0, "a checkpoint after the delayed produces");
    char *segs = th_log_files(th_dir_a, ".seg");
    char *names[256];
    int n = 0;
    for (char *line = strtok(segs, "\n"); line != NULL && n < 256;
         line = strtok(NULL, "\n")) {
        names[n++] = line;
    }
    for (int s = 0; s + 1 < n; s++) {
        if (strtoull(names[s + 1], NULL, 10) <= cut) {
            char path[4096];
            (void)snprintf(path, sizeof path, "%s/log/%s", th_dir_a, names[s]);
            cr_assert_eq(unlink(path), 0, "%s", path);
        }
    }
    free(segs);
    ck = th_log_files(th_dir_a, ".ckpt");
    for (char *line = strtok(ck, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        if (strtoull(line, NULL, 10) < cut) {
            char path[4096];
            (void)snprintf(path, sizeof path, "%s/log/%s", th_dir_a, line);
            cr_assert_eq(unlink(path), 0, "%s", path);
        }
    }
    free(ck);

    a = open_env(th_dir_a, SEG, SEG);
    cr_assert_eq(idx_log_start(a), cut, "%s", idx_cut_note(a));
    cr_expect_eq(idx_last_applied(a), before_fire - 1);
    cr_expect_eq(pending(a), 7, "the timers came from the checkpoint");
    for (int f = 0; f < 2; f++) {
        struct idx_result fr[1];
        cr_assert_eq(th_apply(a, before_fire + (uint64_t)f, &fires[f], fr, 1),
                     1);
        cr_expect_eq(fr[0].count, f == 0 ? 2 : 5);
        cr_expect_eq(fr[0].base_offset, 0);
        tern_wbuf_free(&fires[f]);
    }
    cr_expect_eq(pending(a), 0);
    expect_same_queue(a, ref);
    idx_close(a);
    idx_close(ref);
}

Test(index_timer, plan_reads_only_due_rows_in_bounded_batches)
{
    /* 100,000 pending timers in 100 entries of 1,000 messages, entry k due
     * at 10,000 + 1,000 k. */
    struct idx_env *e = open_env(th_dir_a, 0, 0);
    struct idx_result r;
    uint64_t i = 1;
    th_create(e, i++, "q");
    for (uint64_t k = 0; k < 100; k++, i++) {
        r = delayed(e, i, 1000, "q", 10000 + 1000 * k, 1000);
        cr_assert_eq(r.count, 1000);
    }
    cr_expect_eq(pending(e), 100000);

    /* Due by 12,000: 3,000 timers, in batches of at most 1,024 keys, each
     * plan reading at most one row more than it takes. */
    uint32_t fired = 0, plans = 0;
    for (;;) {
        struct idx_timer_plan p = fire_planned(
            e, i++, 12000, IDX_TIMER_FIRE_KEYS_MAX, 1 << 20, &r, NULL);
        cr_assert_lt(plans++, 10, "bounded number of plans");
        cr_expect_leq(p.keys, IDX_TIMER_FIRE_KEYS_MAX);
        cr_expect_leq(p.rows_read, p.keys + 1);
        if (p.keys == 0) {
            cr_expect_eq(p.rows_read, 1);
            break;
        }
        cr_expect_eq(p.more, fired + p.keys < 3000);
        cr_expect_eq(r.count, p.keys);
        fired += p.keys;
    }
    cr_expect_eq(fired, 3000);
    cr_expect_eq(plans, 4);
    cr_expect_eq(queue_len(e, "q") > 0, true);
    cr_expect_eq(pending(e), 97000);
    uint64_t n, due;
    cr_assert_eq(idx_timer_stats(e, &n, &due), 0);
    cr_expect_eq(due, 13000);

    /* A byte bound smaller than two keys: one key per plan. */
    struct idx_timer_plan p = fire_planned(e, i++, 13000, 16, 40, &r, NULL);
    cr_expect_eq(p.keys, 1);
    cr_expect(p.more);
    cr_expect_eq(p.rows_read, 2);
    cr_expect_eq(idx_timer_plan(e, 13000, 0, 40, &(struct tern_wbuf){0}, &p),
                 TERN_EINVAL);
    idx_close(e);
}

Test(index_timer, a_pending_timer_holds_the_log_start)
{
    struct idx_env *e = open_env(th_dir_a, SEG, SEG);
    struct idx_result r;
    struct tern_wbuf man;
    uint64_t i = 1;
    th_create(e, i++, "old");
    th_create(e, i++, "q");
    for (int k = 0; k < 200; k++, i++) {
        (void)th_produce(e, i, "old", 0, 0, 3);
    }
    uint64_t pos = idx_log_end(e);
    r = delayed(e, i++, 1000, "q", 1000000, 1);
    cr_assert_eq(r.status, 0);
    for (int k = 0; k < 400; k++, i++) {
        (void)th_produce(e, i, "old", 0, 0, 3);
    }
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5000);
    idx_cmd_queue_delete(&w, "old");
    struct idx_result rr[1];
    cr_assert_eq(th_apply(e, i++, &w, rr, 1), 1);
    tern_wbuf_free(&w);
    int segs_before = th_count_segments(th_dir_a);

    /* Two snapshots: the first remembers its end, the second trims. */
    for (int s = 0; s < 2; s++) {
        tern_wbuf_init(&man);
        cr_assert_eq(idx_snapshot(e, &man), 0, "%s", idx_errmsg(e));
        tern_wbuf_free(&man);
    }
    cr_expect_gt(idx_log_start(e), 0, "segments before the timer went");
    cr_expect_leq(idx_log_start(e), pos, "the timer's record is kept");
    cr_expect_lt(th_count_segments(th_dir_a), segs_before);
    int segs_held = th_count_segments(th_dir_a);
    cr_expect_gt(segs_held, segs_before / 2,
                 "later segments are kept behind the timer (%d of %d)",
                 segs_held, segs_before);

    /* Fired: the next trim passes it. */
    struct idx_timer_plan p =
        fire_planned(e, i++, 1000000, 16, 1 << 20, &r, NULL);
    cr_expect_eq(p.keys, 1);
    cr_expect_eq(r.count, 1);
    cr_expect_eq(queue_len(e, "q"), 1);
    for (int s = 0; s < 2; s++) {
        tern_wbuf_init(&man);
        cr_assert_eq(idx_snapshot(e, &man), 0, "%s", idx_errmsg(e));
        tern_wbuf_free(&man);
    }
    cr_expect_gt(idx_log_start(e), pos);
    cr_expect_lt(th_count_segments(th_dir_a), segs_held / 4,
                 "%d segments left of %d", th_count_segments(th_dir_a),
                 segs_held);
    /* The fired message lives in the TIMER_FIRE record: still readable
     * after a reopen that rebuilds from the new log start. */
    idx_close(e);
    e = open_env(th_dir_a, SEG, SEG);
    cr_expect_eq(queue_len(e, "q"), 1);
    idx_close(e);
}
