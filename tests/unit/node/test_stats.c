/* The STATS request on the node side: node/frame.c accepts the op and
 * hands the reset flag to server.c's handler; a bad flags byte is answered
 * as an error without closing the connection. (serve_stats itself needs a
 * running node and is exercised by bench/replication.sh.) */
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

TestSuite(stats, .init = setup, .fini = teardown);

#define MAX_BODY 4096u

/* Recompute the checksum of the single frame in w after an edit. */
static void reseal(void)
{
    uint64_t id = tern_get_u64(w.base + 8);
    cr_assert_eq(proto_frame_set_request_id(w.base, w.len, id), 0);
}

Test(stats, request_with_and_without_reset)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_stats_req(&w, 5, PROTO_STATS_RESET), 0);
    for (size_t n = 0; n < w.len; n++) {
        node_frame_next(w.base, n, MAX_BODY, &f);
        cr_assert_eq(f.action, NODE_FRAME_NEED_MORE, "at %zu", n);
    }
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST, "%s", f.message);
    cr_expect_eq(f.op, PROTO_OP_STATS);
    cr_expect_eq(f.request_id, 5);
    cr_expect_eq(f.consumed, w.len);
    cr_expect_eq(f.req.flags, PROTO_STATS_RESET);

    w.len = 0;
    cr_assert_eq(proto_encode_stats_req(&w, 6, 0), 0);
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_assert_eq(f.action, NODE_FRAME_REQUEST);
    cr_expect_eq(f.req.flags, 0);
}

Test(stats, bad_flags_is_an_error_not_fatal)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_stats_req(&w, 7, 0), 0);
    w.base[PROTO_HEADER_SIZE] = 0x80;
    reseal();
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_ERROR);
    cr_expect_eq(f.op, PROTO_OP_STATS);
    cr_expect_eq(f.status, TERN_EMALFORMED);
    cr_expect_eq(f.request_id, 7);
    cr_expect_eq(f.consumed, w.len);
}

Test(stats, the_op_after_the_last_is_still_unknown)
{
    struct node_frame f;
    cr_assert_eq(proto_encode_stats_req(&w, 8, 0), 0);
    w.base[3] = 0x70; /* no op has this number (ops 1..31 are taken) */
    reseal();
    node_frame_next(w.base, w.len, MAX_BODY, &f);
    cr_expect_eq(f.action, NODE_FRAME_ERROR);
    cr_expect_eq(f.status, TERN_EINVAL);
}
