#!/usr/bin/env python3
"""A data directory of the earlier release (fixtures/old-504d751.tar.xz,
made by fixtures/make-old-data-dir.sh) under this build (docs/MESSAGES.md,
"Compatibility"): every message of the fixture's manifest reads back at its
offset with its bytes, the group offset and the user's password are kept,
the old queues have no limits and nothing is trimmed by retention passes,
new produces with properties and the trace of an old message work, a
rolling restart of every node under a produce load (followers first, the
leader last after a leadership transfer: docs/OPERATIONS.md, "Upgrades")
has zero client errors, loses and duplicates nothing and keeps all that,
and `queue update --max-messages` then trims. The fixture's commit-log
segments stay of version 1, and this build appends only to segments of
version 2 (index/log.c, "Segment versions"): records of version 1 while
the upgraded cluster is not switched ([raft] entry_checksum = auto), of
version 2 (XXH3) once every node ran with entry_checksum = xxh3, and
still after a restart in auto. Then a
copy of one node's directory with a segment header of an unknown version
(checksum recomputed) is refused at start, naming the file and the
version, and left byte-identical."""
import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_util  # noqa: E402
import tern_harness as th  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "fixtures", "old-504d751.tar.xz")


def ports_free(ports):
    for p in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As ternd binds (libuv sets SO_REUSEADDR): a port whose
            # connections of a previous run are in TIME_WAIT is free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def adopt_configs(cl, root, man):
    """Point the harness's nodes at the fixture's configs: the fixture's
    cluster directory prefix becomes root (nothing else of the earlier
    config changes but one [node] key, a short retention interval)."""
    base = man["base_port"]
    for i, nd in cl.nodes.items():
        with open(os.path.join(root, "node%d.ini" % i)) as f:
            text = f.read().replace(man["cluster_dir"], root)
        text = text.replace("[node]\n",
                            "[node]\nretention_interval_ms = 100\n", 1)
        nd.config = os.path.join(root, "node%d.ini" % i)
        with open(nd.config, "w") as f:
            f.write(text)
        nd.data_dir = os.path.join(root, "node%d" % i)
        nd.client_port, nd.raft_port = base + i, base + 100 + i
        nd.client_addr = "127.0.0.1:%d" % nd.client_port
        nd.raft_addr = "127.0.0.1:%d" % nd.raft_port


def payload_bytes(m):
    """A consume --json message's payload: a UTF-8 string, or base64 when
    "payload_encoding" says so (tern.1, --format json)."""
    if m.get("payload_encoding") == "base64":
        return base64.b64decode(m["payload"])
    return m["payload"].encode("utf-8")


def read_queue(cl, q, n, login):
    """Every message of q from offset 0 as {offset: bytes} (bounded)."""
    got = {}
    for _ in range(50):
        if len(got) >= n:
            break
        r = cl.tern(*login, "consume", q, "--offset", len(got), "--max",
                    n - len(got), "--json", timeout=60)
        if r.returncode != 0:
            break
        lines = [json.loads(ln) for ln in r.stdout.splitlines() if ln]
        if not lines:
            break
        for m in lines:
            got[m["offset"]] = payload_bytes(m)
    return got


def check_contents(c, cl, man, login_ns, where):
    for key, q in sorted(man["queues"].items()):
        login = login_ns if q["namespace"] != "default" else []
        got = read_queue(cl, q["queue"], q["count"], login)
        bad = [m["offset"] for m in q["messages"]
               if hashlib.sha256(got.get(m["offset"], b"?")).hexdigest()
               != m["sha256"]]
        c.check(len(got) == q["count"] and not bad,
                "%s: %s: %d messages at their offsets with their bytes" %
                (where, key, q["count"]),
                "read %d, differing offsets %s" % (len(got), bad[:10]))


def queue_info(cl, q, login=()):
    r = cl.tern(*login, "queue", "info", q, "--json")
    try:
        return json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:
        return None


def check_state(c, cl, man, login_ns, pwfile, where):
    check_contents(c, cl, man, login_ns, where)
    g = man["groups"][0]
    r = cl.tern("consume", g["queue"], "--group", g["group"], "--max", 1)
    c.check(r.returncode == 0 and r.stdout.startswith(
        "%d\t" % g["next_offset"]), "%s: group %s still at %d" %
        (where, g["group"], g["next_offset"]), r.stdout[:60] + r.stderr)
    u = man["users"][0]
    r = cl.tern("--user", u["name"], "--password-file", pwfile, "consume",
                "plain", "--offset", 0, "--max", 1)
    c.check(r.returncode == 0, "%s: %s logs in with the password" %
            (where, u["name"]), r.stderr)
    for key, q in sorted(man["queues"].items()):
        login = login_ns if q["namespace"] != "default" else []
        qi = queue_info(cl, q["queue"], login)
        c.check(qi and qi["max_age_ms"] == 0 and qi["max_bytes"] == 0 and
                qi["max_messages"] == 0 and qi["start_offset"] == 0,
                "%s: %s has no limits and nothing trimmed" % (where, key), qi)


