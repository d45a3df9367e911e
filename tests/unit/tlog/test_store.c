/*
 * tests/unit/tlog/test_store.c: the raft log store over real files in a
 * temporary directory (tlog/store.c): appends durable and acknowledged in
 * order and loaded back byte for byte (by AIO and by the thread pool),
 * segments rolled, a truncate superseding older entries at the next load
 * (and the state before it when nothing followed it), a torn tail cut at
 * open, damage refused, segments forgotten, a close with appends queued,
 * a failed write failing its appends and every later one in order, a
 * full disk when a segment is prepared.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../immutable.h"
#include "../rm_tree.h"
#include "tlog.h"

static uv_loop_t loop;
static char dir[] = "/tmp/tern-tlog-XXXXXX";

static void setup(void)
{
    strcpy(dir, "/tmp/tern-tlog-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(uv_loop_init(&loop), 0);
}

static void teardown(void)
{
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0, "every handle closed");
    test_rm_tree(dir);
}

TestSuite(tlog_store, .init = setup, .fini = teardown, .timeout = 60);

/* Callbacks seen: their order and statuses. */
struct acks
{
    unsigned calls; /* appends made: their ids */
    unsigned n;
    int status[4096];
    unsigned order[4096];
};

struct ack_arg
{
    struct acks *a;
    unsigned id;
};

static void ack_cb(void *arg, int status)
{
    struct ack_arg *x = arg;
    struct acks *a = x->a;
    a->order[a->n] = x->id;
    a->status[a->n] = status;
    a->n++;
    free(x);
}

static void spin_until(const unsigned *n, unsigned want)
{
    for (int k = 0; k < 200000 && *n < want; k++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    cr_assert_geq(*n, want, "callbacks: %u of %u", *n, want);
}

static struct tlog_config cfg(uint64_t segment, uint32_t window, bool no_aio)
{
    struct tlog_config c = {0};
    c.dir = dir;
    c.segment_bytes = segment;
    c.window = window;
    c.no_aio = no_aio;
    return c;
}

static struct tlog_store *open_store(const struct tlog_config *c,
                                     struct tlog_loaded *l)
{
    struct tlog_store *s = NULL;
    char em[TERN_ERRMSG_SIZE] = "";
    int rv = tlog_open(&loop, c, &s, l, em);
    cr_assert_eq(rv, 0, "%s", em);
    return s;
}

/* Open the store of c, empty, its appends starting at first; a's counts
 * cleared. */
static struct tlog_store *empty_store(const struct tlog_config *c,
                                      struct acks *a,
                                      uint64_t first)
{
    struct tlog_loaded l;
    struct tlog_store *s = open_store(c, &l);
    cr_assert_eq(l.n, 0);
    tlog_loaded_free(&l);
    memset(a, 0, sizeof *a);
    cr_assert_eq(tlog_start_at(s, first, 0), 0);
    return s;
}

static void closed_cb(void *arg)
{
    *(bool *)arg = true;
}

static void close_store(struct tlog_store *s)
{
    bool closed = false;
    tlog_close(s, closed_cb, &closed);
    for (int k = 0; k < 100000 && !closed; k++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    cr_assert(closed);
}

/* Entry index's payload: len bytes of a pattern (gen picks another). */
static uint32_t plen(uint64_t index)
{
    static const uint32_t lens[] = {0, 1, 7, 8, 100, 1000, 4000, 1024};
    return lens[index % 8];
}

static void fill(uint8_t *p, uint64_t index, uint32_t len, unsigned gen)
{
    for (uint32_t i = 0; i < len; i++) {
        p[i] = (uint8_t)(index * 13 + i * 7 + gen);
    }
}

/* Append [from, to] in calls of up to per entries, id = first index. */
static void append_range(struct tlog_store *s,
                         struct acks *a,
                         uint64_t from,
                         uint64_t to,
                         unsigned per,
                         unsigned gen)
{
    static uint8_t bufs[64][4096];
    struct tlog_entry e[64];
    cr_assert_leq(per, 64);
    for (uint64_t i = from; i <= to;) {
        unsigned n = 0;
        struct ack_arg *x = malloc(sizeof *x);
        for (; n < per && i <= to; n++, i++) {
            e[n].type = i % 5 == 0 ? TLOG_REC_CHANGE : TLOG_REC_COMMAND;
            e[n].term = 1 + i / 50;
            e[n].len = plen(i);
            fill(bufs[n], i, e[n].len, gen);
            e[n].payload = bufs[n];
        }
        x->a = a;
        x->id = ++a->calls;
        cr_assert_eq(tlog_append(s, e, n, ack_cb, x), 0);
    }
}

/* c's store, empty, then holding entries 1..400 appended 4 at a time and
 * acknowledged (several segments when they are of 64 KiB); a cleared. */
static struct tlog_store *store_of_400(const struct tlog_config *c,
                                       struct acks *a)
{
    struct tlog_store *s = empty_store(c, a, 1);
    append_range(s, a, 1, 400, 4, 0);
    spin_until(&a->n, 100);
    return s;
}

/* The loaded entries are [first, last] of generation gen, except those
 * from gen_from on, of generation gen2. */
static void check_loaded(const struct tlog_loaded *l,
                         uint64_t first,
                         uint64_t last,
                         unsigned gen,
                         uint64_t gen_from,
                         unsigned gen2)
{
    uint8_t want[4096];
    cr_assert_eq(l->first_index, first);
    cr_assert_eq(l->n, last - first + 1);
    cr_assert_eq(l->next_index, last + 1);
    for (uint64_t i = first; i <= last; i++) {
        const struct tlog_entry *e = &l->entries[i - first];
        cr_assert_eq(e->len, plen(i), "index %lu", (unsigned long)i);
        cr_assert_eq(e->term, 1 + i / 50);
        cr_assert_eq(e->type, i % 5 == 0 ? TLOG_REC_CHANGE : TLOG_REC_COMMAND);
        fill(want, i, e->len, i >= gen_from ? gen2 : gen);
        cr_assert_eq(memcmp(e->payload, want, e->len), 0, "index %lu",
                     (unsigned long)i);
    }
}

/* c's store loads check_loaded's entries (then is closed). */
static void expect_loads(const struct tlog_config *c,
                         uint64_t first,
                         uint64_t last,
                         unsigned gen,
                         uint64_t gen_from,
                         unsigned gen2)
{
    struct tlog_loaded l;
    struct tlog_store *s = open_store(c, &l);
    check_loaded(&l, first, last, gen, gen_from, gen2);
    tlog_loaded_free(&l);
    close_store(s);
}

/* The stream position after [first, last]: commands only. */
static uint64_t pos_after(uint64_t pos0, uint64_t first, uint64_t last)
{
    uint64_t pos = pos0;
    for (uint64_t i = first; i <= last; i++) {
        if (i % 5 != 0) {
            pos += TLOG_STREAM_RECORD_HEADER + plen(i);
        }
    }
    return pos;
}

static void check_in_order(const struct acks *a, unsigned n)
{
    cr_assert_eq(a->n, n);
    for (unsigned k = 0; k < n; k++) {
        cr_assert_eq(a->status[k], 0, "ack %u", k);
        if (k > 0) {
            cr_assert_gt(a->order[k], a->order[k - 1], "in order");
        }
    }
}

static void round_trip(bool no_aio)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 0, no_aio);
    struct tlog_loaded l;
    struct tlog_stats st;
    struct tlog_store *s = open_store(&c, &l);
    memset(&a, 0, sizeof a);
    cr_assert_eq(l.n, 0);
    cr_assert_eq(l.next_index, 0);
    tlog_loaded_free(&l);
    cr_assert_eq(tlog_append(s, NULL, 0, NULL, NULL), TERN_EINVAL,
                 "not started");
    cr_assert_eq(tlog_start_at(s, 1, 500), 0);
    append_range(s, &a, 1, 300, 7, 0); /* 43 calls, most while in flight */
    cr_expect_eq(a.n, 0, "never inside append");
    spin_until(&a.n, 43);
    check_in_order(&a, 43);
    tlog_get_stats(s, &st);
    cr_expect_eq(st.aio, !no_aio);
    cr_expect_gt(st.writes, 0);
    cr_expect_lt(st.writes, 43, "appends joined writes");
    cr_expect_eq(tlog_next_index(s), 301);
    cr_expect_eq(tlog_next_pos(s), pos_after(500, 1, 300));
    close_store(s);

    s = open_store(&c, &l);
    check_loaded(&l, 1, 300, 0, 1000, 0);
    cr_expect_eq(l.next_pos, pos_after(500, 1, 300));
    cr_expect_eq(l.torn, 0);
    tlog_loaded_free(&l);
    cr_expect_eq(tlog_start_at(s, 1, 0), TERN_EINVAL, "loaded: started");
    /* Appends go on after a load (in a new segment). */
    memset(&a, 0, sizeof a);
    append_range(s, &a, 301, 310, 3, 0);
    spin_until(&a.n, 4);
    close_store(s);
    expect_loads(&c, 1, 310, 0, 1000, 0);
}

