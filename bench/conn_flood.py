#!/usr/bin/env python3
"""ternd's memory under a connection flood with the default limits on.

Starts a 3-node cluster on loopback (scripts/cluster.sh, binaries from
TERN_BIN), then opens up to --per-addr connections from each of --addrs
loopback source addresses (127.0.0.2, 127.0.0.3, ...) to node 1's client
port and holds them idle for --hold seconds. Prints node 1's VmRSS/VmHWM
before and after, how many connections were admitted and how many were
answered with an error frame (TERN_ELIMIT: max_connections or
max_connections_per_addr), then stops the cluster by PID.

    TERN_BIN=build-rel python3 bench/conn_flood.py [--addrs 20]
        [--per-addr 256] [--hold 3]

Needs an open-file limit above the connection count (the script raises
its soft limit to the hard limit). Loopback only; bounded in count and in
time (60 s for the connects).
"""
import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mem(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addrs", type=int, default=20)
    ap.add_argument("--per-addr", type=int, default=256)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--base-port", type=int, default=0,
                    help="default: a free one (scripts/cluster.sh free-base)")
    a = ap.parse_args()
    if not (1 <= a.addrs <= 200 and 1 <= a.per_addr <= 1000):
        sys.exit("conn_flood: --addrs 1..200, --per-addr 1..1000")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    cluster = os.path.join(ROOT, "scripts", "cluster.sh")
    if a.base_port == 0:
        a.base_port = int(subprocess.run([cluster, "free-base"], check=True,
                                         capture_output=True,
                                         text=True).stdout)
    work = tempfile.mkdtemp(prefix="tern-flood.")
    args = [cluster, "--dir", work, "--base-port", str(a.base_port)]
    subprocess.run(args + ["up"], check=True, stdout=subprocess.DEVNULL)
    socks = []
    try:
        with open(os.path.join(work, "node1.pid")) as f:
            pid = int(f.read())
        port = a.base_port + 1
        before = mem(pid)
        t0 = time.time()
        refused = 0
        for i in range(a.addrs):
            for _ in range(a.per_addr):
                if time.time() - t0 > 60:
                    break
                s = socket.socket()
                s.bind(("127.0.0.%d" % (2 + i), 0))
                try:
                    s.connect(("127.0.0.1", port))
                    socks.append(s)
                except OSError:
                    refused += 1
                    s.close()
        time.sleep(a.hold)
        answered = 0
        for s in socks:
            s.setblocking(False)
            try:
                if s.recv(1) != b"":
                    answered += 1
            except BlockingIOError:
                pass
            except OSError:
                answered += 1
        after = mem(pid)
        print("connections attempted %d, connect refused %d, answered with "
              "an error frame %d, held open %d"
              % (a.addrs * a.per_addr, refused, answered,
                 len(socks) - answered))
        print("node 1 before: VmRSS %d kB, VmHWM %d kB"
              % (before["VmRSS"], before["VmHWM"]))
        print("node 1 after:  VmRSS %d kB, VmHWM %d kB (peak %.1f MiB)"
              % (after["VmRSS"], after["VmHWM"], after["VmHWM"] / 1024.0))
    finally:
        for s in socks:
            s.close()
        subprocess.run(args + ["down"], stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
