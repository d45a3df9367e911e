/*
 * ternd configuration: defaults, then `--dev`, then an INI file
 * (`--config FILE`, parsed with libinih), then command-line flags; later
 * sources override earlier ones. A `--peer` flag replaces the whole
 * [peers] table of the file.
 *
 * INI format (every key optional unless noted; sizes accept K/M/G suffixes
 * meaning KiB/MiB/GiB):
 *
 *   [node]
 *   id          = 1                 ; required, > 0
 *   data_dir    = /var/lib/tern     ; required; raft/ and index/ inside
 *   client_addr = 127.0.0.1:7401    ; client protocol listen address
 *   raft_addr   = 127.0.0.1:7501    ; raft transport listen address
 *   transport   = tcp               ; tcp | shm | rdma | auto (see below)
 *   shm_dir     = /tmp              ; transport=shm: directory of the sockets
 *   busy_poll_us = 0                ; transport=shm|tcp|rdma: while
 *                                   ; leader, spin up to this long for
 *                                   ; answers after a send
 *                                   ; (node/transport.c); 0 = off
 *   follower_busy_poll_us = 0       ; the same while not
 *                                   ; leader: spin for the next
 *                                   ; AppendEntries after each answer
 *                                   ; (costs a CPU per node under load)
 *   adaptive_poll_us = 200          ; transport=shm|tcp (rdma: ignored),
 *                                   ; durability=memory (disk: off),
 *                                   ; while busy-polling is off: spin
 *                                   ; about this long (at most 1.5 times)
 *                                   ; per send, only while the recent
 *                                   ; exchanges came back within 16
 *                                   ; times it (a follower wakes shortly
 *                                   ; before the next AppendEntries is
 *                                   ; due; rdma/adapt.c); an idle node
 *                                   ; sleeps; 0 = off
 *   log_level   = info              ; error | warn | info | debug
 *   pid_file    = /run/tern/ternd.pid ; write the pid here (removed at a
 *                                   ; clean stop)
 *   cluster_name = tern             ; recorded in DATA_DIR/IDENTITY with the
 *                                   ; id; a data dir of another cluster or
 *                                   ; node is refused (node/ident.c);
 *                                   ; printable ASCII, no spaces, 1..64
 *   allow_open_data_dir = false     ; true: start even if the data dir is
 *                                   ; group/world accessible (a warning)
 *   join = false                    ; true: this node joins a running
 *                                   ; cluster (`tern cluster add`): it
 *                                   ; never bootstraps a configuration and
 *                                   ; waits for the leader; implied when
 *                                   ; [peers] does not list this node
 *   log_segment_bytes = 64M         ; commit-log segment size, also the
 *                                   ; checkpoint interval (index/ckpt.c:
 *                                   ; keep it the same on every node);
 *                                   ; retention frees whole segments
 *                                   ; (4K..1G)
 *   index_map_bytes = 64G           ; LMDB's map: the largest the index
 *                                   ; may grow (address space only: the
 *                                   ; file grows as rows are written);
 *                                   ; about 150 bytes per message with a
 *                                   ; key; 16M..16384G. Reached, the
 *                                   ; node logs "index map full" and
 *                                   ; stops (fail-stop); restarted with
 *                                   ; a larger map it loses nothing
 *   retention_interval_ms = 1000    ; a writable leader plans trims
 *                                   ; (trim by max_age) this often; 0 = off
 *   retention_page = 1024           ; queues planned per pass (1..65536)
 *   clean_batch_rows = 1024         ; LMDB rows the cleaner deletes per
 *                                   ; loop iteration (>= 1; index/clean.c)
 *   timer_interval_ms = 100         ; a writable leader fires the delayed
 *                                   ; messages come due this often; 0 = off
 *   timer_batch = 256               ; timers per TIMER_FIRE (1..1024; and
 *                                   ; at most 4 MiB of messages)
 *
 *   [log]
 *   file   = /var/log/tern/ternd.log ; append the event log to this file
 *                                  ; instead of stderr; reopened on SIGHUP
 *                                  ; (logrotate: rename, then SIGHUP)
 *   format = text                  ; text (key=value) | json (one object
 *                                  ; per line); node/log.c
 *
 *   [raft]
 *   election_timeout_ms      = 150
 *   heartbeat_ms             = 15  ; < election_timeout_ms
 *   snapshot_threshold_bytes = 64M
 *   snapshot_trailing        = 256
 *   durability               = disk  ; disk | memory (same on all nodes)
 *   log_store                = auto  ; auto | tern (tern's own store,
 *                                   ; tlog/, docs/LOGSTORE.md) | uv
 *                                   ; (libraft's raft_uv); a raft
 *                                   ; directory stays with the store that
 *                                   ; made it: auto keeps the one it
 *                                   ; finds, tern for a new directory
 *   segment_bytes            = 8M    ; log_store = tern: a raft segment
 *                                   ; file's size (64K..1G)
 *   entry_checksum           = auto  ; auto | xxh3 | xxh32: whether a
 *                                   ; leader flags its entries XXH3
 *                                   ; (index/cmd.c); auto: once the
 *                                   ; cluster has switched (a new one, or
 *                                   ; its last entry was); xxh3: switch
 *                                   ; an upgraded cluster
 *   max_term_jump            = 1048576 ; refuse raft messages whose term is
 *                                   ; more than this above ours (raft/io.c)
 *   auto_rejoin              = true ; the leader removes and adds back a
 *                                   ; voter that lost data it had
 *                                   ; acknowledged (docs/MEMBERSHIP.md)
 *   rejoin_on_corrupt        = true ; a raft log that fails its checksums
 *                                   ; at start is moved aside and the
 *                                   ; node rejoins (docs/MEMBERSHIP.md)
 *
 *   [limits]
 *   max_message_bytes   = 4M       ; largest message payload
 *   max_frame_bytes     = 16M      ; largest client frame body
 *   min_free_disk_bytes = 64M      ; writes fail with TERN_EFULL below
 *   reserve_disk_bytes  = 32M      ; space kept back for in-flight entries
 *                                  ; (DATA_DIR/disk-reserve, node/disk.c)
 *   client_memory_bytes   = 256M   ; all client read buffers + queued
 *                                  ; answers (>= max_frame_bytes + 64K)
 *   max_conn_queued_bytes = 32M    ; queued answers of one connection
 *   max_connections       = 4096   ; client connections in total (>= 1;
 *                                  ; RLIMIT_NOFILE is raised to fit)
 *   max_connections_per_addr = 256 ; per source IP (loopback included)
 *   idle_timeout_ms       = 600000 ; no request and nothing pending: close
 *                                  ; (0 = never)
 *   frame_timeout_ms      = 30000  ; a started frame must complete within
 *   slow_reader_timeout_ms = 30000 ; answers pending (or a connection
 *                                  ; paused on a memory bound) without
 *                                  ; progress this long: close
 *   max_parked            = 10000  ; long-poll fetches waiting, in total
 *   max_parked_per_conn   = 64     ; long-poll fetches per connection
 *   list_page_max         = 1000   ; queues per QUEUE_LIST page
 *                                  ; (and groups per MESSAGE_TRACE)
 *   fetch_scan_max        = 100000 ; messages a tag-filtered fetch
 *                                  ; examines per answer (it answers
 *                                  ; with what matched and where to go on)
 *   fetch_threads         = 2      ; FETCHes of many messages read on
 *                                  ; the thread pool at once, beside the
 *                                  ; loop thread (0: all on the loop); a
 *                                  ; next FETCH is read ahead only while
 *                                  ; another stays free, and the one
 *                                  ; after it (both at once from 3)
 *   max_delay_ms          = 3456000000 ; furthest due time (40 days) a
 *                                  ; delayed produce may ask for; further
 *                                  ; is TERN_EINVAL naming the key
 *   shared_prefetch       = 256    ; unacknowledged messages of a shared
 *                                  ; group one consumer may hold
 *   claim_lease_min_ms    = 1000   ; shortest and longest claim of a
 *   claim_lease_max_ms    = 300000 ; stream group's single active
 *                                  ; consumer (CLAIM; 0 asks for 30000);
 *                                  ; outside is TERN_EINVAL naming the key
 *   status_max_rows       = 65536  ; lease rows a GROUP_STATUS answer
 *                                  ; walks (per group and per page; a
 *                                  ; group cut there is marked partial)
 *                                  ; Over a bound the client gets
 *                                  ; TERN_ELIMIT naming the key.
 *
 *   [security]                     ; how nodes prove membership
 *   peer_auth   = tls              ; tls (default) | none (--dev: none)
 *   cluster_ca  = /etc/tern/ca.pem ; PEM CA that signs every node cert
 *   node_cert   = /etc/tern/node1.pem ; this node's cert, CN "node-<id>"
 *   node_key    = /etc/tern/node1.key ; its private key (mode 0600)
 *   cluster_secret_file = /etc/tern/cluster.secret ; shm/rdma handshakes:
 *                                  ; 64 hex digits, mode 0600
 *                                  ; (transport shm with peer_auth = tls:
 *                                  ; required; read once at start, also
 *                                  ; keys the client port's SCRAM answers
 *                                  ; for unknown users)
 *   peer_handshake_timeout_ms = 5000 ; a peer connection must finish its
 *                                  ; handshake (TLS and HELLO on tcp, the
 *                                  ; secret's proofs on shm) within this
 *   peer_max_pending = 64          ; peer handshakes in progress at once
 *                                  ; (tcp, shm, verbs); more are refused
 *   client_tls  = auto             ; client port TLS: auto (default; --dev
 *                                  ; too) = on unless client_addr's host
 *                                  ; is loopback (127.0.0.0/8) | on | off
 *   client_cert = /etc/tern/node1.pem ; presented on the client port
 *                                  ; (default node_cert); its SAN IPs must
 *                                  ; include the address clients connect to
 *   client_key  = /etc/tern/node1.key ; its key (default node_key)
 *   client_ca   = /etc/tern/ca.pem ; optional: clients may present a
 *                                  ; certificate chaining to it (refused
 *                                  ; otherwise); its CN is kept on the
 *                                  ; connection. Unset: none is asked for
 *   client_auth = auto             ; auto (default) = required unless
 *                                  ; --dev or client_addr is loopback |
 *                                  ; on | off (off on a non-loopback
 *                                  ; address is logged as a warning)
 *   bootstrap_admin = admin        ; a leader whose users table is empty
 *   bootstrap_admin_cred = SCRAM-SHA-256$4096:<salt>$<stored>:<server>
 *                                  ; creates this cluster admin once
 *                                  ; (`tern user hash` prints the cred)
 *   auth_failure_delay_ms = 500    ; a failed login (AUTH_START/CONTINUE)
 *                                  ; is answered TERN_EAUTH and closed
 *                                  ; after this wait (0: at once)
 *   auth_failures_per_minute = 20  ; failed logins per source address in
 *                                  ; a minute; then AUTH_START gets
 *                                  ; TERN_ETHROTTLED (0: no cap)
 *   auth_failure_sources = 4096    ; addresses whose failures are counted
 *                                  ; at once (the oldest is forgotten)
 *
 *   [metrics]                      ; HTTP metrics/health endpoint
 *                                  ; (node/metrics.c, docs/OPERATIONS.md)
 *   listen = 127.0.0.1:9401        ; host:port; unset (default): off.
 *                                  ; Bind loopback; expose it only
 *                                  ; behind token_file or a firewall
 *   token_file = /etc/tern/metrics.token ; first line: the bearer token
 *                                  ; every request must carry (mode 0600)
 *   max_queues = 1000              ; queues reported per scrape
 *   max_groups = 1000              ; groups reported per scrape
 *   max_connections = 16           ; HTTP connections at once (1..1024)
 *   connection_timeout_s = 10      ; idle HTTP connection closed after
 *   ready_max_lag = 1000           ; /readyz: applied index at most this
 *                                  ; many entries behind the commit index
 *
 *   [peers]                        ; every voter, this node included
 *   1 = 127.0.0.1:7501,127.0.0.1:7401   ; <id> = <raft_addr>,<client_addr>
 *   2 = 127.0.0.1:7502,127.0.0.1:7402
 *   3 = 127.0.0.1:7503,127.0.0.1:7403
 *
 * If client_addr/raft_addr are missing they are taken from this node's
 * [peers] line; if [peers] is empty the node is a single-node cluster made
 * of itself. Addresses are IPv4 "host:port".
 *
 * Transports (the raft traffic between nodes; node/transport.c builds
 * them):
 *   tcp   plain TCP on raft_addr;
 *   shm   shared-memory rings (same host only) with TCP as the per-peer
 *         fallback (rdma/fallback.c). Each node listens on the unix socket
 *         <shm_dir>/tern-shm-<raft host>-<raft port>.sock, derived from its
 *         raft address, and finds its peers' sockets the same way from
 *         theirs: every node of a cluster must use the same shm_dir;
 *   rdma  RDMA verbs rings with TCP as the per-peer fallback; the verbs
 *         listener uses the raft address (host:port in rdma_cm's port
 *         space; the host must be an IP of an RDMA device). Fails to start
 *         when built without verbs or when no RDMA device exists;
 *   auto  rdma when an RDMA device exists and the verbs listener can be
 *         created on raft_addr, else tcp.
 *
 * Keys: each key is one row of keys[] below (section, INI name, flag, the
 * setter that checks its text, the member of struct node_config it sets
 * and the largest number accepted); the file and the flags share the
 * rows. An INI error names the file, section, key and line, and the first
 * bad line of a file is the one reported.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <auth.h>
#include <idx.h>
#include <tern_common.h>

#include "config.h"
#include "log.h"

static const char usage_text[] =
    "usage: ternd [--config FILE] [options]\n"
    "       ternd --dev            single node: id 1, data ./tern-data,\n"
    "                              client 127.0.0.1:7400, raft "
    "127.0.0.1:7500\n"
    "options (override the file):\n"
    "  --id N                     node id (> 0)\n"
    "  --data-dir DIR             DIR/raft (raft log), DIR/index (queues)\n"
    "  --client-addr H:P          client protocol listen address\n"
    "  --raft-addr H:P            raft transport listen address\n"
    "  --peer ID=RAFTADDR,CLIENTADDR   a voter (repeat; include self)\n"
    "  --election-timeout-ms N    default 150\n"
    "  --heartbeat-ms N           default 15\n"
    "  --snapshot-bytes N         applied bytes between snapshots "
    "(default 64M)\n"
    "  --snapshot-trailing N      entries kept after a snapshot (default "
    "256)\n"
    "  --retention-interval-ms N  leader's retention pass period (default "
    "1000; "
    "0: off)\n"
    "  --retention-page N         queues per retention pass (default 1024)\n"
    "  --clean-batch-rows N       rows the cleaner deletes per iteration "
    "(default 1024)\n"
    "  --max-message-bytes N      default 4M\n"
    "  --max-frame-bytes N        default 16M\n"
    "  --min-free-disk-bytes N    default 64M\n"
    "  --reserve-disk-bytes N     default 32M (0: none)\n"
    "  --client-memory-bytes N    client buffers + queued answers "
    "(default 256M)\n"
    "  --max-conn-queued-bytes N  queued answers per connection (default "
    "32M)\n"
    "  --max-connections N        client connections (default 4096)\n"
    "  --max-connections-per-addr N  per source address (default 256)\n"
    "  --idle-timeout-ms N        close idle connections (default 600000; "
    "0: never)\n"
    "  --frame-timeout-ms N       a started frame must complete (default "
    "30000)\n"
    "  --slow-reader-timeout-ms N answers not drained: close (default "
    "30000)\n"
    "  --max-parked N             long-poll fetches in total (default "
    "10000)\n"
    "  --max-parked-per-conn N    long-poll fetches per connection "
    "(default 64)\n"
    "  --list-page-max N          queues per list page (default 1000)\n"
    "  --fetch-scan-max N         messages a tag-filtered fetch examines\n"
    "                             per answer (default 100000)\n"
    "  --fetch-threads N          FETCHes read on the thread pool at once\n"
    "                             (default 2; 0: all on the loop)\n"
    "  --log-level L              error|warn|info|debug (default info)\n"
    "  --log-file F               append the log to F, reopened on SIGHUP\n"
    "                             (default: stderr)\n"
    "  --log-format F             text (default) | json\n"
    "  --transport T              raft transport: tcp (default), shm "
    "(shared memory,\n"
    "                             tcp fallback), rdma (verbs, tcp fallback) "
    "or auto\n"
    "  --shm-dir DIR              shm sockets directory (default /tmp; "
    "same on all nodes)\n"
    "  --log-store S              auto (default: the store the raft "
    "directory holds,\n"
    "                             tern for a new one), tern (tern's own "
    "raft log\n"
    "                             store, docs/LOGSTORE.md) or uv "
    "(libraft's raft_uv)\n"
    "  --raft-segment-bytes N     log_store tern: a raft segment file's "
    "size (64K..1G,\n"
    "                             default 8M)\n"
    "  --durability D             disk (default: an entry counts on a "
    "node once\n"
    "                             durable there) or memory (once in its "
    "memory;\n"
    "                             see raft/repl.h for what crashes lose); "
    "same on all nodes\n"
    "  --entry-checksum C         auto (default: XXH3 entries once the "
    "cluster\n"
    "                             has switched), xxh3 (switch it: every "
    "node runs\n"
    "                             0.4.0 or later) or xxh32\n"
    "  --busy-poll-us N           shm: a leader spins up to N us for "
    "answers after\n"
    "                             a send (default 0: off)\n"
    "  --follower-busy-poll-us N  shm: the same while not leader, for the "
    "next\n"
    "                             AppendEntries (default 0: off)\n"
    "  --adaptive-poll-us N       shm, tcp, durability memory, while "
    "busy-polling\n"
    "                             is off: spin about N us (at most 1.5 N) "
    "per send,\n"
    "                             only while the recent exchanges came "
    "back\n"
    "                             within 16 N us (default 200; 0: off)\n"
    "  --peer-auth A              tls (default; --dev: none) or none\n"
    "  --cluster-ca F             PEM CA that signs the node certificates\n"
    "  --node-cert F              this node's PEM certificate (CN node-<id>)\n"
    "  --node-key F               its PEM private key\n"
    "  --cluster-secret-file F    shm/rdma handshake key (64 hex digits)\n"
    "  --client-tls M             client port TLS: auto (default: on unless "
    "client_addr\n"
    "                             is 127.0.0.0/8), on or off\n"
    "  --client-cert F            cert of the client port (default "
    "node_cert)\n"
    "  --client-key F             its key (default node_key)\n"
    "  --client-ca F              CA of optional client certificates\n"
    "  --auth-failure-delay-ms N  wait before answering a failed login "
    "(default 500)\n"
    "  --auth-failures-per-minute N  failed logins per source address "
    "before\n"
    "                             AUTH_START is throttled (default 20; 0: "
    "no cap)\n"
    "  --auth-failure-sources N   source addresses counted at once "
    "(default 4096)\n"
    "  --cluster-name N           cluster name recorded in DATA_DIR/IDENTITY "
    "(default\n"
    "                             tern; printable ASCII, no spaces, 1..64)\n"
    "  --join B                   true: join a running cluster (wait to "
    "be added; never bootstrap)\n"
    "  --allow-open-data-dir B    true: start although the data dir is "
    "group or\n"
    "                             world accessible (default false)\n"
    "  --log-segment-bytes N      commit-log segment size and checkpoint "
    "interval\n"
    "                             (default 64M, 4K..1G; the same on every "
    "node)\n"
    "  --max-term-jump N          refuse raft messages whose term is more "
    "than N\n"
    "                             above ours (default 1048576)\n"
    "  --auto-rejoin B            leader removes and adds back a voter that "
    "lost data\n"
    "                             (default true)\n"
    "  --rejoin-on-corrupt B      a raft log that fails its checksums at "
    "start is\n"
    "                             moved aside (raft.corrupt-TIME) and the "
    "node\n"
    "                             rejoins as a non-voter (default true)\n"
    "  --index-map-bytes N        LMDB map: the largest the index may "
    "grow\n"
    "                             (default 64G, 16M..16384G)\n"
    "  --timer-interval-ms N      leader fires due delayed messages this "
    "often\n"
    "                             (default 100; 0: off)\n"
    "  --timer-batch N            timers per fire (default 256, 1..1024)\n"
    "  --max-delay-ms N           furthest due time of a delayed produce\n"
    "                             (default 3456000000, 40 days)\n"
    "  --shared-prefetch N        unacknowledged messages one shared-group\n"
    "                             consumer may hold (default 256)\n"
    "  --claim-lease-min-ms N     shortest single-active-consumer claim "
    "(default 1000)\n"
    "  --claim-lease-max-ms N     longest claim (default 300000)\n"
    "  --status-max-rows N        lease rows a group status answer walks\n"
    "                             (default 65536)\n"
    "  --peer-handshake-timeout-ms N  peer handshake deadline (default "
    "5000)\n"
    "  --peer-max-pending N       peer handshakes in progress at once "
    "(default 64)\n"
    "  --client-auth M            client login: auto (default: required "
    "unless --dev\n"
    "                             or client_addr is loopback), on or off\n"
    "  --bootstrap-admin NAME     admin a leader creates while no user "
    "exists\n"
    "  --bootstrap-admin-cred C   its credential (`tern user hash` prints "
    "it)\n"
    "  --metrics-listen H:P       HTTP /metrics, /healthz, /readyz "
    "(default off)\n"
    "  --metrics-token-file F     bearer token every metrics request "
    "carries\n"
    "  --metrics-max-queues N     queues reported per scrape (default "
    "1000)\n"
    "  --metrics-max-groups N     groups reported per scrape (default "
    "1000)\n"
    "  --metrics-max-connections N  HTTP connections at once (default 16)\n"
    "  --metrics-connection-timeout-s N  idle HTTP connection closed "
    "(default 10)\n"
    "  --metrics-ready-max-lag N  /readyz: applied may trail commit by N "
    "(default 1000)\n"
    "  --pid-file F               write the pid to F\n"
    "  --help                     this text\n"
    "  --version                  print the version and exit\n"
    "exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration\n"
    "\n"
    "INI file format:\n"
    "  [node]\n"
    "  id = 1\n"
    "  data_dir = /tmp/tern1\n"
    "  client_addr = 127.0.0.1:7401\n"
    "  raft_addr = 127.0.0.1:7501\n"
    "  transport = tcp\n"
    "  shm_dir = /tmp\n"
    "  busy_poll_us = 0\n"
    "  follower_busy_poll_us = 0\n"
    "  adaptive_poll_us = 200\n"
    "  log_level = info\n"
    "  cluster_name = tern\n"
    "  pid_file = /run/tern/ternd.pid\n"
    "  allow_open_data_dir = false\n"
    "  join = false\n"
    "  log_segment_bytes = 64M\n"
    "  index_map_bytes = 64G\n"
    "  retention_interval_ms = 1000\n"
    "  retention_page = 1024\n"
    "  clean_batch_rows = 1024\n"
    "  timer_interval_ms = 100\n"
    "  timer_batch = 256\n"
    "  [log]\n"
    "  file = /var/log/tern/ternd.log\n"
    "  format = text\n"
    "  [raft]\n"
    "  election_timeout_ms = 150\n"
    "  heartbeat_ms = 15\n"
    "  snapshot_threshold_bytes = 64M\n"
    "  snapshot_trailing = 256\n"
    "  durability = disk\n"
    "  log_store = auto\n"
    "  segment_bytes = 8M\n"
    "  entry_checksum = auto\n"
    "  max_term_jump = 1048576\n"
    "  auto_rejoin = true\n"
    "  rejoin_on_corrupt = true\n"
    "  [limits]\n"
    "  max_message_bytes = 4M\n"
    "  max_frame_bytes = 16M\n"
    "  min_free_disk_bytes = 64M\n"
    "  reserve_disk_bytes = 32M\n"
    "  client_memory_bytes = 256M\n"
    "  max_conn_queued_bytes = 32M\n"
    "  max_connections = 4096\n"
    "  max_connections_per_addr = 256\n"
    "  idle_timeout_ms = 600000\n"
    "  frame_timeout_ms = 30000\n"
    "  slow_reader_timeout_ms = 30000\n"
    "  max_parked = 10000\n"
    "  max_parked_per_conn = 64\n"
    "  list_page_max = 1000\n"
    "  fetch_scan_max = 100000\n"
    "  fetch_threads = 2\n"
    "  max_delay_ms = 3456000000\n"
    "  shared_prefetch = 256\n"
    "  claim_lease_min_ms = 1000\n"
    "  claim_lease_max_ms = 300000\n"
    "  status_max_rows = 65536\n"
    "  [security]\n"
    "  peer_auth = tls\n"
    "  cluster_ca = /etc/tern/ca.pem\n"
    "  node_cert = /etc/tern/node1.pem\n"
    "  node_key = /etc/tern/node1.key\n"
    "  cluster_secret_file = /etc/tern/cluster.secret\n"
    "  peer_handshake_timeout_ms = 5000\n"
    "  peer_max_pending = 64\n"
    "  client_tls = auto\n"
    "  client_cert = /etc/tern/node1.pem\n"
    "  client_key = /etc/tern/node1.key\n"
    "  client_ca = /etc/tern/ca.pem\n"
    "  client_auth = auto\n"
    "  bootstrap_admin = admin\n"
    "  bootstrap_admin_cred = SCRAM-SHA-256$4096:...\n"
    "  auth_failure_delay_ms = 500\n"
    "  auth_failures_per_minute = 20\n"
    "  auth_failure_sources = 4096\n"
    "  [metrics]\n"
    "  listen = 127.0.0.1:9401\n"
    "  token_file = /etc/tern/metrics.token\n"
    "  max_queues = 1000\n"
    "  max_groups = 1000\n"
    "  max_connections = 16\n"
    "  connection_timeout_s = 10\n"
    "  ready_max_lag = 1000\n"
    "  [peers]\n"
    "  1 = 127.0.0.1:7501,127.0.0.1:7401\n"
    "  2 = 127.0.0.1:7502,127.0.0.1:7402\n"
    "  3 = 127.0.0.1:7503,127.0.0.1:7403\n";

const char *node_config_usage(void)
{
    return usage_text;
}

void node_config_init(struct node_config *c)
{
    memset(c, 0, sizeof(*c));
    c->log_level = NODE_LOG_INFO;
    c->election_timeout_ms = NODE_DEFAULT_ELECTION_TIMEOUT_MS;
    c->heartbeat_ms = NODE_DEFAULT_HEARTBEAT_MS;
    c->busy_poll_us = NODE_DEFAULT_BUSY_POLL_US;
    c->adaptive_poll_us = NODE_DEFAULT_ADAPTIVE_POLL_US;
    c->snapshot_bytes = NODE_DEFAULT_SNAPSHOT_BYTES;
    c->raft_segment_bytes = (uint64_t)8 << 20;
    c->log_store_auto = 1; /* [raft] log_store = auto */
    c->snapshot_trailing = NODE_DEFAULT_SNAPSHOT_TRAILING;
    c->retention_interval_ms = NODE_DEFAULT_RETENTION_INTERVAL_MS;
    c->retention_page = NODE_DEFAULT_RETENTION_PAGE;
    c->clean_batch_rows = NODE_DEFAULT_CLEAN_BATCH_ROWS;
    c->timer_interval_ms = NODE_DEFAULT_TIMER_INTERVAL_MS;
    c->timer_batch = NODE_DEFAULT_TIMER_BATCH;
    c->max_delay_ms = NODE_DEFAULT_MAX_DELAY_MS;
    c->max_message_bytes = NODE_DEFAULT_MAX_MESSAGE;
    c->log_segment_bytes = NODE_DEFAULT_LOG_SEGMENT;
    c->index_map_bytes = NODE_DEFAULT_INDEX_MAP;
    c->max_frame_bytes = NODE_DEFAULT_MAX_FRAME;
    c->min_free_disk_bytes = NODE_DEFAULT_MIN_FREE_DISK;
    c->reserve_disk_bytes = NODE_DEFAULT_RESERVE_DISK;
    c->client_memory_bytes = NODE_DEFAULT_CLIENT_MEMORY;
    c->max_conn_queued_bytes = NODE_DEFAULT_MAX_CONN_QUEUED;
    c->max_connections = NODE_DEFAULT_MAX_CONNECTIONS;
    c->max_connections_per_addr = NODE_DEFAULT_MAX_CONNS_PER_ADDR;
    c->idle_timeout_ms = NODE_DEFAULT_IDLE_TIMEOUT_MS;
    c->frame_timeout_ms = NODE_DEFAULT_FRAME_TIMEOUT_MS;
    c->slow_reader_timeout_ms = NODE_DEFAULT_SLOW_READER_MS;
    c->max_parked = NODE_DEFAULT_MAX_PARKED;
    c->max_parked_per_conn = NODE_DEFAULT_MAX_PARKED_PER_CONN;
    c->list_page_max = NODE_DEFAULT_LIST_PAGE_MAX;
    c->fetch_scan_max = NODE_DEFAULT_FETCH_SCAN_MAX;
    c->fetch_threads = NODE_DEFAULT_FETCH_THREADS;
    c->shared_prefetch = NODE_DEFAULT_SHARED_PREFETCH;
    c->claim_lease_min_ms = NODE_DEFAULT_CLAIM_LEASE_MIN_MS;
    c->claim_lease_max_ms = NODE_DEFAULT_CLAIM_LEASE_MAX_MS;
    c->status_max_rows = NODE_DEFAULT_STATUS_MAX_ROWS;
    c->metrics_max_queues = NODE_DEFAULT_METRICS_MAX_QUEUES;
    c->metrics_max_groups = NODE_DEFAULT_METRICS_MAX_GROUPS;
    c->metrics_max_connections = NODE_DEFAULT_METRICS_MAX_CONNS;
    c->metrics_timeout_s = NODE_DEFAULT_METRICS_TIMEOUT_S;
    c->metrics_ready_max_lag = NODE_DEFAULT_METRICS_READY_LAG;
    c->max_term_jump = NODE_DEFAULT_MAX_TERM_JUMP;
    c->auto_rejoin = 1;
    c->rejoin_on_corrupt = 1;
    c->peer_handshake_timeout_ms = NODE_DEFAULT_PEER_HANDSHAKE_MS;
    c->peer_max_pending = NODE_DEFAULT_PEER_MAX_PENDING;
    c->auth_failure_delay_ms = NODE_DEFAULT_AUTH_FAILURE_DELAY;
    c->auth_failures_per_minute = NODE_DEFAULT_AUTH_FAILURES_MIN;
    c->auth_failure_sources = NODE_DEFAULT_AUTH_FAIL_SOURCES;
}

