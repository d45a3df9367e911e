#!/usr/bin/env python3
"""Tenants (docs/AUTH.md "Namespaces", "Quotas"): a connection logs into
one namespace; queues of the same name in two namespaces are separate
(data, offsets, groups, lists); a user sees and touches only namespaces it
is granted; a namespace holding queues cannot be deleted; names that do
not fit with the namespace prefix are refused. Quotas per namespace:
max_queues and max_bytes answer TERN_EQUOTA and append nothing (the same
on every node, through a leader change), the produce rate answers
TERN_ETHROTTLED with the wait and lets the next second's bytes through."""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import auth_util as a  # noqa: E402


def isolation(c, cl, k):
    for ns in ("acme", "beta"):
        c.check(k.namespace_set(ns)[0] == 0, "NAMESPACE_SET %s" % ns)
    c.check(k.user_set("ann", "ann-pw")[0] == 0, "USER_SET ann")
    c.check(k.acl_set("ann", "acme", "*", "produce,consume,manage")[0] == 0,
            "grant ann everything in acme")
    c.check(k.user_set("ben", "ben-pw")[0] == 0, "USER_SET ben")
    c.check(k.acl_set("ben", "beta", "*", "produce,consume,manage")[0] == 0,
            "grant ben everything in beta")
    lid = cl.wait_leader()
    ann = a.login(cl, "ann", "ann-pw", ns="acme", node=lid)
    ben = a.login(cl, "ben", "ben-pw", ns="beta", node=lid)
    c.check(ann.create("orders")[0] == 0, "ann creates orders in acme")
    c.check(ben.create("orders")[0] == 0, "ben creates orders in beta")
    c.check(k.create("orders")[0] == 0, "admin creates orders in default")
    c.check(ann.produce("orders", [b"a1", b"a2"])[0] == 0, "ann produces")
    c.check(ben.produce("orders", [b"b1"])[0] == 0, "ben produces")
    st, got = ann.fetch("orders")
    c.check(st == 0 and got == [b"a1", b"a2"], "acme's orders", got)
    st, got = ben.fetch("orders")
    c.check(st == 0 and got == [b"b1"], "beta's orders", got)
    st, got = k.fetch("orders")
    c.check(st == 0 and got == [], "default's orders is empty", got)
    c.check(ann.group_commit("orders", "g", 2)[0] == 0, "ann commits g")
    st, _ = ben.group_fetch("orders", "g")
    c.check(st == 0, "ben's group g is its own", st)
    st, names = ann.queues()
    c.check(st == 0 and names == ["orders"], "ann lists acme's queues",
            names)
    st, names = k.queues()
    c.check(st == 0 and names == ["orders"],
            "admin in default lists default's queues only", names)
    # A user with no grant in a namespace can log in but touches nothing.
    with a.Conn(cl.nodes[lid]) as t:
        c.check(t.scram("ann", "ann-pw", ns="beta")[0] == 0,
                "ann logs into beta")
        st, m = t.fetch("orders")
        c.check(st == a.EDENIED and "beta" in m,
                "ann reads nothing in beta", (st, m))
        st, names = t.queues()
        c.check(st == 0 and names == [], "ann lists nothing in beta", names)
    # An admin logged into acme sees acme.
    with a.Conn(cl.nodes[lid]) as t:
        c.check(t.scram("admin", "admin-pw", ns="acme")[0] == 0,
                "admin logs into acme")
        st, got = t.fetch("orders")
        c.check(st == 0 and got == [b"a1", b"a2"],
                "admin reads acme's orders in acme", got)
    st, m = k.namespace_delete("acme")
    c.check(st == a.EINVAL, "NAMESPACE_DELETE acme with a queue: "
            "TERN_EINVAL", (st, m))
    st, m = ann.create("q" * (201 - len("acme%")))
    c.check(st == a.EBADNAME and "namespace" in m,
            "a 196-byte name does not fit with 'acme%' in 200 bytes",
            (st, m))
    c.check(ann.create("q" * (200 - len("acme%")))[0] == 0,
            "a 195-byte name fits")
    # Every node serves the namespaced names.
    for i in sorted(cl.nodes):
        def same(i=i):
            with a.Conn(cl.nodes[i]) as t:
                if t.scram("ann", "ann-pw", ns="acme")[0] != 0:
                    return False
                st, got = t.fetch("orders")
                return st == 0 and got == [b"a1", b"a2"]
        c.check(h.poll(same, 10, 0.2), "node %d serves acme's orders" % i)
    ann.close()
    ben.close()


