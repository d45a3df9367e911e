/*
 * tests/unit/raft/test_uv.c: the production path. Three replicas in one
 * process on one libuv loop, each with the real raft_uv disk layer in a
 * temporary directory and the TCP xport on 127.0.0.1: elect, propose 100
 * entries, all applied on all nodes; then close everything cleanly.
 * Also: the files of a data directory are private (0600, directories
 * 0700), and a term changed in raft_uv's metadata files of a stopped node
 * is refused at load (tern's term record, raft/meta.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../rm_tree.h"
#include "repl.h"
#include "repl_int.h"
#include "tlog.h"

#define UV_N 3

struct unode
{
    uint64_t id;
    char addr[32];
    char dir[256];
    struct xport *x;
    struct repl *r;
    enum repl_role role;
    bool writable;
    uint64_t applied;
    uint64_t last_index;
};

static struct unode nodes[UV_N];
static int acked;
static enum repl_durability uv_durability; /* for start_repls */
static enum repl_log_store uv_store;       /* for start_repls, start_snode */
static char tmp_base[64]; /* removed by the suite's fini, even on failure */

static int u_apply(void *arg, uint64_t index, const void *buf, size_t len)
{
    struct unode *n = arg;
    (void)buf;
    (void)len;
    if (index > n->last_index) {
        n->applied++;
        n->last_index = index;
    }
    return 0;
}

static int u_snapshot(void *arg, uint64_t last_applied, void **m, size_t *len)
{
    (void)arg;
    *m = tern_malloc(8);
    tern_put_u64(*m, last_applied);
    *len = 8;
    return 0;
}

static int u_restore(void *arg, const void *m, size_t len)
{
    struct unode *n = arg;
    (void)len;
    n->last_index = tern_get_u64(m);
    return 0;
}

static void u_state(void *arg,
                    enum repl_role role,
                    uint64_t leader,
                    uint64_t term,
                    bool writable)
{
    struct unode *n = arg;
    (void)leader;
    (void)term;
    n->role = role;
    n->writable = writable;
}

static void u_prop_cb(void *data, int status, uint64_t index)
{
    (void)data;
    (void)index;
    if (status == 0) {
        acked++;
    }
}

static int writable_leader(void)
{
    for (int i = 0; i < UV_N; i++) {
        if (nodes[i].role == REPL_LEADER && nodes[i].writable) {
            return i;
        }
    }
    return -1;
}

static bool all_applied(uint64_t n)
{
    for (int i = 0; i < UV_N; i++) {
        if (nodes[i].applied < n) {
            return false;
        }
    }
    return true;
}

static void count_closed(void *arg)
{
    (*(int *)arg)++;
}

static void timer_noop(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until cond() or ms of loop time pass. */
static bool run_until(uv_loop_t *loop,
                      bool (*cond)(void *),
                      void *arg,
                      uint64_t ms)
{
    uint64_t end;
    uv_timer_t t;
    bool ok;
    uv_update_time(loop);
    end = uv_now(loop) + ms;
    uv_timer_init(loop, &t);
    /* Wake the loop regularly (a NULL callback would make uv_timer_start
     * fail with UV_EINVAL and leave the timer stopped). */
    uv_timer_start(&t, timer_noop, 5, 5);
    while (!(ok = cond(arg)) && uv_now(loop) < end) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return ok;
}

static bool cond_leader(void *arg)
{
    (void)arg;
    return writable_leader() >= 0;
}

static bool cond_applied(void *arg)
{
    return all_applied(*(uint64_t *)arg) && acked >= (int)*(uint64_t *)arg;
}

/* Run the loop until *count reaches want (at most 2000 turns; a 5 ms
 * ticker keeps UV_RUN_ONCE from blocking), then close the ticker. */
static void spin_until(uv_loop_t *loop, const int *count, int want)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, timer_noop, 5, 5);
    for (int k = 0; k < 2000 && *count < want; k++) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT); /* t's close cb before it goes */
}

static void remove_tmp(void)
{
    if (tmp_base[0] != '\0') {
        test_rm_tree(tmp_base);
        tmp_base[0] = '\0';
    }
}

TestSuite(uv, .fini = remove_tmp);

