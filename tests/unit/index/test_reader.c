/* Unit tests of idx_reader (index/read.c): a fetch run on another thread
 * against the snapshot taken at idx_reader_start delivers what
 * idx_fetch_filtered delivers on the env, and only what was there at the
 * start; a cut of the log or a deleted segment makes it stale
 * (idx_reader_end: -EAGAIN); idx_close abandons a reader not yet run, and
 * stops and waits for one being run; a view capped at view_max_segs segments
 * hands a read past them back to the env. Fetches run on a real second
 * thread; the callbacks there only record (no Criterion asserts off the
 * main thread). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_reader, .init = th_dirs_init, .fini = th_dirs_fini);

#define RT_MAX 4096

/* What a fetch delivered, recorded by rec_cb. */
struct rec
{
    uint64_t offset[RT_MAX];
    char text[RT_MAX][32];
    size_t n;
    /* rec_cb sleeps this long at its first call, after setting entered */
    unsigned stall_ms;
    atomic_bool entered;
    atomic_bool left;
};

static int rec_cb(void *arg, const struct idx_fetched *f)
{
    struct rec *r = arg;
    if (r->n == 0 && r->stall_ms > 0) {
        atomic_store(&r->entered, true);
        struct timespec ts = {0, (long)r->stall_ms * 1000000L};
        (void)nanosleep(&ts, NULL);
    }
    if (r->n < RT_MAX) {
        r->offset[r->n] = f->offset;
        size_t k =
            f->len < sizeof r->text[0] - 1 ? f->len : sizeof r->text[0] - 1;
        memcpy(r->text[r->n], f->data, k);
        r->text[r->n][k] = '\0';
        r->n++;
    }
    return 0;
}

/* One idx_reader_fetch on its own thread. */
struct run
{
    struct idx_reader *r;
    struct idx_fetch_opts o;
    struct rec *rec;
    uint64_t next;
    int rc;
};

static void *run_thread(void *arg)
{
    struct run *x = arg;
    x->rc = idx_reader_fetch(x->r, &x->o, rec_cb, x->rec, &x->next);
    atomic_store(&x->rec->left, true);
    return NULL;
}

static void fetch_on_thread(struct run *x)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, run_thread, x), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
}

/* A queue q of n_batches produces of per messages each. */
static struct idx_env *filled(uint64_t segment_bytes,
                              uint32_t n_batches,
                              uint32_t per)
{
    struct idx_env *e = th_open(th_dir_a, segment_bytes);
    th_create(e, 1, "q");
    for (uint32_t b = 0; b < n_batches; b++) {
        th_produce(e, 2 + b, "q", 0, b, per);
    }
    cr_assert_eq(idx_flush(e), 0);
    return e;
}

Test(index_reader, fetch_on_another_thread_equals_the_env_fetch)
{
    /* Small segments: the records of one fetch span several files. */
    struct idx_env *e = filled(512, 40, 5);
    static struct rec env_rec, rd_rec;
    struct idx_fetch_opts o = {.max_msgs = 60, .max_bytes = 1 << 20};
    uint64_t env_next = 0;
    cr_assert_gt(th_count_segments(th_dir_a), 4);
    cr_assert_eq(
        idx_fetch_filtered(e, "q", 17, &o, rec_cb, &env_rec, &env_next), 0);
    struct run x = {.o = o, .rec = &rd_rec};
    cr_assert_eq(idx_reader_start(e, "q", 17, &x.r), 0);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, 0);
    cr_assert_eq(idx_reader_end(x.r), 0);
    cr_assert_eq(env_rec.n, 60);
    cr_assert_eq(rd_rec.n, env_rec.n);
    cr_assert_eq(x.next, env_next);
    for (size_t i = 0; i < rd_rec.n; i++) {
        cr_expect_eq(rd_rec.offset[i], 17 + i);
        cr_expect_str_eq(rd_rec.text[i], env_rec.text[i]);
    }
    idx_close(e);
}

Test(index_reader, sees_the_index_as_it_was_at_the_start)
{
    struct idx_env *e = filled(4096, 4, 10);
    static struct rec rec;
    struct run x = {.o = {.max_msgs = 1000, .max_bytes = 1 << 20}, .rec = &rec};
    cr_assert_eq(idx_reader_start(e, "q", 0, &x.r), 0);
    /* Applied and flushed after the start: not the reader's. */
    th_produce(e, 10, "q", 0, 4, 10);
    cr_assert_eq(idx_flush(e), 0);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, 0);
    cr_assert_eq(rec.n, 40);
    cr_assert_eq(x.next, 40);
    cr_assert_eq(idx_reader_end(x.r), 0);
    idx_close(e);
}

