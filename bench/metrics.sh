#!/usr/bin/env bash
# What scraping the metrics endpoint costs produce throughput. A 3-node
# cluster on loopback (scripts/cluster.sh) with [metrics] listen on every
# node; `tern bench` produces N messages of S bytes with W batches in
# flight, alternately with no scraper and with a scraper that GETs
# /metrics of all three nodes once a second (Prometheus' usual interval is
# 15 s or more: 1 Hz is the pessimistic case). T trials of each, alternated
# (none, scraped, none, scraped, ...) so drift of the host hits both.
#
#   bench/metrics.sh [--count N] [--size S] [--window W] [--trials T]
#
# Defaults: N 50000, S 1024, W 16, T 3. Prints each trial's msg/s, the
# median of each arm and the ratio scraped / none, and the size and time of
# one scrape of the leader.
#
# Binaries: TERN_BIN (default <repo>/build); use a release build for
# figures (cmake -DCMAKE_BUILD_TYPE=Release -B build-rel;
# TERN_BIN=$PWD/build-rel). The cluster and the scraper are stopped by
# PID when the script ends, also on error.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
count=50000
size=1024
window=16
trials=3
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    *) echo "usage: $0 [--count N] [--size S] [--window W] [--trials T]" >&2; exit 2 ;;
    esac
done
[ -x "$CLI" ] || { echo "metrics: $CLI not found (build first, or set TERN_BIN)" >&2; exit 1; }
[ "$count" -ge 1 ] && [ "$count" -le 10000000 ] || { echo "metrics: --count 1..10000000" >&2; exit 2; }
[ "$trials" -ge 1 ] && [ "$trials" -le 20 ] || { echo "metrics: --trials 1..20" >&2; exit 2; }
command -v curl >/dev/null || { echo "metrics: curl is needed" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-metricsbench.XXXXXX")
dir=$work/cluster
base=$("$ROOT/scripts/cluster.sh" free-base)
scraper=
cleanup() {
    [ -n "$scraper" ] && kill "$scraper" 2>/dev/null && wait "$scraper" 2>/dev/null
    "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# Metrics ports: base + 200 + i (cluster.sh uses base + i and base + 100 + i).
mport() { echo $((base + 200 + $1)); }
mkdir -p "$dir"
"$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" up >/dev/null
for i in 1 2 3; do
    printf '\n[metrics]\nlisten = 127.0.0.1:%d\n' "$(mport "$i")" >>"$dir/node$i.ini"
    "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" restart "$i" >/dev/null
done
TERN_LEADER_WAIT=20 "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" leader >/dev/null
servers=$("$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" servers)
for i in 1 2 3; do
    curl -sf "http://127.0.0.1:$(mport "$i")/healthz" >/dev/null ||
        { echo "metrics: node $i's endpoint does not answer" >&2; exit 1; }
done

# Scrape every node once a second, for at most an hour.
scrape_loop() {
    for _ in $(seq 1 3600); do
        for i in 1 2 3; do
            curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$(mport "$i")/metrics" || true
        done
        sleep 1
    done
}

run() { # queue -> msg/s
    "$CLI" -s "$servers" --timeout-ms 60000 bench "$1" --count "$count" \
        --size "$size" --window "$window" --json 2>/dev/null |
        sed -n 's/.*"msgs_per_s":\([0-9.]*\).*/\1/p'
}

echo "metrics bench: $count x $size B, window $window, $trials trials per arm, alternated"
none=()
scraped=()
for t in $(seq 1 "$trials"); do
    r=$(run "none$t")
    none+=("$r")
    echo "  trial $t none:    $r msg/s"
    scrape_loop &
    scraper=$!
    r=$(run "scraped$t")
    kill "$scraper" 2>/dev/null || true
    wait "$scraper" 2>/dev/null || true
    scraper=
    scraped+=("$r")
    echo "  trial $t scraped: $r msg/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{x[NR] = $1} END {print x[int((NR + 1) / 2)]}'; }
mn=$(median "${none[@]}")
ms=$(median "${scraped[@]}")
awk -v a="$mn" -v b="$ms" 'BEGIN {printf "median none %.0f msg/s, scraped at 1 Hz %.0f msg/s, ratio %.3f\n", a, b, b / a}'
leader=$("$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" leader)
curl -s -o /dev/null -w "one scrape of the leader: %{size_download} bytes in %{time_total} s\n" \
    "http://127.0.0.1:$(mport "$leader")/metrics"
