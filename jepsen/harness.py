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

Nemeses (--nemesis, comma-separated mixes allowed; one kind per round):
  partition           each round one of isolate-one, isolate-leader, halves
                      (5 nodes: also ring and bridge)
  partition-one | partition-leader | partition-halves   one variant only
  partition-ring      5 nodes: each node sees only its two ring neighbours
  partition-bridge    two halves plus one node that sees both
  kill                kill -9 a random node or the leader, restart later
  kill-leader         kill -9 the leader
  kill-majority       kill -9 a random majority at once, restart later
  kill-all            kill -9 every node at once (process crash, page
                      cache survives: not a power-loss test)
  pause               SIGSTOP a random node or the leader (> election
                      timeout), then SIGCONT
  pause-leader        SIGSTOP the leader
  power-loss          kill -9 one node (the leader half the time), discard
                      its un-fsynced writes (jepsen/powerloss restore),
                      restart later
  power-loss-all      the same for every node at once
  disk-full           fill one node's data file system (--disk-mb, 64 MB
                      by default)
                      with a balloon file until ENOSPC; heal removes it
  disk-full-all       the same on every node
  bitflip | truncate  kill -9 one node, flip random bits in (truncate at a
                      random point) one of its commit-log segments or its
                      LMDB data file, restart it at heal
  clock               libfaketime on every node; per round random wall
                      clock skews (+-1 s .. +-1 h), a "strobe" or a x2 rate;
                      heal sets "+0" (CLOCK_MONOTONIC is not faked)
  delay               NFQUEUE + jepsen/delayer on every node: 50..500 ms
                      (+- jitter) on node-to-node traffic
  loss                drop 10/30/50 % of node-to-node packets (nft numgen)
                      on every node, both directions
  pause-kill          pause a minority, let writes pile up, then power-loss
                      (kill -9 when no shim) one node of the majority
  partition-kill      halves, then kill -9 a node on the majority side
  none                no faults
The power-loss shim is preloaded into every node of a run whose nemesis
list has power-loss, power-loss-all or pause-kill; libfaketime into every
node of a run with clock (both combine in LD_PRELOAD).
Partitions are nft rules in the node namespaces dropping traffic between
node addresses both ways (table inet P-nem, chain input); client traffic is
not cut. Heal = delete the table.

Run directory (kept): /tmp/jepsen-runs/<utc>-<prefix>-<nemesis>/ with
nK/ternd.log (every start of node K appended, with harness markers),
nK/ternd.ini, certs/ (the cluster's credentials: nodes authenticate each
other with mutual TLS), driver.log, history.driver.jsonl, nemesis.jsonl,
history.jsonl (merged, time order), checker.txt, verdict.json,
summary.json, harness.log, state.json.