static void peers_free(struct node_peer *p, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        tern_free(p[i].raft_addr);
        tern_free(p[i].client_addr);
    }
    tern_free(p);
}

void node_config_free(struct node_config *c)
{
    tern_free(c->data_dir);
    tern_free(c->log_file);
    tern_free(c->client_addr);
    tern_free(c->raft_addr);
    tern_free(c->transport);
    tern_free(c->shm_dir);
    tern_free(c->pid_file);
    tern_free(c->metrics_listen);
    tern_free(c->metrics_token_file);
    tern_free(c->cluster_name);
    tern_free(c->cluster_ca);
    tern_free(c->node_cert);
    tern_free(c->node_key);
    tern_free(c->cluster_secret_file);
    tern_free(c->client_cert);
    tern_free(c->client_key);
    tern_free(c->client_ca);
    tern_free(c->bootstrap_admin);
    tern_free(c->bootstrap_admin_cred);
    peers_free(c->peers, c->n_peers);
    memset(c, 0, sizeof(*c));
}

bool node_config_cluster_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > NODE_CLUSTER_NAME_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)name[i] <= 0x20 || (unsigned char)name[i] >= 0x7f) {
            return false;
        }
    }
    return true;
}

const char *node_config_cluster_name(const struct node_config *c)
{
    return c->cluster_name != NULL ? c->cluster_name
                                   : NODE_DEFAULT_CLUSTER_NAME;
}

