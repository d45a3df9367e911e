/* Unit tests of shared groups in index/ (docs/WORKQUEUES.md): the codec of
 * SHARED_CONFIG, DELIVER, SETTLE and DEAD_LETTER (round trip, truncation
 * refusals); delivery of new offsets and redelivery after expiry by the
 * entry's time; ack, nack with delay, extend, release, stale receipts;
 * max_deliveries and the dead-letter copy with its headers; the window
 * and prefetch bounds of the plan; a plan on a state that moved; equal
 * checkpoints on two envs and the same state after a rebuild; TRIM and
 * QUEUE_DELETE; the stream/shared mode refusals. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_shared, .init = th_dirs_init, .fini = th_dirs_fini);

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

static struct idx_result config(struct idx_env *e,
                                uint64_t index,
                                const char *group,
                                uint32_t mask,
                                const struct idx_shared_settings *s)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_shared_config(&w, "q", group, mask, s);
    return run1(e, index, &w);
}

static struct idx_result deliver(struct idx_env *e,
                                 uint64_t index,
                                 uint64_t t,
                                 uint64_t consumer,
                                 const struct idx_deliver_item *it,
                                 uint32_t n)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, t);
    idx_cmd_deliver(&w, "q", "g", consumer, it, n);
    return run1(e, index, &w);
}

static struct idx_result settle1(struct idx_env *e,
                                 uint64_t index,
                                 uint64_t t,
                                 uint64_t offset,
                                 uint32_t count,
                                 uint32_t action,
                                 uint64_t delay)
{
    struct tern_wbuf w;
    struct idx_settle_item it = {offset, count, action, delay};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, t);
    idx_cmd_settle(&w, "q", "g", &it, 1);
    return run1(e, index, &w);
}

static bool done(const struct idx_result *r, uint32_t i)
{
    return ((r->done[i / 64] >> (i % 64)) & 1) != 0;
}

struct plan
{
    struct idx_deliver_item out[IDX_SHARED_LIST_MAX];
    uint32_t n;
    struct idx_deliver_item dead[16];
    uint32_t n_dead;
};

static void plan_bytes(struct idx_env *e,
                       uint64_t consumer,
                       uint32_t max_n,
                       uint64_t max_bytes,
                       uint32_t overhead,
                       uint32_t prefetch,
                       uint64_t t,
                       struct plan *p)
{
    cr_assert_eq(
        idx_deliver_plan(e, "q", "g", consumer, max_n, max_bytes, overhead,
                         prefetch, t, p->out, &p->n, p->dead, 16, &p->n_dead),
        0, "%s", idx_errmsg(e));
}

static void plan(struct idx_env *e,
                 uint64_t consumer,
                 uint32_t max_n,
                 uint32_t prefetch,
                 uint64_t t,
                 struct plan *p)
{
    plan_bytes(e, consumer, max_n, 0, 0, prefetch, t, p);
}

static int grab(void *arg, const struct idx_lease *l)
{
    *(struct idx_lease *)arg = *l;
    return 1;
}

/* The lease row at offset (count 0 when there is none). */
static struct idx_lease row(struct idx_env *e, uint64_t offset)
{
    struct idx_lease l;
    memset(&l, 0, sizeof l);
    cr_assert_eq(idx_shared_leases(e, "q", "g", offset, 1, grab, &l), 0);
    if (l.offset != offset) {
        memset(&l, 0, sizeof l);
    }
    return l;
}

static struct idx_shared_group group(struct idx_env *e)
{
    struct idx_shared_group g;
    cr_assert_eq(idx_shared_group_get(e, "q", "g", &g), 0, "%s", idx_errmsg(e));
    return g;
}

/* Queue "q" with n messages and shared group "g" with the settings
 * masked in s; returns the next raft index. */
static uint64_t setup(struct idx_env *e,
                      uint32_t n,
                      uint32_t mask,
                      const struct idx_shared_settings *s)
{
    th_create(e, 1, "q");
    (void)th_produce(e, 2, "q", 0, 0, n);
    cr_assert_eq(config(e, 3, "g", mask, s).status, 0);
    return 4;
}

/* ---- codec --------------------------------------------------------------- */

/* Every shortening of the one command of entry w (body_len and the
 * entry's length cut alike) is refused. */
