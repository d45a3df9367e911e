/* libFuzzer target: the decoders of tlog/format.c that read a segment from
 * disk. The first input byte picks: the segment header decoder, the
 * record decoder, or the scan over a segment image whose header is made
 * from the next 9 input bytes (seq, block size, writes in flight, version,
 * where the previous segment ended) and whose records are the rest of the
 * input. The scan's result must be consistent (its end, counts and offsets
 * inside the image, a corrupt verdict backed by a record of a later
 * write, a link only in version 2, older bytes only at a clean end), and
 * each
 * record it hands out must re-encode to the bytes it came from (checksum
 * excepted: fuzz builds define FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION and
 * skip checksum checks). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tlog.h"

/* libFuzzer's entry point, named by libFuzzer.
 * NOLINTNEXTLINE(readability-identifier-naming) */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct check
{
    const uint8_t *img;
    size_t len;
    uint64_t last_index;
    size_t last_off;
    uint64_t n;
};

static int check_cb(void *arg, const struct tlog_rec *r, size_t off)
{
    struct check *c = arg;
    size_t size = tlog_rec_size(r->len);
    uint8_t *re;
    if (off < TLOG_SEG_HEADER_SIZE || off + size > c->len ||
        (c->n > 0 && (r->index != c->last_index + 1 || off <= c->last_off)) ||
        r->type == TLOG_REC_PAD ||
        r->payload != c->img + off + TLOG_REC_HEADER_SIZE) {
        abort();
    }
    re = malloc(size);
    if (re == NULL) {
        return 0;
    }
    tlog_rec_encode(re, r);
    if (memcmp(re, c->img + off, 44) != 0 ||
        memcmp(re + TLOG_REC_HEADER_SIZE, r->payload, r->len) != 0) {
        abort();
    }
    free(re);
    c->last_index = r->index;
    c->last_off = off;
    c->n++;
    return 0;
}

static void scan(const uint8_t *p, size_t n)
{
    static const uint32_t blocks[] = {512, 1024, 2048, 4096};
    struct tlog_seg_header h = {0};
    struct tlog_scan s;
    struct check c = {0};
    uint8_t *img;
    size_t len;
    int rv;
    if (n < 9) {
        return;
    }
    uint64_t index = p[1] % 2 == 0 ? 0 : 1 + p[2];
    uint64_t pos = index == 0 ? 0 : p[5];
    h.seq = 1 + p[0] % 4;
    h.block_size = blocks[p[3] % 4];
    h.in_flight = 1 + p[4] % 4;
    h.version =
        p[6] % 2 == 0 ? TLOG_SEG_VERSION_ZEROED : TLOG_SEG_VERSION_LINKED;
    p += 9;
    n -= 9;
    len = TLOG_SEG_HEADER_SIZE + n;
    img = malloc(len);
    if (img == NULL) {
        return;
    }
    tlog_seg_header_encode(img, &h);
    memcpy(img + TLOG_SEG_HEADER_SIZE, p, n);
    c.img = img;
    c.len = len;
    rv = tlog_seg_scan(img, len, h.seq, index, pos, check_cb, &c, &s, NULL);
    if (rv != 0 || s.n_records != c.n ||
        (s.n_records > 0 && (s.next_index != s.first_index + s.n_records ||
                             (index != 0 && s.first_index != index))) ||
        (s.n_records == 0 && s.next_index != index) ||
        s.end < TLOG_SEG_HEADER_SIZE || s.end > len ||
        (s.n_records > 0 && c.last_off >= s.end) ||
        (s.how == TLOG_SCAN_CORRUPT &&
         (s.later_record <= s.end || s.later_record >= len)) ||
        (s.how != TLOG_SCAN_CORRUPT && s.later_record != 0) ||
        (s.how == TLOG_SCAN_CLEAN && s.why[0] != '\0') ||
        (s.linked && h.version != TLOG_SEG_VERSION_LINKED) ||
        (s.n_records > 0 && h.version == TLOG_SEG_VERSION_LINKED &&
         !s.linked) ||
        (s.stale &&
         (s.how != TLOG_SCAN_CLEAN || h.version != TLOG_SEG_VERSION_LINKED))) {
        abort();
    }
    free(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    switch (data[0] % 3) {
    case 0: {
        struct tlog_seg_header h;
        uint8_t re[TLOG_SEG_HEADER_SIZE];
        if (tlog_seg_header_decode(data + 1, size - 1, &h, NULL) == 0) {
            tlog_seg_header_encode(re, &h);
            if (memcmp(re, data + 1, 32) != 0) {
                abort();
            }
        }
        break;
    }
    case 1: {
        struct tlog_rec r;
        size_t used;
        if (tlog_rec_decode(data + 1, size - 1, &r, &used) == 0 &&
            (used > size - 1 || used != tlog_rec_size(r.len))) {
            abort();
        }
        break;
    }
    default:
        scan(data + 1, size - 1);
        break;
    }
    return 0;
}
