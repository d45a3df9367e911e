#!/usr/bin/env python3
"""
Unit tests of jepsen/checker/checker.py on hand-written histories: a valid
history is judged valid, and every error class (lost prefix/middle/postfix,
unexpected, failed-seen, duplicated, lost-on-node, FIFO producer-order /
realtime / nonmonotonic, offset conflicts both ways, consumer-group offset
regression, retention: over-trimmed, early trim, low watermarks that
differ between nodes, a trimmed message served) is detected and makes
the verdict invalid; recovered and gaps are reported without invalidating.
Run: python3 -m unittest -v test_checker  (from this folder), or
jepsen/run-checker-tests.sh.
"""
import json
import lzma
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402


class H:
    """Builds a history: a clock that ticks 1 ms per event."""

    def __init__(self):
        self.ev = []
        self.t = 0

    def add(self, **kw):
        self.t += 1_000_000
        kw.setdefault("time", self.t)
        self.ev.append(kw)
        return self

    def produce(self, proc, counter, queue="q", result="ok", offset=None):
        v = "%s-%d" % (proc, counter)
        self.add(process=proc, type="invoke", f="produce", queue=queue,
                 value=v)
        done = dict(process=proc, type=result, f="produce", queue=queue,
                    value=v, node="n1")
        if result == "ok":
            done["offset"] = offset
        self.add(**done)
        return v

    def read(self, proc, pairs, queue="q", f="fetch", node="n1", **extra):
        self.add(process=proc, type="invoke", f=f, queue=queue)
        self.add(process=proc, type="ok", f=f, queue=queue,
                 value=[list(p) for p in pairs], node=node, **extra)
        return self

    def nemesis(self, f):
        return self.add(process="nemesis", type="info", f=f)


def valid_history(nodes=("n1", "n2", "n3")):
    """Two producers, one consumer, a drain and per-node final reads."""
    h = H()
    h.produce(0, 0, offset=0)
    h.produce(1, 0, offset=1)
    h.read(10, [(0, "0-0"), (1, "1-0")])
    h.nemesis("start-partition")
    h.produce(0, 1, offset=2)
    h.produce(1, 1, result="info")      # ambiguous, later read: recovered
    h.produce(1 + 5, 0, result="fail")  # definite failure, never read
    h.nemesis("final-heal")
    h.produce(0, 2, offset=4)
    h.read(10, [(2, "0-1"), (3, "1-1"), (4, "0-2")])
    all_pairs = [(0, "0-0"), (1, "1-0"), (2, "0-1"), (3, "1-1"), (4, "0-2")]
    h.read(20, all_pairs, f="drain")
    for n in nodes:
        h.read(30, all_pairs, f="final-read", node=n)
    return h


def retention_history(m=3, start=3, node_starts=(3, 3, 3), served=False,
                      skip_first=None):
    """Queue q keeps m messages; 6 produced (offsets 0..5); the drain and
    the final reads start at `start`; a reader skipped to skip_first."""
    h = H()
    h.add(process=-1, type="info", f="retention", value=m)
    vals = [h.produce(0, i, offset=i) for i in range(6)]
    if skip_first is not None:
        h.add(process=10, type="ok", f="trim-skip", queue="q", offset=0,
              first=skip_first)
    pairs = [(i, vals[i]) for i in range(start, 6)]
    h.read(20, pairs, f="drain", start=start, end=6, complete=True)
    for n, st in zip(("n1", "n2", "n3"), node_starts):
        h.read(30, [(i, vals[i]) for i in range(st, 6)], f="final-read",
               node=n, start=st, end=6, complete=True)
        h.add(process=31, type="ok", f="probe-below", queue="q", node=n,
              offset=st - 1, served=served and n == "n2")
    return h


