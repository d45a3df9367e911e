#!/usr/bin/env python3
"""Peer systems for bench/compare.sh: a 3-node cluster of one peer on
127.0.0.1, measured like tern with our own minimal clients (python stdlib,
raw protocols), then stopped.

    peers.py PEER --dir DIR [--seq N] [--warmup N] [--pipe N] [--window W]
             [--pipe-warmup N] [--trials T] [--lat FILE] [--base-port P]

PEER is one of
  nats      NATS JetStream, stream of 3 replicas (file storage): text
            protocol, PUB with a reply inbox = JetStream publish, the
            PubAck arrives on the inbox. Debian's 2.9 file store syncs on a
            timer, so an ack means "in memory on 2 of 3 nodes".
  rabbitmq  RabbitMQ quorum queue on 3 nodes: AMQP 0-9-1 publisher with
            publisher confirms (persistent messages; a confirm means fsynced
            by a majority).
  etcd      etcd (pure raft reference): PUT through the HTTP JSON gateway
            (/v3/kv/put); an answer means committed (fsynced by a majority).

Metrics, 1 KiB payloads, after --pipe-warmup N messages sent as the pipe
metric sends them and not measured (a process's steady state: its heap
grown, its log through a compaction; tern is warmed up the same way):
  seq       one message in flight to the leader's node, N after a warm-up;
            every latency (us) goes to --lat FILE, sorted.
  pipe      N messages with up to W unacknowledged (etcd: W connections,
            one request each: its HTTP server answers a connection's
            requests one at a time).
  failover  T trials: a publisher on a follower, kill -9 of the leader
            (NATS: the stream leader; RabbitMQ: the queue leader; etcd: the
            raft leader) and the time to the next acknowledged message
            (attempts time out after 250 ms and are retried); then the
            killed node restarts and the cluster is waited for (bounded).
Prints one JSON object on stdout. Every process is started here, recorded
in DIR/pids and stopped by its PID (SIGTERM, then SIGKILL) on the way out,
also on SIGTERM/SIGINT. Every loop is bounded in count and time."""
import asyncio
import base64
import json
import os
import signal
import struct
import subprocess
import sys
import time

PAYLOAD = b"m" * 1024
ATTEMPT_S = 0.25
HEALTHY_S = 120


def log(*a):
    print("[%s] peers:" % time.strftime("%H:%M:%S"), *a, file=sys.stderr,
          flush=True)


def pct(v, q):
    if not v:
        return None
    k = max(0, min(len(v) - 1, int(round(q * len(v) + 0.5)) - 1))
    return v[k]


class Procs:
    """Processes started by this run, by PID (DIR/pids lists them too)."""

    def __init__(self, d):
        self.d = d
        self.procs = {}

    def start(self, key, argv, env=None, logname=None):
        f = open(os.path.join(self.d, (logname or key) + ".log"), "ab")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                             stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        f.close()
        self.procs[key] = p
        with open(os.path.join(self.d, "pids"), "a") as pf:
            pf.write("%d\n" % p.pid)
        return p

    def kill9(self, key):
        p = self.procs.pop(key, None)
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)

    def stop(self, key, grace=15):
        p = self.procs.pop(key, None)
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def stop_all(self):
        for k in list(self.procs):
            self.stop(k)