def quotas(c, cl, k):
    c.check(k.namespace_set("small", max_queues=2, max_bytes=1000)[0] == 0,
            "NAMESPACE_SET small: 2 queues, 1000 bytes")
    c.check(k.acl_set("ann", "small", "*", "produce,consume,manage")[0] == 0,
            "grant ann small")
    lid = cl.wait_leader()
    t = a.login(cl, "ann", "ann-pw", ns="small", node=lid)
    c.check(t.create("q1")[0] == 0 and t.create("q2")[0] == 0,
            "two queues")
    st, m = t.create("q3")
    c.check(st == a.EQUOTA, "a third queue: TERN_EQUOTA", (st, m))
    c.check(t.produce("q1", [b"x" * 600])[0] == 0, "600 bytes")
    st, m = t.produce("q2", [b"y" * 300, b"z" * 200])
    c.check(st == a.EQUOTA, "500 more bytes: TERN_EQUOTA", (st, m))
    st, got = t.fetch("q2")
    c.check(st == 0 and got == [], "nothing of the refused batch", got)
    c.check(t.produce("q2", [b"y" * 400])[0] == 0, "400 bytes fit")
    c.check(t.delete("q1")[0] == 0, "delete q1 (gives 600 bytes back)")
    c.check(t.create("q3")[0] == 0, "q3 fits now")
    c.check(t.produce("q3", [b"w" * 550])[0] == 0, "550 bytes fit now")
    t.close()
    # The counters are derived state: the same after a leader change.
    cl.stop(lid)
    nl = cl.wait_leader(30, exclude=(lid,))
    t = a.login(cl, "ann", "ann-pw", ns="small", node=nl)
    st, m = t.produce("q3", [b"v" * 100])
    c.check(st == a.EQUOTA, "the new leader counts the same bytes "
            "(950 + 100 > 1000)", (st, m))
    c.check(t.produce("q3", [b"v" * 50])[0] == 0, "50 bytes still fit")
    t.close()
    cl.start_node(lid)

    # Produce rate: 2000 bytes/s, one second of burst.
    k2 = a.wait_admin(cl)  # k's node was stopped above
    c.check(k2.namespace_set("slow", rate=2000)[0] == 0,
            "NAMESPACE_SET slow: 2000 bytes/s")
    c.check(k2.acl_set("ann", "slow", "*", "produce,manage")[0] == 0,
            "grant ann slow")
    t = a.login(cl, "ann", "ann-pw", ns="slow")
    c.check(t.create("s")[0] == 0, "queue s")
    ok = throttled = 0
    msg = ""
    for _ in range(10):
        st, m = t.produce("s", [b"r" * 500])
        if st == 0:
            ok += 1
        elif st == a.ETHROTTLED:
            throttled += 1
            msg = m
    c.check(throttled > 0 and 4 <= ok <= 6,
            "10 x 500 bytes at once: about a second's worth pass, the rest "
            "TERN_ETHROTTLED", (ok, throttled))
    c.check("retry in" in msg, "the throttling error gives the wait", msg)
    time.sleep(1.1)
    c.check(t.produce("s", [b"r" * 500])[0] == 0,
            "after a second the bucket has room again")
    t.close()
    k2.close()


def main(c):
    with a.admin_cluster(3) as cl:
        cl.start()
        k = a.wait_admin(cl)
        c.check(k is not None, "admin logs in")
        if k is None:
            return
        isolation(c, cl, k)
        quotas(c, cl, k)
        k.close()


if __name__ == "__main__":
    h.run_test(main)
