#!/usr/bin/env python3
"""FETCHes read on the thread pool and read ahead (node/server.c,
fetch_job): a consumer streaming a queue in answers of 100 messages gets
every message once, in order, with its own request ids and valid
checksums (frame versions 1 and 2; every other FETCH skips a request id,
so answers read ahead for the next id are resealed, in both versions);
a FETCH pipelined before a bad frame is answered before the close; a FETCH at another offset drops the read-ahead
and is answered right; two FETCHes asking the read-ahead at once are both
answered; a read-ahead that reached the queue end is never served (a
message acknowledged before the FETCH is in its answer); a queue deleted
and created again is never answered from the old read-ahead; a connection
closed with a read-ahead pending leaves the node serving; under tight
memory bounds, FETCHes read on the pool of connections closed at once
return their room (a fresh FETCH is still answered whole), and a
connection whose read-ahead holds its room is still answered; and the same
stream with [limits] fetch_threads = 0 (every read on the loop) gives the
same messages. With fetch_threads = 3 the answer after the next is read
too, at the offset the last answers' count predicts, and a wrong guess
(answers that change size) loses nothing. With 2 and 3, a FETCH that
claimed a running read-ahead is answered when a FETCH of another queue
is read first, and when a bad frame after it drains the connection. The node's
tern_fetch_pool_total counters show which path each step took. A
connection whose HELLO took PROTO_FEATURE_RUNS gets the same stream in the
runs layout (runs of the producers' batches, smaller answers), read on the
pool and read ahead, on the loop, and with a tag filter (single-message
parts); its GROUP_FETCH answers keep the other layout, and a FETCH parked
before the HELLO is answered in the layout of its time."""
import os
import re
import socket
import struct
import sys
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N = 3000
STEP = 100
FEATURE_RUNS = 2  # HELLO: FETCH answers in the runs layout


class Conn:
    """A raw client connection; requests may be pipelined."""

    def __init__(self, port, xxh3=False, runs=False):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rid = 0
        self.version = h.PROTO_VERSION
        self.runs = runs
        if xxh3 or runs:
            want = (1 if xxh3 else 0) | (FEATURE_RUNS if runs else 0)
            f = self.rpc(h.OP["HELLO"], struct.pack("<I", want))
            if f is None or f.status != 0 or f.body != struct.pack("<I", want):
                raise RuntimeError("HELLO refused: %r" % f)
            self.version = 2 if xxh3 else h.PROTO_VERSION

    def send(self, op, body):
        self.rid += 1
        self.sock.sendall(h.encode_frame(op, body, request_id=self.rid,
                                         version=self.version))
        return self.rid

    def recv(self, timeout=10):
        return h.recv_frame(self.sock, timeout=timeout)

    def rpc(self, op, body):
        self.send(op, body)
        return self.recv()

    def close(self):
        self.sock.close()


TOKEN = "fetch-pool-metrics-token"


def with_metrics(cl):
    """Give node 1 a [metrics] endpoint; returns its port."""
    port = h.free_ports(1)[0]
    token_file = os.path.join(cl.dir, "metrics.token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    with open(cl.nodes[1].config, "a") as f:
        f.write("\n[metrics]\nlisten = 127.0.0.1:%d\ntoken_file = %s\n" %
                (port, token_file))
    return port


def pool_counts(port):
    """{kind: value} of tern_fetch_pool_total."""
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port)
    req.add_header("Authorization", "Bearer " + TOKEN)
    with urllib.request.urlopen(req, timeout=5) as r:
        text = r.read().decode()
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^tern_fetch_pool_total\{kind="(\w+)"\} (\d+)$', text, re.M)}


def grew(before, after, kinds):
    return all(after.get(k, 0) > before.get(k, 0) for k in kinds)


def fetch_body(q, offset, max_msgs=STEP):
    return h.put_str(q) + struct.pack("<QIII", offset, max_msgs, 1 << 20, 0)