const struct node_peer *node_config_peer(const struct node_config *c,
                                         uint64_t id)
{
    for (unsigned i = 0; i < c->n_peers; i++) {
        if (c->peers[i].id == id) {
            return &c->peers[i];
        }
    }
    return NULL;
}

/* ---- Value parsers ------------------------------------------------------ */

static int set_str(char **dst, const char *v, const char *what, char *errmsg)
{
    char *s;
    if (v[0] == '\0') {
        tern_errmsg_printf(errmsg, "%s: empty value", what);
        return TERN_EINVAL;
    }
    s = tern_strdup(v);
    if (s == NULL) {
        tern_errmsg_printf(errmsg, "%s: out of memory", what);
        return -ENOMEM;
    }
    tern_free(*dst);
    *dst = s;
    return 0;
}

/* The node's own address (key, a "kind address"): taken from its peer
 * entry (peer_addr, borrowed) when not given, else it must match it. *dst
 * is owned by the config. */
static int own_addr(char **dst,
                    const char *peer_addr,
                    const char *key,
                    const char *kind,
                    uint64_t id,
                    char *errmsg)
{
    if (*dst == NULL) {
        return set_str(dst, peer_addr, key, errmsg);
    }
    if (strcmp(*dst, peer_addr) != 0) {
        tern_errmsg_printf(errmsg, "%s address %s differs from peer %llu's %s",
                           kind, *dst, (unsigned long long)id, peer_addr);
        return TERN_EINVAL;
    }
    return 0;
}

