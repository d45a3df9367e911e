/*
 * libtern: the tern client library (public API, prefix tern_).
 *
 * A struct tern_client talks to a tern cluster over TCP (the wire protocol
 * of proto/include/proto.h) using plain POSIX sockets and poll(2); it has no
 * threads of its own and is not thread-safe: use one client per thread.
 *
 * Leader following: writes (queue create/delete, produce, group commit) go
 * to the known leader. A "not the leader" answer redirects to the leader
 * address it carries (or to the next server); connection errors and "no
 * leader" answers retry the other servers with a small back-off, until the
 * request's deadline (request_timeout_ms). A request whose deadline passes
 * fails with TERN_ETIMEDOUT: its outcome is unknown. Until the client's
 * first connection to any server comes up, a request fails at once, with
 * that server's error (-ECONNREFUSED, or -EHOSTUNREACH for a name that does
 * not resolve; tern_client_errmsg() names each server), once every server
 * refused or did not resolve: nothing was sent, so the outcome is known.
 *
 * Idempotent producer: before its first produce each client asks the
 * leader for a block of producer ids (PRODUCER_INIT; a server without it:
 * a random 64-bit id); each produce batch to a queue carries the next
 * sequence number for (producer, queue), starting at 1, and a retried
 * batch keeps its number, so the server appends it once and answers a
 * retry with the original offsets.
 *
 * Authentication (tern_client_set_auth): every connection the client
 * opens logs in (SCRAM-SHA-256 or the TLS client certificate) before any
 * request is sent on it. Users, grants and namespaces are managed with the
 * admin calls below (docs/AUTH.md has the model).
 *
 * Errors: every call returns 0 or a negative code: a tern code from
 * <tern/errors.h> or -errno. tern_client_errmsg() has the detail of the
 * last failure on a client.
 *
 * Ownership words used below: "borrowed" (valid until the named event),
 * "copied" (the library keeps its own copy), "caller-owned" (the caller
 * frees it with the named function).
 */
#ifndef TERN_TERN_H
#define TERN_TERN_H

#include <stddef.h>
#include <stdint.h>

#include <tern/errors.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TERN_VERSION_MAJOR 0
#define TERN_VERSION_MINOR 4
#define TERN_VERSION_PATCH 0
#define TERN_VERSION_NUMBER                                                    \
    (TERN_VERSION_MAJOR * 10000 + TERN_VERSION_MINOR * 100 + TERN_VERSION_PATCH)

#if defined(__GNUC__) || defined(__clang__)
#define TERN_API __attribute__((visibility("default")))
#else
#define TERN_API
#endif

/* Version of the library actually loaded (TERN_VERSION_NUMBER form). */
TERN_API int tern_version_number(void);

/* Static message / symbolic name for a tern code or -errno. Never NULL;
 * the strings are static. */
TERN_API const char *tern_strerror(int code);
TERN_API const char *tern_err_name(int code);

struct tern_client;
struct tern_fetch_result;
struct tern_queue_list;
struct tern_status;
struct tern_user_list;
struct tern_acl_list;
struct tern_namespace_list;

/* Where reads (fetch, group fetch, queue list, cluster status) go. */
enum tern_read_from {
    TERN_READ_LEADER = 0, /* the leader (discovered with a status request
                             if not known yet). Fetches ask to be served
                             by a writable leader only, so a deposed
                             leader redirects them (the client follows):
                             read-your-writes, also after a failover,
                             except from a leader cut off from the
                             majority until it steps down (one election
                             timeout). Needs servers of this version
                             (older ones answer TERN_EMALFORMED). Queue
                             list and status are not checked. */
    TERN_READ_ANY = 1,    /* any connected server (the current one) */
    TERN_READ_FIRST = 2,  /* the first server of the list only (e.g. to
                             consume from a given follower) */
};

/* Client options. Initialise with tern_client_options_init, then change
 * fields. A value of 0 means "the default". The caller allocates it and
 * new fields are only appended: before 1.0 a minor release may append one
 * (0.2.0 appended attempt_timeout_ms, 0.3.0
 * fetch_read_ahead, 0.4.0 produce_merge_bytes), so rebuild against the
 * header of
 * the libtern you run with. */
struct tern_client_options
{
    int connect_timeout_ms;  /* per connection attempt; default 1000 */
    int request_timeout_ms;  /* deadline of each request; default 5000.
                                Long-poll fetches add their wait_ms; an
                                async batch's clock starts when it enters
                                the window (see tern_produce_async). */
    int retry_backoff_ms;    /* first retry delay, doubled per attempt up to
                                16x; default 25 */
    int max_in_flight;       /* async produce window; default 32 (the
                                server remembers 32 batches per producer
                                and queue for idempotent retries) */
    int read_from;           /* enum tern_read_from; default LEADER */
    uint32_t max_frame;      /* largest response body accepted;
                                default 16 MiB */
    int attempt_timeout_ms;  /* a request that follows the leader (writes,
                                leader reads) abandons its server when
                                that server sent no byte at all for this
                                long since the attempt was sent, and goes
                                on with another server (the idempotent
                                producer makes a resent batch safe). The
                                engine asks a quiet server for its status
                                after half of it, so a server that is slow
                                but alive (a large batch, a slow disk) is
                                never abandoned. Doubled for each attempt
                                of a request so abandoned, up to 16x.
                                Within request_timeout_ms, which still
                                ends the request. Default 300 (twice
                                ternd's default election timeout): set it
                                to about twice the cluster's
                                election_timeout_ms; negative: off */
    int fetch_read_ahead;    /* tern_fetch and tern_fetch_ex stream: after
                                an answer that stopped on a limit with more
                                of the queue left (next offset below its
                                end), the same fetch at the next offset is
                                sent at once, and its answer waits in the
                                client, at most one answer of max_bytes,
                                so the server reads while the caller
                                works. The next call that asks exactly
                                that gets it if it too stopped on a limit
                                (never an answer that ended at the queue's
                                end, so a message acknowledged before the
                                call is always reached); any other call
                                leaves it unused. It is the queue as it
                                was when read: its end offset can be below
                                a produce acknowledged before the call,
                                and a queue deleted and created again
                                since is not seen. Default: on for READ_ANY and
                                READ_FIRST, off for READ_LEADER (whose
                                answers are the leader's state at the
                                call); 1: on for every read_from;
                                negative: off */
    int produce_merge_bytes; /* tern_produce_async: a call to a queue
                               whose last batch still waits behind the
                               full window (max_in_flight), never sent,
                               joins that batch while the batch's
                               messages stay within this many bytes
                               (4 per message plus its payload), as a
                               Kafka producer fills its batch while its
                               requests are in flight. Default 65536;
                               negative: off (every call its own batch).
                               Keep it within the servers' [limits]
                               max_frame_bytes (16 MiB by default) */
};
TERN_API void tern_client_options_init(struct tern_client_options *o);

/* Create a client for servers "host:port[,host:port...]" (IPv6 as
 * "[addr]:port"). No connection is made until the first request. opts may
 * be NULL (defaults); it is copied. *out (OUT) is caller-owned: free with
 * tern_client_free. Fails with TERN_EINVAL for an unparsable list. */
TERN_API int tern_client_new(const char *servers,
                             const struct tern_client_options *opts,
                             struct tern_client **out);
/* Speak TLS 1.3 to every server of c (call it right after
 * tern_client_new; connections already open are closed). The server's
 * certificate must chain to a CA in ca_file (PEM; required) and name the
 * address being connected: an IP subjectAltName for "1.2.3.4:port" and
 * "[::1]:port", a DNS one for "name:port" (also for a leader another
 * server points to). cert_file and key_file (PEM, both or neither; NULL:
 * none) are the client certificate presented to a server that asks for
 * one. The files are read here. Returns 0 or TERN_EINVAL (a file that
 * cannot be read or parsed, a key that does not match) with the reason in
 * tern_client_errmsg. Later calls fail with TERN_EAUTH when a server's
 * certificate is refused, without retrying that server (a client
 * certificate the server refuses surfaces as an alert after the
 * handshake: the call fails with it in tern_client_errmsg). */
