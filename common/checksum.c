/* The checksum of every tern format: XXH32, seed "tern"; and XXH3 for
 * the client protocol's frames of version 2, commit-log records of
 * version 2, command entries that carry the XXH3 flag, and node-to-node
 * frames that say they carry it (tern_checksum32_either). XXH3 goes
 * through libxxhash's run-time dispatch (its AVX2 or AVX-512 code where
 * the CPU has it) when the library has one (TERN_XXH3_DISPATCH,
 * common/CMakeLists.txt): the same hash, 4x faster on large buffers. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#ifdef TERN_XXH3_DISPATCH
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define TERN__XXH3_SEEDED XXH3_64bits_withSeed_dispatch
#define TERN__XXH3_UPDATE XXH3_64bits_update_dispatch
#else
#define TERN__XXH3_SEEDED XXH3_64bits_withSeed
#define TERN__XXH3_UPDATE XXH3_64bits_update
#endif

#include "tern_common.h"

_Static_assert(sizeof(struct tern_checksum_state) >= sizeof(XXH32_state_t),
               "checksum state too small");
_Static_assert(sizeof(struct tern_checksum3_state) >= sizeof(XXH3_state_t) &&
                   _Alignof(struct tern_checksum3_state) >=
                       _Alignof(XXH3_state_t),
               "XXH3 state too small");

uint32_t tern_checksum32(const void *buf, size_t len)
{
    return XXH32(buf, len, TERN_CHECKSUM_SEED);
}

void tern_checksum32_begin(struct tern_checksum_state *st)
{
    XXH32_reset((XXH32_state_t *)(void *)st, TERN_CHECKSUM_SEED);
}

void tern_checksum32_update(struct tern_checksum_state *st,
                            const void *buf,
                            size_t len)
{
    XXH32_update((XXH32_state_t *)(void *)st, buf, len);
}

uint32_t tern_checksum32_end(struct tern_checksum_state *st)
{
    return XXH32_digest((XXH32_state_t *)(void *)st);
}

uint32_t tern_checksum32_xxh3(const void *buf, size_t len, uint64_t seed)
{
    return (uint32_t)TERN__XXH3_SEEDED(buf, len, seed);
}

void tern_checksum32_xxh3_begin(struct tern_checksum3_state *st, uint64_t seed)
{
    XXH3_state_t *x = (XXH3_state_t *)(void *)st;
    XXH3_INITSTATE(x);
    (void)XXH3_64bits_reset_withSeed(x, seed);
}

void tern_checksum32_xxh3_update(struct tern_checksum3_state *st,
                                 const void *buf,
                                 size_t len)
{
    (void)TERN__XXH3_UPDATE((XXH3_state_t *)(void *)st, buf, len);
}

uint32_t tern_checksum32_xxh3_end(struct tern_checksum3_state *st)
{
    return (uint32_t)XXH3_64bits_digest((XXH3_state_t *)(void *)st);
}

void tern_checksum32_either_begin(struct tern_checksum32_either *st,
                                  bool xxh3,
                                  uint64_t xxh3_seed)
{
    st->xxh3 = xxh3;
    if (xxh3) {
        tern_checksum32_xxh3_begin(&st->x3, xxh3_seed);
    } else {
        tern_checksum32_begin(&st->x32);
    }
}

void tern_checksum32_either_update(struct tern_checksum32_either *st,
                                   const void *buf,
                                   size_t len)
{
    if (st->xxh3) {
        tern_checksum32_xxh3_update(&st->x3, buf, len);
    } else {
        tern_checksum32_update(&st->x32, buf, len);
    }
}

uint32_t tern_checksum32_either_end(struct tern_checksum32_either *st)
{
    return st->xxh3 ? tern_checksum32_xxh3_end(&st->x3)
                    : tern_checksum32_end(&st->x32);
}
