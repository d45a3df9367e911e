/*
 * auth/secret.c: the cluster secret shared by a cluster's nodes (format in
 * auth.h): loading it with a permission check, creating one, and the
 * length-prefixed HMAC transcripts the shm and verbs handshakes use as
 * proofs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"

/* Longest file accepted: the digits plus generous whitespace. */
#define SECRET__MAX_FILE  256
#define SECRET__MAX_PARTS 15

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int auth_secret_load(const char *path, struct auth_secret *out, char *errmsg)
{
    char text[SECRET__MAX_FILE + 1];
    struct stat st;
    ssize_t n;
    size_t i;
    int fd;
    int rv;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "cluster secret %s: %s", path,
                           strerror(errno));
        goto err;
    }
    if (fstat(fd, &st) != 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "cluster secret %s: %s", path,
                           strerror(errno));
        goto err_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rv = TERN_EAUTH;
        tern_errmsg_printf(errmsg, "cluster secret %s: not a regular file",
                           path);
        goto err_fd;
    }
    if ((st.st_mode & 077) != 0) {
        rv = TERN_EAUTH;
        tern_errmsg_printf(errmsg,
                           "cluster secret %s: mode %03o lets others read or "
                           "write it (chmod 600)",
                           path, (unsigned)(st.st_mode & 0777));
        goto err_fd;
    }
    n = read(fd, text, sizeof text);
    if (n < 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "cluster secret %s: %s", path,
                           strerror(errno));
        goto err_fd;
    }
    rv = TERN_EAUTH;
    if ((size_t)n > SECRET__MAX_FILE || n < 2 * AUTH_SECRET_SIZE) {
        tern_errmsg_printf(errmsg, "cluster secret %s: expected %d hex digits",
                           path, 2 * AUTH_SECRET_SIZE);
        goto err_wipe;
    }
    for (i = 0; i < AUTH_SECRET_SIZE; i++) {
        int hi = hex_value(text[2 * i]);
        int lo = hex_value(text[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            tern_errmsg_printf(errmsg,
                               "cluster secret %s: expected %d hex digits",
                               path, 2 * AUTH_SECRET_SIZE);
            goto err_wipe;
        }
        out->key[i] = (uint8_t)(hi << 4 | lo);
    }
    for (i = 2 * AUTH_SECRET_SIZE; i < (size_t)n; i++) {
        if (!is_space(text[i])) {
            tern_errmsg_printf(errmsg,
                               "cluster secret %s: expected %d hex digits "
                               "and nothing else",
                               path, 2 * AUTH_SECRET_SIZE);
            auth_wipe(out, sizeof *out);
            goto err_wipe;
        }
    }
    rv = 0;

err_wipe:
    auth_wipe(text, sizeof text);
err_fd:
    close(fd);
err:
    return rv;
}

int auth_secret_create(const char *path, char *errmsg)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t key[AUTH_SECRET_SIZE];
    char text[2 * AUTH_SECRET_SIZE + 1];
    size_t i, done = 0;
    int fd;
    int rv;

    rv = auth_random(key, sizeof key, errmsg);
    if (rv != 0) {
        goto err;
    }
    for (i = 0; i < AUTH_SECRET_SIZE; i++) {
        text[2 * i] = digits[key[i] >> 4];
        text[2 * i + 1] = digits[key[i] & 15];
    }
    text[2 * AUTH_SECRET_SIZE] = '\n';
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "cluster secret %s: %s", path,
                           strerror(errno));
        goto err_wipe;
    }
    while (done < sizeof text) {
        ssize_t n = write(fd, text + done, sizeof text - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            rv = -errno;
            tern_errmsg_printf(errmsg, "cluster secret %s: %s", path,
                               strerror(errno));
            goto err_fd;
        }
        done += (size_t)n;
    }
    if (fsync(fd) != 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "cluster secret %s: fsync: %s", path,
                           strerror(errno));
        goto err_fd;
    }
    rv = 0;

err_fd:
    close(fd);
    if (rv != 0) {
        unlink(path);
    }
err_wipe:
    auth_wipe(key, sizeof key);
    auth_wipe(text, sizeof text);
err:
    return rv;
}

int auth_secret_mac(const struct auth_secret *s,
                    const char *label,
                    const struct auth_iov *parts,
                    unsigned n,
                    uint8_t out[AUTH_MAC_SIZE])
{
    struct auth_iov iov[2 * (SECRET__MAX_PARTS + 1)];
    uint8_t lens[SECRET__MAX_PARTS + 1][4];
    unsigned i;

    if (n > SECRET__MAX_PARTS) {
        return TERN_EINVAL;
    }
    for (i = 0; i <= n; i++) {
        const void *base = i == 0 ? (const void *)label : parts[i - 1].base;
        size_t len = i == 0 ? strlen(label) : parts[i - 1].len;

        if (len > UINT32_MAX) {
            return TERN_EINVAL;
        }
        tern_put_u32(lens[i], (uint32_t)len);
        iov[2 * i] = (struct auth_iov){lens[i], 4};
        iov[2 * i + 1] = (struct auth_iov){base, len};
    }
    return auth_hmac(s->key, sizeof s->key, iov, 2 * (n + 1), out);
}
