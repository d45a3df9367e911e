/*
 * tlog/kaio.c: durable writes submitted from the loop thread. Linux AIO
 * (io_setup, io_submit with an eventfd, as raft_uv's writer) on an
 * O_DIRECT | O_DSYNC descriptor: a write is durable when it completes,
 * and the loop pays no thread hand-off (bench/RESULTS.md: a store written
 * through the thread pool lost 40-90 us of sequential produce). Where the
 * file cannot take O_DIRECT (tmpfs) or the kernel refuses AIO, the writes
 * go to libuv's thread pool as pwrite on an O_DSYNC descriptor.
 *
 * Completions come back on the loop thread, each once, in any order
 * (the store orders them).
 */
#include <errno.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tlog_int.h"

static int sys_io_setup(unsigned nr, aio_context_t *ctx)
{
    return (int)syscall(SYS_io_setup, nr, ctx);
}

static int sys_io_destroy(aio_context_t ctx)
{
    return (int)syscall(SYS_io_destroy, ctx);
}

static int sys_io_submit(aio_context_t ctx, long n, struct iocb **iocbs)
{
    return (int)syscall(SYS_io_submit, ctx, n, iocbs);
}

static int sys_io_getevents(aio_context_t ctx,
                            long min,
                            long max,
                            struct io_event *ev,
                            struct timespec *t)
{
    return (int)syscall(SYS_io_getevents, ctx, min, max, ev, t);
}

static int pool_submit(struct tlog__kaio *k, struct tlog__kreq *r);

static void reap(struct tlog__kaio *k)
{
    struct io_event ev[TLOG__KAIO_DEPTH];
    uint64_t n;
    int got;
    (void)!read(k->efd, &n, sizeof n); /* EAGAIN: nothing counted */
    do {
        got = sys_io_getevents(k->ctx, 0, TLOG__KAIO_DEPTH, ev, NULL);
        if (got < 0 && errno == EINTR) {
            got = TLOG__KAIO_DEPTH; /* again */
            continue;
        }
        for (int i = 0; i < got; i++) {
            struct tlog__kreq *r = (struct tlog__kreq *)(uintptr_t)ev[i].data;
            k->in_flight--;
            if (ev[i].res >= 0 && (size_t)ev[i].res < r->len) {
                /* Short: the rest by pwrite, which says why (ENOSPC). */
                r->done = (size_t)ev[i].res;
                if (pool_submit(k, r) != 0) {
                    r->cb(r, -EIO);
                }
                continue;
            }
            r->cb(r, ev[i].res < 0 ? (int)ev[i].res : 0);
        }
    } while (got == TLOG__KAIO_DEPTH);
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    struct tlog__kaio *k = h->data;
    (void)status;
    (void)events;
    reap(k);
}

int tlog__kaio_init(struct tlog__kaio *k, uv_loop_t *loop, bool use_aio)
{
    memset(k, 0, sizeof *k);
    k->loop = loop;
    k->efd = -1;
    if (!use_aio || sys_io_setup(TLOG__KAIO_DEPTH, &k->ctx) != 0) {
        k->ctx = 0;
        return 0; /* the thread pool */
    }
    k->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (k->efd < 0) {
        int rv = -errno;
        (void)sys_io_destroy(k->ctx);
        k->ctx = 0;
        return rv;
    }
    if (uv_poll_init(loop, &k->poll, k->efd) != 0) {
        (void)close(k->efd);
        (void)sys_io_destroy(k->ctx);
        k->ctx = 0;
        k->efd = -1;
        return -EIO;
    }
    k->poll.data = k;
    k->poll_on = true;
    if (uv_poll_start(&k->poll, UV_READABLE, poll_cb) != 0) {
        k->use_pool = true; /* closed with the rest at tlog__kaio_close */
    }
    return 0;
}

static void pool_work(uv_work_t *w)
{
    struct tlog__kreq *r = w->data;
    size_t done = r->done;
    r->res = 0;
    while (done < r->len) {
        ssize_t n = pwrite(r->fd, (const char *)r->buf + done, r->len - done,
                           (off_t)(r->off + done));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            r->res = -errno;
            return;
        }
        if (n == 0) {
            r->res = -EIO;
            return;
        }
        done += (size_t)n;
    }
}

static void pool_after(uv_work_t *w, int status)
{
    struct tlog__kreq *r = w->data;
    struct tlog__kaio *k = r->kaio;
    k->in_flight--;
    r->cb(r, status != 0 ? -ECANCELED : r->res);
}

static int pool_submit(struct tlog__kaio *k, struct tlog__kreq *r)
{
    r->work.data = r;
    if (uv_queue_work(k->loop, &r->work, pool_work, pool_after) != 0) {
        return -EIO;
    }
    k->in_flight++;
    return 0;
}

int tlog__kaio_write(struct tlog__kaio *k, struct tlog__kreq *r)
{
    r->kaio = k;
    r->done = 0;
    if (k->ctx != 0 && !k->use_pool && r->direct) {
        struct iocb cb;
        struct iocb *list[1] = {&cb};
        int rv;
        memset(&cb, 0, sizeof cb);
        cb.aio_data = (uint64_t)(uintptr_t)r;
        cb.aio_lio_opcode = IOCB_CMD_PWRITE;
        cb.aio_fildes = (uint32_t)r->fd;
        cb.aio_buf = (uint64_t)(uintptr_t)r->buf;
        cb.aio_nbytes = r->len;
        cb.aio_offset = (int64_t)r->off;
        cb.aio_flags = IOCB_FLAG_RESFD;
        cb.aio_resfd = (uint32_t)k->efd;
        rv = sys_io_submit(k->ctx, 1, list);
        if (rv == 1) {
            k->in_flight++;
            return 0;
        }
        if (rv < 0 && (errno == EINVAL || errno == EOPNOTSUPP)) {
            k->use_pool = true; /* no AIO on this file: the pool from now */
        }
        /* Otherwise (EAGAIN and the like) this write goes by the pool. */
    }
    return pool_submit(k, r);
}

static void poll_closed(uv_handle_t *h)
{
    struct tlog__kaio *k = h->data;
    k->poll_on = false;
    (void)close(k->efd);
    k->efd = -1;
    if (k->closed_cb != NULL) {
        void (*cb)(void *) = k->closed_cb;
        k->closed_cb = NULL;
        cb(k->closed_arg);
    }
}

void tlog__kaio_close(struct tlog__kaio *k, void (*cb)(void *), void *arg)
{
    /* Writes in flight: the caller waited for them. */
    if (k->ctx != 0) {
        (void)sys_io_destroy(k->ctx);
        k->ctx = 0;
    }
    if (k->poll_on) {
        k->closed_cb = cb;
        k->closed_arg = arg;
        uv_close((uv_handle_t *)&k->poll, poll_closed);
        return;
    }
    if (k->efd >= 0) {
        (void)close(k->efd);
        k->efd = -1;
    }
    cb(arg);
}