static void start_repls(uv_loop_t *loop,
                        const char *base,
                        const struct repl_peer *peers)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    for (int i = 0; i < UV_N; i++) {
        struct repl_config cfg = {0};
        struct repl_fsm fsm = {0};
        cr_assert_lt((size_t)snprintf(nodes[i].dir, sizeof nodes[i].dir,
                                      "%s/n%d", base, i + 1),
                     sizeof nodes[i].dir);
        cfg.id = nodes[i].id;
        cfg.address = nodes[i].addr;
        cfg.data_dir = nodes[i].dir;
        cfg.peers = peers;
        cfg.n_peers = UV_N;
        cfg.durability = uv_durability;
        cfg.log_store = uv_store;
        fsm.arg = &nodes[i];
        fsm.apply = u_apply;
        fsm.snapshot = u_snapshot;
        fsm.restore = u_restore;
        cr_assert_eq(repl_new(loop, nodes[i].x, &cfg, &fsm, u_state, &nodes[i],
                              &nodes[i].r, errmsg),
                     0, "repl_new: %s", errmsg);
        cr_assert_eq(repl_start(nodes[i].r, errmsg), 0, "repl_start: %s",
                     errmsg);
    }
}

static void close_repls(uv_loop_t *loop, int *closed)
{
    for (int i = 0; i < UV_N; i++) {
        repl_close(nodes[i].r, count_closed, closed);
        nodes[i].r = NULL;
    }
    spin_until(loop, closed, UV_N);
    cr_assert_eq(*closed, UV_N, "repl_close callbacks");
}

/* Close every replica, then every transport (*closed counts both, from 0). */
static void close_all(uv_loop_t *loop, int *closed)
{
    close_repls(loop, closed);
    for (int i = 0; i < UV_N; i++) {
        xport_close(nodes[i].x, count_closed, closed);
    }
    spin_until(loop, closed, 2 * UV_N);
}

/* Open UV_N TCP transports on consecutive loopback ports from port (moving
 * on by 97 while a port is taken) and describe them in peers; each node's
 * data directory is base/n<i>. */
static void open_nodes(uv_loop_t *loop,
                       const char *base,
                       unsigned port,
                       struct repl_peer *peers)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    for (int attempt = 0; attempt < 20; attempt++, port += 97) {
        int i;
        for (i = 0; i < UV_N; i++) {
            nodes[i].id = (uint64_t)i + 1;
            (void)snprintf(nodes[i].addr, sizeof nodes[i].addr, "127.0.0.1:%u",
                           port + (unsigned)i);
            if (xport_tcp_new(loop, nodes[i].id, nodes[i].addr, NULL,
                              &nodes[i].x, errmsg) != 0) {
                break;
            }
        }
        if (i == UV_N) {
            break;
        }
        while (i-- > 0) {
            xport_close(nodes[i].x, NULL, NULL);
            nodes[i].x = NULL;
        }
        uv_run(loop, UV_RUN_NOWAIT);
    }
    cr_assert_not_null(nodes[UV_N - 1].x, "no free ports: %s", errmsg);
    for (int i = 0; i < UV_N; i++) {
        peers[i].id = nodes[i].id;
        peers[i].address = nodes[i].addr;
        cr_assert_lt((size_t)snprintf(nodes[i].dir, sizeof nodes[i].dir,
                                      "%s/n%d", base, i + 1),
                     sizeof nodes[i].dir);
    }
}

static bool cond_stored(void *arg)
{
    for (int i = 0; i < UV_N; i++) {
        struct repl_status st;
        repl_get_status(nodes[i].r, &st);
        if (st.last_stored < *(uint64_t *)arg) {
            return false;
        }
    }
    return true;
}

/* Every entry of dir (not recursive) and dir itself are private to the
 * owner; returns how many regular files were checked. */
