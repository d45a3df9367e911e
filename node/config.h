/*
 * ternd's configuration (config.c): struct node_config, its defaults,
 * and the parsers of the INI file and the command-line flags (the INI
 * format is documented at the top of config.c). Private to node/ and its
 * tests.
 */
#ifndef TERN_NODE_CONFIG_H
#define TERN_NODE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

struct node_peer
{
    uint64_t id;
    char *raft_addr;   /* owned */
    char *client_addr; /* owned */
};

struct auth_secret; /* auth.h */

/* [raft] entry_checksum: whether a leader flags its entries XXH3
 * (index/cmd.c). auto: once the cluster has switched (idx_xxh3_in_use: a
 * new cluster, or the last entry applied was flagged); xxh3: always (every
 * node runs a release that knows the flag: this switches an upgraded
 * cluster, and auto keeps it switched); xxh32: never. */
enum node_entry_checksum {
    NODE_ENTRY_CHECKSUM_AUTO = 0,
    NODE_ENTRY_CHECKSUM_XXH3,
    NODE_ENTRY_CHECKSUM_XXH32,
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
    char *log_file;    /* owned; [log] file: append to it (NULL: stderr);
                          reopened on SIGHUP */
    int log_format;    /* [log] format: enum node_log_format */
    unsigned election_timeout_ms;
    unsigned heartbeat_ms;
    uint64_t snapshot_bytes;
    unsigned snapshot_trailing;
    int memory_durability;       /* [raft] durability = memory (default disk) */
    int tern_log_store;          /* the raft log store is tern's own; set
                                    by [raft] log_store = tern, or by auto
                                    (the default) in node_pick_log_store */
    int log_store_auto;          /* [raft] log_store = auto (the default):
                                    picked from the raft directory */
    const char *log_store_why;   /* why that store (static text), set by
                                    node_pick_log_store */
    uint64_t raft_segment_bytes; /* [raft] segment_bytes (tern store) */
    int entry_checksum;    /* [raft] entry_checksum: NODE_ENTRY_CHECKSUM_* */
    unsigned busy_poll_us; /* [node] busy_poll_us: shm leader busy-poll */
    unsigned follower_busy_poll_us; /* [node] the same while not leader */
    unsigned adaptive_poll_us;      /* [node] adaptive poll cap; 0 = off */
    uint64_t max_message_bytes;
    uint64_t log_segment_bytes; /* [node]: index/ segments + checkpoints */
    uint64_t index_map_bytes;   /* [node]: LMDB's map size (address space) */
    uint64_t max_frame_bytes;
    uint64_t min_free_disk_bytes;
    uint64_t reserve_disk_bytes; /* [limits] reserve_disk_bytes (disk.c) */
    /* Data directory identity and privacy (ident.c) */
    char *cluster_name;      /* owned; [node] cluster_name; NULL: "tern" */
    int allow_open_data_dir; /* [node] allow_open_data_dir (default 0) */
    int join;                /* [node] join: join a running cluster (never
                                bootstrap); set by validate when [peers]
                                does not list this node */
    uint64_t max_term_jump;  /* [raft] max_term_jump (raft/io.c) */
    int auto_rejoin;         /* [raft] auto_rejoin (raft/member.c; default
                                1) */
    int rejoin_on_corrupt;   /* [raft] rejoin_on_corrupt: a raft log that
                                fails its checksums at start is moved aside
                                and the node starts in join mode (node.c;
                                default 1) */
    /* [node] retention (docs/MESSAGES.md, "Retention") */
    unsigned retention_interval_ms; /* retention pass period; 0 = off */
    unsigned retention_page;        /* queues per retention pass */
    unsigned clean_batch_rows;      /* cleaner rows per loop iteration */
    /* [node] the timer pass, [limits] max_delay_ms (docs/WORKQUEUES.md,
     * "Delayed and scheduled messages") */
    unsigned timer_interval_ms; /* timer pass period; 0 = off */
    unsigned timer_batch;       /* timer keys per TIMER_FIRE */
    uint64_t max_delay_ms;      /* furthest due time a produce may ask */
    /* [security]: how nodes prove cluster membership to each other */
    int peer_auth;             /* enum node_peer_auth */
    char *cluster_ca;          /* owned; PEM CA that signs node certs */
    char *node_cert;           /* owned; PEM cert, CN "node-<id>" */
    char *node_key;            /* owned; PEM private key of node_cert */
    char *cluster_secret_file; /* owned; shm/verbs handshake key file */
    unsigned peer_handshake_timeout_ms; /* inbound peer handshakes (tcp
                                           TLS + HELLO, shm proof) */
    unsigned peer_max_pending;          /* peer handshakes at once */
    bool dev;                           /* --dev was given */
    /* [security] client port TLS (node/ctls.c) */
    int client_tls;    /* enum node_client_tls */
    char *client_cert; /* owned; NULL: node_cert */
    char *client_key;  /* owned; NULL: node_key */
    char *client_ca;   /* owned; NULL: clients present no certificate */
    /* [security] client authentication (docs/AUTH.md) */
    int client_auth;            /* enum node_client_auth */
    char *bootstrap_admin;      /* owned; NULL: none */
    char *bootstrap_admin_cred; /* owned; auth_scram_cred_format text */
    /* [security] login bounds (server.c serve_auth, access.c) */
    unsigned auth_failure_delay_ms;    /* answer of a failed login */
    unsigned auth_failures_per_minute; /* per source address; 0: no cap */
    unsigned auth_failure_sources;     /* addresses counted at once */
    /* Not a key: the cluster secret node.c loaded from
     * cluster_secret_file at start, set on its view of the configuration
     * (borrowed from the node; NULL: no file configured). */
    const struct auth_secret *cluster_secret;
    /* [limits]: the client port's resource bounds (node/server.c) */
    uint64_t client_memory_bytes;      /* read buffers + queued answers */
    uint64_t max_conn_queued_bytes;    /* queued answers per connection */
    unsigned max_connections;          /* client connections in total */
    unsigned max_connections_per_addr; /* per source address */
    unsigned idle_timeout_ms;          /* no request, nothing pending */
    unsigned frame_timeout_ms;         /* a started frame must complete */
    unsigned slow_reader_timeout_ms;   /* stalled answers or a paused
                                          connection without progress */
    unsigned max_parked;               /* long polls in total */
    unsigned max_parked_per_conn;      /* long polls per connection */
    unsigned list_page_max;            /* queues per QUEUE_LIST page */
    unsigned fetch_scan_max;           /* a tag-filtered fetch's scan */
    unsigned fetch_threads;            /* FETCHes read off the loop */
    unsigned shared_prefetch;          /* leases one shared consumer holds */
    unsigned claim_lease_min_ms;       /* bounds of a CLAIM's lease */
    unsigned claim_lease_max_ms;
    unsigned status_max_rows; /* lease rows one GROUP_STATUS walks */
    /* [metrics]: the metrics and health endpoint (node/metrics.c) */
    char *metrics_listen;             /* owned; NULL: no endpoint */
    char *metrics_token_file;         /* owned; NULL: no bearer token asked */
    unsigned metrics_max_queues;      /* queues reported per scrape */
    unsigned metrics_max_groups;      /* groups reported per scrape */
    unsigned metrics_max_connections; /* HTTP connections at once */
    unsigned metrics_timeout_s;       /* per HTTP connection */
    uint64_t metrics_ready_max_lag;   /* /readyz: commit - applied bound */
    struct node_peer *peers;          /* owned array */
    unsigned n_peers;
    bool help; /* --help was given: print usage, do nothing else */
};

