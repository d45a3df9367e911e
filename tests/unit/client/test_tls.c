/*
 * libtern over TLS (tern_client_set_tls): a TLS-terminating proxy thread
 * (auth/tls.c, server role, node certificate with SAN IP 127.0.0.1 from
 * scripts/tern-certs.sh) in front of the fake server. A round trip works
 * with the cluster CA; a foreign CA, an address the certificate does not
 * name (127.0.0.2, "localhost") and a plaintext server are refused with
 * TERN_EAUTH and a message, without retrying until the deadline.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "auth.h"
#include "client_fixture.h"
#include "fake_server.h"

static char dir[64];
static char own[96], foreign[96];

static const char *in(const char *d, const char *name)
{
    static char paths[16][160];
    static unsigned k;
    char *p = paths[k++ % 16];
    (void)snprintf(p, 160, "%s/%s", d, name);
    return p;
}

static void setup(void)
{
    char cmd[512];
    strcpy(dir, "/tmp/tern-ctls-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    (void)snprintf(own, sizeof own, "%s/own", dir);
    (void)snprintf(foreign, sizeof foreign, "%s/foreign", dir);
    (void)snprintf(cmd, sizeof cmd,
                   "'%s' --client alice '%s' 1 >/dev/null && "
                   "'%s' '%s' 1 >/dev/null",
                   TERN_CERTS_SCRIPT, own, TERN_CERTS_SCRIPT, foreign);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void teardown(void)
{
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(client_tls, .init = setup, .fini = teardown, .timeout = 60);

/* The proxy: accepts TLS connections on listen_ip, one at a time, and
 * relays plaintext to the fake server at upstream. */
