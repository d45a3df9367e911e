#!/usr/bin/env python3
"""
tern Jepsen-style history checker (Python 3 standard library only).

Reads a JSONL history (one event per line) written by jepsen/driver (client
operations) and jepsen/harness.py (nemesis events), judges it and prints a
verdict plus counts. Exit code: 0 valid, 1 invalid, 2 unknown (the history
cannot support a verdict: no acknowledged produce, or no final drain), 3
usage / unreadable history.

History format, one JSON object per line, format version 1:

  {"process": 7, "type": "invoke"|"ok"|"fail"|"info", "f": F,
   "queue": "jq0", "value": ..., "time": <CLOCK_MONOTONIC ns>,
   "node": "n2", "offset": <server offset>, "error": "..."}

  f = "produce": value is the message id "<process>-<counter>" (unique per
      attempt); on "ok", offset is the queue offset the server acknowledged
      (absent/null when the server acknowledged a retry as a duplicate
      without offsets).
  f = "fetch" | "drain" | "final-read": reads of the log; on "ok", value is
      a list of [offset, id] pairs in the order returned. "fetch" are the
      concurrent consumers, "drain" the final read through the leader after
      healing (with "complete": false when it timed out before reaching
      the highest acknowledged offset; still judged), "final-read" one complete read of each node (node = "nX")
      after the drain, used for lost-on-node. A "final-read" with
      "complete": false (node never caught up) is reported, not judged,
      unless its "node_applied" (the node's applied index) is at least
      "leader_commit" (the leader's commit index after the drain): then
      the node claims to hold everything and is judged.
  f = "group-fetch": a consumer-group read (tern_group_fetch, from the
      group's committed offset): "group" names the group, value as for
      fetch, "start" the offset of its first message (absent when empty).
  f = "group-commit": "group", "offset" = the next offset the group will
      read (tern_group_commit); ok / info as for produce.
  process = "nemesis": type "info", f names the fault ("start-partition",
      "heal", "kill", "restart", "pause", "resume", "final-heal", ...).
      The time of the last "final-heal" (or, failing that, of the last
      nemesis event) is the final heal used for the availability figure.

  Retention (the driver's --max-messages M; docs/MESSAGES.md):
  {"process": -1, "f": "retention", "value": M} first; "trim-skip" (a
  reader found its offset below the queue's first offset: "offset", and
  "first" where it went on); drains and final reads carry "start" (the
  node's first offset after the read); "probe-below" per node and queue:
  "served" is true when the node answered a fetch just below its first
  offset with a message.

  Work queue and delayed (docs/WORKQUEUES.md): {"process": -1, "f":
  "workload", "value": "work-queue" | "delayed"} first.
  work-queue: "receive" (ok: value [[offset, id, count], ...], the
  receipts of a tern_receive from shared group "group"); "settle"
  (invoke: value [[offset, count, action, id], ...], action ack / nack /
  extend / release; ok: the same items with the outcome "ok" or "stale"
  appended; fail / info: every item "failed" / "info"); "retire" (the
  process frees its client: the leader releases its leases); "wq-drain"
  (per queue, after the final heal: "complete"); "dlq-read" (the dead-
  letter queue "<queue>-dlq-<group>", read as a drain).
  delayed: produce invoke carries "delay_ms" and "wall_ms" (the driver's
  wall clock, ms since the epoch), ok "due_ms" (the leader's answer) and
  "wall_ms"; fetch ok carries "wall_ms" (when the answer came); reads
  carry "append_ms", each message's append time in the order of value;
  {"process": -1, "f": "delayed-wait", "wall_ms": W}: the drains began
  at W, after the latest acknowledged due time + 2 s (or the drain
  timeout).

Other fields are ignored; lines that are blank are skipped; an unparsable
line is an error (exit 3).

Checks (each a list of offending items in the result; any non-empty list
other than "recovered" and "offset_gaps" makes the verdict invalid):
  lost          acked produce values absent from the final drain of their
                queue (or, for a queue without a drain, never read by
                anyone); "lost_but_seen" counts the lost values that an
                earlier read had seen (visible, then gone). Split per
                producer (the "<process>" part) into
                prefix (counter below the smallest counter read from that
                producer), middle (between smallest and largest read) and
                postfix (above the largest read, or nothing of that producer
                read at all).
  unexpected    values read that no produce ever invoked.
  failed_seen   values whose produce failed ("fail") yet were read.
  duplicated    values read at more than one distinct (queue, offset)
                (the log stored the message twice; idempotent producer and
                unique ids make this invalid).
  recovered     produce "info" values that were later read (fine, reported).
  lost_on_node  per node: acked values absent from that node's complete
                final read.
  fifo          (a) per producer and queue: a later produce of the same
                producer got a smaller offset than an earlier one;
                (b) realtime, per queue: produce a completed ok before
                produce b was invoked, yet offset(b) < offset(a);
                (c) nonmonotonic: one reader process saw offsets of a queue
                go backwards or repeat within its session.
                Offsets come from reads when any reader saw the value, else
                from the acknowledgement.
  offset_conflicts
                (a) two different values at one (queue, offset) (from acks
                and reads together: split brain / inconsistent offsets);
                (b) one value at two offsets: the acknowledged offset differs
                from where the value was read.
  offset_gaps   offsets below the highest read offset of a queue that no
                read covered (reported only; lost values are judged above).
  retention     (only with a "retention" event; M = max_messages)
                acknowledged values below the drain's start are trimmed,
                not lost (lost and lost_on_node judge only offsets at or
                above it), and these are invalid:
                over-trimmed: the drain's start is above end - M (a
                message removed before the limit reached it);
                early-trim: a trim-skip to first F although no produce
                invoked before it got an offset >= F + M - 1 (nothing
                could have pushed F out yet);
                watermark-mismatch: a complete final read of a node whose
                start is below the drain's (a trimmed message came back)
                or above max(drain start, final end - M) (that node
                removed a message the limit had not reached); a start
                between the two is a trim the leader planned after the
                drain, and that node's values below it are trimmed;
                trimmed-served: a probe-below that got a message.
                Reported only: under-trimmed (start below end - M: the
                leader had not planned the last trim yet), trimmed.
  group_regression
                a group-fetch of (queue, group) started below an offset
                that a group-commit of that group had committed ("ok")
                before the fetch was invoked: the committed offset went
                backwards (redelivery of consumed messages). Sound with
                one consumer per group (the driver's group workload),
                since commits of one consumer only grow.
  write gaps    (reported only) per fault window: from a nemesis event
                that starts a fault (any but the heals: heal-partition,
                resume, restart, ...; HEAL_EVENTS) to the next one, the
                longest time without an acknowledged produce: from the
                fault's start to the first "ok" of a produce completed
                after it, then between consecutive "ok"s (all producers
                together), while in the window. A window without any ack
                counts to its end (the next fault, or the last event).
                counts.longest_write_gap_ms is the largest over the run,
                "write_gaps" the largest per fault kind. The same without
                the time no running node reached a majority of the nodes
                (a node is down from a kill, pause, power-loss or wipe
                naming it to the restart, resume or wipe-restart naming
                it; a partition limits whom a node reaches: its group, the
                ring's neighbours, everyone for a bridge node, until the
                heal; nodes are those the nemesis and the
                acknowledgements name): no system can write then, so this
                is the client's recovery once it could
                (counts.longest_write_gap_up_ms, "write_gaps_up").
  stale_leader_reads
                (reported only) fetches with "read_from": "leader" whose
                answer's queue end ("end") is at or below the offset of a
                produce acknowledged before the fetch was invoked: the
                "leader" answered from a stale state. Since F4's fix
                (6d5b567 and the parked-fetch follow-up) only a writable
                leader serves such a fetch, so in runs of later builds
                what is left is a leader cut off from the majority that
                has not stepped down yet (about one election timeout).
                tern does not promise linearizable plain fetches, so this
                is reported, not judged.

Work-queue checks (a history whose "workload" is "work-queue" is judged by
these alone; receipts are keyed by (queue, offset)):
  lost          an acknowledged produce that no settle acked (answered ok,
                or info: an ack whose answer was lost may have committed,
                and then nothing delivers the message again: counted as
                acked_by_ambiguous_ack; or stale for the last delivery
                of the offset ever received: libtern resent an ack whose
                first attempt had committed, acked_by_last_stale_ack)
                and that is not in the DLQ. Not judged (held_by_clock):
                one whose last delivery or settle overlapped a clock
                fault that may run a clock ahead (a rate change, a
                positive skew, until its heal-clock): a lease or nack
                delay stamped by a leader ahead by D lasts D longer
                (docs/WORKQUEUES.md, "A wrong leader clock").
  duplicate_after_ack
                a receive of (queue, offset) invoked after an ack of that
                offset was answered ok (docs/WORKQUEUES.md promises none).
  offset_conflicts
                two values at one (queue, offset) (produce acks and
                receives), and an ack answered ok whose offset holds
                another value than the one the consumer acked.
  stored_twice  one value received at two offsets (the producer is
                idempotent). unexpected and failed_seen as above, over
                receives and the DLQ.
  Reported, not judged (the guarantee is at-least-once): every second
  delivery of an offset, classed by the delivery before it: "nack" (it
  was nacked ok), "leader-change" (its settle's outcome was info /
  failed: the entry was not committed), "release" (its consumer freed its
  client before the redelivery and had not acked), "lease-expiry" (left
  unsettled, acked stale or too late).
  Unknown: no acknowledged produce, or a queue without a wq-drain.

Delayed checks (a history whose "workload" is "delayed": the queue checks
above, less FIFO per producer and realtime, which random delays reorder,
plus):
  early         "read-early": a fetch answered (its wall_ms) before the
                message's earliest due time, the produce's invoke
                wall_ms + delay_ms, minus EARLY_SLOP_MS and the clock
                bound; "appended-early": a read (fetch, drain, final
                read) whose "append_ms" (the append time of the entry
                that fired it, the leader's clock) is below the same.
                The answered due_ms is not used: a copy libtern resent
                may be due earlier. The
                clock bound is 0 without a clock nemesis (the nodes and
                the driver share this machine's clock), else twice the
                largest skew a nemesis "clock" event set (one leader may
                stamp the due time at +X, another fire it at -X; x2 rate:
                CLOCK_RATE_BOUND_S; unknown: 3600 s).
  lost          judged only for messages whose answered due_ms is
                DUE_MARGIN_MS or more before the delayed-wait wall_ms
                (no clock bound: the final heal set every clock back, so
                the leader then fires by this machine's clock); later
                ones (a due time stamped by a leader whose clock ran
                ahead) are counted as not_due.
  duplicated    a value stored at two offsets is invalid: a TIMER_FIRE
                moves a timer once, and delayed produces are
                deduplicated (libtern resends a call's batch after a
                lost connection or leadership under the same producer
                id and seq; the driver never produces a value twice).
"""

