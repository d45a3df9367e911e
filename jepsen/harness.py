#!/usr/bin/env python3
"""
tern Jepsen-style harness (Python 3 stdlib; needs root, iproute2, nft).

One run: builds a private network out of Linux network namespaces, starts N
ternd nodes, runs the workload driver (jepsen/driver) inside a client
namespace while a nemesis injects faults, heals everything, lets the driver
drain and read every node, then judges the history with
jepsen/checker/checker.py. Everything it creates is torn down at the end,
also after an error, Ctrl-C or SIGTERM (try/finally + signal handlers); if
the harness itself is SIGKILLed, `jepsen/cleanup.sh` removes what
state.json in the run dir lists.

Topology (prefix P = "tj" + 4 random hex digits, unique per run; subnet
10.231.X.0/24 with X picked per run):
  P-sw        switch namespace with bridge br0
  P-n1..P-nN  node namespaces, eth0 = 10.231.X.i (veth to the bridge);
              ternd listens on 10.231.X.i:7401 (clients), :7501 (raft)
  P-c         client namespace, eth0 = 10.231.X.100; the driver and every
              `tern` CLI call run here
The root namespace only ever holds a blackhole route for 10.231.X.0/24
(added first, removed last), so a mistake cannot send test traffic out of
the machine. Nothing in the root namespace talks to the test subnet.

Nemeses (--nemesis, comma-separated mixes allowed):
  partition           each round one of isolate-one, isolate-leader, halves
  partition-one | partition-leader | partition-halves   one variant only
  kill                kill -9 a random node or the leader, restart later
  kill-leader         kill -9 the leader
  kill-majority       kill -9 a random majority at once, restart later
  kill-all            kill -9 every node at once (process crash, page
                      cache survives: not a power-loss test)
  pause               SIGSTOP a random node or the leader (> election
                      timeout), then SIGCONT
  pause-leader        SIGSTOP the leader
  loss                drop 10/30/50 % of node-to-node packets (nft numgen)
                      on every node, both directions
  none                no faults
Partitions are nft rules in the node namespaces dropping traffic between
node addresses both ways (table inet P-nem, chain input); client traffic is
not cut. Heal = delete the table.

Run directory (kept): /tmp/jepsen-runs/<utc>-<prefix>-<nemesis>/ with
nK/ternd.log (every start of node K appended, with harness markers),
nK/ternd.ini, driver.log, history.driver.jsonl, nemesis.jsonl,
history.jsonl (merged, time order), checker.txt, verdict.json,
summary.json, harness.log, state.json.

Exit code: 0 valid, 1 invalid, 2 unknown, 3 harness error, 4 valid history
but a node exited on its own (crash), 130 interrupted.
"""

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.path.dirname(HERE)
RUNS_ROOT = "/tmp/jepsen-runs"
CLIENT_PORT = 7401
RAFT_PORT = 7501
CLIENT_HOST = 100


class HarnessError(Exception):
    pass


def mono_ns():
    return time.monotonic_ns()


class Log:
    def __init__(self, path):
        self.fh = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def __call__(self, msg):
        line = "%s %s" % (datetime.datetime.utcnow().strftime("%H:%M:%S.%f")
                          [:-3], msg)
        with self.lock:
            self.fh.write(line + "\n")
        print(line, flush=True)