static unsigned expect_private(const char *dir)
{
    struct stat st;
    struct dirent *de;
    unsigned n = 0;
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "opendir %s", dir);
    cr_assert_eq(stat(dir, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0700, "%s mode %o", dir,
                 (unsigned)(st.st_mode & 0777));
    while ((de = readdir(d)) != NULL) {
        char path[512];
        if (de->d_name[0] == '.') {
            continue;
        }
        (void)snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        cr_assert_eq(lstat(path, &st), 0);
        if (S_ISREG(st.st_mode)) {
            cr_expect_eq(st.st_mode & 077, 0, "%s mode %o", path,
                         (unsigned)(st.st_mode & 0777));
            n++;
        }
    }
    closedir(d);
    return n;
}

/* A crash in the middle of a write, on tern's store: a sector of the
 * write in flight landed after the last whole write of dir's newest
 * segment with records (here the segment's own first sector: records of
 * it, out of sequence there; nothing acknowledged is touched). */
static void tear_after_last_write(const char *dir)
{
    unsigned long long best = 0;
    char name[256];
    struct dirent *de;
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = opendir(dir);
    uint8_t junk[512];
    cr_assert(dir_fd >= 0 && d != NULL, "%s", dir);
    while ((de = readdir(d)) != NULL) {
        unsigned long long seq;
        uint8_t *img = NULL;
        size_t len = 0;
        struct tlog_scan sc;
        char em[TERN_ERRMSG_SIZE] = "";
        if (sscanf(de->d_name, "seg-%llu", &seq) != 1 || seq <= best) {
            continue;
        }
        cr_assert_eq(tlog_read_file(dir_fd, de->d_name, 64u << 20, &img, &len),
                     0);
        cr_assert_eq(tlog_seg_scan(img, len, seq, 0, 0, NULL, NULL, &sc, em), 0,
                     "%s", em);
        if (sc.n_records > 0) {
            cr_assert_eq(sc.how, TLOG_SCAN_CLEAN, "%s: %s", de->d_name, sc.why);
            cr_assert(sc.ended && sc.end + sizeof junk <= len);
            best = seq;
            (void)snprintf(name, sizeof name, "%s", de->d_name);
            memcpy(junk, img + TLOG_SEG_HEADER_SIZE, sizeof junk);
        }
        tern_free(img);
    }
    closedir(d);
    cr_assert_gt(best, 0, "no segment with records in %s", dir);
    {
        char path[600];
        struct tlog_scan sc;
        uint8_t *img = NULL;
        size_t len = 0;
        char em[TERN_ERRMSG_SIZE] = "";
        int fd;
        cr_assert_eq(tlog_read_file(dir_fd, name, 64u << 20, &img, &len), 0);
        cr_assert_eq(tlog_seg_scan(img, len, best, 0, 0, NULL, NULL, &sc, em),
                     0, "%s", em);
        tern_free(img);
        (void)snprintf(path, sizeof path, "%s/%s", dir, name);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        cr_assert(fd >= 0, "%s", path);
        cr_assert_eq(pwrite(fd, junk, sizeof junk, (off_t)sc.end),
                     (ssize_t)sizeof junk);
        cr_assert_eq(close(fd), 0);
    }
    cr_assert_eq(close(dir_fd), 0);
}

