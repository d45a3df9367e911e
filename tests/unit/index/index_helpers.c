/* Helpers of the index unit tests (see index_helpers.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../rm_tree.h"
#include "index_helpers.h"

char *th_tmpdir(void)
{
    char *p = strdup("/tmp/tern-idx-test-XXXXXX");
    cr_assert_not_null(p);
    cr_assert_not_null(mkdtemp(p), "mkdtemp: %s", strerror(errno));
    return p;
}

void th_rmdir(char *path)
{
    if (path != NULL) {
        test_rm_tree(path);
        free(path);
    }
}

char *th_dir_a, *th_dir_b;

void th_dirs_init(void)
{
    th_dir_a = th_tmpdir();
    th_dir_b = th_tmpdir();
}

void th_dirs_fini(void)
{
    th_rmdir(th_dir_a);
    th_rmdir(th_dir_b);
    th_dir_a = th_dir_b = NULL;
}

struct idx_env *th_open_opts(const struct idx_options *o)
{
    struct idx_env *e = NULL;
    char err[TERN_ERRMSG_SIZE] = "";
    int rc = idx_open(o, &e, err);
    cr_assert_eq(rc, 0, "idx_open: %s (%s)", tern_strerror(rc), err);
    cr_assert_not_null(e);
    return e;
}

struct idx_env *th_open(const char *dir, uint64_t segment_bytes)
{
    struct idx_options o = {.dir = dir, .segment_bytes = segment_bytes};
    return th_open_opts(&o);
}

unsigned th_apply(struct idx_env *e,
                  uint64_t index,
                  struct tern_wbuf *w,
                  struct idx_result *res,
                  unsigned max)
{
    unsigned n = 99;
    int rc = idx_cmd_end(w);
    cr_assert_eq(rc, 0, "idx_cmd_end: %s", tern_strerror(rc));
    if (th_entry_xxh3) {
        idx_cmd_flag_xxh3(w); /* as a leader of a switched cluster */
        th_entry_reseal(w->base, w->len);
    }
    cr_assert_eq(idx_cmd_validate(w->base, w->len), 0);
    rc = idx_apply(e, index, w->base, w->len, res, max, &n);
    cr_assert_eq(rc, 0, "idx_apply %llu: %s (%s)", (unsigned long long)index,
                 tern_strerror(rc), idx_errmsg(e));
    return n;
}

void th_create(struct idx_env *e, uint64_t index, const char *queue)
{
    struct tern_wbuf w;
    struct idx_result r[1];
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000 + index);
    idx_cmd_queue_create(&w, queue);
    cr_assert_eq(th_apply(e, index, &w, r, 1), 1);
    cr_assert_eq(r[0].status, 0, "create %s: %s", queue,
                 tern_strerror(r[0].status));
    tern_wbuf_free(&w);
}

void th_msg_text(char *buf,
                 size_t cap,
                 const char *queue,
                 uint64_t seq,
                 uint32_t i)
{
    /* Variable lengths so that byte limits and segment rolls vary. */
    int n =
        snprintf(buf, cap, "%s:%llu:%u:", queue, (unsigned long long)seq, i);
    size_t pad = (size_t)((seq * 7 + i * 13) % 40);
    for (size_t k = 0; k < pad && (size_t)n + k + 1 < cap; k++) {
        buf[n + k] = (char)('a' + (k % 26));
        buf[n + k + 1] = '\0';
    }
}

bool th_entry_xxh3;

void th_entry_reseal(uint8_t *b, size_t len)
{
    struct tern_checksum_state st;
    tern_put_u32(b + 16, (uint32_t)len);
    if ((tern_get_u16(b + 2) & 1) != 0) {
        tern_put_u32(b + 20, tern_checksum32_xxh3(b + 24, len - 24,
                                                  tern_checksum32(b, 20)));
        return;
    }
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, b, 20);
    tern_checksum32_update(&st, b + 24, len - 24);
    tern_put_u32(b + 20, tern_checksum32_end(&st));
}

