/* ternd configuration: INI file, flags overriding it, --dev, validation. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <tern_common.h>

#include "config.h"
#include "log.h"

static struct node_config cfg;
static char errmsg[TERN_ERRMSG_SIZE];

static void setup(void)
{
    node_config_init(&cfg);
    errmsg[0] = '\0';
}

static void teardown(void)
{
    node_config_free(&cfg);
}

TestSuite(config, .init = setup, .fini = teardown);

#define ARGS(...)                                                              \
    char *argv_[] = {"ternd", __VA_ARGS__};                                    \
    int argc_ = (int)(sizeof(argv_) / sizeof(argv_[0]))

static const char three_nodes[] =
    "[node]\n"
    "id = 2\n"
    "data_dir = /tmp/t2\n"
    "log_level = debug\n"
    "[raft]\n"
    "election_timeout_ms = 300\n"
    "heartbeat_ms = 30\n"
    "snapshot_threshold_bytes = 8M\n"
    "snapshot_trailing = 64\n"
    "[limits]\n"
    "max_message_bytes = 1M\n"
    "max_frame_bytes = 2M\n"
    "min_free_disk_bytes = 1024\n"
    "[security]\n"
    "cluster_ca = /etc/tern/ca.pem\n"
    "node_cert = /etc/tern/node.pem\n"
    "node_key = /etc/tern/node.key\n"
    "[peers]\n"
    "1 = 127.0.0.1:17501,127.0.0.1:17401\n"
    "2 = 127.0.0.1:17502,127.0.0.1:17402\n"
    "3 = 127.0.0.1:17503,127.0.0.1:17403\n";

static char *write_tmp(const char *text)
{
    static char path[64];
    int fd;
    (void)snprintf(path, sizeof(path), "/tmp/ternd-config-XXXXXX");
    fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

Test(config, file_all_sections)
{
    cr_assert_eq(node_config_load_string(&cfg, three_nodes, "t", errmsg), 0,
                 "%s", errmsg);
    cr_assert_eq(node_config_validate(&cfg, errmsg), 0, "%s", errmsg);
    cr_expect_eq(cfg.id, 2);
    cr_expect_str_eq(cfg.data_dir, "/tmp/t2");
    cr_expect_str_eq(cfg.raft_addr, "127.0.0.1:17502");
    cr_expect_str_eq(cfg.client_addr, "127.0.0.1:17402");
    cr_expect_str_eq(cfg.transport, "tcp");
    cr_expect_eq(cfg.log_level, NODE_LOG_DEBUG);
    cr_expect_eq(cfg.election_timeout_ms, 300);
    cr_expect_eq(cfg.heartbeat_ms, 30);
    cr_expect_eq(cfg.snapshot_bytes, 8ull << 20);
    cr_expect_eq(cfg.snapshot_trailing, 64);
    cr_expect_eq(cfg.max_message_bytes, 1u << 20);
    cr_expect_eq(cfg.max_frame_bytes, 2u << 20);
    cr_expect_eq(cfg.min_free_disk_bytes, 1024);
    cr_assert_eq(cfg.n_peers, 3);
    cr_expect_str_eq(node_config_peer(&cfg, 3)->client_addr, "127.0.0.1:17403");
    cr_expect_null(node_config_peer(&cfg, 4));
}

Test(config, defaults)
{
    ARGS("--id", "1", "--data-dir", "/tmp/x", "--client-addr", "127.0.0.1:7401",
         "--raft-addr", "127.0.0.1:7501", "--cluster-ca", "/c.pem",
         "--node-cert", "/n.pem", "--node-key", "/n.key");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.peer_auth, NODE_PEER_AUTH_TLS);
    cr_expect_eq(cfg.election_timeout_ms, 150);
    cr_expect_eq(cfg.heartbeat_ms, 15);
    cr_expect_eq(cfg.max_message_bytes, 4u << 20);
    cr_expect_eq(cfg.max_frame_bytes, 16u << 20);
    cr_expect_eq(cfg.min_free_disk_bytes, 64u << 20);
    cr_expect_eq(cfg.index_map_bytes, (uint64_t)64 << 30);
    cr_expect_eq(cfg.memory_durability, 0);
    cr_expect_eq(cfg.raft_segment_bytes, 8u << 20);
    cr_expect_eq(cfg.entry_checksum, NODE_ENTRY_CHECKSUM_AUTO);
    cr_expect_eq(cfg.busy_poll_us, NODE_DEFAULT_BUSY_POLL_US);
    cr_expect_str_eq(cfg.transport, "tcp");
    cr_expect_str_eq(cfg.shm_dir, "/tmp");
    /* No peers: a single-node cluster of itself. */
    cr_assert_eq(cfg.n_peers, 1);
    cr_expect_eq(cfg.peers[0].id, 1);
    cr_expect_str_eq(cfg.peers[0].raft_addr, "127.0.0.1:7501");
}

