/*
 * Fake tern server for libtern tests (see fake_server.h). One poll loop
 * thread; the model and the hooks run with fs->mu held.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_server.h"

static void conn_close(struct fake_server *fs, int i)
{
    if (fs->conn_fd[i] >= 0) {
        (void)close(fs->conn_fd[i]);
    }
    fs->conn_fd[i] = -1;
    fs->conn_out[i].len = 0;
    fs->conn_in_len[i] = 0;
}

void fake_send(struct fake_server *fs, int conn, const struct tern_wbuf *w)
{
    if (fs->conn_fd[conn] >= 0) {
        tern_wbuf_put(&fs->conn_out[conn], w->base, w->len);
    }
}

void fake_send_error(struct fake_server *fs,
                     int conn,
                     const struct proto_header *h,
                     int status,
                     const char *leader_addr)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    proto_encode_error(&w, h->op, h->request_id, status, tern_strerror(status),
                       leader_addr != NULL ? 2 : 0, leader_addr);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
}

void fake_defer(struct fake_server *fs, int conn, const struct tern_wbuf *w)
{
    if (fs->n_deferred >= FAKE_MAX_RECORDS) {
        return;
    }
    tern_wbuf_init(&fs->deferred[fs->n_deferred]);
    tern_wbuf_put(&fs->deferred[fs->n_deferred], w->base, w->len);
    fs->deferred_conn[fs->n_deferred] = conn;
    fs->n_deferred++;
}

void fake_flush_deferred(struct fake_server *fs, int reverse)
{
    for (int k = 0; k < fs->n_deferred; k++) {
        int i = reverse ? fs->n_deferred - 1 - k : k;
        fake_send(fs, fs->deferred_conn[i], &fs->deferred[i]);
    }
    for (int i = 0; i < fs->n_deferred; i++) {
        tern_wbuf_free(&fs->deferred[i]);
    }
    fs->n_deferred = 0;
}

static int queue_is(const struct fake_server *fs, const struct proto_request *r)
{
    return fs->queue_exists && strlen(fs->queue) == r->queue_len &&
           memcmp(fs->queue, r->queue, r->queue_len) == 0;
}

static void answer_error(struct tern_wbuf *w,
                         const struct proto_header *h,
                         int status)
{
    proto_encode_error(w, h->op, h->request_id, status, tern_strerror(status),
                       0, NULL);
}

void fake_model_answer(struct fake_server *fs,
                       const struct proto_header *h,
                       const struct proto_request *r,
                       struct tern_wbuf *w)
{
    switch (r->op) {
    case PROTO_OP_QUEUE_CREATE:
        if (fs->queue_exists) {
            answer_error(w, h, TERN_EQUEUEEXISTS);
            return;
        }
        memcpy(fs->queue, r->queue, r->queue_len);
        fs->queue[r->queue_len] = '\0';
        fs->queue_exists = 1;
        proto_encode_empty_resp(w, r->op, h->request_id);
        return;
    case PROTO_OP_QUEUE_DELETE:
        if (!queue_is(fs, r)) {
            answer_error(w, h, TERN_ENOQUEUE);
            return;
        }
        fs->queue_exists = 0;
        proto_encode_empty_resp(w, r->op, h->request_id);
        return;
    case PROTO_OP_QUEUE_LIST: {
        struct proto_queue_info qi = {fs->queue, (uint16_t)strlen(fs->queue), 0,
                                      fs->n_msgs};
        proto_encode_queue_list_resp(w, h->request_id, &qi,
                                     fs->queue_exists ? 1 : 0);
        return;
    }
    case PROTO_OP_PRODUCE: {
        struct proto_msg m;
        size_t pos = 0;
        uint64_t base = fs->n_msgs;
        if (!queue_is(fs, r)) {
            answer_error(w, h, TERN_ENOQUEUE);
            return;
        }
        if (r->producer_id != 0) {
            uint64_t last =
                fs->dedup_producer == r->producer_id ? fs->dedup_last_seq : 0;
            if (r->seq <= last) {
                int known = r->seq == last;
                proto_encode_produce_resp(w, h->request_id,
                                          known ? fs->dedup_base : 0,
                                          known ? fs->dedup_count : 0, 1);
                return;
            }
            if (r->seq != last + 1) {
                answer_error(w, h, TERN_ESEQUENCE);
                return;
            }
        }
        while (proto_next_msg(r, &pos, &m) && fs->n_msgs < FAKE_MAX_MSGS) {
            char *p = malloc(m.len + 1);
            memcpy(p, m.data, m.len);
            p[m.len] = '\0';
            fs->msgs[fs->n_msgs] = p;
            fs->msg_len[fs->n_msgs] = m.len;
            fs->n_msgs++;
        }
        if (r->producer_id != 0) {
            fs->dedup_producer = r->producer_id;
            fs->dedup_last_seq = r->seq;
            fs->dedup_base = base;
            fs->dedup_count = r->n_msgs;
        }
        fs->stats_count++;
        proto_encode_produce_resp(w, h->request_id, base, r->n_msgs, 0);
        return;
    }
    case PROTO_OP_FETCH:
    case PROTO_OP_GROUP_FETCH: {
        struct proto_fetched_msg fm[64];
        uint32_t n = 0;
        uint64_t off = r->op == PROTO_OP_FETCH ? r->offset : 0;
        if (!queue_is(fs, r)) {
            answer_error(w, h, TERN_ENOQUEUE);
            return;
        }
        while (off + n < fs->n_msgs && n < r->max_msgs && n < 64) {
            fm[n].offset = off + n;
            fm[n].timestamp_ms = 1000 + off + n;
            fm[n].data = fs->msgs[off + n];
            fm[n].len = fs->msg_len[off + n];
            n++;
        }
        if (r->op == PROTO_OP_GROUP_FETCH &&
            (r->flags & PROTO_GROUP_FETCH_SKIPPED) != 0) {
            struct proto_group_skip skip = {0, off};
            proto_encode_group_fetch_skip_resp(w, h->request_id, off + n,
                                               fs->n_msgs, fm, n, &skip);
            return;
        }
        proto_encode_fetch_resp(w, r->op, h->request_id, off + n, fs->n_msgs,
                                fm, n);
        return;
    }
    case PROTO_OP_GROUP_COMMIT:
        proto_encode_empty_resp(w, r->op, h->request_id);
        return;
    case PROTO_OP_STATUS: {
        struct proto_member mem = {1, "127.0.0.1:1", 11, fs->addr,
                                   (uint16_t)strlen(fs->addr)};
        struct proto_status st = {
            .node_id = 1,
            .role = 3,
            .leader_id = 1,
            .leader_address = fs->addr,
            .leader_address_len = (uint16_t)strlen(fs->addr),
            .term = 7,
            .commit_index = 42,
            .last_applied = 41,
            .writable = 1,
            .transport = "tcp",
            .transport_len = 3,
            .durability = "disk",
            .durability_len = 4,
            .n_members = 1,
            .members = &mem,
        };
        if (fs->status_follower) {
            st.role = 1; /* a follower of node 2, at peer_addr */
            st.leader_id = 2;
            st.leader_address = fs->peer_addr;
            st.leader_address_len = (uint16_t)strlen(fs->peer_addr);
            st.writable = 0;
        }
        proto_encode_status_resp(w, h->request_id, &st);
        return;
    }
    case PROTO_OP_STATS: {
        /* Sample k (1-based) took k us. */
        uint64_t n = fs->stats_count;
        struct proto_stats st = {
            .node_id = 1,
            .role = 3,
            .transport = "tcp",
            .transport_len = 3,
            .durability = "disk",
            .durability_len = 4,
            .count = n,
            .dropped = 0,
            .sum_ns = n * (n + 1) / 2 * 1000,
            .min_ns = n > 0 ? 1000 : 0,
            .p50_ns = (n + 1) / 2 * 1000,
            .p90_ns = n * 900,
            .p99_ns = n * 990,
            .p999_ns = n * 999,
            .max_ns = n * 1000,
        };
        if ((r->flags & PROTO_STATS_STAGES) != 0) {
            /* Two stages: "leader_disk" took k/2 us, "apply" 1 us. */
            st.has_stages = 1;
            st.n_stages = 2;
            st.stages[0] = (struct proto_stats_stage){
                "leader_disk", 11, n, (n + 1) / 2 * 500, n * 495};
            st.stages[1] =
                (struct proto_stats_stage){"apply", 5, n, 1000, 1000};
        }
        proto_encode_stats_resp(w, h->request_id, &st);
        if ((r->flags & PROTO_STATS_RESET) != 0) {
            fs->stats_count = 0;
            fs->stats_resets++;
        }
        return;
    }
    default:
        answer_error(w, h, TERN_EINVAL);
        return;
    }
}