class CheckerTest(unittest.TestCase):
    def judge(self, h):
        return checker.check(h.ev)

    def assert_only(self, r, *classes):
        self.assertEqual(r["verdict"], "invalid")
        self.assertEqual(sorted(r["problems"]), sorted(classes))

    def test_valid_history_is_valid(self):
        r = self.judge(valid_history())
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["problems"], [])
        c = r["counts"]
        self.assertEqual(c["attempt"], 6)
        self.assertEqual(c["acknowledged"], 4)
        self.assertEqual(c["failed"], 1)
        self.assertEqual(c["info"], 1)
        self.assertEqual(c["recovered"], 1)
        self.assertEqual(r["recovered"], ["1-1"])
        self.assertEqual(c["lost"], 0)
        self.assertTrue(r["drain_caught_up"])
        # final-heal at t=10 ms, next produce ok at t=12 ms.
        self.assertAlmostEqual(r["recovery_after_heal_s"], 0.002)

    def test_resent_produces_are_counted(self):
        h = H()
        h.add(process=1, type="invoke", f="produce", queue="q", value="1-0")
        h.add(process=1, type="ok", f="produce", queue="q", value="1-0",
              offset=0, resends=2)
        h.add(process=1, type="invoke", f="produce", queue="q", value="1-1")
        h.add(process=1, type="ok", f="produce", queue="q", value="1-1",
              offset=1)
        h.add(process=9, type="ok", f="drain", queue="q",
              value=[[0, "1-0"], [1, "1-1"]])
        r = checker.check(h.ev)
        self.assertEqual(r["counts"]["acked_after_resend"], 1)
        self.assertEqual(r["counts"]["acknowledged"], 2)

    def test_lost_prefix_middle_postfix(self):
        h = H()
        for c in range(5):
            h.produce(0, c, offset=c)
        # Reader sees 0-1 and 0-3 only: 0-0 prefix, 0-2 middle, 0-4 postfix.
        h.read(10, [(1, "0-1"), (3, "0-3")], f="drain")
        r = self.judge(h)
        self.assert_only(r, "lost")
        self.assertEqual(r["lost"], {"prefix": ["0-0"], "middle": ["0-2"],
                                     "postfix": ["0-4"]})
        self.assertFalse(r["drain_caught_up"])

    def test_lost_when_seen_earlier_but_missing_from_drain(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(0, 1, offset=1)
        h.read(10, [(0, "0-0"), (1, "0-1")])   # visible ...
        h.read(20, [(0, "0-0")], f="drain")     # ... then gone
        r = self.judge(h)
        self.assert_only(r, "lost")
        self.assertEqual(r["lost"]["postfix"], ["0-1"])
        self.assertEqual(r["lost_but_seen"], ["0-1"])

    def test_incomplete_final_read_fail_event(self):
        h = valid_history(nodes=("n1", "n2"))
        h.add(process=30, type="invoke", f="final-read", queue="q",
              node="n3")
        h.add(process=30, type="fail", f="final-read", queue="q", node="n3",
              complete=False, value=[[0, "0-0"]])
        r = self.judge(h)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["incomplete_final_reads"], ["n3"])

    def test_lost_producer_never_read_is_postfix(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(1, 0, offset=1)
        h.read(10, [(0, "0-0")], f="drain")
        r = self.judge(h)
        self.assert_only(r, "lost")
        self.assertEqual(r["lost"]["postfix"], ["1-0"])

    def test_info_never_read_is_not_lost(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(0, 1, result="info")
        h.read(10, [(0, "0-0")], f="drain")
        r = self.judge(h)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["counts"]["recovered"], 0)

    def test_unexpected(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.read(10, [(0, "0-0"), (1, "9-9")], f="drain")
        r = self.judge(h)
        self.assert_only(r, "unexpected")
        self.assertEqual(r["unexpected"], ["9-9"])

    def test_failed_seen(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(1, 0, result="fail")
        h.read(10, [(0, "0-0"), (1, "1-0")], f="drain")
        r = self.judge(h)
        self.assert_only(r, "failed_seen")
        self.assertEqual(r["failed_seen"], ["1-0"])

    def test_duplicated(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(0, 1, result="info")
        # 0-1 was appended twice (a retry not deduplicated).
        h.read(10, [(0, "0-0"), (1, "0-1"), (2, "0-1")], f="drain")
        r = self.judge(h)
        self.assertIn("duplicated", r["problems"])
        self.assertEqual(r["duplicated"], ["0-1"])
        self.assertEqual(r["verdict"], "invalid")

    def test_lost_on_node(self):
        h = valid_history(nodes=("n1", "n2"))
        h.read(30, [(0, "0-0"), (1, "1-0"), (2, "0-1"), (3, "1-1")],
               f="final-read", node="n3")
        r = self.judge(h)
        self.assert_only(r, "lost_on_node")
        self.assertEqual(r["lost_on_node"], {"n3": ["0-2"]})

    def test_incomplete_final_read_is_not_judged(self):
        h = valid_history(nodes=("n1", "n2"))
        h.read(30, [(0, "0-0")], f="final-read", node="n3", complete=False)
        r = self.judge(h)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["incomplete_final_reads"], ["n3"])

    def test_incomplete_final_read_judged_when_node_claims_caught_up(self):
        h = valid_history(nodes=("n1", "n2"))
        h.add(process=30, type="invoke", f="final-read", queue="q",
              node="n3")
        h.add(process=30, type="fail", f="final-read", queue="q", node="n3",
              complete=False, node_applied=120, leader_commit=120,
              value=[[0, "0-0"]])
        r = self.judge(h)
        self.assert_only(r, "lost_on_node")
        self.assertEqual(sorted(r["lost_on_node"]["n3"]),
                         ["0-1", "0-2", "1-0"])

    def test_fifo_producer_order(self):
        h = H()
        h.produce(0, 0, offset=1)
        h.produce(0, 1, offset=0)   # later produce, smaller offset
        h.read(10, [(0, "0-1"), (1, "0-0")], f="drain")
        r = self.judge(h)
        self.assertIn("fifo", r["problems"])
        kinds = {x["kind"] for x in r["fifo"]}
        self.assertIn("producer-order", kinds)
        self.assertNotIn("offset_conflicts", r["problems"])
        self.assertNotIn("lost", r["problems"])

    def test_fifo_realtime_across_producers(self):
        h = H()
        h.produce(0, 0, offset=1)   # completes ...
        h.produce(1, 0, offset=0)   # ... before this is invoked
        h.read(10, [(0, "1-0"), (1, "0-0")], f="drain")
        r = self.judge(h)
        self.assert_only(r, "fifo")
        self.assertEqual([x["kind"] for x in r["fifo"]], ["realtime"])
        self.assertEqual(r["fifo"][0]["value"], "1-0")

    def test_concurrent_produces_may_reorder(self):
        h = H()
        h.add(process=0, type="invoke", f="produce", queue="q", value="0-0")
        h.add(process=1, type="invoke", f="produce", queue="q", value="1-0")
        h.add(process=0, type="ok", f="produce", queue="q", value="0-0",
              offset=1)
        h.add(process=1, type="ok", f="produce", queue="q", value="1-0",
              offset=0)
        h.read(10, [(0, "1-0"), (1, "0-0")], f="drain")
        self.assertEqual(self.judge(h)["verdict"], "valid")

    def test_fifo_nonmonotonic_reader(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(0, 1, offset=1)
        h.read(10, [(0, "0-0"), (1, "0-1")])
        h.read(10, [(0, "0-0")])    # same session went backwards
        h.read(20, [(0, "0-0"), (1, "0-1")], f="drain")
        r = self.judge(h)
        self.assert_only(r, "fifo")
        self.assertEqual(r["fifo"][0]["kind"], "nonmonotonic")

    def group_history(self, second_start, second_proc=41,
                      commit_before=True):
        """Group g: fetch [0,1] from 0, commit 2, then a fetch from
        second_start (by second_proc), then a drain."""
        h = H()
        for i in range(3):
            h.produce(0, i, offset=i)
        h.read(40, [(0, "0-0"), (1, "0-1")], f="group-fetch", group="g",
               start=0)
        commit_inv = dict(process=40, type="invoke", f="group-commit",
                          queue="q", group="g", offset=2)
        commit_ok = dict(process=40, type="ok", f="group-commit",
                         queue="q", group="g", offset=2)
        pairs = [(o, "0-%d" % o) for o in range(second_start, 3)]
        h.add(**commit_inv)
        if commit_before:
            h.add(**commit_ok)
        h.read(second_proc, pairs, f="group-fetch", group="g",
               start=second_start)
        if not commit_before:
            h.add(**commit_ok)
        h.read(20, [(0, "0-0"), (1, "0-1"), (2, "0-2")], f="drain")
        return h

    def test_group_fetch_from_committed_offset_is_valid(self):
        r = self.judge(self.group_history(2, second_proc=40))
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["group_regression"], 0)
        self.assertEqual(r["counts"]["group_fetch_ok"], 2)
        self.assertEqual(r["counts"]["group_commit_ok"], 1)

    def test_group_regression(self):
        # A new process of the same group reads from 0 after 2 was
        # committed: the committed offset went backwards.
        r = self.judge(self.group_history(0))
        self.assert_only(r, "group_regression")
        self.assertEqual(r["group_regression"][0]["start"], 0)
        self.assertEqual(r["group_regression"][0]["committed"], 2)

    def test_group_commit_concurrent_with_fetch_is_not_judged(self):
        # The commit completed after the fetch was invoked: either order.
        r = self.judge(self.group_history(0, commit_before=False))
        self.assertEqual(r["verdict"], "valid", r)

    def test_offset_conflict_two_values_one_offset(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(1, 0, offset=1)
        h.read(10, [(0, "0-0"), (1, "1-0")], f="drain")
        # A node that diverged holds another value at offset 1.
        h.read(11, [(0, "0-0"), (1, "0-0x")], f="fetch", node="n3")
        r = self.judge(h)
        self.assertIn("offset_conflicts", r["problems"])
        kinds = [x["kind"] for x in r["offset_conflicts"]]
        self.assertIn("values-at-offset", kinds)

    def test_offset_conflict_ack_vs_read(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(0, 1, offset=5)   # server acked offset 5 ...
        h.read(10, [(0, "0-0"), (1, "0-1")], f="drain")  # ... stored at 1
        r = self.judge(h)
        self.assertIn("offset_conflicts", r["problems"])
        kinds = [x["kind"] for x in r["offset_conflicts"]]
        self.assertEqual(kinds, ["value-at-offsets"])
        self.assertEqual(r["counts"]["duplicated"], 0)

    def test_ack_without_offset_is_fine(self):
        h = H()
        h.produce(0, 0, offset=None)
        h.read(10, [(0, "0-0")], f="drain")
        self.assertEqual(self.judge(h)["verdict"], "valid")

    def test_gaps_reported_not_invalid(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(0, 1, offset=3)
        h.read(10, [(0, "0-0"), (3, "0-1")], f="drain")
        r = self.judge(h)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["counts"]["offset_gaps"], 2)

    def test_stale_leader_read_reported_not_invalid(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.produce(0, 1, offset=1)
        # A "leader" read invoked after both acks says the queue ends at 1.
        h.read(10, [(0, "0-0")], read_from="leader", end=1)
        h.read(11, [(0, "0-0")], read_from="any", end=1)   # fine: follower
        h.read(20, [(0, "0-0"), (1, "0-1")], f="drain")
        r = self.judge(h)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["counts"]["stale_leader_reads"], 1)
        self.assertEqual(r["stale_leader_reads"][0]["acked"], "0-1")

    def test_unknown_without_drain(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.read(10, [(0, "0-0")])
        r = self.judge(h)
        self.assertEqual(r["verdict"], "unknown")
        self.assertEqual(r["undrained_queues"], ["q"])

    def test_unknown_without_acks(self):
        h = H()
        h.produce(0, 0, result="info")
        self.assertEqual(self.judge(h)["verdict"], "unknown")

    def test_multi_queue(self):
        h = H()
        h.produce(0, 0, queue="a", offset=0)
        h.produce(0, 1, queue="b", offset=0)
        h.produce(0, 2, queue="a", offset=1)
        h.read(10, [(0, "0-0"), (1, "0-2")], queue="a", f="drain")
        h.read(10, [(0, "0-1")], queue="b", f="drain")
        self.assertEqual(self.judge(h)["verdict"], "valid")

    def test_cli_exit_codes_and_out(self):
        with tempfile.TemporaryDirectory() as d:
            for name, hist, code in (("ok", valid_history(), 0),
                                     ("bad", self._bad(), 1)):
                p = os.path.join(d, name + ".jsonl")
                with open(p, "w") as fh:
                    for ev in hist.ev:
                        fh.write(json.dumps(ev) + "\n")
                out = os.path.join(d, name + ".json")
                rc = subprocess.run(
                    [sys.executable, checker.__file__, p, "--out", out,
                     "--quiet"], stdout=subprocess.DEVNULL).returncode
                self.assertEqual(rc, code)
                with open(out) as fh:
                    self.assertIn(json.load(fh)["verdict"],
                                  ("valid", "invalid"))
            p = os.path.join(d, "broken.jsonl")
            with open(p, "w") as fh:
                fh.write("{not json\n")
            rc = subprocess.run([sys.executable, checker.__file__, p],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL).returncode
            self.assertEqual(rc, 3)

    def test_kept_findings_stay_invalid(self):
        """The real histories kept for findings (jepsen/results/histories/,
        one folder per run with the verdict it got) are judged again: the
        same problems, the same counts."""
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "..", "results", "histories")
        runs = sorted(e for e in os.listdir(root)
                      if os.path.isdir(os.path.join(root, e)))
        self.assertTrue(runs)
        for run in runs:
            with self.subTest(run=run):
                d = os.path.join(root, run)
                with open(os.path.join(d, "verdict.json")) as fh:
                    kept = json.load(fh)
                with lzma.open(os.path.join(d, "history.jsonl.xz"),
                               "rt") as fh:
                    events = [json.loads(line) for line in fh if line.strip()]
                r = checker.check(events)
                self.assertEqual(r["verdict"], "invalid")
                self.assertEqual(r["problems"], kept["problems"])
                for k in kept["problems"]:
                    self.assertEqual(r["counts"][k], kept["counts"][k])

    def _bad(self):
        h = H()
        h.produce(0, 0, offset=0)
        h.read(10, [], f="drain")
        return h



class RetentionTest(unittest.TestCase):
    def test_trimmed_values_are_not_lost(self):
        r = checker.check(retention_history().ev)
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["trimmed"], 3)
        self.assertEqual(r["counts"]["lost"], 0)
        self.assertEqual(r["counts"]["lost_on_node"], 0)

    def test_over_trimmed(self):
        r = checker.check(retention_history(start=4,
                                            node_starts=(4, 4, 4)).ev)
        self.assertEqual(r["problems"], ["retention"])
        self.assertEqual(r["retention"][0]["kind"], "over-trimmed")

    def test_under_trimmed_is_reported_only(self):
        r = checker.check(retention_history(start=2,
                                            node_starts=(2, 2, 2)).ev)
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(len(r["under_trimmed"]), 1)

    def test_watermark_mismatch(self):
        r = checker.check(retention_history(node_starts=(3, 2, 3)).ev)
        self.assertEqual(r["problems"], ["retention"])
        self.assertEqual(r["retention"][0]["kind"], "watermark-mismatch")
        self.assertEqual(r["retention"][0]["node"], "n2")

    def test_trim_after_an_under_trimmed_drain(self):
        # The drain saw [2, 6) with M = 3; the leader's next pass trimmed
        # offset 2 before the final reads: trimmed on every node, not lost.
        r = checker.check(retention_history(start=2,
                                            node_starts=(3, 3, 3)).ev)
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["lost_on_node"], 0)
        # Beyond the limit on one node, or below the drain's start.
        for starts, node in (((3, 4, 3), "n2"), ((2, 2, 1), "n3")):
            r = checker.check(retention_history(start=2,
                                                node_starts=starts).ev)
            self.assertIn("retention", r["problems"], r)
            self.assertEqual(r["retention"][0]["kind"], "watermark-mismatch")
            self.assertEqual(r["retention"][0]["node"], node)

    def test_trimmed_served(self):
        r = checker.check(retention_history(served=True).ev)
        self.assertEqual(r["problems"], ["retention"])
        self.assertEqual(r["retention"][0]["kind"], "trimmed-served")

    def test_early_trim(self):
        # All six were produced before the skip: first 3 is legitimate
        # (offset 5 >= 3 + 3 - 1), first 4 is not (needs offset 6).
        r = checker.check(retention_history(skip_first=3).ev)
        self.assertEqual(r["verdict"], "valid", r)
        r = checker.check(retention_history(skip_first=4).ev)
        kinds = sorted(x["kind"] for x in r["retention"])
        self.assertIn("early-trim", kinds)


class WQ(H):
    """A work-queue history: queue q, shared group jw."""

    def __init__(self):
        super().__init__()
        self.add(process=-1, type="info", f="workload", value="work-queue",
                 group="jw", ack_timeout_ms=2000, max_deliveries=1000)

    def receive(self, proc, items, queue="q"):
        """items: (offset, value, count)."""
        self.add(process=proc, type="invoke", f="receive", queue=queue,
                 group="jw")
        self.add(process=proc, type="ok", f="receive", queue=queue,
                 group="jw", value=[list(i) for i in items])
        return self

    def settle(self, proc, items, outcome="ok", queue="q", typ="ok"):
        """items: (offset, count, action, value); one outcome for all."""
        self.add(process=proc, type="invoke", f="settle", queue=queue,
                 group="jw", value=[list(i) for i in items])
        self.add(process=proc, type=typ, f="settle", queue=queue,
                 group="jw", value=[list(i) + [outcome] for i in items])
        return self

    def drain(self, queue="q", dlq=()):
        self.add(process=99, type="ok", f="wq-drain", queue=queue,
                 group="jw", complete=True)
        self.add(process=98, type="invoke", f="dlq-read",
                 queue=queue + "-dlq-jw")
        self.add(process=98, type="ok", f="dlq-read",
                 queue=queue + "-dlq-jw", complete=True,
                 value=[[i, v] for i, v in enumerate(dlq)])
        return self


def wq_history():
    """Two values produced, received and acked once each: valid."""
    h = WQ()
    a = h.produce(0, 0, offset=0)
    b = h.produce(0, 1, offset=1)
    h.receive(10, [(0, a, 1), (1, b, 1)])
    h.settle(10, [(0, 1, "ack", a), (1, 1, "ack", b)])
    return h


class WorkQueueTest(unittest.TestCase):
    def judge(self, h):
        return checker.check(h.ev)

    def test_valid(self):
        r = self.judge(wq_history().drain())
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["acked_ok"], 2)
        self.assertEqual(r["counts"]["duplicates_documented"], 0)
        self.assertIn("work-queue", checker.format_report(r))

    def test_no_drain_is_unknown(self):
        self.assertEqual(self.judge(wq_history())["verdict"], "unknown")

    def test_lost_unless_acked_or_dead_lettered(self):
        h = wq_history()
        c = h.produce(0, 2, offset=2)
        h.receive(11, [(2, c, 1)])
        r = self.judge(h.drain())
        self.assertEqual(r["problems"], ["lost"])
        self.assertEqual(r["lost"], [c])
        h = wq_history()
        c = h.produce(0, 2, offset=2)
        self.assertEqual(self.judge(h.drain(dlq=[c]))["verdict"], "valid")
        # An ack whose answer was lost may have committed: not lost.
        h = wq_history()
        c = h.produce(0, 2, offset=2)
        h.receive(11, [(2, c, 1)])
        h.settle(11, [(2, 1, "ack", c)], outcome="info", typ="info")
        r = self.judge(h.drain())
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["acked_by_ambiguous_ack"], 1)

    def test_held_by_a_clock_ahead_is_not_judged(self):
        # Nacked while the leader's clock ran ahead: the delay ends D late
        # by a correct clock, maybe after the drain.
        h = wq_history()
        c = h.produce(0, 2, offset=2)
        h.add(process="nemesis", type="info", f="clock", variant="skew",
              skews={"n1": "+3600", "n2": "-5"})
        h.receive(11, [(2, c, 1)])
        h.settle(11, [(2, 1, "nack", c)])
        h.nemesis("heal-clock")
        r = self.judge(h.drain())
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["held_by_clock"], [c])
        self.assertIn("held by a clock ahead", checker.format_report(r))
        # The same after the heal is lost; a skew that only goes back
        # excuses nothing.
        for skews, heal_first in (({"n1": "+3600"}, True),
                                  ({"n1": "-900", "n2": "-5"}, False)):
            h = wq_history()
            c = h.produce(0, 2, offset=2)
            h.add(process="nemesis", type="info", f="clock",
                  variant="skew", skews=skews)
            if heal_first:
                h.nemesis("heal-clock")
            h.receive(11, [(2, c, 1)])
            h.settle(11, [(2, 1, "nack", c)])
            h.nemesis("heal-clock")
            r = self.judge(h.drain())
            self.assertEqual(r["problems"], ["lost"], (skews, r))

    def test_stale_ack_of_last_delivery_consumed_it(self):
        # A resent ack whose first attempt committed answers stale.
        h = WQ()
        a = h.produce(0, 0, offset=0)
        h.receive(10, [(0, a, 1)])
        h.settle(10, [(0, 1, "ack", a)], outcome="stale")
        r = self.judge(h.drain())
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["acked_by_last_stale_ack"], 1)

    def test_delivery_after_ok_ack_is_invalid(self):
        h = wq_history()
        h.receive(11, [(0, "0-0", 2)])
        r = self.judge(h.drain())
        self.assertEqual(r["problems"], ["duplicate_after_ack"])
        d = r["duplicate_after_ack"][0]
        self.assertEqual((d["offset"], d["count"], d["acked_count"]),
                         (0, 2, 1))

    def test_documented_duplicates_by_reason(self):
        h = WQ()
        vals = [h.produce(0, i, offset=i) for i in range(4)]
        # 0: not settled (lease expiry); 1: nacked; 2: the receiver's
        # client was freed (release); 3: the ack's outcome was unknown.
        h.receive(10, [(i, v, 1) for i, v in enumerate(vals)])
        h.settle(10, [(1, 1, "nack", vals[1])])
        h.settle(10, [(3, 1, "ack", vals[3])], outcome="info", typ="info")
        h.receive(11, [(0, vals[0], 2)])   # before the retire: expiry
        h.add(process=10, type="info", f="retire")
        h.receive(11, [(i, v, 2) for i, v in enumerate(vals) if i > 0])
        h.settle(11, [(i, 2, "ack", v) for i, v in enumerate(vals)])
        r = self.judge(h.drain())
        self.assertEqual(r["verdict"], "valid", r)
        c = r["counts"]
        self.assertEqual(c["duplicates_documented"], 4)
        self.assertEqual((c["dup_lease_expiry"], c["dup_nack"],
                          c["dup_release"], c["dup_leader_change"]),
                         (1, 1, 1, 1))

    def test_stale_ack_then_redelivery_is_lease_expiry(self):
        h = WQ()
        a = h.produce(0, 0, offset=0)
        h.receive(10, [(0, a, 1)])
        h.receive(11, [(0, a, 2)])
        h.settle(10, [(0, 1, "ack", a)], outcome="stale")
        h.settle(11, [(0, 2, "ack", a)])
        r = self.judge(h.drain())
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["dup_lease_expiry"], 1)
        self.assertEqual(r["counts"]["stale_acks"], 1)

    def test_offset_conflict(self):
        h = WQ()
        a = h.produce(0, 0, offset=0)
        b = h.produce(0, 1, offset=1)
        h.receive(10, [(0, b, 1)])      # offset 0 holds a, yet b came
        h.settle(10, [(0, 1, "ack", b)])
        h.receive(11, [(1, b, 1)])
        h.settle(11, [(1, 1, "ack", b)])
        h.receive(12, [(0, a, 2)])
        h.settle(12, [(0, 2, "ack", a)])
        r = self.judge(h.drain())
        self.assertIn("offset_conflicts", r["problems"])
        kinds = {x["kind"] for x in r["offset_conflicts"]}
        self.assertEqual(kinds, {"values-at-offset", "ack-of-other-value"})

    def test_unexpected_and_failed_seen(self):
        h = wq_history()
        f = h.produce(1, 0, result="fail")
        h.receive(11, [(5, "77-0", 1), (6, f, 1)])
        h.settle(11, [(5, 1, "ack", "77-0"), (6, 1, "ack", f)])
        r = self.judge(h.drain())
        self.assertEqual(sorted(r["problems"]), ["failed_seen",
                                                 "unexpected"])


