/* Unit tests of message properties in index/: the properties block codec
 * and its limits (cmd.c), the PRODUCE_PROPS command (round trip, every
 * limit refused, truncated and oversized bodies), and applying and reading
 * them back (apply.c, read.c): properties after a rebuild from the log,
 * the key index, the tag filter and get by offset, id and key. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

/* A block with key, tag and two headers into w (fresh). */
static void sample_props(struct tern_wbuf *w, const char *key, const char *tag)
{
    static const struct idx_header h[2] = {
        {"trace", 5, "abc", 3},
        {"empty", 5, "", 0},
    };
    struct idx_props p = {
        .producer_ts_ms = 1700000000123ull,
        .key = key,
        .key_len = key != NULL ? (uint32_t)strlen(key) : 0,
        .tag = tag,
        .tag_len = tag != NULL ? (uint32_t)strlen(tag) : 0,
        .headers = h,
        .n_headers = 2,
    };
    tern_wbuf_init(w);
    idx_props_encode(w, &p);
    cr_assert_eq(w->err, 0);
}

Test(index_props, block_round_trip)
{
    struct tern_wbuf w;
    struct idx_props p;
    struct idx_header h;
    sample_props(&w, "order-17", "paid");
    cr_assert_eq(idx_props_check(w.base, w.len, NULL), 0);
    cr_assert_eq(idx_props_decode(w.base, w.len, &p), 0);
    cr_expect_eq(p.producer_ts_ms, 1700000000123ull);
    cr_expect_eq(p.key_len, 8);
    cr_expect_eq(memcmp(p.key, "order-17", 8), 0);
    cr_expect_eq(p.tag_len, 4);
    cr_expect_eq(memcmp(p.tag, "paid", 4), 0);
    cr_expect_eq(p.n_headers, 2);
    cr_assert_eq(idx_props_header(w.base, w.len, 0, &h), 0);
    cr_expect_eq(h.name_len, 5);
    cr_expect_eq(memcmp(h.name, "trace", 5), 0);
    cr_expect_eq(h.value_len, 3);
    cr_expect_eq(memcmp(h.value, "abc", 3), 0);
    cr_assert_eq(idx_props_header(w.base, w.len, 1, &h), 0);
    cr_expect_eq(memcmp(h.name, "empty", 5), 0);
    cr_expect_eq(h.value_len, 0);
    cr_expect_eq(idx_props_header(w.base, w.len, 2, &h), TERN_EINVAL);
    tern_wbuf_free(&w);
}

/* Encode p into a fresh buffer, bypassing the encoder's own checks by
 * writing the raw fields, and return idx_props_check's code. */
static int check_raw(uint16_t key_len,
                     uint8_t tag_len,
                     const char *tag,
                     uint8_t n_headers,
                     uint8_t name_len,
                     uint16_t value_len,
                     char *errmsg)
{
    static uint8_t big[IDX_PROPS_MAX * 4];
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    tern_wbuf_u8(&w, 1);
    tern_wbuf_u8(&w, 0);
    tern_wbuf_u64(&w, 1);
    tern_wbuf_u16(&w, key_len);
    tern_wbuf_u8(&w, tag_len);
    tern_wbuf_u8(&w, n_headers);
    memset(big, 'k', sizeof big);
    tern_wbuf_put(&w, big, key_len);
    tern_wbuf_put(&w, tag, tag_len);
    for (unsigned i = 0; i < n_headers; i++) {
        tern_wbuf_u8(&w, name_len);
        tern_wbuf_put(&w, big, name_len);
        tern_wbuf_u16(&w, value_len);
        tern_wbuf_put(&w, big, value_len);
    }
    cr_assert_eq(w.err, 0);
    int rc = idx_props_check(w.base, w.len, errmsg);
    tern_wbuf_free(&w);
    return rc;
}

