#!/usr/bin/env python3
"""A node that lost its data never votes under its old identity
(docs/MEMBERSHIP.md, "Rejoin"). With `[raft] auto_rejoin = false`:

- a follower's data dir is wiped and it comes back under its id in join
  mode: the cluster still counts it as a voter, so it says it lost its
  data and does not vote; `tern cluster rejoin` (remove, then add) makes
  it a voter again and it serves every acknowledged message alone;
- a follower whose raft log alone is lost (its index survived) is refused
  at start without join mode (it must not bootstrap and vote), and
  rejoins the same way with it.
With the default (auto_rejoin = true), a wiped follower restarted under
its id is removed and added back by the leader by itself, in join mode
and out of it.
A follower whose raft log fails its checksums at start (a byte flipped in
a closed raft segment while it was stopped) runs with the default
`[raft] rejoin_on_corrupt = true`: its raft dir is moved aside to
raft.corrupt-<time> (kept), its log says so and names the segment, it
does not vote, and it is re-added by the leader (auto_rejoin) or by
`tern cluster rejoin` (auto_rejoin = false); the refusal with the option
off is test_stopped_node_corruption.py.
Every acknowledged message is read back from each node at the end."""
import glob
import os
import shutil
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

LOST_LINE = "lost its data but still counted as a voter: not voting"
MOVED_LINE = "raft log fails its checksums: moved aside"


def set_join(nd):
    with open(nd.config) as f:
        text = f.read()
    if "join = true" not in text:
        text = text.replace("[node]\n", "[node]\njoin = true\n", 1)
    with open(nd.config, "w") as f:
        f.write(text)


def unset_join(nd):
    with open(nd.config) as f:
        text = f.read()
    with open(nd.config, "w") as f:
        f.write(text.replace("[node]\njoin = true\n", "[node]\n", 1))


def produce(cl, c, tag, n, acks):
    r = cl.tern("produce", "q", "--count", n, "--size", 64, "--ack-log", acks,
                "--id-prefix", tag, timeout=120)
    c.check(r.returncode == 0, "produce %d (%s) exit 0" % (n, tag),
            r.stderr.strip()[-300:])


def rejoin(cl, c, i):
    nd = cl.nodes[i]
    r = cl.tern("cluster", "rejoin", i, nd.raft_addr, nd.client_addr,
                servers=cl.servers([k for k in cl.nodes if k != i]),
                timeout=150)
    c.check(r.returncode == 0 and "rejoined: voter" in r.stdout,
            "tern cluster rejoin %d" % i,
            "rc=%d %s %s" % (r.returncode, r.stdout, r.stderr.strip()))


def read_back(cl, c, acks):
    acked = []
    for a in acks:
        acked += h.read_ack_log(a)
    lid = cl.wait_leader(20)
    target = (cl.status(lid) or {}).get("last_applied") or 0
    for i in cl.nodes:
        c.check(cl.wait_applied(i, target, 60),
                "node %d applied up to %d" % (i, target))
        got = cl.consume_all("q", servers=cl.nodes[i].client_addr,
                             expect=len(acked))
        h.check_acked_readable(c, "node %d alone" % i, got, acked)


def wipe_restart(cl, i, join):
    nd = cl.nodes[i]
    cl.kill(i)
    shutil.rmtree(nd.data_dir)
    os.makedirs(nd.data_dir, mode=0o700)
    if join:
        set_join(nd)
    cl.start_node(i)


def _tern_records(data):
    """(entries, end) of a tern store segment image (tlog/format.c): the
    records of the segment's own seq from offset 4096 on, as the load
    reads them (a recycled file holds older records after them), and the
    offset where they end. Checksums are not checked."""
    seq = struct.unpack_from("<Q", data, 16)[0] if len(data) >= 4096 else 0
    off, entries = 4096, 0
    while off + 48 <= len(data) and data[off:off + 4] == b"TRLE":
        rtype = data[off + 5]
        rseq = struct.unpack_from("<Q", data, off + 8)[0]
        size = 48 + ((struct.unpack_from("<I", data, off + 40)[0] + 7) & ~7)
        if rseq != seq or off + size > len(data):
            break
        entries += rtype in (1, 2, 3)
        off += size
    return entries, off


