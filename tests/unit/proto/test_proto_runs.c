/*
 * Unit tests of the runs layout of FETCH answers (proto.h, FETCH, and
 * HELLO's PROTO_FEATURE_RUNS): an answer of runs with and without
 * properties and single messages round trips through the iterator with
 * each message's offset, time, bytes and properties (shown only when
 * asked for); the decoder refuses every malformed variant: a count that
 * does not add up, offsets that do not increase, a run whose bytes hold
 * fewer or more messages than its count, an empty run, an unknown kind,
 * truncation at every byte.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <proto.h>

/* The list bytes of n messages "m<first+i>" (with props: a props block
 * "p<i>" for every second one). */
static void run_list(struct tern_wbuf *l,
                     uint32_t first,
                     uint32_t n,
                     bool props)
{
    char t[16];
    for (uint32_t i = 0; i < n; i++) {
        int k = snprintf(t, sizeof t, "m%u", first + i);
        proto_put_blob(l, t, (uint32_t)k);
        if (props) {
            k = snprintf(t, sizeof t, "p%u", first + i);
            proto_put_blob(l, t, i % 2 == 0 ? (uint32_t)k : 0);
        }
    }
}

/* Offsets 10-14 a run, 15 a single message, 16-18 a run with properties;
 * the answer sealed in w, its body at *body (length *len). */
static void encode_sample(struct tern_wbuf *w,
                          const uint8_t **body,
                          size_t *len)
{
    struct tern_wbuf l;
    struct proto_fetched_msg one = {15, 777, "single", 6, "sp", 2};
    size_t start;
    tern_wbuf_init(w);
    tern_wbuf_init(&l);
    start = proto_fetch_runs_begin(w, PROTO_VERSION_XXH3, 5, 40);
    run_list(&l, 10, 5, false);
    proto_put_fetch_run(w, 10, 500, 5, false, l.base, l.len);
    proto_put_fetch_message(w, &one);
    l.len = 0;
    run_list(&l, 16, 3, true);
    proto_put_fetch_run(w, 16, 600, 3, true, l.base, l.len);
    cr_assert_eq(proto_fetch_runs_end(w, start, 19, 9, 3, 4242), 0);
    tern_wbuf_free(&l);
    *body = w->base + start + PROTO_HEADER_SIZE;
    *len = w->len - start - PROTO_HEADER_SIZE;
}

static void expect_msg(const struct proto_fetched_msg *m,
                       uint64_t offset,
                       uint64_t ts,
                       const char *data,
                       const char *props)
{
    cr_expect_eq(m->offset, offset);
    cr_expect_eq(m->timestamp_ms, ts, "offset %llu",
                 (unsigned long long)offset);
    cr_assert_eq(m->len, strlen(data), "offset %llu",
                 (unsigned long long)offset);
    cr_expect_eq(memcmp(m->data, data, m->len), 0);
    if (props == NULL) {
        cr_expect_eq(m->props_len, 0, "offset %llu",
                     (unsigned long long)offset);
        cr_expect_null(m->props);
    } else {
        cr_assert_eq(m->props_len, strlen(props));
        cr_expect_eq(memcmp(m->props, props, m->props_len), 0);
    }
}

Test(proto_runs, runs_and_single_messages_round_trip)
{
    struct tern_wbuf w;
    const uint8_t *body;
    size_t len;
    struct proto_header h;
    const void *b;
    encode_sample(&w, &body, &len);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &b), 0);
    cr_expect_eq(h.op, PROTO_OP_FETCH | PROTO_OP_RESPONSE);
    cr_expect_eq(h.request_id, 5);
    for (int wp = 0; wp < 2; wp++) {
        struct proto_fetch_resp fr;
        struct proto_fetch_iter it = {0};
        struct proto_fetched_msg m;
        char t[16];
        cr_assert_eq(proto_decode_fetch_runs_resp(body, len, wp, &fr), 0);
        cr_expect_eq(fr.next_offset, 19);
        cr_expect_eq(fr.end_offset, 40);
        cr_expect_eq(fr.n, 9);
        cr_expect_eq(fr.n_parts, 3);
        cr_expect_eq(fr.queue_id, 4242);
        cr_expect(fr.runs);
        for (uint32_t i = 10; i < 15; i++) {
            cr_assert(proto_fetch_iter_next(&fr, &it, &m));
            (void)snprintf(t, sizeof t, "m%u", i);
            expect_msg(&m, i, 500, t, NULL);
        }
        cr_assert(proto_fetch_iter_next(&fr, &it, &m));
        expect_msg(&m, 15, 777, "single", wp ? "sp" : NULL);
        for (uint32_t i = 16; i < 19; i++) {
            char p[16];
            cr_assert(proto_fetch_iter_next(&fr, &it, &m));
            (void)snprintf(t, sizeof t, "m%u", i);
            (void)snprintf(p, sizeof p, "p%u", i);
            expect_msg(&m, i, 600, t, wp && (i - 16) % 2 == 0 ? p : NULL);
        }
        cr_expect_not(proto_fetch_iter_next(&fr, &it, &m));
        size_t pos = 0;
        cr_expect_not(proto_next_fetched(&fr, &pos, &m),
                      "the other layout's iterator reads none of it");
    }
    tern_wbuf_free(&w);
}

