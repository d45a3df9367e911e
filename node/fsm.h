/*
 * The state machine ternd gives to raft (fsm.c): the index (index/) behind
 * the repl_fsm callbacks (apply, snapshot, restore, bulk transfer), the
 * group-commit flush, and the recovery of a failed apply by reopening the
 * index, in the disk reserve's space when the disk is full. Private to
 * node/.
 */
#ifndef TERN_NODE_FSM_H
#define TERN_NODE_FSM_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "batch.h"
#include "idx.h"
#include "repl.h"

/* What the state machine needs from the node that runs it. */
struct node_fsm_ops
{
    /* Work is pending (an unflushed apply): run one more loop iteration
     * soon. */
    void (*kick)(void *arg);
    /* ENOSPC met: give the disk reserve back to the file system and tell
     * raft the disk is full. why is for the log. Returns whether a reserve
     * was held (then a retry can succeed). */
    bool (*release_disk)(void *arg, const char *why);
    /* The index cannot go on (a failed sync, a failed reopen): stop the
     * node with exit code 1 from the loop, not from inside repl. */
    void (*fail)(void *arg);
};

/* Loop thread only; embedded in struct node, no allocation but the
 * index's own. */
struct node_fsm
{
    struct node_fsm_ops ops;
    void *arg;
    uv_loop_t *loop;              /* uv_now for the rate limits; borrowed */
    struct node_batcher *batcher; /* routes our proposals' results */
    struct idx_env *idx;          /* owned; NULL when closed */
    char dir[PATH_MAX];           /* DATA_DIR/index */
    uint32_t max_message;         /* max_message_bytes */
    uint64_t segment_bytes;       /* log_segment_bytes */
    uint64_t map_bytes;           /* index_map_bytes: LMDB's map size */
    uint64_t reopened_at;         /* uv_now of the last reopen */
    int apply_err;                /* last failed apply's code, 0 after one */
    uint64_t apply_err_logged_at; /* uv_now */
    uint64_t map_full_logged_at;  /* uv_now of the last "index map full" */
    bool dirty;                   /* applied since the last idx_flush */
    bool failed;                  /* ops.fail was called */
    bool newer_logged;            /* idx_refused_newer was logged ... */
    uint64_t newer_logged_pos;    /* ... for the record at this position */
    struct idx_result results[NODE_MAX_CMDS_PER_ENTRY];
};

/* Set f up (no index yet). loop, batcher and arg are borrowed for f's
 * lifetime; ops is copied. */
void node_fsm_init(struct node_fsm *f,
                   uv_loop_t *loop,
                   struct node_batcher *batcher,
                   const struct node_fsm_ops *ops,
                   void *arg);
/* Open the index in dir (copied) with LMDB's map of map_bytes and log
 * what it holds. 0, or a code with errmsg. */
int node_fsm_open(struct node_fsm *f,
                  const char *dir,
                  uint32_t max_message,
                  uint64_t segment_bytes,
                  uint64_t map_bytes,
                  char *errmsg);
/* OUT: the repl_fsm callbacks over f (out->arg = f). */
void node_fsm_callbacks(struct node_fsm *f, struct repl_fsm *out);
/* Group commit: idx_flush if anything was applied since the last flush.
 * Returns whether it flushed (new data may be visible). */
bool node_fsm_flush(struct node_fsm *f);
/* Close the index (applied but unflushed changes are replayed from the
 * raft log at the next start). */
void node_fsm_close(struct node_fsm *f);

#endif /* TERN_NODE_FSM_H */
