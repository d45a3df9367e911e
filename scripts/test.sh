#!/usr/bin/env bash
# Build and test stages behind the top-level Makefile.
#
#   scripts/test.sh STAGE...     STAGE = build | format | normal | asan |
#                                        fuzz | jepsen | rxe
#
#   build   configure + build build/ (RelWithDebInfo, -DTERN_WERROR=ON)
#   format  clang-format --dry-run --Werror over scripts/c-files.sh: one
#           test that fails on any file `make format` would change
#   normal  build, then ctest in build/
#   asan    build-asan/ (Debug, -DTERN_SANITIZE=address,undefined) + ctest
#   fuzz    build-fuzz/ (clang, -DTERN_FUZZ=ON, libraries instrumented with
#           -fsanitize=fuzzer-no-link,address,undefined and built with
#           -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION), then every fuzz
#           target for $TERN_FUZZ_SECONDS (default 20) s with its corpus
#
# Test stages keep going after a failure so that one run reports everything;
# a failed build counts as one failed test of its stage. With any test stage
# the script ends with the line "N passed, N failed[, N skipped]" over all
# stages and exits 1 if anything failed.
#
# Environment: JOBS (2), TERN_FUZZ_SECONDS (20), TERN_FUZZ_RUNS (unset: no
# run limit), CTEST_ARGS (extra ctest arguments, e.g. "-L unit"),
# TERN_BUILD_PREFIX (build: the dirs are PREFIX, PREFIX-asan, PREFIX-fuzz).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
# Sub-makes started by cmake --build must not inherit our make's flags
# (directory chatter, jobserver); parallelism is set with -j explicitly.
unset MAKEFLAGS MFLAGS MAKELEVEL
JOBS=${JOBS:-2}
FUZZ_SECONDS=${TERN_FUZZ_SECONDS:-20}
B=${TERN_BUILD_PREFIX:-build}

total_pass=0
total_fail=0
total_skip=0
ran_tests=0
failures=()

say() { printf '\n==== %s\n' "$*"; }

count() { # stage passed failed skipped
    total_pass=$((total_pass + $2))
    total_fail=$((total_fail + $3))
    total_skip=$((total_skip + $4))
    printf '[stage %s] %d passed / %d failed / %d skipped\n' "$1" "$2" "$3" "$4"
}

build_fail() { # stage
    failures+=("$1: build")
    count "$1" 0 1 0
}

# Configure failures leave nothing to test; build failures still run
# whatever was built (missing test executables count as failed).
configured() { [ -f "$1/CTestTestfile.cmake" ]; }

# Configure quietly (log kept in DIR/configure.log), then build $TARGET
# (default: all), keeping going past errors (make -k) so that one broken
# target does not hide the tests of the others.
configure_build() { # dir build-type extra-cmake-args...
    local dir=$1 type=$2
    shift 2
    mkdir -p "$dir"
    if ! cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE="$type" "$@" \
        >"$dir/configure.log" 2>&1; then
        cat "$dir/configure.log"
        return 1
    fi
    cmake --build "$dir" -j"$JOBS" ${TARGET:+--target "$TARGET"} -- -k
}

# Run ctest in dir, add its counts (from the JUnit report) to the totals.
run_ctest() { # stage dir
    local stage=$1 dir=$2 junit=$ROOT/$2/ctest-junit.xml rc
    rm -f "$junit"
    # shellcheck disable=SC2086
    ctest --test-dir "$dir" --output-on-failure -j"$JOBS" \
        --output-junit "$junit" ${CTEST_ARGS:-}
    rc=$?
    local counts
    counts=$(python3 - "$junit" <<'EOF'
import sys, xml.etree.ElementTree as ET
# run -> passed; fail -> failed; disabled or skipped through
# SKIP_RETURN_CODE/SKIP_REGULAR_EXPRESSION -> skipped; any other notrun
# (e.g. "Unable to find executable" after a failed build) -> failed.
p = f = s = 0
try:
    for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
        st = tc.get("status", "run")
        sk = tc.find("skipped")
        why = sk.get("message", "") if sk is not None else ""
        if st == "run":
            p += 1
        elif st == "disabled" or (st == "notrun" and why.startswith("SKIP_")):
            s += 1
        else:
            f += 1
except (OSError, ET.ParseError):
    pass
print(p, f, s)
EOF
)

    read -r p f s <<<"$counts"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1 # ctest failed without a failed test case (e.g. bad config)
    fi
    [ "$f" -gt 0 ] && failures+=("$stage: $f test(s)")
    ran_tests=1
    count "$stage" "$p" "$f" "$s"
}

