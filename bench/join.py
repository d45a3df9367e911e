#!/usr/bin/env python3
"""A node joining a cluster that holds about 1 GB (docs/MEMBERSHIP.md,
"Growing: tern cluster add"). Three nodes on loopback
(tests/integration/tern_harness.py, peer TLS on, the raft defaults of
ternd: snapshots every 64 MiB, 256 trailing entries); `tern bench`
fills queue q with --count messages of --size bytes (pipelined: window
64, batch 64; bounded by the count and --fill-s); the script waits until
every node applied the commit index and the leader's log is quiet; then,
--trials times:

1. node 4 starts with an empty data directory in join mode ([peers]
   lists nodes 1-3 only);
2. a paced produce runs into queue live (rounds of 20 x 1 KiB, window 1,
   25 ms apart, each round its own `tern produce` with an ack log), and
   `tern cluster add 4 ...` is timed from the command to its answer
   "added: voter";
3. separately: from the same start until node 4 has applied the leader's
   commit index (read just before, in the same poll) and serves q's last
   offset when asked alone;
4. the bytes node 4 received: the commit-log bytes of the bulk copy
   ("restored snapshot ... log_end=" in its log; it started empty, so the
   copy is [0, log_end)), and its data directory at the end (commit log,
   raft log, LMDB index rebuilt from the log);
5. the paced load's errors and longest write gap (the ack logs are
   sampled every 5 ms: the figure includes the 25 ms pause between rounds
   and the start of a CLI process; the same load without a join is
   measured first as the baseline);
6. `tern cluster remove 4`, stop node 4, wipe its data directory.

Prints one line per trial, a summary table and a JSON line.

    cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release
    cmake --build build-rel -j2 --target ternd tern_cli
    TERN_BIN=$PWD/build-rel bench/join.py [--count N] [--size B]
        [--trials T] [--fill-s S]

Node 4's log shows the phases: "snapshot catch-up
from=0 to=N" when the bulk fetch starts, "restored snapshot" once the
bytes are fetched and indexed (idx_restore), then the membership lines.

Defaults: 1,000,000 x 1024 B (1 GiB of payload), 3 trials, fill bounded
by 900 s. Every process is started and stopped by the harness, by PID;
the cluster's temp dir (under $TMPDIR or /tmp) is removed at the end;
every loop is bounded in count and time."""
import argparse
import json
import os
import re
import shutil
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import tern_harness as h  # noqa: E402

NEW = 4                # the joining node's id
ADD_WAIT_MS = 900000   # --wait-ms of the add (the leader's bound)
ROUND = 20             # messages per round of the paced load
PAUSE_S = 0.025        # pause between two rounds
MAX_ROUNDS = 20000     # bound of one paced load


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total


def set_peers(cl, nd, ids):
    """Rewrite node nd's [peers] to list only ids (join mode for a node
    that is not among them)."""
    with open(nd.config) as f:
        head = f.read().split("[peers]")[0]
    lines = ["%d = %s,%s" % (i, cl.nodes[i].raft_addr,
                             cl.nodes[i].client_addr) for i in ids]
    with open(nd.config, "w") as f:
        f.write(head + "[peers]\n" + "\n".join(lines) + "\n")


class PacedLoad:
    """Rounds of ROUND x 1 KiB into queue live, PAUSE_S apart, until
    stop() (bounded by MAX_ROUNDS and max_s); records the client errors
    and the longest time without a new acknowledgement."""

    def __init__(self, cl, servers, tag, max_s):
        self.cl, self.servers, self.tag, self.max_s = cl, servers, tag, max_s
        self.ack = os.path.join(cl.dir, "acks-%s.txt" % tag)
        self.stop_ev = threading.Event()
        self.errors, self.rounds, self.gap = [], 0, 0.0
        self.lt = threading.Thread(target=self.load, daemon=True)
        self.st = threading.Thread(target=self.sample, daemon=True)

    def load(self):
        t_end = time.monotonic() + self.max_s
        while (not self.stop_ev.is_set() and self.rounds < MAX_ROUNDS and
               time.monotonic() < t_end):
            r = self.cl.tern("produce", "live", "--count", ROUND, "--size",
                             1024, "--window", 1, "--ack-log", self.ack,
                             "--id-prefix", "%s-%d-" % (self.tag,
                                                        self.rounds),
                             servers=self.servers, timeout=60)
            self.rounds += 1
            if r.returncode != 0:
                self.errors.append(r.stderr.strip()[-300:])
            time.sleep(PAUSE_S)

    def sample(self):
        size, last = -1, None
        while self.lt.is_alive():
            try:
                s = os.path.getsize(self.ack)
            except OSError:
                s = 0
            now = time.monotonic()
            if s != size:
                if last is not None and size > 0:
                    self.gap = max(self.gap, now - last)
                if s > 0:
                    last = now
                size = s
            time.sleep(0.005)

    def start(self):
        self.lt.start()
        self.st.start()

    def stop(self):
        self.stop_ev.set()
        self.lt.join(90)
        self.st.join(10)
        return {"rounds": self.rounds,
                "acked": len(h.read_ack_log(self.ack)),
                "errors": len(self.errors),
                "first_error": self.errors[0] if self.errors else "",
                "longest_write_gap_ms": round(1000 * self.gap)}


