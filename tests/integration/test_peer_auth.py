#!/usr/bin/env python3
"""Peer authentication on the raft port (mutual TLS, rdma/tcp.c): a 3-node
cluster with peer_auth = tls, and a stranger on loopback that tries to act
as a node against every node's raft port:
  (a) plaintext: a well-formed tcp-transport HELLO (claiming to be another
      member), then an AppendEntries and a RequestVote with term 2^64-1;
  (b) TLS with a certificate of a foreign CA (made with tern-certs.sh in
      another directory), then the same frames inside TLS;
  (c) TLS with node 3's valid certificate while its HELLO claims id 2.
Every attempt is closed by the node; nothing changes: every node keeps its
term and commit index over a few quiet seconds, produce and consume work
before and after, and each node logs the refusals (a "peer connections
refused" line, auth_refused in the shutdown line). Also: ternd with
peer_auth = tls and no node_cert exits 2 naming the key."""
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

# ---- raft frames as a real node would send them -----------------------------

HUGE_TERM = (1 << 64) - 1


def xport_frame(ftype, seq, payload):
    """rdma/tcp.c frame: magic "TX", version 1, type, length, seq, XXH32."""
    head = struct.pack("<HBBIQ", 0x5854, 1, ftype, len(payload), seq)
    return head + struct.pack("<I", h.tern_checksum32(head + payload)) + \
        payload


def hello(sender, receiver):
    return xport_frame(1, 0, struct.pack("<QQ", sender, receiver))


def raft_frame(rtype, sender, body):
    """raft/codec.c frame: "TRNR", version 1, type, flags, checksum over
    the frame with the checksum taken as zero, reserved, length, sender id
    and address, body."""
    addr = b"127.0.0.1:1"
    rest = struct.pack("<QH", sender, len(addr)) + addr + body
    frame = struct.pack("<IBBHIIQ", 0x524E5254, 1, rtype, 0, 0, 0,
                        24 + len(rest)) + rest
    return frame[:8] + struct.pack("<I", h.tern_checksum32(frame)) + \
        frame[12:]


def attack_payload(sender, receiver):
    """HELLO from sender, then a forged AppendEntries (leader_commit far
    ahead, no entries) and a RequestVote with term 2^64-1."""
    ae = struct.pack("<QQQQII", HUGE_TERM, 0, 0, 1 << 40, 0, 0)
    rv = struct.pack("<QQQQBB", HUGE_TERM, sender, 1 << 40, HUGE_TERM, 1, 0)
    return (hello(sender, receiver) +
            xport_frame(2, 1, raft_frame(1, sender, ae)) +
            xport_frame(2, 2, raft_frame(3, sender, rv)))


def closed_by_peer(read, timeout=10.0):
    """Wait until read() reports EOF or an error (True), bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = read()
        except socket.timeout:
            continue
        except (OSError, ssl.SSLError):
            return True
        if not data:
            return True
    return False


def plaintext_attack(nd, sender):
    with socket.create_connection(("127.0.0.1", nd.raft_port),
                                  timeout=1) as s:
        try:
            s.sendall(attack_payload(sender, nd.id))
        except OSError:
            return True
        return closed_by_peer(lambda: s.recv(4096))


def tls_attack(nd, certs_dir, cert_id, trust_dir, sender):
    """TLS 1.3 client presenting node<cert_id> of certs_dir, trusting
    trust_dir's CA, then the attack inside TLS. Returns True when the node
    closed the connection (during or after the handshake)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.load_verify_locations(os.path.join(trust_dir, "ca.pem"))
    ctx.load_cert_chain(os.path.join(certs_dir, "node%d.pem" % cert_id),
                        os.path.join(certs_dir, "node%d.key" % cert_id))
    raw = socket.create_connection(("127.0.0.1", nd.raft_port), timeout=1)
    try:
        try:
            s = ctx.wrap_socket(raw)
        except (OSError, ssl.SSLError):
            return True
        with s:
            try:
                s.sendall(attack_payload(sender, nd.id))
            except (OSError, ssl.SSLError):
                return True
            return closed_by_peer(lambda: s.recv(4096))
    finally:
        raw.close()


def snapshot(cl):
    """{node: (term, commit_index)} from every node."""
    out = {}
    for i in cl.nodes:
        st = h.poll(lambda i=i: cl.status(i), 10, interval=0.2)
        out[i] = (st["term"], st["commit_index"]) if st else None
    return out