/* Unsigned integer with an optional K/M/G (KiB/MiB/GiB) suffix. */
static int parse_u64(const char *v,
                     uint64_t max,
                     uint64_t *out,
                     const char *what,
                     char *errmsg)
{
    char *end;
    unsigned long long x;
    unsigned shift = 0;

    if (v[0] < '0' || v[0] > '9') {
        goto bad;
    }
    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno != 0) {
        goto bad;
    }
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        goto bad;
    }
    if (*end != '\0' || (shift != 0 && x > (UINT64_MAX >> shift))) {
        goto bad;
    }
    x <<= shift;
    if (x > max) {
        tern_errmsg_printf(errmsg, "%s: %s is larger than %llu", what, v,
                           (unsigned long long)max);
        return TERN_EINVAL;
    }
    *out = x;
    return 0;
bad:
    tern_errmsg_printf(errmsg, "%s: '%s' is not a non-negative integer", what,
                       v);
    return TERN_EINVAL;
}

/* "host:port" with an IPv4 host and a port in 1..65535. */
static int check_addr(const char *a, const char *what, char *errmsg)
{
    char host[64];
    const char *colon = strrchr(a, ':');
    struct in_addr in;
    uint64_t port;
    size_t hl;

    if (colon == NULL) {
        goto bad;
    }
    hl = (size_t)(colon - a);
    if (hl == 0 || hl >= sizeof(host)) {
        goto bad;
    }
    memcpy(host, a, hl);
    host[hl] = '\0';
    if (inet_pton(AF_INET, host, &in) != 1) {
        goto bad;
    }
    if (parse_u64(colon + 1, 65535, &port, what, NULL) != 0 || port == 0) {
        goto bad;
    }
    return 0;
bad:
    tern_errmsg_printf(errmsg,
                       "%s: '%s' is not an IPv4 address host:port "
                       "(e.g. 127.0.0.1:7401)",
                       what, a);
    return TERN_EINVAL;
}

/* Add or replace the peer id with "raft_addr,client_addr". */
static int peer_set(struct node_peer **peers,
                    unsigned *n,
                    uint64_t id,
                    const char *v,
                    const char *what,
                    char *errmsg)
{
    const char *comma = strchr(v, ',');
    char *raft = NULL;
    char *client = NULL;
    struct node_peer *p = NULL;
    int rv;

    if (id == 0) {
        tern_errmsg_printf(errmsg, "%s: peer id must be > 0", what);
        return TERN_EINVAL;
    }
    if (comma == NULL) {
        tern_errmsg_printf(errmsg,
                           "%s: peer %llu: expected RAFTADDR,CLIENTADDR, "
                           "got '%s'",
                           what, (unsigned long long)id, v);
        return TERN_EINVAL;
    }
    raft = tern_malloc((size_t)(comma - v) + 1);
    client = tern_strdup(comma + 1);
    if (raft == NULL || client == NULL) {
        tern_errmsg_printf(errmsg, "%s: out of memory", what);
        rv = -ENOMEM;
        goto err_after_alloc;
    }
    memcpy(raft, v, (size_t)(comma - v));
    raft[comma - v] = '\0';
    rv = check_addr(raft, what, errmsg);
    if (rv == 0) {
        rv = check_addr(client, what, errmsg);
    }
    if (rv != 0) {
        goto err_after_alloc;
    }
    for (unsigned i = 0; i < *n; i++) {
        if ((*peers)[i].id == id) {
            p = &(*peers)[i];
            tern_free(p->raft_addr);
            tern_free(p->client_addr);
            break;
        }
    }
    if (p == NULL) {
        struct node_peer *np = tern_realloc(*peers, (*n + 1) * sizeof(**peers));
        if (np == NULL) {
            tern_errmsg_printf(errmsg, "%s: out of memory", what);
            rv = -ENOMEM;
            goto err_after_alloc;
        }
        *peers = np;
        p = &np[(*n)++];
        p->id = id;
    }
    p->raft_addr = raft;
    p->client_addr = client;
    return 0;

err_after_alloc:
    tern_free(raft);
    tern_free(client);
    return rv;
}

/* ---- Keys shared by the file and the flags ------------------------------ */

/* One configuration key: where it is read from, how its text is checked
 * and which member of struct node_config it sets. */
struct key
{
    const char *section; /* INI section */
    const char *name;    /* INI key */
    const char *flag;    /* command-line flag */
    /* Set the member of c that k describes from the text v. what names
     * the source in messages. 0, or TERN_EINVAL / -ENOMEM with errmsg. */
    int (*set)(struct node_config *c,
               const struct key *k,
               const char *v,
               const char *what,
               char *errmsg);
    size_t field; /* offsetof the member, of the type set expects */
    uint64_t max; /* numbers: the largest value accepted */
};

/* offsetof(struct node_config, member), and a compile error unless the
 * member has the type the row's setter writes: char *, uint64_t, unsigned
 * or int. (clang-format 14 would split the _Generic associations.) */
/* clang-format off */
#define NODE__STR(member)                                                      \
    _Generic(((struct node_config *)0)->member,                                \
             char *: offsetof(struct node_config, member))
#define NODE__U64(member)                                                      \
    _Generic(((struct node_config *)0)->member,                                \
             uint64_t: offsetof(struct node_config, member))
#define NODE__UINT(member)                                                     \
    _Generic(((struct node_config *)0)->member,                                \
             unsigned: offsetof(struct node_config, member))
#define NODE__INT(member)                                                      \
    _Generic(((struct node_config *)0)->member,                                \
             int: offsetof(struct node_config, member))
/* clang-format on */

static void *field_of(struct node_config *c, const struct key *k)
{
    return (char *)c + k->field;
}

/* char * member: any non-empty text. */
static int set_text(struct node_config *c,
                    const struct key *k,
                    const char *v,
                    const char *what,
                    char *errmsg)
{
    return set_str(field_of(c, k), v, what, errmsg);
}

/* char * member: an IPv4 "host:port". */
static int set_addr(struct node_config *c,
                    const struct key *k,
                    const char *v,
                    const char *what,
                    char *errmsg)
{
    int rv = check_addr(v, what, errmsg);
    return rv != 0 ? rv : set_str(field_of(c, k), v, what, errmsg);
}

/* char * member: tcp | shm | rdma | auto. */
static int set_transport(struct node_config *c,
                         const struct key *k,
                         const char *v,
                         const char *what,
                         char *errmsg)
{
    if (strcmp(v, "tcp") != 0 && strcmp(v, "shm") != 0 &&
        strcmp(v, "rdma") != 0 && strcmp(v, "auto") != 0) {
        tern_errmsg_printf(errmsg,
                           "%s: transport '%s' is not supported "
                           "(only tcp, shm, rdma or auto)",
                           what, v);
        return TERN_EINVAL;
    }
    return set_str(field_of(c, k), v, what, errmsg);
}

/* char * member: an absolute directory of at most k->max bytes. */
static int set_abs_dir(struct node_config *c,
                       const struct key *k,
                       const char *v,
                       const char *what,
                       char *errmsg)
{
    if (v[0] != '/' || strlen(v) > k->max) {
        tern_errmsg_printf(errmsg,
                           "%s: '%s' is not an absolute directory of at "
                           "most %llu bytes",
                           what, v, (unsigned long long)k->max);
        return TERN_EINVAL;
    }
    return set_str(field_of(c, k), v, what, errmsg);
}

/* int member (enum node_log_level): error | warn | info | debug. */
static int set_log_level(struct node_config *c,
                         const struct key *k,
                         const char *v,
                         const char *what,
                         char *errmsg)
{
    int level = node_log_level_parse(v);
    if (level < 0) {
        tern_errmsg_printf(errmsg,
                           "%s: log level '%s' is not one of "
                           "error|warn|info|debug",
                           what, v);
        return TERN_EINVAL;
    }
    *(int *)field_of(c, k) = level;
    return 0;
}