Test(tlog_store, appends_load_back_byte_for_byte_by_aio)
{
    round_trip(false);
}

Test(tlog_store, appends_load_back_byte_for_byte_by_the_thread_pool)
{
    round_trip(true);
}

static unsigned count_segments(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned n = 0;
    cr_assert_not_null(d);
    while ((e = readdir(d)) != NULL) {
        n += strncmp(e->d_name, "seg-", 4) == 0;
    }
    closedir(d);
    return n;
}

Test(tlog_store, segments_roll_and_load_in_order)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_stats st;
    struct tlog_store *s = empty_store(&c, &a, 10);
    append_range(s, &a, 10, 409, 4, 0);
    spin_until(&a.n, 100);
    check_in_order(&a, 100);
    tlog_get_stats(s, &st);
    cr_expect_geq(st.segments, 4, "rolled: %lu", (unsigned long)st.segments);
    close_store(s);
    cr_expect_geq(count_segments(), 4);
    expect_loads(&c, 10, 409, 0, 1000, 0);
}

Test(tlog_store, a_larger_record_gets_a_segment_of_its_own_size)
{
    static struct acks a;
    static uint8_t big[200000];
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_entry e = {TLOG_REC_COMMAND, 1, big, sizeof big};
    struct ack_arg *x = malloc(sizeof *x);
    struct tlog_store *s = open_store(&c, &l);
    tlog_loaded_free(&l);
    memset(&a, 0, sizeof a);
    memset(big, 0xab, sizeof big);
    cr_assert_eq(tlog_start_at(s, 1, 0), 0);
    x->a = &a;
    x->id = 1;
    cr_assert_eq(tlog_append(s, &e, 1, ack_cb, x), 0);
    spin_until(&a.n, 1);
    cr_assert_eq(a.status[0], 0);
    close_store(s);
    s = open_store(&c, &l);
    cr_assert_eq(l.n, 1);
    cr_assert_eq(l.entries[0].len, sizeof big);
    cr_assert_eq(memcmp(l.entries[0].payload, big, sizeof big), 0);
    tlog_loaded_free(&l);
    close_store(s);
}

