#!/bin/bash
# Tests for the power-loss shim: runs tern-powerloss-probe scenarios under
# libtern_powerloss.so, SIGKILLs them (by PID), runs tern-powerloss-restore
# and checks the files (fsynced data kept, unsynced data lost, names per the
# documented model, O_DSYNC writes kept, threads, LMDB with and without sync).
# Prints the shim overhead (fsyncs/s with and without it).  No root needed.
#   jepsen/powerloss/test.sh BUILD_OUT_DIR      (builds into BUILD_OUT_DIR)
# Exit 0 if every check passed; last line "N passed, N failed".
set -u
OUT=${1:?usage: test.sh BUILD_OUT_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
make -s -C "$HERE" OUT="$OUT" >/dev/null || { echo "build failed"; exit 1; }
SHIM=$OUT/libtern_powerloss.so
RESTORE=$OUT/tern-powerloss-restore
PROBE=$OUT/tern-powerloss-probe
T=$(mktemp -d /tmp/tern-pl-test.XXXXXX)
PID=
pass=0
fail=0

cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
        kill -9 "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
    fi
    rm -rf "$T"
}
trap cleanup EXIT

ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

# Counts the PASS/FAIL lines of a check run.
tally() {
    local f=$1 n
    cat "$f"
    n=$(grep -c '^PASS ' "$f"); pass=$((pass + n))
    n=$(grep -c '^FAIL ' "$f"); fail=$((fail + n))
    if ! grep -q -E '^(PASS|FAIL) ' "$f"; then
        ko "$2" "check produced no result"
    fi
}

# start NAME ARGS...: runs the probe under the shim in $T/NAME.
start() {
    local name=$1
    shift
    D=$T/$name
    mkdir -p "$D/root" "$D/state"
    env LD_PRELOAD="$SHIM" TERN_POWERLOSS_ROOT="$D/root" \
        TERN_POWERLOSS_DIR="$D/state" ${WRAP:-} "$PROBE" "$@" >"$D/out" 2>"$D/err" &
    PID=$!
}

# wait_line REGEX [SECONDS]: polls the probe's stdout (bounded).
wait_line() {
    local i max=$(( ${2:-20} * 50 ))
    for ((i = 0; i < max; i++)); do
        grep -qs -E "$1" "$D/out" && return 0
        kill -0 "$PID" 2>/dev/null || { grep -qs -E "$1" "$D/out"; return; }
        sleep 0.02
    done
    return 1
}

# crash_restore NAME: SIGKILL the probe, then restore its root.  With WRAP
# set, the probe is the wrapper's child: that child gets the SIGKILL.
crash_restore() {
    if [ -n "${WRAP:-}" ]; then
        kill -9 $(cat "/proc/$PID/task/$PID/children")
    else
        kill -9 "$PID"
    fi
    wait "$PID" 2>/dev/null
    PID=
    if "$RESTORE" "$D/state" >"$D/restore.out" 2>&1; then
        ok "$1_restore_exit_0"
    else
        ko "$1_restore_exit_0" "$(cat "$D/restore.out")"
    fi
    if [ -z "$(ls -A "$D/state/rec")" ]; then
        ok "$1_state_cleared"
    else
        ko "$1_state_cleared" "$(ls "$D/state/rec" | head -3)"
    fi
}

# ---- basic scenarios --------------------------------------------------------
mkdir -p "$T/basic/root"
head -c 100 /dev/zero | tr '\0' P >"$T/basic/root/pre_append"
head -c 80 /dev/zero | tr '\0' T >"$T/basic/root/pre_trunc"
head -c 50 /dev/zero | tr '\0' R >"$T/basic/root/pre_rename"
head -c 30 /dev/zero | tr '\0' U >"$T/basic/root/pre_unlink"
head -c 40 /dev/zero | tr '\0' O >"$T/basic/root/pre_over"
start basic basic "$T/basic/root"
if wait_line '^ready'; then
    ok basic_probe_ran
    if grep -q 'fsyncgate other=0 target=-1 errno=5' "$D/out"; then
        ok fsync_eio_injection_returns_eio
    else
        ko fsync_eio_injection_returns_eio "$(grep fsyncgate "$D/out")"
    fi
    crash_restore basic
    "$PROBE" check-basic "$D/root" >"$D/check" 2>&1
    tally "$D/check" basic
    # A second restore with nothing recorded must change nothing.
    sum1=$(cd "$D/root" && find . -type f | sort | xargs md5sum)
    "$RESTORE" "$D/state" "$D/root" >/dev/null 2>&1
    sum2=$(cd "$D/root" && find . -type f | sort | xargs md5sum)
    [ "$sum1" = "$sum2" ] && ok restore_again_is_noop || ko restore_again_is_noop "files changed"
else
    ko basic_probe_ran "$(tail -3 "$D/err")"
fi

