"""Process-level test harness for tern (Python 3 standard library only).

Starts real ternd processes on loopback with configs written to a private
temp dir, waits with bounded polling for a writable leader (through
`tern cluster status --json` against each node), kills/stops/restarts nodes
by PID, runs the `tern` CLI, and always reaps every child it started
(try/finally in run_test plus an atexit hook). Also carries a pure-Python
XXH32 (the checksum of every tern format), XXH3 through ctypes from the
system's libxxhash (the checksum of client frames of version 2) and
encoders/decoders for the 24-byte client frame header, for raw-socket
tests.

Every cluster authenticates its nodes to each other (peer_auth = tls):
Cluster makes the cluster's credentials once, with scripts/tern-certs.sh,
in <tmp>/certs, and writes their paths into each node's [security]
section; Cluster(peer_auth="none") runs without them.

Binaries: $TERND and $TERN_CLI (CMake passes $<TARGET_FILE:...>), otherwise
$TERN_BIN/node/ternd and $TERN_BIN/cli/tern, $TERN_BIN defaulting to
<repo>/build.

Each test is a function taking a Checks object; run_test(fn) runs it,
prints every check, exits 0 on success, 1 on any failed check or exception,
77 when the test raised Skip.
"""
import atexit
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

SKIP_RC = 77
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SANITIZER_PATTERNS = ("ERROR: AddressSanitizer", "runtime error:",
                      "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer")


# ---- XXH32 ------------------------------------------------------------------

_M32 = 0xFFFFFFFF
_P1, _P2, _P3, _P4, _P5 = (2654435761, 2246822519, 3266489917, 668265263,
                           374761393)
