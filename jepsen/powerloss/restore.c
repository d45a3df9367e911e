/* tern-powerloss-restore STATE_DIR ROOT: after kill -9 of a process that ran
 * under libtern_powerloss.so, puts every tracked file under ROOT back to its
 * last durable state (see pl_state.h for the records, README.md for the
 * model), then empties STATE_DIR/rec so the next run starts clean.  ROOT
 * defaults to the one the shim recorded in STATE_DIR/root.
 *
 * Algorithm (idempotent: rerunning after a crash of this tool is safe):
 *   1. Load every record; apply pending redo journals to the shadows.
 *   2. Walk ROOT and STATE_DIR/stash and index regular files by inode.
 *   3. A record needs work if it is dirty, has no durable name, or its name
 *      changed (rename/unlink not durable).  For those: files whose content
 *      is live are moved (by inode) into stash/; the current names of all
 *      other such files are removed (their content is not durable).
 *   4. Each record with a durable name gets that name back: from its shadow,
 *      as an empty file (content none), or from stash/ (content live).
 * With --flushed, only step "empty STATE_DIR" runs: use it when the page
 * cache is taken to have reached the disk (e.g. after a clean stop).
 * The tool refuses (exit 1) while a process under the shim holds
 * STATE_DIR/lock.
 * Exit status: 0 done, 1 error (message on stderr), 2 usage. */
#define _GNU_SOURCE
#include "pl_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct rrec
{
    struct pl_meta m;
    int dirty;
    int work;
};

struct fent
{
    uint64_t dev, ino;
    char *path;
};

static struct rrec *g_recs;
static size_t g_nrec;
static struct fent *g_files;
static size_t g_nfile, g_capfile;
static char g_state[PATH_MAX], g_root[PATH_MAX];

static void die(const char *what, const char *arg, int err)
{
    fprintf(stderr, "tern-powerloss-restore: %s %s: %s\n", what, arg,
            strerror(err < 0 ? -err : err));
    exit(1);
}

static void load(void)
{
    char dir[PATH_MAX + 8], p[2 * PATH_MAX];
    snprintf(dir, sizeof dir, "%s/rec", g_state);
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT) {
            return; /* nothing ever tracked */
        }
        die("open", dir, errno);
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t k = strlen(de->d_name);
        if (k < 6 || strcmp(de->d_name + k - 5, ".meta") != 0) {
            continue;
        }
        g_recs = realloc(g_recs, (g_nrec + 1) * sizeof *g_recs);
        if (g_recs == NULL) {
            die("malloc", "", ENOMEM);
        }
        struct rrec *r = &g_recs[g_nrec++];
        memset(r, 0, sizeof *r);
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        int rc = pl_meta_read(p, &r->m);
        if (rc != 0) {
            die("read record", p, rc);
        }
        rc = pl_redo_apply(g_state, r->m.id);
        if (rc < 0) {
            die("apply redo of", r->m.id, rc);
        }
        struct stat st;
        pl_rec_path(p, sizeof p, g_state, r->m.id, ".dirty");
        r->dirty = stat(p, &st) == 0;
        r->work = r->dirty || rc == 1 || r->m.unlinked || r->m.dpath[0] == 0 ||
                  r->m.cpath[0] == 0 || r->m.ino == 0 ||
                  strcmp(r->m.dpath, r->m.cpath) != 0 ||
                  r->m.content == PL_NONE;
    }
    closedir(d);
}

static void scan(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT) {
            return;
        }
        die("open", dir, errno);
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[PATH_MAX];
        struct stat st;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
            continue;
        }
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p ||
            lstat(p, &st) != 0) {
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            scan(p);
        } else if (S_ISREG(st.st_mode)) {
            if (g_nfile == g_capfile) {
                g_capfile = g_capfile ? 2 * g_capfile : 256;
                g_files = realloc(g_files, g_capfile * sizeof *g_files);
                if (g_files == NULL) {
                    die("malloc", "", ENOMEM);
                }
            }
            g_files[g_nfile++] = (struct fent){(uint64_t)st.st_dev,
                                               (uint64_t)st.st_ino, strdup(p)};
        }
    }
    closedir(d);
}

static int owned_by_record(uint64_t dev, uint64_t ino)
{
    for (size_t i = 0; i < g_nrec; i++) {
        if (g_recs[i].m.ino == ino && g_recs[i].m.dev == dev) {
            return 1;
        }
    }
    return 0;
}

static void mkdir_parents(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        if (pl_sys_mkdir(p, 0755) != 0 && errno != EEXIST) {
            die("mkdir", p, errno);
        }
        *s = '/';
    }
}

static void stash_path(char *out, size_t n, const char *id)
{
    snprintf(out, n, "%s/stash/%s", g_state, id);
}

/* Step 3 for one record. */
static void take_away(struct rrec *r, int *removed)
{
    char sp[PATH_MAX + 128];
    stash_path(sp, sizeof sp, r->m.id);
    if (r->m.ino == 0) {
        /* Created, inode never recorded: the file at cpath is ours unless
         * another record owns it. */
        struct stat st;
        if (r->m.cpath[0] && lstat(r->m.cpath, &st) == 0 &&
            S_ISREG(st.st_mode) &&
            !owned_by_record((uint64_t)st.st_dev, (uint64_t)st.st_ino)) {
            if (pl_sys_unlink(r->m.cpath) != 0) {
                die("unlink", r->m.cpath, errno);
            }
            (*removed)++;
        }
        return;
    }
    int first = 1;
    for (size_t i = 0; i < g_nfile; i++) {
        struct fent *f = &g_files[i];
        if (f->path == NULL || f->dev != r->m.dev || f->ino != r->m.ino) {
            continue;
        }
        if (r->m.content == PL_LIVE && first) {
            if (strcmp(f->path, sp) != 0 && pl_sys_rename(f->path, sp) != 0) {
                die("stash", f->path, errno);
            }
            first = 0;
        } else if (pl_sys_unlink(f->path) != 0 && errno != ENOENT) {
            die("unlink", f->path, errno);
        } else {
            (*removed)++;
        }
        free(f->path);
        f->path = NULL;
    }
}

