/* Unit tests of time and retention in index/ (docs/MESSAGES.md, "Time",
 * "Retention", "Query and seek"): the append time stays monotone when a
 * leader's clock steps back; the settings tail of QUEUE_CREATE, QUEUE_UPDATE
 * and TRIM through the codec; drop-oldest trimming by count and by bytes,
 * reject, a batch too big for the queue; trims by age over
 * queues; namespace usage going down with trimming; the row cleaner in
 * bounded batches (trimmed rows, deleted queues); the rebuild at idx_open
 * deriving the same low watermarks; offset for time. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_retention, .init = th_dirs_init, .fini = th_dirs_fini);

/* ---- helpers ------------------------------------------------------------- */

static struct idx_result run1(struct idx_env *e,
                              uint64_t index,
                              struct tern_wbuf *w)
{
    struct idx_result r[1];
    memset(r, 0, sizeof r);
    cr_assert_eq(th_apply(e, index, w, r, 1), 1);
    cr_assert_eq(idx_flush(e), 0);
    tern_wbuf_free(w);
    return r[0];
}

static int create_opts(struct idx_env *e,
                       uint64_t index,
                       const char *queue,
                       const struct idx_queue_settings *s)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_queue_create_opts(&w, queue, s);
    return run1(e, index, &w).status;
}

static struct idx_queue_settings limits(uint64_t max_messages,
                                        uint64_t max_bytes,
                                        uint32_t overflow)
{
    struct idx_queue_settings s = {0};
    s.max_messages = max_messages;
    s.max_bytes = max_bytes;
    s.overflow = overflow;
    return s;
}

/* A produce at leader time ts of n messages of len bytes each. */
static struct idx_result produce_at(struct idx_env *e,
                                    uint64_t index,
                                    uint64_t ts,
                                    const char *queue,
                                    uint32_t n,
                                    uint32_t len)
{
    static uint8_t data[1024];
    struct idx_msg m[8];
    struct tern_wbuf w;
    cr_assert(n <= 8 && len <= sizeof data);
    memset(data, 'a' + (int)(index % 26), len);
    for (uint32_t i = 0; i < n; i++) {
        m[i].data = data;
        m[i].len = len;
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, ts);
    idx_cmd_produce(&w, queue, 0, 0, m, n);
    return run1(e, index, &w);
}

static struct idx_result update(struct idx_env *e,
                                uint64_t index,
                                const char *queue,
                                uint32_t mask,
                                const struct idx_queue_settings *s)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_queue_update(&w, queue, mask, s);
    return run1(e, index, &w);
}

/* The leader's side: plan queue's trim at wall time now (idx_trim_plan)
 * and apply it as a TRIM stamped now. Returns the messages trimmed. */
static uint64_t trim_now(struct idx_env *e,
                         uint64_t index,
                         uint64_t now,
                         const char *queue)
{
    struct idx_trim_plan p;
    struct tern_wbuf w;
    cr_assert_eq(idx_trim_plan(e, queue, now, 1000000, &p), 0, "%s",
                 idx_errmsg(e));
    if (p.to == p.from) {
        return 0;
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, now);
    idx_cmd_trim(&w, queue, p.queue_id, p.from, p.to, p.bytes);
    struct idx_result r = run1(e, index, &w);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.count, p.to - p.from);
    return p.to - p.from;
}

static struct idx_queue_info info(struct idx_env *e, const char *queue)
{
    struct idx_queue_info qi;
    memset(&qi, 0, sizeof qi);
    int rc = idx_queue_get(e, queue, &qi);
    cr_assert_eq(rc, 0, "queue_get %s: %s", queue, tern_strerror(rc));
    return qi;
}

/* Rows in msgs (all queues), counted in a read txn. */
static size_t msgs_rows(struct idx_env *e)
{
    MDB_txn *txn;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_stat(txn, e->dbi_msgs, &st), 0);
    mdb_txn_abort(txn);
    return st.ms_entries;
}

static size_t dbi_rows(struct idx_env *e, MDB_dbi dbi)
{
    MDB_txn *txn;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_stat(txn, dbi, &st), 0);
    mdb_txn_abort(txn);
    return st.ms_entries;
}

