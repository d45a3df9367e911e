#!/usr/bin/env python3
"""(e) long polls: one connection's 65th parked FETCH (max_parked_per_conn
64) is answered TERN_ELIMIT naming the limit while another connection can
still park; (f) queue list paging: 2,500 queues created pipelined over a
raw socket are listed completely, every name once, by `tern queue list`
with the server's small page (list_page_max 100, pages also cut by bytes
with max_frame_bytes 64K), with --page-size 7 and as JSON, --limit 10
stops after 10; an older client's unpaged request is answered TERN_ELIMIT
because the whole list does not fit in max_frame_bytes."""
import json
import os
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import limits_util as u  # noqa: E402

N_QUEUES = 2500
PARK = 64


def long_polls(c, cl, port):
    c.step("(e) %d + 1 long-poll fetches on one connection" % PARK)
    r = cl.tern("queue", "create", "idle")
    c.check(r.returncode == 0, "create idle", r.stderr.strip())
    a = u.connect(port)
    a.sendall(b"".join(u.fetch("idle", 0, 10, 4096, 30000, i + 1)
                       for i in range(PARK + 1)))
    f = h.recv_frame(a, timeout=10)
    c.check(isinstance(f, h.Frame) and f.status == u.ELIMIT and
            f.request_id == PARK + 1 and
            "max_parked_per_conn" in f.error_message(),
            "fetch %d answered TERN_ELIMIT naming max_parked_per_conn" %
            (PARK + 1), f)
    b = u.connect(port)
    t0 = time.monotonic()
    b.sendall(u.fetch("idle", 0, 10, 4096, 1500, 7))
    f = h.recv_frame(b, timeout=15)
    waited = time.monotonic() - t0
    c.check(isinstance(f, h.Frame) and f.status == 0 and f.request_id == 7,
            "another connection parks (empty answer after its wait)", f)
    c.check(waited >= 1.0, "that fetch was parked (%.1f s)" % waited)
    a.close()
    b.close()


def create_queues(c, cl, port, names):
    c.step("create %d queues, pipelined" % len(names))
    s = u.connect(port, timeout=60)
    s.sendall(b"".join(u.create(n, i + 1) for i, n in enumerate(names)))
    ok = 0
    for _ in names:
        f = h.recv_frame(s, timeout=60)
        if not isinstance(f, h.Frame):
            break
        ok += f.status == 0
    s.close()
    c.check(ok == len(names), "%d queues created" % len(names), ok)


def listing(c, cl, port):
    names = ["q%05d.%s" % (i, "x" * (i % 40)) for i in range(N_QUEUES)]
    create_queues(c, cl, port, names)
    want = sorted(names + ["idle"])

    for args in ((), ("--page-size", 7)):
        r = cl.tern("queue", "list", *args, timeout=120)
        got = [ln.split("\t")[0] for ln in r.stdout.splitlines() if ln]
        c.check(r.returncode == 0, "queue list %s: exit 0" % " ".join(
            map(str, args)), r.stderr.strip()[-300:])
        c.check(got == want, "queue list %s: every name once, in order "
                "(%d listed)" % (" ".join(map(str, args)), len(got)))
    r = cl.tern("queue", "list", "--json", "--page-size", 333, timeout=120)
    try:
        js = [q["name"] for q in json.loads(r.stdout)["queues"]]
    except (ValueError, KeyError):
        js = None
    c.check(js == want, "queue list --json: every name once")
    r = cl.tern("queue", "list", "--limit", 10)
    c.check(r.stdout.splitlines() and
            [ln.split("\t")[0] for ln in r.stdout.splitlines()] == want[:10],
            "queue list --limit 10: the first 10")

    c.step("an older client's unpaged QUEUE_LIST")
    s = u.connect(port)
    s.sendall(h.encode_frame(h.OP["QUEUE_LIST"], b"", request_id=5))
    f = h.recv_frame(s, timeout=10)
    c.check(isinstance(f, h.Frame) and f.status == u.ELIMIT and
            "max_frame_bytes" in f.error_message(),
            "too long for one frame: TERN_ELIMIT", f)
    c.step("a raw paged request: 3 queues after q00010")
    body = h.put_str("q00010.xxxxxxxxxx") + struct.pack("<I", 3)
    s.sendall(h.encode_frame(h.OP["QUEUE_LIST"], body, request_id=6))
    f = h.recv_frame(s, timeout=10)
    ok = isinstance(f, h.Frame) and f.status == 0
    if ok:
        (n,) = struct.unpack_from("<I", f.body, 0)
        ok = n == 3 and f.body[-1] == 1
    c.check(ok, "3 queues and more = 1", f)
    s.close()


def main(c):
    limits = {"max_message_bytes": "16K", "max_frame_bytes": "64K",
              "list_page_max": 100}
    with h.Cluster(n=1, limits=limits) as cl:
        cl.start()
        port = cl.nodes[1].client_port
        long_polls(c, cl, port)
        listing(c, cl, port)
        c.check(cl.nodes[1].alive(), "node still running")
        cl.report_sanitizer()


if __name__ == "__main__":
    h.run_test(main)
