#!/usr/bin/env bash
# Replication latency benchmark: for each transport (tcp, shm, and rdma
# when an RDMA device exists) and each durability mode (disk, memory),
# start a fresh 3-node cluster (scripts/cluster.sh, temp dir, free
# loopback ports), run `tern bench --replication` sequential (window 1) and
# pipelined (window 64) with 1 KiB messages, stop the cluster by PID, then
# measure the floors on the same machine in the same run:
#   shm   eventfd ping-pong between two processes     (bench_xport "eventfd");
#         also reported: the same ping-pong paced like the window-1 runs
#         (idle between round trips; "eventfd paced"), see the last lines
#   tcp   TCP loopback round trip, SIZE bytes each way (bench_xport "tcp_floor")
#   rdma  ib_write_lat (perftest) on the first device; it reports a one-way
#         latency (RTT/2), shown here doubled as a round trip
# (each bench_xport floor runs its two processes on CPUs 0 and 1: -P)
# and print one table: transport, durability, mode, leader append->commit
# p50/p99, client produce p50/p99, msgs/s, floor p50, ratio (replication p50
# / floor p50). A commit needs one leader->follower->leader round trip, so
# the round-trip floor is the comparison. Replication quantiles are
# histogram bucket upper bounds (at most 6.25% above; raft/include/repl.h).
# Not a test: no pass/fail on the figures.
#
#   bench/replication.sh [--seq-count N] [--pipe-count N] [--size BYTES]
#                        [--transports "tcp shm"] [--durabilities "disk memory"]
#                        [--modes "seq pipe"] [--stages] [--out DIR]
#                        [--busy-poll US] [--follower-busy-poll US] [--pin]
#                        [--adaptive-poll US] [--idle-cpu SECONDS]
#
# --stages: run the nodes at log level info and print, per cluster, each
# node's "replication stages" line (ternd's shutdown log: the commit path
# broken into stages, raft/include/repl.h enum repl_stage, p50/p99 in us; loop
# iterations, shm doorbells and wake-ups) logged at shutdown. Follower
# stages are not reset between runs: use it with one mode (--modes seq).
#
# --busy-poll US: the nodes (shm, tcp, rdma) busy-poll up to US
# microseconds after each send (busy_poll_us and follower_busy_poll_us), so
# no node sleeps between window-1 commits; costs about a CPU per node while
# it runs.
# --follower-busy-poll US sets follower_busy_poll_us alone (default: the
# --busy-poll value; 0 = only the leader polls).
#
# --adaptive-poll US: adaptive_poll_us of every node (default: ternd's
# default; 0 = off): spin up to US microseconds after a send only while
# the recent exchanges were answered within US (node/config.c).
#
# CPU: each row also gives the CPU the three nodes used during its run
# (percent of one CPU, per node, utime+stime from /proc/PID/stat), and
# --idle-cpu SECONDS (default 10; 0 = skip) measures each node's CPU
# while idle after the runs (1 s after the last one, over SECONDS).
#
# --pin: once a cluster is up, pin each node's loop thread (its main
# thread: taskset by PID; libuv's worker threads stay free) to a CPU: the
# leader to CPU 0, the followers to CPUs 1.. (round robin, so on a 2-CPU
# host both followers share CPU 1). With busy-polling on a host with fewer
# CPUs than nodes, unpinned spinners time-slice with each other and a
# commit often waits for a descheduled leader; pinned, the leader keeps a
# CPU of its own, as it has on a real cluster, and a commit needs
# whichever follower holds CPU 1 (a majority is the leader and one
# follower). The price on a 2-CPU host is p99: the two followers take
# turns on CPU 1 in scheduler slices. The client is not pinned; the
# floors always run on CPUs 0 and 1 (below). A row whose samples came from
# another node than the pinned leader (the leader moved) says so.
#
# Defaults: 2000 sequential and 20000 pipelined messages of 1024 bytes,
# a 500-message warm-up before each (not measured). --out keeps every raw
# JSON line and the node logs. Binaries: TERN_BIN (default <repo>/build),
# as scripts/cluster.sh; bench_xport from $TERN_BIN/bench/bench_xport.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
XPORT_BENCH=${XPORT_BENCH:-$TERN_BIN/bench/bench_xport}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
seq_count=2000
pipe_count=20000
size=1024
warm=500
transports=
durabilities="disk memory"
modes="seq pipe"
stages=0
busy=0
fbusy=
adaptive=
idle_secs=10
pin=0
out=
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
    --seq-count) seq_count=$2; shift 2 ;;
    --pipe-count) pipe_count=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --durabilities) durabilities=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --busy-poll) busy=$2; shift 2 ;;
    --follower-busy-poll) fbusy=$2; shift 2 ;;
    --adaptive-poll) adaptive=$2; shift 2 ;;
    --idle-cpu) idle_secs=$2; shift 2 ;;
    --stages) stages=1; shift ;;
    --pin) pin=1; shift ;;
    --out) out=$2; shift 2 ;;
    *) usage ;;
    esac
