#!/usr/bin/env bash
# Many queues in one cluster: a fresh 3-node cluster on loopback
# (scripts/cluster.sh) gets N queues (default 1,000,000) with one message
# each (bench_scale fill), then:
#   - one page of `tern queue list` is timed at the start, the middle and
#     the end of the names (bench_scale list);
#   - a follower is killed (-9) and started again: restart to serving is
#     the time from its start to the first produce and fetch (the fetch
#     served by that node) of an existing queue that succeed;
#   - every node is killed and all are started again at once: the same,
#     through any node;
#   - every node's VmRSS/VmHWM (/proc/PID/status) is printed after the
#     fill and after the restarts, with the node's data directory size and
#     its "index opened" log line (how long the index rebuild took).
# Prints the figures and one JSON line. The cluster is stopped by PID
# and its directory removed at the end, also on error.
#
#   bench/scale_queues.sh [--queues N] [--threads T]
#
# Binaries: TERN_BIN (default <repo>/build; use a RelWithDebInfo build for
# figures). Bounded: the fill stops on the first failed request (60 s
# request timeout), each restart probe gives up after 120 s.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
BS=$TERN_BIN/bench/bench_scale
queues=1000000
threads=32
while [ $# -gt 0 ]; do
    case "$1" in
    --queues) queues=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "usage: $0 [--queues N] [--threads T]" >&2; exit 2 ;;
    esac
done
[ -x "$BS" ] || { echo "scale_queues: $BS not found (build first, or set TERN_BIN)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-scaleq.XXXXXX")
base=$("$ROOT/scripts/cluster.sh" free-base)
cluster() { "$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" "$@"; }
cleanup() {
    cluster down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
now_ms() { echo $(($(date +%s%N) / 1000000)); }
pid_of() { tr -dc '0-9' <"$work/node$1.pid"; }
rss() { # i -> "VmRSS VmHWM RssAnon RssFile" in kB
    awk '/^VmRSS:/{r=$2} /^VmHWM:/{h=$2} /^RssAnon:/{a=$2} /^RssFile:/{f=$2}
         END{print r+0, h+0, a+0, f+0}' "/proc/$(pid_of "$1")/status"
}
# kill -9 node i and wait (10 s at most) until its index lock is free: the
# process gone, or a zombie whose other threads (a thread-pool fsync in
# the kernel) have also exited and closed its files.
kill_node() { # i
    local pid lock
    pid=$(pid_of "$1")
    lock=$work/node$1/index/LOCK
    cluster kill "$1" >/dev/null
    for _ in $(seq 1 100); do
        if [ ! -e "/proc/$pid" ] ||
            [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then
            [ ! -e "$lock" ] && return 0
            flock -n -x "$lock" true 2>/dev/null && return 0
        fi
        sleep 0.1
    done
}
mem_report() { # label
    for i in 1 2 3; do
        read -r r h a f < <(rss "$i")
        printf '%s: node %d VmRSS %d kB (anonymous %d kB, file-backed %d kB: LMDB pages) VmHWM %d kB, data dir %s MB\n' \
            "$1" "$i" "$r" "$a" "$f" "$h" "$(($(du -sb "$work/node$i" | awk '{print $1}') / 1000000))"
    done
}

cluster up >/dev/null
all=$(cluster servers)
echo "scale_queues: $queues queues with one message each, $threads threads"
"$BS" fill -s "$all" --queues "$queues" --threads "$threads"
sleep 2 # followers apply the tail
mem_report "after fill"
read -r rss_fill _ anon_fill _ < <(rss 1)
"$BS" list -s "$all" --queues "$queues" --page-size 1000 | tee "$work/list.out"
last_q=$(printf 'q%07d' $((queues - 1)))

# One follower.
leader=$(cluster leader)
f=$((leader % 3 + 1))
kill_node "$f"
t0=$(now_ms)
"$BS" serve -s "127.0.0.1:$((base + f)),$all" --read-first --queue "$last_q" \
    --deadline-ms 120000 >"$work/serve1.out" &
probe=$!
cluster start "$f" >/dev/null
wait "$probe"
one_ms=$(($(sed -n 's/^serving_at_ms=//p' "$work/serve1.out") - t0))
echo "restart of follower $f to serving: $one_ms ms"
grep 'index opened' "$work/node$f.log" | tail -n 1 || true
grep -h 'loop thread stalled' "$work"/node?.log | tail -n 5 || true

# Every node.
for i in 1 2 3; do kill_node "$i"; done
t0=$(now_ms)
"$BS" serve -s "$all" --queue "$last_q" --deadline-ms 120000 \
    >"$work/serve3.out" &
probe=$!
# All at once, as after a power loss: `cluster start` returns once the
# node has written its pid file, which ternd does when it serves (after
# its index rebuild), so one after another would add the rebuilds up.
for i in 1 2 3; do cluster start "$i" >/dev/null & done
wait "$probe"
all_ms=$(($(sed -n 's/^serving_at_ms=//p' "$work/serve3.out") - t0))
echo "restart of every node to serving: $all_ms ms"
wait # the starts: every node has rebuilt its index
for i in 1 2 3; do grep 'index opened' "$work/node$i.log" | tail -n 1 || true; done
sleep 2
mem_report "after restart"
read -r rss_restart _ anon_restart _ < <(rss 1)
lf=$(sed -n 's/^list_first_ms=//p' "$work/list.out")
lm=$(sed -n 's/^list_middle_ms=//p' "$work/list.out")
ll=$(sed -n 's/^list_last_ms=//p' "$work/list.out")
printf '{"bench":"scale_queues","queues":%d,"restart_one_ms":%d,"restart_all_ms":%d,"rss_kb_after_fill":%d,"rss_kb_after_restart":%d,"anon_kb_after_fill":%d,"anon_kb_after_restart":%d,"list_page_first_ms":%s,"list_page_middle_ms":%s,"list_page_last_ms":%s}\n' \
    "$queues" "$one_ms" "$all_ms" "$rss_fill" "$rss_restart" "$anon_fill" "$anon_restart" "$lf" "$lm" "$ll"
