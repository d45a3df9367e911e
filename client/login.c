/*
 * libtern's login: the authentication exchange every connection runs
 * before the engine sends a request on it, when the client has
 * tern_client_set_auth (wire: proto.h ops 20..21, design: docs/AUTH.md).
 *
 * Once a connection is up (TCP, and TLS if used) the engine calls
 * tern__login_start, which puts the server in state AUTH and queues
 * AUTH_START (mechanism, namespace, SCRAM's client-first-message or the
 * EXTERNAL user name). Requests wait in the engine's queue meanwhile,
 * because only a READY server takes frames. Answers on an AUTH connection
 * come here (tern__login_on_frame):
 *   - SCRAM: the AUTH_START answer is the server-first-message, from which
 *     auth/scram.c computes the proof (PBKDF2 with the server's iteration
 *     count) sent in AUTH_CONTINUE; the AUTH_CONTINUE answer is the
 *     server-final-message, which must carry the server's signature
 *     (auth_scram_client_verify): a server that does not know the
 *     credential cannot complete the login;
 *   - EXTERNAL: an empty AUTH_START answer completes it.
 * Then the server is READY. Any refusal (TERN_EAUTH from the server, an
 * answer that does not verify, an unknown op from an older server) is
 * TERN_EAUTH with the reason: the engine fails the requests waiting for
 * that server and does not retry them elsewhere. Only the answers that
 * mean "busy, try again" (TERN_EBUSY, TERN_ESHUTDOWN, ...) are returned
 * as they are, to be retried like a lost connection. The login is bounded
 * by the request timeout (the engine drops a connection whose login has
 * not finished by s->connect_deadline).
 */
#include <errno.h>
#include <string.h>

#include "client_int.h"

#define TERN__SCRAM_MECHANISM    "SCRAM-SHA-256"
#define TERN__EXTERNAL_MECHANISM "EXTERNAL"

void tern__auth_free(struct tern__auth *a)
{
    if (a == NULL) {
        return;
    }
    if (a->password != NULL) {
        auth_wipe(a->password, strlen(a->password));
    }
    tern_free(a->password);
    tern_free(a->user);
    tern_free(a->ns);
    tern_free(a);
}

int tern__login_start(struct tern_client *c,
                      struct tern__server *s,
                      int64_t now)
{
    const struct tern__auth *a = c->auth;
    const char *data = "";
    size_t data_len = 0;
    const char *mech = TERN__EXTERNAL_MECHANISM;
    char why[TERN_ERRMSG_SIZE];
    int rv;

    auth_scram_client_free(s->scram);
    s->scram = NULL;
    if (a->mechanism == TERN_AUTH_SCRAM) {
        mech = TERN__SCRAM_MECHANISM;
        rv = auth_scram_client_new(a->user, a->password, 0, &s->scram, why);
        if (rv == 0) {
            rv = auth_scram_client_first(s->scram, &data, &data_len, why);
        }
        if (rv != 0) {
            tern_errmsg_printf(s->errmsg, "login to %s: %s", s->addr, why);
            return rv == TERN_EINVAL ? TERN_EAUTH : rv;
        }
    } else if (a->user != NULL) {
        data = a->user;
        data_len = strlen(a->user);
    }
    s->auth_id = ++c->next_id;
    s->auth_op = PROTO_OP_AUTH_START;
    rv = proto_encode_auth_start(&s->out, s->auth_id, mech, a->ns, data,
                                 (uint32_t)data_len);
    if (rv == 0 && s->out.err != 0) {
        rv = s->out.err;
    }
    if (rv != 0) {
        tern_errmsg_printf(s->errmsg, "login to %s: %s", s->addr,
                           tern_strerror(rv));
        return rv;
    }
    s->state = TERN__CONN_AUTH;
    s->connect_deadline = now + c->opts.request_timeout_ms;
    return 0;
}

/* An error answer to our AUTH frame: TERN_EAUTH with the server's reason,
 * or the status itself when it only says "try again". */
