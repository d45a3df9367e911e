#!/usr/bin/env python3
"""Self-test of the integration harness pieces that need no running node:
pure-Python XXH32 against vectors computed with libxxhash (seed 0 and the
tern seed 0x7465726e), frame encode/decode round trip, parsers."""
import os
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

VECTORS = [  # (data, seed, XXH32) from libxxhash 0.8.1
    (b"", 0, 0x02CC5D05),
    (b"abc", 0, 0x32D153FF),
    (b"Nobody inspects the spammish repetition", 0, 0xE2293B2F),
    (b"", h.TERN_SEED, 0x250A52F5),
    (b"tern", h.TERN_SEED, 0x10307A75),
    (b"0123456789abcdef", h.TERN_SEED, 0x362A0E80),
    (bytes(range(256)) * 3, h.TERN_SEED, 0xFDEF0DD7),
]


def main(c):
    c.step("XXH32 vectors")
    for data, seed, want in VECTORS:
        got = h.xxh32(data, seed)
        c.check(got == want, "xxh32(len=%d, seed=0x%x) = 0x%08x" %
                (len(data), seed, want), "got 0x%08x" % got)

    c.step("frame encode/decode")
    body = h.put_str("orders")
    raw = h.encode_frame(h.OP["QUEUE_CREATE"], body, request_id=42)
    c.check(len(raw) == 24 + len(body), "frame length = 24 + body")
    magic, ver, op, blen, rid, status, csum = h.HEADER.unpack(raw[:24])
    c.check((magic, ver, op, blen, rid, status) ==
            (0x6E74, 1, 1, len(body), 42, 0), "header fields")
    c.check(raw[:2] == b"tn", "magic bytes are 'tn' on the wire")
    f = h.Frame(raw[:24], raw[24:])
    c.check(f.checksum_ok, "checksum verifies")
    bad = h.Frame(raw[:24], raw[24:-1] + b"X")
    c.check(not bad.checksum_ok, "corrupted body fails checksum")
    err = h.encode_frame(h.OP["ERROR"] | h.OP_RESPONSE, h.put_str("boom"),
                         status=h.CODE["TERN_EMALFORMED"])
    ef = h.Frame(err[:24], err[24:])
    c.check(ef.error_message() == "boom" and ef.status == -31006,
            "error body message")

    c.step("parsers")
    c.check(h.parse_consume("0\tp-0\n1\tp-1\njunk\n") == [(0, "p-0"),
                                                          (1, "p-1")],
            "parse_consume")
    c.check(h.duplicates(["a", "b", "a", "a"]) == {"a": 3}, "duplicates")
    st = h.normalize_status({"node_id": 2, "role": "leader",
                             "writable": True, "last_applied": 9})
    c.check(st["is_leader"] and st["writable"] and st["last_applied"] == 9,
            "normalize_status")
    c.check(len(set(h.free_ports(6))) == 6, "free_ports distinct")
    c.check(struct.calcsize("<HBBIQiI") == 24, "header struct is 24 bytes")


if __name__ == "__main__":
    h.run_test(main)
