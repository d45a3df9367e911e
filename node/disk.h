/*
 * The disk-space alarm and the space reserve (disk.c has the rules).
 * Private to node/ and its tests.
 */
#ifndef TERN_NODE_DISK_H
#define TERN_NODE_DISK_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

/* Disk-space alarm and reserve file (disk.c has the rules). Loop thread
 * only; embedded in struct node, no allocation. */
struct node_disk
{
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

#endif /* TERN_NODE_DISK_H */