/* [security] peer_auth: TLS = mutual TLS on tcp and the cluster secret on
 * shm/verbs (the default); NONE = nodes accept any peer (only with --dev
 * or said explicitly, and logged as a warning). */
enum node_peer_auth {
    NODE_PEER_AUTH_TLS = 0,
    NODE_PEER_AUTH_NONE = 1,
};

/* [security] client_tls: AUTO = on unless client_addr's host is a
 * loopback address (127.0.0.0/8); ON; OFF. */
enum node_client_tls {
    NODE_CLIENT_TLS_AUTO = 0,
    NODE_CLIENT_TLS_ON = 1,
    NODE_CLIENT_TLS_OFF = 2,
};

/* [security] client_auth: AUTO = required unless --dev or client_addr's
 * host is loopback; ON = every connection authenticates (AUTH_START)
 * before any op but STATUS; OFF = connections that do not authenticate
 * may do everything in namespace "default" (logged as a warning when
 * client_addr is not loopback). */
enum node_client_auth {
    NODE_CLIENT_AUTH_AUTO = 0,
    NODE_CLIENT_AUTH_ON = 1,
    NODE_CLIENT_AUTH_OFF = 2,
};

#define NODE_DEFAULT_PEER_HANDSHAKE_MS   5000u
#define NODE_DEFAULT_PEER_MAX_PENDING    64u
#define NODE_DEFAULT_ELECTION_TIMEOUT_MS 150u
#define NODE_DEFAULT_HEARTBEAT_MS        15u
#define NODE_DEFAULT_SNAPSHOT_BYTES      (64ull << 20)
#define NODE_DEFAULT_SNAPSHOT_TRAILING   256u
#define NODE_DEFAULT_MAX_MESSAGE         (4ull << 20)
#define NODE_DEFAULT_LOG_SEGMENT         (64ull << 20)
#define NODE_DEFAULT_INDEX_MAP           (64ull << 30)
#define NODE_DEFAULT_MAX_FRAME           (16ull << 20)
#define NODE_DEFAULT_MIN_FREE_DISK       (64ull << 20)
#define NODE_DEFAULT_RESERVE_DISK        (32ull << 20)
#define NODE_DEFAULT_BUSY_POLL_US        0u
#define NODE_DEFAULT_ADAPTIVE_POLL_US    200u
#define NODE_DEFAULT_CLIENT_MEMORY       (256ull << 20)
#define NODE_DEFAULT_MAX_CONN_QUEUED     (32ull << 20)
#define NODE_DEFAULT_MAX_CONNECTIONS     4096u
#define NODE_DEFAULT_MAX_CONNS_PER_ADDR  256u
#define NODE_DEFAULT_IDLE_TIMEOUT_MS     600000u
#define NODE_DEFAULT_FRAME_TIMEOUT_MS    30000u
#define NODE_DEFAULT_SLOW_READER_MS      30000u
#define NODE_DEFAULT_MAX_PARKED          10000u
#define NODE_DEFAULT_MAX_PARKED_PER_CONN 64u
#define NODE_DEFAULT_LIST_PAGE_MAX       1000u
#define NODE_DEFAULT_FETCH_SCAN_MAX      100000u
#define NODE_DEFAULT_FETCH_THREADS       2u
/* The thread pool ternd sizes (UV_THREADPOOL_SIZE) holds these beside the
 * 4 threads libuv gives raft_uv, checkpoints and backups. */
