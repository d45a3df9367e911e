#!/usr/bin/env bash
# What the security features cost a producer: a 3-node cluster on loopback
# (scripts/cluster.sh) measured with `tern bench` (1 KiB messages, one
# message per request) at window 1 (sequential: latency) and window 16
# (pipelined: throughput), in four setups, each on a fresh cluster:
#
#   open        peer_auth = none, plaintext client port, no client auth
#   peer-tls    mutual TLS between the nodes (tern's default)
#   client-tls  + TLS on the client port (the CLI verifies the node)
#   full        + client_auth = on: the CLI logs in with SCRAM-SHA-256
#               (a user with a produce grant on the queue only, so every
#               request is checked against the grants table)
#
#   bench/security.sh [--count N] [--trials T] [--setups "open full ..."]
#
# Prints one line per setup, window and trial, then the medians and one
# JSON line per setup. Binaries: TERN_BIN (default <repo>/build), as
# scripts/cluster.sh; use a release build for figures (cmake
# -DCMAKE_BUILD_TYPE=RelWithDebInfo -B build-rel; TERN_BIN=build-rel).
# Clusters are stopped by PID (scripts/cluster.sh down) when the script
# ends, also on error.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
count=20000
trials=3
setups="open peer-tls client-tls full"
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --setups) setups=$2; shift 2 ;;
    *) echo "usage: $0 [--count N] [--trials T] [--setups LIST]" >&2; exit 2 ;;
    esac
done
[ -x "$CLI" ] || { echo "security: $CLI not found (build first, or set TERN_BIN)" >&2; exit 1; }
[ "$count" -ge 100 ] && [ "$count" -le 10000000 ] || { echo "security: --count 100..10000000" >&2; exit 2; }
[ "$trials" -ge 1 ] && [ "$trials" -le 20 ] || { echo "security: --trials 1..20" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-secbench.XXXXXX")
dir=
cleanup() {
    [ -n "$dir" ] && "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
base=$("$ROOT/scripts/cluster.sh" free-base)

admin_pw=bench-admin-pw
user_pw=bench-user-pw
printf '%s' "$admin_pw" >"$work/admin.pw"
printf '%s' "$user_pw" >"$work/user.pw"
chmod 600 "$work"/*.pw

# One setup: start its cluster, run every trial, print the lines, stop it.
run_setup() { # name
    local name=$1 extra= peer=tls w t json p50 p99 rate
    dir=$work/$name
    unset TERN_TLS TERN_CA TERN_USER TERN_PASSWORD
    case "$name" in
    open) peer=none ;;
    peer-tls) ;;
    client-tls) extra="client_tls = on" ;;
    full)
        extra=$(printf 'client_tls = on\nclient_auth = on\nbootstrap_admin = admin\nbootstrap_admin_cred = %s' \
            "$("$CLI" user hash --password-file "$work/admin.pw")")
        ;;
    *) echo "security: unknown setup $name" >&2; exit 2 ;;
    esac
    mkdir -p "$dir"
    TERN_PEER_AUTH=$peer TERN_SECURITY_EXTRA=$extra \
        "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" up >/dev/null
    local servers
    servers=$("$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" servers)
    if [ "$name" = client-tls ] || [ "$name" = full ]; then
        export TERN_TLS=1 TERN_CA=$dir/certs/ca.pem
    fi
    if [ "$name" = full ]; then
        # The admin (bootstrapped by the leader) makes the bench user, who
        # may only produce to queue "sec".
        local tries=0
        until TERN_USER=admin TERN_PASSWORD=$admin_pw "$CLI" -s "$servers" \
            user set bench --password-file "$work/user.pw" >/dev/null 2>&1; do
            tries=$((tries + 1))
            [ "$tries" -lt 50 ] || { echo "security: cannot create the bench user" >&2; exit 1; }
            sleep 0.2
        done
        TERN_USER=admin TERN_PASSWORD=$admin_pw "$CLI" -s "$servers" \
            acl set bench default sec produce,manage >/dev/null
        export TERN_USER=bench TERN_PASSWORD=$user_pw
    fi
    for w in 1 16; do
        for t in $(seq 1 "$trials"); do
            json=$("$CLI" -s "$servers" bench sec --size 1024 --count "$count" \
                --window "$w" --json 2>/dev/null)
            p50=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_us"]["p50"])')
            p99=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_us"]["p99"])')
            rate=$(printf '%s' "$json" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["msgs_per_s"]))')
            printf '%-10s W%-2s trial %d: p50 %6s us  p99 %6s us  %7s msg/s\n' \
                "$name" "$w" "$t" "$p50" "$p99" "$rate"
            echo "$name $w $p50 $p99 $rate" >>"$work/results"
        done
    done
    "$ROOT/scripts/cluster.sh" --dir "$dir" --base-port "$base" down >/dev/null
    dir=
}

for s in $setups; do
    run_setup "$s"
done

echo
echo "medians over $trials trial(s), $count x 1 KiB, 3 nodes, loopback"
python3 - "$work/results" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, w, p50, p99, rate = line.split()
    rows.setdefault((name, int(w)), []).append((float(p50), float(p99),
                                                float(rate)))
order = []
for (name, w) in rows:
    if name not in order:
        order.append(name)
for name in order:
    out = {"setup": name}
    for w in (1, 16):
        r = rows.get((name, w), [])
        if not r:
            continue
        m = [statistics.median(x) for x in zip(*r)]
        print("%-10s W%-2d p50 %7.0f us  p99 %7.0f us  %8.0f msg/s"
              % (name, w, m[0], m[1], m[2]))
        out["w%d" % w] = {"p50_us": m[0], "p99_us": m[1], "msgs_per_s": m[2]}
    print(json.dumps(out))
EOF
