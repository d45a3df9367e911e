#!/usr/bin/env python3
"""Two thousand client connections at once on one node: with
max_connections 2000 (and the default 256 per source address), 2000
connections from 8 loopback addresses are all admitted and held open
together, each sends one request (a STATUS or a FETCH of an existing
message) and every one is answered with success; one connection more gets
one TERN_ELIMIT error frame naming max_connections and is closed; the node
keeps running, its RLIMIT_NOFILE soft limit covers the connections, and
once the flood is closed a new connection is served again."""
import os
import resource
import selectors
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import limits_util as u  # noqa: E402

TOTAL = 2000
PER_ADDR = 256


def request(i):
    if i % 2 == 0:
        return u.status(i + 1)
    body = h.put_str("many") + struct.pack("<QIII", 0, 1, 4096, 0)
    return h.encode_frame(h.OP["FETCH"], body, request_id=i + 1)


def answers(socks, timeout):
    """One frame from every socket, read together (None: closed or not
    complete within timeout)."""
    sel = selectors.DefaultSelector()
    bufs = [b""] * len(socks)
    got = [None] * len(socks)
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    left = len(socks)
    deadline = time.monotonic() + timeout
    hdr = h.HEADER.size
    while left > 0 and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            i = key.data
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                bufs[i] += data
                if len(bufs[i]) < hdr:
                    continue
                f = h.Frame(bufs[i][:hdr], b"")
                if len(bufs[i]) < hdr + f.body_len:
                    continue
                got[i] = h.Frame(bufs[i][:hdr],
                                 bufs[i][hdr:hdr + f.body_len])
            sel.unregister(key.fileobj)
            left -= 1
    sel.close()
    return got


def main(c):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < TOTAL + 200:
        raise h.Skip("open-file hard limit %d is below %d" %
                     (hard, TOTAL + 200))
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    limits = {"max_connections": TOTAL, "max_connections_per_addr": PER_ADDR}
    with h.Cluster(n=1, limits=limits) as cl:
        cl.start()
        nd = cl.nodes[1]
        port = nd.client_port
        c.check(cl.tern("queue", "create", "many").returncode == 0,
                "queue created")
        c.check(cl.tern("produce", "many", "--count", "1").returncode == 0,
                "one message produced")
        nofile = int(h.proc_nofile(nd.pid)[0])
        c.check(nofile >= TOTAL + 1, "RLIMIT_NOFILE soft %s covers %d "
                "connections" % (nofile, TOTAL))
        h.poll(lambda: u.server_side_conns(port) == 0, 10)

        c.step("open %d connections from %d addresses" %
               (TOTAL, (TOTAL + PER_ADDR - 1) // PER_ADDR))
        socks = [u.connect(port, source="127.0.0.%d" % (2 + i // PER_ADDR),
                           timeout=20)
                 for i in range(TOTAL)]
        c.check(h.poll(lambda: u.server_side_conns(port) >= TOTAL or None,
                       30), "all %d connections established" % TOTAL,
                u.server_side_conns(port))
        for i, s in enumerate(socks):
            s.sendall(request(i))
        got = answers(socks, 60)
        ok = sum(1 for i, f in enumerate(got)
                 if f is not None and f.status == 0 and
                 f.request_id == i + 1)
        c.check(ok == TOTAL, "every connection's request answered with "
                "success", "%d of %d; first bad: %r" %
                (ok, TOTAL, next((f for f in got if f is None or
                                  f.status != 0), None)))

        c.step("one connection over max_connections")
        extra = u.connect(port, source="127.0.0.100")
        f = h.recv_frame(extra, timeout=10)
        c.check(isinstance(f, h.Frame) and f.status == u.ELIMIT,
                "TERN_ELIMIT for the connection over the limit", f)
        c.check("max_connections" in f.error_message(),
                "the error names max_connections", f.error_message())
        c.check(h.wait_closed(extra, 10), "and it is closed")
        extra.close()
        c.check(nd.alive(), "node still running")
        c.info("FIGURE %d connections: node VmRSS %d kB" %
               (TOTAL, h.proc_memory_kb(nd.pid)["VmRSS"]))

        c.step("the flood closes; a new connection is served")
        for s in socks:
            s.close()
        h.poll(lambda: u.server_side_conns(port) == 0 or None, 20)
        again = u.connect(port, source="127.0.0.100")
        again.sendall(u.status(7))
        f = h.recv_frame(again, timeout=10)
        c.check(isinstance(f, h.Frame) and f.status == 0,
                "a new connection is served after the flood", f)
        again.close()
        cl.report_sanitizer()


if __name__ == "__main__":
    h.run_test(main)