class DelayedH(H):
    """A delayed-workload history; wall clock in ms = 1000 + time in ms."""

    def __init__(self):
        super().__init__()
        self.add(process=-1, type="info", f="workload", value="delayed")

    def wall(self):
        return 1000 + self.t // 1_000_000

    def dproduce(self, proc, counter, delay, result="ok", due=None):
        v = "%s-%d" % (proc, counter)
        self.add(process=proc, type="invoke", f="produce", queue="q",
                 value=v, delay_ms=delay, wall_ms=self.wall() + 1)
        inv = self.wall()
        done = dict(process=proc, type=result, f="produce", queue="q",
                    value=v, wall_ms=self.wall() + 1)
        if result == "ok":
            done["due_ms"] = due if due is not None else inv + delay
        self.add(**done)
        return v

    def fetch(self, proc, pairs, at_wall):
        """A fetch answered at wall clock at_wall (the clock jumps)."""
        self.t = max(self.t, (at_wall - 1000 - 1) * 1_000_000)
        self.add(process=proc, type="invoke", f="fetch", queue="q")
        self.add(process=proc, type="ok", f="fetch", queue="q",
                 value=[list(p) for p in pairs], wall_ms=at_wall,
                 read_from="leader")
        return self

    def drain(self, pairs, at_wall=100000):
        self.t = max(self.t, (at_wall - 1000 - 1) * 1_000_000)
        self.add(process=-1, type="info", f="delayed-wait", value=0,
                 wall_ms=self.wall() + 1)
        self.read(20, pairs, f="drain", complete=True)
        return self


