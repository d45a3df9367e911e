/*
 * tern client wire protocol (prefix proto_), shared by libtern (client/)
 * and ternd's client server (node/). Library tern_proto; depends only on
 * common/.
 *
 * Frame = 24-byte header + body. All integers little-endian.
 *
 *   offset size field
 *   0      2    magic       0x6E74 ("tn")
 *   2      1    version     TERN_PROTO_VERSION (1) or PROTO_VERSION_XXH3
 *                           (2): which checksum the frame carries
 *   3      1    op          request op; responses set bit 0x80
 *   4      4    body_len    bytes after the header (<= receiver's limit)
 *   8      8    request_id  chosen by the client, echoed in the response;
 *                           many requests may be in flight (pipelining),
 *                           responses may come back in any order
 *   16     4    status      int32: 0 in requests; 0 or a tern error code in
 *                           responses
 *   20     4    checksum    version 1: tern_checksum32 over header bytes
 *                           0..19, then the body. Version 2:
 *                           tern_checksum32_xxh3 of the body seeded with
 *                           tern_checksum32 of header bytes 0..19 (XXH3,
 *                           several times faster than XXH32 on the large
 *                           answers of a consumer and the batches of a
 *                           producer)
 *
 * Versions. The two versions differ only in the checksum. A receiver of
 * this release takes both; older ones take version 1 only (and close the
 * connection on another), so each side uses version 2 only once the
 * other has said it takes it, with HELLO (below): libtern sends HELLO
 * asking for PROTO_FEATURE_XXH3 before its first request on every
 * connection, without waiting for the answer. A server that takes the
 * feature answers the message-carrying requests (FETCH, GROUP_FETCH,
 * MESSAGE_GET) of that connection in version 2 from then on, its other
 * answers in version 1; an older server answers HELLO with TERN_EINVAL
 * ("unknown request op") and the connection goes on in version 1.
 * libtern sends its requests in version 2 once HELLO's answer named the
 * feature, and in version 1 again after every reconnect.
 *
 * Body primitives: u8/u16/u32/u64; str = u16 length + bytes (no NUL);
 * blob = u32 length + bytes.
 *
 * Error responses (status != 0): body = str message, then for
 * TERN_ENOTLEADER: u64 leader_id (0 unknown), str leader client address
 * ("" unknown). A receiver that cannot parse a frame answers with an error
 * frame (op = request op | 0x80, or PROTO_OP_ERROR when the header itself is
 * bad) and closes the connection if it cannot find the next frame boundary
 * (bad magic, bad version, oversized body, bad checksum).
 *
 * Request / response bodies:
 *   QUEUE_CREATE  req: str queue                     resp: (empty)
 *   QUEUE_DELETE  req: str queue                     resp: (empty)
 *   QUEUE_LIST    req: (empty) | str after, u32 max_count
 *                 resp: u32 n, n x {str name, u64 start_offset,
 *                                   u64 next_offset}, [u8 more]
 *                 Paged (added after the first release of version 1, like
 *                 FETCH's flags byte): a body with "after" (the last name
 *                 of the previous page; "" = from the first queue) and
 *                 max_count (0 = the server's page size, list_page_max)
 *                 asks for the queues whose names sort after "after", in
 *                 name order; the answer then ends with u8 more (1: more
 *                 queues follow the last one listed, ask again with it as
 *                 "after"; 0: that was the last page). A page holds at
 *                 most max_count and list_page_max queues and fits in
 *                 1 MiB and half of the server's max_frame_bytes (at least
 *                 one queue). The empty body of an older client still
 *                 works: its answer has no more byte and lists every
 *                 queue, or, when they do not fit in max_frame_bytes, is
 *                 TERN_ELIMIT. A server without paging answers a paged
 *                 request TERN_EMALFORMED (libtern does not fall back).
 *   PRODUCE       req: str queue, u64 producer_id (0 = none), u64 seq,
 *                      u32 n, n x blob message,
 *                      [u8 flags = PROTO_PRODUCE_PROPS (1), n x blob props]
 *                      The tail (message properties, docs/MESSAGES.md) is
 *                      present only when some message has properties;
 *                      props is that message's properties block (format:
 *                      index/cmd.c, "Properties block"; empty = none). The
 *                      decoder checks the framing only; the server checks
 *                      each block's limits before proposing (TERN_EINVAL /
 *                      TERN_ETOOBIG naming the limit). Old server, new
 *                      client: a produce with properties is answered
 *                      TERN_EMALFORMED (trailing bytes), one without them
 *                      is served as before. New server, old client: no
 *                      tail, served as before.
 *                 resp: u64 base_offset, u32 count, u8 duplicate
 *   FETCH         req: str queue, u64 offset, u32 max_msgs, u32 max_bytes,
 *                      u32 wait_ms (long poll when nothing to read),
 *                      [u8 flags] (present only when not 0; bit 0
 *                      PROTO_FETCH_LEADER: only a writable leader answers,
 *                      any other node answers TERN_ENOTLEADER with its
 *                      leader hint; other bits must be 0). Added after the
 *                      first release of version 1: a server that does not
 *                      know the byte answers TERN_EMALFORMED, which is
 *                      why it is left out when 0 (libtern does not fall
 *                      back: upgrade servers first).
 *                      Bit 1 PROTO_FETCH_PROPS: the answer carries each
 *                      message's properties. Bit 2 PROTO_FETCH_TAGS: a tag
 *                      filter follows the flags byte: u8 n (1..16),
 *                      n x (u8 len 1..64, tag of [A-Za-z0-9._-]); only
 *                      messages with one of these tags are sent, the
 *                      others are skipped on the server (next_offset moves
 *                      past them; an answer may hold no message and still
 *                      advance). Added with message properties: a server
 *                      that predates them answers TERN_EMALFORMED.
 *                 resp: u64 next_offset, u64 end_offset, u32 n,
 *                       n x {u64 offset, u64 timestamp_ms, blob message}
 *                       with PROTO_FETCH_PROPS:
 *                       n x {u64 offset, u64 timestamp_ms (append time),
 *                            blob message, blob props (empty = none)},
 *                       then u64 queue_id (with an offset, the message
 *                       id)
 *                 resp, runs layout (a connection whose HELLO took
 *                       PROTO_FEATURE_RUNS; FETCH only, with or without
 *                       flags): u64 next_offset, u64 end_offset, u32 n
 *                       (messages), u32 n_parts (1..n when n > 0, else
 *                       0), n_parts x part, u64 queue_id. A part is
 *                       u8 kind, then
 *                       PROTO_PART_RUN (1) / PROTO_PART_RUN_PROPS (2):
 *                         u64 offset (of its first message), u64
 *                         timestamp_ms (append time, all of them), u32
 *                         count (>= 1), u32 len, len bytes: count x
 *                         {u32 len, message} (RUN) or count x {u32 len,
 *                         message, u32 props_len, props} (RUN_PROPS;
 *                         props_len 0: none), at offset, offset + 1, ...
 *                         These are the bytes of the producer's batch
 *                         as the commit log holds them, copied once: a
 *                         message costs 4 bytes of framing (8 with
 *                         properties) where the other layout spends 20
 *                         (24), and the server builds no record per
 *                         message.
 *                       PROTO_PART_MESSAGE (3): u64 offset, u64
 *                         timestamp_ms, blob message, blob props (a
 *                         message that is not in a producer's batch: a
 *                         delayed one, a dead letter; and every message
 *                         of a fetch with a tag filter).
 *                       Offsets increase strictly across the answer; the
 *                       counts add up to n. Properties travel whether or
 *                       not PROTO_FETCH_PROPS was asked (and count in
 *                       max_bytes); a client that did not ask ignores
 *                       them.
 *   GROUP_FETCH   req: str queue, str group, u32 max_msgs, u32 max_bytes,
 *                      u32 wait_ms, [u8 flags, tag filter] (present only
 *                      when not 0): bit 0 PROTO_GROUP_FETCH_SKIPPED asks
 *                      for the skip tail below (added with retention);
 *                      bits 1 PROTO_FETCH_PROPS and 2 PROTO_FETCH_TAGS
 *                      and the tag filter as FETCH's (added with message
 *                      properties); other bits must be 0. An older server
 *                      answers the byte TERN_EMALFORMED; libtern does not
 *                      fall back.
 *                 resp: as FETCH (with properties when asked), starting
 *                       at the group's committed offset, or at the
 *                       queue's first offset when retention trimmed the
 *                       messages at the committed offset; then, only when
 *                       the request had PROTO_GROUP_FETCH_SKIPPED, the
 *                       skip tail: u64 skipped (messages between the
 *                       committed offset and the first offset that the
 *                       group never read: first_offset - committed; 0
 *                       when the committed offset is at or above the
 *                       first offset, or when the group never committed),
 *                       u64 first_offset (the offset the answer starts
 *                       at); skipped <= first_offset. The tail is the
 *                       last 16 bytes of the body
 *                       (proto_decode_group_fetch_resp).
 *   MESSAGE_GET   req: str queue, u8 by, then by PROTO_GET_OFFSET (1):
 *                      u64 offset; PROTO_GET_ID (2): u64 queue_id (>= 1),
 *                      u64 offset; PROTO_GET_KEY (3): blob key
 *                      (1..PROTO_MAX_KEY bytes), u32 max (1..
 *                      PROTO_MESSAGE_GET_MAX)
 *                 resp: u64 queue_id, u32 n, n x {u64 offset,
 *                       u64 timestamp_ms, blob message, blob props}; by
 *                       key the newest first. A message that does not
 *                       exist (or an id of another queue) is
 *                       TERN_ENOTFOUND; a key without messages is n = 0.
 *                       Op 25, added with message properties: an older
 *                       server answers TERN_EINVAL "unknown request op".
 *   MESSAGE_TRACE req: str queue, u64 offset
 *                 resp: u64 queue_id, u64 offset, u64 append_ms,
 *                       u64 producer_id (0 none), u64 seq (of its batch;
 *                       0 none), u32 batch_pos (its position in the batch,
 *                       < batch_count), u32 batch_count, u32 len (message
 *                       bytes), u64 raft_index (the entry holding it),
 *                       u64 term (of the leader that proposed the entry;
 *                       0 unknown: an entry older than the TERM command),
 *                       blob key (0..PROTO_MAX_KEY bytes, empty = none),
 *                       str tag (0..PROTO_MAX_TAG, empty = none),
 *                       u32 n, n x {str group, u64 next_offset (> offset),
 *                       u64 commit_ms, u64 commit_index (the group's
 *                       latest GROUP_COMMIT: its append time and raft
 *                       index, 0 unknown)}, u8 more (1: more groups are
 *                       past the message than the answer lists)
 *                       A trimmed offset is TERN_EOFFSET naming the first
 *                       offset, as FETCH. Op 26, added with message trace:
 *                       an older server answers TERN_EINVAL "unknown
 *                       request op".
 *   GROUP_COMMIT  req: str queue, str group, u64 next_offset
 *                 resp: (empty)
 *   STATUS        req: (empty)
 *                 resp: u64 node_id, u8 role (repl_role numbering),
 *                       u64 leader_id, str leader_client_address, u64 term,
 *                       u64 commit_index, u64 last_applied, u8 writable,
 *                       str transport, str durability,
 *                       u32 n, n x {u64 id, str raft_address,
 *                                   str client_address}
 *   STATS         req: u8 flags (bit 0 PROTO_STATS_RESET: start the
 *                      node's latency counters over after this answer;
 *                      bit 1 PROTO_STATS_STAGES: append the stage tail;
 *                      other bits must be 0; an older server answers
 *                      TERN_EINVAL to bit 1)
 *                 resp: u64 node_id, u8 role (repl_role numbering),
 *                       str transport, str durability,
 *                       u64 count, u64 dropped, u64 sum_ns, u64 min_ns,
 *                       u64 p50_ns, u64 p90_ns, u64 p99_ns, u64 p999_ns,
 *                       u64 max_ns
 *                 The node's replication latency (raft/repl.h
 *                 repl_get_latency: leader local append -> commit covers
 *                 it, monotonic ns) since start or the last reset; the
 *                 quantiles are histogram bucket upper bounds (at
 *                 most 6.25% above), 0 when count is 0. Only a leader samples;
 *                 any node answers. Served on any node, never redirected.
 *                 With PROTO_STATS_STAGES, a tail after max_ns: u8 version
 *                 (PROTO_STATS_TAIL_VERSION, 2: the answer without a tail
 *                 is version 1), u8 n (at most PROTO_STATS_MAX_STAGES),
 *                 n x {str name (at most PROTO_STATS_MAX_STAGE_NAME
 *                 bytes), u64 count, u64 p50_ns, u64 p99_ns}: the commit
 *                 path's stages (raft/include/repl.h enum repl_stage,
 *                 repl_stage_name), same histograms and reset as the
 *                 total. A later version appends fields after the
 *                 stages; a decoder reads what it knows and skips the
 *                 rest.
 *
 * Security metadata (ops 10..19, added after the first release of version
 * 1: an older server answers TERN_EINVAL "unknown request op"; design in
 * docs/AUTH.md). user = str of 1..PROTO_MAX_USER bytes, namespace = str of
 * 1..PROTO_MAX_NAMESPACE bytes, both passing tern_name_valid; pattern = str
 * "*", a queue name, or a prefix of one followed by '*'. Writes go through
 * Raft on a writable leader (TERN_ENOTLEADER elsewhere); lists are served
 * by any node from its index.
 *   USER_SET      req: str user, u32 flags (bit 0 PROTO_USER_ADMIN, bit 1
 *                      PROTO_USER_CERT; others 0), blob credential (0..255
 *                      bytes, auth/scram.c binary form, made by the client
 *                      so that the password never travels; empty only with
 *                      PROTO_USER_CERT)
 *                 resp: (empty)
 *   USER_DELETE   req: str user                     resp: (empty)
 *   USER_LIST     req: (empty) | str after, u32 max_count
 *                 resp: u32 n, n x {str user, u32 flags, u8 has_credential},
 *                       [u8 more]
 *   ACL_SET       req: str user, str namespace, str pattern, u32 perms
 *                      (1..15: PROTO_PERM_PRODUCE 1, CONSUME 2, MANAGE 4,
 *                      ADMIN 8)
 *                 resp: (empty)
 *   ACL_DELETE    req: str user, str namespace, str pattern
 *                 resp: (empty)
 *   ACL_LIST      req: str user ("" = every user's grants)
 *                      [, str after_user, str after_namespace,
 *                         str after_pattern, u32 max_count]
 *                 resp: u32 n, n x {str user, str namespace, str pattern,
 *                                   u32 perms}, [u8 more]
 *   NAMESPACE_SET req: str namespace, u64 max_queues, u64 max_bytes,
 *                      u64 produce_bytes_per_s (0 = unlimited); creates it
 *                      or replaces its quotas
 *                 resp: (empty)
 *   NAMESPACE_DELETE req: str namespace             resp: (empty)
 *   NAMESPACE_LIST req: (empty) | str after, u32 max_count
 *                 resp: u32 n, n x {str namespace, u64 max_queues,
 *                                   u64 max_bytes, u64 produce_bytes_per_s},
 *                       [u8 more]
 *   The three lists page as QUEUE_LIST does (the paging tail was added
 *   after ops 10..19; the tail is the whole body of USER_LIST and
 *   NAMESPACE_LIST and follows the user filter of ACL_LIST). A request
 *   with the tail asks for the entries that sort after its cursor, the
 *   last entry of the previous page: a user name (USER_LIST), a
 *   namespace name (NAMESPACE_LIST), or a grant's (user, namespace,
 *   pattern) (ACL_LIST; grants sort by user, then namespace, then
 *   pattern, bytewise); an empty cursor (all three strings "" for
 *   ACL_LIST, else each a valid name or pattern) is the start.
 *   max_count 0 is the server's page size (list_page_max). The answer to
 *   such a request ends with u8 more (1: entries follow the last one
 *   listed, ask again with it as the cursor; 0: the last page) and holds
 *   at most max_count and list_page_max entries in 1 MiB and half of
 *   max_frame_bytes (at least one entry). A request without the tail (an
 *   older client) is answered without the more byte, with every entry,
 *   or TERN_ELIMIT when they do not fit in max_frame_bytes. A server
 *   without paging answers the tail TERN_EMALFORMED.
 *   PRODUCER_INIT req: (empty)
 *                 resp: u64 producer_id (issued by the leader through Raft,
 *                       owned by the connection's user)
 * Errors of the writes: TERN_ENOTFOUND (no such user, namespace or grant),
 * TERN_EINVAL (deleting namespace "default").
 *
 * Authentication (ops 20..21, added after ops 10..19; docs/AUTH.md):
 *   AUTH_START    req: str mechanism ("SCRAM-SHA-256", or "EXTERNAL" for
 *                      the TLS client certificate; 1..PROTO_MAX_MECHANISM
 *                      bytes of [A-Z0-9_-]), str namespace ("" = the
 *                      namespace "default", else a namespace name), blob
 *                      data (0..PROTO_MAX_AUTH_DATA bytes: SCRAM's
 *                      client-first-message; EXTERNAL: "" or the user name,
 *                      which must then be the certificate's CN)
 *                 resp: blob data (SCRAM's server-first-message; EXTERNAL:
 *                       empty, the connection is authenticated)
 *   AUTH_CONTINUE req: blob data (SCRAM's client-final-message)
 *                 resp: blob data (SCRAM's server-final-message; the
 *                       connection is authenticated once it is sent)
 * A failed exchange is answered TERN_EAUTH and the server closes the
 * connection after the answer. A connection authenticates once.
 *
 * Retention (ops 22..24 and QUEUE_CREATE's tail, added after ops 20..21;
 * docs/MESSAGES.md "Retention"; an older server answers the ops
 * TERN_EINVAL "unknown request op" and a QUEUE_CREATE with a tail
 * TERN_EMALFORMED). settings = u64 max_age_ms, u64 max_bytes,
 * u64 max_messages (0 = no limit), u8 overflow (0 drop-oldest, 1 reject;
 * others TERN_EMALFORMED).
 *   QUEUE_CREATE  req: str queue, [settings] (absent: the built-in
 *                      defaults, max_age 72 h, drop-oldest)
 *   QUEUE_UPDATE  req: str queue, u32 mask (PROTO_SET_MAX_AGE 1,
 *                      MAX_BYTES 2, MAX_MESSAGES 4, OVERFLOW 8; at least
 *                      one, others 0), settings (fields outside mask are
 *                      ignored: left unchanged)
 *                 resp: (empty)
 *   QUEUE_INFO    req: str queue
 *                 resp: u64 start_offset (first retained offset),
 *                       u64 next_offset, u64 bytes (retained), u64
 *                       created_index, settings
 *   OFFSET_FOR_TIME req: str queue, u64 time_ms
 *                 resp: u64 offset (the first with append time >= time_ms,
 *                       or the queue's next offset when none)
 * Errors: TERN_EQUEUEFULL (a produce refused by max_bytes/max_messages),
 * TERN_EOFFSET for a FETCH below the first offset (the message names it).
 *
 * Shared groups (ops 27..29, added after ops 25..26; docs/WORKQUEUES.md
 * "Shared groups"; an older server answers TERN_EINVAL "unknown request
 * op"). group = str of a valid name. A receipt is (offset, count): the
 * message's offset and its delivery count.
 *   SHARED_CONFIG req: str queue, str group, u32 mask (PROTO_SHARED_SET_*:
 *                      ACK_TIMEOUT 1, MAX_DELIVERIES 2, WINDOW 4, DLQ 8;
 *                      0 = create with the defaults, others 0),
 *                      u64 ack_timeout_ms, u32 max_deliveries,
 *                      u32 window, str dlq ("" = the default name, else a
 *                      valid name); fields outside mask must be 0 / ""
 *                 resp: (empty)
 *   RECEIVE       req: str queue, str group, u64 consumer_id (the
 *                      client's producer id, PRODUCER_INIT; not 0),
 *                      u32 max_msgs (1..PROTO_SHARED_LIST_MAX),
 *                      u32 wait_ms (long poll when nothing is due)
 *                 resp: u64 queue_id, u32 n, n x {u64 offset,
 *                       u64 timestamp_ms, blob message, blob props,
 *                       u32 count (the delivery count: with the offset,
 *                       the receipt to settle)}
 *   SETTLE        req: str queue, str group, u32 n (1..
 *                      PROTO_SHARED_LIST_MAX), n x {u64 offset, u32 count,
 *                      u8 action (PROTO_SETTLE_ACK 0, NACK 1, EXTEND 2,
 *                      RELEASE 3, RETRY 4), u64 delay_ms (0 for ack,
 *                      release and retry)}; RETRY is a nack whose delay
 *                      the leader takes from the backoff levels by the
 *                      receipt's delivery count (docs/WORKQUEUES.md)
 *                      offsets strictly increasing
 *                 resp: u32 n, n x u8 done (1: settled; 0: stale, the
 *                       receipt is no longer the message's lease)
 *
 * Single active consumer of stream groups (op 30, added with work queues;
 * docs/WORKQUEUES.md, "Single active consumer for stream groups"; an
 * older server answers TERN_EINVAL "unknown request op"):
 *   CLAIM         req: str queue, str group, u64 consumer_id (the
 *                      client's producer id, PRODUCER_INIT, as RECEIVE;
 *                      not 0), u8 action (PROTO_CLAIM_ACQUIRE 1: claim or
 *                      renew; PROTO_CLAIM_RELEASE 2), u32 lease_ms
 *                      (acquire: 0 = the server's default; release: 0).
 *                      The connection keeps the consumer id: its group
 *                      fetches and commits are checked against claims as
 *                      that consumer's.
 *                 resp: u8 granted (acquire: 1 the consumer holds the
 *                       group until until_ms; 0 another consumer holds
 *                       it; release: 1 released, 0 it held nothing),
 *                       u64 holder (0: nobody), u64 until_ms (leader
 *                       clock, ms since the epoch)
 *                 A lease outside [limits] claim_lease_min_ms ..
 *                 claim_lease_max_ms is TERN_EINVAL naming the key; a
 *                 shared group is TERN_EINVAL; ACL: consume.
 *
 * Delayed messages (op 31, added with work queues; docs/WORKQUEUES.md,
 * "Delayed and scheduled messages"; an older server answers TERN_EINVAL
 * "unknown request op"):
 *   PRODUCE_DELAYED req: str queue, u64 when, [u64 producer_id, u64 seq],
 *                      u32 n, n x blob message,
 *                      [u8 flags = PROTO_PRODUCE_PROPS (1), n x blob props]
 *                      when: bit 63 PROTO_DELAY_AT set: bits 0..61 are the
 *                      due time (ms since the epoch); clear: a delay in ms
 *                      from the leader's clock. Bit 62 PROTO_DELAY_DEDUP
 *                      set: producer_id (!= 0) and seq (>= 1) follow, and
 *                      the leader deduplicates by them as PRODUCE does (a
 *                      resend of an applied batch schedules nothing again
 *                      and answers the first due time); clear: no dedup.
 *                      The messages are PRODUCE's (same blobs, same
 *                      optional properties tail, same checks).
 *                 resp: u32 count (messages scheduled), u64 due_ms (the
 *                       absolute due time by the leader's clock: t + delay,
 *                       or the time asked for, or t when that is past; for
 *                       a resend, the due time of the first; 0 when the
 *                       leader no longer remembers it)
 *                 A due time more than [limits] max_delay_ms ahead is
 *                 TERN_EINVAL naming the limit; ACL: produce.
 *
 * Group status (op 32 and two request flags, added with work queues;
 * docs/WORKQUEUES.md, "Group status"; an older server answers op 32
 * TERN_EINVAL "unknown request op" and the flags bytes TERN_EMALFORMED;
 * libtern does not fall back). Served by any node from its index, so the
 * state may lag the leader's by replication. ACL: consume or manage.
 *   GROUP_STATUS  req: str queue, str group ("" = every group of the
 *                      queue, paged), str after ("" or a valid name: with
 *                      group "", the groups whose names sort after it),
 *                      u32 max_count (0 = the server's page size)
 *                 resp: u32 n, n x blob record, u8 more (1: groups follow
 *                       the last one listed; ask again with it as after).
 *                       A record starts with u8 version; version 1 is
 *                       u8 version (1), str group, u8 shared (0 stream,
 *                       1 shared), u64 start (the queue's first offset),
 *                       u64 end (its next offset), u64 committed (stream:
 *                       the committed offset; shared: floor), u64 next
 *                       (shared: first offset never delivered; stream:
 *                       committed), u64 lag (end - max(committed, start)),
 *                       u64 commit_ms (stream: append time of the latest
 *                       commit, 0 unknown), u64 ack_timeout_ms,
 *                       u32 max_deliveries, u32 window, str dlq (the DLQ's
 *                       queue name as the client names it, "" for stream
 *                       groups), u64 dlq_depth (its end - first offset, 0
 *                       when it does not exist yet), u64 in_flight (leases
 *                       unexpired by the node's clock), u64 ready (rows
 *                       waiting: nacked, released, expired), u64
 *                       oldest_deadline_ms (earliest lease end, 0 none),
 *                       u8 partial (1: the lease walk stopped at
 *                       [limits] status_max_rows), u64 others_held (leases
 *                       of consumers past the ones counted),
 *                       u16 n (0..PROTO_STATUS_CONSUMERS_MAX), n x
 *                       {u64 consumer_id, u32 held}, most held first.
 *                       Version 2 appends u64 claim_holder and u64
 *                       claim_until_ms: a stream group's live claim (the
 *                       single active consumer, until by the node's
 *                       clock), 0 and 0 when none.
 *                       A later version appends fields: a decoder reads
 *                       the fields of its versions and skips the rest of
 *                       the blob.
 *                 A named group that does not exist is TERN_ENOTFOUND.
 *   MESSAGE_TRACE req: [u8 flags] after the offset, present only when not
 *                      0: bit 0 PROTO_TRACE_DELIVERIES asks for the
 *                      delivery tail; other bits must be 0.
 *                 resp: with PROTO_TRACE_DELIVERIES, after the more byte:
 *                       u8 version (1), u32 n, n x {str group, u8 state
 *                       (PROTO_DELIVERY_NEW 0: never delivered; SETTLED 1:
 *                       acknowledged or dead-lettered; LEASED 2: leased to
 *                       consumer_id until deadline_ms; READY 3: ready
 *                       again from deadline_ms), u32 count (deliveries
 *                       so far), u64 consumer_id, u64 deadline_ms}, u8
 *                       more; one record per shared group of the queue.
 *                       A later version appends fields after these.
 *   STATUS        req: [u8 flags], present only when not 0: bit 0
 *                      PROTO_STATUS_TIMERS asks for the timer tail; other
 *                      bits must be 0.
 *                 resp: with PROTO_STATUS_TIMERS, after the members:
 *                       u8 version (PROTO_STATUS_TAIL_VERSION, 2), u64
 *                       timers_pending (delayed messages not yet due or
 *                       not yet fired, by this node's index), u64
 *                       timers_oldest_due_ms (0 none); from version 2:
 *                       str server_version (the answering ternd's
 *                       software version, "MAJOR.MINOR.PATCH", at most
 *                       PROTO_MAX_SERVER_VERSION bytes). A version 1
 *                       tail (a server that predates server_version)
 *                       ends after timers_oldest_due_ms and decodes with
 *                       an empty server_version. Version 3
 * (PROTO_STATUS_TAIL_VERSION_MEMBERS, written by a server with membership
 * changes when it knows a configuration) goes on with u8 self_role (this node's
 * role in the cluster configuration it knows: PROTO_MEMBER_STANDBY 0, VOTER 1,
 * SPARE 2, ABSENT 3 = not in it), u32 n, n x u8 role of members[i] (same order
 * and count as the members list, which is then the raft configuration). A later
 * version appends fields; a decoder reads the fields it knows and skips the
 *                       rest.
 *
 * Leadership transfer (op 33, added with rolling restarts; docs/OPERATIONS.md,
 * "Upgrades"; an older server answers TERN_EINVAL "unknown request op").
 * ACL: admin. Served by the leader only: any other node answers
 * TERN_ENOTLEADER with the leader hint.
 *   CLUSTER_TRANSFER req: u64 to_id (0 = the leader picks a caught-up
 *                      voter)
 *                 resp: u64 leader_id (the new leader, not the node that
 *                       answers), u64 term (the term it leads in, as the
 *                       old leader learned it; 0 unknown)
 *                 Answered once the transfer completed, or with an error:
 *                 TERN_ENOTVOTER (to_id is not a node of the cluster, or
 *                 not a voter, or the leader itself), TERN_ETRANSFER (it
 *                 did not complete within an election timeout, or another
 *                 node won the election), TERN_EBUSY (a transfer is
 *                 already under way), TERN_ESHUTDOWN (the leader stopped).
 *
 * Features (op 37, added with frame version 2: an older server answers
 * TERN_EINVAL "unknown request op" and keeps the connection):
 *   HELLO         req: u32 features the client takes (PROTO_FEATURE_XXH3
 *                      1: frames of version 2; bits this server does not
 *                      know are ignored), then whatever a later release
 *                      appends (skipped)
 *                 resp: u32 those of them this server takes
 *                 Any node answers it, before or without a login (as
 *                 STATUS). Repeating it on a connection is harmless.
 *                 PROTO_FEATURE_RUNS 2 (added with the runs layout; an
 *                 older server leaves the bit out of its answer): the
 *                 server answers every FETCH of the connection in the
 *                 runs layout (FETCH, above), from the first FETCH it
 *                 reads after the HELLO on; a FETCH read before it keeps
 *                 the layout then in force, so a client sends HELLO
 *                 before its first FETCH. libtern asks for both bits.
 *
 * Membership (op 34, added with online membership changes: an older
 * server answers TERN_EINVAL "unknown request op"; op 35 is reserved):
 *   MEMBER        req: u8 action (PROTO_MEMBER_ADD 1, PROTO_MEMBER_REMOVE
 *                      2), u64 id (> 0), str raft_address, str
 *                      client_address (ADD: "host:port" each, 1..
 *                      PROTO_MEMBER_ADDR_MAX bytes, no ','; REMOVE: both
 *                      ""), u32 timeout_ms (ADD: bound of the whole change,
 *                      0 = the server's default; REMOVE: 0)
 *                 resp: u8 role (the member's role once done: VOTER after
 *                       ADD, ABSENT after REMOVE)
 *                 Leader only (TERN_ENOTLEADER with the leader's address
 *                 otherwise); cluster admin. One change at a time:
 *                 TERN_ECHANGING while one is under way. The answer comes
 *                 when the change is committed (ADD: once the member is a
 *                 voter); a failure's message names the role reached.
 */
