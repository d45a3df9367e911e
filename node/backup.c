/*
 * node/backup.c: the node's side of backups (docs/OPERATIONS.md, "Backup
 * and restore"). BACKUP requests (op 36, server.c) run here as jobs on
 * libuv's thread pool: idx_backup_begin on the loop thread, the copy in a
 * worker (idx_backup_run), idx_backup_end back on the loop; a verify job
 * runs idx_backup_verify in a worker. One backup at a time per node (the
 * index refuses a second with TERN_EBACKUP); verifies are bounded to one
 * at a time as well.
 *
 * What a backup holds: the client sends the leader's commit index as
 * min_applied; the job waits (a 10 ms timer, at most NODE_BACKUP_WAIT_MS)
 * until raft applied it on this node, notes the index's applied raft
 * index then, and the copy must cover that (idx_backup_options
 * .min_applied). So a follower's backup holds every message the leader
 * acknowledged before the request, although a follower applies after the
 * leader (measured: a follower backed up right after 30,000 acknowledged
 * produces missed the last 48 without the wait).
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
    uv_timer_t timer; /* the wait for min_applied; closed before free */
    bool timer_used;
    bool verify;
    uv_loop_t *loop;
    struct node_backup_source src;
    const struct node_config *cfg;
    uint64_t min_applied;
    uint64_t deadline_ms;
    struct idx_backup *b; /* backup: the index's job */
    char dir[PATH_MAX];
    int status;
    struct idx_backup_info info;
    char errmsg[TERN_ERRMSG_SIZE];
    node_backup_cb cb;
    void *arg;
};

static bool verify_running; /* one verify at a time (loop thread) */

static void job_free(struct job *j)
{
    tern_free(j);
}

static void timer_closed(uv_handle_t *h)
{
    job_free(h->data);
}

/* Log, answer, free (after the timer is closed, if it was used). */
static void job_finish(struct job *j)
{
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
    if (j->timer_used) {
        uv_close((uv_handle_t *)&j->timer, timer_closed);
    } else {
        job_free(j);
    }
}

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
    job_finish(j);
}

/* Begin the copy on the index as it is now and hand it to a worker. */
static int job_begin(struct job *j, struct idx_env *e, char *errmsg)
{
    struct repl_status st;
    int rv;
    j->src.status(j->src.arg, &st);
    struct idx_backup_options o = {
        .dir = j->dir,
        .data_dir = j->cfg->data_dir,
        .cluster = node_config_cluster_name(j->cfg),
        .node_id = j->cfg->id,
        .term = st.term,
        .min_free_bytes = j->cfg->min_free_disk_bytes,
        /* Every command raft applied up to min_applied is in the index
         * now; the copy must see at least this (its txn may not). */
        .min_applied = j->min_applied > 0 ? idx_last_applied(e) : 0,
    };
    rv = idx_backup_begin(e, &o, &j->b, errmsg);
    if (rv != 0) {
        return rv;
    }
    rv = uv_queue_work(j->loop, &j->work, job_work, job_done);
    if (rv != 0) {
        char scratch[TERN_ERRMSG_SIZE];
        (void)idx_backup_end(j->b, NULL, scratch);
        tern_errmsg_printf(errmsg, "queue the backup: %s", uv_strerror(rv));
        return rv;
    }
    node_log(NODE_LOG_INFO, "backup started",
             "dir=%s term=%llu min_applied=%llu", j->dir,
             (unsigned long long)st.term, (unsigned long long)j->min_applied);
    return 0;
}