Test(config, flags_override_file)
{
    char *path = write_tmp(three_nodes);
    ARGS("--heartbeat-ms", "20", "--config", path, "--id=3", "--data-dir",
         "/tmp/t3", "--log-level", "warn", "--max-message-bytes", "512K");
    int rv = node_config_parse_args(&cfg, argc_, argv_, errmsg);
    unlink(path);
    cr_assert_eq(rv, 0, "%s", errmsg);
    cr_expect_eq(cfg.id, 3);
    cr_expect_eq(cfg.heartbeat_ms, 20);
    cr_expect_eq(cfg.election_timeout_ms, 300); /* from the file */
    cr_expect_str_eq(cfg.data_dir, "/tmp/t3");
    cr_expect_str_eq(cfg.client_addr, "127.0.0.1:17403");
    cr_expect_eq(cfg.log_level, NODE_LOG_WARN);
    cr_expect_eq(cfg.max_message_bytes, 512u << 10);
}

Test(config, transport_and_durability)
{
    ARGS("--dev", "--transport", "shm", "--shm-dir", "/run/tern",
         "--durability", "memory");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_str_eq(cfg.transport, "shm");
    cr_expect_str_eq(cfg.shm_dir, "/run/tern");
    cr_expect_eq(cfg.memory_durability, 1);
}

Test(config, entry_checksum)
{
    static char v[3][6] = {"auto", "xxh3", "xxh32"};
    static const int want[] = {NODE_ENTRY_CHECKSUM_AUTO,
                               NODE_ENTRY_CHECKSUM_XXH3,
                               NODE_ENTRY_CHECKSUM_XXH32};
    for (int i = 0; i < 3; i++) {
        ARGS("--dev", "--entry-checksum", v[i]);
        cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0,
                     "%s", errmsg);
        cr_expect_eq(cfg.entry_checksum, want[i], "%s", v[i]);
        node_config_free(&cfg);
        node_config_init(&cfg);
    }
}

Test(config, busy_poll_us)
{
    ARGS("--dev", "--transport", "shm", "--busy-poll-us", "40",
         "--follower-busy-poll-us", "300");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.busy_poll_us, 40);
    cr_expect_eq(cfg.follower_busy_poll_us, 300);
}

Test(config, peer_flags_replace_file_peers)
{
    char *path = write_tmp(three_nodes);
    ARGS("--config", path, "--peer", "2=127.0.0.1:27502,127.0.0.1:27402",
         "--peer=5=127.0.0.1:27505,127.0.0.1:27405");
    int rv = node_config_parse_args(&cfg, argc_, argv_, errmsg);
    unlink(path);
    cr_assert_eq(rv, 0, "%s", errmsg);
    cr_assert_eq(cfg.n_peers, 2);
    cr_expect_null(node_config_peer(&cfg, 1));
    cr_expect_str_eq(cfg.raft_addr, "127.0.0.1:27502");
    cr_expect_str_eq(node_config_peer(&cfg, 5)->client_addr, "127.0.0.1:27405");
}

Test(config, dev)
{
    ARGS("--dev");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.id, 1);
    cr_expect_str_eq(cfg.data_dir, "./tern-data");
    cr_expect_str_eq(cfg.client_addr, "127.0.0.1:7400");
    cr_expect_str_eq(cfg.raft_addr, "127.0.0.1:7500");
    cr_expect_eq(cfg.n_peers, 1);
}

Test(config, dev_with_override)
{
    ARGS("--data-dir", "/tmp/devx", "--dev");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_str_eq(cfg.data_dir, "/tmp/devx");
}

/* A node its [peers] do not list joins a running cluster (membership,
 * raft/member.c): with its own addresses it is accepted in join mode. */
Test(config, not_in_peers_is_join_mode)
{
    char *path = write_tmp(three_nodes);
    ARGS("--config", path, "--id", "4", "--raft-addr", "127.0.0.1:27504",
         "--client-addr", "127.0.0.1:27404");
    int rv = node_config_parse_args(&cfg, argc_, argv_, errmsg);
    unlink(path);
    cr_assert_eq(rv, 0, "%s", errmsg);
    cr_expect_eq(cfg.join, 1);
    cr_expect_null(node_config_peer(&cfg, 4));
    cr_expect_eq(cfg.n_peers, 3);
    cr_expect_str_eq(cfg.raft_addr, "127.0.0.1:27504");
}

/* join = true on a node its peers list: it still never bootstraps. */
Test(config, join_flag_on_a_listed_node)
{
    char *path = write_tmp(three_nodes);
    ARGS("--config", path, "--join", "true");
    int rv = node_config_parse_args(&cfg, argc_, argv_, errmsg);
    unlink(path);
    cr_assert_eq(rv, 0, "%s", errmsg);
    cr_expect_eq(cfg.join, 1);
    cr_expect_eq(cfg.id, 2);
}

/* Outside its peers, a node must not take a peer's addresses. */
Test(config, join_with_a_peer_address_refused)
{
    char *path = write_tmp(three_nodes);
    ARGS("--config", path, "--id", "4", "--raft-addr", "127.0.0.1:17501",
         "--client-addr", "127.0.0.1:27404");
    int rv = node_config_parse_args(&cfg, argc_, argv_, errmsg);
    unlink(path);
    cr_expect_eq(rv, TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "uses peer 1's address"), "%s", errmsg);
}

Test(config, help)
{
    ARGS("--bogus", "--help");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0);
    cr_expect(cfg.help);
    cr_expect_not_null(strstr(node_config_usage(), "[peers]"));
}

/* Each bad input fails with TERN_EINVAL and a message naming the cause. */
struct bad
{
    const char *args[8];
    const char *needle;
};

