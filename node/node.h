/*
 * node/ private header: the pieces of ternd (prefix node_) that main.c,
 * node.c and server.c share, factored so the unit tests in
 * tests/unit/node/ can drive them without processes:
 *   - config.c: struct node_config from an INI file and command-line flags;
 *   - log.c:    one-line key=value event log on stderr;
 *   - frame.c:  the client-frame state machine over a connection's read
 *               buffer (what to do with the bytes received so far);
 *   - batch.c:  write batching (one raft entry per loop iteration) and the
 *               routing of per-command apply results back to requests;
 *   - server.c: the client protocol server (uv_tcp);
 *   - node.c:   the wiring of xport, repl and idx on one libuv loop.
 * Nothing here is installed or used outside node/ and its tests.
 */
#ifndef TERN_NODE_H
#define TERN_NODE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include <tern_common.h>

#include "idx.h"
#include "proto.h"
#include "repl.h"
#include "xport.h"

/* ---- Intrusive doubly linked list -------------------------------------- */

struct node_list
{
    struct node_list *prev;
    struct node_list *next;
};

#define NODE__CONTAINER(ptr, type, member)                                     \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static inline void node_list_init(struct node_list *l)
{
    l->prev = l;
    l->next = l;
}
static inline bool node_list_empty(const struct node_list *l)
{
    return l->next == l;
}
static inline void node_list_push(struct node_list *l, struct node_list *e)
{
    e->prev = l->prev;
    e->next = l;
    l->prev->next = e;
    l->prev = e;
}
static inline void node_list_remove(struct node_list *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e;
    e->next = e;
}

/* ---- Logging (log.c) --------------------------------------------------- */

enum node_log_level {
    NODE_LOG_ERROR = 0,
    NODE_LOG_WARN,
    NODE_LOG_INFO,
    NODE_LOG_DEBUG,
};

/* Set the node id stamped on every line and the most verbose level shown.
 * Before this call lines carry node=0 and level INFO is shown. */
void node_log_setup(uint64_t node_id, enum node_log_level level);
bool node_log_enabled(enum node_log_level level);
/* Write one line "ts=... level=... node=... msg="msg" <kv>" to stderr with
 * a single write(2). kv_fmt (may be NULL) formats the key=value tail. */
void node_log(enum node_log_level level,
              const char *msg,
              const char *kv_fmt,
              ...) __attribute__((format(printf, 3, 4)));
/* "error" / "warn" / "info" / "debug" -> level; -1 if unknown. */
int node_log_level_parse(const char *s);
const char *node_log_level_name(enum node_log_level level);

/* ---- Configuration (config.c) ------------------------------------------ */

struct node_peer
{
    uint64_t id;
    char *raft_addr;   /* owned */
    char *client_addr; /* owned */
};

struct node_config
{
    uint64_t id;
    char *data_dir;    /* owned; NULL until set */
    char *client_addr; /* owned */
    char *raft_addr;   /* owned */
    char *transport;   /* owned; "tcp" | "shm" | "rdma" | "auto" */
    char *shm_dir;     /* owned; transport shm: socket directory ("/tmp") */
    char *pid_file;    /* owned; NULL: none */
    int log_level;     /* enum node_log_level */
    unsigned election_timeout_ms;
    unsigned heartbeat_ms;
    uint64_t snapshot_bytes;
    unsigned snapshot_trailing;
    int memory_durability; /* [raft] durability = memory (default disk) */
    unsigned busy_poll_us; /* [node] busy_poll_us: shm leader busy-poll */
    unsigned follower_busy_poll_us; /* [node] the same while not leader */
    uint64_t max_message_bytes;
    uint64_t max_frame_bytes;
    uint64_t min_free_disk_bytes;
    uint64_t reserve_disk_bytes; /* [limits] reserve_disk_bytes (disk.c) */
    struct node_peer *peers; /* owned array */
    unsigned n_peers;
    bool help; /* --help was given: print usage, do nothing else */
};

#define NODE_DEFAULT_ELECTION_TIMEOUT_MS 150u
#define NODE_DEFAULT_HEARTBEAT_MS        15u
#define NODE_DEFAULT_SNAPSHOT_BYTES      (64ull << 20)
#define NODE_DEFAULT_SNAPSHOT_TRAILING   256u
#define NODE_DEFAULT_MAX_MESSAGE         (4ull << 20)
#define NODE_DEFAULT_MAX_FRAME           (16ull << 20)
#define NODE_DEFAULT_MIN_FREE_DISK       (64ull << 20)
#define NODE_DEFAULT_RESERVE_DISK        (32ull << 20)
#define NODE_DEFAULT_BUSY_POLL_US        0u
/* Longest shm_dir: room for "/tern-shm-<ipv4>-<port>.sock" in a unix
 * socket path (107 bytes). */
#define NODE_SHM_DIR_MAX 64u
/* Room in a frame for everything around the largest message. */
#define NODE_FRAME_OVERHEAD 4096u