def produce_consume(c, cl, queue, n, what):
    acks = os.path.join(cl.dir, "acks-%s.txt" % what)
    r = cl.tern("produce", queue, "--count", n, "--size", 64, "--ack-log",
                acks, "--id-prefix", what, timeout=60)
    c.check(r.returncode == 0, "%s: produce %d" % (what, n),
            r.stderr.strip()[-300:])
    got = cl.consume_all(queue, expect=None)
    ids = [g[1] for g in got if g[1].startswith(what + "-")]
    c.check(ids == ["%s-%d" % (what, i) for i in range(n)],
            "%s: consume reads them back in order" % what, ids[-3:])


def missing_cert_exits_2(c, ternd, certs):
    with tempfile.TemporaryDirectory(prefix="tern-pa-") as d:
        ports = h.free_ports(2)
        r = subprocess.run(
            [ternd, "--id", "1", "--data-dir", os.path.join(d, "data"),
             "--client-addr", "127.0.0.1:%d" % ports[0],
             "--raft-addr", "127.0.0.1:%d" % ports[1],
             "--cluster-ca", os.path.join(certs, "ca.pem"),
             "--node-key", os.path.join(certs, "node1.key")],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=30)
        c.check(r.returncode == 2, "ternd without node_cert exits 2",
                r.returncode)
        c.check("node_cert" in r.stderr, "and names node_cert",
                r.stderr.strip())


def main(c):
    with h.Cluster(3, election_timeout_ms=300, heartbeat_ms=30) as cl:
        c.step("ternd with peer_auth = tls and no node_cert")
        missing_cert_exits_2(c, cl.ternd, cl.certs)

        c.step("a 3-node cluster with mutual TLS")
        leader = cl.start()
        c.check(leader in cl.nodes, "writable leader (node %s)" % leader)
        r = cl.tern("queue", "create", "pa")
        c.check(r.returncode == 0, "queue create", r.stderr.strip())
        produce_consume(c, cl, "pa", 50, "before")

        foreign = os.path.join(cl.dir, "foreign-certs")
        h.make_certs(foreign, [1, 2, 3])
        base = h.poll(lambda: (lambda s: s if all(s.values()) else None)(
            snapshot(cl)), 15, interval=0.5)
        c.check(base is not None, "status of every node", base)

        c.step("strangers against every raft port")
        for i, nd in cl.nodes.items():
            other = 2 if i != 2 else 1
            c.check(plaintext_attack(nd, other),
                    "(a) node %d closes a plaintext HELLO from 'node %d'" %
                    (i, other))
            c.check(tls_attack(nd, foreign, other, cl.certs, other),
                    "(b) node %d closes TLS with a foreign CA's cert" % i)
            liar = 3 if i != 3 else 1
            c.check(tls_attack(nd, cl.certs, liar, cl.certs, 2),
                    "(c) node %d closes node-%d's cert claiming id 2" %
                    (i, liar))

        c.step("nothing changed")
        time.sleep(3)
        after = snapshot(cl)
        c.check(after == base, "term and commit index of every node "
                "unchanged over 3 s", "before %s after %s" % (base, after))
        c.check(cl.leader() == leader, "same leader", cl.leader())
        produce_consume(c, cl, "pa", 50, "after")

        c.step("the nodes logged the refusals")
        logged = h.poll(lambda: all("peer connections refused" in
                                    nd.log_text()
                                    for nd in cl.nodes.values()),
                        15, interval=0.5)
        c.check(logged, "every node logs 'peer connections refused'")
        reasons = [ln for nd in cl.nodes.values()
                   for ln in nd.log_text().splitlines()
                   if "peer connections refused" in ln]
        c.check(any('last="inbound' in ln or 'last="outbound' in ln
                    for ln in reasons),
                "the refusal line says why the last one was refused",
                reasons[-1:] if reasons else None)
        for i in cl.nodes:
            cl.stop(i)
        for i, nd in cl.nodes.items():
            m = re.findall(r'msg="replication stages".*auth_refused=(\d+)',
                           nd.log_text())
            n = int(m[-1]) if m else -1
            c.check(n >= 3, "node %d: auth_refused=%d at shutdown (>= 3)" %
                    (i, n))


if __name__ == "__main__":
    h.run_test(main)
