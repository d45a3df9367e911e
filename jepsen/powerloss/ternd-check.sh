#!/bin/bash
# End-to-end power-loss check of ternd on loopback: each round starts NODES
# ternd processes under libtern_powerloss.so, produces acknowledged messages
# with `tern produce --ack-log`, SIGKILLs every node at once by PID (round 1
# after the producer finished, later rounds while it is producing), runs
# tern-powerloss-restore for each node, and restarts.  At the end the nodes run
# without the shim and every acknowledged message must be readable with
# `tern consume`.  NODES=1 is one node; NODES=3 is a coordinated power loss of
# a whole cluster.
#   [NODES=3] jepsen/powerloss/ternd-check.sh BUILD_DIR [ROUNDS]
# BUILD_DIR holds node/ternd and cli/tern; the shim is built into
# BUILD_DIR/jepsen.  Extra ternd flags: TERND_ARGS (e.g. "--durability memory",
# which acknowledges before fsync and must then lose messages).  KEEP=1 keeps
# the temp dir.  Exit 0 if all checks passed; last line "N passed, N failed".
set -u
BUILD=$(cd "${1:?usage: ternd-check.sh BUILD_DIR [ROUNDS]}" && pwd)
ROUNDS=${2:-3}
NODES=${NODES:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
make -s -C "$HERE" OUT="$BUILD/jepsen" >/dev/null || { echo "build failed"; exit 1; }
TERND=$BUILD/node/ternd
TERN=$BUILD/cli/tern
SHIM=$BUILD/jepsen/libtern_powerloss.so
RESTORE=$BUILD/jepsen/tern-powerloss-restore
T=$(mktemp -d /tmp/tern-pl-ternd.XXXXXX)
PIDS=()
PROD=
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

cleanup() {
    for p in "${PIDS[@]}" $PROD; do
        kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
    done
    wait 2>/dev/null
    if [ "$fail" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$T"; else echo "artifacts kept in $T"; fi
}
trap cleanup EXIT

read -r -a PORTS < <(python3 -c 'import socket, sys
s = [socket.socket() for _ in range(2 * int(sys.argv[1]))]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])' "$NODES")
PEERS=()
ADDRS=
for ((n = 1; n <= NODES; n++)); do
    C[$n]=127.0.0.1:${PORTS[2 * n - 2]}
    R[$n]=127.0.0.1:${PORTS[2 * n - 1]}
    PEERS+=(--peer "$n=${R[$n]},${C[$n]}")
    ADDRS=${ADDRS:+$ADDRS,}${C[$n]}
    mkdir -p "$T/n$n/state"
    mkdir -p -m 700 "$T/n$n/data"
done
# The cluster's credentials: nodes authenticate each other (peer_auth tls).
"$HERE/../../scripts/tern-certs.sh" "$T/certs" $(seq 1 "$NODES") >/dev/null

# start_nodes TAG [shim]: starts every node, waits (bounded) for a writable
# leader (a queue list through the leader succeeds).
start_nodes() {
    local tag=$1 n i
    PIDS=()
    for ((n = 1; n <= NODES; n++)); do
        local pre=()
        [ "${2:-}" = shim ] && pre=(env LD_PRELOAD="$SHIM" TERN_POWERLOSS_ROOT="$T/n$n/data"
            TERN_POWERLOSS_DIR="$T/n$n/state")
        "${pre[@]}" "$TERND" --id "$n" --data-dir "$T/n$n/data" --client-addr "${C[$n]}" \
            --raft-addr "${R[$n]}" "${PEERS[@]}" --cluster-ca "$T/certs/ca.pem" \
            --node-cert "$T/certs/node$n.pem" --node-key "$T/certs/node$n.key" \
            --cluster-secret-file "$T/certs/cluster.secret" --snapshot-bytes 32K \
            --snapshot-trailing 8 ${TERND_ARGS:-} >"$T/n$n/ternd.$tag.log" 2>&1 &
        PIDS+=($!)
    done
    for ((i = 0; i < 300; i++)); do
        for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done
        "$TERN" -s "$ADDRS" --timeout-ms 500 queue list >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    return 1
}

kill_all() {
    kill -9 "${PIDS[@]}"
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    PIDS=()
}

for ((r = 1; r <= ROUNDS; r++)); do
    if start_nodes "$r" shim; then
        ok "round${r}_ternd_starts_under_shim"
    else
        ko "round${r}_ternd_starts_under_shim" "$(tail -q -n 2 "$T"/n*/ternd.$r.log)"
        break
    fi
    if [ "$r" -eq 1 ]; then
        "$TERN" -s "$ADDRS" queue create q >/dev/null || ko queue_create "failed"
    fi
    "$TERN" -s "$ADDRS" --timeout-ms 2000 produce q --count 3000 --size 100 --window 8 \
        --ack-log "$T/acks.$r" --id-prefix "r$r" >"$T/produce.$r.out" 2>&1 &
    PROD=$!
    if [ "$r" -eq 1 ]; then
        wait "$PROD"
    else
        for ((i = 0; i < 400; i++)); do
            [ -f "$T/acks.$r" ] && [ "$(wc -l <"$T/acks.$r")" -ge 300 ] && break
            kill -0 "$PROD" 2>/dev/null || break
            sleep 0.05
        done
    fi
    kill_all
    wait "$PROD" 2>/dev/null
    PROD=
    touch "$T/acks.$r"
    echo "  round $r: $(wc -l <"$T/acks.$r") messages acknowledged before all $NODES node(s) lost power"
    for ((n = 1; n <= NODES; n++)); do
        if "$RESTORE" "$T/n$n/state" >"$T/n$n/restore.$r.out" 2>&1; then
            ok "round${r}_n${n}_restore"
            sed 's/^/  /' "$T/n$n/restore.$r.out"
        else
            ko "round${r}_n${n}_restore" "$(cat "$T/n$n/restore.$r.out")"
        fi
    done
done

if start_nodes final; then
    ok ternd_starts_after_power_losses
else
    ko ternd_starts_after_power_losses "$(tail -q -n 3 "$T"/n*/ternd.final.log)"
fi
cat "$T"/acks.* | cut -f1 | sort -u >"$T/acked"
timeout 60 "$TERN" -s "$ADDRS" --read-from leader consume q --offset 0 --max 100000 \
    --idle-exit-ms 1500 >"$T/consumed" 2>"$T/consume.err"
# consume lines: offset, a tab, the payload ("<id>" then '.' padding)
cut -f2 "$T/consumed" | cut -d. -f1 | sort >"$T/read"
lost=$(comm -23 "$T/acked" "$T/read" | wc -l)
dups=$(uniq -d "$T/read" | wc -l)
echo "  acknowledged $(wc -l <"$T/acked"), read $(wc -l <"$T/consumed"), lost $lost, duplicated ids $dups"
if [ "$(wc -l <"$T/acked")" -gt 0 ] && [ "$lost" -eq 0 ]; then
    ok every_acknowledged_message_readable
else
    ko every_acknowledged_message_readable "$lost lost, e.g. $(comm -23 "$T/acked" "$T/read" | head -3 | tr '\n' ' ')"
fi
if grep -h "level=ERROR" "$T"/n*/ternd.*.log >"$T/errors"; then
    ko no_error_lines_in_ternd_logs "$(head -3 "$T/errors")"
else
    ok no_error_lines_in_ternd_logs
fi
if grep -h "tern-powerloss: FATAL" "$T"/n*/ternd.*.log >"$T/fatal"; then
    ko no_shim_fatal "$(head -3 "$T/fatal")"
fi
kill "${PIDS[@]}" 2>/dev/null
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