/* int member (enum node_log_format): text | json. */
static int set_log_format(struct node_config *c,
                          const struct key *k,
                          const char *v,
                          const char *what,
                          char *errmsg)
{
    int f = node_log_format_parse(v);
    if (f < 0) {
        tern_errmsg_printf(
            errmsg, "%s: log format '%s' is not one of text|json", what, v);
        return TERN_EINVAL;
    }
    *(int *)field_of(c, k) = f;
    return 0;
}

/* int member, true for memory: disk | memory. */
static int set_durability(struct node_config *c,
                          const struct key *k,
                          const char *v,
                          const char *what,
                          char *errmsg)
{
    if (strcmp(v, "disk") != 0 && strcmp(v, "memory") != 0) {
        tern_errmsg_printf(errmsg, "%s: durability '%s' is not disk or memory",
                           what, v);
        return TERN_EINVAL;
    }
    *(int *)field_of(c, k) = strcmp(v, "memory") == 0;
    return 0;
}

/* auto | uv | tern: tern_log_store, and log_store_auto for auto (the
 * store picked at start by node_pick_log_store). */
static int set_log_store(struct node_config *c,
                         const struct key *k,
                         const char *v,
                         const char *what,
                         char *errmsg)
{
    (void)k;
    if (strcmp(v, "auto") != 0 && strcmp(v, "uv") != 0 &&
        strcmp(v, "tern") != 0) {
        tern_errmsg_printf(errmsg, "%s: log_store '%s' is not auto, tern or uv",
                           what, v);
        return TERN_EINVAL;
    }
    c->log_store_auto = strcmp(v, "auto") == 0;
    c->tern_log_store = strcmp(v, "tern") == 0;
    return 0;
}

/* int member: enum node_entry_checksum. */
static int set_entry_checksum(struct node_config *c,
                              const struct key *k,
                              const char *v,
                              const char *what,
                              char *errmsg)
{
    static const char *const names[] = {"auto", "xxh3", "xxh32"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(v, names[i]) == 0) {
            *(int *)field_of(c, k) = i;
            return 0;
        }
    }
    tern_errmsg_printf(
        errmsg, "%s: entry_checksum '%s' is not auto, xxh3 or xxh32", what, v);
    return TERN_EINVAL;
}

/* char * member: a cluster name (node_config_cluster_name_valid). */
static int set_cluster_name(struct node_config *c,
                            const struct key *k,
                            const char *v,
                            const char *what,
                            char *errmsg)
{
    if (!node_config_cluster_name_valid(v)) {
        tern_errmsg_printf(errmsg,
                           "%s: cluster name '%s' is not 1..%u printable "
                           "ASCII characters without spaces",
                           what, v, NODE_CLUSTER_NAME_MAX);
        return TERN_EINVAL;
    }
    return set_str(field_of(c, k), v, what, errmsg);
}

/* int member: true | false. */
static int set_bool(struct node_config *c,
                    const struct key *k,
                    const char *v,
                    const char *what,
                    char *errmsg)
{
    if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0) {
        tern_errmsg_printf(errmsg, "%s: '%s' is not true or false", what, v);
        return TERN_EINVAL;
    }
    *(int *)field_of(c, k) = strcmp(v, "true") == 0;
    return 0;
}

static int set_peer_auth(struct node_config *c,
                         const struct key *k,
                         const char *v,
                         const char *what,
                         char *errmsg)
{
    if (strcmp(v, "tls") != 0 && strcmp(v, "none") != 0) {
        tern_errmsg_printf(errmsg, "%s: peer_auth '%s' is not tls or none",
                           what, v);
        return TERN_EINVAL;
    }
    *(int *)field_of(c, k) =
        strcmp(v, "none") == 0 ? NODE_PEER_AUTH_NONE : NODE_PEER_AUTH_TLS;
    return 0;
}

/* int member: auto | on | off (client_tls, client_auth: their enums
 * number the three alike). */
_Static_assert(NODE_CLIENT_TLS_AUTO == (int)NODE_CLIENT_AUTH_AUTO &&
                   NODE_CLIENT_TLS_ON == (int)NODE_CLIENT_AUTH_ON &&
                   NODE_CLIENT_TLS_OFF == (int)NODE_CLIENT_AUTH_OFF,
               "client_tls and client_auth share set_auto_on_off");
static int set_auto_on_off(struct node_config *c,
                           const struct key *k,
                           const char *v,
                           const char *what,
                           char *errmsg)
{
    int m;
    if (strcmp(v, "auto") == 0) {
        m = NODE_CLIENT_TLS_AUTO;
    } else if (strcmp(v, "on") == 0) {
        m = NODE_CLIENT_TLS_ON;
    } else if (strcmp(v, "off") == 0) {
        m = NODE_CLIENT_TLS_OFF;
    } else {
        tern_errmsg_printf(errmsg, "%s: %s '%s' is not auto, on or off", what,
                           k->name, v);
        return TERN_EINVAL;
    }
    *(int *)field_of(c, k) = m;
    return 0;
}

/* uint64_t member: 0..k->max (K/M/G suffixes). */
static int set_u64(struct node_config *c,
                   const struct key *k,
                   const char *v,
                   const char *what,
                   char *errmsg)
{
    return parse_u64(v, k->max, field_of(c, k), what, errmsg);
}

/* uint64_t member: 1..k->max (a node id). */
static int set_id(struct node_config *c,
                  const struct key *k,
                  const char *v,
                  const char *what,
                  char *errmsg)
{
    uint64_t x;
    int rv = parse_u64(v, k->max, &x, what, errmsg);
    if (rv == 0 && x == 0) {
        tern_errmsg_printf(errmsg, "%s: node id must be > 0", what);
        rv = TERN_EINVAL;
    }
    if (rv == 0) {
        *(uint64_t *)field_of(c, k) = x;
    }
    return rv;
}

/* unsigned member: 0..k->max (at most UINT32_MAX). */
static int set_unsigned(struct node_config *c,
                        const struct key *k,
                        const char *v,
                        const char *what,
                        char *errmsg)
{
    uint64_t x;
    int rv = parse_u64(v, k->max, &x, what, errmsg);
    if (rv == 0) {
        *(unsigned *)field_of(c, k) = (unsigned)x;
    }
    return rv;
}