TERN_API int tern_client_set_tls(struct tern_client *c,
                                 const char *ca_file,
                                 const char *cert_file,
                                 const char *key_file);
/* Authentication mechanisms of struct tern_auth_options. */
enum tern_auth_mechanism {
    TERN_AUTH_NONE = 0,     /* do not authenticate (the default) */
    TERN_AUTH_SCRAM = 1,    /* SCRAM-SHA-256: user and password; the password
                               never travels, and the server proves that it
                               knows the user's credential too */
    TERN_AUTH_EXTERNAL = 2, /* the TLS client certificate of
                               tern_client_set_tls (its subject CN is the
                               user, who needs the cert flag) */
};

/* Who the client is. Initialise with tern_auth_options_init, then set the
 * fields; all strings are borrowed for the call (tern_client_set_auth
 * copies them). */
struct tern_auth_options
{
    int mechanism;        /* enum tern_auth_mechanism */
    const char *user;     /* SCRAM: required (printable ASCII, no space);
                             EXTERNAL: NULL, or the certificate's CN */
    const char *password; /* SCRAM: required (printable ASCII); else NULL */
    const char *ns;       /* namespace the connections are bound to; NULL
                             or "": "default" */
};
TERN_API void tern_auth_options_init(struct tern_auth_options *o);

/* Authenticate every connection c opens from now on (first connect,
 * reconnect, redirect to the leader): AUTH_START / AUTH_CONTINUE run
 * before any other request is sent on it, and the server's final SCRAM
 * message must prove it knows the user's credential. Connections already
 * open are closed. o NULL or mechanism TERN_AUTH_NONE turns it off. The
 * password is copied, and wiped when replaced or at tern_client_free.
 * Returns 0 or TERN_EINVAL (missing user or password, EXTERNAL without
 * tern_client_set_tls first, bad namespace name) with the reason in
 * tern_client_errmsg. Later calls fail with TERN_EAUTH, the server's
 * reason in tern_client_errmsg, when a server refuses the login (wrong
 * password, unknown user or namespace, a certificate that names no cert
 * user) or cannot prove the credential: the call is not retried on
 * another server. */
TERN_API int tern_client_set_auth(struct tern_client *c,
                                  const struct tern_auth_options *o);
/* Close connections and free the client. Pending async requests complete
 * first with TERN_ECANCELED (their callbacks fire inside this call).
 * NULL is a no-op. */
TERN_API void tern_client_free(struct tern_client *c);
/* Detail of the last failed call on c ("" if none). Borrowed: valid until
 * the next call on c. */
TERN_API const char *tern_client_errmsg(const struct tern_client *c);
/* This client's producer id: the base of the block the leader issued
 * (n << 32) before the first produce, or a random non-zero id when the
 * server predates issued ids (it answered PRODUCER_INIT with TERN_EINVAL);
 * 0 before the first produce. A queue that must be renumbered after
 * TERN_ESEQUENCE moves to base | k (k = 1, 2, ...) within the block. */
TERN_API uint64_t tern_client_producer_id(const struct tern_client *c);
/* Address ("host:port") of the server the client currently believes is
 * the leader, or NULL. Borrowed: valid until the next call on c. */
TERN_API const char *tern_client_leader(const struct tern_client *c);

/* ---- Queues ---------------------------------------------------------- */

/* Create / delete a queue (name: 1..200 bytes of [A-Za-z0-9._-]; borrowed
 * for the call). TERN_EQUEUEEXISTS / TERN_ENOQUEUE are returned only when
 * the first attempt got them: after a retry they mean our own earlier
 * attempt succeeded, and the call returns 0. */
TERN_API int tern_queue_create(struct tern_client *c, const char *queue);
TERN_API int tern_queue_delete(struct tern_client *c, const char *queue);

/* List every queue, in name order. *out (OUT) is caller-owned: free with
 * tern_queue_list_free. Strings returned by the accessors are borrowed
 * until that free. Asks the server page by page (tern_queue_list_page with
 * the server's page size) and returns them together, so the list of a
 * node with many queues is never one frame; queues created or deleted
 * while it pages may or may not be listed. Needs a server that pages
 * (an older one answers TERN_EMALFORMED). */
TERN_API int tern_queue_list(struct tern_client *c,
                             struct tern_queue_list **out);
/* One page of the list: at most max_count queues (0: the server's page
 * size, its list_page_max) whose names sort after after (NULL or "": from
 * the first queue; borrowed for the call), in name order. *out (OUT) as
 * for tern_queue_list; *more (OUT) is 1 when queues follow the page's
 * last one (ask again with after = tern_queue_list_name(*out, count - 1)),
 * 0 after the last page. */
TERN_API int tern_queue_list_page(struct tern_client *c,
                                  const char *after,
                                  uint32_t max_count,
                                  struct tern_queue_list **out,
                                  int *more);
TERN_API size_t tern_queue_list_count(const struct tern_queue_list *l);
TERN_API const char *tern_queue_list_name(const struct tern_queue_list *l,
                                          size_t i);
TERN_API uint64_t tern_queue_list_start_offset(const struct tern_queue_list *l,
                                               size_t i);
TERN_API uint64_t tern_queue_list_next_offset(const struct tern_queue_list *l,
                                              size_t i);
TERN_API void tern_queue_list_free(struct tern_queue_list *l);

/* ---- Queue retention (docs/MESSAGES.md "Retention") ------------------- */

struct tern_queue_info;

/* A field of struct tern_queue_options left at this value: "the default"
 * for tern_queue_create_opts, "unchanged" for tern_queue_update. */
#define TERN_QUEUE_DEFAULT UINT64_MAX
/* The built-in retention of a queue created without settings. */
#define TERN_QUEUE_DEFAULT_MAX_AGE_MS ((uint64_t)72 * 3600 * 1000)

/* What a produce does when it would pass max_bytes or max_messages. */
enum tern_overflow {
    TERN_OVERFLOW_DEFAULT = -1,    /* default (drop-oldest) / unchanged */
    TERN_OVERFLOW_DROP_OLDEST = 0, /* trim the oldest messages */
    TERN_OVERFLOW_REJECT = 1,      /* refuse it: TERN_EQUEUEFULL */
};
/* "drop-oldest", "reject" or "unknown"; static. */
TERN_API const char *tern_overflow_name(int overflow);

/* Retention settings of a queue. Initialise with tern_queue_options_init
 * (every field TERN_QUEUE_DEFAULT / TERN_OVERFLOW_DEFAULT), then set the
 * fields wanted. 0 = no limit for the three limits. */
struct tern_queue_options
{
    uint64_t max_age_ms;   /* messages older than this (append time) are
                              trimmed; default 72 h */
    uint64_t max_bytes;    /* retained message bytes; default 0 */
    uint64_t max_messages; /* retained messages; default 0 */
    int overflow;          /* enum tern_overflow; default drop-oldest */
};
TERN_API void tern_queue_options_init(struct tern_queue_options *o);

/* Create queue with the settings o (borrowed for the call; NULL or every
 * field default: as tern_queue_create, the server's defaults). Fields
 * left default get the built-in defaults above. Returns as
 * tern_queue_create, or TERN_EINVAL for an overflow outside the enum. */
TERN_API int tern_queue_create_opts(struct tern_client *c,
                                    const char *queue,
                                    const struct tern_queue_options *o);
/* Change the fields of o (borrowed for the call) that are not default;
 * the others stay as they are. A lowered limit takes effect at the
 * queue's next trim. TERN_EINVAL when no field is set (or a bad
 * overflow), TERN_ENOQUEUE. Writes go to the leader. */
TERN_API int tern_queue_update(struct tern_client *c,
                               const char *queue,
                               const struct tern_queue_options *o);
