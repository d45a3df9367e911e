#!/usr/bin/env python3
"""(h) storage damage on a stopped minority node (bit flips and truncation
in a stopped minority node's segment, LMDB or raft log file; the same
damage as jepsen's bitflip/truncate nemeses). Each case starts a fresh
3-node cluster, produces, stops a follower with SIGTERM, damages one of
its files, lets the majority go on, restarts the node and checks the
outcome the case expects:

  repair: the node starts, never serves garbage (everything it returns
          equals the leader's message at that offset; the damage is placed
          on a payload id, so a served damaged byte shows in the consume
          output), reaches the leader's last_applied and then serves every
          message, identical to the leader;
  refuse: with `[raft] rejoin_on_corrupt = false`, the node exits
          non-zero before serving (no client port), its log names the
          damaged file and where, and a second start (a supervisor) is
          refused too. (With the default, a damaged raft log is moved
          aside and the node rejoins: test_membership_rejoin.py.)
In every case the cluster keeps every acknowledged message.

Two raft configurations: "replay" (default snapshot threshold: the raft
log still holds every entry, so commit-log damage is repaired by
re-applying it) and "snap" (32 KiB snapshots, trailing 8: the node's own
raft snapshot is past the damage, so the range is fetched from a peer
before the snapshot is restored, raft/bulk.c "Start-up restore").

Cases (argv selects by name, default all):
  seg_flip_replay  a byte flipped mid-segment       -> repair (raft replay)
  seg_cut_replay   a segment truncated in the middle -> repair (raft replay)
  seg_flip_snap    a byte flipped mid-segment       -> repair (from a peer)
  seg_cut_snap     a segment truncated in the middle -> repair (from a peer)
  lmdb_flip_snap   64 bytes flipped mid data.mdb     -> repair (LMDB rebuilt)
  lmdb_cut_snap    data.mdb truncated in the middle  -> repair (LMDB rebuilt)
  raft_flip_mid_snap    a byte flipped in a raft segment that is not the
                        last closed one -> refuse (raft_uv's CRC error)
  raft_flip_last_replay the same in the last closed segment -> refuse:
                        raft_uv 0.15 moves it aside as corrupt-* and would
                        start without its entries; ternd refuses any start
                        while a corrupt-* file is in its raft dir
"""
import glob
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

N_MSGS = 400
MSG_SIZE = 300
QUEUE = "dmg"


def index_segments(nd):
    return sorted(glob.glob(os.path.join(nd.data_dir, "index", "log",
                                         "*.seg")))


def raft_closed_segments(nd):
    """raft_uv's closed segments (START-END), in log order."""
    d = os.path.join(nd.data_dir, "raft")
    return sorted(p for p in glob.glob(os.path.join(d, "*-*"))
                  if os.path.basename(p)[0].isdigit())


def flip_id_byte(path, ids, lo_frac, hi_frac):
    """Flip one byte of the first payload id from ids found between
    lo_frac and hi_frac of the file; returns (offset, id) or None."""
    with open(path, "rb") as f:
        data = f.read()
    lo, hi = int(len(data) * lo_frac), int(len(data) * hi_frac)
    for pid in ids:
        at = data.find(pid.encode() + b".", lo, hi)
        if at >= 0:
            off = at + len(pid) - 1  # last character of the id
            with open(path, "r+b") as f:
                f.seek(off)
                f.write(bytes([data[off] ^ 0x01]))
            return off, pid
    return None


def flip_bytes(path, at, n):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(n)
        f.seek(at)
        f.write(bytes(x ^ 0xFF for x in b))


