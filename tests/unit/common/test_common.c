/* Unit tests for common/: error strings, checksums, cursors, write buffers,
 * allocator failure injection, the name rule and the intrusive list. */
#include <errno.h>

#include <criterion/criterion.h>

#include <stdlib.h>
#include <xxhash.h>

#include <tern_common.h>

Test(common, strerror_and_names)
{
    cr_expect_str_eq(tern_strerror(TERN_EFULL), "disk full");
    cr_expect_str_eq(tern_err_name(TERN_ENOTLEADER), "TERN_ENOTLEADER");
    cr_expect_str_eq(tern_err_name(-ENOENT), "ENOENT");
    cr_expect_str_eq(tern_strerror(0), "success");
}

Test(common, errmsg_wrap)
{
    char msg[TERN_ERRMSG_SIZE];
    tern_errmsg_printf(msg, "open %s", "x");
    tern_errmsg_wrapf(msg, "index %d", 7);
    cr_expect_str_eq(msg, "index 7: open x");
}

Test(common, checksum_incremental_matches_oneshot)
{
    const char *s = "hello tern, a replicated message log";
    struct tern_checksum_state st;
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, s, 10);
    tern_checksum32_update(&st, s + 10, strlen(s) - 10);
    cr_expect_eq(tern_checksum32_end(&st), tern_checksum32(s, strlen(s)));
    cr_expect_neq(tern_checksum32("a", 1), tern_checksum32("b", 1));
}

Test(common, xxh3_incremental_matches_oneshot_at_every_split)
{
    /* Lengths across XXH3's internal boundaries (16, 128, 240 bytes, its
     * 256-byte buffer and 1 KiB stripes), split at several points. */
    static uint8_t b[5000];
    static const size_t lens[] = {0,   1,   16,  17,   128,  129,
                                  240, 241, 256, 1024, 1025, 4999};
    for (size_t i = 0; i < sizeof b; i++) {
        b[i] = (uint8_t)(i * 131 + 7);
    }
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        size_t n = lens[k];
        uint32_t one = tern_checksum32_xxh3(b, n, 0x1234);
        for (size_t cut = 0; cut <= n; cut += n / 3 + 1) {
            struct tern_checksum3_state st;
            tern_checksum32_xxh3_begin(&st, 0x1234);
            tern_checksum32_xxh3_update(&st, b, cut);
            tern_checksum32_xxh3_update(&st, b + cut, n - cut);
            cr_expect_eq(tern_checksum32_xxh3_end(&st), one,
                         "length %zu split at %zu", n, cut);
        }
    }
    cr_expect_neq(tern_checksum32_xxh3(b, 100, 1),
                  tern_checksum32_xxh3(b, 100, 2), "the seed counts");
}

/* tern_checksum32_either: XXH32 or XXH3 with the "tern" seed, as picked
 * at begin, whatever the split. */
Test(common, either_checksum_is_the_one_picked)
{
    static uint8_t b[3000];
    for (size_t i = 0; i < sizeof b; i++) {
        b[i] = (uint8_t)(i * 17 + 3);
    }
    for (size_t cut = 0; cut <= sizeof b; cut += 700) {
        struct tern_checksum32_either x32, x3;
        tern_checksum32_either_begin(&x32, false, TERN_CHECKSUM_SEED);
        tern_checksum32_either_begin(&x3, true, TERN_CHECKSUM_SEED);
        tern_checksum32_either_update(&x32, b, cut);
        tern_checksum32_either_update(&x3, b, cut);
        tern_checksum32_either_update(&x32, b + cut, sizeof b - cut);
        tern_checksum32_either_update(&x3, b + cut, sizeof b - cut);
        cr_expect_eq(tern_checksum32_either_end(&x32),
                     tern_checksum32(b, sizeof b), "split at %zu", cut);
        cr_expect_eq(tern_checksum32_either_end(&x3),
                     tern_checksum32_xxh3(b, sizeof b, TERN_CHECKSUM_SEED),
                     "split at %zu", cut);
    }
}

Test(common, cursor_bounds_are_sticky)
{
    uint8_t buf[5] = {1, 2, 0, 0, 0};
    struct tern_cursor c;
    tern_cursor_init(&c, buf, sizeof buf);
    cr_expect_eq(tern_cursor_u16(&c), 0x0201);
    cr_expect_eq(tern_cursor_u64(&c), 0);
    cr_expect_eq(c.err, TERN_EMALFORMED);
    cr_expect_eq(tern_cursor_u8(&c), 0, "no reads after an error");
}

