/* STATE_DIR formats and raw-syscall helpers shared by the power-loss shim and
 * the restore tool; the formats are documented in pl_state.h.  Everything here
 * uses syscall() for the calls the shim interposes, so it is safe to call from
 * inside the shim. */
#define _GNU_SOURCE
#include "pl_state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define REDO_MAGIC   0x524c5054u
#define REDO_VERSION 1u
#define REDO_HDR     32u

int pl_sys_open(const char *path, int flags, unsigned mode)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC, mode);
}

int pl_sys_close(int fd)
{
    return (int)syscall(SYS_close, fd);
}

ssize_t pl_sys_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return (ssize_t)syscall(SYS_pwrite64, fd, buf, n, off);
}

ssize_t pl_sys_pread(int fd, void *buf, size_t n, off_t off)
{
    return (ssize_t)syscall(SYS_pread64, fd, buf, n, off);
}

int pl_sys_rename(const char *from, const char *to)
{
    return (int)syscall(SYS_renameat, AT_FDCWD, from, AT_FDCWD, to);
}

int pl_sys_unlink(const char *path)
{
    return (int)syscall(SYS_unlinkat, AT_FDCWD, path, 0);
}

int pl_sys_ftruncate(int fd, off_t len)
{
    return (int)syscall(SYS_ftruncate, fd, len);
}

int pl_sys_mkdir(const char *path, unsigned mode)
{
    return (int)syscall(SYS_mkdirat, AT_FDCWD, path, mode);
}

uint32_t pl_fnv1a(uint32_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 16777619u;
    }
    return h;
}

int pl_rec_path(char *out,
                size_t n,
                const char *state,
                const char *id,
                const char *suffix)
{
    int k = snprintf(out, n, "%s/rec/%s%s", state, id, suffix);
    return (k < 0 || (size_t)k >= n) ? -ENAMETOOLONG : 0;
}

static int write_all(int fd, const void *buf, size_t n, off_t off)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = pl_sys_pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

/* Writes buf to path.tmp, then renames it to path. */
static int write_atomic(const char *path, const void *buf, size_t n)
{
    char tmp[PATH_MAX + 8];
    int rc;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        return -ENAMETOOLONG;
    }
    int fd = pl_sys_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        return -errno;
    }
    rc = write_all(fd, buf, n, 0);
    pl_sys_close(fd);
    if (rc == 0 && pl_sys_rename(tmp, path) != 0) {
        rc = -errno;
    }
    if (rc != 0) {
        pl_sys_unlink(tmp);
    }
    return rc;
}

static const char *content_name(int c)
{
    return c == PL_SHADOW ? "shadow" : c == PL_LIVE ? "live" : "none";
}

int pl_meta_write(const char *state, const struct pl_meta *m)
{
    char path[PATH_MAX];
    char *buf = malloc(2 * PATH_MAX + 512);
    int rc, n;
    if (buf == NULL) {
        return -ENOMEM;
    }
    rc = pl_rec_path(path, sizeof path, state, m->id, ".meta");
    if (rc != 0) {
        goto out;
    }
    n = snprintf(buf, 2 * PATH_MAX + 512,
                 "tern-powerloss-rec 1\nid=%s\ndev=%" PRIu64 "\nino=%" PRIu64
                 "\ncontent=%s\nunlinked=%d\nmode=%o\ndpath=%s\ncpath=%s\n",
                 m->id, m->dev, m->ino, content_name(m->content), m->unlinked,
                 m->mode, m->dpath, m->cpath);
    n += snprintf(buf + n, 32, "sum=%08x\n",
                  pl_fnv1a(2166136261u, buf, (size_t)n));
    rc = write_atomic(path, buf, (size_t)n);
out:
    free(buf);
    return rc;
}

/* Copies the value of "key=" at the start of line into out (size n). */
static int take(const char *line, const char *key, char *out, size_t n)
{
    size_t k = strlen(key);
    if (strncmp(line, key, k) != 0 || line[k] != '=') {
        return 0;
    }
    snprintf(out, n, "%s", line + k + 1);
    return 1;
}

