/* raft/aio.c: every AIO context handed to repl__wrap_iodestroy (raft_uv's
 * UvOsIoDestroy under --wrap) is destroyed once repl__aio_drain returns,
 * also when more are handed at once than the thread's queue holds (those
 * are destroyed inline), and a context whose write completed before the
 * hand-over leaves that write's bytes in the file. Built only when
 * libraft is linked statically (TERN_RAFT_FAST_CRC). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "repl_int.h"

#ifdef TERN_RAFT_FAST_CRC

#define N_CTX 100 /* more than aio.c's queue holds */

static int sys_io_setup(unsigned nr, aio_context_t *ctx)
{
    return (int)syscall(__NR_io_setup, nr, ctx);
}

/* -1 with EINVAL once the kernel no longer knows ctx. */
static int sys_io_destroy(aio_context_t ctx)
{
    return (int)syscall(__NR_io_destroy, ctx);
}

Test(aio, handed_contexts_are_destroyed)
{
    aio_context_t ctx[N_CTX];
    memset(ctx, 0, sizeof ctx);
    for (int i = 0; i < N_CTX; i++) {
        cr_assert_eq(sys_io_setup(1, &ctx[i]), 0, "io_setup: %s",
                     strerror(errno));
    }
    for (int i = 0; i < N_CTX; i++) {
        cr_expect_eq(repl__wrap_iodestroy(ctx[i]), 0);
    }
    repl__aio_drain();
    for (int i = 0; i < N_CTX; i++) {
        errno = 0;
        cr_expect_eq(sys_io_destroy(ctx[i]), -1, "context %d still exists", i);
        cr_expect_eq(errno, EINVAL);
    }
}

Test(aio, completed_write_survives_the_hand_over)
{
    char dir[] = "aio-XXXXXX", path[64], back[512];
    static char buf[4096] __attribute__((aligned(4096)));
    aio_context_t ctx = 0;
    struct iocb cb, *cbs[1] = {&cb};
    struct io_event ev;
    int fd;
    cr_assert_not_null(mkdtemp(dir));
    (void)snprintf(path, sizeof path, "%s/open-1", dir);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DSYNC, 0600);
    cr_assert_geq(fd, 0);
    memset(buf, 'x', sizeof buf);
    cr_assert_eq(sys_io_setup(1, &ctx), 0);
    memset(&cb, 0, sizeof cb);
    cb.aio_lio_opcode = IOCB_CMD_PWRITE;
    cb.aio_fildes = (uint32_t)fd;
    cb.aio_buf = (uint64_t)(uintptr_t)buf;
    cb.aio_nbytes = sizeof buf;
    cr_assert_eq(syscall(__NR_io_submit, ctx, 1, cbs), 1);
    cr_assert_eq(syscall(__NR_io_getevents, ctx, 1, 1, &ev, NULL), 1);
    cr_expect_eq(ev.res, (int64_t)sizeof buf);
    cr_expect_eq(repl__wrap_iodestroy(ctx), 0);
    repl__aio_drain();
    cr_expect_eq(sys_io_destroy(ctx), -1);
    cr_assert_eq(pread(fd, back, sizeof back, 1000), (ssize_t)sizeof back);
    for (size_t i = 0; i < sizeof back; i++) {
        cr_assert_eq(back[i], 'x', "byte %zu", 1000 + i);
    }
    close(fd);
    (void)unlink(path);
    (void)rmdir(dir);
}

#endif
