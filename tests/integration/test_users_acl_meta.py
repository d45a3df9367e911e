#!/usr/bin/env python3
"""Users, grants, namespaces and producer ids are replicated metadata
(docs/AUTH.md): set on the leader over the client protocol (ops 10..19),
they are listed by every node, survive a leader kill and a node restart,
and a node that catches up by snapshot has them too. Producer ids issued
after a leader change continue the sequence."""
import os
import socket
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import auth_util  # noqa: E402

USER_SET, USER_DELETE, USER_LIST = 10, 11, 12
ACL_SET, ACL_DELETE, ACL_LIST = 13, 14, 15
NS_SET, NS_DELETE, NS_LIST, PRODUCER_INIT = 16, 17, 18, 19
ENOTFOUND = -31028
CRED = auth_util.cred("a password")[0]  # auth/scram.c binary form


def rpc(nd, op, body=b"", rid=1):
    s = socket.create_connection(("127.0.0.1", nd.client_port), timeout=5)
    try:
        s.sendall(h.encode_frame(op, body, request_id=rid))
        return h.recv_frame(s, timeout=10)
    finally:
        s.close()


def get_str(b, at):
    (n,) = struct.unpack_from("<H", b, at)
    return b[at + 2:at + 2 + n].decode(), at + 2 + n


def lists(nd):
    """(users, grants, namespaces) as sorted tuples, or None."""
    try:
        fu, fa, fn = (rpc(nd, USER_LIST), rpc(nd, ACL_LIST, h.put_str("")),
                      rpc(nd, NS_LIST))
    except OSError:
        return None
    if fu is None or fa is None or fn is None or fu.status or fa.status \
            or fn.status:
        return None
    users, grants, nss = [], [], []
    (n,) = struct.unpack_from("<I", fu.body, 0)
    at = 4
    for _ in range(n):
        name, at = get_str(fu.body, at)
        flags, has = struct.unpack_from("<IB", fu.body, at)
        at += 5
        users.append((name, flags, has))
    (n,) = struct.unpack_from("<I", fa.body, 0)
    at = 4
    for _ in range(n):
        u, at = get_str(fa.body, at)
        ns, at = get_str(fa.body, at)
        pat, at = get_str(fa.body, at)
        (perms,) = struct.unpack_from("<I", fa.body, at)
        at += 4
        grants.append((u, ns, pat, perms))
    (n,) = struct.unpack_from("<I", fn.body, 0)
    at = 4
    for _ in range(n):
        ns, at = get_str(fn.body, at)
        q = struct.unpack_from("<QQQ", fn.body, at)
        at += 24
        nss.append((ns,) + q)
    return (tuple(users), tuple(grants), tuple(nss))


def write(c, nd, op, body, what, want=0):
    f = rpc(nd, op, body)
    c.check(f is not None and f.status == want, what, f)
    return f


def producer_init(c, nd):
    f = write(c, nd, PRODUCER_INIT, b"", "PRODUCER_INIT on node %d" % nd.id)
    return struct.unpack("<Q", f.body)[0] if f and not f.status else 0


def user_set(name, flags=0):
    return h.put_str(name) + struct.pack("<I", flags) + h.put_blob(CRED)


def acl(user, ns, pattern, perms=None):
    b = h.put_str(user) + h.put_str(ns) + h.put_str(pattern)
    return b + (struct.pack("<I", perms) if perms is not None else b"")


def same_everywhere(c, cl, want, ids, what):
    for i in ids:
        nd = cl.nodes[i]
        ok = h.poll(lambda: lists(nd) == want, 30)
        c.check(ok, "%s: node %d lists the metadata" % (what, i),
                lists(nd))