Test(index_props, every_limit_refused)
{
    char tag65[66], err[TERN_ERRMSG_SIZE];
    memset(tag65, 't', 65);
    tag65[65] = '\0';
    /* at the limits: accepted */
    cr_expect_eq(check_raw(256, 64, tag65, 0, 0, 0, err), 0);
    cr_expect_eq(check_raw(0, 0, "", 8, 64, 960, err), 0, "%s", err);
    /* key */
    cr_expect_eq(check_raw(257, 0, "", 0, 0, 0, err), TERN_ETOOBIG);
    cr_expect(strstr(err, "key of 257 bytes") != NULL, "%s", err);
    /* tag: length and alphabet */
    cr_expect_eq(check_raw(0, 65, tag65, 0, 0, 0, err), TERN_ETOOBIG);
    cr_expect(strstr(err, "tag of 65 bytes") != NULL, "%s", err);
    cr_expect_eq(check_raw(0, 3, "a b", 0, 0, 0, err), TERN_EINVAL);
    cr_expect_eq(check_raw(0, 3, "a|b", 0, 0, 0, err), TERN_EINVAL);
    /* headers: count, name, value, total */
    cr_expect_eq(check_raw(0, 0, "", 33, 1, 0, err), TERN_ETOOBIG);
    cr_expect(strstr(err, "33 headers") != NULL, "%s", err);
    cr_expect_eq(check_raw(0, 0, "", 1, 65, 0, err), TERN_ETOOBIG);
    cr_expect(strstr(err, "header name of 65 bytes") != NULL, "%s", err);
    cr_expect_eq(check_raw(0, 0, "", 1, 0, 0, err), TERN_EINVAL);
    cr_expect_eq(check_raw(0, 0, "", 1, 8, 1025, err), TERN_ETOOBIG);
    cr_expect(strstr(err, "header value of 1025 bytes") != NULL, "%s", err);
    cr_expect_eq(check_raw(0, 0, "", 9, 64, 960, err), TERN_ETOOBIG);
    cr_expect(strstr(err, "headers of 9216 bytes") != NULL, "%s", err);
}

Test(index_props, truncated_and_trailing_blocks)
{
    struct tern_wbuf w;
    sample_props(&w, "k", "t");
    for (size_t n = 0; n < w.len; n++) {
        cr_expect_eq(idx_props_check(w.base, n, NULL), TERN_EMALFORMED,
                     "prefix of %zu bytes", n);
    }
    tern_wbuf_u8(&w, 0);
    cr_expect_eq(idx_props_check(w.base, w.len, NULL), TERN_EMALFORMED);
    w.base[0] = 2; /* unknown version */
    cr_expect_eq(idx_props_check(w.base, w.len - 1, NULL), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

/* PRODUCE_PROPS: built only when a message has properties. */
Test(index_props, command_round_trip)
{
    struct tern_wbuf p, w;
    struct idx__entry it;
    struct idx__cmd c;
    struct idx__msg_iter mi;
    const uint8_t *d;
    uint32_t len;
    sample_props(&p, "key-1", "tagA");
    struct idx_pmsg m[2] = {{"one", 3, p.base, (uint32_t)p.len},
                            {"two!", 4, NULL, 0}};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 99);
    idx_cmd_produce_props(&w, "q", 5, 1, m, 2);
    idx_cmd_produce_props(&w, "q", 5, 2, &m[1], 1);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_PRODUCE_PROPS);
    cr_expect_eq(c.n_msgs, 2);
    idx__msg_iter_init(&mi, &c);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect_eq(len, 3);
    cr_expect_eq(memcmp(d, "one", 3), 0);
    cr_expect_eq(mi.props_len, p.len);
    cr_expect_eq(memcmp(mi.props, p.base, p.len), 0);
    cr_assert_eq(idx__msg_iter_next(&mi, &d, &len), 1);
    cr_expect_eq(len, 4);
    cr_expect_eq(mi.props_len, 0);
    cr_expect_eq(idx__msg_iter_next(&mi, &d, &len), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_PRODUCE, "no properties: plain PRODUCE");
    cr_expect_eq(idx__entry_next(&it, &c), 0);
    tern_wbuf_free(&w);
    tern_wbuf_free(&p);
}

Test(index_props, builder_refuses_bad_blocks)
{
    uint8_t junk[20] = {1, 0};
    struct idx_pmsg m = {"x", 1, junk, 13};
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_produce_props(&w, "q", 0, 0, &m, 1);
    cr_expect_eq(idx_cmd_end(&w), TERN_EINVAL);
    /* a key over the limit */
    char key[IDX_KEY_MAX + 1];
    memset(key, 'k', sizeof key);
    struct idx_props pr = {.key = key, .key_len = sizeof key};
    idx_cmd_begin(&w, 1);
    w.err = 0;
    idx_props_encode(&w, &pr);
    cr_expect_eq(w.err, TERN_ETOOBIG);
    tern_wbuf_free(&w);
}

/* Offset of the first message's props_len field in a one-command entry
 * built by one_props_entry. */
