#!/usr/bin/env bash
# Side-by-side benchmark: tern against its floors and three peers, in ONE
# run on this host, every figure next to a floor or a peer measured in the
# same run (shared, noisy machines: compare ratios, not absolutes). Not a
# test: nothing is asserted on the figures.
#
#   bench/compare.sh [--quick] [--peers "nats rabbitmq etcd"] [--no-record]
#                    [--out DIR]
#
# Everything listens on 127.0.0.1, 3 nodes per system, 1 KiB messages:
#   floors   write(1 KiB) + fdatasync latency with 1, 2 and 3 concurrent
#            writers on the data dirs' filesystem (bench/compare/floors.py);
#            durable appends there, 3 writers of 64 KiB O_DIRECT|O_DSYNC
#            blocks, one in flight each (the floor of pipelined produce);
#            TCP loopback 1 KiB round trip (bench_xport tcp_floor).
#   tern     the build in $TERN_BIN (default build/, what `make build`
#            gives; its CMAKE_BUILD_TYPE is printed and recorded),
#            durability=disk (scripts/cluster.sh): sequential produce p50/p99
#            (one in flight, `tern bench --stages`, which also gives the
#            leader's stage breakdown), pipelined throughput (window 256),
#            kill -9 of the leader to the next acknowledged produce
#            (bench/failover.sh --single: one long-lived libtern producer,
#            as the peers' publishers are; its own cluster).
#   peers    NATS JetStream R3, RabbitMQ quorum queue, etcd: the same three
#            metrics with our own minimal clients (bench/compare/peers.py:
#            NATS text protocol, AMQP 0-9-1 with publisher confirms, etcd's
#            HTTP JSON gateway). Debian packages, installed with apt-get when
#            missing (nats-server rabbitmq-server etcd-server etcd-client;
#            gnuplot-nox for the images).
# Then a markdown table (floor | tern | nats | rabbitmq | etcd) and tern's
# stage breakdown go to stdout and, unless --no-record, into
# bench/RESULTS.md under a dated heading with the commit; gnuplot draws the
# sequential latency CDFs and the throughput bars into bench/results/
# (--quick and --no-record: into the output dir only).
#
# Defaults: first 150000 pipelined messages (window 256) of warm-up, not
# measured, on every system: a broker's steady state is what users run
# (its heap grown and reused; tern's in-memory raft log grows to a
# snapshot, 64 MiB, before it is freed and reused, and each first touch of
# a page costs a fault: on hypervisors where that is tens of microseconds
# a fresh node's first 60,000 messages of 1 KiB cost it 30-40% more CPU,
# bench/RESULTS.md). Then 5000 sequential messages (after 500 of warm-up),
# 50000 pipelined, 20 tern failover trials, 3 per peer (a peer restarts
# its killed node in 5-30 s). --quick: 10000 / 500 / 5000, 2 tern trials
# and 1 per peer, nothing recorded. All state lives in a temp dir (--out keeps the
# raw results there instead: the dir is kept); every process is started
# here and stopped by its PID on exit (trap), never by name; every load
# loop is bounded in count and time.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
XPORT=$TERN_BIN/bench/bench_xport
HERE=$ROOT/bench/compare
STEP_TIMEOUT=${STEP_TIMEOUT:-900}

quick=0
record=1
peers="nats rabbitmq etcd"
out=
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1; shift ;;
    --peers) peers=$2; shift 2 ;;
    --no-record) record=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--peers \"nats rabbitmq etcd\"] [--no-record] [--out DIR]" >&2
        exit 2 ;;
    esac
done
for p in $peers; do
    case "$p" in
    nats | rabbitmq | etcd) ;;
    *) echo "compare: unknown peer '$p' (nats, rabbitmq, etcd)" >&2; exit 2 ;;
    esac
done
if [ "$quick" = 1 ]; then
    pipe_warm=10000 seq_n=500 warm=100 pipe_n=5000 trials=2 peer_trials=1
    fsync_n=500 record=0