struct proxy
{
    pthread_t thread;
    int listen_fd;
    int stop_pipe[2];
    struct auth_tls_ctx *ctx;
    struct sockaddr_in upstream;
    char addr[64];
    int handshakes_ok;
    int handshakes_failed;
    char cn[64];
};

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) {
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int flush_tls(struct auth_tls *t, int fd)
{
    uint8_t buf[16384];
    size_t n;
    while ((n = auth_tls_take(t, buf, sizeof buf)) > 0) {
        if (send_all(fd, buf, n) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Relay one client connection until either side closes. */
static void relay(struct proxy *p, int cfd)
{
    struct auth_tls *t = NULL;
    int ufd = socket(AF_INET, SOCK_STREAM, 0);
    bool ready = false;
    uint8_t buf[16384];

    if (ufd < 0 ||
        connect(ufd, (struct sockaddr *)&p->upstream, sizeof p->upstream) !=
            0 ||
        auth_tls_new(p->ctx, NULL, &t, NULL) != 0) {
        goto out;
    }
    for (int i = 0; i < 100000; i++) {
        struct pollfd pf[3] = {
            {cfd, POLLIN, 0}, {ufd, POLLIN, 0}, {p->stop_pipe[0], POLLIN, 0}};
        if (poll(pf, 3, 1000) < 0 || pf[2].revents != 0) {
            break;
        }
        if (pf[0].revents != 0) {
            ssize_t k = recv(cfd, buf, sizeof buf, 0);
            size_t used = 0;
            if (k <= 0) {
                break;
            }
            (void)auth_tls_feed(t, buf, (size_t)k, &used);
            if (!ready) {
                int rc = auth_tls_handshake(t);
                (void)flush_tls(t, cfd);
                if (rc < 0) {
                    p->handshakes_failed++;
                    break;
                }
                if (rc == 0) {
                    ready = true;
                    p->handshakes_ok++;
                    if (auth_tls_peer_cn(t, p->cn, sizeof p->cn) != 0) {
                        p->cn[0] = '\0';
                    }
                }
            }
            if (ready) {
                size_t n = 0;
                int rc;
                while ((rc = auth_tls_read(t, buf, sizeof buf, &n)) == 0 &&
                       n > 0) {
                    if (send_all(ufd, buf, n) != 0) {
                        goto out;
                    }
                }
                if (rc != 0) {
                    break;
                }
            }
        }
        if (pf[1].revents != 0) {
            ssize_t k = recv(ufd, buf, sizeof buf, 0);
            size_t off = 0;
            if (k <= 0) {
                break;
            }
            while (off < (size_t)k) {
                size_t used = 0;
                if (auth_tls_write(t, buf + off, (size_t)k - off, &used) != 0) {
                    goto out;
                }
                off += used;
                if (flush_tls(t, cfd) != 0) {
                    goto out;
                }
            }
        }
    }
out:
    auth_tls_free(t);
    if (ufd >= 0) {
        close(ufd);
    }
}

static void *proxy_main(void *arg)
{
    struct proxy *p = arg;
    for (;;) {
        struct pollfd pf[2] = {{p->listen_fd, POLLIN, 0},
                               {p->stop_pipe[0], POLLIN, 0}};
        int cfd;
        if (poll(pf, 2, -1) < 0 || pf[1].revents != 0) {
            return NULL;
        }
        cfd = accept(p->listen_fd, NULL, NULL);
        if (cfd >= 0) {
            relay(p, cfd);
            close(cfd);
        }
    }
}

/* Start p on listen_ip with node1's certificate; client certificates
 * verified against own's CA when client_ca. */
static void proxy_start(struct proxy *p,
                        const char *listen_ip,
                        const struct fake_server *fs,
                        bool client_ca)
{
    struct auth_tls_ctx_options o = {0};
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof sa;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    const char *colon = strrchr(fs->addr, ':');

    memset(p, 0, sizeof *p);
    o.role = AUTH_TLS_SERVER;
    o.cert_file = in(own, "node1.pem");
    o.key_file = in(own, "node1.key");
    o.ca_file = client_ca ? in(own, "ca.pem") : NULL;
    cr_assert_eq(auth_tls_ctx_new(&o, &p->ctx, errmsg), 0, "%s", errmsg);
    p->upstream.sin_family = AF_INET;
    p->upstream.sin_port = htons((uint16_t)atoi(colon + 1));
    p->upstream.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_family = AF_INET;
    cr_assert_eq(inet_pton(AF_INET, listen_ip, &sa.sin_addr), 1);
    cr_assert_eq(bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(p->listen_fd, 8), 0);
    cr_assert_eq(getsockname(p->listen_fd, (struct sockaddr *)&sa, &len), 0);
    (void)snprintf(p->addr, sizeof p->addr, "%s:%u", listen_ip,
                   ntohs(sa.sin_port));
    cr_assert_eq(pipe(p->stop_pipe), 0);
    cr_assert_eq(pthread_create(&p->thread, NULL, proxy_main, p), 0);
}

static void proxy_stop(struct proxy *p)
{
    (void)!write(p->stop_pipe[1], "x", 1);
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    close(p->stop_pipe[0]);
    close(p->stop_pipe[1]);
    auth_tls_ctx_free(p->ctx);
}

Test(client_tls, round_trip)
{
    struct fake_server fs;
    struct proxy p;
    struct tern_client *c;
    struct tern_msg m = {"hello", 5};
    struct tern_fetch_result *r = NULL;
    uint64_t base = 99;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    proxy_start(&p, "127.0.0.1", &fs, false);
    c = client_for(p.addr, 3000, 4);
    cr_assert_eq(tern_client_set_tls(c, in(own, "ca.pem"), NULL, NULL), 0, "%s",
                 tern_client_errmsg(c));
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0);
    cr_assert_eq(tern_fetch(c, "q", 0, 10, 1 << 20, 0, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(tern_fetch_result_count(r), 1);
    {
        const void *data = NULL;
        size_t len = 0;
        cr_assert_eq(tern_fetch_result_get(r, 0, NULL, NULL, &data, &len), 0);
        cr_expect_eq(len, 5);
        cr_expect_eq(memcmp(data, "hello", 5), 0);
    }
    tern_fetch_result_free(r);
    tern_client_free(c);
    cr_expect_eq(p.handshakes_ok, 1, "one connection, one handshake");
    proxy_stop(&p);
    fake_stop(&fs);
}

Test(client_tls, client_certificate_presented)
{
    struct fake_server fs;
    struct proxy p;
    struct tern_client *c;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    proxy_start(&p, "127.0.0.1", &fs, true);
    c = client_for(p.addr, 3000, 4);
    cr_expect_eq(tern_client_set_tls(c, in(own, "ca.pem"),
                                     in(own, "client-alice.pem"), NULL),
                 TERN_EINVAL, "a certificate needs its key");
    cr_assert_eq(
        tern_client_set_tls(c, in(own, "ca.pem"), in(own, "client-alice.pem"),
                            in(own, "client-alice.key")),
        0, "%s", tern_client_errmsg(c));
    create_queue(c, "q");
    cr_expect_str_eq(p.cn, "alice");
    tern_client_free(c);
    proxy_stop(&p);
    fake_stop(&fs);
}

/* A refused server: TERN_EAUTH with why, well before the request
 * deadline (no retries), and nothing reached the fake server. */
static void expect_refused(const char *listen_ip,
                           const char *connect_host,
                           const char *ca_dir,
                           const char *why)
{
    struct fake_server fs;
    struct proxy p;
    struct tern_client *c;
    char addr[96];
    int64_t t0;
    int rv;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    proxy_start(&p, listen_ip, &fs, false);
    (void)snprintf(addr, sizeof addr, "%s%s", connect_host,
                   strrchr(p.addr, ':'));
    c = client_for(addr, 8000, 4);
    cr_assert_eq(tern_client_set_tls(c, in(ca_dir, "ca.pem"), NULL, NULL), 0);
    t0 = now_ms();
    rv = tern_queue_create(c, "q");
    cr_expect_eq(rv, TERN_EAUTH, "%s: %s", addr, tern_strerror(rv));
    cr_expect(strstr(tern_client_errmsg(c), why) != NULL, "%s",
              tern_client_errmsg(c));
    cr_expect_lt(now_ms() - t0, 4000, "refused at once, not at the deadline");
    cr_expect_eq(fake_n_requests(&fs), 0);
    tern_client_free(c);
    proxy_stop(&p);
    fake_stop(&fs);
}

Test(client_tls, foreign_ca_refused)
{
    expect_refused("127.0.0.1", "127.0.0.1", foreign,
                   "certificate verify failed");
}

Test(client_tls, ip_not_in_certificate_refused)
{
    /* node1.pem names 127.0.0.1 only. */
    expect_refused("127.0.0.2", "127.0.0.2", own, "IP address mismatch");
}

Test(client_tls, host_name_not_in_certificate_refused)
{
    expect_refused("127.0.0.1", "localhost", own, "hostname mismatch");
}

Test(client_tls, plaintext_server_refused)
{
    struct fake_server fs;
    struct tern_client *c;
    int rv;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    c = client_for(fs.addr, 3000, 4);
    cr_assert_eq(tern_client_set_tls(c, in(own, "ca.pem"), NULL, NULL), 0);
    rv = tern_queue_create(c, "q");
    cr_expect_neq(rv, 0);
    cr_expect(strstr(tern_client_errmsg(c), "TLS") != NULL, "%s",
              tern_client_errmsg(c));
    cr_expect_eq(fake_n_requests(&fs), 0);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_tls, bad_files)
{
    struct tern_client *c = client_for("127.0.0.1:1", 1000, 4);
    cr_expect_eq(tern_client_set_tls(c, NULL, NULL, NULL), TERN_EINVAL);
    cr_expect_eq(tern_client_set_tls(c, in(own, "missing.pem"), NULL, NULL),
                 TERN_EINVAL);
    cr_expect(strstr(tern_client_errmsg(c), "missing.pem") != NULL, "%s",
              tern_client_errmsg(c));
    tern_client_free(c);
}
