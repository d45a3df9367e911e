/* Unit tests of MEMBER (op 34, membership changes) in proto/: the add and
 * remove requests, their answer, the refusals of encoder and decoder (id
 * 0, an unknown action, bad addresses, a remove with addresses or a
 * timeout, truncated bodies, trailing bytes, a role above ABSENT), and the
 * STATUS tail version 2 (this node's role, one role per member) beside a
 * version 1 tail. */
#include <string.h>

#include <criterion/criterion.h>

#include <proto.h>

static int decode_frame(const struct tern_wbuf *w,
                        struct proto_request *r,
                        struct proto_header *h,
                        const uint8_t **body)
{
    const void *b = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &b), 0);
    *body = b;
    return proto_decode_request(h->op, b, h->body_len, r);
}

Test(proto_member, add_round_trip_and_truncations)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    const uint8_t *body;
    uint8_t longer[128];
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_member_req(&w, 7, PROTO_MEMBER_ADD, 4, "127.0.0.1:7504",
                                "127.0.0.1:7404", 60000),
        0);
    cr_assert_eq(decode_frame(&w, &r, &h, &body), 0);
    cr_expect_eq(h.op, PROTO_OP_MEMBER);
    cr_expect_eq(h.request_id, 7);
    cr_expect_eq(r.flags, PROTO_MEMBER_ADD);
    cr_expect_eq(r.member_id, 4);
    cr_expect(r.raft_address_len == 14 &&
              memcmp(r.raft_address, "127.0.0.1:7504", 14) == 0);
    cr_expect(r.client_address_len == 14 &&
              memcmp(r.client_address, "127.0.0.1:7404", 14) == 0);
    cr_expect_eq(r.wait_ms, 60000);
    for (uint32_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_request(PROTO_OP_MEMBER, body, n, &r),
                     TERN_EMALFORMED, "length %u", n);
    }
    cr_assert_lt(h.body_len + 1, sizeof longer);
    memcpy(longer, body, h.body_len);
    longer[h.body_len] = 0;
    cr_expect_eq(
        proto_decode_request(PROTO_OP_MEMBER, longer, h.body_len + 1, &r),
        TERN_EMALFORMED);
    /* Unknown action, id 0, an address with a ',' (the separator of the
     * configuration's "raft,client"). */
    memcpy(longer, body, h.body_len);
    longer[0] = 3;
    cr_expect_eq(proto_decode_request(PROTO_OP_MEMBER, longer, h.body_len, &r),
                 TERN_EMALFORMED);
    memcpy(longer, body, h.body_len);
    memset(longer + 1, 0, 8);
    cr_expect_eq(proto_decode_request(PROTO_OP_MEMBER, longer, h.body_len, &r),
                 TERN_EMALFORMED);
    memcpy(longer, body, h.body_len);
    longer[1 + 8 + 2 + 3] = ',';
    cr_expect_eq(proto_decode_request(PROTO_OP_MEMBER, longer, h.body_len, &r),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(proto_member, remove_and_encoder_refusals)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    const uint8_t *body;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_member_req(&w, 8, PROTO_MEMBER_REMOVE, 2, "", "", 0), 0);
    cr_assert_eq(decode_frame(&w, &r, &h, &body), 0);
    cr_expect_eq(r.flags, PROTO_MEMBER_REMOVE);
    cr_expect_eq(r.member_id, 2);
    cr_expect_eq(r.raft_address_len + r.client_address_len, 0);
    tern_wbuf_free(&w);

    tern_wbuf_init(&w);
    cr_expect_eq(
        proto_encode_member_req(&w, 1, PROTO_MEMBER_ADD, 0, "a:1", "b:2", 0),
        TERN_EINVAL);
    cr_expect_eq(
        proto_encode_member_req(&w, 1, PROTO_MEMBER_ADD, 4, "", "b:2", 0),
        TERN_EINVAL);
    cr_expect_eq(
        proto_encode_member_req(&w, 1, PROTO_MEMBER_ADD, 4, "a:1,x", "b:2", 0),
        TERN_EINVAL);
    cr_expect_eq(
        proto_encode_member_req(&w, 1, PROTO_MEMBER_REMOVE, 4, "a:1", "", 0),
        TERN_EINVAL);
    cr_expect_eq(
        proto_encode_member_req(&w, 1, PROTO_MEMBER_REMOVE, 4, "", "", 5),
        TERN_EINVAL);
    cr_expect_eq(proto_encode_member_req(&w, 1, 9, 4, "a:1", "b:2", 0),
                 TERN_EINVAL);
    cr_expect_eq(w.len, 0);
    tern_wbuf_free(&w);
}

Test(proto_member, answer)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *b;
    uint8_t role = 9;
    uint8_t bad = PROTO_MEMBER_ABSENT + 1;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_member_resp(&w, 5, PROTO_MEMBER_VOTER), 0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &b), 0);
    cr_expect_eq(h.op, PROTO_OP_MEMBER | PROTO_OP_RESPONSE);
    cr_expect_eq(proto_decode_member_resp(b, h.body_len, &role), 0);
    cr_expect_eq(role, PROTO_MEMBER_VOTER);
    cr_expect_eq(proto_decode_member_resp(b, 0, &role), TERN_EMALFORMED);
    cr_expect_eq(proto_decode_member_resp(&bad, 1, &role), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

static void status_round_trip(uint8_t has_membership)
{
    struct proto_member m[2] = {
        {1, "127.0.0.1:7501", 14, "127.0.0.1:7401", 14},
        {4, "127.0.0.1:7504", 14, "127.0.0.1:7404", 14},
    };
    uint8_t roles[2] = {PROTO_MEMBER_VOTER, PROTO_MEMBER_STANDBY};
    struct proto_status st, out;
    struct tern_wbuf w;
    struct proto_header h;
    const void *b;
    memset(&st, 0, sizeof st);
    st.node_id = 1;
    st.transport = "tcp";
    st.transport_len = 3;
    st.durability = "disk";
    st.durability_len = 4;
    st.leader_address = "";
    st.n_members = 2;
    st.members = m;
    st.has_timers = 1;
    st.timers_pending = 3;
    st.has_membership = has_membership;
    st.self_role = PROTO_MEMBER_VOTER;
    st.member_roles = roles;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_status_resp(&w, 1, &st), 0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &b), 0);
    cr_assert_eq(proto_decode_status_resp(b, h.body_len, &out), 0);
    cr_expect_eq(out.has_timers, 1);
    cr_expect_eq(out.timers_pending, 3);
    cr_expect_eq(out.n_members, 2);
    cr_expect_eq(out.has_membership, has_membership);
    if (has_membership) {
        cr_expect_eq(out.self_role, PROTO_MEMBER_VOTER);
        cr_assert_eq(out.n_member_roles, 2);
        cr_expect_eq(out.member_roles[0], PROTO_MEMBER_VOTER);
        cr_expect_eq(out.member_roles[1], PROTO_MEMBER_STANDBY);
        /* A cut role list is refused. */
        cr_expect_eq(proto_decode_status_resp(b, h.body_len - 1, &out),
                     TERN_EMALFORMED);
    }
    tern_wbuf_free(&w);
}

Test(proto_member, status_tail_versions)
{
    status_round_trip(0);
    status_round_trip(1);
}