Test(common, wbuf_roundtrip)
{
    struct tern_wbuf w;
    struct tern_cursor c;
    tern_wbuf_init(&w);
    for (uint32_t i = 0; i < 1000; i++) {
        tern_wbuf_u32(&w, i);
        tern_wbuf_u64(&w, (uint64_t)i << 40);
    }
    cr_assert_eq(w.err, 0);
    tern_cursor_init(&c, w.base, w.len);
    for (uint32_t i = 0; i < 1000; i++) {
        cr_expect_eq(tern_cursor_u32(&c), i);
        cr_expect_eq(tern_cursor_u64(&c), (uint64_t)i << 40);
    }
    cr_expect_eq(tern_cursor_left(&c), 0);
    tern_wbuf_free(&w);
}

Test(common, alloc_failure_injection)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    tern_alloc_fail_after(0);
    tern_wbuf_u32(&w, 1);
    tern_alloc_fail_after(-1);
    cr_expect_eq(w.err, -ENOMEM);
    tern_wbuf_free(&w);
}

Test(common, wbuf_init_cap_fills_without_moving_and_is_only_a_hint)
{
    struct tern_wbuf w;
    uint8_t chunk[100];
    memset(chunk, 7, sizeof chunk);
    tern_wbuf_init_cap(&w, 1000);
    cr_assert_eq(w.err, 0);
    cr_assert_eq(w.cap, 1000);
    const uint8_t *base = w.base;
    for (int i = 0; i < 10; i++) {
        tern_wbuf_put(&w, chunk, sizeof chunk);
    }
    cr_expect_eq(w.base, base, "1000 bytes fit the room given");
    cr_expect_eq(w.len, 1000);
    tern_wbuf_put(&w, chunk, 1);
    cr_expect_eq(w.len, 1001, "past the room it grows as usual");
    cr_expect_eq(w.err, 0);
    tern_wbuf_free(&w);
    /* Out of memory: an empty buffer without an error, which then grows
     * (or fails) as tern_wbuf_init's would. */
    tern_alloc_fail_after(0);
    tern_wbuf_init_cap(&w, 1000);
    tern_alloc_fail_after(-1);
    cr_expect_eq(w.err, 0);
    cr_expect_eq(w.cap, 0);
    cr_expect_null(w.base);
    tern_wbuf_u32(&w, 5);
    cr_expect_eq(w.err, 0);
    cr_expect_eq(w.len, 4);
    tern_wbuf_free(&w);
    tern_wbuf_init_cap(&w, 0);
    cr_expect_null(w.base);
    cr_expect_eq(w.cap, 0);
}

Test(common, wbuf_trim_gives_back_the_room_past_its_slack)
{
    struct tern_wbuf w;
    tern_wbuf_init_cap(&w, 1 << 20);
    tern_wbuf_u64(&w, 42);
    tern_wbuf_trim(&w, 1 << 20);
    cr_expect_eq(w.cap, 1 << 20, "within the slack: kept");
    tern_wbuf_trim(&w, 4096);
    cr_expect_eq(w.cap, 8);
    cr_expect_eq(w.len, 8);
    cr_expect_eq(tern_get_u64(w.base), 42);
    tern_wbuf_u32(&w, 7);
    cr_expect_eq(w.err, 0, "it grows again after");
    cr_expect_eq(w.len, 12);
    tern_wbuf_free(&w);
    /* Out of memory: left as it was. */
    tern_wbuf_init_cap(&w, 1 << 20);
    tern_wbuf_u64(&w, 42);
    tern_alloc_fail_after(0);
    tern_wbuf_trim(&w, 0);
    tern_alloc_fail_after(-1);
    cr_expect_eq(w.cap, 1 << 20);
    cr_expect_eq(w.err, 0);
    cr_expect_eq(tern_get_u64(w.base), 42);
    tern_wbuf_free(&w);
}

Test(common, name_rule)
{
    cr_expect(tern_name_valid("orders", 6));
    cr_expect(tern_name_valid("a.B_c-9", 7));
    cr_expect(!tern_name_valid("", 0));
    cr_expect(!tern_name_valid("a b", 3));
    cr_expect(!tern_name_valid("a/b", 3));
    cr_expect(!tern_name_valid("\xc3\xa9", 2));
    char big[TERN_NAME_MAX + 2];
    memset(big, 'x', sizeof big);
    cr_expect(tern_name_valid(big, TERN_NAME_MAX));
    cr_expect(!tern_name_valid(big, TERN_NAME_MAX + 1));
}

Test(common, name_rule_with_null_or_embedded_nul)
{
    cr_expect(!tern_name_valid(NULL, 0));
    cr_expect(!tern_name_valid(NULL, 3));
    cr_expect(!tern_name_valid("a\0b", 3));
}