/* One whole frame (header bytes at frame, body after them) from conn i. */
static void handle_frame(struct fake_server *fs,
                         int i,
                         const struct proto_header *h,
                         const uint8_t *frame)
{
    const uint8_t *body = frame + PROTO_HEADER_SIZE;
    size_t frame_len = PROTO_HEADER_SIZE + (size_t)h->body_len;
    struct proto_request r;
    struct tern_wbuf w;
    enum fake_action a = FAKE_DEFAULT;
    int rv = proto_decode_request(h->op, body, h->body_len, &r);
    if (h->op == PROTO_OP_HELLO) {
        fs->n_hello++;
        tern_wbuf_init(&w);
        if (fs->speaks_hello && rv == 0) {
            proto_encode_hello_resp(&w, h->request_id,
                                    r.bits & PROTO_FEATURE_XXH3);
        } else {
            answer_error(&w, h, TERN_EINVAL);
        }
        fake_send(fs, i, &w);
        tern_wbuf_free(&w);
        return;
    }
    fs->n_requests++;
    fs->last_version = h->version;
    if (rv != 0) {
        tern_wbuf_init(&w);
        answer_error(&w, h, rv);
        fake_send(fs, i, &w);
        tern_wbuf_free(&w);
        return;
    }
    if (r.op == PROTO_OP_PRODUCE && fs->n_records < FAKE_MAX_RECORDS) {
        struct fake_record *rec = &fs->records[fs->n_records++];
        rec->producer_id = r.producer_id;
        rec->seq = r.seq;
        rec->n_msgs = r.n_msgs;
        rec->conn = i;
    }
    if (r.op == PROTO_OP_PRODUCE) {
        fs->last_produce_len = 0;
        if (frame_len <= sizeof fs->last_produce) {
            memcpy(fs->last_produce, frame, frame_len);
            fs->last_produce_len = frame_len;
        }
    }
    if (fs->hook != NULL) {
        a = fs->hook(fs, i, h, &r);
    }
    switch (a) {
    case FAKE_DEFAULT:
        tern_wbuf_init(&w);
        fake_model_answer(fs, h, &r, &w);
        fake_send(fs, i, &w);
        tern_wbuf_free(&w);
        break;
    case FAKE_DROP:
        conn_close(fs, i);
        break;
    case FAKE_HANDLED:
    case FAKE_SILENT:
        break;
    }
}

