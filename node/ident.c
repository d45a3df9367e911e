/*
 * node/ident.c: the data directory's identity and privacy.
 *
 * Identity. A data directory belongs to one node of one cluster: started
 * with another node's directory (a copied config, a wrong --data-dir), a
 * node would take over that node's raft log and votes under its own id,
 * and two voters would share one history. So DATA_DIR/IDENTITY records
 * the cluster name ([node] cluster_name) and the node id, and ternd
 * refuses to start (TERN_EIDENTITY, exit 2, a log line naming both
 * identities) when they differ from its configuration. Missing IDENTITY:
 * an empty directory gets one (a new node); a directory with data gets one
 * too (data of a version without IDENTITY: adopted, logged once, since the
 * next start finds the file). A damaged IDENTITY is refused
 * (TERN_ECORRUPT): the operator restores or removes it.
 *
 * IDENTITY (28 + L bytes, integers little-endian; encoded/decoded here
 * only, be careful when adapting: later versions must read it):
 *
 *   off     size  field
 *   0       4     magic "TRNI" (0x494e5254 as u32)
 *   4       2     version (1)
 *   6       2     L: cluster name length (1..64)
 *   8       8     node id
 *   16      8     creation time (unix time, milliseconds)
 *   24      L     cluster name (printable ASCII 0x21..0x7e, no NUL)
 *   24+L    4     checksum: tern_checksum32 (XXH32) of bytes 0..24+L-1
 *
 * The file is exactly 28 + L bytes. It is written once, atomically:
 * IDENTITY.tmp (0600), fsync, rename to IDENTITY, fsync of the directory.
 *
 * Privacy. The data directory holds every queue's messages; like
 * PostgreSQL with its data directory, ternd refuses to start when it is
 * accessible to the group or to others (mode & 077), with a message that
 * says to chmod 700 it, unless [node] allow_open_data_dir = true (then a
 * warning is logged). ternd creates it 0700 and every file inside 0600.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tern_common.h>

#include "ident.h"

#define IDENT_MAGIC   0x494e5254u
#define IDENT_VERSION 1
#define IDENT_HEAD    24

size_t node_ident_encode(const struct node_ident *id, uint8_t *buf)
{
    size_t l = strlen(id->cluster);
    if (!node_config_cluster_name_valid(id->cluster)) {
        return 0;
    }
    tern_put_u32(buf, IDENT_MAGIC);
    tern_put_u16(buf + 4, IDENT_VERSION);
    tern_put_u16(buf + 6, (uint16_t)l);
    tern_put_u64(buf + 8, id->node_id);
    tern_put_u64(buf + 16, id->created_ms);
    memcpy(buf + IDENT_HEAD, id->cluster, l);
    tern_put_u32(buf + IDENT_HEAD + l, tern_checksum32(buf, IDENT_HEAD + l));
    return IDENT_HEAD + l + 4;
}

int node_ident_decode(const void *buf, size_t len, struct node_ident *out)
{
    const uint8_t *b = buf;
    size_t l;
    if (len < IDENT_HEAD + 4 || tern_get_u32(b) != IDENT_MAGIC) {
        return TERN_ECORRUPT;
    }
    l = tern_get_u16(b + 6);
    if (l == 0 || l > NODE_CLUSTER_NAME_MAX || len != IDENT_HEAD + l + 4 ||
        tern_get_u32(b + IDENT_HEAD + l) !=
            tern_checksum32(b, IDENT_HEAD + l)) {
        return TERN_ECORRUPT;
    }
    if (tern_get_u16(b + 4) != IDENT_VERSION) {
        return TERN_EVERSION;
    }
    memset(out, 0, sizeof *out);
    memcpy(out->cluster, b + IDENT_HEAD, l);
    out->cluster[l] = '\0';
    if (!node_config_cluster_name_valid(out->cluster)) {
        return TERN_ECORRUPT;
    }
    out->node_id = tern_get_u64(b + 8);
    out->created_ms = tern_get_u64(b + 16);
    return 0;
}

/* Whether dir holds anything (an entry other than . and ..). */
static int dir_has_entries(const char *dir, bool *any)
{
    struct dirent *de;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return -errno;
    }
    *any = false;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
            strcmp(de->d_name, "IDENTITY.tmp") != 0) {
            *any = true;
            break;
        }
    }
    closedir(d);
    return 0;
}