/* Run the cleaner with budget until it reports less than budget; returns
 * the steps taken (bounded). */
static unsigned clean_all(struct idx_env *e, unsigned budget)
{
    unsigned steps = 0, done = budget;
    while (done == budget) {
        cr_assert_lt(steps, 10000u, "cleaner does not finish");
        int rc = idx_clean_step(e, budget, &done);
        cr_assert_eq(rc, 0, "clean: %s (%s)", tern_strerror(rc), idx_errmsg(e));
        cr_assert_leq(done, budget);
        steps++;
    }
    return steps;
}

/* ---- Time ---------------------------------------------------------------- */

Test(index_retention, append_time_monotone_across_clock_step_back)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct th_msgs m = {0};
    cr_assert_eq(create_opts(e, 1, "q", NULL), 0);
    cr_assert_eq(produce_at(e, 2, 5000, "q", 1, 10).status, 0);
    /* A new leader whose clock is 4 s behind. */
    cr_assert_eq(produce_at(e, 3, 1000, "q", 2, 10).status, 0);
    cr_assert_eq(produce_at(e, 4, 7000, "q", 1, 10).status, 0);
    cr_assert_eq(idx_last_append_ms(e), 7000);
    cr_assert_eq(th_fetch_all(e, "q", 100, 1 << 20, &m), 0);
    cr_assert_eq(m.n, 4);
    cr_assert_eq(m.v[0].timestamp_ms, 5000);
    cr_assert_eq(m.v[1].timestamp_ms, 5000);
    cr_assert_eq(m.v[2].timestamp_ms, 5000);
    cr_assert_eq(m.v[3].timestamp_ms, 7000);
    th_msgs_free(&m);
    idx_close(e);
    /* The rebuild derives the same append times. */
    e = th_open(th_dir_a, 0);
    cr_assert_eq(idx_last_append_ms(e), 7000);
    cr_assert_eq(th_fetch_all(e, "q", 100, 1 << 20, &m), 0);
    cr_assert_eq(m.v[2].timestamp_ms, 5000);
    th_msgs_free(&m);
    idx_close(e);
}

/* ---- Command codec ---------------------------------------------------------
 */

Test(index_retention, codec_round_trip_and_bounds)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    struct idx_queue_settings s = {.max_age_ms = 60000,
                                   .max_bytes = 1 << 20,
                                   .max_messages = 100,
                                   .overflow = IDX_OVERFLOW_REJECT};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 42);
    idx_cmd_queue_create(&w, "a");
    idx_cmd_queue_create_opts(&w, "b", &s);
    idx_cmd_queue_update(&w, "b", IDX_SET_MAX_BYTES | IDX_SET_OVERFLOW, &s);
    idx_cmd_trim(&w, "a", 7, 3, 9, 100);
    idx_cmd_trim(&w, "ns%q", 8, 0, UINT64_MAX, 1);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_QUEUE_CREATE);
    cr_assert_not(c.has_settings);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert(c.has_settings);
    cr_assert_eq(c.settings.max_age_ms, 60000);
    cr_assert_eq(c.settings.max_bytes, 1 << 20);
    cr_assert_eq(c.settings.max_messages, 100);
    cr_assert_eq(c.settings.overflow, IDX_OVERFLOW_REJECT);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_QUEUE_UPDATE);
    cr_assert_eq(c.mask, IDX_SET_MAX_BYTES | IDX_SET_OVERFLOW);
    cr_assert_eq(c.settings.max_bytes, 1 << 20);
    cr_assert_eq(c.settings.max_age_ms, 0, "unmasked fields encode as 0");
    cr_assert_eq(c.settings.max_messages, 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.type, IDX_CMD_TRIM);
    cr_assert_eq(c.queue_len, 1);
    cr_assert_eq(c.trim.queue_id, 7);
    cr_assert_eq(c.trim.from, 3);
    cr_assert_eq(c.trim.to, 9);
    cr_assert_eq(c.trim.bytes, 100);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_assert_eq(c.queue_len, 4);
    cr_assert_eq(memcmp(c.queue, "ns%q", 4), 0);
    cr_assert_eq(c.trim.to, UINT64_MAX);
    cr_assert_eq(idx__entry_next(&it, &c), 0);

    /* Builder bounds. */
    idx_cmd_begin(&w, 1);
    idx_cmd_trim(&w, "q", 1, 5, 5, 0);
    cr_assert_eq(idx_cmd_end(&w), TERN_EINVAL, "to must pass from");
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_update(&w, "q", 0, &s);
    cr_assert_eq(idx_cmd_end(&w), TERN_EINVAL);
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_update(&w, "q", 0x10, &s);
    cr_assert_eq(idx_cmd_end(&w), TERN_EINVAL);
    s.overflow = 2;
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create_opts(&w, "q", &s);
    cr_assert_eq(idx_cmd_end(&w), TERN_EINVAL);
    tern_wbuf_free(&w);
}

