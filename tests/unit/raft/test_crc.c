/* raft/crc.c against libraft's own byteCrc32: same value for every length
 * (0..4096, so every tail and alignment), for chained calls and for any
 * init, so segments written by either load in the other. Built only when
 * libraft is linked statically with the wrap (TERN_RAFT_FAST_CRC). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "repl_int.h"

#ifdef TERN_RAFT_FAST_CRC

static uint8_t buf[4096 + 16];

static void fill(unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < sizeof buf; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (uint8_t)x;
    }
}

Test(crc, same_as_libraft_every_length_and_offset)
{
    fill(1);
    for (size_t off = 0; off < 8; off++) {
        for (size_t len = 0; len <= 4096; len++) {
            uint32_t want = repl__real_crc32(buf + off, len, 0);
            uint32_t got = repl__wrap_crc32(buf + off, len, 0);
            if (want != got) {
                cr_assert_eq(got, want, "off %zu len %zu", off, len);
            }
        }
    }
}

Test(crc, same_as_libraft_chained_and_any_init)
{
    fill(7);
    uint32_t inits[] = {0, 1, 0xffffffffu, 0x80000000u, 0xdeadbeefu};
    for (size_t i = 0; i < sizeof inits / sizeof inits[0]; i++) {
        /* raft_uv chains crc2 over every entry of a batch. */
        uint32_t want = inits[i], got = inits[i];
        size_t at = 0, step = 1;
        while (at < 4096) {
            size_t n = step < 4096 - at ? step : 4096 - at;
            want = repl__real_crc32(buf + at, n, want);
            got = repl__wrap_crc32(buf + at, n, got);
            at += n;
            step = step * 3 + 1;
        }
        cr_expect_eq(got, want, "init %#x", inits[i]);
    }
}

Test(crc, known_value)
{
    /* CRC-32 with polynomial 0x04C11DB7, MSB first, init 0, no final xor
     * ("CRC-32/MPEG-2" without its init and xorout) of "123456789". */
    cr_expect_eq(repl__wrap_crc32("123456789", 9, 0), 0x89a1897fu);
    cr_expect_eq(repl__real_crc32("123456789", 9, 0), 0x89a1897fu);
}

#else

Test(crc, skipped_without_static_libraft)
{
    cr_skip_test("libraft is linked as a shared library: its own checksum");
}

#endif