#ifndef TERN_PROTO_H
#define TERN_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <tern_common.h>

#define PROTO_MAGIC        0x6E74
#define TERN_PROTO_VERSION 1
#define PROTO_VERSION_XXH3 2 /* checksum tern_checksum32_xxh3 */
#define PROTO_VERSION_MAX  2
/* HELLO features. */
#define PROTO_FEATURE_XXH3     0x1u /* frames of version 2 */
#define PROTO_FEATURE_RUNS     0x2u /* FETCH answers in the runs layout */
#define PROTO_HEADER_SIZE      24
#define PROTO_DEFAULT_MAX_BODY (16u * 1024u * 1024u)
/* Longest queue or group name on the wire: common's name rule
 * (tern_name_valid), which every request's names must pass. */
#define PROTO_MAX_NAME TERN_NAME_MAX

enum proto_op {
    PROTO_OP_QUEUE_CREATE = 1,
    PROTO_OP_QUEUE_DELETE = 2,
    PROTO_OP_QUEUE_LIST = 3,
    PROTO_OP_PRODUCE = 4,
    PROTO_OP_FETCH = 5,
    PROTO_OP_GROUP_FETCH = 6,
    PROTO_OP_GROUP_COMMIT = 7,
    PROTO_OP_STATUS = 8,
    PROTO_OP_STATS = 9,
    PROTO_OP_USER_SET = 10,
    PROTO_OP_USER_DELETE = 11,
    PROTO_OP_USER_LIST = 12,
    PROTO_OP_ACL_SET = 13,
    PROTO_OP_ACL_DELETE = 14,
    PROTO_OP_ACL_LIST = 15,
    PROTO_OP_NAMESPACE_SET = 16,
    PROTO_OP_NAMESPACE_DELETE = 17,
    PROTO_OP_NAMESPACE_LIST = 18,
    PROTO_OP_PRODUCER_INIT = 19,
    PROTO_OP_AUTH_START = 20,
    PROTO_OP_AUTH_CONTINUE = 21,
    PROTO_OP_QUEUE_UPDATE = 22,
    PROTO_OP_QUEUE_INFO = 23,
    PROTO_OP_OFFSET_FOR_TIME = 24,
    PROTO_OP_MESSAGE_GET = 25,
    PROTO_OP_MESSAGE_TRACE = 26,
    PROTO_OP_SHARED_CONFIG = 27,
    PROTO_OP_RECEIVE = 28,
    PROTO_OP_SETTLE = 29,
    PROTO_OP_CLAIM = 30,
    PROTO_OP_PRODUCE_DELAYED = 31,
    PROTO_OP_GROUP_STATUS = 32,
    PROTO_OP_CLUSTER_TRANSFER = 33,
    PROTO_OP_MEMBER = 34,
    PROTO_OP_BACKUP = 36,
    PROTO_OP_HELLO = 37,
    PROTO_OP_ERROR = 0x7f,
    PROTO_OP_RESPONSE = 0x80,
};

