/* Unit tests of the command entry codec (index/cmd.c): builder round trip
 * through the decoder, the queue/group name rule in both, and rejection of
 * every malformation class. */
#include <criterion/criterion.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

static void build_sample(struct tern_wbuf *w)
{
    struct idx_msg m[3] = {{"alpha", 5}, {"", 0}, {"gamma-gamma", 11}};
    tern_wbuf_init(w);
    idx_cmd_begin(w, 123456789);
    idx_cmd_queue_create(w, "orders");
    idx_cmd_produce(w, "orders", 42, 7, m, 3);
    idx_cmd_group_commit(w, "orders", "billing.v2", 3);
    idx_cmd_queue_delete(w, "old_queue-1");
    cr_assert_eq(idx_cmd_end(w), 0);
}

Test(index_cmd, round_trip)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    struct idx__msg_iter mi;
    const uint8_t *d;
    uint32_t len;
    build_sample(&w);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_expect_eq(it.timestamp_ms, 123456789);
    cr_expect_eq(it.n, 4);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_QUEUE_CREATE);
    cr_expect_eq(c.queue_len, 6);
    cr_expect_eq(memcmp(c.queue, "orders", 6), 0);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_PRODUCE);
    cr_expect_eq(c.producer_id, 42);
    cr_expect_eq(c.seq, 7);
    cr_expect_eq(c.n_msgs, 3);
    idx__msg_iter_init(&mi, &c);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect_eq(len, 5);
    cr_expect_eq(memcmp(d, "alpha", 5), 0);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect_eq(len, 0);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect_eq(len, 11);
    cr_expect_eq(memcmp(d, "gamma-gamma", 11), 0);
    cr_expect_eq(idx__msg_iter_next(&mi, &d, &len), 0);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_GROUP_COMMIT);
    cr_expect_eq(c.group_len, 10);
    cr_expect_eq(memcmp(c.group, "billing.v2", 10), 0);
    cr_expect_eq(c.next_offset, 3);

    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_QUEUE_DELETE);
    cr_expect_eq(idx__entry_next(&it, &c), 0);
    tern_wbuf_free(&w);
}

Test(index_cmd, builder_reuses_buffer)
{
    struct tern_wbuf w;
    build_sample(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create(&w, "x");
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_expect_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_expect_eq(w.len, 24 + 5 + 2);
    tern_wbuf_free(&w);
}

Test(index_cmd, builder_errors)
{
    struct tern_wbuf w;
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tern_wbuf_init(&w);

    idx_cmd_begin(&w, 1);
    cr_expect_eq(idx_cmd_end(&w), TERN_EINVAL, "empty entry");
    w.err = 0;
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create(&w, "bad name");
    cr_expect_eq(idx_cmd_end(&w), TERN_EBADNAME);
    w.err = 0;
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create(&w, big);
    cr_expect_eq(idx_cmd_end(&w), TERN_EBADNAME);
    w.err = 0;
    idx_cmd_begin(&w, 1);
    idx_cmd_group_commit(&w, "q", "", 0);
    cr_expect_eq(idx_cmd_end(&w), TERN_EBADNAME);
    w.err = 0;
    struct idx_msg m = {"x", 1};
    idx_cmd_begin(&w, 1);
    idx_cmd_produce(&w, "q", 5, 0, &m, 1);
    cr_expect_eq(idx_cmd_end(&w), TERN_EINVAL, "seq 0 with a producer");
    w.err = 0;
    idx_cmd_begin(&w, 1);
    idx_cmd_produce(&w, "q", 0, 0, &m, 0);
    cr_expect_eq(idx_cmd_end(&w), TERN_EINVAL, "no messages");
    tern_wbuf_free(&w);
}

/* Encode a single-command entry with a hand-made body. */
static size_t raw_entry(uint8_t *buf,
                        uint32_t n_cmds,
                        uint8_t type,
                        const uint8_t *body,
                        uint32_t body_len)
{
    memset(buf, 0, 24);
    tern_put_u16(buf, 1);
    tern_put_u32(buf + 4, n_cmds);
    buf[24] = type;
    tern_put_u32(buf + 25, body_len);
    memcpy(buf + 29, body, body_len);
    size_t len = 29 + body_len;
    th_entry_reseal(buf, len);
    return len;
}

/* Validate a one-command entry of type with body (built in buf). */
static int validate_raw(uint8_t *buf,
                        uint8_t type,
                        const uint8_t *body,
                        uint32_t body_len)
{
    return idx_cmd_validate(buf, raw_entry(buf, 1, type, body, body_len));
}

/* idx_cmd_end's code for an entry with one queue create of name (or,
 * with is_group, one group commit of group name on queue "q"). */
static int build_named(const char *name, int is_group)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    if (is_group) {
        idx_cmd_group_commit(&w, "q", name, 0);
    } else {
        idx_cmd_queue_create(&w, name);
    }
    int rc = idx_cmd_end(&w);
    tern_wbuf_free(&w);
    return rc;
}

