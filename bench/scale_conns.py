#!/usr/bin/env python3
"""Many client connections served by one node at once.

Starts a 3-node cluster on loopback (scripts/cluster.sh, binaries from
TERN_BIN) with [limits] max_connections = --count and
max_connections_per_addr = 256 (the default), creates a queue with one
message, then opens --count connections to node 1's client port from as
many loopback source addresses as the per-address cap needs (127.0.0.2,
127.0.0.3, ...), all held open at once. Every connection then sends one
small request (even ones STATUS, odd ones a FETCH of the message) and
reads its answer. Then --over connections more are opened: each must get
one TERN_ELIMIT error frame naming max_connections. Prints served,
refused and failed counts, node 1's VmRSS/VmHWM before, with every
connection open and after they are closed, its RLIMIT_NOFILE soft
limit and whether its log says it raised it, and one JSON line.

    TERN_BIN=build bench/scale_conns.py [--count 10000] [--over 20]

Needs an open-file limit above --count + --over (the script raises its
soft limit to its hard limit). Loopback only; bounded in count and in
time (120 s for the connects, 60 s for the answers).
"""
import argparse
import json
import os
import resource
import selectors
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import tern_harness as h  # noqa: E402

PER_ADDR = 256
HDR = h.HEADER.size  # the client frame header (proto/include/proto.h)


def mem(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0])
    return out