/* A queue's retained range, size and settings, as the server that
 * answered applied them (read_from decides which one). *out (OUT) is
 * caller-owned: free with tern_queue_info_free. */
TERN_API int tern_queue_info(struct tern_client *c,
                             const char *queue,
                             struct tern_queue_info **out);
/* First retained offset (the low watermark) and the next offset. */
TERN_API uint64_t tern_queue_info_start_offset(const struct tern_queue_info *q);
TERN_API uint64_t tern_queue_info_next_offset(const struct tern_queue_info *q);
/* Retained messages (next - start) and their bytes. */
TERN_API uint64_t tern_queue_info_messages(const struct tern_queue_info *q);
TERN_API uint64_t tern_queue_info_bytes(const struct tern_queue_info *q);
/* Raft index of the create (a re-created queue has a new one). */
TERN_API uint64_t
tern_queue_info_created_index(const struct tern_queue_info *q);
TERN_API uint64_t tern_queue_info_max_age_ms(const struct tern_queue_info *q);
TERN_API uint64_t tern_queue_info_max_bytes(const struct tern_queue_info *q);
TERN_API uint64_t tern_queue_info_max_messages(const struct tern_queue_info *q);
/* enum tern_overflow (DROP_OLDEST or REJECT). */
TERN_API int tern_queue_info_overflow(const struct tern_queue_info *q);
TERN_API void tern_queue_info_free(struct tern_queue_info *q);

/* *offset (OUT): the first offset of queue whose append time is at or
 * after time_ms (ms since the epoch), or the queue's next offset when
 * there is none; a time before the first retained message gives the
 * first offset. Served like a fetch (read_from). */
TERN_API int tern_offset_for_time(struct tern_client *c,
                                  const char *queue,
                                  uint64_t time_ms,
                                  uint64_t *offset);

/* ---- Produce ---------------------------------------------------------- */

/* One message to produce. data is borrowed for the call. */
struct tern_msg
{
    const void *data;
    size_t len;
};

/* Append msgs[0..n) (n >= 1) to queue as one batch, atomically and in
 * order, retrying (idempotently) until acknowledged or the deadline. The
 * client's first produce (this call or tern_produce_async) first asks the
 * leader for the producer id block: one synchronous round trip, within
 * the request timeout; when it fails the produce fails with its error and
 * the next produce asks again.
 * *base_offset (OUT, may be NULL) is the offset of msgs[0]; the others
 * follow consecutively. It is UINT64_MAX in one rare case: a retry was
 * acknowledged as a duplicate of a batch the server appended earlier but
 * whose offsets it no longer remembers (it keeps only the last batch per
 * producer and queue). */
TERN_API int tern_produce(struct tern_client *c,
                          const char *queue,
                          const struct tern_msg *msgs,
                          size_t n,
                          uint64_t *base_offset);

/* Delayed messages (docs/WORKQUEUES.md, "Delayed and scheduled
 * messages"): msgs[0..n) (n >= 1, borrowed for the call) are stored now
 * and appended to queue, in order, once the leader's clock reaches their
 * due time: delay_ms after the leader received them
 * (tern_produce_delayed), or due_ms, milliseconds since the epoch
 * (tern_produce_at; a time already past means at once). Until then no
 * fetch sees them. *out_due_ms (OUT, may be NULL) is the due time the
 * leader recorded, by its clock. A due time more than the server's
 * [limits] max_delay_ms ahead (40 days by default) is TERN_EINVAL; a
 * missing queue TERN_ENOQUEUE. The batch carries a producer id and seq of
 * its own, so the call's resends after a lost connection or leadership
 * schedule it once (a resend is answered the first due time); only a new
 * call after a failed one may schedule a batch twice. A server without
 * delayed messages answers TERN_EINVAL "unknown request op". */
TERN_API int tern_produce_delayed(struct tern_client *c,
                                  const char *queue,
                                  const struct tern_msg *msgs,
                                  size_t n,
                                  uint64_t delay_ms,
                                  uint64_t *out_due_ms);
TERN_API int tern_produce_at(struct tern_client *c,
                             const char *queue,
                             const struct tern_msg *msgs,
                             size_t n,
                             uint64_t due_ms,
                             uint64_t *out_due_ms);

/* Resend the batch whose tern_produce (or tern_produce_async) to queue
 * last ended in TERN_ETIMEDOUT, with the producer id and sequence number it
 * was sent with, so the server appends it at most once: 0 with
 * *base_offset (as for tern_produce) whether this call or the lost one
 * appended it. msgs[0..n) must be the same messages (count and bytes are
 * checked: TERN_EINVAL otherwise, also when no batch of queue has an
 * unknown outcome). TERN_ESEQUENCE: the batch was never appended (the
 * server has a gap before it, e.g. an earlier batch also timed out):
 * produce it again as a new batch if wanted. TERN_ETIMEDOUT again: still
 * unknown, the batch stays resendable. Any other answer resolves it. The
 * client keeps one such batch per queue: a later timeout to the same queue
 * replaces it. A resend may land after batches produced since, so per-queue
 * order holds only if the caller sent nothing to queue in between.
 * Bound: a client keeps the producer state of at most 65,536 queues; past
 * that the least recently used queue with nothing outstanding loses its
 * state (its next produce goes on under a fresh producer id), and with it
 * a batch to resend: resend before producing to 65,536 other queues. */
TERN_API int tern_produce_resend(struct tern_client *c,
                                 const char *queue,
                                 const struct tern_msg *msgs,
                                 size_t n,
                                 uint64_t *base_offset);

/* Completion of an async produce: status 0 (base_offset/count valid; count
 * 0 means "acknowledged as a duplicate, offsets unknown", see tern_produce)
 * or a negative code (TERN_ETIMEDOUT: outcome unknown; TERN_ECANCELED: the
 * client was freed first). Runs inside tern_client_poll (or another call that
 * drives I/O, or tern_client_free); it may call tern_produce_async but not
 * the synchronous calls or tern_client_poll. When status != 0,
 * tern_client_errmsg() has the detail during the callback. */
typedef void (*tern_produce_cb)(void *arg,
                                int status,
                                uint64_t base_offset,
                                size_t count);

/* Queue msgs[0..n) as one batch; messages are copied (the caller's buffers
 * may be reused at once). At most max_in_flight batches are in the window
 * (sent, or being retried) at a time; the others wait in the client, in
 * order, and their deadline starts only when they enter the window.
 * Batches to one queue are appended in the order of the calls, also across
 * retries and leader changes. While its queue's last batch waits behind
 * the full window, a call joins that batch (options.produce_merge_bytes):
 * the merged calls are appended together, atomically and in call order,
 * and each callback gets its own messages' offsets and count; a failure
 * fails them all, its detail naming the merged calls. A merged batch that
 * ends in TERN_ETIMEDOUT is resent whole: tern_produce_resend takes the
 * messages of all its calls, in order (or set produce_merge_bytes
 * negative to resend call by call). tern_client_pending counts calls.
 * Returns 0 (cb will fire exactly once) or an error (cb never fires). */
TERN_API int tern_produce_async(struct tern_client *c,
                                const char *queue,
                                const struct tern_msg *msgs,
                                size_t n,
                                tern_produce_cb cb,
                                void *arg);
/* Drive I/O for up to timeout_ms (0: do not block; <0: until at least one
 * completion or nothing is pending) and fire completions. Returns the
 * number of callbacks fired (>= 0) or a negative code. */
TERN_API int tern_client_poll(struct tern_client *c, int timeout_ms);
/* Number of async batches not yet completed. */
TERN_API size_t tern_client_pending(const struct tern_client *c);

/* ---- Fetch and consumer groups --------------------------------------- */

/* Read up to max_msgs messages / about max_bytes (at least one message if
 * any) from offset. With nothing to read, the server waits up to wait_ms
 * for new messages (long poll). *out (OUT) is caller-owned: free with
 * tern_fetch_result_free (also on an empty result). */