def tree_hashes(d):
    out = {}
    for dp, _, files in os.walk(d):
        for fn in files:
            p = os.path.join(dp, fn)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = hashlib.sha256(
                    f.read()).hexdigest()
    return out


def log_versions(node_dir):
    """([(segment file, header version, size)], [record versions in log
    order])
    of a node's commit log (index/log.c), read from the files: the
    records are walked from the first segment's start (a record boundary
    while nothing was trimmed, as in this test)."""
    seg_dir = os.path.join(node_dir, "index", "log")
    segs, stream = [], b""
    for f in sorted(x for x in os.listdir(seg_dir) if x.endswith(".seg")):
        with open(os.path.join(seg_dir, f), "rb") as fh:
            b = fh.read()
        segs.append((f, int.from_bytes(b[8:12], "little"), len(b)))
        stream += b[32:]
    recs, pos = [], 0
    while pos + 24 <= len(stream) and stream[pos:pos + 4] == b"TRCR":
        recs.append(int.from_bytes(stream[pos + 4:pos + 6], "little"))
        pos += 24 + int.from_bytes(stream[pos + 16:pos + 20], "little")
    return segs, recs


def check_log_versions(c, cl, root, old, since, want, what):
    """Every node's log: the fixture's segments (old[i]: log_versions at
    the start) unchanged, still version 1 and never appended to, this
    build's segments version 2, and (polled: a follower may lag) records
    after the first since[i] ones, all of version want. Returns the
    record counts."""
    counts = {}
    for i in (1, 2, 3):
        d = os.path.join(root, "node%d" % i)
        got = th.poll(lambda: (lambda v: v if len(v[1]) > since[i] and all(
            r == want for r in v[1][since[i]:]) else None)(log_versions(d)),
            20)
        segs, recs = got or log_versions(d)
        counts[i] = len(recs)
        c.check(got is not None, "node %d, %s: %d new records, all version %d"
                % (i, what, len(recs) - since[i], want),
                recs[since[i]:][-5:])
        old_segs = old[i][0]
        n = len(old_segs)
        c.check(segs[:n] == old_segs and all(s[1] == 1 for s in segs[:n])
                and len(segs) > n and all(s[1] == 2 for s in segs[n:]),
                "node %d, %s: the fixture's %d segments are unchanged, "
                "version 1; this build's are version 2" % (i, what, n),
                segs)
    return counts


def refusal(c, cl, root, man, ternd):
    c.step("refusal: a segment header of an unknown version")
    copy = os.path.join(root, "refused")
    shutil.copytree(os.path.join(root, "node1"), copy, symlinks=True)
    os.chmod(copy, 0o700)
    seg_dir = os.path.join(copy, "index", "log")
    seg = sorted(f for f in os.listdir(seg_dir) if f.endswith(".seg"))[0]
    path = os.path.join(seg_dir, seg)
    with open(path, "r+b") as f:
        hdr = bytearray(f.read(32))
        hdr[8:12] = (7).to_bytes(4, "little")
        hdr[28:32] = th.tern_checksum32(bytes(hdr[:28])).to_bytes(4,
                                                                   "little")
        f.seek(0)
        f.write(hdr)
    before = tree_hashes(copy)
    with open(os.path.join(root, "node1.ini")) as f:
        conf = f.read().replace(os.path.join(root, "node1") + "\n",
                                copy + "\n")
    cpath = os.path.join(root, "refused.ini")
    with open(cpath, "w") as f:
        f.write(conf)
    try:
        r = subprocess.run([ternd, "--config", cpath], capture_output=True,
                           text=True, timeout=60, errors="replace")
    except subprocess.TimeoutExpired:
        c.check(False, "ternd exits on a segment of an unknown version")
        return
    out = r.stdout + r.stderr
    lines = [ln for ln in out.splitlines() if seg in ln and "7" in ln]
    c.check(r.returncode != 0, "ternd exits non-zero", r.returncode)
    c.check(lines and "version" in lines[0],
            "one log line names the file and the version", out[-800:])
    c.check(tree_hashes(copy) == before,
            "the directory is byte-identical afterwards")


