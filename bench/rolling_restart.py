#!/usr/bin/env python3
"""Rolling restart under load: RUNS times (default 3), start a 3-node
cluster with scripts/cluster.sh on free ports in a temp dir, create queue
q, run a steady produce load (rounds of `tern produce q --count 300 --size
1024`, back to back, each round its own idempotent producer, all
acknowledgements appended to one ack log), let it run 1 s, restart every
node with scripts/rolling-restart.sh (followers first, the leader last
after a leadership transfer), let the load run 1 s more, stop it, read q
back and compare. Per run it prints the client errors (produce rounds that
exited non-zero), the longest pause between two acknowledgements (the ack
log is sampled every 5 ms, so the figure includes up to 5 ms of sampling
and the start of a CLI process between rounds), the messages lost
(acknowledged, not read back) and duplicated, and the restart's duration;
then one JSON line.

    TERN_BIN=build-rel bench/rolling_restart.py [--runs N]

Processes are stopped by PID (scripts/cluster.sh down), every loop is
bounded (400 rounds or 120 s of load per run)."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build"))
CLI = os.environ.get("TERN_CLI", os.path.join(BIN, "cli", "tern"))


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True,
                          errors="replace", **kw)


def ack_ids(path):
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.endswith("\n") and "\t" in line:
                    out.append(line.split("\t", 1)[0])
    except FileNotFoundError:
        pass
    return out


def one_run(k):
    d = tempfile.mkdtemp(prefix="tern-rolling-")
    base = run([os.path.join(ROOT, "scripts", "cluster.sh"),
                "free-base"]).stdout.strip()
    env = dict(os.environ, TERN_BIN=BIN, TERN_CLI=CLI)
    cl = [os.path.join(ROOT, "scripts", "cluster.sh"), "--dir", d,
          "--base-port", base]
    res = {"run": k}
    try:
        r = run(cl + ["up"], env=env, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("cluster up: " + r.stderr[-500:])
        servers = run(cl + ["servers"], env=env).stdout.strip()
        run([CLI, "-s", servers, "queue", "create", "q"], timeout=30)
        acks = os.path.join(d, "acks.txt")
        stop = threading.Event()
        errors, rounds = [], [0]

        def load():
            t_end = time.monotonic() + 120
            while (not stop.is_set() and rounds[0] < 400 and
                   time.monotonic() < t_end):
                p = run([CLI, "-s", servers, "produce", "q", "--count", "300",
                         "--size", "1024", "--ack-log", acks, "--id-prefix",
                         "r%d-" % rounds[0]], timeout=90)
                rounds[0] += 1
                if p.returncode != 0:
                    errors.append(p.stderr.strip()[-300:])

        gap = [0.0]

        def sample():
            size, last = -1, None
            while lt.is_alive():
                try:
                    s = os.path.getsize(acks)
                except OSError:
                    s = 0
                now = time.monotonic()
                if s != size:
                    if last is not None and size > 0:
                        gap[0] = max(gap[0], now - last)
                    if s > 0:
                        last = now
                    size = s
                time.sleep(0.005)

        lt = threading.Thread(target=load)
        st = threading.Thread(target=sample)
        lt.start()
        st.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        rr = run([os.path.join(ROOT, "scripts", "rolling-restart.sh"),
                  "--dir", d, "--base-port", base], env=env, timeout=300)
        res["restart_s"] = round(time.monotonic() - t0, 2)
        res["restart_rc"] = rr.returncode
        time.sleep(1.0)
        stop.set()
        lt.join(150)
        st.join(10)
        ids = ack_ids(acks)
        got = run([CLI, "-s", servers, "consume", "q", "--offset", "0"],
                  timeout=120).stdout
        read = [ln.split("\t")[1].split(".", 1)[0] for ln in got.splitlines()
                if "\t" in ln]
        seen = set(read)
        res.update(rounds=rounds[0], acked=len(ids), client_errors=len(errors),
                   longest_write_gap_ms=round(1000 * gap[0]),
                   lost=sum(1 for i in set(ids) if i not in seen),
                   duplicated=len(read) - len(seen))
        if errors:
            res["first_error"] = errors[0]
        if rr.returncode != 0:
            res["restart_out"] = rr.stdout[-500:] + rr.stderr[-300:]
    finally:
        run(cl + ["down"], env=env, timeout=120)
        shutil.rmtree(d, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not os.access(CLI, os.X_OK):
        sys.exit("rolling_restart: %s not found (build first)" % CLI)
    out = []
    for k in range(1, a.runs + 1):
        r = one_run(k)
        out.append(r)
        print("run %d: restart %.2f s (rc %s), %d rounds, %d acknowledged, "
              "client errors %d, longest write gap %d ms, lost %d, "
              "duplicated %d" % (k, r["restart_s"], r["restart_rc"],
                                 r["rounds"], r["acked"],
                                 r["client_errors"],
                                 r["longest_write_gap_ms"], r["lost"],
                                 r["duplicated"]), flush=True)
    print(json.dumps({"bench": "rolling_restart", "runs": out}))
    bad = any(r["client_errors"] or r["lost"] or r["duplicated"] or
              r["restart_rc"] for r in out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