TERN_SEED = 0x7465726E


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data, seed=0):
    """XXH32 of bytes-like data (reference algorithm, little-endian)."""
    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        limit = n - 16
        while i <= limit:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) +
             _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = (h + k * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (h + data[i] * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def tern_checksum32(data):
    return xxh32(data, TERN_SEED)


_libxxhash = None


def xxh3_64(data, seed):
    """XXH3_64bits_withSeed from the system's libxxhash (ternd's own)."""
    global _libxxhash
    if _libxxhash is None:
        import ctypes
        lib = ctypes.CDLL("libxxhash.so.0")
        lib.XXH3_64bits_withSeed.restype = ctypes.c_uint64
        lib.XXH3_64bits_withSeed.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                            ctypes.c_uint64]
        _libxxhash = lib
    return _libxxhash.XXH3_64bits_withSeed(data, len(data), seed)


def frame_checksum(head20, body, version):
    """The checksum of a client frame (proto.h): version 1 XXH32 over the
    checked header and the body, version 2 XXH3 of the body seeded with
    XXH32 of the checked header."""
    if version == 2:
        return xxh3_64(body, tern_checksum32(head20)) & 0xFFFFFFFF
    return tern_checksum32(head20 + body)


# ---- client frames (layout: proto/include/proto.h) ---------------------------

PROTO_MAGIC = 0x6E74
PROTO_VERSION = 1
HEADER = struct.Struct("<HBBIQiI")  # magic ver op body_len req_id status csum
assert HEADER.size == 24
OP = {"QUEUE_CREATE": 1, "QUEUE_DELETE": 2, "QUEUE_LIST": 3, "PRODUCE": 4,
      "FETCH": 5, "GROUP_FETCH": 6, "GROUP_COMMIT": 7, "STATUS": 8,
      "STATS": 9, "PRODUCER_INIT": 19, "RECEIVE": 28, "SETTLE": 29,
      "HELLO": 37, "ERROR": 0x7F}
OP_RESPONSE = 0x80
ERR = {-31001: "TERN_ENOTLEADER", -31002: "TERN_ENOLEADER",
       -31003: "TERN_ECORRUPT", -31004: "TERN_EFULL", -31005: "TERN_ETOOBIG",
       -31006: "TERN_EMALFORMED", -31007: "TERN_ENOQUEUE",
       -31008: "TERN_EQUEUEEXISTS", -31009: "TERN_EVERSION",
       -31010: "TERN_ESHUTDOWN", -31014: "TERN_EBUSY",
       -31017: "TERN_EBADNAME", -31018: "TERN_EINVAL",
       -31019: "TERN_EINTERNAL"}
ERR[-31024] = "TERN_ELIMIT"
CODE = {v: k for k, v in ERR.items()}


def encode_frame(op, body=b"", request_id=1, status=0, magic=PROTO_MAGIC,
                 version=PROTO_VERSION, body_len=None, checksum=None):
    """One frame; body_len/checksum/magic/version may be forced wrong."""
    blen = len(body) if body_len is None else body_len
    head = HEADER.pack(magic, version, op, blen, request_id, status, 0)[:20]
    csum = (frame_checksum(head, body, version) if checksum is None
            else checksum)
    return head + struct.pack("<I", csum) + body


def put_str(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<H", len(s)) + s


def put_blob(b):
    return struct.pack("<I", len(b)) + b


class Frame:
    def __init__(self, raw_header, body):
        (self.magic, self.version, self.op, self.body_len, self.request_id,
         self.status, self.checksum) = HEADER.unpack(raw_header)
        self.body = body
        self.checksum_ok = (frame_checksum(raw_header[:20], body,
                                           self.version) == self.checksum)

    def error_message(self):
        """The str message of an error body ('' when it cannot be parsed)."""
        if self.status == 0 or len(self.body) < 2:
            return ""
        (n,) = struct.unpack_from("<H", self.body, 0)
        return self.body[2:2 + n].decode(errors="replace")

    def __repr__(self):
        return ("Frame(op=0x%02x status=%d(%s) req=%d len=%d csum_ok=%s "
                "msg=%r)" % (self.op, self.status,
                             ERR.get(self.status, "?"), self.request_id,
                             self.body_len, self.checksum_ok,
                             self.error_message()))


def recv_exact(sock, n):
    """Exactly n bytes from sock, or None at EOF."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(sock, timeout=5.0):
    """Next frame, or None when the peer closed (or reset) the connection.
    Raises socket.timeout when nothing arrives in time."""
    sock.settimeout(timeout)
    try:
        head = recv_exact(sock, HEADER.size)
        if head is None:
            return None
        (_, _, _, blen, _, _, _) = HEADER.unpack(head)
        if blen > 64 * 1024 * 1024:
            raise ValueError("response body_len %d is absurd" % blen)
        body = recv_exact(sock, blen) if blen else b""
        if body is None:
            return None
    except (ConnectionResetError, BrokenPipeError):
        return None
    return Frame(head, body)


def wait_closed(sock, timeout=5.0):
    """True if the peer closes the connection within timeout (discarding
    anything it still sends)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


# ---- checks ------------------------------------------------------------------

def proc_memory_kb(pid):
    """{"VmHWM": kB, "VmRSS": kB} of a live process (from /proc)."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            k, _, v = ln.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0])
    return out


def proc_nofile(pid):
    """(soft, hard) RLIMIT_NOFILE of a live process (from /proc)."""
    with open("/proc/%d/limits" % pid) as f:
        for ln in f:
            if ln.startswith("Max open files"):
                parts = ln.split()
                return (parts[3], parts[4])
    return None


class Skip(Exception):
    pass


class Checks:
    """Prints every check; remembers failures."""

    def __init__(self, name):
        self.name = name
        self.failed = 0
        self.passed = 0

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("  ok    %s" % what, flush=True)
        else:
            self.failed += 1
            print("  FAIL  %s%s" % (what, (": " + str(detail)) if detail
                                    else ""), flush=True)
        return bool(cond)

    def info(self, what):
        print("  info  %s" % what, flush=True)

    def step(self, what):
        print("[%s] %s" % (time.strftime("%H:%M:%S"), what), flush=True)


# ---- binaries, ports ---------------------------------------------------------

def binaries():
    bindir = os.environ.get("TERN_BIN", os.path.join(REPO, "build"))
    ternd = os.environ.get("TERND") or os.path.join(bindir, "node", "ternd")
    cli = os.environ.get("TERN_CLI") or os.path.join(bindir, "cli", "tern")
    for b in (ternd, cli):
        if not os.access(b, os.X_OK):
            raise RuntimeError("binary not found or not executable: %s "
                               "(set TERND/TERN_CLI or TERN_BIN)" % b)
    return ternd, cli


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1, chosen below the kernel's
    ephemeral range (32768+), so that the source port of some outgoing
    connection cannot take a node's port while the node is down. Each is
    checked by binding it (a tiny race with other processes remains)."""
    rnd = random.Random()
    ports = set()
    for _ in range(200 * n):
        if len(ports) == n:
            break
        port = rnd.randrange(20000, 32700)
        if port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.add(port)
    if len(ports) < n:
        raise RuntimeError("could not find %d free ports" % n)
    return sorted(ports)


def poll(fn, timeout, interval=0.05):
    """Call fn until it returns a truthy value (returned) or timeout
    seconds pass (returns None). Bounded in time and count."""
    deadline = time.monotonic() + timeout
    max_iter = int(timeout / interval) + 10
    for _ in range(max_iter):
        v = fn()
        if v:
            return v
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    return None


# ---- cluster credentials -------------------------------------------------------

CERTS_SCRIPT = os.path.join(REPO, "scripts", "tern-certs.sh")


def make_certs(certs_dir, ids, clients=()):
    """Credentials of a cluster in certs_dir (CA, node<ID>.pem/.key,
    client-<NAME>.pem/.key, cluster.secret) with scripts/tern-certs.sh;
    files already there are kept, so calling it again adds nodes."""
    args = [CERTS_SCRIPT]
    for c in clients:
        args += ["--client", c]
    args += [certs_dir] + [str(i) for i in ids]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL,
                   timeout=120)


def security_lines(certs_dir, nid):
    """The [security] keys (after peer_auth) of node nid."""
    return ["cluster_ca = %s" % os.path.join(certs_dir, "ca.pem"),
            "node_cert = %s" % os.path.join(certs_dir, "node%d.pem" % nid),
            "node_key = %s" % os.path.join(certs_dir, "node%d.key" % nid),
            "cluster_secret_file = %s" %
            os.path.join(certs_dir, "cluster.secret")]


# ---- the cluster -------------------------------------------------------------

_live_clusters = []
_close_failures = [0]  # sanitizer reports, bad exits at shutdown


def _reap_all():
    for c in list(_live_clusters):
        try:
            c.close()
        except Exception:  # noqa: BLE001 - last-chance cleanup
            traceback.print_exc()


atexit.register(_reap_all)


class Node:
    def __init__(self, cluster, nid, client_port, raft_port):
        self.cluster = cluster
        self.id = nid
        self.client_port = client_port
        self.raft_port = raft_port
        self.client_addr = "127.0.0.1:%d" % client_port
        self.raft_addr = "127.0.0.1:%d" % raft_port
        self.data_dir = os.path.join(cluster.data_root, "node%d" % nid)
        self.config = os.path.join(cluster.dir, "node%d.ini" % nid)
        self.log = os.path.join(cluster.dir, "node%d.log" % nid)
        self.pid_file = os.path.join(cluster.dir, "node%d.pid" % nid)
        self.env = {}  # extra environment for this node's ternd
        self.args = []  # extra ternd arguments (every start until reset)
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.log, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class Cluster:
    """N ternd processes on loopback. Use as a context manager."""

    def __init__(self, n=3, raft=None, node=None, limits=None,
                 data_dirs=None, election_timeout_ms=150, heartbeat_ms=15,
                 log_level="info", peer_auth="tls", client_tls=None,
                 client_ca=False, clients=(), security=None):
        """raft/node/limits: extra keys for those INI sections; data_dirs:
        {node id: data dir} overriding <tmp>/data/nodeN; peer_auth: "tls"
        (credentials from tern-certs.sh in <tmp>/certs) or "none";
        client_tls: None (ternd's default, auto: plaintext on loopback),
        "on", "off" or "auto"; with "on" every CLI run (tern, tern_popen)
        gets --ca <certs>/ca.pem unless given tls=[...]. client_ca: set
        [security] client_ca to the cluster CA; clients: names of client
        certificates to make (<certs>/client-NAME.pem/.key); security:
        extra [security] keys (client_auth, bootstrap_admin, ...).
        $TERN_IT_LOG_STORE ([raft] log_store: uv or tern) applies to
        every cluster whose raft keys do not name one. Without either,
        ternd's default (auto) gives new data dirs tern's store
        (log_store). On tern's store, raft segments of 64 KiB unless the
        raft keys say otherwise, so that a scenario's snapshots forget
        segments and later ones reuse their files."""
        self.ternd, self.cli = binaries()
        self.dir = tempfile.mkdtemp(prefix="tern-it-")
        self.data_root = os.path.join(self.dir, "data")
        self.raft_extra = dict(raft or {})
        if os.environ.get("TERN_IT_LOG_STORE"):
            self.raft_extra.setdefault("log_store",
                                       os.environ["TERN_IT_LOG_STORE"])
        if self.log_store == "tern":
            self.raft_extra.setdefault("segment_bytes", "64K")
        self.node_extra = dict(node or {})
        self.limits = dict(limits or {})
        self.election_timeout_ms = election_timeout_ms
        self.heartbeat_ms = heartbeat_ms
        self.log_level = log_level
        self.peer_auth = peer_auth
        self.certs = os.path.join(self.dir, "certs")
        self.client_tls = client_tls
        self.client_ca = client_ca
        self.security = dict(security or {})
        self.cli_tls = (["--ca", os.path.join(self.certs, "ca.pem")]
                        if client_tls == "on" else [])
        ports = free_ports(2 * n)
        self.nodes = {i + 1: Node(self, i + 1, ports[i], ports[n + i])
                      for i in range(n)}
        self.closed = False
        self.sanitizer_hits = 0
        _live_clusters.append(self)
        for i, d in (data_dirs or {}).items():
            self.nodes[i].data_dir = d
        make_certs(self.certs, sorted(self.nodes), clients)
        for nd in self.nodes.values():
            self.write_config(nd)

    @property
    def log_store(self):
        """The raft log store the nodes run: uv or tern (auto, the
        default, picks tern for the new data dirs a test makes)."""
        st = self.raft_extra.get("log_store", "auto")
        return "tern" if st == "auto" else st

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # config ----------------------------------------------------------------
    def write_config(self, nd):
        os.makedirs(nd.data_dir, mode=0o700, exist_ok=True)
        os.chmod(nd.data_dir, 0o700)  # ternd refuses an open data dir
        lines = ["[node]", "id = %d" % nd.id, "data_dir = %s" % nd.data_dir,
                 "client_addr = %s" % nd.client_addr,
                 "raft_addr = %s" % nd.raft_addr,
                 "log_level = %s" % self.log_level]
        lines += ["%s = %s" % kv for kv in self.node_extra.items()]
        lines += ["", "[raft]",
                  "election_timeout_ms = %d" % self.election_timeout_ms,
                  "heartbeat_ms = %d" % self.heartbeat_ms]
        lines += ["%s = %s" % kv for kv in self.raft_extra.items()]
        if self.limits:
            lines += ["", "[limits]"]
            lines += ["%s = %s" % kv for kv in self.limits.items()]
        lines += ["", "[security]", "peer_auth = %s" % self.peer_auth]
        lines += security_lines(self.certs, nd.id)
        if self.client_tls is not None:
            lines += ["client_tls = %s" % self.client_tls]
        if self.client_ca:
            lines += ["client_ca = %s" % os.path.join(self.certs, "ca.pem")]
        lines += ["%s = %s" % kv for kv in self.security.items()]
        lines += ["", "[peers]"]
        lines += ["%d = %s,%s" % (p.id, p.raft_addr, p.client_addr)
                  for p in self.nodes.values()]
        with open(nd.config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def servers(self, ids=None):
        ids = ids or sorted(self.nodes)
        return ",".join(self.nodes[i].client_addr for i in ids)

    # processes ---------------------------------------------------------------
    def start_node_load_failure(self, i):
        """Start node i whose raft log load is expected to fail. libraft
        0.15 leaks the entries of a closed segment whose load fails (a few
        kB; the process exits right after): under LeakSanitizer, leaks
        allocated in libraft only are suppressed for this start, whether
        libraft is a shared library or linked into ternd (its
        extendEntries then shows as a frame of ternd)."""
        supp = os.path.join(self.dir, "lsan-libraft.supp")
        with open(supp, "w") as f:
            f.write("leak:libraft.so\nleak:extendEntries\n")
        old = os.environ.get("LSAN_OPTIONS")
        os.environ["LSAN_OPTIONS"] = ("suppressions=%s:print_suppressions=0"
                                      % supp)
        try:
            self.start_node(i)
        finally:
            if old is None:
                del os.environ["LSAN_OPTIONS"]
            else:
                os.environ["LSAN_OPTIONS"] = old

    def start_node(self, i):
        nd = self.nodes[i]
        if nd.alive():
            return
        logf = open(nd.log, "ab")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        env.update(nd.env)
        nd.proc = subprocess.Popen(
            [self.ternd, "--config", nd.config, "--pid-file", nd.pid_file]
            + [str(a) for a in nd.args],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
            env=env, start_new_session=True)
        logf.close()

    def start(self, wait=True, timeout=20):
        for i in self.nodes:
            self.start_node(i)
        if wait:
            return self.wait_leader(timeout)
        return None

    def kill(self, i, sig=signal.SIGKILL):
        """Signal node i by PID and reap it (SIGKILL: immediate)."""
        nd = self.nodes[i]
        if not nd.alive():
            return None
        nd.proc.send_signal(sig)
        try:
            return nd.proc.wait(timeout=10 if sig == signal.SIGKILL else 15)
        except subprocess.TimeoutExpired:
            nd.proc.kill()
            return nd.proc.wait(timeout=10)

    def stop(self, i, timeout=10):
        """SIGTERM, then SIGKILL after timeout. Returns the exit code."""
        nd = self.nodes[i]
        if not nd.alive():
            return nd.proc.returncode if nd.proc else None
        nd.proc.send_signal(signal.SIGTERM)
        try:
            return nd.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            print("  warn  node %d ignored SIGTERM for %ds, SIGKILL" %
                  (i, timeout), flush=True)
            nd.proc.kill()
            return nd.proc.wait(timeout=10)

    def restart(self, i):
        self.stop(i)
        self.start_node(i)

    # wall clocks (tests/integration/clockshift) ------------------------------
    @staticmethod
    def clockshift_lib():
        """Path of libtern_clockshift.so: $TERN_CLOCKSHIFT_LIB (CMake
        passes $<TARGET_FILE:tern_clockshift>), else the one in
        $TERN_BIN; raises Skip when there is none."""
        lib = os.environ.get("TERN_CLOCKSHIFT_LIB") or os.path.join(
            os.environ.get("TERN_BIN", os.path.join(REPO, "build")), "tests",
            "integration", "clockshift", "libtern_clockshift.so")
        if not os.path.isfile(lib):
            raise Skip("clock shim not built: %s" % lib)
        return lib

    def clockshift(self, i, offset_ms=0):
        """Run node i (from its next start) under the clock shim with its
        own offset file <tmp>/nodeN.clock, holding offset_ms."""
        nd = self.nodes[i]
        nd.clock_file = os.path.join(self.dir, "node%d.clock" % i)
        self.set_clock(i, offset_ms)
        asan = nd.env.get("ASAN_OPTIONS", os.environ.get(
            "ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0"))
        nd.env.update({"LD_PRELOAD": self.clockshift_lib(),
                       "TERN_CLOCKSHIFT_FILE": nd.clock_file,
                       # the shim is preloaded ahead of an ASan runtime
                       "ASAN_OPTIONS": asan + ":verify_asan_link_order=0"})

    def set_clock(self, i, offset_ms):
        """Move node i's wall clock to real time + offset_ms (signed); a
        running node sees it within the shim's 50 ms re-read period. The
        file is replaced by rename, so no reader sees half a number."""
        path = self.nodes[i].clock_file
        with open(path + ".tmp", "w") as f:
            f.write("%d\n" % int(offset_ms))
        os.replace(path + ".tmp", path)

    def close(self):
        if self.closed:
            return
        self.closed = True
        for i, nd in self.nodes.items():
            try:
                if nd.alive():
                    rc = self.stop(i, timeout=10)
                    if rc != 0:
                        _close_failures[0] += 1
                        print("  FAIL  node %d exited %s on SIGTERM at "
                              "shutdown (expected 0)" % (i, rc), flush=True)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
        if self in _live_clusters:
            _live_clusters.remove(self)
        self.report_sanitizer()
        if os.environ.get("TERN_KEEP") or self.sanitizer_hits:
            print("  info  cluster files kept in %s" % self.dir, flush=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def report_sanitizer(self):
        """Print sanitizer reports found in node logs (counted as failure by
        run_test)."""
        for nd in self.nodes.values():
            text = nd.log_text()
            if any(p in text for p in SANITIZER_PATTERNS):
                self.sanitizer_hits += 1
                _close_failures[0] += 1
                print("  FAIL  sanitizer report in node %d log (%s):" %
                      (nd.id, nd.log), flush=True)
                lines = text.splitlines()
                for k, line in enumerate(lines):
                    if any(p in line for p in SANITIZER_PATTERNS):
                        print("\n".join("        " + ln for ln in
                                        lines[k:k + 25]), flush=True)
                        break

    def tail_logs(self, n=15):
        for nd in self.nodes.values():
            lines = nd.log_text().splitlines()[-n:]
            print("  --- node %d log tail (%s) ---" % (nd.id, nd.log))
            for ln in lines:
                print("      " + ln)
        sys.stdout.flush()

    # CLI -----------------------------------------------------------------------
    def tern(self, *args, servers=None, timeout=60, timeout_ms=None,
             check=False, tls=None):
        """Run the CLI; returns CompletedProcess (text). servers: list of
        node ids, an address string, or None for all nodes. tls: the CLI's
        TLS flags (None: the cluster's, see client_tls)."""
        if servers is None:
            srv = self.servers()
        elif isinstance(servers, str):
            srv = servers
        else:
            srv = self.servers(list(servers))
        cmd = [self.cli, "-s", srv] + (self.cli_tls if tls is None else tls)
        if timeout_ms is not None:
            cmd += ["--timeout-ms", str(timeout_ms)]
        cmd += [str(a) for a in args]
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True,
                               timeout=timeout, errors="replace")
        except subprocess.TimeoutExpired as e:
            r = subprocess.CompletedProcess(cmd, 124, e.stdout or "",
                                            (e.stderr or "") +
                                            "\n[harness: timed out]")
            if isinstance(r.stdout, bytes):
                r.stdout = r.stdout.decode(errors="replace")
            if isinstance(r.stderr, bytes):
                r.stderr = r.stderr.decode(errors="replace")
        if check and r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd),
                                                      r.returncode,
                                                      r.stderr.strip()))
        return r

    def tern_popen(self, *args, servers=None, stdout=None, tls=None):
        srv = self.servers() if servers is None else (
            servers if isinstance(servers, str) else self.servers(servers))
        cmd = ([self.cli, "-s", srv] + (self.cli_tls if tls is None else tls)
               + [str(a) for a in args])
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                             stdout=stdout or subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        _children.append(p)
        return p

    def status(self, i, timeout=2.0):
        """Parsed `tern cluster status --json` asked of node i alone, or
        None."""
        nd = self.nodes[i]
        if not nd.alive():
            return None
        r = self.tern("cluster", "status", "--json", servers=nd.client_addr,
                      timeout=timeout + 3, timeout_ms=int(timeout * 1000))
        if r.returncode != 0:
            return None
        try:
            return normalize_status(json.loads(r.stdout))
        except ValueError:
            return None

    def leader(self):
        """Id of a node that reports itself writable leader, or None."""
        for i in self.nodes:
            st = self.status(i, timeout=1.0)
            if st and st["is_leader"] and st["writable"]:
                return i
        return None

    def wait_leader(self, timeout=20, exclude=()):
        lid = poll(lambda: (lambda x: x if x and x not in exclude else None)(
            self.leader()), timeout, interval=0.1)
        if lid is None:
            self.tail_logs()
            raise RuntimeError("no writable leader within %ss" % timeout)
        return lid

    def queue_info(self, queue, node=None):
        """`queue info --json` of queue (from node alone when given) as a
        dict, or None when it fails."""
        servers = self.nodes[node].client_addr if node else None
        r = self.tern("queue", "info", queue, "--json", servers=servers,
                      timeout=15, timeout_ms=3000)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def wait_applied(self, i, index, timeout=60):
        """Wait until node i's last_applied >= index."""
        def ok():
            st = self.status(i)
            return st is not None and (st.get("last_applied") or 0) >= index
        return poll(ok, timeout, interval=0.2) is not None

    def consume_all(self, queue, servers=None, expect=None, timeout=30,
                    offset=0):
        """Read queue from offset to its end; returns list of
        (offset, payload_id). With expect, re-reads (bounded) until at
        least expect messages are seen (a follower may lag)."""
        deadline = time.monotonic() + timeout
        got = []
        while True:
            r = self.tern("consume", queue, "--offset", offset,
                          servers=servers, timeout=max(5, timeout))
            got = parse_consume(r.stdout)
            if r.returncode != 0:
                print("  info  consume rc=%d: %s" %
                      (r.returncode, r.stderr.strip()[-300:]), flush=True)
            if expect is None or len(got) >= expect:
                return got
            if time.monotonic() >= deadline:
                return got
            time.sleep(0.2)