static void one_props_entry(struct tern_wbuf *w, struct tern_wbuf *p)
{
    sample_props(p, "k", "t");
    struct idx_pmsg m = {"data", 4, p->base, (uint32_t)p->len};
    tern_wbuf_init(w);
    idx_cmd_begin(w, 7);
    idx_cmd_produce_props(w, "q", 0, 0, &m, 1);
    cr_assert_eq(idx_cmd_end(w), 0);
}

Test(index_props, truncated_and_oversized_commands)
{
    struct tern_wbuf w, p;
    one_props_entry(&w, &p);
    /* command header at 24: u8 type, u32 body_len; body: u8 qlen, "q",
     * u64 pid, u64 seq, u32 n, u32 len, "data", u32 props_len */
    size_t body = 24 + 5;
    size_t plen_at = body + 2 + 8 + 8 + 4 + 4 + 4;
    cr_assert_eq(tern_get_u32(w.base + plen_at), p.len);
    uint8_t *copy = malloc(w.len + 8);
    /* props_len one short / one long: the body no longer ends right */
    for (int delta = -1; delta <= 1; delta += 2) {
        memcpy(copy, w.base, w.len);
        tern_put_u32(copy + plen_at, (uint32_t)((int)p.len + delta));
        th_entry_reseal(copy, w.len);
        cr_expect_eq(idx_cmd_validate(copy, w.len), TERN_EMALFORMED);
    }
    /* a block cut short inside a well-framed command */
    memcpy(copy, w.base, w.len);
    tern_put_u32(copy + plen_at, (uint32_t)p.len - 1);
    tern_put_u32(copy + 25, tern_get_u32(copy + 25) - 1);
    th_entry_reseal(copy, w.len - 1);
    cr_expect_eq(idx_cmd_validate(copy, w.len - 1), TERN_EMALFORMED);
    /* a key length over the limit inside the command */
    memcpy(copy, w.base, w.len);
    tern_put_u16(copy + plen_at + 4 + 10, IDX_KEY_MAX + 1);
    th_entry_reseal(copy, w.len);
    cr_expect_eq(idx_cmd_validate(copy, w.len), TERN_EMALFORMED);
    /* n_msgs larger than the body can hold */
    memcpy(copy, w.base, w.len);
    tern_put_u32(copy + body + 2 + 16, 1000);
    th_entry_reseal(copy, w.len);
    cr_expect_eq(idx_cmd_validate(copy, w.len), TERN_EMALFORMED);
    free(copy);
    tern_wbuf_free(&w);
    tern_wbuf_free(&p);
}

/* ---- Applying and reading ------------------------------------------------ */

TestSuite(index_props_apply, .init = th_dirs_init, .fini = th_dirs_fini);

/* Message i of produce_keyed: key "k<i % nkeys>", tag "even"/"odd" (none
 * for every fifth message), payload "m<i>". */
static void produce_keyed(struct idx_env *e,
                          uint64_t index,
                          const char *queue,
                          uint32_t first,
                          uint32_t n,
                          uint32_t nkeys)
{
    struct tern_wbuf w, p[64];
    struct idx_pmsg m[64];
    char key[64][16], data[64][16];
    cr_assert(n <= 64);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = first + j;
        struct idx_header h = {"seq", 3, data[j], 0};
        (void)snprintf(key[j], sizeof key[j], "k%u", i % nkeys);
        (void)snprintf(data[j], sizeof data[j], "m%u", i);
        h.value_len = (uint32_t)strlen(data[j]);
        struct idx_props pr = {
            .producer_ts_ms = 1000 + i,
            .key = key[j],
            .key_len = (uint32_t)strlen(key[j]),
            .tag = i % 5 == 0 ? NULL : (i % 2 == 0 ? "even" : "odd"),
            .tag_len = i % 5 == 0 ? 0 : (i % 2 == 0 ? 4 : 3),
            .headers = &h,
            .n_headers = 1,
        };
        tern_wbuf_init(&p[j]);
        idx_props_encode(&p[j], &pr);
        cr_assert_eq(p[j].err, 0);
        m[j] = (struct idx_pmsg){data[j], (uint32_t)strlen(data[j]), p[j].base,
                                 (uint32_t)p[j].len};
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5000 + index);
    idx_cmd_produce_props(&w, queue, 0, 0, m, n);
    cr_assert_eq(idx_cmd_end(&w), 0);
    struct idx_result r;
    cr_assert_eq(th_apply(e, index, &w, &r, 1), 1);
    cr_assert_eq(r.status, 0);
    tern_wbuf_free(&w);
    for (uint32_t j = 0; j < n; j++) {
        tern_wbuf_free(&p[j]);
    }
}

