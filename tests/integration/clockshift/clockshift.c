/*
 * libtern_clockshift.so: an LD_PRELOAD shim for integration tests that
 * moves one process's wall clock while it runs, so a test can show what
 * tern does after 72 hours, or with one node's clock wrong, without
 * waiting and without touching the machine's clock.
 *
 * It wraps clock_gettime(): CLOCK_REALTIME and CLOCK_REALTIME_COARSE get
 * a signed offset in milliseconds added; every other clock (CLOCK_MONOTONIC
 * for libuv's timers and so raft's elections and heartbeats, the CPU
 * clocks) passes through untouched. time() and gettimeofday() are not
 * wrapped: OpenSSL checks certificate validity with time(), so TLS between
 * nodes keeps using the real date (a test that shifts a node by days still
 * has valid certificates).
 *
 * Offset file: TERN_CLOCKSHIFT_FILE names a file holding one signed
 * decimal integer of milliseconds ("7200000", "-36000000"), optionally
 * followed by white space; at most 63 bytes are read. A missing, unset,
 * empty, too long or garbled file means offset 0. The file is read again
 * at most once every 50 ms of CLOCK_MONOTONIC, by whichever caller first
 * finds the period over, so a test moves a running process's clock by
 * rewriting the file (write a temporary file and rename it over, so a
 * reader never sees half a number).
 *
 * Threads and signals: the state is lock-free atomics (the offset, the
 * monotonic time of the next read, the resolved libc function); a read of
 * the file uses only open(), read() and close(), which are
 * async-signal-safe, and errno is kept. A caller that loses the race to
 * re-read uses the offset as it was. Built without sanitizers, so it can
 * be preloaded into any process; it is never installed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHIFT__PERIOD_NS  (50LL * 1000 * 1000)
#define SHIFT__FILE_MAX   63
#define SHIFT__MAX_DIGITS 15 /* about 31,000 years of milliseconds */
#define SHIFT__NS_PER_SEC 1000000000LL
#define SHIFT__NS_PER_MS  1000000LL
#define SHIFT__MS_PER_SEC 1000LL

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "int atomics must be lock-free");

enum {
    INIT_NONE = 0, /* nobody has looked at the environment yet */
    INIT_BUSY = 1, /* one caller is copying TERN_CLOCKSHIFT_FILE */
    INIT_DONE = 2  /* g_path is set (maybe empty: no file, offset 0) */
};

static atomic_int g_init = INIT_NONE;
static char g_path[PATH_MAX]; /* written once, before g_init = INIT_DONE */
static atomic_llong g_offset_ms = 0;
static atomic_llong g_next_read_ns = 0; /* CLOCK_MONOTONIC ns */
static _Atomic(void *) g_real = NULL;   /* libc's clock_gettime */
static atomic_bool g_real_missing = false;