static void expect_bad(const struct bad *b)
{
    char *argv[10] = {"ternd"};
    int argc = 1;
    struct node_config c;
    char m[TERN_ERRMSG_SIZE] = "";
    for (int i = 0; b->args[i] != NULL; i++) {
        argv[argc++] = (char *)b->args[i];
    }
    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, argc, argv, m), TERN_EINVAL,
                 "accepted: %s", b->args[0]);
    cr_expect_not_null(strstr(m, b->needle), "message '%s' lacks '%s'", m,
                       b->needle);
    node_config_free(&c);
}

Test(config, validation_errors)
{
    static const struct bad cases[] = {
        {{"--data-dir", "/tmp/x", NULL}, "node id is missing"},
        {{"--id", "1", NULL}, "data directory is missing"},
        {{"--id", "0", NULL}, "must be > 0"},
        {{"--id", "x1", NULL}, "not a non-negative integer"},
        {{"--id", "1", "--data-dir", "/d", NULL}, "no peers"},
        {{"--dev", "--client-addr", "localhost:1", NULL}, "IPv4"},
        {{"--dev", "--raft-addr", "127.0.0.1:0", NULL}, "IPv4"},
        {{"--dev", "--raft-addr", "127.0.0.1:70000", NULL}, "IPv4"},
        {{"--dev", "--heartbeat-ms", "150", NULL}, "heartbeat_ms"},
        {{"--dev", "--transport", "verbs", NULL}, "only tcp"},
        {{"--dev", "--log-level", "loud", NULL}, "log level"},
        {{"--dev", "--durability", "ram", NULL}, "not disk or memory"},
        {{"--dev", "--raft-segment-bytes", "32K", NULL}, "at least 64K"},
        {{"--dev", "--raft-segment-bytes", "66000", NULL}, "multiple of 4K"},
        {{"--dev", "--raft-segment-bytes", "2G", NULL}, "segment-bytes"},
        {{"--dev", "--entry-checksum", "crc", NULL}, "not auto, xxh3 or xxh32"},
        {{"--dev", "--busy-poll-us", "2000000", NULL}, "busy-poll-us"},
        {{"--dev", "--shm-dir", "rel/dir", NULL}, "absolute directory"},
        {{"--dev", "--max-message-bytes", "16M", NULL}, "max_frame_bytes"},
        {{"--dev", "--index-map-bytes", "8M", NULL}, "at least 16M"},
        {{"--dev", "--index-map-bytes", "17000G", NULL}, "index-map-bytes"},
        {{"--dev", "--frobnicate", NULL}, "unknown argument"},
        {{"--dev", "--id", NULL}, "needs a value"},
        {{"--dev", "--id", "2", NULL}, "not in its own peer list"},
        {{"--dev", "--peer", "1=127.0.0.1:1", NULL}, "RAFTADDR,CLIENTADDR"},
        {{"--dev", "--peer", "127.0.0.1:1,127.0.0.1:2", NULL}, "ID=RAFTADDR"},
        {{"--dev", "--peer", "1=127.0.0.1:7500,127.0.0.1:7400", "--peer",
          "2=127.0.0.1:7500,127.0.0.1:7402", NULL},
         "share an address"},
        {{"--dev", "--peer", "1=127.0.0.1:1,127.0.0.1:2", NULL},
         "differs from peer"},
        {{"--config", "/nonexistent/ternd.ini", NULL}, "No such file"},
    };
    for (unsigned i = 0; i < TERN_ARRAY_SIZE(cases); i++) {
        expect_bad(&cases[i]);
    }
}

Test(config, ini_errors)
{
    cr_expect_eq(
        node_config_load_string(&cfg, "[node]\nbogus = 1\n", "f", errmsg),
        TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "f: [node] bogus: unknown key"), "%s",
                       errmsg);
    cr_expect_eq(
        node_config_load_string(&cfg, "[nodes]\nid = 1\n", "f", errmsg),
        TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "unknown section"), "%s", errmsg);
    cr_expect_eq(node_config_load_string(&cfg, "[node]\nid\n", "f", errmsg),
                 TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "f:2: syntax error"), "%s", errmsg);
    cr_expect_eq(
        node_config_load_string(&cfg, "[peers]\nx = a,b\n", "f", errmsg),
        TERN_EINVAL);
    cr_expect_eq(node_config_load_string(&cfg, "[raft]\nheartbeat_ms = 5G\n",
                                         "f", errmsg),
                 TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "larger than"), "%s", errmsg);
}

/* The first bad line is reported, with its line, even when valid lines
 * follow it: inih goes on after a refused line, and a later valid one
 * must not hide the error. */
Test(config, misspelled_key_with_valid_lines_after)
{
    static const char text[] =
        "[node]\n"
        "id = 2\n"
        "data_dir = /tmp/t2\n"
        "[raft]\n"
        "heartbeat_ms = 30\n"
        "; a comment line\n"
        "electon_timeout_ms = 300\n"
        "snapshot_trailing = 64\n"
        "[limits]\n"
        "max_message_bytes = 1M\n";
    cr_expect_eq(node_config_load_string(&cfg, text, "f", errmsg), TERN_EINVAL);
    cr_expect_str_eq(errmsg,
                     "f: [raft] electon_timeout_ms: unknown key at line 7");
}

