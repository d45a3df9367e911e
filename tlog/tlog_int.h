/*
 * tlog/tlog_int.h: what the files of tlog/ share (tests may include it):
 * the loop-thread writer (kaio.c) and the store's inner structures
 * (store.c).
 */
#ifndef TLOG_INT_H
#define TLOG_INT_H

#include <linux/aio_abi.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "tlog.h"

/* ---- kaio.c ----------------------------------------------------------------
 */

#define TLOG__KAIO_DEPTH 64

struct tlog__kaio;

/* One write. The caller owns it (and buf) until cb; cb runs on the loop
 * thread with 0 (all len bytes durable) or a negative errno. */
struct tlog__kreq
{
    uv_work_t work;
    struct tlog__kaio *kaio;
    int fd;
    const void *buf;
    size_t len;
    uint64_t off;
    bool direct; /* fd is O_DIRECT: AIO may take it */
    size_t done; /* bytes already written (a short AIO write) */
    int res;
    void (*cb)(struct tlog__kreq *r, int status);
};

struct tlog__kaio
{
    uv_loop_t *loop;
    aio_context_t ctx; /* 0: the thread pool only */
    int efd;
    uv_poll_t poll;
    bool poll_on;
    bool use_pool; /* AIO refused: the thread pool from now on */
    unsigned in_flight;
    void (*closed_cb)(void *arg);
    void *closed_arg;
};

/* use_aio false: the thread pool only. 0 or a negative errno. */
int tlog__kaio_init(struct tlog__kaio *k, uv_loop_t *loop, bool use_aio);
/* Submit r: 0 (cb will run, never from inside) or a negative errno (cb
 * never runs). */
int tlog__kaio_write(struct tlog__kaio *k, struct tlog__kreq *r);
/* With nothing in flight: release, then cb(arg) (maybe at once). */
void tlog__kaio_close(struct tlog__kaio *k, void (*cb)(void *), void *arg);

#endif