static int sys_clock_gettime(clockid_t clk, struct timespec *ts)
{
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

/* libc's clock_gettime (the vDSO), or the system call if it cannot be
 * found (never this shim's own function). */
static int real_clock_gettime(clockid_t clk, struct timespec *ts)
{
    int (*fn)(clockid_t, struct timespec *) = NULL;
    void *p = atomic_load_explicit(&g_real, memory_order_acquire);

    if (p == NULL &&
        !atomic_load_explicit(&g_real_missing, memory_order_relaxed)) {
        p = dlsym(RTLD_NEXT, "clock_gettime");
        if (p == NULL || p == (void *)clock_gettime) {
            atomic_store_explicit(&g_real_missing, true, memory_order_relaxed);
            p = NULL;
        } else {
            atomic_store_explicit(&g_real, p, memory_order_release);
        }
    }
    if (p == NULL) {
        return sys_clock_gettime(clk, ts);
    }
    memcpy(&fn, &p, sizeof(fn));
    return fn(clk, ts);
}

/* Copy TERN_CLOCKSHIFT_FILE once. A caller that finds another one copying
 * it answers as if there were no file this time (offset 0 is only ever
 * seen before main, while the constructor runs). */
static bool path_ready(void)
{
    int st = atomic_load_explicit(&g_init, memory_order_acquire);
    int expect = INIT_NONE;

    if (st == INIT_DONE) {
        return true;
    }
    if (st == INIT_BUSY || !atomic_compare_exchange_strong_explicit(
                               &g_init, &expect, INIT_BUSY,
                               memory_order_acq_rel, memory_order_acquire)) {
        return atomic_load_explicit(&g_init, memory_order_acquire) == INIT_DONE;
    }
    {
        const char *env = getenv("TERN_CLOCKSHIFT_FILE");
        size_t len = env != NULL ? strlen(env) : 0;
        if (len >= sizeof(g_path)) {
            len = 0; /* a path that does not fit: no file */
        }
        memcpy(g_path, env != NULL ? env : "", len);
        g_path[len] = '\0';
    }
    atomic_store_explicit(&g_init, INIT_DONE, memory_order_release);
    return true;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parse the file's bytes: [space] [+|-] digits [space]. OUT: *ms. */
static bool parse_offset(const char *s, size_t len, long long *ms)
{
    size_t i = 0, digits = 0;
    long long v = 0;
    bool neg = false;

    while (i < len && is_space(s[i])) {
        i++;
    }
    if (i < len && (s[i] == '-' || s[i] == '+')) {
        neg = s[i] == '-';
        i++;
    }
    while (i < len && s[i] >= '0' && s[i] <= '9') {
        if (++digits > SHIFT__MAX_DIGITS) {
            return false;
        }
        v = v * 10 + (s[i] - '0');
        i++;
    }
    while (i < len && is_space(s[i])) {
        i++;
    }
    if (digits == 0 || i != len) {
        return false;
    }
    *ms = neg ? -v : v;
    return true;
}

/* The offset the file holds now; 0 when it cannot be read or parsed. */
static long long read_offset(void)
{
    char buf[SHIFT__FILE_MAX + 1];
    size_t len = 0;
    long long ms = 0;
    int fd;

    if (g_path[0] == '\0') {
        return 0;
    }
    fd = open(g_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return 0;
    }
    for (int tries = 0; tries < 8 && len < sizeof(buf); tries++) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        len += (size_t)n;
    }
    (void)close(fd);
    if (len > SHIFT__FILE_MAX || !parse_offset(buf, len, &ms)) {
        return 0;
    }
    return ms;
}

/* The current offset, re-reading the file when the period is over. */
static long long current_offset(void)
{
    struct timespec mono;
    long long now, next;

    if (!path_ready() || g_path[0] == '\0') {
        return 0;
    }
    if (real_clock_gettime(CLOCK_MONOTONIC, &mono) != 0) {
        return atomic_load_explicit(&g_offset_ms, memory_order_relaxed);
    }
    now = (long long)mono.tv_sec * SHIFT__NS_PER_SEC + mono.tv_nsec;
    next = atomic_load_explicit(&g_next_read_ns, memory_order_relaxed);
    if (now >= next && atomic_compare_exchange_strong_explicit(
                           &g_next_read_ns, &next, now + SHIFT__PERIOD_NS,
                           memory_order_relaxed, memory_order_relaxed)) {
        atomic_store_explicit(&g_offset_ms, read_offset(),
                              memory_order_relaxed);
    }
    return atomic_load_explicit(&g_offset_ms, memory_order_relaxed);
}

/* Interposes libc's clock_gettime; ts is caller-owned. */
int clock_gettime(clockid_t clk, struct timespec *ts)
{
    int saved = errno;
    long long off, ns;
    int rv = real_clock_gettime(clk, ts);

    if (rv != 0 || (clk != CLOCK_REALTIME && clk != CLOCK_REALTIME_COARSE)) {
        return rv;
    }
    off = current_offset();
    errno = saved;
    if (off == 0) {
        return 0;
    }
    ns = (long long)ts->tv_nsec + (off % SHIFT__MS_PER_SEC) * SHIFT__NS_PER_MS;
    ts->tv_sec += (time_t)(off / SHIFT__MS_PER_SEC);
    if (ns < 0) {
        ns += SHIFT__NS_PER_SEC;
        ts->tv_sec -= 1;
    } else if (ns >= SHIFT__NS_PER_SEC) {
        ns -= SHIFT__NS_PER_SEC;
        ts->tv_sec += 1;
    }
    ts->tv_nsec = (long)ns;
    return 0;
}

/* Read the environment and the file before main, while one thread runs. */
__attribute__((constructor)) static void clockshift_init(void)
{
    (void)current_offset();
}