Test(common, list_push_remove_in_order)
{
    struct item
    {
        int v;
        struct tern_list link;
    } items[3] = {{.v = 1}, {.v = 2}, {.v = 3}};
    struct tern_list head;
    tern_list_init(&head);
    cr_expect(tern_list_empty(&head));
    for (int i = 0; i < 3; i++) {
        tern_list_push(&head, &items[i].link);
    }
    int seen[3] = {0};
    int n = 0;
    for (struct tern_list *e = head.next; e != &head && n < 3; e = e->next) {
        seen[n++] = TERN_CONTAINER(e, struct item, link)->v;
    }
    cr_expect_eq(n, 3);
    cr_expect(seen[0] == 1 && seen[1] == 2 && seen[2] == 3);
    tern_list_remove(&items[1].link);
    tern_list_remove(&items[1].link); /* a second remove is harmless */
    cr_expect_eq(head.next, &items[0].link);
    cr_expect_eq(items[0].link.next, &items[2].link);
    cr_expect_eq(items[2].link.prev, &items[0].link);
    tern_list_remove(&items[0].link);
    tern_list_remove(&items[2].link);
    cr_expect(tern_list_empty(&head));
}

Test(common, qualified_names)
{
    char buf[TERN_NAME_MAX + 1], longns[TERN_NS_NAME_MAX + 2];
    const char *ns, *name;
    size_t ns_len, name_len;
    cr_expect(tern_qname_valid("orders", 6));
    cr_expect(tern_qname_valid("acme%orders", 11));
    cr_expect(!tern_qname_valid("%orders", 7));
    cr_expect(!tern_qname_valid("acme%", 5));
    cr_expect(!tern_qname_valid("a%b%c", 5));
    cr_expect_eq(tern_qname_join(buf, sizeof buf, "acme", "orders"), 11);
    cr_expect_str_eq(buf, "acme%orders");
    tern_qname_split(buf, 11, &ns, &ns_len, &name, &name_len);
    cr_expect_eq(ns_len, 4);
    cr_expect_eq(memcmp(ns, "acme", 4), 0);
    cr_expect_eq(name_len, 6);
    cr_expect_eq(memcmp(name, "orders", 6), 0);
    /* The default namespace stores plain names. */
    cr_expect_eq(tern_qname_join(buf, sizeof buf, "default", "q"), 1);
    cr_expect_str_eq(buf, "q");
    cr_expect_eq(tern_qname_join(buf, sizeof buf, NULL, "q"), 1);
    tern_qname_split(buf, 1, &ns, &ns_len, &name, &name_len);
    cr_expect_eq(ns_len, 0);
    cr_expect_eq(name_len, 1);
    /* Bounds: namespace length and the whole. */
    memset(longns, 'n', sizeof longns - 1);
    longns[sizeof longns - 1] = '\0';
    cr_expect_eq(tern_qname_join(buf, sizeof buf, longns, "q"), TERN_EBADNAME);
    longns[TERN_NS_NAME_MAX] = '\0';
    {
        char q[TERN_NAME_MAX + 1];
        memset(q, 'q', TERN_NAME_MAX);
        q[TERN_NAME_MAX - TERN_NS_NAME_MAX - 1] = '\0';
        cr_expect_eq(tern_qname_join(buf, sizeof buf, longns, q),
                     TERN_NAME_MAX);
        cr_expect(tern_qname_valid(buf, TERN_NAME_MAX));
        q[TERN_NAME_MAX - TERN_NS_NAME_MAX - 1] = 'q';
        q[TERN_NAME_MAX - TERN_NS_NAME_MAX] = '\0';
        cr_expect_eq(tern_qname_join(buf, sizeof buf, longns, q),
                     TERN_EBADNAME);
    }
    cr_expect_eq(tern_qname_join(buf, sizeof buf, "a.b", "x%y"), TERN_EBADNAME);
}

Test(common, xxh3_matches_the_portable_build_at_every_size)
{
    /* Frames, records and entries on disk and on the wire carry XXH3:
     * the dispatched (AVX2/AVX-512) code must give the portable entry
     * point's values, one-shot and incremental, up to 1 MiB. */
    size_t max = (size_t)1 << 20;
    uint8_t *b = malloc(max);
    cr_assert_not_null(b);
    for (size_t i = 0; i < max; i++) {
        b[i] = (uint8_t)(i * 131 + (i >> 9));
    }
    for (size_t n = 0; n <= max; n = n < 300 ? n + 1 : n * 3 + 17) {
        for (uint64_t seed = 0; seed < 3; seed++) {
            uint32_t want = (uint32_t)XXH3_64bits_withSeed(b, n, seed);
            struct tern_checksum3_state st;
            cr_assert_eq(tern_checksum32_xxh3(b, n, seed), want, "%zu", n);
            tern_checksum32_xxh3_begin(&st, seed);
            tern_checksum32_xxh3_update(&st, b, n / 3);
            tern_checksum32_xxh3_update(&st, b + n / 3, n - n / 3);
            cr_assert_eq(tern_checksum32_xxh3_end(&st), want, "%zu", n);
        }
    }
    free(b);
}
