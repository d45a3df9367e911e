/* libFuzzer target: the decoders of index/ that read bytes from disk: the
 * commit-log record decoder (scanning a byte stream record by record, as
 * idx_open's recovery does), the snapshot manifest, and the LMDB value
 * codecs of index/keys.c (queue and ns_usage values round trip). The first
 * input byte picks the decoder. Decoded values are re-encoded where the format
 * has a single encoding and must match the input (checksum fields excepted:
 * fuzz builds define FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION and skip checksum
 * checks). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idx_int.h"

/* libFuzzer's entry point, named by libFuzzer.
 * NOLINTNEXTLINE(readability-identifier-naming) */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void scan_records(const uint8_t *p, size_t n)
{
    uint64_t prev = 0;
    while (n > 0) {
        struct idx__record r;
        size_t used = 0;
        uint8_t hdr[IDX__REC_HDR_SIZE];
        int rc = idx__record_decode(p, n, &r, &used);
        if (rc != 0) {
            if (rc != TERN_EMALFORMED && rc != TERN_ECORRUPT) {
                abort();
            }
            return;
        }
        if (used < IDX__REC_HDR_SIZE || used > n ||
            used != IDX__REC_HDR_SIZE + (size_t)r.payload_len ||
            r.payload != p + IDX__REC_HDR_SIZE) {
            abort();
        }
        idx__record_header_encode(hdr, tern_get_u16(p + 4), r.index, r.payload,
                                  r.payload_len);
        if (memcmp(hdr, p, 20) != 0) { /* [20,24) is the checksum */
            abort();
        }
        if (r.index <= prev) {
            return; /* recovery stops here */
        }
        prev = r.index;
        /* Decoding what the record carries must be safe too. */
        (void)idx_cmd_validate(r.payload, r.payload_len);
        p += used;
        n -= used;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    uint8_t sel = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (sel % 5) {
    case 0:
        scan_records(p, n);
        break;
    case 1: {
        struct idx__manifest m;
        (void)idx__manifest_decode(p, n, &m);
        break;
    }
    case 2: {
        struct idx__state s;
        uint8_t buf[IDX__STATE_SIZE];
        if (idx__state_decode(p, n, &s) == 0) {
            idx__state_encode(buf, &s);
            if (memcmp(buf, p, 44) != 0) {
                abort();
            }
        }
        break;
    }
    case 3: {
        struct idx__producer_val v;
        uint8_t buf[IDX__PRODUCER_VAL_MAX];
        if (idx__producer_val_decode(p, n, &v) == 0) {
            size_t len = idx__producer_val_encode(buf, &v);
            if (len != n || memcmp(buf, p, n) != 0) {
                abort();
            }
        }
        break;
    }
    default: {
        struct idx__queue_val q;
        struct idx__usage_val u;
        struct idx__msg_val m;
        uint8_t buf[IDX__QUEUE_VAL_SIZE];
        if (idx__queue_val_decode(p, n, &q) == 0) {
            idx__queue_val_encode(buf, &q);
            if (n != IDX__QUEUE_VAL_SIZE || memcmp(buf, p, n) != 0) {
                abort();
            }
        }
        if (idx__usage_val_decode(p, n, &u) == 0) {
            idx__usage_val_encode(buf, &u);
            if (n != IDX__USAGE_VAL_SIZE || memcmp(buf, p, n) != 0) {
                abort();
            }
        }
        (void)idx__msg_val_decode(p, n, &m);
        break;
    }
    }
    return 0;
}