def corrupt_raft_log(c, nd, acks, last):
    """Flip one byte of a payload id inside a closed raft segment of the
    stopped node nd, the last closed one (last: raft_uv 0.15 moves it aside
    as corrupt-* and loads without it) or an earlier one (its load fails);
    returns the segment's name."""
    ids = []
    for a in acks:
        ids += [x[0] for x in h.read_ack_log(a)]
    d = os.path.join(nd.data_dir, "raft")
    tern_store = nd.cluster.log_store == "tern"
    if tern_store:
        # tern's store (tlog/): seg-N files, the newest with records last
        # written; a spare holds none.
        segs = []
        for p in glob.glob(os.path.join(d, "seg-*")):
            with open(p, "rb") as f:
                if _tern_records(f.read())[0] > 0:
                    segs.append(p)
        segs.sort(reverse=True)
    else:
        segs = sorted((p for p in glob.glob(os.path.join(d, "*-*"))
                       if os.path.basename(p)[0].isdigit()), reverse=True)
    pick = segs[:1] if last else segs[1:]
    if tern_store:
        # Damage in the newest segment's last write looks torn (as with
        # raft_uv): a segment before it, whose end the next one's link
        # names, is refused wherever the damage lies. With one segment,
        # damage mid-way is refused all the same.
        pick = segs[1:] or segs
    for seg in pick:
        with open(seg, "rb") as f:
            data = f.read()
        # Away from both ends of what was written (after its records a
        # tern segment holds zeros or a recycled file's older bytes):
        # damage in the last write would look torn.
        used = _tern_records(data)[1] if tern_store else len(data)
        lo, hi = used // 5, used * 4 // 5
        for pid in ids[::7] + ids:
            at = data.find(pid.encode() + b".", lo, hi)
            if at >= 0:
                off = at + len(pid) - 1
                with open(seg, "r+b") as f:
                    f.seek(off)
                    f.write(bytes([data[off] ^ 0x01]))
                c.info("%s: flipped byte %d (id %s)" % (seg, off, pid))
                return os.path.basename(seg)
    c.check(False, "found a payload id in a closed raft segment of node %d"
            % nd.id, segs)
    return None


def corrupt_restart(cl, c, victim, acks, last):
    """Stop victim, damage its raft log, start it: it must run in join
    mode with its old raft dir moved aside and say so. Returns the
    quarantined directory."""
    nd = cl.nodes[victim]
    rc = cl.stop(victim)
    c.check(rc == 0, "node %d exited 0" % victim, rc)
    seg = corrupt_raft_log(c, nd, acks, last)
    log_before = len(nd.log_text())
    cl.start_node_load_failure(victim)
    st = h.poll(lambda: cl.status(victim) or
                (not nd.alive() and "exited"), 20, interval=0.2)
    c.check(st not in (None, "exited"), "node %d with a damaged raft log "
            "runs and answers status" % victim, nd.log_text()[-800:])
    if isinstance(st, dict):
        c.check(not st.get("is_leader"), "node %d is not the leader" % victim,
                st)
    log = nd.log_text()[log_before:]
    line = next((x for x in log.splitlines() if MOVED_LINE in x), "")
    c.check(line != "", "node %d logs '%s'" % (victim, MOVED_LINE),
            log[-800:])
    c.check(seg is not None and seg in line and "checksum" in line,
            "the line names the damaged segment %s" % seg, line[:600])
    c.check("tern cluster rejoin %d" % victim in line,
            "the line gives the rejoin command", line[:600])
    moved = glob.glob(os.path.join(nd.data_dir, "raft.corrupt-*"))
    c.check(len(moved) == 1 and ("moved_to=%s" % moved[0]) in line,
            "the old raft dir was moved to the place the log names",
            "%s %s" % (moved, line[:600]))
    if moved and seg:
        kept = [f for f in os.listdir(moved[0])
                if f == seg or f.endswith("-" + seg)]
        c.check(kept, "the damaged segment is kept in %s" % moved[0],
                os.listdir(moved[0]))
    return moved[0] if moved else None