struct got
{
    uint64_t off[128];
    char tag[128][8];
    char key[128][16];
    uint64_t pts[128];
    uint64_t qid;
    uint32_t n;
};

static int got_cb(void *arg, const struct idx_fetched *f)
{
    struct got *g = arg;
    struct idx_props p;
    cr_assert(g->n < 128);
    g->off[g->n] = f->offset;
    g->qid = f->queue_id;
    g->tag[g->n][0] = g->key[g->n][0] = '\0';
    g->pts[g->n] = 0;
    if (f->props_len > 0) {
        cr_assert_eq(idx_props_decode(f->props, f->props_len, &p), 0);
        (void)snprintf(g->tag[g->n], sizeof g->tag[0], "%.*s", (int)p.tag_len,
                       p.tag);
        (void)snprintf(g->key[g->n], sizeof g->key[0], "%.*s", (int)p.key_len,
                       p.key);
        g->pts[g->n] = p.producer_ts_ms;
        char want[16];
        (void)snprintf(want, sizeof want, "m%llu",
                       (unsigned long long)f->offset);
        cr_expect_eq(f->len, strlen(want));
        cr_expect_eq(memcmp(f->data, want, f->len), 0);
        struct idx_header h;
        cr_assert_eq(idx_props_header(f->props, f->props_len, 0, &h), 0);
        cr_expect_eq(h.value_len, f->len, "header seq = payload");
    }
    g->n++;
    return 0;
}

static void check_props_all(struct idx_env *e, uint32_t n)
{
    struct got g = {0};
    uint64_t next;
    struct idx_fetch_opts o = {.max_msgs = 1000, .max_bytes = 1 << 20};
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &g, &next), 0);
    cr_assert_eq(g.n, n);
    cr_expect_eq(next, n);
    for (uint32_t i = 0; i < n; i++) {
        char k[16];
        (void)snprintf(k, sizeof k, "k%u", i % 3);
        cr_expect_str_eq(g.key[i], k);
        cr_expect_str_eq(g.tag[i], i % 5 == 0 ? "" : i % 2 ? "odd" : "even");
        cr_expect_eq(g.pts[i], 1000 + i);
    }
}

Test(index_props_apply, stored_and_read_back_after_rebuild)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    th_create(e, 1, "q");
    produce_keyed(e, 2, "q", 0, 10, 3);
    th_produce(e, 3, "q", 0, 0, 2); /* an old-format PRODUCE beside */
    produce_keyed(e, 4, "q", 12, 8, 3);
    cr_assert_eq(idx_flush(e), 0);
    /* the plain messages (offsets 10, 11) have no properties */
    struct got g = {0};
    uint64_t next;
    struct idx_fetch_opts o = {.max_msgs = 2, .max_bytes = 1 << 20};
    cr_assert_eq(idx_fetch_filtered(e, "q", 10, &o, got_cb, &g, &next), 0);
    cr_assert_eq(g.n, 2);
    cr_expect_str_eq(g.key[0], "");
    idx_close(e);
    /* reopen: LMDB rebuilt from the log */
    e = th_open(th_dir_a, 0);
    struct got a = {0};
    o.max_msgs = 100;
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &a, &next), 0);
    cr_assert_eq(a.n, 20);
    for (uint32_t i = 0; i < 20; i++) {
        if (i == 10 || i == 11) {
            cr_expect_str_eq(a.key[i], "");
            continue;
        }
        char k[16];
        (void)snprintf(k, sizeof k, "k%u", i % 3);
        cr_expect_str_eq(a.key[i], k, "offset %u", i);
        cr_expect_eq(a.pts[i], 1000 + i);
    }
    idx_close(e);
}