static int login_refused(struct tern__server *s,
                         int32_t status,
                         const uint8_t *body,
                         size_t len)
{
    struct proto_error e;
    const char *msg = tern_strerror(status);
    int msg_len = (int)strlen(msg);
    if (proto_decode_error(body, len, status, &e) == 0 && e.message_len > 0) {
        msg = e.message;
        msg_len = e.message_len;
    }
    switch (status) {
    case TERN_EBUSY:
    case TERN_ESHUTDOWN:
    case TERN_ENOCONN:
    case TERN_ELIMIT:
        tern_errmsg_printf(s->errmsg, "login to %s: %.*s", s->addr, msg_len,
                           msg);
        return status;
    case TERN_EINVAL:
        /* A server before ops 20..21: "unknown request op". */
        tern_errmsg_printf(s->errmsg,
                           "login to %s refused: %.*s (a server without "
                           "authentication?)",
                           s->addr, msg_len, msg);
        return TERN_EAUTH;
    default:
        tern_errmsg_printf(s->errmsg, "login to %s refused: %s: %.*s", s->addr,
                           tern_err_name(status), msg_len, msg);
        return TERN_EAUTH;
    }
}

int tern__login_on_frame(struct tern_client *c,
                         struct tern__server *s,
                         const struct proto_header *h,
                         const uint8_t *body)
{
    uint8_t op = (uint8_t)(h->op & ~PROTO_OP_RESPONSE);
    const void *data = NULL;
    uint32_t data_len = 0;
    const char *msg = NULL;
    size_t msg_len = 0;
    char why[TERN_ERRMSG_SIZE];
    int rv;

    if (op == PROTO_OP_ERROR) {
        return login_refused(s, h->status != 0 ? h->status : TERN_EMALFORMED,
                             body, h->body_len);
    }
    if ((h->op & PROTO_OP_RESPONSE) == 0 || h->request_id != s->auth_id ||
        op != s->auth_op) {
        tern_errmsg_printf(s->errmsg,
                           "login to %s: unexpected frame (op %u) during "
                           "the login",
                           s->addr, op);
        return TERN_EMALFORMED;
    }
    if (h->status != 0) {
        return login_refused(s, h->status, body, h->body_len);
    }
    if (proto_decode_auth_resp(body, h->body_len, &data, &data_len) != 0) {
        tern_errmsg_printf(s->errmsg, "login to %s: malformed answer", s->addr);
        return TERN_EMALFORMED;
    }
    if (s->scram == NULL) {
        /* EXTERNAL: the server checked the certificate; nothing follows. */
        if (data_len != 0) {
            tern_errmsg_printf(s->errmsg,
                               "login to %s: unexpected data in the "
                               "EXTERNAL answer",
                               s->addr);
            return TERN_EAUTH;
        }
        goto done;
    }
    if (op == PROTO_OP_AUTH_START) {
        rv = auth_scram_client_final(s->scram, data, data_len, &msg, &msg_len,
                                     why);
        if (rv != 0) {
            tern_errmsg_printf(s->errmsg, "login to %s refused: %s", s->addr,
                               why);
            return TERN_EAUTH;
        }
        s->auth_id = ++c->next_id;
        s->auth_op = PROTO_OP_AUTH_CONTINUE;
        rv = proto_encode_auth_continue(&s->out, s->auth_id, msg,
                                        (uint32_t)msg_len);
        if (rv == 0 && s->out.err != 0) {
            rv = s->out.err;
        }
        if (rv != 0) {
            tern_errmsg_printf(s->errmsg, "login to %s: %s", s->addr,
                               tern_strerror(rv));
        }
        return rv;
    }
    rv = auth_scram_client_verify(s->scram, data, data_len, why);
    if (rv != 0) {
        tern_errmsg_printf(s->errmsg,
                           "login to %s: the server did not prove it knows "
                           "the credential: %s",
                           s->addr, why);
        return TERN_EAUTH;
    }

done:
    auth_scram_client_free(s->scram);
    s->scram = NULL;
    s->auth_id = 0;
    s->logged_in = 1;
    s->state = TERN__CONN_READY;
    s->failures = 0;
    return 0;
}