def nofile(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return 0


def request(i):
    if i % 2 == 0:
        return h.encode_frame(h.OP["STATUS"], b"", request_id=i + 1)
    body = h.put_str("conns") + struct.pack("<QIII", 0, 1, 4096, 0)
    return h.encode_frame(h.OP["FETCH"], body, request_id=i + 1)


def frame_len(buf):
    """Length of the first whole frame in buf, or 0."""
    if len(buf) < HDR:
        return 0
    hdr = h.Frame(buf[:HDR], b"")
    n = HDR + hdr.body_len
    return n if len(buf) >= n else 0


def open_conns(port, first, n, deadline):
    socks, failed = [], 0
    for k in range(n):
        if time.time() > deadline:
            failed += n - k
            break
        i = first + k
        s = socket.socket()
        try:
            s.bind(("127.0.0.%d" % (2 + i // PER_ADDR), 0))
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
        except OSError:
            failed += 1
            s.close()
    return socks, failed


def exchange(socks, deadline, send=True):
    """Send each socket its request (when send), read one frame from each.
    Returns the list of frames (None: closed or timed out)."""
    sel = selectors.DefaultSelector()
    bufs = [b""] * len(socks)
    got = [None] * len(socks)
    for i, s in enumerate(socks):
        if send:
            s.settimeout(10)
            try:
                s.sendall(request(i))
            except OSError:
                continue
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    left = len(sel.get_map())
    while left > 0 and time.time() < deadline:
        for key, _ in sel.select(timeout=1.0):
            i = key.data
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                bufs[i] += data
                n = frame_len(bufs[i])
                if n == 0:
                    continue
                got[i] = h.Frame(bufs[i][:HDR], bufs[i][HDR:n])
            sel.unregister(key.fileobj)
            left -= 1
    sel.close()
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--over", type=int, default=20)
    a = ap.parse_args()
    if not (1 <= a.count <= 50000 and 0 <= a.over <= 1000):
        sys.exit("scale_conns: --count 1..50000, --over 0..1000")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.count + a.over + 256
    if hard < need:
        sys.exit("scale_conns: needs an open-file hard limit of %d (have %d)"
                 % (need, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    cluster = os.path.join(ROOT, "scripts", "cluster.sh")
    base = int(subprocess.run([cluster, "free-base"], check=True,
                              capture_output=True, text=True).stdout)
    work = tempfile.mkdtemp(prefix="tern-scalec.")
    args = [cluster, "--dir", work, "--base-port", str(base)]
    env = dict(os.environ)
    env["TERN_LIMITS_EXTRA"] = ("max_connections = %d\n"
                                "max_connections_per_addr = %d"
                                % (a.count, PER_ADDR))
    subprocess.run(args + ["up"], check=True, stdout=subprocess.DEVNULL,
                   env=env)
    socks, extra = [], []
    try:
        tern = os.path.join(os.environ.get("TERN_BIN",
                                           os.path.join(ROOT, "build")),
                            "cli", "tern")
        servers = ",".join("127.0.0.1:%d" % (base + i) for i in (1, 2, 3))
        subprocess.run([tern, "-s", servers, "queue", "create", "conns"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([tern, "-s", servers, "produce", "conns", "--count",
                        "1", "--size", "64"], check=True,
                       stdout=subprocess.DEVNULL)
        with open(os.path.join(work, "node1.pid")) as f:
            pid = int(f.read())
        port = base + 1
        before = mem(pid)
        print("scale_conns: %d connections to node 1 (pid %d), %d over the "
              "limit; node RLIMIT_NOFILE soft %d" % (a.count, pid, a.over,
                                                     nofile(pid)))
        with open(os.path.join(work, "node1.log")) as f:
            raised = [ln.strip() for ln in f
                      if "file descriptor limit" in ln]
        print("node log: %s" % (raised[0] if raised else "(no line)"))
        t0 = time.time()
        socks, conn_failed = open_conns(port, 0, a.count, t0 + 120)
        t_open = time.time() - t0
        t1 = time.time()
        got = exchange(socks, t1 + 60)
        t_ans = time.time() - t1
        held = mem(pid)
        served = sum(1 for f in got if f is not None and f.status == 0)
        refused = sum(1 for f in got if f is not None and
                      f.status == h.CODE["TERN_ELIMIT"])
        errors = len(socks) - served - refused + conn_failed
        print("opened %d connections in %.1f s (%d failed to connect); "
              "answers in %.1f s: served %d, refused %d, errors %d"
              % (len(socks), t_open, conn_failed, t_ans, served, refused,
                 errors))
        extra, extra_failed = open_conns(port, a.count, a.over,
                                         time.time() + 30)
        over = exchange(extra, time.time() + 30, send=False)
        over_limit = sum(1 for f in over if f is not None and
                         f.status == h.CODE["TERN_ELIMIT"] and
                         "max_connections" in f.error_message())
        print("%d connections over max_connections: %d got TERN_ELIMIT "
              "naming max_connections (%d failed to connect)"
              % (a.over, over_limit, extra_failed))
        for s in socks + extra:
            s.close()
        socks, extra = [], []
        time.sleep(2)
        # Once they are closed (at the limit, a status probe is refused).
        alive = subprocess.run(args + ["status"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL).returncode == 0
        after = mem(pid)
        per_conn = (held["VmRSS"] - before["VmRSS"]) * 1024.0 / max(
            served, 1)
        print("node 1 VmRSS: before %d kB, %d connections open %d kB "
              "(%.1f kB per connection), after closing %d kB; VmHWM %d kB"
              % (before["VmRSS"], len(got), held["VmRSS"], per_conn / 1024,
                 after["VmRSS"], after["VmHWM"]))
        print("cluster healthy after: %s" % alive)
        print(json.dumps({
            "bench": "scale_conns", "connections": a.count,
            "served": served, "refused": refused, "errors": errors,
            "over": a.over, "over_refused_named": over_limit,
            "rss_kb_before": before["VmRSS"], "rss_kb_held": held["VmRSS"],
            "rss_kb_after": after["VmRSS"], "hwm_kb": after["VmHWM"],
            "nofile": nofile(pid), "open_s": round(t_open, 2),
            "answer_s": round(t_ans, 2), "healthy_after": alive}))
    finally:
        for s in socks + extra:
            s.close()
        subprocess.run(args + ["down"], stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