def normalize_status(js):
    """`tern cluster status --json` object (keys node_id, role, leader_id,
    term, commit_index, last_applied, writable, members, ...) plus
    is_leader."""
    out = dict(js)
    out["role"] = str(js.get("role", "")).lower()
    out["is_leader"] = out["role"] == "leader"
    out["writable"] = bool(js.get("writable", False))
    return out


def payload_id(payload):
    """The id of a `tern produce --count` payload ("<id>" then '.'
    padding): its text up to the first '.', as the ack log names it."""
    return payload.split(".", 1)[0]


def parse_consume(text):
    """`tern consume` text lines, '<offset>\\t<payload>' -> [(offset,
    payload id)]."""
    out = []
    for line in text.splitlines():
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 2 and parts[0].isdigit():
            out.append((int(parts[0]), payload_id(parts[1])))
    return out


def read_ack_log(path):
    """'<payload-id>\\t<offset>' lines -> [(id, offset)]; offset is None
    for "-1" (the server acknowledged a retried batch as a duplicate whose
    offsets it no longer remembers). A torn last line is ignored."""
    out = []
    try:
        with open(path, "r", errors="replace") as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 2:
                    continue
                if parts[1].isdigit():
                    out.append((parts[0], int(parts[1])))
                elif parts[1] == "-1":
                    out.append((parts[0], None))
    except FileNotFoundError:
        pass
    return out


