/*
 * Open segments written over, not just allocated. raft_uv 0.15 prepares
 * each open segment (8 MiB) with posix_fallocate (UvOsFallocate, from
 * UvFsAllocateFile on its thread pool) and then appends to it with
 * O_DSYNC writes. On ext4 an fallocated range is "unwritten": the first
 * write to each block converts the extent, a metadata change, so every
 * O_DSYNC append waits for a journal commit, and in data=ordered mode a
 * journal commit first writes out the dirty data of every other file
 * with blocks in the transaction (the commit log, LMDB). Written once
 * with zeros, as PostgreSQL does for its WAL segments (wal_init_zero),
 * the blocks are plain overwrites: an append then syncs its own data
 * only.
 *
 * With libraft's static archive, raft/CMakeLists.txt links with
 * --wrap=UvOsFallocate, which sends UvFsAllocateFile's call to
 * repl__wrap_fallocate below: libraft's own allocation first (so a full
 * disk fails there, as before), then zeros over the range. Errors are
 * returned as UvOsFallocate returns them (-errno), and UvFsAllocateFile
 * then removes the file as it does on a failed allocation. The segment's
 * bytes are those raft_uv expects of a fresh segment (zeros past its
 * end), so the on-disk format is unchanged.
 *
 * Paced. Each chunk of zeros is written back before the next is written
 * (sync_file_range: wait for any writeback of the range, start it, wait
 * for it), and the fdatasync at the end then only flushes. Left to that
 * fdatasync, the 8 MiB reached the device in one burst, and the nodes'
 * O_DSYNC appends queued behind it: pipelined produce p99 19.6 against
 * 16.1 ms paced (medians), 46.0 against 49.6 k msg/s (means), over 7
 * alternated rounds (bench/RESULTS.md). A chunk is 1 MiB: 256 KiB gave a
 * lower p99 but a higher p50 and 64 KiB less throughput. The pacing is
 * best effort: a writeback error is the final fdatasync's to report.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "repl_int.h"

#define PREALLOC__CHUNK (1u << 20) /* bytes per write; a multiple of 4 KiB */

int repl__wrap_fallocate(int fd, off_t offset, off_t len)
{
    void *zeros = NULL;
    off_t at = offset, end = offset + len;
    int rv = repl__real_fallocate(fd, offset, len);
    if (rv != 0 || len <= 0) {
        return rv;
    }
    /* Aligned: the file may already be open with O_DIRECT. */
    if (posix_memalign(&zeros, 4096, PREALLOC__CHUNK) != 0) {
        return -ENOMEM;
    }
    memset(zeros, 0, PREALLOC__CHUNK);
    while (at < end) {
        size_t n = (size_t)(end - at < (off_t)PREALLOC__CHUNK
                                ? end - at
                                : (off_t)PREALLOC__CHUNK);
        ssize_t w = pwrite(fd, zeros, n, at);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            rv = w < 0 ? -errno : -EIO;
            break;
        }
        (void)sync_file_range(fd, at, w,
                              SYNC_FILE_RANGE_WAIT_BEFORE |
                                  SYNC_FILE_RANGE_WRITE |
                                  SYNC_FILE_RANGE_WAIT_AFTER);
        at += w;
    }
    if (rv == 0 && fdatasync(fd) != 0) {
        rv = -errno;
    }
    free(zeros);
    return rv;
}
