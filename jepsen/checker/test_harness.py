#!/usr/bin/env python3
"""
Unit tests of the pure parts of jepsen/harness.py (no root, no network):
the majorities-ring and bridge partition maps, and the bit-flip / truncate
corruption of a stopped node's index files (on a temporary directory).
Run: python3 -m unittest -v test_harness  (from this folder).
"""
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
import harness  # noqa: E402


class StubRun:
    """Just what Run.ring / Run.bridge / Run.corrupt use."""

    def __init__(self, n, root=None):
        self.names = ["n%d" % i for i in range(1, n + 1)]
        self.dir = root
        self.cuts = []

    def cut(self, sees, event, **kw):
        self.cuts.append((sees, event, kw))

    def data_dir(self, nm):
        return os.path.join(self.dir, nm, "data")


def reach(sees, a, b):
    """Symmetric reachability as the nft rules implement it: a packet
    from b is dropped at a unless b is in sees[a], and vice versa."""
    return a == b or (b in sees[a] and a in sees[b])


class PartitionMapTest(unittest.TestCase):
    def test_ring_of_five(self):
        for seed in range(20):
            run = StubRun(5)
            harness.Run.ring(run, random.Random(seed))
            sees, event, kw = run.cuts[0]
            self.assertEqual(event, "start-partition")
            self.assertEqual(kw["variant"], "ring")
            order = kw["ring"]
            self.assertEqual(sorted(order), run.names)
            for i, nm in enumerate(order):
                # Each node reaches exactly its two ring neighbours
                # (plus itself): a majority of 3, none of them equal.
                self.assertEqual(sees[nm], {order[i - 1],
                                            order[(i + 1) % 5]})
                n_reach = sum(reach(sees, nm, o) for o in run.names)
                self.assertEqual(n_reach, 3)
            majorities = {frozenset(o for o in run.names
                                    if reach(sees, nm, o))
                          for nm in run.names}
            self.assertEqual(len(majorities), 5)

    def test_bridge(self):
        for n in (3, 5):
            for seed in range(20):
                run = StubRun(n)
                harness.Run.bridge(run, random.Random(seed))
                sees, _event, kw = run.cuts[0]
                b = kw["bridge"]
                a_side, b_side = kw["groups"]
                self.assertEqual(len(a_side), (n - 1) // 2)
                self.assertEqual(sorted(a_side + b_side + [b]), run.names)
                for o in run.names:
                    self.assertTrue(reach(sees, b, o))
                for x in a_side:
                    for y in b_side:
                        self.assertFalse(reach(sees, x, y))
                    for y in a_side:
                        self.assertTrue(reach(sees, x, y))
                # Only the bridge's side (halves + bridge) is a majority.
                self.assertEqual(
                    sum(reach(sees, b, o) for o in run.names), n)


class CorruptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run = StubRun(3, self.tmp.name)
        idx = os.path.join(self.run.data_dir("n1"), "index")
        os.makedirs(os.path.join(idx, "log"))
        os.makedirs(os.path.join(idx, "lmdb"))
        self.seg = os.path.join(idx, "log", "00000000000000000000.seg")
        self.mdb = os.path.join(idx, "lmdb", "data.mdb")
        self.orig = {}
        for path, size in ((self.seg, 5000), (self.mdb, 8192)):
            data = bytes(random.Random(size).getrandbits(8)
                         for _ in range(size))
            with open(path, "wb") as fh:
                fh.write(data)
            self.orig[path] = data

    def tearDown(self):
        self.tmp.cleanup()

    def test_bitflip_flips_exactly_the_recorded_bits(self):
        files = set()
        for seed in range(12):
            for path, data in self.orig.items():
                with open(path, "wb") as fh:
                    fh.write(data)
            info = harness.Run.corrupt(self.run, "n1", "bitflip",
                                       random.Random(seed))
            path = os.path.join(self.tmp.name, info["file"])
            files.add(path)
            with open(path, "rb") as fh:
                now = fh.read()
            expect = bytearray(self.orig[path])
            for off, bit in info["flipped"]:
                expect[off] ^= 1 << bit
            self.assertEqual(now, bytes(expect))
            self.assertNotEqual(now, self.orig[path])
            self.assertTrue(1 <= len(info["flipped"]) <= 8)
        # Both kinds of file get picked.
        self.assertEqual(files, {self.seg, self.mdb})

    def test_truncate_at_recorded_point(self):
        info = harness.Run.corrupt(self.run, "n1", "truncate",
                                   random.Random(3))
        path = os.path.join(self.tmp.name, info["file"])
        self.assertLess(info["truncated_at"], info["size"])
        self.assertEqual(os.path.getsize(path), info["truncated_at"])
        with open(path, "rb") as fh:
            self.assertEqual(fh.read(),
                             self.orig[path][:info["truncated_at"]])

    def test_no_index_files(self):
        empty = StubRun(3, self.tmp.name)
        info = harness.Run.corrupt(empty, "n2", "bitflip", random.Random(1))
        self.assertIsNone(info["file"])


if __name__ == "__main__":
    unittest.main()
