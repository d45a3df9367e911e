/* The client-frame state machine (node/frame.c): partial input, pipelined
 * frames, and each kind of bad input with the action the server takes. */
#include <criterion/criterion.h>

#include <tern_common.h>

#include "frame.h"

static struct tern_wbuf w;

static void setup(void)
{
    tern_wbuf_init(&w);
}

static void teardown(void)
{
    tern_wbuf_free(&w);
}

TestSuite(frame, .init = setup, .fini = teardown);

#define MAX_BODY 4096u

Test(frame, byte_by_byte)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 42, "q1"), 0);
    for (size_t n = 0; n < w.len; n++) {
        node_frame_next(w.base, n, MAX_BODY, &f);
        cr_assert_eq(f.action, NODE_FRAME_NEED_MORE, "at %zu", n);
    }
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.consumed, w.len);
    cr_expect_eq(f.op, PROTO_OP_QUEUE_CREATE);
    cr_expect_eq(f.request_id, 42);
    cr_expect_eq(f.req.queue_len, 2);
    cr_expect_eq(memcmp(f.req.queue, "q1", 2), 0);
}

Test(frame, pipelined)
{
    struct node_frame f;
    struct proto_msg m[2] = {{"hello", 5}, {"world!", 6}};
    size_t off = 0;
    cr_assert_eq(proto_encode_produce(&w, 1, "q", 7, 1, m, 2), 0);
    cr_assert_eq(proto_encode_fetch(&w, 2, "q", 0, 10, 1000, 50, 0), 0);
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 3), 0);

    node_frame_next(w.base + off, w.len - off, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.req.n_msgs, 2);
    cr_expect_eq(f.req.producer_id, 7);
    off += f.consumed;
    node_frame_next(w.base + off, w.len - off, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.op, PROTO_OP_FETCH);
    cr_expect_eq(f.request_id, 2);
    cr_expect_eq(f.req.wait_ms, 50);
    off += f.consumed;
    node_frame_next(w.base + off, w.len - off, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.op, PROTO_OP_STATUS);
    off += f.consumed;
    cr_expect_eq(off, w.len);
}

Test(frame, bad_magic_is_fatal)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 9), 0);
    w.base[0] ^= 0xff;
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_FATAL);
    cr_expect_eq(f.status, TERN_EMALFORMED);
    cr_expect_eq(f.op, PROTO_OP_ERROR);
    cr_expect_not_null(strstr(f.message, "magic"));
}

Test(frame, garbage_line_is_fatal)
{
    struct node_frame f;
    const char *g = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    node_frame_next((const uint8_t *)g, strlen(g), MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_FATAL);
}

Test(frame, bad_version_is_fatal)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 9), 0);
    w.base[2] = 9;
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_FATAL);
    cr_expect_eq(f.status, TERN_EVERSION);
    cr_expect_eq(f.request_id, 9);
}

/* Frame version 2 (XXH3 checksum) is a request like version 1; its
 * checksum is checked the same way. */
Test(frame, version_2_request_is_taken_and_checked)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 42, "q1"), 0);
    cr_assert_eq(
        proto_frame_seal_request(w.base, w.len, 43, PROTO_VERSION_XXH3), 0);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.request_id, 43);
    cr_expect_eq(f.req.queue_len, 2);
    w.base[w.len - 1] ^= 1;
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_FATAL);
    cr_expect_eq(f.status, TERN_ECORRUPT);
}

Test(frame, hello_is_a_request)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_hello(&w, 5, PROTO_FEATURE_XXH3), 0);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.op, PROTO_OP_HELLO);
    cr_expect_eq(f.req.bits, PROTO_FEATURE_XXH3);
}

Test(frame, oversized_is_fatal_before_the_body_arrives)
{
    struct node_frame f;
    static uint8_t big[MAX_BODY + 1];
    struct proto_msg m = {big, sizeof(big)};
    cr_assert_eq(proto_encode_produce(&w, 5, "q", 0, 0, &m, 1), 0);
    /* Only the header has arrived. */
    node_frame_next(w.base, PROTO_HEADER_SIZE, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_FATAL);
    cr_expect_eq(f.status, TERN_ETOOBIG);
    cr_expect_eq(f.op, PROTO_OP_PRODUCE);
    cr_expect_eq(f.request_id, 5);
}

Test(frame, bad_checksum_is_fatal)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_DELETE, 6, "abc"), 0);
    w.base[w.len - 1] ^= 1;
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_FATAL);
    cr_expect_eq(f.status, TERN_ECORRUPT);
    cr_expect_eq(f.op, PROTO_OP_QUEUE_DELETE);
}