struct idx_result th_produce(struct idx_env *e,
                             uint64_t index,
                             const char *queue,
                             uint64_t pid,
                             uint64_t seq,
                             uint32_t n)
{
    struct tern_wbuf w;
    struct idx_result r[1];
    char text[64][96];
    struct idx_msg msgs[64];
    cr_assert_leq(n, 64);
    for (uint32_t i = 0; i < n; i++) {
        th_msg_text(text[i], sizeof text[i], queue, seq, i);
        msgs[i].data = text[i];
        msgs[i].len = (uint32_t)strlen(text[i]);
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000 + index);
    idx_cmd_produce(&w, queue, pid, seq, msgs, n);
    cr_assert_eq(th_apply(e, index, &w, r, 1), 1);
    tern_wbuf_free(&w);
    return r[0];
}

static int collect_cb(void *arg, const struct idx_fetched *f)
{
    struct th_msgs *m = arg;
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->v = realloc(m->v, m->cap * sizeof *m->v);
        cr_assert_not_null(m->v);
    }
    struct th_msg *x = &m->v[m->n++];
    x->offset = f->offset;
    x->timestamp_ms = f->timestamp_ms;
    x->producer_id = f->producer_id;
    x->len = f->len;
    x->data = malloc(f->len + 1);
    cr_assert_not_null(x->data);
    memcpy(x->data, f->data, f->len);
    x->data[f->len] = '\0';
    return 0;
}

int th_fetch_all(struct idx_env *e,
                 const char *queue,
                 uint32_t max_msgs,
                 uint32_t max_bytes,
                 struct th_msgs *out)
{
    uint64_t off = 0;
    struct idx_queue_info qi;
    int rc = idx_queue_get(e, queue, &qi);
    if (rc != 0) {
        return rc;
    }
    off = qi.start_offset;
    for (int guard = 0; guard < 1000000; guard++) {
        uint64_t next = 0;
        size_t before = out->n;
        rc = idx_fetch(e, queue, off, max_msgs, max_bytes, collect_cb, out,
                       &next);
        if (rc != 0) {
            return rc;
        }
        if (out->n == before) {
            cr_assert_eq(next, off);
            break;
        }
        cr_assert_eq(next, off + (out->n - before));
        off = next;
    }
    cr_assert_eq(off, qi.next_offset);
    return 0;
}

void th_msgs_free(struct th_msgs *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].data);
    }
    free(m->v);
    memset(m, 0, sizeof *m);
}

int th_count_fetched(void *arg, const struct idx_fetched *f)
{
    (void)f;
    (*(unsigned *)arg)++;
    return 0;
}

void th_msgs_expect_eq(const struct th_msgs *a, const struct th_msgs *b)
{
    cr_assert_eq(a->n, b->n, "message counts %zu vs %zu", a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        cr_assert_eq(a->v[i].offset, b->v[i].offset);
        cr_assert_eq(a->v[i].timestamp_ms, b->v[i].timestamp_ms);
        cr_assert_eq(a->v[i].producer_id, b->v[i].producer_id);
        cr_assert_eq(a->v[i].len, b->v[i].len);
        cr_assert_eq(memcmp(a->v[i].data, b->v[i].data, a->v[i].len), 0);
    }
}

static int list_segments(const char *dir, char ***names)
{
    char path[4096];
    cr_assert_lt((size_t)snprintf(path, sizeof path, "%s/log", dir),
                 sizeof path);
    struct dirent **ents;
    int n = scandir(path, &ents, NULL, alphasort);
    cr_assert_geq(n, 0);
    int k = 0;
    *names = calloc((size_t)n + 1, sizeof **names);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(ents[i]->d_name);
        if (l > 4 && strcmp(ents[i]->d_name + l - 4, ".seg") == 0) {
            (*names)[k++] = strdup(ents[i]->d_name);
        }
        free(ents[i]);
    }
    free(ents);
    return k;
}

