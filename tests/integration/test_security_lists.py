#!/usr/bin/env python3
"""Paged security lists (proto.h USER_LIST / ACL_LIST / NAMESPACE_LIST,
docs/AUTH.md): 1,200 users with long names, 300 namespaces and 600 grants,
created pipelined over one admin connection, are listed whole, every entry
once and in order, by `tern user list --json`, `tern acl list --json` and
`tern namespace list --json`, with small pages (list_page_max 150 and
max_frame_bytes 32K: the user and grant pages are cut by bytes, the
namespace pages by count). `tern acl list USER` lists that user's grants
only. Raw requests: a paged page holds at most the page bounds and says
more = 1, a page after a grant cursor starts right after it, and an older
client's unpaged request is answered TERN_ELIMIT naming max_frame_bytes."""
import json
import os
import struct
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402
import auth_util as a  # noqa: E402

N_USERS, N_NS, N_GRANTS = 1200, 300, 600
PAGE_MAX = 150
MAX_FRAME = 32 * 1024
PASSWORD = "admin-pw"


def user_name(i):
    return "u%04d.%s" % (i, "x" * 110)


def ns_name(i):
    return "ns%03d.%s" % (i, "y" * 50)


def grant(k):
    return (user_name(k // 3), ns_name((k * 7) % N_NS), "p%03d*" % k,
            1 + k % 15)


def pipelined(c, k, what, frames):
    """Send frames (op, body) on connection k at once, then read every
    answer; checks that all succeeded."""
    k.sock.sendall(b"".join(h.encode_frame(op, body, request_id=i + 1)
                            for i, (op, body) in enumerate(frames)))
    ok = 0
    bad = None
    for _ in frames:
        f = h.recv_frame(k.sock, timeout=120)
        if not isinstance(f, h.Frame):
            bad = f
            break
        if f.status == 0:
            ok += 1
        elif bad is None:
            bad = (f.status, f.error_message())
    c.check(ok == len(frames), "%d %s" % (len(frames), what), bad)


def create_all(c, k):
    binary, _ = a.cred("user-pw")
    c.step("create %d users, %d namespaces, %d grants, pipelined" %
           (N_USERS, N_NS, N_GRANTS))
    pipelined(c, k, "users set", [
        (a.OP["USER_SET"],
         h.put_str(user_name(i)) +
         (struct.pack("<I", 0) + h.put_blob(binary) if i % 2 == 0 else
          struct.pack("<I", a.USER_CERT) + h.put_blob(b"")))
        for i in range(N_USERS)])
    pipelined(c, k, "namespaces set", [
        (a.OP["NAMESPACE_SET"],
         h.put_str(ns_name(i)) + struct.pack("<QQQ", i, 0, 0))
        for i in range(N_NS)])
    pipelined(c, k, "grants set", [
        (a.OP["ACL_SET"],
         h.put_str(u) + h.put_str(n) + h.put_str(p) + struct.pack("<I", m))
        for u, n, p, m in (grant(g) for g in range(N_GRANTS))])


def cli_json(c, cl, login, *args):
    r = cl.tern(*(login + list(args)), timeout=180)
    c.check(r.returncode == 0, "tern %s: exit 0" % " ".join(args),
            r.stderr.strip()[-300:])
    try:
        return json.loads(r.stdout)
    except ValueError:
        c.check(False, "tern %s: JSON output" % " ".join(args),
                r.stdout[:300])
        return {}


def cli_lists(c, cl, login):
    c.step("the CLI lists every entry, in order, page by page")
    js = cli_json(c, cl, login, "user", "list", "--json")
    got = [u["name"] for u in js.get("users", [])]
    want = sorted([user_name(i) for i in range(N_USERS)] + ["admin"])
    c.check(got == want, "user list: %d users, each once, in order" %
            len(want), "%d listed" % len(got))
    pw = {u["name"]: u["password"] for u in js.get("users", [])}
    c.check(pw.get(user_name(0)) is True and pw.get(user_name(1)) is False,
            "user list: the password flag of each user")

    js = cli_json(c, cl, login, "acl", "list", "--json")
    got = [(g["user"], g["namespace"], g["pattern"])
           for g in js.get("grants", [])]
    want = sorted(grant(g)[:3] for g in range(N_GRANTS))
    c.check(got == want, "acl list: %d grants, each once, in order" %
            len(want), "%d listed" % len(got))

    js = cli_json(c, cl, login, "acl", "list", user_name(7), "--json")
    got = [(g["user"], g["namespace"], g["pattern"])
           for g in js.get("grants", [])]
    want = sorted(grant(g)[:3] for g in range(21, 24))
    c.check(got == want, "acl list USER: that user's 3 grants", got)

    js = cli_json(c, cl, login, "namespace", "list", "--json")
    got = [(n["name"], n["max_queues"]) for n in js.get("namespaces", [])]
    want = sorted([(ns_name(i), i) for i in range(N_NS)] + [("default", 0)])
    c.check(got == want, "namespace list: %d namespaces, each once, in "
            "order, with their quotas" % len(want), "%d listed" % len(got))


def list_body(b):
    """(n, more or None) of a list answer whose entries are not parsed:
    the more byte is the last byte of a paged answer."""
    (n,) = struct.unpack_from("<I", b, 0)
    return n, b[-1]


def raw_requests(c, k):
    c.step("raw list requests")
    st, b = k.rpc("USER_LIST", h.put_str("") + struct.pack("<I", 0))
    ok = st == 0
    if ok:
        n, more = list_body(b)
        ok = 0 < n < PAGE_MAX and more == 1 and len(b) <= MAX_FRAME // 2
    c.check(ok, "USER_LIST page: cut by bytes (under half of "
            "max_frame_bytes), more = 1", (st, len(b) if b else None))

    st, b = k.rpc("NAMESPACE_LIST", h.put_str("") + struct.pack("<I", 0))
    ok = st == 0 and list_body(b) == (PAGE_MAX, 1)
    c.check(ok, "NAMESPACE_LIST page: list_page_max entries, more = 1",
            (st, list_body(b) if st == 0 else b))

    cursor = sorted(grant(g)[:3] for g in range(N_GRANTS))[99]
    want = sorted(grant(g)[:3] for g in range(N_GRANTS))[100:102]
    st, b = k.rpc("ACL_LIST", h.put_str("") + b"".join(
        h.put_str(s) for s in cursor) + struct.pack("<I", 2))
    got = []
    if st == 0:
        at = 4
        for _ in range(struct.unpack_from("<I", b, 0)[0]):
            u, at = a.get_str(b, at)
            n, at = a.get_str(b, at)
            p, at = a.get_str(b, at)
            at += 4
            got.append((u, n, p))
    c.check(st == 0 and got == want and b[-1] == 1,
            "ACL_LIST after the 100th grant: the 101st and 102nd, more = 1",
            (st, got))

    st, m = k.rpc("USER_LIST")
    c.check(st == a.ELIMIT and "max_frame_bytes" in (m or ""),
            "an older client's unpaged USER_LIST: TERN_ELIMIT", (st, m))
    st, m = k.rpc("ACL_LIST", h.put_str(user_name(7)))
    ok = st == 0 and struct.unpack_from("<I", m, 0)[0] == 3
    c.check(ok, "an older client's unpaged ACL_LIST of one user: "
            "its 3 grants", st)


def main(c):
    limits = {"max_message_bytes": "16K", "max_frame_bytes": "32K",
              "list_page_max": PAGE_MAX}
    with a.admin_cluster(n=1, password=PASSWORD, limits=limits) as cl, \
            tempfile.TemporaryDirectory() as tmp:
        cl.start()
        k = a.wait_admin(cl, PASSWORD)
        c.check(k is not None, "admin logs in")
        if k is None:
            return
        k.timeout = 120
        create_all(c, k)
        pwfile = os.path.join(tmp, "pw")
        with open(os.open(pwfile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(PASSWORD + "\n")
        cli_lists(c, cl, ["--user", "admin", "--password-file", pwfile])
        raw_requests(c, k)
        k.close()
        c.check(cl.nodes[1].alive(), "node still running")
        cl.report_sanitizer()


if __name__ == "__main__":
    h.run_test(main)
