"""A client of the authentication and security metadata ops written from
the protocol (proto/include/proto.h ops 10..21, docs/AUTH.md) and RFC 5802
/ RFC 7677 with Python's own hashlib and hmac, independent of libtern: the
integration tests check ternd against it. Credentials use the binary form
of auth/scram.c (version 1)."""
import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct

import tern_harness as h

OP = dict(h.OP)
OP.update({"USER_SET": 10, "USER_DELETE": 11, "USER_LIST": 12,
           "ACL_SET": 13, "ACL_DELETE": 14, "ACL_LIST": 15,
           "NAMESPACE_SET": 16, "NAMESPACE_DELETE": 17,
           "NAMESPACE_LIST": 18, "PRODUCER_INIT": 19,
           "AUTH_START": 20, "AUTH_CONTINUE": 21})
EAUTH, EDENIED, ELIMIT, EQUOTA, ETHROTTLED = (-31022, -31023, -31024,
                                              -31025, -31026)
ENOTFOUND, EINVAL, EBADNAME = -31028, -31018, -31017
ENOQUEUE, ENOTLEADER, EBUSY = -31007, -31001, -31014
NAMES = dict(h.ERR)
NAMES.update({EAUTH: "TERN_EAUTH", EDENIED: "TERN_EDENIED",
              EQUOTA: "TERN_EQUOTA", ETHROTTLED: "TERN_ETHROTTLED",
              ENOTFOUND: "TERN_ENOTFOUND"})
PERM = {"produce": 1, "consume": 2, "manage": 4, "admin": 8}
USER_ADMIN, USER_CERT = 1, 2
ITERATIONS = 4096


def _hmac(key, msg):
    return hmac.new(key, msg, hashlib.sha256).digest()


def salted(password, salt, iterations=ITERATIONS):
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)


def cred(password, salt=None, iterations=ITERATIONS):
    """(binary credential, text credential) of password."""
    salt = salt or os.urandom(16)
    sp = salted(password, salt, iterations)
    stored = hashlib.sha256(_hmac(sp, b"Client Key")).digest()
    server = _hmac(sp, b"Server Key")
    body = (struct.pack("<BBBBI", 1, 1, len(salt), 0, iterations) + salt +
            stored + server)
    binary = body + struct.pack("<I", h.tern_checksum32(body))
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    text = "SCRAM-SHA-256$%d:%s$%s:%s" % (iterations, b64(salt), b64(stored),
                                          b64(server))
    return binary, text


def get_str(b, at):
    (n,) = struct.unpack_from("<H", b, at)
    return b[at + 2:at + 2 + n].decode(), at + 2 + n


def get_blob(b, at):
    (n,) = struct.unpack_from("<I", b, at)
    return b[at + 4:at + 4 + n], at + 4 + n