def main(c):
    raft = {"snapshot_threshold_bytes": 65536, "snapshot_trailing": 16}
    with h.Cluster(3, raft=raft) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        ld = cl.nodes[leader]
        c.step("set users, namespaces and grants on leader %d" % leader)
        write(c, ld, USER_SET, user_set("alice"), "USER_SET alice")
        write(c, ld, USER_SET, user_set("root", 1), "USER_SET root admin")
        write(c, ld, USER_SET, user_set("gone"), "USER_SET gone")
        write(c, ld, NS_SET, h.put_str("team1") +
              struct.pack("<QQQ", 10, 1 << 30, 5000), "NAMESPACE_SET team1")
        write(c, ld, ACL_SET, acl("alice", "team1", "orders*", 3),
              "ACL_SET alice team1 orders*")
        write(c, ld, ACL_SET, acl("alice", "default", "*", 2),
              "ACL_SET alice default *")
        write(c, ld, ACL_SET, acl("gone", "team1", "*", 15), "ACL_SET gone")
        write(c, ld, ACL_SET, acl("nobody", "team1", "*", 1),
              "ACL_SET for an unknown user is TERN_ENOTFOUND", ENOTFOUND)
        write(c, ld, USER_DELETE, h.put_str("gone"),
              "USER_DELETE gone (its grant goes with it)")
        write(c, ld, NS_DELETE, h.put_str("default"),
              "NAMESPACE_DELETE default is refused", h.CODE["TERN_EINVAL"])
        pid1 = producer_init(c, ld)
        pid2 = producer_init(c, ld)
        c.check(pid1 >= 1 << 32 and pid1 % (1 << 32) == 0 and
                pid2 == pid1 + (1 << 32),
                "producer id blocks %d, %d (block n is n << 32)" %
                (pid1, pid2))
        want = (
            (("alice", 0, 1), ("root", 1, 1)),
            (("alice", "default", "*", 2), ("alice", "team1", "orders*", 3)),
            (("default", 0, 0, 0), ("team1", 10, 1 << 30, 5000)),
        )
        same_everywhere(c, cl, want, (1, 2, 3), "after the writes")

        c.step("kill -9 leader %d" % leader)
        cl.kill(leader)
        new = cl.wait_leader(30, exclude=(leader,))
        c.check(new is not None, "a new leader is elected", new)
        same_everywhere(c, cl, want, [i for i in (1, 2, 3) if i != leader],
                        "after the leader kill")
        pid3 = producer_init(c, cl.nodes[new])
        c.check(pid3 > pid2, "the new leader issues a later producer id "
                "(%d > %d)" % (pid3, pid2))
        c.step("restart node %d" % leader)
        cl.start_node(leader)
        same_everywhere(c, cl, want, (leader,), "after the restart")

        lagger = [i for i in (1, 2, 3) if i != new][0]
        c.step("stop node %d, write ~2 MiB and a new user, restart it" %
               lagger)
        c.check(cl.stop(lagger) == 0, "node %d stopped" % lagger)
        new = cl.wait_leader(30, exclude=(lagger,))
        cl.tern("queue", "create", "fill", check=True)
        r = cl.tern("produce", "fill", "--count", 2000, "--size", 1024,
                    timeout=150)
        c.check(r.returncode == 0, "produce 2000 x 1 KiB",
                r.stderr.strip()[-300:])
        write(c, cl.nodes[new], USER_SET, user_set("carol", 2),
              "USER_SET carol while node %d is down" % lagger)
        want2 = ((("alice", 0, 1), ("carol", 2, 1), ("root", 1, 1)),
                 want[1], want[2])
        cl.start_node(lagger)
        st = cl.status(new)
        target = (st or {}).get("last_applied") or 0
        c.check(cl.wait_applied(lagger, target, 90),
                "node %d catches up to %d" % (lagger, target),
                cl.status(lagger))
        same_everywhere(c, cl, want2, (1, 2, 3), "after the catch-up")
        log = cl.nodes[lagger].log_text()
        c.info("node %d installed a snapshot: %s" %
               (lagger, "restored snapshot" in log))


if __name__ == "__main__":
    h.run_test(main)