def decode_runs(f):
    """A FETCH answer in the runs layout, checked whole (counts, offsets,
    each run's bytes): (next_offset, end_offset, [(offset, payload)],
    kinds of its parts); raises ValueError when malformed."""
    nxt, end, n, n_parts = struct.unpack_from("<QQII", f.body, 0)
    at, out, kinds = 24, [], []
    for _ in range(n_parts):
        kind, off, _ts = struct.unpack_from("<BQQ", f.body, at)
        at += 17
        kinds.append(kind)
        if out and off <= out[-1][0]:
            raise ValueError("offsets do not increase at %d" % off)
        if kind == 3:
            (ln,) = struct.unpack_from("<I", f.body, at)
            out.append((off, f.body[at + 4:at + 4 + ln].decode()))
            at += 4 + ln
            (pl,) = struct.unpack_from("<I", f.body, at)
            at += 4 + pl
            continue
        if kind not in (1, 2):
            raise ValueError("part kind %d" % kind)
        count, ln = struct.unpack_from("<II", f.body, at)
        at += 8
        p, stop = at, at + ln
        for i in range(count):
            (ml,) = struct.unpack_from("<I", f.body, p)
            out.append((off + i, f.body[p + 4:p + 4 + ml].decode()))
            p += 4 + ml
            if kind == 2:
                (pl,) = struct.unpack_from("<I", f.body, p)
                p += 4 + pl
        if count == 0 or p != stop:
            raise ValueError("a run's bytes do not hold its count")
        at = stop
    if len(out) != n or at + 8 != len(f.body):
        raise ValueError("%d messages of %d, %d bytes left" %
                         (len(out), n, len(f.body) - at))
    return nxt, end, out, kinds


def decode_fetch(f, runs=False):
    """(next_offset, end_offset, [(offset, payload)])."""
    if runs:
        return decode_runs(f)[:3]
    nxt, end, n = struct.unpack_from("<QQI", f.body, 0)
    at, out = 20, []
    for _ in range(n):
        off, _ts = struct.unpack_from("<QQ", f.body, at)
        (ln,) = struct.unpack_from("<I", f.body, at + 16)
        out.append((off, f.body[at + 20:at + 20 + ln].decode()))
        at += 20 + ln
    return nxt, end, out


def produce(conn, q, prefix, first, n, pad=0):
    msgs = [("%s-%d" % (prefix, i)).encode() + b"." * pad
            for i in range(first, first + n)]
    body = (h.put_str(q) + struct.pack("<QQI", 0, 0, len(msgs)) +
            b"".join(h.put_blob(m) for m in msgs))
    f = conn.rpc(h.OP["PRODUCE"], body)
    return f is not None and f.status == 0


def fill(c, conn, q, prefix, n, pad=0):
    f = conn.rpc(h.OP["QUEUE_CREATE"], h.put_str(q))
    c.check(f is not None and f.status == 0, "create %s" % q, f)
    ok = all(produce(conn, q, prefix, i, 500, pad) for i in range(0, n, 500))
    c.check(ok, "%d messages produced to %s" % (n, q))


def read_on(conn, body_at, off, rounds, skip_ids=False):
    """FETCH body_at(off) from off on, one answer at a time, until an
    empty answer (at most rounds): ([(offset, payload)], [bad answer]).
    skip_ids: every other FETCH skips a request id (not the id an answer
    read ahead was built for)."""
    got, bad = [], []
    for i in range(rounds):
        if skip_ids:
            conn.rid += i % 2
        rid = conn.send(h.OP["FETCH"], body_at(off))
        f = conn.recv()
        if (f is None or f.status != 0 or f.request_id != rid or
                not f.checksum_ok or f.version != conn.version):
            bad.append(f)
            break
        nxt, _end, msgs = decode_fetch(f, conn.runs)
        got += msgs
        if not msgs:
            break
        off = nxt
    return got, bad


def answered_before_close(k, rid, n):
    """Whether k gets an answer to rid of n messages before its server
    closes it (at most the bad frame's error, the answer and EOF)."""
    frames = []
    for _ in range(3):
        f = k.recv()
        if f is None:
            break
        frames.append(f)
    return any(f.request_id == rid and f.status == 0 and
               len(decode_fetch(f)[2]) == n for f in frames)