async def wait_port(port, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return True
        except OSError:
            await asyncio.sleep(0.2)
    raise RuntimeError("port %d not up after %ds" % (port, timeout))


# ---- NATS ---------------------------------------------------------------

class NatsConn:
    """One NATS connection; request() publishes with a reply inbox and
    returns a future for the reply's payload."""

    def __init__(self):
        self.waiting = {}
        self.next = 0
        self.err = None

    async def connect(self, port):
        self.r, self.w = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), 2)
        await asyncio.wait_for(self.r.readline(), 2)  # INFO
        self.w.write(b'CONNECT {"verbose":false,"pedantic":false,'
                     b'"headers":false,"echo":false}\r\n'
                     b"SUB _INBOX.cmp.* 1\r\nPING\r\n")
        while True:
            ln = await asyncio.wait_for(self.r.readline(), 2)
            if ln.startswith(b"PONG"):
                break
            if ln.startswith(b"-ERR") or not ln:
                raise RuntimeError("nats connect: %r" % ln)
        self.task = asyncio.ensure_future(self.reader())
        return self

    async def reader(self):
        try:
            while True:
                ln = await self.r.readline()
                if not ln:
                    raise ConnectionError("closed")
                if ln.startswith(b"MSG "):
                    parts = ln.split()
                    n = int(parts[-1])
                    data = await self.r.readexactly(n + 2)
                    f = self.waiting.pop(parts[1], None)
                    if f is not None and not f.done():
                        f.set_result(data[:n])
                elif ln.startswith(b"PING"):
                    self.w.write(b"PONG\r\n")
                elif ln.startswith(b"-ERR"):
                    raise ConnectionError(ln.decode().strip())
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
            self.err = e
            for f in self.waiting.values():
                if not f.done():
                    f.set_exception(ConnectionError(str(e)))
            self.waiting.clear()

    def request(self, subject, body):
        if self.err is not None:
            raise ConnectionError(str(self.err))
        self.next += 1
        inbox = b"_INBOX.cmp.%d" % self.next
        f = asyncio.get_event_loop().create_future()
        self.waiting[inbox] = f
        self.w.write(b"PUB %s %s %d\r\n%s\r\n" % (subject, inbox, len(body),
                                                   body))
        return f

    def close(self):
        self.task.cancel()
        self.w.close()


class Nats:
    name = "nats"

    def __init__(self, procs, d, base):
        self.procs, self.d = procs, d
        self.client = [base + i for i in range(3)]
        self.route = [base + 10 + i for i in range(3)]

    def start_node(self, i):
        conf = os.path.join(self.d, "n%d.conf" % i)
        routes = ", ".join("nats-route://127.0.0.1:%d" % self.route[j]
                           for j in range(3) if j != i)
        with open(conf, "w") as f:
            f.write("server_name: n%d\nlisten: 127.0.0.1:%d\n"
                    "jetstream { store_dir: \"%s\" }\n"
                    "cluster { name: cmp\n listen: 127.0.0.1:%d\n"
                    " routes: [%s] }\n" % (
                        i, self.client[i], os.path.join(self.d, "n%d" % i),
                        self.route[i], routes))
        self.procs.start("n%d" % i, ["nats-server", "-c", conf])

    async def api(self, port, what, body=b""):
        c = await NatsConn().connect(port)
        try:
            rep = await asyncio.wait_for(
                c.request(b"$JS.API." + what, body), 5)
            return json.loads(rep)
        finally:
            c.close()

    async def start(self):
        for i in range(3):
            self.start_node(i)
        for i in range(3):
            await wait_port(self.client[i], 30)
        cfg = json.dumps({"name": "CMP", "subjects": ["cmp.>"],
                          "num_replicas": 3, "storage": "file"}).encode()
        end = time.monotonic() + 60
        while True:  # the meta group needs a leader first
            try:
                r = await self.api(self.client[0], b"STREAM.CREATE.CMP", cfg)
                if "error" not in r or "already" in json.dumps(r):
                    break
            except (asyncio.TimeoutError, OSError, ConnectionError) as e:
                r = str(e)
            if time.monotonic() > end:
                raise RuntimeError("nats stream create: %s" % r)
            await asyncio.sleep(0.5)
        await self.healthy()

    async def leader(self, avoid=None):
        for i in range(3):
            if i == avoid or "n%d" % i not in self.procs.procs:
                continue
            try:
                r = await self.api(self.client[i], b"STREAM.INFO.CMP")
                ld = r.get("cluster", {}).get("leader")
                if ld:
                    return int(ld[1:])
            except (asyncio.TimeoutError, OSError, ConnectionError):
                pass
        return None

    async def healthy(self):
        end = time.monotonic() + HEALTHY_S
        while time.monotonic() < end:
            try:
                r = await self.api(self.client[0], b"STREAM.INFO.CMP")
                cl = r.get("cluster", {})
                reps = cl.get("replicas", [])
                if cl.get("leader") and len(reps) == 2 and all(
                        x.get("current") for x in reps):
                    return
            except (asyncio.TimeoutError, OSError, ConnectionError):
                pass
            await asyncio.sleep(0.5)
        raise RuntimeError("nats: stream not healthy in %ds" % HEALTHY_S)

    async def publisher(self, node):
        c = await NatsConn().connect(self.client[node])

        async def pub(wait=True):
            f = c.request(b"cmp.x", PAYLOAD)
            if not wait:
                return f
            rep = await f
            if b'"error"' in rep:
                raise RuntimeError(rep.decode())
        return pub, c.close

    async def restart(self, i):
        self.start_node(i)
        await wait_port(self.client[i], 30)
        await self.healthy()

    def kill(self, i):
        self.procs.kill9("n%d" % i)


