/*
 * index/ private header of the command entry codec (cmd.c; format at the
 * top of cmd.c), and the definitions every decoder of index/ shares: the
 * checksum comparison and the largest entry payload. cmd.c includes only
 * this header; the rest of index/ gets it through idx_int.h. Reachable
 * only from index/ and from the index unit tests and fuzz targets.
 */
#ifndef TERN_IDX_CMD_H
#define TERN_IDX_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tern_common.h>

#include "idx.h"

/* Checksum comparisons of the decoders (cmd.c, keys.c, log.c, snapshot.c).
 * Fuzz builds (the libFuzzer convention
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) accept any checksum so that
 * mutated inputs reach the structural checks behind it. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define IDX__CHECKSUM_OK(stored, computed) ((void)(stored), (void)(computed), 1)
#else
#define IDX__CHECKSUM_OK(stored, computed) ((stored) == (computed))
#endif

/* Commit-log record versions (index/log.c): the checksum each carries. */
#define IDX__REC_VERSION_XXH32 1
#define IDX__REC_VERSION_XXH3  2

/* Largest record payload (one Raft entry) the log accepts or decodes. */
#define IDX__RECORD_MAX_PAYLOAD ((uint32_t)1 << 30)

#define IDX__CMD_HDR_SIZE     24
#define IDX__CMD_MAX_COMMANDS 65536u
/* The highest command type this build knows (enum idx_cmd_type): move it
 * with each new type (idx__entry_newer). */
#define IDX__CMD_TYPE_LAST IDX_CMD_GROUP_COMMIT_AS

struct idx__cmd
{
    uint8_t type;
    const char *queue; /* not NUL-terminated */
    uint8_t queue_len;
    const char *group; /* not NUL-terminated */
    uint8_t group_len;
    uint64_t producer_id;
    uint64_t seq;
    uint64_t next_offset;
    uint32_t n_msgs;
    const uint8_t *msgs; /* n_msgs x (u32 len, bytes[, u32 props_len,
                            props]) */
    size_t msgs_len;
    /* Security metadata commands (types 6..12); the user or namespace
     * name of USER_* / NAMESPACE_* / PRODUCER_INIT is in queue. */
    const char *ns; /* ACL_*: namespace, not NUL-terminated */
    uint8_t ns_len;
    const char *pattern; /* ACL_*: grant pattern */
    uint8_t pattern_len;
    uint32_t flags;      /* USER_SET: IDX_USER_*; ACL_SET: IDX_PERM_* */
    const uint8_t *cred; /* USER_SET */
    uint8_t cred_len;
    struct idx_quota quota; /* NAMESPACE_SET */
    /* Retention (types 1, 13, 14). QUEUE_CREATE: has_settings says
     * whether the body had the settings tail. QUEUE_UPDATE: mask
     * (IDX_SET_*) names the fields of settings it changes. TRIM: the
     * queue and its trim fields below. */
    struct idx_queue_settings settings;
    bool has_settings;
    uint32_t mask;
    struct
    {
        uint64_t queue_id, from, to, bytes;
    } trim;        /* TRIM */
    uint64_t term; /* TERM */
    /* Shared groups (types 17..20; docs/WORKQUEUES.md). SHARED_CONFIG:
     * mask (IDX_SHARED_SET_*) and shared. DELIVER, SETTLE: n_items list
     * items at items (read them with idx__cmd_deliver_item /
     * idx__cmd_settle_item). DEAD_LETTER: the receipt in dl, the reason,
     * and the message as one (len, bytes, props_len, props) in msgs. */
    struct idx_shared_settings shared;
    uint64_t consumer_id;
    uint32_t n_items;
    const uint8_t *items;
    struct
    {
        uint64_t offset;
        uint32_t count;
    } dl;
    const char *reason; /* not NUL-terminated */
    uint8_t reason_len;
    /* PRODUCE_DELAYED: the due time; the rest is a PRODUCE_PROPS body in
     * queue, producer_id, seq, n_msgs, msgs. TIMER_FIRE: n_msgs keys at
     * msgs[0..msgs_len) (idx__fire_iter). */
    uint64_t due_ms;
    /* CLAIM: queue, group, consumer_id, flags = the action
     * (IDX_CLAIM_*), lease_ms. GROUP_COMMIT_AS: queue, group,
     * consumer_id, next_offset. */
    uint32_t lease_ms;
};

struct idx__entry
{
    const uint8_t *base;
    size_t len;
    uint32_t n; /* commands announced in the header */
    uint32_t i; /* commands decoded so far */
    uint64_t timestamp_ms;
    struct tern_cursor c;
};

/* Entry header flags (cmd.c, "Entry layout"). */
#define IDX__CMD_FLAG_XXH3                                                     \
    0x0001u /* XXH3 checksums: the entry's own and                             \
               its commit-log record's (version 2) */