def claim_beside(c, conn, what):
    """A FETCH that claims a running read-ahead of queue "big" (5,000
    messages of 100 bytes an answer, asked as soon as the header of the
    answer before it arrives) while a pooled FETCH of queue "small"
    finishes first (the client sleeps meanwhile, leaving the CPUs to the
    two reads): both are answered, right, five times over."""
    ok, answers, k = True, {}, 0
    for k in range(5):
        off = 5000 * (2 * k)
        conn.send(h.OP["FETCH"], fetch_body("big", off, 5000))
        head = h.recv_exact(conn.sock, h.HEADER.size)
        a = conn.send(h.OP["FETCH"], fetch_body("big", off + 5000, 5000))
        b = conn.send(h.OP["FETCH"], fetch_body("small", 0, 64))
        time.sleep(0.05)  # no client CPU: the small read ends first
        body_len = struct.unpack_from("<I", head, 4)[0] if head else 0
        ok = ok and head is not None and \
            h.recv_exact(conn.sock, body_len) is not None
        answers = {}
        for _ in range(2):
            f = conn.recv(timeout=10)
            if f is None:
                break
            answers[f.request_id] = f
        ok = ok and sorted(answers) == [a, b]
        if not ok:
            break
        _, _, msgs = decode_fetch(answers[a])
        ok = ok and [m[0] for m in msgs] == list(range(off + 5000,
                                                       off + 10000))
        _, _, msgs = decode_fetch(answers[b])
        ok = ok and [m[0] for m in msgs] == list(range(64))
    c.check(ok, "%s: the claimed read-ahead and the other queue's FETCH "
            "both answered right" % what, (k, sorted(answers)))


def started(c, cl, n=N, pad=0):
    """Start cl's node 1 with a metrics endpoint and fill queue q with n
    messages: (metrics port, client port, a connection)."""
    mport = with_metrics(cl)
    cl.start()
    port = cl.nodes[1].client_port
    conn = Conn(port)
    fill(c, conn, "q", "m", n, pad)
    return mport, port, conn