def automatic(c):
    raft = {"snapshot_threshold_bytes": 65536, "snapshot_trailing": 16}
    with h.Cluster(3, raft=raft) as cl:
        c.step("automatic: start 3 nodes, produce")
        cl.start()
        cl.tern("queue", "create", "q", check=True)
        acks = [os.path.join(cl.dir, "auto-%d.txt" % k) for k in range(3)]
        produce(cl, c, "a", 1000, acks[0])
        for k, join in enumerate((True, False)):
            lid = cl.wait_leader(20)
            victim = [i for i in cl.nodes if i != lid][0]
            c.step("wipe node %d, restart it under its id (%s): the leader "
                   "rejoins it by itself" %
                   (victim, "join mode" if join else "not joining"))
            before = cl.nodes[lid].log_text().count("lost data): removing")
            wipe_restart(cl, victim, join)
            ok = h.poll(lambda: cl.nodes[lid].log_text().count(
                "lost data): removing") > before, 20)
            c.check(ok, "leader %d logs that it removes and adds back node "
                    "%d" % (lid, victim))
            ok = h.poll(lambda: (cl.status(victim) or {}).get(
                "member_role") == "voter", 30)
            c.check(ok, "node %d is a voter again" % victim,
                    cl.status(victim))
            produce(cl, c, "b%d" % k, 300, acks[1 + k])
        lid = cl.wait_leader(20)
        victim = [i for i in cl.nodes if i != lid][0]
        c.step("node %d's raft log fails its checksums: it rejoins as a "
               "non-voter, the leader adds it back by itself" % victim)
        before = cl.nodes[lid].log_text().count("lost data): removing")
        moved = corrupt_restart(cl, c, victim, acks, False)
        ok = h.poll(lambda: cl.nodes[lid].log_text().count(
            "lost data): removing") > before, 20)
        c.check(ok, "leader %d removes and adds back node %d" % (lid, victim))
        ok = h.poll(lambda: (cl.status(victim) or {}).get(
            "member_role") == "voter", 30)
        c.check(ok, "node %d is a voter again" % victim, cl.status(victim))
        acks.append(os.path.join(cl.dir, "auto-3.txt"))
        produce(cl, c, "b2", 300, acks[3])
        read_back(cl, c, acks)
        c.check(moved is not None and os.path.isdir(moved),
                "the quarantined raft dir %s still exists" % moved)


def young(c):
    """A wiped node rejoins a cluster that took no snapshot yet: the
    leader sends it the log from index 1."""
    with h.Cluster(3) as cl:
        c.step("young: start 3 nodes (no snapshot yet), produce")
        cl.start()
        cl.tern("queue", "create", "q", check=True)
        acks = [os.path.join(cl.dir, "young-%d.txt" % k) for k in range(2)]
        produce(cl, c, "y", 200, acks[0])
        lid = cl.wait_leader(20)
        victim = [i for i in cl.nodes if i != lid][0]
        c.step("wipe node %d, restart it in join mode" % victim)
        wipe_restart(cl, victim, True)
        ok = h.poll(lambda: (cl.status(victim) or {}).get(
            "member_role") == "voter", 30)
        c.check(ok, "node %d is a voter again" % victim, cl.status(victim))
        produce(cl, c, "z", 100, acks[1])
        read_back(cl, c, acks)