Test(config, misspelled_key_in_each_section)
{
    static const struct
    {
        const char *text;
        const char *message;
    } cases[] = {
        {"[node]\nid = 1\ndata_dri = /d\nlog_level = info\n[raft]\n"
         "heartbeat_ms = 5\n",
         "f: [node] data_dri: unknown key at line 3"},
        {"[raft]\nheartbeat_ms = 5\nsnapshot_trialing = 8\n"
         "snapshot_trailing = 8\n",
         "f: [raft] snapshot_trialing: unknown key at line 3"},
        {"[limits]\nmax_frame_bytes = 2M\nmax_mesage_bytes = 1M\n"
         "max_message_bytes = 1M\n",
         "f: [limits] max_mesage_bytes: unknown key at line 3"},
        {"[peers]\n1 = 127.0.0.1:1,127.0.0.1:2\nl = 127.0.0.1:3,"
         "127.0.0.1:4\n2 = 127.0.0.1:5,127.0.0.1:6\n",
         "f: [peers] l: 'l' is not a non-negative integer at line 3"},
        {"[node]\nid = 1\n[nodes]\nid = 2\n[node]\nid = 3\n",
         "f: [nodes] id: unknown section at line 4"},
    };
    for (unsigned i = 0; i < TERN_ARRAY_SIZE(cases); i++) {
        struct node_config c;
        char m[TERN_ERRMSG_SIZE] = "";
        node_config_init(&c);
        cr_expect_eq(node_config_load_string(&c, cases[i].text, "f", m),
                     TERN_EINVAL, "accepted case %u", i);
        cr_expect_str_eq(m, cases[i].message, "case %u", i);
        node_config_free(&c);
    }
}

/* The first error in the file wins, whichever kind it is. */
Test(config, first_error_wins)
{
    cr_expect_eq(
        node_config_load_string(
            &cfg, "[node]\nid = 1\nbroken line\nbogus = 1\n", "f", errmsg),
        TERN_EINVAL);
    cr_expect_str_eq(errmsg, "f:3: syntax error");
    cr_expect_eq(
        node_config_load_string(
            &cfg, "[node]\nbogus = 1\nbroken line\nid = 1\n", "f", errmsg),
        TERN_EINVAL);
    cr_expect_str_eq(errmsg, "f: [node] bogus: unknown key at line 2");
    cr_expect_eq(
        node_config_load_string(
            &cfg, "[raft]\nheartbeat_ms = 5G\nheartbeat_ms = 5\n", "f", errmsg),
        TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "larger than"), "%s", errmsg);
    cr_expect_not_null(strstr(errmsg, " at line 2"), "%s", errmsg);
}

Test(config, misspelled_key_in_a_file)
{
    char *path = write_tmp(
        "[node]\nid = 2\n[raft]\nelecton_timeout_ms = 300\n"
        "heartbeat_ms = 30\n");
    ARGS("--config", path, "--data-dir", "/tmp/t2");
    int rv = node_config_parse_args(&cfg, argc_, argv_, errmsg);
    unlink(path);
    cr_expect_eq(rv, TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg,
                              "] electon_timeout_ms: unknown key at "
                              "line 4"),
                       "%s", errmsg);
}