Test(index_reader, stale_after_a_segment_is_deleted)
{
    struct idx_env *e = filled(512, 40, 5);
    static struct rec rec;
    struct run x = {.o = {.max_msgs = 1000, .max_bytes = 1 << 20}, .rec = &rec};
    cr_assert_eq(idx_reader_start(e, "q", 0, &x.r), 0);
    /* What retention does at a snapshot: the head segments go. */
    cr_assert_eq(idx__log_drop_head(e, idx_log_end(e) / 2), 0);
    fetch_on_thread(&x);
    cr_assert_eq(idx_reader_end(x.r), -EAGAIN);
    idx_close(e);
}

Test(index_reader, stale_after_the_log_is_cut)
{
    struct idx_env *e = filled(4096, 10, 5);
    static struct rec rec;
    struct run x = {.o = {.max_msgs = 1000, .max_bytes = 1 << 20}, .rec = &rec};
    cr_assert_eq(idx_reader_start(e, "q", 0, &x.r), 0);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, 0);
    /* Cut after the fetch, before its end: still not servable. */
    cr_assert_eq(idx__log_truncate(e, idx_log_end(e) - 1), 0);
    cr_assert_eq(idx_reader_end(x.r), -EAGAIN);
    idx_close(e);
}

Test(index_reader, unknown_queue_fails_with_the_readers_errmsg)
{
    struct idx_env *e = filled(4096, 1, 1);
    static struct rec rec;
    struct run x = {.o = {.max_msgs = 10, .max_bytes = 1 << 20}, .rec = &rec};
    cr_assert_eq(idx_reader_start(e, "nope", 0, &x.r), 0);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, TERN_ENOQUEUE);
    cr_assert(strstr(idx_reader_errmsg(x.r), "no queue nope") != NULL,
              "errmsg: %s", idx_reader_errmsg(x.r));
    cr_assert_eq(idx_reader_end(x.r), 0);
    cr_assert_eq(idx_reader_start(e, "bad name!", 0, &x.r), TERN_EBADNAME);
    idx_close(e);
}

Test(index_reader, close_abandons_a_reader_not_yet_run)
{
    struct idx_env *e = filled(4096, 2, 5);
    static struct rec rec;
    struct run x = {.o = {.max_msgs = 10, .max_bytes = 1 << 20}, .rec = &rec};
    cr_assert_eq(idx_reader_start(e, "q", 0, &x.r), 0);
    idx_close(e);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, -EAGAIN);
    cr_assert_eq(rec.n, 0);
    cr_assert_eq(idx_reader_end(x.r), -EAGAIN);
}

Test(index_reader, close_stops_and_waits_for_a_reader_being_run)
{
    struct idx_env *e = filled(4096, 2, 5);
    static struct rec rec;
    struct run x = {.o = {.max_msgs = 10, .max_bytes = 1 << 20}, .rec = &rec};
    pthread_t t;
    rec.stall_ms = 500;
    cr_assert_eq(idx_reader_start(e, "q", 0, &x.r), 0);
    cr_assert_eq(pthread_create(&t, NULL, run_thread, &x), 0);
    for (int i = 0; i < 5000 && !atomic_load(&rec.entered); i++) {
        struct timespec ts = {0, 1000000L};
        (void)nanosleep(&ts, NULL);
    }
    cr_assert(atomic_load(&rec.entered));
    idx_close(e); /* asks the fetch to stop, waits for it in rec_cb */
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(x.rc, -EAGAIN);
    cr_assert_eq(rec.n, 1); /* stopped at the next message */
    cr_assert_eq(idx_reader_end(x.r), -EAGAIN); /* its env is gone */
}

Test(index_reader, a_read_past_a_capped_view_goes_back_to_the_env)
{
    /* A segment per record: more segments than a view copies. */
    uint32_t n = 200;
    struct idx_env *e = filled(16, n, 1);
    e->view_max_segs = 64;
    static struct rec rec;
    struct run x = {.o = {.max_msgs = n, .max_bytes = 1 << 30}, .rec = &rec};
    cr_assert_geq(th_count_segments(th_dir_a), (int)n);
    cr_assert_eq(idx_reader_start(e, "q", 0, &x.r), 0);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, -EAGAIN, "rc %d after %zu messages", x.rc, rec.n);
    cr_assert_eq(rec.n, 64); /* the copied segments, one message each */
    cr_assert_eq(idx_reader_end(x.r), 0); /* the log did not change */
    /* Near the end the copy reaches the log end: served whole. */
    memset(&rec, 0, sizeof rec);
    cr_assert_eq(idx_reader_start(e, "q", n - 40, &x.r), 0);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, 0);
    cr_assert_eq(rec.n, 40);
    cr_assert_eq(idx_reader_end(x.r), 0);
    idx_close(e);
}