/* The commit-log record version of an entry's bytes (any bytes: the
 * malformed ones are recorded too): 2 when its header carries
 * IDX__CMD_FLAG_XXH3, else 1. The same on every node. */
uint16_t idx__entry_record_version(const void *entry, size_t len);

/* Check the entry header (version, flags, length, checksum, count) and
 * position the iterator on the first command. entry is borrowed by *it.
 * 0 or TERN_EMALFORMED / TERN_EVERSION. */
int idx__entry_open(struct idx__entry *it, const void *entry, size_t len);
/* Whether an entry idx_cmd_validate refuses was written by a later
 * release rather than damaged or malformed by every release's rules: its
 * header version is above IDX__CMD_VERSION, its header carries a flag
 * this build does not know, or (header and checksum good) one of its
 * commands has a type above IDX__CMD_TYPE_LAST. Version 0 and type 0 are
 * no release's: malformed. A later release applies such an
 * entry, so a node that only records it holds less than its peers from
 * there on (apply.c: no checkpoints after it). A known command with a
 * value this build does not know inside its body (say, a new overflow
 * mode) cannot be told from a malformed one and answers false. */
bool idx__entry_newer(const void *entry, size_t len);
/* Decode the next command (pointers into the entry). 1 with *cmd filled,
 * 0 at the end (all n commands seen and no bytes left), TERN_EMALFORMED. */
int idx__entry_next(struct idx__entry *it, struct idx__cmd *cmd);
/* Where a scan of an entry's commands resumes: the byte offset of a
 * command's type byte and its number (both 0: the first command). */
struct idx__entry_scan
{
    size_t pos;
    uint32_t i;
};
/* The message list of the PRODUCE or PRODUCE_PROPS command of entry
 * whose body holds byte `at` (an entry recorded and applied, whose record
 * checksum held: the commands are not validated again, only bounded):
 * 1 with [*start, *end) the list's bytes (offsets in the entry; each
 * message u32 len, bytes, and with *with_props u32 props_len, props),
 * 0 when `at` lies in a command of another type or in none. The scan
 * starts at *s when `at` lies past it (else at the first command) and
 * leaves *s at the command holding `at`, so that the lookups of one
 * record's messages in increasing order read each header once. */
int idx__entry_produce_msgs(const void *entry,
                            size_t len,
                            size_t at,
                            struct idx__entry_scan *s,
                            size_t *start,
                            size_t *end,
                            bool *with_props);
/* Iterate the messages of a produce command. */
struct idx__msg_iter
{
    struct tern_cursor c;
    bool with_props;      /* PRODUCE_PROPS */
    const uint8_t *props; /* the last message's block (props_len 0: none) */
    uint32_t props_len;
};
void idx__msg_iter_init(struct idx__msg_iter *mi, const struct idx__cmd *cmd);
/* 1 with data/len (and mi->props/props_len of PRODUCE_PROPS), 0 at the
 * end. Only valid on validated commands. */
int idx__msg_iter_next(struct idx__msg_iter *mi,
                       const uint8_t **data,
                       uint32_t *len);

/* Item i (< cmd->n_items) of a validated DELIVER / SETTLE. */
void idx__cmd_deliver_item(const struct idx__cmd *cmd,
                           uint32_t i,
                           struct idx_deliver_item *out);
void idx__cmd_settle_item(const struct idx__cmd *cmd,
                          uint32_t i,
                          struct idx_settle_item *out);
/* The properties block a DEAD_LETTER carries (cmd.c, "DEAD_LETTER"): the
 * original block orig[0..orig_len) (0 bytes: none) of the message at
 * offset of queue[0..queue_len), with the dead-letter headers; appended
 * to w (caller-owned). */
void idx__dlq_props(struct tern_wbuf *w,
                    const uint8_t *orig,
                    uint32_t orig_len,
                    const char *queue,
                    size_t queue_len,
                    uint64_t offset,
                    uint32_t count,
                    const char *reason,
                    size_t reason_len);
/* Iterate the keys of a (validated) TIMER_FIRE. */
struct idx__fire_key
{
    struct idx_timer_key key;
    const char *queue; /* not NUL-terminated */
    uint8_t queue_len;
    const uint8_t *msg; /* one message as in PRODUCE_PROPS: u32 len,
                           bytes, u32 props_len, props */
    size_t msg_len;
};
struct idx__fire_iter
{
    struct tern_cursor c;
};
void idx__fire_iter_init(struct idx__fire_iter *fi, const struct idx__cmd *cmd);
/* 1 with *k filled (pointers into the entry), 0 at the end. */
int idx__fire_iter_next(struct idx__fire_iter *fi, struct idx__fire_key *k);
/* A message iterator over the one message of k (with properties). */
void idx__msg_iter_init_fire(struct idx__msg_iter *mi,
                             const struct idx__fire_key *k);

#endif /* TERN_IDX_CMD_H */