/* Patch one byte of a sealed single-command entry, reseal the checksum
 * and expect the validator's verdict. */
static void expect_patched(const struct tern_wbuf *w,
                           size_t at,
                           uint8_t value,
                           int want)
{
    uint8_t *b = malloc(w->len);
    cr_assert_not_null(b);
    memcpy(b, w->base, w->len);
    b[at] = value;
    struct tern_wbuf t = {.base = b, .len = w->len, .cap = w->len};
    /* Reseal: idx_cmd_end recomputes length and checksum. */
    cr_assert_eq(idx_cmd_end(&t), 0);
    cr_assert_eq(idx_cmd_validate(b, w->len), want, "byte %zu = %u", at, value);
    free(b);
}

/* The queue value (keys.c, DBI "queues") is written whole: every byte
 * of it comes from the encoder, none from the caller's buffer, and it
 * decodes back to the same value. */
Test(index_retention, queue_value_is_written_whole)
{
    struct idx__queue_val q = {
        .id = 7,
        .created_index = 11,
        .start_offset = 3,
        .next_offset = 9,
        .bytes = 600,
        .settings = {.max_age_ms = 1000,
                     .max_bytes = 1 << 20,
                     .max_messages = 50,
                     .overflow = IDX_OVERFLOW_REJECT},
    };
    uint8_t a[IDX__QUEUE_VAL_SIZE], b[IDX__QUEUE_VAL_SIZE];
    struct idx__queue_val back;
    cr_assert_eq(IDX__QUEUE_VAL_SIZE, 4 + 4 + 8 * 8 + 4 + 4);
    memset(a, 0x00, sizeof a);
    memset(b, 0xa5, sizeof b);
    idx__queue_val_encode(a, &q);
    idx__queue_val_encode(b, &q);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    cr_assert_eq(idx__queue_val_decode(a, sizeof a, &back), 0);
    cr_expect(back.id == 7 && back.created_index == 11 &&
              back.start_offset == 3 && back.next_offset == 9 &&
              back.bytes == 600);
    cr_expect(back.settings.max_age_ms == 1000 &&
              back.settings.max_bytes == 1 << 20 &&
              back.settings.max_messages == 50 &&
              back.settings.overflow == IDX_OVERFLOW_REJECT);
    cr_expect_eq(idx__queue_val_decode(a, sizeof a - 1, &back), TERN_ECORRUPT);
}

Test(index_retention, validator_rejects_bad_bodies)
{
    struct tern_wbuf w;
    struct idx_queue_settings s = {.max_bytes = 5};
    /* Command bodies start at 24 + 5 (type, body_len); a 1-byte qname
     * "q" takes 2 bytes. */
    size_t body = IDX__CMD_HDR_SIZE + 5;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create_opts(&w, "q", &s);
    cr_assert_eq(idx_cmd_end(&w), 0);
    expect_patched(&w, body + 2 + 24, 1, 0);               /* reject: ok */
    expect_patched(&w, body + 2 + 24, 2, TERN_EMALFORMED); /* overflow 2 */

    idx_cmd_begin(&w, 1);
    idx_cmd_queue_update(&w, "q", IDX_SET_MAX_BYTES, &s);
    cr_assert_eq(idx_cmd_end(&w), 0);
    expect_patched(&w, body + 2, 0, TERN_EMALFORMED);     /* mask 0 */
    expect_patched(&w, body + 2, 0x12, TERN_EMALFORMED);  /* unknown bit */
    expect_patched(&w, body + 2 + 4, 1, TERN_EMALFORMED); /* unmasked age */
    expect_patched(&w, body + 2 + 4 + 8, 9, 0);           /* masked bytes */

    idx_cmd_begin(&w, 1);
    idx_cmd_trim(&w, "q", 1, 5, 6, 0);
    cr_assert_eq(idx_cmd_end(&w), 0);
    expect_patched(&w, body + 2 + 16, 5, TERN_EMALFORMED); /* to == from */
    expect_patched(&w, body + 2 + 16, 7, 0);               /* to > from */
    tern_wbuf_free(&w);
}