def main(c):
    young(c)
    automatic(c)
    raft = {"snapshot_threshold_bytes": 65536, "snapshot_trailing": 16,
            "auto_rejoin": "false"}
    with h.Cluster(3, raft=raft) as cl:
        c.step("start 3 nodes, produce")
        leader = cl.start()
        cl.tern("queue", "create", "q", check=True)
        acks = [os.path.join(cl.dir, "acks-%d.txt" % k) for k in range(3)]
        produce(cl, c, "a", 1500, acks[0])

        victim = [i for i in cl.nodes if i != leader][0]
        c.step("wipe node %d's data dir, restart it under its id, joining"
               % victim)
        nd = cl.nodes[victim]
        wipe_restart(cl, victim, True)
        ok = h.poll(lambda: LOST_LINE in nd.log_text(), 20)
        c.check(ok, "node %d logs '%s'" % (victim, LOST_LINE),
                nd.log_text()[-600:])
        produce(cl, c, "b", 500, acks[1])

        # The wait outlives a crash and a start without join mode: the
        # entries it received meanwhile count it as a voter, yet it lacks
        # what it once acknowledged (member.c, "The rejoin marker").
        mark = os.path.join(nd.data_dir, "raft", "rejoin-wait")
        c.check(os.path.exists(mark), "node %d keeps raft/rejoin-wait" %
                victim)
        c.step("kill -9 node %d and start it without join mode: it still "
               "does not vote" % victim)
        seen = nd.log_text().count(LOST_LINE)
        cl.kill(victim)
        unset_join(nd)
        cl.start_node(victim)
        ok = h.poll(lambda: nd.log_text().count(LOST_LINE) > seen, 20)
        c.check(ok, "after the restart node %d logs '%s' again" %
                (victim, LOST_LINE), nd.log_text()[-600:])
        js = cl.status(victim) or {}
        c.check(js.get("role") != "leader",
                "node %d is not the leader" % victim, js)

        c.step("rejoin node %d (remove, then add)" % victim)
        rejoin(cl, c, victim)
        c.check(h.poll(lambda: not os.path.exists(mark), 20) is not None,
                "node %d's raft/rejoin-wait is gone once it was re-added" %
                victim)
        lid = cl.wait_leader(20)
        target = (cl.status(lid) or {}).get("last_applied") or 0
        c.check(cl.wait_applied(victim, target, 60),
                "node %d applied up to %d" % (victim, target))
        acked = h.read_ack_log(acks[0]) + h.read_ack_log(acks[1])
        got = cl.consume_all("q", servers=nd.client_addr, expect=len(acked))
        h.check_acked_readable(c, "node %d alone" % victim, got, acked)

        other = [i for i in cl.nodes if i not in (lid, victim)][0]
        c.step("node %d loses its raft log but not its term record "
               "(tern-meta1/2, which both stores write): refused at start, "
               "then rejoins" % other)
        no = cl.nodes[other]
        cl.kill(other)
        rdir = os.path.join(no.data_dir, "raft")
        for name in os.listdir(rdir):
            if not name.startswith("tern-meta"):
                p = os.path.join(rdir, name)
                if os.path.isdir(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
        c.check(sorted(os.listdir(rdir)) == ["tern-meta1", "tern-meta2"],
                "only the term record is left", sorted(os.listdir(rdir)))
        cl.start_node(other)
        rc = None
        try:
            rc = no.proc.wait(timeout=20)
        except Exception:  # noqa: BLE001 - reported below
            pass
        c.check(rc is not None and rc != 0,
                "node %d refuses to start without join mode (rc=%s)" %
                (other, rc))
        c.check("must not vote under id %d" % other in no.log_text(),
                "the refusal says it must not vote under its id",
                no.log_text()[-600:])
        set_join(no)
        cl.start_node(other)
        time.sleep(0.5)
        c.check(no.alive(), "node %d runs in join mode" % other)
        rejoin(cl, c, other)

        c.step("produce more, read everything from each node")
        produce(cl, c, "c", 500, acks[2])
        read_back(cl, c, acks)

        lid = cl.wait_leader(20)
        victim = [i for i in cl.nodes if i != lid][0]
        c.step("node %d's raft log fails its checksums (auto_rejoin off): "
               "it waits without voting, `tern cluster rejoin` re-adds it"
               % victim)
        nd = cl.nodes[victim]
        log_before = len(nd.log_text())
        moved = corrupt_restart(cl, c, victim, acks, True)
        ok = h.poll(lambda: LOST_LINE in nd.log_text()[log_before:], 20)
        c.check(ok, "node %d logs '%s'" % (victim, LOST_LINE),
                nd.log_text()[-600:])
        acks.append(os.path.join(cl.dir, "acks-3.txt"))
        produce(cl, c, "d", 300, acks[3])
        rejoin(cl, c, victim)
        read_back(cl, c, acks)
        c.check(moved is not None and os.path.isdir(moved),
                "the quarantined raft dir %s still exists" % moved)


if __name__ == "__main__":
    h.run_test(main)
