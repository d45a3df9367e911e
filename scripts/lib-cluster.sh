# shellcheck shell=bash
# Functions shared by scripts/cluster.sh and scripts/rolling-restart.sh,
# sourced by both after they have set dir (the cluster directory), base
# (the base port) and TERN_CLI (the tern CLI).
# shellcheck disable=SC2154 # dir and base are the sourcing script's

# Node i's client address.
client_addr() { echo "127.0.0.1:$((base + $1))"; }

# The CLI as the scripts' probes run it: TLS when the client port has it.
probe_cli() {
    case "${TERN_SECURITY_EXTRA:-}" in
    *client_tls*=*on*) "$TERN_CLI" --ca "$dir/certs/ca.pem" "$@" ;;
    *) "$TERN_CLI" "$@" ;;
    esac
}

# `tern cluster status --json` of node i alone -> "role writable
# last_applied commit_index leader_id" (empty when it does not answer).
node_state() { # i
    local out
    out=$(probe_cli -s "$(client_addr "$1")" --timeout-ms 1000 \
        cluster status --json 2>/dev/null) || return 0
    printf '%s' "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j["role"], int(j["writable"]), j["last_applied"], j["commit_index"],
      j["leader_id"])
' 2>/dev/null || true
}
