/*
 * libtern's PRODUCE frames on the wire: the bytes the fake server receives
 * are exactly what proto_encode_produce writes for the same request id,
 * queue, producer id, sequence and messages, for a first send, a resend
 * of a batch with an unknown outcome (tern_produce_resend), and a batch
 * renumbered under a fresh producer id; the body also matches the PRODUCE
 * layout of proto.h assembled by hand. proto_encode_produce_at (the
 * encoder libtern calls) round-trips through proto_decode_request.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

/* The last PRODUCE frame fs received must equal proto_encode_produce's
 * frame for the same request (request id taken from the received header).
 * Returns the received frame's length; frame (OUT, FAKE_MAX_FRAME bytes)
 * holds it. */
static size_t expect_encoder_frame(struct fake_server *fs,
                                   const char *queue,
                                   uint64_t producer_id,
                                   uint64_t seq,
                                   const struct tern_msg *msgs,
                                   uint32_t n,
                                   uint8_t *frame)
{
    struct proto_msg pm[8];
    struct proto_header h;
    struct tern_wbuf w;
    size_t len = fake_last_produce(fs, frame, FAKE_MAX_FRAME);
    cr_assert_gt(len, PROTO_HEADER_SIZE);
    cr_assert_leq(n, 8);
    cr_assert_eq(proto_header_decode(frame, PROTO_DEFAULT_MAX_BODY, &h), 0);
    for (uint32_t i = 0; i < n; i++) {
        pm[i].data = msgs[i].data;
        pm[i].len = (uint32_t)msgs[i].len;
    }
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_produce(&w, h.request_id, queue, producer_id, seq, pm, n),
        0);
    cr_expect_eq(w.len, len);
    cr_expect_eq(memcmp(w.base, frame, len < w.len ? len : w.len), 0,
                 "libtern's frame differs from proto_encode_produce's");
    tern_wbuf_free(&w);
    return len;
}

Test(client, produce_frame_is_the_protocol_encoders)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m[3] = {{"a.1", 3}, {NULL, 0}, {"bb", 2}};
    uint8_t frame[FAKE_MAX_FRAME];
    uint8_t want[128];
    size_t len, k = 0;
    uint64_t pid;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", m, 3, NULL), 0, "%s",
                 tern_client_errmsg(c));
    pid = tern_client_producer_id(c);
    len = expect_encoder_frame(&fs, "q", pid, 1, m, 3, frame);

    /* str queue, u64 producer_id, u64 seq, u32 n, n x blob. */
    tern_put_u16(want + k, 1);
    want[k + 2] = 'q';
    k += 3;
    tern_put_u64(want + k, pid);
    k += 8;
    tern_put_u64(want + k, 1);
    k += 8;
    tern_put_u32(want + k, 3);
    k += 4;
    for (int i = 0; i < 3; i++) {
        tern_put_u32(want + k, (uint32_t)m[i].len);
        k += 4;
        if (m[i].len > 0) {
            memcpy(want + k, m[i].data, m[i].len);
            k += m[i].len;
        }
    }
    cr_assert_eq(len, PROTO_HEADER_SIZE + k);
    cr_expect_eq(memcmp(frame + PROTO_HEADER_SIZE, want, k), 0);
    cr_expect_eq(frame[3], PROTO_OP_PRODUCE);
    cr_expect_eq(tern_get_u32(frame + 4), (uint32_t)k);
    cr_expect_eq(proto_frame_verify(frame, frame + PROTO_HEADER_SIZE, k), 0);

    /* The next batch: the next sequence, a new request id. */
    cr_assert_eq(tern_produce(c, "q", &m[2], 1, NULL), 0);
    (void)expect_encoder_frame(&fs, "q", pid, 2, &m[2], 1, frame);
    tern_client_free(c);
    fake_stop(&fs);
}

/* fs->counter 0: PRODUCE never answered; 1: the model answers. */
static enum fake_action silent_once_hook(struct fake_server *fs,
                                         int conn,
                                         const struct proto_header *h,
                                         const struct proto_request *r)
{
    (void)conn;
    (void)h;
    if (r->op == PROTO_OP_PRODUCE && fs->counter == 0) {
        return FAKE_SILENT;
    }
    return FAKE_DEFAULT;
}