/* Every key of the file and every flag lands in its own member. */
Test(config, every_key_in_the_file)
{
    static const char text[] =
        "[node]\n"
        "id = 2\n"
        "data_dir = /tmp/t2\n"
        "client_addr = 127.0.0.1:17402\n"
        "raft_addr = 127.0.0.1:17502\n"
        "transport = shm\n"
        "shm_dir = /run/t\n"
        "busy_poll_us = 40\n"
        "follower_busy_poll_us = 7\n"
        "log_level = error\n"
        "pid_file = /tmp/t2.pid\n"
        "[raft]\n"
        "election_timeout_ms = 300\n"
        "heartbeat_ms = 30\n"
        "snapshot_threshold_bytes = 1G\n"
        "snapshot_trailing = 9\n"
        "durability = memory\n"
        "segment_bytes = 1M\n"
        "[limits]\n"
        "max_message_bytes = 1K\n"
        "max_frame_bytes = 3M\n"
        "min_free_disk_bytes = 5\n"
        "reserve_disk_bytes = 6\n";
    cr_assert_eq(node_config_load_string(&cfg, text, "t", errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.id, 2);
    cr_expect_str_eq(cfg.data_dir, "/tmp/t2");
    cr_expect_str_eq(cfg.client_addr, "127.0.0.1:17402");
    cr_expect_str_eq(cfg.raft_addr, "127.0.0.1:17502");
    cr_expect_str_eq(cfg.transport, "shm");
    cr_expect_str_eq(cfg.shm_dir, "/run/t");
    cr_expect_eq(cfg.busy_poll_us, 40);
    cr_expect_eq(cfg.follower_busy_poll_us, 7);
    cr_expect_eq(cfg.log_level, NODE_LOG_ERROR);
    cr_expect_str_eq(cfg.pid_file, "/tmp/t2.pid");
    cr_expect_eq(cfg.election_timeout_ms, 300);
    cr_expect_eq(cfg.heartbeat_ms, 30);
    cr_expect_eq(cfg.snapshot_bytes, 1ull << 30);
    cr_expect_eq(cfg.snapshot_trailing, 9);
    cr_expect_eq(cfg.memory_durability, 1);
    cr_expect_eq(cfg.raft_segment_bytes, 1u << 20);
    cr_expect_eq(cfg.max_message_bytes, 1024);
    cr_expect_eq(cfg.max_frame_bytes, 3u << 20);
    cr_expect_eq(cfg.min_free_disk_bytes, 5);
    cr_expect_eq(cfg.reserve_disk_bytes, 6);
}

Test(config, every_flag)
{
    ARGS("--dev", "--election-timeout-ms", "400", "--heartbeat-ms", "40",
         "--snapshot-bytes", "2M", "--snapshot-trailing", "11",
         "--max-message-bytes", "2K", "--max-frame-bytes", "1M",
         "--min-free-disk-bytes=3K", "--reserve-disk-bytes", "0", "--pid-file",
         "/tmp/p", "--transport", "auto", "--log-level", "debug",
         "--durability", "disk", "--follower-busy-poll-us", "2");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.election_timeout_ms, 400);
    cr_expect_eq(cfg.heartbeat_ms, 40);
    cr_expect_eq(cfg.snapshot_bytes, 2u << 20);
    cr_expect_eq(cfg.snapshot_trailing, 11);
    cr_expect_eq(cfg.max_message_bytes, 2048);
    cr_expect_eq(cfg.max_frame_bytes, 1u << 20);
    cr_expect_eq(cfg.min_free_disk_bytes, 3072);
    cr_expect_eq(cfg.reserve_disk_bytes, 0);
    cr_expect_str_eq(cfg.pid_file, "/tmp/p");
    cr_expect_str_eq(cfg.transport, "auto");
    cr_expect_eq(cfg.log_level, NODE_LOG_DEBUG);
    cr_expect_eq(cfg.memory_durability, 0);
    cr_expect_eq(cfg.follower_busy_poll_us, 2);
}

Test(config, log_levels)
{
    cr_expect_eq(node_log_level_parse("ERROR"), NODE_LOG_ERROR);
    cr_expect_eq(node_log_level_parse("debug"), NODE_LOG_DEBUG);
    cr_expect_eq(node_log_level_parse("trace"), -1);
    cr_expect_str_eq(node_log_level_name(NODE_LOG_WARN), "warn");
}

