/*
 * raft/meta.c: tern's own checksummed record of the Raft term and vote,
 * kept beside raft_uv's metadata files and compared with them at load.
 *
 * Why: raft_uv 0.15 keeps term and vote in DATA_DIR/raft/metadata1 and
 * metadata2 (format, version, term, vote) with no checksum, so a flipped
 * bit in a stopped node's term or vote is loaded as if it were true. A
 * LOWER term or a lost or changed vote lets the node vote twice in a
 * term (two leaders). io.c writes this record right after every inner
 * set_term, set_vote and bootstrap succeeded and before it returns to
 * raft, and compares at load (repl_meta_check).
 *
 * Files: DIR/tern-meta1 and DIR/tern-meta2 (DIR is the repl's data_dir,
 * DATA_DIR/raft in ternd), written alternately like raft_uv's own: record
 * number seq goes to tern-meta1 if seq is odd, tern-meta2 if even; the
 * valid record with the highest seq is the current one, so a write torn
 * by a crash leaves the previous record intact in the other file. An
 * update overwrites the older file in place (pwrite + fsync); a file that
 * does not exist yet is written as FILE.tmp, fsynced, renamed and the
 * directory fsynced, so an existing file always held a complete record
 * once. Files are 0600.
 *
 * Record (48 bytes, integers little-endian; encoded/decoded here only, be
 * careful when adapting: a node reads what an older version wrote):
 *
 *   off  size  field
 *   0    4     magic "TRNM" (0x4d4e5254 as u32)
 *   4    2     version (1)
 *   6    2     flags (0)
 *   8    8     seq: number of this write (1, 2, ...)
 *   16   8     term
 *   24   8     vote (server id, 0: none in this term)
 *   32   8     reserved (0)
 *   40   4     checksum: tern_checksum32 (XXH32) of bytes 0..39
 *   44   4     reserved (0)
 *
 * Load outcomes (repl_meta_read): no file -> absent; at least one valid
 * record -> the highest seq; files present but none valid (checksum,
 * magic, length) -> TERN_ECORRUPT; a valid record of another version ->
 * TERN_EVERSION.
 *
 * Comparison at load (repl_meta_check; inner = what raft_uv loaded, ours =
 * this record). Our write follows the inner one, so a crash between them
 * leaves the inner state ahead of ours by exactly one update:
 *   - set_term(T) (which also clears the vote) interrupted: inner (T, 0),
 *     ours (t, v) with t < T. Accepted if T - t is within the term jump
 *     bound and T below the term bound (repl.h), because a legitimate T
 *     arrived in a message that passed the same bounds against t (io.c).
 *     Accepting a higher term with no vote is safe whatever caused it:
 *     it is what learning a higher term from any message does.
 *   - set_vote(V) interrupted: inner (T, V), ours (T, 0). Accepted: a
 *     vote that was never sent (raft sends a grant only after set_vote
 *     returned, and we return after our write) only makes the node refuse
 *     other candidates in T, which is conservative.
 *   - bootstrap interrupted: inner (1, 0) + the configuration, ours
 *     absent: handled as absent.
 * In these two windows the record is completed (rewritten to the inner
 * values, REPL_META_COMPLETED). Ours absent and the inner state not
 * pristine: an upgrade from a version without the record (or a bootstrap
 * crash): the record is created from the inner values (REPL_META_CREATED).
 * Everything else is refused with both values named (TERN_ECORRUPT), the
 * operator decides: inner term below ours (a term went back: raft_uv's
 * files were damaged or replaced, e.g. wiped and re-bootstrapped), inner
 * term above ours with a vote set (impossible: our set_term record is
 * written before raft can vote in the new term), same term with a vote
 * lost or changed (could vote twice). None of these is repaired silently.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "repl_int.h"

#define META_MAGIC   0x4d4e5254u
#define META_VERSION 1
#define META_CSUM    40

void repl_meta_encode(uint8_t buf[REPL_META_SIZE],
                      const struct repl_meta_rec *m)
{
    memset(buf, 0, REPL_META_SIZE);
    tern_put_u32(buf, META_MAGIC);
    tern_put_u16(buf + 4, META_VERSION);
    tern_put_u64(buf + 8, m->seq);
    tern_put_u64(buf + 16, m->term);
    tern_put_u64(buf + 24, m->vote);
    tern_put_u32(buf + META_CSUM, tern_checksum32(buf, META_CSUM));
}

int repl_meta_decode(const void *buf, size_t len, struct repl_meta_rec *out)
{
    const uint8_t *b = buf;
    if (len != REPL_META_SIZE || tern_get_u32(b) != META_MAGIC ||
        tern_get_u32(b + META_CSUM) != tern_checksum32(b, META_CSUM)) {
        return TERN_ECORRUPT;
    }
    if (tern_get_u16(b + 4) != META_VERSION) {
        return TERN_EVERSION;
    }
    out->seq = tern_get_u64(b + 8);
    out->term = tern_get_u64(b + 16);
    out->vote = tern_get_u64(b + 24);
    return 0;
}

static int slot_path(char *out, size_t cap, const char *dir, unsigned slot)
{
    int k = snprintf(out, cap, "%s/tern-meta%u", dir, slot);
    return k < 0 || (size_t)k >= cap ? TERN_EINVAL : 0;
}

/* Read one slot: 0 (valid, *out filled), -ENOENT, TERN_ECORRUPT,
 * TERN_EVERSION or -errno. */
