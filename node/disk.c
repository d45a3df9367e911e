/*
 * node/disk.c: the disk-space alarm and the space reserve (jepsen F5).
 *
 * A full disk must refuse new writes, not stop the node. Two parts:
 *
 * Alarm. statvfs() on the data dir, at most every 100 ms (a timer in
 * node.c polls it, client writes check it). The alarm goes on when the free
 * space drops below min_free_disk_bytes. While it is on, the leader answers
 * produce/ack/create with TERN_EFULL before anything reaches raft, and raft/
 * is told (repl_set_disk_full) so a follower takes no new entries.
 *
 * Reserve. min_free_disk_bytes alone does not help when the disk fills at
 * once (another process, a balloon): entries already accepted by raft still
 * have to be applied, and an apply that fails makes the replica fail-stop
 * (raft/fsm.c). So at start (and whenever the space allows) we allocate a
 * file, DATA_DIR/disk-reserve, of reserve_disk_bytes with fallocate(2).
 * When the alarm goes on, or an apply or index flush meets ENOSPC, the file
 * is deleted: its blocks go back to the file system and the in-flight work
 * completes in them. With the reserve gone the alarm stays on until the
 * free space is min_free_disk_bytes + reserve_disk_bytes, then the reserve
 * is allocated again and the alarm goes off, so that re-allocating it never
 * puts the node below min_free_disk_bytes (no flapping).
 *
 * The reserve holds no data: after a crash it is re-checked at start
 * (st_blocks must cover reserve_disk_bytes) and re-made if short. It is
 * the same file system as raft/ and index/ (both under DATA_DIR).
 * Everything here runs on the loop thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <tern_common.h>

#include "disk.h"
#include "log.h"

#define DISK_POLL_MS 100

static bool reserve_is_held(const struct node_disk *d)
{
    struct stat st;
    if (d->reserve_bytes == 0 || stat(d->reserve_path, &st) != 0) {
        return false;
    }
    return (uint64_t)st.st_size >= d->reserve_bytes &&
           (uint64_t)st.st_blocks * 512u >= d->reserve_bytes;
}

/* Allocate the reserve. 0, or -errno (the partial file is removed). */
static int reserve_make(struct node_disk *d)
{
    int fd, rv = 0;
    fd = open(d->reserve_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -errno;
    }
    if (fallocate(fd, 0, 0, (off_t)d->reserve_bytes) != 0) {
        rv = -errno;
    }
    close(fd);
    if (rv != 0) {
        unlink(d->reserve_path);
    }
    return rv;
}

static int stat_free(struct node_disk *d)
{
    struct statvfs sv;
    if (statvfs(d->dir, &sv) != 0) {
        return -errno;
    }
    d->free = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    return 0;
}

int node_disk_init(struct node_disk *d,
                   const char *dir,
                   uint64_t min_free,
                   uint64_t reserve_bytes,
                   char *errmsg)
{
    memset(d, 0, sizeof(*d));
    if (snprintf(d->dir, sizeof(d->dir), "%s", dir) >= (int)sizeof(d->dir) ||
        snprintf(d->reserve_path, sizeof(d->reserve_path), "%s/disk-reserve",
                 dir) >= (int)sizeof(d->reserve_path)) {
        tern_errmsg_printf(errmsg, "data dir path too long");
        return TERN_EINVAL;
    }
    d->min_free = min_free;
    d->reserve_bytes = reserve_bytes;
    if (reserve_bytes == 0) {
        unlink(d->reserve_path); /* left by a run with a reserve */
    }
    d->held = reserve_is_held(d);
    node_disk_poll(d, 0, true);
    return 0;
}

void node_disk_release(struct node_disk *d, const char *why)
{
    if (d->held && unlink(d->reserve_path) == 0) {
        d->held = false;
        d->releases++;
        node_log(NODE_LOG_WARN, "disk reserve released",
                 "why=\"%s\" reserve_disk_bytes=%llu free_bytes=%llu", why,
                 (unsigned long long)d->reserve_bytes,
                 (unsigned long long)d->free);
    }
    if (!d->alarm) {
        d->alarm = true;
        d->changed = true;
        node_log(NODE_LOG_WARN, "disk full: rejecting writes",
                 "why=\"%s\" free_bytes=%llu min_free_disk_bytes=%llu", why,
                 (unsigned long long)d->free, (unsigned long long)d->min_free);
    }
    d->checked = false; /* re-read the free space at the next poll */
}

bool node_disk_poll(struct node_disk *d, uint64_t now, bool force)
{
    bool was = d->alarm;
    bool changed;
    if (!force && d->checked && now - d->checked_at < DISK_POLL_MS) {
        goto out;
    }
    d->checked = true;
    d->checked_at = now;
    if (stat_free(d) != 0) {
        goto out; /* keep the last state */
    }
    if (d->free < d->min_free) {
        node_disk_release(d, "free space below min_free_disk_bytes");
        goto out;
    }
    if (d->held || d->reserve_bytes == 0) {
        d->alarm = false;
        goto out;
    }
    /* Reserve missing: re-make it only if that leaves min_free. */
    if (d->free >= d->min_free + d->reserve_bytes) {
        int rv = reserve_make(d);
        if (rv == 0) {
            d->held = true;
            d->alarm = false;
            stat_free(d);
        } else if (!d->make_failed_logged) {
            node_log(NODE_LOG_WARN, "cannot allocate the disk reserve",
                     "path=%s err=%s", d->reserve_path, tern_err_name(rv));
            d->make_failed_logged = true;
        }
    } else {
        d->alarm = true;
    }
out:
    if (d->alarm != was) {
        d->changed = true;
        if (!d->alarm) {
            node_log(NODE_LOG_INFO, "disk space back: accepting writes",
                     "free_bytes=%llu min_free_disk_bytes=%llu "
                     "reserve_disk_bytes=%llu",
                     (unsigned long long)d->free,
                     (unsigned long long)d->min_free,
                     (unsigned long long)d->reserve_bytes);
            d->make_failed_logged = false;
        }
    }
    changed = d->changed;
    d->changed = false;
    return changed;
}

int node_disk_refuse(const struct node_disk *d, char *errmsg)
{
    if (!d->alarm) {
        return 0;
    }
    if (d->held || d->reserve_bytes == 0) {
        tern_errmsg_printf(errmsg,
                           "disk full: %llu bytes free < min_free_disk_bytes "
                           "%llu",
                           (unsigned long long)d->free,
                           (unsigned long long)d->min_free);
    } else {
        tern_errmsg_printf(errmsg,
                           "disk full: %llu bytes free < min_free_disk_bytes "
                           "%llu + reserve_disk_bytes %llu (reserve in use)",
                           (unsigned long long)d->free,
                           (unsigned long long)d->min_free,
                           (unsigned long long)d->reserve_bytes);
    }
    return TERN_EFULL;
}