# ---- RabbitMQ (AMQP 0-9-1) ----------------------------------------------

def amqp_frame(ftype, ch, payload):
    return struct.pack(">BHI", ftype, ch, len(payload)) + payload + b"\xce"


def amqp_method(ch, cls, meth, args=b""):
    return amqp_frame(1, ch, struct.pack(">HH", cls, meth) + args)


def shortstr(s):
    b = s.encode()
    return struct.pack(">B", len(b)) + b


class AmqpConn:
    """A confirming publisher on channel 1: publish() returns a future
    resolved by the broker's Basic.Ack (error on Nack or close)."""

    def __init__(self):
        self.pending = {}
        self.tag = 0
        self.err = None
        self.replies = asyncio.Queue()

    async def read_frame(self):
        h = await self.r.readexactly(7)
        ftype, ch, size = struct.unpack(">BHI", h)
        body = await self.r.readexactly(size + 1)
        return ftype, ch, body[:-1]

    async def expect(self, cls, meth):
        while True:
            ftype, ch, p = await asyncio.wait_for(self.read_frame(), 10)
            if ftype != 1:
                continue
            c, m = struct.unpack(">HH", p[:4])
            if (c, m) == (cls, meth):
                return p[4:]
            if (c, m) in ((10, 50), (20, 40)):
                raise RuntimeError("amqp closed: %r" % p[4:80])

    async def connect(self, port, queue):
        self.r, self.w = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), 2)
        self.w.write(b"AMQP\x00\x00\x09\x01")
        await self.expect(10, 10)  # Start
        resp = b"\x00guest\x00guest"
        self.w.write(amqp_method(0, 10, 11, struct.pack(">I", 0) +
                                 shortstr("PLAIN") +
                                 struct.pack(">I", len(resp)) + resp +
                                 shortstr("en_US")))
        tune = await self.expect(10, 30)
        chmax, fmax, _ = struct.unpack(">HIH", tune[:8])
        self.w.write(amqp_method(0, 10, 31, struct.pack(">HIH", chmax or 1,
                                                         fmax, 0)))
        self.w.write(amqp_method(0, 10, 40, shortstr("/") + shortstr("") +
                                 b"\x00"))
        await self.expect(10, 41)
        self.w.write(amqp_method(1, 20, 10, shortstr("")))
        await self.expect(20, 11)
        args = (shortstr("x-queue-type") + b"S" +
                struct.pack(">I", 6) + b"quorum")
        self.w.write(amqp_method(1, 50, 10, struct.pack(">H", 0) +
                                 shortstr(queue) + b"\x02" +
                                 struct.pack(">I", len(args)) + args))
        await self.expect(50, 11)
        self.w.write(amqp_method(1, 85, 10, b"\x00"))
        await self.expect(85, 11)
        self.queue = queue
        self.task = asyncio.ensure_future(self.reader())
        return self

    def settle(self, tag, multiple, exc):
        tags = [t for t in self.pending if t <= tag] if multiple else [tag]
        for t in tags:
            f = self.pending.pop(t, None)
            if f is not None and not f.done():
                if exc is None:
                    f.set_result(None)
                else:
                    f.set_exception(exc)

    async def reader(self):
        try:
            while True:
                ftype, ch, p = await self.read_frame()
                if ftype != 1:
                    continue
                c, m = struct.unpack(">HH", p[:4])
                if (c, m) in ((60, 80), (60, 120)):
                    tag, bits = struct.unpack(">QB", p[4:13])
                    self.settle(tag, bits & 1,
                                None if m == 80 else RuntimeError("nack"))
                elif (c, m) in ((10, 50), (20, 40)):
                    raise ConnectionError("amqp closed: %r" % p[4:80])
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
            self.err = e
            for f in self.pending.values():
                if not f.done():
                    f.set_exception(ConnectionError(str(e)))
            self.pending.clear()

    def publish(self):
        if self.err is not None:
            raise ConnectionError(str(self.err))
        self.tag += 1
        f = asyncio.get_event_loop().create_future()
        self.pending[self.tag] = f
        hdr = struct.pack(">HHQH", 60, 0, len(PAYLOAD), 0x1000) + b"\x02"
        self.w.write(amqp_method(1, 60, 40, struct.pack(">H", 0) +
                                 shortstr("") + shortstr(self.queue) +
                                 b"\x00") + amqp_frame(2, 1, hdr) +
                     amqp_frame(3, 1, PAYLOAD))
        return f

    def close(self):
        self.task.cancel()
        self.w.close()