done
fbusy=${fbusy:-$busy}
ncpu=$(nproc)
if [ "$pin" = 1 ] && [ "$ncpu" -lt 2 ]; then
    echo "replication: --pin needs at least 2 CPUs (nproc: $ncpu)" >&2
    exit 2
fi
[ -x "$CLI" ] || { echo "replication: $CLI not found (build first, or set TERN_BIN)" >&2; exit 1; }
[ -x "$XPORT_BENCH" ] || { echo "replication: $XPORT_BENCH not found (build target bench_xport)" >&2; exit 1; }

rdma_dev=
if [ -d /sys/class/infiniband ]; then
    rdma_dev=$(ls /sys/class/infiniband 2>/dev/null | head -n 1 || true)
fi
if [ -z "$transports" ]; then
    transports="tcp shm"
    if [ -n "$rdma_dev" ]; then
        transports="$transports rdma"
    else
        echo "replication: no RDMA device (/sys/class/infiniband): rdma skipped" >&2
    fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-repl-bench.XXXXXX")
res=${out:-$work/results}
mkdir -p "$res"
dir=
base=
cluster() { "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" "$@"; }
cleanup() {
    if [ -n "$dir" ]; then
        cluster down >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

free_base() { "$ROOT/scripts/cluster.sh" free-base; }

# --pin: leader -> CPU 0, followers -> CPUs 1.. round robin. Prints what it
# did ("node1:cpu0 node2:cpu1 node3:cpu1"); nothing and status 1 if there
# is no leader or a node's PID is unknown.
pin_nodes() {
    local leader i pid cpu next=1 desc=
    leader=$(TERN_LEADER_WAIT=5 cluster leader 2>/dev/null) || return 1
    for i in 1 2 3; do
        pid=$(tr -dc '0-9' <"$dir/node$i.pid" 2>/dev/null) || return 1
        [ -n "$pid" ] || return 1
        if [ "$i" = "$leader" ]; then
            cpu=0
        else
            cpu=$next
            next=$((next % (ncpu - 1) + 1))
        fi
        taskset -p -c "$cpu" "$pid" >/dev/null || return 1
        desc="$desc node$i:cpu$cpu"
    done
    echo "leader $leader:${desc}"
}

# CPU ticks (utime + stime, all threads) of node i, or nothing.
node_ticks() { # i
    local pid
    pid=$(tr -dc '0-9' <"$dir/node$1.pid" 2>/dev/null) || return 0
    [ -n "$pid" ] || return 0
    # Fields after the ")" that ends the command name: utime is the 12th,
    # stime the 13th.
    sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }'
}
# Ticks of nodes 1..3 on one line ("- " for a node not found).
all_ticks() {
    local i t line=
    for i in 1 2 3; do
        t=$(node_ticks "$i")
        line="$line ${t:--}"
    done
    echo "$line"
}
# Percent of one CPU per node between two all_ticks lines over SECS.
cpu_pct() { # "before" "after" secs
    python3 - "$1" "$2" "$3" <<'PCT'
import os, sys
hz = os.sysconf("SC_CLK_TCK")
a, b, secs = sys.argv[1].split(), sys.argv[2].split(), float(sys.argv[3])
out = []
for x, y in zip(a, b):
    out.append("-" if "-" in (x, y) or secs <= 0
               else "%.1f" % (100.0 * (int(y) - int(x)) / hz / secs))
print(" ".join(out))
PCT
}
now_s() { date +%s.%N; }

