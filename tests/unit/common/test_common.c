/* Unit tests for common/: error strings, checksums, cursors, write buffers,
 * allocator failure injection. */
#include <errno.h>

#include <criterion/criterion.h>

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