Test(index_props_apply, tag_filter_skips_and_advances)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    th_create(e, 1, "q");
    produce_keyed(e, 2, "q", 0, 30, 3);
    cr_assert_eq(idx_flush(e), 0);
    check_props_all(e, 30);
    struct idx_tag odd = {"odd", 3};
    struct idx_fetch_opts o = {
        .max_msgs = 100, .max_bytes = 1 << 20, .tags = &odd, .n_tags = 1};
    struct got g = {0};
    uint64_t next;
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &g, &next), 0);
    cr_expect_eq(next, 30, "the fetch moves past skipped messages");
    /* odd offsets that are not multiples of 5: 1 3 7 9 11 13 17 19 21 23
     * 27 29 */
    cr_assert_eq(g.n, 12);
    for (uint32_t i = 0; i < g.n; i++) {
        cr_expect(g.off[i] % 2 == 1 && g.off[i] % 5 != 0);
        cr_expect_str_eq(g.tag[i], "odd");
    }
    /* two tags */
    struct idx_tag both[2] = {{"odd", 3}, {"even", 4}};
    o.tags = both;
    o.n_tags = 2;
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &g, &next), 0);
    cr_expect_eq(g.n, 24, "everything but the untagged");
    /* a tag nobody has: nothing delivered, the whole queue passed */
    struct idx_tag none = {"none", 4};
    o.tags = &none;
    o.n_tags = 1;
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &g, &next), 0);
    cr_expect_eq(g.n, 0);
    cr_expect_eq(next, 30);
    /* the scan bound stops early with next_offset where to go on */
    o.max_scan = 7;
    cr_assert_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &g, &next), 0);
    cr_expect_eq(next, 7);
    /* max_msgs counts delivered messages only */
    o.tags = &odd;
    o.max_scan = 0;
    o.max_msgs = 2;
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_fetch_filtered(e, "q", 2, &o, got_cb, &g, &next), 0);
    cr_assert_eq(g.n, 2);
    cr_expect_eq(g.off[0], 3);
    cr_expect_eq(g.off[1], 7);
    cr_expect_eq(next, 8);
    /* bad filters */
    struct idx_tag bad = {"a b", 3};
    o.tags = &bad;
    cr_expect_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &g, &next),
                 TERN_EINVAL);
    struct idx_tag many[17];
    for (int i = 0; i < 17; i++) {
        many[i] = odd;
    }
    o.tags = many;
    o.n_tags = 17;
    cr_expect_eq(idx_fetch_filtered(e, "q", 0, &o, got_cb, &g, &next),
                 TERN_EINVAL);
    idx_close(e);
}

Test(index_props_apply, get_by_offset_id_and_key)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    th_create(e, 1, "other");
    th_create(e, 2, "q");
    produce_keyed(e, 3, "q", 0, 40, 3);
    produce_keyed(e, 4, "q", 40, 40, 3);
    cr_assert_eq(idx_flush(e), 0);
    struct got g = {0};
    cr_assert_eq(idx_message_get(e, "q", 0, 17, got_cb, &g), 0);
    cr_assert_eq(g.n, 1);
    cr_expect_eq(g.off[0], 17);
    cr_expect_str_eq(g.key[0], "k2");
    uint64_t qid = g.qid;
    cr_expect_neq(qid, 0);
    /* by id: the queue id must match */
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_message_get(e, "q", qid, 79, got_cb, &g), 0);
    cr_expect_eq(g.off[0], 79);
    cr_expect_eq(idx_message_get(e, "other", qid, 1, got_cb, &g),
                 TERN_ENOTFOUND);
    cr_expect_eq(idx_message_get(e, "q", qid + 100, 1, got_cb, &g),
                 TERN_ENOTFOUND);
    cr_expect_eq(idx_message_get(e, "q", 0, 80, got_cb, &g), TERN_ENOTFOUND);
    cr_expect_eq(idx_message_get(e, "nope", 0, 0, got_cb, &g), TERN_ENOQUEUE);
    /* by key: k1 is at 1, 4, 7, ..., 79 (27 messages), newest first */
    uint32_t n = 0;
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_message_get_key(e, "q", "k1", 2, 100, got_cb, &g, &n), 0);
    cr_assert_eq(n, 27);
    cr_assert_eq(g.n, 27);
    for (uint32_t i = 0; i < n; i++) {
        cr_expect_eq(g.off[i], 79 - 3 * i);
        cr_expect_str_eq(g.key[i], "k1");
    }
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_message_get_key(e, "q", "k0", 2, 5, got_cb, &g, &n), 0);
    cr_assert_eq(n, 5);
    cr_expect_eq(g.off[0], 78);
    cr_expect_eq(g.off[4], 66);
    /* a key that is a prefix of no other, and one that does not exist */
    cr_assert_eq(idx_message_get_key(e, "q", "k", 1, 5, got_cb, &g, &n), 0);
    cr_expect_eq(n, 0);
    cr_assert_eq(idx_message_get_key(e, "other", "k1", 2, 5, got_cb, &g, &n),
                 0);
    cr_expect_eq(n, 0);
    cr_expect_eq(idx_message_get_key(e, "q", "", 0, 5, got_cb, &g, &n),
                 TERN_EINVAL);
    idx_close(e);
}