static int read_slot(const char *path, struct repl_meta_rec *out)
{
    uint8_t buf[REPL_META_SIZE + 1];
    ssize_t n;
    int rv;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    n = pread(fd, buf, sizeof buf, 0);
    rv = n < 0 ? -errno : repl_meta_decode(buf, (size_t)n, out);
    close(fd);
    return rv;
}

int repl_meta_read(const char *dir, struct repl_meta_rec *out, char *errmsg)
{
    struct repl_meta_rec s[2] = {{0}};
    int rv[2];
    char path[4096];

    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < 2; i++) {
        if (slot_path(path, sizeof path, dir, i + 1) != 0) {
            tern_errmsg_printf(errmsg, "term record: path too long");
            return TERN_EINVAL;
        }
        rv[i] = read_slot(path, &s[i]);
        if (rv[i] != 0 && rv[i] != -ENOENT && rv[i] != TERN_ECORRUPT &&
            rv[i] != TERN_EVERSION) {
            tern_errmsg_printf(errmsg, "term record %s: %s", path,
                               tern_strerror(rv[i]));
            return rv[i];
        }
    }
    if (rv[0] == TERN_EVERSION || rv[1] == TERN_EVERSION) {
        tern_errmsg_printf(errmsg,
                           "term record %s/tern-meta%u: unsupported version",
                           dir, rv[0] == TERN_EVERSION ? 1u : 2u);
        return TERN_EVERSION;
    }
    if (rv[0] == -ENOENT && rv[1] == -ENOENT) {
        return 0; /* absent */
    }
    if (rv[0] != 0 && rv[1] != 0) {
        tern_errmsg_printf(errmsg,
                           "term record %s/tern-meta1,2: no valid record "
                           "(checksum)",
                           dir);
        return TERN_ECORRUPT;
    }
    if (rv[0] == 0 && (rv[1] != 0 || s[0].seq >= s[1].seq)) {
        *out = s[0];
    } else {
        *out = s[1];
    }
    out->present = true;
    return 0;
}

int repl_fsync_dir(const char *dir)
{
    int rv = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    if (fsync(fd) != 0) {
        rv = -errno;
    }
    close(fd);
    return rv;
}

static int write_all(int fd, const uint8_t *buf, size_t len)
{
    ssize_t n = pwrite(fd, buf, len, 0);
    if (n < 0) {
        return -errno;
    }
    if ((size_t)n != len) {
        return -EIO;
    }
    return fsync(fd) != 0 ? -errno : 0;
}

int repl_meta_write(const char *dir,
                    const struct repl_meta_rec *m,
                    char *errmsg)
{
    uint8_t buf[REPL_META_SIZE];
    char path[4096];
    char tmp[4200];
    int fd;
    int rv;

    if (slot_path(path, sizeof path, dir, (m->seq & 1) != 0 ? 1 : 2) != 0) {
        tern_errmsg_printf(errmsg, "term record: path too long");
        return TERN_EINVAL;
    }
    repl_meta_encode(buf, m);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        rv = write_all(fd, buf, sizeof buf);
        close(fd);
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "term record %s: write: %s", path,
                               tern_strerror(rv));
        }
        return rv;
    }
    if (errno != ENOENT) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "term record %s: open: %s", path,
                           tern_strerror(rv));
        return rv;
    }
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "term record %s: create: %s", tmp,
                           tern_strerror(rv));
        return rv;
    }
    rv = write_all(fd, buf, sizeof buf);
    close(fd);
    if (rv == 0 && rename(tmp, path) != 0) {
        rv = -errno;
    }
    if (rv == 0) {
        rv = repl_fsync_dir(dir);
    }
    if (rv != 0) {
        (void)unlink(tmp);
        tern_errmsg_printf(errmsg, "term record %s: %s", path,
                           tern_strerror(rv));
    }
    return rv;
}

int repl_meta_check(uint64_t inner_term,
                    uint64_t inner_vote,
                    const struct repl_meta_rec *ours,
                    uint64_t max_jump,
                    char *errmsg)
{
    if (!ours->present) {
        return inner_term == 0 && inner_vote == 0 ? REPL_META_MATCH
                                                  : REPL_META_CREATED;
    }
    if (inner_term == ours->term && inner_vote == ours->vote) {
        return REPL_META_MATCH;
    }
    if (inner_term > ours->term && inner_vote == 0 &&
        inner_term < REPL_TERM_MAX && inner_term - ours->term <= max_jump) {
        return REPL_META_COMPLETED; /* set_term interrupted */
    }
    if (inner_term == ours->term && ours->vote == 0) {
        return REPL_META_COMPLETED; /* set_vote interrupted */
    }
    tern_errmsg_printf(
        errmsg,
        "term record mismatch: raft_uv metadata term %llu "
        "vote %llu, tern-meta term %llu vote %llu (write "
        "%llu); remove tern-meta1/2 if raft_uv is right, "
        "else rebuild the node from its peers",
        (unsigned long long)inner_term, (unsigned long long)inner_vote,
        (unsigned long long)ours->term, (unsigned long long)ours->vote,
        (unsigned long long)ours->seq);
    return TERN_ECORRUPT;
}