/* ---- Trimming: the leader's plan, applied as TRIM ------------------------ */

Test(index_retention, drop_oldest_by_count)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_settings s = limits(3, 0, IDX_OVERFLOW_DROP_OLDEST);
    unsigned n = 0;
    uint64_t next;
    cr_assert_eq(create_opts(e, 1, "q", &s), 0);
    for (uint64_t i = 0; i < 5; i++) {
        struct idx_result r = produce_at(e, 2 + 2 * i, 1000, "q", 1, 10);
        cr_assert_eq(r.status, 0);
        cr_assert_eq(r.base_offset, i);
        (void)trim_now(e, 3 + 2 * i, 1000, "q");
    }
    struct idx_queue_info qi = info(e, "q");
    cr_assert_eq(qi.start_offset, 2);
    cr_assert_eq(qi.next_offset, 5);
    cr_assert_eq(qi.bytes, 30);
    cr_assert_eq(qi.settings.max_messages, 3);
    /* A batch of 2 trims 2 more: once the leader planned it. */
    cr_assert_eq(produce_at(e, 12, 1000, "q", 2, 10).status, 0);
    cr_assert_eq(info(e, "q").start_offset, 2, "not inside the produce");
    cr_assert_eq(trim_now(e, 13, 1000, "q"), 2);
    qi = info(e, "q");
    cr_assert_eq(qi.start_offset, 4);
    cr_assert_eq(qi.next_offset, 7);
    /* Below the low watermark: TERN_EOFFSET naming the first offset. */
    int rc = idx_fetch(e, "q", 1, 10, 1 << 20, th_count_fetched, &n, &next);
    cr_assert_eq(rc, TERN_EOFFSET);
    cr_assert(strstr(idx_errmsg(e), "first offset 4") != NULL, "%s",
              idx_errmsg(e));
    cr_assert_eq(idx_fetch(e, "q", 4, 10, 1 << 20, th_count_fetched, &n, &next),
                 0);
    cr_assert_eq(n, 3);
    /* A batch larger than max_messages is refused under drop-oldest. */
    cr_assert_eq(produce_at(e, 14, 1000, "q", 4, 10).status, TERN_EQUEUEFULL);
    cr_assert_eq(info(e, "q").next_offset, 7);
    idx_close(e);
}

Test(index_retention, drop_oldest_by_bytes_and_usage)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_settings s = limits(0, 100, IDX_OVERFLOW_DROP_OLDEST);
    uint64_t queues = 0, bytes = 0;
    cr_assert_eq(create_opts(e, 1, "q", &s), 0);
    cr_assert_eq(produce_at(e, 2, 1000, "q", 2, 40).status, 0); /* 80 */
    cr_assert_eq(produce_at(e, 3, 1000, "q", 1, 30).status, 0); /* 110 */
    cr_assert_eq(trim_now(e, 4, 1000, "q"), 1);
    struct idx_queue_info qi = info(e, "q");
    cr_assert_eq(qi.start_offset, 1);
    cr_assert_eq(qi.bytes, 70);
    cr_assert_eq(idx_ns_usage(e, NULL, &queues, &bytes), 0);
    cr_assert_eq(queues, 1);
    cr_assert_eq(bytes, 70, "namespace usage goes down with trimming");
    /* Exactly at the limit holds. */
    cr_assert_eq(produce_at(e, 5, 1000, "q", 1, 30).status, 0); /* 100 */
    cr_assert_eq(trim_now(e, 6, 1000, "q"), 0);
    cr_assert_eq(info(e, "q").start_offset, 1);
    cr_assert_eq(info(e, "q").bytes, 100);
    cr_assert_eq(produce_at(e, 7, 1000, "q", 1, 101).status, TERN_EQUEUEFULL);
    idx_close(e);
}

