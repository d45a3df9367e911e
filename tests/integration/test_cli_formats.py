#!/usr/bin/env python3
"""The `tern` CLI against 3 real nodes: consume --format raw|text|json
prints payloads with dots, newlines, binary bytes and headers whole (JSON:
UTF-8 strings, base64 with payload_encoding for other bytes); the default
output, "<offset>\\t<payload>", prints each payload whole on one line
(separators, '\\' and control bytes escaped); a refused
connection fails with the reason and exit code 3, and one refused server
beside live ones does not matter; the progress line is drawn on a terminal
(a pty) and never into a pipe; scripts/cluster.sh status exits 1 and names
a node that is down, 0 when all run."""
import base64
import json
import os
import pty
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def run(cl, args, data=b"", servers=None, timeout=60):
    """The CLI with stdin data (bytes); CompletedProcess with bytes."""
    srv = cl.servers() if servers is None else servers
    cmd = [cl.cli, "-s", srv] + cl.cli_tls + [str(a) for a in args]
    return subprocess.run(cmd, input=data, capture_output=True,
                          timeout=timeout)


def run_pty_stderr(cl, args, timeout=60):
    """The CLI with stderr on a pty, stdout to /dev/null; (rc, bytes the
    terminal got)."""
    master, slave = pty.openpty()
    cmd = [cl.cli, "-s", cl.servers()] + cl.cli_tls + [str(a) for a in args]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=slave,
                           timeout=timeout)
    finally:
        os.close(slave)
    got = b""
    for _ in range(10000):  # bounded: the pty holds what was written
        try:
            d = os.read(master, 65536)
        except OSError:
            break
        if not d:
            break
        got += d
    os.close(master)
    return p.returncode, got


def check_formats(c, cl):
    c.step("produce payloads with dots, newlines, binary bytes, headers")
    r = run(cl, ["queue", "create", "fmt"])
    c.check(r.returncode == 0, "queue create", r.stderr)
    r = run(cl, ["produce", "fmt", "--header", 'q"uote=v\\al',
                 "--key", "k.1"], b"a.b.c\nh\xc3\xa9 w\xc3\xb6rld\n")
    c.check(r.returncode == 0, "produce lines", r.stderr)
    multi = b"line1\nline2.\tend"
    binary = bytes(range(256))
    for blob in (multi, binary):
        r = run(cl, ["produce", "fmt", "--raw"], blob)
        c.check(r.returncode == 0, "produce --raw", r.stderr)

    c.step("default and --format text: offset and the whole payload, "
           "escaped, one line each")
    r = run(cl, ["consume", "fmt"])
    lines = r.stdout.split(b"\n")
    c.check(len(lines) == 5 and lines[4] == b"", "one line per message",
            r.stdout[:200])
    c.check(lines[0] == b"0\ta.b.c", "a payload with dots is whole",
            lines[0])
    c.check(lines[1] == "1\thé wörld".encode(), "UTF-8 as itself",
            lines[1])
    c.check(lines[2] == b"2\tline1\\nline2.\\tend",
            "newline and tab escaped", lines[2])
    want = b"3\t" + b"".join(
        {0x5c: b"\\\\", 0x09: b"\\t", 0x0a: b"\\n", 0x0d: b"\\r"}.get(
            b, b"\\x%02x" % b if b < 0x20 or b >= 0x7f else bytes([b]))
        for b in binary)
    c.check(lines[3] == want, "binary bytes as \\xHH, '\\' doubled",
            lines[3][:120])
    t = run(cl, ["consume", "fmt", "--format", "text"])
    c.check(t.stdout == r.stdout, "--format text is the default output")

    c.step("--format raw: payloads whole, then the delimiter")
    r = run(cl, ["consume", "fmt", "--format", "raw"])
    want = b"a.b.c\n" + "hé wörld".encode() + b"\n" + multi + b"\n" + \
        binary + b"\n"
    c.check(r.stdout == want, "raw with the default delimiter",
            r.stdout[:80])
    r = run(cl, ["consume", "fmt", "--format", "raw", "--delimiter", "\\0"])
    c.check(r.stdout.split(b"\0")[:3] == [b"a.b.c", "hé wörld".encode(),
                                          multi],
            "raw with a NUL delimiter", r.stdout[:80])

    c.step("--format json: every field, escaped; base64 for binary")
    r = run(cl, ["consume", "fmt", "--format", "json"])
    c.check(r.returncode == 0, "consume --format json", r.stderr)
    got = [json.loads(x) for x in r.stdout.decode().splitlines()]
    c.check(len(got) == 4, "4 objects", len(got))
    c.check(all(g["queue"] == "fmt" and g["offset"] == i and
                len(g["id"]) == 32 and g["append_ts"] > 0
                for i, g in enumerate(got)), "queue, offset, id, append_ts")
    c.check(got[0]["payload"] == "a.b.c" and
            got[1]["payload"] == "hé wörld", "UTF-8 payloads whole", got[:2])
    c.check(got[0].get("key") == "k.1" and
            got[0].get("headers") == {'q"uote': "v\\al"} and
            got[0].get("producer_ts", 0) > 0,
            "key, headers (escaped) and producer time", got[0])
    c.check(got[2]["payload"] == multi.decode() and
            "payload_encoding" not in got[2], "newlines and tabs escaped")
    c.check(got[3].get("payload_encoding") == "base64" and
            base64.b64decode(got[3]["payload"]) == binary,
            "binary payload as base64", got[3].get("payload", "")[:40])