/* Fill c with defaults (no id, no addresses, no peers). */
void node_config_init(struct node_config *c);
/* Release what c owns. */
void node_config_free(struct node_config *c);
/* Parse argv (argv[0] skipped): --dev defaults first, then the --config
 * file, then the flags, so flags override the file. Validates the result.
 * 0, or TERN_EINVAL with errmsg (main exits 2). */
int node_config_parse_args(struct node_config *c,
                           int argc,
                           char **argv,
                           char *errmsg);
/* Apply INI text (used for files and tests); unknown sections and keys
 * are errors. path is only used in messages. */
int node_config_load_string(struct node_config *c,
                            const char *text,
                            const char *path,
                            char *errmsg);
int node_config_load_file(struct node_config *c,
                          const char *path,
                          char *errmsg);
/* Complete (self peer <-> own addresses) and check invariants. */
int node_config_validate(struct node_config *c, char *errmsg);
/* The peer with this id, or NULL. Borrowed from c. */
const struct node_peer *node_config_peer(const struct node_config *c,
                                         uint64_t id);
/* Usage text including the INI format. Static string. */
const char *node_config_usage(void);

/* ---- Frame state machine (frame.c) ------------------------------------- */

enum node_frame_action {
    NODE_FRAME_NEED_MORE = 0, /* wait for more bytes */
    NODE_FRAME_REQUEST,       /* req is a decoded request */
    NODE_FRAME_ERROR,         /* answer the error, skip the frame, go on */
    NODE_FRAME_FATAL,         /* answer the error, then close */
};

struct node_frame
{
    enum node_frame_action action;
    size_t consumed; /* bytes of the buffer this frame used */
    uint8_t op;      /* request op (ERROR/FATAL: op for proto_encode_error) */
    uint64_t request_id;
    int status;               /* ERROR/FATAL: tern code to answer */
    char message[128];        /* ERROR/FATAL: human-readable detail */
    struct proto_request req; /* REQUEST: borrows from the buffer */
};

/* Look at the bytes received so far (buf, len) and decide. max_body is the
 * largest accepted body. Never reads beyond len. */
void node_frame_next(const uint8_t *buf,
                     size_t len,
                     uint32_t max_body,
                     struct node_frame *out);

/* ---- Write batching (batch.c) ------------------------------------------ */

/* One write request waiting for its raft entry to be applied. Allocated
 * and freed by the batcher; owner is the server's connection, which holds
 * a reference for each request until it is answered. */
struct node_wreq
{
    struct node_list link;
    void *owner;
    uint64_t request_id;
    uint8_t op;
    int status;               /* final: 0 or a tern code */
    struct idx_result result; /* valid when status == 0 */
    /* GROUP_FETCH: a read that rides a READ_BARRIER command; what to serve
     * once the barrier is applied (names NUL-terminated). */
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    uint32_t max_msgs;
    uint32_t max_bytes;
    uint32_t wait_ms;
};

/* One raft command entry in the making or in flight. */
struct node_batch
{
    struct node_list link;
    struct node_list wreqs;
    unsigned n_cmds;
    struct tern_wbuf w; /* entry bytes (moved to repl on propose) */
    size_t len;         /* sealed entry length (without padding) */
    uint8_t head[24];   /* the sealed entry's header (identity) */
    uint64_t index;     /* raft index once proposed */
    bool applied;       /* results were routed */
    struct node_batcher *batcher;
};

struct node_batcher_ops
{
    /* Propose the sealed entry. buf is tern_malloc'd, transferred on 0.
     * OUT: *index. The completion must later reach
     * node_batcher_proposed(batch, status, index). */
    int (*propose)(void *arg,
                   struct node_batch *batch,
                   void *buf,
                   size_t len,
                   uint64_t *index);
    /* Answer w (w->status, w->result). w is freed after the call. */
    void (*respond)(void *arg, struct node_wreq *w);
    /* Leader timestamp for new entries (ms since the epoch). */
    uint64_t (*timestamp_ms)(void *arg);
};

struct node_batcher
{
    struct node_batcher_ops ops;
    void *arg;
    size_t max_entry_bytes;    /* seal an entry at this size */
    unsigned max_cmds;         /* and at this many commands */
    unsigned max_inflight;     /* proposals outstanding */
    size_t max_inflight_bytes; /* entry bytes outstanding (at least one) */
    unsigned max_queued;       /* sealed entries waiting: congested beyond */
    struct node_batch *open;
    struct node_list queued;
    struct node_list inflight;
    struct node_list done;
    unsigned n_queued;
    unsigned n_inflight;
    unsigned n_done;
    size_t inflight_bytes;
};

#define NODE_MAX_CMDS_PER_ENTRY 4096u

void node_batcher_init(struct node_batcher *b,
                       const struct node_batcher_ops *ops,
                       void *arg);
