/*
 * ternd: the tern server process. Parses the configuration (config.c),
 * sizes libuv's thread pool (4 + [limits] fetch_threads; a smaller
 * UV_THREADPOOL_SIZE set by the environment lowers fetch_threads), then runs
 * the node (node.c) until SIGTERM/SIGINT; --version prints the version and
 * exits. --verify-backup DIR checks a backup and exits;
 * --restore-from DIR [--restore-snapshot-only] seeds a new data directory
 * from a backup (backup.c) before the node starts.
 * Exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "backup.h"
#include "config.h"
#include "log.h"
#include "node.h"

/* ternd --verify-backup DIR: 0 when the backup is sound, 1 if not. */
static int verify_backup(const char *dir)
{
    struct idx_backup_info info;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    int rv = idx_backup_verify(dir, &info, errmsg);
    if (rv != 0) {
        (void)fprintf(stderr, "ternd: backup %s is not usable: %s (%s)\n", dir,
                      errmsg, tern_err_name(rv));
        return 1;
    }
    (void)printf(
        "backup %s ok: cluster %s node %llu term %llu "
        "last_applied %llu log [%llu, %llu) files %u bytes %llu\n",
        dir, info.cluster, (unsigned long long)info.node_id,
        (unsigned long long)info.term, (unsigned long long)info.last_applied,
        (unsigned long long)info.log_start, (unsigned long long)info.log_end,
        info.n_files, (unsigned long long)info.total_bytes);
    return 0;
}

/* glibc's allocator, set for a server that allocates and frees buffers of
 * a MiB and more all the time (each fetch answer, on the thread pool, is
 * freed on the loop thread once sent). By default a buffer above the mmap
 * threshold (128 KiB, raised by glibc to the largest one freed so far) is
 * an mmap of its own, and the top of a heap above the trim threshold is
 * given back at each free: either way the next answer starts on fresh
 * pages, a page fault every 4 KiB (plus the munmap's TLB shootdowns),
 * which under a hypervisor cost ternd 4x the CPU of a consumer's read-back
 * (docs/ARCHITECTURE.md, "Answers on reused pages"). Fixed thresholds keep
 * such buffers in the heaps, to be reused. What the process holds stays at
 * its peak (freed memory below 128 MiB per heap top is kept), which the
 * bounds on answers, read-aheads and client buffers already bound. */
#define TERND_MMAP_THRESHOLD (32 << 20) /* glibc's largest allowed */
#define TERND_TRIM_THRESHOLD (128 << 20)

static void tune_malloc(void)
{
    if (mallopt(M_MMAP_THRESHOLD, TERND_MMAP_THRESHOLD) != 1 ||
        mallopt(M_TRIM_THRESHOLD, TERND_TRIM_THRESHOLD) != 1) {
        (void)fprintf(stderr,
                      "ternd: mallopt refused a threshold; large "
                      "answers allocate fresh pages\n");
    }
}

int main(int argc, char **argv)
{
    struct node_config c;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    const char *restore_from = NULL;
    bool snapshot_only = false;
    int rv, kept = 1;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            (void)printf("ternd %d.%d.%d\n", TERN_VERSION_MAJOR,
                         TERN_VERSION_MINOR, TERN_VERSION_PATCH);
            return 0;
        }
    }
    /* The backup flags are taken out before the configuration parses the
     * rest. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--verify-backup") == 0 ||
            strcmp(argv[i], "--restore-from") == 0) {
            if (i + 1 >= argc) {
                (void)fprintf(stderr, "ternd: %s needs a directory\n", argv[i]);
                return 2;
            }
            if (argv[i][2] == 'v') {
                return verify_backup(argv[i + 1]);
            }
            restore_from = argv[++i];
        } else if (strcmp(argv[i], "--restore-snapshot-only") == 0) {
            snapshot_only = true;
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    tune_malloc();
    if (snapshot_only && restore_from == NULL) {
        (void)fprintf(stderr,
                      "ternd: --restore-snapshot-only goes with "
                      "--restore-from\n");
        return 2;
    }
    node_config_init(&c);
    rv = node_config_parse_args(&c, argc, argv, errmsg);
    if (rv != 0) {
        (void)fprintf(stderr, "ternd: %s\n", errmsg);
        (void)fprintf(stderr, "ternd: run 'ternd --help' for usage\n");
        node_config_free(&c);
        return 2;
    }
    if (c.help) {
        (void)fputs(node_config_usage(), stdout);
        (void)fputs(
            "\nBackups (docs/OPERATIONS.md, \"Backup and restore\"):\n"
            "  --verify-backup DIR      check a backup, exit 0 if "
            "sound, 1 if not\n"
            "  --restore-from DIR       seed this new node's empty "
            "data dir from a\n"
            "                           backup, then start (the "
            "cluster_name must differ)\n"
            "  --restore-snapshot-only  with --restore-from: only "
            "DIR/MANIFEST, the log\n"
            "                           comes from a peer\n",
            stdout);
        node_config_free(&c);
        return 0;
    }
    /* libuv's pool (4 threads unless the environment says otherwise) also
     * serves raft_uv, checkpoints and backups: the fetches read there get
     * threads of their own beside those. Before any loop exists. */
    const char *pool = getenv("UV_THREADPOOL_SIZE");
    if (pool == NULL) {
        char n[16];
        (void)snprintf(n, sizeof(n), "%u", 4u + c.fetch_threads);
        (void)setenv("UV_THREADPOOL_SIZE", n, 0);
    } else {
        unsigned long n = strtoul(pool, NULL, 10);
        unsigned fit = n > 4 ? (unsigned)(n - 4) : 0;
        if (fit < c.fetch_threads) {
            (void)fprintf(stderr,
                          "ternd: UV_THREADPOOL_SIZE=%s leaves room for "
                          "%u of fetch_threads=%u beside the 4 threads of "
                          "raft_uv, checkpoints and backups: using %u\n",
                          pool, fit, c.fetch_threads, fit);
            c.fetch_threads = fit;
        }
    }
    /* Before a restore seeds the raft directory: in the store picked. */
    rv = node_pick_log_store(&c, errmsg);
    if (rv != 0) {
        (void)fprintf(stderr, "ternd: [raft] log_store: %s\n", errmsg);
        node_config_free(&c);
        return 2;
    }
    if (restore_from != NULL) {
        rv = node_backup_restore(&c, restore_from, snapshot_only, errmsg);
        if (rv != 0) {
            (void)fprintf(stderr, "ternd: restore from %s: %s (%s)\n",
                          restore_from, errmsg, tern_err_name(rv));
            node_log(NODE_LOG_ERROR, "restore failed", "dir=%s err=%s",
                     restore_from, tern_err_name(rv));
            node_config_free(&c);
            return rv == TERN_EINVAL ? 2 : 1;
        }
    }
    rv = node_run(&c);
    node_config_free(&c);
    return rv;
}
