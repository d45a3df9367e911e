/*
 * tern error codes, shared by the server modules and the client library.
 *
 * Every tern call returns 0 on success or a negative code. Codes from the
 * operating system pass through as -errno (-ENOMEM, -ETIMEDOUT, ...); tern's
 * own codes live in the block -31000..-31999, disjoint from errno and from
 * LMDB's -30799..-30779, so a value identifies its origin. The numeric values
 * travel on the wire (status field of a response frame): never renumber.
 */
#ifndef TERN_ERRORS_H
#define TERN_ERRORS_H

/* X(name, value, message) */
#define TERN_ERRNO_MAP(X)                                                      \
    X(TERN_ENOTLEADER, -31001, "not the leader")                               \
    X(TERN_ENOLEADER, -31002, "no leader elected")                             \
    X(TERN_ECORRUPT, -31003, "corrupt data (checksum mismatch)")               \
    X(TERN_EFULL, -31004, "disk full")                                         \
    X(TERN_ETOOBIG, -31005, "message or frame too large")                      \
    X(TERN_EMALFORMED, -31006, "malformed frame or record")                    \
    X(TERN_ENOQUEUE, -31007, "no such queue")                                  \
    X(TERN_EQUEUEEXISTS, -31008, "queue already exists")                       \
    X(TERN_EVERSION, -31009, "unsupported format or protocol version")         \
    X(TERN_ESHUTDOWN, -31010, "shutting down")                                 \
    X(TERN_ECANCELED, -31011, "canceled")                                      \
    X(TERN_EOFFSET, -31012, "offset out of range")                             \
    X(TERN_ESEQUENCE, -31013, "producer sequence out of order")                \
    X(TERN_EBUSY, -31014, "busy, retry later")                                 \
    X(TERN_ENOCONN, -31015, "no connection to peer")                           \
    X(TERN_ELEADERSHIPLOST, -31016, "leadership lost, outcome unknown")        \
    X(TERN_EBADNAME, -31017, "invalid name")                                   \
    X(TERN_EINVAL, -31018, "invalid argument")                                 \
    X(TERN_EINTERNAL, -31019, "internal error")                                \
    X(TERN_ETIMEDOUT, -31020, "timed out, outcome unknown")                    \
    X(TERN_ECLOSED, -31021, "connection closed")                               \
    X(TERN_EAUTH, -31022, "authentication failed")                             \
    X(TERN_EDENIED, -31023, "permission denied")                               \
    X(TERN_ELIMIT, -31024, "server resource limit reached")                    \
    X(TERN_EQUOTA, -31025, "quota exceeded")                                   \
    X(TERN_ETHROTTLED, -31026, "throttled: rate quota exceeded, retry later")  \
    X(TERN_EIDENTITY, -31027, "data directory belongs to another node")        \
    X(TERN_ENOTFOUND, -31028, "no such user, namespace or grant")              \
    X(TERN_EQUEUEFULL, -31029, "queue full")                                   \
    X(TERN_ECLAIMED, -31030, "group held by another consumer")                 \
    X(TERN_ECHANGING, -31031, "a membership change is in progress")            \
    X(TERN_ELASTVOTER, -31032, "refused: would leave no voter")                \
    X(TERN_ENOTMEMBER, -31033, "not a member of the cluster configuration")    \
    X(TERN_ENOTVOTER, -31034, "no such voter to hand leadership to")           \
    X(TERN_ETRANSFER, -31035, "leadership transfer did not complete")          \
    X(TERN_EBACKUP, -31036, "a backup of this node is already running")

enum tern_errno {
#define TERN__ERRNO_ENUM(name, value, msg) name = (value),
    TERN_ERRNO_MAP(TERN__ERRNO_ENUM)
#undef TERN__ERRNO_ENUM
};

#endif /* TERN_ERRORS_H */