static void conn_read(struct fake_server *fs, int i)
{
    uint8_t buf[65536];
    ssize_t n = recv(fs->conn_fd[i], buf, sizeof buf, 0);
    size_t off = 0;
    if (n <= 0) {
        conn_close(fs, i);
        return;
    }
    fs->conn_in[i] = realloc(fs->conn_in[i], fs->conn_in_len[i] + (size_t)n);
    memcpy(fs->conn_in[i] + fs->conn_in_len[i], buf, (size_t)n);
    fs->conn_in_len[i] += (size_t)n;
    while (fs->conn_fd[i] >= 0 &&
           fs->conn_in_len[i] - off >= PROTO_HEADER_SIZE) {
        struct proto_header h;
        const void *body;
        int rv =
            proto_frame_parse(fs->conn_in[i] + off, fs->conn_in_len[i] - off,
                              PROTO_DEFAULT_MAX_BODY, &h, &body);
        if (rv == TERN_EMALFORMED &&
            proto_header_decode(fs->conn_in[i] + off, PROTO_DEFAULT_MAX_BODY,
                                &h) == 0) {
            break; /* incomplete */
        }
        if (rv != 0) {
            conn_close(fs, i);
            return;
        }
        handle_frame(fs, i, &h, fs->conn_in[i] + off);
        off += PROTO_HEADER_SIZE + h.body_len;
    }
    if (fs->conn_fd[i] >= 0 && off > 0) {
        memmove(fs->conn_in[i], fs->conn_in[i] + off, fs->conn_in_len[i] - off);
        fs->conn_in_len[i] -= off;
    }
}

static void conn_write(struct fake_server *fs, int i)
{
    struct tern_wbuf *o = &fs->conn_out[i];
    size_t off = 0;
    while (off < o->len) {
        ssize_t n =
            send(fs->conn_fd[i], o->base + off, o->len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                break;
            }
            conn_close(fs, i);
            return;
        }
        off += (size_t)n;
    }
    memmove(o->base, o->base + off, o->len - off);
    o->len -= off;
}