static void expect_truncations_refused(const struct tern_wbuf *w)
{
    uint32_t body = tern_get_u32(w->base + 25);
    cr_assert_eq(w->len, 29 + (size_t)body);
    cr_assert_eq(idx_cmd_validate(w->base, w->len), 0);
    for (uint32_t cut = 0; cut < body; cut++) {
        size_t len = 29 + (size_t)cut;
        uint8_t *b = malloc(len);
        memcpy(b, w->base, len);
        tern_put_u32(b + 25, cut);
        th_entry_reseal(b, len);
        cr_expect_eq(idx_cmd_validate(b, len), TERN_EMALFORMED,
                     "type %u cut to %u of %u", w->base[24], cut, body);
        free(b);
    }
}

Test(index_shared, codec_round_trip_and_truncations)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    struct idx_shared_settings s;
    idx_shared_settings_default(&s);
    s.window = 100;
    (void)snprintf(s.dlq, sizeof s.dlq, "dead");
    struct idx_deliver_item di[2] = {{5, 0}, {9, 3}};
    struct idx_settle_item si[2] = {{5, 1, IDX_SETTLE_ACK, 0},
                                    {9, 4, IDX_SETTLE_NACK, 250}};
    const char hdr_name[] = "h";
    struct idx_header h = {hdr_name, 1, "v", 1};
    struct idx_props pr = {.producer_ts_ms = 7,
                           .key = "k",
                           .key_len = 1,
                           .headers = &h,
                           .n_headers = 1};
    struct tern_wbuf pb;
    tern_wbuf_init(&pb);
    idx_props_encode(&pb, &pr);
    cr_assert_eq(pb.err, 0);
    struct idx_pmsg m = {"body", 4, pb.base, (uint32_t)pb.len};

    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 42);
    idx_cmd_shared_config(&w, "q", "g",
                          IDX_SHARED_SET_WINDOW | IDX_SHARED_SET_DLQ, &s);
    idx_cmd_deliver(&w, "q", "g", 77, di, 2);
    idx_cmd_settle(&w, "q", "g", si, 2);
    idx_cmd_dead_letter(&w, "q", "g", 9, 16, "max-deliveries", &m);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_SHARED_CONFIG);
    cr_expect_eq(c.mask, IDX_SHARED_SET_WINDOW | IDX_SHARED_SET_DLQ);
    cr_expect_eq(c.shared.window, 100);
    cr_expect_eq(c.shared.ack_timeout_ms, 0, "unmasked fields are 0");
    cr_expect_str_eq(c.shared.dlq, "dead");

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_DELIVER);
    cr_expect_eq(c.consumer_id, 77);
    cr_assert_eq(c.n_items, 2);
    struct idx_deliver_item d;
    idx__cmd_deliver_item(&c, 1, &d);
    cr_expect(d.offset == 9 && d.count == 3);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_SETTLE);
    struct idx_settle_item x;
    idx__cmd_settle_item(&c, 1, &x);
    cr_expect(x.offset == 9 && x.count == 4 && x.action == IDX_SETTLE_NACK &&
              x.delay_ms == 250);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_DEAD_LETTER);
    cr_expect(c.dl.offset == 9 && c.dl.count == 16);
    cr_expect_eq(c.reason_len, strlen("max-deliveries"));
    struct idx__msg_iter mi;
    const uint8_t *data;
    uint32_t len;
    idx__msg_iter_init(&mi, &c);
    cr_assert_eq(idx__msg_iter_next(&mi, &data, &len), 1);
    cr_expect(len == 4 && memcmp(data, "body", 4) == 0);
    struct idx_props got;
    cr_assert_eq(idx_props_decode(mi.props, mi.props_len, &got), 0);
    cr_expect_eq(got.producer_ts_ms, 7);
    cr_expect_eq(got.n_headers, 5, "the original header and the four");
    struct idx_header gh;
    cr_assert_eq(idx_props_header(mi.props, mi.props_len, 0, &gh), 0);
    cr_expect(gh.name_len == 1 && gh.name[0] == 'h');
    cr_assert_eq(idx_props_header(mi.props, mi.props_len, 2, &gh), 0);
    cr_expect(gh.value_len == 1 && memcmp(gh.value, "9", 1) == 0,
              "tern-dlq-offset");
    cr_assert_eq(idx_props_header(mi.props, mi.props_len, 3, &gh), 0);
    cr_expect(gh.value_len == 2 && memcmp(gh.value, "16", 2) == 0,
              "tern-dlq-deliveries");
    cr_assert_eq(idx__entry_next(&it, &c), 0);
    tern_wbuf_free(&w);

    /* Each type alone, cut at every length. */
    for (int type = 17; type <= 20; type++) {
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 42);
        switch (type) {
        case 17:
            idx_cmd_shared_config(&w, "q", "g", IDX_SHARED_SET_DLQ, &s);
            break;
        case 18:
            idx_cmd_deliver(&w, "q", "g", 77, di, 2);
            break;
        case 19:
            idx_cmd_settle(&w, "q", "g", si, 2);
            break;
        default:
            idx_cmd_dead_letter(&w, "q", "g", 9, 16, "r", &m);
            break;
        }
        cr_assert_eq(idx_cmd_end(&w), 0);
        expect_truncations_refused(&w);
        tern_wbuf_free(&w);
    }
    tern_wbuf_free(&pb);
}

