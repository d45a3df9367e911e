#!/usr/bin/env bash
# The tern demo (what `make demo` runs after building build/): a local
# 3-node cluster in a temp dir on free loopback ports; 10,000 x 1 KiB
# messages produced with an ack log and read back from a follower alone;
# kill -9 of the leader with the failover time measured (kill -> next
# successful produce); more traffic; the killed node restarted; then every
# acknowledged id is checked to be readable. Prints PASS or FAIL (exit 1).
# Every node is stopped by PID on exit, whatever happens.
#
# Environment: TERN_BIN (build dir, default <repo>/build), DEMO_COUNT
# (10000), DEMO_KEEP=1 keeps the temp dir.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export TERN_BIN=${TERN_BIN:-$ROOT/build}
CLI=${TERN_CLI:-$TERN_BIN/cli/tern}
COUNT=${DEMO_COUNT:-10000}
[ -x "$CLI" ] || { echo "demo: $CLI not found: run 'make build' first" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-demo.XXXXXX")
# A base port P with P+1..P+3 and P+101..P+103 free on 127.0.0.1, below
# the ephemeral range (32768+) so no outgoing connection can take them.
base=$(python3 - <<'EOF'
import random, socket
rnd = random.Random()
for _ in range(200):
    p = rnd.randrange(20000, 32500, 10)
    socks = []
    try:
        for port in (p + 1, p + 2, p + 3, p + 101, p + 102, p + 103):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", port))
        print(p)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
EOF
)
[ -n "$base" ] || { echo "demo: no free ports" >&2; rmdir "$work"; exit 1; }

cluster() { "$ROOT/scripts/cluster.sh" --dir "$work" --base-port "$base" "$@"; }
addr() { echo "127.0.0.1:$((base + $1))"; }
ALL="$(addr 1),$(addr 2),$(addr 3)"
tern() { "$CLI" "$@"; }
now_ns() { date +%s%N; }
ms_since() { echo $((($(now_ns) - $1) / 1000000)); }
indent() { sed 's/^/   /' "$@"; }

result=FAIL
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    echo
    echo "== Cleanup: stopping every node by PID"
    cluster down 2>&1 | indent || true
    [ "$result" = PASS ] || echo "FAIL"
    if [ "$result" = PASS ] && [ -z "${DEMO_KEEP:-}" ]; then
        rm -rf "$work"
    else
        echo "   files kept in $work (node logs: $work/node*.log)"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "demo: interrupted"; exit 130' INT TERM

fails=0
check() { # condition-exit-code description
    if [ "$1" -eq 0 ]; then
        echo "   ok    $2"
    else
        echo "   FAIL  $2"
        fails=$((fails + 1))
    fi
}
rc_of() { if "$@"; then echo 0; else echo 1; fi; }
ids_of_acks() { cut -f1 "$@" | sort -u; }         # ack log: id \t offset
ids_of_consume() { cut -f2 "$1" | cut -d. -f1 | sort; } # offset \t id...

# Consume QUEUE from offset 0 through SERVERS into FILE until it holds at
# least N lines (a follower may still be applying; bounded to 20 s).
consume_until() { # servers queue n file
    local deadline=$(($(now_ns) + 20000000000))
    while :; do
        tern -s "$1" consume "$2" --offset 0 >"$4" 2>"$4.err" || true
        [ "$(wc -l <"$4")" -ge "$3" ] && return 0
        [ "$(now_ns)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

echo "== 1. Start a 3-node cluster (client ports $(addr 1)-$((base + 3)), data in $work)"
cluster up | indent
leader=$(cluster leader)
echo "   leader: node $leader"

echo
echo "== 2. Create queue 'demo', produce $COUNT x 1 KiB messages (ack log)"
tern -s "$ALL" queue create demo
t0=$(now_ns)
rc=0
tern -s "$ALL" produce demo --count "$COUNT" --size 1024 --batch 64 \
    --window 64 --ack-log "$work/acks1.txt" --id-prefix demo \
    2>"$work/produce1.err" || rc=$?
indent "$work/produce1.err"
ms=$(ms_since "$t0")
n1=$(wc -l <"$work/acks1.txt")
check "$rc" "produce exit 0"
check "$(rc_of [ "$n1" -eq "$COUNT" ])" "$n1 of $COUNT acknowledged in ${ms} ms ($((n1 * 1000 / (ms > 0 ? ms : 1))) msg/s)"

follower=1
[ "$follower" != "$leader" ] || follower=2
echo
echo "== 3. Consume everything from follower node $follower alone (-s $(addr "$follower"))"
t0=$(now_ns)
consume_until "$(addr "$follower")" demo "$COUNT" "$work/read1.txt" || true
n=$(wc -l <"$work/read1.txt")
check "$(rc_of [ "$n" -eq "$COUNT" ])" "read $n messages in $(ms_since "$t0") ms"
ids_of_acks "$work/acks1.txt" >"$work/acked1.ids"
ids_of_consume "$work/read1.txt" >"$work/read1.ids"
check "$(rc_of [ -z "$(comm -23 "$work/acked1.ids" "$work/read1.ids")" ])" "every acknowledged id read from the follower"
first=$(awk -F'\t' 'NR == 1 { split($2, p, "."); print p[1] }' "$work/read1.txt")
last=$(awk -F'\t' 'END { split($2, p, "."); print p[1] }' "$work/read1.txt")
check "$(rc_of [ "$first/$last" = "demo-0/demo-$((COUNT - 1))" ])" "ids in production order (demo-0 .. demo-$((COUNT - 1)))"

echo
echo "== 4. kill -9 the leader (node $leader), measure failover"
t_kill=$(now_ns)
cluster kill "$leader" | indent
ok=1
for k in $(seq 1 300); do
    if tern -s "$ALL" --timeout-ms 200 produce demo --count 1 --size 1024 \
        --id-prefix "failover$k" --ack-log "$work/acks-failover$k.txt" \
        >/dev/null 2>&1; then
        ok=0
        break
    fi
    [ "$(ms_since "$t_kill")" -lt 30000 ] || break
done
failover_ms=$(ms_since "$t_kill")
check "$ok" "first successful produce ${failover_ms} ms after the kill (attempt $k)"
new_leader=$(cluster leader || echo "?")
echo "   new leader: node $new_leader"

echo
echo "== 5. Produce 1,000 more, restart node $leader, read everything back"
rc=0
tern -s "$ALL" produce demo --count 1000 --size 1024 --batch 64 --window 64 \
    --ack-log "$work/acks2.txt" --id-prefix after 2>"$work/produce2.err" || rc=$?
indent "$work/produce2.err"
check "$rc" "produce 1000 after failover: $(wc -l <"$work/acks2.txt") acknowledged"
cluster start "$leader" | indent
cat "$work"/acks1.txt "$work"/acks-failover*.txt "$work"/acks2.txt >"$work/acks-all.txt"
n_acked=$(wc -l <"$work/acks-all.txt")
ids_of_acks "$work/acks-all.txt" >"$work/acked.ids"
for node in $(seq 1 3); do
    consume_until "$(addr "$node")" demo "$n_acked" "$work/read-node$node.txt" || true
    ids_of_consume "$work/read-node$node.txt" >"$work/read-node$node.ids"
    missing=$(comm -23 "$work/acked.ids" "$work/read-node$node.ids" | wc -l)
    dups=$(uniq -d "$work/read-node$node.ids" | wc -l)
    check "$(rc_of [ $((missing + dups)) -eq 0 ])" "node $node alone: $(wc -l <"$work/read-node$node.txt") read, $missing of $n_acked acknowledged ids missing, $dups duplicated"
done

echo
echo "== 6. Cluster status"
tern -s "$ALL" cluster status 2>&1 | indent || true

echo
echo "== Summary: $n_acked acknowledged, failover (kill -9 -> next produce) ${failover_ms} ms"
if [ "$fails" -eq 0 ]; then
    result=PASS
    echo "PASS"
else
    echo "FAIL ($fails checks failed)"
    exit 1
fi
