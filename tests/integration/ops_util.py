"""Helpers of the operations tests (test_transfer.py,
test_rolling_restart.py, test_old_data_dir.py): a steady produce load
through the CLI that counts client errors and measures the longest pause
between acknowledgements, and a rolling restart of a harness cluster done
the way scripts/rolling-restart.sh does it (followers first, the leader
last after a leadership transfer, each node back and caught up before the
next)."""
import os
import threading
import time

import tern_harness as h


class ProduceLoad:
    """Rounds of `tern produce QUEUE --count ROUND` (one producer id per
    round, ids "<prefix><round>-<n>") run back to back in a thread, all
    acknowledgements appended to one ack log, until stop() or max_rounds
    or max_s. A round that exits non-zero is a client error (its stderr is
    kept). A sampler notes when the ack log grows (every 5 ms): gap() is
    the longest time without a new acknowledgement while the load ran."""

    def __init__(self, cl, queue, prefix="w", round_count=300, size=64,
                 max_rounds=400, max_s=120.0, servers=None, login=()):
        self.cl, self.queue, self.prefix = cl, queue, prefix
        self.round_count, self.size = round_count, size
        self.max_rounds, self.max_s = max_rounds, max_s
        self.servers, self.login = servers, list(login)
        self.acks = os.path.join(cl.dir, "acks-%s.txt" % prefix)
        self.errors = []  # (round, rc, stderr tail)
        self.rounds = 0
        self._stop = threading.Event()
        self._last_growth = None
        self._gap = 0.0
        self._gap_at = None
        self._t = threading.Thread(target=self._run, daemon=True)
        self._s = threading.Thread(target=self._sample, daemon=True)

    def start(self):
        self._t0 = time.monotonic()
        self._t.start()
        self._s.start()
        return self

    def _run(self):
        deadline = self._t0 + self.max_s
        while (not self._stop.is_set() and self.rounds < self.max_rounds and
               time.monotonic() < deadline):
            k = self.rounds
            r = self.cl.tern(*self.login, "produce", self.queue, "--count",
                             self.round_count, "--size", self.size,
                             "--ack-log", self.acks, "--id-prefix",
                             "%s%d-" % (self.prefix, k), timeout=90,
                             servers=self.servers)
            self.rounds += 1
            if r.returncode != 0:
                self.errors.append((k, r.returncode, r.stderr.strip()[-400:]))

    def _sample(self):
        size = -1
        while not self._stop.is_set() or self._t.is_alive():
            try:
                s = os.path.getsize(self.acks)
            except OSError:
                s = 0
            now = time.monotonic()
            if s != size:
                if self._last_growth is not None and size > 0:
                    g = now - self._last_growth
                    if g > self._gap:
                        self._gap, self._gap_at = g, now - self._t0
                if s > 0:
                    self._last_growth = now
                size = s
            if not self._t.is_alive():
                break
            time.sleep(0.005)

    def acked(self):
        return h.read_ack_log(self.acks)

    def wait_acks(self, n, timeout=60):
        return h.poll(lambda: len(self.acked()) >= n, timeout,
                      interval=0.02) is not None

    def stop(self, timeout=120):
        self._stop.set()
        self._t.join(timeout)
        self._s.join(10)
        return not self._t.is_alive()

    def gap(self):
        """(longest pause between acknowledgements in s, when it ended in
        s after the start)."""
        return self._gap, self._gap_at


def status_of(cl, i, timeout=2.0):
    return cl.status(i, timeout=timeout)


def wait_caught_up(cl, i, timeout=60):
    """Node i answers, knows a leader and has applied what the leader had
    committed when i came back. Returns the seconds it took or None."""
    t0 = time.monotonic()
    st = h.poll(lambda: (lambda s: s if s and s.get("leader_id") else None)(
        status_of(cl, i)), timeout, interval=0.1)
    if st is None:
        return None
    lid = st["leader_id"]
    lst = status_of(cl, lid) if lid in cl.nodes else None
    target = (lst or {}).get("commit_index") or 0
    left = max(1.0, timeout - (time.monotonic() - t0))
    if not cl.wait_applied(i, target, left):
        return None
    return time.monotonic() - t0


def transfer(cl, to=None, servers=None, timeout_ms=10000):
    args = ["cluster", "transfer"] + (["--to", to] if to else [])
    return cl.tern(*args, servers=servers, timeout_ms=timeout_ms,
                   timeout=timeout_ms / 1000 + 10)


def rolling_restart(cl, c, log=print):
    """Restart every node of cl in turn: followers first, then the leader
    after handing its leadership over (tern cluster transfer), each
    stopped by PID with SIGTERM (exit code 0 expected) and back and caught
    up before the next. Returns a list of per-node records."""
    leader = cl.wait_leader(20)
    order = [i for i in sorted(cl.nodes) if i != leader] + [leader]
    out = []
    for i in order:
        rec = {"node": i, "was_leader": i == leader}
        if i == leader:
            t0 = time.monotonic()
            r = transfer(cl)
            rec["transfer"] = (r.returncode, r.stdout.strip(),
                               r.stderr.strip()[-300:])
            rec["transfer_ms"] = 1000 * (time.monotonic() - t0)
            c.check(r.returncode == 0, "leader %d hands over before its "
                    "restart (%s, %.0f ms)" % (i, r.stdout.strip(),
                                               rec["transfer_ms"]),
                    rec["transfer"])
        t0 = time.monotonic()
        rc = cl.stop(i, timeout=15)
        rec["stop_ms"] = 1000 * (time.monotonic() - t0)
        c.check(rc == 0, "node %d exits 0 on SIGTERM (%.0f ms)" %
                (i, rec["stop_ms"]), rc)
        cl.start_node(i)
        took = wait_caught_up(cl, i)
        rec["catch_up_s"] = took
        c.check(took is not None, "node %d back and caught up (%.1f s)" %
                (i, took or -1))
        log("  info  node %d restarted: %s" % (i, rec))
        out.append(rec)
    return out