class Run:
    def __init__(self, args):
        self.a = args
        self.prefix = "tj%04x" % random.getrandbits(16)
        stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
        name = "%s-%s-%s" % (stamp, self.prefix,
                             args.nemesis.replace(",", "+"))
        self.dir = os.path.abspath(args.run_dir or os.path.join(RUNS_ROOT,
                                                                name))
        os.makedirs(self.dir, exist_ok=True)
        self.log = Log(os.path.join(self.dir, "harness.log"))
        self.sw = self.prefix + "-sw"
        self.cns = self.prefix + "-c"
        self.n = args.nodes
        self.names = ["n%d" % i for i in range(1, self.n + 1)]
        self.netns = {nm: "%s-%s" % (self.prefix, nm) for nm in self.names}
        self.subnet_x = None
        self.route = None
        self.created_ns = []
        self.procs = {}         # name -> Popen
        self.killed = set()     # names we killed and not restarted
        self.paused = set()
        self.partitioned = False
        self.crashes = []       # (name, returncode, time)
        self.nem_lock = threading.Lock()
        self.nem_fh = open(os.path.join(self.dir, "nemesis.jsonl"), "a",
                           buffering=1)
        self.driver = None
        self.stop_nemesis = threading.Event()
        self.monitor_stop = threading.Event()
        self.tearing_down = False
        self.state_lock = threading.RLock()
        self.monitor_thread = None
        self.nem_thread = None
        self.ternd = args.ternd
        self.tern = args.tern
        self.drv = args.driver

    # ---- helpers ---------------------------------------------------------

    def sh(self, cmd, check=True, timeout=20, quiet=False):
        """Runs argv cmd; returns CompletedProcess. Bounded by timeout."""
        r = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise HarnessError("%s: rc %d: %s" % (" ".join(cmd), r.returncode,
                                                  r.stderr.strip()))
        if not quiet and r.returncode != 0:
            self.log("cmd failed (ignored): %s: %s" % (" ".join(cmd),
                                                       r.stderr.strip()))
        return r

    def ip(self, nm):
        return "10.231.%d.%d" % (self.subnet_x, int(nm[1:]))

    def caddr(self, nm):
        return "%s:%d" % (self.ip(nm), CLIENT_PORT)

    def raddr(self, nm):
        return "%s:%d" % (self.ip(nm), RAFT_PORT)

    def save_state(self):
        st = {"prefix": self.prefix, "namespaces": self.created_ns,
              "route": self.route,
              "pids": {nm: p.pid for nm, p in self.procs.items()},
              "driver_pid": self.driver.pid if self.driver else None}
        tmp = os.path.join(self.dir, "state.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(st, fh)
        os.replace(tmp, os.path.join(self.dir, "state.json"))

    def nemesis_event(self, f, **kw):
        ev = {"process": "nemesis", "type": "info", "f": f,
              "time": mono_ns()}
        ev.update(kw)
        with self.nem_lock:
            self.nem_fh.write(json.dumps(ev) + "\n")
        self.log("nemesis %s %s" % (f, json.dumps(kw) if kw else ""))

    # ---- network -------------------------------------------------------------

    def pick_subnet(self):
        used = self.sh(["ip", "route", "show", "table", "all"]).stdout
        cands = list(range(10, 250))
        random.shuffle(cands)
        for x in cands[:60]:
            net = "10.231.%d.0/24" % x
            if net in used:
                continue
            r = self.sh(["ip", "route", "add", "blackhole", net], check=False,
                        quiet=True)
            if r.returncode == 0:
                self.subnet_x = x
                self.route = net
                self.save_state()
                self.log("subnet %s (blackhole route in root ns)" % net)
                return
        raise HarnessError("no free 10.231.X.0/24 subnet")

    def add_ns(self, ns):
        self.sh(["ip", "netns", "add", ns])
        self.created_ns.append(ns)
        self.save_state()
        self.sh(["ip", "-n", ns, "link", "set", "lo", "up"])

    def attach(self, ns, port, addr):
        self.sh(["ip", "link", "add", "eth0", "netns", ns, "type", "veth",
                 "peer", "name", port, "netns", self.sw])
        self.sh(["ip", "-n", self.sw, "link", "set", port, "master", "br0"])
        self.sh(["ip", "-n", self.sw, "link", "set", port, "up"])
        self.sh(["ip", "-n", ns, "addr", "add", addr + "/24", "dev", "eth0"])
        self.sh(["ip", "-n", ns, "link", "set", "eth0", "up"])

    def build_network(self):
        self.pick_subnet()
        self.add_ns(self.sw)
        self.sh(["ip", "-n", self.sw, "link", "add", "br0", "type",
                 "bridge"])
        self.sh(["ip", "-n", self.sw, "link", "set", "br0", "up"])
        for nm in self.names:
            self.add_ns(self.netns[nm])
            self.attach(self.netns[nm], "v" + nm, self.ip(nm))
        self.add_ns(self.cns)
        self.attach(self.cns, "vc", "10.231.%d.%d" % (self.subnet_x,
                                                      CLIENT_HOST))
        # Reachability check from the client namespace (bounded).
        for nm in self.names:
            r = self.sh(["ip", "netns", "exec", self.cns, "ping", "-c", "1",
                         "-W", "2", self.ip(nm)], check=False, quiet=True)
            if r.returncode != 0 and shutil.which("ping"):
                raise HarnessError("no ping reply from %s" % nm)
        self.log("network up: %s, %d nodes, client ns %s"
                 % (self.sw, self.n, self.cns))

    # ---- nodes ---------------------------------------------------------------

    def write_config(self, nm):
        d = os.path.join(self.dir, nm)
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        peers = "\n".join("%s = %s,%s" % (p[1:], self.raddr(p), self.caddr(p))
                          for p in self.names)
        cfg = ("[node]\nid = %s\ndata_dir = %s\nclient_addr = %s\n"
               "raft_addr = %s\nlog_level = %s\n[raft]\n"
               "election_timeout_ms = %d\nheartbeat_ms = %d\n"
               "snapshot_threshold_bytes = %s\nsnapshot_trailing = %d\n"
               "[limits]\nmin_free_disk_bytes = 1M\n[peers]\n%s\n"
               % (nm[1:], os.path.join(d, "data"), self.caddr(nm),
                  self.raddr(nm), self.a.log_level, self.a.election_ms,
                  self.a.heartbeat_ms, self.a.snapshot_bytes,
                  self.a.snapshot_trailing, peers))
        with open(os.path.join(d, "ternd.ini"), "w") as fh:
            fh.write(cfg)

    def start_node(self, nm):
        d = os.path.join(self.dir, nm)
        logf = open(os.path.join(d, "ternd.log"), "a")
        logf.write("==== harness: start %s at mono %d ====\n"
                   % (nm, mono_ns()))
        logf.flush()
        env = dict(os.environ)
        if self.a.libraft_trace:
            env["LIBRAFT_TRACE"] = "1"
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.netns[nm], self.ternd, "--config",
             os.path.join(d, "ternd.ini"), "--pid-file",
             os.path.join(d, "ternd.pid")],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env)
        logf.close()
        self.procs[nm] = p
        self.killed.discard(nm)
        self.save_state()
        # `ip netns exec` execs ternd in place: same pid.
        for _ in range(50):
            try:
                with open("/proc/%d/comm" % p.pid) as fh:
                    if fh.read().strip() == "ternd":
                        break
            except OSError:
                break
            time.sleep(0.02)

    def check_crashes(self):
        for nm, p in list(self.procs.items()):
            if nm in self.killed:
                continue
            rc = p.poll()
            if rc is not None:
                self.crashes.append({"node": nm, "rc": rc,
                                     "time": mono_ns()})
                self.killed.add(nm)
                self.nemesis_event("crash-detected", node=nm, rc=rc)

    def tern_cli(self, servers, *args, timeout=10):
        return self.sh(["ip", "netns", "exec", self.cns, self.tern, "-s",
                        servers, "--timeout-ms", "1000"] + list(args),
                       check=False, quiet=True, timeout=timeout)

    def status(self, nm):
        r = self.tern_cli(self.caddr(nm), "--read-from", "first", "cluster",
                          "status", "--json", timeout=5)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def find_leader(self, candidates=None):
        """Leader by the highest-term node claiming to be leader."""
        best = None
        for nm in candidates or self.names:
            if nm in self.killed or nm in self.paused:
                continue
            s = self.status(nm)
            if s and s.get("role") == "leader":
                if best is None or s.get("term", 0) > best[1]:
                    best = (nm, s.get("term", 0))
        return best[0] if best else None

    def wait_leader(self, timeout):
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            ld = self.find_leader()
            if ld:
                return ld
            time.sleep(0.3)
        return None

    # ---- nemesis -------------------------------------------------------------

    def nft(self, nm, script):
        return subprocess.run(
            ["ip", "netns", "exec", self.netns[nm], "nft", "-f", "-"],
            input=script, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, timeout=10)

    def partition(self, groups):
        """groups: list of lists of node names; traffic between nodes of
        different groups is dropped both ways."""
        side = {}
        for gi, g in enumerate(groups):
            for nm in g:
                side[nm] = gi
        for nm in self.names:
            others = [self.ip(o) for o in self.names
                      if side.get(o, -1) != side.get(nm, -2)]
            if not others:
                continue
            script = ("table inet %s-nem {\n chain input {\n"
                      "  type filter hook input priority 0; policy accept;\n"
                      "  ip saddr { %s } drop\n }\n}\n"
                      % (self.prefix, ", ".join(others)))
            r = self.nft(nm, script)
            if r.returncode != 0:
                raise HarnessError("nft in %s: %s" % (nm, r.stderr.strip()))
        self.partitioned = True
        self.nemesis_event("start-partition", groups=groups)

    def heal_partition(self):
        if not self.partitioned:
            return
        for nm in self.names:
            self.nft(nm, "delete table inet %s-nem\n" % self.prefix)
        self.partitioned = False
        self.nemesis_event("heal-partition")

    def pick_node(self, leader_only, rnd):
        """A victim: the leader (always when leader_only, else half of
        the time) or a random node. Returns (name, whether it is the
        leader as far as `cluster status` said just now)."""
        ld = self.find_leader()
        if leader_only or (ld and rnd.random() < 0.5):
            nm = ld or rnd.choice(self.names)
        else:
            nm = rnd.choice(self.names)
        return nm, nm == ld

    def fault(self, kind, rnd):
        """Applies one fault; returns a heal function."""
        if kind.startswith("partition"):
            variants = {"partition": ["one", "leader", "halves"],
                        "partition-one": ["one"],
                        "partition-leader": ["leader"],
                        "partition-halves": ["halves"]}[kind]
            v = rnd.choice(variants)
            if v == "leader":
                victim = self.find_leader() or rnd.choice(self.names)
                groups = [[victim], [x for x in self.names if x != victim]]
            elif v == "one":
                victim = rnd.choice(self.names)
                groups = [[victim], [x for x in self.names if x != victim]]
            else:
                shuffled = self.names[:]
                rnd.shuffle(shuffled)
                k = len(shuffled) // 2
                groups = [sorted(shuffled[:k]), sorted(shuffled[k:])]
            self.partition(groups)
            return self.heal_partition
        if kind in ("kill", "kill-leader"):
            nm, was_leader = self.pick_node(kind == "kill-leader", rnd)
            p = self.procs[nm]
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
            self.killed.add(nm)
            self.paused.discard(nm)
            self.nemesis_event("kill", node=nm, leader=was_leader,
                               pid=p.pid)

            def restart():
                if nm in self.killed:
                    self.start_node(nm)
                    self.nemesis_event("restart", node=nm,
                                       pid=self.procs[nm].pid)
            return restart
        if kind == "loss":
            pct = rnd.choice((10, 30, 50))
            for nm in self.names:
                others = [self.ip(o) for o in self.names if o != nm]
                script = ("table inet %s-nem {\n chain input {\n"
                          "  type filter hook input priority 0; "
                          "policy accept;\n"
                          "  ip saddr { %s } numgen random mod 100 < %d "
                          "drop\n }\n}\n"
                          % (self.prefix, ", ".join(others), pct))
                r = self.nft(nm, script)
                if r.returncode != 0:
                    raise HarnessError("nft in %s: %s" % (nm,
                                                          r.stderr.strip()))
            self.partitioned = True
            self.nemesis_event("start-loss", percent=pct)
            return self.heal_partition
        if kind in ("kill-majority", "kill-all"):
            k = len(self.names) if kind == "kill-all" else \
                len(self.names) // 2 + 1
            victims = sorted(rnd.sample(self.names, k))
            for nm in victims:
                p = self.procs[nm]
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
                self.killed.add(nm)
                self.paused.discard(nm)
            self.nemesis_event("kill", nodes=victims)

            def restart_all():
                for nm in victims:
                    if nm in self.killed:
                        self.start_node(nm)
                        self.nemesis_event("restart", node=nm,
                                           pid=self.procs[nm].pid)
            return restart_all
        if kind in ("pause", "pause-leader"):
            nm, was_leader = self.pick_node(kind == "pause-leader", rnd)
            p = self.procs[nm]
            if nm in self.killed or p.poll() is not None:
                return lambda: None
            os.kill(p.pid, signal.SIGSTOP)
            self.paused.add(nm)
            self.nemesis_event("pause", node=nm, leader=was_leader,
                               pid=p.pid)

            def resume():
                if nm in self.paused:
                    if self.procs[nm].poll() is None:
                        os.kill(self.procs[nm].pid, signal.SIGCONT)
                    self.paused.discard(nm)
                    self.nemesis_event("resume", node=nm)
            return resume
        if kind == "none":
            return lambda: None
        raise HarnessError("unknown nemesis %r" % kind)

    def heal_all(self):
        self.heal_partition()
        for nm in list(self.paused):
            p = self.procs.get(nm)
            if p and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
            self.paused.discard(nm)
            self.nemesis_event("resume", node=nm)
        self.check_crashes()
        for nm in list(self.killed):
            if self.tearing_down:
                break
            self.start_node(nm)
            self.nemesis_event("restart", node=nm, pid=self.procs[nm].pid)

    def nemesis_loop(self, t_end):
        rnd = random.Random(self.a.seed)
        kinds = self.a.nemesis.split(",")
        rounds = 0
        while not self.stop_nemesis.is_set() and rounds < 1000:
            gap = rnd.uniform(self.a.interval_min, self.a.interval_max)
            if time.monotonic() + gap + 1.0 >= t_end:
                break
            if self.stop_nemesis.wait(gap):
                break
            kind = rnd.choice(kinds)
            with self.state_lock:
                self.check_crashes()
                heal = self.fault(kind, rnd)
            hold = rnd.uniform(self.a.hold_min, self.a.hold_max)
            hold = max(0.2, min(hold, t_end - time.monotonic()))
            self.stop_nemesis.wait(hold)
            with self.state_lock:
                heal()
            rounds += 1
        with self.state_lock:
            self.heal_all()
            self.nemesis_event("final-heal")
        if not self.stop_nemesis.wait(min(5.0, self.a.recovery / 2)):
            self.save_status("status-after-heal.json")

    def monitor_loop(self):
        """Detects nodes that exited on their own (recorded as crashes)
        and, like a supervisor, restarts them after 1 s
        (--no-restart-crashed disables)."""
        pending = {}
        while not self.tearing_down and not self.monitor_stop.wait(0.5):
            with self.state_lock:
                if self.tearing_down:
                    break
                before = len(self.crashes)
                self.check_crashes()
                for c in self.crashes[before:]:
                    pending[c["node"]] = time.monotonic() + 1.0
                if not self.a.restart_crashed:
                    continue
                for nm, at in list(pending.items()):
                    if time.monotonic() >= at:
                        del pending[nm]
                        if nm in self.killed:
                            self.start_node(nm)
                            self.nemesis_event("restart-crashed", node=nm,
                                               pid=self.procs[nm].pid)

    # ---- run -------------------------------------------------------------------

    def run(self):
        a = self.a
        self.log("run dir %s prefix %s nemesis %s nodes %d time %ss"
                 % (self.dir, self.prefix, a.nemesis, self.n, a.time))
        with open(os.path.join(self.dir, "args.json"), "w") as fh:
            json.dump(vars(a), fh, indent=1)
        self.build_network()
        for nm in self.names:
            self.write_config(nm)
        for nm in self.names:
            self.start_node(nm)
        self.monitor_thread = threading.Thread(target=self.monitor_loop,
                                               daemon=True)
        self.monitor_thread.start()
        ld = self.wait_leader(30)
        if not ld:
            raise HarnessError("no leader within 30 s")
        self.log("leader %s" % ld)
        nodes_arg = ",".join("%s=%s" % (nm, self.caddr(nm))
                             for nm in self.names)
        drv_time = a.time + a.recovery
        hist = os.path.join(self.dir, "history.driver.jsonl")
        drv_log = open(os.path.join(self.dir, "driver.log"), "w")
        cmd = ["ip", "netns", "exec", self.cns, self.drv, "--nodes",
               nodes_arg, "--history", hist, "--time", str(drv_time),
               "--queues", str(a.queues), "--producers", str(a.producers),
               "--consumers", str(a.consumers), "--rate", str(a.rate),
               "--request-timeout-ms", str(a.request_timeout_ms),
               "--drain-timeout", str(a.drain_timeout),
               "--final-timeout", str(a.final_timeout),
               "--async-window", str(a.async_window)]
        self.log("driver: %s" % " ".join(cmd))
        self.driver = subprocess.Popen(cmd, stdout=drv_log,
                                       stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        drv_log.close()
        self.save_state()
        # Wait until the driver starts the workload (queues created).
        t0 = time.monotonic()
        while time.monotonic() - t0 < 40:
            if self.driver.poll() is not None:
                break
            with open(os.path.join(self.dir, "driver.log")) as fh:
                if "queues ready" in fh.read():
                    break
            time.sleep(0.1)
        t_end = time.monotonic() + a.time
        nem = threading.Thread(target=self.nemesis_loop, args=(t_end,),
                               daemon=True)
        self.nem_thread = nem
        nem.start()
        nem.join(a.time + 120)
        if nem.is_alive():
            raise HarnessError("nemesis thread did not finish")
        budget = (a.recovery + a.drain_timeout * a.queues +
                  a.final_timeout * a.queues * self.n + 60)
        try:
            drc = self.driver.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            self.log("driver over its time budget: killing pid %d"
                     % self.driver.pid)
            os.kill(self.driver.pid, signal.SIGKILL)
            drc = self.driver.wait(timeout=10)
        self.log("driver exited rc %s" % drc)
        self.save_status("status-end.json")
        self.monitor_stop.set()
        if self.monitor_thread is not None:
            self.monitor_thread.join(30)
        with self.state_lock:
            self.check_crashes()
        return self.judge(drc)

    def save_status(self, name):
        """Every live node's own `cluster status` (role, term, commit and
        applied index, writable) into the run dir, for diagnosis."""
        out = {}
        for nm in self.names:
            p = self.procs.get(nm)
            if p is None or p.poll() is not None or nm in self.paused:
                out[nm] = None
                continue
            out[nm] = self.status(nm)
        with open(os.path.join(self.dir, name), "w") as fh:
            json.dump(out, fh, indent=1)
        for nm, st in out.items():
            if st:
                self.log("status %s: role %s term %s commit %s applied %s "
                         "writable %s" % (nm, st.get("role"), st.get("term"),
                                          st.get("commit_index"),
                                          st.get("last_applied"),
                                          st.get("writable")))
            else:
                self.log("status %s: no answer" % nm)

    def judge(self, drc):
        evs = []
        for i, name in enumerate(("history.driver.jsonl", "nemesis.jsonl")):
            path = os.path.join(self.dir, name)
            if not os.path.exists(path):
                continue
            with open(path) as fh:
                for j, line in enumerate(fh):
                    line = line.strip()
                    if line:
                        ev = json.loads(line)
                        evs.append((ev.get("time", 0), i, j, line))
        evs.sort()
        with open(os.path.join(self.dir, "history.jsonl"), "w") as fh:
            for ev in evs:
                fh.write(ev[3] + "\n")
        r = subprocess.run(
            [sys.executable, os.path.join(HERE, "checker", "checker.py"),
             os.path.join(self.dir, "history.jsonl"), "--out",
             os.path.join(self.dir, "verdict.json")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=600)
        with open(os.path.join(self.dir, "checker.txt"), "w") as fh:
            fh.write(r.stdout)
        print(r.stdout, end="")
        verdict = "error"
        counts = {}
        rec = None
        try:
            with open(os.path.join(self.dir, "verdict.json")) as fh:
                v = json.load(fh)
            verdict = v["verdict"]
            counts = v["counts"]
            rec = v["recovery_after_heal_s"]
        except (OSError, ValueError, KeyError):
            pass
        summary = {"dir": self.dir, "prefix": self.prefix,
                   "nemesis": self.a.nemesis, "nodes": self.n,
                   "time": self.a.time, "queues": self.a.queues,
                   "verdict": verdict, "counts": counts,
                   "recovery_after_heal_s": rec, "driver_rc": drc,
                   "crashes": self.crashes}
        with open(os.path.join(self.dir, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=1)
        if self.crashes:
            self.log("NODE CRASHES: %s" % self.crashes)
        self.log("verdict %s (run dir %s)" % (verdict, self.dir))
        if verdict == "valid":
            return 4 if self.crashes else 0
        return {"invalid": 1, "unknown": 2}.get(verdict, 3)

    # ---- teardown ----------------------------------------------------------------

    def teardown(self):
        self.tearing_down = True
        self.stop_nemesis.set()
        self.monitor_stop.set()
        if self.nem_thread is not None:
            self.nem_thread.join(30)
        if self.monitor_thread is not None:
            self.monitor_thread.join(30)
        if self.driver and self.driver.poll() is None:
            try:
                os.kill(self.driver.pid, signal.SIGKILL)
                self.driver.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for nm, p in self.procs.items():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        for nm, p in self.procs.items():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.log("%s did not stop on SIGTERM: SIGKILL" % nm)
                try:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        for ns in reversed(self.created_ns):
            self.sh(["ip", "netns", "del", ns], check=False)
        self.created_ns = []
        if self.route:
            self.sh(["ip", "route", "del", "blackhole", self.route],
                    check=False)
            self.route = None
        self.save_state()
        self.log("teardown done")


def parse_args(argv):
    ap = argparse.ArgumentParser(description="tern Jepsen-style run")
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--time", type=float, default=60,
                    help="seconds of faults (workload runs --recovery more)")
    ap.add_argument("--recovery", type=float, default=10,
                    help="seconds of workload after the final heal")
    ap.add_argument("--nemesis", default="partition")
    ap.add_argument("--queues", type=int, default=1)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rate", type=int, default=40,
                    help="max produce ops/s per producer")
    ap.add_argument("--request-timeout-ms", type=int, default=2000)
    ap.add_argument("--async-window", type=int, default=0,
                    help="producers use tern_produce_async with this "
                    "window (0: synchronous tern_produce)")
    ap.add_argument("--drain-timeout", type=float, default=60)
    ap.add_argument("--final-timeout", type=float, default=30)
    ap.add_argument("--interval-min", type=float, default=2)
    ap.add_argument("--interval-max", type=float, default=5)
    ap.add_argument("--hold-min", type=float, default=2)
    ap.add_argument("--hold-max", type=float, default=8)
    ap.add_argument("--election-ms", type=int, default=150)
    ap.add_argument("--heartbeat-ms", type=int, default=15)
    ap.add_argument("--snapshot-bytes", default="64M",
                    help="ternd snapshot_threshold_bytes (small values, "
                    "e.g. 64K, exercise snapshots and InstallSnapshot)")
    ap.add_argument("--snapshot-trailing", type=int, default=256)
    ap.add_argument("--no-restart-crashed", dest="restart_crashed",
                    action="store_false",
                    help="leave a node that exited on its own down (by "
                    "default it is restarted after 1 s, like a supervisor "
                    "would; the crash is recorded either way)")
    ap.add_argument("--libraft-trace", action="store_true",
                    help="run ternd with LIBRAFT_TRACE=1 (libraft's stderr "
                    "tracer, into nK/ternd.log; verbose)")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--run-dir", default=None)
    build = os.environ.get("TERN_BUILD", os.path.join(SRC_ROOT,
                                                      "build-jepsen"))
    ap.add_argument("--build", default=build,
                    help="tern build dir (default $TERN_BUILD or "
                    "build-jepsen)")
    ap.add_argument("--ternd", default=None)
    ap.add_argument("--tern", default=None)
    ap.add_argument("--driver", default=None)
    a = ap.parse_args(argv)
    a.ternd = a.ternd or os.path.join(a.build, "node", "ternd")
    a.tern = a.tern or os.path.join(a.build, "client", "tern")
    a.driver = a.driver or os.path.join(a.build, "jepsen",
                                        "tern-jepsen-driver")
    if a.seed is None:
        a.seed = random.getrandbits(32)
    return a


def main(argv=None):
    a = parse_args(argv if argv is not None else sys.argv[1:])
    if os.geteuid() != 0:
        print("harness: needs root (network namespaces)", file=sys.stderr)
        return 3
    for p in (a.ternd, a.tern, a.driver):
        if not os.access(p, os.X_OK):
            print("harness: missing %s (build it first, see "
                  "jepsen/README.md)" % p, file=sys.stderr)
            return 3
    if not shutil.which("nft"):
        print("harness: nft not found (apt-get install nftables)",
              file=sys.stderr)
        return 3

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    run = Run(a)
    rc = 3
    try:
        rc = run.run()
    except KeyboardInterrupt as e:
        run.log("interrupted: %s" % e)
        rc = 130
    except (HarnessError, subprocess.SubprocessError, OSError) as e:
        run.log("HARNESS ERROR: %s" % e)
        rc = 3
    finally:
        # Teardown must not be interrupted by a second Ctrl-C.
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        run.teardown()
    return rc


if __name__ == "__main__":
    sys.exit(main())
