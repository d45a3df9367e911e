#!/usr/bin/env bash
# Where a pipelined durable produce spends CPU on each node. Not a test:
# nothing is asserted on the figures.
#
#   bench/cpu_profile.sh [--count N] [--size S] [--window W] [--seq N]
#                        [--warm N] [--no-perf] [--top K] [--freq HZ]
#                        [--out DIR]
#
# Starts a 3-node cluster (scripts/cluster.sh, durability disk, the
# defaults users get: tcp with mutual TLS between nodes) from $TERN_BIN
# (default build/, what `make build` gives: RelWithDebInfo; the build type
# is printed), then sends N pipelined messages of warm-up (--warm, default
# 150000: past one raft snapshot, so the nodes' heaps have grown and are
# reused; --warm 0 measures a fresh node, whose first touch of each page
# costs a fault), then:
#   1. optional sequential run (--seq N, window 1, `tern bench --stages`):
#      p50/p99 and the leader's commit-path stages;
#   2. a bounded pipelined produce (N messages, default 50000, of S bytes,
#      default 1024, window W, default 256) with nothing attached: msg/s and,
#      from /proc/PID/stat (utime+stime) before and after, the CPU seconds
#      of each ternd divided by the acknowledged messages (us of CPU per
#      message per node, leader marked);
#   3. unless --no-perf: the same run again with `perf record -g -F HZ`
#      (default 999) attached to every ternd, its msg/s and CPU per message
#      (perf's own sampling inflates these a little), and the top K
#      (default 15) symbols per node by self time
#      (`perf report --no-children --sort symbol`).
# Needs perf and permission to attach (root, or perf_event_paranoid <= 1).
# Every process is started here and stopped by its PID on exit (perf by
# SIGINT, the nodes by scripts/cluster.sh down); every load is bounded in
# count and by `timeout`. All state lives in a temp dir unless --out.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
STEP_TIMEOUT=${STEP_TIMEOUT:-600}

count=50000 size=1024 window=256 seq_n=0 warm=150000 perf=1 top=15 freq=999
out=
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --seq) seq_n=$2; shift 2 ;;
    --warm) warm=$2; shift 2 ;;
    --no-perf) perf=0; shift ;;
    --top) top=$2; shift 2 ;;
    --freq) freq=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '5,7p' "$0" | sed 's/^# \{0,1\}/usage: /' >&2; exit 2 ;;
    esac
done
if [ ! -x "$CLI" ] || [ ! -x "$TERN_BIN/node/ternd" ]; then
    echo "cpu_profile: $CLI or ternd not found (make build)" >&2
    exit 1
fi
if [ "$perf" = 1 ] && ! command -v perf >/dev/null; then
    echo "cpu_profile: perf not found (apt-get install linux-perf), or --no-perf" >&2
    exit 1
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$TERN_BIN/CMakeCache.txt" 2>/dev/null)
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- . 2>/dev/null || commit="$commit+changes"

keep=0
if [ -n "$out" ]; then
    mkdir -p "$out"
    work=$(cd "$out" && pwd)
    keep=1
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/tern-cpu.XXXXXX")
fi
cdir=$work/cluster
base=
perf_pids=()
cluster() { "$ROOT/scripts/cluster.sh" --dir "$cdir" --base-port "$base" "$@"; }
cleanup() {
    local p
    for p in "${perf_pids[@]+"${perf_pids[@]}"}"; do
        kill -0 "$p" 2>/dev/null && kill -INT "$p" 2>/dev/null || true
    done
    for p in "${perf_pids[@]+"${perf_pids[@]}"}"; do
        for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    done
    [ -n "$base" ] && cluster down >/dev/null 2>&1 || true
    [ "$keep" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'trap - EXIT; cleanup; exit 130' INT TERM
say() { echo "== $*" >&2; }

base=$("$ROOT/scripts/cluster.sh" free-base)
say "cpu_profile: commit $commit, ${build_type:-unknown} build ($TERN_BIN), $(nproc) CPUs, work dir $work"
TERN_LOG_LEVEL=warn cluster up >/dev/null
servers=$(cluster servers)
leader=$(cluster leader)
pids=()
for i in 1 2 3; do pids+=("$(tr -dc '0-9' <"$cdir/node$i.pid")"); done
hz=$(getconf CLK_TCK)
T() { timeout "$STEP_TIMEOUT" "$CLI" -s "$servers" "$@"; }

# utime+stime of a process, in clock ticks.
ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
json_field() { # file key
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

T bench cpu-warm --count "$((warm > 2000 ? warm : 2000))" --size "$size" \
    --window "$window" >/dev/null

if [ "$seq_n" -gt 0 ]; then
    say "sequential: $seq_n x $size B, window 1, --stages"
    T bench cpu-seq --count "$seq_n" --size "$size" --window 1 --stages \
        --json >"$work/seq.json" 2>"$work/seq.txt"
    cat "$work/seq.txt"
fi

# One pipelined run; label; prints msg/s and CPU us/msg per node.
pipelined() { # label queue
    local label=$1 q=$2 i before=() after acked mps
    for i in 0 1 2; do before+=("$(ticks "${pids[$i]}")"); done
    T bench "$q" --count "$count" --size "$size" --window "$window" --json \
        >"$work/$q.json" 2>"$work/$q.txt"
    acked=$(json_field "$work/$q.json" acked)
    mps=$(json_field "$work/$q.json" msgs_per_s)
    printf '%s: %s acked of %s x %s B, window %s: %.0f msg/s\n' \
        "$label" "$acked" "$count" "$size" "$window" "$mps"
    for i in 0 1 2; do
        after=$(ticks "${pids[$i]}")
        awk -v n=$((i + 1)) -v l="$leader" -v d=$((after - before[i])) \
            -v hz="$hz" -v a="$acked" 'BEGIN {
            printf "  node %d%s: %.2f s CPU, %.1f us CPU per message\n",
                n, (n == l ? " (leader)" : ""), d / hz, d / hz * 1e6 / a }'
    done
}

say "pipelined, nothing attached"
pipelined "pipelined" cpu-pipe

if [ "$perf" = 1 ]; then
    say "pipelined under perf record -g -F $freq"
    for i in 0 1 2; do
        perf record -q -g -F "$freq" -p "${pids[$i]}" \
            -o "$work/perf$((i + 1)).data" >/dev/null 2>&1 &
        perf_pids+=("$!")
    done
    sleep 1
    pipelined "pipelined (under perf)" cpu-perf
    for p in "${perf_pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    for p in "${perf_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    perf_pids=()
    for i in 1 2 3; do
        echo
        echo "top $top symbols, node $i$([ "$i" = "$leader" ] && echo " (leader)") (self time)"
        # head closes the pipe early: perf and grep may die of SIGPIPE.
        perf report -i "$work/perf$i.data" --no-children -g none --sort symbol \
            --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -n "$top" |
            sed 's/^ */  /' || true
    done
fi