Test(tlog_store, truncate_supersedes_the_older_entries_at_the_next_load)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 0, false);
    struct tlog_loaded l;
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 20, 4, 0);
    /* Some of them still queued: the truncate comes after them. */
    cr_assert_eq(tlog_truncate(s, 15), 0);
    cr_expect_eq(tlog_next_index(s), 15);
    cr_expect_eq(tlog_next_pos(s), pos_after(0, 1, 14));
    cr_expect_eq(tlog_truncate(s, 15), TERN_EINVAL, "not below next");
    append_range(s, &a, 15, 17, 2, 9); /* another generation */
    spin_until(&a.n, 7);
    check_in_order(&a, 7);
    close_store(s);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 17, 0, 15, 9);
    cr_expect_eq(l.next_pos, pos_after(0, 1, 17));
    tlog_loaded_free(&l);
    /* Again, below what the last load kept, after a reopen. */
    memset(&a, 0, sizeof a);
    cr_assert_eq(tlog_truncate(s, 3), 0);
    append_range(s, &a, 3, 6, 4, 5);
    spin_until(&a.n, 1);
    close_store(s);
    expect_loads(&c, 1, 6, 0, 3, 5);
}

Test(tlog_store, a_truncate_nothing_followed_leaves_the_state_before_it)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 0, false);
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 20, 5, 0);
    spin_until(&a.n, 4);
    cr_assert_eq(tlog_truncate(s, 15), 0);
    close_store(s); /* a crash before the append that follows */
    expect_loads(&c, 1, 20, 0, 1000, 0);
}

static off_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return st.st_size;
}

/* The offset just past the last record of a segment image. */
static size_t records_end(const char *path);

/* The newest seg- file that holds records. */
static void newest_segment(char *path, size_t n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char best[256] = "";
    while ((e = readdir(d)) != NULL) {
        char p[600];
        if (strncmp(e->d_name, "seg-", 4) != 0 ||
            strcmp(e->d_name, best) <= 0) {
            continue;
        }
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (records_end(p) > TLOG_SEG_HEADER_SIZE) {
            snprintf(best, sizeof best, "%s", e->d_name);
        }
    }
    closedir(d);
    cr_assert_neq(best[0], '\0');
    snprintf(path, n, "%s/%s", dir, best);
}

static size_t records_end(const char *path)
{
    FILE *f = fopen(path, "rb");
    size_t len = (size_t)file_size(path);
    uint8_t *img = malloc(len);
    struct tlog_scan sc;
    cr_assert_eq(fread(img, 1, len, f), len);
    fclose(f);
    cr_assert_eq(tlog_seg_scan(img, len, 0, 0, 0, NULL, NULL, &sc, NULL), 0);
    free(img);
    return sc.end;
}

/* Copy n bytes at from to at in the file path. */
static void copy_in_file(const char *path, long from, long at, size_t n)
{
    uint8_t buf[4096];
    FILE *f = fopen(path, "r+b");
    cr_assert(f != NULL && n <= sizeof buf);
    cr_assert_eq(fseek(f, from, SEEK_SET), 0);
    cr_assert_eq(fread(buf, 1, n, f), n);
    cr_assert_eq(fseek(f, at, SEEK_SET), 0);
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
}

/* A torn tail of a version 2 segment is found, its bytes kept (the next
 * segment's link names where its records end), and settled by that link
 * once the next segment is written. */
Test(tlog_store, a_torn_tail_is_found_at_open_and_settled_by_the_next_link)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 0, false);
    struct tlog_loaded l;
    char path[300];
    size_t end;
    off_t size;
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 30, 10, 0);
    spin_until(&a.n, 3);
    close_store(s);
    newest_segment(path, sizeof path);
    end = records_end(path);
    size = file_size(path);
    /* What a crash leaves of a write in flight: some of its sectors (here
     * records of this segment, as the write's own would be) past the
     * end. */
    copy_in_file(path, TLOG_SEG_HEADER_SIZE, (long)end + 512, 512);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 30, 0, 1000, 0);
    cr_expect_eq(l.torn, 1);
    tlog_loaded_free(&l);
    cr_expect_eq(file_size(path), size, "nothing cut");
    memset(&a, 0, sizeof a);
    append_range(s, &a, 31, 35, 5, 0);
    spin_until(&a.n, 1);
    close_store(s);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 35, 0, 1000, 0);
    cr_expect_eq(l.torn, 0, "settled now that it is not the last");
    tlog_loaded_free(&l);
    close_store(s);
}

