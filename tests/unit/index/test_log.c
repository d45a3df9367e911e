/* Unit tests of the commit-log record codec (index/log.c): encoding a
 * header of either version, decoding a whole record, and rejecting short,
 * damaged and malformed records; the version an entry's record gets. Recovery
 * from damaged logs on disk is in test_recovery.c. */
#include <criterion/criterion.h>

#include <idx.h>

#include "idx_int.h"

/* Both record versions (IDX__REC_VERSION_XXH32, _XXH3) decode, and any
 * damage is found in either. */
Test(index_log, record_decode)
{
    for (uint16_t v = 1; v <= 2; v++) {
        uint8_t buf[128];
        struct idx__record r;
        size_t size = 0;
        idx__record_header_encode(buf, v, 77, "payload!", 8);
        memcpy(buf + 24, "payload!", 8);
        cr_assert_eq(idx__record_decode(buf, 32, &r, &size), 0, "v%u", v);
        cr_expect_eq(tern_get_u16(buf + 4), v);
        cr_expect_eq(size, 32);
        cr_expect_eq(r.index, 77);
        cr_expect_eq(r.payload_len, 8);
        cr_expect_eq(memcmp(r.payload, "payload!", 8), 0);
        cr_expect_eq(idx__record_decode(buf, 31, &r, &size), TERN_EMALFORMED);
        cr_expect_eq(idx__record_decode(buf, 23, &r, &size), TERN_EMALFORMED);
        for (size_t i = 0; i < 32; i++) {
            buf[i] ^= 0x10;
            cr_expect_neq(idx__record_decode(buf, 32, &r, &size), 0,
                          "v%u: flip at %zu", v, i);
            buf[i] ^= 0x10;
        }
        buf[30] ^= 1;
        cr_expect_eq(idx__record_decode(buf, 32, &r, &size), TERN_ECORRUPT);
        buf[30] ^= 1;
        buf[0] ^= 1;
        cr_expect_eq(idx__record_decode(buf, 32, &r, &size), TERN_EMALFORMED);
        buf[0] ^= 1;
        tern_put_u64(buf + 8, 0);
        cr_expect_eq(idx__record_decode(buf, 32, &r, &size), TERN_EMALFORMED,
                     "raft index 0");
    }
}

/* The checksum of each version, computed here from the format at the top
 * of index/log.c; version 3 is malformed. */
Test(index_log, record_checksums_follow_the_format)
{
    uint8_t buf[24 + 300];
    struct idx__record r;
    size_t size = 0;
    for (size_t i = 0; i < 300; i++) {
        buf[24 + i] = (uint8_t)(i * 7);
    }
    idx__record_header_encode(buf, 1, 9, buf + 24, 300);
    struct tern_checksum_state st;
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, buf, 20);
    tern_checksum32_update(&st, buf + 24, 300);
    cr_expect_eq(tern_get_u32(buf + 20), tern_checksum32_end(&st), "v1");
    idx__record_header_encode(buf, 2, 9, buf + 24, 300);
    cr_expect_eq(tern_get_u32(buf + 20),
                 tern_checksum32_xxh3(buf + 24, 300, tern_checksum32(buf, 20)),
                 "v2");
    /* The pieces form (backups stream a record) gives the same. */
    for (uint16_t v = 1; v <= 2; v++) {
        struct idx__record_sum rs;
        idx__record_header_encode(buf, v, 9, buf + 24, 300);
        idx__record_sum_begin(&rs, buf);
        idx__record_sum_update(&rs, buf + 24, 100);
        idx__record_sum_update(&rs, buf + 124, 200);
        cr_expect_eq(idx__record_sum_end(&rs), tern_get_u32(buf + 20),
                     "v%u in pieces", v);
    }
    tern_put_u16(buf + 4, 3);
    cr_expect_eq(idx__record_decode(buf, sizeof buf, &r, &size),
                 TERN_EMALFORMED, "version 3");
}

/* An entry's record version: 2 with the XXH3 flag (idx_cmd_flag_xxh3); 1
 * for anything else (unflagged entries, malformed bytes). */
Test(index_log, record_version_follows_the_entry)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_queue_create(&w, "q");
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_expect_eq(idx__entry_record_version(w.base, w.len), 1);
    idx_cmd_flag_xxh3(&w);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_expect_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_expect_eq(idx__entry_record_version(w.base, w.len), 2);
    tern_put_u16(w.base + 2, 0);
    cr_expect_eq(idx__entry_record_version(w.base, w.len), 1);
    tern_put_u16(w.base + 2, 1);
    tern_put_u16(w.base, 2); /* an entry version this build does not know */
    cr_expect_eq(idx__entry_record_version(w.base, w.len), 1);
    cr_expect_eq(idx__entry_record_version(w.base, 23), 1, "short");
    cr_expect_eq(idx__entry_record_version("x", 1), 1, "garbage");
    tern_wbuf_free(&w);
}