Test(client, resend_frame_is_the_protocol_encoders)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m[2] = {{"r-0", 3}, {"r-1", 3}};
    uint8_t frame[FAKE_MAX_FRAME];
    uint64_t base = 77;

    cr_assert_eq(fake_start(&fs, silent_once_hook), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", m, 2, NULL), TERN_ETIMEDOUT);
    (void)expect_encoder_frame(&fs, "q", tern_client_producer_id(c), 1, m, 2,
                               frame);
    (void)pthread_mutex_lock(&fs.mu);
    fs.counter = 1;
    (void)pthread_mutex_unlock(&fs.mu);
    cr_assert_eq(tern_produce_resend(c, "q", m, 2, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0);
    (void)expect_encoder_frame(&fs, "q", tern_client_producer_id(c), 1, m, 2,
                               frame);
    tern_client_free(c);
    fake_stop(&fs);
}

/* The first PRODUCE fails for good: the next batch is renumbered. */
Test(client, renumbered_frame_is_the_protocol_encoders)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[2];
    struct tern_msg m[2] = {{"n-0", 3}, {"n-1", 3}};
    uint8_t frame[FAKE_MAX_FRAME];
    struct fake_record last;
    int n;

    cr_assert_eq(fake_start(&fs, fail_first_produce_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 2; i++) {
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m[i], 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_expect_eq(log.status[0], TERN_ETOOBIG);
    cr_expect_eq(log.status[1], 0);
    n = fake_n_records(&fs);
    cr_assert_geq(n, 3);
    last = fake_record_at(&fs, n - 1);
    cr_expect_neq(last.producer_id, tern_client_producer_id(c));
    cr_expect_eq(last.seq, 1);
    (void)expect_encoder_frame(&fs, "q", last.producer_id, 1, &m[1], 1, frame);
    tern_client_free(c);
    fake_stop(&fs);
}

/* proto_msg_at_cb over a struct tern_msg array, as libtern encodes. */
static void tern_msg_at(const void *msgs, uint32_t i, struct proto_msg *m)
{
    const struct tern_msg *t = (const struct tern_msg *)msgs + i;
    m->data = t->data;
    m->len = (uint32_t)t->len;
}

Test(client, produce_at_encoder_round_trip)
{
    struct tern_msg tm[3] = {{"alpha", 5}, {NULL, 0}, {"gamma-long", 10}};
    struct proto_msg pm[3] = {{"alpha", 5}, {NULL, 0}, {"gamma-long", 10}};
    struct tern_wbuf a, b;
    struct proto_header h;
    struct proto_request r;
    struct proto_msg m;
    size_t pos = 0;
    uint32_t k = 0;

    tern_wbuf_init(&a);
    tern_wbuf_init(&b);
    cr_assert_eq(proto_encode_produce_at(&a, 42, "q1", 0xdeadbeefcafeULL, 17,
                                         tern_msg_at, tm, 3),
                 0);
    cr_assert_eq(
        proto_encode_produce(&b, 42, "q1", 0xdeadbeefcafeULL, 17, pm, 3), 0);
    cr_assert_eq(a.len, b.len);
    cr_expect_eq(memcmp(a.base, b.base, a.len), 0);

    cr_assert_eq(proto_header_decode(a.base, PROTO_DEFAULT_MAX_BODY, &h), 0);
    cr_expect_eq(h.op, PROTO_OP_PRODUCE);
    cr_expect_eq(h.request_id, 42);
    cr_assert_eq(h.body_len, a.len - PROTO_HEADER_SIZE);
    cr_expect_eq(
        proto_frame_verify(a.base, a.base + PROTO_HEADER_SIZE, h.body_len), 0);
    cr_assert_eq(
        proto_decode_request(h.op, a.base + PROTO_HEADER_SIZE, h.body_len, &r),
        0);
    cr_expect_eq(r.queue_len, 2);
    cr_expect_eq(memcmp(r.queue, "q1", 2), 0);
    cr_expect_eq(r.producer_id, 0xdeadbeefcafeULL);
    cr_expect_eq(r.seq, 17);
    cr_assert_eq(r.n_msgs, 3);
    while (proto_next_msg(&r, &pos, &m)) {
        cr_assert_lt(k, 3);
        cr_expect_eq(m.len, tm[k].len);
        if (m.len > 0) {
            cr_expect_eq(memcmp(m.data, tm[k].data, m.len), 0);
        }
        k++;
    }
    cr_expect_eq(k, 3);

    /* Re-stamping producer id and sequence (a renumbered batch) gives the
     * encoder's frame for the new pair. */
    cr_assert_eq(proto_frame_set_producer(a.base, a.len, 9, 1), 0);
    b.len = 0;
    cr_assert_eq(proto_encode_produce(&b, 42, "q1", 9, 1, pm, 3), 0);
    cr_assert_eq(a.len, b.len);
    cr_expect_eq(memcmp(a.base, b.base, a.len), 0);

    /* Errors leave the buffer as it was. */
    a.len = 0;
    cr_expect_eq(proto_encode_produce_at(&a, 1, "q1", 1, 1, NULL, tm, 3),
                 TERN_EINVAL);
    cr_expect_eq(proto_encode_produce_at(&a, 1, "q1", 1, 1, tern_msg_at, tm, 0),
                 TERN_EINVAL);
    cr_expect_eq(
        proto_encode_produce_at(&a, 1, "q/x", 1, 1, tern_msg_at, tm, 3),
        TERN_EBADNAME);
    cr_expect_eq(a.len, 0);
    tern_wbuf_free(&a);
    tern_wbuf_free(&b);
}
