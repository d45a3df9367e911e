#!/usr/bin/env python3
"""The [metrics] endpoint of 3 real ternd nodes on loopback ports, each
asking for a bearer token: every /metrics answer is checked by a small
parser of the Prometheus text format 0.0.4 (families declared before their
samples, label escaping, cumulative histogram buckets, +Inf == _count).
Then: 401 without (or with a wrong) token; healthz and readyz 200
everywhere; N produced messages grow the leader's produce counters by N
and its latency histogram; the commit index grows on every node; exactly
one node's role gauge says leader; the leader reports the lag of both
peers; the queue's depth is N on every node; a group's lag shrinks after
a consume with a group commit; after a kill of the leader the survivors'
readyz is 200 again with a new leader; a node started alone (no quorum)
answers readyz 503 "no leader"; a token file readable by others stops
ternd at start with exit code 2. The raft log store's series: its name
(tern_raft_log_store_info) and no torn tail; on tern's own store (the
default; 64 KiB segments, 32 KiB snapshots here) its writes grow with
produces and, after 2 MB more, forgotten segments are counted and files
of the free list are reused; on raft_uv ($TERN_IT_LOG_STORE=uv) no tern
store counters."""
import math
import os
import re
import sys
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N = 50
TOKEN = "metrics-test-token-6f1c"

# ---- Prometheus text format 0.0.4 -------------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LNAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
SAMPLE = re.compile(r"^(%s)(\{.*\})? (\S+)$" % NAME)
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_labels(s):
    """{a="x",b="y"} -> dict; values unescaped (\\\\, \\", \\n)."""
    out = {}
    i = 1
    while i < len(s) - 1:
        m = re.match(r"(%s)=\"" % LNAME, s[i:])
        if not m:
            raise ValueError("bad label at %r" % s[i:])
        name = m.group(1)
        i += m.end()
        val = []
        while True:
            ch = s[i]
            if ch == "\\":
                nxt = s[i + 1]
                val.append({"\\": "\\", '"': '"', "n": "\n"}[nxt])
                i += 2
            elif ch == '"':
                i += 1
                break
            elif ch == "\n":
                raise ValueError("raw newline in a label value")
            else:
                val.append(ch)
                i += 1
        if name in out:
            raise ValueError("label %s twice" % name)
        out[name] = "".join(val)
        if s[i] == ",":
            i += 1
        elif s[i] != "}":
            raise ValueError("expected , or } at %r" % s[i:])
    return out


def parse_value(v):
    if v in ("+Inf", "-Inf", "NaN"):
        return float(v.replace("Inf", "inf").replace("NaN", "nan"))
    return float(v)


def parse_exposition(text):
    """Returns {name: [(labels dict, value)]} and {family: type}; raises
    ValueError on anything that breaks the format."""
    if not text.endswith("\n"):
        raise ValueError("answer does not end with a newline")
    types, helps, samples = {}, set(), {}
    for line in text.split("\n")[:-1]:
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            if name in helps:
                raise ValueError("HELP twice for %s" % name)
            helps.add(name)
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[3] not in TYPES:
                raise ValueError("bad TYPE line %r" % line)
            if parts[2] in types:
                raise ValueError("TYPE twice for %s" % parts[2])
            if parts[2] in samples:
                raise ValueError("TYPE after samples of %s" % parts[2])
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#") or line == "":
            raise ValueError("unexpected line %r" % line)
        m = SAMPLE.match(line)
        if not m:
            raise ValueError("bad sample line %r" % line)
        name, labels, value = m.group(1), m.group(2), m.group(3)
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and types.get(base) == "histogram":
                family = base
        if family not in types:
            raise ValueError("sample of %s before its TYPE" % name)
        samples.setdefault(name, []).append(
            (parse_labels(labels) if labels else {}, parse_value(value)))
    for fam, t in types.items():
        if t != "histogram":
            continue
        groups = {}
        for labels, v in samples.get(fam + "_bucket", []):
            key = tuple(sorted((k, x) for k, x in labels.items()
                               if k != "le"))
            groups.setdefault(key, []).append((parse_value(labels["le"]), v))
        for key, buckets in groups.items():
            les = [b[0] for b in buckets]
            if les != sorted(les) or les[-1] != math.inf:
                raise ValueError("%s buckets out of order or no +Inf" % fam)
            counts = [b[1] for b in buckets]
            if counts != sorted(counts):
                raise ValueError("%s buckets not cumulative" % fam)
            count = [v for lb, v in samples.get(fam + "_count", [])
                     if tuple(sorted(lb.items())) == key]
            if count != [counts[-1]]:
                raise ValueError("%s_count %s != +Inf bucket %s" %
                                 (fam, count, counts[-1]))
            if not [v for lb, v in samples.get(fam + "_sum", [])
                    if tuple(sorted(lb.items())) == key]:
                raise ValueError("%s_sum missing" % fam)
    return samples, types


def value(samples, name, **labels):
    """The value of the one sample of name with these labels, or None."""
    for lb, v in samples.get(name, []):
        if all(lb.get(k) == x for k, x in labels.items()):
            return v
    return None


# ---- HTTP ----------------------------------------------------------------------