Test(index_retention, reject_by_count_and_bytes)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_settings s = limits(3, 0, IDX_OVERFLOW_REJECT);
    cr_assert_eq(create_opts(e, 1, "c", &s), 0);
    s = limits(0, 50, IDX_OVERFLOW_REJECT);
    cr_assert_eq(create_opts(e, 2, "b", &s), 0);
    cr_assert_eq(produce_at(e, 3, 1000, "c", 2, 10).status, 0);
    struct idx_result r = produce_at(e, 4, 1000, "c", 2, 10);
    cr_assert_eq(r.status, TERN_EQUEUEFULL);
    cr_assert_eq(r.count, 0);
    cr_assert_eq(produce_at(e, 5, 1000, "c", 1, 10).status, 0);
    cr_assert_eq(produce_at(e, 6, 1000, "c", 1, 10).status, TERN_EQUEUEFULL);
    struct idx_queue_info qi = info(e, "c");
    cr_assert_eq(qi.start_offset, 0);
    cr_assert_eq(qi.next_offset, 3);

    cr_assert_eq(produce_at(e, 7, 1000, "b", 1, 40).status, 0);
    cr_assert_eq(produce_at(e, 8, 1000, "b", 1, 11).status, TERN_EQUEUEFULL);
    cr_assert_eq(produce_at(e, 9, 1000, "b", 1, 10).status, 0);
    qi = info(e, "b");
    cr_assert_eq(qi.bytes, 50);
    cr_assert_eq(qi.next_offset, 2);
    idx_close(e);
}

Test(index_retention, update_changes_masked_fields_only)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_settings s = limits(10, 1000, IDX_OVERFLOW_REJECT);
    s.max_age_ms = 5000;
    cr_assert_eq(create_opts(e, 1, "q", &s), 0);
    for (uint64_t i = 0; i < 6; i++) {
        cr_assert_eq(produce_at(e, 2 + i, 1000, "q", 1, 10).status, 0);
    }
    struct idx_queue_settings u = limits(4, 0, IDX_OVERFLOW_DROP_OLDEST);
    cr_assert_eq(
        update(e, 8, "q", IDX_SET_MAX_MESSAGES | IDX_SET_OVERFLOW, &u).status,
        0);
    struct idx_queue_info qi = info(e, "q");
    cr_assert_eq(qi.settings.max_messages, 4);
    cr_assert_eq(qi.settings.overflow, IDX_OVERFLOW_DROP_OLDEST);
    cr_assert_eq(qi.settings.max_bytes, 1000, "unmasked: unchanged");
    cr_assert_eq(qi.settings.max_age_ms, 5000, "unmasked: unchanged");
    /* The lowered limit applies at the leader's next plan. */
    cr_assert_eq(qi.start_offset, 0);
    cr_assert_eq(trim_now(e, 9, 1000, "q"), 2);
    cr_assert_eq(produce_at(e, 90, 1000, "q", 1, 10).status, 0);
    cr_assert_eq(trim_now(e, 91, 1000, "q"), 1);
    qi = info(e, "q");
    cr_assert_eq(qi.start_offset, 3);
    cr_assert_eq(qi.next_offset, 7);
    cr_assert_eq(update(e, 92, "nope", IDX_SET_MAX_AGE, &u).status,
                 TERN_ENOQUEUE);
    /* A QUEUE_CREATE without settings (only the earlier release writes
     * one) gets no limits: its queues kept every message. */
    cr_assert_eq(create_opts(e, 93, "d", NULL), 0);
    qi = info(e, "d");
    cr_assert_eq(qi.settings.max_age_ms, 0);
    cr_assert_eq(qi.settings.max_bytes, 0);
    cr_assert_eq(qi.settings.max_messages, 0);
    cr_assert_eq(qi.settings.overflow, IDX_OVERFLOW_DROP_OLDEST);
    idx_close(e);
}

