/* node/ident.c: the data directory's IDENTITY (codec, created on an empty
 * directory, adopted on data without one, matched, refused for another
 * node or cluster, refused when damaged) and the privacy check; the
 * config keys cluster_name, allow_open_data_dir and max_term_jump. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tern_common.h>

#include "../rm_tree.h"
#include "config.h"
#include "ident.h"

static char dir[] = "/tmp/tern-ident-XXXXXX";
static char ipath[PATH_MAX];
static char errmsg[TERN_ERRMSG_SIZE];

static void setup(void)
{
    strcpy(dir, "/tmp/tern-ident-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_lt((size_t)snprintf(ipath, sizeof(ipath), "%s/IDENTITY", dir),
                 sizeof(ipath));
    errmsg[0] = '\0';
}

static void teardown(void)
{
    test_rm_tree(dir);
}

TestSuite(ident, .init = setup, .fini = teardown);

Test(ident, codec_round_trip_and_damage)
{
    struct node_ident in = {.node_id = 7, .created_ms = 1700000000123ull};
    struct node_ident out;
    uint8_t buf[NODE_IDENT_MAX_SIZE];
    size_t len;

    strcpy(in.cluster, "prod-eu");
    len = node_ident_encode(&in, buf);
    cr_assert_eq(len, 28 + 7);
    cr_assert_eq(node_ident_decode(buf, len, &out), 0);
    cr_expect_str_eq(out.cluster, "prod-eu");
    cr_expect_eq(out.node_id, 7);
    cr_expect_eq(out.created_ms, 1700000000123ull);
    for (size_t k = 0; k < len; k++) {
        buf[k] ^= 0x01;
        cr_expect_neq(node_ident_decode(buf, len, &out), 0, "byte %zu", k);
        buf[k] ^= 0x01;
    }
    cr_expect_eq(node_ident_decode(buf, len - 1, &out), TERN_ECORRUPT);
    cr_expect_eq(node_ident_decode(buf, 3, &out), TERN_ECORRUPT);
    tern_put_u16(buf + 4, 2); /* another version, checksum recomputed */
    tern_put_u32(buf + 24 + 7, tern_checksum32(buf, 24 + 7));
    cr_expect_eq(node_ident_decode(buf, len, &out), TERN_EVERSION);
    strcpy(in.cluster, "has space");
    cr_expect_eq(node_ident_encode(&in, buf), 0);
}