/* Re-seal a frame whose body or header fields were edited. */
static void reseal(uint8_t *frame, size_t len)
{
    struct tern_checksum_state st;
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, frame, 20);
    tern_checksum32_update(&st, frame + PROTO_HEADER_SIZE,
                           len - PROTO_HEADER_SIZE);
    tern_put_u32(frame + 20, tern_checksum32_end(&st));
}

Test(frame, bad_name_is_not_fatal)
{
    struct node_frame f;
    size_t first;
    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 7, "abc"), 0);
    first = w.len;
    w.base[PROTO_HEADER_SIZE + 2] = '/';
    reseal(w.base, first);
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 8), 0);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_ERROR);
    cr_expect_eq(f.status, TERN_EBADNAME);
    cr_expect_eq(f.op, PROTO_OP_QUEUE_CREATE);
    cr_expect_eq(f.consumed, first);
    node_frame_next(w.base + first, w.len - first, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.request_id, 8);
}

Test(frame, truncated_body_is_not_fatal)
{
    struct node_frame f;
    /* A STATUS frame whose body claims a FETCH layout it does not have. */
    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 7, "abc"), 0);
    w.base[3] = PROTO_OP_FETCH;
    reseal(w.base, w.len);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_ERROR);
    cr_expect_eq(f.status, TERN_EMALFORMED);
    cr_expect_eq(f.op, PROTO_OP_FETCH);
    cr_expect_eq(f.consumed, w.len);
}

Test(frame, unknown_op_and_response_bit)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 1), 0);
    w.base[3] = 0x42;
    reseal(w.base, w.len);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_ERROR);
    cr_expect_eq(f.status, TERN_EINVAL);
    w.base[3] = PROTO_OP_STATUS | PROTO_OP_RESPONSE;
    reseal(w.base, w.len);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_ERROR);
    cr_expect_eq(f.op, PROTO_OP_ERROR);
}

Test(frame, nonzero_status_is_not_fatal)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_QUEUE_LIST, 1), 0);
    tern_put_u32(w.base + 16, (uint32_t)TERN_EFULL);
    reseal(w.base, w.len);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_ERROR);
    cr_expect_eq(f.status, TERN_EMALFORMED);
}

/* Random bytes never crash and never claim more than they were given. */
Test(frame, random_bytes)
{
    uint8_t buf[256];
    uint32_t x = 12345;
    for (int round = 0; round < 20000; round++) {
        struct node_frame f;
        size_t len = (size_t)(x % sizeof(buf));
        for (size_t i = 0; i < len; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (uint8_t)(x >> 16);
        }
        if (round % 2 == 0 && len >= 4) {
            tern_put_u16(buf, PROTO_MAGIC);
            buf[2] = TERN_PROTO_VERSION;
            tern_put_u32(buf + 4, (uint32_t)(x % 300));
        }
        node_frame_next(buf, len, 200, &f);
        cr_assert_leq(f.consumed, len);
        if (f.action != NODE_FRAME_NEED_MORE) {
            cr_assert_gt(f.consumed, 0);
        }
        x = x * 1103515245u + 12345u;
    }
}

/* A partial frame whose header has arrived says how big the whole frame
 * is (the server sizes its read buffer to it); before the header, 0. */
Test(frame, need_of_a_partial_frame)
{
    struct node_frame f;
    struct proto_msg m = {"0123456789", 10};
    cr_assert_eq(proto_encode_produce(&w, 1, "q", 7, 1, &m, 1), 0);
    node_frame_next(w.base, PROTO_HEADER_SIZE - 1, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_NEED_MORE);
    cr_expect_eq(f.need, 0);
    for (size_t n = PROTO_HEADER_SIZE; n < w.len; n++) {
        node_frame_next(w.base, n, MAX_BODY, &f);
        cr_assert_eq(f.action, NODE_FRAME_NEED_MORE);
        cr_expect_eq(f.need, w.len, "at %zu", n);
    }
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.need, 0);
}

/* QUEUE_LIST: an older client's empty body and a paged one both decode. */
Test(frame, queue_list_paged_and_unpaged)
{
    struct node_frame f;
    size_t off;
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_QUEUE_LIST, 1), 0);
    off = w.len;
    cr_assert_eq(proto_encode_queue_list_req(&w, 2, "abc", 7), 0);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.req.paged, 0);
    node_frame_next(w.base + off, w.len - off, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.req.paged, 1);
    cr_expect_eq(f.req.after_len, 3);
    cr_expect_eq(memcmp(f.req.after, "abc", 3), 0);
    cr_expect_eq(f.req.max_count, 7);
}