/* posix_fadvise is wrapped for this binary (--wrap,
 * tests/unit/index/CMakeLists.txt): the WILLNEED calls are recorded with
 * their file's inode and passed on. */
#define WN_MAX 1024
static struct
{
    ino_t ino[WN_MAX];
    off_t off[WN_MAX];
    off_t len[WN_MAX];
    unsigned n;
    bool on;
} wn;

int __real_posix_fadvise(int fd, off_t off, off_t len, int advice);
int __wrap_posix_fadvise(int fd, off_t off, off_t len, int advice);
int __wrap_posix_fadvise(int fd, off_t off, off_t len, int advice)
{
    struct stat st;
    if (wn.on && advice == POSIX_FADV_WILLNEED && wn.n < WN_MAX &&
        fstat(fd, &st) == 0) {
        wn.ino[wn.n] = st.st_ino;
        wn.off[wn.n] = off;
        wn.len[wn.n] = len;
        wn.n++;
    }
    return __real_posix_fadvise(fd, off, len, advice);
}

/* Bytes asked by more than one recorded WILLNEED call. */
static off_t willneed_overlap(void)
{
    off_t twice = 0;
    for (unsigned i = 0; i < wn.n; i++) {
        for (unsigned k = i + 1; k < wn.n; k++) {
            off_t lo = wn.off[i] > wn.off[k] ? wn.off[i] : wn.off[k];
            off_t hi_i = wn.off[i] + wn.len[i], hi_k = wn.off[k] + wn.len[k];
            off_t hi = hi_i < hi_k ? hi_i : hi_k;
            if (wn.ino[i] == wn.ino[k] && lo < hi) {
                twice += hi - lo;
            }
        }
    }
    return twice;
}

/* A queue q of n_batches records of 64 messages of 4000 bytes (256 KiB a
 * record); *first_end: where the first of them ends in the log. */
static struct idx_env *filled_big(uint64_t segment_bytes,
                                  uint32_t n_batches,
                                  uint64_t *first_end)
{
    static char data[4000];
    struct idx_msg msgs[64];
    struct idx_env *e = th_open(th_dir_a, segment_bytes);
    memset(data, 'm', sizeof data);
    for (int i = 0; i < 64; i++) {
        msgs[i].data = data;
        msgs[i].len = sizeof data;
    }
    th_create(e, 1, "q");
    for (uint32_t b = 0; b < n_batches; b++) {
        struct tern_wbuf w;
        struct idx_result r[1];
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 1000 + b);
        idx_cmd_produce(&w, "q", 0, 0, msgs, 64);
        cr_assert_eq(th_apply(e, 2 + b, &w, r, 1), 1);
        tern_wbuf_free(&w);
        if (b == 0) {
            *first_end = idx_log_end(e);
        }
    }
    cr_assert_eq(idx_flush(e), 0);
    return e;
}

/* Readers of 512 messages (2 MiB) each, one after the other, from
 * offset from to the queue's end; the messages read. */
static uint64_t read_stream(struct idx_env *e, uint64_t from, uint64_t end)
{
    static struct rec rec;
    uint64_t n = 0;
    while (from < end) {
        uint32_t max = end - from < 512 ? (uint32_t)(end - from) : 512;
        struct run x = {.o = {.max_msgs = max, .max_bytes = 8 << 20},
                        .rec = &rec};
        rec.n = 0;
        cr_assert_eq(idx_reader_start(e, "q", from, &x.r), 0);
        fetch_on_thread(&x);
        cr_assert_eq(x.rc, 0, "%s", idx_reader_errmsg(x.r));
        cr_assert_eq(idx_reader_end(x.r), 0);
        cr_assert_eq(x.next, from + rec.n);
        cr_assert_gt(rec.n, 0);
        n += rec.n;
        from = x.next;
    }
    return n;
}