static int write_ident(const char *dir,
                       const char *path,
                       const struct node_ident *id,
                       char *errmsg)
{
    uint8_t buf[NODE_IDENT_MAX_SIZE];
    char tmp[4200];
    size_t len = node_ident_encode(id, buf);
    ssize_t n;
    int fd, dfd, rv = 0;

    if (len == 0) {
        tern_errmsg_printf(errmsg, "bad cluster name '%s'", id->cluster);
        return TERN_EINVAL;
    }
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "create %s: %s", tmp, strerror(errno));
        return rv;
    }
    n = write(fd, buf, len);
    if (n < 0 || (size_t)n != len) {
        rv = n < 0 ? -errno : -EIO;
    } else if (fsync(fd) != 0) {
        rv = -errno;
    }
    close(fd);
    if (rv == 0 && rename(tmp, path) != 0) {
        rv = -errno;
    }
    if (rv != 0) {
        (void)unlink(tmp);
        tern_errmsg_printf(errmsg, "write %s: %s", path, tern_strerror(rv));
        return rv;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "fsync %s: %s", dir, strerror(errno));
    }
    if (dfd >= 0) {
        close(dfd);
    }
    return rv;
}

int node_ident_open(const char *dir,
                    const char *cluster,
                    uint64_t node_id,
                    uint64_t now_ms,
                    enum node_ident_event *ev,
                    struct node_ident *found,
                    char *errmsg)
{
    uint8_t buf[NODE_IDENT_MAX_SIZE + 1];
    char path[4096];
    ssize_t n;
    bool any = false;
    int fd, rv;

    memset(found, 0, sizeof *found);
    if (snprintf(path, sizeof path, "%s/IDENTITY", dir) >= (int)sizeof path) {
        tern_errmsg_printf(errmsg, "data dir path too long");
        return TERN_EINVAL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "open %s: %s", path, strerror(errno));
        return rv;
    }
    if (fd < 0) {
        rv = dir_has_entries(dir, &any);
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "read %s: %s", dir, tern_strerror(rv));
            return rv;
        }
        (void)snprintf(found->cluster, sizeof found->cluster, "%s", cluster);
        found->node_id = node_id;
        found->created_ms = now_ms;
        rv = write_ident(dir, path, found, errmsg);
        if (rv == 0) {
            *ev = any ? NODE_IDENT_ADOPTED : NODE_IDENT_CREATED;
        }
        return rv;
    }
    n = read(fd, buf, sizeof buf);
    rv = n < 0 ? -errno : node_ident_decode(buf, (size_t)n, found);
    close(fd);
    if (rv != 0) {
        tern_errmsg_printf(
            errmsg,
            "%s: %s; restore it or, if this directory "
            "belongs to this node, remove it (it is "
            "re-created)",
            path,
            rv == TERN_ECORRUPT ? "damaged (checksum)" : tern_strerror(rv));
        return rv;
    }
    if (found->node_id != node_id || strcmp(found->cluster, cluster) != 0) {
        tern_errmsg_printf(errmsg,
                           "data dir %s belongs to node %llu of cluster "
                           "'%s', this is node %llu of cluster '%s'",
                           dir, (unsigned long long)found->node_id,
                           found->cluster, (unsigned long long)node_id,
                           cluster);
        return TERN_EIDENTITY;
    }
    *ev = NODE_IDENT_MATCH;
    return 0;
}

int node_ident_check_private(const char *dir,
                             bool allow_open,
                             bool *open_dir,
                             unsigned *mode,
                             char *errmsg)
{
    struct stat st;
    *open_dir = false;
    if (stat(dir, &st) != 0) {
        int rv = -errno;
        tern_errmsg_printf(errmsg, "stat %s: %s", dir, strerror(errno));
        return rv;
    }
    *mode = (unsigned)(st.st_mode & 07777);
    if ((st.st_mode & 077) == 0) {
        return 0;
    }
    *open_dir = true;
    if (allow_open) {
        return 0;
    }
    tern_errmsg_printf(errmsg,
                       "data dir %s has group or world access (mode %04o); "
                       "fix with: chmod 700 %s (or set allow_open_data_dir "
                       "= true)",
                       dir, *mode, dir);
    return TERN_EDENIED;
}