static int got_two_cb(void *arg, const struct idx_fetched *f)
{
    struct got *g = arg;
    (void)got_cb(arg, f);
    return g->n == 2 ? 1 : 0;
}

/* The RECEIVE answer's read: the retained messages among a list of
 * offsets, in the order given, skipping the others; the callback stops
 * it. */
Test(index_props_apply, get_a_list_of_offsets)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    th_create(e, 1, "q");
    produce_keyed(e, 2, "q", 0, 40, 3);
    produce_keyed(e, 3, "q", 40, 40, 3);
    cr_assert_eq(idx_flush(e), 0);
    uint64_t offs[6] = {3, 4, 39, 40, 79, 80};
    struct got g = {0};
    cr_assert_eq(idx_messages_get(e, "q", offs, 6, got_cb, &g), 0);
    cr_assert_eq(g.n, 5, "80 was never appended: skipped");
    for (uint32_t i = 0; i < 5; i++) {
        cr_expect_eq(g.off[i], offs[i]);
        char want[8];
        (void)snprintf(want, sizeof want, "k%u", (unsigned)(offs[i] % 3));
        cr_expect_str_eq(g.key[i], want);
    }
    cr_expect_eq(g.pts[2], 1039, "its properties came with it");
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_messages_get(e, "q", offs, 6, got_two_cb, &g), 0);
    cr_expect_eq(g.n, 2, "the callback stopped the walk");
    cr_expect_eq(idx_messages_get(e, "nope", offs, 1, got_cb, &g),
                 TERN_ENOQUEUE);
    idx_close(e);
}

static int count_keys_rows(struct idx_env *e)
{
    MDB_txn *txn;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_stat(txn, e->dbi_keys, &st), 0);
    mdb_txn_abort(txn);
    return (int)st.ms_entries;
}

/* Run the row cleaner until it has nothing left (bounded). */
static void clean_all(struct idx_env *e)
{
    unsigned done = 0;
    for (int i = 0; i < 1000; i++) {
        cr_assert_eq(idx_clean_step(e, 64, &done), 0, "%s", idx_errmsg(e));
        if (done < 64) {
            return;
        }
    }
    cr_assert_fail("the cleaner did not finish");
}

Test(index_props_apply, key_rows_deleted_with_messages)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    th_create(e, 1, "q");
    th_create(e, 2, "keep");
    produce_keyed(e, 3, "q", 0, 20, 4);
    produce_keyed(e, 4, "keep", 0, 6, 4);
    cr_assert_eq(idx_flush(e), 0);
    cr_expect_eq(count_keys_rows(e), 26);
    /* an offset range, directly */
    struct got g = {0};
    cr_assert_eq(idx_message_get(e, "q", 0, 0, got_cb, &g), 0);
    uint64_t qid = g.qid;
    cr_assert_eq(idx__txn_begin(e), 0);
    cr_assert_eq(idx__key_rows_delete(e, qid, 0, 2), 0);
    cr_assert_eq(idx_flush(e), 0);
    cr_expect_eq(count_keys_rows(e), 24);
    /* TRIM [0, 8): the cleaner deletes the key rows with the msgs rows */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_trim(&w, "q", qid, 0, 8, 16);
    cr_assert_eq(idx_cmd_end(&w), 0);
    struct idx_result r;
    th_apply(e, 5, &w, &r, 1);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(idx_flush(e), 0);
    clean_all(e);
    cr_expect_eq(count_keys_rows(e), 18);
    uint32_t n = 0;
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_message_get_key(e, "q", "k1", 2, 100, got_cb, &g, &n), 0);
    cr_expect_eq(n, 3, "k1 at 9, 13, 17 remain");
    /* QUEUE_DELETE: the cleaner removes the rest of the queue's rows */
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_delete(&w, "q");
    cr_assert_eq(idx_cmd_end(&w), 0);
    th_apply(e, 6, &w, NULL, 0);
    tern_wbuf_free(&w);
    cr_assert_eq(idx_flush(e), 0);
    clean_all(e);
    cr_expect_eq(count_keys_rows(e), 6);
    memset(&g, 0, sizeof g);
    cr_assert_eq(idx_message_get_key(e, "keep", "k1", 2, 100, got_cb, &g, &n),
                 0);
    cr_expect_eq(n, 2);
    idx_close(e);
}

