#!/usr/bin/env python3
"""shm transport authentication: a 3-node cluster on transport shm with a
cluster secret replicates over authenticated rings; a stranger process on
the same host speaks the shm handshake (rdma/shm.c, version 2) to a
follower's unix socket: an old version 1 HELLO with fds, a HELLO with
fds, a forged AUTH, an AUTH recorded on an earlier connection, the
follower's own proof reflected back, and silence. It never receives an
fd, every node's term and commit index stay as they were, and produce and
consume work before, between and after. A process holding the secret is
welcomed (so the refusals are about the proofs, not the encoding). Then:
ternd on transport shm refuses to start (exit 2) with a secret file that
others may read, or without one."""
import fcntl
import hashlib
import hmac
import os
import secrets
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

MAGIC = 0x48534D54
HELLO, WELCOME, CHALLENGE, AUTH = 1, 2, 3, 4
MSG_SIZE = 104


def encode(version, mtype, sender, receiver, cap=0, nonce=b"", mac=b""):
    """A handshake message as at the top of rdma/shm.c (version 2)."""
    body = struct.pack("<IHHQQQ", MAGIC, version, mtype, sender, receiver,
                       cap)
    body += nonce.ljust(32, b"\0") + mac.ljust(32, b"\0")
    return body + struct.pack("<II", h.tern_checksum32(body), 0)


def decode(m):
    magic, version, mtype, sender, receiver, cap = struct.unpack_from(
        "<IHHQQQ", m, 0)
    return {"magic": magic, "version": version, "type": mtype,
            "sender": sender, "receiver": receiver, "cap": cap,
            "nonce": m[32:64], "mac": m[64:96],
            "checksum_ok": struct.unpack_from("<I", m, 96)[0] ==
            h.tern_checksum32(m[:96])}


def proof(key, label, sender, receiver, ns, nr):
    """auth_secret_mac: HMAC-SHA-256 of the label and each part, every item
    preceded by its u32 LE length."""
    items = [label.encode(), struct.pack("<Q", sender),
             struct.pack("<Q", receiver), ns, nr]
    data = b"".join(struct.pack("<I", len(i)) + i for i in items)
    return hmac.new(key, data, hashlib.sha256).digest()


class Stranger:
    """One SEQPACKET connection to a node's shm socket."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(10)
        self.s.connect(path)
        self.fds_received = 0

    def send(self, m, fds=()):
        if fds:
            socket.send_fds(self.s, [m], list(fds))
        else:
            self.s.send(m)

    def recv(self, timeout=10):
        """(message, number of fds) of the next message; b"" at EOF. Any
        fd received is counted and closed."""
        self.s.settimeout(timeout)
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.s, 512, 8)
        except ConnectionResetError:
            return b"", 0
        for fd in fds:
            os.close(fd)
        self.fds_received += len(fds)
        return data, len(fds)

    def close(self):
        self.s.close()


def shm_path(shm_dir, nd):
    return os.path.join(shm_dir, "tern-shm-127.0.0.1-%d.sock" % nd.raft_port)


def write_secret(path, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(path, mode)
    with open(path) as f:
        return bytes.fromhex(f.read().strip())


def add_security(cl, keys):
    """Append a [security] section to every node's config."""
    for nd in cl.nodes.values():
        with open(nd.config, "a") as f:
            f.write("\n[security]\n")
            for k, v in keys.items():
                f.write("%s = %s\n" % (k, v))


def snapshot(cl):
    """{node: (term, commit_index, leader_id)} of every node, or None."""
    out = {}
    for i in cl.nodes:
        st = cl.status(i, timeout=3.0)
        if st is None:
            return None
        out[i] = (st.get("term"), st.get("commit_index"), st.get("leader_id"))
    return out


def settled(cl):
    """A snapshot once every node reports the same commit index."""
    def ok():
        s = snapshot(cl)
        if s and len({v[1] for v in s.values()}) == 1:
            return s
        return None
    return h.poll(ok, 30, interval=0.3)