/* Validate a raw queue create whose name is name[0..n), and a raw group
 * commit on queue "q" with that group name; 0 only if both decode. */
static int decode_named(const char *name, size_t n)
{
    uint8_t buf[1024], body[512];
    body[0] = (uint8_t)n;
    memcpy(body + 1, name, n);
    int rc = validate_raw(buf, IDX_CMD_QUEUE_CREATE, body, (uint32_t)n + 1);
    body[0] = 1;
    body[1] = 'q';
    body[2] = (uint8_t)n;
    memcpy(body + 3, name, n);
    tern_put_u64(body + 3 + n, 0);
    int grc =
        validate_raw(buf, IDX_CMD_GROUP_COMMIT, body, (uint32_t)n + 3 + 8);
    cr_expect_eq(rc, grc, "create and group commit disagree on a name");
    return rc;
}

/* The name rule index enforces is tern_name_valid: the builder refuses a
 * bad queue or group name with TERN_EBADNAME and the decoder refuses one
 * in an entry as malformed. */
Test(index_cmd, names_follow_the_common_rule)
{
    char n200[201], n201[202];
    memset(n200, 'z', 200);
    n200[200] = '\0';
    memset(n201, 'z', 201);
    n201[201] = '\0';
    const char *const good[] = {"a", "A-z_0.9", n200};
    const char *const bad[] = {n201, "", "a/b", "a b", "\xc3\xa9"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cr_expect_eq(build_named(good[i], 0), 0, "queue %.20s", good[i]);
        cr_expect_eq(build_named(good[i], 1), 0, "group %.20s", good[i]);
        cr_expect_eq(decode_named(good[i], strlen(good[i])), 0, "%.20s",
                     good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(build_named(bad[i], 0), TERN_EBADNAME, "queue %.20s",
                     bad[i]);
        cr_expect_eq(build_named(bad[i], 1), TERN_EBADNAME, "group %.20s",
                     bad[i]);
        cr_expect_eq(decode_named(bad[i], strlen(bad[i])), TERN_EMALFORMED,
                     "%.20s", bad[i]);
    }
    cr_expect_eq(build_named(NULL, 0), TERN_EBADNAME, "NULL queue");
    cr_expect_eq(build_named(NULL, 1), TERN_EBADNAME, "NULL group");
}

Test(index_cmd, rejects_header_malformations)
{
    struct tern_wbuf w;
    uint8_t *b;
    build_sample(&w);
    b = w.base;
    size_t len = w.len;

    cr_expect_eq(idx_cmd_validate(NULL, 0), TERN_EMALFORMED);
    cr_expect_eq(idx_cmd_validate(b, 23), TERN_EMALFORMED, "short header");
    /* Checksum: any flipped byte anywhere. */
    for (size_t i = 0; i < len; i++) {
        b[i] ^= 0x01;
        cr_expect_neq(idx_cmd_validate(b, len), 0, "flip at %zu", i);
        b[i] ^= 0x01;
    }
    cr_assert_eq(idx_cmd_validate(b, len), 0);
    /* Truncation at every length. */
    for (size_t l = 0; l < len; l++) {
        cr_expect_neq(idx_cmd_validate(b, l), 0, "truncated to %zu", l);
    }
    /* Version. */
    tern_put_u16(b, 2);
    th_entry_reseal(b, len);
    cr_expect_eq(idx_cmd_validate(b, len), TERN_EVERSION);
    tern_put_u16(b, 1);
    /* Flags: none (XXH32) or XXH3 (1, idx_cmd_flag_xxh3); any other bit,
     * alone or beside it, is malformed. */
    cr_expect_eq(tern_get_u16(b + 2), 0, "unflagged unless asked");
    idx_cmd_flag_xxh3(&w);
    cr_expect_eq(tern_get_u16(b + 2), 1);
    th_entry_reseal(b, len);
    cr_expect_eq(idx_cmd_validate(b, len), 0, "an XXH3 entry");
    for (unsigned bit = 1; bit < 16; bit++) {
        for (unsigned with = 0; with < 2; with++) {
            tern_put_u16(b + 2, (uint16_t)(with | 1u << bit));
            th_entry_reseal(b, len);
            cr_expect_eq(idx_cmd_validate(b, len), TERN_EMALFORMED,
                         "flag bit %u (with XXH3: %u)", bit, with);
        }
    }
    tern_put_u16(b + 2, 0);
    th_entry_reseal(b, len);
    /* Count: zero, too many, too few. */
    tern_put_u32(b + 4, 0);
    th_entry_reseal(b, len);
    cr_expect_eq(idx_cmd_validate(b, len), TERN_EMALFORMED);
    tern_put_u32(b + 4, 5);
    th_entry_reseal(b, len);
    cr_expect_eq(idx_cmd_validate(b, len), TERN_EMALFORMED);
    tern_put_u32(b + 4, 3);
    th_entry_reseal(b, len);
    cr_expect_eq(idx_cmd_validate(b, len), TERN_EMALFORMED, "trailing cmd");
    tern_put_u32(b + 4, 4);
    th_entry_reseal(b, len);
    cr_expect_eq(idx_cmd_validate(b, len), 0);
    /* total_len disagreeing with the buffer. */
    tern_put_u32(b + 16, (uint32_t)len + 1);
    tern_put_u32(b + 20, 0);
    cr_expect_eq(idx_cmd_validate(b, len), TERN_EMALFORMED);
    /* Trailing bytes after the last command. */
    uint8_t *big = malloc(len + 3);
    memcpy(big, b, len);
    memset(big + len, 0, 3);
    th_entry_reseal(big, len + 3);
    cr_expect_eq(idx_cmd_validate(big, len + 3), TERN_EMALFORMED);
    free(big);
    tern_wbuf_free(&w);
}

Test(index_cmd, rejects_body_malformations)
{
    uint8_t buf[1024], body[512];
    size_t len;

    /* Valid single create, as a baseline. */
    body[0] = 1;
    body[1] = 'q';
    cr_expect_eq(validate_raw(buf, IDX_CMD_QUEUE_CREATE, body, 2), 0);
    /* Unknown command types. */
    cr_expect_eq(validate_raw(buf, 0, body, 2), TERN_EMALFORMED);
    cr_expect_eq(validate_raw(buf, 5, body, 2), TERN_EMALFORMED);
    /* Body length beyond the entry. */
    len = raw_entry(buf, 1, IDX_CMD_QUEUE_CREATE, body, 2);
    tern_put_u32(buf + 25, 3);
    th_entry_reseal(buf, len);
    cr_expect_eq(idx_cmd_validate(buf, len), TERN_EMALFORMED);
    tern_put_u32(buf + 25, UINT32_MAX);
    th_entry_reseal(buf, len);
    cr_expect_eq(idx_cmd_validate(buf, len), TERN_EMALFORMED);
    /* Body with trailing bytes. */
    body[2] = 'x';
    cr_expect_eq(validate_raw(buf, IDX_CMD_QUEUE_DELETE, body, 3),
                 TERN_EMALFORMED);
    /* Name length 0, past the body, invalid characters, 201 bytes. */
    body[0] = 0;
    cr_expect_eq(validate_raw(buf, IDX_CMD_QUEUE_CREATE, body, 1),
                 TERN_EMALFORMED);
    body[0] = 5;
    cr_expect_eq(validate_raw(buf, IDX_CMD_QUEUE_CREATE, body, 3),
                 TERN_EMALFORMED);
    body[0] = 1;
    body[1] = '/';
    cr_expect_eq(validate_raw(buf, IDX_CMD_QUEUE_CREATE, body, 2),
                 TERN_EMALFORMED);
    body[0] = 201;
    memset(body + 1, 'a', 201);
    cr_expect_eq(validate_raw(buf, IDX_CMD_QUEUE_CREATE, body, 202),
                 TERN_EMALFORMED);
    body[0] = 200;
    cr_expect_eq(validate_raw(buf, IDX_CMD_QUEUE_CREATE, body, 201), 0,
                 "200 bytes is fine");

    /* Produce: q, pid, seq, n, msgs. */
    uint8_t *p = body;
    *p++ = 1;
    *p++ = 'q';
    tern_put_u64(p, 9);
    tern_put_u64(p + 8, 1);
    tern_put_u32(p + 16, 1);
    tern_put_u32(p + 20, 2);
    p[24] = 'h';
    p[25] = 'i';
    uint32_t plen = 2 + 26;
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen), 0);
    /* zero messages */
    tern_put_u32(p + 16, 0);
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen - 6),
                 TERN_EMALFORMED);
    /* message count larger than the body can hold */
    tern_put_u32(p + 16, 1000000);
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen),
                 TERN_EMALFORMED);
    tern_put_u32(p + 16, 2);
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen),
                 TERN_EMALFORMED);
    tern_put_u32(p + 16, 1);
    /* message length past the body */
    tern_put_u32(p + 20, 3);
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen),
                 TERN_EMALFORMED);
    tern_put_u32(p + 20, UINT32_MAX);
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen),
                 TERN_EMALFORMED);
    tern_put_u32(p + 20, 2);
    /* producer with seq 0 */
    tern_put_u64(p + 8, 0);
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen),
                 TERN_EMALFORMED);
    /* no producer, seq 0: fine */
    tern_put_u64(p, 0);
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, plen), 0);
    /* truncated produce header */
    cr_expect_eq(validate_raw(buf, IDX_CMD_PRODUCE, body, 2 + 10),
                 TERN_EMALFORMED);

    /* Group commit: q, g, offset. */
    p = body;
    *p++ = 1;
    *p++ = 'q';
    *p++ = 1;
    *p++ = 'g';
    tern_put_u64(p, 5);
    cr_expect_eq(validate_raw(buf, IDX_CMD_GROUP_COMMIT, body, 12), 0);
    cr_expect_eq(validate_raw(buf, IDX_CMD_GROUP_COMMIT, body, 11),
                 TERN_EMALFORMED);
    body[3] = ' ';
    cr_expect_eq(validate_raw(buf, IDX_CMD_GROUP_COMMIT, body, 12),
                 TERN_EMALFORMED, "bad group");

    /* Read barrier: empty body only. */
    cr_expect_eq(validate_raw(buf, IDX_CMD_READ_BARRIER, body, 0), 0);
    cr_expect_eq(validate_raw(buf, IDX_CMD_READ_BARRIER, body, 1),
                 TERN_EMALFORMED, "barrier with a body");
}