struct proto_header
{
    uint8_t version;
    uint8_t op;
    uint32_t body_len;
    uint64_t request_id;
    int32_t status;
    uint32_t checksum;
};

/* Decode and check a header (magic, version 1..PROTO_VERSION_MAX,
 * body_len <= max_body). TERN_EMALFORMED / TERN_EVERSION / TERN_ETOOBIG. */
int proto_header_decode(const void *buf,
                        uint32_t max_body,
                        struct proto_header *h);
/* Verify a frame's checksum given its raw header bytes and body, by the
 * header's version (a version this build does not know never matches).
 * TERN_ECORRUPT on mismatch. */
int proto_frame_verify(const void *header_bytes,
                       const void *body,
                       size_t body_len);

/* Encoding: proto_frame_begin writes a header placeholder into w,
 * body primitives follow, proto_frame_end fills body_len and the
 * checksum of the header's version. proto_frame_begin writes version 1;
 * proto_frame_begin_v the version given (TERN_PROTO_VERSION or
 * PROTO_VERSION_XXH3). */
void proto_frame_begin(struct tern_wbuf *w,
                       uint8_t op,
                       uint64_t request_id,
                       int32_t status);
void proto_frame_begin_v(struct tern_wbuf *w,
                         uint8_t version,
                         uint8_t op,
                         uint64_t request_id,
                         int32_t status);