def maps_of(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            return f.read()
    except OSError:
        return ""


def produce(c, cl, prefix, n):
    r = cl.tern("produce", "q", "--count", n, "--size", 64, "--id-prefix",
                prefix, timeout=60)
    c.check(r.returncode == 0, "produce %d (%s)" % (n, prefix),
            r.stderr.strip()[-300:])


def attacks(c, cl, path, key, fid, lid):
    """The stranger's attempts against follower fid (as leader lid)."""
    ns = secrets.token_bytes(32)
    memfd = os.memfd_create("stranger")
    os.ftruncate(memfd, 4096)
    rfd, wfd = os.pipe()
    try:
        c.step("old version 1 HELLO (40 bytes) with two fds")
        st = Stranger(path)
        v1 = struct.pack("<IHHQQQ", MAGIC, 1, HELLO, lid, fid, 0)
        v1 += struct.pack("<II", h.tern_checksum32(v1), 0)
        st.send(v1, [memfd, wfd])
        m, n = st.recv()
        c.check(m == b"" and n == 0, "v1 HELLO: closed, no fd", (m, n))
        st.close()

        c.step("version 2 HELLO carrying fds")
        st = Stranger(path)
        st.send(encode(2, HELLO, lid, fid, nonce=ns), [memfd, wfd])
        m, n = st.recv()
        c.check(m == b"" and n == 0, "HELLO with fds: closed, no fd", (m, n))
        st.close()

        c.step("HELLO, then a forged AUTH (random MAC) with fds")
        st = Stranger(path)
        st.send(encode(2, HELLO, lid, fid, nonce=ns))
        m, n = st.recv()
        ch = decode(m) if len(m) == MSG_SIZE else {}
        c.check(ch.get("type") == CHALLENGE and ch.get("checksum_ok") and
                n == 0, "a CHALLENGE without fds answers the HELLO", ch)
        c.check(ch.get("mac") == proof(key, "tern shm receiver", lid, fid, ns,
                                       ch.get("nonce", b"")),
                "the follower's proof verifies with the cluster secret")
        st.send(encode(2, AUTH, lid, fid, mac=secrets.token_bytes(32)),
                [memfd, wfd])
        m, n = st.recv()
        c.check(m == b"" and n == 0, "forged AUTH: closed, no fd", (m, n))
        st.close()

        c.step("an AUTH recorded on an earlier connection")
        st = Stranger(path)
        st.send(encode(2, HELLO, lid, fid, nonce=ns))
        m, _ = st.recv()
        nr1 = decode(m)["nonce"]
        # What a genuine sender would have answered on connection 1.
        recorded = encode(2, AUTH, lid, fid,
                          mac=proof(key, "tern shm sender", lid, fid, ns,
                                    nr1))
        st.close()
        st = Stranger(path)
        st.send(encode(2, HELLO, lid, fid, nonce=ns))
        m, _ = st.recv()
        c.check(decode(m)["nonce"] != nr1, "a fresh nonce per connection")
        st.send(recorded, [memfd, wfd])
        m, n = st.recv()
        c.check(m == b"" and n == 0, "replayed AUTH: closed, no fd", (m, n))
        st.close()

        c.step("the follower's own proof reflected back as the AUTH")
        st = Stranger(path)
        st.send(encode(2, HELLO, lid, fid, nonce=ns))
        m, _ = st.recv()
        st.send(encode(2, AUTH, lid, fid, mac=decode(m)["mac"]),
                [memfd, wfd])
        m, n = st.recv()
        c.check(m == b"" and n == 0, "reflected proof: closed, no fd",
                (m, n))
        st.close()

        c.step("a stranger that connects and says nothing")
        st = Stranger(path)
        t0 = time.monotonic()
        m, n = st.recv(timeout=30)
        waited = time.monotonic() - t0
        c.check(m == b"" and n == 0 and waited < 29,
                "closed after the handshake timeout (%.1f s)" % waited)
        st.close()
    finally:
        os.close(memfd)
        os.close(rfd)
        os.close(wfd)


def main(c):
    with h.Cluster(3) as cl:
        shm_dir = os.path.join(cl.dir, "shm")
        os.mkdir(shm_dir, 0o700)
        secret_path = os.path.join(cl.dir, "cluster.secret")
        key = write_secret(secret_path, 0o600)
        cl.node_extra.update({"transport": "shm", "shm_dir": shm_dir})
        for nd in cl.nodes.values():
            cl.write_config(nd)
        add_security(cl, {"peer_auth": "tls",
                          "cluster_secret_file": secret_path})

        c.step("3 nodes on transport shm with the cluster secret")
        lid = cl.start(timeout=30)
        c.check(lid in cl.nodes, "writable leader elected (node %s)" % lid)
        for nd in cl.nodes.values():
            c.check("auth=cluster-secret" in nd.log_text(),
                    "node %d: shm listens with the cluster secret" % nd.id)
        r = cl.tern("queue", "create", "q")
        c.check(r.returncode == 0, "queue create q", r.stderr.strip())
        produce(c, cl, "before", 200)
        fid = [i for i in cl.nodes if i != lid][0]
        fnd = cl.nodes[fid]
        ring = "tern-ring-%d-from-%d" % (fid, lid)
        c.check(h.poll(lambda: ring in maps_of(fnd.pid), 20) is not None,
                "follower %d maps the leader's ring (%s): the authenticated "
                "shm path carries raft" % (fid, ring))
        before = settled(cl)
        c.check(before is not None, "every node at the same commit index",
                before)

        attacks(c, cl, shm_path(shm_dir, fnd), key, fid, lid)

        c.step("nothing the stranger did reached raft")
        after = snapshot(cl)
        c.check(after == before, "term, commit index and leader of every "
                "node unchanged", "%s -> %s" % (before, after))
        c.check(fnd.alive(), "follower %d still running" % fid)
        c.check(ring in maps_of(fnd.pid),
                "the leader's ring on the follower is still in place")

        c.step("a process holding the secret is welcomed (control)")
        st = Stranger(shm_path(shm_dir, fnd))
        ns = secrets.token_bytes(32)
        st.send(encode(2, HELLO, 99, fid, nonce=ns))
        m, _ = st.recv()
        nr = decode(m)["nonce"]
        ctrl = os.memfd_create("control", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(ctrl, 4096)
        hdr = struct.pack("<IHHQQQ", 0x46534D54, 1, 2, 0, 99, fid)
        os.pwrite(ctrl, hdr + struct.pack("<I", h.tern_checksum32(hdr)), 0)
        fcntl.fcntl(ctrl, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK |
                    fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        rfd, wfd = os.pipe()
        st.send(encode(2, AUTH, 99, fid,
                       mac=proof(key, "tern shm sender", 99, fid, ns, nr)),
                [ctrl, wfd])
        m, n = st.recv()
        c.check(len(m) == MSG_SIZE and decode(m)["type"] == WELCOME and
                n == 2, "a genuine AUTH gets the WELCOME with two fds",
                (decode(m) if m else m, n))
        st.close()
        for fd in (ctrl, rfd, wfd):
            os.close(fd)

        c.step("produce and consume still work")
        produce(c, cl, "after", 200)
        want = ["before-%d" % i for i in range(200)] + \
            ["after-%d" % i for i in range(200)]
        for i, nd in cl.nodes.items():
            got = cl.consume_all("q", servers=nd.client_addr, expect=400)
            c.check([g[1] for g in got] == want,
                    "node %d returns all 400 messages in order" % i,
                    "%d messages" % len(got))

    c.step("ternd on transport shm with a secret file others may read")
    with h.Cluster(1) as cl:
        shm_dir = os.path.join(cl.dir, "shm")
        os.mkdir(shm_dir, 0o700)
        cl.node_extra.update({"transport": "shm", "shm_dir": shm_dir})
        nd = cl.nodes[1]
        cl.write_config(nd)
        secret_path = os.path.join(cl.dir, "open.secret")
        write_secret(secret_path, 0o644)
        add_security(cl, {"peer_auth": "tls",
                          "cluster_secret_file": secret_path})
        cl.start_node(1)
        try:
            rc = nd.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - reported below
            rc = None
        c.check(rc == 2, "ternd exits 2", rc)
        c.check("mode 644" in nd.log_text() and "chmod 600" in nd.log_text(),
                "the message names the mode and the fix",
                nd.log_text().strip()[-300:])

        c.step("ternd on transport shm without a secret file")
        cl.write_config(nd)
        with open(nd.config) as f:
            kept = [ln for ln in f if not ln.startswith("cluster_secret_file")]
        with open(nd.config, "w") as f:
            f.writelines(kept)
        add_security(cl, {"peer_auth": "tls"})
        cl.start_node(1)
        try:
            rc = nd.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001
            rc = None
        c.check(rc == 2, "ternd exits 2", rc)
        c.check("needs the cluster secret" in nd.log_text(),
                "the message says what is missing",
                nd.log_text().strip()[-300:])


if __name__ == "__main__":
    h.run_test(main)