# One bench run; appends "transport durability mode json" to $res/runs.
run_bench() { # transport durability mode window count servers
    local t=$1 d=$2 mode=$3 window=$4 count=$5 servers=$6 q j
    q="bench-$mode"
    local t0 t1 c0 c1
    timeout "$STEP_TIMEOUT" "$CLI" -s "$servers" bench "$q-warm" --size "$size" \
        --count "$warm" --window "$window" --json >/dev/null 2>&1 || true
    c0=$(all_ticks)
    t0=$(now_s)
    if ! j=$(timeout "$STEP_TIMEOUT" "$CLI" -s "$servers" bench "$q" --size "$size" \
        --count "$count" --window "$window" --replication --json \
        2>>"$res/bench-$t-$d.err"); then
        echo "replication: bench $t/$d/$mode failed (see $res/bench-$t-$d.err)" >&2
        j=null
    fi
    t1=$(now_s)
    c1=$(all_ticks)
    printf '%s %s %s %s\n' "$t" "$d" "$mode" \
        "$(cpu_pct "$c0" "$c1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")" >>"$res/cpu"
    printf '%s %s %s %s\n' "$t" "$d" "$mode" "$j" >>"$res/runs"
}

: >"$res/runs"
: >"$res/cpu"
: >"$res/idle"
for t in $transports; do
    for d in $durabilities; do
        dir=$work/cluster-$t-$d
        base=$(free_base)
        [ -n "$base" ] || { echo "replication: no free ports" >&2; exit 1; }
        echo "== transport $t, durability $d: cluster in $dir, ports $((base + 1))..$((base + 103))" >&2
        level=warn
        [ "$stages" = 1 ] && level=info
        extra="transport = $t"
        if { [ "$busy" != 0 ] || [ "$fbusy" != 0 ]; } &&
            { [ "$t" = shm ] || [ "$t" = tcp ] || [ "$t" = rdma ]; }; then
            extra="$extra
busy_poll_us = $busy
follower_busy_poll_us = $fbusy"
        fi
        if [ -n "$adaptive" ]; then
            extra="$extra
adaptive_poll_us = $adaptive"
        fi
        if ! TERN_NODE_EXTRA="$extra" TERN_RAFT_EXTRA="durability = $d" \
            TERN_LOG_LEVEL=$level cluster up >"$res/up-$t-$d.log" 2>&1; then
            echo "replication: cluster $t/$d did not come up:" >&2
            cat "$res/up-$t-$d.log" >&2
            cluster down >/dev/null 2>&1 || true
            printf '%s %s seq null\n%s %s pipe null\n' "$t" "$d" "$t" "$d" >>"$res/runs"
            dir=
            continue
        fi
        servers=$(cluster servers)
        if [ "$pin" = 1 ]; then
            if p=$(pin_nodes); then
                echo "== pinned: $p" >&2
                echo "$t $d $p" >>"$res/pins"
            else
                echo "replication: could not pin cluster $t/$d" >&2
            fi
        fi
        "$CLI" -s "$servers" cluster status --json >"$res/status-$t-$d.json" 2>/dev/null || true
        case " $modes " in *" seq "*) run_bench "$t" "$d" seq 1 "$seq_count" "$servers" ;; esac
        case " $modes " in *" pipe "*) run_bench "$t" "$d" pipe 64 "$pipe_count" "$servers" ;; esac
        if [ "$idle_secs" != 0 ]; then
            sleep 1
            c0=$(all_ticks)
            sleep "$idle_secs"
            c1=$(all_ticks)
            printf '%s %s %s\n' "$t" "$d" "$(cpu_pct "$c0" "$c1" "$idle_secs")" >>"$res/idle"
        fi
        cluster down >"$res/down-$t-$d.log" 2>&1 || echo "replication: cluster $t/$d did not stop cleanly" >&2
        if [ "$stages" = 1 ]; then
            for i in 1 2 3; do
                grep -h "replication stages" "$dir/node$i.log" 2>/dev/null |
                    sed "s/^/stages $t $d node$i: /" >>"$res/stages" || true
            done
        fi
        if [ -n "$out" ]; then
            for i in 1 2 3; do cp "$dir/node$i.log" "$res/node$i-$t-$d.log" 2>/dev/null || true; done
        fi
        dir=
    done
done