TERN_API int tern_fetch(struct tern_client *c,
                        const char *queue,
                        uint64_t offset,
                        uint32_t max_msgs,
                        uint32_t max_bytes,
                        uint32_t wait_ms,
                        struct tern_fetch_result **out);
/* As tern_fetch, from the group's committed offset (0 if none). Always
 * served by the leader (whatever read_from says), behind a read barrier in
 * the raft log: the answer starts at or above every offset of the group
 * committed before the call (no redelivery after a leader change). Costs
 * one replication round trip; to stream, group-fetch once, then
 * tern_fetch from tern_fetch_result_next_offset and commit now and then. */
TERN_API int tern_group_fetch(struct tern_client *c,
                              const char *queue,
                              const char *group,
                              uint32_t max_msgs,
                              uint32_t max_bytes,
                              uint32_t wait_ms,
                              struct tern_fetch_result **out);
/* Commit next_offset (the next offset the group will read) for group. */
TERN_API int tern_group_commit(struct tern_client *c,
                               const char *queue,
                               const char *group,
                               uint64_t next_offset);

TERN_API size_t tern_fetch_result_count(const struct tern_fetch_result *r);
/* Offset after the last returned message (where to fetch next). */
TERN_API uint64_t
tern_fetch_result_next_offset(const struct tern_fetch_result *r);
/* The queue's end (next offset to be written) when the server answered. */
TERN_API uint64_t
tern_fetch_result_end_offset(const struct tern_fetch_result *r);
/* Message i (< count): OUT pointers may be NULL; *data borrowed until
 * tern_fetch_result_free. Returns 0 or TERN_EINVAL (i out of range). */
TERN_API int tern_fetch_result_get(const struct tern_fetch_result *r,
                                   size_t i,
                                   uint64_t *offset,
                                   uint64_t *timestamp_ms,
                                   const void **data,
                                   size_t *len);
/* Group fetch only (0 otherwise): how many messages between the group's
 * committed offset and the queue's first offset retention trimmed before
 * the group read them; the answer then starts at the first offset. */
TERN_API uint64_t tern_fetch_result_skipped(const struct tern_fetch_result *r);
/* The offset the answer starts at: for a group fetch the group's committed
 * offset, or the queue's first offset when it was below it; for a fetch
 * the offset asked for. */
TERN_API uint64_t
tern_fetch_result_start_offset(const struct tern_fetch_result *r);
TERN_API void tern_fetch_result_free(struct tern_fetch_result *r);

/* ---- Shared groups (docs/WORKQUEUES.md) -------------------------------- */

/* Settings of a shared group; 0 / NULL: the default at creation, left
 * unchanged afterwards. */
struct tern_shared_options
{
    uint64_t ack_timeout_ms; /* a lease's length */
    uint32_t max_deliveries; /* deliveries before the message goes to the
                                dead-letter queue */
    uint32_t window;         /* offsets between ack floor and dispatch */
    const char *dlq;         /* dead-letter queue name (borrowed) */
};
/* Create shared group (queue, group) or change its settings (o borrowed,
 * NULL: the defaults). A stream group of that name: TERN_EINVAL. */
TERN_API int tern_shared_config(struct tern_client *c,
                                const char *queue,
                                const char *group,
                                const struct tern_shared_options *o);
/* Receive up to max_msgs (1..1024) messages of shared group (queue,
 * group), each leased to this client until its ack timeout: waits up to
 * wait_ms when none is due. The consumer id is the client's producer id
 * (asked from the leader on first use). *out (OUT) as for tern_fetch,
 * with properties and a receipt per message. */
TERN_API int tern_receive(struct tern_client *c,
                          const char *queue,
                          const char *group,
                          uint32_t max_msgs,
                          uint32_t wait_ms,
                          struct tern_fetch_result **out);
/* A received message's receipt: its offset and delivery count. */
struct tern_receipt
{
    uint64_t offset;
    uint32_t count;
};
/* The receipt of message i of a tern_receive result (OUT *out). 0, or
 * TERN_EINVAL (i out of range, or not a receive result). */
TERN_API int tern_fetch_result_receipt(const struct tern_fetch_result *r,
                                       size_t i,
                                       struct tern_receipt *out);
#define TERN_SETTLE_ACK     0 /* done with it */
#define TERN_SETTLE_NACK    1 /* deliver again after delay_ms */
#define TERN_SETTLE_EXTEND  2 /* keep the lease delay_ms longer from now */
#define TERN_SETTLE_RELEASE 3 /* give it back at once */
/* Nack after the backoff level of its delivery count, as RocketMQ's
 * retries: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h
 * for deliveries 1, 2, ... (the last level beyond); delay_ms 0. */
#define TERN_SETTLE_RETRY 4
struct tern_settle_item
{
    struct tern_receipt receipt;
    int action;        /* TERN_SETTLE_* */
    uint64_t delay_ms; /* nack, extend; 0 for ack, release and retry */
    int done;          /* OUT: 1 settled, 0 stale (the lease moved on) */
};
/* Settle items[0..n) (1..1024, caller-owned; receipts in increasing
 * offset order) of (queue, group) in one request; each item's done says
 * whether its receipt still held the lease. */
TERN_API int tern_settle(struct tern_client *c,
                         const char *queue,
                         const char *group,
                         struct tern_settle_item *items,
                         size_t n);

/* ---- Single active consumer of stream groups (docs/WORKQUEUES.md) ------ */

/* Claim stream group (queue, group) for this client (its consumer id is
 * its producer id, asked from the leader on first use) for lease_ms (0:
 * the server's default, 30 s; outside the server's [limits]
 * claim_lease_min_ms..claim_lease_max_ms: TERN_EINVAL naming the key),
 * or renew the claim it holds. OUT (each may be NULL): *granted 1 when
 * this client holds the group until *until_ms (leader clock, ms since
 * the epoch), 0 when consumer *holder holds it until *until_ms. While
 * another consumer holds a group, this client's tern_group_fetch and
 * tern_group_commit on it fail with TERN_ECLAIMED (the message names the
 * holder and until when). A shared group: TERN_EINVAL. A fetch is checked
 * when it is served, its answer may arrive late: renew every lease / 3,
 * and before processing a batch that arrives with a renewal due, renew;
 * drop the batch when refused, or when granted more than lease_ms after
 * the previous grant was asked (another consumer may have held the group
 * meanwhile: group-fetch again). docs/WORKQUEUES.md. */
TERN_API int tern_group_claim(struct tern_client *c,
                              const char *queue,
                              const char *group,
                              uint32_t lease_ms,
                              int *granted,
                              uint64_t *holder,
                              uint64_t *until_ms);
/* Give up this client's claim of (queue, group) at once (nothing changes
 * when it holds none). A connection that closes releases its claims
 * too. */
TERN_API int tern_group_release(struct tern_client *c,
                                const char *queue,
                                const char *group);
/* The consumer id claims and receives use (0 before the first one). */
TERN_API uint64_t tern_client_consumer_id(const struct tern_client *c);

/* ---- Message properties (docs/MESSAGES.md) ----------------------------- */

/* Limits of one message's properties (the server refuses a produce over
 * one with TERN_EINVAL or TERN_ETOOBIG naming it; libtern checks first). */
#define TERN_KEY_MAX           256  /* key: 1..256 bytes (any bytes) */
#define TERN_TAG_MAX           64   /* tag: 1..64 bytes of [A-Za-z0-9._-] */
#define TERN_HEADERS_MAX       32   /* headers per message */
#define TERN_HEADER_NAME_MAX   64   /* header name: 1..64 bytes */
#define TERN_HEADER_VALUE_MAX  1024 /* header value: 0..1024 bytes */
#define TERN_HEADERS_BYTES_MAX 8192 /* names and values together */
#define TERN_FILTER_TAGS_MAX   16   /* tags of one fetch filter */
#define TERN_MESSAGE_GET_MAX   1000 /* messages of one get by key */
#define TERN_MESSAGE_ID_LEN    32   /* hex digits of a message id */