Test(index_shared, builder_refusals)
{
    struct tern_wbuf w;
    struct idx_deliver_item di[2] = {{9, 0}, {5, 0}};
    struct idx_settle_item ack_delay = {5, 1, IDX_SETTLE_ACK, 10};
    struct idx_settle_item zero = {5, 0, IDX_SETTLE_NACK, 0};
    struct idx_shared_settings s;
    idx_shared_settings_default(&s);
    s.window = IDX_SHARED_WINDOW_MAX + 1;
    struct idx_deliver_item *many =
        calloc(IDX_SHARED_LIST_MAX + 1, sizeof *many);
    for (uint32_t i = 0; i <= IDX_SHARED_LIST_MAX; i++) {
        many[i].offset = i;
    }
    struct
    {
        int kind;
        int code;
    } cases[] = {{0, TERN_EINVAL}, {1, TERN_EINVAL}, {2, TERN_EINVAL},
                 {3, TERN_EINVAL}, {4, TERN_EINVAL}, {5, TERN_EINVAL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 1);
        switch (cases[i].kind) {
        case 0:
            idx_cmd_deliver(&w, "q", "g", 1, di, 2); /* not increasing */
            break;
        case 1:
            idx_cmd_settle(&w, "q", "g", &ack_delay, 1);
            break;
        case 2:
            idx_cmd_settle(&w, "q", "g", &zero, 1);
            break;
        case 3:
            idx_cmd_shared_config(&w, "q", "g", IDX_SHARED_SET_WINDOW, &s);
            break;
        case 4:
            idx_cmd_deliver(&w, "q", "g", 1, many, IDX_SHARED_LIST_MAX + 1);
            break;
        default:
            idx_cmd_shared_config(&w, "q", "g", 0x10, &s);
            break;
        }
        cr_expect_eq(idx_cmd_end(&w), cases[i].code, "case %zu", i);
        tern_wbuf_free(&w);
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_deliver(&w, "q", "g", 1, many, IDX_SHARED_LIST_MAX);
    cr_expect_eq(idx_cmd_end(&w), 0, "1024 offsets is the bound");
    tern_wbuf_free(&w);
    free(many);
}

/* ---- apply -----------------------------------------------------------------
 */

Test(index_shared, deliver_new_then_redeliver_after_expiry)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_shared_settings s = {.ack_timeout_ms = 1000};
    uint64_t i = setup(e, 5, IDX_SHARED_SET_ACK_TIMEOUT, &s);
    struct idx_deliver_item it[2] = {{0, 0}, {1, 0}};
    struct idx_result r = deliver(e, i++, 10000, 7, it, 2);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.count, 2);
    cr_expect(done(&r, 0) && done(&r, 1));
    struct idx_lease l = row(e, 1);
    cr_expect(l.count == 1 && l.ready == 0 && l.consumer_id == 7 &&
              l.deadline_ms == 11000);
    cr_expect_eq(group(e).next, 2);
    cr_expect_eq(group(e).floor, 0);

    /* Not expired at t = 10999: a redelivery is left out. */
    struct idx_deliver_item re = {0, 1};
    r = deliver(e, i++, 10999, 8, &re, 1);
    cr_expect_eq(r.count, 0);
    cr_expect(!done(&r, 0));
    cr_expect_eq(row(e, 0).consumer_id, 7);
    /* Expired at t = 11000 (deadline <= t): delivered again, count 2. */
    r = deliver(e, i++, 11000, 8, &re, 1);
    cr_expect_eq(r.count, 1);
    l = row(e, 0);
    cr_expect(l.count == 2 && l.consumer_id == 8 && l.deadline_ms == 12000);
    /* A new offset must be next: 3 before 2 is left out. */
    struct idx_deliver_item skip = {3, 0};
    r = deliver(e, i++, 11000, 8, &skip, 1);
    cr_expect_eq(r.count, 0);
    cr_expect_eq(group(e).next, 2);
    idx_close(e);
}

