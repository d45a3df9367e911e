#!/usr/bin/env python3
"""Login bounds (docs/AUTH.md "Login bounds"): a failed login is answered
TERN_EAUTH only after auth_failure_delay_ms, then closed; after
auth_failures_per_minute failures from one source address, AUTH_START from
that address gets TERN_ETHROTTLED (the wait in seconds in the message) even
with the right password, while other addresses and logged-in connections
are served throughout; once the window is over the login works again.
The attacker speaks from 127.0.0.2, everyone else from 127.0.0.1. Also:
a cluster_secret_file that others may read stops ternd (exit 2) on the tcp
transport too, where it keys the SCRAM answers for unknown users; a node
stopping while a failed login waits does not wait for it."""
import os
import re
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import auth_util as a  # noqa: E402

DELAY_MS = 400
PER_MINUTE = 4
ATTACKER = "127.0.0.2"


class SrcConn(a.Conn):
    """A client connection from source address src."""

    def __init__(self, nd, src, timeout=10):  # noqa: super init not wanted
        self.sock = socket.create_connection(
            ("127.0.0.1", nd.client_port), timeout=timeout,
            source_address=(src, 0))
        self.rid = 0
        self.timeout = timeout


def timed_login(nd, src, user, password):
    """(status, message, seconds, closed after)."""
    with SrcConn(nd, src) as t:
        t0 = time.monotonic()
        st, m = t.scram(user, password)
        dt = time.monotonic() - t0
        closed = t.closed() if st == a.EAUTH else None
    return st, m, dt, closed


def producer(c, k, stop, out):
    """Produce on the logged-in connection k until stop is set."""
    n = 0
    while not stop.is_set() and n < 2000:
        st, m = k.produce("q", [b"m-%d" % n])
        out.append((time.monotonic(), st, m))
        n += 1
        time.sleep(0.02)


def bounds(c):
    sec = {"auth_failure_delay_ms": str(DELAY_MS),
           "auth_failures_per_minute": str(PER_MINUTE)}
    with a.admin_cluster(n=1, security=sec) as cl:
        cl.start()
        nd = cl.nodes[1]
        k = a.wait_admin(cl)
        c.check(k is not None, "the bootstrap admin logs in")
        if k is None:
            return
        c.check(k.user_set("alice", "alice-pw")[0] == 0, "USER_SET alice")
        c.check(k.acl_set("alice", "default", "*", "produce,consume,manage")
                [0] == 0, "grant alice everything in default")
        c.check(k.create("q")[0] == 0, "queue q created")
        alice = a.login(cl, "alice", "alice-pw", node=1)

        c.step("a wrong password is answered after the delay, then closed")
        st, m, dt, closed = timed_login(nd, ATTACKER, "alice", "wrong")
        c.check(st == a.EAUTH, "wrong password: TERN_EAUTH", (st, m))
        c.check(dt >= DELAY_MS / 1000.0,
                "the answer took at least auth_failure_delay_ms (%d ms)" %
                DELAY_MS, "%.3f s" % dt)
        c.check(closed, "the connection is closed after the answer")

        c.step("an attacker loops while a logged-in client produces")
        stop = threading.Event()
        produced = []
        th = threading.Thread(target=producer, args=(c, alice, stop,
                                                     produced))
        th.start()
        spans = []
        results = []
        for _ in range(PER_MINUTE - 1):
            t0 = time.monotonic()
            st, m, dt, _ = timed_login(nd, ATTACKER, "alice", "guess")
            spans.append((t0, t0 + dt))
            results.append(st)
        stop.set()
        th.join(30)
        c.check(results == [a.EAUTH] * (PER_MINUTE - 1),
                "every guess: TERN_EAUTH", results)
        c.check(produced and all(p[1] == 0 for p in produced),
                "every produce on alice's connection succeeded (%d)" %
                len(produced), [p for p in produced if p[1] != 0][:3])
        during = [p for p in produced
                  if any(s <= p[0] <= e for s, e in spans)]
        c.check(len(during) > 0, "produces were answered while a failed "
                "login waited for its answer (%d)" % len(during))

        c.step("over the cap: the right password gets TERN_ETHROTTLED")
        with SrcConn(nd, ATTACKER) as t:
            st, m = t.scram("alice", "alice-pw")
            c.check(st == a.ETHROTTLED, "AUTH_START from the attacker's "
                    "address: TERN_ETHROTTLED", (st, m))
            mm = re.search(r"retry in (\d+) s", m or "")
            c.check(mm is not None and 0 < int(mm.group(1)) <= 60,
                    "the message gives the seconds to wait", m)
            wait_s = int(mm.group(1)) if mm else 60
            st, _ = t.rpc("STATUS")
            c.check(st == 0, "the throttled connection stays open", st)
        with SrcConn(nd, "127.0.0.1") as t:
            c.check(t.scram("alice", "alice-pw")[0] == 0,
                    "another address logs in meanwhile")
        st, _ = alice.produce("q", [b"still"])
        c.check(st == 0, "alice's connection still produces", st)
        c.check(h.poll(lambda: "client login throttled" in nd.log_text()
                       and "addr=%s" % ATTACKER in nd.log_text(), 10),
                "the node logs the throttled address")

        c.step("after the window the login works (waiting %d s)" % wait_s)
        time.sleep(wait_s + 1)

        def ok():
            with SrcConn(nd, ATTACKER) as t:
                return t.scram("alice", "alice-pw")[0] == 0
        c.check(h.poll(ok, 15, 1.0), "the attacker's address logs in with "
                "the right password")
        alice.close()
        k.close()


def stop_while_waiting(c):
    c.step("a node stops while a failed login waits for its answer")
    sec = {"auth_failure_delay_ms": "30000"}
    with a.admin_cluster(n=1, security=sec) as cl:
        cl.start()
        nd = cl.nodes[1]
        t = SrcConn(nd, ATTACKER, timeout=60)
        out = []
        th = threading.Thread(target=lambda: out.append(
            t.scram("ghost", "whatever")))
        th.start()
        waiting = h.poll(lambda: "client authentication failed" in
                         nd.log_text(), 20)
        c.check(waiting, "the failed login is waiting (logged)")
        rc = cl.stop(1, timeout=25)
        c.check(rc == 0, "ternd stops cleanly (exit 0) without waiting for "
                "the 30 s delay", rc)
        th.join(30)
        c.check(out and out[0][0] in (None, a.EAUTH),
                "the waiting client sees its connection end", out)
        t.close()


def open_secret(c):
    c.step("a cluster_secret_file others may read stops ternd on tcp")
    with h.Cluster(1) as cl:
        path = os.path.join(cl.certs, "cluster.secret")
        os.chmod(path, 0o644)
        cl.start_node(1)
        nd = cl.nodes[1]
        try:
            rc = nd.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - reported below
            rc = None
        c.check(rc == 2, "ternd exits 2", rc)
        text = nd.log_text()
        c.check("cluster_secret_file" in text and "mode 644" in text,
                "the message names the key and the mode", text.strip()[-300:])


def main(c):
    bounds(c)
    stop_while_waiting(c)
    open_secret(c)


if __name__ == "__main__":
    h.run_test(main)
