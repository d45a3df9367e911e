#!/usr/bin/env python3
"""Client TLS on ternd's client port ([security] client_tls, node/ctls.c).

A 3-node cluster with client_tls = on:
  - the CLI with the cluster CA creates a queue, produces and consumes,
    also when it is given a follower only (the leader hint redirects it,
    and the leader's certificate is checked against the leader's address);
  - the CLI with a foreign CA fails with TERN_EAUTH naming the certificate
    check, and nothing is produced;
  - the CLI without TLS gets no answer (plaintext on a TLS port);
  - a raw plaintext client sending a well-formed PRODUCE gets nothing back,
    is closed, nothing is appended, and the node logs it (counted);
  - a client that opens TLS and stalls mid-handshake (a bare ClientHello
    start) is closed after frame_timeout_ms.
A 1-node cluster with client_tls = on and client_ca set: a client
certificate from the CA is accepted (its CN logged at debug level); one
from a foreign CA is refused.
A 1-node cluster with the default (auto) on 127.0.0.1 stays plaintext.
"""
import os
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

FRAME_TIMEOUT_MS = 1500


def produce_frame(queue, payloads, request_id=1):
    body = (h.put_str(queue) + struct.pack("<QQI", 0, 0, len(payloads)) +
            b"".join(h.put_blob(p) for p in payloads))
    return h.encode_frame(h.OP["PRODUCE"], body, request_id=request_id)


def consumed(cl, queue, servers=None, tls=None):
    r = cl.tern("consume", queue, "--max", "1000", servers=servers,
                timeout_ms=3000, timeout=20, tls=tls)
    return r, h.parse_consume(r.stdout) if r.returncode == 0 else None


def raw_connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def three_nodes(c, foreign):
    with h.Cluster(n=3, client_tls="on",
                   limits={"frame_timeout_ms": FRAME_TIMEOUT_MS}) as cl:
        cl.start()
        lid = cl.wait_leader()
        fid = [i for i in cl.nodes if i != lid][0]
        c.step("CLI with the cluster CA: create, produce, consume")
        r = cl.tern("queue", "create", "tq", timeout_ms=3000)
        c.check(r.returncode == 0, "queue create over TLS", r.stderr)
        r = cl.tern("produce", "tq", "--count", "20", timeout_ms=3000)
        c.check(r.returncode == 0, "produce 20 over TLS", r.stderr)

        c.step("redirect: the CLI given a follower only")
        fol = cl.nodes[fid].client_addr
        r = cl.tern("produce", "tq", "--count", "5", "--id-prefix", "f",
                    servers=fol, timeout_ms=5000)
        c.check(r.returncode == 0,
                "produce via follower %d is redirected to leader %d" %
                (fid, lid), r.stderr)
        r, got = consumed(cl, "tq")
        c.check(got is not None and len(got) == 25,
                "consume over TLS reads the 25 messages",
                r.stderr if got is None else "%d" % len(got))

        c.step("CLI with a foreign CA")
        r = cl.tern("produce", "tq", "--count", "3", "--id-prefix", "x",
                    timeout_ms=3000, tls=["--ca", foreign])
        c.check(r.returncode != 0, "foreign CA: produce fails")
        c.check("authentication failed" in r.stderr and
                "certificate verify failed" in r.stderr,
                "foreign CA: message names the certificate check",
                r.stderr.strip())

        c.step("CLI without TLS on the TLS port")
        r = cl.tern("produce", "tq", "--count", "3", "--id-prefix", "p",
                    timeout_ms=1500, tls=["--no-tls"], timeout=30)
        c.check(r.returncode != 0, "plaintext CLI: produce fails",
                r.stderr.strip())

        c.step("raw plaintext client: a well-formed PRODUCE")
        port = cl.nodes[lid].client_port
        s = raw_connect(port)
        s.sendall(produce_frame("tq", [b"plain.1", b"plain.2"]))
        try:
            f = h.recv_frame(s, timeout=5)
        except socket.timeout:
            f = "timeout"
        s.close()
        c.check(f is None, "plaintext PRODUCE gets nothing back and is "
                "closed", repr(f))
        time.sleep(0.5)
        r, got = consumed(cl, "tq")
        c.check(got is not None and len(got) == 25,
                "nothing appended by the foreign-CA, plaintext CLI and "
                "raw plaintext clients",
                r.stderr if got is None else "%d" % len(got))
        log = cl.nodes[lid].log_text()
        c.check("plaintext client on the TLS client port" in log,
                "leader logs the plaintext client")
        c.check("client TLS handshake failed" in log or
                "alert unknown ca" in log or "plaintext=" in log,
                "leader logs the refused handshakes")

        c.step("a client that stalls mid-handshake")
        s = raw_connect(port)
        # A TLS handshake record header announcing 512 bytes, then 5 of
        # them: the session waits for the rest.
        s.sendall(b"\x16\x03\x01\x02\x00" + b"\x01\x00\x01\xfc\x03")
        t0 = time.monotonic()
        closed = h.wait_closed(s, timeout=FRAME_TIMEOUT_MS / 1000.0 + 10)
        took = time.monotonic() - t0
        s.close()
        c.check(closed, "stalled handshake closed (after %.1f s)" % took)
        c.check(took >= FRAME_TIMEOUT_MS / 1000.0 * 0.8,
                "not before frame_timeout_ms", "%.2f s" % took)
        c.check("TLS handshake" in cl.nodes[lid].log_text(),
                "node logs the handshake timeout")

        c.step("the cluster still serves TLS clients")
        r = cl.tern("produce", "tq", "--count", "1", "--id-prefix", "z",
                    timeout_ms=3000)
        c.check(r.returncode == 0, "produce after the hostile clients",
                r.stderr)


