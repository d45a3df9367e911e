#!/usr/bin/env python3
"""Disk floor for bench/compare.sh: write(1 KiB) + fdatasync latency with
1, 2 and 3 concurrent writers, each a process appending to its own file in
DIR (so on the filesystem of the data dirs). Writers start together and
each does N appends; prints one JSON object per writer count on stdout:
{"writers": k, "n": samples, "p50_us", "p90_us", "p99_us", "max_us"}.
A 3-node cluster on one disk commits against the 2-writer figure (leader
and one follower), which is why it is measured.

    floors.py fsync DIR [--n 2000] [--writers "1 2 3"]

The durable append rate, the floor of pipelined produce on one disk:
k writers (default 3, one per node of a cluster on one disk), each a
process appending blocks of B bytes (default 64 KiB: about what a node of
a 3-node cluster writes per raft write under a window of 256 x 1 KiB)
with O_DIRECT | O_DSYNC, one write in flight per writer as in raft_uv,
for S seconds (default 3) to its own file, first written over once with
zeros (as raft/prealloc.c does). Prints one JSON object:
{"floor": "dsync", "writers", "block", "secs", "mb_per_s",
"writes_per_s", "p50_us", "p99_us", "direct"}; "direct" false when the
file system refused O_DIRECT (tmpfs), the writes then go through the page
cache with O_DSYNC.

    floors.py dsync DIR [--writers 3] [--block 65536] [--secs 3]

Python stdlib only; the interpreter's share of a sample is a few us,
against hundreds for the fdatasync."""
import json
import mmap
import multiprocessing as mp
import os
import sys
import time


def pct(v, q):
    """q-quantile (0..1) of the sorted list v (nearest rank)."""
    if not v:
        return None
    k = max(0, min(len(v) - 1, int(round(q * len(v) + 0.5)) - 1))
    return v[k]


def writer(path, n, start, out):
    buf = b"x" * 1024
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                 0o600)
    lat = []
    try:
        start.wait(30)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            os.write(fd, buf)
            os.fdatasync(fd)
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
    finally:
        os.close(fd)
        os.unlink(path)
    out.put(lat)


def fsync(d, n, counts):
    for k in counts:
        start = mp.Event()
        out = mp.Queue()
        ps = [mp.Process(target=writer,
                         args=(os.path.join(d, "floor-%d-%d" % (k, i)), n,
                               start, out)) for i in range(k)]
        for p in ps:
            p.start()
        time.sleep(0.2)
        start.set()
        lat = []
        for _ in ps:
            lat.extend(out.get(timeout=600))
        for p in ps:
            p.join(60)
        lat.sort()
        print(json.dumps({"floor": "fsync", "writers": k, "n": len(lat),
                          "p50_us": pct(lat, 0.50), "p90_us": pct(lat, 0.90),
                          "p99_us": pct(lat, 0.99), "max_us": lat[-1]}),
              flush=True)


DSYNC_FILE = 64 << 20  # bytes each writer cycles through


def open_dsync(path):
    """(fd, direct): O_DIRECT | O_DSYNC, or O_DSYNC alone where the file
    system refuses O_DIRECT."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DSYNC
    try:
        return os.open(path, flags | os.O_DIRECT, 0o600), True
    except OSError:
        return os.open(path, flags, 0o600), False


def dsync_writer(path, block, secs, start, out):
    fd, direct = open_dsync(path)
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
    buf.write(b"x" * block)
    lat = []
    try:
        zeros = mmap.mmap(-1, 1 << 20)
        for off in range(0, DSYNC_FILE, 1 << 20):
            os.pwrite(fd, zeros, off)
        start.wait(30)
        off = 0
        end = time.monotonic() + secs
        t_start = time.monotonic()
        while time.monotonic() < end:
            t0 = time.perf_counter_ns()
            os.pwrite(fd, buf, off)
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
            off = (off + block) % DSYNC_FILE
        elapsed = time.monotonic() - t_start
    finally:
        os.close(fd)
        os.unlink(path)
    out.put((lat, elapsed, direct))


def dsync(d, writers, block, secs):
    start = mp.Event()
    out = mp.Queue()
    ps = [mp.Process(target=dsync_writer,
                     args=(os.path.join(d, "dsync-%d" % i), block, secs,
                           start, out)) for i in range(writers)]
    for p in ps:
        p.start()
    # every writer has written its file over before the clock starts
    time.sleep(0.2 + DSYNC_FILE / 200e6)
    start.set()
    res = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(60)
    lat = sorted(x for r in res for x in r[0])
    secs_max = max(r[1] for r in res)
    print(json.dumps({"floor": "dsync", "writers": writers, "block": block,
                      "secs": round(secs_max, 2),
                      "mb_per_s": round(len(lat) * block / secs_max / 1e6, 1),
                      "writes_per_s": round(len(lat) / secs_max, 1),
                      "p50_us": pct(lat, 0.50), "p99_us": pct(lat, 0.99),
                      "direct": all(r[2] for r in res)}), flush=True)


def main(argv):
    if len(argv) < 3 or argv[1] not in ("fsync", "dsync"):
        print(__doc__, file=sys.stderr)
        return 2
    d = argv[2]
    n, counts = 2000, [1, 2, 3]
    writers, block, secs = 3, 64 << 10, 3.0
    i = 3
    while i < len(argv):
        if i + 1 >= len(argv):
            print(__doc__, file=sys.stderr)
            return 2
        k, v = argv[i], argv[i + 1]
        if k == "--n" and argv[1] == "fsync":
            n = int(v)
        elif k == "--writers" and argv[1] == "fsync":
            counts = [int(x) for x in v.split()]
        elif k == "--writers":
            writers = int(v)
        elif k == "--block":
            block = int(v)
        elif k == "--secs":
            secs = float(v)
        else:
            print(__doc__, file=sys.stderr)
            return 2
        i += 2
    if argv[1] == "fsync":
        fsync(d, n, counts)
    else:
        dsync(d, writers, block, secs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