def fill(cl, count, size, fill_s):
    t0 = time.monotonic()
    r = cl.tern("bench", "q", "--count", count, "--size", size, "--window",
                64, "--batch", 64, "--duration", "%ds" % fill_s, "--json",
                timeout=fill_s + 120)
    took = time.monotonic() - t0
    js = {}
    for line in r.stdout.splitlines():
        try:
            js = json.loads(line)
        except ValueError:
            continue
    if r.returncode != 0:
        print("fill: tern bench rc %d: %s" % (r.returncode,
                                              r.stderr.strip()[-300:]))
    return js, took


def settle(cl, timeout=300):
    """Wait until nodes 1-3 applied the leader's commit index and it stays
    put for 3 s (no write, snapshot taken); returns that index."""
    deadline = time.monotonic() + timeout
    stable_since, last = None, None
    while time.monotonic() < deadline:
        lid = cl.wait_leader(20, exclude=(NEW,))
        ci = (cl.status(lid) or {}).get("commit_index") or 0
        ok = all((cl.status(i) or {}).get("last_applied", -1) >= ci
                 for i in (1, 2, 3))
        if ok and ci == last:
            if stable_since and time.monotonic() - stable_since >= 3:
                return ci
            stable_since = stable_since or time.monotonic()
        else:
            stable_since = None
        last = ci
        time.sleep(0.5)
    return None


def serves(cl, last):
    r = cl.tern("consume", "q", "--offset", last, "--max", 1,
                servers=cl.nodes[NEW].client_addr, timeout=30,
                timeout_ms=5000)
    return r.returncode == 0 and r.stdout.startswith("%d\t" % last)


def restored_log_end(text):
    m = re.findall(r'msg="restored snapshot".*?log_end=(\d+)', text)
    return int(m[-1]) if m else None