int pl_meta_read(const char *path, struct pl_meta *m)
{
    size_t cap = 2 * PATH_MAX + 512, len = 0;
    char *buf = malloc(cap + 1);
    int rc = -EINVAL;
    if (buf == NULL) {
        return -ENOMEM;
    }
    int fd = pl_sys_open(path, O_RDONLY, 0);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    for (;;) {
        ssize_t r = pl_sys_pread(fd, buf + len, cap - len, (off_t)len);
        if (r <= 0) {
            break;
        }
        len += (size_t)r;
    }
    pl_sys_close(fd);
    buf[len] = 0;
    char *sum = strstr(buf, "sum=");
    if (strncmp(buf, "tern-powerloss-rec 1\n", 21) != 0 || sum == NULL ||
        strtoul(sum + 4, NULL, 16) !=
            pl_fnv1a(2166136261u, buf, (size_t)(sum - buf))) {
        goto out;
    }
    *sum = 0;
    memset(m, 0, sizeof *m);
    char val[32];
    int seen = 0;
    for (char *line = strchr(buf, '\n') + 1, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (nl == NULL) {
            goto out;
        }
        *nl = 0;
        if (take(line, "id", m->id, sizeof m->id) ||
            take(line, "dpath", m->dpath, sizeof m->dpath) ||
            take(line, "cpath", m->cpath, sizeof m->cpath)) {
            seen++;
        } else if (take(line, "dev", val, sizeof val)) {
            m->dev = strtoull(val, NULL, 10), seen++;
        } else if (take(line, "ino", val, sizeof val)) {
            m->ino = strtoull(val, NULL, 10), seen++;
        } else if (take(line, "unlinked", val, sizeof val)) {
            m->unlinked = atoi(val), seen++;
        } else if (take(line, "mode", val, sizeof val)) {
            m->mode = (unsigned)strtoul(val, NULL, 8), seen++;
        } else if (take(line, "content", val, sizeof val)) {
            m->content = strcmp(val, "shadow") == 0 ? PL_SHADOW
                         : strcmp(val, "live") == 0 ? PL_LIVE
                                                    : PL_NONE;
            seen++;
        }
    }
    rc = seen == 8 ? 0 : -EINVAL;
out:
    free(buf);
    return rc;
}

/* In-kernel copy of the whole file; returns 0, or -1 (caller falls back). */
static int copy_kernel(int src_fd, int dst_fd)
{
    loff_t in = 0, out = 0;
    struct stat st;
    if (fstat(src_fd, &st) != 0) {
        return -1;
    }
    while (in < st.st_size) {
        long n = syscall(SYS_copy_file_range, src_fd, &in, dst_fd, &out,
                         (size_t)(st.st_size - in), 0u);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
    }
    /* dst holds exactly the bytes copied (the caller excludes writers). */
    return pl_sys_ftruncate(dst_fd, in) == 0 ? 0 : -1;
}

int pl_copy_fd(int src_fd, int dst_fd)
{
    static const size_t chunk = 1 << 20;
    char *buf;
    off_t off = 0;
    int rc = 0;
    if (copy_kernel(src_fd, dst_fd) == 0) {
        return 0;
    }
    buf = malloc(chunk);
    if (buf == NULL) {
        return -ENOMEM;
    }
    for (;;) {
        ssize_t r = pl_sys_pread(src_fd, buf, chunk, off);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            rc = -errno;
            break;
        }
        if (r == 0) {
            break;
        }
        rc = write_all(dst_fd, buf, (size_t)r, off);
        if (rc != 0) {
            break;
        }
        off += r;
    }
    free(buf);
    if (rc == 0 && pl_sys_ftruncate(dst_fd, off) != 0) {
        rc = -errno;
    }
    return rc;
}