def stream(c, conn, q, what):
    """Read q from 0 to its end in answers of STEP; checks each answer."""
    got, bad = read_on(conn, lambda off: fetch_body(q, off), 0,
                       N // STEP + 10, skip_ids=True)
    c.check(not bad, "%s: every answer ok, with its request id, version "
            "and checksum" % what, bad[:1])
    want = [(i, "m-%d" % i) for i in range(N)]
    c.check(got == want, "%s: the %d messages once each, in order" %
            (what, N), (len(got), got[:2], got[-2:]))


def main(c):
    with h.Cluster(1) as cl:
        c.step("start a node, fill a queue of %d messages" % N)
        mport, port, conn = started(c, cl)

        c.step("stream the queue, frame versions 1 and 2")
        k0 = pool_counts(mport)
        stream(c, conn, "q", "version 1")
        v2 = Conn(port, xxh3=True)
        stream(c, v2, "q", "version 2")
        v2.close()
        k1 = pool_counts(mport)
        c.check(grew(k0, k1, ("read", "ahead", "ahead_served")),
                "read on the pool, read ahead, and served from it", k1)

        c.step("the runs layout (HELLO's PROTO_FEATURE_RUNS)")
        for xxh3 in (False, True):
            rc = Conn(port, xxh3=xxh3, runs=True)
            stream(c, rc, "q", "runs layout, frame version %d" % rc.version)
            rc.close()
        k2 = pool_counts(mport)
        c.check(grew(k1, k2, ("read", "ahead", "ahead_served")),
                "runs answers read on the pool, read ahead, served", k2)
        rc = Conn(port, runs=True)
        a = conn.rpc(h.OP["FETCH"], fetch_body("q", 450))
        b = rc.rpc(h.OP["FETCH"], fetch_body("q", 450))
        nxt, _, msgs, kinds = decode_runs(b)
        c.check(nxt == 550 and msgs == decode_fetch(a)[2] and
                kinds == [1, 1],
                "100 messages from 450: two runs (the batches of 500 meet "
                "at 500), the messages of the other layout", (nxt, kinds))
        c.check(len(b.body) + 14 * 100 < len(a.body),
                "the runs answer is smaller by about 16 bytes a message",
                (len(a.body), len(b.body)))
        # A tag filter: single-message parts (none of these has a tag).
        f = rc.rpc(h.OP["FETCH"], h.put_str("q") + struct.pack(
            "<QIIIBBB", 0, 10, 1 << 20, 0, 0x04, 1, 1) + b"x")
        nxt, _, msgs, kinds = decode_runs(f)
        c.check(f.status == 0 and msgs == [] and kinds == [] and nxt > 0,
                "a tag filter that matches nothing moves on", (f, nxt))
        # A FETCH parked before a HELLO that takes the runs layout is
        # answered in the layout of its time; the next one in the new.
        pk = Conn(port)
        end = decode_fetch(pk.rpc(h.OP["FETCH"], fetch_body("q", 0, 1)))[1]
        prid = pk.send(h.OP["FETCH"], h.put_str("q") + struct.pack(
            "<QIII", end, 10, 1 << 20, 5000))
        time.sleep(0.2)
        hrid = pk.send(h.OP["HELLO"], struct.pack("<I", FEATURE_RUNS))
        hf = pk.recv()
        ok = produce(conn, "q", "late", 0, 1)
        pf = pk.recv()
        c.check(hf is not None and hf.request_id == hrid and ok and
                pf is not None and pf.request_id == prid and
                pf.status == 0 and
                decode_fetch(pf)[2] == [(end, "late-0")],
                "a FETCH parked before HELLO answers in the old layout",
                (hf, pf))
        pk.runs = True
        f = pk.rpc(h.OP["FETCH"], fetch_body("q", end, 5))
        c.check(f.status == 0 and decode_runs(f)[2] == [(end, "late-0")],
                "the FETCH after it in the runs layout", f)
        pk.close()
        # GROUP_FETCH keeps the other layout.
        f = rc.rpc(h.OP["GROUP_FETCH"], h.put_str("q") + h.put_str("g") +
                   struct.pack("<III", 5, 1 << 20, 0))
        c.check(f.status == 0 and
                [m[0] for m in decode_fetch(f)[2]] == list(range(5)),
                "GROUP_FETCH answers in the other layout", f)
        rc.close()

        c.step("a FETCH elsewhere drops the read-ahead")
        f = conn.rpc(h.OP["FETCH"], fetch_body("q", 0))
        c.check(f.status == 0 and decode_fetch(f)[0] == STEP,
                "answer at 0 stopped at %d" % STEP, f)
        f = conn.rpc(h.OP["FETCH"], fetch_body("q", 1234, 7))
        nxt, _, msgs = decode_fetch(f)
        c.check(msgs == [(1234 + i, "m-%d" % (1234 + i)) for i in range(7)]
                and nxt == 1241, "FETCH at 1234 answered with its messages",
                msgs[:2])
        f = conn.rpc(h.OP["FETCH"], fetch_body("q", STEP))
        _, _, msgs = decode_fetch(f)
        c.check([m[0] for m in msgs] == list(range(STEP, 2 * STEP)),
                "FETCH at %d after it: right messages" % STEP, msgs[:2])

        c.step("two FETCHes asking the read-ahead at once")
        f = conn.rpc(h.OP["FETCH"], fetch_body("q", 1000))
        a = conn.send(h.OP["FETCH"], fetch_body("q", 1100))
        b = conn.send(h.OP["FETCH"], fetch_body("q", 1100))
        answers = {}
        for _ in range(2):
            f = conn.recv()
            answers[f.request_id] = f
        ok = sorted(answers) == [a, b]
        for f in answers.values():
            _, _, msgs = decode_fetch(f)
            ok = ok and f.checksum_ok and \
                [m[0] for m in msgs] == list(range(1100, 1200))
        c.check(ok, "both answered with offsets 1100..1199", answers)

        c.step("a read-ahead that reached the end is not served")
        k0 = pool_counts(mport)
        fill(c, conn, "tail", "m", 500)
        f = conn.rpc(h.OP["FETCH"], fetch_body("tail", 0, 400))
        c.check(decode_fetch(f)[0] == 400, "answer at 0 stopped at 400", f)
        time.sleep(0.3)  # the read-ahead at 400 (100 messages) is done
        c.check(produce(conn, "tail", "m", 500, 10), "10 more acknowledged")
        f = conn.rpc(h.OP["FETCH"], fetch_body("tail", 400, 400))
        nxt, end, msgs = decode_fetch(f)
        c.check(len(msgs) == 110 and nxt == 510 and end == 510 and
                msgs[-1] == (509, "m-509"),
                "FETCH at 400 holds the 10 acknowledged after the read",
                (len(msgs), nxt, end))
        k1 = pool_counts(mport)
        c.check(grew(k0, k1, ("ahead",)) and
                k1["ahead_served"] == k0["ahead_served"],
                "a read-ahead was read, and not served", (k0, k1))

        c.step("a FETCH claims a read-ahead while another queue's is read")
        fill(c, conn, "big", "b", 50000, 100)
        fill(c, conn, "small", "s", 500)
        claim_beside(c, conn, "fetch_threads 2")

        c.step("a queue deleted and created again")
        fill(c, conn, "re", "m", 1000)
        f = conn.rpc(h.OP["FETCH"], fetch_body("re", 0))
        time.sleep(0.3)  # the read-ahead at 100 holds old messages
        f = conn.rpc(h.OP["QUEUE_DELETE"], h.put_str("re"))
        c.check(f.status == 0, "delete re", f)
        f = conn.rpc(h.OP["QUEUE_CREATE"], h.put_str("re"))
        c.check(f.status == 0, "create re again", f)
        ok = all(produce(conn, "re", "new", i, 500) for i in (0, 500))
        c.check(ok, "1000 new messages")
        f = conn.rpc(h.OP["FETCH"], fetch_body("re", STEP))
        _, _, msgs = decode_fetch(f)
        c.check(f.status == 0 and msgs and msgs[0] == (STEP, "new-%d" % STEP),
                "FETCH at %d reads the new queue" % STEP, msgs[:1])

        c.step("a FETCH pipelined before a bad frame")
        ok = 0
        for _ in range(5):
            k = Conn(port)
            rid = k.rid + 1
            k.sock.sendall(h.encode_frame(h.OP["FETCH"], fetch_body("q", 0),
                                          request_id=rid) + b"\0" * 24)
            ok += answered_before_close(k, rid, STEP)
            k.close()
        c.check(ok == 5, "answered before the connection closes (5 of 5)",
                ok)

        c.step("a FETCH that claimed a read-ahead, before a bad frame")
        ok = 0
        for _ in range(5):
            k = Conn(port)
            k.send(h.OP["FETCH"], fetch_body("big", 0, 5000))
            head = h.recv_exact(k.sock, h.HEADER.size)
            rid = k.rid + 1
            k.sock.sendall(h.encode_frame(
                h.OP["FETCH"], fetch_body("big", 5000, 5000),
                request_id=rid) + b"\0" * 24)
            time.sleep(0.05)  # the read-ahead at 5000 is claimed, read
            if head is None or h.recv_exact(k.sock, struct.unpack_from(
                    "<I", head, 4)[0]) is None:
                k.close()
                continue
            ok += answered_before_close(k, rid, 5000)
            k.close()
        c.check(ok == 5, "the claimed read-ahead answered before the "
                "connection closes (5 of 5)", ok)

        c.step("a connection closed with a read-ahead pending")
        for _ in range(20):
            k = Conn(port)
            k.send(h.OP["FETCH"], fetch_body("q", 0))
            k.recv()
            k.send(h.OP["FETCH"], fetch_body("q", STEP))
            k.close()
        f = conn.rpc(h.OP["FETCH"], fetch_body("q", 2900))
        c.check(f is not None and f.status == 0 and
                len(decode_fetch(f)[2]) == 100,
                "the node still serves after 20 such closes", f)
        conn.close()
        c.check(cl.nodes[1].alive(), "node alive")

    with h.Cluster(1, limits={"max_conn_queued_bytes": "128K"}) as cl:
        c.step("a connection bound of 128K, messages of about 200 bytes")
        cl.start()
        port = cl.nodes[1].client_port
        conn = Conn(port)
        fill(c, conn, "q", "m", 5000, pad=200)
        off, n_ok = 0, 0
        for _ in range(4):
            # each answer is cut to the connection's 128K; a read-ahead
            # holding that much room would keep the next FETCH waiting
            # (until the read-ahead's idle bound, 2 s)
            conn.send(h.OP["FETCH"], fetch_body("q", off, 1000))
            try:
                f = conn.recv(timeout=1.5)
            except socket.timeout:
                break
            if f is None or f.status != 0:
                print("  answer: %r" % f)
                break
            nxt, _, msgs = decode_fetch(f)
            if not msgs or msgs[0][0] != off:
                print("  answer at %d: %r" % (off, msgs[:1]))
                break
            n_ok += 1
            off = nxt
        c.check(n_ok == 4, "4 FETCHes in a row on one connection answered",
                n_ok)
        conn.close()

    with h.Cluster(1, limits={"client_memory_bytes": "4M",
                              "max_conn_queued_bytes": "4M",
                              "max_frame_bytes": "1M",
                              "max_message_bytes": "512K"}) as cl:
        c.step("a server bound of 4M: connections closed while read")
        mport, port, conn = started(c, cl, 5000, pad=200)
        conn.close()
        def probe():
            k = Conn(port)
            k.send(h.OP["FETCH"], fetch_body("q", 0, 1000))
            try:
                f = k.recv()
                n = len(decode_fetch(f)[2]) if f is not None else 0
            except socket.timeout:
                n = None
            k.close()
            return n

        before = probe()
        k0 = pool_counts(mport)
        for _ in range(12):
            k = socket.create_connection(("127.0.0.1", port), timeout=5)
            k.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                         struct.pack("ii", 1, 0))
            # a FETCH, then a bad magic: the node closes at once, while the
            # FETCH may still be read on the pool
            k.sendall(h.encode_frame(h.OP["FETCH"], h.put_str("q") +
                                     struct.pack("<QIII", 0, 1000, 512 << 10,
                                                 0)) + b"\0" * 24)
            k.close()
            time.sleep(0.05)
        time.sleep(0.5)
        after = probe()
        c.check(before and after == before,
                "after 12 such closes a FETCH is answered as before",
                (before, after))
        k1 = pool_counts(mport)
        c.check(k1["read"] - k0["read"] >= 6,
                "most of those FETCHes were read on the pool", (k0, k1))

    with h.Cluster(1, limits={"fetch_threads": 0}) as cl:
        c.step("fetch_threads = 0: every read on the loop")
        mport, port, conn = started(c, cl)
        stream(c, conn, "q", "fetch_threads 0")
        rc = Conn(port, runs=True)
        stream(c, rc, "q", "fetch_threads 0, runs layout")
        rc.close()
        conn.close()
        k = pool_counts(mport)
        c.check(sum(k.values()) == 0 and len(k) == 5,
                "nothing read on the pool", k)

    with h.Cluster(1, limits={"fetch_threads": 3}) as cl:
        c.step("fetch_threads = 3: the answer after the next read too")
        mport, _, conn = started(c, cl)
        k0 = pool_counts(mport)
        stream(c, conn, "q", "two read ahead")
        k1 = pool_counts(mport)
        c.check(grew(k0, k1, ("ahead_next", "ahead_served")) and
                k1["ahead_served"] - k0["ahead_served"] >= N // STEP // 2,
                "answers read two ahead, most answers served from them",
                (k0, k1))

        c.step("a wrong guess of the answer after the next is dropped")
        # 300 messages of 5 bytes, then 300 of 1005: answers of at most
        # 500 bytes hold 100 small ones (twice: the answer after the next
        # is guessed at 400), then one large one each (the guess is wrong).
        f = conn.rpc(h.OP["QUEUE_CREATE"], h.put_str("var"))
        ok = f is not None and f.status == 0
        ok = ok and produce(conn, "var", "s", 0, 100) and \
            produce(conn, "var", "s", 100, 200)
        ok = ok and all(produce(conn, "var", "L", i, 100, 1000)
                        for i in (300, 400, 500))
        c.check(ok, "600 messages in var")
        k0 = pool_counts(mport)
        got, bad = read_on(conn, lambda off: h.put_str("var") + struct.pack(
            "<QIII", off, 1000, 500, 0), 100, 700)
        want = [(i, "s-%d" % i) for i in range(100, 300)] + \
            [(i, "L-%d" % i + "." * 1000) for i in range(300, 600)]
        k1 = pool_counts(mport)
        c.check(not bad and got == want,
                "every message from 100 once, in order",
                (bad[:1], len(got), got[:1], got[-1:]))
        c.check(grew(k0, k1, ("ahead_next",)) and
                k1["ahead"] - k1["ahead_served"] >
                k0["ahead"] - k0["ahead_served"],
                "the answer after the next was guessed, and a guess dropped",
                (k0, k1))
        fill(c, conn, "big", "b", 50000, 100)
        fill(c, conn, "small", "s", 500)
        claim_beside(c, conn, "fetch_threads 3")
        conn.close()


if __name__ == "__main__":
    h.run_test(main)