Test(index_cmd, read_barrier_round_trip)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 9);
    idx_cmd_read_barrier(&w);
    idx_cmd_group_commit(&w, "q", "g", 1);
    idx_cmd_read_barrier(&w);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_expect_eq(it.n, 3);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_READ_BARRIER);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_GROUP_COMMIT);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_READ_BARRIER);
    cr_expect_eq(idx__entry_next(&it, &c), 0);
    tern_wbuf_free(&w);
}

/* Which refused entries a later release wrote (idx__entry_newer: the node
 * that records them lacks what its peers applied) and which every release
 * refuses (damaged, malformed): only the first stop checkpoints (ckpt.c). */
Test(index_cmd, newer_tells_a_later_release_from_damage)
{
    struct tern_wbuf w;
    build_sample(&w);
    cr_expect(!idx__entry_newer(w.base, w.len), "valid");
    size_t type_at = IDX__CMD_HDR_SIZE; /* the first command's type */

    /* Unknown entry version, unknown header flag: newer. */
    uint8_t *b = malloc(w.len);
    cr_assert_not_null(b);
    memcpy(b, w.base, w.len);
    tern_put_u16(b, 2);
    cr_expect(idx__entry_newer(b, w.len), "entry version 2");
    memcpy(b, w.base, w.len);
    tern_put_u16(b + 2, 0x0002);
    cr_expect(idx__entry_newer(b, w.len), "an unknown flag");
    /* An unknown command type, the checksum resealed: newer. */
    memcpy(b, w.base, w.len);
    b[type_at] = 200;
    th_entry_reseal(b, w.len);
    cr_expect_neq(idx_cmd_validate(b, w.len), 0);
    cr_expect(idx__entry_newer(b, w.len), "command type 200");
    b[type_at] = IDX__CMD_TYPE_LAST + 1;
    th_entry_reseal(b, w.len);
    cr_expect(idx__entry_newer(b, w.len), "the type after the last");
    /* Version 0 and type 0 are no release's: malformed, not newer. */
    b[type_at] = 0;
    th_entry_reseal(b, w.len);
    cr_expect_neq(idx_cmd_validate(b, w.len), 0);
    cr_expect(!idx__entry_newer(b, w.len), "command type 0");
    memcpy(b, w.base, w.len);
    tern_put_u16(b, 0);
    cr_expect(!idx__entry_newer(b, w.len), "entry version 0");
    /* The same without the reseal (damage), a known command with a bad
     * body, a short entry, a length that does not match: not newer. */
    memcpy(b, w.base, w.len);
    b[type_at] = 200;
    cr_expect(!idx__entry_newer(b, w.len), "checksum does not hold");
    memcpy(b, w.base, w.len);
    b[type_at + 5] = 0; /* QUEUE_CREATE's name length */
    th_entry_reseal(b, w.len);
    cr_expect_neq(idx_cmd_validate(b, w.len), 0);
    cr_expect(!idx__entry_newer(b, w.len), "a known command, bad body");
    cr_expect(!idx__entry_newer(w.base, IDX__CMD_HDR_SIZE - 1), "short");
    cr_expect(!idx__entry_newer(w.base, w.len - 1), "length");
    cr_expect(!idx__entry_newer(NULL, 0));
    free(b);
    tern_wbuf_free(&w);
}
