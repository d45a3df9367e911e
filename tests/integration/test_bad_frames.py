#!/usr/bin/env python3
"""(e) bad client frames, sent over raw sockets to a node: garbage bytes,
bad magic, bad version, a truncated header or body then close, an
oversized body_len, a bad checksum, an unknown op, a malformed body; and
frame version 2 (XXH3 checksums) once HELLO asked for it. The
node answers with error frames (closing the connection when it cannot find
the next frame boundary), keeps the connection for recoverable errors (a
valid frame on the same connection still works), keeps running, and
normal produce/consume works afterwards."""
import os
import random
import socket
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

ERROR_OPS = (h.OP["ERROR"], h.OP["ERROR"] | h.OP_RESPONSE)


def connect(nd):
    s = socket.create_connection(("127.0.0.1", nd.client_port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def fatal_case(c, nd, name, data, want_status):
    """Send data; expect one error frame with want_status (any non-zero if
    None), then the connection closed."""
    with connect(nd) as s:
        s.sendall(data)
        try:
            f = h.recv_frame(s, timeout=5)
        except socket.timeout:
            f = "timeout"
        ok = (isinstance(f, h.Frame) and f.status != 0 and
              (want_status is None or f.status == want_status))
        c.check(ok, "%s: error frame %s" %
                (name, h.ERR.get(want_status, "(non-zero status)")), f)
        if isinstance(f, h.Frame):
            c.check(f.checksum_ok, "%s: error frame checksum valid" % name)
            c.check(f.op in ERROR_OPS or f.op & h.OP_RESPONSE,
                    "%s: error frame op 0x%02x is a response" % (name, f.op))
            c.info("%s: %r" % (name, f))
            closed = h.wait_closed(s, 5)
        else:
            closed = f is None or h.wait_closed(s, 5)
        c.check(closed, "%s: node closes the connection" % name)


def recoverable_case(c, nd, name, bad, want_status, want_op):
    """Send a bad-but-framed request, expect an error response for it, then
    a valid STATUS on the same connection must be answered."""
    with connect(nd) as s:
        s.sendall(bad)
        f = h.recv_frame(s, timeout=5)
        c.check(isinstance(f, h.Frame) and f.status == want_status,
                "%s: error %s" % (name, h.ERR.get(want_status)), f)
        if isinstance(f, h.Frame):
            c.info("%s: %r" % (name, f))
            c.check(f.request_id == 77, "%s: request_id echoed" % name,
                    f.request_id)
            c.check(f.op == want_op, "%s: op 0x%02x" % (name, want_op),
                    "0x%02x" % f.op)
            c.check(f.checksum_ok, "%s: checksum valid" % name)
        s.sendall(h.encode_frame(h.OP["STATUS"], request_id=78))
        g = h.recv_frame(s, timeout=5)
        c.check(isinstance(g, h.Frame) and g.status == 0 and
                g.op == h.OP["STATUS"] | h.OP_RESPONSE and
                g.request_id == 78 and g.checksum_ok,
                "%s: valid STATUS on the same connection answered" % name, g)
        if isinstance(g, h.Frame) and g.status == 0 and len(g.body) >= 8:
            (node_id,) = struct.unpack_from("<Q", g.body, 0)
            c.check(node_id == nd.id, "%s: STATUS reports node id %d" %
                    (name, nd.id), node_id)


def main(c):
    rnd = random.Random(0x7465726E)
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        leader = cl.start()
        nd = cl.nodes[leader]
        cl.tern("queue", "create", "bf", check=True)
        status = h.encode_frame(h.OP["STATUS"], request_id=5)

        c.step("fatal framing errors (connection closed)")
        garbage = bytes(rnd.getrandbits(8) for _ in range(200))
        if garbage[:2] == b"tn":
            garbage = b"xx" + garbage[2:]
        fatal_case(c, nd, "garbage", garbage, None)
        fatal_case(c, nd, "bad magic",
                   h.encode_frame(h.OP["STATUS"], magic=0x1234),
                   h.CODE["TERN_EMALFORMED"])
        fatal_case(c, nd, "bad version",
                   h.encode_frame(h.OP["STATUS"], version=9),
                   h.CODE["TERN_EVERSION"])
        fatal_case(c, nd, "oversized body_len",
                   h.encode_frame(h.OP["PRODUCE"], b"", body_len=0x7FFFFFF0,
                                  checksum=0),
                   h.CODE["TERN_ETOOBIG"])
        fatal_case(c, nd, "bad checksum",
                   h.encode_frame(h.OP["QUEUE_CREATE"], h.put_str("zz"),
                                  checksum=0xDEADBEEF),
                   h.CODE["TERN_ECORRUPT"])

        c.step("truncated frames, then close")
        for name, data in (("truncated header", status[:10]),
                           ("truncated body",
                            h.encode_frame(h.OP["QUEUE_CREATE"],
                                           h.put_str("abcdefgh"))[:28])):
            with connect(nd) as s:
                s.sendall(data)
            c.check(nd.alive(), "%s: node alive" % name)

        c.step("recoverable errors (connection kept)")
        recoverable_case(c, nd, "unknown op",
                         h.encode_frame(0x55, b"", request_id=77),
                         h.CODE["TERN_EINVAL"], 0x55 | h.OP_RESPONSE)
        recoverable_case(c, nd, "malformed body",
                         h.encode_frame(h.OP["QUEUE_CREATE"],
                                        b"\x05\x00ab", request_id=77),
                         h.CODE["TERN_EMALFORMED"],
                         h.OP["QUEUE_CREATE"] | h.OP_RESPONSE)
        recoverable_case(c, nd, "bad queue name",
                         h.encode_frame(h.OP["QUEUE_CREATE"],
                                        h.put_str("bad/name\x00"),
                                        request_id=77),
                         h.CODE["TERN_EBADNAME"],
                         h.OP["QUEUE_CREATE"] | h.OP_RESPONSE)

        c.step("frame version 2 (XXH3) after HELLO")
        fetch = (h.put_str("bf") +
                 struct.pack("<QIII", 0, 10, 65536, 0))
        with connect(nd) as s:
            s.sendall(h.encode_frame(h.OP["FETCH"], fetch, request_id=1))
            f = h.recv_frame(s, timeout=5)
            c.check(isinstance(f, h.Frame) and f.status == 0 and
                    f.version == 1 and f.checksum_ok,
                    "without HELLO a FETCH is answered in version 1", f)
            s.sendall(h.encode_frame(h.OP["HELLO"], struct.pack("<I", 1),
                                     request_id=2))
            f = h.recv_frame(s, timeout=5)
            c.check(isinstance(f, h.Frame) and f.status == 0 and
                    f.op == h.OP["HELLO"] | h.OP_RESPONSE and
                    f.body == struct.pack("<I", 1) and f.checksum_ok,
                    "HELLO takes the XXH3 feature", f)
            s.sendall(h.encode_frame(h.OP["FETCH"], fetch, request_id=3))
            f = h.recv_frame(s, timeout=5)
            c.check(isinstance(f, h.Frame) and f.status == 0 and
                    f.version == 2 and f.checksum_ok,
                    "after HELLO a FETCH is answered in version 2 (XXH3)", f)
            s.sendall(h.encode_frame(h.OP["STATUS"], request_id=4,
                                     version=2))
            f = h.recv_frame(s, timeout=5)
            c.check(isinstance(f, h.Frame) and f.status == 0 and
                    f.request_id == 4 and f.checksum_ok,
                    "a version 2 request is served", f)
        fatal_case(c, nd, "version 2 with a bad checksum",
                   h.encode_frame(h.OP["QUEUE_CREATE"], h.put_str("zz"),
                                  version=2, checksum=0xDEADBEEF),
                   h.CODE["TERN_ECORRUPT"])

        c.step("100 random-garbage connections against every node")
        for i in range(100):
            target = cl.nodes[1 + i % 3]
            try:
                with connect(target) as s:
                    s.sendall(bytes(rnd.getrandbits(8)
                                    for _ in range(rnd.randint(1, 300))))
            except OSError:
                pass

        c.step("the cluster still works")
        for i, n in cl.nodes.items():
            c.check(n.alive(), "node %d still running" % i)
        acks = os.path.join(cl.dir, "acks.txt")
        r = cl.tern("produce", "bf", "--count", 100, "--ack-log", acks,
                    "--id-prefix", "ok")
        c.check(r.returncode == 0, "produce 100 after the abuse",
                r.stderr.strip()[-300:])
        got = cl.consume_all("bf", expect=100)
        c.check([g[1] for g in got] == ["ok-%d" % i for i in range(100)],
                "consume returns the 100 ids in order", len(got))


if __name__ == "__main__":
    h.run_test(main)
