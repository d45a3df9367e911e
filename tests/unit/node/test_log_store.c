/*
 * [raft] log_store (node.c node_pick_log_store): auto picks the store whose
 * files the raft directory holds, tern's for a new one, and refuses a
 * directory holding files of both; a store set in the config is kept.
 */
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
#include "node.h"

static char dir[] = "/tmp/tern-logstore-XXXXXX";
static char errmsg[TERN_ERRMSG_SIZE];
static struct node_config c;

static void setup(void)
{
    strcpy(dir, "/tmp/tern-logstore-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    errmsg[0] = '\0';
    node_config_init(&c);
    c.data_dir = dir; /* borrowed: not freed by the test */
}

static void teardown(void)
{
    test_rm_tree(dir);
}

TestSuite(log_store, .init = setup, .fini = teardown);

/* Create DIR/raft/name (and DIR/raft). */
static void touch(const char *name)
{
    char p[PATH_MAX];
    (void)snprintf(p, sizeof(p), "%s/raft", dir);
    (void)mkdir(p, 0700);
    (void)snprintf(p, sizeof(p), "%s/raft/%s", dir, name);
    int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "create %s", p);
    close(fd);
}

static void expect(bool tern, const char *why)
{
    c.tern_log_store = -1;
    cr_assert_eq(node_pick_log_store(&c, errmsg), 0, "%s", errmsg);
    cr_expect_eq(c.tern_log_store, tern ? 1 : 0);
    cr_expect_str_eq(c.log_store_why, why);
}

Test(log_store, auto_is_the_default_and_a_new_directory_gets_tern)
{
    cr_assert(c.log_store_auto);
    expect(true, "auto: a new raft directory"); /* no raft/ at all */
    touch("tern-meta1"); /* the term record alone: both stores write it */
    expect(true, "auto: a new raft directory");
}

Test(log_store, auto_keeps_raft_uv_directories)
{
    static const char *const uv[] = {
        "metadata1", "metadata2", "open-3",
        "00000000000000000001-00000000000000000154", "snapshot-2-512-99"};
    for (size_t i = 0; i < sizeof uv / sizeof uv[0]; i++) {
        teardown();
        setup();
        touch("tern-meta1");
        touch(uv[i]);
        expect(false, "auto: raft_uv files found");
    }
}

Test(log_store, auto_keeps_tern_directories)
{
    static const char *const tern[] = {"seg-00000000000000000001",
                                       "free-00000000000000000004",
                                       "snap-00000000000000000512"};
    for (size_t i = 0; i < sizeof tern / sizeof tern[0]; i++) {
        teardown();
        setup();
        touch(tern[i]);
        expect(true, "auto: tern store files found");
    }
}

Test(log_store, both_stores_refused)
{
    touch("metadata1");
    touch("seg-00000000000000000001");
    cr_assert_eq(node_pick_log_store(&c, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "both raft log stores") != NULL, "%s", errmsg);
}

Test(log_store, configured_store_kept)
{
    char *bad[] = {"ternd", "--id",        "1",   "--data-dir",
                   dir,     "--log-store", "lmdb"};
    struct node_config k;
    node_config_init(&k);
    cr_expect_neq(node_config_parse_args(&k, 7, bad, errmsg), 0);
    cr_expect(strstr(errmsg, "not auto, tern or uv") != NULL, "%s", errmsg);
    node_config_free(&k);
    /* As --log-store uv sets it. */
    c.log_store_auto = 0;
    c.tern_log_store = 0;
    touch("seg-00000000000000000001"); /* refused later, by repl_new */
    cr_assert_eq(node_pick_log_store(&c, errmsg), 0);
    cr_expect_eq(c.tern_log_store, 0);
    cr_expect_str_eq(c.log_store_why, "configured");
}