static const struct key keys[] = {
    {"node", "id", "--id", set_id, NODE__U64(id), UINT64_MAX},
    {"node", "data_dir", "--data-dir", set_text, NODE__STR(data_dir), 0},
    {"node", "client_addr", "--client-addr", set_addr, NODE__STR(client_addr),
     0},
    {"node", "raft_addr", "--raft-addr", set_addr, NODE__STR(raft_addr), 0},
    {"node", "transport", "--transport", set_transport, NODE__STR(transport),
     0},
    {"node", "shm_dir", "--shm-dir", set_abs_dir, NODE__STR(shm_dir),
     NODE_SHM_DIR_MAX},
    {"node", "busy_poll_us", "--busy-poll-us", set_unsigned,
     NODE__UINT(busy_poll_us), 1000000},
    {"node", "follower_busy_poll_us", "--follower-busy-poll-us", set_unsigned,
     NODE__UINT(follower_busy_poll_us), 1000000},
    {"node", "adaptive_poll_us", "--adaptive-poll-us", set_unsigned,
     NODE__UINT(adaptive_poll_us), 1000000},
    {"node", "log_level", "--log-level", set_log_level, NODE__INT(log_level),
     0},
    {"node", "pid_file", "--pid-file", set_text, NODE__STR(pid_file), 0},
    {"node", "cluster_name", "--cluster-name", set_cluster_name,
     NODE__STR(cluster_name), 0},
    {"node", "allow_open_data_dir", "--allow-open-data-dir", set_bool,
     NODE__INT(allow_open_data_dir), 0},
    {"node", "join", "--join", set_bool, NODE__INT(join), 0},
    {"node", "log_segment_bytes", "--log-segment-bytes", set_u64,
     NODE__U64(log_segment_bytes), (uint64_t)1 << 30},
    {"node", "index_map_bytes", "--index-map-bytes", set_u64,
     NODE__U64(index_map_bytes), (uint64_t)1 << 44},
    {"node", "retention_interval_ms", "--retention-interval-ms", set_unsigned,
     NODE__UINT(retention_interval_ms), UINT32_MAX},
    {"node", "retention_page", "--retention-page", set_unsigned,
     NODE__UINT(retention_page), IDX_RETAIN_PAGE_MAX},
    {"node", "clean_batch_rows", "--clean-batch-rows", set_unsigned,
     NODE__UINT(clean_batch_rows), 1000000},
    {"node", "timer_interval_ms", "--timer-interval-ms", set_unsigned,
     NODE__UINT(timer_interval_ms), 3600000},
    {"node", "timer_batch", "--timer-batch", set_unsigned,
     NODE__UINT(timer_batch), IDX_TIMER_FIRE_KEYS_MAX},
    {"log", "file", "--log-file", set_text, NODE__STR(log_file), 0},
    {"log", "format", "--log-format", set_log_format, NODE__INT(log_format), 0},
    {"raft", "election_timeout_ms", "--election-timeout-ms", set_unsigned,
     NODE__UINT(election_timeout_ms), UINT32_MAX},
    {"raft", "heartbeat_ms", "--heartbeat-ms", set_unsigned,
     NODE__UINT(heartbeat_ms), UINT32_MAX},
    {"raft", "snapshot_threshold_bytes", "--snapshot-bytes", set_u64,
     NODE__U64(snapshot_bytes), UINT64_MAX},
    {"raft", "snapshot_trailing", "--snapshot-trailing", set_unsigned,
     NODE__UINT(snapshot_trailing), UINT32_MAX},
    {"raft", "durability", "--durability", set_durability,
     NODE__INT(memory_durability), 0},
    {"raft", "log_store", "--log-store", set_log_store,
     NODE__INT(tern_log_store), 0},
    {"raft", "segment_bytes", "--raft-segment-bytes", set_u64,
     NODE__U64(raft_segment_bytes), (uint64_t)1 << 30},
    {"raft", "entry_checksum", "--entry-checksum", set_entry_checksum,
     NODE__INT(entry_checksum), 0},
    {"raft", "max_term_jump", "--max-term-jump", set_u64,
     NODE__U64(max_term_jump), UINT64_MAX},
    {"raft", "auto_rejoin", "--auto-rejoin", set_bool, NODE__INT(auto_rejoin),
     0},
    {"raft", "rejoin_on_corrupt", "--rejoin-on-corrupt", set_bool,
     NODE__INT(rejoin_on_corrupt), 0},
    {"limits", "max_message_bytes", "--max-message-bytes", set_u64,
     NODE__U64(max_message_bytes), UINT32_MAX},
    {"limits", "max_frame_bytes", "--max-frame-bytes", set_u64,
     NODE__U64(max_frame_bytes), UINT32_MAX},
    {"limits", "min_free_disk_bytes", "--min-free-disk-bytes", set_u64,
     NODE__U64(min_free_disk_bytes), UINT64_MAX},
    {"limits", "reserve_disk_bytes", "--reserve-disk-bytes", set_u64,
     NODE__U64(reserve_disk_bytes), UINT64_MAX},
    {"limits", "client_memory_bytes", "--client-memory-bytes", set_u64,
     NODE__U64(client_memory_bytes), UINT64_MAX},
    {"limits", "max_conn_queued_bytes", "--max-conn-queued-bytes", set_u64,
     NODE__U64(max_conn_queued_bytes), UINT64_MAX},
    {"limits", "max_connections", "--max-connections", set_unsigned,
     NODE__UINT(max_connections), 1000000},
    {"limits", "max_connections_per_addr", "--max-connections-per-addr",
     set_unsigned, NODE__UINT(max_connections_per_addr), 1000000},
    {"limits", "idle_timeout_ms", "--idle-timeout-ms", set_unsigned,
     NODE__UINT(idle_timeout_ms), UINT32_MAX},
    {"limits", "frame_timeout_ms", "--frame-timeout-ms", set_unsigned,
     NODE__UINT(frame_timeout_ms), UINT32_MAX},
    {"limits", "slow_reader_timeout_ms", "--slow-reader-timeout-ms",
     set_unsigned, NODE__UINT(slow_reader_timeout_ms), UINT32_MAX},
    {"limits", "max_parked", "--max-parked", set_unsigned,
     NODE__UINT(max_parked), 1000000},
    {"limits", "max_parked_per_conn", "--max-parked-per-conn", set_unsigned,
     NODE__UINT(max_parked_per_conn), 1000000},
    {"limits", "list_page_max", "--list-page-max", set_unsigned,
     NODE__UINT(list_page_max), 100000},
    {"limits", "fetch_scan_max", "--fetch-scan-max", set_unsigned,
     NODE__UINT(fetch_scan_max), 1000000000},
    {"limits", "fetch_threads", "--fetch-threads", set_unsigned,
     NODE__UINT(fetch_threads), NODE_FETCH_THREADS_MAX},
    {"limits", "max_delay_ms", "--max-delay-ms", set_u64,
     NODE__U64(max_delay_ms), (uint64_t)1 << 62},
    {"limits", "shared_prefetch", "--shared-prefetch", set_unsigned,
     NODE__UINT(shared_prefetch), 1000000},
    {"limits", "claim_lease_min_ms", "--claim-lease-min-ms", set_unsigned,
     NODE__UINT(claim_lease_min_ms), 86400000},
    {"limits", "claim_lease_max_ms", "--claim-lease-max-ms", set_unsigned,
     NODE__UINT(claim_lease_max_ms), 86400000},
    {"limits", "status_max_rows", "--status-max-rows", set_unsigned,
     NODE__UINT(status_max_rows), 1u << 24},
    {"security", "peer_auth", "--peer-auth", set_peer_auth,
     NODE__INT(peer_auth), 0},
    {"security", "cluster_ca", "--cluster-ca", set_text, NODE__STR(cluster_ca),
     0},
    {"security", "node_cert", "--node-cert", set_text, NODE__STR(node_cert), 0},
    {"security", "node_key", "--node-key", set_text, NODE__STR(node_key), 0},
    {"security", "cluster_secret_file", "--cluster-secret-file", set_text,
     NODE__STR(cluster_secret_file), 0},
    {"security", "peer_handshake_timeout_ms", "--peer-handshake-timeout-ms",
     set_unsigned, NODE__UINT(peer_handshake_timeout_ms), 600000},
    {"security", "peer_max_pending", "--peer-max-pending", set_unsigned,
     NODE__UINT(peer_max_pending), 100000},
    {"security", "client_tls", "--client-tls", set_auto_on_off,
     NODE__INT(client_tls), 0},
    {"security", "client_cert", "--client-cert", set_text,
     NODE__STR(client_cert), 0},
    {"security", "client_key", "--client-key", set_text, NODE__STR(client_key),
     0},
    {"security", "client_ca", "--client-ca", set_text, NODE__STR(client_ca), 0},
    {"security", "client_auth", "--client-auth", set_auto_on_off,
     NODE__INT(client_auth), 0},
    {"security", "bootstrap_admin", "--bootstrap-admin", set_text,
     NODE__STR(bootstrap_admin), 0},
    {"security", "bootstrap_admin_cred", "--bootstrap-admin-cred", set_text,
     NODE__STR(bootstrap_admin_cred), 0},
    {"security", "auth_failure_delay_ms", "--auth-failure-delay-ms",
     set_unsigned, NODE__UINT(auth_failure_delay_ms), 60000},
    {"security", "auth_failures_per_minute", "--auth-failures-per-minute",
     set_unsigned, NODE__UINT(auth_failures_per_minute), 1000000},
    {"security", "auth_failure_sources", "--auth-failure-sources", set_unsigned,
     NODE__UINT(auth_failure_sources), 1000000},
    {"metrics", "listen", "--metrics-listen", set_addr,
     NODE__STR(metrics_listen), 0},
    {"metrics", "token_file", "--metrics-token-file", set_text,
     NODE__STR(metrics_token_file), 0},
    {"metrics", "max_queues", "--metrics-max-queues", set_unsigned,
     NODE__UINT(metrics_max_queues), 1000000},
    {"metrics", "max_groups", "--metrics-max-groups", set_unsigned,
     NODE__UINT(metrics_max_groups), 1000000},
    {"metrics", "max_connections", "--metrics-max-connections", set_unsigned,
     NODE__UINT(metrics_max_connections), 1024},
    {"metrics", "connection_timeout_s", "--metrics-connection-timeout-s",
     set_unsigned, NODE__UINT(metrics_timeout_s), 3600},
    {"metrics", "ready_max_lag", "--metrics-ready-max-lag", set_u64,
     NODE__U64(metrics_ready_max_lag), UINT64_MAX},
};

/* The row of INI key name in section, or NULL. */
static const struct key *key_by_name(const char *section, const char *name)
{
    for (unsigned k = 0; k < TERN_ARRAY_SIZE(keys); k++) {
        if (strcmp(section, keys[k].section) == 0 &&
            strcmp(name, keys[k].name) == 0) {
            return &keys[k];
        }
    }
    return NULL;
}

/* Whether some key lives in section. */
static bool section_known(const char *section)
{
    for (unsigned k = 0; k < TERN_ARRAY_SIZE(keys); k++) {
        if (strcmp(section, keys[k].section) == 0) {
            return true;
        }
    }
    return false;
}

/* ---- INI --------------------------------------------------------------- */

/* The parse of one INI text. inih goes on after a line its handler
 * refuses and returns the first failing line (handler or syntax), so the
 * handler keeps the first refusal, with its line, and ignores every line
 * after it: a valid line further down must not hide the error. */
struct ini_ctx
{
    struct node_config *c;
    const char *path;
    char *errmsg;
    FILE *file;       /* the source: a file, or */
    const char *text; /* the rest of a string */
    int line;         /* lines handed to inih so far */
    int rv;           /* the first refusal, 0 if none */
    int rv_line;      /* its line */
};

/* inih's fgets-style reader over x->file or x->text; counts the lines
 * (inih numbers lines the same way: one per read). */
static char *ini_read(char *str, int num, void *stream)
{
    struct ini_ctx *x = stream;
    size_t n = 0;

    if (x->file != NULL) {
        if (fgets(str, num, x->file) == NULL) {
            return NULL;
        }
        x->line++;
        return str;
    }
    if (num <= 1 || x->text[0] == '\0') {
        return NULL;
    }
    while (n < (size_t)num - 1 && x->text[n] != '\0') {
        str[n] = x->text[n];
        if (x->text[n++] == '\n') {
            break;
        }
    }
    str[n] = '\0';
    x->text += n;
    x->line++;
    return str;
}

static int on_ini_line(void *user,
                       const char *section,
                       const char *name,
                       const char *value)
{
    struct ini_ctx *x = user;
    const struct key *k;
    char what[160];
    int rv;

    if (x->rv != 0) {
        return 1; /* only the first error is reported */
    }
    /* Only a label for error messages: truncation is harmless. */
    (void)snprintf(what, sizeof(what), "%s: [%s] %s", x->path, section, name);
    if (strcmp(section, "peers") == 0) {
        uint64_t id;
        rv = parse_u64(name, UINT64_MAX, &id, what, x->errmsg);
        if (rv == 0) {
            rv = peer_set(&x->c->peers, &x->c->n_peers, id, value, what,
                          x->errmsg);
        }
    } else if ((k = key_by_name(section, name)) != NULL) {
        rv = k->set(x->c, k, value, what, x->errmsg);
    } else {
        tern_errmsg_printf(x->errmsg, "%s: unknown %s", what,
                           section_known(section) ? "key" : "section");
        rv = TERN_EINVAL;
    }
    if (rv != 0) {
        x->rv = rv;
        x->rv_line = x->line;
        return 0;
    }
    return 1;
}

/* Run inih over x's source. The first error of the text wins: the
 * handler's (its line appended to the message) or inih's syntax error. */
static int parse_ini(struct ini_ctx *x)
{
    int line = ini_parse_stream(ini_read, x, on_ini_line, x);
    size_t len;

    if (line == 0 && x->rv == 0) {
        return 0;
    }
    if (x->rv != 0 && (line == 0 || line >= x->rv_line)) {
        len = x->errmsg != NULL ? strlen(x->errmsg) : TERN_ERRMSG_SIZE;
        if (len < TERN_ERRMSG_SIZE) {
            (void)snprintf(x->errmsg + len, TERN_ERRMSG_SIZE - len,
                           " at line %d", x->rv_line);
        }
        return TERN_EINVAL;
    }
    if (line < 0) {
        tern_errmsg_printf(x->errmsg, "%s: cannot read the file", x->path);
    } else {
        tern_errmsg_printf(x->errmsg, "%s:%d: syntax error", x->path, line);
    }
    return TERN_EINVAL;
}

int node_config_load_string(struct node_config *c,
                            const char *text,
                            const char *path,
                            char *errmsg)
{
    struct ini_ctx x;
    memset(&x, 0, sizeof(x));
    x.c = c;
    x.path = path;
    x.errmsg = errmsg;
    x.text = text;
    return parse_ini(&x);
}