Test(ident, created_on_an_empty_dir_then_matched)
{
    enum node_ident_event ev = NODE_IDENT_MATCH;
    struct node_ident found;
    struct stat st;

    cr_assert_eq(node_ident_open(dir, "tern", 3, 1234, &ev, &found, errmsg), 0,
                 "%s", errmsg);
    cr_expect_eq(ev, NODE_IDENT_CREATED);
    cr_assert_eq(stat(ipath, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600);
    cr_expect_eq(st.st_size, 28 + 4);
    cr_assert_eq(node_ident_open(dir, "tern", 3, 9999, &ev, &found, errmsg), 0,
                 "%s", errmsg);
    cr_expect_eq(ev, NODE_IDENT_MATCH);
    cr_expect_eq(found.created_ms, 1234, "the creation time is kept");
    cr_expect_neq(access(ipath, F_OK), -1);
}

Test(ident, data_without_identity_is_adopted)
{
    enum node_ident_event ev = NODE_IDENT_MATCH;
    struct node_ident found;
    char sub[PATH_MAX];
    (void)snprintf(sub, sizeof sub, "%s/raft", dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_assert_eq(node_ident_open(dir, "c1", 2, 5, &ev, &found, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(ev, NODE_IDENT_ADOPTED);
    cr_assert_eq(node_ident_open(dir, "c1", 2, 6, &ev, &found, errmsg), 0);
    cr_expect_eq(ev, NODE_IDENT_MATCH, "logged once: the file exists now");
}

Test(ident, another_node_or_cluster_refused)
{
    enum node_ident_event ev;
    struct node_ident found;
    cr_assert_eq(node_ident_open(dir, "tern", 1, 5, &ev, &found, errmsg), 0);
    cr_expect_eq(node_ident_open(dir, "tern", 2, 5, &ev, &found, errmsg),
                 TERN_EIDENTITY);
    cr_expect_eq(found.node_id, 1);
    cr_expect_str_eq(found.cluster, "tern");
    cr_expect_not_null(strstr(errmsg, "belongs to node 1 of cluster 'tern'"),
                       "%s", errmsg);
    cr_expect_not_null(strstr(errmsg, "this is node 2 of cluster 'tern'"), "%s",
                       errmsg);
    cr_expect_eq(node_ident_open(dir, "other", 1, 5, &ev, &found, errmsg),
                 TERN_EIDENTITY);
    cr_expect_not_null(strstr(errmsg, "cluster 'other'"), "%s", errmsg);
    /* Nothing was rewritten. */
    cr_assert_eq(node_ident_open(dir, "tern", 1, 5, &ev, &found, errmsg), 0);
    cr_expect_eq(ev, NODE_IDENT_MATCH);
}

Test(ident, damaged_identity_refused)
{
    enum node_ident_event ev;
    struct node_ident found;
    int fd;
    cr_assert_eq(node_ident_open(dir, "tern", 1, 5, &ev, &found, errmsg), 0);
    fd = open(ipath, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "\x02", 1, 8), 1); /* node id 1 -> 2 */
    close(fd);
    cr_expect_eq(node_ident_open(dir, "tern", 2, 5, &ev, &found, errmsg),
                 TERN_ECORRUPT);
    cr_expect_not_null(strstr(errmsg, "damaged (checksum)"), "%s", errmsg);
    fd = open(ipath, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_expect_eq(node_ident_open(dir, "tern", 1, 5, &ev, &found, errmsg),
                 TERN_ECORRUPT, "an empty IDENTITY");
}

Test(ident, open_data_dir_refused_unless_allowed)
{
    bool open_dir = true;
    unsigned mode = 0;
    cr_assert_eq(chmod(dir, 0700), 0);
    cr_expect_eq(node_ident_check_private(dir, false, &open_dir, &mode, errmsg),
                 0);
    cr_expect(!open_dir);
    cr_assert_eq(chmod(dir, 0755), 0);
    cr_expect_eq(node_ident_check_private(dir, false, &open_dir, &mode, errmsg),
                 TERN_EDENIED);
    cr_expect_eq(mode, 0755);
    cr_expect_not_null(strstr(errmsg, "chmod 700"), "%s", errmsg);
    cr_expect_eq(node_ident_check_private(dir, true, &open_dir, &mode, errmsg),
                 0);
    cr_expect(open_dir);
    cr_assert_eq(chmod(dir, 0750), 0);
    cr_expect_eq(node_ident_check_private(dir, false, &open_dir, &mode, errmsg),
                 TERN_EDENIED);
    cr_assert_eq(chmod(dir, 0700), 0);
}

Test(ident, config_keys)
{
    struct node_config c;
    node_config_init(&c);
    cr_expect_str_eq(node_config_cluster_name(&c), "tern");
    cr_expect_eq(c.allow_open_data_dir, 0);
    cr_expect_eq(c.max_term_jump, 1ull << 20);
    cr_assert_eq(node_config_load_string(&c,
                                         "[node]\ncluster_name = prod\n"
                                         "allow_open_data_dir = true\n"
                                         "[raft]\nmax_term_jump = 1000\n",
                                         "t", errmsg),
                 0, "%s", errmsg);
    cr_expect_str_eq(node_config_cluster_name(&c), "prod");
    cr_expect_eq(c.allow_open_data_dir, 1);
    cr_expect_eq(c.max_term_jump, 1000);
    cr_expect_eq(node_config_load_string(&c, "[node]\ncluster_name = a b\n",
                                         "t", errmsg),
                 TERN_EINVAL);
    cr_expect_eq(
        node_config_load_string(&c,
                                "[node]\ncluster_name = "
                                "x234567890123456789012345678901234567890"
                                "12345678901234567890123456\n",
                                "t", errmsg),
        TERN_EINVAL, "65 characters");
    cr_expect_eq(node_config_load_string(
                     &c, "[node]\nallow_open_data_dir = yes\n", "t", errmsg),
                 TERN_EINVAL);
    cr_expect(node_config_cluster_name_valid("a"));
    cr_expect(!node_config_cluster_name_valid(""));
    cr_expect(!node_config_cluster_name_valid("t\x01"));
    node_config_free(&c);
}
