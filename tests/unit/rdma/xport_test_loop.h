/* The one-loop test environment of test_shm.c, test_fallback.c and
 * test_poll_stats.c (on top of xport_test_harness.h): one uv loop per
 * test, a wall-clock deadline, a fresh temporary directory for socket
 * files, and run_until polling the loop (bounded by count and deadline;
 * no sleeps). Header-only, included
 * once per test file; the file's TestSuite uses loop_setup/loop_teardown
 * through its own init/fini functions. */
#ifndef TERN_XPORT_TEST_LOOP_H
#define TERN_XPORT_TEST_LOOP_H

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "xport_test_harness.h"

static uv_loop_t loop;
static uint64_t deadline;
static char dir[64]; /* mkdtemp'd; removed by loop_teardown */

/* Per-test setup: SIGPIPE ignored, rand seeded, the loop, a deadline secs
 * from now, dir = /tmp/tern-<tag>-XXXXXX. */
static inline void loop_setup(const char *tag, unsigned secs)
{
    cr_assert(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
    srand((unsigned)(getpid() ^ time(NULL)));
    cr_assert_eq(uv_loop_init(&loop), 0);
    deadline = uv_hrtime() + (uint64_t)secs * 1000 * 1000 * 1000;
    in_send = 0;
    reentrant_cbs = 0;
    (void)snprintf(dir, sizeof dir, "/tmp/tern-%s-XXXXXX", tag);
    cr_assert(mkdtemp(dir) != NULL);
}

/* Per-test teardown: every handle closed, no callback ran inside
 * xport_send, dir removed. */
static inline void loop_teardown(void)
{
    char cmd[128];
    for (int i = 0; i < 1000 && uv_run(&loop, UV_RUN_NOWAIT); i++) {
    }
    cr_expect_eq(uv_loop_close(&loop), 0, "every handle was closed");
    cr_expect_eq(reentrant_cbs, 0, "no callback ran inside xport_send");
    /* Only our own mkdtemp directory. */
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

static void run_until(const int *flag, int want)
{
    for (long i = 0; i < 50000000 && *flag < want && uv_hrtime() < deadline;
         i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    cr_assert_geq(*flag, want, "timed out waiting for %d (now %d)", want,
                  *flag);
}

#endif /* TERN_XPORT_TEST_LOOP_H */
