#!/usr/bin/env python3
"""Client authentication (docs/AUTH.md): with client_auth on, a connection
that has not authenticated gets TERN_EAUTH for everything but STATUS; the
bootstrap admin is created once by the leader; SCRAM-SHA-256 succeeds with
the right password (the server proves its key too) and fails the same way
for a wrong password and an unknown user, closing the connection; an
unknown user's salt is the same on every node and every time; a second
exchange, a bad mechanism or an unknown namespace are refused; a stored
credential that is not one is refused; EXTERNAL logs in a certificate user
by its CN over TLS; a user deleted after login loses the connection's
rights; a node that was down while a user was created answers every login
TERN_EBUSY until it has caught up with the log."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import auth_util as a  # noqa: E402


def unauthenticated(c, cl):
    lid = cl.wait_leader()
    with a.Conn(cl.nodes[lid]) as k:
        st, _ = k.rpc("STATUS")
        c.check(st == 0, "STATUS needs no authentication", st)
        for what, call in (("QUEUE_CREATE", lambda: k.create("q")),
                           ("PRODUCE", lambda: k.produce("q", [b"x"])),
                           ("FETCH", lambda: k.fetch("q")),
                           ("QUEUE_LIST", lambda: k.queues()),
                           ("USER_LIST", lambda: k.users()),
                           ("PRODUCER_INIT", lambda: k.producer_init()),
                           ("STATS", lambda: k.stats())):
            st, m = call()
            c.check(st == a.EAUTH and "authenticate first" in m,
                    "%s before authentication: TERN_EAUTH" % what, (st, m))
        st, _ = k.rpc("STATUS")
        c.check(st == 0, "the connection stays open after TERN_EAUTH", st)


def bootstrap(c, cl):
    k = a.wait_admin(cl)
    c.check(k is not None, "the bootstrap admin logs in on the leader")
    if k is None:
        return None
    st, users = k.users()
    c.check(st == 0 and users == [("admin", a.USER_ADMIN, 1)],
            "users: only the bootstrap admin, with the admin flag", users)
    return k


def scram_cases(c, cl, k):
    c.check(k.user_set("alice", "alice-pw")[0] == 0, "USER_SET alice")
    st, m = k.user_set("mallory", raw=b"\x01" * 92)
    c.check(st == a.EINVAL and "SCRAM" in m,
            "USER_SET with a credential that is not one: TERN_EINVAL",
            (st, m))
    lid = cl.wait_leader()
    followers = [i for i in cl.nodes if i != lid]
    # Every node serves the exchange from its own index.
    for i in [lid] + followers:
        def ok(i=i):
            with a.Conn(cl.nodes[i]) as t:
                return t.scram("alice", "alice-pw")[0] == 0
        c.check(h.poll(ok, 10, 0.2), "alice logs in on node %d" % i)
    with a.Conn(cl.nodes[lid]) as t:
        st, m = t.scram("alice", "wrong")
        c.check(st == a.EAUTH, "wrong password: TERN_EAUTH", (st, m))
        c.check(t.closed(), "the connection is closed after a failed login")
    with a.Conn(cl.nodes[lid]) as t:
        st, m = t.scram("nobody", "whatever")
        c.check(st == a.EAUTH, "unknown user: TERN_EAUTH", (st, m))
        c.check("unknown user or wrong password" in m,
                "unknown user and wrong password read alike", m)
    with a.Conn(cl.nodes[lid]) as t:
        st, m = t.scram("alice", "alice-pw", tamper=True)
        c.check(st == a.EAUTH, "a tampered proof: TERN_EAUTH", (st, m))
    # The answers for an unknown user are stable across nodes and
    # attempts (derived from the cluster secret), and look like a real
    # user's: salt and iteration count present.
    salts = set()
    for i in sorted(cl.nodes):
        for _ in range(2):
            with a.Conn(cl.nodes[i]) as t:
                st, attrs = t.scram_first("ghost")
                c.check(st == 0 and "s" in attrs and attrs.get("i") == "4096",
                        "node %d answers AUTH_START for an unknown user like "
                        "for a real one" % i, attrs)
                salts.add(attrs.get("s") if st == 0 else None)
    c.check(len(salts) == 1, "the unknown user's salt is the same on every "
            "node and every attempt", salts)
    with a.Conn(cl.nodes[lid]) as t:
        c.check(t.scram("alice", "alice-pw")[0] == 0, "login")
        st, m = t.scram("alice", "alice-pw")
        c.check(st == a.EAUTH and "already" in m,
                "a second exchange on a connection: TERN_EAUTH", (st, m))
    with a.Conn(cl.nodes[lid]) as t:
        st, m = t.rpc("AUTH_START", h.put_str("PLAIN") + h.put_str("") +
                      h.put_blob(b"\0alice\0alice-pw"))
        c.check(st == a.EAUTH and "mechanism" in m,
                "mechanism PLAIN: TERN_EAUTH", (st, m))
    with a.Conn(cl.nodes[lid]) as t:
        st, m = t.scram("alice", "alice-pw", ns="nosuchns")
        c.check(st == a.EAUTH and "nosuchns" in m,
                "login into a namespace that does not exist: TERN_EAUTH",
                (st, m))
    with a.Conn(cl.nodes[lid]) as t:
        st, m = t.rpc("AUTH_CONTINUE", h.put_blob(b"c=biws,r=x,p=AAAA"))
        c.check(st == a.EAUTH, "AUTH_CONTINUE without AUTH_START: "
                "TERN_EAUTH", (st, m))
    with a.Conn(cl.nodes[lid]) as t:
        st, m = t.external("alice")
        c.check(st == a.EAUTH and "certificate" in m,
                "EXTERNAL without a client certificate: TERN_EAUTH", (st, m))


def deleted_user(c, cl, k):
    lid = cl.wait_leader()
    c.check(k.user_set("bob", "bob-pw")[0] == 0, "USER_SET bob")
    c.check(k.acl_set("bob", "default", "*", "produce,consume,manage")[0]
            == 0, "grant bob everything in default")
    t = a.login(cl, "bob", "bob-pw", node=lid)
    c.check(t.create("bobq")[0] == 0, "bob creates a queue")
    c.check(k.user_delete("bob")[0] == 0, "USER_DELETE bob")
    st, m = t.produce("bobq", [b"x"])
    c.check(st == a.EAUTH and "deleted" in m,
            "bob's open connection is refused once bob is deleted", (st, m))
    c.check(k.user_set("bob", "bob-pw")[0] == 0, "bob created again")
    st, m = t.produce("bobq", [b"x"])
    c.check(st == a.EAUTH, "the old connection is not the new bob", (st, m))
    t.close()


def external(c):
    """EXTERNAL over client TLS with client certificates."""
    _, text = a.cred("admin-pw")
    sec = {"client_auth": "on", "bootstrap_admin": "admin",
           "bootstrap_admin_cred": text}
    with h.Cluster(1, client_tls="on", client_ca=True,
                   clients=("carol", "eve"), security=sec) as cl:
        cl.start()
        lid = cl.wait_leader()
        nd = cl.nodes[lid]
        ca = os.path.join(cl.certs, "ca.pem")
        cert = lambda n: (ca, os.path.join(cl.certs, "client-%s.pem" % n),  # noqa: E731
                          os.path.join(cl.certs, "client-%s.key" % n))
        k = h.poll(lambda: (lambda t: t if t.scram("admin", "admin-pw")[0]
                            == 0 else t.close())(a.Conn(nd, tls=(ca, None,
                                                                 None))),
                   20, 0.2)
        c.check(k is not None, "admin logs in over TLS")
        if k is None:
            return
        c.check(k.user_set("carol", None, flags=a.USER_CERT)[0] == 0,
                "USER_SET carol, certificate only")
        c.check(k.user_set("eve", "eve-pw")[0] == 0,
                "USER_SET eve, password only")
        with a.Conn(nd, tls=cert("carol")) as t:
            c.check(t.external()[0] == 0, "carol logs in by certificate")
            c.check(t.create("cq")[0] == a.EDENIED,
                    "carol has no grant yet: TERN_EDENIED")
        with a.Conn(nd, tls=cert("carol")) as t:
            st, m = t.external("dave")
            c.check(st == a.EAUTH, "EXTERNAL naming another user than the "
                    "CN: TERN_EAUTH", (st, m))
        with a.Conn(nd, tls=cert("eve")) as t:
            st, m = t.external()
            c.check(st == a.EAUTH, "eve is not allowed to log in by "
                    "certificate: TERN_EAUTH", (st, m))
        with a.Conn(nd, tls=cert("carol")) as t:
            st, m = t.scram("carol", "")
            c.check(st == a.EAUTH, "carol has no password: SCRAM fails",
                    (st, m))
        external_libtern(c, cl, k, cert)
        k.close()


def external_libtern(c, cl, k, cert):
    """The same EXTERNAL login from libtern (the CLI's --auth external)
    over a real TLS connection to every node of the cluster."""
    c.step("libtern: --auth external with a client certificate")

    def tls(n):
        ca, crt, key = cert(n)
        return ["--ca", ca, "--cert", crt, "--key", key, "--auth", "external"]

    c.check(k.acl_set("carol", "default", "cq", "manage,produce,consume")[0]
            == 0, "grant carol manage,produce,consume on cq")
    r = cl.tern("queue", "create", "cq", tls=tls("carol"))
    c.check(r.returncode == 0, "carol creates cq through libtern",
            r.stderr.strip())
    r = cl.tern("produce", "cq", "--count", 3, tls=tls("carol"))
    c.check(r.returncode == 0, "carol produces to cq", r.stderr.strip())
    r = cl.tern("consume", "cq", "--max", 3, tls=tls("carol"))
    c.check(r.returncode == 0 and len(r.stdout.splitlines()) == 3,
            "carol consumes the 3 messages", (r.returncode, r.stdout,
                                              r.stderr.strip()))
    r = cl.tern("queue", "create", "other", tls=tls("carol"))
    c.check(r.returncode != 0 and "permission denied" in r.stderr,
            "carol has no grant on queue other: TERN_EDENIED",
            r.stderr.strip())
    r = cl.tern("queue", "list", tls=tls("eve"))
    c.check(r.returncode != 0 and "EAUTH" in r.stderr,
            "eve's certificate does not log eve in: TERN_EAUTH",
            r.stderr.strip())
    ca, _, _ = cert("carol")
    r = cl.tern("queue", "list", tls=["--ca", ca, "--auth", "external"])
    c.check(r.returncode != 0, "EXTERNAL without a client certificate "
            "fails", r.stderr.strip())


def wait_status(nd, timeout=20):
    def up():
        try:
            with a.Conn(nd, timeout=2) as k:
                return k.rpc("STATUS")[0] == 0
        except OSError:
            return False
    return h.poll(up, timeout, interval=0.2)


def late_node(c, cl, k):
    """A node that was down while a user was created answers every login
    TERN_EBUSY (the same for that user, a wrong password and a stranger)
    until its index has caught up with the log; then the user logs in."""
    c.step("a node that has not caught up refuses logins as busy")
    lid = cl.wait_leader()
    f = [i for i in cl.nodes if i != lid][0]
    cl.stop(f)
    c.check(k.user_set("carol", "carol-pw")[0] == 0,
            "USER_SET carol while node %d is down" % f)
    k.close()
    for i in cl.nodes:
        if i != f:
            cl.stop(i)
    failed = cl.nodes[f].log_text().count("client authentication failed")
    cl.start_node(f)
    c.check(wait_status(cl.nodes[f]), "node %d answers STATUS alone" % f)
    for user, pw in (("carol", "carol-pw"), ("carol", "wrong"),
                     ("nobody", "x"), ("admin", "admin-pw")):
        with a.Conn(cl.nodes[f]) as t:
            st, m = t.scram(user, pw)
        c.check(st == a.EBUSY and "heard from no leader" in m,
                "alone, %s/%s: TERN_EBUSY, nothing judged" % (user, pw),
                (st, m))
    with a.Conn(cl.nodes[f]) as t:
        st, m = t.external("carol")
    c.check(st == a.EBUSY, "EXTERNAL too: TERN_EBUSY", (st, m))
    c.check(cl.nodes[f].log_text().count("client authentication failed")
            == failed, "no login was judged, so none failed")
    for i in cl.nodes:
        if i != f:
            cl.start_node(i)

    def carol():
        with a.Conn(cl.nodes[f]) as t:
            return t.scram("carol", "carol-pw")[0] == 0
    c.check(h.poll(carol, 30, interval=0.2),
            "carol logs in on node %d once it caught up" % f)
    c.check("index caught up with the log" in cl.nodes[f].log_text(),
            "node %d logged that it caught up" % f)
    with a.Conn(cl.nodes[f]) as t:
        st, m = t.scram("carol", "wrong")
    c.check(st == a.EAUTH, "then a wrong password is TERN_EAUTH", (st, m))


def main(c):
    with a.admin_cluster(3) as cl:
        cl.start()
        unauthenticated(c, cl)
        k = bootstrap(c, cl)
        if k is None:
            return
        scram_cases(c, cl, k)
        deleted_user(c, cl, k)
        k.close()
        # A restarted leader does not propose the bootstrap admin again.
        lid = cl.wait_leader()
        cl.stop(lid)
        cl.start_node(lid)
        k = a.wait_admin(cl)
        c.check(k is not None, "admin logs in after a leader restart")
        if k is not None:
            st, users = k.users()
            c.check(st == 0 and [u[0] for u in users] ==
                    ["admin", "alice", "bob"],
                    "users after the restart", users)
            late_node(c, cl, k)
        c.check("bootstrap admin proposed" in "".join(
            nd.log_text() for nd in cl.nodes.values()),
            "a node logged the bootstrap proposal")
    external(c)


if __name__ == "__main__":
    h.run_test(main)