Test(config, security_keys)
{
    static const char text[] =
        "[node]\nid = 1\ndata_dir = /tmp/s1\n"
        "[security]\npeer_auth = tls\n"
        "cluster_ca = /etc/tern/ca.pem\n"
        "node_cert = /etc/tern/node1.pem\n"
        "node_key = /etc/tern/node1.key\n"
        "cluster_secret_file = /etc/tern/s\n";

    cr_expect_eq(cfg.peer_auth, NODE_PEER_AUTH_TLS); /* the default */
    cr_assert_eq(node_config_load_string(&cfg, text, "t", errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.peer_auth, NODE_PEER_AUTH_TLS);
    cr_expect_str_eq(cfg.cluster_ca, "/etc/tern/ca.pem");
    cr_expect_str_eq(cfg.node_cert, "/etc/tern/node1.pem");
    cr_expect_str_eq(cfg.node_key, "/etc/tern/node1.key");
    cr_expect_str_eq(cfg.cluster_secret_file, "/etc/tern/s");
    cr_assert_eq(node_config_load_string(&cfg, "[security]\npeer_auth = none\n",
                                         "t", errmsg),
                 0, "%s", errmsg);
    cr_expect_eq(cfg.peer_auth, NODE_PEER_AUTH_NONE);
    cr_assert_eq(node_config_load_string(
                     &cfg, "[security]\npeer_auth = maybe\n", "t", errmsg),
                 TERN_EINVAL);
    cr_expect(strstr(errmsg, "not tls or none") != NULL, "%s", errmsg);
}

Test(config, peer_auth_tls_needs_credentials)
{
    static const char *const keys[] = {"cluster_ca", "node_cert", "node_key"};
    static const char *const lines[] = {
        "cluster_ca = /c.pem\n", "node_cert = /n.pem\n", "node_key = /n.key\n"};

    for (unsigned miss = 0; miss < 3; miss++) {
        char text[256];
        struct node_config c;
        int k = snprintf(text, sizeof text,
                         "[node]\nid = 1\ndata_dir = /tmp/s1\n"
                         "raft_addr = 127.0.0.1:7501\n"
                         "client_addr = 127.0.0.1:7401\n[security]\n");
        for (unsigned i = 0; i < 3; i++) {
            if (i != miss) {
                k +=
                    snprintf(text + k, sizeof text - (size_t)k, "%s", lines[i]);
            }
        }
        node_config_init(&c);
        cr_assert_eq(node_config_load_string(&c, text, "t", errmsg), 0, "%s",
                     errmsg);
        cr_expect_eq(node_config_validate(&c, errmsg), TERN_EINVAL);
        cr_expect(strstr(errmsg, keys[miss]) != NULL, "%s", errmsg);
        /* peer_auth = none needs none of them. */
        cr_assert_eq(node_config_load_string(
                         &c, "[security]\npeer_auth = none\n", "t", errmsg),
                     0);
        cr_expect_eq(node_config_validate(&c, errmsg), 0, "%s", errmsg);
        node_config_free(&c);
    }
}

Test(config, dev_mode_runs_without_peer_auth)
{
    ARGS("--dev");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect(cfg.dev);
    cr_expect_eq(cfg.peer_auth, NODE_PEER_AUTH_NONE);
}

/* The client port's [limits] keys: defaults, the file and the flags, and
 * the checks that keep one frame and one connection within the budget. */
Test(config, client_limits)
{
    static const char text[] =
        "[limits]\n"
        "client_memory_bytes = 64M\n"
        "max_conn_queued_bytes = 8M\n"
        "max_connections = 100\n"
        "max_connections_per_addr = 10\n"
        "idle_timeout_ms = 0\n"
        "frame_timeout_ms = 1500\n"
        "slow_reader_timeout_ms = 2500\n"
        "max_parked = 500\n"
        "max_parked_per_conn = 5\n"
        "list_page_max = 50\n";
    cr_expect_eq(cfg.client_memory_bytes, NODE_DEFAULT_CLIENT_MEMORY);
    cr_expect_eq(cfg.max_conn_queued_bytes, 32u << 20);
    cr_expect_eq(cfg.max_connections, 4096);
    cr_expect_eq(cfg.max_connections_per_addr, 256);
    cr_expect_eq(cfg.idle_timeout_ms, 600000);
    cr_expect_eq(cfg.frame_timeout_ms, 30000);
    cr_expect_eq(cfg.slow_reader_timeout_ms, 30000);
    cr_expect_eq(cfg.max_parked, 10000);
    cr_expect_eq(cfg.max_parked_per_conn, 64);
    cr_expect_eq(cfg.list_page_max, 1000);
    cr_assert_eq(node_config_load_string(&cfg, text, "t.ini", errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.client_memory_bytes, 64u << 20);
    cr_expect_eq(cfg.max_conn_queued_bytes, 8u << 20);
    cr_expect_eq(cfg.max_connections, 100);
    cr_expect_eq(cfg.max_connections_per_addr, 10);
    cr_expect_eq(cfg.idle_timeout_ms, 0);
    cr_expect_eq(cfg.frame_timeout_ms, 1500);
    cr_expect_eq(cfg.slow_reader_timeout_ms, 2500);
    cr_expect_eq(cfg.max_parked, 500);
    cr_expect_eq(cfg.max_parked_per_conn, 5);
    cr_expect_eq(cfg.list_page_max, 50);
}

Test(config, client_limits_validation)
{
    static const struct bad cases[] = {
        {{"--dev", "--client-memory-bytes", "16M", NULL},
         "client_memory_bytes"},
        {{"--dev", "--max-conn-queued-bytes", "1K", NULL},
         "max_conn_queued_bytes"},
        {{"--dev", "--max-conn-queued-bytes", "1G", NULL},
         "max_conn_queued_bytes"},
        {{"--dev", "--max-connections", "0", NULL}, "max_connections"},
        {{"--dev", "--max-parked-per-conn", "0", NULL}, "max_parked_per_conn"},
        {{"--dev", "--frame-timeout-ms", "0", NULL}, "frame_timeout_ms"},
        {{"--dev", "--list-page-max", "1000000", NULL}, "list-page-max"},
    };
    for (unsigned i = 0; i < TERN_ARRAY_SIZE(cases); i++) {
        expect_bad(&cases[i]);
    }
}

/* client_tls resolved against client_addr's host, for each mode. */
Test(config, client_tls_resolution)
{
    static const struct
    {
        const char *addr;
        bool auto_on;
    } addrs[] = {
        {"127.0.0.1:7401", false},
        {"127.0.0.2:7401", false},
        {"0.0.0.0:7401", true},
        {"10.1.2.3:7401", true},
    };
    static const char *const modes[] = {"auto", "on", "off"};

    for (unsigned i = 0; i < TERN_ARRAY_SIZE(addrs); i++) {
        for (unsigned m = 0; m < TERN_ARRAY_SIZE(modes); m++) {
            struct node_config c;
            char e[TERN_ERRMSG_SIZE] = "";
            char *argv[] = {"ternd",
                            "--id",
                            "1",
                            "--data-dir",
                            "/tmp/x",
                            "--client-addr",
                            (char *)addrs[i].addr,
                            "--raft-addr",
                            "127.0.0.9:7501",
                            "--cluster-ca",
                            "/c.pem",
                            "--node-cert",
                            "/n.pem",
                            "--node-key",
                            "/n.key",
                            "--client-tls",
                            (char *)modes[m]};
            bool want = m == 0 ? addrs[i].auto_on : m == 1;

            node_config_init(&c);
            cr_assert_eq(
                node_config_parse_args(&c, TERN_ARRAY_SIZE(argv), argv, e), 0,
                "%s %s: %s", addrs[i].addr, modes[m], e);
            cr_expect_eq(node_config_client_tls(&c), want, "%s %s",
                         addrs[i].addr, modes[m]);
            cr_expect_str_eq(node_config_client_cert(&c), "/n.pem");
            cr_expect_str_eq(node_config_client_key(&c), "/n.key");
            node_config_free(&c);
        }
    }
}

/* --dev keeps auto (its client address is loopback: plaintext). */
Test(config, client_tls_dev_is_auto)
{
    ARGS("--dev");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(cfg.client_tls, NODE_CLIENT_TLS_AUTO);
    cr_expect_not(node_config_client_tls(&cfg));
}

/* TLS on the client port without a certificate is a configuration error
 * that says what to set; client_cert/client_key override node_cert. */
Test(config, client_tls_needs_a_certificate)
{
    struct node_config c;
    char e[TERN_ERRMSG_SIZE] = "";
    char *on[] = {"ternd",
                  "--id",
                  "1",
                  "--data-dir",
                  "/tmp/x",
                  "--client-addr",
                  "127.0.0.1:7401",
                  "--raft-addr",
                  "127.0.0.1:7501",
                  "--peer-auth",
                  "none",
                  "--client-tls",
                  "on"};
    char *autoc[] = {"ternd",         "--id",        "1",
                     "--data-dir",    "/tmp/x",      "--client-addr",
                     "10.1.2.3:7401", "--raft-addr", "10.1.2.3:7501",
                     "--peer-auth",   "none"};
    char *own[] = {"ternd",         "--id",         "1",
                   "--data-dir",    "/tmp/x",       "--client-addr",
                   "10.1.2.3:7401", "--raft-addr",  "10.1.2.3:7501",
                   "--peer-auth",   "none",         "--client-cert",
                   "/c.pem",        "--client-key", "/c.key",
                   "--client-ca",   "/ca.pem"};
    char *half[] = {"ternd",          "--id",        "1",
                    "--data-dir",     "/tmp/x",      "--client-addr",
                    "127.0.0.1:7401", "--raft-addr", "127.0.0.1:7501",
                    "--peer-auth",    "none",        "--client-cert",
                    "/c.pem"};

    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(on), on, e),
                 TERN_EINVAL);
    cr_expect(strstr(e, "client_tls is on") != NULL, "%s", e);
    cr_expect(strstr(e, "client_cert") != NULL, "%s", e);
    node_config_free(&c);

    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(autoc), autoc, e),
                 TERN_EINVAL);
    cr_expect(strstr(e, "10.1.2.3:7401") != NULL, "%s", e);
    cr_expect(strstr(e, "client_tls = off") != NULL, "%s", e);
    node_config_free(&c);

    node_config_init(&c);
    cr_assert_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(own), own, e), 0,
                 "%s", e);
    cr_expect(node_config_client_tls(&c));
    cr_expect_str_eq(node_config_client_cert(&c), "/c.pem");
    cr_expect_str_eq(node_config_client_key(&c), "/c.key");
    cr_expect_str_eq(c.client_ca, "/ca.pem");
    node_config_free(&c);

    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(half), half, e),
                 TERN_EINVAL);
    cr_expect(strstr(e, "client_key") != NULL, "%s", e);
    node_config_free(&c);

    cr_expect_eq(node_config_load_string(&cfg, "[security]\nclient_tls = yes\n",
                                         "f", errmsg),
                 TERN_EINVAL);
    cr_expect(strstr(errmsg, "auto, on or off") != NULL, "%s", errmsg);
}