# The paced eventfd ping-pong idles as long between round trips as the
# window-1 runs did between commits (period - replication p50 of the first
# seq run), so it has the same idle-vCPU wake-ups; reported beside the
# floors, not used for the ratio.
gap=$(python3 - "$res/runs" <<'GAP'
import json, sys
gap = 200
for line in open(sys.argv[1]):
    t, d, mode, j = line.rstrip("\n").split(" ", 3)
    j = json.loads(j)
    if mode == "seq" and j and j.get("msgs_per_s"):
        r = (j.get("replication_us") or {}).get("p50") or 0
        gap = max(20, int(1e6 / j["msgs_per_s"] - r))
        break
print(gap)
GAP
)
# -P: each ping-pong's two processes on CPUs 0 and 1, as the two ends of a
# replication leg are. Unpinned, the scheduler sometimes puts both on one
# CPU and the "round trip" is a context switch instead (same host, minutes
# apart: eventfd 4.4 vs 13.8-15.3 us, tcp 17.2 vs 29.5-32.9 us), so the
# floor would be a coin toss.
xpin=
[ "$ncpu" -ge 2 ] && xpin=-P
echo "== floors: bench_xport $xpin (eventfd, tcp loopback; paced eventfd with ${gap} us idle), ${size} B" >&2
timeout "$STEP_TIMEOUT" "$XPORT_BENCH" -n 20000 -w 2000 -s "$size" -m 0 -g "$gap" $xpin \
    >"$res/xport.txt" 2>"$res/xport.err" || echo "replication: bench_xport failed" >&2
tail -n 1 "$res/xport.txt" >"$res/xport.json" 2>/dev/null || true

rdma_floor=null
case " $transports " in
*" rdma "*)
    if [ -n "$rdma_dev" ] && command -v ib_write_lat >/dev/null; then
        port=$(( $(free_base) + 50 ))
        timeout 60 ib_write_lat -d "$rdma_dev" -s "$size" -n 10000 -p "$port" \
            >"$res/ib_server.txt" 2>&1 &
        srv=$!
        sleep 1 # the server must listen first (perftest has no ready signal)
        if timeout 60 ib_write_lat -d "$rdma_dev" -s "$size" -n 10000 -p "$port" \
            127.0.0.1 >"$res/ib_client.txt" 2>&1; then
            # Data row: bytes iters t_min t_max t_typical ...; one-way usec.
            rdma_floor=$(awk -v s="$size" '$1 == s && NF >= 5 { printf "%.3f", 2 * $5 }' \
                "$res/ib_client.txt" | tail -n 1)
            [ -n "$rdma_floor" ] || rdma_floor=null
        fi
        wait "$srv" 2>/dev/null || true
    fi
    ;;
esac

python3 - "$res/runs" "$res/xport.json" "$rdma_floor" "$size" "$res/pins" "$xpin" \
    "$res/cpu" "$res/idle" <<'EOF'
import json, sys
runs_path, xport_path, rdma_floor, size, pins_path, xpin = sys.argv[1:7]
cpu_path, idle_path = sys.argv[7:9]
def table(path, keys):  # first `keys` words -> the rest, as a string
    d = {}
    try:
        for line in open(path):
            w = line.split()
            if len(w) > keys:
                d[tuple(w[:keys])] = "/".join(w[keys:])
    except OSError:
        pass
    return d
run_cpu = table(cpu_path, 3)
idle_cpu = table(idle_path, 2)
floor_cpus = "0,1" if xpin == "-P" else None
pins = {}  # (transport, durability) -> (leader id, "node1:cpu0 ...")
try:
    for line in open(pins_path):
        t, d, _, lead, desc = line.rstrip("\n").split(" ", 4)
        pins[(t, d)] = (int(lead.rstrip(":")), desc)
except OSError:
    pass
try:
    x = json.loads(open(xport_path).read())
except Exception:
    x = {}
def p50(key):
    v = x.get(key)
    return v["p50_us"] if v else None
floors = {
    "shm": ("eventfd rtt", p50("eventfd")),
    "tcp": ("tcp rtt", p50("tcp_floor")),
    "rdma": ("ib_write rtt", None if rdma_floor == "null" else float(rdma_floor)),
}
rows = []
for line in open(runs_path):
    t, d, mode, j = line.rstrip("\n").split(" ", 3)
    j = json.loads(j)
    rows.append((t, d, mode, j))
def f(v, w=9, p=1):
    return f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}}"