/* Step 4 for one record. */
static void put_back(struct rrec *r)
{
    char src[PATH_MAX + 128], tmp[PATH_MAX + 32];
    const char *d = r->m.dpath;
    mkdir_parents(d);
    snprintf(tmp, sizeof tmp, "%s.tern-restore-tmp", d);
    if (r->m.content == PL_LIVE) {
        stash_path(src, sizeof src, r->m.id);
        if (pl_sys_rename(src, d) != 0) {
            die("move back from stash", d, errno);
        }
        return;
    }
    int out = pl_sys_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, r->m.mode);
    if (out < 0) {
        die("create", tmp, errno);
    }
    if (r->m.content == PL_SHADOW) {
        pl_rec_path(src, sizeof src, g_state, r->m.id, ".data");
        int in = pl_sys_open(src, O_RDONLY, 0);
        if (in < 0) {
            die("open shadow", src, errno);
        }
        int rc = pl_copy_fd(in, out);
        pl_sys_close(in);
        if (rc != 0) {
            die("copy shadow to", tmp, rc);
        }
    }
    if (fchmod(out, r->m.mode) != 0) {
        die("chmod", tmp, errno);
    }
    pl_sys_close(out);
    if (pl_sys_rename(tmp, d) != 0) {
        die("rename into place", d, errno);
    }
}

static void clear_state(void)
{
    const char *sub[] = {"rec", "stash"};
    for (int k = 0; k < 2; k++) {
        char dir[PATH_MAX + 8];
        snprintf(dir, sizeof dir, "%s/%s", g_state, sub[k]);
        DIR *d = opendir(dir);
        if (d == NULL) {
            continue;
        }
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            char p[2 * PATH_MAX];
            if (de->d_name[0] == '.') {
                continue;
            }
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (pl_sys_unlink(p) != 0) {
                die("unlink", p, errno);
            }
        }
        closedir(d);
    }
    char f[PATH_MAX + 16];
    snprintf(f, sizeof f, "%s/fail-fsync", g_state);
    pl_sys_unlink(f);
}

int main(int argc, char **argv)
{
    char rootarg[PATH_MAX];
    int flushed = argc > 1 && strcmp(argv[1], "--flushed") == 0;
    argv += flushed;
    argc -= flushed;
    if (argc != 2 && argc != 3) {
        fprintf(stderr,
                "usage: tern-powerloss-restore [--flushed] STATE_DIR [ROOT]\n");
        return 2;
    }
    if (realpath(argv[1], g_state) == NULL) {
        die("state dir", argv[1], errno);
    }
    char lock[PATH_MAX + 8];
    snprintf(lock, sizeof lock, "%s/lock", g_state);
    int lfd = pl_sys_open(lock, O_RDWR | O_CREAT, 0600);
    if (lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        fprintf(stderr,
                "tern-powerloss-restore: %s is locked: a process under the "
                "shim is still running (kill it first)\n",
                g_state);
        return 1;
    }
    if (flushed) {
        clear_state();
        printf(
            "tern-powerloss-restore: state cleared, files left as they "
            "are\n");
        return 0;
    }
    if (argc == 3) {
        snprintf(rootarg, sizeof rootarg, "%s", argv[2]);
    } else {
        char rf[PATH_MAX + 8];
        snprintf(rf, sizeof rf, "%s/root", g_state);
        int fd = pl_sys_open(rf, O_RDONLY, 0);
        ssize_t n =
            fd < 0 ? -1 : pl_sys_pread(fd, rootarg, sizeof rootarg - 1, 0);
        if (fd >= 0) {
            pl_sys_close(fd);
        }
        struct stat st;
        snprintf(rf, sizeof rf, "%s/rec", g_state);
        if (n <= 0 && stat(rf, &st) != 0) {
            printf("tern-powerloss-restore: nothing recorded in %s\n", g_state);
            return 0;
        }
        if (n <= 0) {
            fprintf(stderr,
                    "tern-powerloss-restore: %s has no root file (the "
                    "shim never ran?); pass ROOT\n",
                    g_state);
            return 1;
        }
        rootarg[n] = 0;
        rootarg[strcspn(rootarg, "\n")] = 0;
    }
    if (realpath(rootarg, g_root) == NULL) {
        die("root", rootarg, errno);
    }
    char stash[PATH_MAX + 8];
    snprintf(stash, sizeof stash, "%s/stash", g_state);
    if (pl_sys_mkdir(stash, 0700) != 0 && errno != EEXIST) {
        die("mkdir", stash, errno);
    }
    load();
    scan(g_root);
    scan(stash);
    int removed = 0, rolled = 0, renamed = 0, work = 0;
    for (size_t i = 0; i < g_nrec; i++) {
        if (g_recs[i].work) {
            work++;
            take_away(&g_recs[i], &removed);
        }
    }
    for (size_t i = 0; i < g_nrec; i++) {
        struct rrec *r = &g_recs[i];
        if (!r->work || r->m.dpath[0] == 0) {
            continue;
        }
        put_back(r);
        if (r->m.content == PL_LIVE) {
            renamed++;
        } else {
            rolled++;
        }
    }
    clear_state();
    printf(
        "tern-powerloss-restore: %zu records, %d needed work, %d files "
        "rewritten from their durable state, %d moved back, %d names "
        "removed\n",
        g_nrec, work, rolled, renamed, removed);
    return 0;
}