Test(index_shared, ack_deletes_and_moves_floor_stale_changes_nothing)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t i = setup(e, 5, 0, NULL);
    struct idx_deliver_item it[3] = {{0, 0}, {1, 0}, {2, 0}};
    cr_expect_eq(deliver(e, i++, 1000, 7, it, 3).count, 3);
    /* Ack 1 first: floor stays at 0. */
    struct idx_result r = settle1(e, i++, 1000, 1, 1, IDX_SETTLE_ACK, 0);
    cr_expect(r.count == 1 && done(&r, 0));
    cr_expect_eq(row(e, 1).count, 0, "the row is gone");
    cr_expect_eq(group(e).floor, 0);
    /* Ack 0: floor jumps over the acknowledged 1 to 2. */
    cr_expect_eq(settle1(e, i++, 1000, 0, 1, IDX_SETTLE_ACK, 0).count, 1);
    cr_expect_eq(group(e).floor, 2);
    uint64_t off = 0;
    cr_assert_eq(idx_group_offset(e, "q", "g", &off), 0);
    cr_expect_eq(off, 2, "the floor is the group's offset for reads");
    /* Stale receipts: a wrong count, an acked offset. */
    r = settle1(e, i++, 1000, 2, 5, IDX_SETTLE_ACK, 0);
    cr_expect(r.status == 0 && r.count == 0 && !done(&r, 0));
    r = settle1(e, i++, 1000, 0, 1, IDX_SETTLE_NACK, 10);
    cr_expect_eq(r.count, 0);
    cr_expect_eq(row(e, 2).count, 1);
    cr_expect_eq(group(e).rows, 1);
    /* Acks are idempotent: acking an acknowledged offset again (a resend
     * whose first attempt committed) answers done and changes nothing. */
    r = settle1(e, i++, 1000, 0, 1, IDX_SETTLE_ACK, 0);
    cr_expect(r.count == 1 && done(&r, 0));
    cr_expect_eq(group(e).floor, 2);
    cr_expect_eq(group(e).rows, 1);
    /* An offset never delivered (>= next) is stale. */
    r = settle1(e, i++, 1000, 4, 1, IDX_SETTLE_ACK, 0);
    cr_expect_eq(r.count, 0);
    /* Ack the last: floor = next. */
    cr_expect_eq(settle1(e, i++, 1000, 2, 1, IDX_SETTLE_ACK, 0).count, 1);
    cr_expect_eq(group(e).floor, 3);
    cr_expect_eq(group(e).rows, 0);
    idx_close(e);
}

Test(index_shared, nack_with_delay_extend_release)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_shared_settings s = {.ack_timeout_ms = 1000};
    uint64_t i = setup(e, 3, IDX_SHARED_SET_ACK_TIMEOUT, &s);
    struct idx_deliver_item it[3] = {{0, 0}, {1, 0}, {2, 0}};
    cr_expect_eq(deliver(e, i++, 5000, 7, it, 3).count, 3);
    /* nack 0 with 300 ms: ready at 5300, not before. */
    cr_expect_eq(settle1(e, i++, 5000, 0, 1, IDX_SETTLE_NACK, 300).count, 1);
    struct idx_lease l = row(e, 0);
    cr_expect(l.ready == 1 && l.deadline_ms == 5300 && l.count == 1);
    struct idx_deliver_item re = {0, 1};
    cr_expect_eq(deliver(e, i++, 5299, 8, &re, 1).count, 0);
    cr_expect_eq(deliver(e, i++, 5300, 8, &re, 1).count, 1);
    cr_expect_eq(row(e, 0).count, 2);
    /* extend 1 to t + 10 s: not redeliverable at its old deadline. */
    cr_expect_eq(settle1(e, i++, 5500, 1, 1, IDX_SETTLE_EXTEND, 10000).count,
                 1);
    cr_expect_eq(row(e, 1).deadline_ms, 15500);
    re = (struct idx_deliver_item){1, 1};
    cr_expect_eq(deliver(e, i++, 6000, 8, &re, 1).count, 0);
    /* release 2: ready at once. */
    cr_expect_eq(settle1(e, i++, 5600, 2, 1, IDX_SETTLE_RELEASE, 0).count, 1);
    l = row(e, 2);
    cr_expect(l.ready == 1 && l.deadline_ms == 5600);
    /* extend of a ready row is stale. */
    cr_expect_eq(settle1(e, i++, 5600, 2, 1, IDX_SETTLE_EXTEND, 100).count, 0);
    struct plan p;
    plan(e, 9, 10, 10, 5600, &p);
    cr_expect_eq(p.n, 1, "only 2 is due");
    cr_expect(p.out[0].offset == 2 && p.out[0].count == 1);
    idx_close(e);
}