Exit code: 0 valid, 1 invalid, 2 unknown, 3 harness error, 4 valid history
but a node exited on its own (crash), 130 interrupted.
"""

import argparse
import datetime
import errno
import select
import json
import os
import random
import secrets
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
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
POWERLOSS_KINDS = ("power-loss", "power-loss-all", "pause-kill")
ALL_KINDS = ("partition", "partition-one", "partition-leader",
             "partition-halves", "partition-ring", "partition-bridge",
             "kill", "kill-leader", "kill-majority", "kill-all", "pause",
             "pause-leader", "power-loss", "power-loss-all", "disk-full",
             "disk-full-all", "bitflip", "truncate", "clock", "delay",
             "loss", "pause-kill", "partition-kill", "member",
             "member-wipe", "wipe", "none")


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
        self.removed = set()    # removed from the cluster, to add back
        self.joining = set()    # started in join mode (member-wipe)
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
        self.nem_error = None
        self.ternd = args.ternd
        self.tern = args.tern
        self.drv = args.driver
        self.kinds = args.nemesis.split(",")
        self.use_shim = any(k in POWERLOSS_KINDS for k in self.kinds)
        self.use_clock = "clock" in self.kinds
        self.started = set()    # nodes started at least once
        self.mounts = []        # mount points of --disk-mb images
        self.loops = []         # loop devices of those images
        self.balloons = set()   # nodes whose fs is filled by a balloon
        self.delayers = {}      # name -> (Popen, iptables rule argv tail)
        self.clock_stop = None  # threading.Event of a running strobe
        self.clock_thread = None
        self.skewed = False

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
              "driver_pid": self.driver.pid if self.driver else None,
              "mounts": self.mounts, "loops": self.loops,
              "delayer_pids": [d[0].pid for d in self.delayers.values()]}
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

    # ---- disks -------------------------------------------------------------

    def mount_dir(self, nm):
        """Mount point of node nm's --disk-mb file system (its data dir
        is mount_dir/data, the disk-full balloon mount_dir/balloon)."""
        return os.path.join(self.dir, nm, "disk")

    def data_dir(self, nm):
        if self.a.disk_mb:
            return os.path.join(self.mount_dir(nm), "data")
        return os.path.join(self.dir, nm, "data")

    def setup_disks(self):
        """--disk-mb N: each node's data dir on its own loop-mounted ext4
        image nK/disk.img (kept after the run as the data artifact)."""
        if not self.a.disk_mb:
            return
        for nm in self.names:
            img = os.path.join(self.dir, nm, "disk.img")
            mnt = self.mount_dir(nm)
            os.makedirs(mnt, exist_ok=True)
            with open(img, "wb") as fh:
                fh.truncate(self.a.disk_mb << 20)
            self.sh(["mkfs.ext4", "-q", "-F", "-m", "0", img], timeout=60)
            dev = self.sh(["losetup", "-f", "--show", img]).stdout.strip()
            self.loops.append(dev)
            self.save_state()
            self.sh(["mount", dev, mnt])
            self.mounts.append(mnt)
            self.save_state()
            # Every `ip netns exec` (also other users' runs) copies the
            # mount table; shared propagation lets our umount reach those
            # copies (ip netns exec makes them slaves) so the loop device
            # is really released at teardown.
            self.sh(["mount", "--make-shared", mnt])
        self.log("disks: %d MB ext4 per node on %s" % (self.a.disk_mb,
                                                       " ".join(self.loops)))

    def teardown_disks(self):
        for mnt in reversed(self.mounts):
            r = self.sh(["umount", mnt], check=False)
            if r.returncode != 0:
                self.sh(["umount", "-l", mnt], check=False)
        self.mounts = []
        for dev in reversed(self.loops):
            self.sh(["losetup", "-d", dev], check=False)
            back = "/sys/block/%s/loop/backing_file" % os.path.basename(dev)
            if os.path.exists(back):
                self.log("%s is still held (a mount namespace made while "
                         "it was mounted); autoclear is set, the kernel "
                         "detaches it when that namespace goes" % dev)
        self.loops = []

    def fill_disk(self, nm):
        """Writes mount_dir/balloon until ENOSPC (bounded by the fs size);
        returns the bytes written."""
        path = os.path.join(self.mount_dir(nm), "balloon")
        total = 0
        limit = (self.a.disk_mb << 20) + (1 << 20)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.balloons.add(nm)
        try:
            for chunk in (1 << 20, 4096, 512):
                buf = b"\0" * chunk
                while total < limit:
                    try:
                        total += os.write(fd, buf)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
            try:
                os.fsync(fd)
            except OSError:
                pass
        finally:
            os.close(fd)
        return total

    def empty_disk(self, nm):
        if nm not in self.balloons:
            return
        try:
            os.unlink(os.path.join(self.mount_dir(nm), "balloon"))
        except FileNotFoundError:
            pass
        self.balloons.discard(nm)
        self.nemesis_event("heal-disk-full", node=nm)

    # ---- nodes ---------------------------------------------------------------

    def make_certs(self):
        """The cluster's credentials in <run>/certs, once per run, with
        scripts/tern-certs.sh (every node's IP as a subjectAltName): the
        nodes authenticate each other with mutual TLS (peer_auth tls)."""
        certs = os.path.join(self.dir, "certs")
        if all(os.path.exists(os.path.join(certs, "node%s.pem" % nm[1:]))
               for nm in self.names):
            return certs
        args = [os.path.join(SRC_ROOT, "scripts", "tern-certs.sh")]
        for nm in self.names:
            args += ["--san", self.ip(nm)]
        args += [certs] + [nm[1:] for nm in self.names]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL,
                       timeout=120)
        return certs

    def write_config(self, nm):
        d = os.path.join(self.dir, nm)
        # ternd refuses a data directory that others may enter.
        os.makedirs(self.data_dir(nm), mode=0o700, exist_ok=True)
        os.chmod(self.data_dir(nm), 0o700)
        certs = self.make_certs()
        security = ("[security]\npeer_auth = tls\ncluster_ca = %s\n"
                    "node_cert = %s\nnode_key = %s\n"
                    "cluster_secret_file = %s\nclient_tls = %s\n"
                    % (os.path.join(certs, "ca.pem"),
                       os.path.join(certs, "node%s.pem" % nm[1:]),
                       os.path.join(certs, "node%s.key" % nm[1:]),
                       os.path.join(certs, "cluster.secret"),
                       self.a.client_tls))
        if self.a.client_auth == "on":
            security += ("client_auth = on\nbootstrap_admin = admin\n"
                         "bootstrap_admin_cred = %s\n" % self.admin_cred())
        else:
            security += "client_auth = off\n"
        peers = "\n".join("%s = %s,%s" % (p[1:], self.raddr(p), self.caddr(p))
                          for p in self.names)
        if nm in self.joining:
            # A wiped node: joins the running cluster, never bootstraps,
            # never votes until it is added again (docs/MEMBERSHIP.md).
            security = "[node]\njoin = true\n" + security
        cfg = ("[node]\nid = %s\ndata_dir = %s\nclient_addr = %s\n"
               "raft_addr = %s\nlog_level = %s\nlog_segment_bytes = %s\n"
               "[raft]\n"
               "election_timeout_ms = %d\nheartbeat_ms = %d\n"
               "snapshot_threshold_bytes = %s\nsnapshot_trailing = %d\n"
               "durability = %s\nlog_store = %s\nsegment_bytes = %s\n"
               "[limits]\nmin_free_disk_bytes = 1M\nreserve_disk_bytes = 16M\n"
               "%s[peers]\n%s\n"
               % (nm[1:], self.data_dir(nm), self.caddr(nm),
                  self.raddr(nm), self.a.log_level,
                  self.a.log_segment_bytes, self.a.election_ms,
                  self.a.heartbeat_ms, self.a.snapshot_bytes,
                  self.a.snapshot_trailing, self.a.durability,
                  self.a.log_store, self.a.raft_segment_bytes, security,
                  peers))
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
        preload = []
        if self.use_shim:
            state = os.path.join(d, "powerloss")
            os.makedirs(state, exist_ok=True)
            if nm in self.started:
                # A process crash or plain kill -9 keeps the page cache:
                # the files stay as they are. After a power loss the
                # restore already ran and this is a no-op.
                self.powerloss_restore(nm, flushed=True)
            preload.append(self.a.powerloss_so)
            env["TERN_POWERLOSS_DIR"] = state
            env["TERN_POWERLOSS_ROOT"] = self.data_dir(nm)
        if self.use_clock:
            preload.append(FAKETIME_LIB)
            env["FAKETIME_TIMESTAMP_FILE"] = self.clock_file(nm)
            env["FAKETIME_NO_CACHE"] = "1"
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
            if not os.path.exists(self.clock_file(nm)):
                self.set_clock(nm, "+0")
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
        self.started.add(nm)
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
        if preload:
            self.check_preload(nm, p.pid, preload)

    def check_preload(self, nm, pid, libs):
        """Each preloaded library must be mapped into the running ternd,
        or the fault would silently not happen."""
        missing = libs
        for _ in range(100):    # the dynamic loader maps them after exec
            try:
                with open("/proc/%d/maps" % pid) as fh:
                    maps = fh.read()
            except OSError:
                return      # already gone: the crash monitor records it
            missing = [lib for lib in libs
                       if os.path.realpath(lib) not in maps]
            if not missing:
                return
            time.sleep(0.02)
        raise HarnessError("%s (pid %d) does not map %s"
                           % (nm, pid, ", ".join(missing)))

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

    def admin_cred(self):
        """The bootstrap admin's SCRAM credential (`tern user hash`), made
        once per run from a random password kept in <run>/certs/admin.pw;
        the harness's own CLI calls log in as the admin (TERN_USER and
        TERN_PASSWORD in its environment), the driver as user "jepsen"
        (grants: produce, consume, manage on every queue of default)."""
        if getattr(self, "_admin_cred", None):
            return self._admin_cred
        certs = self.make_certs()
        pw_file = os.path.join(certs, "admin.pw")
        pw = secrets.token_hex(16)
        with open(os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                          0o600), "w") as fh:
            fh.write(pw)
        r = self.sh([self.tern, "user", "hash", "--password-file", pw_file])
        self._admin_cred = r.stdout.strip()
        os.environ["TERN_USER"] = "admin"
        os.environ["TERN_PASSWORD"] = pw
        return self._admin_cred

    def make_driver_user(self, servers):
        """User "jepsen" for the driver: returns its environment."""
        if self.a.client_auth != "on":
            return dict(os.environ)
        pw = secrets.token_hex(16)
        pw_file = os.path.join(self.make_certs(), "jepsen.pw")
        with open(os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                          0o600), "w") as fh:
            fh.write(pw)
        deadline = time.monotonic() + 30
        while True:
            r = self.tern_cli(servers, "user", "set", "jepsen",
                              "--password-file", pw_file)
            if r.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise HarnessError("cannot create user jepsen: %s" %
                                   r.stderr.strip())
            time.sleep(0.2)
        r = self.tern_cli(servers, "acl", "set", "jepsen", "default", "*",
                          "produce,consume,manage")
        if r.returncode != 0:
            raise HarnessError("cannot grant user jepsen: %s" %
                               r.stderr.strip())
        env = dict(os.environ)
        env["TERN_USER"] = "jepsen"
        env["TERN_PASSWORD"] = pw
        return env

    def client_tls_args(self):
        """The CLI's and the driver's TLS flags (client_tls on: the
        cluster CA verifies every node's address)."""
        if self.a.client_tls != "on":
            return []
        return ["--ca", os.path.join(self.make_certs(), "ca.pem")]

    def tern_cli(self, servers, *args, timeout=10):
        return self.sh(["ip", "netns", "exec", self.cns, self.tern, "-s",
                        servers, "--timeout-ms", "1000"] +
                       self.client_tls_args() + list(args),
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
        sees = {nm: [o for o in self.names
                     if side.get(o, -1) == side.get(nm, -2)]
                for nm in self.names}
        self.cut(sees, "start-partition", groups=groups)

    def cut(self, sees, event, **kw):
        """sees: node -> the nodes it can still reach (symmetric); packets
        from every other node are dropped in its input chain."""
        for nm in self.names:
            others = [self.ip(o) for o in self.names
                      if o != nm and o not in sees[nm]]
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
        self.nemesis_event(event, **kw)

    def ring(self, rnd):
        """Majorities ring: nodes in a random cycle, each sees itself and
        its two neighbours (5 nodes: every node in a majority of 3, no
        two nodes agree on which)."""
        order = self.names[:]
        rnd.shuffle(order)
        n = len(order)
        sees = {order[i]: {order[(i - 1) % n], order[(i + 1) % n]}
                for i in range(n)}
        self.cut(sees, "start-partition", variant="ring", ring=order,
                 reach={k: sorted(v) for k, v in sees.items()})

    def bridge(self, rnd):
        """Two halves plus one bridge node that sees both halves."""
        order = self.names[:]
        rnd.shuffle(order)
        b = order[0]
        k = (len(order) - 1) // 2
        a_side, b_side = sorted(order[1:1 + k]), sorted(order[1 + k:])
        sees = {b: set(self.names)}
        for nm in a_side:
            sees[nm] = set(a_side) | {b}
        for nm in b_side:
            sees[nm] = set(b_side) | {b}
        self.cut(sees, "start-partition", variant="bridge", bridge=b,
                 groups=[a_side, b_side])

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

    # ---- membership (docs/MEMBERSHIP.md) -----------------------------------

    def member_cli(self, nm, *args, timeout=60):
        """`tern cluster ...` sent to every node but nm (the leader
        answers; its answer comes once the change is done)."""
        servers = ",".join(self.caddr(x) for x in self.names if x != nm)
        return self.sh(["ip", "netns", "exec", self.cns, self.tern, "-s",
                        servers, "--timeout-ms", "2000"] +
                       self.client_tls_args() + ["cluster"] + list(args),
                       check=False, quiet=True, timeout=timeout)

    def member_remove(self, rnd, wipe):
        """Shrink: remove a follower, or for "member" a third of the time
        the leader (it steps down once the change commits), with `tern
        cluster remove`; member-wipe also kills the removed node, wipes
        its data dir and restarts it empty in join mode (a replaced
        machine under the same id). Heal: grow it back (`tern cluster
        add`). Returns the heal function."""
        ld = self.find_leader()
        cands = [x for x in self.names if x != ld and x not in self.killed
                 and x not in self.paused and x not in self.removed]
        if not ld or not cands or self.removed:
            return lambda: None
        nm = rnd.choice(cands)
        if not wipe and rnd.random() < 1 / 3:
            nm = ld
        r = self.member_cli(nm, "remove", nm[1:])
        self.nemesis_event("member-remove", node=nm, ok=r.returncode == 0,
                           err=r.stderr.strip()[-200:])
        if r.returncode != 0:
            return lambda: None
        self.removed.add(nm)
        if wipe:
            self.wipe_disk(nm)
            self.start_node(nm)
            self.nemesis_event("wipe-restart", node=nm,
                               pid=self.procs[nm].pid)
        return lambda: self.member_add(nm)

    def member_add(self, nm, tries=4):
        """Add nm back (bounded retries: another change or an election
        may be under way). It stays removed when every try failed (the
        final heal tries again)."""
        if nm not in self.removed:
            return
        for k in range(tries):
            r = self.member_cli(nm, "add", nm[1:], self.raddr(nm),
                                self.caddr(nm), "--wait-ms", "20000",
                                timeout=60)
            self.nemesis_event("member-add", node=nm, attempt=k,
                               ok=r.returncode == 0,
                               err=r.stderr.strip()[-200:])
            if r.returncode == 0:
                self.removed.discard(nm)
                return
            time.sleep(1.0)

    def wipe(self, rnd):
        """A follower loses its disk and comes back empty under its id in
        join mode, still a voter: it must not vote until the leader
        (which saw its acknowledgements) removes and adds it back by
        itself. Heal: wait (bounded) for that, else `tern cluster
        rejoin` it."""
        ld = self.find_leader()
        cands = [x for x in self.names if x != ld and x not in self.killed
                 and x not in self.paused and x not in self.removed]
        if not ld or not cands or self.removed:
            return lambda: None
        nm = rnd.choice(cands)
        self.wipe_disk(nm)
        log = os.path.join(self.dir, nm, "ternd.log")
        start = os.path.getsize(log) if os.path.exists(log) else 0
        self.start_node(nm)
        self.nemesis_event("wipe", node=nm, pid=self.procs[nm].pid)

        def added_back():
            try:
                with open(log, errors="replace") as fh:
                    fh.seek(start)
                    text = fh.read()
            except OSError:
                return False
            return "msg=\"added to the cluster: may vote\"" in text

        def heal():
            for _ in range(30):
                if added_back():
                    self.nemesis_event("wipe-rejoined", node=nm, auto=True)
                    return
                time.sleep(0.5)
            r = self.member_cli(nm, "rejoin", nm[1:], self.raddr(nm),
                                self.caddr(nm), "--wait-ms", "20000",
                                timeout=90)
            self.nemesis_event("wipe-rejoined", node=nm, auto=False,
                               ok=r.returncode == 0,
                               err=r.stderr.strip()[-200:])
        return heal

    def fault(self, kind, rnd):
        """Applies one fault; returns a heal function."""
        if kind in ("member", "member-wipe"):
            return self.member_remove(rnd, kind == "member-wipe")
        if kind == "wipe":
            return self.wipe(rnd)
        if kind.startswith("partition") and kind != "partition-kill":
            variants = {"partition": ["one", "leader", "halves"] +
                        (["ring", "bridge"] if self.n >= 5 else []),
                        "partition-one": ["one"],
                        "partition-leader": ["leader"],
                        "partition-halves": ["halves"],
                        "partition-ring": ["ring"],
                        "partition-bridge": ["bridge"]}[kind]
            v = rnd.choice(variants)
            if v == "ring":
                self.ring(rnd)
                return self.heal_partition
            if v == "bridge":
                self.bridge(rnd)
                return self.heal_partition
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
        if kind in ("power-loss", "power-loss-all"):
            if kind == "power-loss":
                nm, was_leader = self.pick_node(False, rnd)
                victims = [nm]
            else:
                victims, was_leader = self.names[:], True
            self.power_loss(victims, was_leader)
            return lambda: self.restart_nodes(victims)
        if kind in ("disk-full", "disk-full-all"):
            if not self.a.disk_mb:
                raise HarnessError("%s needs --disk-mb" % kind)
            if kind == "disk-full":
                nm, was_leader = self.pick_node(False, rnd)
                victims = [nm]
            else:
                victims, was_leader = self.names[:], None
            filled = {nm: self.fill_disk(nm) for nm in victims}
            self.nemesis_event("disk-full", nodes=victims,
                               leader=was_leader, balloon_bytes=filled)

            def unfill():
                for nm in victims:
                    self.empty_disk(nm)
            return unfill
        if kind in ("bitflip", "truncate"):
            nm = rnd.choice(self.names)
            self.kill_nodes([nm])
            info = self.corrupt(nm, kind, rnd)
            self.nemesis_event(kind, node=nm, **info)
            return lambda: self.restart_nodes([nm])
        if kind == "clock":
            return self.clock_fault(rnd)
        if kind == "delay":
            return self.delay_fault(rnd)
        if kind == "pause-kill":
            k = (len(self.names) - 1) // 2
            paused = sorted(rnd.sample(self.names, k))
            for nm in paused:
                p = self.procs[nm]
                if nm not in self.killed and p.poll() is None:
                    os.kill(p.pid, signal.SIGSTOP)
                    self.paused.add(nm)
            self.nemesis_event("pause", nodes=paused, variant="pause-kill")
            self.stop_nemesis.wait(rnd.uniform(2, 4))
            majority = [x for x in self.names if x not in paused]
            victim = rnd.choice(majority)
            if self.use_shim:
                self.power_loss([victim], victim == self.find_leader(
                    majority))
            else:
                self.kill_nodes([victim])
                self.nemesis_event("kill", node=victim)
            return self.heal_all
        if kind == "partition-kill":
            shuffled = self.names[:]
            rnd.shuffle(shuffled)
            k = len(shuffled) // 2
            minority, majority = sorted(shuffled[:k]), sorted(shuffled[k:])
            self.partition([minority, majority])
            self.stop_nemesis.wait(rnd.uniform(1, 3))
            ld = self.find_leader(majority)
            victim = ld if ld and rnd.random() < 0.5 else \
                rnd.choice(majority)
            self.kill_nodes([victim])
            self.nemesis_event("kill", node=victim, leader=victim == ld,
                               variant="partition-kill")
            return self.heal_all
        if kind == "none":
            return lambda: None
        raise HarnessError("unknown nemesis %r" % kind)

    # ---- process, power-loss and corruption helpers ------------------------

    def wipe_disk(self, nm):
        """Kill nm (-9) if it runs and delete its data directory; its
        config then starts it empty, in join mode under its id (the
        caller starts it)."""
        p = self.procs[nm]
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        shutil.rmtree(self.data_dir(nm), ignore_errors=True)
        self.joining.add(nm)
        self.write_config(nm)
        self.killed.discard(nm)

    def kill_nodes(self, victims):
        for nm in victims:
            p = self.procs[nm]
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
            self.killed.add(nm)
            self.paused.discard(nm)

    def restart_nodes(self, victims):
        for nm in victims:
            if nm in self.killed and not self.tearing_down:
                self.start_node(nm)
                self.nemesis_event("restart", node=nm,
                                   pid=self.procs[nm].pid)

    def powerloss_restore(self, nm, flushed=False):
        """tern-powerloss-restore [--flushed] on node nm's state dir (the
        node must be dead). Non-zero exit: harness error."""
        cmd = [self.a.powerloss_restore] + (["--flushed"] if flushed else [])
        cmd.append(os.path.join(self.dir, nm, "powerloss"))
        r = self.sh(cmd, check=False, quiet=True, timeout=120)
        if r.returncode != 0:
            raise HarnessError("%s: rc %d: %s" % (" ".join(cmd),
                                                  r.returncode,
                                                  r.stderr.strip()))
        return (r.stdout.strip() or r.stderr.strip())

    def power_loss(self, victims, was_leader):
        """kill -9 every victim, and only once all are dead, put each
        one's files back to their last fsynced state."""
        self.kill_nodes(victims)
        restored = {nm: self.powerloss_restore(nm) for nm in victims}
        self.nemesis_event("power-loss", nodes=victims, leader=was_leader,
                           restore=restored)

    def corrupt(self, nm, kind, rnd):
        """Damages one commit-log segment or the LMDB data file of the
        stopped node nm: flips 1-8 random bits, or truncates at a random
        point. Returns what was done (file, offsets) for the event."""
        idx = os.path.join(self.data_dir(nm), "index")
        files = []
        logdir = os.path.join(idx, "log")
        if os.path.isdir(logdir):
            files += [os.path.join(logdir, f) for f in sorted(
                os.listdir(logdir)) if f.endswith(".seg")]
        mdb = os.path.join(idx, "lmdb", "data.mdb")
        if os.path.exists(mdb):
            files.append(mdb)
        files = [f for f in files if os.path.getsize(f) > 0]
        if not files:
            return {"file": None, "note": "no index file to damage"}
        # Segment or LMDB file with equal odds, then a random segment.
        segs = [f for f in files if f.endswith(".seg")]
        if mdb in files and (not segs or rnd.random() < 0.5):
            path = mdb
        else:
            path = rnd.choice(segs)
        size = os.path.getsize(path)
        rel = os.path.relpath(path, self.dir)
        if kind == "truncate":
            at = rnd.randrange(0, size)
            os.truncate(path, at)
            return {"file": rel, "size": size, "truncated_at": at}
        flips = []
        with open(path, "r+b") as fh:
            # Distinct bits, so two flips never cancel out.
            for pos in rnd.sample(range(size * 8), min(rnd.randint(1, 8),
                                                      size * 8)):
                off, bit = divmod(pos, 8)
                fh.seek(off)
                b = fh.read(1)[0]
                fh.seek(off)
                fh.write(bytes([b ^ (1 << bit)]))
                flips.append([off, bit])
            fh.flush()
            os.fsync(fh.fileno())
        return {"file": rel, "size": size, "flipped": flips}

    # ---- clock ---------------------------------------------------------------

    def clock_file(self, nm):
        return os.path.join(self.dir, nm, "faketime.rc")

    def set_clock(self, nm, spec):
        """libfaketime re-reads this file on each time call
        (FAKETIME_NO_CACHE=1): tmp + rename so it never reads half."""
        path = self.clock_file(nm)
        with open(path + ".tmp", "w") as fh:
            fh.write(spec + "\n")
        os.replace(path + ".tmp", path)

    def clock_fault(self, rnd):
        steps = (1, 5, 30, 60, 300, 900, 3600)
        variant = rnd.choice(("skew", "skew", "strobe", "rate"))
        if variant == "skew":
            specs = {nm: "%+d" % (rnd.choice(steps) * rnd.choice((-1, 1)))
                     for nm in self.names}
            for nm, sp in specs.items():
                self.set_clock(nm, sp)
            self.skewed = True
            self.nemesis_event("clock", variant="skew", skews=specs)
        elif variant == "rate":
            victims = sorted(rnd.sample(self.names, rnd.randint(1, 2)))
            for nm in victims:
                self.set_clock(nm, "+0 x2")
            self.skewed = True
            self.nemesis_event("clock", variant="x2", nodes=victims)
        else:
            victims = sorted(rnd.sample(self.names, rnd.randint(1, 2)))
            amp = rnd.choice(steps)
            period = rnd.uniform(0.05, 0.3)
            stop = threading.Event()

            def strobe():
                # Bounded: at most 2000 flips, ends at heal.
                for i in range(2000):
                    sign = 1 if i % 2 == 0 else -1
                    for nm in victims:
                        self.set_clock(nm, "%+d" % (sign * amp))
                    if stop.wait(period):
                        break
            self.clock_stop = stop
            self.clock_thread = threading.Thread(target=strobe, daemon=True)
            self.clock_thread.start()
            self.skewed = True
            self.nemesis_event("clock", variant="strobe", nodes=victims,
                               amplitude_s=amp, period_s=round(period, 3))
        return self.heal_clock

    def heal_clock(self):
        if self.clock_stop is not None:
            self.clock_stop.set()
            self.clock_thread.join(10)
            self.clock_stop = None
            self.clock_thread = None
        if not self.skewed:
            return
        for nm in self.names:
            self.set_clock(nm, "+0")
        self.skewed = False
        self.nemesis_event("heal-clock")

    # ---- delay ---------------------------------------------------------------

    def delay_fault(self, rnd):
        """Every node delays what it receives from the other nodes by
        D +- J ms (NFQUEUE --queue-bypass + tern-delayer in its netns)."""
        d = rnd.randint(50, 500)
        j = rnd.randint(0, d // 4)
        secs = int(self.a.hold_max + 30)
        for nm in self.names:
            qn = int(nm[1:])
            others = ",".join(self.ip(o) for o in self.names if o != nm)
            rule = ["INPUT", "-s", others, "-j", "NFQUEUE", "--queue-num",
                    str(qn), "--queue-bypass"]
            p = subprocess.Popen(
                ["ip", "netns", "exec", self.netns[nm], self.a.delayer,
                 "--queue", str(qn), "--delay-ms", str(d), "--jitter-ms",
                 str(j), "--seconds", str(secs), "--seed",
                 str(rnd.getrandbits(31))],
                stdout=subprocess.PIPE, stderr=open(
                    os.path.join(self.dir, nm, "delayer.log"), "a"),
                stdin=subprocess.DEVNULL, start_new_session=True, text=True)
            self.delayers[nm] = (p, None)
            self.save_state()
            ready, t_end = False, time.monotonic() + 5
            while time.monotonic() < t_end and p.poll() is None:
                rl, _, _ = select.select([p.stdout], [], [], 0.2)
                if rl and p.stdout.readline().startswith("ready"):
                    ready = True
                    break
            if not ready:
                raise HarnessError("tern-delayer in %s not ready (see "
                                   "%s/delayer.log)" % (nm, nm))
            self.sh(["ip", "netns", "exec", self.netns[nm], "iptables",
                     "-A"] + rule)
            self.delayers[nm] = (p, rule)
        self.nemesis_event("start-delay", delay_ms=d, jitter_ms=j)
        return self.heal_delay

    def heal_delay(self):
        if not self.delayers:
            return
        for nm, (p, rule) in list(self.delayers.items()):
            if rule is not None:
                self.sh(["ip", "netns", "exec", self.netns[nm], "iptables",
                         "-D"] + rule, check=False)
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
            p.stdout.close()
            del self.delayers[nm]
        self.save_state()
        self.nemesis_event("heal-delay")

    def heal_all(self):
        self.heal_partition()
        self.heal_delay()
        self.heal_clock()
        for nm in sorted(self.removed):
            self.member_add(nm)
        for nm in list(self.balloons):
            self.empty_disk(nm)
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

    def nemesis_main(self, t_end):
        """Thread body: any exception is kept for run() (a run whose
        nemesis broke proves nothing: harness error), after a best-effort
        heal so the workload can still finish."""
        try:
            self.nemesis_loop(t_end)
        except Exception as e:  # noqa: BLE001 (re-raised in run())
            self.nem_error = "%s: %s" % (type(e).__name__, e)
            self.log("NEMESIS ERROR: %s" % self.nem_error)
            try:
                with self.state_lock:
                    self.heal_all()
            except Exception as e2:  # noqa: BLE001
                self.log("heal after nemesis error failed: %s" % e2)

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

    def monitor_main(self):
        """Thread body: an exception (e.g. a restart that failed) is kept
        for run() as a harness error, like the nemesis thread's."""
        try:
            self.monitor_loop()
        except Exception as e:  # noqa: BLE001 (re-raised in run())
            self.nem_error = "monitor: %s: %s" % (type(e).__name__, e)
            self.log("MONITOR ERROR: %s" % self.nem_error)

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
        self.setup_disks()
        for nm in self.names:
            self.write_config(nm)
        for nm in self.names:
            self.start_node(nm)
        self.monitor_thread = threading.Thread(target=self.monitor_main,
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
        cmd += self.client_tls_args()
        if a.workload == "idempotent":
            # Producers keep one client (one producer id) across faults:
            # libtern retries each batch with the same producer id and
            # sequence for up to --produce-timeout-ms, so the server must
            # deduplicate; any duplicate in the log is then invalid.
            # After a timeout the batch is resent with
            # tern_produce_resend (same id + sequence), --resend times.
            cmd += ["--produce-timeout-ms", str(a.produce_timeout_ms),
                    "--resend", str(a.resend)]
        if a.workload == "group":
            cmd += ["--group", "1"]
        if a.workload == "retention":
            # Queues keep at most --max-messages (drop-oldest): the
            # checker judges what retention may and may not remove.
            cmd += ["--max-messages", str(a.max_messages)]
        if a.workload == "work-queue":
            # One shared group per queue, short leases: consumers receive
            # and ack; the checker judges loss, duplicates after an ack
            # answered ok, and receipts (docs/WORKQUEUES.md).
            cmd += ["--workload", "work-queue",
                    "--ack-timeout-ms", str(a.ack_timeout_ms)]
        if a.workload == "delayed":
            # tern_produce_delayed with 0.5-5 s delays: nothing is read
            # before its due time, nothing due is missing, fired once.
            cmd += ["--workload", "delayed"]
        drv_env = self.make_driver_user(
            ",".join(self.caddr(nm) for nm in self.names))
        self.log("driver: %s (user %s)" % (" ".join(cmd),
                                           drv_env.get("TERN_USER", "-")))
        self.driver = subprocess.Popen(cmd, stdout=drv_log,
                                       stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL,
                                       start_new_session=True, env=drv_env)
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
        nem = threading.Thread(target=self.nemesis_main, args=(t_end,),
                               daemon=True)
        self.nem_thread = nem
        nem.start()
        nem.join(a.time + 120)
        if nem.is_alive():
            raise HarnessError("nemesis thread did not finish")
        # work-queue: a receive-and-ack drain and a DLQ read per queue;
        # delayed: a wait for the last due time before the drains.
        budget = (a.recovery + a.drain_timeout * a.queues * (
                      2 if a.workload == "work-queue" else 1) +
                  (a.drain_timeout if a.workload == "delayed" else 0) +
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
        rc = self.judge(drc)
        if self.nem_error:
            self.mark_harness_error("nemesis failed: %s" % self.nem_error)
            raise HarnessError("nemesis failed: %s" % self.nem_error)
        return rc

    def mark_harness_error(self, why):
        """The run proves nothing: summary.json says so (verdict
        "harness-error", the checker's verdict kept apart), so summary
        tables never count it as valid."""
        path = os.path.join(self.dir, "summary.json")
        with open(path) as fh:
            summary = json.load(fh)
        summary["checker_verdict"] = summary.get("verdict")
        summary["verdict"] = "harness-error"
        summary["harness_error"] = why
        with open(path, "w") as fh:
            json.dump(summary, fh, indent=1)

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

    def shim_fatal(self):
        """The first "tern-powerloss: FATAL" line of any node log (the
        shim could not keep its records: the run proves nothing)."""
        if not self.use_shim:
            return None
        for nm in self.names:
            try:
                with open(os.path.join(self.dir, nm, "ternd.log"),
                          errors="replace") as fh:
                    for line in fh:
                        if "tern-powerloss: FATAL" in line:
                            return "%s: %s" % (nm, line.strip())
            except OSError:
                pass
        return None

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
                   "workload": self.a.workload,
                   "crashes": self.crashes}
        with open(os.path.join(self.dir, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=1)
        if self.crashes:
            self.log("NODE CRASHES: %s" % self.crashes)
        self.log("verdict %s (run dir %s)" % (verdict, self.dir))
        fatal = self.shim_fatal()
        if fatal:
            self.log("HARNESS ERROR: power-loss shim failed: %s" % fatal)
            self.mark_harness_error("powerloss shim: %s" % fatal)
            return 3
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
        for nm, (p, _rule) in list(self.delayers.items()):
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        self.delayers = {}
        if self.clock_stop is not None:
            self.clock_stop.set()
        self.teardown_disks()
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
    ap.add_argument("--nemesis", default="partition",
                    help="comma-separated: " + ", ".join(ALL_KINDS))
    ap.add_argument("--workload", default="total-queue",
                    choices=("total-queue", "idempotent", "group",
                             "retention", "work-queue", "delayed"),
                    help="total-queue (default; FIFO, offsets and "
                    "lost-on-node are judged on every run), idempotent "
                    "(libtern retries batches with the same producer id + "
                    "seq for --produce-timeout-ms, then the driver resends "
                    "them with tern_produce_resend, --resend times) or "
                    "group (consumers use consumer groups: fetch from the "
                    "committed offset, commit) or retention (queues keep "
                    "at most --max-messages, drop-oldest: no message is "
                    "missing before the limit removes it, nothing trimmed "
                    "is served, every node agrees on the low watermark) "
                    "or work-queue (a shared group: receive, ack; no loss, "
                    "no delivery after an ack answered ok) or delayed "
                    "(tern_produce_delayed: never early, never lost, fired "
                    "once)")
    ap.add_argument("--ack-timeout-ms", type=int, default=2000,
                    help="work-queue workload: the shared group's lease")
    ap.add_argument("--max-messages", type=int, default=40,
                    help="retention workload: max_messages of each queue")
    ap.add_argument("--produce-timeout-ms", type=int, default=3000,
                    help="idempotent workload: producers' request timeout")
    ap.add_argument("--resend", type=int, default=8,
                    help="idempotent workload: tern_produce_resend "
                    "attempts after a produce timeout (same producer id + "
                    "seq; a later ESEQUENCE is a definite failure)")
    ap.add_argument("--disk-mb", type=int, default=0,
                    help="each node's data dir on its own loop-mounted "
                    "ext4 image of this size (disk-full: default 64)")
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
    ap.add_argument("--log-segment-bytes", default="64M",
                    help="ternd log_segment_bytes: commit-log segment size "
                    "and checkpoint interval (small values make retention "
                    "delete segments and far-behind nodes fetch "
                    "checkpoints)")
    ap.add_argument("--snapshot-bytes", default="64M",
                    help="ternd snapshot_threshold_bytes (small values, "
                    "e.g. 64K, exercise snapshots and InstallSnapshot)")
    ap.add_argument("--snapshot-trailing", type=int, default=256)
    ap.add_argument("--client-tls", default="on", choices=("on", "off"),
                    help="ternd [security] client_tls; on (default): the "
                    "driver and the CLI verify the nodes with the cluster "
                    "CA")
    ap.add_argument("--client-auth", default="on", choices=("on", "off"),
                    help="ternd [security] client_auth; on (default): a "
                    "bootstrap admin sets up user jepsen (SCRAM-SHA-256), "
                    "which the driver logs in as")
    ap.add_argument("--durability", default="disk",
                    choices=("disk", "memory"),
                    help="ternd [raft] durability; memory mode loses "
                    "acknowledged writes by design when a majority "
                    "crashes (raft/include/repl.h): use it with partitions, "
                    "pauses, delay, and single-node kills only")
    ap.add_argument("--log-store", default="auto",
                    choices=("auto", "uv", "tern"),
                    help="ternd [raft] log_store: auto (ternd's default: "
                    "tern's own raft log store for the new data dirs of a "
                    "run, docs/LOGSTORE.md), tern, or libraft's raft_uv")
    ap.add_argument("--raft-segment-bytes", default="8M",
                    help="ternd [raft] segment_bytes (log_store = tern): "
                    "small values, with small --snapshot-bytes, make the "
                    "store forget segments and recycle their files")
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
    ap.add_argument("--powerloss-so", default=None)
    ap.add_argument("--powerloss-restore", default=None)
    ap.add_argument("--delayer", default=None)
    a = ap.parse_args(argv)
    for k in a.nemesis.split(","):
        if k not in ALL_KINDS:
            ap.error("unknown nemesis %r" % k)
        if k == "partition-ring" and a.nodes < 5:
            ap.error("partition-ring needs --nodes 5")
        if k.startswith("disk-full") and not a.disk_mb:
            a.disk_mb = 64      # disk-full needs its own small fs
    jb = os.path.join(a.build, "jepsen")
    a.powerloss_so = a.powerloss_so or os.path.join(jb,
                                                    "libtern_powerloss.so")
    a.powerloss_restore = a.powerloss_restore or os.path.join(
        jb, "tern-powerloss-restore")
    a.delayer = a.delayer or os.path.join(jb, "tern-delayer")
    a.ternd = a.ternd or os.path.join(a.build, "node", "ternd")
    a.tern = a.tern or os.path.join(a.build, "cli", "tern")
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
    # Never judge with a stale driver: its Makefile rebuilds it when
    # driver.c, tern.h or libtern.so is newer (a no-op otherwise).
    default_driver = os.path.join(a.build, "jepsen", "tern-jepsen-driver")
    if a.driver == default_driver and os.path.exists(
            os.path.join(a.build, "client", "libtern.so")):
        mk = subprocess.run(["make", "-s", "-C",
                             os.path.join(HERE, "driver"),
                             "BUILD=" + a.build])
        if mk.returncode != 0:
            print("harness: building the driver failed", file=sys.stderr)
            return 3
    kinds = a.nemesis.split(",")
    need = [a.ternd, a.tern, a.driver]
    if any(k in POWERLOSS_KINDS for k in kinds):
        need += [a.powerloss_restore]
        if not os.access(a.powerloss_so, os.R_OK):
            print("harness: missing %s (make -C jepsen/powerloss OUT=%s)"
                  % (a.powerloss_so, os.path.dirname(a.powerloss_so)),
                  file=sys.stderr)
            return 3
    if "delay" in kinds:
        need.append(a.delayer)
        if not shutil.which("iptables"):
            print("harness: iptables not found (apt-get install iptables)",
                  file=sys.stderr)
            return 3
    if "clock" in kinds and not os.access(FAKETIME_LIB, os.R_OK):
        print("harness: %s missing (apt-get install faketime libfaketime)"
              % FAKETIME_LIB, file=sys.stderr)
        return 3
    if a.disk_mb and not shutil.which("mkfs.ext4"):
        print("harness: mkfs.ext4 not found (apt-get install e2fsprogs)",
              file=sys.stderr)
        return 3
    for p in need:
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