/* ---- By age ----------------------------------------------------------------
 */

/* A queue of the earlier release (QUEUE_CREATE without settings, entries
 * without TERM) keeps messages far older than the default max_age through
 * the leader's plans and a rebuild; QUEUE_UPDATE then trims it as any
 * queue. */
Test(index_retention, earlier_release_queue_keeps_everything)
{
    const uint64_t day = 24ull * 3600 * 1000;
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t index = 1;
    cr_assert_eq(create_opts(e, index++, "old", NULL), 0);
    for (uint64_t i = 0; i < 6; i++) {
        cr_assert_eq(produce_at(e, index++, 1000 + i, "old", 1, 10).status, 0);
    }
    struct idx_queue_info qi = info(e, "old");
    cr_assert_eq(qi.settings.max_age_ms, 0);
    cr_assert_eq(qi.settings.max_bytes, 0);
    cr_assert_eq(qi.settings.max_messages, 0);
    cr_assert_eq(qi.settings.overflow, IDX_OVERFLOW_DROP_OLDEST);
    /* Thirty days later: nothing to trim. */
    cr_assert_eq(trim_now(e, index++, 30 * day, "old"), 0);
    cr_assert_eq(trim_now(e, index++, 60 * day, "old"), 0);
    idx_close(e);
    e = th_open(th_dir_a, 0);
    qi = info(e, "old");
    cr_assert_eq(qi.settings.max_age_ms, 0, "the rebuild keeps no limits");
    cr_assert_eq(qi.start_offset, 0);
    cr_assert_eq(qi.next_offset, 6);
    cr_assert_eq(trim_now(e, index++, 90 * day, "old"), 0);
    /* Limits set by an update apply at the next plan. */
    struct idx_queue_settings u = {.max_messages = 2};
    cr_assert_eq(update(e, index++, "old", IDX_SET_MAX_MESSAGES, &u).status, 0);
    cr_assert_eq(trim_now(e, index++, 90 * day, "old"), 4);
    qi = info(e, "old");
    cr_assert_eq(qi.start_offset, 4);
    cr_assert_eq(qi.next_offset, 6);
    idx_close(e);
}

Test(index_retention, trim_by_age_and_stale_plans)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_settings s = {.max_age_ms = 10000};
    const char *names[] = {"a", "b", "c"};
    uint64_t index = 1;
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(create_opts(e, index++, names[i], &s), 0);
    }
    s.max_age_ms = 0;
    cr_assert_eq(create_opts(e, index++, "z", &s), 0);
    /* Messages at 1000, 2000, ..., 5000 in each queue. */
    for (uint64_t t = 1000; t <= 5000; t += 1000) {
        for (size_t i = 0; i < 3; i++) {
            cr_assert_eq(produce_at(e, index++, t, names[i], 1, 10).status, 0);
        }
        cr_assert_eq(produce_at(e, index++, t, "z", 1, 10).status, 0);
    }
    /* At 13500 everything older than 3500 goes: offsets 0..2. */
    cr_assert_eq(trim_now(e, index++, 13500, "a"), 3);
    cr_assert_eq(trim_now(e, index++, 13500, "b"), 3);
    cr_assert_eq(info(e, "a").start_offset, 3);
    cr_assert_eq(info(e, "b").start_offset, 3);
    cr_assert_eq(info(e, "b").bytes, 20);
    cr_assert_eq(info(e, "c").start_offset, 0, "not planned yet");
    cr_assert_eq(trim_now(e, index++, 13500, "c"), 3);
    cr_assert_eq(trim_now(e, index++, 13500, "z"), 0, "no max_age");
    /* Everything expired: the queue is empty at its next offset. */
    cr_assert_eq(trim_now(e, index++, 100000, "a"), 2);
    cr_assert_eq(info(e, "a").start_offset, 5);
    cr_assert_eq(info(e, "a").bytes, 0);
    cr_assert_eq(info(e, "z").start_offset, 0);
    cr_assert_eq(idx_last_append_ms(e), 100000);

    /* A stale plan changes nothing: wrong start, wrong incarnation, past
     * the end, more bytes than the queue holds. */
    struct idx_trim_plan p;
    cr_assert_eq(idx_trim_plan(e, "b", 100000, 100, &p), 0);
    cr_assert_eq(p.from, 3);
    cr_assert_eq(p.to, 5);
    const struct
    {
        uint64_t qid, from, to, bytes;
    } bad[] = {{p.queue_id, 2, 5, 20},
               {p.queue_id + 100, 3, 5, 20},
               {p.queue_id, 3, 6, 20},
               {p.queue_id, 3, 5, 21}};
    for (size_t i = 0; i < TERN_ARRAY_SIZE(bad); i++) {
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 100000);
        idx_cmd_trim(&w, "b", bad[i].qid, bad[i].from, bad[i].to, bad[i].bytes);
        cr_assert_eq(run1(e, index++, &w).status, TERN_EINVAL, "case %zu", i);
        cr_assert_eq(info(e, "b").start_offset, 3);
        cr_assert_eq(info(e, "b").bytes, 20);
    }
    idx_close(e);
}

