/* Unit tests of BACKUP (op 36) in proto/: the request (take, verify) and
 * its refusals (bad flags, empty or too long paths, a NUL in the path,
 * every truncation, trailing bytes), and the answer's round trip, every
 * truncation refused and a later version's appended fields skipped. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <proto.h>

static const uint8_t *parse(const struct tern_wbuf *w, struct proto_header *h)
{
    const void *body = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &body),
        0);
    cr_assert_eq(PROTO_HEADER_SIZE + h->body_len, w->len);
    return body;
}

Test(proto_backup, request)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    uint8_t bad[64];
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_backup(&w, 9, PROTO_BACKUP_VERIFY, "/srv/bk/1", 4242), 0);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_BACKUP);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, PROTO_BACKUP_VERIFY);
    cr_expect(r.path_len == 9 && memcmp(r.path, "/srv/bk/1", 9) == 0);
    cr_expect_eq(r.min_applied, 4242);
    for (uint32_t cut = 0; cut < h.body_len; cut++) {
        cr_expect_neq(proto_decode_request(h.op, body, cut, &r), 0);
    }
    memcpy(bad, body, h.body_len);
    bad[h.body_len] = 0;
    cr_expect_eq(proto_decode_request(h.op, bad, h.body_len + 1, &r),
                 TERN_EMALFORMED);
    bad[0] = 0x02; /* unknown flag */
    cr_expect_eq(proto_decode_request(h.op, bad, h.body_len, &r),
                 TERN_EMALFORMED);
    bad[0] = 0;
    bad[3 + 4] = '\0'; /* a NUL inside the path */
    cr_expect_eq(proto_decode_request(h.op, bad, h.body_len, &r),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);

    tern_wbuf_init(&w);
    cr_expect_eq(proto_encode_backup(&w, 1, 0, "", 0), TERN_EINVAL);
    cr_expect_eq(proto_encode_backup(&w, 1, 0x80, "/x", 0), TERN_EINVAL);
    char *big = malloc(PROTO_BACKUP_PATH_MAX + 2);
    cr_assert_not_null(big);
    memset(big, 'a', PROTO_BACKUP_PATH_MAX + 1);
    big[0] = '/';
    big[PROTO_BACKUP_PATH_MAX + 1] = '\0';
    cr_expect_eq(proto_encode_backup(&w, 1, 0, big, 0), TERN_EINVAL);
    big[PROTO_BACKUP_PATH_MAX] = '\0';
    cr_expect_eq(proto_encode_backup(&w, 1, 0, big, 0), 0);
    free(big);
    tern_wbuf_free(&w);
}

Test(proto_backup, answer)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_backup_info in = {
        .cluster = "prod",
        .cluster_len = 4,
        .node_id = 2,
        .term = 9,
        .last_applied = 123456,
        .log_start = 65536,
        .log_end = 9999999,
        .n_files = 17,
        .total_bytes = 12345678,
        .created_ms = 1764800000000ULL,
    };
    struct proto_backup_info out;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_backup_resp(&w, 9, &in), 0);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_BACKUP | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_backup_resp(body, h.body_len, &out), 0);
    cr_expect(out.cluster_len == 4 && memcmp(out.cluster, "prod", 4) == 0);
    cr_expect_eq(out.node_id, 2);
    cr_expect_eq(out.term, 9);
    cr_expect_eq(out.last_applied, 123456);
    cr_expect_eq(out.log_start, 65536);
    cr_expect_eq(out.log_end, 9999999);
    cr_expect_eq(out.n_files, 17);
    cr_expect_eq(out.total_bytes, 12345678);
    cr_expect_eq(out.created_ms, 1764800000000ULL);
    for (uint32_t cut = 0; cut < h.body_len; cut++) {
        cr_expect_eq(proto_decode_backup_resp(body, cut, &out),
                     TERN_EMALFORMED);
    }
    /* A later version appends fields: they are skipped. */
    uint8_t *later = malloc(h.body_len + 8);
    cr_assert_not_null(later);
    memcpy(later, body, h.body_len);
    later[0] = 2;
    memset(later + h.body_len, 0xab, 8);
    cr_expect_eq(proto_decode_backup_resp(later, h.body_len + 8, &out), 0);
    cr_expect_eq(out.last_applied, 123456);
    free(later);
    tern_wbuf_free(&w);
}