static int count_cb(void *arg, const struct idx_fetched *f)
{
    struct idx_fetched *out = arg;
    *out = *f;
    return 0;
}

struct dlq_check
{
    char headers[4][64];
    char body[16];
    uint32_t n_headers;
};

static int dlq_cb(void *arg, const struct idx_fetched *f)
{
    struct dlq_check *d = arg;
    struct idx_props p;
    memcpy(d->body, f->data, f->len < 15 ? f->len : 15);
    cr_assert_eq(idx_props_decode(f->props, f->props_len, &p), 0);
    d->n_headers = p.n_headers;
    for (uint32_t i = 0; i < 4 && i < p.n_headers; i++) {
        struct idx_header h;
        cr_assert_eq(
            idx_props_header(f->props, f->props_len, p.n_headers - 4 + i, &h),
            0);
        (void)snprintf(d->headers[i], sizeof d->headers[i], "%.*s=%.*s",
                       (int)h.name_len, h.name, (int)h.value_len,
                       (const char *)h.value);
    }
    return 0;
}

Test(index_shared, max_deliveries_dead_letters_to_the_dlq)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_shared_settings s = {.ack_timeout_ms = 100, .max_deliveries = 2};
    uint64_t i = setup(
        e, 2, IDX_SHARED_SET_ACK_TIMEOUT | IDX_SHARED_SET_MAX_DELIVERIES, &s);
    struct idx_deliver_item it = {0, 0};
    cr_expect_eq(deliver(e, i++, 1000, 7, &it, 1).count, 1);
    it.count = 1;
    cr_expect_eq(deliver(e, i++, 1100, 7, &it, 1).count, 1);
    /* A third delivery would pass max_deliveries: apply refuses it ... */
    it.count = 2;
    cr_expect_eq(deliver(e, i++, 1200, 7, &it, 1).count, 0);
    /* ... and the plan lists it as a dead-letter candidate. */
    struct plan p;
    plan(e, 7, 10, 10, 1200, &p);
    cr_expect_eq(p.n_dead, 1);
    cr_expect(p.dead[0].offset == 0 && p.dead[0].count == 2);
    cr_expect_eq(p.n, 1, "offset 1 is new");
    /* Not due at 1150: a DEAD_LETTER changes nothing. */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1150);
    cr_assert_eq(
        idx_dead_letter_plan(e, "q", "g", &p.dead[0], "max-deliveries", &w), 0);
    struct idx_result r = run1(e, i++, &w);
    cr_expect(r.status == 0 && r.count == 0);
    cr_expect_eq(row(e, 0).count, 2);
    /* Due: the row goes, the DLQ is created and holds the copy. */
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1200);
    cr_assert_eq(
        idx_dead_letter_plan(e, "q", "g", &p.dead[0], "max-deliveries", &w), 0);
    r = run1(e, i++, &w);
    cr_expect_eq(r.status, 0);
    cr_expect(r.count == 1 && r.base_offset == 0);
    cr_expect_eq(row(e, 0).count, 0);
    cr_expect_eq(group(e).floor, 1);
    struct dlq_check d;
    memset(&d, 0, sizeof d);
    cr_assert_eq(idx_message_get(e, "q-dlq-g", 0, 0, dlq_cb, &d), 0, "%s",
                 idx_errmsg(e));
    char want[64];
    th_msg_text(want, sizeof want, "q", 0, 0);
    cr_expect_eq(strncmp(d.body, want, strlen(want) < 15 ? strlen(want) : 15),
                 0);
    cr_expect_eq(d.n_headers, 4);
    cr_expect_str_eq(d.headers[0], "tern-dlq-queue=q");
    cr_expect_str_eq(d.headers[1], "tern-dlq-offset=0");
    cr_expect_str_eq(d.headers[2], "tern-dlq-deliveries=2");
    cr_expect_str_eq(d.headers[3], "tern-dlq-reason=max-deliveries");
    /* The same entry again: the row moved on, nothing appended. */
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1300);
    idx_cmd_dead_letter(&w, "q", "g", 0, 2, "max-deliveries",
                        &(struct idx_pmsg){"x", 1, NULL, 0});
    r = run1(e, i++, &w);
    cr_expect(r.status == 0 && r.count == 0);
    struct idx_fetched f;
    cr_expect_eq(idx_message_get(e, "q-dlq-g", 0, 1, count_cb, &f),
                 TERN_ENOTFOUND);
    idx_close(e);
}

