/*
 * node/backup.c: the node's side of backups (docs/OPERATIONS.md, "Backup
 * and restore"). BACKUP requests (op 36, server.c) run here as jobs on
 * libuv's thread pool: idx_backup_begin on the loop thread, the copy in a
 * worker (idx_backup_run), idx_backup_end back on the loop; a verify job
 * runs idx_backup_verify in a worker. One backup at a time per node (the
 * index refuses a second with TERN_EBACKUP); verifies are bounded to one
 * at a time as well.
 *
 * Restore (ternd --restore-from DIR [--restore-snapshot-only]) runs before
 * the node starts: the backup's manifest is read, its cluster name must differ
 * from the new configuration's (a restored cluster is a new cluster: its
 * data directories get the new name in IDENTITY, so a directory of the old
 * cluster is refused by the new one and the other way round), the data
 * directory must be new, index/ verifies the backup and installs its
 * commit log (not with --restore-snapshot-only: that node needs only the
 * MANIFEST and fetches the log from a peer at start), raft/ seeds
 * the initial snapshot at the backup's last applied index; the normal
 * start then rebuilds the index from the log and restores the snapshot.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backup.h"
#include "log.h"
#include "repl.h"

struct job
{
    uv_work_t work;
    bool verify;
    struct idx_backup *b; /* backup: the index's job */
    char dir[PATH_MAX];   /* verify: the directory */
    int status;           /* verify: result */
    struct idx_backup_info info;
    char errmsg[TERN_ERRMSG_SIZE];
    node_backup_cb cb;
    void *arg;
};

static bool verify_running; /* one verify at a time (loop thread) */

static void job_work(uv_work_t *w)
{
    struct job *j = w->data;
    if (j->verify) {
        j->status = idx_backup_verify(j->dir, &j->info, j->errmsg);
    } else {
        idx_backup_run(j->b);
    }
}

static void job_done(uv_work_t *w, int status)
{
    struct job *j = w->data;
    (void)status; /* UV_ECANCELED never happens: nothing cancels it */
    if (j->verify) {
        verify_running = false;
    } else {
        j->status = idx_backup_end(j->b, &j->info, j->errmsg);
    }
    if (j->status == 0) {
        node_log(NODE_LOG_INFO, j->verify ? "backup verified" : "backup taken",
                 "dir=%s last_applied=%llu files=%u bytes=%llu", j->dir,
                 (unsigned long long)j->info.last_applied, j->info.n_files,
                 (unsigned long long)j->info.total_bytes);
    } else {
        node_log(NODE_LOG_WARN,
                 j->verify ? "backup verify failed" : "backup failed",
                 "dir=%s err=%s msg=\"%s\"", j->dir, tern_err_name(j->status),
                 j->errmsg);
    }
    j->cb(j->arg, j->status, &j->info, j->errmsg);
    tern_free(j);
}

int node_backup_start(uv_loop_t *loop,
                      struct idx_env *e,
                      const struct node_config *cfg,
                      uint64_t term,
                      const char *dir,
                      bool verify,
                      node_backup_cb cb,
                      void *arg,
                      char *errmsg)
{
    struct job *j;
    int rv;
    if (e == NULL) {
        tern_errmsg_printf(errmsg, "the node has no index (stopping)");
        return TERN_ESHUTDOWN;
    }
    if (strlen(dir) >= sizeof j->dir) {
        tern_errmsg_printf(errmsg, "backup path too long");
        return TERN_EINVAL;
    }
    if (verify && verify_running) {
        tern_errmsg_printf(errmsg,
                           "a backup verify is already running on this "
                           "node (one at a time)");
        return TERN_EBACKUP;
    }
    j = tern_calloc(1, sizeof *j);
    if (j == NULL) {
        return -ENOMEM;
    }
    j->verify = verify;
    j->cb = cb;
    j->arg = arg;
    j->work.data = j;
    (void)snprintf(j->dir, sizeof j->dir, "%s", dir);
    if (!verify) {
        struct idx_backup_options o = {
            .dir = dir,
            .data_dir = cfg->data_dir,
            .cluster = node_config_cluster_name(cfg),
            .node_id = cfg->id,
            .term = term,
            .min_free_bytes = cfg->min_free_disk_bytes,
        };
        rv = idx_backup_begin(e, &o, &j->b, errmsg);
        if (rv != 0) {
            tern_free(j);
            return rv;
        }
    } else if (dir[0] != '/') {
        tern_free(j);
        tern_errmsg_printf(errmsg, "backup directory must be an absolute "
                                   "path on the node's host");
        return TERN_EINVAL;
    }
    rv = uv_queue_work(loop, &j->work, job_work, job_done);
    if (rv != 0) {
        if (!verify) {
            char scratch[TERN_ERRMSG_SIZE];
            (void)idx_backup_end(j->b, NULL, scratch);
        }
        tern_free(j);
        tern_errmsg_printf(errmsg, "queue the backup: %s", uv_strerror(rv));
        return rv;
    }
    if (verify) {
        verify_running = true;
    }
    node_log(NODE_LOG_INFO, verify ? "backup verify started" : "backup started",
             "dir=%s term=%llu", dir, (unsigned long long)term);
    return 0;
}