int proto_frame_end(struct tern_wbuf *w, size_t frame_start);
void proto_put_str(struct tern_wbuf *w, const char *s, size_t len);
void proto_put_blob(struct tern_wbuf *w, const void *p, uint32_t len);
/* Borrowed string/blob out of a cursor (not NUL-terminated). */
const char *proto_get_str(struct tern_cursor *c, uint16_t *len);
const void *proto_get_blob(struct tern_cursor *c, uint32_t *len);

/* Error frame: message and, for TERN_ENOTLEADER, the leader hint. */
int proto_encode_error(struct tern_wbuf *w,
                       uint8_t op,
                       uint64_t request_id,
                       int32_t status,
                       const char *message,
                       uint64_t leader_id,
                       const char *leader_address);
struct proto_error
{
    const char *message; /* borrowed, message_len bytes */
    uint16_t message_len;
    uint64_t leader_id;
    const char *leader_address; /* borrowed, leader_address_len bytes */
    uint16_t leader_address_len;
};
int proto_decode_error(const void *body,
                       size_t len,
                       int32_t status,
                       struct proto_error *out);

/* Decoded requests; all pointers borrow from the frame body. */
struct proto_msg
{
    const void *data;
    uint32_t len;
};
struct proto_request
{
    uint8_t op;
    const char *queue;
    uint16_t queue_len;
    const char *group;
    uint16_t group_len;
    uint64_t producer_id;
    uint64_t seq;
    uint64_t offset; /* FETCH offset, GROUP_COMMIT next_offset */
    uint32_t max_msgs;
    uint32_t max_bytes;
    uint32_t wait_ms;
    uint32_t n_msgs;     /* PRODUCE */
    const uint8_t *msgs; /* PRODUCE: n_msgs blobs, iterate with
                            proto_next_msg */
    size_t msgs_len;
    uint8_t flags; /* STATS: PROTO_STATS_RESET or 0; FETCH:
                      PROTO_FETCH_LEADER or 0; GROUP_FETCH:
                      PROTO_GROUP_FETCH_SKIPPED or 0 */
    /* QUEUE_LIST, USER_LIST, ACL_LIST, NAMESPACE_LIST: paged is 1 for a
     * body with the paging tail (after_len 0: from the start; otherwise a
     * valid name: a queue, user, namespace, or for ACL_LIST the cursor
     * grant's user, with after_ns and after_pattern its other fields). */
    uint8_t paged;
    const char *after;
    uint16_t after_len;
    const char *after_ns;
    uint16_t after_ns_len;
    const char *after_pattern;
    uint16_t after_pattern_len;
    uint32_t max_count;
    /* Security metadata ops (10..19); all borrowed from the body. */
    const char *user; /* USER_*, ACL_* (ACL_LIST: user_len 0 = all) */
    uint16_t user_len;
    const char *ns; /* ACL_SET/DELETE, NAMESPACE_SET/DELETE */
    uint16_t ns_len;
    const char *pattern; /* ACL_SET/DELETE */
    uint16_t pattern_len;
    uint32_t bits;       /* USER_SET: PROTO_USER_*; ACL_SET: PROTO_PERM_*;
                            HELLO: PROTO_FEATURE_* */
    const uint8_t *cred; /* USER_SET */
    uint32_t cred_len;
    uint64_t max_queues; /* NAMESPACE_SET quotas */
    uint64_t max_bytes_quota;
    uint64_t produce_bytes_per_s;
    /* AUTH_START (mechanism, ns: ns_len 0 = "default", data) and
     * AUTH_CONTINUE (data); borrowed. */
    const char *mechanism;
    uint16_t mechanism_len;
    const uint8_t *auth_data;
    uint32_t auth_data_len;
    /* QUEUE_CREATE (has_settings: the tail was present), QUEUE_UPDATE
     * (set_mask), OFFSET_FOR_TIME (time_ms). */
    uint8_t has_settings;
    uint32_t set_mask;
    struct proto_queue_settings
    {
        uint64_t max_age_ms;
        uint64_t max_bytes;
        uint64_t max_messages;
        uint8_t overflow;
    } settings;
    uint64_t time_ms; /* PRODUCE_DELAYED: its when field (PROTO_DELAY_AT
                         bit included) */
    /* Message properties: PRODUCE's props blobs (props_len 0: no tail;
     * iterate with proto_next_props), FETCH/GROUP_FETCH's tag filter
     * (n_tags records, iterate with proto_next_tag), MESSAGE_GET. */
    const uint8_t *props;
    size_t props_len;
    uint8_t n_tags;
    const uint8_t *tags;
    size_t tags_len;
    uint8_t get_by; /* PROTO_GET_*; offset and queue_id as it says */
    uint64_t queue_id;
    const uint8_t *key; /* PROTO_GET_KEY */
    uint32_t key_len;   /* max in max_count */
    /* Shared groups: SHARED_CONFIG (set_mask and shared), RECEIVE
     * (consumer_id, max_msgs, wait_ms), SETTLE (n_items records, iterate
     * with proto_next_settle). */
    struct proto_shared_settings
    {
        uint64_t ack_timeout_ms;
        uint32_t max_deliveries;
        uint32_t window;
        const char *dlq; /* borrowed, dlq_len bytes ("" = default) */
        uint16_t dlq_len;
    } shared;
    uint64_t consumer_id;
    uint32_t n_items;
    const uint8_t *items;
    size_t items_len;
    /* CLAIM: consumer_id, the action in flags (PROTO_CLAIM_*), lease_ms. */
    uint32_t lease_ms;
    /* MEMBER: the action in flags (PROTO_MEMBER_ADD/REMOVE), the timeout
     * in wait_ms; addresses borrowed from the body. */
    uint64_t member_id;
    const char *raft_address;
    uint16_t raft_address_len;
    const char *client_address;
    uint16_t client_address_len;
    /* CLUSTER_TRANSFER: the node to hand leadership to (0: any voter). */
    uint64_t to_id;
    /* BACKUP: the directory on the node's host (borrowed, path_len bytes,
     * no NUL), the action in flags (PROTO_BACKUP_VERIFY or 0), the raft
     * index the node must have applied first. */
    const char *path;
    uint16_t path_len;
    uint64_t min_applied;
};

/* MEMBER (op 34): actions and the roles of the STATUS tail. */
#define PROTO_MEMBER_ADD      1u
#define PROTO_MEMBER_REMOVE   2u
#define PROTO_MEMBER_ADDR_MAX 127u
enum proto_member_role {
    PROTO_MEMBER_STANDBY = 0,
    PROTO_MEMBER_VOTER = 1,
    PROTO_MEMBER_SPARE = 2,
    PROTO_MEMBER_ABSENT = 3,
};
/* MEMBER request (client side): addresses NUL-terminated ("" for
 * REMOVE). TERN_EINVAL for a bad action or address. */
int proto_encode_member_req(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint8_t action,
                            uint64_t id,
                            const char *raft_address,
                            const char *client_address,
                            uint32_t timeout_ms);
int proto_encode_member_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             uint8_t role);
int proto_decode_member_resp(const void *body, size_t len, uint8_t *role);
/* Decode a request body for op; TERN_EMALFORMED (trailing bytes included),
 * TERN_EBADNAME for an invalid queue/group name, TERN_EINVAL for an unknown
 * op. */
int proto_decode_request(uint8_t op,
                         const void *body,
                         size_t len,
                         struct proto_request *out);
/* Iterate PRODUCE messages: returns 1 and fills m, or 0 at the end. */
int proto_next_msg(const struct proto_request *r,
                   size_t *pos,
                   struct proto_msg *m);

/* Iterate PRODUCE's properties blocks, in message order (only when
 * r->props_len > 0): returns 1 and fills m, or 0 at the end. */
int proto_next_props(const struct proto_request *r,
                     size_t *pos,
                     struct proto_msg *m);
/* Iterate a FETCH/GROUP_FETCH tag filter: 1 with *tag, *len (borrowed),
 * or 0 at the end. */
int proto_next_tag(const struct proto_request *r,
                   size_t *pos,
                   const char **tag,
                   uint8_t *len);

/* Request encoders (client side). Each writes one whole frame to w. */
int proto_encode_queue_op(struct tern_wbuf *w,
                          uint8_t op,
                          uint64_t request_id,
                          const char *queue);
#define PROTO_SET_MAX_AGE      0x1u
#define PROTO_SET_MAX_BYTES    0x2u
#define PROTO_SET_MAX_MESSAGES 0x4u
#define PROTO_SET_OVERFLOW     0x8u
#define PROTO_SET_ALL          0xfu
/* QUEUE_CREATE with the settings tail s (borrowed; NULL: no tail, as
 * proto_encode_queue_op). TERN_EINVAL for an overflow above 1. */
int proto_encode_queue_create(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              const struct proto_queue_settings *s);
/* QUEUE_UPDATE: mask PROTO_SET_* (else TERN_EINVAL), s borrowed. */
int proto_encode_queue_update(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              uint32_t mask,
                              const struct proto_queue_settings *s);
/* QUEUE_INFO (str queue) and OFFSET_FOR_TIME. */
int proto_encode_queue_info_req(struct tern_wbuf *w,
                                uint64_t request_id,
                                const char *queue);
int proto_encode_offset_for_time(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const char *queue,
                                 uint64_t time_ms);
struct proto_queue_info_resp
{
    uint64_t start_offset;
    uint64_t next_offset;
    uint64_t bytes;
    uint64_t created_index;
    struct proto_queue_settings settings;
};
int proto_encode_queue_info_resp(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const struct proto_queue_info_resp *q);
int proto_decode_queue_info_resp(const void *body,
                                 size_t len,
                                 struct proto_queue_info_resp *out);
int proto_encode_offset_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             uint64_t offset);
int proto_decode_offset_resp(const void *body, size_t len, uint64_t *offset);
/* PRODUCE of msgs[0..n) (borrowed for the call). TERN_EINVAL when n is 0
 * or msgs NULL, TERN_EBADNAME for an invalid queue name. */
int proto_encode_produce(struct tern_wbuf *w,
                         uint64_t request_id,
                         const char *queue,
                         uint64_t producer_id,
                         uint64_t seq,
                         const struct proto_msg *msgs,
                         uint32_t n);
/* Message i (0 <= i < n) of a caller's message array, for
 * proto_encode_produce_at: fills *m (OUT; m->data borrowed until the
 * encoder returns). */
typedef void (*proto_msg_at_cb)(const void *msgs,
                                uint32_t i,
                                struct proto_msg *m);
/* As proto_encode_produce, with message i taken from at(msgs, i): encodes
 * a caller's own message type (libtern's struct tern_msg) without first
 * copying it into a struct proto_msg array. Same bytes, same errors (also
 * TERN_EINVAL when at is NULL). */
int proto_encode_produce_at(struct tern_wbuf *w,
                            uint64_t request_id,
                            const char *queue,
                            uint64_t producer_id,
                            uint64_t seq,
                            proto_msg_at_cb at,
                            const void *msgs,
                            uint32_t n);