else
    pipe_warm=150000 seq_n=5000 warm=500 pipe_n=50000 trials=20
    peer_trials=3 fsync_n=3000
fi
if [ ! -x "$CLI" ] || [ ! -x "$TERN_BIN/node/ternd" ]; then
    echo "compare: $CLI or ternd not found (make build)" >&2
    exit 1
fi
[ -x "$XPORT" ] || { echo "compare: $XPORT not found (make build)" >&2; exit 1; }
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$TERN_BIN/CMakeCache.txt" 2>/dev/null)
build_type=${build_type:-unknown}
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if ! git -C "$ROOT" diff --quiet HEAD -- . ':!bench/RESULTS.md' ':!bench/results' 2>/dev/null; then
    commit="$commit+changes"
fi

# Packages: installed when missing (root or sudo), as the task's
# dependencies; nothing else is fetched.
need=()
for p in $peers; do
    case "$p" in
    nats) command -v nats-server >/dev/null || need+=(nats-server) ;;
    rabbitmq) [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server) ;;
    etcd) command -v etcd >/dev/null || need+=(etcd-server etcd-client) ;;
    esac
done
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
if [ ${#need[@]} -gt 0 ]; then
    echo "compare: installing ${need[*]}" >&2
    sudo=
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y \
        --no-install-recommends "${need[@]}" >&2 ||
        echo "compare: apt-get install failed; missing peers are reported as failed" >&2
fi

keep=0
if [ -n "$out" ]; then
    mkdir -p "$out"
    work=$(cd "$out" && pwd)
    keep=1
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/tern-compare.XXXXXX")
fi
res=$work/results
mkdir -p "$res"
tern_dir=$work/tern
tern_base=
cluster() { "$ROOT/scripts/cluster.sh" --dir "$tern_dir" --base-port "$tern_base" "$@"; }

# Teardown: the tern cluster (by its pid files), then every PID a helper
# recorded (peers.py writes DIR/pids; it stops them itself unless killed).
child=
# Run a step in the background and wait for it, so that a signal reaches
# the trap at once (bash runs traps only between commands); cleanup stops
# the step first (peers.py tears its cluster down on SIGTERM).
step() {
    "$@" &
    child=$!
    local rc=0
    wait "$child" || rc=$?
    child=
    return "$rc"
}
cleanup() {
    local f pid
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null || true
        for _ in $(seq 1 300); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
    fi
    if [ -n "$tern_base" ] && [ -d "$tern_dir" ]; then
        cluster down >/dev/null 2>&1 || true
    fi
    for f in "$work"/*/pids; do
        [ -f "$f" ] || continue
        while read -r pid; do
            if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
                kill -TERM "$pid" 2>/dev/null || true
            fi
        done <"$f"
    done
    for f in "$work"/rabbitmq/cmp*.beam.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    [ "$keep" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'trap - EXIT; cleanup; exit 130' INT TERM

say() { echo "== $*" >&2; }
say "tern compare: commit $commit, $build_type build ($TERN_BIN), peers: ${peers:-none}, $([ "$quick" = 1 ] && echo quick || echo full) mode, results in $res"

# ---- floors ----
say "floor: write(1 KiB)+fdatasync, 1/2/3 writers, $fsync_n each, in $work"
mkdir -p "$work/floor"
step timeout "$STEP_TIMEOUT" python3 "$HERE/floors.py" fsync "$work/floor" --n "$fsync_n" \
    >"$res/floors.json" || echo "compare: fsync floor failed" >&2
cat "$res/floors.json" >&2
say "floor: durable appends, 3 writers x 64 KiB O_DIRECT|O_DSYNC, 3 s, in $work"
step timeout "$STEP_TIMEOUT" python3 "$HERE/floors.py" dsync "$work/floor" \
    >"$res/dsync.json" || echo "compare: dsync floor failed" >&2
cat "$res/dsync.json" >&2
xpin=
[ "$(nproc)" -ge 2 ] && xpin=-P
say "floor: TCP loopback round trip, 1 KiB (bench_xport)"
step timeout "$STEP_TIMEOUT" "$XPORT" -n 20000 -w 2000 -s 1024 -m 0 $xpin \
    >"$res/xport.txt" 2>"$res/xport.err" || echo "compare: bench_xport failed" >&2
tail -n 1 "$res/xport.txt" >"$res/xport.json" || true
grep "tcp loopback" "$res/xport.txt" >&2 || true

# ---- tern ----
tern_base=$("$ROOT/scripts/cluster.sh" free-base)
say "tern: 3 nodes, durability disk, ports $((tern_base + 1))-$((tern_base + 3))"
TERN_LOG_LEVEL=warn cluster up >/dev/null
servers=$(cluster servers)
T() { step timeout "$STEP_TIMEOUT" "$CLI" -s "$servers" "$@"; }
T bench cmp-warm --count "$pipe_warm" --size 1024 --window 256 >/dev/null
T bench cmp-warm --count "$warm" --size 1024 >/dev/null
T bench cmp --count "$seq_n" --size 1024 --window 1 --stages --json \
    --latencies "$res/tern.lat" >"$res/tern-seq.json" 2>"$res/tern-seq.txt" ||
    echo "compare: tern sequential bench failed" >&2
cat "$res/tern-seq.txt" >&2
T bench cmp-pipe --count "$pipe_n" --size 1024 --window 256 --json \
    >"$res/tern-pipe.json" 2>"$res/tern-pipe.txt" ||
    echo "compare: tern pipelined bench failed" >&2
grep -E "throughput|latency/" "$res/tern-pipe.txt" >&2 || true
cluster down >/dev/null
tern_base=
say "tern: failover, $trials trials (bench/failover.sh --single)"
step timeout "$STEP_TIMEOUT" "$ROOT/bench/failover.sh" --single \
    --trials "$trials" --dir "$work/failover" >"$res/tern-failover.txt" 2>&1 ||
    echo "compare: tern failover bench reported failures" >&2
grep -v '^{' "$res/tern-failover.txt" >&2 || true
grep '^{' "$res/tern-failover.txt" | tail -n 1 >"$res/tern-failover.json" || true

# ---- peers ----
base=$(( $("$ROOT/scripts/cluster.sh" free-base) ))
for p in $peers; do
    say "$p: 3 nodes"
    base=$((base + 40))
    step timeout "$STEP_TIMEOUT" python3 "$HERE/peers.py" "$p" --dir "$work/$p" \
        --seq "$seq_n" --warmup "$warm" --pipe "$pipe_n" --window 256 \
        --pipe-warmup "$pipe_warm" \
        --trials "$peer_trials" --lat "$res/$p.lat" --base-port "$base" \
        >"$res/$p.json" || echo "compare: $p failed (see the table)" >&2
done

# ---- report ----
images=$ROOT/bench/results
md=$ROOT/bench/RESULTS.md
args=()
if [ "$record" = 1 ]; then
    args+=(--results-md "$md" --images "$images")
else
    args+=(--images "$work/images")
fi
cmd="bench/compare.sh"
[ "$quick" = 1 ] && cmd="$cmd --quick"
[ "$peers" = "nats rabbitmq etcd" ] || cmd="$cmd --peers \"$peers\""
host="Host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
python3 "$HERE/report.py" "$res" --commit "$commit" --build-type "$build_type" \
    --mode "$([ "$quick" = 1 ] && echo quick || echo full)" --peers "$peers" \
    --cmd "$cmd" --host "$host" --pipe-warmup "$pipe_warm" "${args[@]}"
if [ "$record" = 1 ]; then
    say "recorded in bench/RESULTS.md; images in bench/results/"
else
    say "not recorded; images in $work/images$([ "$keep" = 1 ] || echo ' (removed: use --out DIR to keep them)')"
fi
