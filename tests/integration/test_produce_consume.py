#!/usr/bin/env python3
"""(a) 3-node produce/consume: 1000 messages through the leader, then read
the queue back from each node alone; every node returns the same ids in the
same order, at the offsets the producer was told."""
import os
import signal
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N = 1000


def not_leader_hint(f):
    """(leader_id, leader address) of a TERN_ENOTLEADER error body, or
    None: str message, u64 leader_id, str leader client address."""
    try:
        (n,) = struct.unpack_from("<H", f.body, 0)
        (lid,) = struct.unpack_from("<Q", f.body, 2 + n)
        (m,) = struct.unpack_from("<H", f.body, 10 + n)
        return lid, f.body[12 + n:12 + n + m].decode()
    except (struct.error, AttributeError, UnicodeDecodeError):
        return None


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        c.check(leader in cl.nodes, "writable leader elected (node %s)" %
                leader)
        r = cl.tern("queue", "create", "orders")
        c.check(r.returncode == 0, "queue create orders", r.stderr.strip())
        r = cl.tern("queue", "list")
        c.check("orders" in r.stdout, "queue list shows orders", r.stdout)

        c.step("produce %d messages" % N)
        acks = os.path.join(cl.dir, "acks.txt")
        r = cl.tern("produce", "orders", "--count", N, "--size", 256,
                    "--ack-log", acks, "--id-prefix", "m", timeout=120)
        c.check(r.returncode == 0, "produce exit 0", r.stderr.strip()[-500:])
        acked = h.read_ack_log(acks)
        c.check(len(acked) == N, "%d acknowledgements in the ack log" % N,
                len(acked))
        want_ids = ["m-%d" % i for i in range(N)]
        c.check([a[0] for a in acked] == want_ids,
                "acks in production order m-0..m-%d" % (N - 1))
        offsets = [a[1] for a in acked]
        c.check(offsets == sorted(offsets) and len(set(offsets)) == N,
                "acknowledged offsets strictly increasing")

        c.step("consume from each node alone")
        reads = {}
        for i, nd in cl.nodes.items():
            got = cl.consume_all("orders", servers=nd.client_addr, expect=N)
            reads[i] = got
            c.check(len(got) == N, "node %d returns %d messages" % (i, N),
                    len(got))
            c.check([g[1] for g in got] == want_ids,
                    "node %d: ids in production order" % i)
            c.check(sorted(got) == sorted((o, m) for m, o in acked),
                    "node %d: each id at its acknowledged offset" % i)
        c.check(reads[1] == reads[2] == reads[3],
                "all nodes return identical (offset, id) sequences")

        c.step("consume with a group from the whole cluster")
        r = cl.tern("consume", "orders", "--group", "g1", "--commit",
                    "--max", 400)
        got = h.parse_consume(r.stdout)
        c.check(r.returncode == 0 and [g[1] for g in got] == want_ids[:400],
                "group g1 reads the first 400", r.stderr.strip()[-300:])
        r = cl.tern("consume", "orders", "--group", "g1", "--commit")
        got = h.parse_consume(r.stdout)
        c.check([g[1] for g in got] == want_ids[400:],
                "group g1 resumes at 400 after commit",
                "%d msgs, first %s" % (len(got), got[:1]))

        c.step("group fetch is served by the leader only (read barrier)")
        follower = [i for i in cl.nodes if i != leader][0]
        nd = cl.nodes[follower]
        body = (h.put_str(b"orders") + h.put_str(b"g1") +
                struct.pack("<III", 10, 1 << 20, 0))
        with socket.create_connection(("127.0.0.1", nd.client_port),
                                      timeout=5) as s:
            s.sendall(h.encode_frame(h.OP["GROUP_FETCH"], body,
                                     request_id=41))
            f = h.recv_frame(s, timeout=5)
        c.check(isinstance(f, h.Frame) and f.request_id == 41 and
                h.ERR.get(f.status) == "TERN_ENOTLEADER",
                "a follower answers GROUP_FETCH with TERN_ENOTLEADER", f)
        r = cl.tern("produce", "orders", "--count", 10, "--size", 64,
                    "--id-prefix", "late")
        c.check(r.returncode == 0, "produce 10 more", r.stderr.strip()[-300:])
        r = cl.tern("--read-from", "first", "consume", "orders", "--group",
                    "g1", "--commit", servers=nd.client_addr)
        got = h.parse_consume(r.stdout)
        c.check(r.returncode == 0 and
                [g[1] for g in got] == ["late-%d" % i for i in range(10)],
                "group g1 via the follower alone (--read-from first) follows "
                "the hint to the leader and reads only the 10 new messages",
                "rc %d, %d msgs, first %s %s" % (r.returncode, len(got),
                                                 got[:1],
                                                 r.stderr.strip()[-200:]))
        c.step("a READ_LEADER fetch is answered by the leader only")
        leader = cl.wait_leader()
        follower = [i for i in cl.nodes if i != leader][0]
        fetch = h.put_str(b"orders") + struct.pack("<QIII", 0, 5, 1 << 20, 0)
        for i, flags in ((follower, b"\x01"), (follower, b""),
                         (leader, b"\x01")):
            with socket.create_connection(
                    ("127.0.0.1", cl.nodes[i].client_port), timeout=5) as s:
                s.sendall(h.encode_frame(h.OP["FETCH"], fetch + flags,
                                         request_id=42))
                f = h.recv_frame(s, timeout=5)
            what = "FETCH %s to node %d (%s)" % (
                "with the leader flag" if flags else "without flags", i,
                "leader" if i == leader else "follower")
            if i == follower and flags:
                hint = not_leader_hint(f)
                c.check(isinstance(f, h.Frame) and f.request_id == 42 and
                        h.ERR.get(f.status) == "TERN_ENOTLEADER" and
                        hint == (leader, cl.nodes[leader].client_addr),
                        what + ": TERN_ENOTLEADER naming the leader",
                        "%r hint %r" % (f, hint))
            else:
                c.check(isinstance(f, h.Frame) and f.request_id == 42 and
                        f.status == 0, what + ": served", f)

        c.step("a parked READ_LEADER fetch is refused when its leader loses "
               "the majority")
        followers = [i for i in cl.nodes if i != leader]
        end = N + 10
        body = h.put_str(b"orders") + struct.pack("<QIII", end, 5, 1 << 20,
                                                  8000) + b"\x01"
        with socket.create_connection(
                ("127.0.0.1", cl.nodes[leader].client_port), timeout=5) as s:
            s.sendall(h.encode_frame(h.OP["FETCH"], body, request_id=43))
            time.sleep(0.3)  # parked at the queue end
            for i in followers:
                cl.nodes[i].proc.send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            try:
                f = h.recv_frame(s, timeout=7)
            finally:
                for i in followers:
                    cl.nodes[i].proc.send_signal(signal.SIGCONT)
            took = time.monotonic() - t0
        c.check(isinstance(f, h.Frame) and f.request_id == 43 and
                h.ERR.get(f.status) == "TERN_ENOTLEADER" and took < 6,
                "the parked fetch is answered TERN_ENOTLEADER once the leader "
                "steps down (%.2f s after its followers stopped, wait_ms 8000)"
                % took, f)
        leader = cl.wait_leader()
        r = cl.tern("produce", "orders", "--count", 1, "--size", 16,
                    "--id-prefix", "after")
        c.check(r.returncode == 0, "writes accepted again after SIGCONT "
                "(leader node %d)" % leader, r.stderr.strip()[-300:])
        for i in cl.nodes:
            c.check(cl.nodes[i].alive(), "node %d still running" % i)


if __name__ == "__main__":
    h.run_test(main)