class DelayedTest(unittest.TestCase):
    def judge(self, h):
        return checker.check(h.ev)

    def test_valid_out_of_order(self):
        h = DelayedH()
        a = h.dproduce(0, 0, 3000)
        b = h.dproduce(0, 1, 500)   # due first: offset 0 (not FIFO)
        h.fetch(10, [(0, b)], at_wall=2000)
        h.fetch(10, [(1, a)], at_wall=5000)
        r = self.judge(h.drain([(0, b), (1, a)]))
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["counts"]["early"], 0)
        self.assertIn("delayed:", checker.format_report(r))

    def test_early(self):
        h = DelayedH()
        a = h.dproduce(0, 0, 3000)
        h.fetch(10, [(0, a)], at_wall=2500)
        r = self.judge(h.drain([(0, a)]))
        self.assertEqual(r["problems"], ["early"])
        # Under a clock nemesis the bound (twice the largest skew) covers it.
        h = DelayedH()
        h.add(process="nemesis", type="info", f="clock", variant="skew",
              skews={"n1": "+1", "n2": "-5"})
        a = h.dproduce(0, 0, 3000)
        h.fetch(10, [(0, a)], at_wall=2500)
        r = self.judge(h.drain([(0, a)]))
        self.assertEqual(r["verdict"], "valid", r)
        self.assertEqual(r["clock_bound_ms"], 10000)

    def test_appended_early(self):
        def run(append_ms):
            h = DelayedH()
            a = h.dproduce(0, 0, 3000)   # invoke at wall 1001: due >= 4001
            h.fetch(10, [(0, a)], at_wall=9000)
            h.ev[-1]["append_ms"] = [append_ms]
            return self.judge(h.drain([(0, a)]))
        r = run(2000)                    # fired 2 s before it was due
        self.assertEqual(r["problems"], ["early"])
        self.assertEqual(r["early"][0]["kind"], "appended-early")
        self.assertEqual(run(4001)["verdict"], "valid")

    def test_lost_only_when_due(self):
        h = DelayedH()
        a = h.dproduce(0, 0, 3000)
        r = self.judge(h.drain([]))
        self.assertEqual(r["problems"], ["lost"])
        h = DelayedH()
        a = h.dproduce(0, 0, 3000, due=10**9)   # not due at the drain
        r = self.judge(h.drain([]))
        self.assertNotIn("lost", r["problems"])
        self.assertEqual(r["counts"]["not_due"], 1)
        del a

    def test_duplicates(self):
        # Acknowledged, no fault near the call: fired twice, invalid.
        h = DelayedH()
        a = h.dproduce(0, 0, 1000)
        r = self.judge(h.drain([(0, a), (1, a)]))
        self.assertEqual(r["problems"], ["duplicated"])
        # A fault during the call does not excuse it: delayed produces are
        # deduplicated, so a resend never schedules a value twice.
        h = DelayedH()
        b = h.dproduce(0, 0, 1000)
        h.nemesis("kill")
        a = h.dproduce(0, 1, 1000)
        r = self.judge(h.drain([(0, b), (1, a), (2, a)]))
        self.assertEqual(r["problems"], ["duplicated"])
        # Neither does an ambiguous produce.
        h = DelayedH()
        b = h.dproduce(0, 0, 1000)
        a = h.dproduce(0, 1, 1000, result="info")
        r = self.judge(h.drain([(0, b), (1, a), (2, a)]))
        self.assertIn("duplicated", r["problems"])