/* The wait for min_applied, every 10 ms (see node_backup_start). */
static void on_wait(uv_timer_t *t)
{
    struct job *j = t->data;
    struct idx_env *e = j->src.idx(j->src.arg);
    struct repl_status st;
    if (e == NULL) {
        j->status = TERN_ESHUTDOWN;
        tern_errmsg_printf(j->errmsg, "the node has no index (stopping)");
        goto finish;
    }
    j->src.status(j->src.arg, &st);
    if (st.last_applied >= j->min_applied) {
        uv_timer_stop(&j->timer);
        j->status = job_begin(j, e, j->errmsg);
        if (j->status == 0) {
            return; /* job_done finishes */
        }
        goto finish;
    }
    if (uv_now(j->loop) < j->deadline_ms) {
        return;
    }
    j->status = TERN_EBUSY;
    tern_errmsg_printf(j->errmsg,
                       "this node applied raft index %llu of the %llu the "
                       "leader had committed, within %d ms: it lags the "
                       "leader; retry, or back up another node",
                       (unsigned long long)st.last_applied,
                       (unsigned long long)j->min_applied, NODE_BACKUP_WAIT_MS);
finish:
    uv_timer_stop(&j->timer);
    job_finish(j);
}

int node_backup_start(uv_loop_t *loop,
                      const struct node_backup_source *src,
                      const struct node_config *cfg,
                      const char *dir,
                      bool verify,
                      uint64_t min_applied,
                      node_backup_cb cb,
                      void *arg,
                      char *errmsg)
{
    struct idx_env *e = src->idx(src->arg);
    struct job *j;
    int rv;
    if (e == NULL) {
        tern_errmsg_printf(errmsg, "the node has no index (stopping)");
        return TERN_ESHUTDOWN;
    }
    if (strlen(dir) >= sizeof j->dir || dir[0] != '/') {
        tern_errmsg_printf(errmsg,
                           "backup directory must be an absolute "
                           "path on the node's host");
        return TERN_EINVAL;
    }
    if (verify && verify_running) {
        tern_errmsg_printf(errmsg,
                           "a backup verify is already running on this "
                           "node (one at a time)");
        return TERN_EBACKUP;
    }
    if (!verify && idx_backup_holds(e)) {
        tern_errmsg_printf(errmsg,
                           "a backup of this node is already running "
                           "(one at a time per node)");
        return TERN_EBACKUP;
    }
    j = tern_calloc(1, sizeof *j);
    if (j == NULL) {
        return -ENOMEM;
    }
    j->verify = verify;
    j->loop = loop;
    j->src = *src;
    j->cfg = cfg;
    j->min_applied = min_applied;
    j->cb = cb;
    j->arg = arg;
    j->work.data = j;
    (void)snprintf(j->dir, sizeof j->dir, "%s", dir);
    if (verify) {
        rv = uv_queue_work(loop, &j->work, job_work, job_done);
        if (rv != 0) {
            tern_free(j);
            tern_errmsg_printf(errmsg, "queue the verify: %s", uv_strerror(rv));
            return rv;
        }
        verify_running = true;
        node_log(NODE_LOG_INFO, "backup verify started", "dir=%s", dir);
        return 0;
    }
    if (min_applied == 0) {
        rv = job_begin(j, e, errmsg);
        if (rv != 0) {
            tern_free(j);
        }
        return rv;
    }
    /* Wait for min_applied: always through the timer, so the entries
     * applied in this loop iteration are flushed first. */
    rv = uv_timer_init(loop, &j->timer);
    if (rv == 0) {
        j->timer.data = j;
        j->timer_used = true;
        j->deadline_ms = uv_now(loop) + NODE_BACKUP_WAIT_MS;
        rv = uv_timer_start(&j->timer, on_wait, 0, 10);
    }
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "backup wait timer: %s", uv_strerror(rv));
        if (j->timer_used) {
            uv_close((uv_handle_t *)&j->timer, timer_closed);
        } else {
            tern_free(j);
        }
        return rv;
    }
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
    /* Seeded in the store the node will run. */
    rc.log_store = c->tern_log_store ? REPL_LOG_STORE_TERN : REPL_LOG_STORE_UV;
    rc.segment_bytes = c->raft_segment_bytes;
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