def one_trial(cl, k, last, servers):
    nd = cl.nodes[NEW]
    log_mark = len(nd.log_text())
    cl.start_node(NEW)
    ok = h.poll(lambda: "waiting to be added" in nd.log_text()[log_mark:],
                30)
    res = {"trial": k, "join_mode_seen": bool(ok)}
    load = PacedLoad(cl, servers, "t%d" % k, 1200)
    load.start()
    caught = {}
    add_done = threading.Event()

    def poll_caught():
        t_end = time.monotonic() + 1200
        while time.monotonic() < t_end and "t" not in caught:
            lid = cl.leader()
            ci = (cl.status(lid) or {}).get("commit_index") if lid else None
            st = cl.status(NEW)
            if (ci and st and (st.get("last_applied") or 0) >= ci and
                    serves(cl, last)):
                caught["t"] = time.monotonic() - t0
                caught["index"] = ci
                break
            time.sleep(0.25)

    t0 = time.monotonic()
    pt = threading.Thread(target=poll_caught, daemon=True)
    pt.start()
    r = cl.tern("cluster", "add", NEW, nd.raft_addr, nd.client_addr,
                "--wait-ms", ADD_WAIT_MS, servers=servers,
                timeout=ADD_WAIT_MS / 1000 + 60)
    res["voter_s"] = round(time.monotonic() - t0, 2)
    add_done.set()
    res["add_rc"] = r.returncode
    res["add_out"] = (r.stdout.strip() + " " + r.stderr.strip())[-300:]
    pt.join(1300)
    res["caught_up_s"] = round(caught["t"], 2) if "t" in caught else None
    time.sleep(1.0)
    res["load"] = load.stop()
    text = nd.log_text()[log_mark:]
    res["bulk_bytes"] = restored_log_end(text)
    res["restores"] = text.count('msg="restored snapshot"')
    res["data_dir_bytes"] = du(nd.data_dir)
    res["raft_dir_bytes"] = sum(du(os.path.join(nd.data_dir, d))
                                for d in os.listdir(nd.data_dir)
                                if "raft" in d)
    try:
        res["node4_rss_peak_kb"] = h.proc_memory_kb(nd.pid)["VmHWM"]
    except (OSError, TypeError, KeyError):
        res["node4_rss_peak_kb"] = None
    t = res["caught_up_s"] or res["voter_s"]
    if res["bulk_bytes"]:
        res["bulk_mb_per_s_voter"] = round(res["bulk_bytes"] / 1e6 /
                                           res["voter_s"], 1)
    res["data_mb_per_s_caught"] = round(res["data_dir_bytes"] / 1e6 / t, 1)
    # take node 4 out again: remove, stop, wipe
    rr = cl.tern("cluster", "remove", NEW, servers=servers, timeout=60)
    res["remove_rc"] = rr.returncode
    cl.stop(NEW, timeout=30)
    shutil.rmtree(nd.data_dir, ignore_errors=True)
    os.makedirs(nd.data_dir, mode=0o700)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1000000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--fill-s", type=int, default=900)
    a = ap.parse_args()
    if not (1000 <= a.count <= 10000000 and 16 <= a.size <= 65536 and
            1 <= a.trials <= 10 and 10 <= a.fill_s <= 3600):
        sys.exit("join bench: --count 1000..10000000, --size 16..65536, "
                 "--trials 1..10, --fill-s 10..3600")
    out = {"bench": "join", "count": a.count, "size": a.size}
    with h.Cluster(4) as cl:
        for nd in cl.nodes.values():
            set_peers(cl, nd, [1, 2, 3])
        for i in (1, 2, 3):
            cl.start_node(i)
        cl.wait_leader(30, exclude=(NEW,))
        servers = cl.servers([1, 2, 3])
        for q in ("q", "live"):
            cl.tern("queue", "create", q, servers=servers, check=True)
        js, took = fill(cl, a.count, a.size, a.fill_s)
        info = cl.queue_info("q") or {}
        print("fill: %s messages of %d B in %.1f s (%s msg/s, %s MB/s); "
              "queue info: %s" % (js.get("count"), a.size, took,
                                  js.get("msgs_per_s"), js.get("mb_per_s"),
                                  json.dumps(info)[:300]), flush=True)
        out["fill"] = {"bench": js, "took_s": round(took, 1), "queue": info}
        t0 = time.monotonic()
        ci = settle(cl)
        print("settled in %.1f s at commit index %s" %
              (time.monotonic() - t0, ci), flush=True)
        sizes = {i: du(cl.nodes[i].data_dir) for i in (1, 2, 3)}
        print("data dirs of nodes 1-3 (bytes): %s" % sizes, flush=True)
        out["data_dirs"] = sizes
        n = js.get("count") or a.count
        last = n - 1
        base = PacedLoad(cl, servers, "base", 10)
        base.start()
        time.sleep(5)
        out["baseline_load"] = base.stop()
        print("paced load without a join (5 s): %s" %
              json.dumps(out["baseline_load"]), flush=True)
        trials = []
        for k in range(1, a.trials + 1):
            r = one_trial(cl, k, last, servers)
            trials.append(r)
            print("trial %d: %s" % (k, json.dumps(r)), flush=True)
            if r["add_rc"] != 0 or r["remove_rc"] != 0:
                print("trial %d failed; node logs:" % k)
                cl.tail_logs(20)
                break
        out["trials"] = trials
        print()
        print("| trial | add -> voter | caught up (applied + serves last "
              "offset) | bulk copy (commit log) | rate to voter | node 4 "
              "data dir | node 4 peak RSS | paced load: errors, longest "
              "gap |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in trials:
            bb = r.get("bulk_bytes")
            print("| %d | %.2f s%s | %s | %s | %s | %.0f MB | %s | %d of %d "
                  "rounds, %d ms |" % (
                      r["trial"], r["voter_s"],
                      "" if r["add_rc"] == 0 else " (rc %d)" % r["add_rc"],
                      "%.2f s" % r["caught_up_s"] if r["caught_up_s"]
                      else "not within the bound",
                      "%.0f MB" % (bb / 1e6) if bb else "none logged",
                      "%.1f MB/s" % r["bulk_mb_per_s_voter"]
                      if bb else "-",
                      r["data_dir_bytes"] / 1e6,
                      "%d MB" % (r["node4_rss_peak_kb"] // 1024)
                      if r["node4_rss_peak_kb"] else "-",
                      r["load"]["errors"], r["load"]["rounds"],
                      r["load"]["longest_write_gap_ms"]))
        print("baseline paced load (no join): %d errors, longest gap %d ms"
              % (out["baseline_load"]["errors"],
                 out["baseline_load"]["longest_write_gap_ms"]))
    print(json.dumps(out))
    bad = any(r["add_rc"] or r["load"]["errors"] for r in trials)
    return 1 if bad or len(trials) < a.trials else 0


if __name__ == "__main__":
    sys.exit(main())
