/*
 * node/backup.h: online backups served to clients (BACKUP, op 36), their
 * verification, and the restore of a new node from a backup (ternd
 * --restore-from, --verify-backup). Private to node/.
 */
#ifndef TERN_NODE_BACKUP_H
#define TERN_NODE_BACKUP_H

#include <stdbool.h>

#include <uv.h>

#include "config.h"
#include "idx.h"
#include "repl.h"

/* How long a BACKUP waits for the node to apply the index it asks for. */
#define NODE_BACKUP_WAIT_MS 30000

/* Where a job finds the node's index and raft status at each step (the
 * index may be reopened, or gone while the node stops: NULL). */
struct node_backup_source
{
    struct idx_env *(*idx)(void *arg);
    void (*status)(void *arg, struct repl_status *out);
    void *arg;
};

/* Called on the loop thread when a backup or verify job ends: status 0
 * with *info (borrowed for the call), or a code with errmsg. */
typedef void (*node_backup_cb)(void *arg,
                               int status,
                               const struct idx_backup_info *info,
                               const char *errmsg);

/* Start a backup of the node's index into dir (server-side path), or with
 * verify a check of the backup at dir, on libuv's thread pool. A backup
 * first waits (a timer, up to NODE_BACKUP_WAIT_MS) until raft has applied
 * min_applied on this node (0: no wait). cfg and src borrowed until the
 * callback (an index closed meanwhile cancels the job); dir copied. 0 and
 * cb later (always, once), or a code with errmsg and no callback
 * (TERN_EBACKUP: one at a time). */
int node_backup_start(uv_loop_t *loop,
                      const struct node_backup_source *src,
                      const struct node_config *cfg,
                      const char *dir,
                      bool verify,
                      uint64_t min_applied,
                      node_backup_cb cb,
                      void *arg,
                      char *errmsg);

/* ternd --restore-from DIR: seed cfg's new data directory from the backup
 * at dir: the commit log, verified (unless snapshot_only: only dir/MANIFEST
 * is read and the node fetches the log from a peer at start), and the
 * initial raft snapshot.
 * The backup's cluster name must differ from cfg's. 0, or a code with
 * errmsg (TERN_EINVAL for a refused restore, TERN_ECORRUPT for a damaged
 * backup). */
int node_backup_restore(const struct node_config *cfg,
                        const char *dir,
                        bool snapshot_only,
                        char *errmsg);

#endif /* TERN_NODE_BACKUP_H */