static void production_path(enum repl_durability d)
{
    uv_loop_t loop;
    char base[] = "/tmp/tern-repl-uv-XXXXXX";
    struct repl_peer peers[UV_N];
    unsigned port = 20000 + (unsigned)(getpid() * 7) % 30000;
    int closed = 0;
    uint64_t want = 100;
    int l;

    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_not_null(mkdtemp(base));
    cr_assert_lt((size_t)snprintf(tmp_base, sizeof tmp_base, "%s", base),
                 sizeof tmp_base);
    memset(nodes, 0, sizeof nodes);
    acked = 0;
    uv_durability = d;
    open_nodes(&loop, base, port, peers);
    start_repls(&loop, base, peers);
    cr_assert(run_until(&loop, cond_leader, NULL, 20000), "no leader");
    l = writable_leader();
    for (uint64_t k = 0; k < want; k++) {
        uint64_t idx;
        void *buf = tern_malloc(64);
        memset(buf, (int)k, 64);
        cr_assert_eq(repl_propose(nodes[l].r, buf, 64, u_prop_cb, NULL, &idx),
                     0);
    }
    cr_assert(run_until(&loop, cond_applied, &want, 30000),
              "applied %llu %llu %llu acked %d",
              (unsigned long long)nodes[0].applied,
              (unsigned long long)nodes[1].applied,
              (unsigned long long)nodes[2].applied, acked);
    for (int i = 0; i < UV_N; i++) {
        struct repl_status st;
        repl_get_status(nodes[i].r, &st);
        cr_expect_eq(st.failed, 0);
        cr_expect_eq(st.durability, d);
        cr_expect_geq(st.last_counted, st.last_applied);
        if (d == REPL_DURABILITY_DISK) {
            cr_expect_geq(st.last_stored, st.last_applied);
            cr_expect_eq(st.last_counted, st.last_stored);
        }
    }
    {
        /* Every proposal gave one append -> commit sample (uv_hrtime). */
        struct repl_latency lat;
        repl_get_latency(nodes[l].r, &lat, false);
        cr_expect_geq(lat.count, want);
        cr_expect_gt(lat.min_ns, 0);
        cr_expect_leq(repl_latency_quantile(&lat, 0.5),
                      repl_latency_quantile(&lat, 0.99));
    }
    {
        /* Memory mode: the disks catch up in the background. */
        struct repl_status st;
        uint64_t idx;
        repl_get_status(nodes[l].r, &st);
        idx = st.last_applied;
        cr_assert(run_until(&loop, cond_stored, &idx, 30000),
                  "disks never caught up");
    }

    close_repls(&loop, &closed);
    for (int i = 0; i < UV_N; i++) {
        char meta[300];
        /* metadata1/2, segments, tern-meta1 at least */
        cr_expect_geq(expect_private(nodes[i].dir), 3);
        (void)snprintf(meta, sizeof meta, "%s/tern-meta1", nodes[i].dir);
        cr_expect_eq(access(meta, F_OK), 0, "%s missing", meta);
    }

    /* tern's store: node 1 crashed in the middle of a write. */
    if (uv_store == REPL_LOG_STORE_TERN && d == REPL_DURABILITY_DISK) {
        tear_after_last_write(nodes[0].dir);
    }

    /* Restart on the same directories: load, replay, elect, write more. */
    for (int i = 0; i < UV_N; i++) {
        nodes[i].applied = 0;
        nodes[i].last_index = 0;
        nodes[i].role = REPL_UNAVAILABLE;
        nodes[i].writable = false;
    }
    acked = 0;
    start_repls(&loop, base, peers);
    for (int i = 0; i < UV_N; i++) {
        struct repl_status st;
        repl_get_status(nodes[i].r, &st);
        cr_expect_eq(st.meta_load, REPL_META_MATCH, "node %d", i + 1);
        /* The torn write is cut and reported; nothing before it is. */
        cr_expect_eq(st.log_torn,
                     i == 0 && uv_store == REPL_LOG_STORE_TERN &&
                             d == REPL_DURABILITY_DISK
                         ? 1u
                         : 0u,
                     "node %d torn %u", i + 1, st.log_torn);
        cr_expect_geq(st.last_index, 100, "node %d", i + 1);
    }
    cr_assert(run_until(&loop, cond_leader, NULL, 20000), "no leader again");
    l = writable_leader();
    for (uint64_t k = 0; k < 10; k++) {
        uint64_t idx;
        void *buf = tern_malloc(64);
        memset(buf, (int)k, 64);
        cr_assert_eq(repl_propose(nodes[l].r, buf, 64, u_prop_cb, NULL, &idx),
                     0);
    }
    want = 110; /* the 100 replayed from the log + 10 new */
    acked = 100;
    cr_assert(run_until(&loop, cond_applied, &want, 30000),
              "after restart: applied %llu %llu %llu",
              (unsigned long long)nodes[0].applied,
              (unsigned long long)nodes[1].applied,
              (unsigned long long)nodes[2].applied);
    closed = 0;
    close_all(&loop, &closed);
    cr_expect_eq(closed, 2 * UV_N);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    remove_tmp();
}

Test(uv, production_path_raft_uv_and_tcp, .timeout = 120)
{
    uv_store = REPL_LOG_STORE_UV;
    production_path(REPL_DURABILITY_DISK);
}