int pl_shadow_capture(const char *state, const char *id, int src_fd)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    int rc = pl_rec_path(path, sizeof path, state, id, ".data");
    if (rc == 0) {
        rc = pl_rec_path(tmp, sizeof tmp, state, id, ".data.tmp");
    }
    if (rc != 0) {
        return rc;
    }
    int fd = pl_sys_open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        return -errno;
    }
    rc = pl_copy_fd(src_fd, fd);
    pl_sys_close(fd);
    if (rc == 0 && pl_sys_rename(tmp, path) != 0) {
        rc = -errno;
    }
    if (rc != 0) {
        pl_sys_unlink(tmp);
    }
    return rc;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

int pl_redo_write(const char *state,
                  const char *id,
                  int op,
                  uint64_t off,
                  const void *data,
                  uint64_t len)
{
    char path[PATH_MAX];
    int rc = pl_rec_path(path, sizeof path, state, id, ".redo");
    if (rc != 0) {
        return rc;
    }
    size_t total = REDO_HDR + (size_t)len + 4;
    unsigned char *buf = malloc(total);
    if (buf == NULL) {
        return -ENOMEM;
    }
    put32(buf, REDO_MAGIC);
    put32(buf + 4, REDO_VERSION);
    put32(buf + 8, (uint32_t)op);
    put32(buf + 12, 0);
    put64(buf + 16, off);
    put64(buf + 24, len);
    if (len > 0) {
        memcpy(buf + REDO_HDR, data, (size_t)len);
    }
    put32(buf + REDO_HDR + len,
          pl_fnv1a(2166136261u, buf, REDO_HDR + (size_t)len));
    rc = write_atomic(path, buf, total);
    free(buf);
    return rc;
}

int pl_redo_apply_fd(int fd,
                     int op,
                     uint64_t off,
                     const void *data,
                     uint64_t len)
{
    struct stat st;
    switch (op) {
    case PL_REDO_WRITE:
        return write_all(fd, data, (size_t)len, (off_t)off);
    case PL_REDO_TRUNCATE:
        return pl_sys_ftruncate(fd, (off_t)off) == 0 ? 0 : -errno;
    case PL_REDO_EXTEND:
        if (fstat(fd, &st) != 0) {
            return -errno;
        }
        if ((uint64_t)st.st_size >= off) {
            return 0;
        }
        return pl_sys_ftruncate(fd, (off_t)off) == 0 ? 0 : -errno;
    default:
        return -EINVAL;
    }
}

int pl_redo_apply(const char *state, const char *id)
{
    char path[PATH_MAX], data[PATH_MAX];
    struct stat st;
    int rc = pl_rec_path(path, sizeof path, state, id, ".redo");
    if (rc == 0) {
        rc = pl_rec_path(data, sizeof data, state, id, ".data");
    }
    if (rc != 0) {
        return rc;
    }
    int fd = pl_sys_open(path, O_RDONLY, 0);
    if (fd < 0) {
        return errno == ENOENT ? 0 : -errno;
    }
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)(REDO_HDR + 4)) {
        pl_sys_close(fd);
        return -EINVAL;
    }
    unsigned char *buf = malloc((size_t)st.st_size);
    if (buf == NULL) {
        pl_sys_close(fd);
        return -ENOMEM;
    }
    ssize_t r = pl_sys_pread(fd, buf, (size_t)st.st_size, 0);
    pl_sys_close(fd);
    uint64_t len = get64(buf + 24);
    if (r != st.st_size || get32(buf) != REDO_MAGIC ||
        get32(buf + 4) != REDO_VERSION ||
        len != (uint64_t)st.st_size - REDO_HDR - 4 ||
        get32(buf + REDO_HDR + len) !=
            pl_fnv1a(2166136261u, buf, REDO_HDR + (size_t)len)) {
        free(buf);
        return -EINVAL;
    }
    int dfd = pl_sys_open(data, O_RDWR | O_CREAT, 0600);
    if (dfd < 0) {
        rc = -errno;
    } else {
        rc = pl_redo_apply_fd(dfd, (int)get32(buf + 8), get64(buf + 16),
                              buf + REDO_HDR, len);
        pl_sys_close(dfd);
    }
    free(buf);
    if (rc == 0 && pl_sys_unlink(path) != 0) {
        rc = -errno;
    }
    return rc == 0 ? 1 : rc;
}
