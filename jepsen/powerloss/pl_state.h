/* State shared by the power-loss shim (libtern_powerloss.so) and its restore
 * tool (tern-powerloss-restore): the on-disk layout of STATE_DIR, the record
 * ("meta") format, the redo journal for synchronous writes into a shadow, and
 * raw-syscall file helpers.  The helpers call syscall() directly so that the
 * shim's own I/O never re-enters its interposed open/write/rename/...
 *
 * STATE_DIR layout (one set of files per tracked file, <id> = "<pid>-<n>"):
 *   rec/<id>.meta   the record, text, rewritten atomically (tmp + rename)
 *   rec/<id>.data   shadow copy: the file's content at its last durable point
 *   rec/<id>.dirty  empty marker: the file got writes that are not durable
 *   rec/<id>.redo   a synchronous write not yet applied to <id>.data
 *   stash/          used by the restore tool while it moves files back
 *   fail-fsync      if present, the next fsync on a tracked file fails (EIO)
 *   root            TERN_POWERLOSS_ROOT as the shim resolved it
 *   lock            flock()ed by the running shim (one process per STATE_DIR)
 *
 * Meta format, version 1 (encoded/decoded here, be careful when adapting):
 *   "tern-powerloss-rec 1\n" then one "key=value\n" line each for
 *   id, dev, ino (decimal; ino 0 = created, inode not yet known),
 *   content (none|shadow|live), unlinked (0|1), mode (octal),
 *   dpath (durable name, empty = none), cpath (current name, empty = none),
 *   and last "sum=<8 hex>\n": FNV-1a 32 of every byte before that line.
 *   content: none   = no durable content (restored as an empty file if the
 *                     name is durable, else removed);
 *            shadow = <id>.data holds the durable content;
 *            live   = the file's current content is durable as it stands
 *                     (never modified non-durably since tracking began).
 *
 * Redo format, version 1 (little-endian, encoded/decoded here):
 *   u32 magic 0x524c5054 ("TPLR"), u32 version 1, u32 op (1 write at offset,
 *   2 truncate to offset, 3 extend size to at least offset), u32 reserved 0,
 *   u64 offset, u64 len, len data bytes, then u32 FNV-1a 32 of all the bytes
 *   before it.  Written to <id>.redo.tmp and renamed, so a redo that exists
 *   is complete; applying it twice gives the same result. */
#ifndef TERN_PL_STATE_H
#define TERN_PL_STATE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum pl_content { PL_NONE = 0, PL_SHADOW = 1, PL_LIVE = 2 };
enum pl_redo_op { PL_REDO_WRITE = 1, PL_REDO_TRUNCATE = 2, PL_REDO_EXTEND = 3 };

#define PL_ID_MAX 48

struct pl_meta
{
    char id[PL_ID_MAX];
    uint64_t dev;
    uint64_t ino;
    int content;   /* enum pl_content */
    int unlinked;  /* current name removed, removal not yet durable */
    unsigned mode; /* permission bits used when the file is recreated */
    char dpath[PATH_MAX];
    char cpath[PATH_MAX];
};

/* Raw syscalls (bypass any interposed libc symbol).  Return as libc does:
 * -1 and errno on failure. */
int pl_sys_open(const char *path, int flags, unsigned mode);
int pl_sys_close(int fd);
ssize_t pl_sys_pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t pl_sys_pread(int fd, void *buf, size_t n, off_t off);
int pl_sys_rename(const char *from, const char *to);
int pl_sys_unlink(const char *path);
int pl_sys_ftruncate(int fd, off_t len);
int pl_sys_mkdir(const char *path, unsigned mode);

/* Builds "<state>/rec/<id><suffix>" into out (caller-owned, size n).
 * Returns 0, or -ENAMETOOLONG. */
int pl_rec_path(char *out,
                size_t n,
                const char *state,
                const char *id,
                const char *suffix);

/* Writes m to rec/<id>.meta atomically.  Returns 0 or -errno. */
int pl_meta_write(const char *state, const struct pl_meta *m);

/* Parses the meta file at path into m (caller-owned).  Returns 0, -errno,
 * or -EINVAL for a malformed file or a checksum mismatch. */
int pl_meta_read(const char *path, struct pl_meta *m);

/* Copies the whole content of src_fd (read from offset 0) into rec/<id>.data
 * atomically (tmp + rename).  Returns 0 or -errno. */
int pl_shadow_capture(const char *state, const char *id, int src_fd);

/* Copies the whole content of src_fd into dst_fd (from offset 0; dst is
 * truncated to the copied size).  Returns 0 or -errno. */
int pl_copy_fd(int src_fd, int dst_fd);

/* Writes the redo record (op, off, data borrowed for the call) to
 * rec/<id>.redo atomically.  Returns 0 or -errno. */
int pl_redo_write(const char *state,
                  const char *id,
                  int op,
                  uint64_t off,
                  const void *data,
                  uint64_t len);

/* If rec/<id>.redo exists and is valid, applies it to rec/<id>.data (created
 * empty if missing) and removes it.  Returns 1 applied, 0 none, -errno, or
 * -EINVAL for a corrupt redo (left in place). */
int pl_redo_apply(const char *state, const char *id);

/* Applies op to the open file fd (the shadow).  Returns 0 or -errno. */
int pl_redo_apply_fd(int fd,
                     int op,
                     uint64_t off,
                     const void *data,
                     uint64_t len);

/* FNV-1a 32-bit hash, continuing from h (start with 2166136261u). */
uint32_t pl_fnv1a(uint32_t h, const void *p, size_t n);

#endif