/* Memory durability over the real raft_uv: the deferred acks run from the
 * loop's idle handle, which closes with the replica. */
Test(uv, production_path_memory_durability, .timeout = 120)
{
    uv_store = REPL_LOG_STORE_UV;
    production_path(REPL_DURABILITY_MEMORY);
}

/* The same over tern's own log store ([raft] log_store = tern). */
Test(uv, production_path_tern_store_and_tcp, .timeout = 120)
{
    uv_store = REPL_LOG_STORE_TERN;
    production_path(REPL_DURABILITY_DISK);
}

Test(uv, production_path_tern_store_memory_durability, .timeout = 120)
{
    uv_store = REPL_LOG_STORE_TERN;
    production_path(REPL_DURABILITY_MEMORY);
}

/* ---- snapshots and InstallSnapshot + bulk over raft_uv and TCP ----------- */

/* A virtual state stream: byte p is (p * 31) & 0xff; every applied byte of
 * payload adds 100 stream bytes. */
struct snode
{
    uint64_t applied_index;
    uint64_t stream; /* bytes of state */
    uint64_t staged; /* bytes fetched for the pending install */
    bool staging;
    uint64_t restores;
    bool bad_bytes;
};
static struct snode snodes[UV_N];

static int s_apply(void *arg, uint64_t index, const void *buf, size_t len)
{
    struct snode *n = arg;
    (void)buf;
    if (index > n->applied_index) {
        n->applied_index = index;
        n->stream += 100 * len;
    }
    return 0;
}

static int s_snapshot(void *arg, uint64_t last_applied, void **m, size_t *len)
{
    struct snode *n = arg;
    *m = tern_malloc(16);
    tern_put_u64(*m, n->stream);
    tern_put_u64((uint8_t *)*m + 8, last_applied);
    *len = 16;
    return 0;
}

static int s_restore(void *arg, const void *m, size_t len)
{
    struct snode *n = arg;
    uint64_t bytes = tern_get_u64(m),
             idx = tern_get_u64((const uint8_t *)m + 8);
    (void)len;
    n->restores++;
    if (idx <= n->applied_index) {
        n->staging = false;
        return 0;
    }
    if ((n->staging ? n->staged : n->stream) < bytes) {
        return TERN_EINVAL;
    }
    n->stream = bytes;
    n->applied_index = idx;
    n->staging = false;
    return 0;
}

static int s_range(void *arg,
                   const void *m,
                   size_t len,
                   uint64_t *from,
                   uint64_t *to)
{
    struct snode *n = arg;
    (void)len;
    if (!n->staging) {
        n->staging = true;
        n->staged = n->stream;
    }
    *from = n->staged;
    *to = tern_get_u64(m);
    return 0;
}

static int s_read(void *arg, uint64_t pos, void *buf, size_t cap, size_t *out)
{
    struct snode *n = arg;
    size_t k = 0;
    while (k < cap && pos + k < n->stream) {
        ((uint8_t *)buf)[k] = (uint8_t)((pos + k) * 31);
        k++;
    }
    *out = k;
    return 0;
}

static int s_write(void *arg, uint64_t pos, const void *buf, size_t len)
{
    struct snode *n = arg;
    if (!n->staging || pos != n->staged) {
        return TERN_EINVAL;
    }
    for (size_t k = 0; k < len; k++) {
        if (((const uint8_t *)buf)[k] != (uint8_t)((pos + k) * 31)) {
            n->bad_bytes = true;
        }
    }
    n->staged += len;
    return 0;
}

static void start_snode(uv_loop_t *loop, int i, const struct repl_peer *peers)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct repl_config cfg = {0};
    struct repl_fsm fsm = {0};
    cfg.id = nodes[i].id;
    cfg.address = nodes[i].addr;
    cfg.data_dir = nodes[i].dir;
    cfg.peers = peers;
    cfg.n_peers = UV_N;
    cfg.snapshot_threshold_bytes = 2000;
    cfg.snapshot_trailing = 8;
    cfg.log_store = uv_store;
    fsm.arg = &snodes[i];
    fsm.apply = s_apply;
    fsm.snapshot = s_snapshot;
    fsm.restore = s_restore;
    fsm.bulk_range = s_range;
    fsm.bulk_read = s_read;
    fsm.bulk_write = s_write;
    nodes[i].role = REPL_UNAVAILABLE;
    nodes[i].writable = false;
    cr_assert_eq(repl_new(loop, nodes[i].x, &cfg, &fsm, u_state, &nodes[i],
                          &nodes[i].r, errmsg),
                 0, "repl_new: %s", errmsg);
    cr_assert_eq(repl_start(nodes[i].r, errmsg), 0, "%s", errmsg);
}

