#!/bin/bash
# Runs the same harness configuration up to N times (bounded) and stops at
# the first run that is not valid; prints one line per run. For
# reproducing a finding, e.g.:
#   jepsen/repeat.sh 10 --nodes 3 --time 40 --nemesis kill,partition \
#       --snapshot-bytes 32K --snapshot-trailing 8 --queues 2 --log-level debug
# REPEAT_IGNORE_CRASH=1: go on after a valid run in which a node crashed
# (harness exit 4).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
n="${1:?usage: repeat.sh N harness-args...}"
shift
stop=0
trap 'stop=1' INT TERM
for ((i = 1; i <= n && stop == 0; i++)); do
    out="$(python3 "$HERE/harness.py" "$@" 2>&1)"
    rc=$?
    line="$(printf '%s\n' "$out" | grep -E 'verdict (valid|invalid|unknown)' | tail -1)"
    echo "run $i/$n rc=$rc ${line:-$(printf '%s\n' "$out" | tail -1)}"
    if [ "$rc" = 4 ] && [ "${REPEAT_IGNORE_CRASH:-0}" = 1 ]; then
        continue
    fi
    if [ "$rc" != 0 ]; then
        printf '%s\n' "$out" | tail -n 20
        exit "$rc"
    fi
done
[ "$stop" = 1 ] && exit 130
exit 0
