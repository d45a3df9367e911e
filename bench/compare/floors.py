#!/usr/bin/env python3
"""Disk floor for bench/compare.sh: write(1 KiB) + fdatasync latency with
1, 2 and 3 concurrent writers, each a process appending to its own file in
DIR (so on the filesystem of the data dirs). Writers start together and
each does N appends; prints one JSON object per writer count on stdout:
{"writers": k, "n": samples, "p50_us", "p90_us", "p99_us", "max_us"}.
A 3-node cluster on one disk commits against the 2-writer figure (leader
and one follower), which is why it is measured.

    floors.py fsync DIR [--n 2000] [--writers "1 2 3"]

Python stdlib only; the interpreter's share of a sample is a few us,
against hundreds for the fdatasync."""
import json
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


def main(argv):
    if len(argv) < 3 or argv[1] != "fsync":
        print(__doc__, file=sys.stderr)
        return 2
    d = argv[2]
    n, counts = 2000, [1, 2, 3]
    i = 3
    while i < len(argv):
        if argv[i] == "--n":
            n = int(argv[i + 1])
        elif argv[i] == "--writers":
            counts = [int(x) for x in argv[i + 1].split()]
        else:
            print(__doc__, file=sys.stderr)
            return 2
        i += 2
    fsync(d, n, counts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