/* Message i and its properties block for proto_encode_produce_props:
 * fills *m and *props (props->len 0: none; both borrowed until the encoder
 * returns). */
typedef void (*proto_pmsg_at_cb)(const void *msgs,
                                 uint32_t i,
                                 struct proto_msg *m,
                                 struct proto_msg *props);
#define PROTO_PRODUCE_PROPS 0x01u /* PRODUCE tail flags */
/* PRODUCE with properties: the tail only when some message has a block
 * (else the same bytes as proto_encode_produce_at). The blocks are not
 * checked here (the server does). Errors as proto_encode_produce_at. */
int proto_encode_produce_props(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *queue,
                               uint64_t producer_id,
                               uint64_t seq,
                               proto_pmsg_at_cb at,
                               const void *msgs,
                               uint32_t n);
/* PRODUCE_DELAYED's when: the due time, not a delay (format above). */
#define PROTO_DELAY_AT    ((uint64_t)1 << 63)
#define PROTO_DELAY_DEDUP ((uint64_t)1 << 62)
/* PRODUCE_DELAYED of msgs (as proto_encode_produce_props: the properties
 * tail only when some message has a block) to be appended when the
 * leader's clock reaches its due time: when = a delay in ms, or a due time
 * with PROTO_DELAY_AT set (bit 62 must be clear: the encoder sets
 * PROTO_DELAY_DEDUP itself when producer_id is not 0). The decoder gives
 * time_ms without PROTO_DELAY_DEDUP, and producer_id / seq (0 / 0 without
 * dedup). TERN_EINVAL (n 0, msgs or at NULL, bit 62 set in when,
 * producer_id != 0 with seq 0), TERN_EBADNAME. */
int proto_encode_produce_delayed(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const char *queue,
                                 uint64_t when,
                                 uint64_t producer_id,
                                 uint64_t seq,
                                 proto_pmsg_at_cb at,
                                 const void *msgs,
                                 uint32_t n);
#define PROTO_FETCH_LEADER    0x01u /* FETCH flags: leader answers only */
#define PROTO_FETCH_PROPS     0x02u /* the answer carries properties */
#define PROTO_FETCH_TAGS      0x04u /* a tag filter follows the flags */
#define PROTO_MAX_TAG         64u   /* a tag: 1..64 bytes of [A-Za-z0-9._-] */
#define PROTO_MAX_FILTER_TAGS 16u
#define PROTO_MAX_KEY         256u
#define PROTO_MESSAGE_GET_MAX 1000u /* messages of one get by key */
/* Whether t[0..len) is a tag. */
int proto_tag_valid(const char *t, size_t len);
/* A tag filter of a fetch: tags[0..n) (NUL-terminated, borrowed). */
struct proto_fetch_filter
{
    uint8_t flags; /* PROTO_FETCH_PROPS, and PROTO_FETCH_LEADER for FETCH or
                      PROTO_GROUP_FETCH_SKIPPED for GROUP_FETCH */
    const char *const *tags;
    uint32_t n_tags; /* 0..PROTO_MAX_FILTER_TAGS */
};
/* FETCH / GROUP_FETCH (group NULL for FETCH) with flags and a tag filter
 * (f borrowed; NULL or no flags and no tags: the same bytes as
 * proto_encode_fetch / proto_encode_group_fetch). TERN_EINVAL for bad
 * flags (PROTO_FETCH_LEADER with a group, PROTO_GROUP_FETCH_SKIPPED
 * without) or over 16 tags,
 * TERN_EBADNAME for a tag that is not one. */
int proto_encode_fetch_filtered(struct tern_wbuf *w,
                                uint64_t request_id,
                                const char *queue,
                                const char *group,
                                uint64_t offset,
                                uint32_t max_msgs,
                                uint32_t max_bytes,
                                uint32_t wait_ms,
                                const struct proto_fetch_filter *f);
#define PROTO_GET_OFFSET 1u
#define PROTO_GET_ID     2u
#define PROTO_GET_KEY    3u
/* MESSAGE_GET by offset (queue_id 0), by id (queue_id and offset) or, when
 * key is not NULL, by key[0..key_len) (1..PROTO_MAX_KEY bytes), at most
 * max (1..PROTO_MESSAGE_GET_MAX) messages. TERN_EINVAL, TERN_EBADNAME. */
int proto_encode_message_get(struct tern_wbuf *w,
                             uint64_t request_id,
                             const char *queue,
                             uint64_t queue_id,
                             uint64_t offset,
                             const void *key,
                             uint32_t key_len,
                             uint32_t max);
/* flags: 0 or PROTO_FETCH_LEADER (else TERN_EINVAL). */
int proto_encode_fetch(struct tern_wbuf *w,
                       uint64_t request_id,
                       const char *queue,
                       uint64_t offset,
                       uint32_t max_msgs,
                       uint32_t max_bytes,
                       uint32_t wait_ms,
                       uint8_t flags);
int proto_encode_group_fetch(struct tern_wbuf *w,
                             uint64_t request_id,
                             const char *queue,
                             const char *group,
                             uint32_t max_msgs,
                             uint32_t max_bytes,
                             uint32_t wait_ms);
/* GROUP_FETCH with flags 0 or PROTO_GROUP_FETCH_SKIPPED (else TERN_EINVAL);
 * proto_encode_group_fetch is this call with flags 0. */
#define PROTO_GROUP_FETCH_SKIPPED 0x01u
int proto_encode_group_fetch_flags(struct tern_wbuf *w,
                                   uint64_t request_id,
                                   const char *queue,
                                   const char *group,
                                   uint32_t max_msgs,
                                   uint32_t max_bytes,
                                   uint32_t wait_ms,
                                   uint8_t flags);
int proto_encode_group_commit(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              const char *group,
                              uint64_t next_offset);
int proto_encode_simple(struct tern_wbuf *w,
                        uint8_t op,
                        uint64_t request_id); /* QUEUE_LIST, STATUS,
                                                 USER_LIST, NAMESPACE_LIST,
                                                 PRODUCER_INIT */
/* A paged QUEUE_LIST: queues after the name after (NULL or "": from the
 * first; borrowed for the call; else TERN_EBADNAME unless a valid name),
 * at most max_count of them (0: the server's page size). */
int proto_encode_queue_list_req(struct tern_wbuf *w,
                                uint64_t request_id,
                                const char *after,
                                uint32_t max_count);

/* Response bodies are built by the server directly with the tern_wbuf_*
 * and proto_put_* primitives between proto_frame_begin/end, and parsed by
 * the client with a tern_cursor and proto_get_*, following the layouts
 * above. */

/* ---- Shared groups (ops 27..29) ---- */

struct proto_fetched_msg;
struct proto_fetch_resp;

#define PROTO_SHARED_SET_ACK_TIMEOUT    0x1u
#define PROTO_SHARED_SET_MAX_DELIVERIES 0x2u
#define PROTO_SHARED_SET_WINDOW         0x4u
#define PROTO_SHARED_SET_DLQ            0x8u
#define PROTO_SHARED_SET_ALL            0xfu
#define PROTO_SHARED_LIST_MAX           1024u
#define PROTO_SETTLE_ACK                0u
#define PROTO_SETTLE_NACK               1u
#define PROTO_SETTLE_EXTEND             2u
#define PROTO_SETTLE_RELEASE            3u
#define PROTO_SETTLE_RETRY              4u /* nack after the backoff level */
/* One SETTLE item. */
struct proto_settle_item
{
    uint64_t offset;
    uint32_t count;
    uint8_t action; /* PROTO_SETTLE_* */
    uint64_t delay_ms;
};
/* SHARED_CONFIG: mask PROTO_SHARED_SET_* (else TERN_EINVAL), s borrowed
 * (NULL only with mask 0; s->dlq NUL-terminated or NULL). TERN_EBADNAME
 * for a bad name. */
int proto_encode_shared_config(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *queue,
                               const char *group,
                               uint32_t mask,
                               const struct proto_shared_settings *s);
/* RECEIVE: consumer_id not 0, max_msgs 1..PROTO_SHARED_LIST_MAX (else
 * TERN_EINVAL). */
int proto_encode_receive(struct tern_wbuf *w,
                         uint64_t request_id,
                         const char *queue,
                         const char *group,
                         uint64_t consumer_id,
                         uint32_t max_msgs,
                         uint32_t wait_ms);
/* SETTLE of items[0..n) (borrowed): n 1..PROTO_SHARED_LIST_MAX, offsets
 * strictly increasing, actions known, delay 0 for ack and release (else
 * TERN_EINVAL). */
int proto_encode_settle(struct tern_wbuf *w,
                        uint64_t request_id,
                        const char *queue,
                        const char *group,
                        const struct proto_settle_item *items,
                        uint32_t n);
/* 1 with *m and *count (the delivery count) of the next record of a
 * RECEIVE answer, or 0 at the end. */
int proto_next_received(const struct proto_fetch_resp *r,
                        size_t *pos,
                        struct proto_fetched_msg *m,
                        uint32_t *count);
/* Iterate a decoded SETTLE's items: 1 with *it, or 0 at the end. */
int proto_next_settle(const struct proto_request *r,
                      size_t *pos,
                      struct proto_settle_item *it);
/* RECEIVE answer, streamed: proto_receive_begin writes the header,
 * queue_id and a count placeholder and returns the frame start; add
 * records with proto_put_received (m borrowed, count its delivery
 * count); proto_receive_end patches n and seals the frame. */
size_t proto_receive_begin(struct tern_wbuf *w,
                           uint64_t request_id,
                           uint64_t queue_id);
void proto_put_received(struct tern_wbuf *w,
                        const struct proto_fetched_msg *m,
                        uint32_t count);
int proto_receive_end(struct tern_wbuf *w, size_t start, uint32_t n);
/* The RECEIVE answer into out (with_props and with_counts set; next and
 * end offsets 0). Iterate with proto_next_received (proto_next_fetched
 * works too and skips the counts). TERN_EMALFORMED. */
int proto_decode_receive_resp(const void *body,
                              size_t len,
                              struct proto_fetch_resp *out);
/* SETTLE answer: done[0..n) of 0 / 1 (borrowed). */
int proto_encode_settle_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             const uint8_t *done,
                             uint32_t n);
/* *done (OUT) borrows n bytes of 0 / 1 from body. TERN_EMALFORMED. */
int proto_decode_settle_resp(const void *body,
                             size_t len,
                             const uint8_t **done,
                             uint32_t *n);

/* ---- Single active consumer (op 30) ---- */

#define PROTO_CLAIM_ACQUIRE 1u
#define PROTO_CLAIM_RELEASE 2u
/* CLAIM: consumer_id not 0, action PROTO_CLAIM_*, lease_ms 0 for a
 * release (else TERN_EINVAL); TERN_EBADNAME for a bad name. */
int proto_encode_claim(struct tern_wbuf *w,
                       uint64_t request_id,
                       const char *queue,
                       const char *group,
                       uint64_t consumer_id,
                       uint8_t action,
                       uint32_t lease_ms);
int proto_encode_claim_resp(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint8_t granted,
                            uint64_t holder,
                            uint64_t until_ms);
/* TERN_EMALFORMED (granted above 1, short or long body). */
int proto_decode_claim_resp(const void *body,
                            size_t len,
                            uint8_t *granted,
                            uint64_t *holder,
                            uint64_t *until_ms);

/* ---- Frame parsing and response codecs ---- */

/* Parse a whole frame that is already in memory: header checks as
 * proto_header_decode, then the checksum (TERN_ECORRUPT), then body_len must
 * fit in len (TERN_EMALFORMED if the buffer is shorter: the caller waits for
 * more bytes when it has fewer than PROTO_HEADER_SIZE + h->body_len).
 * OUT: h, *body borrowed from buf. */