Test(index_shared, plan_keeps_window_and_prefetch)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_shared_settings s = {.window = 4};
    uint64_t i = setup(e, 10, IDX_SHARED_SET_WINDOW, &s);
    struct plan p;
    /* prefetch 3 bounds the first plan. */
    plan(e, 7, 100, 3, 1000, &p);
    cr_assert_eq(p.n, 3);
    cr_expect_eq(deliver(e, i++, 1000, 7, p.out, p.n).count, 3);
    plan(e, 7, 100, 3, 1000, &p);
    cr_expect_eq(p.n, 0, "consumer 7 holds its prefetch");
    /* Another consumer: the window (4 from floor 0) leaves one. */
    plan(e, 8, 100, 100, 1000, &p);
    cr_assert_eq(p.n, 1);
    cr_expect_eq(p.out[0].offset, 3);
    cr_expect_eq(deliver(e, i++, 1000, 8, p.out, p.n).count, 1);
    plan(e, 8, 100, 100, 1000, &p);
    cr_expect_eq(p.n, 0, "the window is full");
    /* Apply checks the window too. */
    struct idx_deliver_item past = {4, 0};
    cr_expect_eq(deliver(e, i++, 1000, 8, &past, 1).count, 0);
    /* Acks below the floor open the window. */
    cr_expect_eq(settle1(e, i++, 1000, 0, 1, IDX_SETTLE_ACK, 0).count, 1);
    plan(e, 8, 100, 100, 1000, &p);
    cr_expect_eq(p.n, 1);
    cr_expect_eq(p.out[0].offset, 4);
    /* max_n bounds it as well. */
    plan(e, 8, 0, 100, 1000, &p);
    cr_expect_eq(p.n, 0);
    idx_close(e);
}

Test(index_shared, plan_fits_the_answer_bytes)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    static char big[1000], small[10];
    struct idx_msg msgs[4] = {
        {big, 1000}, {big, 1000}, {big, 1000}, {small, 10}};
    struct tern_wbuf w;
    struct plan p;
    uint64_t i = 4;
    th_create(e, 1, "q");
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_produce(&w, "q", 0, 0, msgs, 4);
    cr_assert_eq(run1(e, 2, &w).count, 4);
    cr_assert_eq(config(e, 3, "g", 0, NULL).status, 0);
    /* New offsets: as many as their bytes and framing (28 each here)
     * allow, one at least. */
    plan_bytes(e, 7, 100, 2 * 1028 + 1027, 28, 100, 1000, &p);
    cr_expect_eq(p.n, 2, "the framing counts");
    plan_bytes(e, 7, 100, 1, 28, 100, 1000, &p);
    cr_assert_eq(p.n, 1, "one message even past the bound");
    plan_bytes(e, 7, 100, 3 * 1028, 28, 100, 1000, &p);
    cr_assert_eq(p.n, 3);
    cr_expect_eq(deliver(e, i++, 1000, 7, p.out, p.n).count, 3);
    /* Due leases (expired at 1000 + 30 s) count the same way, one at
     * least; a plan full in them takes no new offset, not even the small
     * one that would fit the room left. */
    plan_bytes(e, 8, 100, 1, 28, 100, 1000 + 31000, &p);
    cr_assert_eq(p.n, 1);
    cr_expect_eq(p.out[0].offset, 0);
    cr_expect_eq(p.out[0].count, 1);
    plan_bytes(e, 8, 100, 2 * 1028 + 100, 28, 100, 1000 + 31000, &p);
    cr_assert_eq(p.n, 2);
    cr_expect_eq(p.out[1].offset, 1);
    plan_bytes(e, 8, 100, 3 * 1028 + 38, 28, 100, 1000 + 31000, &p);
    cr_assert_eq(p.n, 4);
    cr_expect_eq(p.out[3].offset, 3);
    cr_expect_eq(p.out[3].count, 0);
    idx_close(e);
}

