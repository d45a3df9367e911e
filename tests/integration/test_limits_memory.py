#!/usr/bin/env python3
"""Client memory bounds of ternd under hostile clients, on one node:
(a) amplification: raw sockets pipeline thousands of FETCH requests with
a large max_bytes on a queue holding 8 MiB and never read; ternd's peak
memory stays within a bound derived from client_memory_bytes while
another client produces and consumes normally; (d) those never-reading
connections are closed after slow_reader_timeout_ms; (c) partial frames
(a header announcing 16 MiB, then 1 byte; or 3 MiB of a 16 MiB frame)
get TERN_ELIMIT naming frame_timeout_ms and are closed, memory bounded."""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import limits_util as u  # noqa: E402

BUDGET_MB = 64
CONN_MB = 8
ATTACKERS = 4
FETCHES = 3000
SLOW_MS = 10000
FRAME_MS = 1500


def amplification(c, cl, port):
    c.step("fill queue amp with 8 MiB")
    r = cl.tern("queue", "create", "amp")
    c.check(r.returncode == 0, "create amp", r.stderr.strip())
    r = cl.tern("produce", "amp", "--count", 64, "--size", 131072,
                "--batch", 8)
    c.check(r.returncode == 0, "produce 8 MiB", r.stderr.strip()[-300:])
    base = u.memory(cl)
    c.info("ternd memory before the attack: %s" % base)

    c.step("%d raw sockets pipeline %d FETCH each and never read" %
           (ATTACKERS, FETCHES))
    socks = []
    payload = b"".join(u.fetch("amp", 0, 10000, 64 << 20, 0, i + 1)
                       for i in range(FETCHES))
    for _ in range(ATTACKERS):
        s = u.connect(port, rcvbuf=4096)
        u.send_some(s, payload, 3)
        socks.append(s)
    t_attack = time.monotonic()

    c.step("another client produces and consumes meanwhile")
    r = cl.tern("queue", "create", "normal")
    c.check(r.returncode == 0, "normal client: create", r.stderr.strip())
    r = cl.tern("produce", "normal", "--count", 200, "--size", 128)
    c.check(r.returncode == 0, "normal client: produce 200",
            r.stderr.strip()[-300:])
    got = cl.consume_all("normal", expect=200, timeout=30)
    c.check(len(got) == 200, "normal client: consume 200", len(got))

    mem = u.memory(cl)
    grown_mb = (mem["VmHWM"] - base["VmRSS"]) / 1024.0
    bound_mb = 2 * BUDGET_MB + 32
    c.info("FIGURE amplification: VmHWM %d kB (%.1f MiB above the "
           "pre-attack RSS; client_memory_bytes %d MiB)" %
           (mem["VmHWM"], grown_mb, BUDGET_MB))
    c.check(grown_mb < bound_mb,
            "peak memory grew %.1f MiB < %d MiB" % (grown_mb, bound_mb))
    c.check(cl.nodes[1].alive(), "ternd still running")

    c.step("(d) the never-reading sockets are closed (slow reader)")
    # Seen from the node's side: a client whose window is shut may never
    # see the reset.
    peers = set(s.getsockname()[1] for s in socks)
    left = SLOW_MS / 1000.0 + 30 - (time.monotonic() - t_attack)
    gone = h.poll(lambda: u.server_side_conns(port, peers) == 0,
                  max(1.0, left), interval=0.2)
    c.check(gone, "the node closed its %d slow-reader connections" %
            ATTACKERS, u.server_side_conns(port, peers))
    for s in socks:
        s.close()
    c.check("slow_reader_timeout_ms" in cl.nodes[1].log_text(),
            "node log names slow_reader_timeout_ms")


def partial_frames(c, cl, port):
    c.step("(c) partial frames: header announcing 16 MiB + 1 byte")
    header_only = h.encode_frame(h.OP["PRODUCE"], b"", request_id=7,
                                 body_len=(16 << 20) - 1)[:24]
    socks = []
    for _ in range(8):
        s = u.connect(port)
        s.sendall(header_only + b"x")
        socks.append(s)
    big = []
    for _ in range(3):
        s = u.connect(port)
        u.send_some(s, header_only + b"y" * (3 << 20), 10)
        big.append(s)
    t0 = time.monotonic()
    ok_all = True
    named = True
    for s in socks + big:
        ok, frames = u.closed_by_peer(s, FRAME_MS / 1000.0 + 20)
        ok_all = ok_all and ok
        named = named and any(f.status == u.ELIMIT and
                              "frame_timeout_ms" in f.error_message()
                              for f in frames)
        s.close()
    c.check(ok_all, "every partial-frame connection closed")
    c.check(named, "each got TERN_ELIMIT naming frame_timeout_ms")
    c.info("closed after %.1f s (frame_timeout_ms %d)" %
           (time.monotonic() - t0, FRAME_MS))
    mem = u.memory(cl)
    c.info("FIGURE partial frames: VmHWM %d kB" % mem["VmHWM"])
    r = cl.tern("cluster", "status", "--json")
    c.check(r.returncode == 0, "node serves after the partial frames")


def main(c):
    limits = {"client_memory_bytes": "%dM" % BUDGET_MB,
              "max_conn_queued_bytes": "%dM" % CONN_MB,
              "slow_reader_timeout_ms": SLOW_MS,
              "frame_timeout_ms": FRAME_MS}
    with h.Cluster(n=1, limits=limits) as cl:
        cl.start()
        port = cl.nodes[1].client_port
        amplification(c, cl, port)
        partial_frames(c, cl, port)
        cl.report_sanitizer()


if __name__ == "__main__":
    h.run_test(main)