/* ---- Restore ------------------------------------------------------------- */

/* The data dir must be new: missing (created 0700) or empty. */
static int new_data_dir(const char *dir, char *errmsg)
{
    DIR *d;
    struct dirent *de;
    if (mkdir(dir, 0700) == 0) {
        return 0;
    }
    if (errno != EEXIST) {
        int rv = -errno;
        tern_errmsg_printf(errmsg, "mkdir %s: %s", dir, strerror(errno));
        return rv;
    }
    d = opendir(dir);
    if (d == NULL) {
        int rv = -errno;
        tern_errmsg_printf(errmsg, "open %s: %s", dir, strerror(errno));
        return rv;
    }
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            closedir(d);
            tern_errmsg_printf(errmsg,
                               "data directory %s is not empty: a restore "
                               "starts a new node in a new directory",
                               dir);
            return TERN_EINVAL;
        }
    }
    closedir(d);
    return 0;
}

int node_backup_restore(const struct node_config *c,
                        const char *dir,
                        bool snapshot_only,
                        char *errmsg)
{
    char index_dir[PATH_MAX], raft_dir[PATH_MAX];
    uint8_t manifest[IDX_SNAPSHOT_MANIFEST_SIZE];
    struct idx_backup_info info;
    struct repl_peer *peers = NULL;
    struct repl_config rc;
    const char *cluster = node_config_cluster_name(c);
    int rv;

    if (c->data_dir == NULL ||
        snprintf(index_dir, sizeof index_dir, "%s/index", c->data_dir) >=
            (int)sizeof index_dir ||
        snprintf(raft_dir, sizeof raft_dir, "%s/raft", c->data_dir) >=
            (int)sizeof raft_dir) {
        tern_errmsg_printf(errmsg, "data dir missing or too long");
        return TERN_EINVAL;
    }
    /* The manifest first (checksummed), for the cluster name; the files
     * are verified as they are installed. */
    rv = idx_backup_install(dir, index_dir, false, manifest, &info, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "backup %s refused", dir);
        return rv;
    }
    if (strcmp(info.cluster, cluster) == 0) {
        tern_errmsg_printf(errmsg,
                           "backup %s was taken from cluster '%s': a restore "
                           "starts a new cluster, set another [node] "
                           "cluster_name",
                           dir, info.cluster);
        return TERN_EINVAL;
    }
    rv = new_data_dir(c->data_dir, errmsg);
    if (rv != 0) {
        return rv;
    }
    if (!snapshot_only) {
        rv = idx_backup_install(dir, index_dir, true, manifest, &info, errmsg);
        if (rv != 0) {
            tern_errmsg_wrapf(errmsg, "backup %s refused", dir);
            return rv;
        }
    }
    if (info.last_applied == 0) {
        node_log(NODE_LOG_INFO, "restored an empty backup", "dir=%s", dir);
        return 0; /* nothing applied: the cluster bootstraps as new */
    }
    peers = tern_calloc(c->n_peers, sizeof *peers);
    if (peers == NULL) {
        return -ENOMEM;
    }
    for (unsigned i = 0; i < c->n_peers; i++) {
        peers[i].id = c->peers[i].id;
        peers[i].address = c->peers[i].raft_addr;
    }
    memset(&rc, 0, sizeof rc);
    rc.id = c->id;
    rc.address = c->raft_addr;
    rc.data_dir = raft_dir;
    rc.peers = peers;
    rc.n_peers = c->n_peers;
    rv = repl_seed_snapshot(&rc, info.last_applied, manifest, sizeof manifest,
                            errmsg);
    tern_free(peers);
    if (rv != 0) {
        return rv;
    }
    node_log(NODE_LOG_INFO, "restored from backup",
             "dir=%s from_cluster=%s from_node=%llu cluster=%s node=%llu "
             "last_applied=%llu log_bytes=%llu log=%s",
             dir, info.cluster, (unsigned long long)info.node_id, cluster,
             (unsigned long long)c->id, (unsigned long long)info.last_applied,
             (unsigned long long)(info.log_end - info.log_start),
             snapshot_only ? "fetched from a peer" : "installed");
    return 0;
}