Test(index_shared, plan_on_a_moved_state_is_partly_refused)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_shared_settings s = {.ack_timeout_ms = 100};
    uint64_t i = setup(e, 4, IDX_SHARED_SET_ACK_TIMEOUT, &s);
    struct idx_deliver_item it[2] = {{0, 0}, {1, 0}};
    cr_expect_eq(deliver(e, i++, 1000, 7, it, 2).count, 2);
    struct plan a, b;
    plan(e, 8, 10, 10, 2000, &a); /* 0 and 1 expired, then 2, 3 */
    plan(e, 9, 10, 10, 2000, &b); /* the same offsets */
    cr_assert_eq(a.n, 4);
    cr_assert_eq(b.n, 4);
    /* A settles 1 meanwhile (consumer 7's old receipt) */
    cr_expect_eq(settle1(e, i++, 1500, 1, 1, IDX_SETTLE_ACK, 0).count, 1);
    struct idx_result ra = deliver(e, i++, 2000, 8, a.out, a.n);
    cr_expect_eq(ra.count, 3);
    cr_expect(done(&ra, 0) && !done(&ra, 1) && done(&ra, 2) && done(&ra, 3));
    struct idx_result rb = deliver(e, i++, 2000, 9, b.out, b.n);
    cr_expect_eq(rb.count, 0, "everything moved under plan b");
    cr_expect_eq(row(e, 0).consumer_id, 8);
    /* The old receipt of 0 (count 1) is stale now. */
    cr_expect_eq(settle1(e, i++, 2000, 0, 1, IDX_SETTLE_ACK, 0).count, 0);
    cr_expect_eq(row(e, 0).count, 2);
    idx_close(e);
}

Test(index_shared, mode_refusals)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t i = setup(e, 3, 0, NULL);
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_group_commit(&w, "q", "g", 1);
    cr_expect_eq(run1(e, i++, &w).status, TERN_EINVAL);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_group_commit(&w, "q", "stream", 1);
    cr_expect_eq(run1(e, i++, &w).status, 0);
    cr_expect_eq(config(e, i++, "stream", 0, NULL).status, TERN_EINVAL);
    struct idx_deliver_item it = {0, 0};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_deliver(&w, "q", "stream", 7, &it, 1);
    cr_expect_eq(run1(e, i++, &w).status, TERN_EINVAL);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_deliver(&w, "q", "none", 7, &it, 1);
    cr_expect_eq(run1(e, i++, &w).status, TERN_ENOTFOUND);
    struct plan p;
    uint32_t n, nd;
    cr_expect_eq(idx_deliver_plan(e, "q", "stream", 7, 1, 0, 0, 1, 0, p.out, &n,
                                  p.dead, 1, &nd),
                 TERN_EINVAL);
    idx_close(e);
}

/* ---- determinism, rebuild, retention ----------------------------------------
 */

/* A workload over shared groups with checkpoints every 2 KiB. */
static void workload(struct idx_env *e)
{
    struct idx_shared_settings s = {.ack_timeout_ms = 50, .max_deliveries = 3};
    uint64_t i = setup(
        e, 40, IDX_SHARED_SET_ACK_TIMEOUT | IDX_SHARED_SET_MAX_DELIVERIES, &s);
    uint64_t t = 1000;
    for (int round = 0; round < 30; round++, t += 40) {
        struct plan p;
        plan(e, 1 + (uint64_t)(round % 3), 5, 8, t, &p);
        if (p.n > 0) {
            (void)deliver(e, i++, t, 1 + (uint64_t)(round % 3), p.out, p.n);
        }
        for (uint32_t k = 0; k < p.n_dead; k++) {
            struct tern_wbuf w;
            tern_wbuf_init(&w);
            idx_cmd_begin(&w, t);
            cr_assert_eq(idx_dead_letter_plan(e, "q", "g", &p.dead[k],
                                              "max-deliveries", &w),
                         0);
            (void)run1(e, i++, &w);
        }
        if (p.n > 1 && round % 2 == 0) {
            (void)settle1(e, i++, t, p.out[0].offset, p.out[0].count + 1,
                          IDX_SETTLE_ACK, 0);
        }
        (void)th_produce(e, i++, "q", 0, 0, 1);
    }
}

/* The checkpoint files of a and b are the same, byte for byte; returns
 * how many. */
static int expect_same_ckpts(const char *a, const char *b)
{
    char path[4096];
    struct dirent **list;
    int same = 0;
    (void)snprintf(path, sizeof path, "%s/log", a);
    int n = scandir(path, &list, NULL, alphasort);
    cr_assert_geq(n, 0);
    for (int k = 0; k < n; k++) {
        const char *s = list[k]->d_name;
        size_t l = strlen(s), na, nb;
        if (l > 5 && strcmp(s + l - 5, ".ckpt") == 0) {
            char pa[4200], pb[4200];
            (void)snprintf(pa, sizeof pa, "%s/log/%s", a, s);
            (void)snprintf(pb, sizeof pb, "%s/log/%s", b, s);
            uint8_t *ba = th_read_file(pa, &na), *bb = th_read_file(pb, &nb);
            cr_expect(na == nb && memcmp(ba, bb, na) == 0, "%s differs", s);
            free(ba);
            free(bb);
            same++;
        }
        free(list[k]);
    }
    free(list);
    return same;
}

