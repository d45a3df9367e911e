/*
 * raft_uv's AIO contexts destroyed off the loop thread.
 *
 * raft_uv 0.15 gives every open segment its own kernel AIO context
 * (UvWriterInit: io_setup) and destroys it on the loop thread when the
 * segment is finalized (uvWriterCleanUpAndFireCloseCb: UvOsIoDestroy).
 * io_destroy(2) returns only after the kernel freed the context, which
 * waits out an RCU grace period: 22-34 ms per call under perf trace on the
 * hosts we measure (13 calls in a 3.4 s pipelined run of 1 KiB messages,
 * one per 8 MiB segment), during which the loop serves nothing: no
 * client, no AppendEntries, no ack.
 *
 * With libraft's static archive, raft/CMakeLists.txt links with
 * --wrap=UvOsIoDestroy, which sends raft_uv's calls to repl__wrap_iodestroy
 * below: the context goes to a queue that one detached thread ("tern-aio")
 * empties, destroying one context at a time; the call returns 0 at once.
 * If the thread could not start or REPL__AIO_QUEUE contexts are already
 * waiting, the call destroys inline, as before (the bound on the queue).
 *
 * Why deferring is safe: io_destroy also cancels and waits for I/O still
 * in flight on the context, and that I/O could reference memory its owner
 * frees right after the call. raft_uv never has any then. Its writer of a
 * segment is closed only from uvAliveSegmentFinalize, which raft_uv calls
 * once no write against that segment is in flight (after the write's
 * completion callback, or with nothing pending; on close too: it finalizes
 * the current segment "once idle"). Its other callers destroy a context
 * whose only request already completed (the direct-I/O probe at start,
 * the threadpool write path with more than one event). What deferring
 * changes is only when the kernel frees the context: until the thread
 * gets to it, the context still counts in /proc/sys/fs/aio-nr.
 *
 * repl__aio_drain waits until every queued context is destroyed (tests).
 */
#include <errno.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "repl_int.h"

#define REPL__AIO_QUEUE 64 /* contexts waiting for the thread, at most */

static pthread_once_t aio_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t aio_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t aio_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t aio_idle = PTHREAD_COND_INITIALIZER;
static aio_context_t aio_queue[REPL__AIO_QUEUE];
static unsigned aio_head;  /* oldest queued context */
static unsigned aio_count; /* queued contexts */
static bool aio_busy;      /* the thread is destroying one */
static bool aio_started;   /* the thread runs */

static void *aio_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&aio_mu);
    for (;;) {
        aio_context_t ctx;
        while (aio_count == 0) {
            aio_busy = false;
            pthread_cond_broadcast(&aio_idle);
            pthread_cond_wait(&aio_work, &aio_mu);
        }
        ctx = aio_queue[aio_head];
        aio_head = (aio_head + 1) % REPL__AIO_QUEUE;
        aio_count--;
        aio_busy = true;
        pthread_mutex_unlock(&aio_mu);
        /* Fails only for a context that is not one (EINVAL), which
         * raft_uv never passes; nothing to report it to. */
        (void)syscall(__NR_io_destroy, ctx);
        pthread_mutex_lock(&aio_mu);
    }
    return NULL;
}

/* Start the thread with every signal blocked (signals stay with the loop
 * thread and libuv's handlers). On failure aio_started stays false and
 * every destroy is inline. */
static void aio_start(void)
{
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, old;
    if (pthread_attr_init(&attr) != 0) {
        return;
    }
    (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&t, &attr, aio_thread, NULL) == 0) {
        (void)pthread_setname_np(t, "tern-aio");
        aio_started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

int repl__wrap_iodestroy(aio_context_t ctx)
{
    bool queued = false;
    pthread_once(&aio_once, aio_start);
    pthread_mutex_lock(&aio_mu);
    if (aio_started && aio_count < REPL__AIO_QUEUE) {
        aio_queue[(aio_head + aio_count) % REPL__AIO_QUEUE] = ctx;
        aio_count++;
        aio_busy = true;
        pthread_cond_signal(&aio_work);
        queued = true;
    }
    pthread_mutex_unlock(&aio_mu);
    return queued ? 0 : repl__real_iodestroy(ctx);
}

void repl__aio_drain(void)
{
    pthread_mutex_lock(&aio_mu);
    while (aio_started && aio_busy) {
        pthread_cond_wait(&aio_idle, &aio_mu);
    }
    pthread_mutex_unlock(&aio_mu);
}