import argparse
import bisect
import json
import re
import sys
from collections import defaultdict

HISTORY_VERSION = 1
READ_FS = ("fetch", "drain", "final-read", "consume", "read",
           "group-fetch")
INVALID_CLASSES = ("lost", "unexpected", "failed_seen", "duplicated",
                   "lost_on_node", "fifo", "offset_conflicts",
                   "group_regression", "retention", "early")
# Delayed workload: the leader stamps an entry when it opens it, and a
# request read later in the same loop iteration joins it, so a due time
# may be this much earlier than invoke + delay.
EARLY_SLOP_MS = 5
# Delayed workload: a message due this long before the drain began must
# be in it (the timer pass interval plus a commit, with room to spare).
DUE_MARGIN_MS = 1000
# Delayed workload: a nemesis event this long before a produce call (or
# during it) may have made libtern resend it (a documented duplicate).
FAULT_GRACE_S = 10
# The clock nemesis's rate variant ("+0 x2") runs a clock at double speed
# for one hold (2-8 s): it is at most this far ahead when healed.
CLOCK_RATE_BOUND_S = 10


def _clock_bound_ms(ev):
    """The clock bound a nemesis "clock" event implies, in ms: twice the
    largest skew it sets (one leader may stamp a due time at +X and
    another fire it at -X), CLOCK_RATE_BOUND_S for the x2 rate, the
    harness's largest step (3600 s) when the event does not say."""
    b = 0
    for sp in (ev.get("skews") or {}).values():
        try:
            b = max(b, abs(int(str(sp).split()[0])))
        except ValueError:
            b = max(b, 3600)
    if isinstance(ev.get("amplitude_s"), (int, float)):
        b = max(b, abs(ev["amplitude_s"]))
    if ev.get("variant") == "x2":
        b = max(b, CLOCK_RATE_BOUND_S)
    if b == 0:
        b = 3600
    return int(2 * b * 1000)


class HistoryError(Exception):
    pass