def client_certs(c, other_dir):
    with h.Cluster(n=1, client_tls="on", client_ca=True,
                   clients=("alice",), log_level="debug") as cl:
        cl.start()
        cl.wait_leader()
        certs = cl.certs
        ca = os.path.join(certs, "ca.pem")
        c.step("client_ca set: a client certificate from the CA")
        r = cl.tern("queue", "create", "cq", timeout_ms=3000,
                    tls=["--ca", ca, "--cert",
                         os.path.join(certs, "client-alice.pem"), "--key",
                         os.path.join(certs, "client-alice.key")])
        c.check(r.returncode == 0, "client certificate accepted", r.stderr)
        c.check("cn=alice" in cl.nodes[1].log_text(),
                "node records the client certificate's CN")
        r = cl.tern("produce", "cq", "--count", "2", timeout_ms=3000)
        c.check(r.returncode == 0, "a client without a certificate still "
                "gets through", r.stderr)
        c.step("client_ca set: a certificate from a foreign CA")
        r = cl.tern("produce", "cq", "--count", "2", timeout_ms=3000,
                    tls=["--ca", ca, "--cert",
                         os.path.join(other_dir, "client-mallory.pem"),
                         "--key",
                         os.path.join(other_dir, "client-mallory.key")])
        c.check(r.returncode != 0, "foreign client certificate refused",
                r.stderr.strip())
        r, got = consumed(cl, "cq")
        c.check(got is not None and len(got) == 2, "only the 2 accepted "
                "messages are in the queue",
                r.stderr if got is None else "%d" % len(got))


def auto_loopback(c):
    with h.Cluster(n=1) as cl:
        cl.start()
        cl.wait_leader()
        c.step("client_tls auto on 127.0.0.1: plaintext")
        r = cl.tern("queue", "create", "aq", timeout_ms=3000)
        c.check(r.returncode == 0, "plaintext CLI served", r.stderr)
        s = raw_connect(cl.nodes[1].client_port)
        s.sendall(h.encode_frame(h.OP["STATUS"], b"", request_id=9))
        f = h.recv_frame(s, timeout=5)
        s.close()
        c.check(isinstance(f, h.Frame) and f.status == 0 and
                f.request_id == 9, "raw plaintext STATUS answered", repr(f))
        c.check("tls=off" in cl.nodes[1].log_text(),
                "node logs the client port without TLS")


def main(c):
    other = h.scratch_dir("tern-it-foreign-")
    h.make_certs(other, [1], clients=("mallory",))
    three_nodes(c, os.path.join(other, "ca.pem"))
    client_certs(c, other)
    auto_loopback(c)


if __name__ == "__main__":
    h.run_test(main)