char *th_last_segment(const char *dir)
{
    char **names;
    int n = list_segments(dir, &names);
    cr_assert_gt(n, 0);
    char *p = malloc(4096);
    cr_assert_lt((size_t)snprintf(p, 4096, "%s/log/%s", dir, names[n - 1]),
                 4096);
    for (int i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    return p;
}

int th_count_segments(const char *dir)
{
    char **names;
    int n = list_segments(dir, &names);
    for (int i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    return n;
}

off_t th_file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "stat %s", path);
    return st.st_size;
}

void th_flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    cr_assert_geq(fd, 0);
    cr_assert_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

void th_truncate(const char *path, off_t size)
{
    cr_assert_eq(truncate(path, size), 0);
}

void th_append(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, buf, n), (ssize_t)n);
    close(fd);
}

void th_copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char buf[65536];
    ssize_t n;
    cr_assert_geq(in, 0, "open %s", from);
    cr_assert_geq(out, 0, "open %s", to);
    while ((n = read(in, buf, sizeof buf)) > 0) {
        cr_assert_eq(write(out, buf, (size_t)n), n);
    }
    cr_assert_eq(n, 0);
    close(in);
    close(out);
}

uint8_t *th_log_bytes(struct idx_env *e, uint64_t *len)
{
    uint64_t end = idx_log_end(e);
    uint8_t *buf = malloc(end + 1);
    uint64_t pos = 0;
    cr_assert_not_null(buf);
    while (pos < end) {
        size_t n = 0;
        int rc = idx_bulk_read(e, pos, buf + pos, 1000, &n);
        cr_assert_eq(rc, 0);
        cr_assert_gt(n, 0);
        pos += n;
    }
    *len = end;
    return buf;
}

char *th_log_files(const char *dir, const char *ext)
{
    char path[4096], *out = calloc(1, 1);
    size_t len = 0, el = strlen(ext);
    struct dirent **list;
    cr_assert_not_null(out);
    (void)snprintf(path, sizeof path, "%s/log", dir);
    int n = scandir(path, &list, NULL, alphasort);
    cr_assert_geq(n, 0);
    for (int i = 0; i < n; i++) {
        const char *s = list[i]->d_name;
        size_t l = strlen(s);
        if (l > el && strcmp(s + l - el, ext) == 0) {
            out = realloc(out, len + l + 2);
            cr_assert_not_null(out);
            memcpy(out + len, s, l);
            len += l;
            out[len++] = '\n';
            out[len] = '\0';
        }
        free(list[i]);
    }
    free(list);
    return out;
}

uint8_t *th_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    cr_assert_geq(sz, 0);
    cr_assert_eq(fseek(f, 0, SEEK_SET), 0);
    uint8_t *b = malloc((size_t)sz + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
    cr_assert_eq(fclose(f), 0);
    *n = (size_t)sz;
    return b;
}

/* The checkpoint files of dirs a and b are the same, byte for byte (at
 * least min of them). */
void th_expect_same_checkpoints(const char *da, const char *db, int min)
{
    char *na = th_log_files(da, ".ckpt"), *nb = th_log_files(db, ".ckpt");
    cr_expect_str_eq(na, nb);
    cr_expect_geq(strlen(na), 25 * (size_t)min, "checkpoints: %s", na);
    char *line = strtok(na, "\n");
    while (line != NULL) {
        char pa[4096], pb[4096];
        size_t la, lb;
        (void)snprintf(pa, sizeof pa, "%s/log/%s", da, line);
        (void)snprintf(pb, sizeof pb, "%s/log/%s", db, line);
        uint8_t *ba = th_read_file(pa, &la), *bb = th_read_file(pb, &lb);
        cr_expect_eq(la, lb, "%s", line);
        cr_expect(la == lb && memcmp(ba, bb, la) == 0, "%s differs", line);
        free(ba);
        free(bb);
        line = strtok(NULL, "\n");
    }
    free(na);
    free(nb);
}