/* ---- A fetch reads a command's messages from its record ------------------ */

struct seen
{
    uint32_t n;
    struct
    {
        uint64_t off, ts, pid, qid;
        uint32_t len, plen;
        char data[128];
        uint8_t props[128];
    } m[64];
};

static int seen_cb(void *arg, const struct idx_fetched *f)
{
    struct seen *s = arg;
    cr_assert_lt(s->n, 64);
    cr_assert_lt(f->len, sizeof s->m[0].data);
    cr_assert_leq(f->props_len, sizeof s->m[0].props);
    s->m[s->n].off = f->offset;
    s->m[s->n].ts = f->timestamp_ms;
    s->m[s->n].pid = f->producer_id;
    s->m[s->n].qid = f->queue_id;
    s->m[s->n].len = f->len;
    s->m[s->n].plen = f->props_len;
    memset(s->m[s->n].data, 0, sizeof s->m[0].data);
    memcpy(s->m[s->n].data, f->data, f->len);
    if (f->props_len > 0) {
        memcpy(s->m[s->n].props, f->props, f->props_len);
    }
    s->n++;
    return 0;
}

/* Entry `index`: plain produces of n1 and n2 messages into q (two
 * commands, producer pid, sequences seq and seq + 1) around one into r. */
static void produce_two(struct idx_env *e,
                        uint64_t index,
                        uint64_t pid,
                        uint64_t seq,
                        uint32_t n1,
                        uint32_t n2)
{
    struct tern_wbuf w;
    struct idx_result r[3];
    struct idx_msg m[16];
    char text[16][24];
    cr_assert(n1 <= 16 && n2 <= 16);
    for (uint32_t i = 0; i < 16; i++) {
        (void)snprintf(text[i], sizeof text[i], "x%llu.%u",
                       (unsigned long long)index, i);
        m[i] = (struct idx_msg){text[i], (uint32_t)strlen(text[i])};
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 7000 + index);
    idx_cmd_produce(&w, "q", pid, seq, m, n1);
    idx_cmd_produce(&w, "r", 0, 0, m, 2);
    idx_cmd_produce(&w, "q", pid, seq + 1, m + n1, n2);
    cr_assert_eq(th_apply(e, index, &w, r, 3), 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].status, 0);
    }
    tern_wbuf_free(&w);
}

/* Entry `index`: one PRODUCE_PROPS command into q whose messages have a
 * properties block or none, one of them empty: "a" (key), "", "bb",
 * "ccc" (tag), "d". */
static void produce_mixed(struct idx_env *e, uint64_t index)
{
    struct tern_wbuf w, p1, p2;
    struct idx_props a = {.key = "ka", .key_len = 2};
    struct idx_props c = {.tag = "t", .tag_len = 1};
    tern_wbuf_init(&p1);
    tern_wbuf_init(&p2);
    idx_props_encode(&p1, &a);
    idx_props_encode(&p2, &c);
    cr_assert(p1.err == 0 && p2.err == 0);
    struct idx_pmsg m[5] = {
        {"a", 1, p1.base, (uint32_t)p1.len},
        {"", 0, NULL, 0},
        {"bb", 2, NULL, 0},
        {"ccc", 3, p2.base, (uint32_t)p2.len},
        {"d", 1, NULL, 0},
    };
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 8000 + index);
    idx_cmd_produce_props(&w, "q", 0, 0, m, 5);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(w.base[IDX__CMD_HDR_SIZE], IDX_CMD_PRODUCE_PROPS);
    struct idx_result r;
    cr_assert_eq(th_apply(e, index, &w, &r, 1), 1);
    cr_assert_eq(r.status, 0);
    tern_wbuf_free(&w);
    tern_wbuf_free(&p1);
    tern_wbuf_free(&p2);
}

/* After its first row, a fetch reads the rest of a PRODUCE command's
 * messages from the record instead of their rows (read.c, "walk"). What
 * it delivers must be what the rows say: every fetch, from every offset,
 * with every count and a byte bound, against one-message fetches (which
 * read a row each). The queue mixes PRODUCE_PROPS commands (messages
 * with and without properties, one empty), plain PRODUCE commands, two
 * commands of
 * the queue in one entry with another queue's between, one-message
 * commands, a group commit entry between, and a trimmed head. */