Test(tlog_store, damage_in_acknowledged_records_is_refused)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 0, false);
    struct tlog_loaded l;
    char path[300], em[TERN_ERRMSG_SIZE] = "";
    struct tlog_store *s = open_store(&c, &l);
    FILE *f;
    int ch;
    tlog_loaded_free(&l);
    memset(&a, 0, sizeof a);
    cr_assert_eq(tlog_start_at(s, 1, 0), 0);
    for (unsigned k = 0; k < 20; k++) { /* 20 writes: one call at a time */
        append_range(s, &a, 1 + 10 * k, 10 + 10 * k, 10, 0);
        spin_until(&a.n, k + 1);
    }
    close_store(s);
    newest_segment(path, sizeof path);
    /* A byte of the first record's payload (entry 1: 1 byte). */
    f = fopen(path, "r+b");
    cr_assert_eq(
        fseek(f, TLOG_SEG_HEADER_SIZE + TLOG_REC_HEADER_SIZE, SEEK_SET), 0);
    ch = fgetc(f);
    cr_assert_eq(
        fseek(f, TLOG_SEG_HEADER_SIZE + TLOG_REC_HEADER_SIZE, SEEK_SET), 0);
    fputc(ch ^ 0x55, f);
    fclose(f);
    s = NULL;
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT);
    cr_expect_not_null(strstr(em, "damaged at offset 4096"), "%s", em);
    cr_expect_not_null(strstr(em, "seg-"), "names the file: %s", em);
    cr_expect_eq(access(path, F_OK), 0, "the file stays as it was");
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT, "again");
}

Test(tlog_store, damage_at_a_segment_s_start_is_refused_and_nothing_goes)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    char path[300], em[TERN_ERRMSG_SIZE] = "";
    struct tlog_store *s = open_store(&c, &l);
    unsigned before;
    FILE *f;
    tlog_loaded_free(&l);
    memset(&a, 0, sizeof a);
    cr_assert_eq(tlog_start_at(s, 1, 0), 0);
    append_range(s, &a, 1, 400, 4, 0);
    spin_until(&a.n, 100);
    close_store(s);
    before = count_segments();
    cr_assert_geq(before, 3);
    snprintf(path, sizeof path, "%s/seg-%020u", dir, 1u);
    /* The first record's index. */
    f = fopen(path, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, TLOG_SEG_HEADER_SIZE + 16, SEEK_SET), 0);
    fputc(0x77, f);
    fclose(f);
    s = NULL;
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT, "%s", em);
    cr_expect_eq(count_segments(), before, "no file deleted or cut");
}

Test(tlog_store, forget_deletes_whole_segments_below)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_stats st;
    unsigned before;
    struct tlog_store *s = store_of_400(&c, &a);
    before = count_segments();
    tlog_forget(s, 300);
    for (int k = 0; k < 2000; k++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        tlog_get_stats(s, &st);
        if (st.deleted > 0 && count_segments() < before) {
            break;
        }
        usleep(1000);
    }
    tlog_get_stats(s, &st);
    cr_expect_gt(st.deleted, 0);
    cr_expect_lt(count_segments(), before, "files gone");
    close_store(s);
    s = open_store(&c, &l);
    cr_expect_gt(l.first_index, 1);
    cr_expect_leq(l.first_index, 300, "nothing at or above 300 went");
    check_loaded(&l, l.first_index, 400, 0, 1000, 0);
    tlog_loaded_free(&l);
    close_store(s);
}

Test(tlog_store, close_cancels_queued_appends_in_order)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 4096, false);
    bool closed = false;
    struct tlog_store *s = empty_store(&c, &a, 1);
    /* A first write, so that the segment is ready and the next append
     * goes out at once: a write is in flight at the close. */
    append_range(s, &a, 1, 2, 2, 0);
    spin_until(&a.n, 1);
    append_range(s, &a, 3, 202, 2, 0); /* 100 calls, writes of 4 KiB */
    tlog_close(s, closed_cb, &closed);
    cr_expect_eq(tlog_append(s, NULL, 0, NULL, NULL), TERN_ESHUTDOWN);
    for (int k = 0; k < 100000 && !closed; k++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    cr_assert(closed);
    cr_assert_eq(a.n, 101, "every callback, before the close's");
    cr_assert_eq(a.status[1], 0, "the write in flight completed");
    bool canceled = false;
    for (unsigned k = 0; k < a.n; k++) {
        if (k > 0) {
            cr_assert_gt(a.order[k], a.order[k - 1], "in order");
        }
        if (a.status[k] != 0) {
            cr_assert_eq(a.status[k], -ECANCELED);
            canceled = true;
        } else {
            cr_assert(!canceled, "no success after a cancel");
        }
    }
    cr_expect(canceled);
}

Test(tlog_store, a_failed_write_fails_its_appends_and_every_later_one)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 4096, false);
    char path[300];
    int err;
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 4, 4, 0);
    spin_until(&a.n, 1);
    cr_assert_eq(a.status[0], 0);
    newest_segment(path, sizeof path);
    err = test_set_immutable(path, true);
    if (err != 0) {
        close_store(s);
        cr_skip_test("no immutable flag here (%s)", strerror(err));
    }
    /* The first goes out at once and fails; the rest wait behind it. */
    append_range(s, &a, 5, 16, 4, 0);
    spin_until(&a.n, 4);
    cr_expect_eq(test_set_immutable(path, false), 0);
    for (unsigned k = 1; k < 4; k++) {
        cr_expect_neq(a.status[k], 0, "append %u failed", k);
        cr_expect_gt(a.order[k], a.order[k - 1], "in order");
    }
    cr_expect_eq(a.status[1], -EPERM, "the write's own error");
    cr_expect_neq(tlog_append(s, NULL, 0, NULL, NULL), 0, "refused from now");
    close_store(s);
    expect_loads(&c, 1, 4, 0, 1000, 0);
}