int proto_frame_parse(const void *buf,
                      size_t len,
                      uint32_t max_body,
                      struct proto_header *h,
                      const void **body);

/* Response bodies. Encoders (server side) write one whole frame with
 * op = request op | PROTO_OP_RESPONSE and status 0. Decoders (client side)
 * validate the whole body, reject trailing bytes (TERN_EMALFORMED) and
 * borrow pointers from the body. */
int proto_encode_empty_resp(struct tern_wbuf *w,
                            uint8_t op,
                            uint64_t request_id); /* CREATE/DELETE/COMMIT */
int proto_decode_empty_resp(const void *body, size_t len);

int proto_encode_produce_resp(struct tern_wbuf *w,
                              uint64_t request_id,
                              uint64_t base_offset,
                              uint32_t count,
                              int duplicate);
struct proto_produce_resp
{
    uint64_t base_offset;
    uint32_t count;
    uint8_t duplicate;
};
int proto_decode_produce_resp(const void *body,
                              size_t len,
                              struct proto_produce_resp *out);

/* PRODUCE_DELAYED's answer: count messages scheduled for due_ms. */
int proto_encode_produce_delayed_resp(struct tern_wbuf *w,
                                      uint64_t request_id,
                                      uint32_t count,
                                      uint64_t due_ms);
int proto_decode_produce_delayed_resp(const void *body,
                                      size_t len,
                                      uint32_t *count,
                                      uint64_t *due_ms);

struct proto_fetched_msg
{
    uint64_t offset;
    uint64_t timestamp_ms;
    const void *data; /* borrowed */
    uint32_t len;
    const void *props; /* borrowed; the answers with properties only */
    uint32_t props_len;
};
/* One message record of a FETCH/GROUP_FETCH answer (with_props: with
 * its properties, as PROTO_FETCH_PROPS and MESSAGE_GET answers carry
 * them), for servers that stream them; m borrowed, copied into w. */
void proto_put_fetched(struct tern_wbuf *w,
                       const struct proto_fetched_msg *m,
                       bool with_props);
/* FETCH/GROUP_FETCH answer with properties, then queue_id. */
int proto_encode_fetch_props_resp(struct tern_wbuf *w,
                                  uint8_t op,
                                  uint64_t request_id,
                                  uint64_t next_offset,
                                  uint64_t end_offset,
                                  const struct proto_fetched_msg *msgs,
                                  uint32_t n,
                                  uint64_t queue_id);
/* MESSAGE_GET answer. */
int proto_encode_message_get_resp(struct tern_wbuf *w,
                                  uint64_t request_id,
                                  uint64_t queue_id,
                                  const struct proto_fetched_msg *msgs,
                                  uint32_t n);
/* op is PROTO_OP_FETCH or PROTO_OP_GROUP_FETCH. msgs borrowed. */
int proto_encode_fetch_resp(struct tern_wbuf *w,
                            uint8_t op,
                            uint64_t request_id,
                            uint64_t next_offset,
                            uint64_t end_offset,
                            const struct proto_fetched_msg *msgs,
                            uint32_t n);
struct proto_fetch_resp
{
    uint64_t next_offset;
    uint64_t end_offset;
    uint32_t n;
    const uint8_t *msgs; /* n records (runs: the parts), iterate with
                            proto_fetch_iter_next */
    size_t msgs_len;
    uint8_t with_props;  /* records carry properties (runs: asked for) */
    uint8_t with_counts; /* records carry a delivery count (RECEIVE) */
    uint8_t runs;        /* the runs layout: msgs holds n_parts parts */
    uint32_t n_parts;
    uint64_t queue_id; /* with_props or runs */
};
/* A FETCH answer in the runs layout (PROTO_FEATURE_RUNS), the request
 * with properties asked for or not (with_props). Every part and every
 * message in it is checked here (framing, counts, increasing offsets):
 * 0 or TERN_EMALFORMED. */
int proto_decode_fetch_runs_resp(const void *body,
                                 size_t len,
                                 bool with_props,
                                 struct proto_fetch_resp *out);
/* Where an iteration of a fetch answer is (either layout): zero it to
 * start. */
struct proto_fetch_iter
{
    size_t pos;      /* the next part or record */
    size_t run_end;  /* runs: the end of the current run's bytes */
    uint64_t offset; /* runs: the next message's offset */
    uint64_t ts;
    uint32_t left; /* runs: messages left in the current run */
    uint8_t props; /* runs: the current run has properties */
};
/* The next message of r (a decoded FETCH, GROUP_FETCH, MESSAGE_GET or
 * RECEIVE answer, either layout) into *m, borrowing r's bytes: 1, or 0 at
 * the end. In the runs layout m->props is set only when r->with_props
 * and the message has properties (else NULL, props_len 0). */
int proto_fetch_iter_next(const struct proto_fetch_resp *r,
                          struct proto_fetch_iter *it,
                          struct proto_fetched_msg *m);
/* Kinds of part of the runs layout. */
#define PROTO_PART_RUN       1u
#define PROTO_PART_RUN_PROPS 2u
#define PROTO_PART_MESSAGE   3u
/* The runs layout, for servers that stream it: proto_fetch_runs_begin
 * writes the frame header of op FETCH (version) and the head with
 * placeholders, returns the frame start; add parts with
 * proto_put_fetch_run (list: the run's bytes as the runs layout carries
 * them, borrowed, copied) and proto_put_fetch_message (m borrowed, its
 * properties too); proto_fetch_runs_end patches next_offset, n and
 * n_parts, appends queue_id and seals the frame. */
size_t proto_fetch_runs_begin(struct tern_wbuf *w,
                              uint8_t version,
                              uint64_t request_id,
                              uint64_t end_offset);
void proto_put_fetch_run(struct tern_wbuf *w,
                         uint64_t offset,
                         uint64_t timestamp_ms,
                         uint32_t count,
                         bool props,
                         const void *list,
                         size_t list_len);
void proto_put_fetch_message(struct tern_wbuf *w,
                             const struct proto_fetched_msg *m);
int proto_fetch_runs_end(struct tern_wbuf *w,
                         size_t start,
                         uint64_t next_offset,
                         uint32_t n,
                         uint32_t n_parts,
                         uint64_t queue_id);
int proto_decode_fetch_resp(const void *body,
                            size_t len,
                            struct proto_fetch_resp *out);
/* The answer to a fetch that asked for PROTO_FETCH_PROPS. */
int proto_decode_fetch_props_resp(const void *body,
                                  size_t len,
                                  struct proto_fetch_resp *out);
/* The MESSAGE_GET answer, into out (next_offset and end_offset 0). */
int proto_decode_message_get_resp(const void *body,
                                  size_t len,
                                  struct proto_fetch_resp *out);
/* Returns 1 and fills m (borrowing from the body), or 0 at the end; 0 at
 * once for an answer in the runs layout (proto_fetch_iter_next reads
 * both). */
int proto_next_fetched(const struct proto_fetch_resp *r,
                       size_t *pos,
                       struct proto_fetched_msg *m);

/* The skip tail of a GROUP_FETCH answer (layout above). */
#define PROTO_GROUP_SKIP_SIZE 16u
struct proto_group_skip
{
    uint64_t skipped;
    uint64_t first_offset;
};
/* Append the skip tail s (borrowed) to the answer being built in w (the
 * server writes it after the messages, before proto_frame_end). */
void proto_put_group_skip(struct tern_wbuf *w,
                          const struct proto_group_skip *s);
/* A GROUP_FETCH answer with the skip tail: proto_encode_fetch_resp's frame
 * (msgs borrowed), then s (borrowed). */
int proto_encode_group_fetch_skip_resp(struct tern_wbuf *w,
                                       uint64_t request_id,
                                       uint64_t next_offset,
                                       uint64_t end_offset,
                                       const struct proto_fetched_msg *msgs,
                                       uint32_t n,
                                       const struct proto_group_skip *s);
/* Decode the answer to a GROUP_FETCH that asked for the skip tail: out as
 * proto_decode_fetch_resp over the body without its last
 * PROTO_GROUP_SKIP_SIZE bytes (*fetch_len, OUT, may be NULL: their
 * length), *skip (OUT) the tail. TERN_EMALFORMED (also for skipped above
 * first_offset); out and skip are zeroed then. */
int proto_decode_group_fetch_resp(const void *body,
                                  size_t len,
                                  struct proto_fetch_resp *out,
                                  struct proto_group_skip *skip,
                                  size_t *fetch_len);

/* MESSAGE_TRACE (format above). Request: proto_request queue and
 * offset. */
int proto_encode_message_trace(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *queue,
                               uint64_t offset);
struct proto_trace
{
    uint64_t queue_id;
    uint64_t offset;
    uint64_t append_ms;
    uint64_t producer_id;
    uint64_t seq;
    uint32_t batch_pos;
    uint32_t batch_count;
    uint32_t len;
    uint64_t raft_index;
    uint64_t term;
    const void *key; /* borrowed, key_len bytes (0: none) */
    uint32_t key_len;
    const char *tag; /* borrowed, tag_len bytes (0: none) */
    uint16_t tag_len;
    /* Decoded answers only: n group records (proto_next_trace_group). */
    uint32_t n_groups;
    const uint8_t *groups;
    size_t groups_len;
    uint8_t more; /* The delivery tail (decoded answers only): has_deliveries is
                   * 1 when it was there; n_deliveries records
                   * (proto_next_delivery). */
    uint8_t has_deliveries;
    uint32_t n_deliveries;
    const uint8_t *deliveries;
    size_t deliveries_len;
    uint8_t deliveries_more;
};
struct proto_trace_group
{
    const char *name; /* borrowed, name_len bytes */
    uint16_t name_len;
    uint64_t next_offset;
    uint64_t commit_ms;
    uint64_t commit_index;
};
/* Server side: begin the answer with t's message fields (t and its
 * buffers borrowed for the call) and a group count placeholder; returns
 * the frame start for proto_trace_end. Errors are sticky in w->err. */
size_t proto_trace_begin(struct tern_wbuf *w,
                         uint64_t request_id,
                         const struct proto_trace *t);
/* One group record (g borrowed). */
void proto_put_trace_group(struct tern_wbuf *w,
                           const struct proto_trace_group *g);
/* Bytes proto_put_trace_group adds for a group named name_len bytes. */
size_t proto_trace_group_size(size_t name_len);
/* Patch the count n, append more, seal the frame. TERN_EINVAL for a key
 * or tag over its bound, else as proto_frame_end. */
int proto_trace_end(struct tern_wbuf *w, size_t start, uint32_t n, int more);
/* The answer into out (borrowing from body). TERN_EMALFORMED. */
int proto_decode_message_trace_resp(const void *body,
                                    size_t len,
                                    struct proto_trace *out);
/* 1 with *g (borrowing from the body), or 0 at the end. */
int proto_next_trace_group(const struct proto_trace *t,
                           size_t *pos,
                           struct proto_trace_group *g);

struct proto_queue_info
{
    const char *name; /* borrowed, name_len bytes */
    uint16_t name_len;
    uint64_t start_offset;
    uint64_t next_offset;
};
/* The unpaged answer (no more byte). */
int proto_encode_queue_list_resp(struct tern_wbuf *w,
                                 uint64_t request_id,
                                 const struct proto_queue_info *q,
                                 uint32_t n);
/* A page: as above, then the more byte (more: 0 or 1). */
int proto_encode_queue_list_page_resp(struct tern_wbuf *w,
                                      uint64_t request_id,
                                      const struct proto_queue_info *q,
                                      uint32_t n,
                                      int more);