def duplicates(ids):
    seen, dups = set(), {}
    for x in ids:
        if x in seen:
            dups[x] = dups.get(x, 1) + 1
        seen.add(x)
    return dups


def check_acked_readable(c, where, got, acked):
    """got: consumed [(offset, id)]; acked: ack log [(id, offset)]. Checks
    that every acknowledged id is present at its acknowledged offset, that
    offsets increase and that no id repeats; reports unacknowledged
    extras. Returns the duplicates {id: count}."""
    by_offset = dict(got)
    ids = [g[1] for g in got]
    present = set(ids)
    missing = [a for a in acked if a[0] not in present]
    c.check(not missing, "%s: every acknowledged id readable (%d ids)" %
            (where, len(acked)), "%d missing, e.g. %s" %
            (len(missing), missing[:5]))
    known = [a for a in acked if a[1] is not None]
    wrong = [a for a in known if by_offset.get(a[1]) != a[0]]
    c.check(not wrong, "%s: each acknowledged id at its acknowledged "
            "offset (%d with an offset)" % (where, len(known)),
            "%d mismatches, e.g. %s" %
            (len(wrong), [(a, by_offset.get(a[1])) for a in wrong[:5]]))
    if len(known) < len(acked):
        c.info("%s: %d ids acknowledged without an offset (retried batch "
               "acknowledged as a duplicate, offset -1)" %
               (where, len(acked) - len(known)))
    dups = duplicates(ids)
    c.check(not dups, "%s: no duplicates" % where,
            "%d ids duplicated, e.g. %s" % (len(dups),
                                            list(dups.items())[:5]))
    offs = [g[0] for g in got]
    c.check(offs == sorted(offs) and len(set(offs)) == len(offs),
            "%s: offsets strictly increasing" % where)
    extra = len(present) - len({a[0] for a in acked})
    c.info("%s: %d messages read, %d unacknowledged extras (allowed)" %
           (where, len(got), max(0, extra)))
    return dups


