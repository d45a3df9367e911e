/* raft/prealloc.c: an open segment prepared by raft_uv's allocation
 * (--wrap=UvOsFallocate) is written over with zeros, so its blocks are no
 * longer "unwritten" extents (FIEMAP), while libraft's own allocation
 * leaves them so on a filesystem with unwritten extents (ext4, xfs). Also:
 * the bytes read back are zeros, and a failure is returned as -errno.
 * Built only when libraft is linked statically (TERN_RAFT_FAST_CRC). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "repl_int.h"

#ifdef TERN_RAFT_FAST_CRC

#define SEG_BYTES (8 << 20)

/* A fresh file in a temp dir under the build tree's working directory
 * (not /tmp, which may be a tmpfs). *path gets its name. */
static int fresh_file(char *path, size_t cap)
{
    char dir[] = "prealloc-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    (void)snprintf(path, cap, "%s/open-1", dir);
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_DSYNC, 0600);
}

static void remove_file(const char *path)
{
    char dir[256];
    const char *slash = strrchr(path, '/');
    (void)unlink(path);
    (void)snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    (void)rmdir(dir);
}

/* 1: some extent is unwritten, 0: none, -1: FIEMAP not supported. */
static int has_unwritten(int fd)
{
    union
    {
        struct fiemap f;
        char b[sizeof(struct fiemap) + 64 * sizeof(struct fiemap_extent)];
    } u;
    memset(&u, 0, sizeof u);
    u.f.fm_start = 0;
    u.f.fm_length = ~0ULL;
    u.f.fm_flags = FIEMAP_FLAG_SYNC;
    u.f.fm_extent_count = 64;
    if (ioctl(fd, FS_IOC_FIEMAP, &u.f) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < u.f.fm_mapped_extents; i++) {
        if (u.f.fm_extents[i].fe_flags & FIEMAP_EXTENT_UNWRITTEN) {
            return 1;
        }
    }
    return 0;
}

Test(prealloc, segment_is_written_with_zeros)
{
    char path[256], *back;
    struct stat st;
    int fd = fresh_file(path, sizeof path), rd, unwritten;
    cr_assert_geq(fd, 0);
    cr_assert_eq(repl__wrap_fallocate(fd, 0, SEG_BYTES), 0);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_expect_eq(st.st_size, SEG_BYTES);
    unwritten = has_unwritten(fd);
    cr_expect_neq(unwritten, 1, "no unwritten extent is left");
    rd = open(path, O_RDONLY);
    cr_assert_geq(rd, 0);
    back = malloc(SEG_BYTES);
    cr_assert_not_null(back);
    cr_assert_eq(pread(rd, back, SEG_BYTES, 0), SEG_BYTES);
    for (size_t i = 0; i < SEG_BYTES; i++) {
        if (back[i] != 0) {
            cr_assert_fail("byte %zu is %d", i, back[i]);
        }
    }
    free(back);
    close(rd);
    close(fd);
    remove_file(path);

    /* The control: libraft's allocation alone leaves unwritten extents
     * where the filesystem has them (what the wrap is there to change). */
    fd = fresh_file(path, sizeof path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(repl__real_fallocate(fd, 0, SEG_BYTES), 0);
    unwritten = has_unwritten(fd);
    if (unwritten < 0) {
        cr_log_warn("FIEMAP not supported here: the control is skipped");
    } else {
        cr_log_info("libraft's allocation: %s unwritten extents",
                    unwritten ? "with" : "without");
    }
    close(fd);
    remove_file(path);
}

Test(prealloc, failure_is_a_negative_errno)
{
    char path[256];
    int fd = fresh_file(path, sizeof path), ro;
    cr_assert_geq(fd, 0);
    close(fd);
    ro = open(path, O_RDONLY);
    cr_assert_geq(ro, 0);
    cr_expect_eq(repl__wrap_fallocate(ro, 0, 1 << 20), -EBADF);
    close(ro);
    remove_file(path);
}

#endif /* TERN_RAFT_FAST_CRC */
