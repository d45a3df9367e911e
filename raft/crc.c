/*
 * The checksum raft_uv puts on every batch it appends, computed by ISA-L.
 * libraft 0.15's byteCrc32 (src/byte.c) is a table CRC-32 (the
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
 * ISA-L's crc32_ieee computes the same polynomial, most significant bit
 * first, with folding over carry-less multiplies (PCLMULQDQ, VPCLMULQDQ
 * with AVX-512), picked at run time for the CPU: 32 GB/s on the hosts we
 * measure against about 2 GB/s for the table (slicing by 8) it replaces.
 * It inverts its init and its result (the gzip convention), so the raw
 * CRC that libraft wants is ~crc32_ieee(~init): checked for every length
 * and offset against libraft's own by tests/unit/raft/test_crc.c.
 */
#include <stddef.h>
#include <stdint.h>

#include <isa-l/crc.h>

#include "repl_int.h"

uint32_t repl__wrap_crc32(const void *buf, size_t size, uint32_t init)
{
    return ~crc32_ieee(~init, buf, size);
}