static uint64_t target_index;
static bool cond_s_applied(void *arg)
{
    (void)arg;
    for (int i = 0; i < UV_N; i++) {
        if (nodes[i].r == NULL || snodes[i].applied_index < target_index) {
            return false;
        }
    }
    return true;
}

static void snapshot_install(void)
{
    uv_loop_t loop;
    char base[] = "/tmp/tern-repl-uv2-XXXXXX";
    struct repl_peer peers[UV_N];
    unsigned port = 30000 + (unsigned)(getpid() * 13) % 20000;
    int closed = 0;
    int l, f;

    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_not_null(mkdtemp(base));
    cr_assert_lt((size_t)snprintf(tmp_base, sizeof tmp_base, "%s", base),
                 sizeof tmp_base);
    memset(nodes, 0, sizeof nodes);
    memset(snodes, 0, sizeof snodes);
    open_nodes(&loop, base, port, peers);
    for (int i = 0; i < UV_N; i++) {
        start_snode(&loop, i, peers);
    }
    cr_assert(run_until(&loop, cond_leader, NULL, 20000), "no leader");
    l = writable_leader();
    f = (l + 1) % UV_N;
    /* Stop a follower's replica (its xport stays up), write a lot. */
    closed = 0;
    repl_close(nodes[f].r, count_closed, &closed);
    nodes[f].r = NULL;
    spin_until(&loop, &closed, 1);
    cr_assert_eq(closed, 1);
    for (int k = 0; k < 300; k++) {
        uint64_t idx;
        void *buf = tern_malloc(64);
        memset(buf, k, 64);
        cr_assert_eq(repl_propose(nodes[l].r, buf, 64, NULL, NULL, &idx), 0);
        target_index = idx;
    }
    {
        /* Wait for the leader to apply and snapshot. */
        struct repl_status st;
        uv_update_time(&loop);
        uint64_t end = uv_now(&loop) + 20000;
        uv_timer_t t;
        uv_timer_init(&loop, &t);
        uv_timer_start(&t, timer_noop, 5, 5);
        unsigned extra = 0;
        do {
            uv_run(&loop, UV_RUN_ONCE);
            repl_get_status(nodes[l].r, &st);
            /* libraft only considers a snapshot when it applies entries,
             * and skips while one is being written: keep some coming. */
            if (st.last_applied >= target_index &&
                nodes[l].r->io.snap_index < target_index / 2 && extra < 2000) {
                uint64_t idx;
                void *buf = tern_malloc(64);
                memset(buf, 7, 64);
                cr_assert_eq(
                    repl_propose(nodes[l].r, buf, 64, NULL, NULL, &idx), 0);
                target_index = idx;
                extra++;
            }
        } while ((st.last_applied < target_index ||
                  nodes[l].r->io.snap_index < target_index / 2) &&
                 uv_now(&loop) < end);
        uv_close((uv_handle_t *)&t, NULL);
        uv_run(&loop, UV_RUN_NOWAIT);
        cr_assert_geq(st.last_applied, target_index);
        cr_assert_geq(nodes[l].r->io.snap_index, target_index / 2,
                      "leader snapshot (and log compaction) done: snap %llu "
                      "applied %llu target %llu role %d bytes %llu",
                      (unsigned long long)nodes[l].r->io.snap_index,
                      (unsigned long long)st.last_applied,
                      (unsigned long long)target_index, (int)st.role,
                      (unsigned long long)nodes[l].r->glue.applied_bytes);
    }
    start_snode(&loop, f, peers);
    cr_assert(run_until(&loop, cond_s_applied, NULL, 30000),
              "follower at %llu, want %llu",
              (unsigned long long)snodes[f].applied_index,
              (unsigned long long)target_index);
    cr_expect_geq(snodes[f].restores, 1, "caught up through a snapshot");
    cr_expect_gt(nodes[f].r->bulk.completed, 0, "bulk fetch over TCP");
    cr_expect(!snodes[f].bad_bytes);
    cr_expect_eq(snodes[f].stream, snodes[l].stream);

    closed = 0;
    close_all(&loop, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    remove_tmp();
}

Test(uv, snapshot_install_and_bulk_over_tcp, .timeout = 120)
{
    uv_store = REPL_LOG_STORE_UV;
    snapshot_install();
}

Test(uv, snapshot_install_and_bulk_over_tcp_tern_store, .timeout = 120)
{
    uv_store = REPL_LOG_STORE_TERN;
    snapshot_install();
}

/* ---- raft_uv's metadata damaged on a stopped node ----------------------- */

/* raft_uv 0.15's metadata file: u64 format, u64 version, u64 term, u64
 * vote. XOR the term of both files with x. */
static void flip_term(const char *dir, uint64_t x)
{
    for (int k = 1; k <= 2; k++) {
        char path[300];
        uint8_t b[8];
        int fd;
        (void)snprintf(path, sizeof path, "%s/metadata%d", dir, k);
        fd = open(path, O_RDWR);
        if (fd < 0) {
            continue; /* only one written so far */
        }
        cr_assert_eq(pread(fd, b, 8, 16), 8);
        tern_put_u64(b, tern_get_u64(b) ^ x);
        cr_assert_eq(pwrite(fd, b, 8, 16), 8);
        close(fd);
    }
}

/* Start node i alone; returns repl_start's code (the replica is closed
 * again if the start failed). */
static int start_one(uv_loop_t *loop,
                     int i,
                     const struct repl_peer *peers,
                     char *errmsg)
{
    struct repl_config cfg = {0};
    struct repl_fsm fsm = {0};
    int rv, closed = 0;
    cfg.id = nodes[i].id;
    cfg.address = nodes[i].addr;
    cfg.data_dir = nodes[i].dir;
    cfg.peers = peers;
    cfg.n_peers = UV_N;
    fsm.arg = &nodes[i];
    fsm.apply = u_apply;
    fsm.snapshot = u_snapshot;
    fsm.restore = u_restore;
    cr_assert_eq(repl_new(loop, nodes[i].x, &cfg, &fsm, u_state, &nodes[i],
                          &nodes[i].r, errmsg),
                 0, "repl_new: %s", errmsg);
    rv = repl_start(nodes[i].r, errmsg);
    if (rv != 0) {
        repl_close(nodes[i].r, count_closed, &closed);
        nodes[i].r = NULL;
        spin_until(loop, &closed, 1);
        cr_assert_eq(closed, 1);
    }
    return rv;
}

Test(uv, term_changed_in_raft_uv_metadata_is_refused, .timeout = 120)
{
    uv_loop_t loop;
    char base[] = "/tmp/tern-repl-uv-XXXXXX";
    struct repl_peer peers[UV_N];
    unsigned port = 21000 + (unsigned)(getpid() * 11) % 30000;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    int closed = 0;
    uint64_t want = 5;
    int l;

    uv_store = REPL_LOG_STORE_UV;
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_not_null(mkdtemp(base));
    cr_assert_lt((size_t)snprintf(tmp_base, sizeof tmp_base, "%s", base),
                 sizeof tmp_base);
    memset(nodes, 0, sizeof nodes);
    acked = 0;
    uv_durability = REPL_DURABILITY_DISK;
    open_nodes(&loop, base, port, peers);
    start_repls(&loop, base, peers);
    cr_assert(run_until(&loop, cond_leader, NULL, 20000), "no leader");
    l = writable_leader();
    for (uint64_t k = 0; k < want; k++) {
        uint64_t idx;
        void *buf = tern_malloc(64);
        memset(buf, (int)k, 64);
        cr_assert_eq(repl_propose(nodes[l].r, buf, 64, u_prop_cb, NULL, &idx),
                     0);
    }
    cr_assert(run_until(&loop, cond_applied, &want, 30000));
    close_repls(&loop, &closed);

    /* A high bit: far beyond the jump bound, refused whatever the vote. */
    flip_term(nodes[0].dir, (uint64_t)1 << 56);
    cr_assert_eq(start_one(&loop, 0, peers, errmsg), TERN_ECORRUPT);
    cr_expect_not_null(strstr(errmsg, "term record mismatch"), "%s", errmsg);
    /* Refused again (nothing was repaired). */
    cr_assert_eq(start_one(&loop, 0, peers, errmsg), TERN_ECORRUPT);
    /* A term that went back: refused. Node 2 is at term >= 2. */
    flip_term(nodes[0].dir, (uint64_t)1 << 56); /* undo */
    cr_assert_eq(start_one(&loop, 0, peers, errmsg), 0, "%s", errmsg);
    closed = 0;
    repl_close(nodes[0].r, count_closed, &closed);
    nodes[0].r = NULL;
    spin_until(&loop, &closed, 1);
    {
        struct repl_meta_rec m;
        cr_assert_eq(repl_meta_read(nodes[1].dir, &m, errmsg), 0);
        cr_assert(m.present);
        cr_assert_geq(m.term, 2);
        /* term - 1 (not 0: raft_uv takes a zero term for a pristine
         * directory and fails its own bootstrap over the segments) */
        flip_term(nodes[1].dir, m.term ^ (m.term - 1));
    }
    cr_assert_eq(start_one(&loop, 1, peers, errmsg), TERN_ECORRUPT, "%s",
                 errmsg);
    cr_expect_not_null(strstr(errmsg, "term record mismatch"), "%s", errmsg);

    for (int i = 0; i < UV_N; i++) {
        xport_close(nodes[i].x, count_closed, &closed);
    }
    spin_until(&loop, &closed, 1 + UV_N);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    remove_tmp();
}

/* A raft directory stays with the store that made it: the other store
 * refuses it (an empty log under the node's term would lose what it
 * acknowledged). */
static void switch_refused(enum repl_log_store made, enum repl_log_store next)
{
    uv_loop_t loop;
    char base[] = "/tmp/tern-repl-uv3-XXXXXX";
    struct repl_peer peers[UV_N];
    unsigned port = 25000 + (unsigned)(getpid() * 7) % 20000;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct repl_config cfg = {0};
    struct repl_fsm fsm = {0};
    struct repl *r = NULL;
    int closed = 0;

    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_not_null(mkdtemp(base));
    cr_assert_lt((size_t)snprintf(tmp_base, sizeof tmp_base, "%s", base),
                 sizeof tmp_base);
    memset(nodes, 0, sizeof nodes);
    uv_durability = REPL_DURABILITY_DISK;
    uv_store = made;
    open_nodes(&loop, base, port, peers);
    start_repls(&loop, base, peers);
    cr_assert(run_until(&loop, cond_leader, NULL, 20000), "no leader");
    close_repls(&loop, &closed);
    cfg.id = nodes[0].id;
    cfg.address = nodes[0].addr;
    cfg.data_dir = nodes[0].dir;
    cfg.peers = peers;
    cfg.n_peers = UV_N;
    cfg.log_store = next;
    fsm.arg = &nodes[0];
    fsm.apply = u_apply;
    fsm.snapshot = u_snapshot;
    fsm.restore = u_restore;
    cr_expect_eq(
        repl_new(&loop, nodes[0].x, &cfg, &fsm, u_state, &nodes[0], &r, errmsg),
        TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "stays with the store"), "%s", errmsg);
    closed = 0;
    for (int i = 0; i < UV_N; i++) {
        xport_close(nodes[i].x, count_closed, &closed);
    }
    spin_until(&loop, &closed, UV_N);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    remove_tmp();
}

Test(uv, a_raft_uv_directory_is_refused_by_tern_s_store, .timeout = 120)
{
    switch_refused(REPL_LOG_STORE_UV, REPL_LOG_STORE_TERN);
}

Test(uv, a_tern_store_directory_is_refused_by_raft_uv, .timeout = 120)
{
    switch_refused(REPL_LOG_STORE_TERN, REPL_LOG_STORE_UV);
}
