/*
 * tests/unit/immutable.h: the immutable flag for unit tests that make a
 * file's writes, unlinks and renames fail (EPERM) for real: a segment
 * raft_uv must remove (raft/test_close.c), a segment tlog writes
 * (tlog/test_store.c). Root only, and file systems that have the flag.
 */
#ifndef TERN_TEST_IMMUTABLE_H
#define TERN_TEST_IMMUTABLE_H

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* FS_IMMUTABLE_FL on path on or off (descriptors opened before included).
 * 0 or an errno. */
static inline int test_set_immutable(const char *path, bool on)
{
    int fd = open(path, O_RDONLY);
    int flags = 0, rv = 0;
    if (fd < 0) {
        return errno;
    }
    if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) {
        rv = errno;
    } else {
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        if (ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0) {
            rv = errno;
        }
    }
    (void)close(fd);
    return rv;
}

#endif
