#!/usr/bin/env python3
"""(b) connection flood against one node: with max_connections_per_addr
64, 64 + 50 raw connections from 127.0.0.1 -> the 50 extra ones get one
TERN_ELIMIT error frame naming the limit and are closed, the 64 admitted
ones are served, a client from another loopback address (127.0.0.2) is
served during the flood, the CLI works again once the flood is gone, and
ternd's RLIMIT_NOFILE soft limit was raised to its hard limit. Then a
second node with max_connections 40: connections from several addresses
beyond 40 are refused naming max_connections; idle connections are closed
after idle_timeout_ms with TERN_ELIMIT."""
import os
import socket
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import limits_util as u  # noqa: E402

PER_ADDR = 64
EXTRA = 50
TOTAL = 40
IDLE_MS = 3000


def first_frame(s, timeout=5):
    try:
        return h.recv_frame(s, timeout=timeout)
    except (socket.timeout, OSError):
        return "timeout"


def served(s, rid):
    s.sendall(u.status(rid))
    f = first_frame(s)
    return isinstance(f, h.Frame) and f.status == 0 and f.request_id == rid


def per_addr(c):
    with h.Cluster(n=1, limits={"max_connections_per_addr": PER_ADDR}) as cl:
        cl.start()
        nd = cl.nodes[1]
        port = nd.client_port
        soft, hard = h.proc_nofile(nd.pid)
        c.check(soft == hard, "RLIMIT_NOFILE soft raised to hard (%s/%s)" %
                (soft, hard))
        c.check("file descriptor limit" in nd.log_text(),
                "node logs its descriptor limit")
        base = u.memory(cl)

        c.step("open %d connections from 127.0.0.1" % (PER_ADDR + EXTRA))
        # The harness's own status connections may still be closing.
        h.poll(lambda: u.server_side_conns(port) == 0, 10)
        socks = [u.connect(port) for _ in range(PER_ADDR + EXTRA)]
        refused = 0
        named = 0
        for s in socks[PER_ADDR:]:
            f = first_frame(s)
            if isinstance(f, h.Frame) and f.status == u.ELIMIT:
                refused += 1
                named += "max_connections_per_addr" in f.error_message()
        c.check(refused == EXTRA, "%d extra connections refused with "
                "TERN_ELIMIT" % EXTRA, refused)
        c.check(named == EXTRA, "the message names max_connections_per_addr",
                named)
        ok = sum(1 for i, s in enumerate(socks[:PER_ADDR]) if served(s, i + 1))
        c.check(ok == PER_ADDR, "the %d admitted connections are served" %
                PER_ADDR, ok)
        other = u.connect(port, source="127.0.0.2")
        c.check(served(other, 99), "a client from 127.0.0.2 is served "
                "during the flood")
        other.close()
        c.check(nd.alive(), "node still running")
        c.check("client connection refused" in nd.log_text(),
                "node logs the refusal")
        mem = u.memory(cl)
        c.info("FIGURE connection flood: VmHWM %d kB (before %d kB)" %
               (mem["VmHWM"], base["VmHWM"]))
        for s in socks:
            s.close()
        c.step("the CLI works once the flood is gone")
        r = h.poll(lambda: cl.tern("queue", "create", "after").returncode == 0
                   or None, 20, interval=0.2)
        c.check(r, "queue create after the flood")
        cl.report_sanitizer()


def total_and_idle(c):
    limits = {"max_connections": TOTAL, "idle_timeout_ms": IDLE_MS}
    with h.Cluster(n=1, limits=limits) as cl:
        cl.start()
        port = cl.nodes[1].client_port
        h.poll(lambda: u.server_side_conns(port) == 0, 10)
        c.step("open %d connections from 10 addresses" % (TOTAL + 20))
        socks = [u.connect(port, source="127.0.0.%d" % (2 + i % 10))
                 for i in range(TOTAL + 20)]
        t_open = time.monotonic()
        refused = 0
        for s in socks[TOTAL:]:
            f = first_frame(s)
            if (isinstance(f, h.Frame) and f.status == u.ELIMIT and
                    "max_connections" in f.error_message()):
                refused += 1
        c.check(refused == 20, "20 connections over max_connections refused",
                refused)
        c.check(served(socks[0], 1), "an admitted connection is served")
        c.check(cl.nodes[1].alive(), "node still running")

        c.step("idle connections are closed after idle_timeout_ms")
        closed = 0
        named = 0
        for s in socks[1:TOTAL]:
            left = IDLE_MS / 1000.0 + 20 - (time.monotonic() - t_open)
            ok, frames = u.closed_by_peer(s, max(1.0, left))
            closed += ok
            named += any("idle_timeout_ms" in f.error_message()
                         for f in frames)
        c.check(closed == TOTAL - 1, "idle connections closed", closed)
        c.check(named == TOTAL - 1, "with TERN_ELIMIT naming "
                "idle_timeout_ms", named)
        for s in socks:
            s.close()
        r = cl.tern("cluster", "status", "--json")
        c.check(r.returncode == 0, "node serves after the flood")
        cl.report_sanitizer()


def main(c):
    per_addr(c)
    total_and_idle(c)


if __name__ == "__main__":
    h.run_test(main)