def main():
    c = th.Checks("old_data_dir")
    if not ports_free([27401, 27402, 27403, 27501, 27502, 27503]):
        print("skip: the fixture's ports 27401-27403/27501-27503 are busy")
        return 77
    tmp = tempfile.mkdtemp(prefix="tern-old-")
    try:
        with tarfile.open(FIXTURE) as t:
            t.extractall(tmp)
        with open(os.path.join(tmp, "manifest.json")) as f:
            man = json.load(f)
        root = os.path.join(tmp, "cluster")
        u = man["users"][0]
        pwfile = os.path.join(tmp, "pw")
        with open(pwfile, "w") as f:
            f.write(u["password"] + "\n")
        login_ns = ["--user", u["name"], "--password-file", pwfile,
                    "--namespace", "ns1"]
        old = {i: log_versions(os.path.join(root, "node%d" % i))
               for i in (1, 2, 3)}
        since = {i: len(old[i][1]) for i in (1, 2, 3)}
        with th.Cluster(n=3) as cl:
            adopt_configs(cl, root, man)
            c.step("start this build on the earlier release's directories")
            cl.start(timeout=60)
            check_state(c, cl, man, login_ns, pwfile, "upgraded")
            c.step("retention passes run (every 100 ms): nothing trimmed")
            th.poll(lambda: False, 2.0, interval=0.5)
            check_state(c, cl, man, login_ns, pwfile, "after passes")

            c.step("new produces with properties; trace of an old message")
            r = cl.tern("produce", "plain", "--key", "k1", "--tag", "t1",
                        "--header", "h=v", "--count", 3, "--size", 20)
            c.check(r.returncode == 0, "produce with properties", r.stderr)
            r = cl.tern("message", "get", "plain", "--key", "k1", "--json")
            ms = [json.loads(x) for x in r.stdout.splitlines() if x]
            c.check(sorted(m["offset"] for m in ms) == [240, 241, 242] and
                    all(m.get("tag") == "t1" for m in ms),
                    "read back by key at 240..242",
                    r.stdout[:300] + r.stderr)
            r = cl.tern("message", "trace", "plain", 5, "--json")
            tr = json.loads(r.stdout) if r.returncode == 0 else {}
            c.check(tr.get("raft_index", 0) > 0 and tr.get("term") is None,
                    "trace of offset 5: a raft index, term unknown",
                    r.stdout[:300] + r.stderr)
            r = cl.tern("queue", "info", "plain")
            c.check(r.returncode == 0 and "max age:\tnone" in r.stdout,
                    "queue info says max age none", r.stdout)
            # Upgraded, not switched ([raft] entry_checksum = auto): the
            # new entries stay unflagged, their records version 1, but in
            # a segment of version 2 (index/log.c, "Segment versions").
            since = check_log_versions(c, cl, root, old, since, 1,
                                       "upgraded")

            c.step("rolling restart under a produce load (followers "
                   "first, the leader last after a transfer)")
            cl.tern("queue", "create", "rolling", check=True)
            # Every node restarts with entry_checksum = xxh3: once all run
            # it, the cluster switches to XXH3 entries.
            for nd in cl.nodes.values():
                nd.args = ["--entry-checksum", "xxh3"]
            load = ops_util.ProduceLoad(cl, "rolling", max_s=120).start()
            c.check(load.wait_acks(300, 60), "load running",
                    len(load.acked()))
            ops_util.rolling_restart(cl, c)
            load.wait_acks(len(load.acked()) + 300, 30)
            c.check(load.stop(), "load stopped")
            acked = load.acked()
            c.check(not load.errors, "zero client errors over %d rounds" %
                    load.rounds, load.errors[:3])
            got = cl.consume_all("rolling", expect=len(acked), timeout=60)
            th.check_acked_readable(c, "rolling", got, acked)
            cl.wait_leader(timeout=60)
            check_state(c, cl, man, login_ns, pwfile, "restarted")
            # Records the rolling restart wrote before the last node ran
            # with xxh3 may be of either version: from here on, 2 only.
            since = {i: len(log_versions(os.path.join(root, "node%d" % i))[1])
                     for i in (1, 2, 3)}
            r = cl.tern("produce", "plain", "--count", 2, "--size", 20)
            c.check(r.returncode == 0, "produce once switched", r.stderr)
            since = check_log_versions(c, cl, root, old, since, 2,
                                       "switched")

            c.step("queue update --max-messages trims as on a new queue")
            r = cl.tern("queue", "update", "big", "--max-messages", 10)
            c.check(r.returncode == 0, "update big", r.stderr)
            qi = th.poll(lambda: (lambda q: q if q and q["start_offset"] ==
                                  30 else None)(queue_info(cl, "big")), 60)
            c.check(qi is not None, "big keeps its last 10 messages (30..39)",
                    queue_info(cl, "big"))
            r = cl.tern("consume", "big", "--offset", 30, "--max", 10,
                        "--json")
            got = [json.loads(x) for x in r.stdout.splitlines() if x]
            want = {m["offset"]: m["sha256"] for m in
                    man["queues"]["default/big"]["messages"]}
            c.check(len(got) == 10 and all(
                hashlib.sha256(payload_bytes(m)).hexdigest()
                == want[m["offset"]] for m in got),
                "the retained ones are intact")

            c.step("restarted with entry_checksum = auto: stays switched")
            for i in cl.nodes:
                cl.stop(i)
                cl.nodes[i].args = []
            cl.start(timeout=60)
            r = cl.tern("produce", "plain", "--count", 2, "--size", 20)
            c.check(r.returncode == 0, "produce after the restart", r.stderr)
            check_log_versions(c, cl, root, old, since, 2, "auto")
            for i in cl.nodes:
                cl.stop(i)
            refusal(c, cl, root, man, cl.ternd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
