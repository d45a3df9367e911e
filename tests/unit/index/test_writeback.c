/* Unit tests of the commit log's writeback (index/log.c, log_writeback):
 * every 1 MiB appended to the active segment, sync_file_range is asked to
 * start writing it back, without waiting, over contiguous ranges that
 * restart in each new segment. sync_file_range is wrapped for this binary
 * (-Wl,--wrap, tests/unit/index/CMakeLists.txt): the wrapper records each
 * call and passes it on. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_writeback, .init = th_dirs_init, .fini = th_dirs_fini);

#define WB_MAX 256
static struct
{
    off_t off[WB_MAX];
    off_t len[WB_MAX];
    unsigned flags[WB_MAX];
    int fd[WB_MAX];
    unsigned n;
} wb;

int __real_sync_file_range(int fd, off_t off, off_t len, unsigned flags);
int __wrap_sync_file_range(int fd, off_t off, off_t len, unsigned flags);
int __wrap_sync_file_range(int fd, off_t off, off_t len, unsigned flags)
{
    if (wb.n < WB_MAX) {
        wb.fd[wb.n] = fd;
        wb.off[wb.n] = off;
        wb.len[wb.n] = len;
        wb.flags[wb.n] = flags;
        wb.n++;
    }
    return __real_sync_file_range(fd, off, len, flags);
}

/* Append n produces of one message of size bytes each. */
static void append(struct idx_env *e, uint64_t *index, unsigned n, size_t size)
{
    static char big[256 << 10];
    memset(big, 'x', sizeof big);
    cr_assert_leq(size, sizeof big);
    for (unsigned i = 0; i < n; i++) {
        struct tern_wbuf w;
        struct idx_result r[1];
        struct idx_msg m = {.data = big, .len = (uint32_t)size};
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 1000);
        idx_cmd_produce(&w, "q", 0, 0, &m, 1);
        cr_assert_eq(th_apply(e, (*index)++, &w, r, 1), 1);
        cr_assert_eq(r[0].status, 0);
        tern_wbuf_free(&w);
    }
}

Test(index_writeback, started_every_mib_over_contiguous_ranges)
{
    struct idx_env *e = th_open(th_dir_a, 64u << 20);
    uint64_t index = 2;
    th_create(e, 1, "q");
    memset(&wb, 0, sizeof wb);
    append(e, &index, 56, 64u << 10); /* 3.5 MiB of payload */
    cr_assert_eq(wb.n, 3, "%u calls", wb.n);
    off_t at = 32; /* the segment header; the queue's record is in it */
    for (unsigned i = 0; i < wb.n; i++) {
        cr_expect_eq(wb.flags[i], SYNC_FILE_RANGE_WRITE,
                     "call %u does not wait", i);
        cr_expect_eq(wb.fd[i], wb.fd[0], "one segment");
        cr_expect_eq(wb.off[i], at, "call %u starts where the last ended", i);
        cr_expect_geq(wb.len[i], 1 << 20);
        cr_expect_lt(wb.len[i], (1 << 20) + (64 << 10) + 64);
        at = wb.off[i] + wb.len[i];
    }
    cr_assert_leq((uint64_t)at - 32, idx_log_end(e));
    idx_close(e);
}

Test(index_writeback, starts_over_in_a_new_segment)
{
    /* Segments roll at 1.5 MiB: each gets one range from its start. */
    struct idx_env *e = th_open(th_dir_a, (3u << 20) / 2);
    uint64_t index = 2;
    th_create(e, 1, "q");
    memset(&wb, 0, sizeof wb);
    append(e, &index, 52, 64u << 10); /* 3.25 MiB: 3 segments */
    cr_assert_geq(th_count_segments(th_dir_a), 3);
    cr_assert_geq(wb.n, 2);
    for (unsigned i = 1; i < wb.n; i++) {
        cr_expect_neq(wb.fd[i], wb.fd[i - 1], "call %u: the next segment", i);
        cr_expect_eq(wb.off[i], 32, "call %u: from the segment's start", i);
    }
    idx_close(e);
}
