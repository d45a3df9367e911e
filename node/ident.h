/*
 * The data directory's identity (DATA_DIR/IDENTITY: which cluster and node
 * it belongs to) and its privacy check (ident.c has the format and the
 * rules). Private to node/ and its tests.
 */
#ifndef TERN_NODE_IDENT_H
#define TERN_NODE_IDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define NODE_IDENT_MAX_SIZE (28 + NODE_CLUSTER_NAME_MAX)

struct node_ident
{
    char cluster[NODE_CLUSTER_NAME_MAX + 1];
    uint64_t node_id;
    uint64_t created_ms; /* unix time in ms */
};

/* What node_ident_open found. */
enum node_ident_event {
    NODE_IDENT_MATCH = 0, /* IDENTITY names this cluster and node */
    NODE_IDENT_CREATED,   /* empty directory: IDENTITY written */
    NODE_IDENT_ADOPTED,   /* data without IDENTITY (an older version's):
                             IDENTITY written for this cluster and node */
};

/* Encode id into buf (NODE_IDENT_MAX_SIZE bytes); returns the length, 0 if
 * the cluster name breaks the rule. */
size_t node_ident_encode(const struct node_ident *id, uint8_t *buf);
/* Decode untrusted bytes: 0, TERN_ECORRUPT (length, magic, checksum, name
 * rule) or TERN_EVERSION. */
int node_ident_decode(const void *buf, size_t len, struct node_ident *out);

/* Read DIR/IDENTITY and compare it with (cluster, node_id); create it if
 * missing (write-temp, fsync, rename, fsync dir; created_ms = now_ms).
 * *found (caller-owned) is what the file names (also on TERN_EIDENTITY).
 * 0 with *ev, or TERN_EIDENTITY (another cluster or node; errmsg names
 * both), TERN_ECORRUPT, TERN_EVERSION, -errno, with errmsg. */
int node_ident_open(const char *dir,
                    const char *cluster,
                    uint64_t node_id,
                    uint64_t now_ms,
                    enum node_ident_event *ev,
                    struct node_ident *found,
                    char *errmsg);

/* The data directory must not be accessible to group or others. 0 if it
 * is private; TERN_EDENIED (errmsg says how to fix it) if not, unless
 * allow_open, then 0 with *open_dir = true (node/ logs a warning). -errno
 * if it cannot be stat'ed. *mode: its permission bits. */
int node_ident_check_private(const char *dir,
                             bool allow_open,
                             bool *open_dir,
                             unsigned *mode,
                             char *errmsg);

#endif /* TERN_NODE_IDENT_H */