class Rabbit:
    name = "rabbitmq"
    RBIN = "/usr/lib/rabbitmq/bin"

    def __init__(self, procs, d, base):
        self.procs, self.d = procs, d
        self.amqp = [base + i for i in range(3)]
        self.dist = [base + 10 + i for i in range(3)]
        self.epmd = base + 20
        self.home = os.path.join(d, "home")
        os.makedirs(self.home, exist_ok=True)
        cookie = os.path.join(self.home, ".erlang.cookie")
        if not os.path.exists(cookie):
            with open(cookie, "w") as f:
                f.write(base64.b32encode(os.urandom(15)).decode())
            os.chmod(cookie, 0o400)
        with open(os.path.join(d, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        open(os.path.join(d, "env.conf"), "w").close()

    def env(self, i):
        e = dict(os.environ)
        n = "cmp%d" % i
        e.update({
            "HOME": self.home, "ERL_EPMD_PORT": str(self.epmd),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONF_ENV_FILE": os.path.join(self.d, "env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE":
                os.path.join(self.d, "enabled_plugins"),
            "RABBITMQ_CTL_DIST_PORT_MIN": str(self.epmd + 1),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(self.epmd + 9),
            "RABBITMQ_NODENAME": n + "@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp[i]),
            "RABBITMQ_DIST_PORT": str(self.dist[i]),
            "RABBITMQ_MNESIA_BASE": os.path.join(self.d, n, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(self.d, n, "log"),
            "RABBITMQ_PID_FILE": os.path.join(self.d, n + ".beam.pid"),
            "RABBITMQ_CONFIG_FILE": os.path.join(self.d, n + ".conf"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        return e

    def ctl(self, i, *args, timeout=120, tool="rabbitmqctl"):
        return subprocess.run(
            [os.path.join(self.RBIN, tool), "-n", "cmp%d@localhost" % i] +
            list(args), env=self.env(i), capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL)

    def start_node(self, i):
        n = "cmp%d" % i
        os.makedirs(os.path.join(self.d, n, "mnesia"), exist_ok=True)
        os.makedirs(os.path.join(self.d, n, "log"), exist_ok=True)
        with open(os.path.join(self.d, n + ".conf"), "w") as f:
            f.write("listeners.tcp.1 = 127.0.0.1:%d\n"
                    "loopback_users.guest = true\nlog.console = false\n"
                    % self.amqp[i])
        try:
            os.unlink(os.path.join(self.d, n + ".beam.pid"))
        except OSError:
            pass
        self.procs.start(n, [os.path.join(self.RBIN, "rabbitmq-server")],
                         env=self.env(i))

    def await_node(self, i):
        end = time.monotonic() + HEALTHY_S
        while self.ctl(i, "ping", timeout=30).returncode != 0:
            if time.monotonic() > end:
                raise RuntimeError("rabbitmq cmp%d does not answer" % i)
            time.sleep(1)
        r = self.ctl(i, "await_startup", "--timeout", str(HEALTHY_S),
                     timeout=HEALTHY_S + 30)
        if r.returncode != 0:
            raise RuntimeError("rabbitmq cmp%d: %s" % (i, r.stderr[-300:]))

    def beam_pid(self, i):
        with open(os.path.join(self.d, "cmp%d.beam.pid" % i)) as f:
            return int(f.read().strip())

    async def start(self):
        self.procs.start("epmd", ["epmd", "-address", "127.0.0.1", "-port",
                                  str(self.epmd)])
        await wait_port(self.epmd, 10)
        for i in range(3):
            self.start_node(i)
        loop = asyncio.get_event_loop()
        for i in range(3):
            await loop.run_in_executor(None, self.await_node, i)
        for i in (1, 2):
            for args in (("stop_app",), ("join_cluster", "cmp0@localhost"),
                         ("start_app",)):
                r = await loop.run_in_executor(None, lambda: self.ctl(
                    i, *args))
                if r.returncode != 0:
                    raise RuntimeError("rabbitmq %s: %s" % (args,
                                                            r.stderr[-300:]))
        c = await AmqpConn().connect(self.amqp[0], "cmp")
        c.close()
        await self.healthy()

    async def leader(self, avoid=None):
        loop = asyncio.get_event_loop()
        for i in range(3):
            if i == avoid or "cmp%d" % i not in self.procs.procs:
                continue
            r = await loop.run_in_executor(None, lambda: self.ctl(
                i, "list_queues", "name", "leader", "--formatter", "json",
                "-q", timeout=60))
            try:
                for q in json.loads(r.stdout):
                    if q.get("name") == "cmp" and q.get("leader"):
                        return int(q["leader"].split("@")[0][3:])
            except ValueError:
                pass
        return None

    async def healthy(self):
        loop = asyncio.get_event_loop()
        end = time.monotonic() + HEALTHY_S
        while time.monotonic() < end:
            r = await loop.run_in_executor(None, lambda: self.ctl(
                0, "quorum_status", "cmp", "--formatter", "json", "-q",
                timeout=60, tool="rabbitmq-queues"))
            try:
                st = json.loads(r.stdout)
                if len(st) == 3 and all(
                        x.get("Raft State") in ("leader", "follower")
                        for x in st):
                    return
            except ValueError:
                pass
            await asyncio.sleep(1)
        raise RuntimeError("rabbitmq: queue not healthy in %ds" % HEALTHY_S)

    async def publisher(self, node):
        c = await AmqpConn().connect(self.amqp[node], "cmp")

        async def pub(wait=True):
            f = c.publish()
            if wait:
                await f
            return f
        return pub, c.close

    def kill(self, i):
        os.kill(self.beam_pid(i), signal.SIGKILL)
        self.procs.stop("cmp%d" % i, grace=30)

    async def restart(self, i):
        self.start_node(i)
        await asyncio.get_event_loop().run_in_executor(None, self.await_node,
                                                       i)
        await self.healthy()

    def stop(self):
        for i in range(3):
            try:
                pid = self.beam_pid(i)
            except (OSError, ValueError):
                continue
            if "cmp%d" % i in self.procs.procs:
                self.procs.stop("cmp%d" % i, grace=30)
            try:
                os.kill(pid, signal.SIGTERM)
                for _ in range(100):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# ---- etcd (HTTP JSON gateway) -------------------------------------------

class HttpConn:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    async def connect(self, port):
        self.port = port
        self.r, self.w = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), 2)
        return self

    async def post(self, path, obj):
        body = json.dumps(obj).encode()
        self.w.write(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (
                         path, self.port, len(body), body))
        status = await self.r.readline()
        if not status:
            raise ConnectionError("closed")
        hdr = {}
        while True:
            ln = await self.r.readline()
            if ln in (b"\r\n", b"\n", b""):
                break
            k, _, v = ln.decode().partition(":")
            hdr[k.strip().lower()] = v.strip()
        if "content-length" in hdr:
            data = await self.r.readexactly(int(hdr["content-length"]))
        else:  # chunked
            data = b""
            while True:
                n = int((await self.r.readline()).strip() or b"0", 16)
                chunk = await self.r.readexactly(n + 2)
                if n == 0:
                    break
                data += chunk[:-2]
        code = int(status.split()[1])
        if code != 200:
            raise RuntimeError("http %d: %r" % (code, data[:200]))
        return json.loads(data) if data else {}

    def close(self):
        self.w.close()


class Etcd:
    name = "etcd"

    def __init__(self, procs, d, base):
        self.procs, self.d = procs, d
        self.client = [base + i for i in range(3)]
        self.peer = [base + 10 + i for i in range(3)]
        self.key = base64.b64encode(b"cmp").decode()
        self.value = base64.b64encode(PAYLOAD).decode()

    def start_node(self, i):
        cl = ",".join("e%d=http://127.0.0.1:%d" % (j, self.peer[j])
                      for j in range(3))
        self.procs.start("e%d" % i, [
            "etcd", "--name", "e%d" % i,
            "--data-dir", os.path.join(self.d, "e%d" % i),
            "--listen-client-urls", "http://127.0.0.1:%d" % self.client[i],
            "--advertise-client-urls", "http://127.0.0.1:%d" % self.client[i],
            "--listen-peer-urls", "http://127.0.0.1:%d" % self.peer[i],
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:%d" % self.peer[i],
            "--initial-cluster", cl, "--initial-cluster-state", "new",
            "--initial-cluster-token", "cmp"])

    async def start(self):
        for i in range(3):
            self.start_node(i)
        for i in range(3):
            await wait_port(self.client[i], 30)
        await self.healthy()

    async def status(self, i):
        c = await HttpConn().connect(self.client[i])
        try:
            return await asyncio.wait_for(
                c.post(b"/v3/maintenance/status", {}), 2)
        finally:
            c.close()

    async def leader(self, avoid=None):
        for i in range(3):
            if i == avoid or "e%d" % i not in self.procs.procs:
                continue
            try:
                st = await self.status(i)
                if st.get("leader") and st["leader"] == \
                        st.get("header", {}).get("member_id"):
                    return i
            except (asyncio.TimeoutError, OSError, ConnectionError,
                    RuntimeError, ValueError):
                pass
        return None

    async def healthy(self):
        end = time.monotonic() + HEALTHY_S
        while time.monotonic() < end:
            try:
                ls = [(await self.status(i)).get("leader") for i in range(3)]
                if ls[0] and ls.count(ls[0]) == 3:
                    return
            except (asyncio.TimeoutError, OSError, ConnectionError,
                    RuntimeError, ValueError):
                pass
            await asyncio.sleep(0.5)
        raise RuntimeError("etcd: no agreed leader in %ds" % HEALTHY_S)

    async def publisher(self, node):
        c = await HttpConn().connect(self.client[node])
        body = {"key": self.key, "value": self.value}

        async def pub(wait=True):
            return await c.post(b"/v3/kv/put", body)
        return pub, c.close

    async def pipe(self, node, n, window, deadline):
        """n PUTs over window connections, one request in flight each."""
        conns = [await HttpConn().connect(self.client[node])
                 for _ in range(window)]
        body = {"key": self.key, "value": self.value}
        left = [n]

        async def worker(c):
            done = 0
            while left[0] > 0 and time.monotonic() < deadline:
                left[0] -= 1
                await c.post(b"/v3/kv/put", body)
                done += 1
            return done
        try:
            return sum(await asyncio.gather(*(worker(c) for c in conns)))
        finally:
            for c in conns:
                c.close()

    async def restart(self, i):
        self.start_node(i)
        await wait_port(self.client[i], 30)
        await self.healthy()

    def kill(self, i):
        self.procs.kill9("e%d" % i)


# ---- the measurements ---------------------------------------------------

async def pipeline(p, leader, pub, close, n, a):
    """n messages with up to a["window"] unacknowledged, through pub (etcd:
    its own connections); closes the publisher. Returns how many went out
    before a["max_s"] ran out."""
    deadline = time.monotonic() + a["max_s"]
    if isinstance(p, Etcd):
        close()
        return await p.pipe(leader, n, a["window"], deadline)
    inflight = asyncio.Semaphore(a["window"])
    futs = []
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        await asyncio.wait_for(inflight.acquire(), 30)
        f = await pub(wait=False)
        f.add_done_callback(lambda _f: inflight.release())
        futs.append(f)
    await asyncio.wait_for(asyncio.gather(*futs), 60)
    close()
    return len(futs)


async def measure(p, a):
    res = {"peer": p.name}
    t = time.monotonic()
    await p.start()
    res["startup_s"] = round(time.monotonic() - t, 1)
    leader = await p.leader()
    if leader is None:
        raise RuntimeError("%s: no leader" % p.name)
    res["leader"] = leader
    log(p.name, "up in %.1fs, leader node %d" % (res["startup_s"], leader))

    if a["pipe_warmup"] > 0:
        pub, close = await p.publisher(leader)
        t0 = time.monotonic()
        done = await pipeline(p, leader, pub, close, a["pipe_warmup"], a)
        log(p.name, "pipelined warm-up: %d messages in %.1fs"
            % (done, time.monotonic() - t0))

    pub, close = await p.publisher(leader)
    lat = []
    deadline = time.monotonic() + a["max_s"]
    for k in range(a["warmup"] + a["seq"]):
        if time.monotonic() > deadline:
            break
        t0 = time.perf_counter_ns()
        await asyncio.wait_for(pub(), 10)
        if k >= a["warmup"]:
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
    lat.sort()
    res["seq"] = {"n": len(lat), "p50_us": pct(lat, 0.5),
                  "p90_us": pct(lat, 0.9), "p99_us": pct(lat, 0.99),
                  "max_us": lat[-1] if lat else None}
    if a["lat"]:
        with open(a["lat"], "w") as f:
            f.write("".join("%.1f\n" % v for v in lat))
    log(p.name, "seq p50 %.0f us p99 %.0f us" % (res["seq"]["p50_us"],
                                                  res["seq"]["p99_us"]))

    t0 = time.monotonic()
    done = await pipeline(p, leader, pub, close, a["pipe"], a)
    secs = time.monotonic() - t0
    res["pipe"] = {"n": done, "window": a["window"], "secs": round(secs, 3),
                   "msgs_per_s": round(done / secs, 1) if secs > 0 else None}
    log(p.name, "pipe %.0f msgs/s" % res["pipe"]["msgs_per_s"])

    rto = []
    for trial in range(a["trials"]):
        leader = await p.leader()
        if leader is None:
            log(p.name, "trial %d: no leader, skipped" % trial)
            continue
        client = (leader + 1) % 3
        pub, close = await p.publisher(client)
        await asyncio.wait_for(pub(), 10)
        t0 = time.monotonic()
        p.kill(leader)
        ok = False
        attempts = 0
        while time.monotonic() - t0 < 60:
            attempts += 1
            try:
                await asyncio.wait_for(pub(), ATTEMPT_S)
                ok = True
                break
            except (asyncio.TimeoutError, OSError, ConnectionError,
                    RuntimeError):
                close()
                await asyncio.sleep(0.01)
                try:
                    pub, close = await p.publisher(client)
                except (asyncio.TimeoutError, OSError, ConnectionError,
                        RuntimeError):
                    pass
        ms = (time.monotonic() - t0) * 1000
        close()
        log(p.name, "trial %d: killed node %d, %s after %.0f ms "
            "(%d attempts)" % (trial + 1, leader,
                               "next ack" if ok else "NO ack", ms, attempts))
        if ok:
            rto.append(ms)
        await p.restart(leader)
    rto.sort()
    res["failover"] = {"trials": a["trials"], "ok": len(rto),
                       "samples_ms": [round(x) for x in rto],
                       "median_ms": pct(rto, 0.5),
                       "min_ms": rto[0] if rto else None,
                       "max_ms": rto[-1] if rto else None}
    return res


def main(argv):
    a = {"seq": 2000, "warmup": 200, "pipe": 20000, "window": 256,
         "pipe_warmup": 0, "trials": 3, "lat": None, "dir": None,
         "base": 23100, "max_s": 120}
    keys = {"--seq": "seq", "--warmup": "warmup", "--pipe": "pipe",
            "--pipe-warmup": "pipe_warmup",
            "--window": "window", "--trials": "trials", "--lat": "lat",
            "--dir": "dir", "--base-port": "base", "--max-s": "max_s"}
    if len(argv) < 2 or argv[1] not in ("nats", "rabbitmq", "etcd"):
        print(__doc__, file=sys.stderr)
        return 2
    i = 2
    while i < len(argv):
        k = keys.get(argv[i])
        if k is None or i + 1 >= len(argv):
            print(__doc__, file=sys.stderr)
            return 2
        a[k] = argv[i + 1] if k in ("lat", "dir") else int(argv[i + 1])
        i += 2
    if not a["dir"]:
        print("peers: --dir is required", file=sys.stderr)
        return 2
    os.makedirs(a["dir"], exist_ok=True)
    procs = Procs(a["dir"])
    cls = {"nats": Nats, "rabbitmq": Rabbit, "etcd": Etcd}[argv[1]]
    p = cls(procs, a["dir"], a["base"])

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    task = loop.create_task(measure(p, a))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    rc = 0
    try:
        res = loop.run_until_complete(task)
    except (asyncio.CancelledError, Exception) as e:  # report, tear down
        res = {"peer": argv[1], "error": "%s: %s" % (type(e).__name__, e)}
        rc = 1
    finally:
        for t in asyncio.all_tasks(loop):  # readers of open connections
            t.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        if isinstance(p, Rabbit):
            p.stop()
        procs.stop_all()
    print(json.dumps(res), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