/* client_auth resolved against --dev and client_addr's host. */
Test(config, client_auth_resolution)
{
    static const char *const addrs[] = {"127.0.0.1:7401", "10.1.2.3:7401"};
    static const char *const modes[] = {"auto", "on", "off"};
    for (unsigned i = 0; i < TERN_ARRAY_SIZE(addrs); i++) {
        for (unsigned m = 0; m < TERN_ARRAY_SIZE(modes); m++) {
            struct node_config c;
            char e[TERN_ERRMSG_SIZE] = "";
            char *argv[] = {"ternd",
                            "--id",
                            "1",
                            "--data-dir",
                            "/tmp/x",
                            "--client-addr",
                            (char *)addrs[i],
                            "--raft-addr",
                            "127.0.0.9:7501",
                            "--peer-auth",
                            "none",
                            "--client-tls",
                            "off",
                            "--client-auth",
                            (char *)modes[m]};
            bool want = m == 0 ? i == 1 : m == 1;
            node_config_init(&c);
            cr_assert_eq(
                node_config_parse_args(&c, TERN_ARRAY_SIZE(argv), argv, e), 0,
                "%s %s: %s", addrs[i], modes[m], e);
            cr_expect_eq(node_config_client_auth(&c), want, "%s %s", addrs[i],
                         modes[m]);
            cr_expect_eq(node_config_client_loopback(&c), i == 0);
            node_config_free(&c);
        }
    }
    ARGS("--dev");
    cr_assert_eq(node_config_parse_args(&cfg, argc_, argv_, errmsg), 0, "%s",
                 errmsg);
    cr_expect_not(node_config_client_auth(&cfg));
    cr_expect_eq(node_config_load_string(
                     &cfg, "[security]\nclient_auth = maybe\n", "f", errmsg),
                 TERN_EINVAL);
    cr_expect(strstr(errmsg, "client_auth") != NULL, "%s", errmsg);
}

/* bootstrap_admin needs its credential, a user name and a credential
 * that parses; the peer handshake bounds are keys with defaults. */