int node_config_load_file(struct node_config *c, const char *path, char *errmsg)
{
    struct ini_ctx x;
    int rv;

    memset(&x, 0, sizeof(x));
    x.c = c;
    x.path = path;
    x.errmsg = errmsg;
    x.file = fopen(path, "r");
    if (x.file == NULL) {
        tern_errmsg_printf(errmsg, "%s: %s", path, strerror(errno));
        return TERN_EINVAL;
    }
    rv = parse_ini(&x);
    (void)fclose(x.file); /* read only: nothing to lose */
    return rv;
}

/* ---- Flags -------------------------------------------------------------- */

static int apply_dev(struct node_config *c, char *errmsg)
{
    int rv = 0;
    c->id = 1;
    c->dev = true;
    c->peer_auth = NODE_PEER_AUTH_NONE;
    rv = rv != 0 ? rv : set_str(&c->data_dir, "./tern-data", "--dev", errmsg);
    rv = rv != 0 ? rv
                 : set_str(&c->client_addr, "127.0.0.1:7400", "--dev", errmsg);
    rv = rv != 0 ? rv
                 : set_str(&c->raft_addr, "127.0.0.1:7500", "--dev", errmsg);
    rv = rv != 0 ? rv
                 : peer_set(&c->peers, &c->n_peers, 1,
                            "127.0.0.1:7500,127.0.0.1:7400", "--dev", errmsg);
    return rv;
}

/* Split "--flag=value" or take the next argument. *i is advanced past the
 * value. */
static int flag_value(int argc,
                      char **argv,
                      int *i,
                      const char *flag,
                      const char **value,
                      char *errmsg)
{
    const char *a = argv[*i];
    size_t fl = strlen(flag);
    if (a[fl] == '=') {
        *value = a + fl + 1;
        return 0;
    }
    if (*i + 1 >= argc) {
        tern_errmsg_printf(errmsg, "%s needs a value", flag);
        return TERN_EINVAL;
    }
    *value = argv[++*i];
    return 0;
}

static bool flag_is(const char *a, const char *flag)
{
    size_t fl = strlen(flag);
    return strncmp(a, flag, fl) == 0 && (a[fl] == '\0' || a[fl] == '=');
}

int node_config_parse_args(struct node_config *c,
                           int argc,
                           char **argv,
                           char *errmsg)
{
    const char *config_file = NULL;
    bool dev = false;
    struct node_peer *flag_peers = NULL;
    unsigned n_flag_peers = 0;
    int rv = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            c->help = true;
            return 0;
        }
    }
    /* Pass 1: --dev and --config, which order the sources. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--dev") == 0) {
            dev = true;
        } else if (flag_is(a, "--config")) {
            rv = flag_value(argc, argv, &i, "--config", &config_file, errmsg);
            if (rv != 0) {
                return rv;
            }
        } else if (strncmp(a, "--", 2) == 0 && strchr(a, '=') == NULL &&
                   i + 1 < argc) {
            i++; /* skip the value of a flag in pass 2 */
        }
    }
    if (dev) {
        rv = apply_dev(c, errmsg);
        if (rv != 0) {
            return rv;
        }
    }
    if (config_file != NULL) {
        rv = node_config_load_file(c, config_file, errmsg);
        if (rv != 0) {
            return rv;
        }
    }

    /* Pass 2: every other flag, in order. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        bool known = false;

        if (strcmp(a, "--dev") == 0) {
            continue;
        }
        if (flag_is(a, "--config")) {
            rv = flag_value(argc, argv, &i, "--config", &v, errmsg);
            if (rv != 0) {
                goto out;
            }
            continue;
        }
        if (flag_is(a, "--peer")) {
            const char *eq;
            uint64_t id;
            char idbuf[32];
            rv = flag_value(argc, argv, &i, "--peer", &v, errmsg);
            if (rv != 0) {
                goto out;
            }
            eq = strchr(v, '=');
            if (eq == NULL || (size_t)(eq - v) >= sizeof(idbuf)) {
                tern_errmsg_printf(errmsg,
                                   "--peer: expected "
                                   "ID=RAFTADDR,CLIENTADDR, got '%s'",
                                   v);
                rv = TERN_EINVAL;
                goto out;
            }
            memcpy(idbuf, v, (size_t)(eq - v));
            idbuf[eq - v] = '\0';
            rv = parse_u64(idbuf, UINT64_MAX, &id, "--peer", errmsg);
            if (rv == 0) {
                rv = peer_set(&flag_peers, &n_flag_peers, id, eq + 1, "--peer",
                              errmsg);
            }
            if (rv != 0) {
                goto out;
            }
            continue;
        }
        for (unsigned k = 0; k < TERN_ARRAY_SIZE(keys); k++) {
            if (flag_is(a, keys[k].flag)) {
                rv = flag_value(argc, argv, &i, keys[k].flag, &v, errmsg);
                if (rv == 0) {
                    rv = keys[k].set(c, &keys[k], v, keys[k].flag, errmsg);
                }
                if (rv != 0) {
                    goto out;
                }
                known = true;
                break;
            }
        }
        if (!known) {
            tern_errmsg_printf(errmsg, "unknown argument '%s' (see --help)", a);
            rv = TERN_EINVAL;
            goto out;
        }
    }
    if (n_flag_peers > 0) {
        peers_free(c->peers, c->n_peers);
        c->peers = flag_peers;
        c->n_peers = n_flag_peers;
        flag_peers = NULL;
        n_flag_peers = 0;
    }
    rv = node_config_validate(c, errmsg);
out:
    peers_free(flag_peers, n_flag_peers);
    return rv;
}

/* ---- Validation --------------------------------------------------------- */

/* transport shm or rdma with peer_auth = tls: their handshakes prove the
 * cluster secret, so the file must be configured. The file itself (there,
 * private, well-formed) is read once, by the node at start (node.c), which
 * keeps the secret for the transport and the client port. */
static int validate_cluster_secret(const struct node_config *c, char *errmsg)
{
    if (c->peer_auth != NODE_PEER_AUTH_TLS ||
        (strcmp(c->transport, "shm") != 0 &&
         strcmp(c->transport, "rdma") != 0)) {
        return 0;
    }
    if (c->cluster_secret_file == NULL || c->cluster_secret_file[0] == '\0') {
        tern_errmsg_printf(errmsg,
                           "transport %s with peer_auth = tls needs the "
                           "cluster secret ([security] cluster_secret_file "
                           "or --cluster-secret-file; scripts/tern-certs.sh "
                           "makes one)",
                           c->transport);
        return TERN_EINVAL;
    }
    return 0;
}

bool node_config_client_loopback(const struct node_config *c)
{
    char host[INET_ADDRSTRLEN + 1];
    const char *colon;
    struct in_addr a;
    size_t n;

    if (c->client_addr == NULL) {
        return false;
    }
    colon = strrchr(c->client_addr, ':');
    n = colon != NULL ? (size_t)(colon - c->client_addr)
                      : strlen(c->client_addr);
    if (n >= sizeof(host)) {
        return false;
    }
    memcpy(host, c->client_addr, n);
    host[n] = '\0';
    if (inet_pton(AF_INET, host, &a) != 1) {
        return false;
    }
    return (ntohl(a.s_addr) >> 24) == 127;
}

bool node_config_client_tls(const struct node_config *c)
{
    if (c->client_tls != NODE_CLIENT_TLS_AUTO) {
        return c->client_tls == NODE_CLIENT_TLS_ON;
    }
    return !node_config_client_loopback(c);
}

bool node_config_client_auth(const struct node_config *c)
{
    if (c->client_auth != NODE_CLIENT_AUTH_AUTO) {
        return c->client_auth == NODE_CLIENT_AUTH_ON;
    }
    return !c->dev && !node_config_client_loopback(c);
}

const char *node_config_client_cert(const struct node_config *c)
{
    return c->client_cert != NULL ? c->client_cert : c->node_cert;
}

const char *node_config_client_key(const struct node_config *c)
{
    return c->client_key != NULL ? c->client_key : c->node_key;
}

/* client_tls on (or auto on a non-loopback address) needs a certificate
 * and its key; a client_cert needs its client_key and the reverse. */
static int validate_client_tls(const struct node_config *c, char *errmsg)
{
    if ((c->client_cert == NULL) != (c->client_key == NULL)) {
        tern_errmsg_printf(errmsg,
                           "[security] client_cert and client_key go "
                           "together (one is set, the other is not)");
        return TERN_EINVAL;
    }
    if (!node_config_client_tls(c)) {
        return 0;
    }
    if (node_config_client_cert(c) == NULL ||
        node_config_client_key(c) == NULL) {
        tern_errmsg_printf(
            errmsg,
            "client_tls is %s for client_addr %s but no certificate is "
            "set: give [security] client_cert and client_key (or node_cert "
            "and node_key; scripts/tern-certs.sh makes them), or "
            "client_tls = off",
            c->client_tls == NODE_CLIENT_TLS_ON ? "on" : "auto (not loopback)",
            c->client_addr != NULL ? c->client_addr : "(none)");
        return TERN_EINVAL;
    }
    return 0;
}

/* bootstrap_admin and bootstrap_admin_cred go together; the name follows
 * the user name rule and the credential parses (auth/scram.c text form). */
static int validate_bootstrap_admin(const struct node_config *c, char *errmsg)
{
    struct auth_scram_cred cred;
    const char *u = c->bootstrap_admin;
    int rv;
    if ((u == NULL) != (c->bootstrap_admin_cred == NULL)) {
        tern_errmsg_printf(errmsg,
                           "[security] bootstrap_admin and "
                           "bootstrap_admin_cred go together (one is set, the "
                           "other is not)");
        return TERN_EINVAL;
    }
    if (u == NULL) {
        return 0;
    }
    if (strlen(u) > IDX_USER_NAME_MAX || !tern_name_valid(u, strlen(u))) {
        tern_errmsg_printf(errmsg,
                           "[security] bootstrap_admin '%s' is not a user "
                           "name (1..%u bytes of [A-Za-z0-9._-])",
                           u, IDX_USER_NAME_MAX);
        return TERN_EBADNAME;
    }
    rv = auth_scram_cred_parse(c->bootstrap_admin_cred,
                               strlen(c->bootstrap_admin_cred), &cred, errmsg);
    auth_wipe(&cred, sizeof cred);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "[security] bootstrap_admin_cred");
    }
    return rv;
}

/* [limits] of the client port: one frame of max_frame_bytes must fit in
 * the memory budget (else it could never be read), a connection's bound
 * must fit in the budget, and the counts must be at least 1. */