class Conn:
    """One client connection to a node (plaintext, or TLS with tls=
    (cafile, certfile, keyfile or None))."""

    def __init__(self, nd, tls=None, timeout=10):
        s = socket.create_connection(("127.0.0.1", nd.client_port),
                                     timeout=timeout)
        if tls is not None:
            ctx = ssl.create_default_context(cafile=tls[0])
            ctx.check_hostname = False
            if tls[1] is not None:
                ctx.load_cert_chain(tls[1], tls[2])
            s = ctx.wrap_socket(s)
        self.sock = s
        self.rid = 0
        self.timeout = timeout

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def rpc(self, op, body=b""):
        """(status, body or error message); (None, None) when closed."""
        self.rid += 1
        if isinstance(op, str):
            op = OP[op]
        try:
            self.sock.sendall(h.encode_frame(op, body, request_id=self.rid))
        except OSError:
            return None, None
        f = h.recv_frame(self.sock, timeout=self.timeout)
        if f is None:
            return None, None
        if f.status != 0:
            return f.status, f.error_message()
        return 0, f.body

    def closed(self, timeout=5):
        return h.wait_closed(self.sock, timeout)

    # authentication --------------------------------------------------------
    def scram(self, user, password, ns="", nonce=None, tamper=False):
        """SCRAM-SHA-256 exchange: (status, message). Checks the server's
        signature when the exchange succeeds (status 0, "ok")."""
        cnonce = nonce or base64.b64encode(os.urandom(18)).decode()
        bare = "n=%s,r=%s" % (user, cnonce)
        first = "n,," + bare
        st, b = self.rpc("AUTH_START", h.put_str("SCRAM-SHA-256") +
                         h.put_str(ns) + h.put_blob(first.encode()))
        if st != 0:
            return st, b
        server_first, _ = get_blob(b, 0)
        server_first = server_first.decode()
        attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
        if not attrs["r"].startswith(cnonce):
            return "bad-nonce", server_first
        salt = base64.b64decode(attrs["s"])
        it = int(attrs["i"])
        sp = salted(password, salt, it)
        ckey = _hmac(sp, b"Client Key")
        stored = hashlib.sha256(ckey).digest()
        final_bare = "c=biws,r=%s" % attrs["r"]
        auth_msg = ",".join([bare, server_first, final_bare]).encode()
        sig = _hmac(stored, auth_msg)
        proof = bytes(a ^ b for a, b in zip(ckey, sig))
        if tamper:
            proof = bytes([proof[0] ^ 1]) + proof[1:]
        final = final_bare + ",p=" + base64.b64encode(proof).decode()
        st, b = self.rpc("AUTH_CONTINUE", h.put_blob(final.encode()))
        if st != 0:
            return st, b
        server_final, _ = get_blob(b, 0)
        want = base64.b64encode(
            _hmac(_hmac(sp, b"Server Key"), auth_msg)).decode()
        if server_final.decode() != "v=" + want:
            return "bad-server-signature", server_final
        return 0, "ok"

    def scram_first(self, user, ns=""):
        """Only AUTH_START: (status, {attr: value} of server-first)."""
        first = "n,,n=%s,r=%s" % (user, "abcdefghijklmnopqrstuvwx")
        st, b = self.rpc("AUTH_START", h.put_str("SCRAM-SHA-256") +
                         h.put_str(ns) + h.put_blob(first.encode()))
        if st != 0:
            return st, b
        sf, _ = get_blob(b, 0)
        return 0, dict(kv.split("=", 1) for kv in sf.decode().split(","))

    def external(self, user="", ns=""):
        return self.rpc("AUTH_START", h.put_str("EXTERNAL") + h.put_str(ns) +
                        h.put_blob(user.encode()))

    # admin ops -------------------------------------------------------------
    def user_set(self, name, password=None, flags=0, raw=None):
        c = raw if raw is not None else (cred(password)[0] if password
                                         else b"")
        return self.rpc("USER_SET", h.put_str(name) +
                        struct.pack("<I", flags) + h.put_blob(c))

    def user_delete(self, name):
        return self.rpc("USER_DELETE", h.put_str(name))

    def users(self):
        st, b = self.rpc("USER_LIST")
        if st != 0:
            return st, b
        (n,) = struct.unpack_from("<I", b, 0)
        at, out = 4, []
        for _ in range(n):
            name, at = get_str(b, at)
            flags, has = struct.unpack_from("<IB", b, at)
            at += 5
            out.append((name, flags, has))
        return 0, out

    def acl_set(self, user, ns, pattern, perms):
        bits = perms if isinstance(perms, int) else sum(
            PERM[p] for p in perms.split(","))
        return self.rpc("ACL_SET", h.put_str(user) + h.put_str(ns) +
                        h.put_str(pattern) + struct.pack("<I", bits))

    def namespace_set(self, ns, max_queues=0, max_bytes=0, rate=0):
        return self.rpc("NAMESPACE_SET", h.put_str(ns) +
                        struct.pack("<QQQ", max_queues, max_bytes, rate))

    def namespace_delete(self, ns):
        return self.rpc("NAMESPACE_DELETE", h.put_str(ns))

    # queue ops -------------------------------------------------------------
    def create(self, q):
        return self.rpc("QUEUE_CREATE", h.put_str(q))

    def delete(self, q):
        return self.rpc("QUEUE_DELETE", h.put_str(q))

    def produce(self, q, msgs, pid=0, seq=0):
        body = (h.put_str(q) + struct.pack("<QQI", pid, seq, len(msgs)) +
                b"".join(h.put_blob(m) for m in msgs))
        return self.rpc("PRODUCE", body)

    def fetch(self, q, offset=0, max_msgs=100):
        st, b = self.rpc("FETCH", h.put_str(q) +
                         struct.pack("<QIII", offset, max_msgs, 1 << 20, 0))
        if st != 0:
            return st, b
        _, _, n = struct.unpack_from("<QQI", b, 0)
        at, out = 20, []
        for _ in range(n):
            at += 16
            m, at = get_blob(b, at)
            out.append(m)
        return 0, out

    def group_fetch(self, q, g):
        return self.rpc("GROUP_FETCH", h.put_str(q) + h.put_str(g) +
                        struct.pack("<III", 10, 1 << 20, 0))

    def group_commit(self, q, g, off):
        return self.rpc("GROUP_COMMIT", h.put_str(q) + h.put_str(g) +
                        struct.pack("<Q", off))

    def queues(self):
        """Names of a paged QUEUE_LIST walk, or (status, message)."""
        names, after = [], ""
        for _ in range(1000):
            st, b = self.rpc("QUEUE_LIST", h.put_str(after) +
                             struct.pack("<I", 0))
            if st != 0:
                return st, b
            (n,) = struct.unpack_from("<I", b, 0)
            at = 4
            for _ in range(n):
                name, at = get_str(b, at)
                at += 16
                names.append(name)
            if b[at] == 0 or n == 0:
                return 0, names
            after = names[-1]
        return "too-many-pages", names

    def producer_init(self):
        st, b = self.rpc("PRODUCER_INIT")
        if st != 0:
            return st, b
        return 0, struct.unpack_from("<Q", b, 0)[0]

    def stats(self, reset=False):
        return self.rpc("STATS", struct.pack("<B", 1 if reset else 0))


def admin_cluster(n=3, password="admin-pw", **kw):
    """A cluster with client_auth on and a bootstrap admin "admin"."""
    _, text = cred(password)
    sec = {"client_auth": "on", "bootstrap_admin": "admin",
           "bootstrap_admin_cred": text}
    sec.update(kw.pop("security", {}))
    return h.Cluster(n=n, security=sec, **kw)


def leader_conn(c, timeout=20):
    """A connection to the writable leader."""
    lid = c.wait_leader(timeout=timeout)
    if lid is None:
        raise h.Skip("no leader")
    return Conn(c.nodes[lid])


def login(c, user, password, ns="", node=None):
    """An authenticated connection to the leader (or node)."""
    nd = c.nodes[node] if node is not None else c.nodes[c.wait_leader()]
    k = Conn(nd)
    st, m = k.scram(user, password, ns)
    if st != 0:
        k.close()
        raise AssertionError("login %s: %s %s" % (user, st, m))
    return k


def wait_admin(c, password="admin-pw", timeout=20):
    """Log in as the bootstrap admin on the leader once it is there."""
    def try_login():
        lid = c.leader()
        if lid is None:
            return None
        k = Conn(c.nodes[lid])
        st, _ = k.scram("admin", password)
        if st == 0:
            return k
        k.close()
        return None
    return h.poll(try_login, timeout, interval=0.2)