/* Decoding accepts both answers: paged says whether the more byte was
 * there (it must be 0 or 1). */
struct proto_queue_list_resp
{
    uint32_t n;
    const uint8_t *entries;
    size_t entries_len;
    uint8_t paged;
    uint8_t more;
};
int proto_decode_queue_list_resp(const void *body,
                                 size_t len,
                                 struct proto_queue_list_resp *out);
int proto_next_queue_info(const struct proto_queue_list_resp *r,
                          size_t *pos,
                          struct proto_queue_info *q);

struct proto_member
{
    uint64_t id;
    const char *raft_address; /* borrowed */
    uint16_t raft_address_len;
    const char *client_address; /* borrowed */
    uint16_t client_address_len;
};
struct proto_status
{
    /* The timer tail: has_timers 1 when it is there (encoding: write
     * it). */
    uint8_t has_timers;
    uint64_t timers_pending;
    uint64_t timers_oldest_due_ms;
    /* In the tail from version 2: the answering server's software version
     * (borrowed; "" with server_version_len 0 when a version 1 tail or
     * no tail was decoded). Encoding: written with the tail. */
    const char *server_version;
    uint16_t server_version_len;
    /* Version 3 of the tail (with has_timers): has_membership 1, this
     * node's role (enum proto_member_role) and one role per member
     * (encoding: member_roles points at n_members bytes, borrowed;
     * decoding: member_roles_raw holds n_member_roles bytes, borrowed
     * from the body). */
    uint8_t has_membership;
    uint8_t self_role;
    const uint8_t *member_roles;
    uint32_t n_member_roles;
    uint64_t node_id;
    uint8_t role;
    uint64_t leader_id;
    const char *leader_address; /* borrowed, NUL-terminated when encoding */
    uint16_t leader_address_len;
    uint64_t term;
    uint64_t commit_index;
    uint64_t last_applied;
    uint8_t writable;
    const char *transport;
    uint16_t transport_len;
    const char *durability;
    uint16_t durability_len;
    uint32_t n_members;
    /* Encoding: members points at n_members structs (borrowed). Decoding:
     * raw records, iterate with proto_next_member. */
    const struct proto_member *members;
    const uint8_t *members_raw;
    size_t members_raw_len;
};
/* The *_len fields of st are used for the strings when encoding. */
int proto_encode_status_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             const struct proto_status *st);
int proto_decode_status_resp(const void *body,
                             size_t len,
                             struct proto_status *out);
int proto_next_member(const struct proto_status *st,
                      size_t *pos,
                      struct proto_member *m);

/* Rewrite the request id of a whole encoded frame in place and recompute
 * its checksum (libtern re-sends a frame under a new id). */
int proto_frame_set_request_id(void *frame, size_t len, uint64_t request_id);
/* libtern's send of an encoded request frame: request id and version
 * (TERN_PROTO_VERSION or PROTO_VERSION_XXH3) rewritten in place, checksum
 * computed once. TERN_EMALFORMED if the frame's length does not match
 * its header, TERN_EVERSION for another version. */
int proto_frame_seal_request(void *frame,
                             size_t len,
                             uint64_t request_id,
                             uint8_t version);
/* Grow the PRODUCE frame w holds (exactly one frame, at offset 0, from
 * proto_encode_produce[_at]: messages only, no properties tail) by
 * msgs[0..n) (borrowed for the call): their blobs are appended, and the
 * message count and body length updated in place. The checksum is left
 * as it was, so the frame must be sealed (proto_frame_seal_request)
 * before it is sent, as libtern seals every request at its send.
 * TERN_EMALFORMED if w holds no such frame, TERN_ETOOBIG past the
 * count's or the length's bound; w is unchanged on any error. */
int proto_produce_append(struct tern_wbuf *w,
                         proto_msg_at_cb at,
                         const void *msgs,
                         uint32_t n);
/* Rewrite producer_id and seq of an encoded PRODUCE frame in place and
 * recompute its checksum. TERN_EMALFORMED if frame is not a PRODUCE frame. */
int proto_frame_set_producer(void *frame,
                             size_t len,
                             uint64_t producer_id,
                             uint64_t seq);

/* ---- STATS (replication latency summary) ---- */

#define PROTO_STATS_RESET  0x01u
#define PROTO_STATS_STAGES 0x02u
/* Version of the STATS answer's stage tail this encoder writes, and its
 * bounds. */
#define PROTO_STATS_TAIL_VERSION   2u
#define PROTO_STATS_MAX_STAGES     32u
#define PROTO_STATS_MAX_STAGE_NAME 32u

/* STATS request; flags is a mix of PROTO_STATS_RESET and
 * PROTO_STATS_STAGES (else TERN_EINVAL). */
int proto_encode_stats_req(struct tern_wbuf *w,
                           uint64_t request_id,
                           uint8_t flags);

struct proto_stats
{
    uint64_t node_id;
    uint8_t role;
    const char *transport; /* borrowed, transport_len bytes */
    uint16_t transport_len;
    const char *durability; /* borrowed, durability_len bytes */
    uint16_t durability_len;
    uint64_t count;
    uint64_t dropped;
    uint64_t sum_ns;
    uint64_t min_ns;
    uint64_t p50_ns;
    uint64_t p90_ns;
    uint64_t p99_ns;
    uint64_t p999_ns;
    uint64_t max_ns;
    /* The stage tail (PROTO_STATS_STAGES): written and decoded when
     * has_stages; names borrowed (from body when decoding). */
    uint8_t has_stages;
    uint8_t n_stages;
    struct proto_stats_stage
    {
        const char *name; /* name_len bytes */
        uint16_t name_len;
        uint64_t count;
        uint64_t p50_ns;
        uint64_t p99_ns;
    } stages[PROTO_STATS_MAX_STAGES];
};
/* The *_len fields of st are used for the strings when encoding;
 * TERN_EINVAL if n_stages or a stage name is over its bound. */
int proto_encode_stats_resp(struct tern_wbuf *w,
                            uint64_t request_id,
                            const struct proto_stats *st);
int proto_decode_stats_resp(const void *body,
                            size_t len,
                            struct proto_stats *out);

/* ---- Security metadata (ops 10..19) ---- */

#define PROTO_MAX_USER       128u
#define PROTO_MAX_NAMESPACE  64u
#define PROTO_MAX_CREDENTIAL 255u
#define PROTO_USER_ADMIN     0x1u
#define PROTO_USER_CERT      0x2u
#define PROTO_PERM_PRODUCE   0x1u
#define PROTO_PERM_CONSUME   0x2u
#define PROTO_PERM_MANAGE    0x4u
#define PROTO_PERM_ADMIN     0x8u
#define PROTO_PERM_ALL       0xfu

/* Whether p[0..len) is a grant pattern (see above). */
int proto_pattern_valid(const char *p, size_t len);

/* Request encoders: one whole frame each; names and pattern are
 * NUL-terminated and borrowed for the call. TERN_EBADNAME for a bad name
 * or pattern, TERN_EINVAL for bad flags, perms or credential. */
int proto_encode_user_set(struct tern_wbuf *w,
                          uint64_t request_id,
                          const char *user,
                          uint32_t flags,
                          const void *cred,
                          uint32_t cred_len);
/* op USER_DELETE or NAMESPACE_DELETE; name a user or a namespace. */
int proto_encode_name_op(struct tern_wbuf *w,
                         uint8_t op,
                         uint64_t request_id,
                         const char *name);
/* ACL_SET (perms 1..15) or ACL_DELETE (perms ignored). */
int proto_encode_acl_op(struct tern_wbuf *w,
                        uint8_t op,
                        uint64_t request_id,
                        const char *user,
                        const char *ns,
                        const char *pattern,
                        uint32_t perms);
/* ACL_LIST of user's grants (NULL or "": everyone's), unpaged. */
int proto_encode_acl_list(struct tern_wbuf *w,
                          uint64_t request_id,
                          const char *user);
/* The cursor of a paged list request: the last entry of the previous
 * page (every field NULL or "": from the start). USER_LIST and
 * NAMESPACE_LIST use name only; ACL_LIST all three (the grant's user,
 * namespace and pattern). Borrowed for the call. */
struct proto_list_cursor
{
    const char *name;
    const char *ns;
    const char *pattern;
};
/* A paged USER_LIST, ACL_LIST (of user's grants, NULL or "": everyone's)
 * or NAMESPACE_LIST request (user must be NULL or "" for the other two):
 * the entries after *after (NULL: from the start), at most max_count of
 * them (0: the server's page size). TERN_EBADNAME for a bad name or
 * pattern or a cursor with some fields empty and others not, TERN_EINVAL
 * for another op. */
int proto_encode_list_page_req(struct tern_wbuf *w,
                               uint8_t op,
                               uint64_t request_id,
                               const char *user,
                               const struct proto_list_cursor *after,
                               uint32_t max_count);
int proto_encode_namespace_set(struct tern_wbuf *w,
                               uint64_t request_id,
                               const char *ns,
                               uint64_t max_queues,
                               uint64_t max_bytes,
                               uint64_t produce_bytes_per_s);
/* Unpaged USER_LIST and NAMESPACE_LIST and PRODUCER_INIT requests have
 * empty bodies: proto_encode_simple. */

/* Records of the list answers. Strings borrowed (not NUL-terminated). */
struct proto_user_entry
{
    const char *user;
    uint16_t user_len;
    uint32_t flags;
    uint8_t has_cred;
};
struct proto_acl_entry
{
    const char *user;
    uint16_t user_len;
    const char *ns;
    uint16_t ns_len;
    const char *pattern;
    uint16_t pattern_len;
    uint32_t perms;
};
struct proto_namespace_entry
{
    const char *ns;
    uint16_t ns_len;
    uint64_t max_queues;
    uint64_t max_bytes;
    uint64_t produce_bytes_per_s;
};

/* List answers (server side), streamed: proto_list_begin writes the frame
 * header and a count placeholder and returns the frame's start offset;
 * add records with proto_put_*_entry (strings NUL-terminated, borrowed);
 * proto_list_end(w, start, n) writes the count and seals the frame (the
 * unpaged answer), proto_list_end_page(w, start, n, more) also appends
 * the more byte (the answer to a paged request). op is USER_LIST,
 * ACL_LIST or NAMESPACE_LIST. The proto_list_*_size give the bytes one
 * record takes (a page's byte bound). */
size_t proto_list_begin(struct tern_wbuf *w, uint8_t op, uint64_t request_id);
void proto_put_user_entry(struct tern_wbuf *w,
                          const char *user,
                          uint32_t flags,
                          int has_cred);
void proto_put_acl_entry(struct tern_wbuf *w,
                         const char *user,
                         const char *ns,
                         const char *pattern,
                         uint32_t perms);
void proto_put_namespace_entry(struct tern_wbuf *w,
                               const char *ns,
                               uint64_t max_queues,
                               uint64_t max_bytes,
                               uint64_t produce_bytes_per_s);
int proto_list_end(struct tern_wbuf *w, size_t start, uint32_t n);
int proto_list_end_page(struct tern_wbuf *w,
                        size_t start,
                        uint32_t n,
                        int more);
size_t proto_list_user_size(const char *user);
size_t proto_list_acl_size(const char *user,
                           const char *ns,
                           const char *pattern);
size_t proto_list_namespace_size(const char *ns);

/* Decoding (client side): the whole body is validated for op (USER_LIST,
 * ACL_LIST, NAMESPACE_LIST; every name and pattern checked), then
 * iterate with the proto_next_* of that op. Both answers are accepted:
 * paged says whether the more byte was there (it must be 0 or 1).
 * TERN_EMALFORMED. */