static int validate_client_limits(const struct node_config *c, char *errmsg)
{
    if (c->client_memory_bytes < c->max_frame_bytes + (64u << 10)) {
        tern_errmsg_printf(errmsg,
                           "client_memory_bytes (%llu) must be at least "
                           "max_frame_bytes (%llu) + 64K",
                           (unsigned long long)c->client_memory_bytes,
                           (unsigned long long)c->max_frame_bytes);
        return TERN_EINVAL;
    }
    if (c->max_conn_queued_bytes < (64u << 10) ||
        c->max_conn_queued_bytes > c->client_memory_bytes) {
        tern_errmsg_printf(errmsg,
                           "max_conn_queued_bytes (%llu) must be between "
                           "64K and client_memory_bytes (%llu)",
                           (unsigned long long)c->max_conn_queued_bytes,
                           (unsigned long long)c->client_memory_bytes);
        return TERN_EINVAL;
    }
    if (c->fetch_scan_max == 0) {
        tern_errmsg_printf(errmsg, "fetch_scan_max must be > 0");
        return TERN_EINVAL;
    }
    if (c->shared_prefetch == 0) {
        tern_errmsg_printf(errmsg, "shared_prefetch must be > 0");
        return TERN_EINVAL;
    }
    if (c->status_max_rows == 0) {
        tern_errmsg_printf(errmsg, "status_max_rows must be > 0");
        return TERN_EINVAL;
    }
    if (c->claim_lease_min_ms == 0 ||
        c->claim_lease_min_ms > c->claim_lease_max_ms) {
        tern_errmsg_printf(errmsg,
                           "claim_lease_min_ms must be 1.."
                           "claim_lease_max_ms");
        return TERN_EINVAL;
    }
    if (c->max_connections == 0 || c->max_connections_per_addr == 0 ||
        c->max_parked_per_conn == 0 || c->list_page_max == 0 ||
        c->frame_timeout_ms == 0 || c->slow_reader_timeout_ms == 0 ||
        c->peer_handshake_timeout_ms == 0 || c->peer_max_pending == 0) {
        tern_errmsg_printf(errmsg,
                           "max_connections, max_connections_per_addr, "
                           "max_parked_per_conn, list_page_max, "
                           "frame_timeout_ms, slow_reader_timeout_ms, "
                           "peer_handshake_timeout_ms and peer_max_pending "
                           "must be > 0");
        return TERN_EINVAL;
    }
    if (c->timer_batch == 0) {
        tern_errmsg_printf(errmsg, "timer_batch must be > 0");
        return TERN_EINVAL;
    }
    if (c->retention_page == 0 || c->clean_batch_rows == 0) {
        tern_errmsg_printf(errmsg,
                           "retention_page and clean_batch_rows must be > 0");
        return TERN_EINVAL;
    }
    return 0;
}

int node_config_validate(struct node_config *c, char *errmsg)
{
    const struct node_peer *self;
    int rv;

    if (c->id == 0) {
        tern_errmsg_printf(errmsg, "node id is missing (--id N or [node] id)");
        return TERN_EINVAL;
    }
    if (c->data_dir == NULL) {
        tern_errmsg_printf(errmsg,
                           "data directory is missing (--data-dir "
                           "DIR or [node] data_dir)");
        return TERN_EINVAL;
    }
    if (c->transport == NULL) {
        rv = set_str(&c->transport, "tcp", "transport", errmsg);
        if (rv != 0) {
            return rv;
        }
    }
    if (c->shm_dir == NULL) {
        rv = set_str(&c->shm_dir, "/tmp", "shm_dir", errmsg);
        if (rv != 0) {
            return rv;
        }
    }
    self = node_config_peer(c, c->id);
    if (c->n_peers == 0) {
        /* Single-node cluster made of this node. */
        char v[256];
        int k;
        if (c->raft_addr == NULL || c->client_addr == NULL) {
            tern_errmsg_printf(errmsg,
                               "node %llu: no peers and no --raft-addr/"
                               "--client-addr",
                               (unsigned long long)c->id);
            return TERN_EINVAL;
        }
        k = snprintf(v, sizeof(v), "%s,%s", c->raft_addr, c->client_addr);
        if (k < 0 || (size_t)k >= sizeof(v)) {
            tern_errmsg_printf(errmsg,
                               "node %llu: --raft-addr/--client-addr too long",
                               (unsigned long long)c->id);
            return TERN_EINVAL;
        }
        rv = peer_set(&c->peers, &c->n_peers, c->id, v, "peers", errmsg);
        if (rv != 0) {
            return rv;
        }
        self = node_config_peer(c, c->id);
    }
    if (self == NULL && (c->raft_addr == NULL || c->client_addr == NULL)) {
        tern_errmsg_printf(errmsg,
                           "node %llu is not in its own peer list (add "
                           "--peer %llu=RAFTADDR,CLIENTADDR, or give "
                           "--raft-addr and --client-addr to join a running "
                           "cluster)",
                           (unsigned long long)c->id,
                           (unsigned long long)c->id);
        return TERN_EINVAL;
    }
    if (self == NULL) {
        /* A node the peers do not list can only join: bootstrapping a
         * configuration without itself would make no sense. Its own
         * addresses must be its own. */
        for (unsigned i = 0; i < c->n_peers; i++) {
            if (strcmp(c->peers[i].raft_addr, c->raft_addr) == 0 ||
                strcmp(c->peers[i].client_addr, c->client_addr) == 0) {
                tern_errmsg_printf(errmsg,
                                   "node %llu is not in its own peer list "
                                   "and uses peer %llu's address (%s, %s)",
                                   (unsigned long long)c->id,
                                   (unsigned long long)c->peers[i].id,
                                   c->raft_addr, c->client_addr);
                return TERN_EINVAL;
            }
        }
        c->join = 1;
    } else {
        rv = own_addr(&c->raft_addr, self->raft_addr, "raft_addr", "raft",
                      c->id, errmsg);
        if (rv != 0) {
            return rv;
        }
        rv = own_addr(&c->client_addr, self->client_addr, "client_addr",
                      "client", c->id, errmsg);
        if (rv != 0) {
            return rv;
        }
    }
    for (unsigned i = 0; i < c->n_peers; i++) {
        for (unsigned j = i + 1; j < c->n_peers; j++) {
            if (strcmp(c->peers[i].raft_addr, c->peers[j].raft_addr) == 0 ||
                strcmp(c->peers[i].client_addr, c->peers[j].client_addr) == 0) {
                tern_errmsg_printf(errmsg,
                                   "peers %llu and %llu share an address",
                                   (unsigned long long)c->peers[i].id,
                                   (unsigned long long)c->peers[j].id);
                return TERN_EINVAL;
            }
        }
        if (strcmp(c->peers[i].raft_addr, c->peers[i].client_addr) == 0) {
            tern_errmsg_printf(errmsg,
                               "peer %llu: raft and client address are the "
                               "same (%s)",
                               (unsigned long long)c->peers[i].id,
                               c->peers[i].raft_addr);
            return TERN_EINVAL;
        }
    }
    if (c->election_timeout_ms == 0 || c->heartbeat_ms == 0 ||
        c->heartbeat_ms >= c->election_timeout_ms) {
        tern_errmsg_printf(errmsg,
                           "heartbeat_ms (%u) must be > 0 and smaller than "
                           "election_timeout_ms (%u)",
                           c->heartbeat_ms, c->election_timeout_ms);
        return TERN_EINVAL;
    }
    if (c->index_map_bytes < ((uint64_t)16 << 20)) {
        tern_errmsg_printf(errmsg,
                           "index_map_bytes (%llu) must be at least 16M",
                           (unsigned long long)c->index_map_bytes);
        return TERN_EINVAL;
    }
    if (c->log_segment_bytes < 4096) {
        tern_errmsg_printf(errmsg,
                           "log_segment_bytes (%llu) must be at least 4K",
                           (unsigned long long)c->log_segment_bytes);
        return TERN_EINVAL;
    }
    if (c->raft_segment_bytes < 65536 || c->raft_segment_bytes % 4096 != 0) {
        tern_errmsg_printf(errmsg,
                           "[raft] segment_bytes (%llu) must be at least 64K "
                           "and a multiple of 4K",
                           (unsigned long long)c->raft_segment_bytes);
        return TERN_EINVAL;
    }
    if (c->max_message_bytes == 0 || c->max_frame_bytes == 0 ||
        c->max_message_bytes + NODE_FRAME_OVERHEAD > c->max_frame_bytes) {
        tern_errmsg_printf(errmsg,
                           "max_message_bytes (%llu) + %u must not exceed "
                           "max_frame_bytes (%llu)",
                           (unsigned long long)c->max_message_bytes,
                           NODE_FRAME_OVERHEAD,
                           (unsigned long long)c->max_frame_bytes);
        return TERN_EINVAL;
    }
    if (c->max_frame_bytes > (1ull << 30)) {
        tern_errmsg_printf(errmsg, "max_frame_bytes (%llu) above 1 GiB",
                           (unsigned long long)c->max_frame_bytes);
        return TERN_EINVAL;
    }
    if (c->peer_auth == NODE_PEER_AUTH_TLS) {
        /* Mutual TLS between nodes needs this node's credentials. */
        static const struct
        {
            size_t off;
            const char *key, *flag;
        } need[] = {
            {offsetof(struct node_config, cluster_ca), "cluster_ca",
             "--cluster-ca"},
            {offsetof(struct node_config, node_cert), "node_cert",
             "--node-cert"},
            {offsetof(struct node_config, node_key), "node_key", "--node-key"},
        };
        for (unsigned i = 0; i < sizeof need / sizeof need[0]; i++) {
            const char *v = *(char *const *)((const char *)c + need[i].off);
            if (v == NULL || v[0] == '\0') {
                tern_errmsg_printf(errmsg,
                                   "peer_auth = tls needs [security] %s (%s "
                                   "FILE; scripts/tern-certs.sh makes the "
                                   "credentials), or peer_auth = none",
                                   need[i].key, need[i].flag);
                return TERN_EINVAL;
            }
        }
    }
    rv = validate_cluster_secret(c, errmsg);
    if (rv != 0) {
        return rv;
    }
    rv = validate_client_tls(c, errmsg);
    if (rv == 0) {
        rv = validate_bootstrap_admin(c, errmsg);
    }
    if (rv != 0) {
        return rv;
    }
    return validate_client_limits(c, errmsg);
}
