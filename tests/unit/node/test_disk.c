/* node/disk.c: the disk-space alarm and the reserve file (jepsen F5). The
 * free space is real (statvfs of a temp dir); thresholds above it stand
 * in for a full disk. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tern_common.h>

#include "disk.h"

#define MB (1ull << 20)

static char dir[] = "/tmp/tern-disk-XXXXXX";
static char path[PATH_MAX];
static char errmsg[TERN_ERRMSG_SIZE];
static struct node_disk d;

static void setup(void)
{
    strcpy(dir, "/tmp/tern-disk-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_lt((size_t)snprintf(path, sizeof(path), "%s/disk-reserve", dir),
                 sizeof(path));
    errmsg[0] = '\0';
}

static void teardown(void)
{
    unlink(path);
    rmdir(dir);
}

/* Size and allocated bytes of the reserve file; -1 if it does not exist. */
static long long reserve_size(long long *allocated)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        return -1;
    }
    if (allocated != NULL) {
        *allocated = (long long)st.st_blocks * 512;
    }
    return (long long)st.st_size;
}

TestSuite(disk, .init = setup, .fini = teardown);

Test(disk, reserve_allocated_at_init)
{
    long long alloc = 0;
    cr_assert_eq(node_disk_init(&d, dir, 0, 1 * MB, errmsg), 0);
    cr_expect(d.held);
    cr_expect(!d.alarm);
    cr_expect_eq(reserve_size(&alloc), (long long)MB);
    cr_expect_geq(alloc, (long long)MB, "fallocate must allocate blocks");
    {
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_expect_eq(st.st_mode & 0777, 0600, "reserve mode %o",
                     (unsigned)(st.st_mode & 0777));
    }
    cr_expect_eq(node_disk_refuse(&d, errmsg), 0);
    /* A second start finds it held and leaves it alone. */
    cr_assert_eq(node_disk_init(&d, dir, 0, 1 * MB, errmsg), 0);
    cr_expect(d.held);
}

Test(disk, low_space_releases_reserve_and_refuses_until_both_fit)
{
    uint64_t free_now;
    cr_assert_eq(node_disk_init(&d, dir, 0, 1 * MB, errmsg), 0);
    free_now = d.free;
    cr_assert_gt(free_now, 8 * MB, "test needs some free space in /tmp");

    /* "Disk full": the minimum is above what is free. */
    d.min_free = free_now + 1024 * MB;
    cr_expect(node_disk_poll(&d, 1000, true), "the alarm flipped");
    cr_expect(d.alarm);
    cr_expect(!d.held);
    cr_expect_eq(reserve_size(NULL), -1, "the reserve file is deleted");
    cr_expect_eq(d.releases, 1);
    cr_expect_eq(node_disk_refuse(&d, errmsg), TERN_EFULL);
    cr_expect(strstr(errmsg, "reserve in use") != NULL, "%s", errmsg);

    /* Space for the minimum but not for minimum + reserve: still on. */
    cr_expect(!node_disk_poll(&d, 1500, true)); /* fresh reading */
    d.min_free = d.free > MB / 2 ? d.free - MB / 2 : 0;
    cr_expect(!node_disk_poll(&d, 2000, true));
    cr_expect(d.alarm, "no flapping: re-making the reserve would go below");
    cr_expect_eq(reserve_size(NULL), -1);

    /* Both fit: the reserve comes back, the alarm goes off. */
    d.min_free = 0;
    cr_expect(node_disk_poll(&d, 3000, true));
    cr_expect(!d.alarm);
    cr_expect(d.held);
    cr_expect_eq(reserve_size(NULL), (long long)MB);
    cr_expect_eq(node_disk_refuse(&d, errmsg), 0);
}

Test(disk, enospc_release_turns_the_alarm_on_at_once)
{
    cr_assert_eq(node_disk_init(&d, dir, 0, 1 * MB, errmsg), 0);
    cr_assert(d.held);
    node_disk_release(&d, "test: apply met ENOSPC");
    cr_expect(d.alarm);
    cr_expect(!d.held);
    cr_expect_eq(reserve_size(NULL), -1);
    cr_expect_eq(node_disk_refuse(&d, errmsg), TERN_EFULL);
    /* A second release (the retry failed too) has nothing left to give. */
    node_disk_release(&d, "test: again");
    cr_expect_eq(d.releases, 1);
    /* Polls are rate-limited to 100 ms, but release forces the next one. */
    cr_expect(node_disk_poll(&d, 5, false), "space is plenty: alarm off");
    cr_expect(!d.alarm);
    cr_expect(d.held);
}

Test(disk, poll_is_cached_for_100_ms)
{
    cr_assert_eq(node_disk_init(&d, dir, 0, 0, errmsg), 0);
    d.min_free = d.free + 1024 * MB;
    cr_expect(!node_disk_poll(&d, 50, false), "cached: no statvfs yet");
    cr_expect(!d.alarm);
    cr_expect(node_disk_poll(&d, 100, false));
    cr_expect(d.alarm);
}

Test(disk, no_reserve_configured)
{
    /* A file left by an earlier run with a reserve is removed. */
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(node_disk_init(&d, dir, 0, 0, errmsg), 0);
    cr_expect_eq(reserve_size(NULL), -1);
    cr_expect(!d.alarm);
    d.min_free = d.free + 1024 * MB;
    cr_expect(node_disk_poll(&d, 1000, true));
    cr_expect_eq(node_disk_refuse(&d, errmsg), TERN_EFULL);
    cr_expect(strstr(errmsg, "min_free_disk_bytes") != NULL, "%s", errmsg);
    d.min_free = 0;
    cr_expect(node_disk_poll(&d, 2000, true));
    cr_expect(!d.alarm, "without a reserve the minimum alone decides");
}

Test(disk, reserve_larger_than_the_disk)
{
    cr_assert_eq(node_disk_init(&d, dir, 0, 1ull << 60, errmsg), 0);
    cr_expect(!d.held);
    cr_expect(d.alarm, "a node that cannot keep its reserve refuses writes");
    cr_expect_eq(reserve_size(NULL), -1);
    cr_expect_eq(node_disk_refuse(&d, errmsg), TERN_EFULL);
}