/* ---- Offset for time -------------------------------------------------------
 */

Test(index_retention, offset_for_time)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t off = 99;
    cr_assert_eq(create_opts(e, 1, "q", NULL), 0);
    cr_assert_eq(idx_offset_for_time(e, "q", 0, &off), 0);
    cr_assert_eq(off, 0, "empty queue: its next offset");
    cr_assert_eq(produce_at(e, 2, 1000, "q", 2, 5).status, 0); /* 0, 1 */
    cr_assert_eq(produce_at(e, 3, 2000, "q", 3, 5).status, 0); /* 2..4 */
    cr_assert_eq(produce_at(e, 4, 3000, "q", 1, 5).status, 0); /* 5 */
    const uint64_t cases[][2] = {{0, 0},    {1000, 0}, {1001, 2}, {2000, 2},
                                 {2500, 5}, {3000, 5}, {3001, 6}};
    for (size_t i = 0; i < TERN_ARRAY_SIZE(cases); i++) {
        cr_assert_eq(idx_offset_for_time(e, "q", cases[i][0], &off), 0);
        cr_assert_eq(off, cases[i][1], "time %llu -> %llu, want %llu",
                     (unsigned long long)cases[i][0], (unsigned long long)off,
                     (unsigned long long)cases[i][1]);
    }
    cr_assert_eq(idx_offset_for_time(e, "nope", 0, &off), TERN_ENOQUEUE);
    idx_close(e);
}

/* ---- The cleaner ------------------------------------------------------------
 */

Test(index_retention, cleaner_bounded_batches)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_settings s = limits(2, 0, IDX_OVERFLOW_DROP_OLDEST);
    unsigned done = 0;
    cr_assert_eq(create_opts(e, 1, "q", &s), 0);
    cr_assert_not(idx_clean_pending(e));
    for (uint64_t i = 0; i < 12; i++) {
        cr_assert_eq(produce_at(e, 2 + i, 1000, "q", 1, 10).status, 0);
    }
    cr_assert_eq(trim_now(e, 20, 1000, "q"), 10);
    cr_assert_eq(msgs_rows(e), 12, "trimmed rows stay for the cleaner");
    cr_assert(idx_clean_pending(e));
    cr_assert_eq(idx_clean_step(e, 4, &done), 0);
    cr_assert_eq(done, 4);
    cr_assert_eq(msgs_rows(e), 8);
    /* Reads are unaffected meanwhile. */
    struct th_msgs m = {0};
    cr_assert_eq(info(e, "q").start_offset, 10);
    cr_assert_eq(th_fetch_all(e, "q", 100, 1 << 20, &m), 0);
    cr_assert_eq(m.n, 2);
    cr_assert_eq(m.v[0].offset, 10);
    th_msgs_free(&m);
    cr_assert_geq(clean_all(e, 4), 2);
    cr_assert_eq(msgs_rows(e), 2);
    cr_assert_not(idx_clean_pending(e));
    cr_assert_eq(idx_clean_step(e, 4, &done), 0);
    cr_assert_eq(done, 0);
    idx_close(e);
}

