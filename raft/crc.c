/*
 * The checksum raft_uv puts on every batch it appends, computed 8 bytes at
 * a time. libraft 0.15's byteCrc32 (src/byte.c) is a table CRC-32 (the
 * 0x04C11DB7 polynomial, most significant bit first, no reflection, the
 * caller's init in, no final xor) that takes one byte per step; raft_uv
 * runs it over every entry it writes to a segment (uv_encoding.c: crc1
 * over the batch header, crc2 over the payloads) and over every batch it
 * loads (uv_segment.c) or snapshot it reads (uv_snapshot.c). Under a
 * pipelined 1 KiB produce it was 15-17% of each node's CPU (bench/
 * cpu_profile.sh; docs/ARCHITECTURE.md, decision log).
 *
 * When libraft's static archive is there, raft/CMakeLists.txt links it
 * with the linker's --wrap=byteCrc32, which sends those calls (references
 * between libraft's own objects) to repl__wrap_crc32 below under its
 * linker name __wrap_byteCrc32; __real_byteCrc32 is libraft's own, which
 * tests/unit/raft/test_crc.c compares it with. The result is bit-identical,
 * so the segment and snapshot formats do not change: a data directory
 * moves freely between builds with and without this.
 *
 * Slicing by 8 (Intel's "slicing-by-8", for a non-reflected CRC): eight
 * tables, table k giving the CRC contribution of a byte followed by k zero
 * bytes; 8 input bytes are folded with 8 independent lookups instead of a
 * chain of 8 dependent ones. The tables (8 KiB) are built once, at the
 * first call, under pthread_once (raft_uv also checksums on its thread
 * pool when it loads a snapshot).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "repl_int.h"

#define CRC__POLY 0x04C11DB7u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i << 24;
        for (int k = 0; k < 8; k++) {
            c = (c & 0x80000000u) ? (c << 1) ^ CRC__POLY : c << 1;
        }
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int k = 1; k < 8; k++) {
            uint32_t c = crc_table[k - 1][i];
            crc_table[k][i] = (c << 8) ^ crc_table[0][c >> 24];
        }
    }
}

static inline uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

uint32_t repl__wrap_crc32(const void *buf, size_t size, uint32_t init)
{
    const uint8_t *p = buf;
    uint32_t crc = init;

    (void)pthread_once(&crc_once, crc_init);
    while (size >= 8) {
        uint32_t a = crc ^ load_be32(p);
        uint32_t b = load_be32(p + 4);
        crc = crc_table[7][a >> 24] ^ crc_table[6][(a >> 16) & 0xff] ^
              crc_table[5][(a >> 8) & 0xff] ^ crc_table[4][a & 0xff] ^
              crc_table[3][b >> 24] ^ crc_table[2][(b >> 16) & 0xff] ^
              crc_table[1][(b >> 8) & 0xff] ^ crc_table[0][b & 0xff];
        p += 8;
        size -= 8;
    }
    while (size-- > 0) {
        crc = (crc << 8) ^ crc_table[0][(crc >> 24) ^ *p++];
    }
    return crc;
}
