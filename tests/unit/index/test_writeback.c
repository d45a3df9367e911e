/* Unit tests of the commit log's writeback (index/log.c, log_writeback):
 * once IDX__LOG_WRITEBACK_BYTES (WB, 256 KiB) have been appended,
 * sync_file_range is asked to start writing them back, without waiting,
 * over ranges inside the file that follow each other, end on a page
 * boundary, and start over in each new segment,
 * whose predecessor gets its tail; after a reopen only new bytes count,
 * and after a truncation the ranges start at the cut. sync_file_range is
 * wrapped for this binary (--wrap, tests/unit/index/CMakeLists.txt): the
 * wrapper records each call, checks it against the file's size, and
 * passes it on. Bytes are appended as bulk writes (idx__log_write_raw,
 * the same append path as records'), or as records where a reopen must
 * keep them. */
#define _FILE_OFFSET_BITS 64
#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_writeback, .init = th_dirs_init, .fini = th_dirs_fini);

#define WB_MAX 256
#define HDR    32 /* segment header (index/log.c) */
#define MIB    (1 << 20)
#define WB     ((off64_t)IDX__LOG_WRITEBACK_BYTES)
static struct
{
    off64_t off[WB_MAX];
    off64_t len[WB_MAX];
    unsigned flags[WB_MAX];
    int fd[WB_MAX];
    unsigned n;
    unsigned outside; /* calls past the file's size or into its header */
} wb;

int __real_sync_file_range(int fd, off64_t off, off64_t len, unsigned flags);
int __wrap_sync_file_range(int fd, off64_t off, off64_t len, unsigned flags);
int __wrap_sync_file_range(int fd, off64_t off, off64_t len, unsigned flags)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || off < HDR || off + len > st.st_size) {
        wb.outside++;
    }
    if (wb.n < WB_MAX) {
        wb.fd[wb.n] = fd;
        wb.off[wb.n] = off;
        wb.len[wb.n] = len;
        wb.flags[wb.n] = flags;
        wb.n++;
    }
    return __real_sync_file_range(fd, off, len, flags);
}

/* Append n bytes in writes of 64 KiB at the log end. */
static void append(struct idx_env *e, size_t n)
{
    static uint8_t buf[64 << 10];
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        cr_assert_eq(idx__log_write_raw(e, idx_log_end(e), buf, k), 0);
        n -= k;
    }
}

/* Every recorded call: write only, inside its file, page-aligned end. */
static void expect_calls_sound(void)
{
    cr_expect_eq(wb.outside, 0, "%u calls outside their file", wb.outside);
    for (unsigned i = 0; i < wb.n; i++) {
        cr_expect_eq(wb.flags[i], SYNC_FILE_RANGE_WRITE, "call %u waits", i);
        cr_expect_geq(wb.len[i], 1, "call %u is empty", i);
    }
}

Test(index_writeback, started_every_chunk_over_following_ranges)
{
    struct idx_env *e = th_open(th_dir_a, 64u << 20);
    memset(&wb, 0, sizeof wb);
    append(e, 3 * WB + WB / 2);
    expect_calls_sound();
    cr_assert_eq(wb.n, 3, "%u calls", wb.n);
    off64_t at = HDR;
    for (unsigned i = 0; i < wb.n; i++) {
        cr_expect_eq(wb.fd[i], wb.fd[0], "one segment");
        cr_expect_eq(wb.off[i], at, "call %u starts where the last ended", i);
        cr_expect_eq((wb.off[i] + wb.len[i]) % 4096, 0,
                     "call %u ends on a page", i);
        cr_expect_geq(wb.len[i], WB - HDR);
        cr_expect_leq(wb.len[i], WB + (64 << 10) + 4096);
        at = wb.off[i] + wb.len[i];
    }
    /* Not the bytes being appended to: the last partial page stays. */
    cr_expect_leq(at, HDR + idx_log_end(e));
    idx_close(e);
}

Test(index_writeback, a_rolled_segment_gets_its_tail)
{
    /* Bulk writes roll at 1.5 MiB exactly: 3 full segments and a fourth
     * that holds less than WB. */
    struct idx_env *e = th_open(th_dir_a, (3u * MIB) / 2);
    memset(&wb, 0, sizeof wb);
    append(e, (9 * MIB) / 2 + WB / 2);
    expect_calls_sound();
    cr_assert_eq(th_count_segments(th_dir_a), 4);
    /* Per segment (fd), in order: ranges that follow each other from the
     * header; the full ones covered to their end. */
    int fds[8];
    off64_t to[8];
    unsigned n_fds = 0;
    for (unsigned i = 0; i < wb.n; i++) {
        if (n_fds == 0 || fds[n_fds - 1] != wb.fd[i]) {
            cr_assert_lt(n_fds, 8);
            fds[n_fds] = wb.fd[i];
            to[n_fds] = HDR;
            n_fds++;
        }
        cr_expect_eq(wb.off[i], to[n_fds - 1], "call %u follows the last", i);
        to[n_fds - 1] = wb.off[i] + wb.len[i];
    }
    /* The fourth holds WB / 2: not yet hinted, and not rolled. */
    cr_assert_eq(n_fds, 3, "%u segments hinted", n_fds);
    for (unsigned k = 0; k < 3; k++) {
        cr_expect_eq(to[k], HDR + (3 * MIB) / 2, "segment %u to its end", k);
    }
    idx_close(e);
}

/* Apply n produces of one 64 KiB message (records of 65,616 bytes). */
static void append_records(struct idx_env *e, uint64_t *index, unsigned n)
{
    static char big[64 << 10];
    for (unsigned i = 0; i < n; i++) {
        struct tern_wbuf w;
        struct idx_result r[1];
        struct idx_msg m = {.data = big, .len = sizeof big};
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 1000);
        idx_cmd_produce(&w, "q", 0, 0, &m, 1);
        cr_assert_eq(th_apply(e, (*index)++, &w, r, 1), 1);
        cr_assert_eq(r[0].status, 0);
        tern_wbuf_free(&w);
    }
}

Test(index_writeback, after_a_reopen_only_new_bytes_count)
{
    uint64_t index = 2;
    struct idx_env *e = th_open(th_dir_a, 64u << 20);
    th_create(e, 1, "q");
    append_records(e, &index, 8);
    idx_close(e);
    e = th_open(th_dir_a, 64u << 20);
    uint64_t at_open = idx_log_end(e);
    cr_assert_gt(at_open, MIB / 2);
    memset(&wb, 0, sizeof wb);
    append_records(e, &index, (unsigned)(WB / 65616)); /* under WB */
    cr_expect_eq(wb.n, 0, "the bytes from before the reopen not hinted");
    append_records(e, &index, 2); /* over WB since the open */
    expect_calls_sound();
    cr_assert_eq(wb.n, 1);
    cr_expect_eq(wb.off[0], (off64_t)(HDR + at_open),
                 "from the log end at the open");
    idx_close(e);
}

Test(index_writeback, after_a_truncation_from_the_cut)
{
    struct idx_env *e = th_open(th_dir_a, 64u << 20);
    memset(&wb, 0, sizeof wb);
    append(e, WB + WB / 2);
    cr_assert_eq(wb.n, 1);
    cr_assert_eq(idx__log_truncate(e, WB / 2), 0);
    append(e, WB + WB / 4);
    expect_calls_sound();
    cr_assert_eq(wb.n, 2);
    cr_expect_eq(wb.off[1], HDR + WB / 2, "from the cut");
    idx_close(e);
}