/* Add one write request (QUEUE_CREATE/DELETE, PRODUCE, GROUP_COMMIT) to
 * the open entry; r borrows from the frame and is copied. On error
 * nothing is queued and nothing is answered: TERN_EINVAL for an op that is
 * not a write, a produce without messages or with a producer id and seq 0;
 * TERN_EBADNAME for an empty or long name; TERN_EMALFORMED; -ENOMEM. */
int node_batcher_add(struct node_batcher *b,
                     void *owner,
                     uint64_t request_id,
                     const struct proto_request *r);
/* Too much is waiting: stop reading client connections. */
bool node_batcher_congested(const struct node_batcher *b);
/* Seal the open entry and propose queued entries up to max_inflight. */
void node_batcher_propose(struct node_batcher *b);
/* FSM apply hook: route results if index is one of our proposals and the
 * bytes are the ones we proposed. */
void node_batcher_on_apply(struct node_batcher *b,
                           uint64_t index,
                           const void *entry,
                           size_t len,
                           const struct idx_result *results,
                           unsigned n);
/* Propose completion (repl_propose_cb). status 0: wait for the next flush;
 * otherwise answer every request of the batch with status now. */
void node_batcher_proposed(struct node_batch *batch,
                           int status,
                           uint64_t index);
/* idx_flush covered everything applied so far: answer the done batches. */
void node_batcher_flushed(struct node_batcher *b);
/* Answer every request not yet proposed with status (shutdown). */
void node_batcher_fail_pending(struct node_batcher *b, int status);
bool node_batcher_idle(const struct node_batcher *b);

/* ---- The node (node.c) and its client server (server.c) ---------------- */

struct node;
struct node_server;

/* Run a node until it is stopped by SIGTERM/SIGINT. Returns the process
 * exit code. c is borrowed. */
int node_run(const struct node_config *c);

/* What server.c needs from node.c. */
struct idx_env *node_idx(struct node *n);
struct node_batcher *node_batcher(struct node *n);
const struct node_config *node_config(struct node *n);
void node_status(struct node *n, struct repl_status *out);
/* The replication latency counters (repl_get_latency) into *out
 * (caller-owned; zeroed when raft is not running); reset: start over. */
void node_latency(struct node *n, struct repl_latency *out, bool reset);
/* 0, or TERN_EFULL with a message while the disk alarm is on (disk.c;
 * statvfs, cached ~100 ms). */
int node_disk_check(struct node *n, char *errmsg);

/* Disk-space alarm and reserve file (disk.c has the rules). Loop thread
 * only; embedded in struct node, no allocation. */
struct node_disk {
    char dir[PATH_MAX];          /* data dir, statvfs'd */
    char reserve_path[PATH_MAX]; /* DATA_DIR/disk-reserve */
    uint64_t min_free;           /* min_free_disk_bytes */
    uint64_t reserve_bytes;      /* reserve_disk_bytes; 0: no reserve */
    uint64_t free;               /* bytes available, last statvfs */
    uint64_t checked_at;         /* uv_now of the last statvfs */
    uint64_t releases;           /* times the reserve was given up */
    bool checked;
    bool alarm;   /* refusing writes */
    bool held;    /* the reserve file is allocated */
    bool changed; /* alarm flipped since the last node_disk_poll */
    bool make_failed_logged;
};
/* Set up d for dir (copied) and take the first reading; allocates the
 * reserve if it is missing and the space allows. 0 or TERN_EINVAL. */
int node_disk_init(struct node_disk *d,
                   const char *dir,
                   uint64_t min_free,
                   uint64_t reserve_bytes,
                   char *errmsg);
/* Re-read the free space (at most every 100 ms unless force; now is
 * uv_now) and update the alarm and the reserve. True if the alarm flipped
 * since the last call. */
bool node_disk_poll(struct node_disk *d, uint64_t now, bool force);
/* ENOSPC met (or free space below the minimum): delete the reserve, alarm
 * on. why is for the log. */
void node_disk_release(struct node_disk *d, const char *why);
/* 0, or TERN_EFULL with a message into errmsg while the alarm is on. */
int node_disk_refuse(const struct node_disk *d, char *errmsg);
/* Ask for one more loop iteration soon (flush/propose pending work). */
void node_kick(struct node *n);

int node_server_new(struct node *n,
                    uv_loop_t *loop,
                    const char *addr,
                    struct node_server **out,
                    char *errmsg);
/* Stop accepting, close every connection; cb once all handles closed. */
void node_server_close(struct node_server *s, void (*cb)(void *arg), void *arg);
/* The batcher's respond op. */
void node_server_respond(void *arg, struct node_wreq *w);
/* Re-check parked FETCHes after a flush that made new data visible. */
void node_server_wake(struct node_server *s);
/* Resume/stop reading according to the batcher's congestion. */
void node_server_update_reading(struct node_server *s);

#endif /* TERN_NODE_H */