Test(index_props_apply, fetches_read_commands_from_their_records_as_rows_say)
{
    struct idx_env *e = th_open(th_dir_a, 1 << 20);
    uint64_t index = 1;
    th_create(e, index++, "q");
    th_create(e, index++, "r");
    produce_keyed(e, index++, "q", 0, 7, 3);
    produce_two(e, index++, 5, 1, 3, 4);
    produce_keyed(e, index++, "q", 14, 1, 3);
    (void)th_produce(e, index++, "q", 0, 1, 1);
    {
        struct tern_wbuf w;
        struct idx_result r;
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 9000);
        idx_cmd_group_commit(&w, "q", "g", 3);
        cr_assert_eq(th_apply(e, index++, &w, &r, 1), 1);
        tern_wbuf_free(&w);
    }
    produce_keyed(e, index++, "q", 16, 12, 4);
    produce_mixed(e, index++);
    produce_two(e, index++, 5, 3, 1, 5);
    (void)th_produce(e, index++, "q", 0, 2, 6);
    cr_assert_eq(idx_flush(e), 0);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    uint64_t n = qi.next_offset;
    cr_assert_eq(n, 7 + 7 + 1 + 1 + 12 + 5 + 6 + 6);

    for (int pass = 0; pass < 2; pass++) {
        uint64_t from = qi.start_offset;
        struct seen *one = calloc(1, sizeof *one);
        cr_assert_not_null(one);
        for (uint64_t o = from; o < n; o++) {
            uint64_t next;
            struct idx_fetch_opts op = {.max_msgs = 1, .max_bytes = 1 << 20};
            cr_assert_eq(
                idx_fetch_filtered(e, "q", o, &op, seen_cb, one, &next), 0);
            cr_assert_eq(next, o + 1);
        }
        cr_assert_eq(one->n, n - from);
        const uint32_t counts[] = {2, 3, 5, 8, 13, 1000};
        for (uint64_t start = from; start < n; start++) {
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                for (int b = 0; b < 3; b++) {
                    struct seen s = {0};
                    uint64_t next;
                    struct idx_fetch_opts op = {.max_msgs = counts[ci],
                                                .max_bytes = b == 0   ? 1 << 20
                                                             : b == 1 ? 40
                                                                      : 150,
                                                .with_props = b == 2};
                    cr_assert_eq(idx_fetch_filtered(e, "q", start, &op, seen_cb,
                                                    &s, &next),
                                 0);
                    cr_assert_geq(s.n, 1);
                    cr_expect_eq(next, start + s.n);
                    if (b == 0) {
                        cr_expect_eq(s.n,
                                     TERN_MIN((uint64_t)counts[ci], n - start));
                    }
                    for (uint32_t k = 0; k < s.n; k++) {
                        uint64_t i = start + k - from;
                        cr_assert_eq(s.m[k].off, one->m[i].off);
                        cr_assert_eq(s.m[k].len, one->m[i].len);
                        cr_assert_str_eq(s.m[k].data, one->m[i].data,
                                         "offset %llu from %llu",
                                         (unsigned long long)s.m[k].off,
                                         (unsigned long long)start);
                        cr_assert_eq(s.m[k].ts, one->m[i].ts);
                        cr_assert_eq(s.m[k].pid, one->m[i].pid);
                        cr_assert_eq(s.m[k].qid, one->m[i].qid);
                        cr_assert_eq(s.m[k].plen, one->m[i].plen);
                        cr_assert_eq(
                            memcmp(s.m[k].props, one->m[i].props, s.m[k].plen),
                            0);
                    }
                }
            }
        }
        free(one);
        if (pass == 1) {
            break;
        }
        /* Again with the head trimmed into the middle of a command. */
        struct tern_wbuf w;
        struct idx_result r;
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 9900);
        idx_cmd_trim(&w, "q", qi.id, 0, 4, 8); /* "m0".."m3" */
        cr_assert_eq(th_apply(e, index++, &w, &r, 1), 1);
        cr_assert_eq(r.status, 0, "%s", tern_strerror(r.status));
        tern_wbuf_free(&w);
        cr_assert_eq(idx_flush(e), 0);
        cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
        cr_assert_eq(qi.start_offset, 4);
    }
    idx_close(e);
}