Test(tlog_store, a_full_disk_when_a_segment_is_prepared_fails_the_appends)
{
    static struct acks a;
    char mnt[300];
    struct tlog_config c = cfg(0, 0, false);
    struct tlog_loaded l;
    struct tlog_store *s;
    cr_assert_lt((size_t)snprintf(mnt, sizeof mnt, "%s/mnt", dir), sizeof mnt);
    cr_assert_eq(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        cr_skip_test("cannot mount a 1 MiB tmpfs (%s): ENOSPC not tested",
                     strerror(errno));
    }
    c.dir = mnt; /* 8 MiB segments do not fit */
    s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 8, 4, 0);
    cr_expect_eq(a.n, 0, "never inside append");
    spin_until(&a.n, 2);
    cr_expect_eq(a.status[0], -ENOSPC);
    cr_expect_eq(a.status[1], -ENOSPC);
    cr_expect_eq(tlog_append(s, NULL, 0, NULL, NULL), -ENOSPC,
                 "refused from now");
    close_store(s);
    s = open_store(&c, &l);
    cr_expect_eq(l.n, 0, "nothing half written loads");
    tlog_loaded_free(&l);
    close_store(s);
    cr_expect_eq(umount(mnt), 0, "umount: %s", strerror(errno));
}

/* ---- stage 2: recycled segments, links, version 1 directories ---------- */

static unsigned count_prefix(const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned n = 0;
    cr_assert_not_null(d);
    while ((e = readdir(d)) != NULL) {
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    }
    closedir(d);
    return n;
}

/* Forget below index and run the loop until the deletions are done (one
 * or more, then 50 ms with no more). */
static void forget_and_wait(struct tlog_store *s, uint64_t index)
{
    struct tlog_stats st, before;
    unsigned quiet = 0;
    tlog_get_stats(s, &before);
    tlog_forget(s, index);
    for (int k = 0; k < 5000 && quiet < 50; k++) {
        uint64_t d;
        tlog_get_stats(s, &st);
        d = st.deleted;
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
        tlog_get_stats(s, &st);
        quiet = st.deleted > before.deleted && st.deleted == d ? quiet + 1 : 0;
    }
    cr_assert_gt(st.deleted, before.deleted, "nothing forgotten below %lu",
                 (unsigned long)index);
}

Test(tlog_store, forgotten_segments_are_recycled_from_a_bounded_free_list)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_stats st;
    struct tlog_store *s = store_of_400(&c, &a);
    cr_assert_geq(count_segments(), 6);
    forget_and_wait(s, 350);
    tlog_get_stats(s, &st);
    cr_expect_gt(st.freed, 0);
    cr_expect_eq(st.free, st.freed, "none reused yet");
    cr_expect_leq(st.free, 4, "bounded");
    cr_expect_gt(st.deleted, st.freed, "the rest deleted: %lu %lu",
                 (unsigned long)st.deleted, (unsigned long)st.freed);
    cr_expect_eq(count_prefix("free-"), st.free);
    /* New segments come from the free list. */
    memset(&a, 0, sizeof a);
    append_range(s, &a, 401, 800, 4, 0);
    spin_until(&a.n, 100);
    check_in_order(&a, 100);
    tlog_get_stats(s, &st);
    cr_expect_gt(st.recycled, 0);
    cr_expect_lt(st.free, st.freed, "taken from it");
    close_store(s);
    /* Recycled files load as any: their older bytes are not theirs. */
    s = open_store(&c, &l);
    cr_expect_leq(l.first_index, 350);
    check_loaded(&l, l.first_index, 800, 0, 1000, 0);
    cr_expect_eq(l.torn, 0);
    tlog_loaded_free(&l);
    tlog_get_stats(s, &st);
    cr_expect_leq(count_prefix("free-"), 4);
    cr_expect_eq(count_prefix("free-"), st.free, "the free list reloaded");
    close_store(s);
}

Test(tlog_store, a_free_list_of_one_keeps_one_file)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_stats st;
    struct tlog_store *s;
    c.free_max = 1;
    s = store_of_400(&c, &a);
    forget_and_wait(s, 350);
    tlog_get_stats(s, &st);
    cr_expect_eq(st.freed, 1);
    cr_expect_eq(count_prefix("free-"), 1);
    close_store(s);
}

/* The last write of a segment that is not the last one never reached the
 * disk (lost: the file holds what was there before): the next segment's
 * link says where its records ended, and the load refuses. */
Test(tlog_store, a_lost_write_before_a_link_is_refused)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    char path[300], em[TERN_ERRMSG_SIZE] = "";
    static uint8_t zeros[4096];
    size_t end;
    FILE *f;
    struct tlog_store *s = store_of_400(&c, &a);
    close_store(s);
    snprintf(path, sizeof path, "%s/seg-%020u", dir, 2u);
    end = records_end(path);
    cr_assert_gt(end, TLOG_SEG_HEADER_SIZE + sizeof zeros);
    f = fopen(path, "r+b");
    cr_assert_eq(fseek(f, (long)(end - sizeof zeros), SEEK_SET), 0);
    cr_assert_eq(fwrite(zeros, 1, sizeof zeros, f), sizeof zeros);
    fclose(f);
    s = NULL;
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT);
    cr_expect_not_null(strstr(em, "was written after it ended at"), "%s", em);
    cr_expect_not_null(strstr(em, "seg-00000000000000000002"), "%s", em);
}

/* A link naming a segment that holds no records: that segment's records
 * were lost. */