struct tern_header
{
    const char *name; /* NUL-terminated */
    const void *value;
    size_t value_len;
};

/* A message with properties; everything is borrowed for the call. A
 * message whose key_len is 0, tag NULL (or "") and n_headers 0 has none
 * (producer_ts_ms alone does not make a message carry properties). */
struct tern_message
{
    const void *data;
    size_t len;
    const void *key; /* key_len bytes; key_len 0: no key */
    size_t key_len;
    const char *tag; /* NUL-terminated; NULL or "": no tag */
    const struct tern_header *headers;
    size_t n_headers;
    uint64_t producer_ts_ms; /* 0: the client's clock when sent */
};

/* As tern_produce, with properties. A batch where no message has
 * properties is sent as tern_produce sends it (servers that predate
 * properties accept it); otherwise the server must know properties (an
 * older one answers TERN_EMALFORMED). TERN_EINVAL / TERN_ETOOBIG naming
 * the limit for properties over one (nothing is sent). A batch that ends
 * in TERN_ETIMEDOUT is resent with tern_produce_resend only without
 * properties. */
TERN_API int tern_produce_messages(struct tern_client *c,
                                   const char *queue,
                                   const struct tern_message *msgs,
                                   size_t n,
                                   uint64_t *base_offset);
/* As tern_produce_delayed and tern_produce_at, with properties (a key, a
 * tag, headers: the message carries them when it comes due). */
TERN_API int tern_produce_messages_delayed(struct tern_client *c,
                                           const char *queue,
                                           const struct tern_message *msgs,
                                           size_t n,
                                           uint64_t delay_ms,
                                           uint64_t *out_due_ms);
TERN_API int tern_produce_messages_at(struct tern_client *c,
                                      const char *queue,
                                      const struct tern_message *msgs,
                                      size_t n,
                                      uint64_t due_ms,
                                      uint64_t *out_due_ms);

/* Options of tern_fetch_ex and tern_group_fetch_ex. */
struct tern_fetch_options
{
    uint32_t max_msgs;  /* 0: the server's default */
    uint32_t max_bytes; /* 0: libtern's default */
    uint32_t wait_ms;   /* long poll */
    /* Tag filter "tagA || tagB || ..." (at most TERN_FILTER_TAGS_MAX
     * tags; NULL or "": none; borrowed for the call). Messages without one
     * of these tags are skipped on the server: they never cross the
     * network, and tern_fetch_result_next_offset moves past them (an
     * answer may then hold no message: fetch again from next_offset). */
    const char *tags;
    int properties; /* 1: the answer carries the messages' properties */
};
/* tern_fetch and tern_group_fetch with options o (borrowed). TERN_EINVAL
 * for a bad filter (errmsg names the tag). */
TERN_API int tern_fetch_ex(struct tern_client *c,
                           const char *queue,
                           uint64_t offset,
                           const struct tern_fetch_options *o,
                           struct tern_fetch_result **out);
/* As tern_group_fetch, it asks for the skip report: with a filter or
 * properties too, tern_fetch_result_skipped and
 * tern_fetch_result_start_offset tell where the group resumed. */
TERN_API int tern_group_fetch_ex(struct tern_client *c,
                                 const char *queue,
                                 const char *group,
                                 const struct tern_fetch_options *o,
                                 struct tern_fetch_result **out);

/* Properties of a fetched message (all borrowed until
 * tern_fetch_result_free). Without properties (not asked for, or the
 * message has none): key_len 0, tag NULL, n_headers 0, producer_ts_ms 0. */
struct tern_message_props
{
    uint64_t append_ts_ms;   /* the leader's append time */
    uint64_t producer_ts_ms; /* the producer's timestamp */
    const void *key;
    size_t key_len;
    const char *tag; /* tag_len bytes, not NUL-terminated */
    size_t tag_len;
    size_t n_headers;
    /* The message id: TERN_MESSAGE_ID_LEN hex digits (queue id, offset),
     * NUL-terminated; "" when the answer did not carry the queue id
     * (properties not asked for). */
    char id[TERN_MESSAGE_ID_LEN + 1];
};
/* Message i (< count): 0 with *out filled, TERN_EINVAL out of range. */
TERN_API int tern_fetch_result_props(const struct tern_fetch_result *r,
                                     size_t i,
                                     struct tern_message_props *out);
/* Header h (< n_headers) of message i: name (not NUL-terminated) and
 * value, borrowed until tern_fetch_result_free. 0 or TERN_EINVAL. */
TERN_API int tern_fetch_result_header(const struct tern_fetch_result *r,
                                      size_t i,
                                      size_t h,
                                      const char **name,
                                      size_t *name_len,
                                      const void **value,
                                      size_t *value_len);

/* Message get (docs/MESSAGES.md, "Query and seek"), served like a fetch
 * (see read_from), with properties. *out (OUT) as for tern_fetch; its
 * next and end offsets are 0. TERN_ENOTFOUND: no such message (by offset
 * or id; an id of another queue, or a message no longer retained). */
TERN_API int tern_message_get_offset(struct tern_client *c,
                                     const char *queue,
                                     uint64_t offset,
                                     struct tern_fetch_result **out);
/* id: TERN_MESSAGE_ID_LEN hex digits (TERN_EINVAL otherwise). */
TERN_API int tern_message_get_id(struct tern_client *c,
                                 const char *queue,
                                 const char *id,
                                 struct tern_fetch_result **out);
/* The messages with key key[0..key_len) (1..TERN_KEY_MAX bytes), newest
 * first, at most max (1..TERN_MESSAGE_GET_MAX); none is count 0. */
TERN_API int tern_message_get_key(struct tern_client *c,
                                  const char *queue,
                                  const void *key,
                                  size_t key_len,
                                  uint32_t max,
                                  struct tern_fetch_result **out);

/* ---- Message trace ---------------------------------------------------- */

/* What tern knows of one message (docs/MESSAGES.md, "Query and seek"):
 * produced, committed, and the consumer groups past it. Served by any
 * node from its index, like a message get (see read_from). */
struct tern_message_trace; /* owned result: tern_message_trace_free */
struct tern_trace_info
{
    uint64_t offset;
    char id[TERN_MESSAGE_ID_LEN + 1]; /* the message id, NUL-terminated */
    uint64_t append_ms;   /* the leader's append time (ms since the epoch) */
    uint64_t producer_id; /* 0: produced without a producer id */
    uint64_t seq;         /* seq of the batch it came in (0: none) */
    uint32_t batch_pos;   /* its position in that batch, from 0 */
    uint32_t batch_count; /* messages in that batch */
    uint32_t len;         /* payload bytes */
    uint64_t raft_index;  /* the raft index of the entry that holds it */
    uint64_t term;        /* raft term of the leader that proposed it;
                             0: unknown (written before terms were logged) */
    const void *key;      /* borrowed; key_len 0: no key */
    size_t key_len;
    const char *tag; /* borrowed, tag_len bytes, not NUL-terminated */
    size_t tag_len;
    size_t n_groups; /* groups past the message in this answer */
    int more_groups; /* 1: the server left out further groups */
};
/* A consumer group whose committed offset is past the message. commit_ms
 * and commit_index are the append time and raft index of the group's
 * latest commit (not of the commit that first passed the message); 0 when
 * unknown. */
struct tern_trace_group
{
    const char *name; /* borrowed until tern_message_trace_free */
    uint64_t committed_offset;
    uint64_t commit_ms;
    uint64_t commit_index;
};
/* Trace the message at offset of queue. *out (OUT) is caller-owned: free
 * with tern_message_trace_free. TERN_EOFFSET when the offset is no longer
 * retained (the errmsg names the queue's first offset) or not yet
 * written; TERN_ENOQUEUE, TERN_EDENIED (needs consume on the queue). */
