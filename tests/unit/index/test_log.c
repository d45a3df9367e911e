/* Unit tests of the commit-log record codec (index/log.c): encoding a
 * header, decoding a whole record, and rejecting short, damaged and
 * malformed records. Recovery from damaged logs on disk is in
 * test_recovery.c. */
#include <criterion/criterion.h>

#include <idx.h>

#include "idx_int.h"

Test(index_log, record_decode)
{
    uint8_t buf[128];
    struct idx__record r;
    size_t size = 0;
    idx__record_header_encode(buf, 77, "payload!", 8);
    memcpy(buf + 24, "payload!", 8);
    cr_assert_eq(idx__record_decode(buf, 32, &r, &size), 0);
    cr_expect_eq(size, 32);
    cr_expect_eq(r.index, 77);
    cr_expect_eq(r.payload_len, 8);
    cr_expect_eq(memcmp(r.payload, "payload!", 8), 0);
    cr_expect_eq(idx__record_decode(buf, 31, &r, &size), TERN_EMALFORMED);
    cr_expect_eq(idx__record_decode(buf, 23, &r, &size), TERN_EMALFORMED);
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