static void *server_main(void *arg)
{
    struct fake_server *fs = arg;
    for (;;) {
        struct pollfd p[FAKE_MAX_CONNS + 2];
        int map[FAKE_MAX_CONNS + 2];
        int n = 0;
        (void)pthread_mutex_lock(&fs->mu);
        p[n].fd = fs->stop_pipe[0];
        p[n].events = POLLIN;
        map[n++] = -2;
        p[n].fd = fs->listen_fd;
        p[n].events = POLLIN;
        map[n++] = -1;
        for (int i = 0; i < FAKE_MAX_CONNS; i++) {
            if (fs->conn_fd[i] >= 0) {
                p[n].fd = fs->conn_fd[i];
                p[n].events =
                    (short)(POLLIN | (fs->conn_out[i].len > 0 ? POLLOUT : 0));
                map[n++] = i;
            }
        }
        (void)pthread_mutex_unlock(&fs->mu);
        if (poll(p, (nfds_t)n, 50) < 0 && errno != EINTR) {
            break;
        }
        if (p[0].revents != 0) {
            break;
        }
        (void)pthread_mutex_lock(&fs->mu);
        if (p[1].revents & POLLIN) {
            int fd = accept4(fs->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                int slot = -1;
                for (int i = 0; i < FAKE_MAX_CONNS; i++) {
                    if (fs->conn_fd[i] < 0) {
                        slot = i;
                        break;
                    }
                }
                if (slot < 0) {
                    (void)close(fd);
                } else {
                    fs->conn_fd[slot] = fd;
                    fs->conn_in_len[slot] = 0;
                    fs->conn_out[slot].len = 0;
                    fs->n_accepts++;
                }
            }
        }
        for (int k = 2; k < n; k++) {
            int i = map[k];
            if (fs->conn_fd[i] != p[k].fd) {
                continue;
            }
            if (p[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                conn_read(fs, i);
            }
        }
        for (int i = 0; i < FAKE_MAX_CONNS; i++) {
            if (fs->conn_fd[i] >= 0 && fs->conn_out[i].len > 0) {
                conn_write(fs, i);
            }
        }
        (void)pthread_mutex_unlock(&fs->mu);
    }
    return NULL;
}

int fake_start(struct fake_server *fs, fake_hook_cb hook)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    memset(fs, 0, sizeof *fs);
    (void)pthread_mutex_init(&fs->mu, NULL);
    fs->hook = hook;
    for (int i = 0; i < FAKE_MAX_CONNS; i++) {
        fs->conn_fd[i] = -1;
        tern_wbuf_init(&fs->conn_out[i]);
    }
    fs->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fs->listen_fd < 0) {
        return -errno;
    }
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (bind(fs->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(fs->listen_fd, 16) != 0 ||
        getsockname(fs->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
        return -errno;
    }
    (void)snprintf(fs->addr, sizeof fs->addr, "127.0.0.1:%u",
                   (unsigned)ntohs(sa.sin_port));
    if (pipe2(fs->stop_pipe, O_CLOEXEC) != 0) {
        return -errno;
    }
    return pthread_create(&fs->thread, NULL, server_main, fs) == 0 ? 0
                                                                   : -EAGAIN;
}

void fake_stop(struct fake_server *fs)
{
    char b = 1;
    if (write(fs->stop_pipe[1], &b, 1) != 1) {
        return;
    }
    (void)pthread_join(fs->thread, NULL);
    for (int i = 0; i < FAKE_MAX_CONNS; i++) {
        conn_close(fs, i);
        tern_wbuf_free(&fs->conn_out[i]);
        free(fs->conn_in[i]);
    }
    for (uint64_t i = 0; i < fs->n_msgs; i++) {
        free(fs->msgs[i]);
    }
    for (int i = 0; i < fs->n_deferred; i++) {
        tern_wbuf_free(&fs->deferred[i]);
    }
    (void)close(fs->listen_fd);
    (void)close(fs->stop_pipe[0]);
    (void)close(fs->stop_pipe[1]);
    (void)pthread_mutex_destroy(&fs->mu);
}

int fake_n_records(struct fake_server *fs)
{
    (void)pthread_mutex_lock(&fs->mu);
    int n = fs->n_records;
    (void)pthread_mutex_unlock(&fs->mu);
    return n;
}

struct fake_record fake_record_at(struct fake_server *fs, int i)
{
    (void)pthread_mutex_lock(&fs->mu);
    struct fake_record r = fs->records[i];
    (void)pthread_mutex_unlock(&fs->mu);
    return r;
}

int fake_n_requests(struct fake_server *fs)
{
    (void)pthread_mutex_lock(&fs->mu);
    int n = fs->n_requests;
    (void)pthread_mutex_unlock(&fs->mu);
    return n;
}

uint64_t fake_n_msgs(struct fake_server *fs)
{
    (void)pthread_mutex_lock(&fs->mu);
    uint64_t n = fs->n_msgs;
    (void)pthread_mutex_unlock(&fs->mu);
    return n;
}

char *fake_msg(struct fake_server *fs, uint64_t i)
{
    (void)pthread_mutex_lock(&fs->mu);
    char *s = i < fs->n_msgs ? strdup(fs->msgs[i]) : NULL;
    (void)pthread_mutex_unlock(&fs->mu);
    return s;
}

size_t fake_last_produce(struct fake_server *fs, void *buf, size_t cap)
{
    size_t n;
    (void)pthread_mutex_lock(&fs->mu);
    n = fs->last_produce_len;
    if (n > cap) {
        n = 0;
    }
    if (n > 0) {
        memcpy(buf, fs->last_produce, n);
    }
    (void)pthread_mutex_unlock(&fs->mu);
    return n;
}
