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

/* Called on the loop thread when a backup or verify job ends: status 0
 * with *info (borrowed for the call), or a code with errmsg. */
typedef void (*node_backup_cb)(void *arg,
                               int status,
                               const struct idx_backup_info *info,
                               const char *errmsg);

/* Start a backup of e into dir (server-side path), or with verify a check
 * of the backup at dir, on libuv's thread pool. cfg, e borrowed (e must
 * stay open or be closed by idx_close, which cancels the job); dir
 * copied. term: the node's raft term now. 0 and cb later (always, once),
 * or a code with errmsg and no callback (TERN_EBACKUP: one at a time). */
int node_backup_start(uv_loop_t *loop,
                      struct idx_env *e,
                      const struct node_config *cfg,
                      uint64_t term,
                      const char *dir,
                      bool verify,
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