# ---- controls: the checks detect a missing restore; restore refuses while
# the process lives; --flushed keeps the files as they are --------------------
mkdir -p "$T/control/root"
for f in pre_append pre_trunc pre_rename pre_unlink pre_over; do
    cp "$T/basic/root/$f" "$T/control/root/$f" 2>/dev/null ||
        head -c 10 /dev/zero >"$T/control/root/$f"
done
start control basic "$T/control/root"
if wait_line '^ready'; then
    if "$RESTORE" "$D/state" >"$D/live.out" 2>&1; then
        ko restore_refuses_while_process_runs "exit 0"
    else
        grep -q "locked" "$D/live.out" && ok restore_refuses_while_process_runs ||
            ko restore_refuses_while_process_runs "$(cat "$D/live.out")"
    fi
    kill -9 "$PID"
    wait "$PID" 2>/dev/null
    PID=
    n=$("$PROBE" check-basic "$D/root" | grep -c '^FAIL')
    [ "$n" -ge 8 ] && ok control_checks_fail_without_restore ||
        ko control_checks_fail_without_restore "only $n checks failed"
    sum1=$(cd "$D/root" && find . -type f | sort | xargs md5sum)
    "$RESTORE" --flushed "$D/state" >/dev/null 2>&1
    sum2=$(cd "$D/root" && find . -type f | sort | xargs md5sum)
    [ "$sum1" = "$sum2" ] && [ -z "$(ls -A "$D/state/rec")" ] &&
        ok flushed_clears_state_keeps_files || ko flushed_clears_state_keeps_files "changed"
else
    ko control_probe_ran "$(tail -3 "$D/err")"
fi

# ---- threads, killed while writing (3 rounds, random kill time) -------------
for round in 1 2 3; do
    start "threads$round" threads "$T/threads$round/root" 4 10
    if wait_line '^ack t03'; then
        sleep "0.$((RANDOM % 4 + 1))"
        if grep -q '^finished' "$D/out"; then
            ko "threads${round}_killed_while_writing" "probe finished first"
        fi
        crash_restore "threads$round"
        "$PROBE" check-threads "$D/root" 4 "$D/out" >"$D/check" 2>&1
        tally "$D/check" "threads$round"
        echo "  (round $round: $(grep -c '^ack' "$D/out") acks before the kill)"
    else
        ko "threads${round}_probe_ran" "$(tail -3 "$D/err")"
    fi
done

# ---- LMDB -------------------------------------------------------------------
# Started through a wrapper (timeout forks the probe): the wrapper inherits
# the shim too but never touches the root, so it must not take the lock.
WRAP="timeout 60" start lmdb_sync lmdb "$T/lmdb_sync/root" 200 sync
if wait_line '^ready' 30; then
    WRAP="timeout 60" crash_restore lmdb_sync
    "$PROBE" check-lmdb "$D/root" 200 sync >"$D/check" 2>&1
    tally "$D/check" lmdb_sync
else
    ko lmdb_sync_probe_ran "$(tail -3 "$D/err")"
fi

start lmdb_nosync lmdb "$T/lmdb_nosync/root" 200 nosync
if wait_line '^ready' 30; then
    crash_restore lmdb_nosync
    "$PROBE" check-lmdb "$D/root" 200 nosync >"$D/check" 2>&1
    tally "$D/check" lmdb_nosync
else
    ko lmdb_nosync_probe_ran "$(tail -3 "$D/err")"
fi

for round in 1 2; do
    start "lmdb_kill$round" lmdb "$T/lmdb_kill$round/root" 100000 sync
    if wait_line '^committed 20$' 30; then
        sleep "0.$((RANDOM % 4 + 1))"
        crash_restore "lmdb_kill$round"
        acked=$(grep -c '^committed' "$D/out")
        "$PROBE" check-lmdb "$D/root" 0 "atleast:$acked" >"$D/check" 2>&1
        tally "$D/check" "lmdb_kill$round"
    else
        ko "lmdb_kill${round}_probe_ran" "$(tail -3 "$D/err")"
    fi
done

# ---- overhead figure (printed, not asserted) --------------------------------
mkdir -p "$T/bench/root" "$T/bench/state"
for size in 4096 1048576; do
    plain=$("$PROBE" bench "$T/bench/root/plain" 300 "$size")
    shim=$(env LD_PRELOAD="$SHIM" TERN_POWERLOSS_ROOT="$T/bench/root" \
        TERN_POWERLOSS_DIR="$T/bench/state" "$PROBE" bench "$T/bench/root/shim" 300 "$size")
    echo "overhead, file $((size / 1024)) KiB: without shim: $plain"
    echo "overhead, file $((size / 1024)) KiB: with shim:    $shim"
    if [ -n "$shim" ]; then ok "bench_under_shim_${size}"; else ko "bench_under_shim_${size}" "no output"; fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