def get(port, path, token=TOKEN, timeout=5):
    """(status, body text) of GET http://127.0.0.1:port/path; (None, err)
    when nothing answers."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def main(c):
    # tern's store (the default for new data dirs) with 64 KiB segments
    # and 32 KiB snapshots, so that segments are forgotten and recycled.
    tern_store = os.environ.get("TERN_IT_LOG_STORE", "tern") == "tern"
    raft = ({"snapshot_threshold_bytes": 32768, "snapshot_trailing": 8,
             "segment_bytes": "64K"} if tern_store else {})
    with h.Cluster(3, raft=raft) as cl:
        ports = dict(zip(sorted(cl.nodes), h.free_ports(3)))
        token_file = os.path.join(cl.dir, "metrics.token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(token_file, 0o600)
        for i, nd in cl.nodes.items():
            with open(nd.config, "a") as f:
                f.write("\n[metrics]\nlisten = 127.0.0.1:%d\n"
                        "token_file = %s\nmax_connections = 8\n" %
                        (ports[i], token_file))
        parse_errors = []

        def scrape(i):
            st, body = get(ports[i], "/metrics")
            if st != 200:
                return None
            try:
                return parse_exposition(body)[0]
            except (ValueError, KeyError, IndexError) as e:
                parse_errors.append("node %d: %s" % (i, e))
                return None

        c.step("start 3 nodes with [metrics] on loopback ports %s" %
               sorted(ports.values()))
        leader = cl.start()
        cl.tern("queue", "create", "q", check=True)

        c.step("the bearer token is required")
        st, body = get(ports[leader], "/metrics", token=None)
        c.check(st == 401, "no token: 401", (st, body))
        st, body = get(ports[leader], "/healthz", token="wrong")
        c.check(st == 401, "wrong token: 401", (st, body))
        st, body = get(ports[leader], "/nothing")
        c.check(st == 404, "unknown path: 404", st)

        c.step("healthz and readyz on every node")
        for i in cl.nodes:
            st, body = get(ports[i], "/healthz")
            c.check(st == 200 and body == "ok\n", "node %d healthz 200" % i,
                    (st, body))
            ok = h.poll(lambda: get(ports[i], "/readyz")[0] == 200, 10, 0.1)
            c.check(ok, "node %d readyz 200" % i, get(ports[i], "/readyz"))

        before = {i: scrape(i) for i in cl.nodes}
        c.check(all(before.values()) and not parse_errors,
                "every node's /metrics parses", parse_errors)
        b = before[leader]
        c.step("produce %d messages through node %d" % (N, leader))
        cl.tern("produce", "q", "--count", N, servers=[leader], check=True)
        after = scrape(leader)
        c.check(after is not None and not parse_errors, "leader scrape parses",
                parse_errors)
        grew = (value(after, "tern_produce_messages_total") -
                value(b, "tern_produce_messages_total"))
        c.check(grew == N, "tern_produce_messages_total grew by %d" % N, grew)
        reqs = (value(after, "tern_requests_total", op="produce") -
                value(b, "tern_requests_total", op="produce"))
        c.check(reqs >= 1, "produce requests counted", reqs)
        hist = (value(after, "tern_produce_latency_seconds_count") -
                value(b, "tern_produce_latency_seconds_count"))
        c.check(hist == reqs, "produce latency histogram count grew by the "
                "requests answered (%d)" % reqs, hist)
        c.check(value(after, "tern_produce_bytes_total") >
                value(b, "tern_produce_bytes_total"), "produce bytes grew")
        c.check(value(after, "tern_replication_latency_seconds_count") >
                value(b, "tern_replication_latency_seconds_count"),
                "replication latency histogram grew on the leader")

        c.step("the raft log store's series")
        store = cl.log_store
        c.check(value(after, "tern_raft_log_store_info", store=store) == 1,
                "tern_raft_log_store_info{store=%s} 1" % store,
                after.get("tern_raft_log_store_info"))
        c.check(value(after, "tern_raft_log_torn_tails") == 0,
                "tern_raft_log_torn_tails 0")
        if store == "tern":
            for name in ("tern_raft_log_writes_total",
                         "tern_raft_log_written_bytes_total"):
                c.check(value(after, name) > value(b, name),
                        "%s grew with the produce" % name)
            c.check(value(after, "tern_raft_log_segments") >= 1,
                    "tern_raft_log_segments >= 1")
            cl.tern("queue", "create", "bulk", check=True)
            cl.tern("produce", "bulk", "--count", 2000, "--size", 1024,
                    "--batch", 16, servers=[leader], check=True)
            # Forgetting and recycling run after the snapshots: polled.
            got = {}

            def recycled():
                more = scrape(leader)
                if more is None:
                    return False
                got["forgot"] = value(
                    more, "tern_raft_log_segments_forgotten_total")
                got["reused"] = value(
                    more, "tern_raft_log_segments_prepared_total",
                    **{"from": "recycled"})
                got["new"] = value(more,
                                   "tern_raft_log_segments_prepared_total",
                                   **{"from": "new"})
                got["free"] = value(more, "tern_raft_log_free_segments")
                return bool(got["forgot"]) and bool(got["reused"])
            h.poll(recycled, 10, 0.2)
            forgot, reused, new = got.get("forgot"), got.get("reused"), \
                got.get("new")
            c.check(forgot and forgot > 0, "segments behind snapshots "
                    "forgotten (%s)" % forgot)
            c.check(reused and reused > 0, "free files reused for new "
                    "segments (%s recycled, %s new)" % (reused, new))
            c.check(got.get("free") is not None,
                    "tern_raft_log_free_segments present")
        else:
            c.check(value(after, "tern_raft_log_writes_total") is None,
                    "raft_uv: no tern store counters")

        def commit_grew(i):
            s = scrape(i)
            return s and (value(s, "tern_raft_commit_index") >
                          value(before[i], "tern_raft_commit_index"))
        for i in cl.nodes:
            c.check(h.poll(lambda: commit_grew(i), 10, 0.1),
                    "node %d commit index grew" % i)

        c.step("roles, peers, queue depth")
        now = {i: scrape(i) for i in cl.nodes}
        leaders = [i for i in cl.nodes
                   if value(now[i], "tern_raft_role", role="leader") == 1]
        c.check(leaders == [leader], "exactly one leader gauge: node %d" %
                leader, leaders)
        c.check(all(value(now[i], "tern_raft_leader_id") == leader
                    for i in cl.nodes), "every node names the leader")
        c.check(all(value(now[i], "tern_raft_leader_silent") == 0
                    for i in cl.nodes), "no node finds its leader silent")
        for p in cl.nodes:
            if p == leader:
                continue
            lag = value(now[leader], "tern_raft_peer_lag_entries", peer=str(p))
            c.check(lag is not None and lag >= 0,
                    "leader reports the lag of peer %d" % p, lag)
            tr = value(now[leader], "tern_raft_peer_transport", peer=str(p),
                       transport="tcp")
            c.check(tr == 1, "peer %d's transport is tcp" % p)
        c.check(not now[[i for i in cl.nodes if i != leader][0]].get(
            "tern_raft_peer_lag_entries"), "a follower reports no peer lag")
        for i in cl.nodes:
            ok = h.poll(lambda: value(scrape(i), "tern_queue_depth_messages",
                                      queue="q") == N, 10, 0.1)
            c.check(ok, "node %d: queue depth of q is %d" % (i, N),
                    value(scrape(i), "tern_queue_depth_messages", queue="q"))

        c.step("group lag shrinks with the group's commits")
        cl.tern("consume", "q", "--group", "g", "--max", 10, "--commit",
                servers=[leader], check=True)
        lag1 = h.poll(lambda: value(scrape(leader), "tern_group_lag_messages",
                                    queue="q", group="g"), 10, 0.1)
        c.check(lag1 == N - 10, "lag of g after 10 committed: %d" % (N - 10),
                lag1)
        cl.tern("consume", "q", "--group", "g", "--max", N, "--commit",
                servers=[leader], check=True)
        ok = h.poll(lambda: value(scrape(leader), "tern_group_lag_messages",
                                  queue="q", group="g") == 0, 10, 0.1)
        lag2 = value(scrape(leader), "tern_group_lag_messages", queue="q",
                     group="g")
        c.check(ok and lag2 == 0, "lag of g after consuming all: 0",
                repr(lag2))
        c.check(not parse_errors, "every scrape parsed", parse_errors)

        c.step("kill -9 the leader (node %d)" % leader)
        cl.kill(leader)
        survivors = [i for i in cl.nodes if i != leader]

        def ready_again():
            for i in survivors:
                if get(ports[i], "/readyz")[0] != 200:
                    return False
                s = scrape(i)
                lid = s and value(s, "tern_raft_leader_id")
                if not lid or lid == leader:
                    return False
            return True
        c.check(h.poll(ready_again, 20, 0.2),
                "survivors ready again with a new leader",
                [get(ports[i], "/readyz") for i in survivors])

        c.step("a node alone has no leader: readyz 503")
        for i in survivors:
            cl.stop(i)
        alone = survivors[0]
        cl.start_node(alone)
        ok = h.poll(lambda: get(ports[alone], "/healthz")[0] == 200, 10, 0.1)
        c.check(ok, "node %d alone: healthz 200" % alone)
        st, body = get(ports[alone], "/readyz")
        c.check(st == 503 and body == "no leader\n",
                "node %d alone: readyz 503 \"no leader\"" % alone, (st, body))
        s = scrape(alone)
        c.check(s is not None and
                value(s, "tern_raft_role", role="leader") == 0,
                "its role gauge is not leader")

        c.step("a token file readable by others is refused at start")
        cl.stop(alone)
        os.chmod(token_file, 0o644)
        cl.start_node(alone)
        try:
            rc = cl.nodes[alone].proc.wait(timeout=20)
        except Exception:  # noqa: BLE001 - reported by the check
            rc = None
        c.check(rc == 2, "node %d exits 2" % alone, rc)
        c.check("must not be accessible by group or others" in
                cl.nodes[alone].log_text(), "the log says why")


if __name__ == "__main__":
    h.run_test(main)