Test(config, bootstrap_admin_and_peer_bounds)
{
    static const char cred[] =
        "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"
        "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
        "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";
    struct node_config c;
    char e[TERN_ERRMSG_SIZE] = "";
    char *base[] = {"ternd",          "--id",        "1",
                    "--data-dir",     "/tmp/x",      "--client-addr",
                    "127.0.0.1:7401", "--raft-addr", "127.0.0.1:7501",
                    "--peer-auth",    "none"};
    char *argv[TERN_ARRAY_SIZE(base) + 4];
    memcpy(argv, base, sizeof(base));

    argv[TERN_ARRAY_SIZE(base)] = "--bootstrap-admin";
    argv[TERN_ARRAY_SIZE(base) + 1] = "root";
    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(base) + 2, argv, e),
                 TERN_EINVAL);
    cr_expect(strstr(e, "go together") != NULL, "%s", e);
    cr_expect_eq(c.peer_handshake_timeout_ms, NODE_DEFAULT_PEER_HANDSHAKE_MS);
    cr_expect_eq(c.peer_max_pending, NODE_DEFAULT_PEER_MAX_PENDING);
    node_config_free(&c);

    argv[TERN_ARRAY_SIZE(base) + 2] = "--bootstrap-admin-cred";
    argv[TERN_ARRAY_SIZE(base) + 3] = (char *)cred;
    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(argv), argv, e), 0,
                 "%s", e);
    cr_expect_str_eq(c.bootstrap_admin, "root");
    node_config_free(&c);

    argv[TERN_ARRAY_SIZE(base) + 1] = "no way";
    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(argv), argv, e),
                 TERN_EBADNAME);
    node_config_free(&c);

    argv[TERN_ARRAY_SIZE(base) + 1] = "root";
    argv[TERN_ARRAY_SIZE(base) + 3] = "SCRAM-SHA-256$12:AAAA$BBBB:CCCC";
    node_config_init(&c);
    cr_expect_neq(node_config_parse_args(&c, TERN_ARRAY_SIZE(argv), argv, e),
                  0);
    cr_expect(strstr(e, "bootstrap_admin_cred") != NULL, "%s", e);
    node_config_free(&c);

    argv[TERN_ARRAY_SIZE(base)] = "--peer-max-pending";
    argv[TERN_ARRAY_SIZE(base) + 1] = "0";
    node_config_init(&c);
    cr_expect_eq(node_config_parse_args(&c, TERN_ARRAY_SIZE(base) + 2, argv, e),
                 TERN_EINVAL);
    cr_expect(strstr(e, "peer_max_pending") != NULL, "%s", e);
    node_config_free(&c);
}

Test(config, log_section)
{
    static const char text[] =
        "[node]\nid = 1\ndata_dir = /tmp/s1\n"
        "[log]\nfile = /var/log/tern/ternd.log\n"
        "format = json\n";
    cr_expect_eq(cfg.log_format, NODE_LOG_TEXT); /* the default */
    cr_expect_null(cfg.log_file);
    cr_assert_eq(node_config_load_string(&cfg, text, "t", errmsg), 0, "%s",
                 errmsg);
    cr_expect_str_eq(cfg.log_file, "/var/log/tern/ternd.log");
    cr_expect_eq(cfg.log_format, NODE_LOG_JSON);
    cr_expect_neq(
        node_config_load_string(&cfg, "[log]\nformat = xml\n", "t", errmsg), 0);
    cr_expect(strstr(errmsg, "text|json") != NULL, "%s", errmsg);
}

/* [raft] rejoin_on_corrupt: on by default, off from the file or the flag,
 * the flag over the file, a non-boolean refused with the key named. */
Test(config, rejoin_on_corrupt)
{
    cr_expect_eq(cfg.rejoin_on_corrupt, 1); /* the default */
    cr_assert_eq(node_config_load_string(
                     &cfg, "[raft]\nrejoin_on_corrupt = false\n", "t", errmsg),
                 0, "%s", errmsg);
    cr_expect_eq(cfg.rejoin_on_corrupt, 0);
    cr_assert_eq(node_config_load_string(
                     &cfg, "[raft]\nrejoin_on_corrupt = true\n", "t", errmsg),
                 0, "%s", errmsg);
    cr_expect_eq(cfg.rejoin_on_corrupt, 1);
    cr_expect_neq(node_config_load_string(
                      &cfg, "[raft]\nrejoin_on_corrupt = maybe\n", "t", errmsg),
                  0);
    cr_expect(strstr(errmsg, "rejoin_on_corrupt") != NULL, "%s", errmsg);
}

Test(config, rejoin_on_corrupt_flag)
{
    char *path = write_tmp("[raft]\nrejoin_on_corrupt = true\n");
    ARGS("--config", path, "--id", "1", "--data-dir", "/tmp/x", "--client-addr",
         "127.0.0.1:7401", "--raft-addr", "127.0.0.1:7501", "--cluster-ca",
         "/c.pem", "--node-cert", "/n.pem", "--node-key", "/n.key",
         "--rejoin-on-corrupt", "false");
    int rv = node_config_parse_args(&cfg, argc_, argv_, errmsg);
    unlink(path);
    cr_assert_eq(rv, 0, "%s", errmsg);
    cr_expect_eq(cfg.rejoin_on_corrupt, 0);
}