TERN_API int tern_message_trace(struct tern_client *c,
                                const char *queue,
                                uint64_t offset,
                                struct tern_message_trace **out);
TERN_API void tern_message_trace_free(struct tern_message_trace *t);
/* The message's fields into *out (caller-owned; its pointers borrow from
 * t). */
TERN_API void tern_message_trace_info(const struct tern_message_trace *t,
                                      struct tern_trace_info *out);
/* Group i (< n_groups, in name order): 0 with *out, TERN_EINVAL. */
TERN_API int tern_message_trace_group(const struct tern_message_trace *t,
                                      size_t i,
                                      struct tern_trace_group *out);

/* Message trace with deliveries: flags TERN_TRACE_DELIVERIES asks also
 * for the message's state in each shared group of the queue (a server
 * that predates it answers TERN_EMALFORMED). flags 0 is
 * tern_message_trace. */
#define TERN_TRACE_DELIVERIES 0x1u
TERN_API int tern_message_trace_ex(struct tern_client *c,
                                   const char *queue,
                                   uint64_t offset,
                                   unsigned flags,
                                   struct tern_message_trace **out);
enum tern_delivery_state {
    TERN_DELIVERY_NEW = 0,     /* never delivered to the group */
    TERN_DELIVERY_SETTLED = 1, /* acknowledged or dead-lettered */
    TERN_DELIVERY_LEASED = 2,  /* leased to consumer_id until deadline_ms */
    TERN_DELIVERY_READY = 3,   /* waiting for a delivery from deadline_ms */
};
/* "new", "settled", "leased", "ready" or "unknown"; static. */
TERN_API const char *tern_delivery_state_name(int state);
struct tern_trace_delivery
{
    const char *group; /* borrowed until tern_message_trace_free */
    int state;         /* enum tern_delivery_state */
    uint32_t count;    /* deliveries so far */
    uint64_t consumer_id;
    uint64_t deadline_ms; /* leased: lease end; ready: not before */
};
/* Shared groups in the answer (0 without TERN_TRACE_DELIVERIES); *more
 * (OUT, may be NULL) 1 when the server left some out. */
TERN_API size_t
tern_message_trace_delivery_count(const struct tern_message_trace *t,
                                  int *more);
/* 1 when the answer carried the deliveries (asked for, and the server
 * sent them), else 0. */
TERN_API int tern_message_trace_has_deliveries(
    const struct tern_message_trace *t);
/* Delivery record i (< count, in group name order): 0 with *out,
 * TERN_EINVAL. */
TERN_API int tern_message_trace_delivery(const struct tern_message_trace *t,
                                         size_t i,
                                         struct tern_trace_delivery *out);

/* ---- Group status (docs/WORKQUEUES.md, "Group status") ---------------- */

/* The state of a queue's consumer groups, from the index of the server
 * reads go to (see read_from; it may lag the leader by replication). */
struct tern_group_status_list; /* owned result: tern_group_status_free */
struct tern_group_status
{
    const char *name;        /* borrowed until tern_group_status_free */
    int shared;              /* 1: a shared group, 0: a stream group */
    uint64_t start;          /* the queue's first retained offset */
    uint64_t end;            /* the queue's next offset */
    uint64_t committed;      /* stream: the committed offset; shared: the ack
                                floor (every offset below it is settled) */
    uint64_t next;           /* shared: first offset never delivered */
    uint64_t lag;            /* end - max(committed, start) */
    uint64_t commit_ms;      /* stream: time of the latest commit (0 unknown) */
    uint64_t ack_timeout_ms; /* shared settings */
    uint32_t max_deliveries;
    uint32_t window;
    const char *dlq;    /* shared: the DLQ's queue name; "" otherwise */
    uint64_t dlq_depth; /* messages in the DLQ (0: none yet) */
    uint64_t in_flight; /* unexpired leases */
    uint64_t ready;     /* nacked, released or expired, waiting */
    uint64_t oldest_deadline_ms; /* earliest lease end (0: none) */
    int partial;                 /* 1: the server's row bound cut the counts */
    uint64_t others_held;        /* leases of consumers not listed */
    size_t n_consumers; /* tern_group_status_consumer, most held first */
    /* Stream groups: the single active consumer holding the group, until
     * when (node clock, ms; docs/WORKQUEUES.md); 0 and 0 when none. */
    uint64_t claim_holder;
    uint64_t claim_until_ms;
};
/* Status of group of queue, or (group NULL or "") a page of the queue's
 * groups whose names sort after after (NULL or "": from the first), at
 * most max (0: the server's page size). *out (OUT) is caller-owned.
 * TERN_ENOTFOUND (no such group), TERN_ENOQUEUE, TERN_EDENIED (needs
 * consume or manage on the queue). */
TERN_API int tern_group_status(struct tern_client *c,
                               const char *queue,
                               const char *group,
                               const char *after,
                               uint32_t max,
                               struct tern_group_status_list **out);
TERN_API void tern_group_status_free(struct tern_group_status_list *l);
/* Groups in the answer; *more (OUT, may be NULL) 1 when groups follow the
 * last one (ask again with its name as after). */
TERN_API size_t tern_group_status_count(const struct tern_group_status_list *l,
                                        int *more);
/* Group i (< count): 0 with *out, TERN_EINVAL. */
TERN_API int tern_group_status_get(const struct tern_group_status_list *l,
                                   size_t i,
                                   struct tern_group_status *out);
/* Consumer j (< n_consumers) of group i: 0 with *id and *held (leases it
 * holds), TERN_EINVAL. */
TERN_API int tern_group_status_consumer(const struct tern_group_status_list *l,
                                        size_t i,
                                        size_t j,
                                        uint64_t *id,
                                        uint32_t *held);

/* ---- Cluster status --------------------------------------------------- */

enum tern_role {
    TERN_ROLE_UNAVAILABLE = 0,
    TERN_ROLE_FOLLOWER = 1,
    TERN_ROLE_CANDIDATE = 2,
    TERN_ROLE_LEADER = 3,
};
/* "unavailable", "follower", "candidate", "leader" or "unknown"; static. */
TERN_API const char *tern_role_name(int role);

/* Status of one server: the one reads go to (see read_from), or address
 * when not NULL ("host:port", borrowed for the call). *out (OUT) is
 * caller-owned: free with tern_status_free; strings from the accessors are
 * borrowed until then. */
TERN_API int tern_cluster_status(struct tern_client *c,
                                 const char *address,
                                 struct tern_status **out);
TERN_API const char *tern_status_server(const struct tern_status *s);
TERN_API uint64_t tern_status_node_id(const struct tern_status *s);
TERN_API int tern_status_role(const struct tern_status *s);
TERN_API uint64_t tern_status_leader_id(const struct tern_status *s);
TERN_API const char *tern_status_leader_address(const struct tern_status *s);
TERN_API uint64_t tern_status_term(const struct tern_status *s);
TERN_API uint64_t tern_status_commit_index(const struct tern_status *s);
TERN_API uint64_t tern_status_last_applied(const struct tern_status *s);
TERN_API int tern_status_writable(const struct tern_status *s);
TERN_API const char *tern_status_transport(const struct tern_status *s);
TERN_API const char *tern_status_durability(const struct tern_status *s);
TERN_API size_t tern_status_member_count(const struct tern_status *s);
/* Member i (< count), or 0 / NULL when out of range. */
TERN_API uint64_t tern_status_member_id(const struct tern_status *s, size_t i);
TERN_API const char *tern_status_member_raft_address(
    const struct tern_status *s,
    size_t i);
TERN_API const char *tern_status_member_client_address(
    const struct tern_status *s,
    size_t i);
/* Pending delayed messages in the server's index: 0 with *pending and
 * *oldest_due_ms (0: none), or TERN_ENOTFOUND from a server that predates
 * the count. */
TERN_API int tern_status_timers(const struct tern_status *s,
                                uint64_t *pending,
                                uint64_t *oldest_due_ms);