struct snap
{
    struct idx_lease l[128];
    uint32_t n;
};

static int snap_cb(void *arg, const struct idx_lease *l)
{
    struct snap *s = arg;
    cr_assert_lt(s->n, 128);
    s->l[s->n++] = *l;
    return 0;
}

static void expect_same_state(struct idx_env *a, struct idx_env *b)
{
    struct snap sa = {0}, sb = {0};
    struct idx_shared_group ga = group(a), gb = group(b);
    cr_expect(ga.floor == gb.floor && ga.next == gb.next && ga.rows == gb.rows);
    cr_assert_eq(idx_shared_leases(a, "q", "g", 0, 128, snap_cb, &sa), 0);
    cr_assert_eq(idx_shared_leases(b, "q", "g", 0, 128, snap_cb, &sb), 0);
    cr_assert_eq(sa.n, sb.n);
    cr_expect_eq(memcmp(sa.l, sb.l, sa.n * sizeof sa.l[0]), 0);
}

Test(index_shared, two_envs_end_byte_identical_and_reopen_rebuilds)
{
    struct idx_options oa = {.dir = th_dir_a, .checkpoint_bytes = 2048};
    struct idx_options ob = {.dir = th_dir_b, .checkpoint_bytes = 2048};
    struct idx_env *a = th_open_opts(&oa), *b = th_open_opts(&ob);
    workload(a);
    workload(b);
    struct idx_shared_group g = group(a);
    cr_expect_gt(g.floor, 0, "acks and dead letters moved the floor");
    cr_expect_gt(g.rows, 0, "some leases are open");
    expect_same_state(a, b);
    cr_expect_gt(expect_same_ckpts(th_dir_a, th_dir_b), 2);
    /* Reopen a: the rebuild gives the same shared state. */
    idx_close(a);
    a = th_open_opts(&oa);
    expect_same_state(a, b);
    idx_close(a);
    idx_close(b);
}

Test(index_shared, trim_moves_groups_and_queue_delete_leaves_rows_to_cleaner)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t i = setup(e, 10, 0, NULL);
    struct idx_deliver_item it[4] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}};
    cr_expect_eq(deliver(e, i++, 1000, 7, it, 4).count, 4);
    cr_expect_eq(settle1(e, i++, 1000, 2, 1, IDX_SETTLE_ACK, 0).count, 1);
    /* TRIM [0, 3): rows 0 and 1 go, floor moves to 3 (the row left). */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_trim(&w, "q", 1, 0, 3, 0);
    cr_assert_eq(run1(e, i++, &w).status, 0, "queue id 1, from 0");
    cr_expect_eq(row(e, 0).count, 0);
    cr_expect_eq(row(e, 1).count, 0);
    cr_expect_eq(row(e, 3).count, 1);
    struct idx_shared_group g = group(e);
    cr_expect(g.floor == 3 && g.next == 4 && g.rows == 1);
    /* Acking a trimmed message answers done (no work left on it); a nack
     * of it is stale. */
    cr_expect_eq(settle1(e, i++, 1000, 0, 1, IDX_SETTLE_ACK, 0).count, 1);
    cr_expect_eq(settle1(e, i++, 1000, 1, 1, IDX_SETTLE_NACK, 5).count, 0);
    /* TRIM past next: next moves too. */
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_trim(&w, "q", 1, 3, 6, 0);
    cr_expect_eq(run1(e, i++, &w).status, 0);
    g = group(e);
    cr_expect(g.floor == 6 && g.next == 6 && g.rows == 0);
    struct plan p;
    plan(e, 7, 1, 10, 1000, &p);
    cr_expect(p.n == 1 && p.out[0].offset == 6 && p.out[0].count == 0);
    cr_expect_eq(deliver(e, i++, 1000, 7, p.out, 1).count, 1);

    /* QUEUE_DELETE: the rows stay until the cleaner removes them. */
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_queue_delete(&w, "q");
    cr_expect_eq(run1(e, i++, &w).status, 0);
    cr_expect(idx_clean_pending(e));
    unsigned n = 0;
    for (int k = 0; k < 100 && idx_clean_pending(e); k++) {
        cr_assert_eq(idx_clean_step(e, 4, &n), 0);
        cr_assert_eq(idx_flush(e), 0);
    }
    cr_expect(!idx_clean_pending(e));
    MDB_txn *txn;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_stat(txn, e->dbi_leases, &st), 0);
    mdb_txn_abort(txn);
    cr_expect_eq(st.ms_entries, 0, "the cleaner removed the lease rows");
    idx_close(e);
}