Test(tlog_store, a_link_to_a_segment_without_records_is_refused)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    char path[300], em[TERN_ERRMSG_SIZE] = "";
    static uint8_t zeros[60 * 1024];
    FILE *f;
    struct tlog_store *s = store_of_400(&c, &a);
    close_store(s);
    snprintf(path, sizeof path, "%s/seg-%020u", dir, 2u);
    f = fopen(path, "r+b");
    cr_assert_eq(fseek(f, TLOG_SEG_HEADER_SIZE, SEEK_SET), 0);
    cr_assert_eq(fwrite(zeros, 1, sizeof zeros, f), sizeof zeros);
    fclose(f);
    s = NULL;
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT);
    cr_expect_not_null(strstr(em, "which holds no records"), "%s", em);
}

/* The spare's first write torn (some of it landed, its link did not): it
 * holds nothing acknowledged, is recycled, and the tear is reported. */
Test(tlog_store, a_torn_first_write_of_a_segment_is_dropped_and_reported)
{
    static struct acks a;
    struct tlog_config c = cfg(0, 0, false);
    struct tlog_loaded l;
    struct tlog_stats st;
    char path[300];
    unsigned long long spare = 0;
    uint8_t rec[tlog_rec_size(8)];
    uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct tlog_rec r = {TLOG_REC_COMMAND, 1, 0, 31, 1, 0, 8, payload};
    DIR *d;
    struct dirent *e;
    FILE *f;
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 30, 10, 0);
    spin_until(&a.n, 3);
    /* The spare is prepared once the first write went out. */
    for (int k = 0; k < 2000 && count_segments() < 2; k++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    close_store(s);
    d = opendir(dir);
    while ((e = readdir(d)) != NULL) {
        unsigned long long q;
        if (sscanf(e->d_name, "seg-%llu", &q) == 1 && q > spare) {
            spare = q;
        }
    }
    closedir(d);
    cr_assert_geq(spare, 2, "a spare was prepared");
    r.seq = spare;
    tlog_rec_encode(rec, &r);
    snprintf(path, sizeof path, "%s/seg-%020llu", dir, spare);
    f = fopen(path, "r+b");
    cr_assert_eq(fseek(f, TLOG_SEG_HEADER_SIZE + 512, SEEK_SET), 0);
    cr_assert_eq(fwrite(rec, 1, sizeof rec, f), sizeof rec);
    fclose(f);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 30, 0, 1000, 0);
    cr_expect_eq(l.torn, 1);
    tlog_loaded_free(&l);
    tlog_get_stats(s, &st);
    cr_expect_eq(st.free, 1, "recycled");
    cr_expect_eq(access(path, F_OK), -1, "not kept as the spare");
    memset(&a, 0, sizeof a);
    append_range(s, &a, 31, 40, 10, 0);
    spin_until(&a.n, 1);
    close_store(s);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 40, 0, 1000, 0);
    cr_expect_eq(l.torn, 0);
    tlog_loaded_free(&l);
    close_store(s);
}

/* A version 1 segment (stage 1: zeroed, no link) of entries [first,
 * last] (append_range's, generation 0) in writes of 5, size bytes; with
 * garbage after its records if torn. */
static void write_v1(uint64_t seq,
                     uint64_t first,
                     uint64_t last,
                     size_t size,
                     bool torn)
{
    struct tlog_seg_header h = {seq, 4096, 1, TLOG_SEG_VERSION_ZEROED};
    uint8_t *img = calloc(1, size);
    uint8_t payload[4096];
    size_t off = TLOG_SEG_HEADER_SIZE;
    uint64_t pos = pos_after(0, 1, first - 1);
    uint16_t w = 1;
    char path[300];
    FILE *f;
    cr_assert_not_null(img);
    tlog_seg_header_encode(img, &h);
    for (uint64_t i = first; i <= last && first <= last; i++) {
        struct tlog_rec r = {0};
        r.type = i % 5 == 0 ? TLOG_REC_CHANGE : TLOG_REC_COMMAND;
        r.write = w;
        r.seq = seq;
        r.index = i;
        r.term = 1 + i / 50;
        r.pos = pos;
        r.len = plen(i);
        fill(payload, i, r.len, 0);
        r.payload = payload;
        tlog_rec_encode(img + off, &r);
        off += tlog_rec_size(r.len);
        pos = tlog_rec_pos_after(&r);
        if ((i - first) % 5 == 4 || i == last) {
            size_t pad = tlog_pad_size(off, 4096);
            tlog_pad_encode(img + off, pad, seq, w++, pos);
            off += pad;
        }
    }
    if (torn) {
        for (size_t i = 0; i < 700; i++) {
            img[off + 100 + i] = (uint8_t)(i * 31 + 7);
        }
    }
    snprintf(path, sizeof path, "%s/seg-%020llu", dir, (unsigned long long)seq);
    f = fopen(path, "wb");
    cr_assert_eq(fwrite(img, 1, size, f), size);
    fclose(f);
    free(img);
}

/* A directory of stage 1 (version 1 segments) loads, its zeroed spare is
 * recycled rather than written (its header says no link), and appends go
 * on in linked segments. */
