/* Shared helpers of the index unit tests: temp dirs under /tmp, entry
 * builders, applying with assertions, fetching a whole queue into memory,
 * and raw file manipulation for corruption tests. */
#ifndef TERN_TEST_INDEX_HELPERS_H
#define TERN_TEST_INDEX_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <idx.h>

/* mkdtemp under /tmp; returns a malloc'd path. */
char *th_tmpdir(void);
/* rm -rf path and free it. */
void th_rmdir(char *path);

/* The two-directory fixture of most suites: th_dirs_init makes th_dir_a
 * and th_dir_b (fresh temp dirs), th_dirs_fini removes them. Use as
 * TestSuite(name, .init = th_dirs_init, .fini = th_dirs_fini). */
extern char *th_dir_a, *th_dir_b;
void th_dirs_init(void);
void th_dirs_fini(void);

struct idx_env *th_open(const char *dir, uint64_t segment_bytes);
/* Set the length and checksum of the command entry at b[0..len) after a
 * test edited it, computed here from the format at the top of
 * index/cmd.c: XXH3 seeded with the XXH32 of header bytes [0,20) when the
 * entry carries the XXH3 flag (1), else XXH32 of those bytes and the
 * body. */
void th_entry_reseal(uint8_t *b, size_t len);
/* Set: th_apply flags its entries XXH3 (idx_cmd_flag_xxh3: XXH3
 * checksums, records of version 2); clear (the default): as an earlier
 * release, or a cluster not switched, built them. */
extern bool th_entry_xxh3;
struct idx_env *th_open_opts(const struct idx_options *o);

/* Apply one entry at index, asserting success; returns n_results. */
unsigned th_apply(struct idx_env *e,
                  uint64_t index,
                  struct tern_wbuf *w,
                  struct idx_result *res,
                  unsigned max);
/* Build + apply: create queue. */
void th_create(struct idx_env *e, uint64_t index, const char *queue);
/* Build + apply a produce of n messages "q:<seq>:<i>" with producer pid. */
struct idx_result th_produce(struct idx_env *e,
                             uint64_t index,
                             const char *queue,
                             uint64_t pid,
                             uint64_t seq,
                             uint32_t n);
/* The deterministic message text th_produce uses. */
void th_msg_text(char *buf,
                 size_t cap,
                 const char *queue,
                 uint64_t seq,
                 uint32_t i);

/* A fetched message copy. */
struct th_msg
{
    uint64_t offset;
    uint64_t timestamp_ms;
    uint64_t producer_id;
    char *data;
    uint32_t len;
};
struct th_msgs
{
    struct th_msg *v;
    size_t n;
    size_t cap;
};
/* Fetch the whole queue with the given chunk limits; returns idx_fetch's
 * first non-zero code or 0. */
int th_fetch_all(struct idx_env *e,
                 const char *queue,
                 uint32_t max_msgs,
                 uint32_t max_bytes,
                 struct th_msgs *out);
void th_msgs_free(struct th_msgs *m);
/* idx_fetch callback counting the messages it sees in *(unsigned *)arg. */
int th_count_fetched(void *arg, const struct idx_fetched *f);
/* Assert two message lists are identical. */
void th_msgs_expect_eq(const struct th_msgs *a, const struct th_msgs *b);

/* Path of the last (highest) segment file of dir/log; malloc'd. */
char *th_last_segment(const char *dir);
/* Number of segment files in dir/log. */
int th_count_segments(const char *dir);
off_t th_file_size(const char *path);
void th_flip_byte(const char *path, off_t at);
void th_truncate(const char *path, off_t size);
void th_append(const char *path, const void *buf, size_t n);
void th_copy_file(const char *from, const char *to);
/* The names of dir/log's files ending in ext, sorted, newline
 * separated (malloc'd). */
char *th_log_files(const char *dir, const char *ext);
/* A whole file (malloc'd, *n bytes). */
uint8_t *th_read_file(const char *path, size_t *n);
/* Criterion expectations: the checkpoint files of the index dirs da and db
 * are the same, byte for byte, and there are at least min of them. */
void th_expect_same_checkpoints(const char *da, const char *db, int min);
/* Read all log bytes [0, log_end) through idx_bulk_read; malloc'd. */
uint8_t *th_log_bytes(struct idx_env *e, uint64_t *len);

#endif
