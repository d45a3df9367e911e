/* Unit tests of checkpoints written in the background (index/ckpt.c,
 * BACKGROUND): the file a worker writes while applies go on is the one an
 * inline write gives at the same position; a close before the worker ran
 * leaves the previous checkpoint as the newest and the next open rebuilds
 * and writes the missing one; a trim never deletes log a pending
 * checkpoint needs. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <idx.h>

#include "index_helpers.h"

TestSuite(index_ckpt_bg, .init = th_dirs_init, .fini = th_dirs_fini);

#define SEG 4096

static struct idx_env *open_env(const char *dir, bool background)
{
    struct idx_options o = {.dir = dir,
                            .segment_bytes = SEG,
                            .checkpoint_bytes = SEG,
                            .background_checkpoints = background};
    return th_open_opts(&o);
}

/* What the test does with the checkpoint jobs of a background env. */
enum mode {
    IN_THREAD,    /* each in a thread while the applies go on */
    LAST_PENDING, /* each at once, but the last one stays unwritten */
};

struct jobs
{
    enum mode mode;
    pthread_t thread;
    bool running;
    struct idx_ckpt_job *pending; /* taken, not ended */
    uint64_t pending_pos;
    int taken;
};

static void *run_job(void *arg)
{
    idx_ckpt_run(arg);
    return NULL;
}

static void end_pending(struct jobs *s)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    if (s->pending == NULL) {
        return;
    }
    if (s->running) {
        cr_assert_eq(pthread_join(s->thread, NULL), 0);
        s->running = false;
    } else {
        idx_ckpt_run(s->pending);
    }
    cr_assert_eq(idx_ckpt_end(s->pending, errmsg), 0, "%s", errmsg);
    s->pending = NULL;
}

/* After each apply of a background env (pos: the log end before it). */
static void after_apply(struct idx_env *e, struct jobs *s, uint64_t pos)
{
    struct idx_ckpt_job *j = idx_ckpt_take(e);
    if (j == NULL) {
        return;
    }
    cr_assert_null(idx_ckpt_take(e), "a job is handed out once");
    s->taken++;
    end_pending(s); /* the apply waited for it: it is complete */
    s->pending = j;
    s->pending_pos = pos;
    if (s->mode == IN_THREAD) {
        cr_assert_eq(pthread_create(&s->thread, NULL, run_job, j), 0);
        s->running = true;
    }
}

/* A queue that fills many segments and is deleted, then a queue with a
 * few messages and a group offset, then queues without messages: the
 * same entries 1.. on every env; jobs of a background env go to s. */
static uint64_t workload(struct idx_env *e, struct jobs *s, int empty_queues)
{
    struct tern_wbuf w;
    struct idx_result r[1];
    uint64_t i = 1;
    char name[32];
    for (int step = 0;; step++, i++) {
        uint64_t pos = idx_log_end(e);
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 1000 + i);
        if (step == 0) {
            idx_cmd_queue_create(&w, "old");
        } else if (step <= 600) {
            tern_wbuf_free(&w);
            (void)th_produce(e, i, "old", 7, (uint64_t)step, 3);
            goto applied;
        } else if (step == 601) {
            idx_cmd_queue_delete(&w, "old");
        } else if (step == 602) {
            idx_cmd_queue_create(&w, "keep");
        } else if (step <= 612) {
            tern_wbuf_free(&w);
            (void)th_produce(e, i, "keep", 9, (uint64_t)step - 602, 2);
            goto applied;
        } else if (step == 613) {
            idx_cmd_group_commit(&w, "keep", "g", 5);
        } else if (step < 614 + empty_queues) {
            (void)snprintf(name, sizeof name, "empty-%d", step);
            idx_cmd_queue_create(&w, name);
        } else {
            tern_wbuf_free(&w);
            break;
        }
        th_apply(e, i, &w, r, 1);
        cr_expect_eq(r[0].status, 0);
        tern_wbuf_free(&w);
    applied:
        if (s != NULL) {
            after_apply(e, s, pos);
        }
    }
    cr_assert_eq(idx_flush(e), 0);
    return i - 1;
}

static void expect_keep_same(struct idx_env *a, struct idx_env *b)
{
    struct th_msgs ma = {0}, mb = {0};
    cr_assert_eq(th_fetch_all(a, "keep", 7, 4096, &ma), 0);
    cr_assert_eq(th_fetch_all(b, "keep", 7, 4096, &mb), 0);
    cr_expect_eq(ma.n, 20);
    th_msgs_expect_eq(&ma, &mb);
    th_msgs_free(&ma);
    th_msgs_free(&mb);
    cr_expect_eq(idx_last_applied(a), idx_last_applied(b));
    uint64_t ga = 0, gb = 0;
    cr_expect_eq(idx_group_offset(a, "keep", "g", &ga), 0);
    cr_expect_eq(idx_group_offset(b, "keep", "g", &gb), 0);
    cr_expect_eq(gb, ga);
}

static bool ckpt_exists(const char *dir, uint64_t pos, const char *suffix)
{
    char path[4096];
    struct stat sb;
    (void)snprintf(path, sizeof path, "%s/log/%020llu.ckpt%s", dir,
                   (unsigned long long)pos, suffix);
    return stat(path, &sb) == 0;
}

static void snapshot_twice(struct idx_env *e)
{
    struct tern_wbuf w;
    for (int k = 0; k < 2; k++) {
        tern_wbuf_init(&w);
        cr_assert_eq(idx_snapshot(e, &w), 0, "%s", idx_errmsg(e));
        tern_wbuf_free(&w);
    }
}

