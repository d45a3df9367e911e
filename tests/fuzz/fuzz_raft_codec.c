/*
 * tests/fuzz/fuzz_raft_codec.c: raft/codec.c's decoder on arbitrary bytes.
 * Every successful decode is re-encoded and decoded again (round trip must
 * hold), then everything is freed: LeakSanitizer catches a decoder that
 * leaks on any path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "repl_codec.h"

static void reencode(const struct repl_wire *w)
{
    struct repl_frame f;
    unsigned n_sent;
    uint8_t *flat;
    size_t off = 0;
    struct repl_wire w2;
    int rv;

    if (w->type == REPL_WIRE_BULK_REQ || w->type == REPL_WIRE_BULK_DATA) {
        rv = repl_codec_encode_bulk(w->sender_id, w->sender_addr, w->flags,
                                    w->type, &w->bulk, &f);
    } else {
        rv = repl_codec_encode(w->sender_id, w->sender_addr, w->flags, &w->msg,
                               SIZE_MAX, &f, &n_sent);
    }
    if (rv != 0) {
        abort(); /* whatever decodes must re-encode */
    }
    flat = malloc(f.len > 0 ? f.len : 1);
    for (unsigned i = 0; i < f.n_iov; i++) {
        if (f.iov[i].len > 0) {
            memcpy(flat + off, f.iov[i].base, f.iov[i].len);
        }
        off += f.iov[i].len;
    }
    repl_frame_release(&f);
    if (repl_codec_decode(flat, off, &w2) != 0 || w2.type != w->type) {
        abort();
    }
    repl_wire_release(&w2);
    free(flat);
}

static void one(const uint8_t *data, size_t size)
{
    struct repl_wire w;
    if (repl_codec_decode(data, size, &w) != 0) {
        return;
    }
    reencode(&w);
    repl_wire_release(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *fixed;
    one(data, size);
    /* Most inputs die at the checksum: also try the input with a correct
     * checksum (over the frame with bytes 8..11 zeroed) and length. */
    if (size < 24) {
        return 0;
    }
    fixed = malloc(size);
    memcpy(fixed, data, size);
    tern_put_u64(fixed + 16, size);
    tern_put_u32(fixed + 8, 0);
    tern_put_u32(fixed + 8, tern_checksum32(fixed, size));
    one(fixed, size);
    free(fixed);
    return 0;
}