struct proto_list_resp
{
    uint8_t op;
    uint32_t n;
    const uint8_t *entries;
    size_t entries_len;
    uint8_t paged;
    uint8_t more;
};
int proto_decode_list_resp(uint8_t op,
                           const void *body,
                           size_t len,
                           struct proto_list_resp *out);
/* 1 with *e filled, 0 at the end. */
int proto_next_user(const struct proto_list_resp *r,
                    size_t *pos,
                    struct proto_user_entry *e);
int proto_next_acl(const struct proto_list_resp *r,
                   size_t *pos,
                   struct proto_acl_entry *e);
int proto_next_namespace(const struct proto_list_resp *r,
                         size_t *pos,
                         struct proto_namespace_entry *e);

/* ---- Authentication (ops 20..21) ---- */

#define PROTO_MAX_MECHANISM 32u
#define PROTO_MAX_AUTH_DATA 2048u /* AUTH_SCRAM_MSG_MAX */

/* Request encoders: mechanism and ns NUL-terminated (ns NULL or "": the
 * default namespace), data[0..len) borrowed for the call. TERN_EBADNAME
 * for a bad namespace, TERN_EINVAL for a bad mechanism or len over
 * PROTO_MAX_AUTH_DATA. */
int proto_encode_auth_start(struct tern_wbuf *w,
                            uint64_t request_id,
                            const char *mechanism,
                            const char *ns,
                            const void *data,
                            uint32_t len);
int proto_encode_auth_continue(struct tern_wbuf *w,
                               uint64_t request_id,
                               const void *data,
                               uint32_t len);
/* Answer of either (op AUTH_START or AUTH_CONTINUE). */
int proto_encode_auth_resp(struct tern_wbuf *w,
                           uint8_t op,
                           uint64_t request_id,
                           const void *data,
                           uint32_t len);
/* *data borrowed from body. TERN_EMALFORMED. */
int proto_decode_auth_resp(const void *body,
                           size_t len,
                           const void **data,
                           uint32_t *data_len);

int proto_encode_producer_init_resp(struct tern_wbuf *w,
                                    uint64_t request_id,
                                    uint64_t producer_id);
int proto_decode_producer_init_resp(const void *body,
                                    size_t len,
                                    uint64_t *producer_id);

/* ---- Group status, trace deliveries, status timers (op 32, flags) ---- */

#define PROTO_TRACE_DELIVERIES     0x01u /* MESSAGE_TRACE request flags */
#define PROTO_STATUS_TIMERS        0x01u /* STATUS request flags */
#define PROTO_STATUS_CONSUMERS_MAX 64u
#define PROTO_GROUP_STATUS_VERSION 2u
#define PROTO_DELIVERY_NEW         0u
#define PROTO_DELIVERY_SETTLED     1u
#define PROTO_DELIVERY_LEASED      2u
#define PROTO_DELIVERY_READY       3u
/* Version of the STATUS answer's tail this encoder writes, and the
 * longest server_version it carries. */
#define PROTO_STATUS_TAIL_VERSION 2u
/* The tail with the members' roles (membership changes). */
#define PROTO_STATUS_TAIL_VERSION_MEMBERS 3u
#define PROTO_MAX_SERVER_VERSION          64u
/* GROUP_STATUS request: group NULL or "" = every group (paged by after,
 * NULL or "" = from the first; max_count 0 = the server's page size).
 * TERN_EBADNAME for a bad name. */
int proto_encode_group_status(struct tern_wbuf *w,
                              uint64_t request_id,
                              const char *queue,
                              const char *group,
                              const char *after,
                              uint32_t max_count);
struct proto_status_consumer
{
    uint64_t id;
    uint32_t held;
};
/* One record (version 1 fields; strings borrowed). */
struct proto_group_status
{
    uint8_t version;
    const char *group;
    uint16_t group_len;
    uint8_t shared;
    uint64_t start;
    uint64_t end;
    uint64_t committed;
    uint64_t next;
    uint64_t lag;
    uint64_t commit_ms;
    uint64_t ack_timeout_ms;
    uint32_t max_deliveries;
    uint32_t window;
    const char *dlq;
    uint16_t dlq_len;
    uint64_t dlq_depth;
    uint64_t in_flight;
    uint64_t ready;
    uint64_t oldest_deadline_ms;
    uint8_t partial;
    uint64_t others_held;
    uint16_t n_consumers;
    /* Encoding: consumers points at n_consumers entries (borrowed).
     * Decoding: raw records, iterate with proto_next_status_consumer. */
    const struct proto_status_consumer *consumers;
    const uint8_t *consumers_raw;
    uint64_t claim_holder; /* version 2: 0 = no live claim */
    uint64_t claim_until_ms;
};
/* GROUP_STATUS answer, streamed: begin writes the header and a count
 * placeholder and returns the frame start; proto_put_group_status adds a
 * record (g borrowed; TERN_EINVAL sticky in w->err for over
 * PROTO_STATUS_CONSUMERS_MAX consumers); proto_group_status_end patches n,
 * appends more and seals the frame. */
size_t proto_group_status_begin(struct tern_wbuf *w, uint64_t request_id);
void proto_put_group_status(struct tern_wbuf *w,
                            const struct proto_group_status *g);
/* Bytes proto_put_group_status adds for g. */
size_t proto_group_status_size(const struct proto_group_status *g);
int proto_group_status_end(struct tern_wbuf *w,
                           size_t start,
                           uint32_t n,
                           int more);
struct proto_group_status_resp
{
    uint32_t n;
    const uint8_t *records; /* iterate with proto_next_group_status */
    size_t records_len;
    uint8_t more;
};
/* The answer into out (borrowing from body): every record is checked.
 * TERN_EMALFORMED. */
int proto_decode_group_status_resp(const void *body,
                                   size_t len,
                                   struct proto_group_status_resp *out);
/* 1 with *g (borrowing from the body), or 0 at the end. */
int proto_next_group_status(const struct proto_group_status_resp *r,
                            size_t *pos,
                            struct proto_group_status *g);
/* Consumer i (< g->n_consumers) of a decoded record into *c. */
void proto_status_consumer(const struct proto_group_status *g,
                           uint32_t i,
                           struct proto_status_consumer *c);

/* MESSAGE_TRACE with request flags (0: the same bytes as
 * proto_encode_message_trace; else PROTO_TRACE_DELIVERIES, others
 * TERN_EINVAL). */
int proto_encode_message_trace_flags(struct tern_wbuf *w,
                                     uint64_t request_id,
                                     const char *queue,
                                     uint64_t offset,
                                     uint8_t flags);
struct proto_delivery
{
    const char *group; /* borrowed */
    uint16_t group_len;
    uint8_t state; /* PROTO_DELIVERY_* */
    uint32_t count;
    uint64_t consumer_id;
    uint64_t deadline_ms;
};
/* Server side, instead of proto_trace_end for a request with
 * PROTO_TRACE_DELIVERIES: the more byte of the groups, then the delivery
 * tail d[0..nd) (borrowed) and dmore, then seal. Errors as
 * proto_trace_end. */
int proto_trace_end_deliveries(struct tern_wbuf *w,
                               size_t start,
                               uint32_t n,
                               int more,
                               const struct proto_delivery *d,
                               uint32_t nd,
                               int dmore);
/* Bytes one delivery record of a group named name_len bytes takes. */
size_t proto_delivery_size(size_t name_len);
/* 1 with *d (borrowing from the body) of a decoded trace's tail, or 0. */
int proto_next_delivery(const struct proto_trace *t,
                        size_t *pos,
                        struct proto_delivery *d);
/* STATUS request with flags (0: the same bytes as proto_encode_simple;
 * else PROTO_STATUS_TIMERS, others TERN_EINVAL). */
int proto_encode_status_req(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint8_t flags);
/* CLUSTER_TRANSFER request (to_id 0: any caught-up voter) and its answer
 * (format above). */
int proto_encode_cluster_transfer(struct tern_wbuf *w,
                                  uint64_t request_id,
                                  uint64_t to_id);
int proto_encode_cluster_transfer_resp(struct tern_wbuf *w,
                                       uint64_t request_id,
                                       uint64_t leader_id,
                                       uint64_t term);
/* TERN_EMALFORMED for a wrong length or a leader_id of 0. */
int proto_decode_cluster_transfer_resp(const void *body,
                                       size_t len,
                                       uint64_t *leader_id,
                                       uint64_t *term);

/* ---- BACKUP (op 36; docs/OPERATIONS.md, "Backup and restore") ----
 *
 *   BACKUP  req: u8 flags (0: take a backup; PROTO_BACKUP_VERIFY: check
 *                the backup at path; other bits TERN_EMALFORMED), str path
 *                (1..PROTO_BACKUP_PATH_MAX bytes, no NUL: an absolute
 *                directory on the host of the node that serves the
 *                request, which must not exist or be empty and lie outside
 *                the node's data directory), u64 min_applied (the node
 *                first waits, up to NODE_BACKUP_WAIT_MS, until raft has
 *                applied this index there: the leader's commit index when
 *                the client asked, so the backup holds everything
 *                acknowledged before; 0: back up the node's state as it
 *                is)
 *           resp: u8 version (1), str cluster, u64 node_id, u64 term,
 *                 u64 last_applied, u64 log_start, u64 log_end,
 *                 u32 n_files, u64 total_bytes, u64 created_ms: the
 *                 backup's manifest, summed up. A later version appends
 *                 fields.
 * Served by the node that receives it (any role), with admin permission;
 * the answer comes when the copy is complete. TERN_EBACKUP while a backup
 * of that node runs, TERN_EFULL when its disk lacks the room, TERN_EINVAL
 * for a refused path, TERN_ECORRUPT for a backup that fails verification,
 * TERN_EBUSY when the node did not reach min_applied in time.
 */
#define PROTO_BACKUP_VERIFY   0x01u
#define PROTO_BACKUP_PATH_MAX 4095u
#define PROTO_BACKUP_VERSION  1u
struct proto_backup_info
{
    const char *cluster; /* borrowed (decode) or caller-owned (encode) */
    uint16_t cluster_len;
    uint64_t node_id;
    uint64_t term;
    uint64_t last_applied;
    uint64_t log_start;
    uint64_t log_end;
    uint32_t n_files;
    uint64_t total_bytes;
    uint64_t created_ms;
};
/* BACKUP request. dir caller-owned. TERN_EINVAL for bad flags or a path
 * that is empty, too long or holds a NUL. */
int proto_encode_backup(struct tern_wbuf *w,
                        uint64_t request_id,
                        uint8_t flags,
                        const char *dir,
                        uint64_t min_applied);
int proto_encode_backup_resp(struct tern_wbuf *w,
                             uint64_t request_id,
                             const struct proto_backup_info *b);
/* Strings in *out borrow from body. 0 or TERN_EMALFORMED/TERN_EVERSION. */
int proto_decode_backup_resp(const void *body,
                             size_t len,
                             struct proto_backup_info *out);

/* ---- HELLO ---- */

/* HELLO asking for features (PROTO_FEATURE_*); its answer with the
 * features taken; the answer's features into *out (0 or
 * TERN_EMALFORMED). The request decodes into proto_request.bits. */
int proto_encode_hello(struct tern_wbuf *w,
                       uint64_t request_id,
                       uint32_t features);
int proto_encode_hello_resp(struct tern_wbuf *w,
                            uint64_t request_id,
                            uint32_t features);
int proto_decode_hello_resp(const void *body, size_t len, uint32_t *out);

#endif /* TERN_PROTO_H */
