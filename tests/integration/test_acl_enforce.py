#!/usr/bin/env python3
"""Authorization (docs/AUTH.md "Enforcement"): every op of an
authenticated user is checked against its grants. For each op one user is
allowed and one refused with TERN_EDENIED naming the permission: PRODUCE
(produce), FETCH / GROUP_FETCH / GROUP_COMMIT (consume), QUEUE_CREATE /
QUEUE_DELETE (manage), the admin ops (cluster admin), STATS reset
(cluster admin). Patterns: exact, prefix*, *. The admin permission in a
namespace implies the others. QUEUE_LIST shows only queues the user holds
a permission on. A grant changed while a connection is open applies to
its next request. Producer ids are issued per user: another user's id,
and an id never issued, are refused."""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import auth_util as a  # noqa: E402


def expect(c, got, want, what):
    st = got[0]
    ok = st == want if want != "denied" else (st == a.EDENIED)
    c.check(ok, what, got)


def main(c):
    with a.admin_cluster(3) as cl:
        cl.start()
        k = a.wait_admin(cl)
        c.check(k is not None, "admin logs in")
        if k is None:
            return
        users = {"prod": "produce", "cons": "consume", "mgr": "manage",
                 "nsadmin": "admin", "nobody": None}
        for u, perm in users.items():
            c.check(k.user_set(u, u + "-pw")[0] == 0, "USER_SET %s" % u)
            if perm:
                c.check(k.acl_set(u, "default", "orders*", perm)[0] == 0,
                        "grant %s %s on orders*" % (u, perm))
        c.check(k.acl_set("prod", "default", "audit", "produce")[0] == 0,
                "grant prod produce on audit (exact)")
        c.check(k.acl_set("cons", "default", "*", "consume")[0] == 0,
                "grant cons consume on *")
        for q in ("orders", "orders.eu", "audit", "secret"):
            c.check(k.create(q)[0] == 0, "admin creates %s" % q)
        c.check(k.produce("secret", [b"s"])[0] == 0, "admin produces")

        lid = cl.wait_leader()
        s = {u: a.login(cl, u, u + "-pw", node=lid) for u in users}

        # produce
        expect(c, s["prod"].produce("orders", [b"p1"]), 0,
               "prod: PRODUCE orders (prefix grant)")
        expect(c, s["prod"].produce("audit", [b"p2"]), 0,
               "prod: PRODUCE audit (exact grant)")
        st, m = s["prod"].produce("secret", [b"x"])
        c.check(st == a.EDENIED and "produce" in m and "secret" in m,
                "prod: PRODUCE secret refused, naming the permission",
                (st, m))
        expect(c, s["cons"].produce("orders", [b"x"]), "denied",
               "cons: PRODUCE orders refused")
        expect(c, s["nobody"].produce("orders", [b"x"]), "denied",
               "nobody: PRODUCE refused")
        expect(c, s["nsadmin"].produce("orders.eu", [b"n1"]), 0,
               "nsadmin: admin in the namespace implies produce")
        # consume
        expect(c, s["cons"].fetch("secret"), 0,
               "cons: FETCH secret (* grant)")
        expect(c, s["prod"].fetch("orders"), "denied",
               "prod: FETCH orders refused")
        expect(c, s["mgr"].fetch("orders"), "denied",
               "mgr: FETCH orders refused")
        expect(c, s["cons"].group_fetch("orders", "g"), 0,
               "cons: GROUP_FETCH orders")
        expect(c, s["cons"].group_commit("orders", "g", 1), 0,
               "cons: GROUP_COMMIT orders")
        expect(c, s["prod"].group_fetch("orders", "g"), "denied",
               "prod: GROUP_FETCH refused")
        expect(c, s["prod"].group_commit("orders", "g", 1), "denied",
               "prod: GROUP_COMMIT refused")
        # manage
        expect(c, s["mgr"].create("orders.us"), 0,
               "mgr: QUEUE_CREATE orders.us")
        expect(c, s["mgr"].delete("orders.us"), 0,
               "mgr: QUEUE_DELETE orders.us")
        expect(c, s["mgr"].create("other"), "denied",
               "mgr: QUEUE_CREATE other (no grant) refused")
        expect(c, s["prod"].create("orders.x"), "denied",
               "prod: QUEUE_CREATE refused")
        expect(c, s["cons"].delete("orders"), "denied",
               "cons: QUEUE_DELETE refused")
        # lists are filtered
        for u, want in (("prod", ["audit", "orders", "orders.eu"]),
                        ("cons", ["audit", "orders", "orders.eu", "secret"]),
                        ("nobody", []),
                        ("admin", ["audit", "orders", "orders.eu",
                                   "secret"])):
            conn = s.get(u, k)
            st, names = conn.queues()
            c.check(st == 0 and names == want,
                    "%s: QUEUE_LIST shows %s" % (u, want), (st, names))
        # admin ops and statistics
        for u in ("prod", "nsadmin", "nobody"):
            for what, call in (
                    ("USER_SET", lambda t: t.user_set("x", "x-pw")),
                    ("USER_DELETE", lambda t: t.user_delete("admin")),
                    ("USER_LIST", lambda t: t.users()),
                    ("ACL_SET", lambda t: t.acl_set(u, "default", "*",
                                                    "admin")),
                    ("NAMESPACE_SET", lambda t: t.namespace_set("x")),
                    ("NAMESPACE_DELETE", lambda t: t.namespace_delete("x")),
                    ("STATS reset", lambda t: t.stats(reset=True))):
                st, m = call(s[u])
                c.check(st == a.EDENIED and "administrator" in m,
                        "%s: %s refused (cluster admin only)" % (u, what),
                        (st, m))
        expect(c, s["nobody"].stats(), 0, "nobody: STATS (no reset)")
        expect(c, s["nobody"].rpc("STATUS"), 0, "nobody: STATUS")
        expect(c, k.stats(reset=True), 0, "admin: STATS reset")
        # a grant given while connected applies at once
        c.check(k.acl_set("nobody", "default", "secret", "consume")[0] == 0,
                "grant nobody consume on secret")
        st, msgs = s["nobody"].fetch("secret")
        c.check(st == 0 and msgs == [b"s"],
                "nobody reads secret on its open connection", (st, msgs))
        c.check(k.rpc("ACL_DELETE", h.put_str("nobody") +
                      h.put_str("default") + h.put_str("secret"))[0] == 0,
                "revoke it")
        expect(c, s["nobody"].fetch("secret"), "denied",
               "the revoked grant stops the next request")

        # producer ids: issued per user, bound to it
        st, pid = s["prod"].producer_init()
        c.check(st == 0 and pid > 0, "prod: PRODUCER_INIT", (st, pid))
        st, pid_c = s["cons"].producer_init()
        c.check(st == 0 and pid_c != pid, "cons: PRODUCER_INIT", (st, pid_c))
        expect(c, s["prod"].produce("orders", [b"d1"], pid=pid, seq=1), 0,
               "prod produces under its own producer id")
        expect(c, s["prod"].produce("orders", [b"d2"], pid=pid + 7, seq=1),
               0, "prod uses another id of its block")
        st, m = s["nsadmin"].produce("orders", [b"x"], pid=pid, seq=2)
        c.check(st == a.EDENIED and "another user" in m,
                "nsadmin cannot use prod's producer id", (st, m))
        st, m = s["prod"].produce("orders", [b"x"], pid=pid_c, seq=1)
        c.check(st == a.EDENIED, "prod cannot use cons's producer id",
                (st, m))
        st, m = s["prod"].produce("orders", [b"x"],
                                  pid=0x7777 << 32 | 5, seq=1)
        c.check(st == a.EDENIED and "not issued" in m,
                "an id never issued is refused", (st, m))
        st, msgs = k.fetch("orders")
        c.check(st == 0 and msgs == [b"p1", b"d1", b"d2"],
                "orders holds only the allowed messages", (st, msgs))
        for t in s.values():
            t.close()
        k.close()


if __name__ == "__main__":
    h.run_test(main)