def damage(c, case, nd, acked):
    """Damage the stopped node's files; returns (description, strings a
    refusal must put in the node's log)."""
    ids = [a[0] for a in acked]
    mid_ids = ids[len(ids) // 3:] + ids[:len(ids) // 3]
    if case in ("seg_flip", "seg_cut"):
        segs = index_segments(nd)
        c.check(segs, "node %d has commit-log segments" % nd.id)
        seg = segs[0]
        size = os.path.getsize(seg)
        if case == "seg_flip":
            r = flip_id_byte(seg, mid_ids, 0.3, 0.7)
            c.check(r is not None, "found a payload id to damage in %s" %
                    seg)
            return ("%s: flipped byte %d (id %s) of %d" %
                    (seg, r[0], r[1], size),
                    [os.path.basename(seg), "offset"])
        os.truncate(seg, size // 2)
        return ("%s: truncated %d -> %d bytes" % (seg, size, size // 2),
                [os.path.basename(seg), "offset"])
    if case in ("lmdb_flip", "lmdb_cut"):
        path = os.path.join(nd.data_dir, "index", "lmdb", "data.mdb")
        size = os.path.getsize(path)
        if case == "lmdb_flip":
            # LMDB pages are 4 KiB: hit the middle of a middle page, past
            # the two meta pages.
            page = max(2, (size // 4096) // 2)
            flip_bytes(path, page * 4096 + 1024, 64)
            return ("%s: flipped 64 bytes at %d of %d" %
                    (path, page * 4096 + 1024, size), [])
        os.truncate(path, size // 2)
        return "%s: truncated %d -> %d bytes" % (path, size, size // 2), []
    if case in ("raft_flip_mid", "raft_flip_last"):
        segs = raft_closed_segments(nd)
        # mid: a closed segment with another closed one after it; last:
        # the last closed segment.
        pick = segs[:-1] if case == "raft_flip_mid" else segs[-1:]
        for seg in pick:
            r = flip_id_byte(seg, mid_ids, 0.2, 0.8)
            if r is not None:
                return ("%s: flipped byte %d (id %s)" % (seg, r[0], r[1]),
                        [os.path.basename(seg), "checksum"])
        c.check(False, "found a payload id in a raft segment", segs)
        return "nothing damaged", []
    raise ValueError(case)


def served_matches(c, where, got, ref):
    """Every message node returned equals the leader's at that offset."""
    ref_by = dict(ref)
    bad = [(o, i, ref_by.get(o)) for o, i in got if ref_by.get(o) != i]
    c.check(not bad, "%s: every served message equals the leader's "
            "(%d served)" % (where, len(got)),
            "%d differ, e.g. %s" % (len(bad), bad[:5]))


def refused(c, case, nd, log_text, needles):
    c.check(not nd.alive(), "%s: node %d refused to start" % (case, nd.id))
    rc = nd.proc.returncode if nd.proc else None
    c.check(rc not in (None, 0), "%s: node %d exit code non-zero" %
            (case, nd.id), rc)
    for n in needles:
        c.check(n in log_text, "%s: node %d log names %r" % (case, nd.id, n),
                log_text[-600:])


def run_case(c, case, kind, config, expect):
    raft = {}
    if config == "snap":
        raft = {"snapshot_threshold_bytes": 32768, "snapshot_trailing": 8}
    if expect == "refuse":
        raft["rejoin_on_corrupt"] = "false"  # today's refusal, kept
    if kind.startswith("raft_"):
        # raft_uv's segment files and CRC errors (tern's store: its own
        # damage cases in tests/unit/tlog and test_membership_rejoin.py).
        raft["log_store"] = "uv"
    with h.Cluster(3, raft=raft) as cl:
        c.step("%s: start 3 nodes, produce %d x %d B" % (case, N_MSGS,
                                                          MSG_SIZE))
        leader = cl.start()
        cl.tern("queue", "create", QUEUE, check=True)
        acks = os.path.join(cl.dir, "acks.txt")
        r = cl.tern("produce", QUEUE, "--count", N_MSGS, "--size", MSG_SIZE,
                    "--batch", 4, "--ack-log", acks, "--id-prefix", "m")
        c.check(r.returncode == 0, "%s: produce exit 0" % case,
                r.stderr.strip()[-300:])
        acked = h.read_ack_log(acks)
        leader = cl.wait_leader(20)
        victim = next(i for i in sorted(cl.nodes) if i != leader)
        nd = cl.nodes[victim]
        target = (cl.status(leader) or {}).get("last_applied") or 0
        c.check(cl.wait_applied(victim, target, 30),
                "%s: node %d caught up before the stop" % (case, victim))

        c.step("%s: stop node %d, damage it" % (case, victim))
        rc = cl.stop(victim)
        c.check(rc == 0, "%s: node %d exited 0" % (case, victim), rc)
        what, needles = damage(c, kind, nd, acked)
        c.info(what)
        log_before = len(nd.log_text())

        # The majority goes on meanwhile.
        acks2 = os.path.join(cl.dir, "acks2.txt")
        r = cl.tern("produce", QUEUE, "--count", 100, "--size", MSG_SIZE,
                    "--ack-log", acks2, "--id-prefix", "n")
        c.check(r.returncode == 0, "%s: produce on the majority" % case,
                r.stderr.strip()[-300:])
        acked += h.read_ack_log(acks2)

        c.step("%s: restart node %d (expect %s)" % (case, victim, expect))
        if kind.startswith("raft_"):
            cl.start_node_load_failure(victim)
        else:
            cl.start_node(victim)
        st = h.poll(lambda: cl.status(victim) or
                    (not nd.alive() and "exited"), 15, interval=0.2)
        new_log = nd.log_text()[log_before:]
        for line in new_log.splitlines():
            low = line.lower()
            if ("level=warn" in low or "level=error" in low or
                    "truncat" in low or "corrupt" in low):
                c.info("log: %s" % line.strip()[:400])
        leader = cl.wait_leader(20)
        ref = cl.consume_all(QUEUE, servers=cl.nodes[leader].client_addr,
                             expect=len(acked))
        h.check_acked_readable(c, "%s: leader %d" % (case, leader), ref,
                               acked)
        if expect == "refuse":
            c.check(st == "exited", "%s: node %d never answered" %
                    (case, victim), st)
            refused(c, case, nd, new_log, needles)
            # A supervisor restarts it: still refused (nothing was repaired).
            log_before = len(nd.log_text())
            cl.start_node_load_failure(victim)
            st = h.poll(lambda: cl.status(victim) or
                        (not nd.alive() and "exited"), 15, interval=0.2)
            c.check(st == "exited", "%s: node %d refused again on the next "
                    "start" % (case, victim), st)
            refused(c, case, nd, nd.log_text()[log_before:], needles[-1:])
            return
        c.check(st not in (None, "exited"), "%s: node %d answers status" %
                (case, victim), st)
        if st in (None, "exited"):
            return
        # Whatever it serves right away is correct (or an error).
        early = cl.consume_all(QUEUE, servers=nd.client_addr)
        served_matches(c, "%s: node %d right after the restart" %
                       (case, victim), early, ref)
        target = (cl.status(leader) or {}).get("last_applied") or 0
        c.check(cl.wait_applied(victim, target, 60),
                "%s: node %d last_applied reaches %d" % (case, victim,
                                                         target),
                cl.status(victim))
        got = cl.consume_all(QUEUE, servers=nd.client_addr,
                             expect=len(ref), timeout=20)
        served_matches(c, "%s: node %d after catch-up" % (case, victim),
                       got, ref)
        c.check(len(got) == len(ref), "%s: node %d serves all %d messages"
                % (case, victim, len(ref)), "%d served" % len(got))
        c.check(nd.alive(), "%s: node %d still running" % (case, victim))


# name: (damage, raft config, expected outcome)
CASES = {
    "seg_flip_replay": ("seg_flip", "replay", "repair"),
    "seg_cut_replay": ("seg_cut", "replay", "repair"),
    "seg_flip_snap": ("seg_flip", "snap", "repair"),
    "seg_cut_snap": ("seg_cut", "snap", "repair"),
    "lmdb_flip_snap": ("lmdb_flip", "snap", "repair"),
    "lmdb_cut_snap": ("lmdb_cut", "snap", "repair"),
    "raft_flip_mid_snap": ("raft_flip_mid", "snap", "refuse"),
    # raft_uv 0.15 moves a damaged LAST closed segment aside
    # (corrupt-<ts>-<name>) and starts with its entries dropped; ternd
    # refuses to start then (node.c), or it could vote with a shorter log
    # than it acknowledged.
    "raft_flip_last_replay": ("raft_flip_last", "replay", "refuse"),
}
DEFAULT = list(CASES)


def main(c):
    names = sys.argv[1:] or DEFAULT
    for name in names:
        kind, config, expect = CASES[name]
        run_case(c, name, kind, config, expect)


if __name__ == "__main__":
    h.run_test(main)