hdr = (f"{'transport':<9} {'durab':<6} {'mode':<10} {'repl p50':>9} {'repl p99':>9} "
       f"{'prod p50':>9} {'prod p99':>9} {'msgs/s':>9} {'floor':<12} {'floor p50':>9} {'ratio':>6} "
       f"{'run cpu%':>17} {'idle cpu%':>14}")
print(f"replication latency (leader append->commit) vs client produce latency, "
      f"{size} B messages, microseconds")
print("run cpu% / idle cpu%: percent of one CPU used by node1/node2/node3 "
      "during the run / while idle after the runs")
print(hdr)
print("-" * len(hdr))
out = []
for t, d, mode, j in rows:
    name, fl = floors.get(t, ("-", None))
    label = "seq w1" if mode == "seq" else "pipe w64"
    if j is None:
        print(f"{t:<9} {d:<6} {label:<10} (failed)")
        out.append({"transport": t, "durability": d, "mode": mode, "ok": False})
        continue
    r = j.get("replication_us") or {}
    rp50, rp99 = r.get("p50"), r.get("p99")
    ratio = rp50 / fl if rp50 is not None and fl else None
    pin = pins.get((t, d))
    if pin and r.get("node_id") not in (None, pin[0]):
        # The leader moved after pinning: this row is not a pinned figure.
        pin = (pin[0], pin[1] + f" (leader moved to node {r['node_id']})")
    print(f"{t:<9} {d:<6} {label:<10} {f(rp50)} {f(rp99)} "
          f"{f(j['latency_us']['p50'], p=0)} {f(j['latency_us']['p99'], p=0)} "
          f"{f(j['msgs_per_s'], p=0)} {name:<12} {f(fl, p=2)} {f(ratio, 6, 2)} "
          f"{run_cpu.get((t, d, mode), '-'):>17} {idle_cpu.get((t, d), '-'):>14}")
    out.append({"transport": t, "durability": d, "mode": mode, "ok": True,
                "node_transport": r.get("transport"),
                "repl_p50_us": rp50, "repl_p99_us": rp99,
                "repl_samples": r.get("count"),
                "produce_p50_us": j["latency_us"]["p50"],
                "produce_p99_us": j["latency_us"]["p99"],
                "msgs_per_s": j["msgs_per_s"], "errors": j["errors"],
                "floor": name, "floor_p50_us": fl, "ratio": ratio,
                "run_cpu_pct": run_cpu.get((t, d, mode)),
                "idle_cpu_pct": idle_cpu.get((t, d)),
                "pinning": pin[1] if pin else None})
for (t, d), (lead, desc) in sorted(pins.items()):
    print(f"pinned (taskset, after election) {t}/{d}: leader node {lead}; {desc}")
if x:
    where = " on CPUs 0 and 1" if floor_cpus else ""
    print(f"floors (same run{where}): eventfd p50 {f(p50('eventfd'), 0, 2)} us, "
          f"eventfd+epoll p50 {f(p50('eventfd_epoll'), 0, 2)} us, "
          f"tcp loopback p50 {f(p50('tcp_floor'), 0, 2)} us; "
          f"xport shm p50 {f(p50('xport_shm'), 0, 2)} us, "
          f"xport tcp p50 {f(p50('xport_tcp'), 0, 2)} us")
    pf = p50("eventfd_paced")
    if pf:
        print(f"eventfd paced ({x.get('paced_gap_us')} us idle between round "
              f"trips, as between window-1 commits) p50 {pf:.2f} us: the "
              f"idle-wake-up cost a window-1 commit also pays; seq rows / "
              f"paced: " + ", ".join(
                  f"{o['transport']}/{o['durability']} "
                  f"{o['repl_p50_us'] / pf:.2f}x" for o in out
                  if o.get("ok") and o["mode"] == "seq" and o["repl_p50_us"]))
print(json.dumps({"bench": "replication", "size": int(size), "rows": out,
                  "floors": {k: v[1] for k, v in floors.items()},
                  "floor_cpus": floor_cpus,
                  "eventfd_paced_p50_us": p50("eventfd_paced"),
                  "paced_gap_us": x.get("paced_gap_us")}))
EOF
if [ "$stages" = 1 ] && [ -f "$res/stages" ]; then
    cat "$res/stages"
fi