/* The answering server's software version ("MAJOR.MINOR.PATCH"), or ""
 * from a server that predates it. */
TERN_API const char *tern_status_version(const struct tern_status *s);

/* Hand the leadership over to node to_id, or with to_id 0 to a voter
 * whose log is caught up (the leader picks it), and wait until the new
 * leader has taken over (about a round trip when the target is caught
 * up; the leader gives up after one election timeout). Admin only. Sent
 * to the leader (found as writes are). *new_leader (OUT, may be NULL):
 * the id of the node that leads now. Asking for the node that leads
 * already succeeds at once. TERN_ENOTVOTER: to_id is not a node of the
 * cluster, or not a voter, or there is no other voter; TERN_ETRANSFER:
 * the transfer did not complete (the old leader may lead on);
 * TERN_EBUSY: a transfer is under way already; TERN_EDENIED: not an
 * admin. Details in tern_client_errmsg. */
TERN_API int tern_cluster_transfer(struct tern_client *c,
                                   uint64_t to_id,
                                   uint64_t *new_leader);
/* Membership (docs/MEMBERSHIP.md): the role of the server answering in
 * the cluster configuration it knows, and the role of member i, as enum
 * tern_member_role; -1 from a server that predates membership changes
 * (or i out of range). */
TERN_API int tern_status_self_role(const struct tern_status *s);
TERN_API int tern_status_member_role(const struct tern_status *s, size_t i);
TERN_API void tern_status_free(struct tern_status *s);

/* ---- Membership changes (docs/MEMBERSHIP.md) ----------------------------- */

enum tern_member_role {
    TERN_MEMBER_STANDBY = 0, /* replicated to, does not vote */
    TERN_MEMBER_VOTER = 1,
    TERN_MEMBER_SPARE = 2,  /* in the configuration, not replicated to */
    TERN_MEMBER_ABSENT = 3, /* not in the configuration */
};
/* "standby", "voter", "spare", "absent" or "unknown"; static. */
TERN_API const char *tern_member_role_name(int role);

/* Add node id to the cluster: the leader adds it as a non-voter,
 * replicates to it (snapshot + bulk copy, then entries) and makes it a
 * voter once it has caught up. The node must be running with an empty
 * data dir in join mode (ternd --join true, or [peers] without itself).
 * raft_address and client_address are its "host:port" addresses
 * (borrowed for the call; the client address is kept in the replicated
 * configuration, for redirects and status on every node). timeout_ms
 * bounds the change on the leader (0: the server's default, 120 s); the
 * call waits that long plus the client's request timeout. 0 once the node
 * is a voter; else TERN_ECHANGING (another change is under way),
 * TERN_EINVAL (already a voter, an id or raft address of another
 * member), TERN_ETIMEDOUT / TERN_ENOCONN / TERN_ELEADERSHIPLOST (the
 * node keeps the role it reached, named in tern_client_errmsg: call again
 * to go on, or remove it), TERN_ENOTLEADER, TERN_EDENIED (admin only). */
TERN_API int tern_cluster_add(struct tern_client *c,
                              uint64_t id,
                              const char *raft_address,
                              const char *client_address,
                              uint32_t timeout_ms);
/* Remove node id from the cluster configuration; returns once the new
 * configuration is committed. Removing the leader is allowed (it steps
 * down once committed and the others elect a leader). TERN_ENOTMEMBER,
 * TERN_ELASTVOTER (the only voter), TERN_ECHANGING, TERN_ENOTLEADER,
 * TERN_EDENIED, TERN_ELEADERSHIPLOST (outcome unknown: check with
 * tern_cluster_status). */
TERN_API int tern_cluster_remove(struct tern_client *c, uint64_t id);

/* ---- Replication latency ----------------------------------------------- */

/* One server's replication latency summary: on a leader, the time from its
 * local append of a batch of entries to the moment its commit index covers
 * the batch (monotonic nanoseconds), over every append since the server
 * started or since the last reset. Only a leader samples: a follower
 * answers count 0. Quantiles are upper bounds of histogram buckets (at
 * most 6.25% above the value); every latency is 0 when count is 0. A
 * plain struct of scalars, filled by tern_replication_stats (strings are
 * copied and NUL-terminated, truncated to fit). */
struct tern_repl_stats
{
    char server[128]; /* "host:port" that answered */
    uint64_t node_id;
    int role;            /* enum tern_role */
    char transport[32];  /* the node's transport ("tcp", "shm+tcp", ...) */
    char durability[16]; /* "disk" or "memory" */
    uint64_t count;      /* samples */
    uint64_t dropped;    /* appends not sampled (too many in flight) */
    uint64_t mean_ns;
    uint64_t min_ns;
    uint64_t p50_ns;
    uint64_t p90_ns;
    uint64_t p99_ns;
    uint64_t p999_ns;
    uint64_t max_ns;
};

/* Fetch the replication latency summary of one server: the one reads go
 * to (see read_from; by default the leader), or address when not NULL
 * ("host:port", borrowed for the call). reset != 0: the server starts its
 * counters over after answering (the answer still has the old ones).
 * *out (OUT, caller-owned storage) is filled on success, zeroed on
 * failure. */
TERN_API int tern_replication_stats(struct tern_client *c,
                                    const char *address,
                                    int reset,
                                    struct tern_repl_stats *out);

/* One stage of the commit path (what `tern bench --stages` prints): the
 * leader's histogram of that stage over the same samples and reset as
 * tern_repl_stats. Names (raft/include/repl.h enum repl_stage):
 * "leader_disk" (leader append -> its own append durable),
 * "append_to_post" (-> first AppendEntries carrying it sent),
 * "post_to_result" (-> first follower result covering it: the follower's
 * durable append plus the round trip, as seen by the leader),
 * "result_to_commit", "apply" (one FSM apply); "f_*" are a follower's
 * own stages (count 0 on a leader). */
#define TERN_REPL_MAX_STAGES 32
struct tern_repl_stage
{
    char name[32]; /* NUL-terminated */
    uint64_t count;
    uint64_t p50_ns; /* histogram bucket upper bounds, as tern_repl_stats */
    uint64_t p99_ns;
};

/* tern_replication_stats plus the stage breakdown: stages[0..*n_stages)
 * (OUT, caller-owned, at most max entries; extra stages are dropped) in
 * the server's order. reset as tern_replication_stats (the stages start
 * over too). A server that predates the stage breakdown answers
 * TERN_EINVAL. *out and *n_stages zeroed on failure. */
TERN_API int tern_replication_stages(struct tern_client *c,
                                     const char *address,
                                     int reset,
                                     struct tern_repl_stats *out,
                                     struct tern_repl_stage *stages,
                                     unsigned max,
                                     unsigned *n_stages);

/* ---- Backups (docs/OPERATIONS.md, "Backup and restore") ---- */

/* What a backup holds, from its manifest. */
struct tern_backup_info
{
    char server[128];      /* "host:port" that answered */
    char cluster[65];      /* [node] cluster_name of the node backed up */
    uint64_t node_id;      /* that node */
    uint64_t term;         /* its raft term when the backup began */
    uint64_t last_applied; /* raft index the backup covers */
    uint64_t log_start;    /* the commit-log range it holds */
    uint64_t log_end;
    uint32_t n_files;
    uint64_t total_bytes;
    uint64_t created_ms; /* the node's wall clock when it was written */
};
#define TERN_BACKUP_VERIFY    1u
#define TERN_BACKUP_ANY_STATE 2u
/* Ask one server (address "host:port", borrowed; NULL: where reads go) to
 * write a consistent online backup of its state into dir, an absolute
 * directory on that server's host that must not exist or be empty and
 * lie outside its data directory; with flags TERN_BACKUP_VERIFY, to check
 * the backup at dir instead. The backup holds everything acknowledged
 * before the call: the call first reads the writable leader's commit
 * index and the server waits until it has applied it (TERN_ENOTLEADER
 * when no writable leader answers; TERN_BACKUP_ANY_STATE skips this and
 * backs up the server's state as it is, e.g. of a cluster without a
 * quorum). Needs admin permission. Waits up to the request timeout plus
 * timeout_ms for the copy. *out (OUT, caller-owned storage; may be NULL)
 * is filled on success. TERN_EBACKUP while a backup of that server runs,
 * TERN_EFULL when its disk lacks the room, TERN_EBUSY when it lags the
 * leader too far, TERN_ECORRUPT when verification fails;
 * tern_client_errmsg says why. */