Test(proto_runs, an_empty_answer_has_no_part)
{
    struct tern_wbuf w;
    struct proto_fetch_resp fr;
    struct proto_fetch_iter it = {0};
    struct proto_fetched_msg m;
    tern_wbuf_init(&w);
    size_t start = proto_fetch_runs_begin(&w, TERN_PROTO_VERSION, 1, 7);
    cr_assert_eq(proto_fetch_runs_end(&w, start, 7, 0, 0, 3), 0);
    cr_assert_eq(
        proto_decode_fetch_runs_resp(w.base + PROTO_HEADER_SIZE,
                                     w.len - PROTO_HEADER_SIZE, false, &fr),
        0);
    cr_expect_eq(fr.n, 0);
    cr_expect_eq(fr.next_offset, 7);
    cr_expect_not(proto_fetch_iter_next(&fr, &it, &m));
    tern_wbuf_free(&w);
}

/* Decode a copy of body with one change: TERN_EMALFORMED expected. */
static void expect_refused(const uint8_t *body,
                           size_t len,
                           size_t at,
                           const void *bytes,
                           size_t n,
                           const char *what)
{
    uint8_t *c = malloc(len);
    struct proto_fetch_resp fr;
    memcpy(c, body, len);
    memcpy(c + at, bytes, n);
    cr_expect_eq(proto_decode_fetch_runs_resp(c, len, true, &fr),
                 TERN_EMALFORMED, "%s", what);
    cr_expect_eq(fr.n, 0, "out zeroed: %s", what);
    free(c);
}

Test(proto_runs, malformed_answers_are_refused)
{
    struct tern_wbuf w;
    const uint8_t *body;
    size_t len;
    uint8_t b4[4], b8[8], k;
    struct proto_fetch_resp fr;
    encode_sample(&w, &body, &len);
    /* Head: next 0..8, end 8..16, n 16..20, n_parts 20..24; first part at
     * 24: kind, offset 25..33, ts 33..41, count 41..45, len 45..49. */
    tern_put_u32(b4, 10);
    expect_refused(body, len, 16, b4, 4, "n above the counts");
    tern_put_u32(b4, 8);
    expect_refused(body, len, 16, b4, 4, "n below the counts");
    tern_put_u32(b4, 4);
    expect_refused(body, len, 20, b4, 4, "more parts than there are");
    tern_put_u32(b4, 2);
    expect_refused(body, len, 20, b4, 4, "fewer parts: bytes left over");
    k = 9;
    expect_refused(body, len, 24, &k, 1, "an unknown kind");
    k = PROTO_PART_RUN_PROPS;
    expect_refused(body, len, 24, &k, 1, "a run read with properties");
    tern_put_u64(b8, 13);
    expect_refused(body, len, 25, b8, 8, "offsets overlap the next part");
    tern_put_u32(b4, 0);
    expect_refused(body, len, 41, b4, 4, "an empty run");
    tern_put_u32(b4, 4);
    expect_refused(body, len, 41, b4, 4, "bytes past the run's count");
    tern_put_u32(b4, 6);
    expect_refused(body, len, 41, b4, 4, "a count past the run's bytes");
    tern_put_u64(b8, UINT64_MAX - 1);
    expect_refused(body, len, 25, b8, 8, "offsets that wrap");
    /* Every truncation. */
    for (size_t l = 0; l < len; l++) {
        cr_expect_eq(proto_decode_fetch_runs_resp(body, l, true, &fr),
                     TERN_EMALFORMED, "cut at %zu", l);
    }
    tern_wbuf_free(&w);
}

Test(proto_runs, hello_names_the_feature)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *b;
    uint32_t taken = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_hello_resp(&w, 3, PROTO_FEATURE_XXH3 | PROTO_FEATURE_RUNS),
        0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &b), 0);
    cr_assert_eq(proto_decode_hello_resp(b, h.body_len, &taken), 0);
    cr_expect_eq(taken, PROTO_FEATURE_XXH3 | PROTO_FEATURE_RUNS);
    cr_expect_neq(PROTO_FEATURE_RUNS & PROTO_FEATURE_XXH3, PROTO_FEATURE_RUNS);
    tern_wbuf_free(&w);
}