Test(index_reader, readers_streaming_a_queue_ask_the_kernel_once_per_byte)
{
    /* 48 records of 256 KiB in segments of 4 MiB: a 12 MiB log, read by
     * 6 readers of 2 MiB, each of which used to ask for the 8 MiB after
     * it. */
    uint64_t first_end = 0;
    struct idx_env *e = filled_big(4u << 20, 48, &first_end);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    memset(&wn, 0, sizeof wn);
    wn.on = true;
    cr_assert_eq(read_stream(e, 0, qi.next_offset), 48 * 64);
    wn.on = false;
    off_t asked = 0;
    for (unsigned i = 0; i < wn.n; i++) {
        asked += wn.len[i];
    }
    cr_expect_gt(wn.n, 2, "the read-ahead was renewed");
    cr_expect_eq(willneed_overlap(), 0, "%lld bytes asked twice",
                 (long long)willneed_overlap());
    /* Everything after the first record, asked once. */
    cr_expect_eq((uint64_t)asked, idx_log_end(e) - first_end,
                 "asked %lld of %llu after %llu", (long long)asked,
                 (unsigned long long)idx_log_end(e),
                 (unsigned long long)first_end);

    /* A cut forgets the range: a reader after it asks again. */
    memset(&wn, 0, sizeof wn);
    wn.on = true;
    cr_assert_eq(idx__log_truncate(e, idx_log_end(e) - 1), 0);
    cr_assert_eq(read_stream(e, 45 * 64, 46 * 64), 64);
    wn.on = false;
    cr_expect_gt(wn.n, 0, "a reader after a cut asks for its read-ahead");
    idx_close(e);
}

/* Flip the first byte of message text t in dir's only segment file. */
static void flip_text(const char *dir, const char *t)
{
    char *seg = th_last_segment(dir);
    size_t n;
    uint8_t *b = th_read_file(seg, &n);
    uint8_t *at = memmem(b, n, t, strlen(t));
    cr_assert_not_null(at, "%s in %s", t, seg);
    th_flip_byte(seg, at - b);
    free(b);
    free(seg);
}

/* Readers of a consumer's consecutive answers: the second starts in the
 * record the first ended in (offsets 5-9 of batch 1). */
static void two_answers(struct idx_env *e,
                        bool cut_between,
                        struct run *second,
                        struct rec *rec)
{
    static struct rec first_rec;
    char t[96];
    struct run x = {.o = {.max_msgs = 8, .max_bytes = 1 << 20},
                    .rec = &first_rec};
    memset(&first_rec, 0, sizeof first_rec);
    cr_assert_eq(idx_reader_start(e, "q", 0, &x.r), 0);
    fetch_on_thread(&x);
    cr_assert_eq(x.rc, 0);
    cr_assert_eq(idx_reader_end(x.r), 0);
    cr_assert_eq(x.next, 8);
    /* The record's bytes on disk change after it was read and checked. */
    th_msg_text(t, sizeof t, "q", 1, 3);
    flip_text(th_dir_a, t);
    if (cut_between) {
        /* A cut past it takes a new generation of the log. */
        cr_assert_eq(idx__log_truncate(e, idx_log_end(e) - 1), 0);
    }
    memset(rec, 0, sizeof *rec);
    second->o = x.o;
    second->rec = rec;
    cr_assert_eq(idx_reader_start(e, "q", 8, &second->r), 0);
    fetch_on_thread(second);
}

Test(index_reader, the_record_a_reader_ended_in_is_not_read_again_by_the_next)
{
    struct idx_env *e = filled(1 << 20, 4, 5);
    static struct rec rec;
    struct run x = {0};
    char t[96];
    two_answers(e, false, &x, &rec);
    cr_assert_eq(x.rc, 0, "%s", idx_reader_errmsg(x.r));
    cr_assert_eq(idx_reader_end(x.r), 0);
    cr_assert_eq(rec.n, 8);
    th_msg_text(t, sizeof t, "q", 1, 3);
    cr_expect_str_eq(rec.text[0], t, "offset 8 as read and checked before");
    idx_close(e);
}

Test(index_reader, a_held_record_is_not_used_after_a_cut)
{
    struct idx_env *e = filled(1 << 20, 4, 5);
    static struct rec rec;
    struct run x = {0};
    two_answers(e, true, &x, &rec);
    cr_assert_eq(x.rc, TERN_ECORRUPT, "read from disk again: the flip shows");
    cr_assert_eq(rec.n, 0);
    (void)idx_reader_end(x.r);
    idx_close(e);
}