TERN_API int tern_admin_backup(struct tern_client *c,
                               const char *address,
                               const char *dir,
                               uint32_t flags,
                               uint32_t timeout_ms,
                               struct tern_backup_info *out);

/* ---- Users, grants, namespaces (cluster administrators) --------------- */

/* The list calls below ask the server page by page and return one whole
 * list, in order; a list of more than TERN_ADMIN_LIST_MAX entries is
 * TERN_ELIMIT (the entries are held in memory). Entries set or deleted
 * while the pages are read may or may not be listed. Needs a server that
 * pages these lists (an older one answers TERN_EMALFORMED). */
#define TERN_ADMIN_LIST_MAX 1000000u

/* User flags (tern_user_set, tern_user_list_flags). */
#define TERN_USER_ADMIN 0x1u /* cluster administrator */
#define TERN_USER_CERT                                                         \
    0x2u /* may log in by a client certificate whose                           \
            subject CN is the user name */
/* Permission bits of a grant. ADMIN implies all the others. */
#define TERN_PERM_PRODUCE 0x1u
#define TERN_PERM_CONSUME 0x2u
#define TERN_PERM_MANAGE  0x4u /* create / delete queues */
#define TERN_PERM_ADMIN   0x8u /* namespace administration */
#define TERN_PERM_ALL     0xfu

/* Size of a buffer that holds any text credential, with its NUL. */
#define TERN_CREDENTIAL_TEXT_MAX 256

/* Derive a SCRAM-SHA-256 credential from password (NUL-terminated,
 * printable ASCII, borrowed) with a fresh random salt, locally (no
 * server), and write its text form
 * "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"
 * (NUL-terminated) into buf (caller-owned, cap >=
 * TERN_CREDENTIAL_TEXT_MAX). iterations 0: the default (4096). For
 * [security] bootstrap_admin_cred and tern_user_set_cred. Returns 0 or
 * TERN_EINVAL (bad password, iterations or cap). */
TERN_API int tern_credential_make(const char *password,
                                  uint32_t iterations,
                                  char *buf,
                                  size_t cap);

/* Create user, or replace its flags and credential (user: 1..128 bytes
 * of [A-Za-z0-9._-]; strings borrowed for the call). The SCRAM credential
 * is derived here from password (tern_credential_make), so the password
 * never travels; password NULL: no credential, a certificate-only user
 * (flags must then have TERN_USER_CERT). flags: TERN_USER_* bits. Writes
 * go to the leader like tern_queue_create. Returns 0, TERN_EINVAL,
 * TERN_EBADNAME, or the server's refusal (TERN_EAUTH, TERN_EDENIED: not a
 * cluster administrator). */
TERN_API int tern_user_set(struct tern_client *c,
                           const char *user,
                           const char *password,
                           uint32_t flags);
/* As tern_user_set with a credential already made: cred is its text form
 * (tern_credential_make, `tern user hash`; borrowed for the call), NULL or
 * "" for none (flags must then have TERN_USER_CERT). TERN_EINVAL or
 * TERN_ECORRUPT for a credential that does not parse. */
TERN_API int tern_user_set_cred(struct tern_client *c,
                                const char *user,
                                const char *cred,
                                uint32_t flags);
/* Delete user and its grants. TERN_ENOTFOUND when there is no such user
 * (returned only when the first attempt got it, as for
 * tern_queue_delete). */
TERN_API int tern_user_delete(struct tern_client *c, const char *user);
/* Every user, in name order. *out (OUT) is caller-owned: free with
 * tern_user_list_free; strings borrowed until then. */
TERN_API int tern_user_list(struct tern_client *c, struct tern_user_list **out);
TERN_API size_t tern_user_list_count(const struct tern_user_list *l);
/* Entry i (< count); NULL / 0 when out of range. */
TERN_API const char *tern_user_list_name(const struct tern_user_list *l,
                                         size_t i);
TERN_API uint32_t tern_user_list_flags(const struct tern_user_list *l,
                                       size_t i);
/* 1 when the user has a SCRAM credential (can log in by password). */
TERN_API int tern_user_list_has_password(const struct tern_user_list *l,
                                         size_t i);
TERN_API void tern_user_list_free(struct tern_user_list *l);

/* Grant user perms (TERN_PERM_* bits, 1..15, replacing an earlier grant
 * of the same key) on the queues of namespace ns that pattern matches: a
 * queue name, a prefix followed by '*', or "*" (every queue; also what
 * namespace-wide operations such as the queue list need). Strings
 * borrowed for the call. TERN_ENOTFOUND: no such user or namespace. */
TERN_API int tern_acl_set(struct tern_client *c,
                          const char *user,
                          const char *ns,
                          const char *pattern,
                          uint32_t perms);
/* Remove the grant (user, ns, pattern). TERN_ENOTFOUND: none (returned
 * only when the first attempt got it). */
TERN_API int tern_acl_delete(struct tern_client *c,
                             const char *user,
                             const char *ns,
                             const char *pattern);
/* The grants of user (NULL: every user's). *out (OUT) is caller-owned:
 * free with tern_acl_list_free; strings borrowed until then. */
TERN_API int tern_acl_list(struct tern_client *c,
                           const char *user,
                           struct tern_acl_list **out);
TERN_API size_t tern_acl_list_count(const struct tern_acl_list *l);
TERN_API const char *tern_acl_list_user(const struct tern_acl_list *l,
                                        size_t i);
TERN_API const char *tern_acl_list_namespace(const struct tern_acl_list *l,
                                             size_t i);
TERN_API const char *tern_acl_list_pattern(const struct tern_acl_list *l,
                                           size_t i);
TERN_API uint32_t tern_acl_list_perms(const struct tern_acl_list *l, size_t i);
TERN_API void tern_acl_list_free(struct tern_acl_list *l);

/* Create namespace ns (1..64 bytes of [A-Za-z0-9._-]), or replace its
 * quotas: at most max_queues queues, max_bytes bytes of messages stored,
 * produce_bytes_per_s bytes produced per second (0: unlimited). */
TERN_API int tern_namespace_set(struct tern_client *c,
                                const char *ns,
                                uint64_t max_queues,
                                uint64_t max_bytes,
                                uint64_t produce_bytes_per_s);
/* Delete an empty namespace and its grants. TERN_EINVAL: it holds queues,
 * or it is "default"; TERN_ENOTFOUND: no such namespace (only when the
 * first attempt got it). */
TERN_API int tern_namespace_delete(struct tern_client *c, const char *ns);
/* Every namespace ("default" included), in name order. *out (OUT) is
 * caller-owned: free with tern_namespace_list_free. */
TERN_API int tern_namespace_list(struct tern_client *c,
                                 struct tern_namespace_list **out);
TERN_API size_t tern_namespace_list_count(const struct tern_namespace_list *l);
TERN_API const char *tern_namespace_list_name(
    const struct tern_namespace_list *l,
    size_t i);
TERN_API uint64_t
tern_namespace_list_max_queues(const struct tern_namespace_list *l, size_t i);
TERN_API uint64_t
tern_namespace_list_max_bytes(const struct tern_namespace_list *l, size_t i);
TERN_API uint64_t
tern_namespace_list_produce_bytes_per_s(const struct tern_namespace_list *l,
                                        size_t i);
TERN_API void tern_namespace_list_free(struct tern_namespace_list *l);

#ifdef __cplusplus
}
#endif

#endif /* TERN_TERN_H */