Test(tlog_store, a_version_1_directory_loads_and_goes_on)
{
    static struct acks a;
    struct tlog_config c = cfg(1 << 20, 0, false);
    struct tlog_loaded l;
    struct tlog_stats st;
    struct tlog_store *s;
    write_v1(1, 1, 20, 1 << 20, false);
    write_v1(2, 21, 42, 1 << 20, false);
    write_v1(3, 1, 0, 1 << 20, false); /* the spare */
    s = open_store(&c, &l);
    check_loaded(&l, 1, 42, 0, 1000, 0);
    cr_expect_eq(l.torn, 0);
    tlog_loaded_free(&l);
    tlog_get_stats(s, &st);
    cr_expect_eq(st.free, 1, "the version 1 spare recycled");
    memset(&a, 0, sizeof a);
    append_range(s, &a, 43, 60, 6, 0);
    spin_until(&a.n, 3);
    check_in_order(&a, 3);
    close_store(s);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 60, 0, 1000, 0);
    cr_expect_eq(l.torn, 0);
    tlog_loaded_free(&l);
    close_store(s);
}

/* A torn version 1 segment is cut at open as stage 1 did (it has no link
 * after it to settle it otherwise). */
Test(tlog_store, a_torn_version_1_segment_is_cut)
{
    static struct acks a;
    struct tlog_config c = cfg(1 << 20, 0, false);
    struct tlog_loaded l;
    char path[300];
    size_t end;
    struct tlog_store *s;
    write_v1(1, 1, 20, 1 << 20, true);
    snprintf(path, sizeof path, "%s/seg-%020u", dir, 1u);
    end = records_end(path);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 20, 0, 1000, 0);
    cr_expect_eq(l.torn, 1);
    tlog_loaded_free(&l);
    cr_expect_eq((size_t)file_size(path), end, "shortened to its records");
    memset(&a, 0, sizeof a);
    append_range(s, &a, 21, 30, 5, 0);
    spin_until(&a.n, 2);
    close_store(s);
    s = open_store(&c, &l);
    check_loaded(&l, 1, 30, 0, 1000, 0);
    cr_expect_eq(l.torn, 0);
    tlog_loaded_free(&l);
    close_store(s);
}

static void run_a_while(int ms)
{
    for (int k = 0; k < ms; k++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

/* A recycled file kept as the spare at open takes the next appends. */
Test(tlog_store, a_recycled_spare_kept_at_open_takes_the_next_appends)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_stats st;
    uint64_t first;
    struct tlog_store *s = store_of_400(&c, &a);
    forget_and_wait(s, 350);
    memset(&a, 0, sizeof a);
    append_range(s, &a, 401, 800, 4, 0);
    spin_until(&a.n, 100);
    run_a_while(100); /* the spare, from the free list */
    tlog_get_stats(s, &st);
    cr_assert_gt(st.recycled, 0);
    close_store(s);
    s = open_store(&c, &l);
    first = l.first_index;
    check_loaded(&l, first, 800, 0, 1000, 0);
    tlog_loaded_free(&l);
    memset(&a, 0, sizeof a);
    append_range(s, &a, 801, 830, 3, 0);
    spin_until(&a.n, 10);
    check_in_order(&a, 10);
    close_store(s);
    s = open_store(&c, &l);
    check_loaded(&l, first, 830, 0, 1000, 0);
    cr_expect_eq(l.torn, 0);
    tlog_loaded_free(&l);
    close_store(s);
}

/* An install voids everything; its void segments are forgotten onto the
 * free list; the appends after it and a load with void_below stand. */
Test(tlog_store, a_reset_then_forget_loads_from_the_reset)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_stats st;
    uint64_t vb;
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 200, 4, 0);
    spin_until(&a.n, 50);
    vb = tlog_reset(s, 1001, pos_after(0, 1, 1000));
    forget_and_wait(s, 1001);
    tlog_get_stats(s, &st);
    cr_expect_gt(st.freed, 0);
    memset(&a, 0, sizeof a);
    append_range(s, &a, 1001, 1200, 4, 0);
    spin_until(&a.n, 50);
    check_in_order(&a, 50);
    close_store(s);
    c.void_below = vb;
    expect_loads(&c, 1001, 1200, 0, 10000, 0);
}

/* A spare passed over for a larger record is forgotten with the segments
 * before it. */
Test(tlog_store, a_spare_passed_over_for_a_large_record_is_forgotten)
{
    static struct acks a;
    static uint8_t big[200000];
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_entry e = {TLOG_REC_COMMAND, 1, big, sizeof big};
    struct ack_arg *x;
    unsigned before;
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 100, 4, 0);
    spin_until(&a.n, 25);
    run_a_while(50); /* the spare ready */
    x = malloc(sizeof *x);
    x->a = &a;
    x->id = ++a.calls;
    cr_assert_eq(tlog_append(s, &e, 1, ack_cb, x), 0);
    spin_until(&a.n, 26);
    close_store(s);
    s = open_store(&c, &l);
    cr_assert_eq(l.first_index, 1);
    cr_assert_eq(l.n, 101);
    tlog_loaded_free(&l);
    before = count_segments();
    forget_and_wait(s, 101);
    close_store(s);
    cr_expect_lt(count_segments(), before);
    s = open_store(&c, &l);
    cr_assert_eq(l.n, 1);
    cr_assert_eq(l.first_index, 101);
    tlog_loaded_free(&l);
    cr_expect_leq(count_segments(), 2, "the large record's, a spare");
    close_store(s);
}

/* A truncate below the current segment's start, then a forget below it:
 * the load gives the truncate's state. */