stage_build() {
    say "build: $B/ (RelWithDebInfo, -DTERN_WERROR=ON)"
    configure_build "$B" RelWithDebInfo -DTERN_WERROR=ON
}

stage_normal() {
    stage_build || build_fail normal
    configured "$B" || return
    say "ctest: $B/"
    run_ctest normal "$B"
}

stage_asan() {
    say "build: $B-asan/ (Debug, -DTERN_SANITIZE=address,undefined)"
    configure_build "$B-asan" Debug -DTERN_SANITIZE=address,undefined ||
        build_fail asan
    configured "$B-asan" || return
    say "ctest: $B-asan/"
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run_ctest asan "$B-asan"
}

stage_fuzz() {
    say "build: $B-fuzz/ (clang, -DTERN_FUZZ=ON)"
    # FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION (the libFuzzer/OSS-Fuzz
    # convention): decoders may skip checksum checks so mutated inputs get
    # past them; only fuzz targets are built in this tree.
    local flags="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION"
    TARGET=tern_fuzz_all configure_build "$B-fuzz" RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang -DTERN_FUZZ=ON -DCMAKE_C_FLAGS="$flags" ||
        build_fail fuzz
    configured "$B-fuzz" || return
    local targets=()
    [ -f "$B-fuzz/fuzz-targets.txt" ] && mapfile -t targets <"$B-fuzz/fuzz-targets.txt"
    ran_tests=1
    if [ ${#targets[@]} -eq 0 ]; then
        echo "fuzz: no fuzz targets (tests/fuzz/fuzz_<module>_<what>.c)"
        count fuzz 0 0 0
        return
    fi
    local t p=0 f=0 rc runs=()
    [ -n "${TERN_FUZZ_RUNS:-}" ] && runs=(-runs="$TERN_FUZZ_RUNS")
    for t in "${targets[@]}"; do
        local corpus=$B-fuzz/corpus/$t seeds=tests/fuzz/corpus/$t
        local art=$B-fuzz/artifacts/$t/ log=$B-fuzz/$t.log
        mkdir -p "$corpus" "$art"
        [ -d "$seeds" ] || seeds=
        say "fuzz: $t (${FUZZ_SECONDS}s)"
        if [ ! -x "$B-fuzz/tests/fuzz/$t" ]; then
            f=$((f + 1))
            failures+=("fuzz: $t (not built)")
            echo "fuzz: $t was not built"
            continue
        fi
        # Bounded: -max_total_time, per-input -timeout, memory cap; the
        # outer timeout is a backstop against a hung process.
        # shellcheck disable=SC2086
        timeout -k 10 $((FUZZ_SECONDS + 60)) "$B-fuzz/tests/fuzz/$t" \
            -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$art" "${runs[@]}" \
            "$corpus" $seeds >"$log" 2>&1
        rc=$?
        if [ "$rc" -eq 0 ]; then
            p=$((p + 1))
            grep -E '^(Done|stat::number_of_executed_units)' "$log" | tr '\n' ' '
            echo
        else
            f=$((f + 1))
            failures+=("fuzz: $t (exit $rc)")
            echo "fuzz: $t FAILED (exit $rc), artifacts in $art; log tail:"
            tail -n 40 "$log"
        fi
    done
    count fuzz "$p" "$f" 0
}

# Formatting: every C file as .clang-format wants it (one test).
stage_format() {
    say "format: clang-format check (make format rewrites)"
    local files bad=()
    mapfile -t files < <("$ROOT/scripts/c-files.sh")
    ran_tests=1
    for f in "${files[@]}"; do
        clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
    done
    if [ ${#bad[@]} -eq 0 ]; then
        echo "format: ${#files[@]} files formatted"
        count format 1 0 0
    else
        echo "format: ${#bad[@]} of ${#files[@]} files need \`make format\`:"
        printf '  %s\n' "${bad[@]}"
        failures+=("format: ${#bad[@]} file(s)")
        count format 0 1 0
    fi
}

# Jepsen-style smoke (jepsen/smoke.sh: 6 runs of kill, pause, retention,
# partitions with network namespaces; needs root). One test per run.
stage_jepsen() {
    say "jepsen smoke (jepsen/smoke.sh, ${SMOKE_TIME:-60}s per run)"
    # Always (re)build: a stale ternd once made the harness chase bugs that
    # were already fixed (jepsen/FINDINGS.md, F1/F3).
    stage_build || { build_fail jepsen; return; }
    local log=$B/jepsen-smoke.log rc p f t
    # The driver and the fault tools (power-loss shim, NFQUEUE delayer).
    make -s -C "$ROOT/jepsen/driver" BUILD="$ROOT/$B" || { build_fail jepsen; return; }
    for t in powerloss delayer; do
        [ -f "$ROOT/jepsen/$t/Makefile" ] || continue
        make -s -C "$ROOT/jepsen/$t" OUT="$ROOT/$B/jepsen" || { build_fail jepsen; return; }
    done
    TERN_BUILD=$ROOT/$B SMOKE_TIME=${SMOKE_TIME:-60} \
        timeout -k 10 1500 "$ROOT/jepsen/smoke.sh" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    read -r p f < <(sed -nE 's/^runs ([0-9]+), not valid ([0-9]+),.*/\1 \2/p' "$log" | tail -n 1)
    p=$(( ${p:-0} - ${f:-0} ))
    f=${f:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
    fi
    [ "$f" -gt 0 ] && failures+=("jepsen: $f run(s)")
    ran_tests=1
    count jepsen "$p" "$f" 0
}

# RDMA on soft-RoCE in a QEMU guest (tests/rxe/run.sh); 77 = cannot build
# the guest here: skipped. The guest image is built first on its own budget
# (package installs may wait up to 10 min for apt's lock; a no-op once
# cached; run.sh reports its failures), then the tests get theirs: the
# guest's own timeout (-t) ends before the outer one, so a hang still
# prints the console tail and the counts line.
stage_rxe() {
    say "rxe: tests/rxe/run.sh (soft-RoCE guest)"
    local log=$B/rxe.log rc p f
    mkdir -p "$B"
    timeout -k 10 900 "$ROOT/tests/rxe/guest-build.sh" >/dev/null
    timeout -k 10 1200 "$ROOT/tests/rxe/run.sh" -t 1080 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    ran_tests=1
    if [ "$rc" -eq 77 ]; then
        count rxe 0 0 1
        return
    fi
    read -r p f < <(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\1 \2/p' "$log" | tail -n 1)
    p=${p:-0}
    f=${f:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
    fi
    [ "$f" -gt 0 ] && failures+=("rxe: $f test(s)")
    count rxe "$p" "$f" 0
}

[ $# -gt 0 ] || set -- normal
for s in "$@"; do
    case "$s" in
    build)
        stage_build || exit 1
        ;;
    format | normal | asan | fuzz | jepsen | rxe)
        "stage_$s"
        ;;
    *)
        echo "usage: $0 build|format|normal|asan|fuzz|jepsen|rxe..." >&2
        exit 2
        ;;
    esac
done

[ "$ran_tests" = 1 ] || exit 0
echo
if [ ${#failures[@]} -gt 0 ]; then
    echo "failures:"
    printf '  %s\n' "${failures[@]}"
fi
line="$total_pass passed, $total_fail failed"
[ "$total_skip" -gt 0 ] && line="$line, $total_skip skipped"
echo "$line"
[ "$total_fail" -eq 0 ]