def finish_producer(c, p, acks, n, timeout=150):
    """Wait for a background `tern produce --count n --ack-log acks`
    (tern_popen), check it exited 0 with all n ids in its ack log and no id
    acknowledged twice. Returns the ack log [(id, offset)]."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    c.check(p.returncode == 0, "producer exit 0 (all %d acknowledged)" % n,
            "rc=%s: %s" % (p.returncode, (err or "").strip()[-500:]))
    acked = read_ack_log(acks)
    ids = [a[0] for a in acked]
    c.info("%d acknowledged" % len(acked))
    if p.returncode == 0:
        c.check(len(acked) == n, "exit 0 means all %d ids are in the ack "
                "log" % n, len(acked))
    c.check(not duplicates(ids), "no id acknowledged twice",
            duplicates(ids))
    return acked


def check_same_sequence(c, cl, node, ref, got, what):
    """Node `node` applies up to what node `ref` applied, then returns the
    same consume sequence `got` (read before from elsewhere) alone."""
    target = (cl.status(ref) or {}).get("last_applied") or 0
    c.check(cl.wait_applied(node, target, 60),
            "node %d applied up to %d" % (node, target))
    again = cl.consume_all("q", servers=cl.nodes[node].client_addr,
                           expect=len(got))
    c.check(again == got, "%s node returns the same sequence" % what,
            "%d vs %d messages" % (len(again), len(got)))


_children = []
_scratch = []


def scratch_dir(prefix):
    """A temporary directory removed when the test ends (run_test; kept
    with TERN_KEEP), for files a test makes outside a Cluster."""
    d = tempfile.mkdtemp(prefix=prefix)
    _scratch.append(d)
    return d


def _remove_scratch():
    if os.environ.get("TERN_KEEP"):
        return
    for d in _scratch:
        shutil.rmtree(d, ignore_errors=True)
    del _scratch[:]


def _reap_children():
    for p in _children:
        if p.poll() is None:
            p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


atexit.register(_reap_children)


class Deadline(Exception):
    pass


def _on_signal(signum, frame):
    raise Deadline("signal %d (deadline or termination)" % signum)


def run_test(fn):
    """Run fn(checks); exit 0/1/77. Reaps clusters and children, also when
    the test overruns $TERN_IT_DEADLINE seconds (default 170, under ctest's
    180 s timeout) or receives SIGTERM/SIGINT/SIGHUP."""
    name = os.path.basename(sys.argv[0])
    checks = Checks(name)
    print("=== %s" % name, flush=True)
    for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT,
                signal.SIGHUP):
        signal.signal(sig, _on_signal)
    signal.alarm(int(os.environ.get("TERN_IT_DEADLINE", "170")))
    rc = 0
    try:
        fn(checks)
    except Skip as e:
        print("SKIP: %s" % e, flush=True)
        rc = SKIP_RC
    except Exception:  # noqa: BLE001 - reported as a failure
        traceback.print_exc()
        checks.failed += 1
        for c in list(_live_clusters):
            c.tail_logs()
    finally:
        signal.alarm(0)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # finish the cleanup
        _reap_children()
        for c in list(_live_clusters):
            c.close()
        _remove_scratch()
        checks.failed += _close_failures[0]
    if rc != SKIP_RC:
        rc = 1 if checks.failed else 0
        print("=== %s: %d checks passed, %d failed" %
              (name, checks.passed, checks.failed), flush=True)
    sys.stdout.flush()
    os._exit(rc)