def check_connect_errors(c, cl):
    c.step("a refused connection fails with the reason and exit code 3")
    dead = "127.0.0.1:%d" % h.free_ports(1)[0]
    t0 = time.monotonic()
    r = run(cl, ["queue", "list"], servers=dead)
    took = time.monotonic() - t0
    c.info("refused in %.3f s" % took)
    err = r.stderr.decode()
    c.check(r.returncode == 3, "exit code 3", (r.returncode, err))
    c.check("Connection refused" in err and "outcome unknown" not in err,
            "says refused, not outcome unknown", err)
    c.step("one refused server beside the live ones: works")
    r = run(cl, ["consume", "fmt", "--max", 1],
            servers=dead + "," + cl.servers())
    c.check(r.returncode == 0 and r.stdout == b"0\ta.b.c\n",
            "consume through the live servers", r.stderr)


def check_progress(c, cl):
    c.step("progress line on a terminal's stderr, never into a pipe")
    rc, tty = run_pty_stderr(cl, ["produce", "fmt", "--count", 2000,
                                  "--window", 8])
    c.check(rc == 0, "produce on a pty", tty[-200:])
    c.check(b"\rproduce: " in tty and b" msgs, " in tty and b" msg/s, " in tty,
            "progress drawn (count, rate, elapsed)", tty[:200])
    c.check(b"\r\x1b[K" in tty, "progress erased at the end", tty[-200:])
    r = run(cl, ["produce", "fmt", "--count", 2000, "--window", 8])
    c.check(r.returncode == 0 and b"\r" not in r.stderr and
            b"msg/s" not in r.stderr, "no progress into a pipe", r.stderr)
    rc, tty = run_pty_stderr(cl, ["consume", "fmt"])
    c.check(rc == 0 and b"\rconsume: " in tty,
            "consume to a file draws progress on the terminal", tty[:200])


def check_cluster_sh(c):
    c.step("scripts/cluster.sh status: 0 when all run, 1 naming a down node")
    script = os.path.join(ROOT, "scripts", "cluster.sh")
    d = h.scratch_dir("tern-it-clustersh-")
    env = dict(os.environ, TERN_PEER_AUTH="none")
    bin_dir = os.path.dirname(h.binaries()[0])
    env["TERND"], env["TERN_CLI"] = h.binaries()
    base = subprocess.run([script, "free-base"], capture_output=True,
                          text=True, env=env, timeout=30).stdout.strip()
    args = [script, "--dir", os.path.join(d, "c"), "--base-port", base]
    c.info("cluster.sh base port %s, binaries in %s" % (base, bin_dir))
    try:
        r = subprocess.run(args + ["up"], capture_output=True, text=True,
                           env=env, timeout=60)
        c.check(r.returncode == 0, "cluster.sh up", r.stderr[-300:])
        r = subprocess.run(args + ["status"], capture_output=True,
                           text=True, env=env, timeout=60)
        c.check(r.returncode == 0, "status exits 0 with 3 nodes up",
                r.stdout + r.stderr)
        r = subprocess.run(args + ["kill", "3"], capture_output=True,
                           text=True, env=env, timeout=60)
        c.check(r.returncode == 0, "kill node 3", r.stderr)
        r = subprocess.run(args + ["status"], capture_output=True,
                           text=True, env=env, timeout=60)
        c.check(r.returncode == 1 and "node 3: not running" in r.stdout and
                "node(s) 3 down" in r.stderr,
                "status exits 1 and names node 3", r.stdout + r.stderr)
    finally:
        subprocess.run(args + ["down"], capture_output=True, env=env,
                       timeout=60)


def main(c):
    with h.Cluster(3) as cl:
        c.step("start 3 nodes")
        cl.start()
        check_formats(c, cl)
        check_connect_errors(c, cl)
        check_progress(c, cl)
    check_cluster_sh(c)


if __name__ == "__main__":
    h.run_test(main)