Test(index_ckpt_bg, written_while_applying_equals_inline)
{
    struct idx_env *a = open_env(th_dir_a, false);
    struct idx_env *b = open_env(th_dir_b, true);
    struct jobs s = {.mode = IN_THREAD};
    (void)workload(a, NULL, 40);
    (void)workload(b, &s, 40);
    cr_expect_null(idx_ckpt_take(a), "an inline env leaves no jobs");
    end_pending(&s);
    cr_expect_geq(s.taken, 6);
    th_expect_same_checkpoints(th_dir_a, th_dir_b, 6);
    expect_keep_same(a, b);
    idx_close(a);
    idx_close(b);
}

/* A job nobody ran is written by the apply that reaches the next
 * checkpoint position (at most one job at a time). */
Test(index_ckpt_bg, next_position_writes_an_unstarted_job)
{
    struct idx_env *a = open_env(th_dir_a, false);
    struct idx_env *b = open_env(th_dir_b, true);
    (void)workload(a, NULL, 40);
    (void)workload(b, NULL, 40); /* no job is taken */
    cr_assert_null(idx_ckpt_take(a));
    /* the last one: taken and ended without a worker, written there */
    struct idx_ckpt_job *j = idx_ckpt_take(b);
    char errmsg[TERN_ERRMSG_SIZE] = "";
    cr_assert_not_null(j);
    cr_assert_eq(idx_ckpt_end(j, errmsg), 0, "%s", errmsg);
    th_expect_same_checkpoints(th_dir_a, th_dir_b, 6);
    expect_keep_same(a, b);
    idx_close(a);
    idx_close(b);
}

Test(index_ckpt_bg, close_before_the_write_keeps_the_previous_one)
{
    struct idx_env *a = open_env(th_dir_a, false);
    struct idx_env *b = open_env(th_dir_b, true);
    struct jobs s = {.mode = LAST_PENDING};
    char errmsg[TERN_ERRMSG_SIZE] = "";
    (void)workload(a, NULL, 40);
    (void)workload(b, &s, 40);
    cr_assert_not_null(s.pending);
    uint64_t p = s.pending_pos;
    cr_expect(ckpt_exists(th_dir_a, p, ""));
    cr_expect(!ckpt_exists(th_dir_b, p, ""), "not written yet");
    /* what a crash in the middle of the write leaves */
    char tmp[4096];
    (void)snprintf(tmp, sizeof tmp, "%s/log/%020llu.ckpt.tmp", th_dir_b,
                   (unsigned long long)p);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    cr_assert_geq(fputs("torn", f), 0);
    fclose(f);

    idx_close(b);
    cr_expect_eq(idx_ckpt_end(s.pending, errmsg), 0, "after close: freed");
    s.pending = NULL;
    cr_expect(!ckpt_exists(th_dir_b, p, ""), "the closed env never wrote it");

    b = open_env(th_dir_b, true);
    cr_expect(!ckpt_exists(th_dir_b, p, ".tmp"), "the torn file is removed");
    cr_expect(ckpt_exists(th_dir_b, p, ""), "the rebuild wrote it");
    th_expect_same_checkpoints(th_dir_a, th_dir_b, 6);
    expect_keep_same(a, b);
    idx_close(a);
    idx_close(b);
}

/* Everything before the empty queues is unneeded once "keep" is deleted:
 * a trim goes to the newest checkpoint, which is not the pending one. */
Test(index_ckpt_bg, trim_never_passes_a_pending_checkpoint)
{
    struct idx_env *b = open_env(th_dir_b, true);
    struct jobs s = {.mode = LAST_PENDING};
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct tern_wbuf w;
    struct idx_result r[1];
    uint64_t i = workload(b, &s, 0) + 1;
    uint64_t pos = idx_log_end(b);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000 + i);
    idx_cmd_queue_delete(&w, "keep");
    th_apply(b, i++, &w, r, 1);
    tern_wbuf_free(&w);
    cr_expect_eq(r[0].status, 0);
    after_apply(b, &s, pos);
    /* records that need nothing, until a checkpoint is pending past all
     * the queues' data */
    int made = s.taken;
    for (int k = 0; k < 400 && s.taken == made; k++, i++) {
        char name[32];
        pos = idx_log_end(b);
        (void)snprintf(name, sizeof name, "empty-%d", k);
        th_create(b, i, name);
        after_apply(b, &s, pos);
    }
    cr_assert_gt(s.taken, made, "a checkpoint position was reached");
    cr_assert_not_null(s.pending);
    uint64_t p = s.pending_pos;
    cr_assert_eq(idx_flush(b), 0);

    snapshot_twice(b);
    cr_expect_gt(idx_log_start(b), 0, "the head was trimmed");
    cr_expect_lt(idx_log_start(b), p, "not up to the pending checkpoint");
    cr_expect(ckpt_exists(th_dir_b, idx_log_start(b), ""));

    idx_ckpt_run(s.pending);
    cr_assert_eq(idx_ckpt_end(s.pending, errmsg), 0, "%s", errmsg);
    s.pending = NULL;
    snapshot_twice(b);
    cr_expect_eq(idx_log_start(b), p, "trimmed to it once it is complete");

    /* and the trimmed log reopens from it */
    uint64_t applied = idx_last_applied(b);
    idx_close(b);
    b = open_env(th_dir_b, true);
    cr_expect_eq(idx_log_start(b), p);
    cr_expect_eq(idx_last_applied(b), applied);
    idx_close(b);
}