class WriteGapTest(unittest.TestCase):
    """The longest write gap per fault window (reported, never judged)."""

    def ack(self, h, proc, counter, at_ms):
        v = "%s-%d" % (proc, counter)
        h.add(process=proc, type="invoke", f="produce", queue="q", value=v,
              time=(at_ms - 1) * 1_000_000)
        h.add(process=proc, type="ok", f="produce", queue="q", value=v,
              node="n1", offset=counter, time=at_ms * 1_000_000)
        return v

    def at(self, h, f, at_ms):
        h.add(process="nemesis", type="info", f=f, time=at_ms * 1_000_000)

    def test_gap_runs_from_the_fault_to_the_next_ack(self):
        h = H()
        vals = []
        t = 10
        for k in range(5):           # before any fault: 10 ms apart
            vals.append(self.ack(h, 1, k, t))
            t += 10
        self.at(h, "pause", 100)     # the leader stops at 100 ms
        vals.append(self.ack(h, 1, 5, 105))   # one ack still lands
        vals.append(self.ack(h, 1, 6, 845))   # then 740 ms nothing
        self.at(h, "resume", 900)    # a heal does not open a window
        vals.append(self.ack(h, 1, 7, 1900))  # the gap after the heal counts
        self.at(h, "start-partition", 2000)
        vals.append(self.ack(h, 1, 8, 2300))  # 300 ms from the fault
        vals.append(self.ack(h, 1, 9, 2350))
        self.at(h, "final-heal", 2400)
        h.read(2, [(k, v) for k, v in enumerate(vals)], f="drain")
        r = checker.check(h.ev)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["write_gaps"], {"pause": 1055,
                                           "start-partition": 300})
        self.assertEqual(r["counts"]["longest_write_gap_ms"], 1055)
        self.assertIn("longest write gap 1055 ms", checker.format_report(r))

    def test_window_without_ack_counts_to_its_end(self):
        h = H()
        v0 = self.ack(h, 1, 0, 10)
        self.at(h, "kill", 50)
        self.at(h, "kill", 450)      # a new fault closes the first window
        v1 = self.ack(h, 1, 1, 500)
        self.at(h, "final-heal", 600)
        h.read(2, [(0, v0), (1, v1)], f="drain", time=700 * 1_000_000)
        r = checker.check(h.ev)
        self.assertEqual(r["write_gaps"], {"kill": 400})
        self.assertEqual(r["counts"]["longest_write_gap_ms"], 400)

    def test_time_without_a_majority_is_not_counted_up(self):
        h = H()
        vals = [self.ack(h, 1, 0, 10)]          # n1 acknowledges (3 nodes)
        h.add(process="nemesis", type="info", f="pause", nodes=["n3"],
              time=100 * 1_000_000)             # one down: a majority runs
        vals.append(self.ack(h, 1, 1, 300))     # 200 ms from the fault
        h.add(process="nemesis", type="info", f="power-loss",
              nodes=["n1", "n2"], time=1000 * 1_000_000)  # all down
        h.add(process="nemesis", type="info", f="restart", node="n1",
              time=4000 * 1_000_000)            # 2 of 3 run again
        h.add(process="nemesis", type="info", f="resume", node="n3",
              time=4000 * 1_000_000)
        h.add(process="nemesis", type="info", f="restart", node="n2",
              time=4100 * 1_000_000)
        vals.append(self.ack(h, 1, 2, 4250))    # 250 ms after a majority
        self.at(h, "final-heal", 4300)
        h.read(2, [(k, v) for k, v in enumerate(vals)], f="drain")
        r = checker.check(h.ev)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["write_gaps"], {"pause": 200,
                                           "power-loss": 3250})
        self.assertEqual(r["write_gaps_up"], {"pause": 200,
                                              "power-loss": 250})
        self.assertEqual(r["counts"]["longest_write_gap_up_ms"], 250)
        self.assertIn("majority up 250 ms", checker.format_report(r))

    def test_a_partition_without_a_connected_majority_is_not_counted_up(self):
        h = H()
        vals = [self.ack(h, 1, 0, 10)]
        h.add(process="nemesis", type="info", f="start-partition",
              groups=[["n1"], ["n2", "n3"]], time=100 * 1_000_000)
        vals.append(self.ack(h, 1, 1, 300))     # the majority side elects
        h.add(process="nemesis", type="info", f="kill", node="n2",
              time=1000 * 1_000_000)            # 2 of 3 run, none connected
        h.add(process="nemesis", type="info", f="heal-partition",
              time=5000 * 1_000_000)            # n1 and n3 meet again
        vals.append(self.ack(h, 1, 2, 5200))    # 200 ms after the heal
        h.add(process="nemesis", type="info", f="restart", node="n2",
              time=5300 * 1_000_000)
        self.at(h, "final-heal", 5400)
        h.read(2, [(k, v) for k, v in enumerate(vals)], f="drain")
        r = checker.check(h.ev)
        self.assertEqual(r["verdict"], "valid")
        self.assertEqual(r["write_gaps"], {"start-partition": 200,
                                           "kill": 4200})
        self.assertEqual(r["write_gaps_up"], {"start-partition": 200,
                                              "kill": 200})

    def test_ring_and_bridge_keep_a_connected_majority(self):
        names = ["n%d" % i for i in range(1, 6)]
        ring = {"reach": {"n1": ["n5", "n2"], "n2": ["n1", "n3"],
                          "n3": ["n2", "n4"], "n4": ["n3", "n5"],
                          "n5": ["n4", "n1"]}}
        bridge = {"groups": [["n2", "n3"], ["n4", "n5"]], "bridge": "n1"}
        halves = {"groups": [["n1", "n2"], ["n3", "n4"], ["n5"]]}
        for ev, connected in ((ring, True), (bridge, True),
                              (halves, False)):
            reach = checker.partition_reach(ev, names)
            spans = checker.no_majority_spans(
                [(0, "start-partition", [], reach),
                 (10, "heal-partition", [], None)], names)
            self.assertEqual(spans == [], connected, (ev, spans))
        # A shape the checker does not know counts as the whole network.
        self.assertIsNone(checker.partition_reach({"variant": "x"}, names))
        # The bridge node down: its two sides of two are minorities.
        reach = checker.partition_reach(bridge, names)
        spans = checker.no_majority_spans(
            [(0, "start-partition", [], reach), (5, "kill", ["n1"], None),
             (10, "heal-partition", [], None)], names)
        self.assertEqual(spans, [(5, 10)])

    def test_bridge_node_named_only_by_the_bridge_counts(self):
        h = H()
        vals = [self.ack(h, 1, 0, 10)]
        h.add(process="nemesis", type="info", f="start-partition",
              variant="bridge", bridge="n3", groups=[["n1"], ["n2"]],
              time=100 * 1_000_000)
        vals.append(self.ack(h, 1, 1, 520))     # 420 ms, n3 reaches all
        self.at(h, "final-heal", 600)
        h.read(2, [(k, v) for k, v in enumerate(vals)], f="drain")
        r = checker.check(h.ev)
        self.assertEqual(r["write_gaps_up"], {"start-partition": 420})

    def test_no_fault_no_gap(self):
        h = H()
        v0 = self.ack(h, 1, 0, 10)
        h.read(2, [(0, v0)], f="drain")
        r = checker.check(h.ev)
        self.assertIsNone(r["counts"]["longest_write_gap_ms"])
        self.assertEqual(r["write_gaps"], {})


if __name__ == "__main__":
    unittest.main()