#define NODE_FETCH_THREADS_MAX          16u
#define NODE_DEFAULT_SHARED_PREFETCH    256u
#define NODE_DEFAULT_CLAIM_LEASE_MIN_MS 1000u
#define NODE_DEFAULT_CLAIM_LEASE_MAX_MS 300000u
#define NODE_DEFAULT_CLAIM_LEASE_MS     30000u /* a CLAIM asking 0 */
#define NODE_DEFAULT_STATUS_MAX_ROWS    65536u
#define NODE_DEFAULT_CLUSTER_NAME       "tern"
#define NODE_DEFAULT_AUTH_FAILURE_DELAY 500u
#define NODE_DEFAULT_AUTH_FAILURES_MIN  20u
#define NODE_DEFAULT_AUTH_FAIL_SOURCES  4096u
#define NODE_CLUSTER_NAME_MAX           64u
#define NODE_DEFAULT_MAX_TERM_JUMP      (1ull << 20)

/* [metrics] keys */
#define NODE_DEFAULT_METRICS_MAX_QUEUES 1000u
#define NODE_DEFAULT_METRICS_MAX_GROUPS 1000u
#define NODE_DEFAULT_METRICS_MAX_CONNS  16u
#define NODE_DEFAULT_METRICS_TIMEOUT_S  10u
#define NODE_DEFAULT_METRICS_READY_LAG  1000u

/* [node] retention keys */
#define NODE_DEFAULT_RETENTION_INTERVAL_MS 1000u
#define NODE_DEFAULT_RETENTION_PAGE        1024u
#define NODE_DEFAULT_CLEAN_BATCH_ROWS      1024u
/* [node] timer pass and [limits] max_delay_ms (40 days) */
#define NODE_DEFAULT_TIMER_INTERVAL_MS 100u
#define NODE_DEFAULT_TIMER_BATCH       256u
#define NODE_DEFAULT_MAX_DELAY_MS      (40ull * 24 * 3600 * 1000)
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
/* The cluster name rule: 1..NODE_CLUSTER_NAME_MAX bytes of printable
 * ASCII without spaces (0x21..0x7e). */
bool node_config_cluster_name_valid(const char *name);
/* c's cluster name, the default if unset. Borrowed from c. */
const char *node_config_cluster_name(const struct node_config *c);
/* The peer with this id, or NULL. Borrowed from c. */
const struct node_peer *node_config_peer(const struct node_config *c,
                                         uint64_t id);
/* Whether the client port speaks TLS: client_tls resolved against
 * client_addr (auto: off only for a 127.0.0.0/8 host). */
bool node_config_client_tls(const struct node_config *c);
/* Whether the client port requires authentication: client_auth resolved
 * against --dev and client_addr (auto: off for --dev or a 127.0.0.0/8
 * host). */
bool node_config_client_auth(const struct node_config *c);
/* Whether client_addr's host is in 127.0.0.0/8. */
bool node_config_client_loopback(const struct node_config *c);
/* The certificate and key the client port presents (client_cert/key, else
 * node_cert/key; NULL when neither is set). Borrowed from c. */
const char *node_config_client_cert(const struct node_config *c);
const char *node_config_client_key(const struct node_config *c);
/* Usage text including the INI format. Static string. */
const char *node_config_usage(void);

#endif /* TERN_NODE_CONFIG_H */