def load_history(path):
    """Parse a JSONL history file into a list of dicts (in file order)."""
    events = []
    with open(path, "r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError as e:
                raise HistoryError("%s:%d: bad JSON: %s" % (path, lineno, e))
            if not isinstance(ev, dict):
                raise HistoryError("%s:%d: not an object" % (path, lineno))
            events.append(ev)
    return events


def split_id(value):
    """'7-42' -> ('7', 42); anything else -> (str(value), None)."""
    if isinstance(value, str) and "-" in value:
        p, _, c = value.rpartition("-")
        try:
            return p, int(c)
        except ValueError:
            pass
    return str(value), None


def _time(ev):
    t = ev.get("time")
    return t if isinstance(t, (int, float)) else None


# Nemesis events that end a fault rather than start one (write gaps).
HEAL_EVENTS = frozenset((
    "heal", "heal-partition", "resume", "restart", "restart-crashed",
    "heal-clock", "heal-delay", "heal-disk-full", "final-heal",
    "wipe-restart", "wipe-rejoined", "member-add", "crash-detected"))


# Nemesis events that take the nodes they name down, and that bring one
# back (write gaps with a majority up).
DOWN_EVENTS = frozenset(("kill", "pause", "power-loss", "wipe"))
UP_EVENTS = frozenset(("restart", "resume", "wipe-restart",
                       "restart-crashed"))


def partition_reach(ev, names):
    """node -> the nodes it reaches (itself included) under a
    start-partition event: "reach" (ring) as given; "groups" with a
    "bridge" node that reaches everyone; plain "groups" (each its own)."""
    names = set(names) | {str(n) for g in ev.get("groups") or [] for n in g}
    if ev.get("bridge"):
        names.add(str(ev["bridge"]))
    if not isinstance(ev.get("reach"), dict) and not ev.get("groups"):
        return None  # a shape this checker does not know: the whole net
    if isinstance(ev.get("reach"), dict):
        reach = {str(k): {str(x) for x in v} | {str(k)}
                 for k, v in ev["reach"].items()}
    else:
        reach = {}
        for g in ev.get("groups") or []:
            side = {str(x) for x in g}
            if ev.get("bridge"):
                side.add(str(ev["bridge"]))
            for nm in g:
                reach[str(nm)] = set(side)
        if ev.get("bridge"):
            reach[str(ev["bridge"])] = set(names)
    for nm in names:
        reach.setdefault(nm, {nm})
    return reach


def _majority_connected(names, down, reach):
    """Does some running node reach a majority of names that run (itself
    included)? reach None: the network is whole."""
    up = set(names) - down
    need = len(names) // 2 + 1
    if reach is None:
        return len(up) >= need
    return any(len((reach.get(nm) or {nm}) & up) >= need for nm in up)


def no_majority_spans(nemesis_nodes, n_nodes):
    """[(start ns, end ns or None)] while no running node reaches a
    majority of the nodes that run (fewer than a majority run, or a
    partition leaves no side with one). nemesis_nodes: time-ordered
    (time ns, f, [node names]) or (time ns, f, [node names], reach) with
    reach the start-partition's partition_reach (None otherwise);
    n_nodes: how many nodes, or their names."""
    names = ({str(x) for x in n_nodes} if not isinstance(n_nodes, int)
             else {"n%d" % (i + 1) for i in range(n_nodes)})
    if not names:
        return []
    down = set()
    reach = None
    spans = []
    start = None
    for item in nemesis_nodes:
        t, f, nodes = item[0], item[1], item[2]
        if f in DOWN_EVENTS:
            down.update(nodes)
        elif f in UP_EVENTS:
            down.difference_update(nodes)
        elif f == "final-heal":
            down.clear()
            reach = None
        elif f == "heal-partition":
            reach = None
        elif f == "start-partition" and len(item) > 3:
            reach = item[3]
        lost = not _majority_connected(names, down, reach)
        if lost and start is None:
            start = t
        elif not lost and start is not None:
            spans.append((start, t))
            start = None
    if start is not None:
        spans.append((start, None))
    return spans


def _overlap(lo, hi, spans):
    total = 0
    for s, e in spans:
        e = hi if e is None else e
        total += max(0, min(hi, e) - max(lo, s))
    return total


def write_gaps(produce_ok_times, nemesis, end_time, spans=()):
    """Longest write gap per fault window (see "write gaps" above).
    produce_ok_times: completion times (ns) of ok produces; nemesis: list
    of (time ns, f) of nemesis events; end_time: the last event's time;
    spans: time without a majority (no_majority_spans), not counted.
    Returns (longest gap in ms or None, {f: longest gap ms})."""
    oks = sorted(produce_ok_times)
    starts = sorted((t, f) for (t, f) in nemesis
                    if f not in HEAL_EVENTS and t is not None)
    per_kind = {}
    longest = None
    for k, (start, f) in enumerate(starts):
        stop = starts[k + 1][0] if k + 1 < len(starts) else None
        lo = bisect.bisect_left(oks, start)
        hi = len(oks) if stop is None else bisect.bisect_left(oks, stop)
        prev = start
        gap = 0
        for t in oks[lo:hi]:
            gap = max(gap, t - prev - _overlap(prev, t, spans))
            prev = t
        if lo == hi:
            last = stop if stop is not None else end_time
            last = last if last is not None else start
            gap = max(gap, last - start - _overlap(start, last, spans))
        ms = int(round(gap / 1e6))
        per_kind[f] = max(per_kind.get(f, 0), ms)
        longest = ms if longest is None else max(longest, ms)
    return longest, per_kind


def check(events):
    """Judge a history (list of event dicts). Returns a result dict."""
    attempts = {}          # value -> queue
    acked = {}             # value -> {"queue", "offset", "invoke", "complete"}
    acked_after_resend = 0  # ok produces that needed tern_produce_resend
    failed = set()
    infos = set()
    invoke_time = {}       # (process, f) -> time of the pending invoke
    pending_value = {}     # process -> value of its pending produce
    reads = defaultdict(set)        # value -> set of (queue, offset)
    read_anywhere = set()
    pos_values = defaultdict(set)   # (queue, offset) -> values
    final_reads = {}                # node -> (complete, set(values))
    reader_last = {}                # (process, queue) -> last offset
    fifo = []
    final_heal = None
    last_nemesis = None
    produce_ok_times = []           # completion times of produce ok
    nemesis_nodes = []              # (time, f, [node]) of nemesis events
    ok_nodes = set()                # nodes named by ok produces
    op_count = defaultdict(int)
    drain_queues = set()
    drained = {}                    # queue -> values in its final drain
    drain_incomplete = set()        # queues whose drain timed out
    leader_reads = []               # (invoke, queue, end, process, done)
    group_commits = defaultdict(list)   # (queue, group) -> [(done, off)]
    group_fetches = []              # (invoke, queue, group, start, proc)
    max_messages = None             # retention: the queues' limit
    drain_start = {}                # queue -> first offset after drain
    drain_end_off = {}              # queue -> end the drain reached
    node_starts = []                # (node, queue, start) complete reads
    trim_skips = []                 # (time, queue, first, process)
    probes = []                     # probe-below events
    workload = None                 # "work-queue" / "delayed" / None
    earliest_due = {}               # delayed: value -> invoke wall + delay
    due_of = {}                     # delayed: value -> due_ms answered
    read_walls = []                 # delayed: (wall_ms, queue, value, proc)
    append_times = []               # delayed: (append_ms, queue, value, proc)
    drain_wall = None               # delayed: wall clock the drains began
    nemesis_times = []
    nemesis_kinds = []              # (time, f) of nemesis events
    end_time = None                 # the latest event time
    clock_bound_ms = 0              # delayed: see "delayed" above

    for ev in events:
        proc = ev.get("process")
        typ = ev.get("type")
        f = ev.get("f")
        t = _time(ev)
        if t is not None:
            end_time = t if end_time is None else max(end_time, t)
        if proc == "nemesis":
            last_nemesis = t if t is not None else last_nemesis
            if f == "final-heal":
                final_heal = t
            if t is not None:
                nemesis_times.append(t)
                nemesis_kinds.append((t, f))
                named = ev.get("nodes") or ([ev["node"]] if ev.get("node")
                                            else [])
                nemesis_nodes.append((t, f, [str(x) for x in named],
                                      ev if f == "start-partition" else None))
            if f == "clock":
                clock_bound_ms = max(clock_bound_ms, _clock_bound_ms(ev))
            continue
        op_count[(f, typ)] += 1
        if f == "workload":
            workload = ev.get("value")
            if workload == "work-queue":
                return check_work_queue(events)
            continue
        if f == "delayed-wait":
            drain_wall = ev.get("wall_ms")
            continue
        if f == "produce" and isinstance(ev.get("wall_ms"), int):
            if typ == "invoke" and isinstance(ev.get("delay_ms"), int):
                earliest_due[ev.get("value")] = ev["wall_ms"] + ev["delay_ms"]
            if typ == "ok" and isinstance(ev.get("due_ms"), int):
                due_of[ev.get("value")] = ev["due_ms"]
        if f == "fetch" and typ == "ok" and isinstance(ev.get("wall_ms"), int):
            for pair in ev.get("value") or []:
                if isinstance(pair, list) and len(pair) == 2:
                    read_walls.append((ev["wall_ms"], ev.get("queue"),
                                       pair[1], proc))
        if f in READ_FS and typ in ("ok", "fail") and \
                isinstance(ev.get("append_ms"), list):
            for pair, ts in zip(ev.get("value") or [], ev["append_ms"]):
                if isinstance(pair, list) and len(pair) == 2 and \
                        isinstance(ts, int):
                    append_times.append((ts, ev.get("queue"), pair[1], proc))
        if f == "retention":
            max_messages = ev.get("value")
            continue
        if f == "trim-skip":
            trim_skips.append((t, ev.get("queue"), ev.get("first"), proc))
            continue
        if f == "probe-below":
            probes.append(ev)
            continue
        if f in ("drain", "final-read") and typ in ("ok", "fail") and \
                isinstance(ev.get("start"), int):
            if f == "drain":
                drain_start[ev.get("queue")] = ev["start"]
                drain_end_off[ev.get("queue")] = ev.get("end")
            elif typ == "ok" and ev.get("complete", True):
                node_starts.append((ev.get("node"), ev.get("queue"),
                                    ev["start"], ev.get("end")))
        if f == "produce":
            v = ev.get("value")
            q = ev.get("queue")
            if typ == "invoke":
                if v in attempts:
                    raise HistoryError("produce value %r invoked twice" % v)
                attempts[v] = q
                invoke_time[v] = t
                pending_value[proc] = v
            elif typ == "ok":
                off = ev.get("offset")
                if ev.get("resends"):
                    acked_after_resend += 1
                acked[v] = {"queue": q, "offset": off,
                            "invoke": invoke_time.get(v), "complete": t,
                            "process": proc}
                if t is not None:
                    produce_ok_times.append(t)
                if ev.get("node"):
                    ok_nodes.add(str(ev["node"]))
                if off is not None:
                    pos_values[(q, off)].add(v)
            elif typ == "fail":
                failed.add(v)
            elif typ == "info":
                infos.add(v)
            continue
        if f == "group-commit":
            if typ == "ok" and isinstance(ev.get("offset"), int):
                group_commits[(ev.get("queue"), ev.get("group"))].append(
                    (t, ev["offset"]))
            continue
        if f in READ_FS and typ == "invoke":
            invoke_time[("read", proc)] = t
        if f == "group-fetch" and typ == "ok" and \
                isinstance(ev.get("start"), int):
            group_fetches.append((invoke_time.get(("read", proc)),
                                  ev.get("queue"), ev.get("group"),
                                  ev["start"], proc))
        if f in READ_FS and (typ == "ok" or
                             (f == "final-read" and typ == "fail")):
            q = ev.get("queue")
            if ev.get("read_from") == "leader" and ev.get("end") is not None:
                leader_reads.append((invoke_time.get(("read", proc)), q,
                                     ev.get("end"), proc, t))
            pairs = ev.get("value") or []
            if f == "drain":
                drain_queues.add(q)
            seen = set()
            if f == "drain":
                drained.setdefault(q, set())
                if ev.get("complete") is False:
                    drain_incomplete.add(q)
            key = (proc, q)
            for pair in pairs:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise HistoryError("bad read pair %r" % (pair,))
                off, v = pair
                reads[v].add((q, off))
                read_anywhere.add(v)
                pos_values[(q, off)].add(v)
                seen.add(v)
                if f == "drain":
                    drained[q].add(v)
                if f != "final-read":
                    last = reader_last.get(key)
                    if last is not None and off <= last:
                        fifo.append({"kind": "nonmonotonic", "process": proc,
                                     "queue": q, "offset": off,
                                     "after": last, "value": v})
                    reader_last[key] = off
            if f == "final-read":
                node = ev.get("node")
                complete = ev.get("complete", typ == "ok") and typ == "ok"
                # A node that says it applied everything the leader had
                # committed after the drain, yet lacks data, is judged.
                na = ev.get("node_applied")
                lc = ev.get("leader_commit")
                if not complete and isinstance(na, int) and \
                        isinstance(lc, int) and lc > 0 and na >= lc:
                    complete = True
                prev = final_reads.get(node)
                if prev is None:
                    final_reads[node] = [complete, seen]
                else:
                    prev[0] = prev[0] and complete
                    prev[1] |= seen

    # ---- total-queue ------------------------------------------------------
    # Lost: for a drained queue, absent from the final drain (the log must
    # still hold every acknowledged message at the end); otherwise never
    # read at all. lost_but_seen: lost values some earlier read had seen.
    def trimmed(v):
        a = acked[v]
        return (max_messages is not None and a["queue"] in drain_start and
                isinstance(a["offset"], int) and
                a["offset"] < drain_start[a["queue"]])

    def legal_start(q, st, end):
        # A node's final start: at or above the drain's (trims are never
        # undone), at most max(drain start, end - M) (a later trim may
        # finish what the drain saw under-trimmed, never more).
        ds = drain_start[q]
        hi = ds if not isinstance(end, int) else max(ds, end - max_messages)
        return ds <= st <= hi

    node_start_of = {}
    if max_messages is not None:
        for (node, q, st, end) in node_starts:
            if q in drain_start and legal_start(q, st, end):
                node_start_of[(node, q)] = st

    def trimmed_on(node, v):
        a = acked[v]
        st = node_start_of.get((node, a["queue"]))
        return (st is not None and isinstance(a["offset"], int) and
                a["offset"] < st)

    # Delayed: an acknowledged message whose answered due time was not at
    # least DUE_MARGIN_MS before the drains began is not judged. No clock
    # bound here: the final heal set every clock back to +0, so from then
    # on the leader fires by this machine's clock.
    def not_due(v):
        if workload != "delayed":
            return False
        due = due_of.get(v)
        return (drain_wall is None or due is None or
                due + DUE_MARGIN_MS > drain_wall)

    def is_lost(v):
        q = acked[v]["queue"]
        if trimmed(v) or not_due(v):
            return False
        if q in drained:
            return v not in drained[q]
        return v not in read_anywhere
    lost_values = sorted(v for v in acked if is_lost(v))
    lost_but_seen = sorted(v for v in lost_values if v in read_anywhere)
    present = set(read_anywhere)
    for v in read_anywhere:
        q = attempts.get(v)
        if q in drained and v not in drained[q]:
            present.discard(v)
    read_counters = defaultdict(list)
    for v in present:
        p, c = split_id(v)
        if c is not None:
            read_counters[p].append(c)
    lost = {"prefix": [], "middle": [], "postfix": []}
    for v in lost_values:
        p, c = split_id(v)
        rc = read_counters.get(p)
        if not rc or c is None or c > max(rc):
            lost["postfix"].append(v)
        elif c < min(rc):
            lost["prefix"].append(v)
        else:
            lost["middle"].append(v)
    unexpected = sorted(v for v in read_anywhere if v not in attempts)
    failed_seen = sorted(v for v in failed if v in read_anywhere)
    duplicated = sorted(v for v in reads if len(reads[v]) > 1)
    # Delayed produces are deduplicated like PRODUCE (libtern resends one
    # call's batch under the same producer id and seq, docs/WORKQUEUES.md)
    # and a TIMER_FIRE moves a timer once: a value stored twice is invalid.
    # Delayed: read before its earliest possible due time (the produce's
    # invoke wall clock + its delay) minus the clock bound.
    early = []
    early_seen = set()
    for kind, lst in (("read-early", read_walls),
                      ("appended-early", append_times)):
        for (w, q, v, proc) in lst:
            e = earliest_due.get(v)
            if e is None or (kind, v) in early_seen or \
                    w >= e - EARLY_SLOP_MS - clock_bound_ms:
                continue
            early_seen.add((kind, v))
            early.append({"kind": kind, "value": v, "queue": q,
                          "process": proc, "at_ms": w, "earliest_due_ms": e,
                          "due_ms": due_of.get(v),
                          "clock_bound_ms": clock_bound_ms})
    recovered = sorted(v for v in infos if v in read_anywhere)
    # Caught up: for every producer, highest read counter >= highest acked.
    acked_max = {}
    for v in acked:
        p, c = split_id(v)
        if c is not None:
            acked_max[p] = max(acked_max.get(p, c), c)
    caught_up = all(read_counters.get(p) and max(read_counters[p]) >= m
                    for p, m in acked_max.items())

    # ---- lost on node -----------------------------------------------------
    lost_on_node = {}
    incomplete_nodes = []
    for node, (complete, seen) in sorted(final_reads.items(),
                                         key=lambda kv: str(kv[0])):
        if not complete:
            incomplete_nodes.append(node)
            continue
        missing = sorted(v for v in acked if v not in seen and
                         not trimmed(v) and not trimmed_on(node, v) and
                         not not_due(v))
        if missing:
            lost_on_node[node] = missing

    # ---- offsets ------------------------------------------------------------
    offset_conflicts = []
    for (q, off), vals in sorted(pos_values.items(),
                                 key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if len(vals) > 1:
            offset_conflicts.append({"kind": "values-at-offset", "queue": q,
                                     "offset": off, "values": sorted(vals)})
    for v, a in sorted(acked.items()):
        if a["offset"] is None or v not in reads:
            continue
        where = reads[v]
        if (a["queue"], a["offset"]) not in where:
            offset_conflicts.append({"kind": "value-at-offsets", "value": v,
                                     "acked": [a["queue"], a["offset"]],
                                     "read": sorted(list(x) for x in where)})
    offset_gaps = []
    read_offsets = defaultdict(set)
    for v in reads:
        for (q, off) in reads[v]:
            read_offsets[q].add(off)
    for q, offs in sorted(read_offsets.items(), key=lambda kv: str(kv[0])):
        lo = min(offs)
        hi = max(offs)
        if hi - lo + 1 != len(offs):
            missing = [o for o in range(lo, hi + 1) if o not in offs]
            offset_gaps.append({"queue": q, "missing": missing[:50],
                                "count": len(missing)})

    # ---- consumer groups -----------------------------------------------------
    group_regression = []
    for inv, q, g, start, proc in group_fetches:
        if inv is None:
            continue
        done = [off for (ct, off) in group_commits.get((q, g), ())
                if ct is not None and ct < inv]
        if done and start < max(done):
            group_regression.append({"queue": q, "group": g,
                                     "process": proc, "start": start,
                                     "committed": max(done)})

    # ---- FIFO ---------------------------------------------------------------
    def offset_of(v):
        a = acked[v]
        for (q, off) in sorted(reads.get(v, ())):
            if q == a["queue"]:
                return off
        return a["offset"]

    # (a) per producer, per queue, in invoke order (not for delayed
    # produces: their random delays reorder them by design).
    per_pq = defaultdict(list)
    for v, a in (acked.items() if workload != "delayed" else ()):
        p, c = split_id(v)
        off = offset_of(v)
        if off is None or c is None:
            continue
        per_pq[(p, a["queue"])].append((c, off, v))
    for (p, q), lst in sorted(per_pq.items(), key=lambda kv: str(kv[0])):
        lst.sort()
        best = None
        for c, off, v in lst:
            if best is not None and off <= best[0]:
                fifo.append({"kind": "producer-order", "producer": p,
                             "queue": q, "value": v, "offset": off,
                             "earlier": best[1], "earlier_offset": best[0]})
            if best is None or off > best[0]:
                best = (off, v)
    # (b) realtime per queue: sweep by invoke time, max offset of everything
    # completed before.
    per_q = defaultdict(list)
    for v, a in (acked.items() if workload != "delayed" else ()):
        off = offset_of(v)
        if off is None or a["invoke"] is None or a["complete"] is None:
            continue
        per_q[a["queue"]].append((a["invoke"], a["complete"], off, v))
    for q, lst in sorted(per_q.items(), key=lambda kv: str(kv[0])):
        by_inv = sorted(lst)
        by_done = sorted(lst, key=lambda x: x[1])
        j = 0
        best = None  # (offset, value)
        for inv, _done, off, v in by_inv:
            while j < len(by_done) and by_done[j][1] < inv:
                cand = by_done[j]
                if best is None or cand[2] > best[0]:
                    best = (cand[2], cand[3])
                j += 1
            if best is not None and best[0] > off:
                fifo.append({"kind": "realtime", "queue": q, "value": v,
                             "offset": off, "earlier": best[1],
                             "earlier_offset": best[0]})

    # ---- stale leader reads (reported only) ----------------------------
    stale = []
    acks_by_q = defaultdict(list)
    for v, a in acked.items():
        if a["offset"] is not None and a["complete"] is not None:
            acks_by_q[a["queue"]].append((a["complete"], a["offset"], v))
    for q in acks_by_q:
        acks_by_q[q].sort()
    reads_by_q = defaultdict(list)
    for inv, q, end, proc, done in leader_reads:
        if inv is not None:
            reads_by_q[q].append((inv, end, proc, done))
    for q, lst in reads_by_q.items():
        lst.sort()
        acks = acks_by_q.get(q, [])
        j = 0
        best = None
        for inv, end, proc, done in lst:
            while j < len(acks) and acks[j][0] < inv:
                if best is None or acks[j][1] > best[0]:
                    best = (acks[j][1], acks[j][2])
                j += 1
            if best is not None and end <= best[0]:
                stale.append({"queue": q, "process": proc, "end": end,
                              "acked_offset": best[0], "acked": best[1],
                              "invoke": inv, "complete": done})

    # ---- retention ----------------------------------------------------------
    retention = []
    under_trimmed = []
    if max_messages is not None:
        m = max_messages
        for q, st in sorted(drain_start.items(), key=lambda kv: str(kv[0])):
            end = drain_end_off.get(q)
            if not isinstance(end, int):
                continue
            if st > max(0, end - m):
                retention.append({"kind": "over-trimmed", "queue": q,
                                  "start": st, "end": end})
            elif st < end - m:
                under_trimmed.append({"queue": q, "start": st, "end": end})
        # Offsets whose produce was invoked, with that time.
        offs = defaultdict(list)    # queue -> [(invoke, offset)]
        for v, a in acked.items():
            if isinstance(a["offset"], int):
                offs[a["queue"]].append((a["invoke"], a["offset"]))
        for v, where in reads.items():
            if v in acked or v not in invoke_time:
                continue
            for (q, off) in where:
                offs[q].append((invoke_time[v], off))
        for (t, q, first, proc) in trim_skips:
            if not isinstance(first, int) or first == 0:
                continue
            need = first + m - 1
            ok = any(inv is not None and t is not None and inv <= t and
                     off >= need for (inv, off) in offs.get(q, []))
            if not ok:
                retention.append({"kind": "early-trim", "queue": q,
                                  "first": first, "process": proc,
                                  "time": t})
        for (node, q, st, end) in node_starts:
            if q in drain_start and not legal_start(q, st, end):
                retention.append({"kind": "watermark-mismatch", "node": node,
                                  "queue": q, "start": st,
                                  "drain_start": drain_start[q]})
        for ev in probes:
            if ev.get("served"):
                retention.append({"kind": "trimmed-served",
                                  "node": ev.get("node"),
                                  "queue": ev.get("queue"),
                                  "offset": ev.get("offset")})

    # ---- availability -------------------------------------------------------
    heal = final_heal if final_heal is not None else last_nemesis
    recovery_s = None
    if heal is not None:
        after = [t for t in produce_ok_times if t >= heal]
        if after:
            recovery_s = (min(after) - heal) / 1e9

    longest_gap_ms, gaps_by_kind = write_gaps(produce_ok_times,
                                              nemesis_kinds, end_time)
    # The nodes: those the nemesis names, and those acknowledgements name
    # by a node name (the driver writes a raw address when it cannot map
    # one, which is no node of its own).
    names = {n for n in ok_nodes if re.match(r"^n[0-9]+$", str(n))}
    for _t, _f, nodes, pev in nemesis_nodes:
        names.update(nodes)
        if pev is not None:
            names.update(str(n) for g in pev.get("groups") or [] for n in g)
            names.update(str(n) for n in (pev.get("reach") or {}))
            if pev.get("bridge"):
                names.add(str(pev["bridge"]))
    timeline = [(t, f, nodes,
                 partition_reach(pev, names) if pev is not None else None)
                for t, f, nodes, pev in sorted(nemesis_nodes,
                                               key=lambda x: x[0])]
    spans = no_majority_spans(timeline, names)
    longest_up_ms, gaps_up_by_kind = write_gaps(produce_ok_times,
                                                nemesis_kinds, end_time,
                                                spans)

    n_attempt = len(attempts)
    n_acked = len(acked)
    n_lost = len(lost_values)
    result = {
        "history_version": HISTORY_VERSION,
        "counts": {
            "attempt": n_attempt,
            "acknowledged": n_acked,
            "acked_after_resend": acked_after_resend,
            "failed": len(failed),
            "info": len(infos),
            "read_distinct": len(read_anywhere),
            "lost": n_lost,
            "lost_prefix": len(lost["prefix"]),
            "lost_middle": len(lost["middle"]),
            "lost_postfix": len(lost["postfix"]),
            "lost_but_seen": len(lost_but_seen),
            "unexpected": len(unexpected),
            "failed_seen": len(failed_seen),
            "duplicated": len(duplicated),
            "recovered": len(recovered),
            "lost_on_node": sum(len(x) for x in lost_on_node.values()),
            "fifo": len(fifo),
            "offset_conflicts": len(offset_conflicts),
            "offset_gaps": sum(g["count"] for g in offset_gaps),
            "stale_leader_reads": len(stale),
            "group_regression": len(group_regression),
            "group_fetch_ok": op_count[("group-fetch", "ok")],
            "group_commit_ok": op_count[("group-commit", "ok")],
            "fetch_ok": op_count[("fetch", "ok")],
            "final_read_nodes": len(final_reads),
            "retention": len(retention),
            "trimmed": sum(1 for v in acked if trimmed(v)),
            "trim_skips": len(trim_skips),
            "probes_below": len(probes),
            "early": len(early),
            "not_due": sum(1 for v in acked if not_due(v)),
            "longest_write_gap_ms": longest_gap_ms,
            "longest_write_gap_up_ms": longest_up_ms,
        },
        "write_gaps": gaps_by_kind,
        "write_gaps_up": gaps_up_by_kind,
        "workload": workload or "queue",
        "early": early,
        "clock_bound_ms": clock_bound_ms,
        "retention": retention,
        "under_trimmed": under_trimmed,
        "lost": lost,
        "lost_but_seen": lost_but_seen,
        "unexpected": unexpected,
        "failed_seen": failed_seen,
        "duplicated": duplicated,
        "recovered": recovered,
        "lost_on_node": lost_on_node,
        "incomplete_final_reads": incomplete_nodes,
        "fifo": fifo,
        "offset_conflicts": offset_conflicts,
        "offset_gaps": offset_gaps,
        "stale_leader_reads": stale,
        "group_regression": group_regression,
        "drain_caught_up": caught_up,
        "drain_incomplete": sorted(str(q) for q in drain_incomplete),
        "recovery_after_heal_s": recovery_s,
        "final_heal_seen": heal is not None,
    }
    if n_attempt:
        for k in ("acknowledged", "lost", "unexpected", "duplicated",
                  "recovered"):
            result["counts"][k + "_frac"] = round(
                result["counts"][k] / n_attempt, 6)
    problems = [k for k in INVALID_CLASSES if result["counts"][k]]
    acked_queues = {a["queue"] for a in acked.values()}
    undrained = sorted(str(q) for q in acked_queues - drain_queues)
    result["undrained_queues"] = undrained
    if problems:
        verdict = "invalid"
    elif n_acked == 0 or undrained:
        verdict = "unknown"
    else:
        verdict = "valid"
    result["problems"] = problems
    result["verdict"] = verdict
    return result


# ---- work-queue -------------------------------------------------------------

WQ_INVALID_CLASSES = ("lost", "unexpected", "failed_seen", "stored_twice",
                      "duplicate_after_ack", "offset_conflicts")


def _runs_ahead(ev):
    """Whether a nemesis clock event may put a node's clock ahead: a rate
    change, or a skew with a positive offset (unknown shapes: yes)."""
    if ev.get("variant") == "skew":
        skews = ev.get("skews") or {}
        return any(not str(x).startswith("-") for x in skews.values())
    return True


def check_work_queue(events):
    """Judge a work-queue history (docs/WORKQUEUES.md, "Duplicates")."""
    attempts = {}           # value -> queue
    acked = {}              # value -> (queue, offset or None)
    failed, infos = set(), set()
    invoke_time = {}        # (process, f) -> time of the pending invoke
    # Deliveries and settles by receipt position (queue, offset):
    # [(invoke, done, process, count, value)] and
    # [(invoke, done, process, count, value, action, outcome)].
    deliveries = defaultdict(list)
    settles = defaultdict(list)
    pos_values = defaultdict(set)   # (queue, offset) -> values
    where = defaultdict(set)        # value -> (queue, offset) received at
    retired = {}            # process -> time it freed its client
    dlq = set()
    drains = {}             # queue -> complete
    ack_timeout_ms = None
    final_heal = last_nemesis = None
    produce_ok_times = []
    ahead = []              # [start, end] of clock faults that may run ahead
    for ev in events:
        proc, typ, f, t = (ev.get("process"), ev.get("type"), ev.get("f"),
                           _time(ev))
        q = ev.get("queue")
        if proc == "nemesis":
            last_nemesis = t if t is not None else last_nemesis
            if f == "final-heal":
                final_heal = t
            if f == "clock" and t is not None and _runs_ahead(ev):
                ahead.append([t, None])
            if f in ("heal-clock", "final-heal") and ahead and \
                    ahead[-1][1] is None:
                ahead[-1][1] = t
            continue
        if f == "workload":
            ack_timeout_ms = ev.get("ack_timeout_ms")
            continue
        if typ == "invoke":
            invoke_time[(proc, f)] = t
        if f == "produce":
            v = ev.get("value")
            if typ == "invoke":
                if v in attempts:
                    raise HistoryError("produce value %r invoked twice" % v)
                attempts[v] = q
            elif typ == "ok":
                acked[v] = (q, ev.get("offset"))
                if t is not None:
                    produce_ok_times.append(t)
                if isinstance(ev.get("offset"), int):
                    pos_values[(q, ev["offset"])].add(v)
            elif typ == "fail":
                failed.add(v)
            elif typ == "info":
                infos.add(v)
        elif f == "receive" and typ == "ok":
            inv = invoke_time.get((proc, "receive"))
            for item in ev.get("value") or []:
                if not (isinstance(item, list) and len(item) == 3):
                    raise HistoryError("bad receive item %r" % (item,))
                off, v, n = item
                deliveries[(q, off)].append((inv, t, proc, n, v))
                pos_values[(q, off)].add(v)
                where[v].add((q, off))
        elif f == "settle" and typ in ("ok", "fail", "info"):
            inv = invoke_time.get((proc, "settle"))
            for item in ev.get("value") or []:
                if not (isinstance(item, list) and len(item) == 5):
                    raise HistoryError("bad settle item %r" % (item,))
                off, n, action, v, outcome = item
                settles[(q, off)].append((inv, t, proc, n, v, action,
                                          outcome))
        elif f == "retire":
            retired.setdefault(proc, t)
        elif f == "dlq-read" and typ == "ok":
            for pair in ev.get("value") or []:
                if isinstance(pair, list) and len(pair) == 2:
                    dlq.add(pair[1])
        elif f == "wq-drain" and typ == "ok":
            drains[q] = bool(ev.get("complete"))

    def acks(pos, outcomes):
        return [s for s in settles.get(pos, ()) if s[5] == "ack" and
                s[6] in outcomes]

    def acked_value(v, outcomes):
        return any(acks(pos, outcomes) for pos in where.get(v, ()))

    # libtern resends a settle after a lost connection or leadership; when
    # the first attempt had committed, the resend answers "stale". A stale
    # ack of the last delivery of an offset (none with a higher count was
    # ever received) therefore also consumed it: only an ack of that
    # receipt, a dead letter or a trim deletes the row.
    def last_stale(pos):
        top = max((d[3] for d in deliveries.get(pos, ())), default=0)
        return any(s[3] >= top for s in acks(pos, ("stale",)))

    def consumed_by_stale(v):
        return any(last_stale(pos) for pos in where.get(v, ()))

    # A lease or a nack's delay ends at the stamping leader's time + the
    # timeout: stamped while that leader's clock ran ahead by D, it lasts D
    # longer by a correct clock (docs/WORKQUEUES.md, "A wrong leader
    # clock"), possibly past the drain. Such a value is held_by_clock:
    # counted, not judged, when its last delivery or settle overlapped a
    # clock fault that may run ahead.
    def under_clock_fault(a, b):
        a = a if a is not None else b
        b = b if b is not None else a
        return a is not None and any(
            s <= b and (e is None or a <= e) for s, e in ahead)

    def held_by_clock(v):
        for pos in where.get(v, ()):
            ds = deliveries.get(pos, ())
            ss = settles.get(pos, ())
            last_d = max(ds, key=lambda d: d[1] or 0, default=None)
            last_s = max(ss, key=lambda s: s[1] or 0, default=None)
            if last_d is not None and under_clock_fault(last_d[0], last_d[1]):
                return True
            if last_s is not None and under_clock_fault(last_s[0], last_s[1]):
                return True
        return False

    received = set(where)
    # Lost: an acknowledged produce nobody acked (ok, or info: an ambiguous
    # ack that may have committed; then nothing delivers it again) and that
    # is not in the DLQ.
    unacked = sorted(v for v in acked
                     if not acked_value(v, ("ok", "info")) and v not in dlq
                     and not consumed_by_stale(v))
    by_clock = [v for v in unacked if held_by_clock(v)]
    lost = [v for v in unacked if v not in set(by_clock)]
    by_stale_ack = sorted(v for v in acked
                          if not acked_value(v, ("ok", "info")) and
                          v not in dlq and consumed_by_stale(v))
    by_ambiguous_ack = sorted(v for v in acked
                              if not acked_value(v, ("ok",)) and
                              acked_value(v, ("info",)) and v not in dlq)
    # The idempotent producer stores each value once.
    stored_twice = sorted(v for v, ps in where.items() if len(ps) > 1)
    unexpected = sorted(v for v in received | dlq if v not in attempts)
    failed_seen = sorted(v for v in failed if v in received or v in dlq)
    # Offset conflicts: two values at one offset (acks and receives), and
    # a receipt acked ok whose offset holds another value.
    offset_conflicts = []
    for (q, off), vals in sorted(pos_values.items(),
                                 key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if len(vals) > 1:
            offset_conflicts.append({"kind": "values-at-offset", "queue": q,
                                     "offset": off, "values": sorted(vals)})
    for (q, off) in sorted(settles, key=lambda p: (str(p[0]), p[1])):
        for (_i, _d, proc, n, v, _a, _o) in acks((q, off), ("ok",)):
            held = pos_values.get((q, off), set())
            if held and held != {v}:
                offset_conflicts.append({"kind": "ack-of-other-value",
                                         "queue": q, "offset": off,
                                         "count": n, "value": v,
                                         "held": sorted(held),
                                         "process": proc})
    # Duplicates: a delivery invoked after an ack of that value was
    # answered ok is invalid; any other second delivery is documented and
    # classed by what became of the delivery before it.
    dup_after_ack = []
    dup_reasons = defaultdict(int)
    duplicates = []
    for (q, off), ds in sorted(deliveries.items(),
                               key=lambda kv: (str(kv[0][0]), kv[0][1])):
        ds = sorted(ds, key=lambda d: (d[1] if d[1] is not None else 0))
        ok_acks = acks((q, off), ("ok",))
        for d in ds:
            inv = d[0]
            prior = [a for a in ok_acks if a[1] is not None and
                     inv is not None and a[1] < inv]
            if prior:
                dup_after_ack.append({"value": d[4], "queue": q,
                                      "offset": off, "count": d[3],
                                      "process": d[2], "invoke": inv,
                                      "acked_count": prior[0][3],
                                      "acked_by": prior[0][2],
                                      "ack_done": prior[0][1]})
        for prev, d in zip(ds, ds[1:]):
            st = [s for s in settles.get((q, off), ()) if s[2] == prev[2]
                  and s[3] == prev[3]]
            outcomes = {(s[5], s[6]) for s in st}
            if ("nack", "ok") in outcomes:
                reason = "nack"
            elif any(o in ("info", "failed") for (_a, o) in outcomes):
                reason = "leader-change"
            elif prev[2] in retired and (d[0] is None or
                                         retired[prev[2]] <= d[0]) and \
                    not any(o == "ok" for (_a, o) in outcomes):
                reason = "release"
            else:
                reason = "lease-expiry"
            dup_reasons[reason] += 1
            duplicates.append({"value": d[4], "queue": q, "offset": off,
                               "count": d[3], "after_count": prev[3],
                               "reason": reason})
    heal = final_heal if final_heal is not None else last_nemesis
    recovery_s = None
    if heal is not None:
        after = [t for t in produce_ok_times if t >= heal]
        if after:
            recovery_s = (min(after) - heal) / 1e9
    counts = {
        "attempt": len(attempts), "acknowledged": len(acked),
        "failed": len(failed), "info": len(infos),
        "received_distinct": len(received),
        "deliveries": sum(len(d) for d in deliveries.values()),
        "acked_ok": sum(1 for p in settles if acks(p, ("ok",))),
        "acked_by_ambiguous_ack": len(by_ambiguous_ack),
        "acked_by_last_stale_ack": len(by_stale_ack),
        "stale_acks": sum(len(acks(p, ("stale",))) for p in settles),
        "stored_twice": len(stored_twice),
        "dlq": len(dlq), "lost": len(lost), "unexpected": len(unexpected),
        "held_by_clock": len(by_clock),
        "failed_seen": len(failed_seen),
        "duplicate_after_ack": len(dup_after_ack),
        "duplicates_documented": len(duplicates),
        "duplicated": len(dup_after_ack),
        "offset_conflicts": len(offset_conflicts),
        "fifo": 0, "lost_on_node": 0,
    }
    for k in ("nack", "release", "leader-change", "lease-expiry"):
        counts["dup_" + k.replace("-", "_")] = dup_reasons.get(k, 0)
    problems = [k for k in WQ_INVALID_CLASSES if counts[k]]
    incomplete = sorted(str(q) for q, c in drains.items() if not c)
    undrained = sorted(str(q) for q in {a[0] for a in acked.values()}
                       if q not in drains)
    if problems:
        verdict = "invalid"
    elif not acked or undrained:
        verdict = "unknown"
    else:
        verdict = "valid"
    return {"history_version": HISTORY_VERSION, "workload": "work-queue",
            "ack_timeout_ms": ack_timeout_ms, "counts": counts,
            "lost": lost, "held_by_clock": by_clock,
            "acked_by_ambiguous_ack": by_ambiguous_ack,
            "acked_by_last_stale_ack": by_stale_ack,
            "unexpected": unexpected, "failed_seen": failed_seen,
            "stored_twice": stored_twice,
            "duplicate_after_ack": dup_after_ack,
            "duplicates": duplicates[:1000],
            "offset_conflicts": offset_conflicts,
            "drain_incomplete": incomplete, "undrained_queues": undrained,
            "recovery_after_heal_s": recovery_s,
            "final_heal_seen": heal is not None,
            "problems": problems, "verdict": verdict}


def format_work_queue(r, limit=10):
    c = r["counts"]
    lines = ["verdict: %s%s" % (r["verdict"].upper(),
                                ("  (" + ", ".join(r["problems"]) + ")")
                                if r["problems"] else "")]
    lines.append("work-queue: attempt %d  acknowledged %d  failed %d  "
                 "info %d  received %d  deliveries %d  acked-ok %d  "
                 "stale-acks %d  dlq %d"
                 % (c["attempt"], c["acknowledged"], c["failed"], c["info"],
                    c["received_distinct"], c["deliveries"], c["acked_ok"],
                    c["stale_acks"], c["dlq"]))
    lines.append("lost %d (consumed by an ambiguous ack: %d, by a stale "
                 "ack of the last delivery: %d)  unexpected %d"
                 "  failed-seen %d  stored-twice %d  duplicate-after-ack %d"
                 "  offset-conflicts %d"
                 % (c["lost"], c["acked_by_ambiguous_ack"],
                    c["acked_by_last_stale_ack"], c["unexpected"],
                    c["failed_seen"], c["stored_twice"],
                    c["duplicate_after_ack"], c["offset_conflicts"]))
    lines.append("documented duplicates %d: lease-expiry %d  release %d  "
                 "nack %d  leader-change %d"
                 % (c["duplicates_documented"], c["dup_lease_expiry"],
                    c["dup_release"], c["dup_nack"], c["dup_leader_change"]))
    if c.get("held_by_clock"):
        lines.append("held by a clock ahead (not judged): %d %s"
                     % (c["held_by_clock"],
                        json.dumps(r["held_by_clock"][:limit])))
    rec = r["recovery_after_heal_s"]
    if rec is not None:
        lines.append("recovery after final heal: %.3f s" % rec)
    if r["drain_incomplete"]:
        lines.append("drain incomplete on: %s"
                     % ", ".join(r["drain_incomplete"]))
    if r["undrained_queues"]:
        lines.append("queues with acks but no drain: %s"
                     % ", ".join(r["undrained_queues"]))
    for k in ("lost", "unexpected", "failed_seen", "stored_twice"):
        if r[k]:
            lines.append("  %s: %s" % (k, r[k][:limit]))
    for k in ("duplicate_after_ack", "offset_conflicts"):
        for item in r[k][:limit]:
            lines.append("  %s: %s" % (k, json.dumps(item, sort_keys=True)))
    return "\n".join(lines)


def format_report(r, limit=10):
    if r.get("workload") == "work-queue":
        return format_work_queue(r, limit)
    c = r["counts"]
    lines = ["verdict: %s%s" % (r["verdict"].upper(),
                                ("  (" + ", ".join(r["problems"]) + ")")
                                if r["problems"] else "")]
    lines.append("attempt %d  acknowledged %d  failed %d  info %d  "
                 "read %d" % (c["attempt"], c["acknowledged"], c["failed"],
                              c["info"], c["read_distinct"]))
    if c.get("trimmed") or c.get("trim_skips") or c.get("probes_below"):
        lines.append("retention: trimmed %d  trim-skips %d  probes-below %d"
                     "  violations %d  under-trimmed %d (reported only)"
                     % (c["trimmed"], c["trim_skips"], c["probes_below"],
                        c["retention"], len(r.get("under_trimmed", []))))
    lines.append("lost %d (prefix %d, middle %d, postfix %d; seen before "
                 "%d)  unexpected %d  failed-seen %d  duplicated %d  "
                 "recovered %d"
                 % (c["lost"], c["lost_prefix"], c["lost_middle"],
                    c["lost_postfix"], c["lost_but_seen"], c["unexpected"],
                    c["failed_seen"],
                    c["duplicated"], c["recovered"]))
    lines.append("lost-on-node %d  fifo %d  offset-conflicts %d  "
                 "offset-gaps %d  drain-caught-up %s"
                 % (c["lost_on_node"], c["fifo"], c["offset_conflicts"],
                    c["offset_gaps"], r["drain_caught_up"]))
    lines.append("stale-leader-reads %d (reported only)"
                 % c["stale_leader_reads"])
    if c.get("longest_write_gap_ms") is not None:
        lines.append("longest write gap %d ms (reported only; per fault: %s)"
                     % (c["longest_write_gap_ms"],
                        ", ".join("%s %d" % kv for kv in
                                  sorted(r["write_gaps"].items()))))
    if c.get("longest_write_gap_up_ms") is not None:
        lines.append("longest write gap with a majority up %d ms (per "
                     "fault: %s)"
                     % (c["longest_write_gap_up_ms"],
                        ", ".join("%s %d" % kv for kv in
                                  sorted(r["write_gaps_up"].items()))))
    if r.get("workload") == "delayed":
        lines.append("delayed: early %d (clock bound %d ms)  not due at the "
                     "drain %d (not judged)"
                     % (c["early"], r["clock_bound_ms"], c["not_due"]))
        for item in r["early"][:limit]:
            lines.append("  early: %s" % json.dumps(item, sort_keys=True))
    rec = r["recovery_after_heal_s"]
    if rec is not None:
        lines.append("recovery after final heal: %.3f s" % rec)
    elif r.get("final_heal_seen"):
        lines.append("recovery after final heal: NONE (no produce "
                     "succeeded after the final heal)")
    else:
        lines.append("recovery after final heal: n/a (no nemesis events)")
    if r["drain_incomplete"]:
        lines.append("drain timed out before reaching the highest "
                     "acknowledged offset on: %s"
                     % ", ".join(r["drain_incomplete"]))
    if r["undrained_queues"]:
        lines.append("queues with acks but no drain: %s"
                     % ", ".join(r["undrained_queues"]))
    if r["incomplete_final_reads"]:
        lines.append("nodes whose final read did not complete: %s"
                     % ", ".join(str(n) for n in r["incomplete_final_reads"]))
    for k in ("prefix", "middle", "postfix"):
        if r["lost"][k]:
            lines.append("  lost %s: %s" % (k, r["lost"][k][:limit]))
    for k in ("unexpected", "failed_seen", "duplicated"):
        if r[k]:
            lines.append("  %s: %s" % (k, r[k][:limit]))
    for node, miss in sorted(r["lost_on_node"].items()):
        lines.append("  lost on %s: %d, e.g. %s" % (node, len(miss),
                                                    miss[:limit]))
    for k in ("fifo", "offset_conflicts"):
        for item in r[k][:limit]:
            lines.append("  %s: %s" % (k, json.dumps(item, sort_keys=True)))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="judge a tern Jepsen history")
    ap.add_argument("history", help="JSONL history file")
    ap.add_argument("--out", help="write the full result as JSON here")
    ap.add_argument("--quiet", action="store_true",
                    help="print only the verdict line")
    args = ap.parse_args(argv)
    try:
        r = check(load_history(args.history))
    except (OSError, HistoryError) as e:
        print("checker: %s" % e, file=sys.stderr)
        return 3
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(r, fh, indent=1, sort_keys=True)
            fh.write("\n")
    rep = format_report(r)
    print(rep.splitlines()[0] if args.quiet else rep)
    return {"valid": 0, "invalid": 1}.get(r["verdict"], 2)


if __name__ == "__main__":
    sys.exit(main())