Test(index_retention, delete_leaves_rows_to_cleaner_and_recreate_is_fresh)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct tern_wbuf w;
    uint64_t off = 7;
    cr_assert_eq(create_opts(e, 1, "q", NULL), 0);
    for (uint64_t i = 0; i < 5; i++) {
        cr_assert_eq(produce_at(e, 2 + i, 1000, "q", 2, 10).status, 0);
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_group_commit(&w, "q", "g", 6);
    cr_assert_eq(run1(e, 7, &w).status, 0);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_queue_delete(&w, "q");
    cr_assert_eq(run1(e, 8, &w).status, 0);
    cr_assert_eq(msgs_rows(e), 10, "delete is O(1) in the apply txn");
    cr_assert_eq(dbi_rows(e, e->dbi_groups), 1);
    /* Re-created at once: a new, empty incarnation without group offsets. */
    cr_assert_eq(create_opts(e, 9, "q", NULL), 0);
    struct idx_queue_info qi = info(e, "q");
    cr_assert_eq(qi.start_offset, 0);
    cr_assert_eq(qi.next_offset, 0);
    cr_assert_eq(qi.bytes, 0);
    cr_assert_eq(idx_group_offset(e, "q", "g", &off), 0);
    cr_assert_eq(off, 0);
    cr_assert_eq(produce_at(e, 10, 1000, "q", 1, 10).status, 0);
    clean_all(e, 3);
    cr_assert_eq(msgs_rows(e), 1, "only the new incarnation's row is left");
    cr_assert_eq(dbi_rows(e, e->dbi_groups), 0);
    cr_assert_not(idx_clean_pending(e));
    uint64_t queues = 0, bytes = 0;
    cr_assert_eq(idx_ns_usage(e, NULL, &queues, &bytes), 0);
    cr_assert_eq(queues, 1);
    cr_assert_eq(bytes, 10);
    idx_close(e);
}

/* ---- Rebuild ---------------------------------------------------------------
 */

Test(index_retention, rebuild_gives_same_low_watermarks)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_queue_settings s = limits(3, 0, IDX_OVERFLOW_DROP_OLDEST);
    uint64_t index = 1;
    cr_assert_eq(create_opts(e, index++, "count", &s), 0);
    s = limits(0, 25, IDX_OVERFLOW_DROP_OLDEST);
    cr_assert_eq(create_opts(e, index++, "bytes", &s), 0);
    s = (struct idx_queue_settings){.max_age_ms = 1500};
    cr_assert_eq(create_opts(e, index++, "age", &s), 0);
    for (uint64_t t = 1000; t <= 6000; t += 1000) {
        cr_assert_eq(produce_at(e, index++, t, "count", 1, 10).status, 0);
        cr_assert_eq(produce_at(e, index++, t, "bytes", 1, 10).status, 0);
        cr_assert_eq(produce_at(e, index++, t, "age", 1, 10).status, 0);
    }
    const char *names[] = {"count", "bytes", "age"};
    for (size_t i = 0; i < 3; i++) {
        (void)trim_now(e, index++, 6000, names[i]);
    }
    clean_all(e, 5);
    struct idx_queue_info before[3];
    for (size_t i = 0; i < 3; i++) {
        before[i] = info(e, names[i]);
    }
    cr_assert_eq(before[0].start_offset, 3);
    cr_assert_eq(before[1].start_offset, 4);
    cr_assert_eq(before[2].start_offset, 4);
    idx_close(e);
    e = th_open(th_dir_a, 0);
    for (size_t i = 0; i < 3; i++) {
        struct idx_queue_info qi = info(e, names[i]);
        cr_assert_eq(qi.start_offset, before[i].start_offset, "%s", names[i]);
        cr_assert_eq(qi.next_offset, before[i].next_offset);
        cr_assert_eq(qi.bytes, before[i].bytes);
    }
    /* The replay re-created the trimmed rows: the cleaner removes them. */
    cr_assert(idx_clean_pending(e));
    clean_all(e, 5);
    cr_assert_eq(msgs_rows(e), 3 + 2 + 2);
    idx_close(e);
}