Test(tlog_store, a_truncate_then_forget_loads_the_truncated_state)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_store *s = store_of_400(&c, &a);
    cr_assert_eq(tlog_truncate(s, 150), 0);
    append_range(s, &a, 150, 160, 4, 7);
    spin_until(&a.n, 103);
    forget_and_wait(s, 100);
    close_store(s);
    s = open_store(&c, &l);
    cr_expect_gt(l.first_index, 1);
    check_loaded(&l, l.first_index, 160, 0, 150, 7);
    tlog_loaded_free(&l);
    close_store(s);
}

/* A deletion that fails (the immutable flag on the oldest segment) stops
 * the forget there: nothing after it goes, the load stands, and the next
 * forget, once the file can go, goes on. */
Test(tlog_store, a_failed_deletion_stops_the_forget_without_a_gap)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_stats st;
    char path[300], path2[300];
    unsigned before;
    int err;
    struct tlog_store *s = store_of_400(&c, &a);
    snprintf(path, sizeof path, "%s/seg-%020u", dir, 1u);
    err = test_set_immutable(path, true);
    if (err != 0) {
        close_store(s);
        cr_skip_test("no immutable flag here (%s)", strerror(err));
    }
    before = count_segments();
    tlog_forget(s, 350);
    run_a_while(300);
    tlog_get_stats(s, &st);
    cr_expect_eq(st.deleted, 0, "nothing after the oldest went");
    snprintf(path2, sizeof path2, "%s/seg-%020u", dir, 2u);
    cr_expect_eq(access(path2, F_OK), 0, "the next one is there");
    cr_assert_eq(test_set_immutable(path, false), 0);
    forget_and_wait(s, 350);
    close_store(s);
    cr_expect_lt(count_segments(), before);
    s = open_store(&c, &l);
    check_loaded(&l, l.first_index, 400, 0, 1000, 0);
    tlog_loaded_free(&l);
    close_store(s);
}

/* A segment missing between two others: the later one's link names it. */
Test(tlog_store, a_missing_segment_is_refused)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    char path[300], em[TERN_ERRMSG_SIZE] = "";
    struct tlog_store *s = store_of_400(&c, &a);
    close_store(s);
    snprintf(path, sizeof path, "%s/seg-%020u", dir, 3u);
    cr_assert_eq(unlink(path), 0);
    s = NULL;
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT);
    cr_expect_not_null(strstr(em, "a segment is missing"), "%s", em);
}

/* A free file of a seq above every segment's: new segments take higher
 * seqs (its older records must stay older than the file's new seq). */
Test(tlog_store, new_segments_take_seqs_above_every_free_file)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    struct tlog_stats st;
    char from[300], to[300];
    unsigned long long top = 0;
    DIR *d;
    struct dirent *e;
    struct tlog_store *s = store_of_400(&c, &a);
    forget_and_wait(s, 350);
    close_store(s);
    d = opendir(dir);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "free-", 5) == 0) {
            snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    snprintf(to, sizeof to, "%s/free-%020u", dir, 9000u);
    cr_assert_eq(rename(from, to), 0);
    s = open_store(&c, &l);
    tlog_loaded_free(&l);
    memset(&a, 0, sizeof a);
    append_range(s, &a, 401, 600, 4, 0);
    spin_until(&a.n, 50);
    tlog_get_stats(s, &st);
    cr_expect_gt(st.recycled, 0);
    close_store(s);
    d = opendir(dir);
    while ((e = readdir(d)) != NULL) {
        unsigned long long q;
        if (sscanf(e->d_name, "seg-%llu", &q) == 1 && q > top) {
            top = q;
        }
    }
    closedir(d);
    cr_expect_gt(top, 9000, "newest segment %llu", top);
    s = open_store(&c, &l);
    check_loaded(&l, l.first_index, 600, 0, 1000, 0);
    tlog_loaded_free(&l);
    close_store(s);
}

/* A reset whose void_below was not recorded (raft's log found all older
 * than the snapshot at open), and a crash before its forget: the log goes
 * on after a gap, from where the snapshot ends. The caller's restart
 * index lets that load; without it, the gap is damage. */
Test(tlog_store, a_gap_up_to_the_snapshot_s_end_loads_from_there)
{
    static struct acks a;
    struct tlog_config c = cfg(64 * 1024, 16 * 1024, false);
    struct tlog_loaded l;
    char em[TERN_ERRMSG_SIZE] = "";
    struct tlog_store *s = empty_store(&c, &a, 1);
    append_range(s, &a, 1, 100, 4, 0);
    spin_until(&a.n, 25);
    (void)tlog_reset(s, 501, 0); /* no forget: a crash first */
    memset(&a, 0, sizeof a);
    append_range(s, &a, 501, 600, 4, 0);
    spin_until(&a.n, 25);
    check_in_order(&a, 25);
    close_store(s);
    s = NULL;
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT, "a gap");
    cr_expect_not_null(strstr(em, "starts at index 501"), "%s", em);
    c.restart_index = 502;
    cr_assert_eq(tlog_open(&loop, &c, &s, &l, em), TERN_ECORRUPT,
                 "not where the snapshot ends");
    c.restart_index = 501;
    s = open_store(&c, &l);
    check_loaded(&l, 501, 600, 0, 1000, 0);
    cr_assert_eq(l.next_pos, pos_after(0, 501, 600));
    tlog_loaded_free(&l);
    forget_and_wait(s, 501); /* the older segments hold nothing now */
    memset(&a, 0, sizeof a);
    append_range(s, &a, 601, 610, 5, 0);
    spin_until(&a.n, 2);
    close_store(s);
    c.restart_index = 0;
    expect_loads(&c, 501, 610, 0, 1000, 0);
}
