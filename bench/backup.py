#!/usr/bin/env python3
"""What a backup and a restore cost (docs/OPERATIONS.md, "Backup and
restore"). A 3-node cluster on loopback (tests/integration/tern_harness.py)
gets --count messages of --size bytes; then

1. `tern admin backup` of a follower, timed, once idle and once while
   `tern bench` produces into another queue (the bench's throughput is
   printed with and without the backup running beside it);
2. `ternd --verify-backup`, timed;
3. a new 3-node cluster restored from the backup (node 1 and 2 in full,
   node 3 from the MANIFEST alone), timed until every node serves the
   last message.

    bench/backup.py [--count N] [--size BYTES]

Binaries: TERND and TERN_CLI, or <repo>/build (use a release build for
figures). Every process is started and stopped by the harness, by PID.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("TERND", os.path.join(ROOT, "build", "node", "ternd"))
os.environ.setdefault("TERN_CLI", os.path.join(ROOT, "build", "cli", "tern"))
import tern_harness as h  # noqa: E402


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    return total


def bench_rate(cl, queue, count):
    """msgs/s of `tern bench` (parsed from its --json line), or None."""
    r = cl.tern("bench", queue, "--count", count, "--size", 256,
                "--window", 64, "--json", timeout=300)
    if r.returncode != 0:
        print("bench failed: %s" % r.stderr.strip()[-200:])
        return None
    for line in r.stdout.splitlines():
        try:
            js = json.loads(line)
        except ValueError:
            continue
        if "msgs_per_s" in js:
            return js["msgs_per_s"]
    return None


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--size", type=int, default=1024)
    a = ap.parse_args()
    if not 1000 <= a.count <= 10000000 or not 16 <= a.size <= 1 << 20:
        sys.exit("backup bench: --count 1000..10000000, --size 16..1048576")
    node_b = {"cluster_name": "restored"}
    with h.Cluster(3) as cl:
        leader = cl.start()
        follower = 2 if leader != 2 else 3
        addr = cl.nodes[follower].client_addr
        for q in ("data", "load"):
            cl.tern("queue", "create", q, check=True)
        _, t = timed(lambda: cl.tern("produce", "data", "--count", a.count,
                                     "--size", a.size, "--batch", 64,
                                     timeout=3600, check=True))
        print("produced %d x %d B in %.1f s" % (a.count, a.size, t))
        b1 = os.path.join(cl.dir, "backup-idle")
        r, t = timed(lambda: cl.tern("admin", "backup", "--node", addr, b1,
                                     timeout=3600))
        if r.returncode != 0:
            sys.exit("backup failed: " + r.stderr)
        mb = du(b1) / 1e6
        print("backup (idle): %.1f MB in %.2f s, %.0f MB/s" %
              (mb, t, mb / t))
        base = bench_rate(cl, "load", 20000)
        b2 = os.path.join(cl.dir, "backup-busy")
        p = cl.tern_popen("admin", "backup", "--node", addr, b2)
        t0 = time.monotonic()
        busy = bench_rate(cl, "load", 20000)
        p.wait(timeout=3600)
        print("backup (beside tern bench): done %.2f s after the bench "
              "started, rc %d" % (time.monotonic() - t0, p.returncode))
        print("tern bench msgs/s: alone %s, beside a backup %s" %
              (base, busy))
        vr, t = timed(lambda: subprocess.run(
            [cl.ternd, "--verify-backup", b1], capture_output=True,
            text=True, timeout=3600))
        print("verify: %.2f s (%s)" % (t, vr.stdout.strip()[:60]))
        bdir = os.path.join(os.path.dirname(cl.dir), os.path.basename(
            cl.dir) + "-bk")
        shutil.copytree(b1, bdir)
        for i in cl.nodes:
            cl.stop(i)
    try:
        with h.Cluster(3, node=node_b) as nc:
            only = os.path.join(nc.dir, "manifest-only")
            os.makedirs(only)
            shutil.copy(os.path.join(bdir, "MANIFEST"), only)
            nc.nodes[1].args = ["--restore-from", bdir]
            nc.nodes[2].args = ["--restore-from", bdir]
            nc.nodes[3].args = ["--restore-from", only,
                                "--restore-snapshot-only"]
            t0 = time.monotonic()
            nc.start(timeout=600)
            t_leader = time.monotonic() - t0
            last = a.count - 1
            for i, nd in nc.nodes.items():
                def served(nd=nd):
                    r = nc.tern("consume", "data", "--offset", last,
                                "--max", 1, servers=nd.client_addr,
                                timeout=30)
                    return r.returncode == 0 and r.stdout.startswith(
                        "%d\t" % last) or None
                ok = h.poll(served, 60, interval=0.2)
                print("restore: node %d serves offset %d after %.2f s%s" %
                      (i, last, time.monotonic() - t0,
                       "" if ok else " (NOT within 60 s)"))
            print("restore: leader after %.2f s" % t_leader)
    finally:
        shutil.rmtree(bdir, ignore_errors=True)


if __name__ == "__main__":
    main()
